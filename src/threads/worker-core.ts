// What every worker runs, whatever the platform: revive the job's arguments, claim tasks until none are
// left, run the operation's kernel on each, report done or the error's message.
// One decision to know: a new operation (GEMM) is one entry in RUNNERS; the claiming, cancelling and
// reporting here serve every operation alike.

import { chooseGemmKernel, type GemmKernelName } from '../kernels/gemm.js';
import type { GemmKernel, GemmProblem } from '../kernels/gemm-types.js';
import { linearProblem, swapMiddle } from '../kernels/matmul.js';
import { kernelByName } from '../kernels/registry.js';
import { revive, sliceOf } from '../kernels/transfer.js';
import {
  type AttentionKernel,
  type AttentionProblem,
  KernelResourceError,
  rowRunner,
} from '../kernels/types.js';
import {
  buffersBeingWritten,
  type FromWorker,
  HEADER,
  type Job,
  type JobArgs,
  type Op,
  projGroup,
  type ToWorker,
} from './protocol.js';
import { taskRows } from './schedule.js';

/** Runs one worker's share of a job: `next()` claims a task (−1 when none is left), `ticket` is 0, 1, … */
type Runner<O extends Op> = (job: Job<O>, args: JobArgs[O], next: () => number, ticket: number) => void;

function kernelNamed(name: string): AttentionKernel {
  const kernel = kernelByName(name);
  if (!kernel) throw new Error(`unknown kernel '${name}'`);
  return kernel;
}

