// The safetensors reader and writer: bit-exact round trips, hand-made hostile files, and fuzzing (random,
// truncated, mutated and oversized inputs must all end in a SafetensorsError, never another exception).

import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { halfTable } from '../src/float16.js';
import { Tensor } from '../src/index.js';
import { readFileBytes, writeFileAtomic } from '../src/io/file-node.js';
import { decodeSafetensors, encodeSafetensors, SafetensorsError } from '../src/io/safetensors.js';

/** A file from a raw header object and data bytes (so tests can write what the encoder never would). */
function rawFile(
  header: unknown,
  data: Uint8Array = new Uint8Array(0),
  headerLength?: number | bigint,
): Uint8Array {
  const json = new TextEncoder().encode(typeof header === 'string' ? header : JSON.stringify(header));
  const bytes = new Uint8Array(8 + json.length + data.length);
  const view = new DataView(bytes.buffer);
  view.setBigUint64(0, BigInt(headerLength ?? json.length), true);
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

describe('float16 tensors are stored as F16 (regression: an F32 header was written over half bits)', () => {
  it('encodeSafetensors writes float16 as F16, 2 bytes per element, the half bits as they are', () => {
    const t = Tensor.from([1, 2, 3, 4]).to('float16');
    const bytes = encodeSafetensors({ t });
    const n = new DataView(bytes.buffer).getUint32(0, true);
    const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)));
    expect(header.t).toEqual({ dtype: 'F16', shape: [4], data_offsets: [0, 8] });
    expect(bytes.length).toBe(8 + n + 8);
    const stored = new DataView(bytes.buffer, 8 + n);
    expect([0, 1, 2, 3].map((i) => stored.getUint16(2 * i, true))).toEqual(Array.from(t.data));
    expect(Array.from(decodeSafetensors(bytes).tensors.t.data)).toEqual([1, 2, 3, 4]);
  });

  it('all 65536 half bit patterns: exact float32 by default, the same bits with keepFloat16', () => {
    const bits = Uint16Array.from({ length: 65536 }, (_, i) => i);
    const half = new Tensor(bits, [256, 256], 'float16');
    const bytes = encodeSafetensors({ half, single: Tensor.from([0.1, -0]) }, { format: 'pt' });

    const wide = decodeSafetensors(bytes).tensors.half;
    expect(wide.dtype).toBe('float32');
    expect(wide.shape).toEqual([256, 256]);
    // Compared in loops that list the first few differences: a failing toEqual on 65536 elements would
    // spend minutes printing its diff.
    const table = halfTable(); // the exact widening Tensor.to('float32') does (NaN stays NaN)
    const narrowed = wide.to('float16').data; // every non-NaN value narrows back to its own bits
    const widening: number[] = [];
    const narrowing: number[] = [];
    for (let h = 0; h < 65536; h++) {
      if (!Object.is(wide.data[h], table[h]) && widening.length < 5) widening.push(h);
      if (!Number.isNaN(table[h]) && narrowed[h] !== h && narrowing.length < 5) narrowing.push(h);
    }
    expect({ widening, narrowing }).toEqual({ widening: [], narrowing: [] });

    const kept = decodeSafetensors(bytes, { keepFloat16: true });
    expect(kept.tensors.half.dtype).toBe('float16');
    expect(kept.tensors.half.data).toBeInstanceOf(Uint16Array);
    const keptBits = kept.tensors.half.data as Uint16Array;
    expect(keptBits.length).toBe(65536);
    expect(keptBits.every((b, i) => b === i)).toBe(true); // NaN payloads and −0 included
    expect(kept.tensors.single.dtype).toBe('float32');
    const again = encodeSafetensors(kept.tensors, kept.metadata);
    expect(again.length === bytes.length && again.every((b, i) => b === bytes[i])).toBe(true); // byte-identical
  });

  it('a float16 tensor that is a view (after reshape) writes only its own elements', () => {
    const t = Tensor.from([
      [1, 2],
      [3, 4],
    ])
      .to('float16')
      .reshape([4]);
    const { tensors } = decodeSafetensors(encodeSafetensors({ t, u: Tensor.from([5]) }));
    expect(Array.from(tensors.t.data)).toEqual([1, 2, 3, 4]);
    expect(Array.from(tensors.u.data)).toEqual([5]);
  });
});

