// Checkpoints: a TinyTransformer to safetensors bytes and back (pure; the CLI writes the bytes atomically,
// the page can fetch them). One decision to know: config, task and tokenizer (by type, 'qkv.tokenizer';
// older files' 'qkv.vocab' word list still loads) travel in __metadata__, so a checkpoint describes itself
// — and the loader trusts none of it: every field is checked for type and range and every weight for
// finiteness before a model is built, because a wrong field or a NaN would run as a different model.

import { checkVocabulary, formatFound, nonFiniteAt } from '../io/checks.js';
import { decodeSafetensors, encodeSafetensors, SafetensorsError } from '../io/safetensors.js';
import { transformerTensorCount } from '../model/params.js';
import {
  CONFIG_FIELDS,
  DEFAULT_ROPE_BASE,
  MAX_STORED_LEN,
  POSITION_KINDS,
  TinyTransformer,
  type TransformerConfig,
  transformerParameterShapes,
} from '../model/transformer.js';
import type { DType, Tensor } from '../tensor.js';
import { tokenizerFromMetadata, tokenizerMetadata } from '../text/registry.js';
import { LEGACY_VOCAB_KEY, TOKENIZER_KEY, type Tokenizer } from '../text/tokenizer.js';
import { WordTokenizer } from '../text/word.js';

/** What a checkpoint says about itself besides its weights. */
export interface CheckpointInfo {
  task?: string;
  step?: number;
  /** How the model's ids map to text, stored by type ('qkv.tokenizer'). Its vocabSize must be the model's. */
  tokenizer?: Tokenizer;
  /**
   * @deprecated Give `tokenizer`. A word list, saved as `new WordTokenizer(vocab)`; loading returns
   * `tokenizer`, never `vocab`.
   */
  vocab?: string[];
  /** Any other metadata strings. */
  extra?: Record<string, string>;
  /**
   * Storage of the weights: 'float32' (default, exact) or 'float16' (half the bytes; each weight rounded
   * to the nearest half, read back as float32). Loading reads either.
   */
  dtype?: 'float32' | 'float16';
}

/** The metadata keys saveCheckpoint writes itself (info.extra may not set them). */
const RESERVED = ['qkv.config', 'qkv.task', 'qkv.step', TOKENIZER_KEY, LEGACY_VOCAB_KEY];

/** The model's weights (PyTorch-style names, float32) and config as safetensors bytes. */
export function saveCheckpoint(model: TinyTransformer, info: CheckpointInfo = {}): Uint8Array {
  const fail = (message: string): never => {
    throw new RangeError(`saveCheckpoint: ${message}`);
  };
  // The same rules loadCheckpoint applies, so what is saved can be loaded.
  if (info.task !== undefined && typeof info.task !== 'string')
    fail(`info.task must be a string, found ${formatFound(info.task)}`);
  if (info.step !== undefined && !(Number.isSafeInteger(info.step) && info.step >= 0))
    fail(`info.step must be a non-negative integer, found ${formatFound(info.step)}`);
  if (info.vocab !== undefined) {
    if (info.tokenizer !== undefined) fail('give info.tokenizer or info.vocab (deprecated), not both');
    checkVocabulary(info.vocab, 'info.vocab', fail);
    if (info.vocab.length !== model.config.vocabSize)
      fail(`info.vocab has ${info.vocab.length} words but the model has vocabSize ${model.config.vocabSize}`);
  }
  const tokenizer = info.vocab !== undefined ? new WordTokenizer(info.vocab) : info.tokenizer;
  const stored = tokenizer === undefined ? {} : tokenizerMetadata(tokenizer, (m) => fail(`info.${m}`));
  if (tokenizer !== undefined && tokenizer.vocabSize !== model.config.vocabSize)
    fail(
      `info.tokenizer has ${tokenizer.vocabSize} tokens but the model has vocabSize ${model.config.vocabSize}`,
    );
  for (const key of Object.keys(info.extra ?? {})) {
    if (RESERVED.includes(key)) fail(`info.extra may not set '${key}' (saveCheckpoint writes it)`);
  }
  const metadata: Record<string, string> = {
    format: 'pt',
    'qkv.config': JSON.stringify(model.config),
    ...info.extra,
    ...stored,
  };
  if (info.task !== undefined) metadata['qkv.task'] = info.task;
  if (info.step !== undefined) metadata['qkv.step'] = String(info.step);
  const { dtype = 'float32' } = info;
  if (dtype !== 'float32' && dtype !== 'float16')
    fail(`info.dtype must be 'float32' or 'float16', found ${formatFound(dtype)}`);
  const weights: Record<string, Tensor<DType>> = model.stateDict();
  if (dtype === 'float16') {
    for (const name of Object.keys(weights)) {
      // A finite weight beyond float16's range would round to ±Infinity, which loadCheckpoint refuses:
      // refuse it here, where the file is written, naming the weight.
      const data = weights[name].data as Float32Array;
      for (let i = 0; i < data.length; i++) {
        if (Math.abs(data[i]) >= 65520 && Number.isFinite(data[i]))
          fail(
            `${name}[${i}] = ${data[i]} rounds to ±Infinity in float16 (largest 65504); save as 'float32'`,
          );
      }
      weights[name] = weights[name].to('float16');
    }
  }
  return encodeSafetensors(weights, metadata);
}

