// PagedKVCache: vLLM's PagedAttention memory manager (Kwon et al., arXiv:2309.06180). Sequences hold
// block tables into one pool of fixed-size blocks; forks share blocks by reference count.
// One decision to know: a physical block id names the same block in every layer's pool (one table per
// sequence, as vLLM), and a block is copied only when an append would write into a block another
// sequence also holds (copy-on-write): after a fork that is at most the partial last block, so sequences
// forked from one prompt share all of its full blocks for good.

import type { KvLayout } from '../kernels/types.js';
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
import type { DType, Tensor, TensorLike } from '../tensor.js';
import { toTensor } from '../tensor.js';

/**
 * K/V as a cache stores them: key j of key/value head (b, hk) is row kvRow(…) of `k` (E numbers) and of
 * `v` (Ev numbers) under `layout`. Internal: what KVCache.attentionInputs and
 * PagedKVCache.stored hand planStoredAttention (attention/paged.ts); declared here to keep imports acyclic.
 */
export interface StoredKV {
  /** The storage (a cache's whole buffer or pool), read in place. */
  k: Float32Array;
  v: Float32Array;
  B: number;
  Hkv: number;
  /** Keys held (the logical K/V is [B, Hkv, S, E] and [B, Hkv, S, Ev]). */
  S: number;
  E: number;
  Ev: number;
  layout: KvLayout;
  /**
   * The cache's sliding window w, if it has one: it holds only the keys a window [w − 1, 0] needs, so
   * attention over it always has at most w − 1 keys to the left of a query's position.
   */
  window?: number;
}

/** Constructor options of PagedKVCache. */
export interface PagedKVCacheOptions {
  /** Layers of the model; each has its own K and V pools. */
  numLayers: number;
  /** Hkv: key/value heads. */
  numKvHeads: number;
  /** E: width of a key (and of the queries that read it). */
  headDim: number;
  /** Ev: width of a value; default headDim. */
  valueDim?: number;
  /** Tokens per block; default 16. */
  blockSize?: number;
  /** Blocks in the pool (shared by every sequence; each block spans every layer). */
  numBlocks: number;
  /**
   * Keep the pools in this thread's WebAssembly memory (default false), where the WASM kernel's decode
   * path reads the blocks in place instead of copying them in per call; freed by `dispose()` (or when the
   * cache is garbage-collected). JS arrays where WebAssembly SIMD is unavailable (`resident` reads false).
   */
  resident?: boolean;
}

const OPTIONS = [
  'numLayers',
  'numKvHeads',
  'headDim',
  'valueDim',
  'blockSize',
  'numBlocks',
  'resident',
] as const;

interface Sequence {
  /** Physical block ids, in order: block n holds tokens n·blockSize … (n + 1)·blockSize − 1. */
  table: number[];
  /** Tokens appended per layer. */
  lengths: number[];
}

/**
 * A paged KV cache: K and V of many sequences in one pool of blocks, per layer `k` and `v` pools laid out
 * block-major [numBlocks, Hkv, blockSize, E] (and Ev). `fork` shares a sequence's blocks (a prompt's
 * prefix with every sampled continuation); the first append into a shared block copies it. Read it with
 * `pagedAttention`, which attends straight from the blocks.
 *
 * Lengths are per layer (a model appends layer by layer); `length(seq)` is the last layer's, i.e. the
 * sequence's length once a step has run through every layer.
 *
 * @example
 * const cache = new PagedKVCache({ numLayers: 1, numKvHeads: 2, headDim: 8, blockSize: 16, numBlocks: 64 });
 * const prompt = cache.allocate();
 * cache.append(prompt, 0, Tensor.randn([2, 20, 8], { seed: 1 }), Tensor.randn([2, 20, 8], { seed: 2 }));
 * const a = cache.fork(prompt); // shares both blocks; a's next append copies the partial one
 * cache.append(a, 0, Tensor.randn([2, 1, 8], { seed: 3 }), Tensor.randn([2, 1, 8], { seed: 4 }));
 * cache.length(a); // 21
 * cache.freeBlocks; // 61
 */
