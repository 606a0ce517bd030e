// The safetensors reader and writer: bit-exact round trips, hand-made hostile files, and fuzzing (random,
// truncated, mutated and oversized inputs must all end in a SafetensorsError, never another exception).

import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Tensor } from '../src/index.js';
import { readFileBytes, writeFileAtomic } from '../src/io/file-node.js';
import { decodeSafetensors, encodeSafetensors, SafetensorsError } from '../src/io/safetensors.js';

/** A file from a raw header object and data bytes (so tests can write what the encoder never would). */
function rawFile(header: unknown, data: Uint8Array = new Uint8Array(0), headerLength?: number): Uint8Array {
  const json = new TextEncoder().encode(typeof header === 'string' ? header : JSON.stringify(header));
  const bytes = new Uint8Array(8 + json.length + data.length);
  const view = new DataView(bytes.buffer);
  const n = headerLength ?? json.length;
  view.setUint32(0, n % 2 ** 32, true);
  view.setUint32(4, Math.floor(n / 2 ** 32), true);
  bytes.set(json, 8);
  bytes.set(data, 8 + json.length);
  return bytes;
}

function expectSafetensorsError(bytes: Uint8Array, pattern: RegExp): void {
  let error: unknown;
  try {
    decodeSafetensors(bytes);
  } catch (err) {
    error = err;
  }
  expect(error).toBeInstanceOf(SafetensorsError);
  expect((error as Error).message).toMatch(pattern);
}

function sample(): Uint8Array {
  return encodeSafetensors(
    { 'layers.0.weight': Tensor.randn([3, 4], { seed: 1 }), bias: Tensor.from([1, 2, 3]) },
    { format: 'pt' },
  );
}

describe('round trip', () => {
  it('save → load is bit-exact (NaN payloads, −0, ±Infinity, empty and scalar tensors) and keeps metadata', () => {
    const special = new Float32Array(6);
    new Uint32Array(special.buffer).set([
      0x7fc00001, 0x80000000, 0x7f800000, 0xff800000, 0x00000001, 0x3f800000,
    ]);
    const tensors = {
      special: new Tensor(special, [2, 3]),
      random: Tensor.randn([5, 7], { seed: 3 }),
      empty: Tensor.zeros([0, 4]),
      scalar: Tensor.from(2.5),
    };
    const bytes = encodeSafetensors(tensors, { format: 'pt', note: 'ünïcode' });
    expect(new DataView(bytes.buffer).getUint32(0, true) % 8).toBe(0); // header padded to 8 bytes
    const back = decodeSafetensors(bytes);
    expect(back.metadata).toEqual({ format: 'pt', note: 'ünïcode' });
    expect(Object.keys(back.tensors)).toEqual(Object.keys(tensors));
    for (const [name, t] of Object.entries(tensors)) {
      const u = back.tensors[name];
      expect(u.shape).toEqual(t.shape);
      expect(new Uint32Array(u.data.buffer, u.data.byteOffset, u.size)).toEqual(
        new Uint32Array(t.data.buffer, t.data.byteOffset, t.size),
      );
    }
    expect(encodeSafetensors(back.tensors, back.metadata)).toEqual(bytes);
  });

  it('reads F16, BF16 and F64 as float32', () => {
    const data = new Uint8Array(2 * 3 + 2 * 2 + 8);
    const v = new DataView(data.buffer);
    for (const [i, h] of [0x3c00, 0xc000, 0x0001].entries()) v.setUint16(2 * i, h, true); // 1, −2, 2⁻²⁴
    for (const [i, h] of [0x3f80, 0x4049].entries()) v.setUint16(6 + 2 * i, h, true); // 1, 3.140625
    v.setFloat64(10, 0.1, true);
    const { tensors } = decodeSafetensors(
      rawFile(
        {
          h: { dtype: 'F16', shape: [3], data_offsets: [0, 6] },
          b: { dtype: 'BF16', shape: [2], data_offsets: [6, 10] },
          d: { dtype: 'F64', shape: [], data_offsets: [10, 18] },
        },
        data,
      ),
    );
    expect(Array.from(tensors.h.data)).toEqual([1, -2, 2 ** -24]);
    expect(Array.from(tensors.b.data)).toEqual([1, 3.140625]);
    expect(tensors.d.data[0]).toBe(Math.fround(0.1));
  });

  it('odd but valid files: a zero-size axis next to huge ones, a tensor named __proto__', () => {
    const { tensors } = decodeSafetensors(
      rawFile(
        // A string: in an object literal, __proto__ would set the prototype instead of naming a key.
        `{"empty":{"dtype":"F32","shape":[${2 ** 40},${2 ** 40},0],"data_offsets":[0,0]},` +
          `"__proto__":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`,
        new Uint8Array(4),
      ),
    );
    expect(tensors.empty.shape).toEqual([2 ** 40, 2 ** 40, 0]);
    expect(Object.keys(tensors)).toEqual(['empty', '__proto__']);
    expect(Object.getPrototypeOf(tensors)).toBe(null);
  });

  it('writes atomically: the target appears whole and no temporary file is left', () => {
    const dir = mkdtempSync(join(tmpdir(), 'qkv-st-'));
    const path = join(dir, 'model.safetensors');
    writeFileAtomic(path, sample());
    writeFileAtomic(path, sample()); // over an existing file
    expect(readdirSync(dir)).toEqual(['model.safetensors']);
    expect(readFileBytes(path)).toEqual(sample());
  });
});

