// scaledDotProductAttentionAsync: the same call on a pool of workers (worker_threads in Node, Web
// Workers in browsers) over (batch, head, query block) tasks on shared memory.
// One decision to know: work below ~4 MFLOP runs inline (a worker round trip costs more), and without
// shared memory (a page that is not cross-origin isolated) the call runs on this thread and says so once.

import { chooseKernel } from '../kernels/registry.js';
import { float32Problem } from '../kernels/types.js';
import { sizeOf } from '../shape.js';
import type { DType, Tensor } from '../tensor.js';
import { browserPlatform } from '../threads/browser.js';
import { type Platform, Pool } from '../threads/pool.js';
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
  /** Worker threads to use; default all cores. */
  threads?: number;
}

const FN = 'scaledDotProductAttentionAsync';
const INLINE_FLOPS = 1 << 22;

let platform: Platform = browserPlatform;

// The largest shared buffer seen is kept between calls and reused. Allocating and zeroing megabytes each
// call is a measurable part of a 40 ms call; worse, a worker's heap keeps every buffer it was sent alive
// until that worker collects garbage, which an idle worker rarely does, so a fresh buffer per call
// grew the process by the job's size on every call (20 calls at (1,8,4096,64): +700 MB). A call that
// finds the buffer busy (concurrent calls) makes its own. terminateWorkers() frees it.
let spare: SharedArrayBuffer | undefined;

function takeBuffer(bytes: number): SharedArrayBuffer {
  if (spare && spare.byteLength >= bytes) {
    const b = spare;
    spare = undefined;
    return b;
  }
  return new SharedArrayBuffer(bytes);
}

function releaseBuffer(buffer: SharedArrayBuffer): void {
  if (!spare || spare.byteLength < buffer.byteLength) spare = buffer;
}
let pool: Pool | undefined;
let warned = false;

/** Sets the platform the pool makes workers with (the Node entry installs worker_threads). */
export function setThreadPlatform(next: Platform): void {
  pool?.terminate();
  pool = undefined;
  platform = next;
}

/** The pool, created on first use (exported for tests of the worker protocol). */
export function getPool(): Pool {
  pool ??= new Pool(platform);
  return pool;
}

/** Stops the pool's workers and frees the kept buffer; the next async call starts new ones. */
export function terminateWorkers(): void {
  pool?.terminate();
  spare = undefined;
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
  const threads = Math.min(requested ?? platform.cores(), p.B * p.Hq * Math.ceil(p.L / 32));
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
  const buffer = takeBuffer(bytes);
  const header = new Int32Array(buffer, 0, 2); // [task counter, cancelled]
  header[0] = 0;
  header[1] = 0;
  arrays.forEach((a, n) => {
    if (a) new Float32Array(buffer, spans[n]!.offset, a.length).set(a);
  });
  const job: Job = {
    kernel: kernel.name,
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
    throw new Error(`${FN}: ${(err as Error).message}`);
  }
  out.set(new Float32Array(buffer, outSpan.offset, out.length));
  releaseBuffer(buffer);
  return result(out, plan);
}