/** The integer fields of a config, with the largest value a file may ask for. */
const CONFIG_INTEGERS: [keyof TransformerConfig, number][] = [
  ['vocabSize', Number.MAX_SAFE_INTEGER],
  ['dModel', Number.MAX_SAFE_INTEGER],
  ['numHeads', Number.MAX_SAFE_INTEGER],
  ['numLayers', Number.MAX_SAFE_INTEGER],
  ['dFF', Number.MAX_SAFE_INTEGER],
  ['maxLen', MAX_STORED_LEN], // the positional table is allocated from it before any weight is read
];

/**
 * Checks every field of a stored config. Unknown fields are refused too: a field this version does not
 * know may change what the model computes (a file from a newer qkv), and ignoring it would run another model.
 */
function readConfig(json: string, fail: (message: string) => never): TransformerConfig {
  let c: unknown;
  try {
    c = JSON.parse(json);
  } catch (err) {
    fail(`qkv.config is not valid JSON (${(err as Error).message})`);
  }
  if (c === null || typeof c !== 'object' || Array.isArray(c))
    fail(`qkv.config must be a JSON object, found ${formatFound(c)}`);
  const o = c as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (!(CONFIG_FIELDS as readonly string[]).includes(key))
      fail(`qkv.config has an unknown field '${key}' (known: ${CONFIG_FIELDS.join(', ')})`);
  }
  for (const [key, max] of CONFIG_INTEGERS) {
    const v = o[key];
    const range = max === Number.MAX_SAFE_INTEGER ? 'a positive integer' : `an integer from 1 to ${max}`;
    if (!(Number.isSafeInteger(v) && (v as number) >= 1))
      fail(`qkv.config field '${key}' must be ${range}, found ${formatFound(v)}`);
    if ((v as number) > max) fail(`qkv.config asks for ${key} ${v}, but field '${key}' must be ${range}`);
  }
  if ((o.dModel as number) % (o.numHeads as number) !== 0)
    fail(`qkv.config field 'dModel' must be a multiple of numHeads (${o.numHeads}), found ${o.dModel}`);
  if (typeof o.causal !== 'boolean')
    fail(`qkv.config field 'causal' must be a boolean, found ${formatFound(o.causal)}`);
  if (o.scaleScores !== undefined && typeof o.scaleScores !== 'boolean')
    fail(`qkv.config field 'scaleScores' must be a boolean, found ${formatFound(o.scaleScores)}`);
  if (o.dropout !== undefined && !(typeof o.dropout === 'number' && o.dropout >= 0 && o.dropout < 1))
    fail(`qkv.config field 'dropout' must be a number in [0, 1), found ${formatFound(o.dropout)}`);
  // Absent means blocks with an MLP (every file written before the option existed); false, attention only.
  if (o.mlp !== undefined && typeof o.mlp !== 'boolean')
    fail(`qkv.config field 'mlp' must be a boolean, found ${formatFound(o.mlp)}`);
  // Absent means sinusoidal positions (every file written before the option existed). A kind this version
  // does not know is refused: it would run the model with other positions than it was trained with.
  if (o.positions !== undefined && !(POSITION_KINDS as readonly unknown[]).includes(o.positions))
    fail(
      `qkv.config field 'positions' must be ${POSITION_KINDS.map((k) => `'${k}'`).join(' or ')}, found ${formatFound(o.positions)}`,
    );
  if (
    o.ropeBase !== undefined &&
    !(typeof o.ropeBase === 'number' && Number.isFinite(o.ropeBase) && o.ropeBase > 0)
  )
    fail(`qkv.config field 'ropeBase' must be a positive finite number, found ${formatFound(o.ropeBase)}`);
  if (o.ropeBase !== undefined && o.ropeBase !== DEFAULT_ROPE_BASE && o.positions !== 'rope')
    fail(
      `qkv.config field 'ropeBase' (${o.ropeBase}) needs positions: 'rope', found positions ${formatFound(o.positions ?? 'sinusoidal')}`,
    );
  if (o.positions === 'rope' && ((o.dModel as number) / (o.numHeads as number)) % 2 !== 0)
    fail(
      `qkv.config field 'positions' is 'rope', which needs an even head width, but dModel / numHeads = ${(o.dModel as number) / (o.numHeads as number)}`,
    );
  return o as unknown as TransformerConfig;
}

