// A runtime: the worker threads qkv computes on, as an object (`createRuntime`) rather than state set when
// a module is imported. It owns a pool of workers, the shared buffers jobs travel in and the "runs on one
// thread" warning, and runs attention's forward (row blocks) and backward (key/value heads) as tasks.
// One decision to know: each entry exports functions bound to its own default runtime (Web Workers from
// the main entry, worker_threads from the Node one) and importing either does nothing: package.json's
// "sideEffects" lists only the CLI and the worker entries, so a bundler that trusts it cannot drop a
// platform installation behind our back.

import {
  type AttentionBackwardOptions,
  type AttentionGradients,
  planBackward,
} from './attention/backward.js';
import {
  type AnyResultOptions,
  type AttentionInput,
  type AttentionOptions,
  type AttentionPlan,
  type HalfResultOptions,
  planAttention,
} from './attention/plan.js';
import { result, runKernel } from './attention/sdpa.js';
import { chooseGemmKernel, type GemmProblem, gemm, gemmFallbackFor } from './kernels/gemm.js';
import {
  backwardNeedsForward,
  chooseBackward,
  chooseKernel,
  fallbackFor,
  registeredKernels,
} from './kernels/registry.js';
import { BufferLayout, type Packed, readBack } from './kernels/transfer.js';
import { type AttentionOutputs, backwardAll, problemFor } from './kernels/types.js';
import { checkOptionNames, checkOptionsObject, formatValue, sizeOf } from './shape.js';
import { type DType, Tensor, type TensorLike } from './tensor.js';
import { browserPlatform } from './threads/browser.js';
import type { Platform } from './threads/pool.js';
import { HEADER_BYTES, type JobArgs, projGroup } from './threads/protocol.js';
import { ThreadRunner } from './threads/runner.js';
import { rowSchedule } from './threads/schedule.js';

export type { Platform as ThreadPlatform, PoolWorker as ThreadWorker } from './threads/pool.js';

/** Options of scaledDotProductAttentionAsync: those of scaledDotProductAttention, plus `threads`. */
export interface AsyncAttentionOptions extends AttentionOptions {
  /**
   * Worker threads to use; default the runtime's `threads`, else all cores. Capped at the core count
   * (`os.availableParallelism()` in Node, `navigator.hardwareConcurrency` in browsers): more workers than
   * cores only cost memory (each is a JS heap and a WASM instance, ~10 MB).
   */
  threads?: number;
}

/** Options of attentionBackwardAsync: those of attentionBackward, plus `threads`. */
export interface AsyncBackwardOptions extends AttentionBackwardOptions {
  /** Worker threads to use, as in AsyncAttentionOptions. */
  threads?: number;
}

/**
 * `scaledDotProductAttention` on worker threads: same arguments, semantics and result, as a Promise.
 * Rejects with the worker's original message if a kernel fails inside a worker. The inputs are read after
 * the call returns (copied for the workers when a buffer is free): leave them unchanged until the promise
 * settles.
 *
 * @example
 * const out = await scaledDotProductAttentionAsync(q, k, v, { causal: true, threads: 2 });
 */
export interface ScaledDotProductAttentionAsync {
  (q: AttentionInput, k: AttentionInput, v: AttentionInput, options?: AsyncAttentionOptions): Promise<Tensor>;
  (
    q: AttentionInput,
    k: AttentionInput,
    v: AttentionInput,
    options: HalfResultOptions<AsyncAttentionOptions>,
  ): Promise<Tensor<'float16'>>;
  (
    q: AttentionInput,
    k: AttentionInput,
    v: AttentionInput,
    options: AnyResultOptions<AsyncAttentionOptions>,
  ): Promise<Tensor<DType>>;
}

/**
 * `attentionBackward` on worker threads: the forward's row blocks, then one task per key/value head
 * (each writes dk, dv of its head and dq of the query heads that share it); the same gradients.
 */
export type AttentionBackwardAsync = (
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  dOut: TensorLike,
  options?: AsyncBackwardOptions,
) => Promise<AttentionGradients>;

/** Options of createRuntime. */
export interface RuntimeOptions {
  /**
   * How workers are made: the entry's own by default (Web Workers from `qkv` in a browser,
   * worker_threads from `qkv` in Node); any object with `createWorker`, `cores` and
   * `sharedMemoryUnavailable` (`defaultRuntime.platform` is the entry's).
   */
  platform?: Platform;
  /** Threads a call uses when it does not say; default all cores (never more than the cores). */
  threads?: number;
  /**
   * Milliseconds a worker may sit idle before it exits; default 30 000, at most 2³¹ − 1, or Infinity to
   * keep idle workers until `terminateWorkers()` (idle workers never keep Node alive either way).
   */
  idleMs?: number;
}

