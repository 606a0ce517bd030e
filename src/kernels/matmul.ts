// Dense products: the one entry point for every matrix product around attention. MultiHeadAttention, the
// block forward (TinyTransformer, the playground's trace) and the autograd's `linear` (forward and both
// backward products) all call these functions, which hand float32 work to the GEMM (gemm.ts: the WASM
// SIMD kernel where it runs). One decision to know: float32 operands get float32 accumulation (as
// PyTorch's float32 Linear); float64 operands (gradient checks) keep the exact float64 loops below.

import { type GemmProblem, gemm } from './gemm.js';
import { colSumsWasm, type LayoutSide, permuteWasm } from './ops-wasm.js';
import type { Floats } from './types.js';

/**
 * Fewest floats for which the layout changes and the bias gradient go to WASM: below it a JS loop costs
 * less than the call (a few µs of copies and bookkeeping).
 */
export const WASM_LAYOUT_MIN = 4096;

const side = (data: Floats, off: number, sa: number, sb: number, sc: number): LayoutSide => ({
  data,
  off,
  strides: [sa, sb, sc],
});

/** swapMiddle as a permuteWasm job over [A, B, C, D]: x [A, B, C, D] → y [A, C, B, D]. */
export const swapMiddleJob = (x: Floats, B: number, C: number, D: number, y: Floats) => ({
  from: side(x, 0, B * C * D, C * D, D),
  to: side(y, 0, C * B * D, D, B * D),
});

/** packedToHeads of one part as a permuteWasm job over [N, L, H, E]. */
export const packedToHeadsJob = (
  x: Floats,
  L: number,
  P: number,
  part: number,
  H: number,
  E: number,
  y: Floats,
) => ({
  from: side(x, part * H * E, L * P * H * E, P * H * E, E),
  to: side(y, 0, H * L * E, E, L * E),
});

/** headsToPackedAccumulate of one part as a permuteWasm job over [N, H, L, E]. */
export const headsToPackedJob = (
  g: Floats,
  L: number,
  P: number,
  part: number,
  H: number,
  E: number,
  dst: Floats,
) => ({
  from: side(g, 0, H * L * E, L * E, E),
  to: side(dst, part * H * E, L * P * H * E, E, P * H * E),
});

const isF32 = (...xs: (Floats | undefined)[]) =>
  xs.every((x) => x === undefined || x instanceof Float32Array);

/**
 * y[N, M] = x[N, K] · W[M, K]ᵀ (+ b[M]): PyTorch's Linear layout. `wRow` is the first row of W to use,
 * so a packed in_proj_weight [3E, K] can be read without copying. y has x's float type; `out`, when
 * given, is y (N·M floats of x's type, written whole).
 */
export function linear<T extends Floats>(
  x: T,
  N: number,
  K: number,
  W: Floats,
  wRow: number,
  M: number,
  b?: Floats,
  bOffset = 0,
  out?: T,
): T {
  const y = out ?? ((x instanceof Float64Array ? new Float64Array(N * M) : new Float32Array(N * M)) as T);
  if (isF32(x, W, b)) {
    return gemm(
      linearProblem(x, N, K, W.subarray(wRow * K, (wRow + M) * K), M, b?.subarray(bOffset, bOffset + M)),
      y,
    );
  }
  for (let n = 0; n < N; n++) {
    const xBase = n * K;
    for (let m = 0; m < M; m++) {
      const wBase = (wRow + m) * K;
      let acc = b ? b[bOffset + m] : 0;
      for (let k = 0; k < K; k++) acc += x[xBase + k] * W[wBase + k];
      y[n * M + m] = acc;
    }
  }
  return y;
}

/**
 * The float32 GEMM call of `linear`: y[N, M] = x[N, K]·W[M, K]ᵀ + b[M] (the pool's GEMM jobs use it too,
 * so a product split over threads is the same product).
 */
export function linearProblem(
  x: Floats,
  N: number,
  K: number,
  W: Floats,
  M: number,
  b?: Floats,
): GemmProblem {
  return { M: N, N: M, K, a: x, b: W, transA: false, transB: true, bias: b, precision: 'float32' };
}

