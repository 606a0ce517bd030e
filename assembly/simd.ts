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

