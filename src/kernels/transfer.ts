// Moving a kernel's arguments to another thread: every typed array of a plain object tree (a problem,
// its outputs, a backward's inputs and gradients) gets a place in one SharedArrayBuffer, the tree's
// other values travel as they are, and the receiving thread revives the same tree with views on the buffer.
// One decision to know: the walk is generic, so a new field of AttentionProblem (a cache, a page table,
// a mod's parameters) crosses threads with no edit here or in the thread protocol; a value that cannot
// cross (a function, a class instance) throws naming its path, so the round-trip test catches it.

import { liveView } from './wasm-runtime.js';

/** The typed arrays that cross: float32/float64 data, float16 bits, integer tables. */
const ARRAY_TYPES = {
  Float32Array,
  Float64Array,
  Uint16Array,
  Int32Array,
  Uint32Array,
  Uint8Array,
} as const;

export type ArrayKind = keyof typeof ARRAY_TYPES;
type TypedArray = Float32Array | Float64Array | Uint16Array | Int32Array | Uint32Array | Uint8Array;

/** Where a typed array sits in the shared buffer: its type, byte offset and element count. */
export interface Placed {
  readonly $array: ArrayKind;
  readonly offset: number;
  readonly length: number;
}

/** A tree as it crosses threads: its typed arrays replaced by their places in the buffer. */
export type Packed<T> = T extends TypedArray
  ? Placed
  : T extends readonly (infer U)[]
    ? Packed<U>[]
    : T extends object
      ? { [K in keyof T]: Packed<T[K]> }
      : T;

/**
 * What a placed array starts as: the source's contents ('copy', inputs), zeros ('zero', outputs), or
 * whatever the reused buffer held ('none': scratch that the workers write in full before reading).
 */
export type Fill = 'copy' | 'zero' | 'none';

function kindOf(x: unknown): ArrayKind | undefined {
  if (!ArrayBuffer.isView(x)) return undefined;
  for (const kind of Object.keys(ARRAY_TYPES) as ArrayKind[]) if (x instanceof ARRAY_TYPES[kind]) return kind;
  return undefined;
}

function isPlainObject(x: object): boolean {
  const proto = Object.getPrototypeOf(x);
  return proto === Object.prototype || proto === null;
}

/**
 * Plans one shared buffer: `place` gives every typed array of a tree its place (an array met twice, as
 * q = k = v in self-attention, is placed once), `reserve` adds zeroed scratch space, `write` fills a
 * buffer of `byteLength` bytes. Places are 16-byte aligned (float64 needs 8; 16 suits SIMD copies).
 */
export class BufferLayout {
  private end: number;
  private readonly entries: { place: Placed; source?: TypedArray; fill: Fill }[] = [];
  private readonly seen = new Map<TypedArray, { place: Placed; fill: Fill }>();

  /** `headerBytes` at the start of the buffer stay for the caller (task counters and flags). */
  constructor(headerBytes = 0) {
    this.end = align(headerBytes);
  }

  /** Bytes the buffer needs. */
  get byteLength(): number {
    return this.end;
  }

  /** The tree with each typed array replaced by its place; throws on a value that cannot cross. */
  place<T>(tree: T, fill: Fill, path = 'value'): Packed<T> {
    return this.walk(tree, fill, path) as Packed<T>;
  }

  /** Zeroed scratch space for `length` elements of `kind` (e.g. per-worker partial sums). */
  reserve(kind: ArrayKind, length: number): Placed {
    return this.add(kind, length, 'zero');
  }

  /**
   * Space for `length` elements of `kind` left as the buffer holds it: for an intermediate every element
   * of which the job writes before it reads it (a phased job's projections), where zeroing would be a
   * pass over memory for nothing.
   */
  scratch(kind: ArrayKind, length: number): Placed {
    return this.add(kind, length, 'none');
  }