/**
 * dx[N, K] += dy[N, M] · W[M, K]: the input gradient of `linear`. `zeroed`: dx is a gradient buffer just
 * allocated, whose contents count as zeros but may be anything (a reused array): the product is written
 * rather than added (the same floats as adding it to zeros: the GEMM's sums start from +0 either way),
 * and dx is never read.
 */
export function linearGradInput(
  dy: Floats,
  N: number,
  M: number,
  W: Floats,
  K: number,
  dx: Floats,
  zeroed = false,
): void {
  if (isF32(dy, W, dx)) {
    gemm(
      {
        M: N,
        N: K,
        K: M,
        a: dy,
        b: W,
        transA: false,
        transB: false,
        accumulate: !zeroed,
        precision: 'float32',
      },
      dx,
    );
    return;
  }
  if (zeroed) dx.fill(0, 0, N * K); // `zeroed` promises nothing about dx's contents: it is written whole
  const row = new Float64Array(K);
  for (let n = 0; n < N; n++) {
    row.fill(0);
    for (let m = 0; m < M; m++) {
      // No skip of g = 0: 0·NaN and 0·∞ are NaN, as in the float32 GEMM and PyTorch (a NaN padding row
      // of x whose target is ignored makes dW NaN there too).
      const g = dy[n * M + m];
      const wBase = m * K;
      for (let k = 0; k < K; k++) row[k] += g * W[wBase + k];
    }
    const xBase = n * K;
    for (let k = 0; k < K; k++) dx[xBase + k] += row[k];
  }
}

/** dW[M, K] += dy[N, M]ᵀ · x[N, K]: the weight gradient of `linear`. */
export function linearGradWeight(dy: Floats, N: number, M: number, x: Floats, K: number, dW: Floats): void {
  if (isF32(dy, x, dW)) {
    // dW [M, K] = dyᵀ·x: dy [N, M] is read transposed, the sum runs over the N rows.
    gemm(
      { M, N: K, K: N, a: dy, b: x, transA: true, transB: false, accumulate: true, precision: 'float32' },
      dW,
    );
    return;
  }
  for (let n = 0; n < N; n++) {
    const xBase = n * K;
    for (let m = 0; m < M; m++) {
      const g = dy[n * M + m]; // no skip of g = 0 (see linearGradInput)
      const wBase = m * K;
      for (let k = 0; k < K; k++) dW[wBase + k] += g * x[xBase + k];
    }
  }
}

/**
 * db[M] += Σ_n dy[n, M]: the bias gradient of `linear`, summed in float64 row after row (dy is read in
 * storage order, not column by column with a stride of M). Four rows a sweep, each column's sum still
 * taking them in row order, so the float64 sums are the row-by-row ones bit for bit.
 */
export function linearGradBias(dy: Floats, N: number, M: number, db: Floats): void {
  if (N * M >= WASM_LAYOUT_MIN && colSumsWasm(dy, N, M, db)) return; // the same float64 sums, in WASM
  const sums = new Float64Array(M);
  let n = 0;
  for (; n + 4 <= N; n += 4) {
    const r0 = n * M;
    const r1 = r0 + M;
    const r2 = r1 + M;
    const r3 = r2 + M;
    for (let m = 0; m < M; m++) sums[m] = sums[m] + dy[r0 + m] + dy[r1 + m] + dy[r2 + m] + dy[r3 + m];
  }
  for (; n < N; n++) {
    const row = n * M;
    for (let m = 0; m < M; m++) sums[m] += dy[row + m];
  }
  for (let m = 0; m < M; m++) db[m] += sums[m];
}

/** c[N, M] = a[N, K] · b[K, M]: the article's x·W layout (SelfAttention). */
export function matmul(a: Float32Array, N: number, K: number, b: Float32Array, M: number): Float32Array {
  return gemm(
    { M: N, N: M, K, a, b, transA: false, transB: false, precision: 'float32' },
    new Float32Array(N * M),
  );
}

