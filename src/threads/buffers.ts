// The shared buffers a runtime's jobs are copied into: at most MAX_BUFFERS exist at once, in use or kept
// for reuse, and a call past the bound waits (first come, first served) for one to come back.
// Why a bound: a worker's heap keeps every buffer it was sent alive until that worker collects garbage,
// which an idle worker rarely does, so every buffer ever made stays in memory. A buffer per call grew the
// process by the job's size on every call (20 calls at (1,8,4096,64): +700 MB); one kept buffer plus a
// fresh one for each concurrent call that found it busy grew it by the concurrent jobs' sizes (50 calls
// of (1,8,2048,64), 5 at a time: 191 → 613 MB, 1.1 GB after 150, not returned by a GC).
// Why waiting costs nothing: every job goes to the pool's first `threads` workers (all of them by
// default) and a worker runs its messages one at a time, so concurrent calls took turns in the workers
// anyway. Two rather than one, so the next call copies its inputs in while the current one computes.

export const MAX_BUFFERS = 2;

export class SharedBuffers {
  private readonly kept: SharedArrayBuffer[] = [];
  /** Calls holding one of the places (with or, briefly, still without a buffer). */
  private holders = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly max = MAX_BUFFERS) {}

  /** A buffer of at least `bytes`, once one of the places is free. */
  async take(bytes: number): Promise<SharedArrayBuffer> {
    if (this.holders < this.max) this.holders++;
    else await new Promise<void>((resolve) => this.waiting.push(resolve)); // release hands its place over
    let fit = -1; // the smallest kept buffer that is large enough
    for (let i = 0; i < this.kept.length; i++) {
      const size = this.kept[i].byteLength;
      if (size >= bytes && (fit === -1 || size < this.kept[fit].byteLength)) fit = i;
    }
    if (fit !== -1) return this.kept.splice(fit, 1)[0];
    // None fits: make one, dropping the smallest kept ones so that buffers stay within the bound.
    this.kept.sort((a, b) => a.byteLength - b.byteLength);
    while (this.kept.length > 0 && this.kept.length + this.holders > this.max) this.kept.shift();
    return new SharedArrayBuffer(bytes);
  }

  /** Gives a call's place back, keeping its buffer for reuse (undefined: workers may still write to it). */
  release(buffer: SharedArrayBuffer | undefined): void {
    if (buffer) this.kept.push(buffer);
    const next = this.waiting.shift();
    if (next) next();
    else this.holders--;
  }

  /** Drops the kept buffers (the workers that saw them are gone). */
  clear(): void {
    this.kept.length = 0;
  }
}
