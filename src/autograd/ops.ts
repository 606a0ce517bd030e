// The differentiable ops a small transformer needs; each op's backward closure sits right under its forward.
// One decision to know: ops accumulate in float64 and write outputs of their input's float type, so the
// same code trains in float32 and is checked in float64 against central differences (test/autograd.test.ts).
// Backward recomputes from the inputs instead of keeping full-size float copies: an op saves per-row
// statistics (dropout a byte per element; GELU, the exception, its exp per element), and nothing when
// `needsGrad` says it is off the tape.
// The loops are a training step's hot path: flat typed-array loops with row offsets hoisted, no allocation
// or closure per element, and exp from tables (fastExp) where Math.exp and Math.tanh would dominate.
// Shape letters: N rows (all leading axes flattened), K input width, M output width, D model width.

import {
  linear as gemmLinear,
  linearGradBias,
  linearGradInput,
  linearGradWeight,
} from '../kernels/matmul.js';
import {
  addWasm,
  crossEntropyBackwardWasm,
  crossEntropyWasm,
  geluBackwardWasm,
  geluForwardWasm,
  layerNormBackwardWasm,
  layerNormWasm,
  scaleWasm,
  scatterAddRowsWasm,
} from '../kernels/ops-wasm.js';
import { checkRopeArgs, ropeTable, rotateHalfHeads } from '../position/rope.js';
import type { Generator } from '../random.js';
import { type Floats, floatsFor, floatsLike, needsGrad, opResult, type Var } from './var.js';

function fmt(shape: readonly number[]): string {
  return `[${shape.join(',')}]`;
}

// e^a as 2^(k/32)·p(r): k = round(a·32/ln 2), r = a − k·ln 2/32 (|r| ≤ ln 2/64; Cody–Waite split, so
// k·ln2Hi is exact), p the degree-6 Taylor polynomial (truncation < 4e-18), 2^(k/32) from two tables.
// Within 2 ulp of Math.exp on [−708, 709.7] (test/autograd-ops.test.ts) and about 2–3× faster in V8,
// whose Math.exp and Math.tanh are calls into C. Below −708 the result leaves the normal range and is
// flushed a little early (0 from −745.1 on, where Math.exp still gives the last subnormals); it is +∞
// from about 709.76 (Math.exp: 709.78); NaN gives NaN.
const EXP_K = 32 / Math.LN2;
const LN2_HI_32 = 0.6931471803691238 / 32; // 32 significant bits: k·LN2_HI_32 is exact for |k| < 2^21
const LN2_LO_32 = 1.9082149292705877e-10 / 32; // ln 2 − ln2Hi
const ROUND = 6755399441055744; // 1.5·2^52: (x + ROUND) − ROUND rounds x to an integer
const EXP_FRAC = Float64Array.from({ length: 32 }, (_, j) => 2 ** (j / 32)); // 2^(j/32)
const EXP_MIN_POW = -1080; // 2^m for m in [−1080, 1024]: 0 below −1075, +∞ at 1024
const EXP_POW = Float64Array.from({ length: 1025 - EXP_MIN_POW }, (_, i) => 2 ** (i + EXP_MIN_POW));

/** e^a by the tables above (accuracy and range in the comment above); exported for its tests. */
export function fastExp(a: number): number {
  // Clamped so k stays in the tables; NaN passes both tests (compares, not Math.min/max: V8 gives those
  // a NaN check of their own).
  let c = a;
  if (c < -746) c = -746;
  else if (c > 710) c = 710;
  const kf = c * EXP_K + ROUND - ROUND;
  const k = kf | 0;
  const r = c - kf * LN2_HI_32 - kf * LN2_LO_32;
  const p = 1 + r * (1 + r * (0.5 + r * (1 / 6 + r * (1 / 24 + r * (1 / 120 + r * (1 / 720))))));
  return p * EXP_FRAC[k & 31] * EXP_POW[(k >> 5) - EXP_MIN_POW];
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
  const N = x.shape.slice(0, -1).reduce((n, d) => n * d, 1); // rows (x.size / K, but K may be 0)
  const y = gemmLinear(x.data, N, K, weight.data, 0, M, bias?.data, 0, floatsFor(x.data, N * M));
  const out = opResult(y, [...x.shape.slice(0, -1), M], bias ? [x, weight, bias] : [x, weight], () => {
    const dy = out.grad!;
    if (x.requiresGrad) {
      // dx += dy·W; a gradient not allocated yet is written whole by the product: no zeros needed.
      const fresh = x.freshGrad();
      linearGradInput(dy, N, M, weight.data, K, fresh ?? x.gradBuffer(), fresh !== undefined);
    }
    if (weight.requiresGrad) linearGradWeight(dy, N, M, x.data, K, weight.gradBuffer()); // dW += dyᵀ·x
    if (bias?.requiresGrad) linearGradBias(dy, N, M, bias.gradBuffer()); // db += colsum(dy)
  });
  return out;
}