/** Worker threads and what runs on them; calls on one runtime share its workers and buffers. */
export interface Runtime {
  /** How this runtime makes workers. */
  readonly platform: Platform;
  /** Threads a call uses when it does not say (undefined: all cores). */
  readonly threads: number | undefined;
  /** Milliseconds a worker may sit idle before it exits (settable; the next call starts new ones). */
  idleMs: number;
  /** Workers alive now. */
  readonly workers: number;
  readonly scaledDotProductAttentionAsync: ScaledDotProductAttentionAsync;
  readonly attentionBackwardAsync: AttentionBackwardAsync;
  /** Stops the workers (calls in flight reject) and frees the kept buffers; the next call starts new ones. */
  readonly terminateWorkers: () => void;
}

const RUNTIME_OPTIONS = ['platform', 'threads', 'idleMs'] as const;

/**
 * A runtime of its own: its own workers, shared buffers and defaults. Nothing starts until a call needs
 * workers; idle workers exit after `idleMs` and never keep Node alive.
 *
 * @example
 * const runtime = createRuntime({ threads: 2 });
 * const out = await runtime.scaledDotProductAttentionAsync(q, k, v, { causal: true });
 * runtime.terminateWorkers();
 */
export function createRuntime(options: RuntimeOptions = {}): Runtime {
  const fn = 'createRuntime';
  checkOptionNames(fn, options, RUNTIME_OPTIONS);
  const platform = options.platform ?? browserPlatform;
  for (const method of ['createWorker', 'cores', 'sharedMemoryUnavailable'] as const) {
    if (typeof (platform as Partial<Platform> | null)?.[method] !== 'function') {
      throw new TypeError(`${fn}: platform must have a ${method}() method, got ${formatValue(platform)}`);
    }
  }
  if (options.threads !== undefined) checkThreads(fn, options.threads);
  if (options.idleMs !== undefined) checkIdle(fn, options.idleMs);
  const runner = new ThreadRunner(platform, options.idleMs);
  const threads = options.threads;
  const runtime: Runtime = {
    platform,
    threads,
    get idleMs() {
      return runner.idleMs;
    },
    set idleMs(ms: number) {
      checkIdle('idleMs', ms);
      runner.idleMs = ms;
    },
    get workers() {
      return runner.workers;
    },
    scaledDotProductAttentionAsync: ((q, k, v, options = {}) =>
      attentionAsync(runner, threads, q, k, v, options)) as ScaledDotProductAttentionAsync,
    attentionBackwardAsync: (q, k, v, dOut, options = {}) =>
      backwardAsync(runner, threads, q, k, v, dOut, options),
    terminateWorkers: () => runner.terminate(),
  };
  layerOps.set(runtime, {
    forward: (fn, plan, outputs, requested = threads) =>
      forwardOnThreads(runner, fn, plan, outputs, requested),
    gemm: (fn, parts, requested = threads) => gemmOnThreads(runner, fn, parts, requested),
    multiHead: (fn, call, requested = threads) => multiHeadOnThreads(runner, fn, call, requested),
  });
  return runtime;
}

/** One product of a GEMM job: `problem`'s C written into `c` (float32). */
export interface GemmPart {
  problem: GemmProblem;
  c: Float32Array;
}

/**
 * What layers built on attention (MultiHeadAttention.forwardAsync) run on a runtime's threads: an
 * attention forward split by row blocks, and matrix products split by rows. Internal: not exported by
 * the entries; `threads` defaults to the runtime's.
 */
export interface LayerOps {
  forward(fn: string, plan: AttentionPlan, outputs: AttentionOutputs, threads?: number): Promise<void>;
  gemm(fn: string, parts: readonly GemmPart[], threads?: number): Promise<void>;
  /**
   * A whole multi-head forward as one phased job (in-projections, heads, out-projection); false, having
   * done nothing, when the call is small or workers cannot run here (the caller then runs it in steps).
   */
  multiHead(fn: string, call: MultiHeadCall, threads?: number): Promise<boolean>;
}