export class PagedKVCache {
  readonly numLayers: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  readonly valueDim: number;
  readonly blockSize: number;
  readonly numBlocks: number;
  /** Whether the pools are in WebAssembly memory (asked for with `resident: true` and WASM runs here). */
  readonly resident: boolean;

  /** Per layer; views of `#allocations` when resident (read through #pools: growth detaches them). */
  readonly #k: Float32Array[];
  readonly #v: Float32Array[];
  readonly #allocations: WasmAllocation[] = [];
  #disposed = false;
  /** Sequences holding each block (0 = free). */
  readonly #refs: Int32Array;
  /** Free block ids; popped from the end, so blocks are handed out 0, 1, 2, … at first. */
  readonly #free: number[];
  readonly #seqs = new Map<number, Sequence>();
  #nextId = 0;

  /** @throws on a missing or non-integer size, or a pool too large for one typed array. */
  constructor(options: PagedKVCacheOptions) {
    const fn = 'PagedKVCache';
    if (options === null || typeof options !== 'object') {
      throw new TypeError(`${fn}: options must be an object, got ${formatValue(options)}`);
    }
    checkOptionNames(fn, options, OPTIONS);
    const {
      numLayers,
      numKvHeads,
      headDim,
      valueDim = headDim,
      blockSize = 16,
      numBlocks,
      resident = false,
    } = options;
    checkInteger(fn, 'numLayers', numLayers, 1);
    checkInteger(fn, 'numKvHeads', numKvHeads, 1);
    checkInteger(fn, 'headDim', headDim, 1);
    checkInteger(fn, 'valueDim', valueDim, 0);
    checkInteger(fn, 'blockSize', blockSize, 1);
    checkInteger(fn, 'numBlocks', numBlocks, 1);
    checkBoolean(fn, 'resident', resident);
    checkAllocation(fn, 'the key pool', [numBlocks, numKvHeads, blockSize, headDim], 4);
    checkAllocation(fn, 'the value pool', [numBlocks, numKvHeads, blockSize, valueDim], 4);
    this.numLayers = numLayers;
    this.numKvHeads = numKvHeads;
    this.headDim = headDim;
    this.valueDim = valueDim;
    this.blockSize = blockSize;
    this.numBlocks = numBlocks;
    const rows = numBlocks * numKvHeads * blockSize;
    this.resident = resident && wasmSupport() === true;
    if (this.resident) {
      // One allocation per layer, K then V (16-aligned), zeroed as JS arrays are.
      const kBytes = Math.ceil((rows * headDim) / 4) * 16;
      this.#k = [];
      this.#v = [];
      try {
        for (let l = 0; l < numLayers; l++) {
          const a = allocateResident(fn, kBytes + rows * valueDim * 4, this)!;
          this.#allocations.push(a);
          this.#k.push(residentView(a, 0, rows * headDim));
          this.#v.push(residentView(a, kBytes, rows * valueDim));
        }
      } catch (err) {
        // A later layer's allocation refused: give back the earlier ones now, not when a GC gets to them.
        for (const a of this.#allocations) freeResident(a);
        throw err;
      }
      for (let l = 0; l < numLayers; l++) {
        const [k, v] = this.#pools(l);
        k.fill(0);
        v.fill(0);
      }
    } else {
      this.#k = Array.from({ length: numLayers }, () => new Float32Array(rows * headDim));
      this.#v = Array.from({ length: numLayers }, () => new Float32Array(rows * valueDim));
    }
    this.#refs = new Int32Array(numBlocks);
    this.#free = Array.from({ length: numBlocks }, (_, i) => numBlocks - 1 - i);
  }

  /**
   * Frees the pools (a resident cache's WebAssembly memory goes back to the runtime's arena). The cache
   * cannot be used afterwards: every method throws.
   */
  dispose(): void {
    for (const a of this.#allocations) freeResident(a);
    this.#allocations.length = 0;
    this.#k.fill(new Float32Array(0));
    this.#v.fill(new Float32Array(0));
    this.#seqs.clear();
    this.#disposed = true;
  }

  /** Layer l's K and V pools, as live views when resident. */
  #pools(l: number): [Float32Array, Float32Array] {
    this.#k[l] = liveView(this.#k[l]);
    this.#v[l] = liveView(this.#v[l]);
    return [this.#k[l], this.#v[l]];
  }

  /** Blocks no sequence holds. */
  get freeBlocks(): number {
    return this.#free.length;
  }

  /** A new, empty sequence; returns its id. Takes no block until something is appended. */
  allocate(): number {
    this.#checkLive('PagedKVCache.allocate');
    const id = this.#nextId++;
    this.#seqs.set(id, { table: [], lengths: new Array<number>(this.numLayers).fill(0) });
    return id;
  }

  /**
   * A new sequence with the same contents as `seq`, sharing every one of its blocks (no copy now). The
   * first append of either into a shared, partly filled block copies that block; full blocks stay shared.
   */
  fork(seq: number): number {
    const s = this.#sequence('PagedKVCache.fork', seq);
    for (const block of s.table) this.#refs[block]++;
    const id = this.#nextId++;
    this.#seqs.set(id, { table: [...s.table], lengths: [...s.lengths] });
    return id;
  }

  /** Ends `seq`: its blocks no other sequence holds return to the pool; the id is invalid afterwards. */
  free(seq: number): void {
    const s = this.#sequence('PagedKVCache.free', seq);
    for (const block of s.table) if (--this.#refs[block] === 0) this.#free.push(block);
    this.#seqs.delete(seq);
  }

  /** Tokens of `seq` once a step has reached the last layer (the last layer's length). */
  length(seq: number): number {
    return this.#sequence('PagedKVCache.length', seq).lengths[this.numLayers - 1];
  }

  /** Tokens of `seq` appended to `layer`. */
  layerLength(seq: number, layer: number): number {
    const s = this.#sequence('PagedKVCache.layerLength', seq);
    this.#checkLayer('PagedKVCache.layerLength', layer);
    return s.lengths[layer];
  }

  /** The physical block ids of `seq`, in token order (a copy). */
  blockTable(seq: number): Int32Array {
    return Int32Array.from(this.#sequence('PagedKVCache.blockTable', seq).table);
  }

  /**
   * Appends key [Hkv, L_new, E] and value [Hkv, L_new, Ev] to `layer` of `seq`. Takes fresh blocks as
   * the sequence grows, and copies a block it shares with another sequence before writing into it.
   * @throws if the pool has too few free blocks (nothing is changed then), for a freed or unknown id, a
   *   layer out of range, or shapes that do not match the cache.
   */
  append(
    seq: number,
    layer: number,
    key: TensorLike | Tensor<DType>,
    value: TensorLike | Tensor<DType>,
  ): void {
    const fn = 'PagedKVCache.append';
    const s = this.#sequence(fn, seq);
    this.#checkLayer(fn, layer);
    const k = toTensor(key, fn, 'key');
    const v = toTensor(value, fn, 'value');
    const Hkv = this.numKvHeads;
    const E = this.headDim;
    const Ev = this.valueDim;
    const shapes = `key ${formatShape(k.shape)}, value ${formatShape(v.shape)}; the cache expects [${Hkv}, L_new, ${E}] and [${Hkv}, L_new, ${Ev}]`;
    if (k.rank !== 3 || k.shape[0] !== Hkv || k.shape[2] !== E) {
      throw new RangeError(`${fn}: key must be [numKvHeads, L_new, headDim] (${shapes})`);
    }
    if (v.rank !== 3 || v.shape[0] !== Hkv || v.shape[2] !== Ev) {
      throw new RangeError(`${fn}: value must be [numKvHeads, L_new, valueDim] (${shapes})`);
    }
    const L = k.shape[1];
    if (v.shape[1] !== L) {
      throw new RangeError(`${fn}: key has L_new=${L} tokens but value has ${v.shape[1]} (${shapes})`);
    }
    const bs = this.blockSize;
    const from = s.lengths[layer];
    const to = from + L;
    if (L === 0) return;

    // Count the blocks this append takes (new ones, and copies of shared ones) before changing anything.
    const first = Math.floor(from / bs);
    const last = Math.floor((to - 1) / bs);
    let needed = 0;
    for (let n = first; n <= last; n++) if (n >= s.table.length || this.#refs[s.table[n]] > 1) needed++;
    if (needed > this.#free.length) {
      throw new RangeError(
        `${fn}: the block pool is exhausted: sequence ${seq} needs ${needed} more block(s) of ${bs} tokens for layer ${layer} (length ${from} → ${to}) but ${this.#free.length} of ${this.numBlocks} are free; free() finished sequences or make the cache with more numBlocks`,
      );
    }
    for (let n = first; n <= last; n++) {
      if (n >= s.table.length) {
        const block = this.#free.pop()!;
        this.#refs[block] = 1;
        s.table.push(block);
      } else if (this.#refs[s.table[n]] > 1) {
        s.table[n] = this.#copyBlock(s.table[n]);
      }
    }

    // Write the rows block by block: each block's rows of a head are contiguous.
    const [kPool, vPool] = this.#pools(layer);
    for (let hk = 0; hk < Hkv; hk++) {
      for (let j = from; j < to; ) {
        const n = Math.floor(j / bs);
        const run = Math.min(to - j, (n + 1) * bs - j);
        const row = (s.table[n] * Hkv + hk) * bs + (j - n * bs);
        const src = hk * L + (j - from);
        kPool.set(k.data.subarray(src * E, (src + run) * E), row * E);
        vPool.set(v.data.subarray(src * Ev, (src + run) * Ev), row * Ev);
        j += run;
      }
    }
    s.lengths[layer] = to;
  }

  /** Internal: what pagedAttention reads for (seq, layer), the pool itself behind a paged layout. */
  stored(fn: string, seq: number, layer: number): StoredKV {
    const s = this.#sequence(fn, seq);
    this.#checkLayer(fn, layer);
    const [k, v] = this.#pools(layer);
    return {
      k,
      v,
      B: 1,
      Hkv: this.numKvHeads,
      S: s.lengths[layer],
      E: this.headDim,
      Ev: this.valueDim,
      layout: {
        kind: 'paged',
        blockSize: this.blockSize,
        blockTable: Int32Array.from(s.table),
        tableStride: s.table.length,
      },
    };
  }

  /** A private copy of shared block `block` (every layer's K and V); the sequence lets go of the original. */
  #copyBlock(block: number): number {
    const copy = this.#free.pop()!;
    this.#refs[copy] = 1;
    this.#refs[block]--;
    const rows = this.numKvHeads * this.blockSize;
    for (let l = 0; l < this.numLayers; l++) {
      const [k, v] = this.#pools(l);
      k.copyWithin(
        copy * rows * this.headDim,
        block * rows * this.headDim,
        (block + 1) * rows * this.headDim,
      );
      v.copyWithin(
        copy * rows * this.valueDim,
        block * rows * this.valueDim,
        (block + 1) * rows * this.valueDim,
      );
    }
    return copy;
  }

  #checkLive(fn: string): void {
    if (this.#disposed) throw new Error(`${fn}: the cache was disposed; make a new one`);
  }

  #sequence(fn: string, seq: number): Sequence {
    this.#checkLive(fn);
    const s = this.#seqs.get(seq);
    if (s) return s;
    if (Number.isSafeInteger(seq) && seq >= 0 && seq < this.#nextId) {
      throw new Error(
        `${fn}: sequence ${seq} was freed; ids are not reused (allocate() or fork() a new one)`,
      );
    }
    throw new RangeError(
      `${fn}: no sequence ${formatValue(seq)} in this cache (ids come from allocate() or fork(); ${this.#seqs.size} live)`,
    );
  }

  #checkLayer(fn: string, layer: number): void {
    if (!Number.isSafeInteger(layer) || layer < 0 || layer >= this.numLayers) {
      throw new RangeError(
        `${fn}: layer must be an integer in [0, ${this.numLayers - 1}] (numLayers = ${this.numLayers}), got ${formatValue(layer)}`,
      );
    }
  }
}
