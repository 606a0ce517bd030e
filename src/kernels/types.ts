// The private contract between the public attention layer and the kernels that compute it.
// One decision to know: the public layer resolves every option (ranks, GQA, broadcasting, causal
// alignment, windows) into this flat problem, so a kernel only loops; it never validates user input.

import { halfToFloat32 } from '../float16.js';

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
  /** [B, Hkv, S, Ev]; empty when only weights are asked for. */
  v: Float32Array;
  scale: number;
  /** Nonzero = may attend. */
  mask?: BroadcastView;
  /** Added to the scaled scores. */
  bias?: BroadcastView;
  /**
   * Float16 inputs as binary16 bits (same shapes as q, k, v). When present, q, k and v are empty and
   * only kernels with `float16: true` read these; runKernel widens them for the others.
   */
  half?: { q: Uint16Array; k: Uint16Array; v: Uint16Array };
  /** Absolute position of query i is i + shift: S − L for bottom-right alignment, 0 for top-left. */
  shift: number;
  left: number;
  right: number;
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
 * outputs, so a worker pool can split a call into independent tasks.
 */
export interface AttentionKernel {
  readonly name: string;
  /** Reads `problem.half` directly (converting block by block) instead of needing float32 copies. */
  readonly float16?: boolean;
  supports(problem: AttentionProblem, outputs: AttentionOutputs): true | string;
  forwardRows(problem: AttentionProblem, outputs: AttentionOutputs, bh: number, i0: number, i1: number): void;
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
 * Runs every row of every (batch, head) pair on one kernel; if it throws a KernelResourceError and a
 * `fallback` is given, the fallback serves the pair that failed and every pair after it.
 */
export function forwardAll(
  kernel: AttentionKernel,
  problem: AttentionProblem,
  outputs: AttentionOutputs,
  fallback?: AttentionKernel,
): void {
  const pairs = problem.B * problem.Hq;
  let p = problemFor(kernel, problem);
  for (let bh = 0; bh < pairs; bh++) {
    try {
      kernel.forwardRows(p, outputs, bh, 0, problem.L);
    } catch (err) {
      if (!fallback || !(err instanceof KernelResourceError)) throw err;
      kernel.release?.();
      kernel = fallback;
      fallback = undefined;
      p = problemFor(kernel, problem);
      kernel.forwardRows(p, outputs, bh, 0, problem.L);
    }
  }
  kernel.release?.();
}

/** First and last key visible to query i under the causal/window rule (hi < lo when none is). */
export function visibleRange(
  p: Pick<AttentionProblem, 'S' | 'shift' | 'left' | 'right'>,
  i: number,
): [number, number] {
  const pos = i + p.shift;
  return [Math.max(0, pos - p.left), Math.min(p.S - 1, pos + p.right)];
}
