// A qkv checkpoint (safetensors written by `qkv train`) as an AttentionStack for the playground and
// `qkv viz --model`. One decision to know: it is read by the one checkpoint reader, readCheckpoint
// (train/checkpoint.ts), which loadCheckpoint uses too — the config (`qkv.config`), the tokenizer
// (`qkv.tokenizer`, or an older file's `qkv.vocab`) and every weight checked (type, range, shape,
// finiteness) — so a bad file fails here with its name and the field, not later as a NaN picture, and
// the playground accepts exactly the files the library loads.

import { formatFound } from '../io/checks.js';
import { DEFAULT_ROPE_BASE } from '../model/transformer.js';
import { LEGACY_VOCAB_KEY, TOKENIZER_KEY, type Tokenizer } from '../text/tokenizer.js';
import { readCheckpoint } from '../train/checkpoint.js';
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
  // The one checkpoint reader (train/checkpoint.ts): config, tokenizer, every tensor's shape and
  // finiteness checked as loadCheckpoint checks them, before the stack views the weights.
  const { config, tensors, info } = readCheckpoint(bytes, fail);
  const { tokenizer } = info;
  if (tokenizer === undefined)
    return fail(
      `no '${TOKENIZER_KEY}' (nor the older '${LEGACY_VOCAB_KEY}') in its metadata (not a qkv checkpoint?)`,
    );
  const vocab = Array.from({ length: tokenizer.vocabSize }, (_, id) => tokenizer.idToToken(id));
  const heads = config.numHeads;
  const stack = stackFromStateDict(tensors, { heads, vocab });
  const {
    positions = 'sinusoidal',
    ropeBase = DEFAULT_ROPE_BASE,
    causal,
    scaleScores,
    numLayers: layers,
  } = config;
  const task = info.task ? `task ${info.task}, ` : '';
  const step = info.step !== undefined ? `, ${info.step} ${info.step === 1 ? 'step' : 'steps'}` : '';
  const kind = causal ? 'decoder' : 'encoder';
  const unscaled = scaleScores === false ? ', scores not scaled by 1/√d_k' : '';
  const rotary =
    positions === 'rope' ? `, RoPE${ropeBase === DEFAULT_ROPE_BASE ? '' : ` base ${ropeBase}`}` : '';
  return {
    ...stack,
    ...(positions === 'rope' ? { positions, ropeBase } : {}),
    description: `trained checkpoint ${name} (${task}${kind}, ${layers} layers × ${heads} heads, d_model ${stack.dModel}${rotary}${step}${unscaled}; ${tokenizer.description})`,
    tokenizer,
    vocab,
  };
}
