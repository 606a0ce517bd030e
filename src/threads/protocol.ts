// The messages between the pool and its workers, and how a problem travels: every array is a
// Float32Array view on one SharedArrayBuffer, so a job is a handful of numbers and one buffer.
// One decision to know: tasks are claimed with Atomics.add on a shared counter (dynamic scheduling),
// because causal and windowed calls give rows very different amounts of work.

import type { AttentionProblem, BroadcastView } from '../kernels/types.js';

/** A view into the job's shared buffer: byte offset and element count. */
export interface Span {
  offset: number;
  length: number;
}

/** An AttentionProblem with arrays replaced by spans of `buffer`. */
export interface Job {
  kernel: string;
  /** The kernel that takes over if `kernel` fails for want of resources ('auto' calls only). */
  fallback?: string;
  buffer: SharedArrayBuffer;
  /** Int32 task counter at byte 0 of `buffer`; Int32 "cancelled" flag at byte 4 (nonzero: stop). */
  tasks: number;
  /** Query rows per task. */
  rowsPerTask: number;
  dims: Pick<
    AttentionProblem,
    'B' | 'Hq' | 'Hkv' | 'L' | 'S' | 'E' | 'Ev' | 'scale' | 'shift' | 'left' | 'right' | 'precision'
  >;
  q: Span;
  k: Span;
  v: Span;
  out: Span;
  lse?: Span;
  mask?: Span & Omit<BroadcastView, 'data'>;
  bias?: Span & Omit<BroadcastView, 'data'>;
}

export type ToWorker = { type: 'run'; id: number; job: Job };
export type FromWorker = { type: 'done'; id: number } | { type: 'error'; id: number; message: string };

function view(buffer: SharedArrayBuffer, span: Span): Float32Array {
  return new Float32Array(buffer, span.offset, span.length);
}

/** Rebuilds the problem (views on the shared buffer) inside a worker. */
export function problemOf(job: Job): { problem: AttentionProblem; out: Float32Array; lse?: Float32Array } {
  const { buffer } = job;
  const broadcast = (b: Job['mask']): BroadcastView | undefined =>
    b && { data: view(buffer, b), sb: b.sb, sh: b.sh, sl: b.sl, ss: b.ss };
  return {
    problem: {
      ...job.dims,
      q: view(buffer, job.q),
      k: view(buffer, job.k),
      v: view(buffer, job.v),
      mask: broadcast(job.mask),
      bias: broadcast(job.bias),
    },
    out: view(buffer, job.out),
    lse: job.lse && view(buffer, job.lse),
  };
}
