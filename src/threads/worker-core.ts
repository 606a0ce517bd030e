// What every worker runs, whatever the platform: revive the job's arguments, claim tasks until none are
// left, run the operation's kernel on each, report done or the error's message.
// One decision to know: a new operation (GEMM) is one entry in RUNNERS; the claiming, cancelling and
// reporting here serve every operation alike.

import { chooseGemmKernel, type GemmKernelName } from '../kernels/gemm.js';
import type { GemmKernel, GemmProblem } from '../kernels/gemm-types.js';
import { linearProblem } from '../kernels/matmul.js';
import { kernelByName } from '../kernels/registry.js';
import { revive } from '../kernels/transfer.js';
import { type AttentionKernel, KernelResourceError, rowRunner } from '../kernels/types.js';
import { type FromWorker, HEADER, type Job, type JobArgs, type Op, type ToWorker } from './protocol.js';

/** Runs one worker's share of a job: `next()` claims a task (−1 when none is left), `ticket` is 0, 1, … */
type Runner<O extends Op> = (job: Job<O>, args: JobArgs[O], next: () => number, ticket: number) => void;

function kernelNamed(name: string): AttentionKernel {
  const kernel = kernelByName(name);
  if (!kernel) throw new Error(`unknown kernel '${name}'`);
  return kernel;
}

const RUNNERS: { [O in Op]: Runner<O> } = {
  'attention.forward'(job, { problem, outputs, rowsPerTask }, next) {
    // An 'auto' call whose kernel runs out of resources here goes on with the fallback (rowRunner);
    // float16 inputs arrive as halves only for kernels that read them, a fallback that does not widens.
    const fallback = job.fallback === undefined ? undefined : kernelNamed(job.fallback);
    const runner = rowRunner(kernelNamed(job.kernel), problem, outputs, fallback);
    const blocksPerHead = Math.ceil(problem.L / rowsPerTask);
    for (let task = next(); task !== -1; task = next()) {
      const bh = Math.floor(task / blocksPerHead);
      const i0 = (task % blocksPerHead) * rowsPerTask;
      runner.run(bh, i0, Math.min(problem.L, i0 + rowsPerTask));
    }
    runner.release();
  },

  'attention.backward'(job, { problem, inputs, grads, dbiasParts }, next, ticket) {
    const backward = kernelNamed(job.kernel).backward;
    if (!backward) throw new Error(`kernel '${job.kernel}' has no backward pass`);
    // dbias is accumulated by every task: this worker's own float64 row (backwardAll sums in float64 too).
    const n = problem.bias?.data.length ?? 0;
    const dbias = dbiasParts?.subarray(ticket * n, (ticket + 1) * n);
    const mine = { ...grads, dbias };
    for (let task = next(); task !== -1; task = next()) backward.task(problem, inputs, mine, task);
  },

  gemm(job, { parts }, next) {
    // Task t → (part, block of rows): the parts' task counts laid end to end.
    const first: number[] = [];
    let count = 0;
    for (const { problem, rowsPerTask } of parts) {
      first.push(count);
      count += Math.ceil(((problem.batch ?? 1) * problem.M) / rowsPerTask);
    }
    const kernels = parts.map(({ problem }) =>
      chooseGemmKernel('gemm', job.kernel as GemmKernelName, problem),
    );
    try {
      for (let task = next(); task !== -1; task = next()) {
        let i = parts.length - 1;
        while (first[i] > task) i--;
        const { problem, c, rowsPerTask } = parts[i];
        const m0 = (task - first[i]) * rowsPerTask;
        const m1 = Math.min((problem.batch ?? 1) * problem.M, m0 + rowsPerTask);
        try {
          kernels[i].rows(problem, c, m0, m1);
        } catch (err) {
          // A kernel refused memory wrote nothing of C: the fallback computes the same rows.
          if (job.fallback === undefined || !(err instanceof KernelResourceError)) throw err;
          chooseGemmKernel('gemm', job.fallback as GemmKernelName, problem).rows(problem, c, m0, m1);
        }
      }
    } finally {
      for (const kernel of new Set(kernels)) kernel.release?.();
    }
  },

  'mha.forward': mhaForward,
};

/** One GEMM's rows [m0, m1) on `kernel`, its fallback taking over a refused call (as the 'gemm' op does). */
function gemmRows(
  kernel: GemmKernel,
  fallback: string | undefined,
  problem: GemmProblem,
  c: Float32Array,
  m0: number,
  m1: number,
): void {
  try {
    kernel.rows(problem, c, m0, m1);
  } catch (err) {
    if (fallback === undefined || !(err instanceof KernelResourceError)) throw err;
    chooseGemmKernel('gemm', fallback as GemmKernelName, problem).rows(problem, c, m0, m1);
  }
}

/**
 * The phased MultiHeadAttention forward (see JobArgs['mha.forward']). `next` claims tasks in order, so
 * every task before a claimed one is claimed by a running worker: waiting for them cannot deadlock.
 */