/** What LayerOps.multiHead computes, every product exactly as the layer's `forward` makes it. */
export interface MultiHeadCall {
  /** The q, k and v in-projections (y = x·Wᵀ + b, float32), each split into `heads` heads of `width`. */
  projections: { problem: GemmProblem; heads: number; width: number }[];
  /**
   * The heads' attention over the projections split as splitHeads splits them: its q, k and v are
   * stand-ins of the right shapes (never read; the workers' projections take their places).
   */
  plan: AttentionPlan;
  /** [D, H·Ev] and [D] */
  outWeight: Float32Array;
  outBias?: Float32Array;
  /** [B·L, D]: the output, written here. */
  out: Float32Array;
  /** [B, H, L, S] when the weights are asked for (written here). */
  weights?: Float32Array;
}

const layerOps = new WeakMap<Runtime, LayerOps>();

/** The layer operations of a runtime made by createRuntime; throws naming `fn` for anything else. */
export function layerOpsOf(fn: string, runtime: Runtime): LayerOps {
  const ops = layerOps.get(runtime);
  if (!ops) throw new TypeError(`${fn}: runtime must come from createRuntime, got ${formatValue(runtime)}`);
  return ops;
}

/** Below this much work (4·B·Hq·L·S·max(E, Ev) flops) a call runs inline: a round trip costs more. */
const INLINE_FLOPS = 1 << 22;

function checkThreads(fn: string, threads: unknown): void {
  if (typeof threads !== 'number' || !Number.isSafeInteger(threads) || threads < 1) {
    throw new RangeError(`${fn}: threads must be a positive integer, got ${formatValue(threads)}`);
  }
}

/** The longest finite idle time: timers take at most 2³¹ − 1 ms (Node turns a longer one into 1 ms). */
const MAX_IDLE_MS = 2 ** 31 - 1;

function checkIdle(fn: string, ms: unknown): void {
  if (typeof ms !== 'number' || !(ms >= 0) || (ms > MAX_IDLE_MS && ms !== Number.POSITIVE_INFINITY)) {
    throw new RangeError(
      `${fn}: idleMs must be a number of milliseconds in [0, ${MAX_IDLE_MS}], or Infinity to keep idle workers until terminateWorkers(), got ${formatValue(ms)}`,
    );
  }
}

/** Threads for a call of `flops` work split in at most `tasks` tasks; 0 means run it on this thread. */
function threadsFor(
  runner: ThreadRunner,
  fn: string,
  requested: number | undefined,
  flops: number,
  tasks: number,
) {
  if (runner.unavailable(fn) || flops < INLINE_FLOPS) return 0;
  const cores = runner.cores();
  return Math.min(requested ?? cores, cores, tasks);
}

/**
 * Any forward call (out, weights and lse, whichever `outputs` holds) on the runtime's workers: tasks of
 * up to one head's query rows, or inline when the call is small or workers cannot run here.
 */
async function forwardOnThreads(
  runner: ThreadRunner,
  fn: string,
  plan: AttentionPlan,
  outputs: AttentionOutputs,
  requested: number | undefined,
): Promise<void> {
  const p = plan.problem;
  const flops = 4 * p.B * p.Hq * p.L * p.S * Math.max(p.E, p.Ev);
  const threads = threadsFor(runner, fn, requested, flops, p.B * p.Hq * Math.ceil(p.L / 32));
  if (threads < 1) {
    runKernel(fn, plan, outputs);
    return;
  }
  const kernel = chooseKernel(fn, plan.kernel, p, outputs);
  const fallback = fallbackFor(plan.kernel, kernel, p, outputs);
  // Float16 inputs cross as halves to a kernel that reads them. For one that does not, they are widened
  // once here rather than in every worker, whose heap would keep its copy until it collects garbage.
  const problem = problemFor(kernel, p);
  // Tasks of at most one head's rows, at least 4 per thread, the last ones cut smaller (schedule.ts).
  const { schedule, tasks } = rowSchedule(p.B * p.Hq, p.L, threads);
  const layout = new BufferLayout(HEADER_BYTES);
  const args = {
    problem: layout.place(problem, 'copy', 'problem'),
    // Not zeroed: the kernels write every element of their rows (AttentionKernel.forwardRows).
    outputs: layout.place(outputs, 'none', 'outputs'),
    schedule,
  };
  const job = {
    op: 'attention.forward',
    kernel: kernel.name,
    fallback: fallback?.name,
    tasks,
    args,
    // The inputs in one slice per pair, up to 8 (P1: a head's q, k and v, 768 KB each, ~0.25 ms): the
    // workers start on the first heads while the rest are copied (worker-core's slicesRead).
    slices: Math.min(8, p.B * p.Hq),
  } as const;
  try {
    await runner.run(
      layout,
      job,
      Math.min(threads, tasks),
      (buffer) => readBack(outputs, args.outputs, buffer),
      // The outputs are fresh arrays: their first touch faults every page in (~2 ms for P1's 2 MB here),
      // which happens now, beside the workers, instead of in readBack after them.
      () => {
        for (const x of Object.values(outputs)) (x as Float32Array | Float64Array | undefined)?.fill(0);
      },
    );
  } catch (err) {
    throw new Error(`${fn}: ${(err as Error).message}`);
  }
}

