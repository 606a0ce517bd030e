// SIMD helpers shared by the kernels' files (not exported from the module: index.ts does not re-export
// this file). Inlined where used, so moving them here costs nothing.

@inline
export function madd(a: v128, b: v128, c: v128): v128 {
  if (ASC_FEATURE_RELAXED_SIMD) return f32x4.relaxed_madd(a, b, c);
  return f32x4.add(f32x4.mul(a, b), c);
}

/**
 * 2^x for 4 lanes, x ≤ 0 or NaN. Scores arrive in log2 units (the caller folds log2 e into the query
 * scale), so range reduction is exact: n = round(x), r = x − n ∈ [−½, ½], 2^r by a degree-5 polynomial
 * (≤ 3e-7 relative as evaluated in float32), 2^n built in the exponent bits. Only single-instruction
 * SIMD ops: pmax rather than max, and the 1.5·2^23 "magic number" to round, because V8 expands wasm's
 * max, nearest and trunc_sat into instruction sequences.
 */
@inline
export function exp2x4(x: v128): v128 {
  x = f32x4.pmax(x, f32x4.splat(-126.0)); // NaN stays NaN (pmax returns x unless −126 > x)
  const magic = f32x4.splat(12582912.0); // 1.5·2^23: adding it rounds to an integer in the low bits
  const shifted = f32x4.add(x, magic);
  const r = f32x4.sub(x, f32x4.sub(shifted, magic)); // x − round(x), exact
  // 2^r by a degree-5 polynomial fitted here for minimum relative error on [−½, ½] (Lawson's
  // weighted least squares): at most 1.6e-7 with these float32 coefficients in exact arithmetic; the
  // float32 evaluation below adds rounding, for at most 2.8e-7 (emulated over the whole interval).
  // Estrin's scheme rather than Horner's: two more multiplies, but a dependency chain half as long,
  // which is what bounds this loop (the exps of a row are independent; their latency is not hidden).
  const r2 = f32x4.mul(r, r);
  const a = madd(f32x4.splat(6.9314694e-1), r, f32x4.splat(1.0000001));
  const b = madd(f32x4.splat(5.5507131e-2), r, f32x4.splat(2.4022120e-1));
  const c = madd(f32x4.splat(1.3276471e-3), r, f32x4.splat(9.6755410e-3));
  const r4 = f32x4.mul(r2, r2);
  const p = madd(r4, c, madd(r2, b, a));
  // 2^n: the integer sits in the low mantissa bits of `shifted` (as n + 0x400000); move it to the exponent.
  const scaleBits = i32x4.shl(i32x4.add(shifted, i32x4.splat(127 - 0x400000)), 23);
  return f32x4.mul(p, scaleBits);
}


const LOG2E_F32: f32 = 1.4426950408889634;
const GELU_C: f32 = 0.7978845608028654; // √(2/π)

// GELU's constants, read from memory once per span: V8 builds a v128 constant with three instructions at
// every use (measured: inside the GEMM's register tile they also spilled its accumulators).
const GELU_F32 = memory.data<f32>([
  GELU_C, 0.044715, 1.0, -2.0 * LOG2E_F32, // u = √(2/π)·v·(1 + 0.044715·v²); e^(−2u) = 2^(−2u·log2 e)
  -126.0, 128.0, 12582912.0, // exp2's clamp, and the 1.5·2^23 that rounds to an integer
  6.9314694e-1, 1.0000001, 5.5507131e-2, 2.4022120e-1, 1.3276471e-3, 9.6755410e-3, // 2^r, r ∈ [−½, ½]
  3.0 * 0.044715, 2.0 * GELU_C, Infinity, // the derivative's
]);
const EXP_BIAS = memory.data<i32>([127 - 0x400000]); // moves round(x) from the mantissa to the exponent

/**
 * GELU in float32 over n floats at x (n rounded up to a multiple of 4: the caller's arrays have room),
 * into y (may be x), and e = e^(−2u) into `saved` when it is not 0 (for geluSpanBackward). The tanh form,
 * the autograd's function (src/autograd/ops.ts: ½·v·(1 + tanh(u)), u = √(2/π)·(v + 0.044715·v³)),
 * evaluated as v / (1 + e), which is the same function: 1 + tanh(u) cancels for negative v and would lose
 * float32's relative accuracy there. e = 2^x with x clamped to [−126, 128] (2^128 comes out +∞; below
 * 2^−126 it is 0), n = round(x) by the magic number, 2^(x−n) by the attention kernel's
 * degree-5 fit (≤ 3e-7 relative in float32) and 2^n built in the exponent bits; ≤ 4e-6 relative overall
 * (measured on [−30, 30], where the argument's own rounding dominates). pmax/pmin keep NaN (they return x
 * unless the bound is strictly beyond it) and are single instructions. IEEE cases match the float64 form:
 * NaN → NaN, +∞ → +∞, −∞ → NaN (−∞·0 there), large negative v → −0.
 */
