// safetensors, bytes in and tensors out (format: huggingface/safetensors): 8-byte little-endian header
// length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, data.
// One decision to know: the reader trusts nothing: every length, offset and shape is checked against the
// bytes actually present before anything is allocated, so a hostile file fails with a SafetensorsError
// (never a crash, a hang or a huge allocation). Pure: no node:*, so the browser can read checkpoints too.

import { halfTable } from '../float16.js';
import { type DType, Tensor } from '../tensor.js';

/** A malformed or unsupported safetensors file; the message says what is wrong and where. */
export class SafetensorsError extends Error {
  override name = 'SafetensorsError';
}

/**
 * What decodeSafetensors returns: tensors in file order, and the string metadata. Tensors are float32,
 * except F16 ones when decoding with `keepFloat16: true` (then `D` is DType).
 */
export interface SafetensorsContents<D extends DType = 'float32'> {
  tensors: Record<string, Tensor<D>>;
  metadata: Record<string, string>;
}

/** Options of decodeSafetensors. */
export interface DecodeSafetensorsOptions {
  /**
   * F16 tensors as float16 Tensors holding the file's half bits unchanged (true), or widened to float32
   * (false, the default; exact for every value, NaN payloads aside).
   */
  keepFloat16?: boolean;
}

/** Bytes per element of each dtype the format defines; the reader converts the float ones to float32. */
const DTYPE_BYTES: Record<string, number> = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  F8_E5M2: 1,
  F8_E4M3: 1,
  I16: 2,
  U16: 2,
  F16: 2,
  BF16: 2,
  I32: 4,
  U32: 4,
  F32: 4,
  F64: 8,
  I64: 8,
  U64: 8,
};
const READABLE = ['F32', 'F16', 'BF16', 'F64'];
/** The format's own limit on the JSON header (100 MB). */
const MAX_HEADER = 100_000_000;
const FN = 'decodeSafetensors';

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * Encodes tensors with optional string metadata, bit-exactly (NaN payloads included): float32 tensors as
 * F32, float16 tensors as F16 (their half bits as they are, 2 bytes each). Tensors are written in the
 * order given; the header is padded with spaces to a multiple of 8 bytes.
 */
export function encodeSafetensors(
  tensors: Record<string, Tensor<DType>>,
  metadata?: Record<string, string>,
): Uint8Array {
  if (tensors === null || typeof tensors !== 'object')
    throw new TypeError(
      `encodeSafetensors: tensors must be a record of name → Tensor, got ${describe(tensors)}`,
    );
  // No prototype: a tensor named `__proto__` (the decoder reads one) is an own key, not the prototype.
  const header: Record<string, unknown> = Object.create(null);
  if (metadata !== undefined) {
    if (metadata === null || typeof metadata !== 'object' || Array.isArray(metadata)) {
      throw new TypeError(
        `encodeSafetensors: metadata must be a record of name → string, got ${describe(metadata)}`,
      );
    }
    for (const [k, v] of Object.entries(metadata)) {
      if (typeof v !== 'string') throw new TypeError(`encodeSafetensors: metadata '${k}' must be a string`);
    }
    header.__metadata__ = metadata;
  }
  let offset = 0;
  for (const [name, t] of Object.entries(tensors)) {
    if (name === '__metadata__')
      throw new RangeError(`encodeSafetensors: '__metadata__' is not a tensor name`);
    if (!(t instanceof Tensor)) throw new TypeError(`encodeSafetensors: '${name}' is not a Tensor`);
    const width = t.dtype === 'float16' ? 2 : 4;
    const dtype = t.dtype === 'float16' ? 'F16' : 'F32';
    header[name] = { dtype, shape: [...t.shape], data_offsets: [offset, offset + t.size * width] };
    offset += t.size * width;
  }
  let json = new TextEncoder().encode(JSON.stringify(header));
  const padded = Math.ceil(json.length / 8) * 8;
  if (padded !== json.length) {
    const p = new Uint8Array(padded).fill(0x20);
    p.set(json);
    json = p;
  }
  const bytes = new Uint8Array(8 + json.length + offset);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, json.length, true); // N < 2³², so the high word stays 0
  bytes.set(json, 8);
  let at = 8 + json.length;
  for (const t of Object.values(tensors)) {
    const half = t.dtype === 'float16';
    const length = t.size * (half ? 2 : 4);
    if (LITTLE_ENDIAN) {
      // t.size elements from the data's own offset: a reshaped tensor is a view, so its buffer may hold more.
      bytes.set(new Uint8Array(t.data.buffer, t.data.byteOffset, length), at);
    } else if (half) {
      for (let i = 0; i < t.size; i++) view.setUint16(at + 2 * i, t.data[i], true);
    } else {
      // Through the bits, not setFloat32: a NaN's payload survives.
      const bits = new Uint32Array(t.data.buffer, t.data.byteOffset, t.size);
      for (let i = 0; i < t.size; i++) view.setUint32(at + 4 * i, bits[i], true);
    }
    at += length;
  }
  return bytes;
}

