// The autograd's element-wise hot loops on float32 storage: softmax cross-entropy (forward statistics and
// backward) and tanh-GELU (forward and backward), LayerNorm, the heads' layout moves, column sums, and the
// plain loops (add, c·x, AdamW, an embedding's scatter-add), driven by src/kernels/ops-wasm.ts, which
// copies a chunk of rows in, calls one of these, and copies the results out. The plain loops give the JS
// loops' floats bit for bit; JS ran them at 2–6 ns a float here, copies in and out cost about 0.3.
// One decision to know: cross-entropy and GELU compute in float32 lanes (f32x4, exp2x4's degree-5 fit),
// as PyTorch's float32 kernels do: a few float32 ulps from the float64 formula of the JS loops in
// src/autograd/ops.ts (the loss within about 4e-7 nats per row, GELU within 4e-6 relative), at a quarter of
// the float64 lanes' cost (f64x2 and a degree-12 exp, which these loops used before: they were 7% of a
// language-model training step). Float64 is kept where it matters: each row's Σ e^(x − max), the target's
// gradient g·(p − 1) (which cancels as p → 1), and all of LayerNorm (its statistics and its backward's
// row sums).
//
// Pointers are byte addresses; every f32 array is [n] or [rows, C] row-major, f64 arrays 8-byte aligned.

import { geluSpan, geluSpanBackward, madd } from './simd';

const LOG2E_F32: f32 = 1.4426950408889634;

/** Two float32 at p, widened to float64 lanes. */
@inline
function load2(p: usize): v128 {
  return f64x2.promote_low_f32x4(v128.load64_zero(p));
}

/** Two float64 lanes rounded to float32, stored at p. */
@inline
function store2(p: usize, v: v128): void {
  v128.store64_lane(p, f32x4.demote_f64x2_zero(v), 0);
}

// The cross-entropy's float32 exp: simd.ts's exp2x4 with its constant term pinned to 1 (1.0000001 there),
// so the max element's e^0 is exactly 1 and a row with one class, or one dominant class, gets exactly
// p = 1 and no gradient. ≤ 1.6e-7 relative on [−½, ½] in exact arithmetic (1.3e-7 unpinned). Constants
// are read from memory at each use, one broadcast load each (V8 builds a v128 constant with three
// instructions at every use).
const CE_F32 = memory.data<f32>([
  LOG2E_F32, -126.0, 12582912.0, 1.0, // 0–3: log2 e, exp2's floor, the 1.5·2^23 that rounds, p0
  6.9314694e-1, 2.4022120e-1, 5.5507131e-2, 9.6755410e-3, 1.3276471e-3, // 4–8: p1 … p5
]);
const CE_EXP_BIAS = memory.data<i32>([127 - 0x400000]); // moves round(z) from the mantissa to the exponent

@inline
function ce(i: i32): v128 {
  return v128.load32_splat(CE_F32 + (<usize>i << 2));
}

/**
 * e^(x − m) for 4 lanes in float32 (m4 = m splatted): 2^z, z = (x − m)·log2 e, whose float32 roundings
 * add ≈ |x − m|·1.2e-7 relative to the fit's 1.6e-7. Below z = −126 the result is 0 (as e^(x − m) rounds
 * to nearly 0 in float32), so a −∞ logit (a masked class) gets exactly 0. NaN stays NaN.
 */
@inline
function expShifted(x: v128, m4: v128): v128 {
  const z0 = f32x4.mul(f32x4.sub(x, m4), ce(0));
  const z = f32x4.pmax(z0, ce(1));
  const shifted = f32x4.add(z, ce(2));
  const r = f32x4.sub(z, f32x4.sub(shifted, ce(2))); // z − round(z), exact
  const r2 = f32x4.mul(r, r);
  const a = madd(ce(4), r, ce(3));
  const b = madd(ce(6), r, ce(5));
  const c = madd(ce(8), r, ce(7));
  const p = madd(f32x4.mul(r2, r2), c, madd(r2, b, a));
  const scale = i32x4.shl(i32x4.add(shifted, v128.load32_splat(CE_EXP_BIAS)), 23);
  return v128.andnot(f32x4.mul(p, scale), f32x4.lt(z0, ce(1)));
}

