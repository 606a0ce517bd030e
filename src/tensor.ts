// Tensor = a typed array plus a row-major shape. Nothing more: no strides, no autograd, no lazy ops.
// One decision to know: a Tensor is immutable in shape but its data is a plain typed array that callers
// may read and write; ops never alias their outputs to their inputs (reshape is the one view). Data is
// float32, or float16 stored as bit patterns in a Uint16Array (half the memory; see float16.ts).

import { float32ToHalf, fromHalfBits, halfToFloat32 } from './float16.js';
import { type RandomOptions, resolveGenerator } from './random.js';
import { checkShape, formatShape, sizeOf, stridesOf } from './shape.js';

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
   * Float16Array where the runtime has one) and dtype 'float16'.
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
      throw new TypeError(`Tensor: dtype must be 'float32' or 'float16', got ${JSON.stringify(dtype)}`);
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
    this.data = data;
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
      shape.push(level.length);
      if (level.length === 0) break;
      level = (level as readonly NestedArray[])[0];
    }
    const data = new Float32Array(sizeOf(shape));
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
    return new Tensor(new Float32Array(sizeOf(shape)), shape);
  }

  /** A tensor with every element equal to `value`. */
  static full(shape: readonly number[], value: number): Tensor {
    checkShape(shape, 'Tensor.full');
    return new Tensor(new Float32Array(sizeOf(shape)).fill(value), shape);
  }

  /** Normal samples N(mean, std²) from a seeded generator: the same seed gives the same tensor. */
  static randn(
    shape: readonly number[],
    options: RandomOptions & { mean?: number; std?: number } = {},
  ): Tensor {
    checkShape(shape, 'Tensor.randn');
    const gen = resolveGenerator(options);
    const { mean = 0, std = 1 } = options;
    const data = new Float32Array(sizeOf(shape));
    for (let i = 0; i < data.length; i++) data[i] = gen.normal(mean, std);
    return new Tensor(data, shape);
  }

  /** Uniform samples in [low, high) from a seeded generator. */
  static rand(
    shape: readonly number[],
    options: RandomOptions & { low?: number; high?: number } = {},
  ): Tensor {
    checkShape(shape, 'Tensor.rand');
    const gen = resolveGenerator(options);
    const { low = 0, high = 1 } = options;
    const data = new Float32Array(sizeOf(shape));
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
          `Tensor.get: index ${x} out of range for axis ${i} of shape ${formatShape(this.shape)}`,
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
    throw new TypeError(`Tensor.to: dtype must be 'float32' or 'float16', got ${JSON.stringify(dtype)}`);
  }

  /** The same data seen with another shape of the same size; one size may be -1 (inferred). */
  reshape(shape: readonly number[]): Tensor<D> {
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
  throw new TypeError(`${fn}: ${arg} must be a Tensor or nested number arrays, got ${describe(value)}`);
}

function describe(x: unknown): string {
  if (x === null) return 'null';
  if (Array.isArray(x)) return 'an array';
  if (typeof x === 'object') return (x as object).constructor?.name ?? 'an object';
  return typeof x;
}
