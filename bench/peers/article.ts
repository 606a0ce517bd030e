// The seed article's attention (section 三), rewritten here as the baseline: number[][] matrices, an explicit
// transpose, an i-k-j matMul that skips zeros, division by √d_k, a −1e9 fill where the mask is 0, and a
// map-based row softmax. One decision to know: it is kept as slow as the article's code on purpose (no
// typed arrays, the full L×S matrix even when causal) because it is the number qkv is compared against.

import type { Config } from '../jobs.js';

type Matrix = number[][];

function zeros(rows: number, cols: number): Matrix {
  return Array.from({ length: rows }, () => new Array<number>(cols).fill(0));
}

/** a [m, n] · b [n, p] → [m, p], looping i, k, j as the article does and skipping a[i][k] = 0. */
function matMul(a: Matrix, b: Matrix): Matrix {
  const m = a.length;
  const n = a[0].length;
  const p = b[0].length;
  if (b.length !== n) throw new Error(`matMul: [${m}×${n}] · [${b.length}×${p}]`);
  const out = zeros(m, p);
  for (let i = 0; i < m; i++) {
    const outRow = out[i];
    for (let kk = 0; kk < n; kk++) {
      const aik = a[i][kk];
      if (aik === 0) continue;
      const bRow = b[kk];
      for (let j = 0; j < p; j++) outRow[j] += aik * bRow[j];
    }
  }
  return out;
}

function transpose(m: Matrix): Matrix {
  const out = zeros(m[0].length, m.length);
  for (let i = 0; i < m.length; i++) for (let j = 0; j < m[0].length; j++) out[j][i] = m[i][j];
  return out;
}

/** Row softmax with the row max subtracted first (the article's numerical-stability step). */
function softmaxRows(m: Matrix): Matrix {
  return m.map((row) => {
    const max = Math.max(...row);
    const exps = row.map((x) => Math.exp(x - max));
    const sum = exps.reduce((acc, x) => acc + x, 0);
    return exps.map((x) => x / sum);
  });
}

/** softmax(Q·Kᵀ/√d_k, masked with −1e9 where mask is 0) · V for one head: Q [L, E], K, V [S, E]. */
export function articleAttention(Q: Matrix, K: Matrix, V: Matrix, mask?: Matrix): Matrix {
  const scores = matMul(Q, transpose(K));
  const root = Math.sqrt(Q[0].length);
  const scaled = scores.map((row) => row.map((x) => x / root));
  if (mask) {
    for (let i = 0; i < scaled.length; i++) {
      for (let j = 0; j < scaled[i].length; j++) if (mask[i][j] === 0) scaled[i][j] = -1e9;
    }
  }
  return matMul(softmaxRows(scaled), V);
}

/** Rows [start, start + rows) of a flat row-major array as number[][]. */
export function toMatrix(data: Float32Array, start: number, rows: number, cols: number): Matrix {
  return Array.from({ length: rows }, (_, r) =>
    Array.from(data.subarray((start + r) * cols, (start + r + 1) * cols)),
  );
}

/** The article's causal mask: 1 where key j ≤ query i (L = S), else 0. */
export function causalMask(n: number): Matrix {
  return Array.from({ length: n }, (_, i) => Array.from({ length: n }, (_, j) => (j <= i ? 1 : 0)));
}

/** Converts the inputs to the article's number[][] per head (setup, not timed); returns one forward pass. */
export function prepareArticle(
  c: Config,
  q: Float32Array,
  k: Float32Array,
  v: Float32Array,
): () => Promise<Float32Array> {
  const { B, H, L, S, E } = c;
  const heads = Array.from({ length: B * H }, (_, bh) => ({
    Q: toMatrix(q, bh * L, L, E), // [L, E]
    K: toMatrix(k, bh * S, S, E), // [S, E]
    V: toMatrix(v, bh * S, S, E), // [S, E]
  }));
  const mask = c.causal ? causalMask(L) : undefined; // L = S in every config that uses it
  return async () => {
    const out = new Float32Array(B * H * L * E);
    heads.forEach(({ Q, K, V }, bh) => {
      const headOut = articleAttention(Q, K, V, mask); // [L, E]
      for (let i = 0; i < L; i++) out.set(headOut[i], (bh * L + i) * E);
    });
    return out;
  };
}
