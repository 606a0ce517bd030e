// The differentiable ops a small transformer needs; each op's backward closure sits right under its forward.
// One decision to know: ops accumulate in float64 and write outputs of their input's float type, so the
// same code trains in float32 and is checked in float64 against central differences (test/autograd.test.ts).
// Backward recomputes from the inputs instead of keeping full-size float copies: an op saves per-row
// statistics (dropout a byte per element), and nothing when `needsGrad` says it is off the tape.
// Shape letters: N rows (all leading axes flattened), K input width, M output width, D model width.

import {
  linear as gemmLinear,
  linearGradBias,
  linearGradInput,
  linearGradWeight,
} from '../kernels/matmul.js';
import type { Generator } from '../random.js';
import { floatsLike, needsGrad, opResult, type Var } from './var.js';

function fmt(shape: readonly number[]): string {
  return `[${shape.join(',')}]`;
}

/**
 * y = x·Wᵀ + b, PyTorch's Linear layout: x [..., K], weight [M, K], bias [M] → [..., M]. Its three
 * products (forward, ∂x, ∂W) are kernels/matmul.ts's, the one place a faster GEMM plugs in.
 */
export function linear(x: Var, weight: Var, bias?: Var): Var {
  const [M, K] = weight.shape;
  if (
    weight.shape.length !== 2 ||
    x.shape[x.shape.length - 1] !== K ||
    (bias && (bias.size !== M || bias.shape.length !== 1))
  ) {
    throw new RangeError(
      `linear: x ${fmt(x.shape)}, weight ${fmt(weight.shape)}${bias ? `, bias ${fmt(bias.shape)}` : ''}: need x [..., K], weight [M, K], bias [M]`,
    );
  }
  const N = x.size / K;
  const y = gemmLinear(x.data, N, K, weight.data, 0, M, bias?.data);
  const out = opResult(y, [...x.shape.slice(0, -1), M], bias ? [x, weight, bias] : [x, weight], () => {
    const dy = out.grad!;
    if (x.requiresGrad) linearGradInput(dy, N, M, weight.data, K, x.gradBuffer()); // dx += dy·W
    if (weight.requiresGrad) linearGradWeight(dy, N, M, x.data, K, weight.gradBuffer()); // dW += dyᵀ·x
    if (bias?.requiresGrad) linearGradBias(dy, N, M, bias.gradBuffer()); // db += colsum(dy)
  });
  return out;
}

/** a + b, where b's shape equals a's or is a suffix of it (b repeats over a's leading axes). */
export function add(a: Var, b: Var): Var {
  const tail = a.shape.slice(a.shape.length - b.shape.length);
  if (b.shape.length > a.shape.length || tail.some((d, i) => d !== b.shape[i])) {
    throw new RangeError(`add: b ${fmt(b.shape)} must equal a ${fmt(a.shape)} or a suffix of it`);
  }
  const nb = b.size;
  const y = floatsLike(a.data, a.size);
  for (let i = 0; i < a.size; i++) y[i] = a.data[i] + b.data[i % nb];
  const out = opResult(y, a.shape, [a, b], () => {
    const dy = out.grad!;
    if (a.requiresGrad) {
      const da = a.gradBuffer();
      for (let i = 0; i < a.size; i++) da[i] += dy[i];
    }
    if (b.requiresGrad) {
      const db = b.gradBuffer();
      for (let i = 0; i < a.size; i++) db[i % nb] += dy[i]; // summed over the repeats
    }
  });
  return out;
}

/** c·x for a constant c (e.g. the √D that multiplies token embeddings). */
export function scale(x: Var, c: number): Var {
  const y = floatsLike(x.data, x.size);
  for (let i = 0; i < x.size; i++) y[i] = c * x.data[i];
  const out = opResult(y, x.shape, [x], () => {
    const dy = out.grad!;
    const dx = x.gradBuffer();
    for (let i = 0; i < x.size; i++) dx[i] += c * dy[i];
  });
  return out;
}

/**
 * LayerNorm over the last axis (Ba et al., arXiv:1607.06450): x [..., D], weight [D], bias [D]. Saves two
 * numbers per row (mean, rstd), not x̂: backward recomputes x̂ = (x − mean)·rstd from x.
 */
