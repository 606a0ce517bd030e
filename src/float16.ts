// IEEE 754 binary16 ("half") conversions: exact round-to-nearest-even from float32/float64, exact
// widening back. One decision to know: halves are stored as their bit patterns in a Uint16Array
// (Float16Array is not in every runtime yet); a 65536-entry table makes widening a lookup.

import { formatValue } from './shape.js';

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/**
 * The binary16 bits nearest to the float32 `x` (ties to even); overflow gives ±Infinity, NaN stays NaN.
 * A float64 argument is first rounded to float32 (tensors hold float32, so that is what they convert).
 */
export function toHalfBits(x: number): number {
  if (typeof x !== 'number') throw new TypeError(`toHalfBits: x must be a number, got ${formatValue(x)}`);
  return halfBitsOf(x);
}

/** toHalfBits without the type check, for loops over typed arrays. */
function halfBitsOf(x: number): number {
  f32[0] = x; // first round to float32, as every float32 → float16 conversion does
  const bits = u32[0];
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 | (mant >>> 13) : 0); // ±Infinity, quiet NaN
  const e = exp - 112; // the float16 biased exponent (127 − 15)
  if (e >= 0x1f) return sign | 0x7c00; // too large even before rounding
  if (e <= 0) {
    // Subnormal float16 (or zero): count units of 2^-24, rounding the dropped bits to nearest even.
    if (e < -10) return sign; // below 2^-25: rounds to ±0
    mant |= 0x800000;
    const shift = 14 - e;
    const rest = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    let r = mant >>> shift;
    if (rest > half || (rest === half && r & 1)) r++; // may carry into the smallest normal: still right
    return sign | r;
  }
  let r = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && r & 1)) r++; // a carry may reach 0x7c00 = Infinity: right
  return sign | r;
}

/** The number a binary16 bit pattern (an integer in [0, 65535]) stands for (exact). */
export function fromHalfBits(bits: number): number {
  if (!(Number.isInteger(bits) && bits >= 0 && bits <= 0xffff)) {
    throw new RangeError(
      `fromHalfBits: bits must be an integer in [0, 65535] (a binary16 bit pattern), got ${formatValue(bits)}`,
    );
  }
  return numberOfHalf(bits);
}

/** fromHalfBits without the range check. */
function numberOfHalf(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

let table: Float32Array | undefined;

/** Float32 value of every half bit pattern (built once, 256 KB). */
export function halfTable(): Float32Array {
  if (!table) {
    table = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) table[h] = numberOfHalf(h);
  }
  return table;
}

/** Widens halves to a new Float32Array. */
export function halfToFloat32(bits: Uint16Array): Float32Array {
  const t = halfTable();
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = t[bits[i]];
  return out;
}

/** Rounds floats to halves (nearest even). */
export function float32ToHalf(values: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = halfBitsOf(values[i]);
  return out;
}
