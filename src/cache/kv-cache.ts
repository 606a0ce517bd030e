// KVCache: the keys and values of earlier tokens, per layer, for incremental decoding.
// One decision to know: storage is [B, Hkv, capacity, ·] per layer (capacity doubles, or is maxLength up
// front), so an append writes only its new rows, and attention reads the rows in place through the
// kernels' K/V layout (kvRow with a head stride of `capacity`; a window cache's ring is read there too,
// from the oldest slot on, and unrolled only when it grows). `update()` still returns the full cached
// K/V as Tensors, but lazily: `.key` / `.value` build the dense [B, Hkv, S, ·] copy only when read, so
// the model's cached forward (planCachedAttention, then runKernel) never pays an O(S) copy per token.
// Lengths are per layer; `length` is the last layer's, so it moves once a step has updated every layer.
// With `resident: true` each layer's storage is one allocation in this thread's WebAssembly memory
// (kernels/wasm-runtime.ts), so the WASM kernel's decode path reads it where it lies; its Float32Array
// views are re-derived whenever the memory has grown (growth detaches them), never kept stale.

import { planStoredAttention } from '../attention/paged.js';
import type {
  AnyResultOptions,
  AttentionInput,
  AttentionOptions,
  AttentionPlan,
  HalfResultOptions,
} from '../attention/plan.js';
import { result, runKernel } from '../attention/sdpa.js';
import {
  allocateResident,
  freeResident,
  liveView,
  residentView,
  type WasmAllocation,
  wasmSupport,
} from '../kernels/wasm-runtime.js';
import {
  checkAllocation,
  checkBoolean,
  checkInteger,
  checkOptionNames,
  formatShape,
  formatValue,
} from '../shape.js';
import { type DType, Tensor, type TensorLike, toTensor } from '../tensor.js';
import type { StoredKV } from './paged.js';

/** Constructor options of KVCache. */
export interface KVCacheOptions {
  /** Layers of the model; each is updated with its own keys and values. */
  numLayers: number;
  /** Hkv: key/value heads. */
  numKvHeads: number;
  /** E: width of a key. */
  headDim: number;
  /** Ev: width of a value; default headDim. */
  valueDim?: number;
  /** Most tokens a sequence may reach; storage for it is allocated at the first update. Default unbounded. */
  maxLength?: number;
  /**
   * Sliding window w: keep only what attention with `window: [w − 1, 0]` (causal) still needs, the last
   * w tokens for one-token steps (w − 1 + L_new during a step of L_new tokens), in a ring buffer.
   */
  window?: number;
  /**
   * Keep the keys and values in this thread's WebAssembly memory (default false), where the WASM kernel
   * reads them in place for a decode step instead of copying them in per call. The storage stays there
   * until `dispose()` (or until the cache is garbage-collected). Where WebAssembly SIMD is unavailable the
   * cache keeps JS arrays (`resident` then reads false).
   */
  resident?: boolean;
}

/** What `KVCache.update` returns: everything the layer holds, as dense tensors built when first read. */
export interface KVCacheUpdate {
  /** [B, Hkv, S, E]: the layer's keys, oldest first (S = every token, or the window's for a window cache). */
  readonly key: Tensor;
  /** [B, Hkv, S, Ev] */
  readonly value: Tensor;
}

const OPTIONS = [
  'numLayers',
  'numKvHeads',
  'headDim',
  'valueDim',
  'maxLength',
  'window',
  'resident',
] as const;

/** One layer's storage and counters. */
interface Layer {
  /**
   * [B, Hkv, capacity, E] and [B, Hkv, capacity, Ev]; empty until the first update. With resident
   * storage, views of `allocation` that growth of the WASM memory detaches: read them through keysOf /
   * valuesOf.
   */
  k: Float32Array;
  v: Float32Array;
  /** The resident storage: K then V (16-aligned), or undefined for JS arrays. */
  allocation?: WasmAllocation;
  capacity: number;
  /** Slot of the oldest key held (0 until a window cache's ring wraps). */
  start: number;
  /** Keys held: the last update's S, what attention reads. */
  held: number;
  /** Tokens appended since reset (held < length once a window cache drops old ones). */
  length: number;
  /** Bumped whenever rows an earlier update result refers to may be overwritten (see KVCacheUpdate). */
  epoch: number;
  /** What bumped it last, for the error a stale result gives ('the layer was truncated', …). */
  why: string;
}

