// The GEMM contract: one flat problem (BLAS's sgemm with PyTorch's layouts) and the kernel interface every
// GEMM backend implements. One decision to know: kernels only loop; the caller (the `linear` entry point
// and the autograd) checks shapes and states the precision it needs, never implied by a buffer's type.
// A leaf module, so the kernels (gemm-reference.ts, gemm-wasm.ts) and the chain (gemm.ts) import it.

import type { Floats, Precision } from './types.js';

/**
 * C[M, N] = op(A)·op(B) (+ bias over N) (+ C when accumulating), optionally through GELU; op is the
 * identity or the transpose. Every array is row-major and dense. The four products a Linear layer needs:
 *
 * | product                 | a          | b           | transA | transB | extras                   |
 * | ----------------------- | ---------- | ----------- | ------ | ------ | ------------------------ |
 * | y = x·Wᵀ + b (forward)  | x [M, K]   | W [N, K]    | false  | true   | bias                     |
 * | y = a·b                 | a [M, K]   | b [K, N]    | false  | false  |                          |
 * | dX = dY·W               | dY [M, K]  | W [K, N]    | false  | false  | accumulate into dX       |
 * | dW += dYᵀ·X             | dY [K, M]  | X [K, N]    | true   | false  | accumulate into dW       |
 */
export interface GemmProblem {
  /** Rows of C and of op(A). */
  M: number;
  /** Columns of C and of op(B). */
  N: number;
  /** The summed axis: columns of op(A), rows of op(B). 0 gives C = bias (+ C). */
  K: number;
  /** op(A) [M, K]: a is [M, K], or [K, M] when transA. */
  a: Floats;
  /** op(B) [K, N]: b is [K, N], or [N, K] when transB (a Linear weight [out, in], read as Wᵀ). */
  b: Floats;
  transA: boolean;
  transB: boolean;
  /** [N], added to every row of C. */
  bias?: Floats;
  /** C += … rather than C = … (gradients accumulate into an existing buffer). */
  accumulate?: boolean;
  /** C = gelu(…), GELU's tanh form exactly as the autograd's `gelu`, applied last (after bias and C). */
  gelu?: boolean;
  /**
   * Independent products stacked on a leading axis (default 1): product t reads a at t·strideA and b at
   * t·strideB (defaults: their matrix sizes; strideB 0 shares one B, e.g. a weight) and writes C's rows
   * t·M … t·M + M − 1 of the stacked C [batch·M, N]. The bias is shared.
   */
  batch?: number;
  strideA?: number;
  strideB?: number;
  /**
   * 'float64': exact to float64 accumulation (gradient checks with float64 buffers; only the reference
   * kernel serves it); 'float32': float32 accumulation is enough, so the WASM kernel may serve.
   */
  precision: Precision;
}

/**
 * A GEMM backend. `rows` computes rows [m0, m1) of the stacked C [batch·M, N] and writes only those (a
 * pool splits a call by rows). C may be float32 or float64 storage whatever the precision: a 'float32'
 * call into a float64 C (a float64 gradient buffer) computes in float32, C's old values included. A kernel that throws KernelResourceError (the engine refused it memory)
 * has written nothing of C, so 'auto' can give the same rows to the next kernel, even when accumulating.
 */
export interface GemmKernel {
  readonly name: string;
  supports(problem: GemmProblem): true | string;
  rows(problem: GemmProblem, c: Floats, m0: number, m1: number): void;
  /** Called once a call's rows are all done: a kernel may free what it kept for the call. */
  release?(): void;
}

/** How product t of a batch is laid out: element offsets of its A, B and C. */
export function batchOffsets(p: GemmProblem, t: number): { a: number; b: number; c: number } {
  return {
    a: t * (p.strideA ?? p.M * p.K),
    b: t * (p.strideB ?? p.K * p.N),
    c: t * p.M * p.N,
  };
}

const GELU_C = Math.sqrt(2 / Math.PI);

/** GELU, tanh form, written exactly as src/autograd/ops.ts's `gelu` computes it (float64). */
export function geluTanh(v: number): number {
  return 0.5 * v * (1 + Math.tanh(GELU_C * (v + 0.044715 * v * v * v)));
}