function fail(message: string): never {
  throw new SafetensorsError(`${FN}: ${message}`);
}

function isSize(x: unknown): x is number {
  return typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;
}

function describe(x: unknown): string {
  if (x === null) return 'null';
  if (Array.isArray(x)) return 'an array';
  if (typeof x === 'object') return (x as object).constructor?.name ?? 'an object';
  return typeof x;
}

/**
 * Decodes a safetensors file (any Uint8Array, a Node Buffer included: only its own byteOffset/byteLength
 * window is read). F32 is read bit-exactly; F16 is widened to float32 exactly, or kept as float16 bits with
 * `keepFloat16`; BF16 and F64 are converted to float32. Any other dtype, or any inconsistency (header
 * length, JSON, shapes, offsets out of range, overlapping or leaving holes), throws a SafetensorsError
 * naming the tensor and the numbers involved. Non-finite values are decoded as they are: refusing them is
 * a model loader's decision, not the file format's. The tensors never share memory with `bytes`.
 */
export function decodeSafetensors(bytes: Uint8Array): SafetensorsContents;
export function decodeSafetensors(
  bytes: Uint8Array,
  options: DecodeSafetensorsOptions & { keepFloat16: true },
): SafetensorsContents<DType>;
export function decodeSafetensors(
  bytes: Uint8Array,
  options?: DecodeSafetensorsOptions,
): SafetensorsContents<DType>;
export function decodeSafetensors(
  bytes: Uint8Array,
  options: DecodeSafetensorsOptions = {},
): SafetensorsContents<DType> {
  // toString, not instanceof: a Buffer, or a Uint8Array from another realm (vm, iframe), is fine too.
  if (Object.prototype.toString.call(bytes) !== '[object Uint8Array]')
    fail(`expected a Uint8Array, got ${describe(bytes)}`);
  if (options === null || typeof options !== 'object')
    throw new TypeError(`${FN}: options must be an object, got ${describe(options)}`);
  const { keepFloat16 = false } = options;
  if (typeof keepFloat16 !== 'boolean')
    throw new TypeError(`${FN}: keepFloat16 must be a boolean, got ${describe(keepFloat16)}`);
  // A plain view of exactly the caller's window: a Buffer is often a slice of a larger pooled ArrayBuffer
  // at a nonzero byteOffset, and Buffer's own slice() returns a view where Uint8Array's copies.
  const u8 = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (u8.length < 8)
    fail(`file has ${u8.length} bytes; a safetensors file starts with an 8-byte header length`);
  const view = new DataView(u8.buffer, u8.byteOffset, u8.byteLength);
  const declared = view.getBigUint64(0, true); // BigInt: the message shows the exact 64-bit number
  if (declared > BigInt(MAX_HEADER))
    fail(`header length ${declared} is over the format's limit of ${MAX_HEADER} bytes`);
  const n = Number(declared);
  if (n > u8.length - 8)
    fail(`header length ${n} runs past the end of the ${u8.length}-byte file (truncated?)`);
  if (n < 2) fail(`header length ${n} is too short for a JSON object`);

  let header: unknown;
  try {
    // slice copies: TextDecoder refuses views of a SharedArrayBuffer.
    const text = new TextDecoder('utf-8', { fatal: true }).decode(u8.slice(8, 8 + n));
    if (text[0] !== '{') fail(`header does not start with '{'`);
    header = JSON.parse(text);
  } catch (err) {
    if (err instanceof SafetensorsError) throw err;
    fail(`header is not valid UTF-8 JSON (${(err as Error).message})`);
  }
  if (header === null || typeof header !== 'object' || Array.isArray(header))
    fail('header is not a JSON object');

  const dataStart = 8 + n;
  const dataLength = u8.length - dataStart;
  // Null-prototype records: a tensor named "__proto__" is just a name here.
  const metadata: Record<string, string> = Object.create(null);
  const entries: { name: string; dtype: string; shape: number[]; begin: number; end: number }[] = [];
  for (const [name, raw] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
        fail(`__metadata__ is not an object`);
      for (const [k, v] of Object.entries(raw as Record<string, unknown>)) {
        if (typeof v !== 'string') fail(`__metadata__ '${k}' is not a string`);
        metadata[k] = v;
      }
      continue;
    }
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
      fail(`tensor '${name}' is not an object`);
    const { dtype, shape, data_offsets: offsets } = raw as Record<string, unknown>;
    // hasOwn: "toString" or "constructor" is not a dtype just because every object inherits one.
    if (typeof dtype !== 'string' || !Object.hasOwn(DTYPE_BYTES, dtype))
      fail(`tensor '${name}' has unknown dtype ${JSON.stringify(dtype)}`);
    if (!READABLE.includes(dtype))
      fail(`tensor '${name}' has dtype ${dtype}; qkv reads ${READABLE.join(', ')}`);
    if (!Array.isArray(shape) || !shape.every(isSize))
      fail(`tensor '${name}' has an invalid shape ${JSON.stringify(shape)}`);
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(isSize)) {
      fail(`tensor '${name}' has invalid data_offsets ${JSON.stringify(offsets)}`);
    }
    const [begin, end] = offsets as number[];
    if (begin > end || end > dataLength) {
      fail(`tensor '${name}' has data_offsets [${begin},${end}] outside the ${dataLength}-byte data section`);
    }
    // Element count against the bytes present, with no overflow: stop as soon as it exceeds them.
    let count = (shape as number[]).includes(0) ? 0 : 1;
    for (const d of shape as number[]) {
      count *= d;
      if (count * DTYPE_BYTES[dtype] > dataLength) {
        fail(
          `tensor '${name}' of shape [${shape}] ${dtype} needs more bytes than the ${dataLength}-byte data section`,
        );
      }
    }
    if (count * DTYPE_BYTES[dtype] !== end - begin) {
      fail(
        `tensor '${name}' of shape [${shape}] ${dtype} needs ${count * DTYPE_BYTES[dtype]} bytes but data_offsets span ${end - begin}`,
      );
    }
    entries.push({ name, dtype, shape: shape as number[], begin, end });
  }

  // The data section must be covered exactly: no overlaps, no holes (as the format requires).
  const sorted = [...entries].sort((a, b) => a.begin - b.begin || a.end - b.end);
  let covered = 0;
  let previous: (typeof entries)[number] | undefined;
  for (const e of sorted) {
    if (e.begin < covered) {
      const p = previous!; // covered > 0, so some tensor came before
      fail(
        `tensor '${e.name}' at [${e.begin},${e.end}] overlaps tensor '${p.name}' at [${p.begin},${p.end}]`,
      );
    }
    if (e.begin > covered) {
      const where = previous
        ? `between tensor '${previous.name}' and tensor '${e.name}'`
        : `before tensor '${e.name}'`;
      fail(`bytes [${covered},${e.begin}) of the data section belong to no tensor (${where})`);
    }
    covered = e.end;
    previous = e;
  }
  if (covered !== dataLength) {
    const where = previous ? `after tensor '${previous.name}'` : 'the file has no tensors';
    fail(`bytes [${covered},${dataLength}) of the data section belong to no tensor (${where})`);
  }

  const tensors: Record<string, Tensor<DType>> = Object.create(null);
  for (const e of entries) {
    const at = dataStart + e.begin;
    const length = e.end - e.begin;
    try {
      tensors[e.name] =
        e.dtype === 'F16' && keepFloat16
          ? new Tensor(readHalfBits(u8, at, length), e.shape, 'float16')
          : new Tensor(readFloats(u8, at, length, e.dtype), e.shape);
    } catch (err) {
      // The format allows what a Tensor may not (e.g. more axes than qkv supports): still this file's error.
      fail(`tensor '${e.name}' of shape [${e.shape}] cannot be a Tensor: ${(err as Error).message}`);
    }
  }
  return { tensors, metadata };
}