/**
 * A key/value cache for incremental decoding. `update(layer, key, value)` appends key [B, Hkv, L_new, E]
 * and value [B, Hkv, L_new, Ev] and returns everything the layer holds, so attending with the new
 * queries over `key` / `value` (causal) equals attention over the whole sequence. Appends are amortised
 * O(L_new): rows go into preallocated storage that doubles when full.
 *
 * `length` is the number of tokens of the sequence: the last layer's count, so it changes only when a
 * step has updated every layer (each layer keeps its own count: `layerLength(layer)`).
 *
 * With `window: w` the cache keeps only the keys a sliding window [w − 1, 0] still needs (a ring buffer),
 * and attention over what `update` returns with `{ causal: true, window: [w − 1, 0] }` equals sliding-window
 * attention over the whole sequence; `length` still counts every token (the next token's position).
 *
 * @example
 * const cache = new KVCache({ numLayers: 2, numKvHeads: 4, headDim: 16 });
 * const k = Tensor.randn([1, 4, 10, 16], { seed: 1 });
 * const { key, value } = cache.update(0, k, k); // [1, 4, 10, 16] each
 * cache.update(1, k, k);
 * cache.length; // 10
 */
export class KVCache {
  readonly numLayers: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  readonly valueDim: number;
  readonly maxLength: number | undefined;
  readonly window: number | undefined;
  /** Whether the storage is in WebAssembly memory (asked for with `resident: true` and WASM runs here). */
  readonly resident: boolean;

  readonly #layers: Layer[];
  /** The batch size of the sequence in the cache (undefined while it is empty). */
  #batch: number | undefined;
  /** The batch size the allocated storage is for. */
  #storageBatch: number | undefined;

  /** @throws on a missing or non-integer size, or unknown options. */
  constructor(options: KVCacheOptions) {
    const fn = 'KVCache';
    if (options === null || typeof options !== 'object') {
      throw new TypeError(`${fn}: options must be an object, got ${formatValue(options)}`);
    }
    checkOptionNames(fn, options, OPTIONS);
    const {
      numLayers,
      numKvHeads,
      headDim,
      valueDim = headDim,
      maxLength,
      window,
      resident = false,
    } = options;
    checkInteger(fn, 'numLayers', numLayers, 1);
    checkInteger(fn, 'numKvHeads', numKvHeads, 1);
    checkInteger(fn, 'headDim', headDim, 1);
    checkInteger(fn, 'valueDim', valueDim, 0);
    if (maxLength !== undefined) checkInteger(fn, 'maxLength', maxLength, 1);
    if (window !== undefined) checkInteger(fn, 'window', window, 1);
    checkBoolean(fn, 'resident', resident);
    this.numLayers = numLayers;
    this.numKvHeads = numKvHeads;
    this.headDim = headDim;
    this.valueDim = valueDim;
    this.maxLength = maxLength;
    this.window = window;
    this.resident = resident && residentSupported();
    this.#layers = Array.from({ length: numLayers }, () => emptyLayer());
  }

  /** Tokens of the sequence once a step has updated every layer (the last layer's count). */
  get length(): number {
    return this.#layers[this.numLayers - 1].length;
  }

  /** Tokens appended to `layer` since the last reset. */
  layerLength(layer: number): number {
    return this.#layer('KVCache.layerLength', layer).length;
  }

  /** Keys `layer` holds now (what its last update returned): its length, or fewer with a window. */
  heldLength(layer: number): number {
    return this.#layer('KVCache.heldLength', layer).held;
  }

