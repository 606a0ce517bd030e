// Tensor = a typed array plus a row-major shape. Nothing more: no strides, no autograd, no lazy ops.
// One decision to know: a Tensor is immutable in shape but its data is a plain typed array that callers
// may read and write; ops never alias their outputs to their inputs (reshape is the one view). Data is
// float32, or float16 stored as bit patterns in a Uint16Array (half the memory; see float16.ts).
// The exception to "wrapped, not copied": data over a resizable ArrayBuffer is copied (see the constructor).

import { float32ToHalf, fromHalfBits, halfToFloat32 } from './float16.js';
import { type RandomOptions, resolveGenerator } from './random.js';
import {
  checkAllocation,
  checkFinite,
  checkOptionNames,
  checkShape,
  formatShape,
  formatValue,
  MAX_RANK,
  sizeOf,
  stridesOf,
} from './shape.js';

/** A number or arbitrarily nested arrays of numbers, as `Tensor.from` takes and `toArray` returns. */
export type NestedArray = number | readonly NestedArray[];

/** Anything a qkv function accepts where it expects a tensor: a Tensor or nested number arrays. */
export type TensorLike = Tensor | NestedArray;

/** Element types: float32, or float16 (IEEE binary16 bit patterns in a Uint16Array). */
export type DType = 'float32' | 'float16';

/** The typed array that holds a dtype's elements. */
export type DataOf<D extends DType> = D extends 'float16' ? Uint16Array : Float32Array;

function isArrayOf(data: unknown, name: string): boolean {
  // toString, not only instanceof: a typed array from another realm (iframe, worker, vm) is fine too.
  return Object.prototype.toString.call(data) === `[object ${name}]`;
}

/**
 * A Float32Array, Float64Array or Uint16Array from another realm (vm, iframe, worker) as this realm's view
 * of the same memory (not a copy); one of this realm, or anything else, as given.
 */
export function thisRealm<T>(data: T): T {
  if (data instanceof Float32Array || data instanceof Float64Array || data instanceof Uint16Array)
    return data;
  const view = data as ArrayBufferView & { length: number };
  const buffer = view.buffer as ArrayBuffer; // or a SharedArrayBuffer: both construct views
  if (isArrayOf(data, 'Float32Array')) return new Float32Array(buffer, view.byteOffset, view.length) as T;
  if (isArrayOf(data, 'Float64Array')) return new Float64Array(buffer, view.byteOffset, view.length) as T;
  if (isArrayOf(data, 'Uint16Array')) return new Uint16Array(buffer, view.byteOffset, view.length) as T;
  return data;
}

/** An n-dimensional array in row-major order: float32 by default, or float16. */
export class Tensor<D extends DType = 'float32'> {
  /** The elements in row-major order; `data.length` equals the product of `shape`. */
  readonly data: DataOf<D>;
  /** The sizes of each axis (frozen). A scalar has shape []. */
  readonly shape: readonly number[];
  /** 'float32' (data is a Float32Array) or 'float16' (data holds binary16 bits in a Uint16Array). */
  readonly dtype: D;

