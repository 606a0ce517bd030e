// scaledDotProductAttentionAsync: the same call on a pool of workers (worker_threads in Node, Web
// Workers in browsers) over (batch, head, query block) tasks on shared memory.
// One decision to know: work below ~4 MFLOP runs inline (a worker round trip costs more), and without
// shared memory (a page that is not cross-origin isolated) the call runs on this thread and says so once.

import { chooseKernel, fallbackFor } from '../kernels/registry.js';
import { float32Problem } from '../kernels/types.js';
import { sizeOf } from '../shape.js';
import type { DType, Tensor } from '../tensor.js';
import { browserPlatform } from '../threads/browser.js';
import { DEFAULT_IDLE_MS, type Platform, Pool } from '../threads/pool.js';
import type { Job, Span } from '../threads/protocol.js';
import {
  type AnyResultOptions,
  type AttentionInput,
  type AttentionOptions,
  type HalfResultOptions,
  planAttention,
} from './plan.js';
import { result, runKernel } from './sdpa.js';

/** Options of scaledDotProductAttentionAsync: those of scaledDotProductAttention, plus `threads`. */
export interface AsyncAttentionOptions extends AttentionOptions {
  /**
   * Worker threads to use; default all cores. Capped at the core count (`os.availableParallelism()` in
   * Node, `navigator.hardwareConcurrency` in browsers): more workers than cores only cost memory (each is
   * a JS heap and a WASM instance, ~10 MB), so `threads: 256` on 8 cores runs 8 workers.
   */
  threads?: number;
}

const FN = 'scaledDotProductAttentionAsync';
const INLINE_FLOPS = 1 << 22;

let platform: Platform = browserPlatform;
let idleMs = DEFAULT_IDLE_MS;

// Shared buffers: at most MAX_BUFFERS exist at once, in use or kept for reuse, and a call past the bound
// waits (first come, first served) for one to come back.
// Why a bound: a worker's heap keeps every buffer it was sent alive until that worker collects garbage,
// which an idle worker rarely does, so every buffer ever made stays in memory. A buffer per call grew the
// process by the job's size on every call (20 calls at (1,8,4096,64): +700 MB); one kept buffer plus a
// fresh one for each concurrent call that found it busy grew it by the concurrent jobs' sizes (50 calls
// of (1,8,2048,64), 5 at a time: 191 → 613 MB, 1.1 GB after 150, not returned by a GC).
// Why waiting costs nothing: every job goes to the pool's first `threads` workers (all of them by
// default) and a worker runs its messages one at a time, so concurrent calls took turns in the workers
// anyway. Two rather than one, so the next call copies its inputs in while the current one computes.
const MAX_BUFFERS = 2;
const kept: SharedArrayBuffer[] = [];
let holders = 0; // calls holding one of the MAX_BUFFERS places (with or, briefly, still without a buffer)
const waiting: (() => void)[] = [];

async function takeBuffer(bytes: number): Promise<SharedArrayBuffer> {
  if (holders < MAX_BUFFERS) holders++;
  else await new Promise<void>((resolve) => waiting.push(resolve)); // releaseBuffer hands its place over
  let fit = -1; // the smallest kept buffer that is large enough
  for (let i = 0; i < kept.length; i++) {
    if (kept[i].byteLength >= bytes && (fit === -1 || kept[i].byteLength < kept[fit].byteLength)) fit = i;
  }
  if (fit !== -1) return kept.splice(fit, 1)[0];
  // None fits: make one, dropping the smallest kept ones so that buffers stay within the bound.
  kept.sort((a, b) => a.byteLength - b.byteLength);
  while (kept.length > 0 && kept.length + holders > MAX_BUFFERS) kept.shift();
  return new SharedArrayBuffer(bytes);
}

/** Gives a call's place back, keeping its buffer for reuse (undefined: workers may still write to it). */
function releaseBuffer(buffer: SharedArrayBuffer | undefined): void {
  if (buffer) kept.push(buffer);
  const next = waiting.shift();
  if (next) next();
  else holders--;
}

let pool: Pool | undefined;
let warned = false;

/** Sets the platform the pool makes workers with (the Node entry installs worker_threads). */
export function setThreadPlatform(next: Platform): void {
  pool?.terminate();
  pool = undefined;
  platform = next;
}

/**
 * Sets how long a worker may sit idle before it is terminated (default 30 000 ms; tests shorten it).
 * When the last worker goes, the kept buffers go with it; the next call starts new workers.
 */
export function setWorkerIdleTimeout(ms: number): void {
  if (!(ms >= 0)) throw new RangeError(`setWorkerIdleTimeout: ms must be ≥ 0, got ${String(ms)}`);
  idleMs = ms;
  if (pool) pool.idleMs = ms;
}

/** The pool, created on first use (exported for tests of the worker protocol). */
export function getPool(): Pool {
  pool ??= new Pool(platform, {
    idleMs,
    onEmpty: () => {
      kept.length = 0;
    },
  });
  return pool;
}

