// The autograd's element-wise hot loops on float32 storage: softmax cross-entropy (forward statistics and
// backward) and tanh-GELU (forward and backward), driven by src/kernels/ops-wasm.ts, which copies a chunk
// of rows in, calls one of these, and copies the results out.
// One decision to know: the arithmetic is float64 (f64x2), exactly the order src/autograd/ops.ts's JS
// loops use, with an exp as accurate as theirs (fastExp: ≤ 2 float64 ulps): the float32 results are the
// JS loops' (the float64 value rounded once to float32) except where a last-bit float64 difference moves
// that rounding, so every tolerance the float32 path was checked at still holds. Float32 lanes (f32x4)
// would be twice as wide but round every intermediate, which the existing tests do not allow; the win
// here is SIMD, no bounds checks and no exp tables (fastExp's two table loads per element).
//
// Pointers are byte addresses; every f32 array is [n] or [rows, C] row-major, f64 arrays 8-byte aligned.

// e^a, two lanes: k = round(a·log2 e) by the 1.5·2^52 trick, r = a − k·ln2 (Cody–Waite: k·LN2_HI is exact
// for |k| < 2^21), e^r by its degree-12 Taylor polynomial (|r| ≤ ln2/2: truncation < 2e-16 relative),
// 2^k as two factors 2^(k>>1)·2^(k−(k>>1)) built in the exponent bits (each normal for k in [−1076, 1024],
// so the product underflows through the subnormals as Math.exp does, and overflows to +∞ from a ≈ 709.8).
// a is clamped to [−746, 710] (NaN passes: pmin/pmax keep their first operand unless the bound is strictly
// beyond it); −∞ gives 0, +∞ gives +∞, NaN gives NaN (the polynomial is NaN).
const LOG2E: f64 = 1.4426950408889634;
const LN2_HI: f64 = 0.6931471803691238; // 32 significant bits
const LN2_LO: f64 = 1.9082149292705877e-10; // ln 2 − LN2_HI
const MAGIC: f64 = 6755399441055744.0; // 1.5·2^52

// The constants, read from memory at each use (one broadcast load each): V8 builds a v128 constant with
// three instructions at every use, which in this loop body would triple its length (measured: ~3× slower).
const K = memory.data<f64>([
  -746.0, 710.0, LOG2E, MAGIC, LN2_HI, LN2_LO, // 0–5: clamp, reduction
  1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, // 6–11
  1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, // 12–17: 1/n!, n = 12 … 0
  0.044715, -2.0 * 0.7978845608028654, 3.0 * 0.044715, 2.0, 0.7978845608028654, Infinity, // 18–23: GELU
]);

@inline
function k(i: i32): v128 {
  return v128.load64_splat(K + (<usize>i << 3));
}

@inline
function expF64x2(a: v128): v128 {
  const c = f64x2.pmin(f64x2.pmax(a, k(0)), k(1));
  const shifted = f64x2.add(f64x2.mul(c, k(2)), k(3));
  const kf = f64x2.sub(shifted, k(3));
  const r = f64x2.sub(f64x2.sub(c, f64x2.mul(kf, k(4))), f64x2.mul(kf, k(5)));
  // Horner, highest power first: 1 + r(1 + r(1/2 + r(1/6 + … + r/12!))).
  let p = k(6);
  p = f64x2.add(f64x2.mul(p, r), k(7));
  p = f64x2.add(f64x2.mul(p, r), k(8));
  p = f64x2.add(f64x2.mul(p, r), k(9));
  p = f64x2.add(f64x2.mul(p, r), k(10));
  p = f64x2.add(f64x2.mul(p, r), k(11));
  p = f64x2.add(f64x2.mul(p, r), k(12));
  p = f64x2.add(f64x2.mul(p, r), k(13));
  p = f64x2.add(f64x2.mul(p, r), k(14));
  p = f64x2.add(f64x2.mul(p, r), k(15));
  p = f64x2.add(f64x2.mul(p, r), k(16));
  p = f64x2.add(f64x2.mul(p, r), k(17));
  p = f64x2.add(f64x2.mul(p, r), k(17));
  // k from the low bits of shifted (MAGIC's bits are k(3)); 2^j = (j << 52) + the bits of 1.0 (k(17)).
  const kk = i64x2.sub(shifted, k(3));
  const k1 = i64x2.shr_s(kk, 1);
  const k2 = i64x2.sub(kk, k1);
  const pow1 = i64x2.add(i64x2.shl(k1, 52), k(17));
  const pow2 = i64x2.add(i64x2.shl(k2, 52), k(17));
  return f64x2.mul(f64x2.mul(p, pow1), pow2);
}

