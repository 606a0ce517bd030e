// Head scores: what each attention head of a trained decoder does, as the interpretability literature
// names it, measured from the attention weights A[i, j] (query i, key j; a row sums to 1) of
// the model's forward with needWeights, run under noGrad. The probe is `count` sequences s of 2n tokens,
// s = x ‖ x, x = n tokens drawn uniformly (seeded, with replacement) from the vocabulary minus `exclude`
// (the tokenizer's specials). With s[0‥2n), per head, averaged over the sequences:
//   previous-token  mean of A[i, i−1] over i = 1 … n−1 (the first copy: plain random tokens, which a
//                   causal model reads without seeing the second copy)
//   first-token     mean of A[i, 0] over i = 1 … n−1 (the attention sink; i = 0 is left out: its row is
//                   all on itself)
//   duplicate-token mean, over the queries i whose token occurred before (s[j] = s[i], j < i), of the
//                   total weight on those earlier occurrences
//   induction       mean of A[i, i−n+1] over i = n … 2n−1: from each token of the second copy to the token
//                   right after its occurrence in the first copy (Olsson et al., 2022)
// With `text` (token ids), previous-token, first-token and duplicate-token are measured on `count` windows
// of min(2n, text length) tokens of it instead (i over the whole window); induction stays on x ‖ x.
// One decision to know: a score is a mean over queries of weights, not a count of arg-maxes, so 1.0 means
// all of the weight, every time, and a head that splits its weight scores the share it gives.

import { noGrad } from '../autograd/var.js';
import { Generator } from '../random.js';
import { checkFinite, checkInteger, checkOptionNames, formatValue } from '../shape.js';
import type { Tensor } from '../tensor.js';

/** What headScores needs of a model: a TinyTransformer, or anything with its shape and forward. */
export interface AttentionModel {
  readonly config: {
    readonly vocabSize: number;
    readonly numLayers: number;
    readonly numHeads: number;
    readonly maxLen: number;
    readonly causal: boolean;
  };
  /** Each layer's attention weights [B, H, L, L] (TinyTransformer.forward with needWeights). */
  forward(ids: Int32Array, B: number, L: number, options: { needWeights: true }): { weights: Tensor[] };
}

/** Options of headScores. */
export interface HeadScoreOptions {
  /** Seed of the random tokens (and of the text windows' offsets). Default 0. */
  seed?: number;
  /** n: random tokens per copy; 2n must fit maxLen. Default min(32, ⌊maxLen / 2⌋). */
  length?: number;
  /** Sequences (and text windows) averaged over. Default 8. */
  count?: number;
  /** Token ids never drawn (a tokenizer's specials: Object.values(tokenizer.specials)). Default none. */
  exclude?: readonly number[];
  /** Token ids of a text: previous-token, first-token and duplicate-token are measured on windows of it. */
  text?: Int32Array;
  /** Sequences per forward (memory: batchSize·H·(2n)² floats per layer). Default 16. */
  batchSize?: number;
}

/** One head's scores, each a mean attention weight in [0, 1]. */
export interface HeadScore {
  layer: number;
  head: number;
  previousToken: number;
  /** NaN when no query's token occurred before it (a text without repeats). */
  duplicateToken: number;
  induction: number;
  firstToken: number;
}

/** The names of the scores, in the table's column order. */
export const SCORE_NAMES = ['previousToken', 'duplicateToken', 'induction', 'firstToken'] as const;
/** One of {@link SCORE_NAMES}: a key of {@link HeadScore}. */
export type ScoreName = (typeof SCORE_NAMES)[number];

/** What headScores returns: a row per head, layer-major (layer 0 head 0, layer 0 head 1, …). */
export interface HeadScores {
  heads: HeadScore[];
  numLayers: number;
  numHeads: number;
  /** n: tokens per copy of the random sequences. */
  length: number;
  count: number;
  seed: number;
  /** Where previous-token, first-token and duplicate-token were measured. */
  source: 'random' | 'text';
}

const FN = 'headScores';
const OPTIONS = ['seed', 'length', 'count', 'exclude', 'text', 'batchSize'];