  /**
   * Wraps `data` (not copied) with `shape`. For float16, pass a Uint16Array of bit patterns (or a
   * Float16Array where the runtime has one) and dtype 'float16'. Data over a resizable ArrayBuffer is
   * copied, and data over a growable SharedArrayBuffer is seen through a fixed-length view (still shared),
   * so the tensor's elements cannot change length or go out of bounds when the buffer is resized.
   * @throws if `data` does not match the dtype, a size is negative or not an integer, or the length does not match.
   */
  constructor(data: NoInfer<DataOf<D>>, shape: readonly number[], dtype: D = 'float32' as D) {
    if (dtype === 'float16') {
      if (isArrayOf(data, 'Float16Array')) {
        const f16 = data as unknown as ArrayBufferView & { length: number };
        data = new Uint16Array(f16.buffer, f16.byteOffset, f16.length) as DataOf<D>; // same bits
      } else if (!isArrayOf(data, 'Uint16Array')) {
        throw new TypeError(
          `Tensor: float16 data must be a Uint16Array of bit patterns, got ${describe(data)}`,
        );
      }
    } else if (dtype !== 'float32') {
      throw new TypeError(`Tensor: dtype must be 'float32' or 'float16', got ${formatValue(dtype)}`);
    } else if (!isArrayOf(data, 'Float32Array') && !(data instanceof Float32Array)) {
      throw new TypeError(
        `Tensor: data must be a Float32Array, got ${describe(data)} (use Tensor.from for nested arrays${isArrayOf(data, 'Uint16Array') ? ", or dtype 'float16' for half bits" : ''})`,
      );
    }
    checkShape(shape, 'Tensor');
    const size = sizeOf(shape);
    if (data.length !== size) {
      throw new RangeError(
        `Tensor: data has ${data.length} elements but shape ${formatShape(shape)} needs ${size}`,
      );
    }
    // Another realm's array becomes this realm's view of the same memory, so every `instanceof
    // Float32Array` downstream (kernel choice, the thread protocol) takes it.
    data = thisRealm(data);
    this.data = fixedLength(data);
    this.shape = Object.freeze([...shape]);
    this.dtype = dtype;
  }

  /** Number of axes. */
  get rank(): number {
    return this.shape.length;
  }

  /** Number of elements. */
  get size(): number {
    return this.data.length;
  }

  /** Row-major strides, in elements. */
  get strides(): number[] {
    return stridesOf(this.shape);
  }

  /**
   * Builds a tensor from nested arrays (`Tensor.from([[1, 2], [3, 4]])` has shape [2, 2]) or a number
   * (shape []). A Tensor is returned as is.
   * @throws if the arrays are ragged or hold something other than numbers.
   */
  static from(values: TensorLike): Tensor {
    if (values instanceof Tensor) return values;
    const shape: number[] = [];
    let level: NestedArray = values;
    while (Array.isArray(level)) {
      // Bounds the recursion of fill below, and ends a self-containing array instead of looping.
      if (shape.length === MAX_RANK) {
        throw new RangeError(
          `Tensor.from: nested arrays are deeper than ${MAX_RANK} levels; a tensor has rank ≤ ${MAX_RANK}`,
        );
      }
      shape.push(level.length);
      if (level.length === 0) break;
      level = (level as readonly NestedArray[])[0];
    }
    const data = allocate('Tensor.from', shape);
    let offset = 0;
    const path: number[] = []; // indices of the node being filled: one mutable stack, read only for errors
    const fill = (node: NestedArray, depth: number): void => {
      if (depth === shape.length) {
        if (typeof node !== 'number') {
          throw new TypeError(
            `Tensor.from: element at [${path.join(',')}] is ${describe(node)}, not a number`,
          );
        }
        data[offset++] = node;
        return;
      }
      if (!Array.isArray(node) || node.length !== shape[depth]) {
        const got = Array.isArray(node) ? `length ${node.length}` : describe(node);
        throw new RangeError(
          `Tensor.from: ragged array: at [${path.join(',')}] expected an array of length ${shape[depth]} (shape ${formatShape(shape)}), got ${got}`,
        );
      }
      for (let i = 0; i < node.length; i++) {
        path.push(i);
        fill(node[i] as NestedArray, depth + 1);
        path.pop();
      }
    };
    fill(values, 0);
    return new Tensor(data, shape);
  }

  /** A tensor of zeros. */
  static zeros(shape: readonly number[]): Tensor {
    checkShape(shape, 'Tensor.zeros');
    return new Tensor(allocate('Tensor.zeros', shape), shape);
  }

  /** A tensor with every element equal to `value` (any number, ±Infinity and NaN included). */
  static full(shape: readonly number[], value: number): Tensor {
    checkShape(shape, 'Tensor.full');
    if (typeof value !== 'number') {
      throw new TypeError(`Tensor.full: value must be a number, got ${formatValue(value)}`);
    }
    return new Tensor(allocate('Tensor.full', shape).fill(value), shape);
  }