/** e^(x − m) for one float32 x (expShifted's lane 0, the same function). */
@inline
function expShifted1(x: f32, m4: v128): f32 {
  return f32x4.extract_lane(expShifted(f32x4.splat(x), m4), 0);
}

/**
 * Cross-entropy statistics of `rows` rows of logits x [rows, C]: for each row whose target (i32 at
 * targets) is not `ignoreIndex`, its max (as f32 widened) and Σ e^(x − max) into stats [rows, 2] (f64);
 * ignored rows are left as they are. The max propagates NaN (f32x4.max, as Math.max). Each e^(x − max)
 * is float32 (expShifted), summed in float64 lanes: the sum is within about 4e-7 relative of the exact
 * one, so the loss (max + log Σ − x_target) is within about 4e-7 nats per row.
 */
export function ceForward(x: usize, rows: i32, C: i32, targets: usize, ignoreIndex: i32, stats: usize): void {
  const rowBytes = <usize>C << 2;
  const C4 = C & ~3;
  for (let n = 0; n < rows; n++) {
    if (load<i32>(targets + (<usize>n << 2)) == ignoreIndex) continue;
    const o = x + <usize>n * rowBytes;
    let mv = f32x4.splat(-Infinity);
    let i = 0;
    for (; i < C4; i += 4) mv = f32x4.max(mv, v128.load(o + (<usize>i << 2)));
    let m: f32 = max(max(f32x4.extract_lane(mv, 0), f32x4.extract_lane(mv, 1)), max(f32x4.extract_lane(mv, 2), f32x4.extract_lane(mv, 3)));
    for (; i < C; i++) m = max(m, load<f32>(o + (<usize>i << 2)));
    const m4 = f32x4.splat(m);
    let s0 = f64x2.splat(0);
    let s1 = f64x2.splat(0);
    i = 0;
    for (; i < C4; i += 4) {
      const e = expShifted(v128.load(o + (<usize>i << 2)), m4);
      s0 = f64x2.add(s0, f64x2.promote_low_f32x4(e));
      s1 = f64x2.add(s1, f64x2.promote_low_f32x4(i32x4.shuffle(e, e, 2, 3, 2, 3)));
    }
    const s = f64x2.add(s0, s1);
    let sum = f64x2.extract_lane(s, 0) + f64x2.extract_lane(s, 1);
    for (; i < C; i++) sum += <f64>expShifted1(load<f32>(o + (<usize>i << 2)), m4);
    const st = stats + (<usize>n << 4);
    store<f64>(st, <f64>m);
    store<f64>(st, sum, 8);
  }
}

/**
 * dx [rows, C] += g·(softmax(x) − onehot(target)) for every counted row, from ceForward's stats: e·(g/Σ)
 * at every element in float32 (e from expShifted, as the forward), then the target's element set to its
 * old value + g·(e/Σ − 1) in float64 (the one element where 1 − p can cancel). Ignored rows are untouched.
 */
export function ceBackward(
  x: usize, dx: usize, rows: i32, C: i32, targets: usize, ignoreIndex: i32, stats: usize, g: f64,
): void {
  const rowBytes = <usize>C << 2;
  const C4 = C & ~3;
  for (let n = 0; n < rows; n++) {
    const t = load<i32>(targets + (<usize>n << 2));
    if (t == ignoreIndex) continue;
    const st = stats + (<usize>n << 4);
    const mx = load<f64>(st);
    const sum = load<f64>(st, 8);
    const m4 = f32x4.splat(<f32>mx);
    const kg = <f32>(g / sum);
    const ks = f32x4.splat(kg);
    const o = x + <usize>n * rowBytes;
    const d = dx + <usize>n * rowBytes;
    const tAt = <usize>t << 2;
    const old = <f64>load<f32>(d + tAt);
    let i = 0;
    for (; i < C4; i += 4) {
      const at = <usize>i << 2;
      const e = expShifted(v128.load(o + at), m4);
      v128.store(d + at, madd(e, ks, v128.load(d + at)));
    }
    for (; i < C; i++) {
      const at = <usize>i << 2;
      store<f32>(d + at, load<f32>(d + at) + expShifted1(load<f32>(o + at), m4) * kg);
    }
    const et = Math.exp(<f64>load<f32>(o + tAt) - mx); // AssemblyScript's float64 exp (musl's)
    store<f32>(d + tAt, <f32>(old + g * (et / sum - 1.0)));
  }
}

