// One WebAssembly module per runtime (attention, its backward, GEMM, the decode kernel) and one instance
// of it per thread, with its memory: an arena of two parts. From the module's static data up, resident
// allocations (a KV cache's storage: allocateResident, owned by the caller, kept between calls until
// freed); above them, per-call scratch from `base` up, which drivers (wasm.ts, wasm-backward.ts,
// gemm-wasm.ts) lay out as they like during one call.
// One decision to know: the binary is embedded (base64) and compiled synchronously on first use; the
// relaxed-SIMD build is used where the runtime validates it, else plain SIMD128, else every WASM op
// reports itself unavailable and 'auto' moves on. Drivers share the scratch one call at a time, so a
// driver that caches what it copied asks `claim` whether another driver (or a resident allocation, which
// may move `base` up over the scratch) wrote there since. Growing the memory detaches every JS view of
// it: views of resident storage are made by residentView and re-derived by liveView, never kept stale.

import { KernelResourceError } from './types.js';
import { RELAXED_WASM_BASE64, SIMD_WASM_BASE64 } from './wasm-binary.generated.js';

/** Which build runs here: 'relaxed-simd', 'simd', or undefined with the reason in `wasmUnavailableReason`. */
export let wasmVariant: 'relaxed-simd' | 'simd' | undefined;
let wasmUnavailable = '';
let compiled: WebAssembly.Module | undefined;
let probed = false;
let runtimeFailure = '';