/** Stops the pool's workers and frees the kept buffers; the next async call starts new ones. */
export function terminateWorkers(): void {
  pool?.terminate();
  kept.length = 0;
}

/**
 * `scaledDotProductAttention` on worker threads: same arguments, semantics and result, as a Promise.
 * Rejects with the worker's original message if a kernel fails inside a worker.
 *
 * @example
 * const out = await scaledDotProductAttentionAsync(q, k, v, { causal: true, threads: 2 });
 */
export function scaledDotProductAttentionAsync(
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  options?: AsyncAttentionOptions,
): Promise<Tensor>;
export function scaledDotProductAttentionAsync(
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  options: HalfResultOptions<AsyncAttentionOptions>,
): Promise<Tensor<'float16'>>;
export function scaledDotProductAttentionAsync(
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  options: AnyResultOptions<AsyncAttentionOptions>,
): Promise<Tensor<DType>>;
export async function scaledDotProductAttentionAsync(
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  options: AnyResultOptions<AsyncAttentionOptions> = {},
): Promise<Tensor<DType>> {
  const { threads: requested, ...attention } = options;
  if (requested !== undefined && (!Number.isSafeInteger(requested) || requested < 1)) {
    throw new RangeError(`${FN}: threads must be a positive integer, got ${String(requested)}`);
  }
  const plan = planAttention(FN, q, k, v, attention);
  const p = plan.problem;
  const out = new Float32Array(sizeOf(plan.outShape));
  const flops = 4 * p.B * p.Hq * p.L * p.S * Math.max(p.E, p.Ev);
  const noShared = platform.sharedMemoryUnavailable();
  if (noShared && !warned) {
    warned = true;
    console.warn(`qkv: ${FN} runs on one thread: ${noShared}`);
  }
  // More workers than cores only cost memory; the pool enforces the same cap.
  const cores = Math.max(1, Math.floor(platform.cores()) || 1);
  const threads = Math.min(requested ?? cores, cores, p.B * p.Hq * Math.ceil(p.L / 32));
  if (noShared || flops < INLINE_FLOPS || threads < 1) {
    runKernel(FN, plan, { out });
    return result(out, plan);
  }

  // Workers get float32 (halves would need a second code path); the inline path above reads halves.
  const kernel = chooseKernel(FN, plan.kernel, p, { out });
  const w = float32Problem(p);
  // Rows per task: at least 4 tasks per thread for balance, multiples of 32 rows, at most one head.
  const rowsPerTask = Math.min(p.L, Math.max(32, Math.ceil((p.B * p.Hq * p.L) / (threads * 4) / 32) * 32));
  const tasks = p.B * p.Hq * Math.ceil(p.L / rowsPerTask);

  // One shared buffer: task counter | q | k | v | mask | bias | out.
  const arrays = [w.q, w.k, w.v, p.mask?.data, p.bias?.data];
  let bytes = 16;
  const spans: (Span | undefined)[] = arrays.map((a) => {
    if (!a) return undefined;
    const span = { offset: bytes, length: a.length };
    bytes += Math.ceil((a.length * 4) / 16) * 16;
    return span;
  });
  const outSpan = { offset: bytes, length: out.length };
  bytes += out.length * 4;
  const buffer = await takeBuffer(bytes);
  const header = new Int32Array(buffer, 0, 2); // [task counter, cancelled]
  header[0] = 0;
  header[1] = 0;
  arrays.forEach((a, n) => {
    if (a) new Float32Array(buffer, spans[n]!.offset, a.length).set(a);
  });
  const job: Job = {
    kernel: kernel.name,
    fallback: fallbackFor(plan.kernel, kernel, p, { out })?.name,
    buffer,
    tasks,
    rowsPerTask,
    dims: {
      B: p.B,
      Hq: p.Hq,
      Hkv: p.Hkv,
      L: p.L,
      S: p.S,
      E: p.E,
      Ev: p.Ev,
      scale: p.scale,
      shift: p.shift,
      left: p.left,
      right: p.right,
      precision: p.precision,
    },
    q: spans[0]!,
    k: spans[1]!,
    v: spans[2]!,
    out: outSpan,
    mask: p.mask && { ...spans[3]!, sb: p.mask.sb, sh: p.mask.sh, sl: p.mask.sl, ss: p.mask.ss },
    bias: p.bias && { ...spans[4]!, sb: p.bias.sb, sh: p.bias.sh, sl: p.bias.sl, ss: p.bias.ss },
  };
  try {
    await getPool().run(job, Math.min(threads, tasks));
  } catch (err) {
    // Stop the other workers' remaining tasks; the buffer is not reused, as they may still write to it.
    Atomics.store(header, 1, 1);
    releaseBuffer(undefined);
    throw new Error(`${FN}: ${(err as Error).message}`);
  }
  out.set(new Float32Array(buffer, outSpan.offset, out.length));
  releaseBuffer(buffer);
  return result(out, plan);
}