/** dst[i] += src[i] over src's length. */
function accumulate(dst: Floats, src: Floats): void {
  if (dst.length === src.length && addWasm(dst, src, dst)) return; // float32: WASM SIMD, same sums
  const n = src.length;
  for (let i = 0; i < n; i++) dst[i] += src[i];
}

/**
 * v.grad += g (g of v's size and float type). A grad not allocated yet starts as a block copy of g (a
 * residual stream's first gradient is a megabyte: a copy, not a loop adding it to fresh zeros). The copy
 * keeps −0 where 0 + g would give +0: the same numbers.
 */
function accumulateGrad(v: Var, g: Floats): void {
  if (v.grad === undefined && g.constructor === v.data.constructor) {
    const copy = floatsFor(g, g.length);
    copy.set(g);
    v.grad = copy;
  } else accumulate(v.gradBuffer(), g);
}

/** a + b, where b's shape equals a's or is a suffix of it (b repeats over a's leading axes). */
export function add(a: Var, b: Var): Var {
  const tail = a.shape.slice(a.shape.length - b.shape.length);
  if (b.shape.length > a.shape.length || tail.some((d, i) => d !== b.shape[i])) {
    throw new RangeError(`add: b ${fmt(b.shape)} must equal a ${fmt(a.shape)} or a suffix of it`);
  }
  const A = a.data;
  const Bd = b.data;
  const n = A.length;
  const nb = Bd.length;
  const y = floatsFor(A, n); // written whole below
  if (addWasm(A, Bd, y)) {
    // float32: WASM SIMD, the loops' sums
  } else if (nb === n) {
    for (let i = 0; i < n; i++) y[i] = A[i] + Bd[i];
  } else {
    // b repeats every nb elements (nb ≥ 1 here: a zero-size b makes a zero-size a, and the first branch).
    for (let o = 0; o < n; o += nb) for (let j = 0; j < nb; j++) y[o + j] = A[o + j] + Bd[j];
  }
  const out = opResult(y, a.shape, [a, b], () => {
    const dy = out.grad!;
    if (a.requiresGrad) accumulateGrad(a, dy);
    if (!b.requiresGrad) return;
    if (nb === n) accumulateGrad(b, dy);
    else {
      const db = b.gradBuffer();
      for (let o = 0; o < n; o += nb) for (let j = 0; j < nb; j++) db[j] += dy[o + j]; // summed over the repeats
    }
  });
  return out;
}

/** c·x for a constant c (e.g. the √D that multiplies token embeddings). */
export function scale(x: Var, c: number): Var {
  const X = x.data;
  const n = X.length;
  const y = floatsFor(X, n);
  if (!scaleWasm(X, y, c, false)) for (let i = 0; i < n; i++) y[i] = c * X[i];
  const out = opResult(y, x.shape, [x], () => {
    const dy = out.grad!;
    const dx = x.gradBuffer();
    if (scaleWasm(dy, dx, c, true)) return; // float32: WASM SIMD's float64 lanes, the same floats
    for (let i = 0; i < n; i++) dx[i] += c * dy[i];
  });
  return out;
}

/**
 * LayerNorm over the last axis (Ba et al., arXiv:1607.06450): x [..., D], weight [D], bias [D]. Saves two
 * numbers per row (mean, rstd), not x̂: backward recomputes x̂ = (x − mean)·rstd from x.
 */
