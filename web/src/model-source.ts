// Where the playground's weights come from: the trained checkpoint when it exists, seeded weights
// otherwise (or when asked), or the model the Train tab handed over ("Use this model"). One decision to know: the checkpoint is bundled by Vite from
// models/pronoun.safetensors (written by `qkv train --task pronoun`) and read with qkv's own safetensors
// reader; if the file is missing or unreadable the page says so and falls back to seeded weights. A
// checkpoint brings its tokenizer (stored in the file by type), which then splits the typed text.

import {
  type AttentionStack,
  type CheckpointStack,
  seededStack,
  stackFromSafetensors,
  type Tokenizer,
} from 'qkv';
import type { ModelConfig, ModelSource } from './protocol.js';

const CHECKPOINT_URL = new URL('../../models/pronoun.safetensors', import.meta.url).href;
const CHECKPOINT_NAME = 'models/pronoun.safetensors';

let checkpoint: Promise<CheckpointStack | string> | undefined;
let seeded: { key: string; stack: AttentionStack } | undefined;
let trained: CheckpointStack | undefined;

/** Makes safetensors bytes from the Train tab the 'trained' source; returns its description. */
export function useTrainedCheckpoint(bytes: Uint8Array): string {
  trained = stackFromSafetensors(bytes, 'from the Train tab');
  return trained.description;
}

async function fetchCheckpoint(): Promise<CheckpointStack | string> {
  try {
    const res = await fetch(CHECKPOINT_URL);
    if (!res.ok)
      return `no trained checkpoint at ${CHECKPOINT_NAME} (HTTP ${res.status}); showing seeded weights`;
    return stackFromSafetensors(new Uint8Array(await res.arrayBuffer()), CHECKPOINT_NAME);
  } catch (err) {
    return `could not read ${CHECKPOINT_NAME} (${(err as Error).message}); showing seeded weights`;
  }
}

/** What loadStack gives: the weights, the checkpoint's tokenizer (none for seeded weights: any word), … */
export interface LoadedStack {
  stack: AttentionStack;
  tokenizer?: Tokenizer;
  source: ModelSource;
  /** Why the model differs from what was asked for, or ''. */
  notice: string;
}

/** The stack for `config`, its tokenizer, its source, and a notice when it is not what was asked for. */
export async function loadStack(config: ModelConfig): Promise<LoadedStack> {
  if (config.source === 'trained') {
    if (trained) return { stack: trained, tokenizer: trained.tokenizer, source: 'trained', notice: '' };
    const fallback = await loadStack({ ...config, source: 'checkpoint' });
    const why = 'nothing has been trained in this page yet: see the Train tab';
    return { ...fallback, notice: fallback.notice ? `${why}; ${fallback.notice}` : why };
  }
  if (config.source === 'checkpoint') {
    checkpoint ??= fetchCheckpoint();
    const result = await checkpoint;
    if (typeof result !== 'string')
      return { stack: result, tokenizer: result.tokenizer, source: 'checkpoint', notice: '' };
    return { stack: seededFor(config), source: 'seeded', notice: result };
  }
  return { stack: seededFor(config), source: 'seeded', notice: '' };
}

function seededFor(config: ModelConfig): AttentionStack {
  const { dModel, dK, heads, layers, seed } = config;
  const key = JSON.stringify([dModel, dK, heads, layers, seed]);
  if (seeded?.key !== key) seeded = { key, stack: seededStack({ dModel, dK, heads, layers, seed }) };
  return seeded.stack;
}