/**
 * y[i] = GELU(x[i]) for n floats, and saved[i] = e^(−2u) when `saved` ≠ 0: simd.ts's geluSpan, in float32
 * (≤ 4e-6 relative). The arrays have room for n rounded up to a multiple of 4 (ops-wasm.ts's scratch).
 */
export function geluForward(x: usize, y: usize, saved: usize, n: i32): void {
  geluSpan(x, y, saved, n);
}

/**
 * dx[i] += dy[i]·GELU′(x[i]) from the saved e (acc = 1), or dx[i] = 0 + dy[i]·GELU′(x[i]) without reading
 * dx (acc = 0, a gradient buffer just allocated): simd.ts's geluSpanBackward, in float32.
 */
export function geluBackward(x: usize, saved: usize, dy: usize, dx: usize, n: i32, acc: i32): void {
  geluSpanBackward(x, saved, dy, dx, n, acc);
}

/** Σ of a row of n float32 at p, in float64 (two lanes, then the tail). */
@inline
function rowSum(p: usize, n: i32): f64 {
  let s0 = f64x2.splat(0);
  let s1 = f64x2.splat(0);
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const q = p + (<usize>i << 2);
    s0 = f64x2.add(s0, load2(q));
    s1 = f64x2.add(s1, load2(q + 8));
  }
  for (; i + 2 <= n; i += 2) s0 = f64x2.add(s0, load2(p + (<usize>i << 2)));
  const s = f64x2.add(s0, s1);
  let sum = f64x2.extract_lane(s, 0) + f64x2.extract_lane(s, 1);
  if (i < n) sum += <f64>load<f32>(p + (<usize>i << 2));
  return sum;
}

/**
 * LayerNorm over rows of x [rows, D] (the autograd's formula, src/autograd/ops.ts): mean, then
 * Σ(x − mean)² (two sweeps: no cancellation), rstd = 1/√(var + eps), y = (x − mean)·rstd·w + b, each row's
 * mean and rstd into stats [rows, 2] (f64). Float64 arithmetic, y rounded once to float32.
 */
export function lnForward(
  x: usize, w: usize, b: usize, y: usize, stats: usize, rows: i32, D: i32, eps: f64,
): void {
  const rowBytes = <usize>D << 2;
  const dd = <f64>D;
  for (let n = 0; n < rows; n++) {
    const o = x + <usize>n * rowBytes;
    const yo = y + <usize>n * rowBytes;
    const mean = rowSum(o, D) / dd;
    const ms = f64x2.splat(mean);
    let v0 = f64x2.splat(0);
    let i = 0;
    for (; i + 2 <= D; i += 2) {
      const c = f64x2.sub(load2(o + (<usize>i << 2)), ms);
      v0 = f64x2.add(v0, f64x2.mul(c, c));
    }
    let v = f64x2.extract_lane(v0, 0) + f64x2.extract_lane(v0, 1);
    if (i < D) {
      const c = <f64>load<f32>(o + (<usize>i << 2)) - mean;
      v += c * c;
    }
    const r = 1.0 / sqrt<f64>(v / dd + eps);
    const rs = f64x2.splat(r);
    const st = stats + (<usize>n << 4);
    store<f64>(st, mean);
    store<f64>(st, r, 8);
    i = 0;
    for (; i + 2 <= D; i += 2) {
      const at = <usize>i << 2;
      const h = f64x2.mul(f64x2.sub(load2(o + at), ms), rs);
      store2(yo + at, f64x2.add(f64x2.mul(h, load2(w + at)), load2(b + at)));
    }
    if (i < D) {
      const at = <usize>i << 2;
      const h = (<f64>load<f32>(o + at) - mean) * r;
      store<f32>(yo + at, <f32>(h * <f64>load<f32>(w + at) + <f64>load<f32>(b + at)));
    }
  }
}