  /**
   * Fills `buffer`'s planned places: copies of the sources, or zeros. With `slice` [i, n], only slice i
   * of n: elements [i·c, (i + 1)·c) of each copied array, c = ⌈length / n⌉ (see sliceOf), and the zeroed
   * places whole in slice 0; slices 0 … n − 1 written in turn write everything.
   */
  write(buffer: SharedArrayBuffer | ArrayBuffer, slice: readonly [number, number] = [0, 1]): void {
    const [i, n] = slice;
    for (const { place, source, fill } of this.entries) {
      if (fill === 'copy' && source) {
        const c = Math.ceil(place.length / n);
        const from = Math.min(place.length, i * c);
        const to = Math.min(place.length, from + c);
        if (from === to) continue;
        // A view of resident WASM memory (a KV cache's storage) may have been detached by the memory's
        // growth since it was placed (write runs after an await): copy from a fresh view of it.
        const live = source instanceof Float32Array ? liveView(source) : source;
        viewOf(place, buffer).set(n === 1 ? live : live.subarray(from, to), from);
      } else if (fill === 'zero' && i === 0) viewOf(place, buffer).fill(0);
    }
  }

  private add(kind: ArrayKind, length: number, fill: Fill, source?: TypedArray): Placed {
    const place: Placed = { $array: kind, offset: this.end, length };
    this.end = align(this.end + length * ARRAY_TYPES[kind].BYTES_PER_ELEMENT);
    this.entries.push({ place, source, fill });
    return place;
  }

  private walk(x: unknown, fill: Fill, path: string): unknown {
    if (x === null || typeof x !== 'object') {
      if (typeof x === 'function' || typeof x === 'symbol') {
        throw new TypeError(`transfer: ${path} is a ${typeof x}, which cannot cross threads`);
      }
      return x;
    }
    const kind = kindOf(x);
    if (kind) {
      const array = x as TypedArray;
      const known = this.seen.get(array);
      if (known) {
        if (known.fill !== fill) {
          throw new TypeError(
            `transfer: ${path} is both an input and an output; give the output its own array`,
          );
        }
        return known.place;
      }
      const place = this.add(kind, array.length, fill, array);
      this.seen.set(array, { place, fill });
      return place;
    }
    if (ArrayBuffer.isView(x)) {
      throw new TypeError(
        `transfer: ${path} is a ${x.constructor.name}, which the thread protocol does not carry`,
      );
    }
    if (Array.isArray(x)) return x.map((item, i) => this.walk(item, fill, `${path}[${i}]`));
    if (!isPlainObject(x)) {
      const name = (x as { constructor?: { name?: string } }).constructor?.name ?? 'object';
      throw new TypeError(
        `transfer: ${path} is a ${name}; only plain objects, arrays and typed arrays cross threads`,
      );
    }
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(x)) out[key] = this.walk(value, fill, `${path}.${key}`);
    return out;
  }
}

function align(bytes: number): number {
  return Math.ceil(bytes / 16) * 16;
}

function isPlaced(x: object): x is Placed {
  return typeof (x as { $array?: unknown }).$array === 'string';
}

function viewOf(place: Placed, buffer: SharedArrayBuffer | ArrayBuffer): TypedArray {
  const Type = ARRAY_TYPES[place.$array];
  if (!Type) throw new TypeError(`transfer: unknown array type '${String(place.$array)}'`);
  return new Type(buffer as ArrayBuffer, place.offset, place.length);
}

/** The slice of n (BufferLayout.write) in which element `element` of an array of `length` is written. */
export function sliceOf(length: number, element: number, n: number): number {
  return Math.floor(element / Math.ceil(length / n));
}

/** The tree `packed` came from, its typed arrays now views on `buffer` (in the receiving thread). */
export function revive<T>(packed: Packed<T>, buffer: SharedArrayBuffer | ArrayBuffer): T {
  const walk = (x: unknown): unknown => {
    if (x === null || typeof x !== 'object') return x;
    if (Array.isArray(x)) return x.map(walk);
    if (isPlaced(x)) return viewOf(x, buffer);
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(x)) out[key] = walk(value);
    return out;
  };
  return walk(packed) as T;
}

/** Copies each typed array of `tree` back from its place in `buffer` (a job's results, once it is done). */
export function readBack<T>(tree: T, packed: Packed<T>, buffer: SharedArrayBuffer | ArrayBuffer): void {
  const walk = (x: unknown, p: unknown): void => {
    if (x === null || typeof x !== 'object' || p === null || typeof p !== 'object') return;
    if (kindOf(x)) {
      (x as TypedArray).set(viewOf(p as Placed, buffer));
      return;
    }
    for (const [key, value] of Object.entries(x)) walk(value, (p as Record<string, unknown>)[key]);
  };
  walk(tree, packed);
}
