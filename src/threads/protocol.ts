// The messages between the pool and its workers. A job is an operation's name, the kernel that runs it,
// a task count and its arguments packed by kernels/transfer.ts: every array a view on one SharedArrayBuffer.
// One decision to know: tasks are claimed with Atomics.add on a shared counter (dynamic scheduling),
// because causal and windowed calls give rows very different amounts of work; an operation is one entry
// in each of two tables (JobArgs here, the worker's runners in worker-core.ts), never a protocol edit.

import type { GemmProblem } from '../kernels/gemm-types.js';
import type { Packed } from '../kernels/transfer.js';
import type {
  AttentionGrads,
  AttentionOutputs,
  AttentionProblem,
  BackwardInputs,
  BackwardProblem,
} from '../kernels/types.js';
import type { RowSchedule } from './schedule.js';

/** What each operation's workers receive (packed), by operation name. */
export interface JobArgs {
  /** Query rows of (batch, head) pairs: task t is the rows taskRows(schedule, L, t) names (schedule.ts). */
  'attention.forward': { problem: AttentionProblem; outputs: AttentionOutputs; schedule: RowSchedule };
  /**
   * Backward tasks bkv = b·Hkv + hk (see AttentionBackward). dbias, which tasks accumulate, is one
   * float64 row per worker in `dbiasParts` ([workers × bias length], zeroed); the caller sums the rows.
   */
  'attention.backward': {
    problem: BackwardProblem;
    inputs: BackwardInputs;
    grads: Omit<AttentionGrads, 'dbias'>;
    dbiasParts?: Float64Array;
  };
  /**
   * Matrix products, each split into blocks of rows of its C: the tasks of part 0 come first (⌈rows /
   * rowsPerTask⌉ of them, rows = batch·M), then those of part 1, and so on. Every part runs on the job's
   * GEMM kernel; a product's C is written only by the tasks of its rows.
   */
  gemm: { parts: { problem: GemmProblem; c: Float32Array; rowsPerTask: number }[] };
  /**
   * A whole MultiHeadAttention forward as one job: one task per `projHeads` heads of each in-projection
   * (their columns of x·Wᵀ + b, written into the heads' layout [B, heads, rows, width] of `dst`), then the
   * attention's (pair, row block) tasks over `problem`, whose q, k, v are the `dst`s, then row blocks of
   * out·Woᵀ + bo (each gathering its rows of the heads' output into its worker's `scratch` row first).
   * A task waits only for the tasks it reads (`finished`: one flag per task, in multiHeadTasks' order), so
   * a head's attention starts once its own projections are done. Each product is the one `forward`
   * makes, so the result is the same bits. `scratch` is one row of `scratchFloats` per worker (its ticket):
   * a projection task's [rows, heads·width] before they move to the heads' layout, or an out block's rows.
   */
  'mha.forward': {
    gemmKernel: string;
    gemmFallback?: string;
    /** q, k, v */
    proj: {
      problem: GemmProblem;
      /** [B, heads, rows, width]: rows = this product's M / B. */
      dst: Float32Array;
      heads: number;
      width: number;
    }[];
    problem: AttentionProblem;
    outputs: AttentionOutputs;
    rowsPerTask: number;
    /** Heads per projection task (projGroup caps it at each part's heads). */
    projHeads: number;
    outProj: {
      weight: Float32Array;
      bias?: Float32Array;
      /** [B·L, D] */
      c: Float32Array;
      D: number;
      rowsPerTask: number;
    };
    scratch: Float32Array;
    scratchFloats: number;
    /** One flag per task, zeroed: 1 once the task is done. */
    finished: Int32Array;
  };
}

export type Op = keyof JobArgs;

/** Heads one projection task of a part with `heads` heads covers: projHeads, at most the part's heads. */
export const projGroup = (projHeads: number, heads: number) => Math.max(1, Math.min(projHeads, heads));

/** Int32 slots at the start of every job's buffer. */
export const HEADER = {
  /** The next task to claim. */
  next: 0,
  /** Nonzero: a worker failed and the others stop claiming tasks. */
  cancelled: 1,
  /** Each worker of a job takes a ticket 0, 1, … (its row of per-worker scratch space). */
  ticket: 2,
  /** A streamed job (Job.slices): how many slices of its inputs the caller has written so far. */
  written: 3,
} as const;

/** Bytes reserved for HEADER at the start of a job's buffer. */
export const HEADER_BYTES = 16;

/** One operation's tasks on one shared buffer. */
export interface Job<O extends Op = Op> {
  op: O;
  /** The kernel that runs the tasks (for a backward, the kernel whose `backward` runs). */
  kernel: string;
  /** The kernel that takes over if `kernel` fails for want of resources ('auto' calls only). */
  fallback?: string;
  buffer: SharedArrayBuffer;
  /** Tasks 0 … tasks − 1, claimed through HEADER.next. */
  tasks: number;
  /**
   * Streamed inputs: the job is posted before its inputs are written, which the caller then does in
   * this many slices (BufferLayout.write), counting them in HEADER.written; a task waits for the slices
   * it reads (sliceOf). Absent: everything is written before the job is posted. Only operations whose
   * runner waits (attention.forward) may be streamed.
   */
  slices?: number;
  args: Packed<JobArgs[O]>;
}

export type ToWorker = { type: 'run'; id: number; job: Job };
export type FromWorker = { type: 'done'; id: number } | { type: 'error'; id: number; message: string };

/**
 * One value per thread under `Symbol.for(key)` on globalThis, made on first use, so every copy of qkv in
 * the thread (a bundle and a direct import) shares it and importing qkv touches no global.
 */
export function threadGlobal<T>(key: string, make: () => T): T {
  const symbol = Symbol.for(key);
  const global = globalThis as { [key: symbol]: T | undefined };
  global[symbol] ??= make();
  return global[symbol];
}

/**
 * The buffers of streamed jobs whose inputs this thread is still writing: a worker that finds its job's
 * buffer here runs on the caller's thread (a platform whose post ran the job inline) and would wait for
 * the inputs forever.
 */
export const buffersBeingWritten = () =>
  threadGlobal('qkv.buffersBeingWritten', () => new WeakSet<SharedArrayBuffer>());