/**
 * LayerNorm's backward over rows, from lnForward's stats: with x̂ = (x − mean)·rstd and g = dy·w,
 * dw += dy·x̂ and db += dy row by row (rounded to float32 after each row, as the JS loop adds into a
 * float32 grad), and, when dx ≠ 0, dx += rstd·(g − mean(g) − x̂·mean(g·x̂)).
 */
export function lnBackward(
  x: usize, w: usize, dy: usize, dx: usize, dw: usize, db: usize, stats: usize, rows: i32, D: i32,
): void {
  const rowBytes = <usize>D << 2;
  const dd = <f64>D;
  for (let n = 0; n < rows; n++) {
    const off = <usize>n * rowBytes;
    const o = x + off;
    const go = dy + off;
    const st = stats + (<usize>n << 4);
    const mean = load<f64>(st);
    const r = load<f64>(st, 8);
    const ms = f64x2.splat(mean);
    const rs = f64x2.splat(r);
    let mg0 = f64x2.splat(0);
    let mgx0 = f64x2.splat(0);
    let i = 0;
    for (; i + 2 <= D; i += 2) {
      const at = <usize>i << 2;
      const h = f64x2.mul(f64x2.sub(load2(o + at), ms), rs);
      const e = load2(go + at);
      const g = f64x2.mul(e, load2(w + at));
      mg0 = f64x2.add(mg0, g);
      mgx0 = f64x2.add(mgx0, f64x2.mul(g, h));
      store2(dw + at, f64x2.add(load2(dw + at), f64x2.mul(e, h)));
      store2(db + at, f64x2.add(load2(db + at), e));
    }
    let mg = f64x2.extract_lane(mg0, 0) + f64x2.extract_lane(mg0, 1);
    let mgx = f64x2.extract_lane(mgx0, 0) + f64x2.extract_lane(mgx0, 1);
    if (i < D) {
      const at = <usize>i << 2;
      const h = (<f64>load<f32>(o + at) - mean) * r;
      const e = <f64>load<f32>(go + at);
      const g = e * <f64>load<f32>(w + at);
      mg += g;
      mgx += g * h;
      store<f32>(dw + at, <f32>(<f64>load<f32>(dw + at) + e * h));
      store<f32>(db + at, <f32>(<f64>load<f32>(db + at) + e));
    }
    if (dx == 0) continue;
    mg /= dd;
    mgx /= dd;
    const mgs = f64x2.splat(mg);
    const mgxs = f64x2.splat(mgx);
    const d = dx + off;
    i = 0;
    for (; i + 2 <= D; i += 2) {
      const at = <usize>i << 2;
      const h = f64x2.mul(f64x2.sub(load2(o + at), ms), rs);
      const t = f64x2.sub(f64x2.sub(f64x2.mul(load2(go + at), load2(w + at)), mgs), f64x2.mul(h, mgxs));
      store2(d + at, f64x2.add(load2(d + at), f64x2.mul(rs, t)));
    }
    if (i < D) {
      const at = <usize>i << 2;
      const h = (<f64>load<f32>(o + at) - mean) * r;
      const t = <f64>load<f32>(go + at) * <f64>load<f32>(w + at) - mg - h * mgx;
      store<f32>(d + at, <f32>(<f64>load<f32>(d + at) + r * t));
    }
  }
}

/**
 * Moves A·B·C runs of D floats: the run at src + (a·sa + b·sb + c·sc) floats goes to dst + (a·ta + b·tb +
 * c·tc) floats, copied (acc = 0) or added to what is there (acc = 1, float32 sums). The heads' layout
 * changes ([B, L, H, E] ↔ [B, H, L, E], a part of packed q | k | v to heads and back) as
 * src/kernels/ops-wasm.ts drives them: JS element loops took several ns a float for these.
 */