  /** Normal samples N(mean, std²) from a seeded generator: the same seed gives the same tensor. */
  static randn(
    shape: readonly number[],
    options: RandomOptions & { mean?: number; std?: number } = {},
  ): Tensor {
    const fn = 'Tensor.randn';
    checkShape(shape, fn);
    checkOptionNames(fn, options, ['seed', 'generator', 'mean', 'std']);
    const { mean = 0, std = 1 } = options;
    checkFinite(fn, 'mean', mean);
    checkFinite(fn, 'std', std, '≥ 0');
    const gen = resolveGenerator(options, fn);
    const data = allocate(fn, shape);
    for (let i = 0; i < data.length; i++) data[i] = gen.normal(mean, std);
    return new Tensor(data, shape);
  }

  /** Uniform samples in [low, high) from a seeded generator. */
  static rand(
    shape: readonly number[],
    options: RandomOptions & { low?: number; high?: number } = {},
  ): Tensor {
    const fn = 'Tensor.rand';
    checkShape(shape, fn);
    checkOptionNames(fn, options, ['seed', 'generator', 'low', 'high']);
    const { low = 0, high = 1 } = options;
    checkFinite(fn, 'low', low);
    checkFinite(fn, 'high', high);
    if (low > high) throw new RangeError(`${fn}: low=${low} is greater than high=${high}`);
    const gen = resolveGenerator(options, fn);
    const data = allocate(fn, shape);
    for (let i = 0; i < data.length; i++) data[i] = gen.uniform(low, high);
    return new Tensor(data, shape);
  }

  /** The elements as nested arrays of numbers (a number for a scalar). */
  toArray(): NestedArray {
    const build = (depth: number, offset: number): NestedArray => {
      if (depth === this.shape.length) return this.#at(offset);
      const n = this.shape[depth];
      const step = sizeOf(this.shape.slice(depth + 1));
      const out: NestedArray[] = new Array(n);
      for (let i = 0; i < n; i++) out[i] = build(depth + 1, offset + i * step);
      return out;
    };
    return build(0, 0);
  }

  /** The element at `index` (one integer per axis). */
  get(...index: number[]): number {
    if (index.length !== this.rank) {
      throw new RangeError(`Tensor.get: got ${index.length} indices for shape ${formatShape(this.shape)}`);
    }
    let offset = 0;
    const strides = this.strides;
    for (let i = 0; i < index.length; i++) {
      const x = index[i];
      if (!Number.isInteger(x) || x < 0 || x >= this.shape[i]) {
        throw new RangeError(
          `Tensor.get: index ${formatValue(x)} out of range for axis ${i} of shape ${formatShape(this.shape)}`,
        );
      }
      offset += x * strides[i];
    }
    return this.#at(offset);
  }