/**
 * Matrix products on the runtime's workers, each split into blocks of rows of its C (two per thread, so
 * a slow thread's share is taken over): the same rows as `gemm` computes them, so the same bits; inline
 * when the work is small or workers cannot run here. Every part must ask for float32 precision.
 */
async function gemmOnThreads(
  runner: ThreadRunner,
  fn: string,
  parts: readonly GemmPart[],
  requested: number | undefined,
): Promise<void> {
  let flops = 0;
  let maxRows = 0;
  for (const { problem: p } of parts) {
    const rows = (p.batch ?? 1) * p.M;
    flops += 2 * rows * p.N * p.K;
    maxRows = Math.max(maxRows, rows);
  }
  const threads = threadsFor(runner, fn, requested, flops, Math.ceil(maxRows / 32));
  if (threads < 1 || parts.length === 0) {
    for (const { problem, c } of parts) gemm(problem, c);
    return;
  }
  // One kernel for the job ('auto': WASM where it serves), and the fallback its workers switch to.
  const kernel = chooseGemmKernel(fn, 'auto', parts[0].problem);
  const fallback = gemmFallbackFor('auto', kernel, parts[0].problem);
  const layout = new BufferLayout(HEADER_BYTES);
  let tasks = 0;
  const packed = parts.map(({ problem, c }, i) => {
    const rows = (problem.batch ?? 1) * problem.M;
    // Multiples of 32 rows (the WASM kernel's row blocks are 128 at most, its tiles 4).
    const rowsPerTask = Math.max(32, Math.ceil(rows / (2 * threads) / 32) * 32);
    tasks += Math.ceil(rows / rowsPerTask);
    return {
      problem: layout.place(problem, 'copy', `parts[${i}].problem`),
      c: layout.place(c, problem.accumulate ? 'copy' : 'zero', `parts[${i}].c`),
      rowsPerTask,
    };
  });
  const job = {
    op: 'gemm',
    kernel: kernel.name,
    fallback: fallback?.name,
    tasks,
    args: { parts: packed },
  } as const;
  try {
    await runner.run(layout, job, Math.min(threads, tasks), (buffer) => {
      parts.forEach(({ c }, i) => {
        readBack(c, packed[i].c, buffer);
      });
    });
  } catch (err) {
    throw new Error(`${fn}: ${(err as Error).message}`);
  }
}

/** Columns (heads × width) a projection task of a multi-head job aims at. */
const PROJ_TASK_COLUMNS = 256;
/** Query rows from which a multi-head job splits each pair's attention into two tasks. */
const ATTENTION_SPLIT_ROWS = 256;

/** Rows per attention task of a multi-head job: L, or half of it rounded up to a multiple of 4. */
function attentionBlockRows(L: number): number {
  if (L < ATTENTION_SPLIT_ROWS) return L;
  const rows = Math.ceil(L / 8) * 4;
  return L - rows > 4 ? rows : L;
}

/**
 * A multi-head forward as one job (JobArgs['mha.forward']): the caller's thread copies x and the weights
 * in and the output out, and waits; the head split, the attention and the merge never cross back. The
 * weights are copied every call rather than kept in the workers: a Tensor's data can be written in place,
 * and checking that it was not would read as much memory as the copy (4 MB at D = 512, about 1 ms).
 */
