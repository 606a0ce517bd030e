// A pool of workers for attention, the same on every platform: a platform adapter makes workers,
// the pool hands each call's job to as many of them as asked and resolves when all have reported.
// One decision to know: idle workers are unref'd (Node), so the pool never keeps a process alive
// after the caller's work is done; a worker that dies is replaced on the next call.

import type { FromWorker, Job, ToWorker } from './protocol.js';

/** The little a pool needs from a worker. */
export interface PoolWorker {
  post(message: ToWorker): void;
  onMessage(handler: (message: FromWorker) => void): void;
  /** Called with the error of a worker that failed outside a job (it is then discarded). */
  onError(handler: (error: Error) => void): void;
  /** Keep the process alive while busy (Node); no-ops elsewhere. */
  ref(): void;
  unref(): void;
  terminate(): void;
}

/** What a platform provides: workers, a core count, and whether shared memory works. */
export interface Platform {
  name: string;
  createWorker(): PoolWorker;
  cores(): number;
  /** '' when SharedArrayBuffer and Atomics are usable, else why not (e.g. no cross-origin isolation). */
  sharedMemoryUnavailable(): string;
}

interface Pending {
  resolve(): void;
  reject(error: Error): void;
  remaining: number;
  failed: boolean;
}

export class Pool {
  private readonly workers: PoolWorker[] = [];
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private busy = 0;

  constructor(private readonly platform: Platform) {}

  get size(): number {
    return this.workers.length;
  }

  private spawn(): PoolWorker {
    const worker = this.platform.createWorker();
    worker.onMessage((message) => this.settle(message));
    worker.onError((error) => {
      // The worker is gone: fail whatever it was part of and forget it (unless terminate() let it go).
      const at = this.workers.indexOf(worker);
      if (at === -1) return;
      this.workers.splice(at, 1);
      for (const [id, p] of this.pending) this.fail(id, p, error);
    });
    worker.unref();
    this.workers.push(worker);
    return worker;
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
    if (--this.busy === 0) for (const w of this.workers) w.unref();
    if (error) p.reject(error);
    else p.resolve();
  }

  /** Runs `job` on `threads` workers (spawning as needed); resolves when every worker has reported. */
  run(job: Job, threads: number): Promise<void> {
    while (this.workers.length < threads) this.spawn();
    const id = this.nextId++;
    return new Promise<void>((resolve, reject) => {
      this.pending.set(id, { resolve, reject, remaining: threads, failed: false });
      if (this.busy++ === 0) for (const w of this.workers) w.ref();
      for (let t = 0; t < threads; t++) this.workers[t].post({ type: 'run', id, job });
    });
  }

  /** Stops every worker and rejects the calls still running (the pool can be used again). */
  terminate(): void {
    const workers = this.workers.splice(0);
    for (const [id, p] of this.pending) this.fail(id, p, new Error('the attention workers were terminated'));
    for (const w of workers) w.terminate();
  }
}
