// The differentiable ops a small transformer needs; each op's backward closure sits right under its forward.
// One decision to know: ops accumulate in float64 and write outputs of their input's float type, so the
// same code trains in float32 and is checked in float64 against central differences (test/autograd.test.ts).
// Shape letters: N rows (all leading axes flattened), K input width, M output width, D model width.

import type { Generator } from '../random.js';
import { floatsLike, opResult, type Var } from './var.js';

function fmt(shape: readonly number[]): string {
  return `[${shape.join(',')}]`;
}

/** y = x·Wᵀ + b, PyTorch's Linear layout: x [..., K], weight [M, K], bias [M] → [..., M]. */
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
  const X = x.data;
  const W = weight.data;
  const y = floatsLike(X, N * M);
  for (let n = 0; n < N; n++) {
    const xo = n * K;
    for (let m = 0; m < M; m++) {
      const wo = m * K;
      let acc = bias ? bias.data[m] : 0;
      for (let k = 0; k < K; k++) acc += X[xo + k] * W[wo + k];
      y[n * M + m] = acc;
    }
  }
  const out = opResult(y, [...x.shape.slice(0, -1), M], bias ? [x, weight, bias] : [x, weight], () => {
    const dy = out.grad!;
    // dx[n,:] += Σ_m dy[n,m]·W[m,:];  dW[m,:] += Σ_n dy[n,m]·x[n,:];  db[m] += Σ_n dy[n,m]
    const dx = x.requiresGrad ? x.gradBuffer() : undefined;
    const dW = weight.requiresGrad ? weight.gradBuffer() : undefined;
    const row = new Float64Array(K);
    for (let n = 0; n < N; n++) {
      const xo = n * K;
      row.fill(0);
      for (let m = 0; m < M; m++) {
        const g = dy[n * M + m];
        if (g === 0) continue;
        const wo = m * K;
        if (dx) for (let k = 0; k < K; k++) row[k] += g * W[wo + k];
        if (dW) for (let k = 0; k < K; k++) dW[wo + k] += g * X[xo + k];
      }
      if (dx) for (let k = 0; k < K; k++) dx[xo + k] += row[k];
    }
    if (bias?.requiresGrad) {
      const db = bias.gradBuffer();
      for (let m = 0; m < M; m++) {
        let s = 0;
        for (let n = 0; n < N; n++) s += dy[n * M + m];
        db[m] += s;
      }
    }
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

/** LayerNorm over the last axis (Ba et al., arXiv:1607.06450): x [..., D], weight [D], bias [D]. */
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
  const xhat = new Float64Array(x.size); // saved for backward
  const rstd = new Float64Array(N);
  for (let n = 0; n < N; n++) {
    const o = n * D;
    let mean = 0;
    for (let d = 0; d < D; d++) mean += X[o + d];
    mean /= D;
    let v = 0;
    for (let d = 0; d < D; d++) v += (X[o + d] - mean) ** 2;
    const r = 1 / Math.sqrt(v / D + eps); // biased variance, as PyTorch
    rstd[n] = r;
    for (let d = 0; d < D; d++) {
      const h = (X[o + d] - mean) * r;
      xhat[o + d] = h;
      y[o + d] = h * weight.data[d] + bias.data[d];
    }
  }
  const out = opResult(y, x.shape, [x, weight, bias], () => {
    const dy = out.grad!;
    // dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·weight; dweight += dy·x̂; dbias += dy.
    const dx = x.requiresGrad ? x.gradBuffer() : undefined;
    const dw = weight.requiresGrad ? weight.gradBuffer() : undefined;
    const db = bias.requiresGrad ? bias.gradBuffer() : undefined;
    for (let n = 0; n < N; n++) {
      const o = n * D;
      let mg = 0;
      let mgx = 0;
      for (let d = 0; d < D; d++) {
        const g = dy[o + d] * weight.data[d];
        mg += g;
        mgx += g * xhat[o + d];
        if (dw) dw[d] += dy[o + d] * xhat[o + d];
        if (db) db[d] += dy[o + d];
      }
      mg /= D;
      mgx /= D;
      if (dx) {
        for (let d = 0; d < D; d++) {
          dx[o + d] += rstd[n] * (dy[o + d] * weight.data[d] - mg - xhat[o + d] * mgx);
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
 * `generator` (so a seed fixes the masks). The identity when p = 0.
 */
export function dropout(x: Var, p: number, generator: Generator): Var {
  if (!(p >= 0 && p < 1)) throw new RangeError(`dropout: p must be in [0, 1), got ${p}`);
  if (p === 0) return x;
  const keep = new Float64Array(x.size); // 0 or 1/(1−p)
  const y = floatsLike(x.data, x.size);
  for (let i = 0; i < x.size; i++) {
    keep[i] = generator.random() < p ? 0 : 1 / (1 - p);
    y[i] = x.data[i] * keep[i];
  }
  const out = opResult(y, x.shape, [x], () => {
    const dy = out.grad!;
    const dx = x.gradBuffer();
    for (let i = 0; i < x.size; i++) dx[i] += dy[i] * keep[i];
  });
  return out;
}

/**
 * Mean softmax cross-entropy of logits [N, C] against class ids [N]; rows whose target is `ignoreIndex`
 * (default −1) are left out of the mean (as PyTorch's ignore_index). Returns a scalar Var (shape []).
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
  const probs = new Float64Array(logits.size); // softmax, saved for backward
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
    for (let c = 0; c < C; c++) {
      const e = Math.exp(X[o + c] - max);
      probs[o + c] = e;
      sum += e;
    }
    for (let c = 0; c < C; c++) probs[o + c] /= sum;
    total += max + Math.log(sum) - X[o + t]; // −log softmax_t
    count++;
  }
  const loss = floatsLike(X, 1);
  loss[0] = count ? total / count : 0;
  const out = opResult(loss, [], [logits], () => {
    if (!count) return;
    const g = out.grad![0] / count;
    const dx = logits.gradBuffer();
    for (let n = 0; n < N; n++) {
      const t = targets[n];
      if (t === ignoreIndex) continue;
      const o = n * C;
      for (let c = 0; c < C; c++) dx[o + c] += g * (probs[o + c] - (c === t ? 1 : 0));
    }
  });
  return out;
}
