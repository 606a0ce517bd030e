// Data-parallel training steps (Trainer's `threads` option), the calling thread's side: each step's batch
// is split by rows into one shard per thread; shard 0 runs here, shards 1 … n − 1 on worker threads that
// hold a replica of the model, and their gradients are added into the model's before clipping and AdamW.
// One decision to know: each shard's loss is seeded with its share of the batch's scored targets
// (crossEntropy is a mean over them), so the shards' gradients add up to the whole batch's gradient, and
// with dropout 0 a step equals the one-thread step up to float32 rounding. The step stays synchronous:
// shared memory and Atomics (parallel-protocol.ts), nothing posted per step.

import { checkBroadcast } from '../attention/plan.js';
import { crossEntropy } from '../autograd/ops.js';
import { type MuonJob, orthogonalise } from '../autograd/optim.js';
import { backward, release, type Var } from '../autograd/var.js';
import type { TinyTransformer } from '../model/transformer.js';
import type { Generator } from '../random.js';
import { type DType, Tensor } from '../tensor.js';
import {
  COMMAND_ORTHOGONALISE,
  COMMAND_STEP,
  COMMAND_STOP,
  CONTROL,
  controlBytes,
  doneIndex,
  failureMessage,
  MASK_FLOAT16,
  MASK_FLOAT32,
  MASK_NONE,
  MAX_MASK_RANK,
  SLOT_F64,
  SLOT_I32,
  STATUS_OK,
  slotLayout,
  slotViews,
  statusIndex,
  type TrainWorkerInit,
} from './parallel-protocol.js';
import type { Batch } from './tasks.js';

export type { TrainWorkerInit } from './parallel-protocol.js';

/** A started training worker, as the platform hands it back. */
export interface TrainWorkerHandle {
  /** False once the worker has exited (known when the calling thread's event loop has run). */
  readonly alive: boolean;
  /** The last error the platform saw outside shared memory ('' if none). */
  readonly lastError: string;
  /** Stops the worker; resolves when it has exited. */
  terminate(): Promise<void>;
}

/**
 * How training workers are made: `nodeTrainPlatform` (worker_threads) from the Node entry. A worker runs
 * threads/train-worker.ts's `serveTraining(init)`, reporting failures with `reportFailure(init, error)`.
 */
export interface TrainPlatform {
  readonly name: string;
  /** Cores of this machine (for choosing `threads`). */
  cores(): number;
  /** '' when SharedArrayBuffer and Atomics.wait work here, else why not. */
  sharedMemoryUnavailable(): string;
  /** Starts training thread `init.index` (shard w of the batch), given the shared buffers it works in. */
  startWorker(init: TrainWorkerInit): TrainWorkerHandle;
}

/** Rows [start, end) of each of `n` shards of a batch of B rows; the calling thread's shard 0 is the smallest. */
export function shardRows(B: number, n: number): [number, number][] {
  return Array.from({ length: n }, (_, s) => [Math.floor((B * s) / n), Math.floor((B * (s + 1)) / n)]);
}

/**
 * The seed of shard s's dropout generator: shard 0's is the one-thread run's (seed + 0xd0); the others
 * are spread from it by the golden-ratio constant.
 */
export function shardSeed(seed: number, s: number): number {
  return ((Math.trunc(seed) + 0xd0) ^ Math.imul(s, 0x9e3779b9)) >>> 0;
}

interface Started {
  workers: TrainWorkerHandle[];
  control: SharedArrayBuffer;
  ctl: Int32Array;
  params: Float32Array;
  grads: Float32Array[];
  slots: ReturnType<typeof slotViews>[];
  tokens: number;
  maskElements: number;
}