  /**
   * Appends key [B, Hkv, L_new, E] and value [B, Hkv, L_new, Ev] to `layer` and returns everything the
   * layer holds, [B, Hkv, S, E] and [B, Hkv, S, Ev] (S = its length; with a window, its last
   * min(length, w − 1 + L_new) tokens). The tensors are built when `.key` / `.value` are first read: read
   * them before the layer is truncated, reset or disposed (or, with a window, updated again; resident,
   * updated past its capacity), or that read throws.
   * @throws if `layer` is out of range, the shapes do not match the cache or each other, B differs from
   *   the sequence's, or the sequence would exceed maxLength. Nothing is changed then.
   */
  update(layer: number, key: TensorLike | Tensor<DType>, value: TensorLike | Tensor<DType>): KVCacheUpdate {
    const fn = 'KVCache.update';
    const st = this.#layer(fn, layer);
    const k = toTensor(key, fn, 'key');
    const v = toTensor(value, fn, 'value');
    const Hkv = this.numKvHeads;
    const E = this.headDim;
    const Ev = this.valueDim;
    const shapes = `key ${formatShape(k.shape)}, value ${formatShape(v.shape)}; the cache expects [B, ${Hkv}, L_new, ${E}] and [B, ${Hkv}, L_new, ${Ev}]`;
    if (k.rank !== 4 || k.shape[1] !== Hkv || k.shape[3] !== E) {
      throw new RangeError(`${fn}: key must be [B, numKvHeads, L_new, headDim] (${shapes})`);
    }
    if (v.rank !== 4 || v.shape[1] !== Hkv || v.shape[3] !== Ev) {
      throw new RangeError(`${fn}: value must be [B, numKvHeads, L_new, valueDim] (${shapes})`);
    }
    const [B, , L] = k.shape;
    if (v.shape[0] !== B || v.shape[2] !== L) {
      throw new RangeError(`${fn}: key and value must have the same B and L_new (${shapes})`);
    }
    if (this.#batch !== undefined && B !== this.#batch) {
      throw new RangeError(
        `${fn}: key has batch B=${B} but the sequence in the cache has B=${this.#batch}; B cannot change mid-sequence (reset() first) (${shapes})`,
      );
    }
    const length = st.length + L;
    if (this.maxLength !== undefined && length > this.maxLength) {
      throw new RangeError(
        `${fn}: layer ${layer} would hold ${length} tokens (${st.length} + L_new=${L}), more than maxLength=${this.maxLength} (${shapes})`,
      );
    }
    const keep = this.window === undefined ? length : Math.min(length, this.window - 1 + L);

    if (this.#storageBatch !== undefined && this.#storageBatch !== B) {
      // Another batch size (after reset): drop the storage of every layer (in place: `st` is one of them).
      for (const layer of this.#layers) dropStorage(layer, `the cache's storage was remade for batch ${B}`);
    }
    this.#storageBatch = B;
    this.#batch = B;
    if (keep > st.capacity) this.#grow(fn, st, B, keep);

    // Write the new rows after the held ones, run by run (the ring wraps at most once per run).
    const cap = st.capacity;
    const sk = keysOf(st);
    const sv = valuesOf(st);
    const at = st.start + st.held; // slot of the first new row, before wrapping
    for (let bh = 0; bh < B * Hkv; bh++) {
      for (let t = 0; t < L; ) {
        const slot = (at + t) % cap;
        const run = Math.min(L - t, cap - slot);
        const src = bh * L + t;
        const dst = bh * cap + slot;
        sk.set(k.data.subarray(src * E, (src + run) * E), dst * E);
        sv.set(v.data.subarray(src * Ev, (src + run) * Ev), dst * Ev);
        t += run;
      }
    }
    if (st.held + L > cap) {
      st.epoch++; // the ring overwrote rows an earlier result may still refer to
      st.why = 'the window cache was updated again (its ring overwrote the oldest rows)';
    }
    st.start = cap === 0 ? 0 : (st.start + st.held + L - keep) % cap;
    st.held = keep;
    st.length = length;
    return new LazyKV(fn, st, B, Hkv, E, Ev, layer);
  }

  /**
   * Empties every layer and frees its storage (for resident storage: gives its WebAssembly memory back to
   * the runtime's arena). The cache stays usable: the next update allocates again.
   */
  dispose(): void {
    for (const st of this.#layers) dropStorage(st, 'the cache was disposed');
    this.#batch = undefined;
    this.#storageBatch = undefined;
  }

  /** Empties every layer (storage is kept for the next sequence of the same batch size). */
  reset(): void {
    for (const st of this.#layers) {
      st.start = 0;
      st.held = 0;
      st.length = 0;
      st.epoch++;
      st.why = 'the cache was reset';
    }
    this.#batch = undefined;
  }

  /**
   * Keeps the first n tokens of every layer (drops the rest, e.g. rejected speculative tokens).
   * @throws if n exceeds a layer's length, or with a window if tokens the window would need after the
   *   cut were already dropped.
   */
  truncate(n: number): void {
    const fn = 'KVCache.truncate';
    checkInteger(fn, 'n', n, 0);
    const w = this.window;
    this.#layers.forEach((st, layer) => {
      if (n > st.length) {
        throw new RangeError(`${fn}: n=${n} but layer ${layer} holds only ${st.length} tokens`);
      }
      if (w !== undefined && n > 0 && st.held - (st.length - n) < Math.min(n, w - 1)) {
        const oldest = st.length - st.held;
        throw new RangeError(
          `${fn}: n=${n} needs tokens ${Math.max(0, n - w + 1)} … ${n - 1} of layer ${layer}, but its window (w=${w}) has dropped every token before ${oldest}; truncate to n ≥ ${oldest + w - 1}, or to 0`,
        );
      }
    });
    for (const st of this.#layers) {
      st.held = n === 0 ? 0 : st.held - (st.length - n);
      if (n === 0) st.start = 0;
      st.length = n;
      st.epoch++;
      st.why = `the cache was truncated to ${n} tokens`;
    }
    if (n === 0) this.#batch = undefined;
  }

