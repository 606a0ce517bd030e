// safetensors, bytes in and tensors out (format: huggingface/safetensors): 8-byte little-endian header
// length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, data.
// One decision to know: the reader trusts nothing: every length, offset and shape is checked against the
// bytes actually present before anything is allocated, so a hostile file fails with a SafetensorsError
// (never a crash, a hang or a huge allocation). Pure: no node:*, so the browser can read checkpoints too.

import { fromHalfBits } from '../float16.js';
import { Tensor } from '../tensor.js';

/** A malformed or unsupported safetensors file; the message says what is wrong and where. */
export class SafetensorsError extends Error {
  override name = 'SafetensorsError';
}

/** What decodeSafetensors returns: tensors (as float32) in file order, and the string metadata. */
export interface SafetensorsContents {
  tensors: Record<string, Tensor>;
  metadata: Record<string, string>;
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
 * Encodes float32 tensors (bit-exact, NaN payloads included) with optional string metadata.
 * Tensors are written in the order given; the header is padded with spaces to a multiple of 8 bytes.
 */
export function encodeSafetensors(
  tensors: Record<string, Tensor>,
  metadata?: Record<string, string>,
): Uint8Array {
  const header: Record<string, unknown> = {};
  if (metadata) {
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
    header[name] = { dtype: 'F32', shape: [...t.shape], data_offsets: [offset, offset + t.size * 4] };
    offset += t.size * 4;
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
    if (LITTLE_ENDIAN) {
      bytes.set(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), at);
    } else {
      for (let i = 0; i < t.size; i++) view.setFloat32(at + 4 * i, t.data[i], true);
    }
    at += t.size * 4;
  }
  return bytes;
}

function fail(message: string): never {
  throw new SafetensorsError(`${FN}: ${message}`);
}

function isSize(x: unknown): x is number {
  return typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;
}

/**
 * Decodes a safetensors file. F32 is read bit-exactly; F16, BF16 and F64 are converted to float32; any
 * other dtype, or any inconsistency (header length, JSON, shapes, offsets out of range, overlapping or
 * leaving holes), throws a SafetensorsError naming the tensor and the numbers involved.
 */
export function decodeSafetensors(bytes: Uint8Array): SafetensorsContents {
  if (!(bytes instanceof Uint8Array)) fail(`expected a Uint8Array, got ${typeof bytes}`);
  if (bytes.length < 8)
    fail(`file has ${bytes.length} bytes; a safetensors file starts with an 8-byte header length`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const lo = view.getUint32(0, true);
  const hi = view.getUint32(4, true);
  const n = hi * 2 ** 32 + lo;
  if (hi !== 0 || n > MAX_HEADER)
    fail(`header length ${n} is over the format's limit of ${MAX_HEADER} bytes`);
  if (n > bytes.length - 8)
    fail(`header length ${n} runs past the end of the ${bytes.length}-byte file (truncated?)`);
  if (n < 2) fail(`header length ${n} is too short for a JSON object`);

  let header: unknown;
  try {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(8, 8 + n));
    if (text[0] !== '{') fail(`header does not start with '{'`);
    header = JSON.parse(text);
  } catch (err) {
    if (err instanceof SafetensorsError) throw err;
    fail(`header is not valid UTF-8 JSON (${(err as Error).message})`);
  }
  if (header === null || typeof header !== 'object' || Array.isArray(header))
    fail('header is not a JSON object');

  const dataStart = 8 + n;
  const dataLength = bytes.length - dataStart;
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
    if (typeof dtype !== 'string' || !(dtype in DTYPE_BYTES))
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
  for (const e of sorted) {
    if (e.begin < covered)
      fail(`tensor '${e.name}' at [${e.begin},${e.end}] overlaps an earlier tensor (ends at ${covered})`);
    if (e.begin > covered) fail(`bytes [${covered},${e.begin}) of the data section belong to no tensor`);
    covered = e.end;
  }
  if (covered !== dataLength)
    fail(`bytes [${covered},${dataLength}) of the data section belong to no tensor`);

  const tensors: Record<string, Tensor> = Object.create(null);
  for (const e of entries)
    tensors[e.name] = new Tensor(readFloats(bytes, dataStart + e.begin, e.end - e.begin, e.dtype), e.shape);
  return { tensors, metadata };
}

function readFloats(bytes: Uint8Array, at: number, length: number, dtype: string): Float32Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset + at, length);
  if (dtype === 'F32') {
    if (LITTLE_ENDIAN) return new Float32Array(bytes.slice(at, at + length).buffer); // copy: bit-exact
    const out = new Float32Array(length / 4);
    for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(4 * i, true);
    return out;
  }
  if (dtype === 'F64') {
    const out = new Float32Array(length / 8);
    for (let i = 0; i < out.length; i++) out[i] = view.getFloat64(8 * i, true);
    return out;
  }
  const out = new Float32Array(length / 2);
  for (let i = 0; i < out.length; i++) {
    const h = view.getUint16(2 * i, true);
    out[i] = dtype === 'BF16' ? bf16(h) : fromHalfBits(h);
  }
  return out;
}

const F32_BITS = new Float32Array(1);
const U32_BITS = new Uint32Array(F32_BITS.buffer);

/** bfloat16 is the top half of a float32. */
function bf16(h: number): number {
  U32_BITS[0] = h << 16;
  return F32_BITS[0];
}

/** IEEE half precision: 1 sign, 5 exponent, 10 mantissa bits. */
