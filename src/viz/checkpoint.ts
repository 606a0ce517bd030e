// A qkv checkpoint (safetensors written by `qkv train`) as an AttentionStack for the playground and
// `qkv viz --model`. One decision to know: everything needed travels in the file — the model config
// (`qkv.config`: numHeads…) and the vocabulary (`qkv.vocab`) are read from its __metadata__; decoding
// itself is the library's own hardened reader.

import { decodeSafetensors } from '../io/safetensors.js';
import { type AttentionStack, stackFromStateDict } from './stack.js';

/** Builds the stack a checkpoint describes; `name` (e.g. its path) goes into the description. */
export function stackFromSafetensors(bytes: Uint8Array, name = 'checkpoint'): AttentionStack {
  const fn = 'stackFromSafetensors';
  const { tensors, metadata } = decodeSafetensors(bytes);
  const parse = <T>(key: string): T => {
    const raw = metadata[key];
    if (raw === undefined)
      throw new Error(`${fn}: ${name} has no '${key}' in its metadata (not a qkv checkpoint?)`);
    try {
      return JSON.parse(raw) as T;
    } catch {
      throw new Error(`${fn}: '${key}' in ${name}'s metadata is not valid JSON`);
    }
  };
  const config = parse<{ numHeads?: number; numLayers?: number; dModel?: number; causal?: boolean }>(
    'qkv.config',
  );
  const vocab = parse<string[]>('qkv.vocab');
  if (!Number.isSafeInteger(config.numHeads) || (config.numHeads ?? 0) < 1) {
    throw new Error(`${fn}: qkv.config in ${name} has no positive integer numHeads`);
  }
  if (!Array.isArray(vocab) || !vocab.every((w) => typeof w === 'string')) {
    throw new Error(`${fn}: qkv.vocab in ${name} is not a list of strings`);
  }
  const task = metadata['qkv.task'] ? `task ${metadata['qkv.task']}, ` : '';
  const step = metadata['qkv.step'] ? `, ${metadata['qkv.step']} steps` : '';
  const kind = config.causal ? 'decoder' : 'encoder';
  return stackFromStateDict(tensors, {
    heads: config.numHeads!,
    vocab,
    description: `trained checkpoint ${name} (${task}${kind}, ${config.numLayers} layers × ${config.numHeads} heads, d_model ${config.dModel}${step}; ${vocab.length}-word vocabulary)`,
  });
}