  /**
   * What `layer` holds now, as `update` returned it after the layer's last update (dense tensors built on
   * first read): for views of a cache a model filled, e.g. the keys of every token so far.
   * @throws if `layer` is out of range or the cache is empty.
   */
  read(layer: number): KVCacheUpdate {
    const fn = 'KVCache.read';
    const st = this.#layer(fn, layer);
    if (this.#batch === undefined) throw new Error(`${fn}: the cache is empty; nothing is held yet`);
    return new LazyKV(fn, st, this.#batch, this.numKvHeads, this.headDim, this.valueDim, layer);
  }

  /**
   * Attention of q [B, Hq, L, E] over everything `layer` holds (what its last update returned), read in
   * place with no dense copy → [B, Hq, L, Ev]. Options as scaledDotProductAttention's: `causal: true`
   * aligns q's last row with the newest key; a window cache also applies its window. A decode step's
   * `update` then `attention` is scaledDotProductAttention over `update(…).key` / `.value` without
   * building them; with resident storage the WASM kernel reads the keys where they lie.
   * @throws if `layer` is out of range, the cache is empty, or as scaledDotProductAttention does.
   * @example
   * const cache = new KVCache({ numLayers: 1, numKvHeads: 2, headDim: 16, resident: true });
   * cache.update(0, Tensor.randn([1, 2, 10, 16], { seed: 1 }), Tensor.randn([1, 2, 10, 16], { seed: 2 }));
   * const out = cache.attention(0, Tensor.randn([1, 8, 1, 16], { seed: 3 }), { causal: true }); // [1, 8, 1, 16]
   */
  attention(layer: number, q: AttentionInput, options?: AttentionOptions): Tensor;
  attention(
    layer: number,
    q: AttentionInput,
    options: HalfResultOptions<AttentionOptions>,
  ): Tensor<'float16'>;
  attention(
    layer: number,
    q: AttentionInput,
    options: AnyResultOptions<AttentionOptions> = {},
  ): Tensor<DType> {
    const fn = 'KVCache.attention';
    const st = this.#layer(fn, layer);
    if (this.#batch === undefined || st.held === 0) {
      throw new Error(`${fn}: layer ${layer} holds no keys; update it first`);
    }
    const plan = planStoredAttention(fn, q, this.attentionInputs(layer), options);
    const out = new Float32Array(plan.outShape.reduce((a, b) => a * b, 1));
    runKernel(fn, plan, { out });
    return result(out, plan);
  }

  /**
   * Internal (the model's cached forward): the keys `layer` would hold after an update of `newTokens`
   * tokens (the S its attention then runs over), so a call can be checked before it changes the cache.
   */
  heldAfter(layer: number, newTokens: number): number {
    const st = this.#layer('KVCache.update', layer); // checked on the update's behalf, named as it
    const length = st.length + newTokens;
    return this.window === undefined ? length : Math.min(length, this.window - 1 + newTokens);
  }

  /**
   * Internal (the model's cached forward): the storage of `layer` as the kernels read it, for
   * planStoredAttention — keys 0 … S − 1 are the keys the layer holds (its last update's), oldest first.
   */
  attentionInputs(layer: number): StoredKV {
    const fn = 'KVCache.attentionInputs';
    const st = this.#layer(fn, layer);
    if (this.#batch === undefined) throw new Error(`${fn}: the cache is empty; update layer ${layer} first`);
    return {
      k: keysOf(st),
      v: valuesOf(st),
      B: this.#batch,
      Hkv: this.numKvHeads,
      S: st.held,
      E: this.headDim,
      Ev: this.valueDim,
      layout: { kind: 'strided', stride: st.capacity, start: st.start },
      window: this.window,
    };
  }

  /** Storage for at least `keep` rows per head: doubling, up to the window (or maxLength up front). */
  #grow(fn: string, st: Layer, B: number, keep: number): void {
    const limit = this.window ?? this.maxLength ?? Number.POSITIVE_INFINITY;
    const capacity =
      st.capacity === 0 && this.maxLength !== undefined
        ? Math.max(keep, Math.min(this.maxLength, this.window ?? this.maxLength))
        : Math.max(keep, Math.min(Math.max(2 * st.capacity, 16), limit));
    const Hkv = this.numKvHeads;
    const kShape = [B, Hkv, capacity, this.headDim];
    const vShape = [B, Hkv, capacity, this.valueDim];
    let allocation: WasmAllocation | undefined;
    let k: Float32Array;
    let v: Float32Array;
    if (this.resident) {
      checkAllocation(fn, 'the cache storage', kShape, 4);
      checkAllocation(fn, 'the cache storage', vShape, 4);
      const kFloats = kShape.reduce((a, b) => a * b, 1);
      const vFloats = vShape.reduce((a, b) => a * b, 1);
      const kBytes = Math.ceil(kFloats / 4) * 16;
      allocation = allocateResident(fn, kBytes + vFloats * 4, st);
      if (!allocation) throw new Error(`${fn}: WebAssembly became unavailable for the resident cache`);
      k = residentView(allocation, 0, kFloats);
      v = residentView(allocation, kBytes, vFloats);
    } else {
      k = allocate(fn, kShape);
      v = allocate(fn, vShape);
    }
    // The held rows, oldest first, from slot 0: the ring is unrolled only when it grows. (Read through
    // fresh views: the allocation may have grown the WASM memory.)
    copyRows({ ...st, k: keysOf(st), v: valuesOf(st) }, B * Hkv, this.headDim, this.valueDim, k, v, capacity);
    if (st.allocation) {
      // Moving off resident storage frees it: results of earlier updates can no longer be read.
      freeResident(st.allocation);
      st.epoch++;
      st.why = 'the resident cache grew its storage (the old storage is freed)';
    }
    st.allocation = allocation;
    st.k = k;
    st.v = v;
    st.capacity = capacity;
    st.start = 0;
  }

  #layer(fn: string, layer: number): Layer {
    if (!Number.isSafeInteger(layer) || layer < 0 || layer >= this.numLayers) {
      throw new RangeError(
        `${fn}: layer must be an integer in [0, ${this.numLayers - 1}] (numLayers = ${this.numLayers}), got ${formatValue(layer)}`,
      );
    }
    return this.#layers[layer];
  }
}

/** Whether resident storage can be had here (WASM SIMD runs on this thread). */
function residentSupported(): boolean {
  return wasmSupport() === true;
}

/** The layer's keys storage, as a live view when it is resident. */
function keysOf(st: Pick<Layer, 'k'>): Float32Array {
  return liveView(st.k);
}

function valuesOf(st: Pick<Layer, 'v'>): Float32Array {
  return liveView(st.v);
}

/** Frees the layer's storage and empties it (results of earlier updates can no longer be read). */
function dropStorage(st: Layer, why: string): void {
  if (st.allocation) freeResident(st.allocation);
  Object.assign(st, { ...emptyLayer(), epoch: st.epoch + 1, why });
}

function emptyLayer(): Layer {
  return {
    k: new Float32Array(0),
    v: new Float32Array(0),
    allocation: undefined,
    capacity: 0,
    start: 0,
    held: 0,
    length: 0,
    epoch: 0,
    why: '',
  };
}

function allocate(fn: string, shape: number[]): Float32Array {
  checkAllocation(fn, 'the cache storage', shape, 4);
  try {
    return new Float32Array(shape.reduce((a, b) => a * b, 1));
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    throw new RangeError(`${fn}: cannot allocate the cache storage ${formatShape(shape)}: ${err.message}`);
  }
}

/**
 * Copies the `held` rows of each of `heads` heads of a layer's storage, oldest first, into k and v laid
 * out with `stride` rows per head (dense [heads, held, ·] when stride = held).
 */
function copyRows(
  st: Pick<Layer, 'k' | 'v' | 'capacity' | 'start' | 'held'>,
  heads: number,
  E: number,
  Ev: number,
  k: Float32Array,
  v: Float32Array,
  stride: number,
): void {
  const { capacity: cap, start, held } = st;
  for (let h = 0; h < heads; h++) {
    for (let j = 0; j < held; ) {
      const slot = (start + j) % cap;
      const run = Math.min(held - j, cap - slot);
      const src = h * cap + slot;
      const dst = h * stride + j;
      k.set(st.k.subarray(src * E, (src + run) * E), dst * E);
      v.set(st.v.subarray(src * Ev, (src + run) * Ev), dst * Ev);
      j += run;
    }
  }
}

/** An update's result: a snapshot of where the rows were, made dense on first read. */
class LazyKV implements KVCacheUpdate {
  readonly #st: Layer;
  readonly #snapshot: Pick<Layer, 'k' | 'v' | 'capacity' | 'start' | 'held' | 'epoch'>;
  #key: Tensor | undefined;
  #value: Tensor | undefined;

