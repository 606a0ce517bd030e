// A pool of workers for the kernels' operations, the same on every platform: a platform adapter makes
// workers, the pool hands each call's job to as many of them as asked and resolves when all have reported.
// One decision to know: the pool never holds more workers than the platform has cores, idle workers
// are unref'd (Node) so the pool never keeps a process alive, and a worker idle for `idleMs` (30 s by
// default) is terminated, so a burst of calls does not pin its workers' memory for the process's life;
// a worker that dies or times out is replaced on the next call.

import type { FromWorker, Job, ToWorker } from './protocol.js';

/** The little a pool needs from a worker. */
export interface PoolWorker {
  /**
   * Sends a message to the worker, to be run after `post` returns (as postMessage does): the caller
   * copies a streamed job's inputs in after posting it (protocol.ts, Job.slices), so a worker that ran
   * the job inside `post`, on the caller's thread, would wait for them forever; it fails instead.
   */
  post(message: ToWorker): void;
  /** Registers the handler of the worker's messages. */
  onMessage(handler: (message: FromWorker) => void): void;
  /** Called with the error of a worker that failed outside a job (it is then discarded). */
  onError(handler: (error: Error) => void): void;
  /** Keep the process alive while busy (Node); no-ops elsewhere. */
  ref(): void;
  /** Let the process exit while the worker is idle (Node); a no-op elsewhere. */
  unref(): void;
  /** Stops the worker. */
  terminate(): void;
}

/** What a platform provides: workers, a core count, and whether shared memory works. */
export interface Platform {
  /** The platform's name, e.g. 'node' or 'browser'. */
  name: string;
  /** Starts one worker. */
  createWorker(): PoolWorker;
  /** Cores of this machine (the default thread count). */
  cores(): number;
  /** '' when SharedArrayBuffer and Atomics are usable, else why not (e.g. no cross-origin isolation). */
  sharedMemoryUnavailable(): string;
}

/** Options of a Pool. */
export interface PoolOptions {
  /** Milliseconds a worker may sit idle before it is terminated; default 30 000. */
  idleMs?: number;
  /** Called when idle timeouts have terminated the last worker (e.g. to drop buffers kept for them). */
  onEmpty?: () => void;
}

/** How long an idle worker lives by default: long enough that a loop of calls keeps its workers warm. */
export const DEFAULT_IDLE_MS = 30_000;

interface Pending {
  resolve(): void;
  reject(error: Error): void;
  remaining: number;
  failed: boolean;
}

/** A worker and what the pool knows about it. */
interface Slot {
  worker: PoolWorker;
  /** Messages posted to it that it has not answered yet. */
  inFlight: number;
  /** Fires `idleMs` after inFlight last dropped to 0. */
  idleTimer?: ReturnType<typeof setTimeout>;
}

export class Pool {
  /** Milliseconds before an idle worker is terminated (read when a worker goes idle). */
  idleMs: number;
  private readonly slots: Slot[] = [];
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private busy = 0;
  private readonly onEmpty: (() => void) | undefined;

  constructor(
    private readonly platform: Platform,
    options: PoolOptions = {},
  ) {
    this.idleMs = options.idleMs ?? DEFAULT_IDLE_MS;
    this.onEmpty = options.onEmpty;
  }

  /** Workers alive now. */
  get size(): number {
    return this.slots.length;
  }

  /** The most workers this pool will run: the platform's cores (at least 1). */
  get maxWorkers(): number {
    return Math.max(1, Math.floor(this.platform.cores()) || 1);
  }

  /** How many workers `run(job, threads)` hands the job to: `threads` capped at maxWorkers, at least 1. */
  workersFor(threads: number): number {
    return Math.max(1, Math.min(threads, this.maxWorkers));
  }

  private spawn(): Slot {
    const worker = this.platform.createWorker();
    const slot: Slot = { worker, inFlight: 0 };
    worker.onMessage((message) => {
      this.settle(message);
      if (--slot.inFlight === 0) this.startIdleTimer(slot);
    });
    worker.onError((error) => {
      // The worker is gone: fail whatever it was part of and forget it (unless the pool let it go).
      if (!this.remove(slot)) return;
      for (const [id, p] of this.pending) this.fail(id, p, error);
    });
    worker.unref();
    this.slots.push(slot);
    return slot;
  }

  /** Forgets a slot; false if it was already gone. */
  private remove(slot: Slot): boolean {
    const at = this.slots.indexOf(slot);
    if (at === -1) return false;
    this.slots.splice(at, 1);
    clearTimeout(slot.idleTimer);
    return true;
  }

  private startIdleTimer(slot: Slot): void {
    clearTimeout(slot.idleTimer);
    if (!this.slots.includes(slot)) return; // terminated or failed meanwhile
    if (this.idleMs === Number.POSITIVE_INFINITY) return; // kept until terminate()
    const timer = setTimeout(() => {
      if (slot.inFlight !== 0 || !this.remove(slot)) return;
      slot.worker.terminate();
      if (this.slots.length === 0) this.onEmpty?.();
    }, this.idleMs);
    // A pending idle timer must not keep Node alive (browsers return a number: nothing to unref).
    (timer as { unref?: () => void }).unref?.();
    slot.idleTimer = timer;
  }

  private settle(message: FromWorker): void {
    const p = this.pending.get(message.id);
    if (!p) return;
    if (message.type === 'error') {
      this.fail(message.id, p, new Error(message.message));
      return;
    }
    if (--p.remaining === 0) this.finish(message.id, p);
  }

  private fail(id: number, p: Pending, error: Error): void {
    if (p.failed) return;
    p.failed = true;
    this.finish(id, p, error);
  }

  private finish(id: number, p: Pending, error?: Error): void {
    this.pending.delete(id);
    if (--this.busy === 0) for (const s of this.slots) s.worker.unref();
    if (error) p.reject(error);
    else p.resolve();
  }

  /**
   * Runs `job` on `threads` workers, at most `maxWorkers` (spawning as needed); resolves when every
   * worker has reported.
   */
  run(job: Job, threads: number): Promise<void> {
    const n = this.workersFor(threads);
    while (this.slots.length < n) this.spawn();
    const id = this.nextId++;
    return new Promise<void>((resolve, reject) => {
      this.pending.set(id, { resolve, reject, remaining: n, failed: false });
      this.busy++;
      for (let t = 0; t < n; t++) {
        const slot = this.slots[t];
        clearTimeout(slot.idleTimer);
        slot.inFlight++;
        slot.worker.ref(); // a worker spawned while others were busy must keep the process alive too
        slot.worker.post({ type: 'run', id, job });
      }
    });
  }

  /** Stops every worker and rejects the calls still running (the pool can be used again). */
  terminate(): void {
    const slots = this.slots.splice(0);
    for (const [id, p] of this.pending) this.fail(id, p, new Error('the attention workers were terminated'));
    for (const s of slots) {
      clearTimeout(s.idleTimer);
      s.worker.terminate();
    }
  }
}