/** Per-head sums and counts of one score. */
class Tally {
  readonly sum: Float64Array;
  readonly n: Float64Array;
  constructor(size: number) {
    this.sum = new Float64Array(size);
    this.n = new Float64Array(size);
  }
  mean(k: number): number {
    return this.n[k] === 0 ? Number.NaN : this.sum[k] / this.n[k];
  }
}

/**
 * Scores every head of a causal decoder for the previous-token, duplicate-token, induction and
 * first-token patterns (the definitions are in this file's header). Every forward runs under noGrad.
 *
 * @example
 * const { heads } = headScores(model, { seed: 0, length: 16, exclude: Object.values(tokenizer.specials) });
 * const best = bestHead(heads, 'induction'); // { layer: 1, head: 0, induction: 0.93, … }
 */
export function headScores(model: AttentionModel, options: HeadScoreOptions = {}): HeadScores {
  if (model === null || typeof model !== 'object' || typeof model.forward !== 'function') {
    throw new TypeError(
      `${FN}: model must be a TinyTransformer (config and forward), got ${formatValue(model)}`,
    );
  }
  checkOptionNames(FN, options, OPTIONS);
  const { vocabSize: V, numLayers, numHeads: H, maxLen, causal } = model.config;
  if (!causal) {
    throw new TypeError(
      `${FN}: the model is an encoder (causal: false); the scores are defined for a decoder, whose query i sees keys j ≤ i`,
    );
  }
  if (maxLen < 4)
    throw new RangeError(`${FN}: the model's maxLen is ${maxLen}; the probe needs 2n ≥ 4 positions`);
  const { seed = 0, count = 8, exclude = [], text, batchSize = 16 } = options;
  const length = options.length ?? Math.min(32, Math.floor(maxLen / 2));
  checkFinite(FN, 'seed', seed);
  checkInteger(FN, 'count', count, 1);
  checkInteger(FN, 'batchSize', batchSize, 1);
  checkInteger(FN, 'length', length, 1);
  if (length < 2 || 2 * length > maxLen) {
    throw new RangeError(
      `${FN}: length must be from 2 to ⌊maxLen / 2⌋ = ${Math.floor(maxLen / 2)} (the probe is 2·length tokens), got ${length}`,
    );
  }
  if (!Array.isArray(exclude) || exclude.some((id) => !Number.isInteger(id))) {
    throw new TypeError(`${FN}: exclude must be an array of token ids, got ${formatValue(exclude)}`);
  }
  const pool = tokensExcept(V, exclude);
  if (pool.length === 0)
    throw new RangeError(`${FN}: exclude leaves no token of the vocabulary (${V}) to draw`);
  if (text !== undefined) {
    if (!(text instanceof Int32Array))
      throw new TypeError(`${FN}: text must be an Int32Array of token ids, got ${formatValue(text)}`);
    if (text.length < 2) throw new RangeError(`${FN}: text has ${text.length} tokens; a window needs 2`);
    for (let i = 0; i < text.length; i++) {
      if (!(text[i] >= 0 && text[i] < V))
        throw new RangeError(`${FN}: text[${i}] = ${text[i]} is outside [0, vocabSize=${V})`);
    }
  }

  const size = numLayers * H;
  const prev = new Tally(size);
  const first = new Tally(size);
  const dup = new Tally(size);
  const induction = new Tally(size);
  const gen = new Generator(seed);
  const n = length;

  // Runs `rows` sequences of T tokens (B at a time) and hands each layer's weights to `score`.
  const run = (
    rows: Int32Array[],
    T: number,
    score: (w: Float32Array, l: number, b: number, s: Int32Array) => void,
  ) => {
    for (let start = 0; start < rows.length; start += batchSize) {
      const chunk = rows.slice(start, start + batchSize);
      const B = chunk.length;
      const ids = new Int32Array(B * T);
      chunk.forEach((s, b) => {
        ids.set(s, b * T);
      });
      const { weights } = noGrad(() => model.forward(ids, B, T, { needWeights: true }));
      if (!Array.isArray(weights) || weights.length !== numLayers) {
        throw new RangeError(
          `${FN}: the model returned ${Array.isArray(weights) ? weights.length : 'no'} attention maps for ${numLayers} layers`,
        );
      }
      weights.forEach((w, l) => {
        const want = [B, H, T, T];
        if (w.shape.length !== 4 || w.shape.some((d, i) => d !== want[i]))
          throw new RangeError(`${FN}: layer ${l}'s weights are [${w.shape}], expected [${want}]`);
        chunk.forEach((s, b) => {
          score(w.data as Float32Array, l, b, s);
        });
      });
    }
  };

  // Adds query i's weight on its earlier occurrences (if any) to the duplicate-token tally of every head.
  const duplicates = (w: Float32Array, l: number, b: number, s: Int32Array, T: number) => {
    for (let i = 1; i < T; i++) {
      let any = false;
      for (let j = 0; j < i && !any; j++) any = s[j] === s[i];
      if (!any) continue;
      for (let h = 0; h < H; h++) {
        const row = ((b * H + h) * T + i) * T;
        let sum = 0;
        for (let j = 0; j < i; j++) if (s[j] === s[i]) sum += w[row + j];
        dup.sum[l * H + h] += sum;
        dup.n[l * H + h]++;
      }
    }
  };
  // Previous-token and first-token over queries 1 … last − 1 of a row.
  const prevFirst = (w: Float32Array, l: number, b: number, T: number, last: number) => {
    for (let h = 0; h < H; h++) {
      const k = l * H + h;
      for (let i = 1; i < last; i++) {
        const row = ((b * H + h) * T + i) * T;
        prev.sum[k] += w[row + i - 1];
        first.sum[k] += w[row];
      }
      prev.n[k] += last - 1;
      first.n[k] += last - 1;
    }
  };

  const T = 2 * n;
  const repeated = Array.from({ length: count }, () => {
    const s = new Int32Array(T);
    for (let t = 0; t < n; t++) s[t] = s[t + n] = pool[Math.floor(gen.random() * pool.length)];
    return s;
  });
  run(repeated, T, (w, l, b, s) => {
    for (let h = 0; h < H; h++) {
      const k = l * H + h;
      for (let i = n; i < T; i++) induction.sum[k] += w[((b * H + h) * T + i) * T + i - n + 1];
      induction.n[k] += n;
    }
    if (text === undefined) {
      prevFirst(w, l, b, T, n);
      duplicates(w, l, b, s, T);
    }
  });
  if (text !== undefined) {
    const W = Math.min(T, text.length);
    const windows = Array.from({ length: count }, () => {
      const at = Math.floor(gen.random() * (text.length - W + 1));
      return text.slice(at, at + W);
    });
    run(windows, W, (w, l, b, s) => {
      prevFirst(w, l, b, W, W);
      duplicates(w, l, b, s, W);
    });
  }

  const heads: HeadScore[] = [];
  for (let l = 0; l < numLayers; l++) {
    for (let h = 0; h < H; h++) {
      const k = l * H + h;
      heads.push({
        layer: l,
        head: h,
        previousToken: prev.mean(k),
        duplicateToken: dup.mean(k),
        induction: induction.mean(k),
        firstToken: first.mean(k),
      });
    }
  }
  return {
    heads,
    numLayers,
    numHeads: H,
    length: n,
    count,
    seed,
    source: text === undefined ? 'random' : 'text',
  };
}

/** The head with the highest `score` (NaN scores never win); the first such head on ties. */
export function bestHead(heads: readonly HeadScore[], score: ScoreName): HeadScore {
  if (!Array.isArray(heads) || heads.length === 0)
    throw new RangeError(
      `bestHead: heads must be a non-empty array of head scores, got ${formatValue(heads)}`,
    );
  if (!SCORE_NAMES.includes(score))
    throw new RangeError(
      `bestHead: score must be one of ${SCORE_NAMES.join(', ')}, got ${formatValue(score)}`,
    );
  let best = heads[0];
  for (const h of heads) if (h[score] > best[score] || Number.isNaN(best[score])) best = h;
  return best;
}

/**
 * The ids [0, V) but `exclude`, in order: what the probe (and languageModelTask's repeated windows, so that
 * they teach what the probe measures) draws its random tokens from.
 */
export function tokensExcept(V: number, exclude: Iterable<number>): Int32Array {
  const excluded = new Set(exclude);
  return Int32Array.from({ length: V }, (_, id) => id).filter((id) => !excluded.has(id));
}