function mhaForward(
  job: Job<'mha.forward'>,
  args: JobArgs['mha.forward'],
  next: () => number,
  ticket: number,
): void {
  const header = new Int32Array(job.buffer, 0, 4);
  const { proj, problem, outputs, outProj } = args;
  const scratch = args.scratch.subarray(ticket * args.scratchFloats, (ticket + 1) * args.scratchFloats);
  // Task numbering: each projection's row blocks, then the attention's, then the out-projection's.
  const projFirst: number[] = [];
  let projTasks = 0;
  for (const part of proj) {
    projFirst.push(projTasks);
    projTasks += Math.ceil(part.problem.M / part.rowsPerTask);
  }
  const blocksPerHead = Math.ceil(problem.L / args.rowsPerTask);
  const attentionEnd = projTasks + problem.B * problem.Hq * blocksPerHead;
  const gemmKernels = new Set<GemmKernel>();
  const gemmKernel = (p: GemmProblem) => {
    const kernel = chooseGemmKernel('gemm', args.gemmKernel as GemmKernelName, p);
    gemmKernels.add(kernel);
    return kernel;
  };
  /** Waits until `count` tasks are done; false if the job was cancelled meanwhile. */
  const doneUpTo = (count: number): boolean => {
    for (;;) {
      if (Atomics.load(header, HEADER.cancelled) !== 0) return false;
      const done = Atomics.load(header, HEADER.done);
      if (done >= count) return true;
      Atomics.wait(header, HEADER.done, done, 50); // the timeout rechecks `cancelled`
    }
  };
  let runner: ReturnType<typeof rowRunner> | undefined;
  try {
    for (let task = next(); task !== -1; task = next()) {
      if (task < projTasks) {
        // Rows [m0, m1) of one in-projection into this worker's scratch (the same rows `forward`'s GEMM
        // computes), then scattered to [B, heads, rows, width].
        let i = proj.length - 1;
        while (projFirst[i] > task) i--;
        const { problem: p, rowsPerTask, dst, heads, width } = proj[i];
        const m0 = (task - projFirst[i]) * rowsPerTask;
        const m1 = Math.min(p.M, m0 + rowsPerTask);
        const n = m1 - m0;
        const N = p.N;
        const sub = { ...p, M: n, a: p.a.subarray(m0 * p.K, m1 * p.K) };
        const c = scratch.subarray(0, n * N);
        gemmRows(gemmKernel(sub), args.gemmFallback, sub, c, 0, n);
        scatterRows(c, n, m0, N, dst, heads, width, p.M, problem.B);
      } else if (task < attentionEnd) {
        if (!doneUpTo(projTasks)) break;
        // Created after the projections are done: a kernel may read K and V when it is made.
        runner ??= rowRunner(
          kernelNamed(job.kernel),
          problem,
          outputs,
          job.fallback === undefined ? undefined : kernelNamed(job.fallback),
        );
        const t = task - projTasks;
        const bh = Math.floor(t / blocksPerHead);
        const i0 = (t % blocksPerHead) * args.rowsPerTask;
        runner.run(bh, i0, Math.min(problem.L, i0 + args.rowsPerTask));
      } else {
        if (!doneUpTo(attentionEnd)) break;
        if (runner) {
          runner.release();
          runner = undefined;
        }
        // Rows [m0, m1) of the heads' output merged to [rows, H·Ev] (as `forward` merges them), then
        // projected into the same rows of C.
        const { B, Hq: H, L, Ev } = problem;
        const width = H * Ev;
        const m0 = (task - attentionEnd) * outProj.rowsPerTask;
        const m1 = Math.min(B * L, m0 + outProj.rowsPerTask);
        const n = m1 - m0;
        const a = scratch.subarray(0, n * width);
        const out = outputs.out as Float32Array;
        for (let r = 0; r < n; r++) {
          const b = Math.floor((m0 + r) / L);
          const l = (m0 + r) % L;
          for (let h = 0; h < H; h++) {
            const from = ((b * H + h) * L + l) * Ev;
            a.set(out.subarray(from, from + Ev), r * width + h * Ev);
          }
        }
        const p = linearProblem(a, n, width, outProj.weight, outProj.D, outProj.bias);
        gemmRows(
          gemmKernel(p),
          args.gemmFallback,
          p,
          outProj.c.subarray(m0 * outProj.D, m1 * outProj.D),
          0,
          n,
        );
      }
      Atomics.add(header, HEADER.done, 1);
      Atomics.notify(header, HEADER.done);
    }
  } catch (err) {
    // The others may be waiting for this task: cancel at once rather than when the caller hears of it.
    Atomics.store(header, HEADER.cancelled, 1);
    Atomics.notify(header, HEADER.done);
    throw err;
  } finally {
    runner?.release();
    for (const kernel of gemmKernels) kernel.release?.();
  }
}

/**
 * Rows [m0, m0 + n) of a product C [B·R, heads·width] (its first n rows in `c`) into dst [B, heads, R,
 * width]: the heads split as splitHeads splits them.
 */
function scatterRows(
  c: Float32Array,
  n: number,
  m0: number,
  N: number,
  dst: Float32Array,
  heads: number,
  width: number,
  M: number,
  B: number,
): void {
  const R = M / B;
  for (let r = 0; r < n; r++) {
    const b = Math.floor((m0 + r) / R);
    const l = (m0 + r) % R;
    for (let h = 0; h < heads; h++) {
      const to = ((b * heads + h) * R + l) * width;
      const from = r * N + h * width;
      for (let e = 0; e < width; e++) dst[to + e] = c[from + e];
    }
  }
}

/** Handles one message; `reply` posts back to the pool. */
export function handleMessage(message: ToWorker, reply: (m: FromWorker) => void): void {
  const { id, job } = message;
  try {
    const header = new Int32Array(job.buffer, 0, 4);
    const next = (): number => {
      if (Atomics.load(header, HEADER.cancelled) !== 0) return -1; // another worker failed: the call is over
      const task = Atomics.add(header, HEADER.next, 1);
      return task < job.tasks ? task : -1;
    };
    const ticket = Atomics.add(header, HEADER.ticket, 1);
    const run = RUNNERS[job.op] as Runner<Op> | undefined;
    if (!run) throw new Error(`unknown operation '${String(job.op)}'`);
    run(job, revive<JobArgs[Op]>(job.args, job.buffer), next, ticket);
    reply({ type: 'done', id });
  } catch (err) {
    reply({ type: 'error', id, message: err instanceof Error ? err.message : String(err) });
  }
}