export function layerNorm(x: Var, weight: Var, bias: Var, eps = 1e-5): Var {
  if (x.shape.length === 0) throw new RangeError('layerNorm: x [] must have at least one axis [..., D]');
  const D = x.shape[x.shape.length - 1];
  if (weight.size !== D || bias.size !== D) {
    throw new RangeError(
      `layerNorm: x ${fmt(x.shape)} needs weight and bias [${D}], got ${fmt(weight.shape)}, ${fmt(bias.shape)}`,
    );
  }
  const X = x.data;
  const W = weight.data;
  const Bs = bias.data;
  const N = D === 0 ? 0 : X.length / D;
  const y = floatsFor(X, X.length); // every row written by layerNormValues
  // [N, 2]: each row's mean and rstd, kept only for the tape. Float64 because it is O(N) (16 bytes a row
  // against the row's 4·D) and makes the recomputed x̂ bit for bit the forward's.
  const stats = needsGrad([x, weight, bias]) ? new Float64Array(2 * N) : undefined;
  layerNormValues(X, W, Bs, y, N, D, eps, stats);
  const out = opResult(y, x.shape, [x, weight, bias], () => {
    const dy = out.grad!;
    const s = stats!;
    // dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·weight; dweight += dy·x̂; dbias += dy. Grads of
    // inputs that need none go to a scratch row, so the sweeps carry no branch.
    const dx = x.requiresGrad ? x.gradBuffer() : undefined;
    const dw = weight.requiresGrad ? weight.gradBuffer() : floatsLike(X, D);
    const db = bias.requiresGrad ? bias.gradBuffer() : floatsLike(X, D);
    // Float32: the loop below in WASM SIMD (kernels/ops-wasm.ts), float64 arithmetic as here.
    if (layerNormBackwardWasm(X, W, dy, dx, dw, db, s, N, D)) return;
    for (let n = 0, o = 0; n < N; n++, o += D) {
      const mean = s[2 * n];
      const r = s[2 * n + 1];
      let mg = 0;
      let mgx = 0;
      for (let d = 0; d < D; d++) {
        const h = (X[o + d] - mean) * r; // x̂
        const e = dy[o + d];
        const g = e * W[d];
        mg += g;
        mgx += g * h;
        dw[d] += e * h;
        db[d] += e;
      }
      if (!dx) continue;
      mg /= D;
      mgx /= D;
      for (let d = 0; d < D; d++) {
        const h = (X[o + d] - mean) * r;
        dx[o + d] += r * (dy[o + d] * W[d] - mg - h * mgx);
      }
    }
  });
  return out;
}

/**
 * y = LayerNorm(X) over rows of D (X [N, D], W and Bs [D], y X's length), each row's mean and rstd into
 * stats when given: the autograd's layerNorm forward, exported so the Tensor ops' LayerNorm is the same
 * function bit for bit. Float32 arrays run in WASM SIMD (float64 arithmetic, kernels/ops-wasm.ts), others here.
 */
export function layerNormValues(
  X: Floats,
  W: Floats,
  Bs: Floats,
  y: Floats,
  N: number,
  D: number,
  eps: number,
  stats?: Float64Array,
): void {
  if (layerNormWasm(X, W, Bs, y, N, D, eps, stats)) return;
  // Two sweeps for the statistics (the sum, then Σ(x − mean)²: no cancellation), one for the output; a
  // row is in L1 for all three.
  for (let n = 0, o = 0; n < N; n++, o += D) {
    const end = o + D;
    let sum = 0;
    for (let i = o; i < end; i++) sum += X[i];
    const mean = sum / D;
    let v = 0;
    for (let i = o; i < end; i++) {
      const c = X[i] - mean;
      v += c * c;
    }
    const r = 1 / Math.sqrt(v / D + eps); // biased variance, as PyTorch
    if (stats) {
      stats[2 * n] = mean;
      stats[2 * n + 1] = r;
    }
    for (let d = 0; d < D; d++) y[o + d] = (X[o + d] - mean) * r * W[d] + Bs[d];
  }
}

const GELU_C = Math.sqrt(2 / Math.PI);
const GELU_A = 0.044715;

/**
 * y[i] = GELU(x[i]) for every i (x and y the same length; y may be of the other float type). The tanh
 * form, evaluated as x·σ(2u) = x / (1 + e^(−2u)) with u = √(2/π)·(x + 0.044715·x³) — the same function,
 * since ½(1 + tanh u) = σ(2u) — with one exp and no cancellation in either tail (1 + tanh u loses float32
 * digits below x ≈ −4.5 and is 0 below x ≈ −7.3 in float64; this keeps them). NaN and ±∞ give what the
 * tanh form gives (NaN, NaN at −∞, +∞ at +∞). Float32 arrays run in WASM SIMD's float32 lanes
 * (assembly/simd.ts geluSpan, ≤ (1 + 0.6·|u|)·1e-6 relative; the GEMM's fused GELU is the same code),
 * others here. Exported for an op that wants the autograd's GELU bit for bit (the Tensor ops' gelu, to
 * keep their block forward identical to the autograd's).
 */