  constructor(
    /** The call that made it ('KVCache.update' or 'KVCache.read'), for the stale-read error. */
    private readonly fn: string,
    st: Layer,
    private readonly B: number,
    private readonly Hkv: number,
    private readonly E: number,
    private readonly Ev: number,
    private readonly layer: number,
  ) {
    this.#st = st;
    this.#snapshot = {
      k: st.k,
      v: st.v,
      capacity: st.capacity,
      start: st.start,
      held: st.held,
      epoch: st.epoch,
    };
  }

  get key(): Tensor {
    if (!this.#key) this.#materialise();
    return this.#key!;
  }

  get value(): Tensor {
    if (!this.#value) this.#materialise();
    return this.#value!;
  }

  #materialise(): void {
    const s = this.#snapshot;
    // Growth moves the layer to new arrays but leaves the old ones intact; an overwrite bumps the epoch.
    if (this.#st.epoch !== s.epoch) {
      throw new Error(
        `${this.fn}: layer ${this.layer}'s key/value were read after ${this.#st.why}, which overwrote or freed the rows they refer to; read key/value before that`,
      );
    }
    const { B, Hkv, E, Ev } = this;
    const k = new Float32Array(B * Hkv * s.held * E);
    const v = new Float32Array(B * Hkv * s.held * Ev);
    copyRows({ ...s, k: keysOf(s), v: valuesOf(s) }, B * Hkv, E, Ev, k, v, s.held);
    this.#key ??= new Tensor(k, [B, Hkv, s.held, E]);
    this.#value ??= new Tensor(v, [B, Hkv, s.held, Ev]);
  }
}

/**
 * Internal (the model's cached forward): plans attention of q [B, Hq, L, E] over everything `layer` of
 * `cache` holds, read in place; run it with runKernel (or a runtime's layer ops). Call it after
 * `cache.update(layer, …)` with this step's keys; options as scaledDotProductAttention's (causal: true
 * aligns q's last row with the newest key; a window cache also applies its window).
 */
export function planCachedAttention(
  fn: string,
  q: AttentionInput,
  cache: KVCache,
  layer: number,
  options: AttentionOptions,
  extraOptionNames: readonly string[] = [],
): AttentionPlan {
  return planStoredAttention(fn, q, cache.attentionInputs(layer), options, extraOptionNames);
}