/** A shard's mask: rows [a, b) of a mask with a batch axis, or the whole mask when it broadcasts. */
function shardMask(mask: Tensor | undefined, B: number, a: number, b: number): Tensor<DType> | undefined {
  if (!mask) return undefined;
  const m = mask as unknown as Tensor<DType>;
  if (m.shape.length !== 4 || m.shape[0] !== B || B === 1) return m;
  const perRow = m.size / B;
  const data = m.data.subarray(a * perRow, b * perRow);
  return new Tensor(data as Float32Array, [b - a, ...m.shape.slice(1)], m.dtype as 'float32');
}

/** The worker threads of one Trainer and the synchronous parallel step. */
export class ParallelSteps {
  private started: Started | undefined;
  private stopping: Promise<void>[] = [];
  /** Milliseconds of the last step's parts: this thread's shard, waiting for the workers, adding grads. */
  readonly timings = { shard: 0, wait: 0, reduce: 0 };

  constructor(
    private readonly fn: string,
    private readonly platform: TrainPlatform,
    readonly threads: number,
    private readonly timeoutMs: number,
    private readonly model: TinyTransformer,
  ) {}

  /** Worker threads alive now. */
  get workers(): number {
    return this.started?.workers.filter((w) => w.alive).length ?? 0;
  }