export function geluValues(x: Floats, y: Floats): void {
  if (geluForwardWasm(x, y)) return; // float32: WASM SIMD's float32 lanes (kernels/ops-wasm.ts)
  const n = x.length;
  for (let i = 0; i < n; i++) {
    const v = x[i];
    y[i] = v / (1 + fastExp(-2 * GELU_C * (v + GELU_A * v * v * v)));
  }
}

/** geluValues, keeping each e = e^(−2u) in `saved` for the backward. */
function geluValuesSaving(x: Floats, y: Floats, saved: Floats): void {
  if (geluForwardWasm(x, y, saved)) return;
  const n = x.length;
  for (let i = 0; i < n; i++) {
    const v = x[i];
    const e = fastExp(-2 * GELU_C * (v + GELU_A * v * v * v));
    saved[i] = e;
    y[i] = v / (1 + e);
  }
}

/**
 * dx[i] += dy[i]·GELU′(x[i]) from the forward's e = e^(−2u): with σ = 1/(1 + e), d/dx [x·σ(2u)] =
 * σ + 2x·σ(1 − σ)·du/dx, and σ(1 − σ) = e·σ², exact in both tails; it is 0 where e is +∞ (e·σ would be
 * ∞·0 there), so only x = ±∞ (and NaN) give NaN, as in the tanh form. `fresh`: dx was just allocated
 * (Var.freshGrad): its contents count as zeros and are never read.
 */
function geluBackward(x: Floats, saved: Floats, dy: Floats, dx: Floats, fresh: boolean): void {
  if (geluBackwardWasm(x, saved, dy, dx, fresh)) return;
  const n = x.length;
  if (fresh) dx.fill(0);
  for (let i = 0; i < n; i++) {
    const v = x[i];
    const e = saved[i];
    const s = 1 / (1 + e);
    const sp = e < Number.POSITIVE_INFINITY ? e * s * s : 0; // NaN e: 0 here, and s is NaN
    dx[i] += dy[i] * (s + 2 * v * sp * GELU_C * (1 + 3 * GELU_A * v * v));
  }
}

/**
 * GELU, tanh form (Hendrycks & Gimpel, arXiv:1606.08415; GPT-2's; PyTorch's approximate='tanh'). The one
 * op that saves a full-size array for its backward: e^(−2u) per element, in x's float type (recomputing it
 * is an exp per element, most of the backward's time); nothing under noGrad.
 */
