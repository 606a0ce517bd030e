// A qkv checkpoint (safetensors written by `qkv train`) as an AttentionStack for the playground and
// `qkv viz --model`. One decision to know: everything needed travels in the file — the model config
// (`qkv.config`: numHeads…) and the tokenizer (`qkv.tokenizer`, or an older file's `qkv.vocab`) are read
// from its __metadata__, and each field read is checked (type, range, agreement with the tensors), as is
// every weight (finite), so a bad file fails here with its name and the field, not later as a NaN picture.

import { formatFound, nonFiniteAt } from '../io/checks.js';
import { decodeSafetensors } from '../io/safetensors.js';
import { tokenizerFromMetadata } from '../text/registry.js';
import { LEGACY_VOCAB_KEY, TOKENIZER_KEY, type Tokenizer } from '../text/tokenizer.js';
import { type AttentionStack, stackFromStateDict } from './stack.js';

/** A checkpoint's stack with the tokenizer that turns text into the tokens its embedding rows are named by. */
export interface CheckpointStack extends AttentionStack {
  tokenizer: Tokenizer;
  /** Every token, by id (`tokenizer.idToToken`): the names of the embedding rows. */
  vocab: readonly string[];
}

/**
 * Builds the stack a checkpoint describes; `name` (e.g. its path) goes into the description and errors.
 * Its `tokenizer` splits text into the tokens `embed` takes (`tokenizer.tokenize` for labels, `encode`
 * to find the words it does not know).
 */
export function stackFromSafetensors(bytes: Uint8Array, name = 'checkpoint'): CheckpointStack {
  const fn = 'stackFromSafetensors';
  if (typeof name !== 'string')
    throw new TypeError(`${fn}: name must be a string, found ${formatFound(name)}`);
  const fail = (message: string): never => {
    throw new Error(`${fn}: ${name}: ${message}`);
  };
  const { tensors, metadata } = decodeSafetensors(bytes);
  const parse = (key: string): unknown => {
    const raw = metadata[key];
    if (raw === undefined) fail(`no '${key}' in its metadata (not a qkv checkpoint?)`);
    try {
      return JSON.parse(raw);
    } catch (err) {
      return fail(`${key} is not valid JSON (${(err as Error).message})`);
    }
  };

  const config = parse('qkv.config');
  if (config === null || typeof config !== 'object' || Array.isArray(config))
    fail(`qkv.config must be a JSON object, found ${formatFound(config)}`);
  const c = config as Record<string, unknown>;
  // Only the fields read here: numHeads splits the projections; numLayers and dModel, when present, must
  // agree with the tensors (the description reports them); causal and scaleScores label the model.
  const positive = (key: string): number | undefined => {
    const v = c[key];
    if (v === undefined && key !== 'numHeads') return undefined;
    if (!(Number.isSafeInteger(v) && (v as number) >= 1))
      fail(`qkv.config field '${key}' must be a positive integer, found ${formatFound(v)}`);
    return v as number;
  };
  const heads = positive('numHeads')!;
  const numLayers = positive('numLayers');
  const dModel = positive('dModel');
  for (const key of ['causal', 'scaleScores']) {
    if (c[key] !== undefined && typeof c[key] !== 'boolean')
      fail(`qkv.config field '${key}' must be a boolean, found ${formatFound(c[key])}`);
  }
  // Positions decide what the blocks compute: a kind this version does not know is refused, not drawn
  // as sinusoidal (absent: sinusoidal, every file written before the option existed).
  const positions = c.positions ?? 'sinusoidal';
  if (positions !== 'sinusoidal' && positions !== 'rope')
    fail(`qkv.config field 'positions' must be 'sinusoidal' or 'rope', found ${formatFound(c.positions)}`);
  const ropeBase = c.ropeBase ?? 10000;
  if (!(typeof ropeBase === 'number' && Number.isFinite(ropeBase) && ropeBase > 0))
    fail(`qkv.config field 'ropeBase' must be a positive finite number, found ${formatFound(c.ropeBase)}`);
  const tokenizer = tokenizerFromMetadata(metadata, fail);
  if (tokenizer === undefined)
    return fail(
      `no '${TOKENIZER_KEY}' (nor the older '${LEGACY_VOCAB_KEY}') in its metadata (not a qkv checkpoint?)`,
    );
  const rows = tensors['embedding.weight']?.shape;
  if (rows !== undefined && rows[0] !== tokenizer.vocabSize) {
    const [key, unit] =
      metadata[TOKENIZER_KEY] !== undefined ? [TOKENIZER_KEY, 'tokens'] : [LEGACY_VOCAB_KEY, 'words'];
    fail(`${key} has ${tokenizer.vocabSize} ${unit} but embedding.weight is [${rows}]`);
  }
  const vocab = Array.from({ length: tokenizer.vocabSize }, (_, id) => tokenizer.idToToken(id));
  const stepText = metadata['qkv.step'];
  if (stepText !== undefined && !/^(0|[1-9][0-9]*)$/.test(stepText))
    fail(`qkv.step must be a non-negative integer, found ${formatFound(stepText)}`);
  // Every tensor, the ones the stack does not draw (the final norm) too: a NaN anywhere means a broken run.
  for (const [tensor, t] of Object.entries(tensors)) {
    const bad = nonFiniteAt(t.data);
    if (bad) fail(`tensor '${tensor}' ${bad} (weights must be finite)`);
  }

  const stack = stackFromStateDict(tensors, { heads, vocab });
  if (positions === 'rope' && stack.dK % 2 !== 0)
    fail(`qkv.config field 'positions' is 'rope', which needs an even d_k, but d_k is ${stack.dK}`);
  const layers = stack.layers.length;
  if (numLayers !== undefined && numLayers !== layers)
    fail(
      `qkv.config field 'numLayers' says ${numLayers} but the file holds ${layers} layer${layers === 1 ? '' : 's'}`,
    );
  if (dModel !== undefined && dModel !== stack.dModel) {
    const shape = tensors['embedding.weight'].shape;
    fail(`qkv.config field 'dModel' says ${dModel} but embedding.weight is [${shape}]`);
  }
  const task = metadata['qkv.task'] ? `task ${metadata['qkv.task']}, ` : '';
  const step = stepText ? `, ${stepText} ${stepText === '1' ? 'step' : 'steps'}` : '';
  const kind = c.causal ? 'decoder' : 'encoder';
  const unscaled = c.scaleScores === false ? ', scores not scaled by 1/√d_k' : '';
  const rotary = positions === 'rope' ? `, RoPE${ropeBase === 10000 ? '' : ` base ${ropeBase}`}` : '';
  return {
    ...stack,
    ...(positions === 'rope' ? { positions, ropeBase: ropeBase as number } : {}),
    description: `trained checkpoint ${name} (${task}${kind}, ${layers} layers × ${heads} heads, d_model ${stack.dModel}${rotary}${step}${unscaled}; ${tokenizer.description})`,
    tokenizer,
    vocab,
  };
}