  /**
   * One step's forward and backward over `batch` on every thread: on return the model's grads (zeroed by
   * the caller) hold the whole batch's gradient. `generators[s]` is shard s's dropout stream. Returns the
   * batch's loss (the mean over its scored targets, as crossEntropy of the whole batch).
   */
  step(batch: Batch, generators: readonly Generator[]): number {
    const n = this.threads;
    const { B, L, targets } = batch;
    // The checks the one-thread step gets from forward and crossEntropy, made on the whole batch: a shard
    // of a malformed batch can look well formed (subarray clamps, a mask for 2 rows fits 2-row shards).
    if (batch.ids.length !== B * L) {
      throw new RangeError(
        `${this.fn}: the batch's ids have ${batch.ids.length} elements, expected B·L = ${B}·${L}`,
      );
    }
    if (targets.length !== B * L) {
      throw new RangeError(
        `${this.fn}: the batch's targets have ${targets.length} elements, expected B·L = ${B}·${L}`,
      );
    }
    const H = this.model.config.numHeads;
    checkBroadcast(this.fn, 'mask', batch.mask, [B, H, L, L], '[B, H, L, L]', `B=${B}, L=${L}`);
    const rows = shardRows(B, n);
    const counts = rows.map(([a, b]) => {
      let c = 0;
      for (let i = a * L; i < b * L; i++) if (targets[i] !== -1) c++;
      return c;
    });
    const total = counts.reduce((x, y) => x + y, 0);
    const weights = counts.map((c) => (total === 0 ? 0 : c / total));
    const masks = rows.map(([a, b]) => shardMask(batch.mask, B, a, b));
    // Slots with room for full-length shards of this size, so a usual run never restarts its workers.
    let tokens = 0;
    let maskElements = 0;
    for (let s = 1; s < n; s++) {
      tokens = Math.max(tokens, (rows[s][1] - rows[s][0]) * Math.max(L, this.model.config.maxLen));
      const m = masks[s];
      if (m) {
        if (m.shape.length > MAX_MASK_RANK) {
          throw new RangeError(`${this.fn}: a mask of rank ${m.shape.length} (at most ${MAX_MASK_RANK})`);
        }
        maskElements = Math.max(maskElements, m.dtype === 'float16' ? Math.ceil(m.size / 2) : m.size);
      }
    }
    const run = this.ensureStarted(tokens, maskElements);
    const params = this.model.parameters();

    // Parameters and shards into shared memory, then one bump wakes every worker.
    let offset = 0;
    for (const p of params) {
      run.params.set(p.data, offset);
      offset += p.size;
    }
    for (let s = 1; s < n; s++) {
      const slot = run.slots[s];
      const [a, b] = rows[s];
      slot.i32[SLOT_I32.rows] = b - a;
      slot.i32[SLOT_I32.length] = L;
      slot.ids.set(batch.ids.subarray(a * L, b * L));
      slot.targets.set(targets.subarray(a * L, b * L));
      const m = masks[s];
      slot.i32[SLOT_I32.mask] = !m ? MASK_NONE : m.dtype === 'float16' ? MASK_FLOAT16 : MASK_FLOAT32;
      if (m) {
        slot.i32[SLOT_I32.maskRank] = m.shape.length;
        slot.i32.set(m.shape, SLOT_I32.maskShape);
        if (m.dtype === 'float16') slot.mask16.set(m.data as unknown as Uint16Array);
        else slot.mask32.set(m.data as Float32Array);
      }
      slot.f64[SLOT_F64.weight] = weights[s];
      const [s0, s1, s2, s3, spare] = generators[s].getState();
      slot.f64.set([s0, s1, s2, s3, spare === null ? 0 : 1, spare ?? 0], SLOT_F64.generator);
    }
    Atomics.store(run.ctl, CONTROL.command, COMMAND_STEP);
    const g = Atomics.add(run.ctl, CONTROL.step, 1) + 1;
    Atomics.notify(run.ctl, CONTROL.step);

    // Shard 0 here, meanwhile.
    const t0 = performance.now();
    let loss = 0;
    const [a0, b0] = rows[0];
    if (b0 > a0) {
      try {
        const { logits } = this.model.forward(batch.ids.subarray(a0 * L, b0 * L), b0 - a0, L, {
          mask: masks[0] as Tensor | undefined,
          training: true,
          generator: generators[0],
        });
        const l = crossEntropy(logits, targets.subarray(a0 * L, b0 * L));
        backward(l, [weights[0]]);
        loss += weights[0] * l.data[0];
        release(l); // this step's activations and gradients serve the next one
      } catch (err) {
        this.stop(); // the workers are in the middle of this step: never reuse their memory under them
        throw err;
      }
    }
    // A worker has as long as the timeout, or 10× this shard's time if that is longer.
    const t1 = performance.now();
    const limit = Math.max(this.timeoutMs, 10 * (t1 - t0));
    for (let s = 1; s < n; s++) this.waitFor(run, s, g, limit);
    const t2 = performance.now();

    for (let s = 1; s < n; s++) {
      if (rows[s][1] === rows[s][0]) continue;
      const slot = run.slots[s];
      addInto(params, run.grads[s]);
      loss += weights[s] * slot.f64[SLOT_F64.loss];
      const f = slot.f64;
      const at = SLOT_F64.generator;
      generators[s].setState([
        f[at],
        f[at + 1],
        f[at + 2],
        f[at + 3],
        f[SLOT_F64.hasSpare] === 1 ? f[SLOT_F64.spare] : null,
      ]);
    }
    this.timings.shard = t1 - t0;
    this.timings.wait = t2 - t1;
    this.timings.reduce = performance.now() - t2;
    return Math.fround(loss);
  }