async function multiHeadOnThreads(
  runner: ThreadRunner,
  fn: string,
  call: MultiHeadCall,
  requested: number | undefined,
): Promise<boolean> {
  const p = call.plan.problem;
  if (p.B * p.L === 0) return false; // no query rows: nothing for workers (forward returns [B, 0, D])
  let flops = 4 * p.B * p.Hq * p.L * p.S * Math.max(p.E, p.Ev);
  for (const { problem: g } of call.projections) flops += 2 * g.M * g.N * g.K;
  const threads = threadsFor(runner, fn, requested, flops, p.Hq + 2 * p.Hkv);
  if (threads < 1) return false;
  const outputs: AttentionOutputs = { out: call.out, weights: call.weights }; // as the kernel will see them
  const kernel = chooseKernel(fn, call.plan.kernel, p, outputs);
  const fallback = fallbackFor(call.plan.kernel, kernel, p, outputs);
  const gemmKernel = chooseGemmKernel(fn, 'auto', call.projections[0].problem);
  const gemmFallback = gemmFallbackFor('auto', gemmKernel, call.projections[0].problem);
  const layout = new BufferLayout(HEADER_BYTES);
  const dsts = [p.q, p.k, p.v].map((x) => layout.scratch('Float32Array', x.length));
  const proj = call.projections.map(({ problem, heads, width }, i) => ({
    problem: layout.place(problem, 'copy', `projections[${i}].problem`),
    dst: dsts[i],
    heads,
    width,
  }));
  // Attention tasks: each (batch, head) pair's rows in two blocks from ATTENTION_SPLIT_ROWS rows on (the
  // out-projection of the first block's rows starts while the second block attends), else whole. A
  // block starts at a multiple of 4 and has more than 4 rows, so its rows are computed in the same 4-row
  // tiles as forward's whole-pair call, with the same bits (a call of at most 4 rows takes the decode
  // path, whose sums differ in the last bit). Out-projection blocks as the GEMM job cuts them (two per
  // thread).
  const attentionRows = attentionBlockRows(p.L);
  const outRows = Math.max(32, Math.ceil((p.B * p.L) / (2 * threads) / 32) * 32);
  // Projection tasks of several heads each, about PROJ_TASK_COLUMNS columns: a task stages and packs
  // all of x's rows, so one head a task (64 columns at P2's size) spent a sixth of it on that.
  const projHeads = Math.max(1, Math.floor(PROJ_TASK_COLUMNS / Math.max(p.E, p.Ev, 1)));
  const projTasks = call.projections.reduce(
    (n, { heads }) => n + Math.ceil(heads / projGroup(projHeads, heads)),
    0,
  );
  const tasks = projTasks + p.B * p.Hq * Math.ceil(p.L / attentionRows) + Math.ceil((p.B * p.L) / outRows);
  // Each worker's scratch: an out-projection block's gathered rows, or a projection task's columns.
  const projFloats = Math.max(
    ...call.projections.map(
      ({ problem: g, heads, width }) => (g.M / p.B) * projGroup(projHeads, heads) * width,
    ),
  );
  const scratchFloats = Math.max(Math.min(outRows, p.B * p.L) * p.Hq * p.Ev, projFloats);
  const D = call.outWeight.length / (p.Hq * p.Ev);
  const { q: _q, k: _k, v: _v, ...rest } = problemFor(kernel, p);
  const problem = { ...layout.place(rest, 'copy', 'plan.problem'), q: dsts[0], k: dsts[1], v: dsts[2] };
  const packedOutputs = {
    out: layout.scratch('Float32Array', p.B * p.Hq * p.L * p.Ev),
    ...(call.weights ? { weights: layout.place(call.weights, 'zero', 'weights') } : {}),
  };
  const outC = layout.scratch('Float32Array', call.out.length);
  const workers = Math.min(threads, tasks);
  const args: Packed<JobArgs['mha.forward']> = {
    gemmKernel: gemmKernel.name,
    gemmFallback: gemmFallback?.name,
    proj,
    problem: problem as Packed<JobArgs['mha.forward']['problem']>,
    outputs: packedOutputs,
    rowsPerTask: attentionRows,
    projHeads,
    outProj: {
      weight: layout.place(call.outWeight, 'copy', 'outWeight'),
      bias: call.outBias && layout.place(call.outBias, 'copy', 'outBias'),
      c: outC,
      D,
      rowsPerTask: outRows,
    },
    scratch: layout.scratch('Float32Array', runner.getPool().workersFor(workers) * scratchFloats),
    scratchFloats,
    finished: layout.reserve('Int32Array', tasks),
  };
  const job = { op: 'mha.forward', kernel: kernel.name, fallback: fallback?.name, tasks, args } as const;
  try {
    await runner.run(
      layout,
      job,
      workers,
      (buffer) => {
        call.out.set(new Float32Array(buffer, outC.offset, outC.length));
        if (call.weights && packedOutputs.weights) readBack(call.weights, packedOutputs.weights, buffer);
      },
      // Fresh arrays: their pages fault in now, beside the workers (as forwardOnThreads does).
      () => {
        call.out.fill(0);
        call.weights?.fill(0);
      },
    );
  } catch (err) {
    throw new Error(`${fn}: ${(err as Error).message}`);
  }
  return true;
}

