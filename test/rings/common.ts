// What the test rings share: the precisions a kernel serves, the tolerance each is held to, the arrays
// each runs on, and which other kernel really computed an output (the WASM kernel hands its weights on).
// One decision to know: a kernel is driven directly (its own object, not the `kernel` option), at every
// precision its `supports` accepts, so a test named after a kernel has run that kernel and nothing else.

import { planAttention } from '../../src/attention/plan.js';
import { Tensor } from '../../src/index.js';
import { type kernelOps, registeredKernels } from '../../src/kernels/registry.js';
import {
  type AttentionKernel,
  type AttentionOutputs,
  type AttentionProblem,
  type BackwardProblem,
  type Floats,
  forwardAll,
  type Precision,
} from '../../src/kernels/types.js';
import type { Tolerance } from '../helpers.js';

/** The operations the registry lists for a kernel: 'attention.forward', 'attention.backward'. */
export type Op = ReturnType<typeof kernelOps>[number];

/** Strictest first: a kernel that serves float64 is held to the float64 tolerance there. */
export const PRECISIONS: readonly Precision[] = ['float64', 'float32'];

/** What a ring reports for one kernel: how many comparisons it made and which failed (each names the kernel). */
export interface RingReport {
  checks: number;
  failures: string[];
}

export function emptyReport(): RingReport {
  return { checks: 0, failures: [] };
}

export function addReport(into: RingReport, from: RingReport): RingReport {
  into.checks += from.checks;
  into.failures.push(...from.failures);
  return into;
}

/**
 * The tolerance a kernel is held to at a precision (README, "Precision"). A float64 request: 1e-5 + 1e-4·|x|
 * whatever the logits. A float32 request: the same for scores of ordinary size; float32 rounding grows
 * with |score|·2⁻²⁴, so for large logits (the conformance draws with q of std 30, scores ~100) it is
 * 1e-4 + 1e-3·|x|.
 */
export function tolerance(precision: Precision, logits = 1): Tolerance {
  return precision === 'float32' && logits > 3 ? { atol: 1e-4, rtol: 1e-3 } : { atol: 1e-5, rtol: 1e-4 };
}

/**
 * The arrays a request at `precision` runs on: Float64Array for float64 (as gradient checks and float64
 * Vars do), Float32Array for float32 (as training and the public forward do). Kernels only index their
 * arrays, so float64 ones serve where the forward contract says Float32Array (autograd/attention.ts).
 */
export function floats(precision: Precision, data: ArrayLike<number> | number): Floats {
  const Ctor = precision === 'float64' ? Float64Array : Float32Array;
  return typeof data === 'number' ? new Ctor(data) : Ctor.from(data);
}

/** The problem at `precision`, on arrays of that precision. */
export function problemAt(
  problem: AttentionProblem,
  precision: Precision,
): AttentionProblem & BackwardProblem {
  const { q, k, v } = problem;
  return {
    ...problem,
    q: floats(precision, q) as Float32Array,
    k: floats(precision, k) as Float32Array,
    v: floats(precision, v) as Float32Array,
    precision,
  };
}

/** `floats` typed as the forward contract's output buffer (see `floats` on why float64 serves). */
export function outBuffer(precision: Precision, length: number): Float32Array {
  return floats(precision, length) as Float32Array;
}

/**
 * Runs `run` and returns the names of the other registered kernels whose forwardRows ran meanwhile: the
 * kernels `kernel` handed work to (the WASM kernel computes out and lse itself, its weights via flash).
 */
export function delegatesDuring(kernel: AttentionKernel, run: () => void): string[] {
  const seen = new Set<string>();
  const restore: (() => void)[] = [];
  for (const other of registeredKernels()) {
    if (other === kernel || other.name === kernel.name) continue;
    const original = other.forwardRows;
    other.forwardRows = (...args) => {
      seen.add(other.name);
      original.apply(other, args);
    };
    restore.push(() => {
      other.forwardRows = original;
    });
  }
  try {
    run();
  } finally {
    for (const undo of restore) undo();
  }
  return [...seen];
}

/** How a ring names a kernel's result: 'wasm', or 'wasm (weights via flash)' when another kernel made it. */
export function nameOf(kernel: AttentionKernel, output: string, via: string[]): string {
  return via.length ? `${kernel.name} (${output} via ${via.join(', ')})` : kernel.name;
}

/**
 * The precisions at which a kernel serves this call (its `supports`, asked with problem.precision set to
 * each), and why it declines the others.
 */
export function servedPrecisions(
  supports: (problem: AttentionProblem & BackwardProblem) => true | string,
  problem: AttentionProblem,
): { served: Precision[]; declined: string[] } {
  const served: Precision[] = [];
  const declined: string[] = [];
  for (const precision of PRECISIONS) {
    const ok = supports({ ...problem, precision } as AttentionProblem & BackwardProblem);
    if (ok === true) served.push(precision);
    else declined.push(`${precision}: ${ok}`);
  }
  return { served, declined };
}

/**
 * The kernel's name for test titles, saying which other registered kernels compute its out/lse or its
 * weights, found by running it on a small problem: 'flash', or 'wasm (weights via flash)'.
 */
export function probeDelegation(kernel: AttentionKernel): string {
  const x = Tensor.randn([1, 1, 4, 4], { seed: 1 });
  const { problem } = planAttention('probeDelegation', x, x, x, {});
  const { served } = servedPrecisions((p) => kernel.supports(p, { out: new Float32Array(0) }), problem);
  if (!served.length) return kernel.name;
  const p = problemAt(problem, served[0]);
  const n = p.B * p.Hq * p.L;
  const outputs: AttentionOutputs = { out: outBuffer(served[0], n * p.Ev), lse: new Float64Array(n) };
  const outVia = delegatesDuring(kernel, () => forwardAll(kernel, p, outputs));
  const weightsVia = delegatesDuring(kernel, () =>
    forwardAll(kernel, p, { weights: new Float32Array(n * p.S) }),
  );
  const parts = [
    outVia.length ? `out via ${outVia.join(', ')}` : '',
    weightsVia.length ? `weights via ${weightsVia.join(', ')}` : '',
  ].filter(Boolean);
  return parts.length ? `${kernel.name} (${parts.join('; ')})` : kernel.name;
}