  /**
   * Muon's orthogonaliser over the threads: the blocks are dealt out by cost (largest first, each to the
   * least loaded thread), the workers' written into their grads buffers (free between steps), this
   * thread's run here meanwhile, and the results copied back. The same bits as on one thread: every block
   * runs the same code whichever thread runs it. Before the first step (no workers yet), or when the
   * blocks do not fit, all run here; a worker that fails or dies meanwhile has its blocks run here too
   * (never a half-made update), and the next step starts new workers.
   */
  orthogonalise(jobs: readonly MuonJob[], steps: number): void {
    const run = this.started;
    const n = this.threads;
    if (!run || n < 2 || jobs.length < 2) {
      orthogonalise(jobs, steps);
      return;
    }
    const cost = ({ rows, cols }: MuonJob) => {
      const s = Math.min(rows, cols);
      return s * s * (2 * Math.max(rows, cols) + s);
    };
    const order = jobs.map((_, i) => i).sort((a, b) => cost(jobs[b]) - cost(jobs[a]) || a - b);
    const load = new Array<number>(n).fill(0);
    const dealt: number[][] = Array.from({ length: n }, () => []);
    for (const i of order) {
      let t = 0;
      for (let s = 1; s < n; s++) if (load[s] < load[t]) t = s;
      dealt[t].push(i);
      load[t] += cost(jobs[i]);
    }
    for (let s = 1; s < n; s++) {
      const size = dealt[s].reduce((a, i) => a + jobs[i].x.length, 0);
      if (size > run.grads[s].length || 2 + 3 * dealt[s].length > run.slots[s].ids.length) {
        orthogonalise(jobs, steps);
        return;
      }
    }
    for (let s = 1; s < n; s++) {
      const list = run.slots[s].ids;
      list[0] = steps;
      list[1] = dealt[s].length;
      let offset = 0;
      dealt[s].forEach((i, k) => {
        const { x, rows, cols } = jobs[i];
        run.grads[s].set(x, offset);
        list.set([offset, rows, cols], 2 + 3 * k);
        offset += x.length;
      });
    }
    Atomics.store(run.ctl, CONTROL.command, COMMAND_ORTHOGONALISE);
    const g = Atomics.add(run.ctl, CONTROL.step, 1) + 1;
    Atomics.notify(run.ctl, CONTROL.step);
    const t0 = performance.now();
    try {
      orthogonalise(
        dealt[0].map((i) => jobs[i]),
        steps,
      );
    } catch (err) {
      this.stop();
      throw err;
    }
    const limit = Math.max(this.timeoutMs, 10 * (performance.now() - t0));
    try {
      for (let s = 1; s < n; s++) this.waitFor(run, s, g, limit);
    } catch {
      // A worker failed or died (and every worker was stopped): its blocks are still untouched in `jobs`,
      // so they run here, and the step completes as on one thread. The next step starts new workers.
      for (let s = 1; s < n; s++)
        orthogonalise(
          dealt[s].map((i) => jobs[i]),
          steps,
        );
      return;
    }
    for (let s = 1; s < n; s++) {
      let offset = 0;
      for (const i of dealt[s]) {
        const { x } = jobs[i];
        x.set(run.grads[s].subarray(offset, offset + x.length));
        offset += x.length;
      }
    }
  }

  /** Waits until worker s has finished step g; throws naming it (and stops every worker) if it cannot. */
  private waitFor(run: Started, s: number, g: number, limitMs: number): void {
    const deadline = performance.now() + limitMs;
    const worker = run.workers[s - 1];
    for (;;) {
      const done = Atomics.load(run.ctl, doneIndex(s));
      if (Atomics.load(run.ctl, statusIndex(s)) !== STATUS_OK) {
        this.fail(s, `failed: ${failureMessage(run.control, this.threads, s) || 'no message'}`);
      }
      if (done === g) return;
      if (!worker.alive) {
        this.fail(s, `has exited${worker.lastError ? `: ${worker.lastError}` : ''}`);
      }
      const left = deadline - performance.now();
      if (left <= 0) {
        this.fail(
          s,
          `made no progress in ${seconds(limitMs)} (it may have crashed or been killed, or the machine is overloaded)`,
        );
      }
      Atomics.wait(run.ctl, doneIndex(s), done, left);
    }
  }

  private fail(s: number, what: string): never {
    this.stop();
    throw new Error(
      `${this.fn}: training thread ${s} (of ${this.threads}) ${what}; its workers were stopped (the next step starts new ones)`,
    );
  }