export function layerNorm(x: Var, weight: Var, bias: Var, eps = 1e-5): Var {
  const D = x.shape[x.shape.length - 1];
  if (weight.size !== D || bias.size !== D) {
    throw new RangeError(
      `layerNorm: x ${fmt(x.shape)} needs weight and bias [${D}], got ${fmt(weight.shape)}, ${fmt(bias.shape)}`,
    );
  }
  const N = x.size / D;
  const X = x.data;
  const y = floatsLike(X, x.size);
  // [N, 2]: each row's mean and rstd, kept only for the tape. Float64 because it is O(N) (16 bytes a row
  // against the row's 4·D) and makes the recomputed x̂ bit for bit the forward's.
  const stats = needsGrad([x, weight, bias]) ? new Float64Array(2 * N) : undefined;
  for (let n = 0; n < N; n++) {
    const o = n * D;
    let mean = 0;
    for (let d = 0; d < D; d++) mean += X[o + d];
    mean /= D;
    let v = 0;
    for (let d = 0; d < D; d++) v += (X[o + d] - mean) ** 2;
    const r = 1 / Math.sqrt(v / D + eps); // biased variance, as PyTorch
    if (stats) {
      stats[2 * n] = mean;
      stats[2 * n + 1] = r;
    }
    for (let d = 0; d < D; d++) y[o + d] = (X[o + d] - mean) * r * weight.data[d] + bias.data[d];
  }
  const out = opResult(y, x.shape, [x, weight, bias], () => {
    const dy = out.grad!;
    const s = stats!;
    // dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·weight; dweight += dy·x̂; dbias += dy.
    const dx = x.requiresGrad ? x.gradBuffer() : undefined;
    const dw = weight.requiresGrad ? weight.gradBuffer() : undefined;
    const db = bias.requiresGrad ? bias.gradBuffer() : undefined;
    for (let n = 0; n < N; n++) {
      const o = n * D;
      const mean = s[2 * n];
      const r = s[2 * n + 1];
      let mg = 0;
      let mgx = 0;
      for (let d = 0; d < D; d++) {
        const h = (X[o + d] - mean) * r; // x̂
        const g = dy[o + d] * weight.data[d];
        mg += g;
        mgx += g * h;
        if (dw) dw[d] += dy[o + d] * h;
        if (db) db[d] += dy[o + d];
      }
      mg /= D;
      mgx /= D;
      if (dx) {
        for (let d = 0; d < D; d++) {
          const h = (X[o + d] - mean) * r;
          dx[o + d] += r * (dy[o + d] * weight.data[d] - mg - h * mgx);
        }
      }
    }
  });
  return out;
}

const GELU_C = Math.sqrt(2 / Math.PI);

/** GELU, tanh form (Hendrycks & Gimpel, arXiv:1606.08415; GPT-2's; PyTorch's approximate='tanh'). */
export function gelu(x: Var): Var {
  const y = floatsLike(x.data, x.size);
  for (let i = 0; i < x.size; i++) {
    const v = x.data[i];
    y[i] = 0.5 * v * (1 + Math.tanh(GELU_C * (v + 0.044715 * v * v * v)));
  }
  const out = opResult(y, x.shape, [x], () => {
    const dy = out.grad!;
    const dx = x.gradBuffer();
    for (let i = 0; i < x.size; i++) {
      const v = x.data[i];
      const t = Math.tanh(GELU_C * (v + 0.044715 * v * v * v));
      const dt = (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * v * v);
      dx[i] += dy[i] * (0.5 * (1 + t) + 0.5 * v * dt);
    }
  });
  return out;
}

/** Rows of table [V, D] picked by integer ids (shape idsShape) → [...idsShape, D]; backward scatter-adds. */
export function embedding(table: Var, ids: Int32Array, idsShape: readonly number[]): Var {
  const [V, D] = table.shape;
  let n = 1;
  for (const d of idsShape) n *= d;
  if (table.shape.length !== 2 || n !== ids.length) {
    throw new RangeError(
      `embedding: table ${fmt(table.shape)} must be [V, D] and ids (${ids.length}) must fill ${fmt(idsShape)}`,
    );
  }
  const y = floatsLike(table.data, n * D);
  for (let t = 0; t < n; t++) {
    const id = ids[t];
    if (!(id >= 0 && id < V))
      throw new RangeError(`embedding: id ${id} at position ${t} is outside the table's ${V} rows`);
    for (let d = 0; d < D; d++) y[t * D + d] = table.data[id * D + d];
  }
  const out = opResult(y, [...idsShape, D], [table], () => {
    const dy = out.grad!;
    const dt = table.gradBuffer();
    for (let t = 0; t < n; t++) for (let d = 0; d < D; d++) dt[ids[t] * D + d] += dy[t * D + d];
  });
  return out;
}