async function attentionAsync(
  runner: ThreadRunner,
  defaultThreads: number | undefined,
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  options: AnyResultOptions<AsyncAttentionOptions>,
): Promise<Tensor<DType>> {
  const fn = 'scaledDotProductAttentionAsync';
  checkOptionsObject(fn, options);
  const { threads = defaultThreads, ...attention } = options;
  if (threads !== undefined) checkThreads(fn, threads);
  const plan = planAttention(fn, q, k, v, attention);
  const out = new Float32Array(sizeOf(plan.outShape));
  await forwardOnThreads(runner, fn, plan, { out }, threads);
  return result(out, plan);
}

async function backwardAsync(
  runner: ThreadRunner,
  defaultThreads: number | undefined,
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  dOut: TensorLike,
  options: AsyncBackwardOptions,
): Promise<AttentionGradients> {
  const fn = 'attentionBackwardAsync';
  checkOptionsObject(fn, options);
  const { threads = defaultThreads, ...attention } = options;
  if (threads !== undefined) checkThreads(fn, threads);
  const { plan, problem, inputs, grads, shapes } = planBackward(fn, q, k, v, dOut, attention);
  if (backwardNeedsForward(plan.kernel)) {
    // The forward's output and float64 log-sum-exp, as attentionBackward computes them, on the workers.
    inputs.out = new Float32Array(sizeOf(plan.outShape));
    inputs.lse = new Float64Array(problem.B * problem.Hq * problem.L);
    const outputs = { out: inputs.out, lse: inputs.lse };
    await forwardOnThreads(runner, fn, { ...plan, problem, dtype: 'float32' }, outputs, threads);
  }
  const backward = chooseBackward(fn, plan.kernel, problem, inputs);
  const { B, Hq, Hkv, L, S, E, Ev } = problem;
  // The backward does about 2.5 forwards' work, in B·Hkv tasks.
  const workers = threadsFor(runner, fn, threads, 10 * B * Hq * L * S * Math.max(E, Ev), B * Hkv);
  if (workers < 1) {
    backwardAll(backward, problem, inputs, grads);
  } else {
    const kernel = registeredKernels().find((x) => x.backward === backward);
    if (!kernel) throw new Error(`${fn}: the chosen backward pass belongs to no registered kernel`);
    const n = runner.getPool().workersFor(workers);
    const { dbias, ...dense } = grads;
    const layout = new BufferLayout(HEADER_BYTES);
    const args: Packed<JobArgs['attention.backward']> = {
      problem: layout.place(problem, 'copy', 'problem'),
      inputs: layout.place(inputs, 'copy', 'inputs'),
      grads: layout.place(dense, 'zero', 'grads'),
      dbiasParts: dbias && layout.reserve('Float64Array', n * dbias.length),
    };
    const job = { op: 'attention.backward', kernel: kernel.name, tasks: B * Hkv, args } as const;
    try {
      await runner.run(layout, job, n, (buffer) => {
        readBack(dense, args.grads, buffer);
        const parts = args.dbiasParts;
        if (!dbias || !parts) return;
        // Each worker's float64 partial sums, added in float64 like backwardAll, then stored once.
        const rows = new Float64Array(buffer, parts.offset, parts.length);
        const m = dbias.length;
        for (let w = 1; w < n; w++) for (let i = 0; i < m; i++) rows[i] += rows[w * m + i];
        dbias.set(rows.subarray(0, m));
      });
    } catch (err) {
      throw new Error(`${fn}: ${(err as Error).message}`);
    }
  }
  const [qShape, kShape, vShape, biasShape] = shapes;
  return {
    dq: new Tensor(grads.dq as Float32Array, qShape),
    dk: new Tensor(grads.dk as Float32Array, kShape),
    dv: new Tensor(grads.dv as Float32Array, vShape),
    ...(biasShape && grads.dbias ? { dbias: new Tensor(grads.dbias as Float32Array, biasShape) } : {}),
  };
}