const RUNNERS: { [O in Op]: Runner<O> } = {
  'attention.forward'(job, { problem, outputs, schedule }, next) {
    // An 'auto' call whose kernel runs out of resources here goes on with the fallback (rowRunner);
    // float16 inputs arrive as halves only for kernels that read them, a fallback that does not widens.
    const fallback = job.fallback === undefined ? undefined : kernelNamed(job.fallback);
    const runner = rowRunner(kernelNamed(job.kernel), problem, outputs, fallback);
    const header = new Int32Array(job.buffer, 0, 4);
    try {
      for (let task = next(); task !== -1; task = next()) {
        const [bh, i0, i1] = taskRows(schedule, problem.L, task);
        if (i0 >= i1) continue;
        if (job.slices && !waitWritten(header, slicesRead(problem, job.slices, bh))) break;
        runner.run(bh, i0, i1);
      }
    } finally {
      runner.release();
    }
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

/**
 * How many of a streamed forward's n slices (Job.slices) a task of pair bh reads: the slices that hold
 * the query rows of every head of its GQA group (the WASM kernel's decode path computes the whole group
 * on its first task, wasm.ts) and its key/value head's keys and values. All n when the problem has
 * another array (a mask, a bias, a flex program, float16 halves, a cache's layout): those are read whole.
 */
export function slicesRead(p: AttentionProblem, n: number, bh: number): number {
  if (p.mask || p.bias || p.flex || p.half || p.kv) return n;
  const { Hq, Hkv, L, S, E, Ev } = p;
  const group = Hq / Hkv;
  const b = Math.floor(bh / Hq);
  const hk = Math.floor((bh % Hq) / group);
  let last = 0;
  const upTo = (length: number, end: number) => {
    if (end > 0) last = Math.max(last, sliceOf(length, end - 1, n));
  };
  upTo(p.q.length, (b * Hq + (hk + 1) * group) * L * E);
  upTo(p.k.length, (b * Hkv + hk + 1) * S * E);
  upTo(p.v.length, (b * Hkv + hk + 1) * S * Ev);
  return last + 1;
}

/** Waits until `slices` slices of a streamed job's inputs are written; false if it was cancelled. */
function waitWritten(header: Int32Array, slices: number): boolean {
  for (;;) {
    if (Atomics.load(header, HEADER.cancelled) !== 0) return false;
    const written = Atomics.load(header, HEADER.written);
    if (written >= slices) return true;
    if (buffersBeingWritten().has(header.buffer as SharedArrayBuffer)) {
      throw new Error(
        "the thread platform's worker ran the job inside post(), on the caller's thread, before the " +
          'caller could copy its inputs in: post must only send the message (as postMessage does)',
      );
    }
    Atomics.wait(header, HEADER.written, written, 50); // the timeout rechecks `cancelled`
  }
}

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

/** A multi-head job's task: its kind, its index within the kind, the tasks it waits for. */
export interface MultiHeadTask {
  kind: 'proj' | 'attention' | 'out';
  /** proj: part · Hq + first head; attention: pair · blocks + block; out: row block. */
  index: number;
  /** proj: how many heads from the first (consecutive), each `width` columns of the projection. */
  heads?: number;
  deps: number[];
}

/**
 * The tasks of a multi-head job in claiming order and what each waits for (see JobArgs['mha.forward']):
 * per key/value head j the k and v projection tasks that hold it, then those of the query heads that
 * share it; the attention's row blocks, block by block, each over every (batch, head) pair in order; the
 * out-projection's row blocks. A projection task covers `projHeads` consecutive heads of its part
 * (default 1).
 */
export function multiHeadTasks(args: {
  proj: readonly { problem: { M: number }; heads: number }[];
  problem: { B: number; Hq: number; Hkv: number; L: number };
  rowsPerTask: number;
  outProj: { rowsPerTask: number };
  projHeads?: number;
}): MultiHeadTask[] {
  const { B, Hq, Hkv, L } = args.problem;
  const group = Hq / Hkv;
  const tasks: MultiHeadTask[] = [];
  // Projection tasks: index = part · Hq + first head (part 0 q, 1 k, 2 v); projTask maps every head.
  const projTask = new Map<number, number>();
  const addProj = (part: number, head: number) => {
    if (projTask.has(part * Hq + head)) return;
    const heads = part === 0 ? Hq : Hkv;
    const g = projGroup(args.projHeads ?? 1, heads);
    const first = Math.floor(head / g) * g;
    const n = Math.min(g, heads - first);
    for (let h = first; h < first + n; h++) projTask.set(part * Hq + h, tasks.length);
    tasks.push({ kind: 'proj', index: part * Hq + first, heads: n, deps: [] });
  };
  for (let j = 0; j < Hkv; j++) {
    addProj(1, j);
    addProj(2, j);
    for (let h = j * group; h < (j + 1) * group; h++) addProj(0, h);
  }
  // Attention tasks block by block (every pair's first rows, then the next): the out-projection of the
  // first rows waits only for the first block of each pair.
  const blocks = Math.ceil(L / args.rowsPerTask);
  const attentionTask = new Map<number, number>(); // index → position in `tasks`
  for (let block = 0; block < blocks; block++) {
    for (let bh = 0; bh < B * Hq; bh++) {
      const h = bh % Hq;
      const j = Math.floor(h / group);
      // Every query head of the group, not only h: a decode-sized call (L ≤ 4) computes the whole group
      // on its first task and keeps the rows for the others (wasm.ts), so it reads their q as well.
      const deps = new Set([projTask.get(Hq + j)!, projTask.get(2 * Hq + j)!]);
      for (let g = j * group; g < (j + 1) * group; g++) deps.add(projTask.get(g)!);
      attentionTask.set(bh * blocks + block, tasks.length);
      tasks.push({ kind: 'attention', index: bh * blocks + block, deps: [...deps] });
    }
  }
  const rows = args.outProj.rowsPerTask;
  for (let m0 = 0, index = 0; m0 < B * L; m0 += rows, index++) {
    const deps: number[] = [];
    const last = Math.min(B * L, m0 + rows) - 1;
    for (let b = Math.floor(m0 / L); b <= Math.floor(last / L); b++) {
      const l0 = b === Math.floor(m0 / L) ? m0 % L : 0;
      const l1 = b === Math.floor(last / L) ? last % L : L - 1;
      for (let h = 0; h < Hq; h++) {
        for (
          let block = Math.floor(l0 / args.rowsPerTask);
          block <= Math.floor(l1 / args.rowsPerTask);
          block++
        ) {
          deps.push(attentionTask.get((b * Hq + h) * blocks + block)!);
        }
      }
    }
    tasks.push({ kind: 'out', index, deps });
  }
  return tasks;
}

/**
 * The multi-head forward as one job (see JobArgs['mha.forward']). A task waits for the tasks it reads
 * (`finished`, one flag per task); tasks are claimed in order and every task's dependencies come before
 * it, so each task waited for is held by a running worker: this cannot deadlock.
 */
function mhaForward(
  job: Job<'mha.forward'>,
  args: JobArgs['mha.forward'],
  next: () => number,
  ticket: number,
): void {
  const header = new Int32Array(job.buffer, 0, 3);
  const { proj, problem, outputs, outProj, finished } = args;
  const scratch = args.scratch.subarray(ticket * args.scratchFloats, (ticket + 1) * args.scratchFloats);
  const tasks = multiHeadTasks(args);
  const { B, Hq, L, Ev } = problem;
  const blocks = Math.ceil(L / args.rowsPerTask);
  const gemmKernels = new Set<GemmKernel>();
  const product = (p: GemmProblem, c: Float32Array) => {
    const kernel = chooseGemmKernel('gemm', args.gemmKernel as GemmKernelName, p);
    gemmKernels.add(kernel);
    gemmRows(kernel, args.gemmFallback, p, c, 0, p.M);
  };
  /** Waits until task `t` is finished; false if the job was cancelled meanwhile. */
  const waitFor = (t: number): boolean => {
    while (Atomics.load(finished, t) === 0) {
      if (Atomics.load(header, HEADER.cancelled) !== 0) return false;
      Atomics.wait(finished, t, 0, 50); // the timeout rechecks `cancelled`
    }
    return true;
  };
  let runner: ReturnType<typeof rowRunner> | undefined;
  try {
    for (let t = next(); t !== -1; t = next()) {
      const task = tasks[t];
      if (!task.deps.every(waitFor)) break;
      if (task.kind === 'proj') {
        // n consecutive heads of one in-projection, for every batch: their columns of x·Wᵀ + b (the
        // weight's rows of those heads, as `linear` computes a block of rows of W), [rows, n·width], land
        // in the heads' places in [B, heads, rows, width] (one head: straight there; more: through this
        // worker's scratch, then swapMiddle's [rows, n, width] → [n, rows, width], a copy).
        const part = proj[Math.floor(task.index / Hq)];
        const h = task.index % Hq;
        const n = task.heads ?? 1;
        const { problem: p, heads, width } = part;
        const R = p.M / B;
        for (let b = 0; b < B; b++) {
          const sub: GemmProblem = {
            ...p,
            M: R,
            N: n * width,
            a: p.a.subarray(b * R * p.K, (b + 1) * R * p.K),
            b: p.b.subarray(h * width * p.K, (h + n) * width * p.K),
            bias: p.bias?.subarray(h * width, (h + n) * width),
          };
          const at = (b * heads + h) * R * width;
          const dst = part.dst.subarray(at, at + n * R * width);
          if (n === 1) {
            product(sub, dst);
          } else {
            const c = scratch.subarray(0, R * n * width);
            product(sub, c);
            swapMiddle(c, 1, R, n, width, dst);
          }
        }
      } else if (task.kind === 'attention') {
        // Made at the first attention task, once its projections are done: a kernel may read K and V then.
        runner ??= rowRunner(
          kernelNamed(job.kernel),
          problem,
          outputs,
          job.fallback === undefined ? undefined : kernelNamed(job.fallback),
        );
        const bh = Math.floor(task.index / blocks);
        const i0 = (task.index % blocks) * args.rowsPerTask;
        runner.run(bh, i0, Math.min(L, i0 + args.rowsPerTask));
      } else {
        // Rows [m0, m1) of the heads' output merged to [rows, H·Ev] (as `forward` merges them), then
        // projected into the same rows of C.
        const width = Hq * Ev;
        const m0 = task.index * outProj.rowsPerTask;
        const m1 = Math.min(B * L, m0 + outProj.rowsPerTask);
        const n = m1 - m0;
        const a = scratch.subarray(0, n * width);
        const out = outputs.out as Float32Array;
        for (let r = 0; r < n; r++) {
          const b = Math.floor((m0 + r) / L);
          const l = (m0 + r) % L;
          for (let h = 0; h < Hq; h++) {
            const from = ((b * Hq + h) * L + l) * Ev;
            a.set(out.subarray(from, from + Ev), r * width + h * Ev);
          }
        }
        product(
          linearProblem(a, n, width, outProj.weight, outProj.D, outProj.bias),
          outProj.c.subarray(m0 * outProj.D, m1 * outProj.D),
        );
      }
      Atomics.store(finished, t, 1);
      Atomics.notify(finished, t);
    }
  } catch (err) {
    // Others may be waiting for this task: cancel at once rather than when the caller hears of it.
    Atomics.store(header, HEADER.cancelled, 1);
    throw err;
  } finally {
    runner?.release();
    for (const kernel of gemmKernels) kernel.release?.();
  }
}

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
