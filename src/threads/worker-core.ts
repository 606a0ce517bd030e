// What every worker runs, whatever the platform: revive the job's arguments, claim tasks until none are
// left, run the operation's kernel on each, report done or the error's message.
// One decision to know: a new operation (GEMM) is one entry in RUNNERS; the claiming, cancelling and
// reporting here serve every operation alike.

import { kernelByName } from '../kernels/registry.js';
import { revive } from '../kernels/transfer.js';
import { type AttentionKernel, rowRunner } from '../kernels/types.js';
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
