// Dense products for the projections around attention (compute only; callers check shapes).
// One decision to know: accumulation is in float64 (a JS number), so results match PyTorch's float64
// goldens to float32 rounding, at the price of speed that the attention kernels, not these, must win.

/**
 * y[N, M] = x[N, K] · W[M, K]ᵀ (+ b[M]): PyTorch's Linear layout. `wRow` is the first row of W to use,
 * so a packed in_proj_weight [3E, K] can be read without copying.
 */
export function linear(
  x: Float32Array,
  N: number,
  K: number,
  W: Float32Array,
  wRow: number,
  M: number,
  b?: Float32Array,
  bOffset = 0,
): Float32Array {
  const y = new Float32Array(N * M);
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

/** c[N, M] = a[N, K] · b[K, M]: the article's x·W layout. */
export function matmul(a: Float32Array, N: number, K: number, b: Float32Array, M: number): Float32Array {
  const c = new Float32Array(N * M);
  const acc = new Float64Array(M);
  for (let n = 0; n < N; n++) {
    acc.fill(0);
    for (let k = 0; k < K; k++) {
      const aik = a[n * K + k];
      const bBase = k * M;
      for (let m = 0; m < M; m++) acc[m] += aik * b[bBase + m];
    }
    c.set(acc, n * M);
  }
  return c;
}

/**
 * [A, B, C, D] → [A, C, B, D]: swaps the two middle axes (e.g. [B, L, H, hd] ↔ [B, H, L, hd]). The
 * result has the input's array type (float32, or float64 in gradient checks).
 */
export function swapMiddle<T extends Float32Array | Float64Array>(
  x: T,
  A: number,
  B: number,
  C: number,
  D: number,
): T {
  const y = (x instanceof Float64Array ? new Float64Array(x.length) : new Float32Array(x.length)) as T;
  for (let a = 0; a < A; a++)
    for (let b = 0; b < B; b++)
      for (let c = 0; c < C; c++) {
        const from = ((a * B + b) * C + c) * D;
        const to = ((a * C + c) * B + b) * D;
        for (let d = 0; d < D; d++) y[to + d] = x[from + d];
      }
  return y;
}