/** Splits the last axis into pieces of the given widths (e.g. a packed q|k|v projection) → one Var each. */
export function splitLast(x: Var, widths: readonly number[]): Var[] {
  const W = x.shape[x.shape.length - 1];
  if (widths.reduce((s, w) => s + w, 0) !== W) {
    throw new RangeError(
      `splitLast: widths ${fmt(widths)} do not add up to the last axis of ${fmt(x.shape)}`,
    );
  }
  const N = x.size / W;
  const outs: Var[] = [];
  let start = 0;
  for (const w of widths) {
    const from = start;
    const y = floatsLike(x.data, N * w);
    for (let n = 0; n < N; n++) for (let c = 0; c < w; c++) y[n * w + c] = x.data[n * W + from + c];
    const out: Var = opResult(y, [...x.shape.slice(0, -1), w], [x], () => {
      const dy = out.grad!;
      const dx = x.gradBuffer();
      for (let n = 0; n < N; n++) for (let c = 0; c < w; c++) dx[n * W + from + c] += dy[n * w + c];
    });
    outs.push(out);
    start += w;
  }
  return outs;
}

/**
 * Inverted dropout: zeroes each element with probability p and scales the rest by 1/(1 − p), drawing from
 * `generator` (so a seed fixes the masks). The identity when p = 0. Saves one byte per element (kept or
 * not), and nothing under noGrad (the draws are still made, so the generator advances the same).
 */
export function dropout(x: Var, p: number, generator: Generator): Var {
  if (!(p >= 0 && p < 1)) throw new RangeError(`dropout: p must be in [0, 1), got ${p}`);
  if (p === 0) return x;
  const scaleKept = 1 / (1 - p);
  const kept = needsGrad([x]) ? new Uint8Array(x.size) : undefined; // 1 = kept, for the tape only
  const y = floatsLike(x.data, x.size);
  for (let i = 0; i < x.size; i++) {
    const keep = generator.random() < p ? 0 : scaleKept;
    if (kept && keep) kept[i] = 1;
    y[i] = x.data[i] * keep;
  }
  const out = opResult(y, x.shape, [x], () => {
    const dy = out.grad!;
    const dx = x.gradBuffer();
    for (let i = 0; i < x.size; i++) dx[i] += dy[i] * (kept![i] ? scaleKept : 0);
  });
  return out;
}

/**
 * Mean softmax cross-entropy of logits [N, C] against class ids [N]; rows whose target is `ignoreIndex`
 * (default −1) are left out of the mean (as PyTorch's ignore_index). Returns a scalar Var (shape []).
 * Saves each row's log-sum-exp (as its max and Σ exp(x − max), 16 bytes a row), never the [N, C]
 * softmax: backward recomputes softmax = exp(x − max) / Σ row by row from the logits.
 */
export function crossEntropy(logits: Var, targets: Int32Array, ignoreIndex = -1): Var {
  const C = logits.shape[logits.shape.length - 1];
  const N = logits.size / C;
  if (targets.length !== N) {
    throw new RangeError(
      `crossEntropy: logits ${fmt(logits.shape)} have ${N} rows but targets have ${targets.length}`,
    );
  }
  const X = logits.data;
  // [N, 2]: each row's max and Σ exp(x − max), kept only for the tape. Two parts rather than their sum
  // max + log Σ, so the recomputed softmax is bit for bit the one a stored softmax held.
  const stats = needsGrad([logits]) ? new Float64Array(2 * N) : undefined;
  let total = 0;
  let count = 0;
  for (let n = 0; n < N; n++) {
    const t = targets[n];
    if (t === ignoreIndex) continue;
    if (!(t >= 0 && t < C))
      throw new RangeError(`crossEntropy: target ${t} at row ${n} is outside [0, ${C})`);
    const o = n * C;
    let max = Number.NEGATIVE_INFINITY;
    for (let c = 0; c < C; c++) max = Math.max(max, X[o + c]);
    let sum = 0;
    for (let c = 0; c < C; c++) sum += Math.exp(X[o + c] - max);
    if (stats) {
      stats[2 * n] = max;
      stats[2 * n + 1] = sum;
    }
    total += max + Math.log(sum) - X[o + t]; // −log softmax_t
    count++;
  }
  const loss = floatsLike(X, 1);
  loss[0] = count ? total / count : 0;
  const out = opResult(loss, [], [logits], () => {
    if (!count) return;
    const s = stats!;
    const g = out.grad![0] / count;
    const dx = logits.gradBuffer();
    for (let n = 0; n < N; n++) {
      const t = targets[n];
      if (t === ignoreIndex) continue;
      const o = n * C;
      const max = s[2 * n];
      const sum = s[2 * n + 1];
      for (let c = 0; c < C; c++) dx[o + c] += g * (Math.exp(X[o + c] - max) / sum - (c === t ? 1 : 0));
    }
  });
  return out;
}
