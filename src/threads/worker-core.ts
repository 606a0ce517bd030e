// What every worker runs, whatever the platform: revive the job's arguments, claim tasks until none are
// left, run the operation's kernel on each, report done or the error's message.
// One decision to know: a new operation (GEMM) is one entry in RUNNERS; the claiming, cancelling and
// reporting here serve every operation alike.

import { chooseGemmKernel, type GemmKernelName } from '../kernels/gemm.js';
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
};

/** Handles one message; `reply` posts back to the pool. */
export function handleMessage(message: ToWorker, reply: (m: FromWorker) => void): void {
  const { id, job } = message;
  try {
    const header = new Int32Array(job.buffer, 0, 3);
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
