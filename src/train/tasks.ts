// Built-in training tasks as seeded data generators (no downloads): `copy` and `reverse` for a decoder,
// `pronoun` (pronoun.ts) for an encoder. A task owns a tokenizer (src/text: a WordTokenizer here), its
// default model, its batches, and how live views show it (`display`, data rather than checks of its name).
// One decision to know: targets are −1 wherever no prediction is scored (crossEntropy ignores them), so a
// task decides which positions the loss sees: the second half for copy/reverse, the "it" for pronoun.

import type { TransformerConfig } from '../model/transformer.js';
import type { Generator } from '../random.js';
import type { Tensor } from '../tensor.js';
import type { Tokenizer } from '../text/tokenizer.js';
import { WordTokenizer } from '../text/word.js';

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

/** A position of a sample whose prediction is scored. */
export interface ScoredPosition {
  /** Where the prediction is read. */
  position: number;
  /** The token expected there. */
  target: string;
  /** The position of the sample that holds the target: where attention should look. */
  key: number;
}

/** How live views (the playground's Train tab) show a task: all data, so a view never checks a task's name. */
export interface TaskDisplay {
  /** A fixed input, as tokens of the task's tokenizer, whose attention is drawn as the model learns. */
  sample: readonly string[];
  /** The positions of `sample` whose prediction is scored. */
  scored: readonly ScoredPosition[];
  /** The attention pattern a trained model shows, in words, e.g. "a mirrored diagonal". */
  pattern: string;
  /** The layers a view opens on: 'last' (the answer is read out there) or 'all' (it may form in any). */
  layers: 'last' | 'all';
  /** Its models read sentences of words, so views that take typed sentences can show them. */
  sentences: boolean;
  /**
   * Views also track the best head's induction score (inductionScore) as the model learns, beside the loss
   * (the induction task: its phase change). Default false.
   */
  inductionScore?: boolean;
}

/** A training task. */
export interface Task {
  readonly name: string;
  readonly description: string;
  /** Text ↔ ids for its batches and checkpoints; its vocabSize is the model's. */
  readonly tokenizer: Tokenizer;
  readonly model: TransformerConfig;
  readonly defaults: TaskDefaults;
  /** How live views show it; a task without one trains and saves the same, with no live maps. */
  readonly display?: TaskDisplay;
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
  const tokenizer = new WordTokenizer(['<bos>', '<sep>', ...letters]);
  const { bos: BOS, sep: SEP } = tokenizer.specials as { bos: number; sep: number };
  const symbolIds = tokenizer.encode(letters);
  const L = 2 * n + 1; // <bos> x₁..xₙ <sep> y₁..yₙ₋₁ as input; targets shifted by one
  return {
    name: kind,
    description: `${kind} ${n} symbols out of ${symbols} with a causal decoder`,
    tokenizer,
    display: sequenceDisplay(kind, letters, n),
    model: {
      vocabSize: tokenizer.vocabSize,
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
        for (let t = 0; t < n; t++) x[t] = symbolIds[Math.floor(generator.random() * symbols)];
        const seq = [BOS, ...x, SEP, ...(kind === 'copy' ? x : x.slice().reverse())]; // 2n + 2 tokens
        const o = b * L;
        for (let t = 0; t < L; t++) ids[o + t] = seq[t];
        for (let t = n + 1; t < L; t++) targets[o + t] = seq[t + 1]; // from <sep> on: predict the next y
      }
      return { ids, targets, B, L };
    },
  };
}

/**
 * The live-view sample of copy/reverse: "<bos> x₁ … xₙ <sep> y₁ … yₙ₋₁" with the first n symbols, each
 * scored from <sep> on: the prediction after yₜ₋₁ should be yₜ, which sits at xₜ (copy) or xₙ₊₁₋ₜ (reverse).
 */
function sequenceDisplay(kind: 'copy' | 'reverse', letters: readonly string[], n: number): TaskDisplay {
  const x = Array.from({ length: n }, (_, i) => letters[i % letters.length]);
  const y = kind === 'reverse' ? [...x].reverse() : x;
  const seq = ['<bos>', ...x, '<sep>', ...y];
  const sample = seq.slice(0, 2 * n + 1);
  return {
    sample,
    scored: Array.from({ length: n }, (_, i) => {
      const target = seq[n + 2 + i];
      return { position: n + 1 + i, target, key: sample.indexOf(target) };
    }),
    pattern:
      kind === 'reverse' ? 'a mirrored diagonal' : `a diagonal ${n} columns to the left of the main one`,
    layers: 'all',
    sentences: false,
  };
}
