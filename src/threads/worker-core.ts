// What every worker runs, whatever the platform: claim tasks until none are left, run the named
// kernel on each, report done or the error's message.

import { kernelByName } from '../kernels/registry.js';
import { type AttentionKernel, KernelResourceError, problemFor } from '../kernels/types.js';
import { type FromWorker, problemOf, type ToWorker } from './protocol.js';

/** Handles one message; `reply` posts back to the pool. */
export function handleMessage(message: ToWorker, reply: (m: FromWorker) => void): void {
  const { id, job } = message;
  try {
    let kernel: AttentionKernel | undefined = kernelByName(job.kernel);
    if (!kernel) throw new Error(`unknown kernel '${job.kernel}'`);
    let fallback = job.fallback === undefined ? undefined : kernelByName(job.fallback);
    const { problem, out, lse } = problemOf(job);
    const header = new Int32Array(job.buffer, 0, 2); // [task counter, cancelled]
    const { L } = problem;
    const blocksPerHead = Math.ceil(L / job.rowsPerTask);
    for (;;) {
      if (Atomics.load(header, 1) !== 0) break; // another worker failed: the call is over
      const task = Atomics.add(header, 0, 1);
      if (task >= job.tasks) break;
      const bh = Math.floor(task / blocksPerHead);
      const i0 = (task % blocksPerHead) * job.rowsPerTask;
      const i1 = Math.min(L, i0 + job.rowsPerTask);
      try {
        kernel.forwardRows(problem, { out, lse }, bh, i0, i1);
      } catch (err) {
        // An 'auto' call whose kernel ran out of resources here: the fallback serves this task and the rest.
        if (!fallback || !(err instanceof KernelResourceError)) throw err;
        kernel.release?.();
        kernel = fallback;
        fallback = undefined;
        kernel.forwardRows(problemFor(kernel, problem), { out, lse }, bh, i0, i1);
      }
    }
    kernel.release?.();
    reply({ type: 'done', id });
  } catch (err) {
    reply({ type: 'error', id, message: err instanceof Error ? err.message : String(err) });
  }
}