describe('Node Buffers and unaligned bytes (regression: a Buffer is a view into a pooled slab)', () => {
  const file = () =>
    encodeSafetensors(
      {
        w: Tensor.from([
          [1, 2, 3],
          [4, 5, 6],
        ]),
        b: Tensor.from([7, 8, 9]),
        h: Tensor.from([1.5, -2, 65504]).to('float16'),
      },
      { format: 'pt' },
    );
  const expectContents = (bytes: Uint8Array) => {
    const { tensors, metadata } = decodeSafetensors(bytes);
    expect(metadata).toEqual({ format: 'pt' });
    expect(tensors.w.shape).toEqual([2, 3]);
    expect(Array.from(tensors.w.data)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(Array.from(tensors.b.data)).toEqual([7, 8, 9]);
    expect(Array.from(tensors.h.data)).toEqual([1.5, -2, 65504]);
    const kept = decodeSafetensors(bytes, { keepFloat16: true }).tensors.h;
    expect(Array.from(kept.data)).toEqual(Array.from(Tensor.from([1.5, -2, 65504]).to('float16').data));
  };

  it('decodes a Buffer at an odd byteOffset inside a larger ArrayBuffer', () => {
    const buf = Buffer.concat([Buffer.alloc(7), Buffer.from(file())]).subarray(7);
    expect(buf.byteOffset % 4).not.toBe(0); // really misaligned for float32
    expect(buf.buffer.byteLength).toBeGreaterThan(buf.byteLength); // really a view into something larger
    expectContents(buf);
  });

  it('decodes readFileSync of a small file (a pooled Buffer)', () => {
    const path = join(mkdtempSync(join(tmpdir(), 'qkv-st-')), 'small.safetensors');
    writeFileSync(path, file());
    const buf = readFileSync(path);
    expectContents(buf);
  });

  it('every byte offset 0..7 of every readable dtype, with junk around the view', () => {
    const data = new Uint8Array(12 + 6 + 4 + 8);
    const v = new DataView(data.buffer);
    for (const [i, x] of [1.25, -3, 1e-40].entries()) v.setFloat32(4 * i, x, true);
    for (const [i, h] of [0x3c00, 0xc000, 0x0001].entries()) v.setUint16(12 + 2 * i, h, true);
    for (const [i, h] of [0x3f80, 0x4049].entries()) v.setUint16(18 + 2 * i, h, true);
    v.setFloat64(22, 0.1, true);
    const bytes = rawFile(
      {
        f: { dtype: 'F32', shape: [3], data_offsets: [0, 12] },
        h: { dtype: 'F16', shape: [3], data_offsets: [12, 18] },
        b: { dtype: 'BF16', shape: [2], data_offsets: [18, 22] },
        d: { dtype: 'F64', shape: [1], data_offsets: [22, 30] },
      },
      data,
    );
    for (let shift = 0; shift < 8; shift++) {
      const slab = new Uint8Array(bytes.length + 16).fill(0xff);
      slab.set(bytes, shift);
      const { tensors } = decodeSafetensors(slab.subarray(shift, shift + bytes.length));
      expect(Array.from(tensors.f.data)).toEqual([1.25, -3, Math.fround(1e-40)]);
      expect(Array.from(tensors.h.data)).toEqual([1, -2, 2 ** -24]);
      expect(Array.from(tensors.b.data)).toEqual([1, 3.140625]);
      expect(tensors.d.data[0]).toBe(Math.fround(0.1));
    }
  });

  it('the tensors own their data: changing the input bytes afterwards changes nothing', () => {
    const bytes = file();
    const { tensors } = decodeSafetensors(bytes);
    bytes.fill(0, bytes.length - 30);
    expect(Array.from(tensors.w.data)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(tensors.w.data.buffer).not.toBe(bytes.buffer);
  });
});

describe('hostile and corrupt files give a clear SafetensorsError', () => {
  const f32 = (shape: unknown, offsets: unknown) => ({ dtype: 'F32', shape, data_offsets: offsets });
  const good = sample();
  const goodHeader = new DataView(good.buffer).getUint32(0, true);
  // [name, file, pattern]: every message starts with "decodeSafetensors: " (checked below) and names the
  // tensor ('a', or the sample's 'layers.0.weight' / 'bias') whenever one is involved.
  const cases: [string, Uint8Array, RegExp][] = [
    ['empty file', new Uint8Array(0), /0 bytes/],
    ['7 bytes', new Uint8Array(7), /8-byte header length/],
    [
      'huge header length (2⁶³)',
      rawFile({}, undefined, 2 ** 63),
      /9223372036854775808 is over the format's limit/,
    ],
    [
      'huge header length (2⁵³)',
      rawFile({}, undefined, 2 ** 53),
      /9007199254740992 is over the format's limit/,
    ],
    ['huge header length (2⁶⁴ − 1)', rawFile({}, undefined, 2n ** 64n - 1n), /18446744073709551615 is over/],
    ['header length past the end', rawFile({}, undefined, 5000), /runs past the end/],
    ['bad JSON', rawFile('{"a": [1, 2'), /not valid UTF-8 JSON/],
    ['header not JSON at all', rawFile('{hello}   '), /not valid UTF-8 JSON/],
    ['not an object', rawFile('[1, 2, 3]'), /does not start with '\{'|not a JSON object/],
    ['invalid UTF-8', rawFile('{"\udc00": 1}'), /UTF-8 JSON|not an object/],
    [
      'truncated in the data section',
      good.subarray(0, good.length - 5),
      /tensor 'bias' has data_offsets \[48,60\] outside the 55-byte data section/,
    ],
    ['truncated in the header', good.subarray(0, 8 + goodHeader - 1), /runs past the end .*truncated/],
    [
      'unknown dtype',
      rawFile({ a: { dtype: 'F99', shape: [1], data_offsets: [0, 4] } }, new Uint8Array(4)),
      /tensor 'a' has unknown dtype "F99"/,
    ],
    [
      'a dtype named like an Object.prototype property',
      rawFile({ a: { dtype: 'toString', shape: [1], data_offsets: [0, 4] } }, new Uint8Array(4)),
      /tensor 'a' has unknown dtype "toString"/,
    ],
    [
      'unsupported dtype',
      rawFile({ a: { dtype: 'I64', shape: [1], data_offsets: [0, 8] } }, new Uint8Array(8)),
      /tensor 'a' has dtype I64/,
    ],
    [
      'offsets past the end',
      rawFile({ a: f32([2], [0, 8]) }, new Uint8Array(4)),
      /tensor 'a' .*outside the 4-byte data section/,
    ],
    ['begin after end', rawFile({ a: f32([0], [4, 0]) }, new Uint8Array(4)), /tensor 'a' .*outside/],
    [
      'negative offset',
      rawFile({ a: f32([1], [-4, 0]) }, new Uint8Array(4)),
      /tensor 'a' has invalid data_offsets/,
    ],
    ['one offset', rawFile({ a: f32([1], [4]) }, new Uint8Array(4)), /tensor 'a' has invalid data_offsets/],
    ['offsets as strings', rawFile({ a: f32([1], ['0', '4']) }, new Uint8Array(4)), /tensor 'a' has invalid/],
    [
      'offset beyond 2⁵³',
      rawFile({ a: f32([1], [0, 2 ** 60]) }, new Uint8Array(4)),
      /tensor 'a' has invalid data_offsets/,
    ],
    [
      'shape/size mismatch',
      rawFile({ a: f32([3], [0, 8]) }, new Uint8Array(12)),
      /tensor 'a' .*needs 12 bytes but data_offsets span 8/,
    ],
    [
      'overlapping tensors (both named)',
      rawFile({ a: f32([2], [0, 8]), b: f32([2], [4, 12]) }, new Uint8Array(12)),
      /tensor 'b' at \[4,12\] overlaps tensor 'a' at \[0,8\]/,
    ],
    [
      'a hole in the data',
      rawFile({ a: f32([1], [0, 4]), b: f32([1], [8, 12]) }, new Uint8Array(12)),
      /bytes \[4,8\) of the data section .*between tensor 'a' and tensor 'b'/,
    ],
    [
      'trailing bytes',
      rawFile({ a: f32([1], [0, 4]) }, new Uint8Array(8)),
      /bytes \[4,8\) of the data section .*after tensor 'a'/,
    ],
    [
      'negative size',
      rawFile({ a: f32([-1], [0, 4]) }, new Uint8Array(4)),
      /tensor 'a' has an invalid shape/,
    ],
    [
      'fractional size',
      rawFile({ a: f32([1.5], [0, 4]) }, new Uint8Array(4)),
      /tensor 'a' has an invalid shape/,
    ],
    [
      'shape not an array',
      rawFile({ a: f32(4, [0, 4]) }, new Uint8Array(4)),
      /tensor 'a' has an invalid shape/,
    ],
    [
      'huge shape (no allocation)',
      rawFile({ a: f32([2 ** 40, 2 ** 40], [0, 4]) }, new Uint8Array(4)),
      /tensor 'a' .*needs more bytes/,
    ],
    [
      // 2⁶⁴ elements: what wraps to 0 in 64-bit integer arithmetic must not look like a tiny tensor.
      'element count 2⁶⁴ (overflows 64-bit arithmetic)',
      rawFile({ a: f32(new Array(64).fill(2), [0, 4]) }, new Uint8Array(4)),
      /tensor 'a' .*needs more bytes/,
    ],
    [
      'fractional offsets',
      rawFile({ a: f32([1], [0, 4.5]) }, new Uint8Array(4)),
      /tensor 'a' has invalid data_offsets/,
    ],
    ['metadata not strings', rawFile({ __metadata__: { a: 1 } }), /'a' is not a string/],
    ['tensor entry not an object', rawFile({ a: 3 }), /'a' is not an object/],
  ];
  for (const [name, bytes, pattern] of cases) {
    it(name, () => {
      expectSafetensorsError(bytes, pattern);
      expectSafetensorsError(bytes, /^decodeSafetensors: /);
    });
  }

  // No clock here (a timing limit flakes on a shared machine): allocating or reading a 2^53-byte header
  // would throw a RangeError or run out of memory, not these SafetensorsErrors.
  it('a huge header length fails with a SafetensorsError, without reading or allocating it', () => {
    expectSafetensorsError(rawFile({}, undefined, 2 ** 53 - 1), /over the format's limit/);
    expectSafetensorsError(rawFile({}, undefined, 99_999_999), /runs past the end/);
  });

  it('a shape the format allows but a Tensor may not (65 axes) is still a SafetensorsError, naming the tensor', () => {
    const bytes = rawFile({ a: f32(new Array(65).fill(1), [0, 4]) }, new Uint8Array(4));
    try {
      expect(decodeSafetensors(bytes).tensors.a.shape).toHaveLength(65); // where Tensor has no rank limit
    } catch (err) {
      expect(err).toBeInstanceOf(SafetensorsError);
      expect((err as Error).message).toMatch(
        /^decodeSafetensors: tensor 'a' of shape \[1,1,.*cannot be a Tensor/,
      );
    }
  });

  it('bad options are named', () => {
    expect(() => decodeSafetensors(sample(), { keepFloat16: 'yes' as unknown as boolean })).toThrow(
      'decodeSafetensors: keepFloat16 must be a boolean, got string',
    );
  });

  it('the wrong kind of input is named', () => {
    expect(() => decodeSafetensors([1, 2, 3] as unknown as Uint8Array)).toThrow(
      /^decodeSafetensors: expected a Uint8Array, got an array/,
    );
    expect(() => decodeSafetensors(new Uint8Array(16).buffer as unknown as Uint8Array)).toThrow(
      /got ArrayBuffer/,
    );
  });
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

  it('oversized inputs: a valid file with megabytes of junk appended is refused, naming the junk', () => {
    const good = sample();
    const big = new Uint8Array(good.length + 8_000_000);
    big.set(good);
    expectSafetensorsError(big, /belong to no tensor/);
  });
});