export function geluSpan(x: usize, y: usize, saved: usize, n: i32): void {
  const t = GELU_F32;
  const kC = v128.load32_splat(t), k3 = v128.load32_splat(t, 4);
  const one = v128.load32_splat(t, 8), m2log2e = v128.load32_splat(t, 12);
  const lo = v128.load32_splat(t, 16), hi = v128.load32_splat(t, 20), magic = v128.load32_splat(t, 24);
  const p1 = v128.load32_splat(t, 28), p0 = v128.load32_splat(t, 32);
  const p3 = v128.load32_splat(t, 36), p2 = v128.load32_splat(t, 40);
  const p5 = v128.load32_splat(t, 44), p4 = v128.load32_splat(t, 48);
  const bias = v128.load32_splat(EXP_BIAS);
  const end = <usize>n << 2;
  for (let i: usize = 0; i < end; i += 16) {
    const v = v128.load(x + i);
    const u = f32x4.mul(f32x4.mul(v, kC), madd(f32x4.mul(v, v), k3, one));
    const z0 = f32x4.mul(u, m2log2e);
    const z = f32x4.pmin(f32x4.pmax(z0, lo), hi);
    const shifted = f32x4.add(z, magic);
    const f = f32x4.sub(z, f32x4.sub(shifted, magic)); // z − round(z), exact
    const f2 = f32x4.mul(f, f);
    // Estrin's scheme: a dependency chain half as long as Horner's.
    const poly = madd(f32x4.mul(f2, f2), madd(p5, f, p4), madd(f2, madd(p3, f, p2), madd(p1, f, p0)));
    // Below 2^−126, e is 0 (as e^(−2u) rounds to float32), not exp2's floor: y is v either way, and
    // GELU′ then has no e·s² term to overflow (saved e = 0 is what the float64 form saves there).
    const e = v128.andnot(f32x4.mul(poly, i32x4.shl(i32x4.add(shifted, bias), 23)), f32x4.lt(z0, lo));
    if (saved != 0) v128.store(saved + i, e);
    v128.store(y + i, f32x4.div(v, f32x4.add(one, e)));
  }
}

/**
 * dx += dy·GELU′(x) in float32 over n floats (rounded up to a multiple of 4, as geluSpan), from the e that
 * geluSpan saved: with s = 1/(1 + e) (the logistic of 2u), GELU′ = s + 2·v·s·(1 − s)·√(2/π)·(1 +
 * 3·0.044715·v²), where s(1 − s) = e·s², taken as 0 where e = +∞ (there s = 0 and e·s² would be NaN).
 */
export function geluSpanBackward(x: usize, saved: usize, dy: usize, dx: usize, n: i32, acc: i32 = 1): void {
  const t = GELU_F32;
  const one = v128.load32_splat(t, 8);
  const k3x3 = v128.load32_splat(t, 52), twoC = v128.load32_splat(t, 56), inf = v128.load32_splat(t, 60);
  const end = <usize>n << 2;
  for (let i: usize = 0; i < end; i += 16) {
    const v = v128.load(x + i);
    const e = v128.load(saved + i);
    const s = f32x4.div(one, f32x4.add(one, e));
    const sp = v128.and(f32x4.mul(f32x4.mul(e, s), s), f32x4.lt(e, inf));
    const poly = madd(f32x4.mul(k3x3, v), v, one);
    // Where e·s² is 0 (e = 0 or +∞) the second term is v·0, as the float64 form's 2·v·0·…: 0 for a finite
    // v, NaN for ±∞; the product itself would overflow float32 for |v| > 1e19 (v² in the polynomial).
    const term = f32x4.mul(f32x4.mul(f32x4.mul(twoC, v), sp), poly);
    const zero = f32x4.splat(0);
    const t2 = v128.bitselect(f32x4.mul(v, zero), term, f32x4.eq(sp, zero));
    const d = f32x4.add(s, t2);
    // acc = 0: dx is written as if it held +0 (the sums a zero-filled gradient would get, −0 included).
    v128.store(dx + i, madd(v128.load(dy + i), d, acc != 0 ? v128.load(dx + i) : zero));
  }
}
