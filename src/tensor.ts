// Tensor = a Float32Array plus a row-major shape. Nothing more: no strides, no autograd, no lazy ops.
// One decision to know: a Tensor is immutable in shape but its data is a plain typed array that callers
// may read and write; ops never alias their outputs to their inputs (reshape is the one view).

import { type RandomOptions, resolveGenerator } from './random.js';
import { checkShape, formatShape, sizeOf, stridesOf } from './shape.js';

/** A number or arbitrarily nested arrays of numbers, as `Tensor.from` takes and `toArray` returns. */
export type NestedArray = number | readonly NestedArray[];

/** Anything a qkv function accepts where it expects a tensor: a Tensor or nested number arrays. */
export type TensorLike = Tensor | NestedArray;

/** An n-dimensional float32 array in row-major order. */
export class Tensor {
  /** The elements in row-major order; `data.length` equals the product of `shape`. */
  readonly data: Float32Array;
  /** The sizes of each axis (frozen). A scalar has shape []. */
  readonly shape: readonly number[];

  /**
   * Wraps `data` (not copied) with `shape`.
   * @throws if `data` is not a Float32Array, a size is negative or not an integer, or the length does not match.
   */
  constructor(data: Float32Array, shape: readonly number[]) {
    // toString, not only instanceof: a Float32Array from another realm (iframe, worker, vm) is fine too.
    if (!(data instanceof Float32Array) && Object.prototype.toString.call(data) !== '[object Float32Array]') {
      throw new TypeError(
        `Tensor: data must be a Float32Array, got ${describe(data)} (use Tensor.from for nested arrays)`,
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
    const fill = (node: NestedArray, depth: number, path: number[]): void => {
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
      for (let i = 0; i < node.length; i++) fill(node[i] as NestedArray, depth + 1, [...path, i]);
    };
    fill(values, 0, []);
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
      if (depth === this.shape.length) return this.data[offset];
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
    return this.data[offset];
  }

  /** The same data seen with another shape of the same size; one size may be -1 (inferred). */
  reshape(shape: readonly number[]): Tensor {
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
    return new Tensor(this.data, out);
  }

  /** A copy with its own data. */
  clone(): Tensor {
    return new Tensor(this.data.slice(), this.shape);
  }

  /** A short description: `Tensor [2,3] [0.1, 0.2, …]`. */
  toString(): string {
    const head = Array.from(this.data.subarray(0, 6), (x) => Number(x.toPrecision(4))).join(', ');
    return `Tensor ${formatShape(this.shape)} [${head}${this.size > 6 ? ', …' : ''}]`;
  }
}

/** Converts a TensorLike argument, naming the function and argument if it cannot. */
export function toTensor(value: TensorLike, fn: string, arg: string): Tensor {
  if (value instanceof Tensor) return value;
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
