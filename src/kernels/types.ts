// The private contract between the public attention layer and the kernels that compute it.
// One decision to know: the public layer resolves every option (ranks, GQA, broadcasting, causal
// alignment, windows) into this flat problem, so a kernel only loops; it never validates user input.

import { halfToFloat32 } from '../float16.js';
import type { FlexSpec } from './flex.js';

/** A mask or bias read through broadcast strides: element (b, h, i, j) is data[b*sb + h*sh + i*sl + j*ss]. */
export interface BroadcastView {
  data: Float32Array;
  sb: number;
  sh: number;
  sl: number;
  ss: number;
}

/**
 * One attention call, flattened to rank 4. Shape letters: B batch, Hq query heads, Hkv key/value heads,
 * L queries, S keys, E query/key width, Ev value width.
 *
 * Key j is visible to query i iff p − left ≤ j ≤ p + right with p = i + shift, and mask(b,h,i,j) ≠ 0.
 * `left`/`right` are Infinity when unbounded; causal attention is right = min(right, 0).
 */
export interface AttentionProblem {
  B: number;
  Hq: number;
  Hkv: number;
  L: number;
  S: number;
  E: number;
  Ev: number;
  /** [B, Hq, L, E] */
  q: Float32Array;
  /** [B, Hkv, S, E] */
  k: Float32Array;
  /** [B, Hkv, S, Ev]; empty when only weights are asked for. Stored as `kv` says when it is given. */
  v: Float32Array;
  /**
   * How k and v (and a backward's dk, dv) are stored when not densely as [B, Hkv, S, ·]: a KV cache's
   * storage or a paged pool. Only kvRow/kvRun (visibility.ts) read it; absent = dense.
   */
  kv?: KvLayout;
  scale: number;
  /** Nonzero = may attend. */
  mask?: BroadcastView;
  /** Added to the scaled scores. */
  bias?: BroadcastView;
  /**
   * Flex attention (flexAttention): a block mask, a mask mod and a score mod on top of the rules above
   * (the score mod sees the scaled score plus bias). See kernels/flex.ts.
   */
  flex?: FlexSpec;
  /**
   * Float16 inputs as binary16 bits (same shapes as q, k, v). When present, q, k and v are empty and
   * only kernels with `float16: true` read these; runKernel widens them for the others.
   */
  half?: { q: Uint16Array; k: Uint16Array; v: Uint16Array };
  /** Absolute position of query i is i + shift: S − L for bottom-right alignment, 0 for top-left. */
  shift: number;
  left: number;
  right: number;
  /**
   * The arithmetic the caller needs for scores, softmax and log-sum-exp: 'float64' (exact to float64,
   * as the reference: gradient checks and attentionBackward) or 'float32' (float32 scores are enough;
   * the WASM kernel may serve). Stated here, never implied by an output buffer's type.
   */
  precision: Precision;
}

/**
 * Where key j of key/value head (b, hk) is stored (a row of E numbers in k, of Ev in v), for storage that
 * is not dense [B, Hkv, S, ·]. Plain data (numbers and an Int32Array), so a problem still crosses threads.
 * - 'strided': storage [B, Hkv, stride, ·] with key j at slot (start + j) mod stride of its head: a KV
 *   cache's preallocated rows (start 0), or a ring buffer that wrapped (start = the oldest key's slot).
 * - 'paged': a pool [numBlocks, Hkv, blockSize, ·]; key j of batch item b is in physical block
 *   blockTable[b·tableStride + ⌊j / blockSize⌋], row j mod blockSize of its head.
 */
export type KvLayout =
  | { kind: 'strided'; stride: number; start: number }
  | { kind: 'paged'; blockSize: number; blockTable: Int32Array; tableStride: number };

/** See AttentionProblem.precision. */
export type Precision = 'float32' | 'float64';

/** Float storage the backward reads and writes: float32 for training, float64 for gradient checks. */
export type Floats = Float32Array | Float64Array;

