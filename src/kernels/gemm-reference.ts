// The reference GEMM: the spec every faster GEMM kernel is checked against (llm.c's matmul_forward loop).
// One decision to know: every element is summed in float64 (a JS number), in the order C (+ bias) then
// k = 0 … K − 1, with nothing skipped (0·∞ is NaN, as IEEE says), and rounded once into C's type; so it
// serves float64 buffers (gradient checks) and float32 ones alike.

import { batchOffsets, type GemmKernel, type GemmProblem, geluTanh } from './gemm-types.js';
import type { Floats } from './types.js';

/** Serves every problem, at either precision. */
export const referenceGemmKernel: GemmKernel = {
  name: 'reference',
  supports: () => true,
  rows(p: GemmProblem, c: Floats, m0: number, m1: number): void {
    const { M, N, K, a, b, transA, transB, bias } = p;
    const acc = new Float64Array(N); // one row of C
    for (let m = m0; m < m1; m++) {
      const t = Math.floor(m / M); // which product of the batch
      const i = m - t * M; // row of that product
      const off = batchOffsets(p, t);
      const cRow = m * N;
      // C as it is (−0 stays −0, as in the WASM tiles) or 0, then the bias if there is one.
      for (let j = 0; j < N; j++) acc[j] = p.accumulate ? c[cRow + j] : 0;
      if (bias) for (let j = 0; j < N; j++) acc[j] += bias[j];
      for (let k = 0; k < K; k++) {
        const aik = transA ? a[off.a + k * M + i] : a[off.a + i * K + k]; // op(A)[i, k]
        if (transB) {
          for (let j = 0; j < N; j++) acc[j] += aik * b[off.b + j * K + k]; // b [N, K]
        } else {
          const bRow = off.b + k * N;
          for (let j = 0; j < N; j++) acc[j] += aik * b[bRow + j]; // b [K, N]
        }
      }
      if (p.gelu) for (let j = 0; j < N; j++) c[cRow + j] = geluTanh(acc[j]);
      else c.set(acc, cRow);
    }
  },
};
