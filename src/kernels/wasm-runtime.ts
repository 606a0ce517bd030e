// One WebAssembly module per runtime (every WASM op: attention today, GEMM next) and one instance of it
// per thread, with its memory. Drivers (wasm.ts for attention) lay out their buffers in that memory.
// One decision to know: the binary is embedded (base64) and compiled synchronously on first use; the
// relaxed-SIMD build is used where the runtime validates it, else plain SIMD128, else every WASM op
// reports itself unavailable and 'auto' moves on. Drivers share the memory one call at a time, so a
// driver that caches what it copied asks `claim` whether another driver wrote there since.

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

/** The module's instance on this thread: its exports (typed by each driver), memory and a float view. */
export class WasmRuntime {
  readonly exports: WebAssembly.Exports & { memory: WebAssembly.Memory; heapBase(): number };
  /** First byte drivers may use (everything below is the module's static data); > 0, so 0 means "none". */
  readonly base: number;
  private view: Float32Array;
  private owner: object | undefined;

  constructor(module: WebAssembly.Module) {
    this.exports = new WebAssembly.Instance(module, {}).exports as WasmRuntime['exports'];
    this.base = Math.max(16, this.exports.heapBase());
    this.view = new Float32Array(this.exports.memory.buffer);
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
    instance = undefined;
    runtimeFailure = `${made ? 'growing' : 'creating'} its WebAssembly memory failed: ${err.message}`;
    if (!made) wasmUnavailable = `WebAssembly is validated but ${runtimeFailure}`;
    throw new KernelResourceError(`${op}: ${runtimeFailure}`);
  }
}

/** Drops this thread's instance if a call grew it past KEEP_BYTES (called when a call is done). */
export function releaseWasm(): void {
  if (instance && instance.bytes > KEEP_BYTES) instance = undefined;
}

/** Bytes of WASM memory this thread's instance holds (0 when it has none); for tests and tools. */
export function wasmMemoryBytes(): number {
  return instance ? instance.bytes : 0;
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