/** Whether two arrays share bytes (an output over an input, or two outputs over each other). */
export function overlaps(x: Floats, y: Floats): boolean {
  return (
    x.buffer === y.buffer &&
    x.byteOffset < y.byteOffset + y.byteLength &&
    y.byteOffset < x.byteOffset + x.byteLength
  );
}

/** An AttentionProblem whose q, k and v may be float64 (backward kernels only index them). */
export type BackwardProblem = Omit<AttentionProblem, 'q' | 'k' | 'v' | 'half'> & {
  q: Floats;
  k: Floats;
  v: Floats;
};

/** What a backward kernel reads besides the problem. */
export interface BackwardInputs {
  /** [B, Hq, L, Ev]: the gradient of the loss with respect to the attention output. */
  dOut: Floats;
  /** [B, Hq, L, Ev]: the forward output (the flash backward needs it for D = rowsum(dO∘O)). */
  out?: Floats;
  /** [B, Hq, L]: the forward's log-sum-exp per row (−Infinity for a fully blocked row). */
  lse?: Floats;
}

/**
 * What a backward kernel writes. dq, dk and dv are overwritten: a task writes exactly the rows of its
 * key/value head and of the query heads that share it (dk and dv are stored like k and v, through kvRow
 * when the problem has a `kv` layout, whose rows must then belong to one key/value head each). dbias is
 * accumulated (+=): tasks of different heads may share a broadcast bias element, so a parallel runner
 * gives each thread its own and sums.
 */
export interface AttentionGrads {
  /** [B, Hq, L, E] */
  dq: Floats;
  /** [B, Hkv, S, E]: summed over the Hq/Hkv query heads that share each key head (GQA). */
  dk: Floats;
  /** [B, Hkv, S, Ev]: summed likewise. */
  dv: Floats;
  /** Same length as problem.bias.data: ∂loss/∂bias, summed over the axes the bias was broadcast along. */
  dbias?: Floats;
}

/**
 * A kernel's backward pass, split into independent tasks: task `bkv` = b·Hkv + hk computes dk and dv of
 * key/value head (b, hk) and dq of the query heads that share it (PyTorch's enable_gqa grouping), so
 * B·Hkv tasks write disjoint rows and a pool can run them on any threads.
 */
export interface AttentionBackward {
  /**
   * It recomputes the probabilities from the forward's output and log-sum-exp (FlashAttention-2), so a
   * caller that may choose it runs the forward first and passes `out` and `lse`; absent (the reference)
   * when it recomputes the softmax from the problem alone.
   */
  readonly needsForward?: boolean;
  /** true, or why this backward cannot serve the call (e.g. it needs the forward's out and lse). */
  supports(problem: BackwardProblem, inputs: BackwardInputs): true | string;
  task(problem: BackwardProblem, inputs: BackwardInputs, grads: AttentionGrads, bkv: number): void;
}

/** What a kernel writes. Each buffer is optional: a kernel fills exactly the ones given. */
export interface AttentionOutputs {
  /** [B, Hq, L, Ev] */
  out?: Float32Array;
  /** [B, Hq, L, S] softmax probabilities. */
  weights?: Float32Array;
  /** [B, Hq, L] log-sum-exp of each row's visible scores (−Infinity for a fully blocked row). */
  lse?: Float32Array | Float64Array;
}

/**
 * A compute kernel. `supports` returns true, or a reason it cannot serve the call. `forwardRows` computes
 * query rows [i0, i1) of one (batch, head) pair `bh` = b·Hq + h and writes only their slices of the
 * outputs, so a worker pool can split a call into independent tasks, and every element of those slices
 * (zeros for a row that sees no key), so the pool's reused buffer is not zeroed before a call.
 */