  /** The workers, started (or restarted, if a shard outgrew their slots) and ready. */
  private ensureStarted(tokens: number, maskElements: number): Started {
    const now = this.started;
    // A worker that died since the last step (killed, out of memory) is said once; the next step restarts.
    const dead = now?.workers.findIndex((w) => !w.alive) ?? -1;
    if (now && dead !== -1) {
      const { lastError } = now.workers[dead];
      this.fail(dead + 1, `has exited${lastError ? `: ${lastError}` : ''}`);
    }
    if (now && now.tokens >= tokens && now.maskElements >= maskElements) {
      return now;
    }
    if (now) this.stop();
    const n = this.threads;
    const cap = tokens;
    const params = this.model.parameters();
    const P = params.reduce((x, p) => x + p.size, 0);
    const control = new SharedArrayBuffer(controlBytes(n));
    const ctl = new Int32Array(control);
    const paramsBuffer = new SharedArrayBuffer(4 * P);
    const config: Record<string, unknown> = {};
    for (const key of Object.getOwnPropertyNames(this.model.config)) {
      config[key] = (this.model.config as unknown as Record<string, unknown>)[key];
    }
    const run: Started = {
      workers: [],
      control,
      ctl,
      params: new Float32Array(paramsBuffer),
      grads: [new Float32Array(0)],
      slots: [slotViews(new SharedArrayBuffer(slotLayout(0, 0).byteLength), 0, 0)],
      tokens: cap,
      maskElements,
    };
    for (let s = 1; s < n; s++) ctl[doneIndex(s)] = -1;
    this.started = run;
    // A Trainer dropped without terminate() must not leave its workers blocked for the process's life.
    collected.register(this, run, run);
    for (let s = 1; s < n; s++) {
      const grads = new SharedArrayBuffer(4 * P);
      const slot = new SharedArrayBuffer(slotLayout(cap, maskElements).byteLength);
      run.grads.push(new Float32Array(grads));
      run.slots.push(slotViews(slot, cap, maskElements));
      const init: TrainWorkerInit = {
        index: s,
        threads: n,
        control,
        params: paramsBuffer,
        grads,
        slot,
        tokens: cap,
        maskElements,
        config,
        paramNames: [...this.model.params.keys()],
        paramSizes: params.map((p) => p.size),
      };
      try {
        run.workers.push(this.platform.startWorker(init));
      } catch (err) {
        this.stop();
        throw new Error(`${this.fn}: could not start training thread ${s}: ${(err as Error).message}`);
      }
    }
    for (let s = 1; s < n; s++) this.waitFor(run, s, 0, this.timeoutMs);
    return run;
  }

  /** Asks the workers to stop and terminates them (without waiting). */
  private stop(): void {
    const run = this.started;
    if (!run) return;
    this.started = undefined;
    collected.unregister(run);
    this.stopping.push(...stopRun(run));
  }

  /** Stops every worker; resolves when all have exited. A later step starts new ones. */
  async terminate(): Promise<void> {
    this.stop();
    const all = this.stopping;
    this.stopping = [];
    await Promise.all(all);
  }
}

/** Asks a run's workers to stop and terminates them; the promises resolve when each has exited. */
function stopRun(run: Started): Promise<void>[] {
  Atomics.store(run.ctl, CONTROL.command, COMMAND_STOP);
  Atomics.add(run.ctl, CONTROL.step, 1);
  Atomics.notify(run.ctl, CONTROL.step);
  return run.workers.map((w) => w.terminate().catch(() => {}));
}

const collected = new FinalizationRegistry<Started>((run) => {
  stopRun(run);
});

/** grads of `params` += a worker's gradients (laid out like the shared parameters). */
function addInto(params: readonly Var[], grads: Float32Array): void {
  let offset = 0;
  for (const p of params) {
    const g = p.gradBuffer();
    const n = p.size;
    for (let i = 0; i < n; i++) g[i] += grads[offset + i];
    offset += n;
  }
}

/** A duration for messages: '60 s', '0.2 s'. */
function seconds(ms: number): string {
  return ms >= 10_000 ? `${Math.round(ms / 1000)} s` : `${Number((ms / 1000).toPrecision(2))} s`;
}
