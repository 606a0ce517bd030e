// The numbers behind the article's experiments, as plain functions the page and the tests share:
// softmax saturation (§4.2), the §4.2 worked example done right, and the memory of the n×n score matrix
// against a tiled kernel (Q3). One decision to know: entropy is in bits, and rows that are all 0 (fully
// masked) are left out of the statistics rather than counted as "certain".

import { attentionWeights } from '../attention/sdpa.js';
import { Tensor } from '../tensor.js';

/** How peaked attention weights are: {@link softmaxStats}'s result. */
export interface SoftmaxStats {
  /** Rows that have any weight (fully masked rows are skipped). */
  rows: number;
  /** The largest weight anywhere, and the mean over rows of each row's largest weight. */
  maxWeight: number;
  meanMaxWeight: number;
  /** Mean row entropy −Σ p·log2 p in bits, and the uniform row's entropy log2 S for comparison. */
  meanEntropyBits: number;
  uniformEntropyBits: number;
}

/** Statistics of attention weights [..., L, S] given as a flat array with S columns. */
export function softmaxStats(weights: ArrayLike<number>, S: number): SoftmaxStats {
  if (!(Number.isSafeInteger(S) && S >= 1) || weights.length % S !== 0) {
    throw new RangeError(`softmaxStats: weights has ${weights.length} elements, not a multiple of S=${S}`);
  }
  let rows = 0;
  let maxWeight = 0;
  let sumMax = 0;
  let sumEntropy = 0;
  for (let r = 0; r < weights.length / S; r++) {
    let rowMax = 0;
    let rowSum = 0;
    let h = 0;
    for (let j = 0; j < S; j++) {
      const p = weights[r * S + j];
      rowSum += p;
      if (p > rowMax) rowMax = p;
      if (p > 0) h -= p * Math.log2(p);
    }
    if (rowSum === 0) continue;
    rows++;
    sumMax += rowMax;
    sumEntropy += h;
    if (rowMax > maxWeight) maxWeight = rowMax;
  }
  return {
    rows,
    maxWeight,
    meanMaxWeight: rows ? sumMax / rows : 0,
    meanEntropyBits: rows ? sumEntropy / rows : 0,
    uniformEntropyBits: Math.log2(S),
  };
}

const softmax = (xs: readonly number[]) => {
  const m = Math.max(...xs);
  const e = xs.map((x) => Math.exp(x - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
};

/**
 * The article's §4.2 example in float64: scores [20, 0.5, 0.3, 0.1] (20 = "a typical 64-dim dot product").
 * `unscaled` is softmax(scores)[0] ≈ 0.99999999. The article's "scaled" line divides only the 20 by √64
 * (2.5) and leaves 0.5, 0.3, 0.1 as they were: that gives `articleFormula` ≈ 0.748, though the article
 * prints 0.768. Dividing all four scores by 8, as attention does, gives `allScaled` ≈ 0.796.
 */
export function articleScalingExample(): {
  scores: number[];
  unscaled: number;
  articleFormula: number;
  articlePrinted: number;
  allScaled: number;
} {
  const scores = [20, 0.5, 0.3, 0.1];
  return {
    scores,
    unscaled: softmax(scores)[0],
    articleFormula: softmax([20 / 8, 0.5, 0.3, 0.1])[0],
    articlePrinted: 0.768,
    allScaled: softmax(scores.map((s) => s / 8))[0],
  };
}

/**
 * Softmax saturation for random q, k ~ N(0, 1) in d_k dimensions (the article's premise, so q·k has
 * variance d_k): statistics of attentionWeights over `n` queries × `n` keys, with and without ÷√d_k.
 */
export function saturationAt(
  dK: number,
  n: number,
  seed: number,
): { scaled: SoftmaxStats; unscaled: SoftmaxStats } {
  const q = Tensor.randn([n, dK], { seed });
  const k = Tensor.randn([n, dK], { seed: seed + 1 });
  return {
    scaled: softmaxStats(attentionWeights(q, k).data, n),
    unscaled: softmaxStats(attentionWeights(q, k, { scale: 1 }).data, n),
  };
}

/** Bytes of the materialised score (or weight) matrix: batch·heads·n·n elements. */
export function scoreMatrixBytes(n: number, heads = 1, batch = 1, bytesPerElement = 4): number {
  return batch * heads * n * n * bytesPerElement;
}

/**
 * Extra working memory of a FlashAttention-style tiled kernel (arXiv:2307.08691) for one (batch, head):
 * one block×block tile of scores plus a running max and a running sum per query row — O(n), not O(n²).
 * (Q, K, V and the output exist in both cases and are not counted.)
 */
export function tiledKernelBytes(n: number, block = 64, bytesPerElement = 4): number {
  return (Math.min(block, n) * Math.min(block, n) + 2 * n) * bytesPerElement;
}

/** 67108864 → "64 MiB", 49152 → "48 KiB" (binary units, as the article's "64MB" means). */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = bytes;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${Number(v.toPrecision(3))} ${units[u]}`;
}