function decode(base64: string): Uint8Array<ArrayBuffer> {
  const text = atob(base64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

/** Feature probe: validate the relaxed build, then the plain SIMD build, and compile the first that passes. */
export function probeWasm(): typeof wasmVariant {
  if (probed) return wasmVariant;
  probed = true;
  try {
    if (typeof WebAssembly !== 'object') throw new Error('WebAssembly is not available in this runtime');
    const relaxed = decode(RELAXED_WASM_BASE64);
    const simd = decode(SIMD_WASM_BASE64);
    const variant = WebAssembly.validate(relaxed)
      ? 'relaxed-simd'
      : WebAssembly.validate(simd)
        ? 'simd'
        : undefined;
    if (!variant) throw new Error('this runtime does not support WebAssembly SIMD128');
    const bytes = variant === 'relaxed-simd' ? relaxed : simd;
    try {
      compiled = new WebAssembly.Module(bytes);
      wasmVariant = variant;
    } catch (err) {
      // An engine may refuse synchronous compilation (some limit it on a browser's main thread):
      // compile in the background and use the JS kernels until it is ready.
      void WebAssembly.compile(bytes).then((module) => {
        compiled = module;
        wasmVariant = variant;
        wasmUnavailable = '';
      });
      throw err;
    }
  } catch (err) {
    wasmVariant = undefined;
    wasmUnavailable = (err as Error).message;
  }
  return wasmVariant;
}

/** Why WASM ops cannot run here ('' when they can). */
export function wasmUnavailableReason(): string {
  probeWasm();
  return wasmUnavailable;
}

/** The last run-time failure of WASM on this thread ('' if none): 'auto' fell back then. */
export function wasmRuntimeFailure(): string {
  return runtimeFailure;
}

/**
 * A resident allocation: `bytes` bytes at byte `ptr` of one runtime's memory, kept there (never moved,
 * never overwritten by a driver's scratch) until `freeResident`. Read it through residentView.
 */
export interface WasmAllocation {
  readonly runtime: WasmRuntime;
  readonly ptr: number;
  readonly bytes: number;
  /** Set by freeResident: the bytes may belong to another allocation or to scratch now. */
  readonly freed: boolean;
}

interface Block {
  ptr: number;
  bytes: number;
  allocation?: Allocation;
}

class Allocation implements WasmAllocation {
  freed = false;
  constructor(
    readonly runtime: WasmRuntime,
    readonly ptr: number,
    readonly bytes: number,
  ) {}
}

/** The module's instance on this thread: its exports (typed by each driver), memory and a float view. */
export class WasmRuntime {
  readonly exports: WebAssembly.Exports & { memory: WebAssembly.Memory; heapBase(): number };
  /** First byte of the resident region (everything below is the module's static data); > 0. */
  private readonly heapStart: number;
  /** The resident region [heapStart, top): allocations and holes, in address order. */
  private readonly blocks: Block[] = [];
  private top: number;
  private view: Float32Array;
  private owner: object | undefined;

  constructor(module: WebAssembly.Module) {
    this.exports = new WebAssembly.Instance(module, {}).exports as WasmRuntime['exports'];
    this.heapStart = Math.max(16, this.exports.heapBase());
    this.top = this.heapStart;
    this.view = new Float32Array(this.exports.memory.buffer);
  }

  /**
   * First byte of per-call scratch (above every resident allocation), 16-aligned and > 0, so 0 means
   * "none". It moves up when a resident allocation extends the region, down when the topmost is freed.
   */
  get base(): number {
    return this.top;
  }

  /** Bytes held by live resident allocations. */
  get residentBytes(): number {
    let sum = 0;
    for (const b of this.blocks) if (b.allocation) sum += b.bytes;
    return sum;
  }

  /**
   * A resident allocation of `bytes` (rounded up to 16): the first hole that fits, else at the top of the
   * region (growing memory; a RangeError if the engine refuses). Scratch contents are forgotten when the
   * region grows over them (every driver's next `claim` is false).
   */
  allocate(bytes: number): WasmAllocation {
    const size = Math.max(16, Math.ceil(bytes / 16) * 16);
    for (let i = 0; i < this.blocks.length; i++) {
      const hole = this.blocks[i];
      if (hole.allocation || hole.bytes < size) continue;
      const a = new Allocation(this, hole.ptr, size);
      const rest = hole.bytes - size;
      this.blocks.splice(i, 1, { ptr: hole.ptr, bytes: size, allocation: a });
      if (rest > 0) this.blocks.splice(i + 1, 0, { ptr: hole.ptr + size, bytes: rest });
      return a;
    }
    this.ensure(this.top + size);
    const a = new Allocation(this, this.top, size);
    this.blocks.push({ ptr: this.top, bytes: size, allocation: a });
    this.top += size;
    this.owner = undefined; // the scratch drivers used started where this allocation is
    return a;
  }

  /** Frees an allocation of this runtime (a no-op if already freed); holes merge, a hole at the top is cut. */
  free(allocation: WasmAllocation): void {
    if (allocation.freed) return;
    const i = this.blocks.findIndex((b) => b.allocation === allocation);
    if (i < 0) return;
    (allocation as Allocation).freed = true;
    this.blocks[i] = { ptr: allocation.ptr, bytes: allocation.bytes };
    for (let j = this.blocks.length - 1; j > 0; j--) {
      const a = this.blocks[j - 1];
      const b = this.blocks[j];
      if (!a.allocation && !b.allocation) {
        a.bytes += b.bytes;
        this.blocks.splice(j, 1);
      }
    }
    const last = this.blocks[this.blocks.length - 1];
    if (last && !last.allocation) {
      this.blocks.pop();
      this.top = last.ptr;
    }
  }

  /** A float32 view of the whole memory (re-made after growth, which detaches the old buffer). */
  get f32(): Float32Array {
    if (this.view.buffer !== this.exports.memory.buffer)
      this.view = new Float32Array(this.exports.memory.buffer);
    return this.view;
  }

  /** Grows memory to at least `bytes` (a RangeError if the engine refuses). */
  ensure(bytes: number): void {
    const memory = this.exports.memory;
    if (memory.buffer.byteLength < bytes) memory.grow(Math.ceil((bytes - memory.buffer.byteLength) / 65536));
  }

  /** Marks `driver` as the one whose data is in memory; false if another driver wrote there since it last did. */
  claim(driver: object): boolean {
    const same = this.owner === driver;
    this.owner = driver;
    return same;
  }

  get bytes(): number {
    return this.exports.memory.buffer.byteLength;
  }
}

let instance: WasmRuntime | undefined;

/** WASM memory cannot shrink: after a call that grew it past this, the instance is dropped (and freed). */
const KEEP_BYTES = 64 << 20;

/**
 * Runs `fn` with this thread's instance (made on first use). If the engine refuses memory (instantiation
 * or Memory.grow: a RangeError), the instance is dropped so its memory can be freed, an instance that could
 * never be made disables WASM here, and a KernelResourceError tells 'auto' to fall back.
 */
export function withWasm<T>(op: string, fn: (rt: WasmRuntime) => T): T {
  if (!compiled && !probeWasm()) throw new Error(`${op}: ${wasmUnavailable}`);
  try {
    instance ??= new WasmRuntime(compiled!);
    return fn(instance);
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    const made = instance !== undefined;
    // An instance holding resident allocations stays: a refused grow leaves its memory as it was.
    if (!instance?.residentBytes) instance = undefined;
    runtimeFailure = `${made ? 'growing' : 'creating'} its WebAssembly memory failed: ${err.message}`;
    if (!made) wasmUnavailable = `WebAssembly is validated but ${runtimeFailure}`;
    throw new KernelResourceError(`${op}: ${runtimeFailure}`);
  }
}

/**
 * Drops this thread's instance if a call grew it past KEEP_BYTES (called when a call is done), unless it
 * holds resident allocations: those keep the instance, and its memory, until they are freed.
 */
export function releaseWasm(): void {
  if (instance && instance.bytes > KEEP_BYTES && !instance.residentBytes) instance = undefined;
}

/** Frees resident allocations whose owner was garbage-collected without freeing them. */
const finalizer = new FinalizationRegistry<WasmAllocation>((a) => a.runtime.free(a));

/**
 * A resident allocation of `bytes` in this thread's instance (made on first use), for `owner`: freed by
 * freeResident, or when `owner` is garbage-collected. Undefined where WASM cannot run here (the caller
 * keeps its data in JS arrays then).
 * @throws RangeError naming `fn` if the engine refuses the memory.
 */
export function allocateResident(fn: string, bytes: number, owner: object): WasmAllocation | undefined {
  if (wasmSupport() !== true) return undefined;
  try {
    instance ??= new WasmRuntime(compiled!);
    const a = instance.allocate(bytes);
    finalizer.register(owner, a, a);
    return a;
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    throw new RangeError(`${fn}: cannot allocate ${bytes} bytes of WebAssembly memory: ${err.message}`);
  }
}

/** Frees a resident allocation (a no-op if it already was); its views must not be read afterwards. */
export function freeResident(allocation: WasmAllocation): void {
  finalizer.unregister(allocation);
  allocation.runtime.free(allocation);
  // The last resident allocation of an instance grown past KEEP_BYTES: give the memory back now, as a
  // kernel call's end does, rather than at the next call.
  if (allocation.runtime === instance) releaseWasm();
}

/** Where a resident view points: its allocation, and the byte offset and length inside it. */
const residentViews = new WeakMap<
  Float32Array,
  { allocation: WasmAllocation; offset: number; length: number }
>();

/**
 * A Float32Array of `length` floats at byte `offset` of a resident allocation. It is valid until the
 * memory grows (which detaches it); liveView re-derives it then.
 */
export function residentView(allocation: WasmAllocation, offset: number, length: number): Float32Array {
  if (allocation.freed) throw new Error('residentView: the allocation was freed');
  const view = new Float32Array(allocation.runtime.exports.memory.buffer, allocation.ptr + offset, length);
  residentViews.set(view, { allocation, offset, length });
  return view;
}

/** `x` itself, or, if it is a resident view the memory's growth detached, a fresh view of the same floats. */
export function liveView(x: Float32Array): Float32Array {
  const r = residentViews.get(x);
  if (!r) return x;
  // Checked first: a freed allocation's bytes may already hold another cache's data, and a view that the
  // memory's growth did not detach would read them without a word (an async call whose resident cache
  // was disposed, reset or regrown while the call waited for its workers).
  if (r.allocation.freed) {
    throw new Error(
      'a view of resident WebAssembly memory was read after it was freed: its KV cache was disposed or grew its storage while a call that reads it was still running',
    );
  }
  if (x.buffer === r.allocation.runtime.exports.memory.buffer) return x;
  return residentView(r.allocation, r.offset, r.length);
}

/** The resident allocation `x` views (byte offset of x[0] from the memory's start), or undefined. */
export function residentAddress(x: Float32Array, rt: WasmRuntime): number | undefined {
  const r = residentViews.get(x);
  if (!r || r.allocation.runtime !== rt || r.allocation.freed) return undefined;
  return r.allocation.ptr + r.offset;
}

/** Bytes of WASM memory this thread's instance holds (0 when it has none); for tests and tools. */
export function wasmMemoryBytes(): number {
  return instance ? instance.bytes : 0;
}

/** Bytes of live resident allocations in this thread's instance; for tests and tools. */
export function wasmResidentBytes(): number {
  return instance ? instance.residentBytes : 0;
}

/** Why a WASM op cannot serve here, or true: for the ops' `supports`. */
export function wasmSupport(): true | string {
  if (!probeWasm()) return `WebAssembly SIMD is unavailable: ${wasmUnavailable}`;
  if (wasmUnavailable) return wasmUnavailable;
  return true;
}

const callIds = new WeakMap<object, number>();
let nextCallId = 1;

/**
 * A number that names `problem` for as long as it lives (1, 2, …; never reused), so a driver can tell
 * whether the memory already holds what it copied for this call without keeping the call's arrays alive.
 * A WeakMap and not a WeakRef: a WeakRef keeps its target until the current job ends, so a synchronous
 * loop of calls (a training loop that never awaits) would keep every call's tensors alive until it ends.
 */
export function callId(problem: object): number {
  let id = callIds.get(problem);
  if (id === undefined) {
    id = nextCallId++;
    callIds.set(problem, id);
  }
  return id;
}