export function gelu(x: Var): Var {
  const X = x.data;
  const y = floatsFor(X, X.length); // y and saved: every element written
  if (!needsGrad([x])) {
    geluValues(X, y);
    return opResult(y, x.shape, [x], () => {});
  }
  const saved = floatsFor(X, X.length);
  geluValuesSaving(X, y, saved);
  const out = opResult(
    y,
    x.shape,
    [x],
    () => {
      const fresh = x.freshGrad(); // u = a linear's output: its only gradient is this one
      geluBackward(X, saved, out.grad!, fresh ?? x.gradBuffer(), fresh !== undefined);
    },
    [saved],
  );
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
  const T = table.data;
  const y = floatsFor(T, n * D); // every row written below (or the op throws)
  for (let t = 0, o = 0; t < n; t++, o += D) {
    const id = ids[t];
    if (!(id >= 0 && id < V))
      throw new RangeError(`embedding: id ${id} at position ${t} is outside the table's ${V} rows`);
    const from = id * D;
    if (D >= 16)
      y.set(T.subarray(from, from + D), o); // a block copy (T and y of one float type)
    else for (let d = 0; d < D; d++) y[o + d] = T[from + d];
  }
  const out = opResult(y, [...idsShape, D], [table], () => {
    const dy = out.grad!;
    const dt = table.gradBuffer();
    if (scatterAddRowsWasm(dy, ids, dt, D)) return; // float32: WASM SIMD, the same sums in the same order
    for (let t = 0, o = 0; t < n; t++, o += D) {
      const to = ids[t] * D;
      for (let d = 0; d < D; d++) dt[to + d] += dy[o + d];
    }
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
  const X = x.data;
  const N = W === 0 ? 0 : X.length / W;
  const outs: Var[] = [];
  let start = 0;
  for (const w of widths) {
    const from = start;
    const y = floatsLike(X, N * w);
    // Row n of the piece is x[n, from : from + w]: a memcpy per row (TypedArray.set) once rows are long
    // enough to pay for the subarray view, a copy loop below that.
    if (w >= 64) for (let n = 0, src = from; n < N; n++, src += W) y.set(X.subarray(src, src + w), n * w);
    else
      for (let n = 0, src = from, dst = 0; n < N; n++, src += W, dst += w)
        for (let c = 0; c < w; c++) y[dst + c] = X[src + c];
    const out: Var = opResult(y, [...x.shape.slice(0, -1), w], [x], () => {
      const dy = out.grad!;
      const dx = x.gradBuffer();
      for (let n = 0, dst = from, src = 0; n < N; n++, dst += W, src += w)
        for (let c = 0; c < w; c++) dx[dst + c] += dy[src + c];
    });
    outs.push(out);
    start += w;
  }
  return outs;
}

/**
 * Rotary position embedding (RoPE, rotate-half as position/rope.ts's applyRope) on x [B, L, H·E] without
 * splitting heads: in every head, feature d and d + E/2 turn by (offset + i)·base^(−2d/E) at row i (the
 * queries or keys of positions offset … offset + L − 1). The rotation is orthogonal, so the backward turns
 * ∂y by the opposite angle. Saves nothing: the cos/sin table is shared per (E, base).
 */
export function rope(x: Var, numHeads: number, headDim: number, offset = 0, base = 10000): Var {
  const L = checkRopeArgs('rope', x.shape, numHeads, headDim, offset, base);
  const { cos, sin } = ropeTable(L, headDim, offset, base);
  const X = x.data;
  const y = floatsLike(X, X.length);
  rotateHalfHeads(X, y, L, numHeads, headDim, cos, sin);
  const out = opResult(y, x.shape, [x], () =>
    rotateHalfHeads(out.grad!, x.gradBuffer(), L, numHeads, headDim, cos, sin, true),
  );
  return out;
}

/**
 * The uniforms dropout draws at a time (Generator.fillRandom), 32 KB made once per thread at import: every
 * call overwrites what it reads before reading it, and nothing in a call runs another dropout, so sharing
 * it is safe and no call allocates for its draws.
 */
const DROPOUT_UNIFORMS = new Float64Array(4096);

/**
 * Inverted dropout: zeroes each element with probability p and scales the rest by 1/(1 − p), drawing from
 * `generator` (so a seed fixes the masks). The identity when p = 0. Saves one byte per element (kept or
 * not), and nothing under noGrad (the draws are still made, so the generator advances the same).
 */
export function dropout(x: Var, p: number, generator: Generator): Var {
  if (!(p >= 0 && p < 1)) throw new RangeError(`dropout: p must be in [0, 1), got ${p}`);
  if (p === 0) return x;
  const scaleKept = 1 / (1 - p);
  const X = x.data;
  const n = X.length;
  const kept = needsGrad([x]) ? new Uint8Array(n) : undefined; // 1 = kept, for the tape only
  const y = floatsLike(X, n);
  // Element i takes the i-th uniform, drawn in blocks (Generator.fillRandom: random()'s numbers, in order).
  const u = DROPOUT_UNIFORMS;
  for (let i0 = 0; i0 < n; i0 += u.length) {
    const m = Math.min(u.length, n - i0);
    generator.fillRandom(m === u.length ? u : u.subarray(0, m));
    if (kept) {
      for (let j = 0; j < m; j++) {
        const i = i0 + j;
        if (u[j] < p) {
          y[i] = X[i] * 0; // NaN and ∞ stay NaN, as the plain product
        } else {
          kept[i] = 1;
          y[i] = X[i] * scaleKept;
        }
      }
    } else {
      for (let j = 0; j < m; j++) y[i0 + j] = X[i0 + j] * (u[j] < p ? 0 : scaleKept);
    }
  }
  const out = opResult(y, x.shape, [x], () => {
    const dy = out.grad!;
    const dx = x.gradBuffer();
    const k = kept!;
    for (let i = 0; i < n; i++) dx[i] += dy[i] * (k[i] ? scaleKept : 0);
  });
  return out;
}

/**
 * Mean softmax cross-entropy of logits [N, C] against class ids [N]; rows whose target is `ignoreIndex`
 * (default −1) are left out of the mean (as PyTorch's ignore_index). Returns a scalar Var (shape []).
 * Saves each row's log-sum-exp (as its max and Σ exp(x − max), 16 bytes a row), never the [N, C]
 * softmax: backward recomputes softmax = exp(x − max) / Σ row by row from the logits. Float64 logits get
 * Math.exp and g·(e/Σ − onehot) exactly (gradient checks); float32 logits fastExp and e·(g/Σ), a few
 * float64 ulps off before the rounding to float32, which almost never moves that rounding.
 */
export function crossEntropy(logits: Var, targets: Int32Array, ignoreIndex = -1): Var {
  const C = logits.shape[logits.shape.length - 1];
  if (logits.shape.length === 0 || !(C >= 1)) {
    throw new RangeError(
      `crossEntropy: logits ${fmt(logits.shape)} must be [..., C] with at least one class`,
    );
  }
  // Targets are int32: an ignoreIndex that is not one could never match a target (and the WASM loop would
  // read it as a different int32), so it is refused, as PyTorch's ignore_index is an int.
  if (!(Number.isInteger(ignoreIndex) && ignoreIndex >= -(2 ** 31) && ignoreIndex < 2 ** 31)) {
    throw new RangeError(`crossEntropy: ignoreIndex must be an int32, got ${ignoreIndex}`);
  }
  const N = logits.size / C;
  if (targets.length !== N) {
    throw new RangeError(
      `crossEntropy: logits ${fmt(logits.shape)} have ${N} rows but targets have ${targets.length}`,
    );
  }
  const X = logits.data;
  const exact = X instanceof Float64Array;
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
  }
  // Float32 logits: WASM SIMD (kernels/ops-wasm.ts: float32 exps, each within about 1e-6 relative,
  // summed in float64); float64 logits (gradient checks), or no WASM: the loop below.
  const viaWasm = exact ? undefined : crossEntropyWasm(X, N, C, targets, ignoreIndex, stats);
  if (viaWasm !== undefined) {
    total = viaWasm;
    for (let n = 0; n < N; n++) if (targets[n] !== ignoreIndex) count++;
  }
  for (let n = 0; n < N && viaWasm === undefined; n++) {
    const t = targets[n];
    if (t === ignoreIndex) continue;
    const o = n * C;
    const end = o + C;
    let max = Number.NEGATIVE_INFINITY;
    for (let i = o; i < end; i++) max = Math.max(max, X[i]);
    let sum = 0;
    if (exact) for (let i = o; i < end; i++) sum += Math.exp(X[i] - max);
    else for (let i = o; i < end; i++) sum += fastExp(X[i] - max);
    if (stats) {
      stats[2 * n] = max;
      stats[2 * n + 1] = sum;
    }
    total += max - X[o + t] + Math.log(sum); // −log softmax_t: max − x_t first, or a huge max swallows log Σ
    count++;
  }
  const loss = floatsLike(X, 1);
  loss[0] = count ? total / count : 0;
  // The backward reads the targets the forward checked: the caller may reuse its array meanwhile (a
  // target changed to 10^6 would have been written past its row, in WASM memory too).
  const kept = stats ? targets.slice() : targets;
  const out = opResult(loss, [], [logits], () => {
    if (!count) return;
    const s = stats!;
    const g = out.grad![0] / count;
    const dx = logits.gradBuffer();
    if (!exact && crossEntropyBackwardWasm(X, dx, N, C, kept, ignoreIndex, s, g)) return;
    for (let n = 0; n < N; n++) {
      const t = kept[n];
      if (t === ignoreIndex) continue;
      const o = n * C;
      const end = o + C;
      const target = o + t;
      const max = s[2 * n];
      const sum = s[2 * n + 1];
      // g·(softmax − onehot): the target's element apart, so the sweeps carry no compare.
      if (exact) {
        for (let i = o; i < target; i++) dx[i] += g * (Math.exp(X[i] - max) / sum);
        for (let i = target + 1; i < end; i++) dx[i] += g * (Math.exp(X[i] - max) / sum);
        dx[target] += g * (Math.exp(X[target] - max) / sum - 1);
      } else {
        const k = g / sum; // one division a row: float32 grads do not see the last float64 bit
        for (let i = o; i < target; i++) dx[i] += fastExp(X[i] - max) * k;
        for (let i = target + 1; i < end; i++) dx[i] += fastExp(X[i] - max) * k;
        dx[target] += g * (fastExp(X[target] - max) / sum - 1);
      }
    }
  });
  return out;
}