/**
 * [A, B, C, D] → [A, C, B, D]: swaps the two middle axes (e.g. [B, L, H, hd] ↔ [B, H, L, hd]). The
 * result has the input's array type (float32, or float64 in gradient checks); `out`, when given, is it
 * (x's length and type, written whole). x is read in storage order, one D-long run at a time; with B = 1
 * or C = 1 the layout does not change and it is one copy.
 */
export function swapMiddle<T extends Float32Array | Float64Array>(
  x: T,
  A: number,
  B: number,
  C: number,
  D: number,
  out?: T,
): T {
  const y =
    out ?? ((x instanceof Float64Array ? new Float64Array(x.length) : new Float32Array(x.length)) as T);
  if (B === 1 || C === 1) {
    y.set(x);
    return y;
  }
  if (x.length === 0) return y; // nothing to move (A may be 2^40 with B, C or D 0)
  const step = B * D; // from one c to the next in y
  if (x.length >= WASM_LAYOUT_MIN && permuteWasm([swapMiddleJob(x, B, C, D, y)], [A, B, C, D], false)) {
    return y;
  }
  let from = 0;
  for (let a = 0; a < A; a++) {
    const base = a * C * step;
    for (let b = 0; b < B; b++) {
      for (let c = 0, to = base + b * D; c < C; c++, to += step, from += D) {
        for (let d = 0; d < D; d++) y[to + d] = x[from + d];
      }
    }
  }
  return y;
}

/**
 * dst += swapMiddle(x, A, B, C, D), without the intermediate array: [A, B, C, D] read in storage order and
 * added into dst [A, C, B, D] (merging heads' gradients into a Var's grad). The same sums, bit for bit, as
 * accumulating the swapped copy.
 */
export function swapMiddleAccumulate(
  x: Float32Array | Float64Array,
  A: number,
  B: number,
  C: number,
  D: number,
  dst: Float32Array | Float64Array,
): void {
  if (B === 1 || C === 1) {
    const n = x.length;
    for (let i = 0; i < n; i++) dst[i] += x[i];
    return;
  }
  if (x.length === 0) return;
  const step = B * D;
  if (x.length >= WASM_LAYOUT_MIN && permuteWasm([swapMiddleJob(x, B, C, D, dst)], [A, B, C, D], true)) {
    return;
  }
  let from = 0;
  for (let a = 0; a < A; a++) {
    const base = a * C * step;
    for (let b = 0; b < B; b++) {
      for (let c = 0, to = base + b * D; c < C; c++, to += step, from += D) {
        for (let d = 0; d < D; d++) dst[to + d] += x[from + d];
      }
    }
  }
}

/** RoPE's cos and sin [L, E/2] (position/rope.ts ropeTable) for a head split that also rotates. */
export interface HeadRotation {
  cos: Float64Array;
  sin: Float64Array;
}

/**
 * One part of packed projections x [N, L, P·H·E] (per row, P parts of H heads of E features: e.g. q | k |
 * v), split into heads [N, H, L, E] in x's array type: swapMiddle of that part, in one pass over it. With
 * `rotate`, each head is also turned by rotate-half RoPE at its row's position (rotateHalfHeads' formula
 * and float64 products), so the result is bit for bit splitLast, then rope, then swapMiddle. `out`, when
 * given, is the result (N·H·L·E floats of x's type, written whole).
 */
export function packedToHeads<T extends Float32Array | Float64Array>(
  x: T,
  N: number,
  L: number,
  P: number,
  part: number,
  H: number,
  E: number,
  rotate?: HeadRotation,
  out?: T,
): T {
  const y =
    out ??
    ((x instanceof Float64Array ? new Float64Array(N * H * L * E) : new Float32Array(N * H * L * E)) as T);
  if (y.length === 0) return y; // no rows (N may be 2^40 with L 0)
  const W = H * E;
  const row = P * W;
  const half = E / 2;
  if (
    !rotate &&
    y.length >= WASM_LAYOUT_MIN &&
    permuteWasm([packedToHeadsJob(x, L, P, part, H, E, y)], [N, L, H, E], false)
  ) {
    return y;
  }
  for (let n = 0; n < N; n++) {
    for (let i = 0; i < L; i++) {
      const src = (n * L + i) * row + part * W;
      const t = i * half;
      for (let h = 0; h < H; h++) {
        const from = src + h * E;
        const to = ((n * H + h) * L + i) * E;
        if (!rotate) {
          for (let d = 0; d < E; d++) y[to + d] = x[from + d];
          continue;
        }
        const { cos, sin } = rotate;
        for (let d = 0; d < half; d++) {
          const a = x[from + d];
          const b = x[from + d + half];
          const c = cos[t + d];
          const s = sin[t + d];
          y[to + d] = a * c - b * s;
          y[to + d + half] = b * c + a * s;
        }
      }
    }
  }
  return y;
}