  /** The element at a flat offset, as a number (halves decoded). */
  #at(offset: number): number {
    return this.dtype === 'float16' ? fromHalfBits(this.data[offset]) : this.data[offset];
  }

  /**
   * This tensor in another dtype: float32 → float16 rounds to nearest even (overflow → ±Infinity);
   * float16 → float32 is exact. The same dtype returns this tensor.
   */
  to<T extends DType>(dtype: T): Tensor<T> {
    if ((dtype as DType) === this.dtype) return this as unknown as Tensor<T>;
    if (dtype === 'float16') return new Tensor(float32ToHalf(this.data) as DataOf<T>, this.shape, dtype);
    if (dtype === 'float32')
      return new Tensor(halfToFloat32(this.data as Uint16Array) as DataOf<T>, this.shape, dtype);
    throw new TypeError(`Tensor.to: dtype must be 'float32' or 'float16', got ${formatValue(dtype)}`);
  }

  /** The same data seen with another shape of the same size; one size may be -1 (inferred). */
  reshape(shape: readonly number[]): Tensor<D> {
    if (!Array.isArray(shape)) {
      throw new TypeError(`Tensor.reshape: shape must be an array of sizes, got ${formatValue(shape)}`);
    }
    const out = [...shape];
    const free = out.indexOf(-1);
    if (free !== -1) {
      const several = out.lastIndexOf(-1) !== free;
      out[free] = 1;
      const rest = sizeOf(out);
      if (several || rest === 0 || this.size % rest !== 0) {
        throw new RangeError(
          `Tensor.reshape: cannot reshape ${formatShape(this.shape)} to ${formatShape(shape)}`,
        );
      }
      out[free] = this.size / rest;
    }
    checkShape(out, 'Tensor.reshape');
    if (sizeOf(out) !== this.size) {
      throw new RangeError(
        `Tensor.reshape: cannot reshape ${formatShape(this.shape)} (${this.size} elements) to ${formatShape(shape)}`,
      );
    }
    return new Tensor(this.data, out, this.dtype);
  }

  /** A copy with its own data. */
  clone(): Tensor<D> {
    return new Tensor(this.data.slice() as DataOf<D>, this.shape, this.dtype);
  }

  /** A short description: `Tensor [2,3] [0.1, 0.2, …]` (`Tensor float16 [2,3] …` for halves). */
  toString(): string {
    const head = Array.from({ length: Math.min(6, this.size) }, (_, i) => Number(this.#at(i).toPrecision(4)));
    const kind = this.dtype === 'float16' ? 'float16 ' : '';
    return `Tensor ${kind}${formatShape(this.shape)} [${head.join(', ')}${this.size > 6 ? ', …' : ''}]`;
  }
}

/** Converts a TensorLike argument (float16 tensors are widened), naming the function and argument if it cannot. */
export function toTensor(value: TensorLike | Tensor<DType>, fn: string, arg: string): Tensor {
  if (value instanceof Tensor) return (value as Tensor<DType>).to('float32');
  if (typeof value === 'number' || Array.isArray(value)) {
    try {
      return Tensor.from(value);
    } catch (err) {
      throw new TypeError(`${fn}: ${arg} is not a valid tensor: ${(err as Error).message}`);
    }
  }
  const foreign =
    value !== null && typeof value === 'object' && (value as object).constructor?.name === 'Tensor'
      ? ' from another copy of qkv (a bundle and a direct import, or two versions): make it with this copy’s Tensor'
      : '';
  throw new TypeError(
    `${fn}: ${arg} must be a Tensor or nested number arrays, got ${describe(value)}${foreign}`,
  );
}

/**
 * A new Float32Array for `shape`, or an error naming `fn`, the shape and the bytes it needs: checked up
 * front against MAX_ELEMENTS, and at allocation for engines with lower limits or a host out of memory.
 */
function allocate(fn: string, shape: readonly number[]): Float32Array {
  checkAllocation(fn, 'shape', shape, 4);
  try {
    return new Float32Array(sizeOf(shape));
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    const n = sizeOf(shape);
    throw new RangeError(
      `${fn}: cannot allocate shape ${formatShape(shape)} (${n} elements, ${4 * n} bytes): ${err.message}`,
    );
  }
}

/**
 * `data` as a view whose length can never change. A resizable ArrayBuffer may shrink under any view of it
 * (a fixed-length view then goes out of bounds and reads undefined), and ops read `tensor.data` directly,
 * so no check on use could catch it: such data is copied, once, here. A growable SharedArrayBuffer only
 * grows, so a fixed-length view over it stays valid and keeps sharing the memory (its purpose); only a
 * length-tracking view of it is replaced. Ordinary buffers are wrapped as they are.
 */
function fixedLength<T extends Float32Array | Uint16Array>(data: T): T {
  const buffer = data.buffer as ArrayBufferLike & { resizable?: boolean; growable?: boolean };
  const Ctor = data.constructor as new (buffer: ArrayBufferLike, offset: number, length: number) => T;
  if (buffer.resizable === true) return data.slice() as T;
  if (buffer.growable === true) return new Ctor(buffer, data.byteOffset, data.length);
  return data;
}

function describe(x: unknown): string {
  if (x === null) return 'null';
  if (Array.isArray(x)) return 'an array';
  if (typeof x === 'object') return (x as object).constructor?.name ?? 'an object';
  return typeof x;
}
