// Built-in training tasks as seeded data generators (no downloads): `copy` and `reverse` for a decoder,
// `pronoun` (pronoun.ts) for an encoder. A task owns its vocabulary, its default model and its batches.
// One decision to know: targets are −1 wherever no prediction is scored (crossEntropy ignores them), so a
// task decides which positions the loss sees: the second half for copy/reverse, the "it" for pronoun.

import type { TransformerConfig } from '../model/transformer.js';
import type { Generator } from '../random.js';
import type { Tensor } from '../tensor.js';

/** One batch: ids and targets [B, L] row-major; `mask` [B, 1, 1, L] when sequences are padded. */
export interface Batch {
  ids: Int32Array;
  targets: Int32Array;
  B: number;
  L: number;
  mask?: Tensor;
}

/** Training defaults of a task (each can be overridden). */
export interface TaskDefaults {
  steps: number;
  batchSize: number;
  lr: number;
  warmup: number;
}

/** A built-in task. */
export interface Task {
  readonly name: string;
  readonly description: string;
  readonly vocab: readonly string[];
  readonly model: TransformerConfig;
  readonly defaults: TaskDefaults;
  /** A batch drawn from `generator`; 'test' draws from held-out data where the task has any. */
  batch(generator: Generator, batchSize: number, split?: 'train' | 'test'): Batch;
}

/** Options of the copy / reverse tasks. */
export interface SequenceTaskOptions {
  /** Symbols per sequence (n). Default 8. */
  length?: number;
  /** Distinct symbols. Default 10. */
  symbols?: number;
  /** Model overrides (e.g. dModel 64 with one head for the §4.2 scaling experiment). */
  model?: Partial<TransformerConfig>;
}

/**
 * `copy` / `reverse`: a decoder reads "<bos> x₁ … xₙ <sep>" and must continue with x₁ … xₙ (or xₙ … x₁).
 * Inputs are the sequence without its last token, targets the sequence shifted by one, scored only after
 * <sep>, so the loss measures exactly the copying. Its attention shows a shifted (or mirrored) diagonal.
 */
export function sequenceTask(kind: 'copy' | 'reverse', options: SequenceTaskOptions = {}): Task {
  const { length: n = 8, symbols = 10 } = options;
  const letters = Array.from({ length: symbols }, (_, i) =>
    symbols <= 26 ? String.fromCharCode(97 + i) : `s${i}`,
  );
  const vocab = ['<bos>', '<sep>', ...letters];
  const BOS = 0;
  const SEP = 1;
  const L = 2 * n + 1; // <bos> x₁..xₙ <sep> y₁..yₙ₋₁ as input; targets shifted by one
  return {
    name: kind,
    description: `${kind} ${n} symbols out of ${symbols} with a causal decoder`,
    vocab,
    model: {
      vocabSize: vocab.length,
      dModel: 32,
      numHeads: 2,
      numLayers: 2,
      dFF: 64,
      maxLen: L,
      causal: true,
      ...options.model,
    },
    defaults: { steps: 600, batchSize: 32, lr: 3e-3, warmup: 30 },
    batch(generator, B) {
      const ids = new Int32Array(B * L);
      const targets = new Int32Array(B * L).fill(-1);
      const x = new Int32Array(n);
      for (let b = 0; b < B; b++) {
        for (let t = 0; t < n; t++) x[t] = 2 + Math.floor(generator.random() * symbols);
        const seq = [BOS, ...x, SEP, ...(kind === 'copy' ? x : x.slice().reverse())]; // 2n + 2 tokens
        const o = b * L;
        for (let t = 0; t < L; t++) ids[o + t] = seq[t];
        for (let t = n + 1; t < L; t++) targets[o + t] = seq[t + 1]; // from <sep> on: predict the next y
      }
      return { ids, targets, B, L };
    },
  };
}