/**
 * packedToHeads of parts 0 … outs.length − 1 of x at once, none rotated: outs[p] gets part p (N·H·L·E
 * floats of x's type each, written whole). Where WASM serves, the packed rows are staged once for all
 * the parts; the result is packedToHeads' for each part, bit for bit.
 */
export function packedToHeadsParts<T extends Float32Array | Float64Array>(
  x: T,
  N: number,
  L: number,
  P: number,
  H: number,
  E: number,
  outs: readonly T[],
): void {
  const jobs = outs.map((y, part) => packedToHeadsJob(x, L, P, part, H, E, y));
  if (N * L * H * E >= WASM_LAYOUT_MIN && permuteWasm(jobs, [N, L, H, E], false)) return;
  outs.forEach((y, part) => {
    packedToHeads(x, N, L, P, part, H, E, undefined, y);
  });
}

/**
 * headsToPackedAccumulate of gs[p] into part p of dst for p = 0 … gs.length − 1, none rotated. Where WASM
 * serves, dst's rows are staged once for all the parts; the sums are the single calls' bit for bit.
 */
export function headsToPackedAccumulateParts(
  gs: readonly (Float32Array | Float64Array)[],
  N: number,
  L: number,
  P: number,
  H: number,
  E: number,
  dst: Float32Array | Float64Array,
): void {
  const jobs = gs.map((g, part) => headsToPackedJob(g, L, P, part, H, E, dst));
  if (N * L * H * E >= WASM_LAYOUT_MIN && permuteWasm(jobs, [N, H, L, E], true)) return;
  gs.forEach((g, part) => {
    headsToPackedAccumulate(g, N, L, P, part, H, E, dst);
  });
}

/**
 * The backward of packedToHeads: dst [N, L, P·H·E] (the packed projections' grad) += g [N, H, L, E]
 * merged back into part `part`, turned back by −angle first with `rotate` (each turned value rounded to
 * dst's type before it is added, as the unfused ops' intermediate grads round it). Bit for bit what
 * swapMiddleAccumulate, rope's backward and splitLast's backward add, when dst's part was all zeros or the
 * same sums follow.
 */
export function headsToPackedAccumulate(
  g: Float32Array | Float64Array,
  N: number,
  L: number,
  P: number,
  part: number,
  H: number,
  E: number,
  dst: Float32Array | Float64Array,
  rotate?: HeadRotation,
): void {
  const W = H * E;
  const row = P * W;
  const half = E / 2;
  const round = dst instanceof Float32Array;
  if (
    !rotate &&
    g.length >= WASM_LAYOUT_MIN &&
    permuteWasm([headsToPackedJob(g, L, P, part, H, E, dst)], [N, H, L, E], true)
  ) {
    return;
  }
  for (let n = 0; n < N; n++) {
    for (let h = 0; h < H; h++) {
      for (let i = 0; i < L; i++) {
        const from = ((n * H + h) * L + i) * E;
        const to = (n * L + i) * row + part * W + h * E;
        if (!rotate) {
          for (let d = 0; d < E; d++) dst[to + d] += g[from + d];
          continue;
        }
        const { cos, sin } = rotate;
        const t = i * half;
        for (let d = 0; d < half; d++) {
          const a = g[from + d];
          const b = g[from + d + half];
          const c = cos[t + d];
          const s = sin[t + d];
          const ra = a * c + b * s;
          const rb = b * c - a * s;
          dst[to + d] += round ? Math.fround(ra) : ra;
          dst[to + d + half] += round ? Math.fround(rb) : rb;
        }
      }
    }
  }
}