export function permuteRuns(
  src: usize, dst: usize, A: i32, B: i32, C: i32, D: i32,
  sa: i32, sb: i32, sc: i32, ta: i32, tb: i32, tc: i32, acc: i32,
): void {
  const vecEnd = <usize>(D & ~3) << 2;
  const runEnd = <usize>D << 2;
  for (let a = 0; a < A; a++) {
    for (let b = 0; b < B; b++) {
      for (let c = 0; c < C; c++) {
        const s = src + (<usize>(a * sa + b * sb + c * sc) << 2);
        const d = dst + (<usize>(a * ta + b * tb + c * tc) << 2);
        let i: usize = 0;
        if (acc != 0) {
          for (; i < vecEnd; i += 16) v128.store(d + i, f32x4.add(v128.load(d + i), v128.load(s + i)));
          for (; i < runEnd; i += 4) store<f32>(d + i, load<f32>(d + i) + load<f32>(s + i));
        } else {
          for (; i < vecEnd; i += 16) v128.store(d + i, v128.load(s + i));
          for (; i < runEnd; i += 4) store<f32>(d + i, load<f32>(s + i));
        }
      }
    }
  }
}

/**
 * Column sums of x [rows, M] (float32) added into sums [M] (float64): four rows a sweep, each column's
 * sum taking them in row order (s + x0 + x1 + x2 + x3, left to right), then the last rows one at a time:
 * the float64 additions of src/kernels/matmul.ts linearGradBias's JS loop, one row after another, so the
 * sums are its bit for bit however the caller chunks the rows.
 */
export function colSums(x: usize, rows: i32, M: i32, sums: usize): void {
  const rowBytes = <usize>M << 2;
  const pairs = M & ~1;
  let n = 0;
  for (; n + 4 <= rows; n += 4) {
    const r0 = x + <usize>n * rowBytes;
    const r1 = r0 + rowBytes;
    const r2 = r1 + rowBytes;
    const r3 = r2 + rowBytes;
    let m = 0;
    for (; m < pairs; m += 2) {
      const at = <usize>m << 2;
      const sp = sums + (<usize>m << 3);
      let s = f64x2.add(v128.load(sp), load2(r0 + at));
      s = f64x2.add(s, load2(r1 + at));
      s = f64x2.add(s, load2(r2 + at));
      v128.store(sp, f64x2.add(s, load2(r3 + at)));
    }
    if (m < M) {
      const at = <usize>m << 2;
      const sp = sums + (<usize>m << 3);
      store<f64>(
        sp,
        load<f64>(sp) + <f64>load<f32>(r0 + at) + <f64>load<f32>(r1 + at) + <f64>load<f32>(r2 + at) +
          <f64>load<f32>(r3 + at),
      );
    }
  }
  for (; n < rows; n++) {
    const r = x + <usize>n * rowBytes;
    for (let m = 0; m < M; m++) {
      const sp = sums + (<usize>m << 3);
      store<f64>(sp, load<f64>(sp) + <f64>load<f32>(r + (<usize>m << 2)));
    }
  }
}

/**
 * y[i] = a[i] + b[i mod nb] for n floats (n a multiple of nb ≥ 1; nb = n for arrays of one shape): float32
 * sums, which are the JS loop's (a float64 sum of two float32 rounded once to float32 is their float32
 * sum). y may be a.
 */
export function addRepeat(a: usize, b: usize, y: usize, n: i32, nb: i32): void {
  const vecEnd = <usize>(nb & ~3) << 2;
  const rowEnd = <usize>nb << 2;
  const rowBytes = <usize>nb << 2;
  for (let o: usize = 0; o < (<usize>n << 2); o += rowBytes) {
    const ap = a + o;
    const yp = y + o;
    let i: usize = 0;
    for (; i < vecEnd; i += 16) v128.store(yp + i, f32x4.add(v128.load(ap + i), v128.load(b + i)));
    for (; i < rowEnd; i += 4) store<f32>(yp + i, load<f32>(ap + i) + load<f32>(b + i));
  }
}

/**
 * y[i] = c·x[i] (acc = 0) or y[i] + c·x[i] (acc = 1) for n floats, in float64 and rounded once to float32:
 * the JS loops' arithmetic (c is a float64 constant, e.g. √D), two lanes at a time.
 */
