// Float16: exact round-to-nearest-even conversions (subnormals, infinities, NaN) and attention on
// float16 inputs (half the input memory) within float16 tolerance of the float32 reference.

import { describe, expect, it } from 'vitest';
import { fromHalfBits, toHalfBits } from '../src/float16.js';
import { scaledDotProductAttention, scaledDotProductAttentionAsync, Tensor } from '../src/index.js';
import { expectAllClose, expectOneThreadWarning } from './helpers.js';

const f32 = (x: number) => Math.fround(x);

describe('float16 conversions', () => {
  it('every finite half round-trips exactly; NaNs stay NaN', () => {
    for (let h = 0; h < 65536; h++) {
      const x = fromHalfBits(h);
      if (Number.isNaN(x)) {
        expect((h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0).toBe(true);
        expect(Number.isNaN(fromHalfBits(toHalfBits(x)))).toBe(true);
      } else {
        expect(toHalfBits(x)).toBe(h);
      }
    }
  });

  it('known values: extremes, subnormals, signed zero, infinities', () => {
    expect(toHalfBits(1)).toBe(0x3c00);
    expect(toHalfBits(-2)).toBe(0xc000);
    expect(toHalfBits(65504)).toBe(0x7bff); // largest finite half
    expect(toHalfBits(65519)).toBe(0x7bff); // below the midpoint to 65536: rounds down
    expect(toHalfBits(65520)).toBe(0x7c00); // the midpoint: ties to even = Infinity
    expect(toHalfBits(1e6)).toBe(0x7c00);
    expect(toHalfBits(Number.POSITIVE_INFINITY)).toBe(0x7c00);
    expect(toHalfBits(Number.NEGATIVE_INFINITY)).toBe(0xfc00);
    expect(toHalfBits(-0)).toBe(0x8000);
    expect(toHalfBits(2 ** -14)).toBe(0x0400); // smallest normal
    expect(toHalfBits(2 ** -24)).toBe(0x0001); // smallest subnormal
    expect(toHalfBits(2 ** -25)).toBe(0x0000); // half of it: ties to even = 0
    expect(toHalfBits(f32(2 ** -25 * 1.0001))).toBe(0x0001); // just above: rounds up
    expect(toHalfBits(3 * 2 ** -25)).toBe(0x0002); // 1.5 units: ties to even = 2
    expect(toHalfBits(2 ** -14 - 2 ** -25)).toBe(0x0400); // midpoint below the smallest normal: even
    expect(fromHalfBits(0x0001)).toBe(2 ** -24);
    expect(fromHalfBits(0x03ff)).toBe(1023 * 2 ** -24);
    expect(fromHalfBits(0xfc00)).toBe(Number.NEGATIVE_INFINITY);
    expect(Object.is(fromHalfBits(0x8000), -0)).toBe(true);
    const nan = toHalfBits(Number.NaN);
    expect(nan & 0x7c00).toBe(0x7c00);
    expect(nan & 0x3ff).not.toBe(0);
  });

  it('midpoints between neighbouring halves round to the even one, others to the nearest', () => {
    for (let h = 0; h < 0x7bff; h += 7) {
      const lo = fromHalfBits(h);
      const hi = fromHalfBits(h + 1);
      const mid = (lo + hi) / 2; // exact in float32: one bit more than a half
      expect(f32(mid)).toBe(mid);
      expect(toHalfBits(mid)).toBe(h % 2 === 0 ? h : h + 1);
      expect(toHalfBits(-mid)).toBe(0x8000 | (h % 2 === 0 ? h : h + 1));
      const third = f32(lo + (hi - lo) / 3);
      if (third !== lo) expect(toHalfBits(third)).toBe(h);
      const twoThirds = f32(lo + ((hi - lo) * 2) / 3);
      if (twoThirds !== hi) expect(toHalfBits(twoThirds)).toBe(h + 1);
    }
  });

  it('random floats go to the nearest half (checked against both neighbours)', () => {
    const xs = Tensor.randn([20000], { seed: 9, std: 300 }).data;
    for (const x of xs) {
      const h = toHalfBits(x);
      const err = Math.abs(fromHalfBits(h) - x);
      for (const n of [h - 1, h + 1]) {
        if ((n & 0x7fff) > 0x7bff || n < 0) continue;
        expect(Math.abs(fromHalfBits(n) - x)).toBeGreaterThanOrEqual(err);
      }
    }
  });
});

describe('float16 tensors', () => {
  it('hold half the bytes and read back as numbers', () => {
    const t = Tensor.from([
      [1, 2.5],
      [-0.1, 70000],
    ]);
    const h = t.to('float16');
    expect(h.dtype).toBe('float16');
    expect(h.data).toBeInstanceOf(Uint16Array);
    expect(h.data.byteLength).toBe(t.data.byteLength / 2);
    expect(h.toArray()).toEqual([
      [1, 2.5],
      [fromHalfBits(toHalfBits(-0.1)), Number.POSITIVE_INFINITY],
    ]);
    expect(h.get(1, 0)).toBeCloseTo(-0.1, 3);
    expect(h.to('float32').data).toEqual(
      Float32Array.from([1, 2.5, fromHalfBits(toHalfBits(-0.1)), Infinity]),
    );
    expect(() => new Tensor(new Uint16Array(4) as never, [4])).toThrow(/dtype 'float16'/);
    expect(() => new Tensor(new Float32Array(4) as never, [4], 'float16')).toThrow(/Uint16Array/);
  });
});

describe('attention on float16 inputs', () => {
  const shape = [1, 4, 200, 64];
  const q32 = Tensor.randn(shape, { seed: 1 });
  const k32 = Tensor.randn(shape, { seed: 2 });
  const v32 = Tensor.randn(shape, { seed: 3 });
  const [q, k, v] = [q32, k32, v32].map((t) => t.to('float16'));
  // The exact answer for the rounded inputs, and for the original float32 inputs.
  const exact = scaledDotProductAttention(q.to('float32'), k.to('float32'), v.to('float32'), {
    causal: true,
    kernel: 'reference',
  });
  const original = scaledDotProductAttention(q32, k32, v32, { causal: true, kernel: 'reference' });

  for (const kernel of ['auto', 'wasm', 'flash', 'reference'] as const) {
    it(`${kernel}: equals the float32 reference on the rounded inputs, float16-close to the originals`, () => {
      const out = scaledDotProductAttention(q, k, v, { causal: true, kernel });
      expect(out.dtype).toBe('float32');
      expectAllClose(out, exact, { atol: 1e-5, rtol: 1e-4 });
      expectAllClose(out, original, { atol: 5e-3, rtol: 1e-2 }); // inputs carry 2^-11 relative error
    });
  }

  it("dtype: 'float16' returns the float32 result rounded to nearest half", () => {
    const out = scaledDotProductAttention(q, k, v, { causal: true, dtype: 'float16' });
    expect(out.dtype).toBe('float16');
    const full = scaledDotProductAttention(q, k, v, { causal: true });
    expect(out.data).toEqual(full.to('float16').data);
    expectAllClose(out.to('float32'), full, { atol: 2 ** -25, rtol: 2 ** -11 }); // half an ulp
  });

  it('the async path accepts float16 too (on one thread: the browser entry in Node has no Web Workers)', async () => {
    const out = await expectOneThreadWarning('scaledDotProductAttentionAsync', () =>
      scaledDotProductAttentionAsync(q, k, v, { causal: true }),
    );
    expectAllClose(out, exact, { atol: 1e-5, rtol: 1e-4 });
  });
});