/** e^a for one number, the same function as expF64x2 (for tails and single elements). */
@inline
function expF64(a: f64): f64 {
  return f64x2.extract_lane(expF64x2(f64x2.splat(a)), 0);
}

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

/**
 * Cross-entropy statistics of `rows` rows of logits x [rows, C]: for each row whose target (i32 at
 * targets) is not `ignoreIndex`, its max (as f32 widened) and Σ e^(x − max) (float64) into stats [rows, 2]
 * (f64); ignored rows are left as they are. The max propagates NaN (f32x4.max, as Math.max).
 */
export function ceForward(x: usize, rows: i32, C: i32, targets: usize, ignoreIndex: i32, stats: usize): void {
  const rowBytes = <usize>C << 2;
  const C4 = C & ~3;
  const C2 = C & ~1;
  for (let n = 0; n < rows; n++) {
    if (load<i32>(targets + (<usize>n << 2)) == ignoreIndex) continue;
    const o = x + <usize>n * rowBytes;
    let mv = f32x4.splat(-Infinity);
    let i = 0;
    for (; i < C4; i += 4) mv = f32x4.max(mv, v128.load(o + (<usize>i << 2)));
    let m: f32 = max(max(f32x4.extract_lane(mv, 0), f32x4.extract_lane(mv, 1)), max(f32x4.extract_lane(mv, 2), f32x4.extract_lane(mv, 3)));
    for (; i < C; i++) m = max(m, load<f32>(o + (<usize>i << 2)));
    const mx = <f64>m;
    const ms = f64x2.splat(mx);
    let s0 = f64x2.splat(0);
    let s1 = f64x2.splat(0);
    i = 0;
    for (; i < C4; i += 4) {
      const p = o + (<usize>i << 2);
      s0 = f64x2.add(s0, expF64x2(f64x2.sub(load2(p), ms)));
      s1 = f64x2.add(s1, expF64x2(f64x2.sub(load2(p + 8), ms)));
    }
    for (; i < C2; i += 2) s0 = f64x2.add(s0, expF64x2(f64x2.sub(load2(o + (<usize>i << 2)), ms)));
    const s = f64x2.add(s0, s1);
    let sum = f64x2.extract_lane(s, 0) + f64x2.extract_lane(s, 1);
    if (i < C) sum += expF64(<f64>load<f32>(o + (<usize>i << 2)) - mx);
    const st = stats + (<usize>n << 4);
    store<f64>(st, mx);
    store<f64>(st, sum, 8);
  }
}

/**
 * dx [rows, C] += g·(softmax(x) − onehot(target)) for every counted row, from ceForward's stats: e·(g/Σ) at
 * every element, then the target's element set to its old value + g·(e/Σ − 1) (the JS loop's two forms,
 * each summed in float64 and rounded once). Ignored rows are untouched.
 */