export interface AttentionKernel {
  readonly name: string;
  /** Reads `problem.half` directly (converting block by block) instead of needing float32 copies. */
  readonly float16?: boolean;
  supports(problem: AttentionProblem, outputs: AttentionOutputs): true | string;
  forwardRows(problem: AttentionProblem, outputs: AttentionOutputs, bh: number, i0: number, i1: number): void;
  /** The kernel's backward pass, where it has one (the registry's chain picks the next one otherwise). */
  readonly backward?: AttentionBackward;
  /** Called once a call's rows are all done: a kernel may free what it kept for the call. */
  release?(): void;
}

/** The problem with float32 q, k, v: itself, or a copy with its float16 inputs widened. */
export function float32Problem(p: AttentionProblem): AttentionProblem {
  if (!p.half) return p;
  return {
    ...p,
    q: halfToFloat32(p.half.q),
    k: halfToFloat32(p.half.k),
    v: halfToFloat32(p.half.v),
    half: undefined,
  };
}

/**
 * Thrown by a kernel that is sound but could not get what it needs at run time (the engine refused
 * memory). 'auto' then serves the rest of the call on the next kernel of its chain; a kernel asked for
 * by name lets it through.
 */
export class KernelResourceError extends Error {
  override name = 'KernelResourceError';
}

/** The problem as `kernel` reads it: float16 inputs stay halves only for kernels that read them. */
export function problemFor(kernel: AttentionKernel, problem: AttentionProblem): AttentionProblem {
  return kernel.float16 ? problem : float32Problem(problem);
}

/**
 * Runs `forwardRows` tasks of one call on `kernel`; if the kernel throws a KernelResourceError and a
 * `fallback` is given, the fallback serves the task that failed and every task after it. The one place
 * the switch is written: forwardAll and the workers' loop both run their tasks through it.
 */
export function rowRunner(
  kernel: AttentionKernel,
  problem: AttentionProblem,
  outputs: AttentionOutputs,
  fallback?: AttentionKernel,
): { run(bh: number, i0: number, i1: number): void; release(): void } {
  let current = kernel;
  let next = fallback;
  let p = problemFor(current, problem);
  return {
    run(bh, i0, i1) {
      try {
        current.forwardRows(p, outputs, bh, i0, i1);
      } catch (err) {
        if (!next || !(err instanceof KernelResourceError)) throw err;
        current.release?.();
        current = next;
        next = undefined;
        p = problemFor(current, problem);
        current.forwardRows(p, outputs, bh, i0, i1);
      }
    },
    release: () => current.release?.(),
  };
}

/** Runs every row of every (batch, head) pair on one kernel (and its fallback, see rowRunner). */
export function forwardAll(
  kernel: AttentionKernel,
  problem: AttentionProblem,
  outputs: AttentionOutputs,
  fallback?: AttentionKernel,
): void {
  // No query rows, nothing to write (and B·Hq may be huge when every tensor is empty: [2^40, H, 0, E]).
  if (problem.L === 0) return;
  const runner = rowRunner(kernel, problem, outputs, fallback);
  for (let bh = 0; bh < problem.B * problem.Hq; bh++) runner.run(bh, 0, problem.L);
  runner.release();
}

/** Runs every backward task of a call on one kernel: tasks 0 … B·Hkv − 1 (see AttentionBackward). */
export function backwardAll(
  backward: AttentionBackward,
  problem: BackwardProblem,
  inputs: BackwardInputs,
  grads: AttentionGrads,
): void {
  // No query rows or no keys: every gradient term is a product over both, so nothing to add.
  if (problem.L === 0 || problem.S === 0) return;
  // dbias is summed in float64 whatever its storage (it gathers a term per query row and head).
  const dbias = grads.dbias && new Float64Array(grads.dbias.length);
  const sums = { ...grads, dbias };
  for (let bkv = 0; bkv < problem.B * problem.Hkv; bkv++) backward.task(problem, inputs, sums, bkv);
  if (grads.dbias && dbias) grads.dbias.set(dbias);
}