export function scaleF64(x: usize, y: usize, n: i32, c: f64, acc: i32): void {
  const vc = f64x2.splat(c);
  let i = 0;
  for (; i + 2 <= n; i += 2) {
    const at = <usize>i << 2;
    const p = f64x2.mul(vc, load2(x + at));
    store2(y + at, acc != 0 ? f64x2.add(load2(y + at), p) : p);
  }
  for (; i < n; i++) {
    const at = <usize>i << 2;
    const p = c * <f64>load<f32>(x + at);
    store<f32>(y + at, <f32>(acc != 0 ? <f64>load<f32>(y + at) + p : p));
  }
}

/**
 * AdamW's update of n parameters w with grads g and moments m, v (all float32), the JS loop of
 * src/autograd/optim.ts in the same float64 operations and order, two lanes at a time (no fused
 * multiply-add: each product and sum is rounded as in JS):
 * m = f32(b1·m + a1·g), v = f32(b2·v + (a2·g)·g), w = f32(w·decay − (stepSize·m) / (√v·rc2 + eps)).
 */
export function adamwStep(
  w: usize, g: usize, m: usize, v: usize, n: i32,
  b1: f64, a1: f64, b2: f64, a2: f64, decay: f64, stepSize: f64, rc2: f64, eps: f64,
): void {
  const vb1 = f64x2.splat(b1), va1 = f64x2.splat(a1), vb2 = f64x2.splat(b2), va2 = f64x2.splat(a2);
  const vdecay = f64x2.splat(decay), vstep = f64x2.splat(stepSize), vrc2 = f64x2.splat(rc2);
  const veps = f64x2.splat(eps);
  let i = 0;
  for (; i + 2 <= n; i += 2) {
    const at = <usize>i << 2;
    const gi = load2(g + at);
    const mi = f64x2.promote_low_f32x4(f32x4.demote_f64x2_zero(
      f64x2.add(f64x2.mul(vb1, load2(m + at)), f64x2.mul(va1, gi)),
    ));
    const vi = f64x2.promote_low_f32x4(f32x4.demote_f64x2_zero(
      f64x2.add(f64x2.mul(vb2, load2(v + at)), f64x2.mul(f64x2.mul(va2, gi), gi)),
    ));
    store2(m + at, mi);
    store2(v + at, vi);
    const den = f64x2.add(f64x2.mul(f64x2.sqrt(vi), vrc2), veps);
    store2(w + at, f64x2.sub(f64x2.mul(load2(w + at), vdecay), f64x2.div(f64x2.mul(vstep, mi), den)));
  }
  for (; i < n; i++) {
    const at = <usize>i << 2;
    const gi = <f64>load<f32>(g + at);
    const mi = <f64><f32>(b1 * <f64>load<f32>(m + at) + a1 * gi);
    const vi = <f64><f32>(b2 * <f64>load<f32>(v + at) + a2 * gi * gi);
    store<f32>(m + at, <f32>mi);
    store<f32>(v + at, <f32>vi);
    store<f32>(w + at, <f32>(<f64>load<f32>(w + at) * decay - (stepSize * mi) / (Math.sqrt(vi) * rc2 + eps)));
  }
}

/**
 * dt[ids[t]·D + d] += dy[t·D + d] for t < n, d < D (an embedding's backward: the rows of dy added into
 * the table's gradient rows their ids pick, in order of t, float32 sums). ids are int32, checked in range.
 */
export function scatterAddRows(dy: usize, ids: usize, dt: usize, n: i32, D: i32): void {
  const vecEnd = <usize>(D & ~3) << 2;
  const rowEnd = <usize>D << 2;
  for (let t = 0; t < n; t++) {
    const s = dy + <usize>t * rowEnd;
    const d = dt + <usize>load<i32>(ids + (<usize>t << 2)) * rowEnd;
    let i: usize = 0;
    for (; i < vecEnd; i += 16) v128.store(d + i, f32x4.add(v128.load(d + i), v128.load(s + i)));
    for (; i < rowEnd; i += 4) store<f32>(d + i, load<f32>(d + i) + load<f32>(s + i));
  }
}
