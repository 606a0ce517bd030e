// Shape and argument helpers shared by the tensor and every public op: validation, sizes, strides,
// broadcasting, and the formats every error message uses for shapes ([2,3,5,8]) and for values.
// One decision to know: formatValue never throws (bigints, symbols, cycles, proxies) and stays short, so
// describing a bad argument can never replace the error that names the function with a different one.

/** Formats a shape the way every qkv error message does: `[2,3,5,8]`. */
export function formatShape(shape: readonly number[]): string {
  return `[${shape.join(',')}]`;
}

/** Number of elements of a shape (1 for a scalar shape []). */
export function sizeOf(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** Whether two shapes are the same axes of the same sizes. */
export function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

/** Row-major strides of a shape. */
export function stridesOf(shape: readonly number[]): number[] {
  const strides = new Array<number>(shape.length);
  let s = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

/** Most axes a tensor may have (NumPy 2 and PyTorch allow 64 too). */
export const MAX_RANK = 64;

/**
 * Most elements qkv allocates in one typed array: 2^32, V8's limit on 64-bit hosts (Node 20, Chrome).
 * Engines with a lower limit, and a host out of memory, are caught where the array is allocated.
 */
export const MAX_ELEMENTS = 2 ** 32;

/** `[2,3,…]`: at most the first `keep` sizes of a shape, for messages about shapes too long to print. */
function formatShapeHead(shape: readonly unknown[], keep = 8): string {
  const head = shape.slice(0, keep).map((d) => formatValue(d));
  return `[${head.join(',')}${shape.length > keep ? ',…' : ''}]`;
}

/**
 * Throws unless every size is a non-negative safe integer and there are at most MAX_RANK of them.
 * `where` names the caller in the message.
 */
export function checkShape(shape: readonly number[], where: string): void {
  if (!Array.isArray(shape))
    throw new TypeError(`${where}: shape must be an array of sizes, got ${formatValue(shape)}`);
  if (shape.length > MAX_RANK) {
    throw new RangeError(
      `${where}: shape ${formatShapeHead(shape)} has rank ${shape.length}; a tensor has at most ${MAX_RANK} axes`,
    );
  }
  for (let i = 0; i < shape.length; i++) {
    const d = shape[i];
    if (typeof d !== 'number' || !Number.isSafeInteger(d) || d < 0) {
      throw new RangeError(
        `${where}: size ${formatValue(d)} at axis ${i} of shape ${formatShapeHead(shape, MAX_RANK)} is not a non-negative integer`,
      );
    }
  }
}

/**
 * Strides that read a tensor of shape `from` as if it were broadcast to `to` (NumPy rules: shapes are
 * right-aligned and each size of `from` is 1 or equal). Broadcast axes get stride 0. Returns undefined
 * when `from` does not broadcast to `to`.
 */
export function broadcastStrides(from: readonly number[], to: readonly number[]): number[] | undefined {
  if (from.length > to.length) return undefined;
  const own = stridesOf(from);
  const out = new Array<number>(to.length).fill(0);
  const shift = to.length - from.length;
  for (let i = 0; i < from.length; i++) {
    const f = from[i];
    const t = to[i + shift];
    if (f === t) out[i + shift] = f === 1 ? 0 : own[i];
    else if (f === 1) out[i + shift] = 0;
    else return undefined;
  }
  return out;
}

/** `4000000000000 bytes (3.64 TiB)`. */
function formatBytes(bytes: number): string {
  const units = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];
  let i = 0;
  let v = bytes;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${bytes} bytes` : `${bytes} bytes (${Number(v.toPrecision(3))} ${units[i]})`;
}

/**
 * Throws, before anything is allocated, when `what` of shape `shape` has more elements than one typed
 * array can hold, saying how many bytes it would need. `context` (e.g. the caller's argument shapes) is
 * appended to the message.
 */
export function checkAllocation(
  fn: string,
  what: string,
  shape: readonly number[],
  bytesPerElement: number,
  context = '',
): void {
  const n = sizeOf(shape);
  if (n <= MAX_ELEMENTS) return;
  throw new RangeError(
    `${fn}: ${what} ${formatShapeHead(shape, 16)} would take ${n} elements, ${formatBytes(n * bytesPerElement)}, but one typed array holds at most ${MAX_ELEMENTS} elements${context}`,
  );
}

/** Throws unless `options` is an object (null and primitives are named as such). */
export function checkOptionsObject(fn: string, options: unknown): asserts options is object {
  if (options === null || typeof options !== 'object') {
    throw new TypeError(`${fn}: options must be an object, got ${formatValue(options)}`);
  }
}

/** Throws on option names the function does not know (a typo like `casual` must not pass silently). */
export function checkOptionNames(fn: string, options: object, known: readonly string[]): void {
  checkOptionsObject(fn, options);
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) {
      const name = key.length > 40 ? `${key.slice(0, 40)}…` : key;
      throw new TypeError(`${fn}: unknown option '${name}' (known options: ${known.join(', ')})`);
    }
  }
}

/** Throws unless `value` is true or false. */
export function checkBoolean(fn: string, name: string, value: unknown): asserts value is boolean {
  if (value !== true && value !== false) {
    throw new TypeError(`${fn}: ${name} must be true or false, got ${formatValue(value)}`);
  }
}

/** Throws unless `value` is a safe integer ≥ `min` (1: "a positive integer", 0: "a non-negative integer"). */
export function checkInteger(fn: string, name: string, value: unknown, min: 0 | 1): asserts value is number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    const kind = min === 1 ? 'a positive integer' : 'a non-negative integer';
    throw new RangeError(`${fn}: ${name} must be ${kind}, got ${formatValue(value)}`);
  }
}

/** Throws unless `value` is a finite number, and `> 0` or `≥ 0` when `bound` says so. */
export function checkFinite(
  fn: string,
  name: string,
  value: unknown,
  bound?: '> 0' | '≥ 0',
): asserts value is number {
  const ok =
    typeof value === 'number' &&
    Number.isFinite(value) &&
    (bound === undefined || (bound === '> 0' ? value > 0 : value >= 0));
  if (!ok) {
    throw new RangeError(
      `${fn}: ${name} must be a finite number${bound ? ` ${bound}` : ''}, got ${formatValue(value)}`,
    );
  }
}

/** Longest description formatValue returns. */
const MAX_VALUE_CHARS = 120;

/**
 * A short, JSON-like description of any value for an error message: `"yes"`, `1n`, `[1,2,3]`,
 * `{"a":1,"self":[Circular]}`, `Symbol(x)`, `function f`, `Float32Array(3)`. Never throws; long strings,
 * arrays, objects and deep nesting are cut with `…`.
 */
export function formatValue(value: unknown): string {
  let s: string;
  try {
    s = describeValue(value, 0, []);
  } catch {
    s = 'an unprintable value'; // e.g. a revoked Proxy
  }
  return s.length > MAX_VALUE_CHARS ? `${s.slice(0, MAX_VALUE_CHARS - 1)}…` : s;
}

function describeValue(value: unknown, depth: number, seen: object[]): string {
  switch (typeof value) {
    case 'number':
      return Object.is(value, -0) ? '-0' : String(value);
    case 'bigint': {
      const digits = value.toString();
      return digits.length > 40 ? `${digits.slice(0, 40)}…n` : `${digits}n`;
    }
    case 'string':
      return value.length > 60
        ? `${JSON.stringify(`${value.slice(0, 60)}…`)} (${value.length} characters)`
        : JSON.stringify(value);
    case 'symbol': {
      const text = String(value); // Symbol(description); String() of a symbol never throws
      return text.length > 60 ? `${text.slice(0, 60)}…)` : text;
    }
    case 'function': {
      const name = safeName(value);
      return name ? `function ${name}` : 'a function';
    }
    case 'undefined':
    case 'boolean':
      return String(value);
  }
  if (value === null) return 'null';
  const obj = value as object;
  if (seen.includes(obj)) return '[Circular]';
  if (ArrayBuffer.isView(obj)) {
    const n = (obj as unknown as { length?: number }).length ?? (obj as DataView).byteLength;
    return `${safeName(obj.constructor) || 'TypedArray'}(${n})`;
  }
  const isArray = Array.isArray(obj);
  if (depth >= 3) return isArray ? '[…]' : '{…}';
  seen.push(obj);
  try {
    if (isArray) {
      const items = obj as readonly unknown[];
      const shown = Math.min(items.length, 8);
      const parts: string[] = [];
      for (let i = 0; i < shown; i++) parts.push(describeEntry(() => items[i], depth, seen));
      return `[${parts.join(',')}${items.length > shown ? ',…' : ''}]`;
    }
    const proto = Object.getPrototypeOf(obj);
    const prefix =
      proto === null || proto === Object.prototype ? '' : `${safeName(obj.constructor) || 'object'} `;
    const keys = Object.keys(obj);
    const parts = keys
      .slice(0, 6)
      .map(
        (k) =>
          `${JSON.stringify(k.length > 30 ? `${k.slice(0, 30)}…` : k)}:${describeEntry(() => (obj as Record<string, unknown>)[k], depth, seen)}`,
      );
    return `${prefix}{${parts.join(',')}${keys.length > 6 ? ',…' : ''}}`;
  } finally {
    seen.pop();
  }
}

/** One array item or property, `?` if reading it throws (a getter, a Proxy trap). */
function describeEntry(read: () => unknown, depth: number, seen: object[]): string {
  try {
    return describeValue(read(), depth + 1, seen);
  } catch {
    return '?';
  }
}

/** A function's (or constructor's) name, or '' when it has none or reading it throws. */
function safeName(f: unknown): string {
  try {
    const name = (f as { name?: unknown } | undefined)?.name;
    return typeof name === 'string' ? name.slice(0, 40) : '';
  } catch {
    return '';
  }
}