describe('hostile and corrupt files give a clear SafetensorsError', () => {
  const f32 = (shape: number[], offsets: number[]) => ({ dtype: 'F32', shape, data_offsets: offsets });
  const cases: [string, Uint8Array, RegExp][] = [
    ['empty file', new Uint8Array(0), /0 bytes/],
    ['7 bytes', new Uint8Array(7), /8-byte header length/],
    ['huge header length (2⁶³)', rawFile({}, undefined, 2 ** 63), /over the format's limit/],
    ['header length past the end', rawFile({}, undefined, 5000), /runs past the end/],
    ['bad JSON', rawFile('{"a": [1, 2'), /not valid UTF-8 JSON/],
    ['not an object', rawFile('[1, 2, 3]'), /does not start with '\{'|not a JSON object/],
    ['invalid UTF-8', rawFile('{"\udc00": 1}'), /UTF-8 JSON|not an object/],
    [
      'unknown dtype',
      rawFile({ a: { dtype: 'F99', shape: [1], data_offsets: [0, 4] } }, new Uint8Array(4)),
      /unknown dtype "F99"/,
    ],
    [
      'unsupported dtype',
      rawFile({ a: { dtype: 'I64', shape: [1], data_offsets: [0, 8] } }, new Uint8Array(8)),
      /dtype I64/,
    ],
    [
      'offsets past the end',
      rawFile({ a: f32([2], [0, 8]) }, new Uint8Array(4)),
      /outside the 4-byte data section/,
    ],
    ['begin after end', rawFile({ a: f32([0], [4, 0]) }, new Uint8Array(4)), /outside/],
    [
      'shape/size mismatch',
      rawFile({ a: f32([3], [0, 8]) }, new Uint8Array(12)),
      /needs 12 bytes but data_offsets span 8/,
    ],
    [
      'overlapping tensors',
      rawFile({ a: f32([2], [0, 8]), b: f32([2], [4, 12]) }, new Uint8Array(12)),
      /overlaps/,
    ],
    [
      'a hole in the data',
      rawFile({ a: f32([1], [0, 4]), b: f32([1], [8, 12]) }, new Uint8Array(12)),
      /belong to no tensor/,
    ],
    ['trailing bytes', rawFile({ a: f32([1], [0, 4]) }, new Uint8Array(8)), /belong to no tensor/],
    ['negative size', rawFile({ a: f32([-1], [0, 4]) }, new Uint8Array(4)), /invalid shape/],
    [
      'huge shape (no allocation)',
      rawFile({ a: f32([2 ** 40, 2 ** 40], [0, 4]) }, new Uint8Array(4)),
      /needs more bytes/,
    ],
    ['fractional offsets', rawFile({ a: f32([1], [0, 4.5]) }, new Uint8Array(4)), /invalid data_offsets/],
    ['metadata not strings', rawFile({ __metadata__: { a: 1 } }), /'a' is not a string/],
    ['tensor entry not an object', rawFile({ a: 3 }), /'a' is not an object/],
  ];
  for (const [name, bytes, pattern] of cases) {
    it(name, () => expectSafetensorsError(bytes, pattern));
  }
});

describe('fuzz', () => {
  const onlySafetensorsErrors = (bytes: Uint8Array) => {
    try {
      decodeSafetensors(bytes);
    } catch (err) {
      if (!(err instanceof SafetensorsError)) throw err;
      expect(err.message).toMatch(/^decodeSafetensors: /);
    }
  };

  it('random bytes', () => {
    fc.assert(fc.property(fc.uint8Array({ maxLength: 200 }), onlySafetensorsErrors), {
      numRuns: 500,
      seed: 1,
    });
  });

  it('random bytes behind a plausible header length', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 8, maxLength: 200 }), fc.nat(300), (bytes, n) => {
        new DataView(bytes.buffer).setUint32(0, n, true);
        new DataView(bytes.buffer).setUint32(4, 0, true);
        onlySafetensorsErrors(bytes);
      }),
      { numRuns: 500, seed: 2 },
    );
  });

  it('every truncation of a valid file fails cleanly', () => {
    const good = sample();
    for (let len = 0; len < good.length; len++) expectSafetensorsError(good.subarray(0, len), /./);
  });

  it('single-byte mutations of a valid file either decode or fail cleanly', () => {
    const good = sample();
    fc.assert(
      fc.property(fc.nat(good.length - 1), fc.integer({ min: 0, max: 255 }), (at, value) => {
        const bad = good.slice();
        bad[at] = value;
        onlySafetensorsErrors(bad);
      }),
      { numRuns: 1000, seed: 3 },
    );
  });

  it('oversized inputs: a valid file with megabytes of junk appended fails fast', () => {
    const good = sample();
    const big = new Uint8Array(good.length + 8_000_000);
    big.set(good);
    const t0 = performance.now();
    expectSafetensorsError(big, /belong to no tensor/);
    expect(performance.now() - t0).toBeLessThan(1000);
  });
});