export function ceBackward(
  x: usize, dx: usize, rows: i32, C: i32, targets: usize, ignoreIndex: i32, stats: usize, g: f64,
): void {
  const rowBytes = <usize>C << 2;
  const C2 = C & ~1;
  for (let n = 0; n < rows; n++) {
    const t = load<i32>(targets + (<usize>n << 2));
    if (t == ignoreIndex) continue;
    const st = stats + (<usize>n << 4);
    const mx = load<f64>(st);
    const sum = load<f64>(st, 8);
    const kg = g / sum;
    const o = x + <usize>n * rowBytes;
    const d = dx + <usize>n * rowBytes;
    const tAt = <usize>t << 2;
    const old = <f64>load<f32>(d + tAt);
    const ms = f64x2.splat(mx);
    const ks = f64x2.splat(kg);
    let i = 0;
    for (; i < C2; i += 2) {
      const at = <usize>i << 2;
      const e = expF64x2(f64x2.sub(load2(o + at), ms));
      store2(d + at, f64x2.add(load2(d + at), f64x2.mul(e, ks)));
    }
    if (i < C) {
      const at = <usize>i << 2;
      store<f32>(d + at, <f32>(<f64>load<f32>(d + at) + expF64(<f64>load<f32>(o + at) - mx) * kg));
    }
    const et = expF64(<f64>load<f32>(o + tAt) - mx);
    store<f32>(d + tAt, <f32>(old + g * (et / sum - 1.0)));
  }
}

/** e = e^(−2u), u = √(2/π)·(v + 0.044715·v³), in the JS loop's order (−2·√(2/π) folded as it folds it). */
@inline
function geluExp(v: v128): v128 {
  const cube = f64x2.mul(f64x2.mul(f64x2.mul(k(18), v), v), v);
  return expF64x2(f64x2.mul(k(19), f64x2.add(v, cube)));
}

/**
 * y[i] = GELU(x[i]) = v / (1 + e), e = e^(−2u), for n floats; with `saved` ≠ 0 also saved[i] = e (rounded to
 * float32, as the JS loop stores it). Works on pairs; an odd last element is done as a pair with itself
 * (its lane is stored once).
 */
export function geluForward(x: usize, y: usize, saved: usize, n: i32): void {
  let i = 0;
  for (; i + 2 <= n; i += 2) {
    const at = <usize>i << 2;
    const v = load2(x + at);
    const e = geluExp(v);
    if (saved != 0) store2(saved + at, e);
    store2(y + at, f64x2.div(v, f64x2.add(k(17), e)));
  }
  if (i < n) {
    const at = <usize>i << 2;
    const v = f64x2.splat(<f64>load<f32>(x + at));
    const e = geluExp(v);
    if (saved != 0) store<f32>(saved + at, <f32>f64x2.extract_lane(e, 0));
    store<f32>(y + at, <f32>f64x2.extract_lane(f64x2.div(v, f64x2.add(k(17), e)), 0));
  }
}

/** dx[i] += dy[i]·GELU′(x[i]) from the saved e (the JS loop's formula and order; 0 for σ(1 − σ) where e = +∞). */
@inline
function geluGrad(v: v128, e: v128, dy: v128): v128 {
  const one = k(17);
  const s = f64x2.div(one, f64x2.add(one, e));
  const sp = v128.and(f64x2.mul(f64x2.mul(e, s), s), f64x2.lt(e, k(23)));
  const poly = f64x2.add(one, f64x2.mul(f64x2.mul(k(20), v), v));
  const t = f64x2.mul(f64x2.mul(f64x2.mul(f64x2.mul(k(21), v), sp), k(22)), poly);
  return f64x2.mul(dy, f64x2.add(s, t));
}

export function geluBackward(x: usize, saved: usize, dy: usize, dx: usize, n: i32): void {
  let i = 0;
  for (; i + 2 <= n; i += 2) {
    const at = <usize>i << 2;
    const g = geluGrad(load2(x + at), load2(saved + at), load2(dy + at));
    store2(dx + at, f64x2.add(load2(dx + at), g));
  }
  if (i < n) {
    const at = <usize>i << 2;
    const g = geluGrad(
      f64x2.splat(<f64>load<f32>(x + at)),
      f64x2.splat(<f64>load<f32>(saved + at)),
      f64x2.splat(<f64>load<f32>(dy + at)),
    );
    store<f32>(dx + at, <f32>(<f64>load<f32>(dx + at) + f64x2.extract_lane(g, 0)));
  }
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