/** A checkpoint read and checked, before any model is built: what both loaders start from. */
export interface CheckedCheckpoint {
  config: TransformerConfig;
  /** Every tensor the config asks for, by name, each of its shape and finite (float32 data). */
  tensors: Record<string, Tensor>;
  info: CheckpointInfo;
}

/**
 * Reads a checkpoint and checks everything in it — the config's every field, the task, the step, the
 * tokenizer against the vocabulary size, every tensor's name, shape and finiteness — calling `fail`
 * with a message naming the field or tensor at the first problem. The one reader of checkpoints:
 * loadCheckpoint builds a TinyTransformer from it, the playground's stackFromSafetensors a stack.
 */
export function readCheckpoint(bytes: Uint8Array, fail: (message: string) => never): CheckedCheckpoint {
  const { tensors, metadata } = decodeSafetensors(bytes);
  const configJson = metadata['qkv.config'];
  if (configJson === undefined) fail('no qkv.config in the metadata (not a qkv checkpoint?)');
  // Check the config against the tensors present before building anything: a hostile config (a billion
  // layers, a huge vocabulary) must fail here, not in an allocation.
  const config = readConfig(configJson, fail);
  const info: CheckpointInfo = {};
  if (metadata['qkv.task'] !== undefined) info.task = metadata['qkv.task'];
  const step = metadata['qkv.step'];
  if (step !== undefined) {
    // Digits only: Number() would also take '', ' 1 ', '0x10' and '1e3'.
    if (!/^(0|[1-9][0-9]*)$/.test(step) || !Number.isSafeInteger(Number(step)))
      fail(`qkv.step must be a non-negative integer, found ${formatFound(step)}`);
    info.step = Number(step);
  }
  const tokenizer = tokenizerFromMetadata(metadata, fail);
  if (tokenizer !== undefined) {
    const [key, unit] =
      metadata[TOKENIZER_KEY] !== undefined ? [TOKENIZER_KEY, 'tokens'] : [LEGACY_VOCAB_KEY, 'words'];
    if (tokenizer.vocabSize !== config.vocabSize)
      fail(`${key} has ${tokenizer.vocabSize} ${unit} but qkv.config has vocabSize ${config.vocabSize}`);
    info.tokenizer = tokenizer;
  }

  const names = Object.keys(tensors);
  // Counted from the parameter table, not listed: a hostile numLayers must not build a huge list.
  const expected = transformerTensorCount(config);
  if (names.length !== expected) {
    fail(
      `the config has ${config.numLayers} layers (${expected} tensors) but the file holds ${names.length} tensors`,
    );
  }
  for (const [name, shape] of transformerParameterShapes(config)) {
    const t = tensors[name];
    if (!t || t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
      fail(`${name} should be [${shape}] for the stored config, ${t ? `got [${t.shape}]` : 'missing'}`);
    }
    const bad = nonFiniteAt(t.data);
    if (bad) fail(`tensor '${name}' ${bad} (weights must be finite)`);
  }
  return { config, tensors: tensors as Record<string, Tensor>, info };
}

/**
 * Rebuilds the model a checkpoint describes and loads its weights. `source` (e.g. the file's path) goes
 * into error messages. Throws a SafetensorsError naming the field or tensor on a malformed file, on
 * metadata of the wrong type or range, or on a weight that is NaN or ±Infinity.
 */
export function loadCheckpoint(
  bytes: Uint8Array,
  source?: string,
): { model: TinyTransformer; info: CheckpointInfo } {
  if (source !== undefined && typeof source !== 'string')
    throw new TypeError(
      `loadCheckpoint: source must be a string (the file's name), found ${formatFound(source)}`,
    );
  const prefix = source === undefined ? 'loadCheckpoint: ' : `loadCheckpoint: ${source}: `;
  const fail = (message: string): never => {
    throw new SafetensorsError(prefix + message);
  };
  const { config, tensors, info } = readCheckpoint(bytes, fail);
  const model = new TinyTransformer(config);
  model.loadStateDict(tensors);
  return { model, info };
}
