// What a runtime owns for its threads: the platform, the worker pool (made on first use), the bounded
// shared buffers and the "runs on one thread" warning said once. `run` is the same for every operation:
// take a buffer, write the planned arguments into it, hand the job to the workers, let the caller read
// the results, give the buffer back.

import type { BufferLayout } from '../kernels/transfer.js';
import { SharedBuffers } from './buffers.js';
import { DEFAULT_IDLE_MS, type Platform, Pool } from './pool.js';
import { buffersBeingWritten, HEADER, type Job, threadGlobal } from './protocol.js';

/**
 * The "runs on one thread" reasons already said in this process, shared by every runtime (each
 * createRuntime() has its own runner) and every copy of this module (a bundle and a direct import), so a
 * reason is said once per process. Made on first use: importing qkv touches no global.
 */
function saidReasons(): Set<string> {
  return threadGlobal('qkv.oneThreadWarnings', () => new Set<string>());
}

export class ThreadRunner {
  private pool: Pool | undefined;
  private readonly buffers = new SharedBuffers();
  private idle: number;

  constructor(
    readonly platform: Platform,
    idleMs = DEFAULT_IDLE_MS,
  ) {
    this.idle = idleMs;
  }

  /** Milliseconds a worker may sit idle before it is terminated. */
  get idleMs(): number {
    return this.idle;
  }

  set idleMs(ms: number) {
    this.idle = ms;
    if (this.pool) this.pool.idleMs = ms;
  }

  /** Workers alive now. */
  get workers(): number {
    return this.pool?.size ?? 0;
  }

  /** The platform's cores (at least 1): no call uses more workers. */
  cores(): number {
    return Math.max(1, Math.floor(this.platform.cores()) || 1);
  }

  /** '' when workers can run; otherwise why not, which the first `fn` to meet it says once per process. */
  unavailable(fn: string): string {
    const reason = this.platform.sharedMemoryUnavailable();
    if (reason && !saidReasons().has(reason)) {
      saidReasons().add(reason);
      console.warn(`qkv: ${fn} runs on one thread: ${reason}`);
    }
    return reason;
  }

  /** The pool, made on first use (its last worker's idle exit drops the kept buffers). */
  getPool(): Pool {
    this.pool ??= new Pool(this.platform, { idleMs: this.idle, onEmpty: () => this.buffers.clear() });
    return this.pool;
  }

  /**
   * Runs `job`'s tasks on `workers` workers over a buffer laid out by `layout` (HEADER_BYTES first);
   * `collect` reads the results out of the buffer before it goes back for reuse. `meanwhile` runs on
   * this thread once the job is posted, while the workers compute (e.g. touching the fresh memory that
   * `collect` will write: its page faults then cost no time after the workers finish). Rejects with the
   * first worker error's message and stops the other workers' remaining tasks.
   */
  async run(
    layout: BufferLayout,
    job: Omit<Job, 'buffer'>,
    workers: number,
    collect: (buffer: SharedArrayBuffer) => void,
    meanwhile?: () => void,
  ): Promise<void> {
    const buffer = await this.buffers.take(layout.byteLength);
    const header = new Int32Array(buffer, 0, 4);
    header.fill(0);
    const slices = job.slices ?? 0; // 0: not streamed, written whole before the job is posted
    if (slices === 0) {
      try {
        layout.write(buffer); // throws e.g. on an input detached since the call (no worker has seen it)
      } catch (err) {
        this.buffers.release(buffer);
        throw err;
      }
    }
    let writeError: unknown;
    try {
      if (slices > 0) buffersBeingWritten().add(buffer);
      let done: Promise<void>;
      try {
        done = this.getPool().run({ ...job, buffer } as Job, workers);
      } finally {
        buffersBeingWritten().delete(buffer);
      }
      // Streamed: the workers wake while the inputs are written, and start on the first slices' tasks.
      for (let i = 0; i < slices && writeError === undefined; i++) {
        try {
          layout.write(buffer, [i, slices]);
        } catch (err) {
          writeError = err;
          Atomics.store(header, HEADER.cancelled, 1); // the workers stop claiming tasks
        }
        Atomics.store(header, HEADER.written, writeError === undefined ? i + 1 : slices);
        Atomics.notify(header, HEADER.written);
      }
      if (writeError === undefined) meanwhile?.();
      await done;
    } catch (err) {
      Atomics.store(header, HEADER.cancelled, 1);
      this.buffers.release(undefined); // not reused: workers may still write to it
      throw writeError ?? err; // a failed copy is the cause of whatever the workers then said
    }
    if (writeError !== undefined) {
      this.buffers.release(buffer); // every worker has stopped
      throw writeError;
    }
    try {
      collect(buffer);
    } finally {
      this.buffers.release(buffer);
    }
  }

  /** Stops the workers (calls in flight reject) and frees the kept buffers. */
  terminate(): void {
    this.pool?.terminate();
    this.buffers.clear();
  }
}