/**
 * A fresh copy of `length` bytes at `at`. Always a copy: the tensors must not alias the caller's bytes (a
 * Buffer shares its pooled slab with unrelated data), and a new ArrayBuffer starts aligned for any element
 * size, whereas a tensor's data may sit at any byte offset in the file (typed-array views need alignment).
 */
function copyBytes(u8: Uint8Array, at: number, length: number): ArrayBuffer {
  const out = new Uint8Array(length);
  out.set(u8.subarray(at, at + length));
  return out.buffer;
}

/** F16 data as its bit patterns, unchanged (a float16 Tensor's data). */
function readHalfBits(u8: Uint8Array, at: number, length: number): Uint16Array {
  if (LITTLE_ENDIAN) return new Uint16Array(copyBytes(u8, at, length));
  const view = new DataView(u8.buffer, u8.byteOffset + at, length);
  const out = new Uint16Array(length / 2);
  for (let i = 0; i < out.length; i++) out[i] = view.getUint16(2 * i, true);
  return out;
}

function readFloats(u8: Uint8Array, at: number, length: number, dtype: string): Float32Array {
  if (dtype === 'F32') {
    if (LITTLE_ENDIAN) return new Float32Array(copyBytes(u8, at, length)); // bit-exact, NaN payloads too
    const view = new DataView(u8.buffer, u8.byteOffset + at, length);
    const bits = new Uint32Array(length / 4);
    for (let i = 0; i < bits.length; i++) bits[i] = view.getUint32(4 * i, true);
    return new Float32Array(bits.buffer);
  }
  if (dtype === 'F16') {
    // Every binary16 value is exactly a float32, so widening loses nothing but a NaN's payload (the table,
    // like Tensor.to('float32'), gives the canonical NaN); keepFloat16 keeps the bits themselves.
    const table = halfTable();
    const bits = readHalfBits(u8, at, length);
    const out = new Float32Array(bits.length);
    for (let i = 0; i < bits.length; i++) out[i] = table[bits[i]];
    return out;
  }
  // DataView reads at any alignment, so BF16 and F64 need no copy first.
  const view = new DataView(u8.buffer, u8.byteOffset + at, length);
  if (dtype === 'F64') {
    const out = new Float32Array(length / 8);
    for (let i = 0; i < out.length; i++) out[i] = view.getFloat64(8 * i, true);
    return out;
  }
  // BF16 is the top half of a float32: shifting the bits up is exact, NaN payloads included.
  const bits = new Uint32Array(length / 2);
  for (let i = 0; i < bits.length; i++) bits[i] = view.getUint16(2 * i, true) << 16;
  return new Float32Array(bits.buffer);
}
