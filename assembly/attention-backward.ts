// WASM SIMD128 inner loops of the attention backward (FlashAttention-2, arXiv:2307.08691, Algorithm 2):
// one query tile of one head against one key block; JS (src/kernels/wasm-backward.ts) owns the loops.
// One decision to know: dP = dO·v is summed in f64, because dS = P∘(dP − D) cancels: for a row whose
// softmax is peaked, dP of its top key is within a rounding of D, and a float32 sum's error becomes most of
// dS (with dP in f32, a conformance case with logits of ±30 was 11% off on a dk entry). The scores are
// summed in f32 lanes from q times scale·log2 e, as the forward sums them (so a tiny scale cannot overflow
// the sum, and the backward's P has the forward's precision), then s − lse is taken in f64 (the lse may be
// thousands); P, dS and the dQ, dK, dV products are f32. (Scores in f64 too, as before 2026-12-02, cost
// twice the lanes for no accuracy the tolerances see.)
//
// The tile's dS (= ∂loss/∂score = ∂loss/∂bias) is left in memory for the driver to add into dbias.
//
// Layouts (row-major, pointers are bytes; EPad, EvPad multiples of 8 with zero padding):
//   q [rows, EPad] f32   query rows of the tile, as given (unscaled); qs the same times scale·log2 e
//   dO64 [rows, Ev] f64, dO [rows, EvPad] f32  ∂loss/∂out of those rows
//   lse [rows] f64       log-sum-exp in log2 units (−∞: a row that sees nothing, or a padding row)
//   D   [rows] f64       rowsum(dO∘O)
//   dq  [rows, EPad] f32 accumulated Σ_j dS·k_j (the driver multiplies by the scale)
//   kt [E, BC] f32, vt [Ev, BC] f64   keys and values of the block, transposed; k [BC, EPad] f32 the keys
//   dk  [BC, EPad] f32   accumulated Σ_i dS·q_i (times the scale later); dv [BC, EvPad] Σ_i P·dO_i
//   P, dS [BR, BC] f32   the tile's probabilities and dS = P∘(dP − D), zero wherever a key is blocked

/** Keys per block: the column count of the P and dS tiles and the row stride of kt and vt panels. */
const BC = 64;
/** Most query rows per tile. */
const BR = 64;
const ROW_BYTES: usize = BC * 4; // stride of the P and dS tiles
const NEG_INF: f32 = -Infinity;
const LOG2E64: f64 = 1.4426950408889634;
/** Lane numbers 0, 1, 2, 3 (a column's offset in its group of 4). */
const LANES = i32x4(0, 1, 2, 3);

@inline
function fma4(a: v128, b: v128, c: v128): v128 {
  if (ASC_FEATURE_RELAXED_SIMD) return f32x4.relaxed_madd(a, b, c);
  return f32x4.add(f32x4.mul(a, b), c);
}

@inline
function fma2(a: v128, b: v128, c: v128): v128 {
  if (ASC_FEATURE_RELAXED_SIMD) return f64x2.relaxed_madd(a, b, c);
  return f64x2.add(f64x2.mul(a, b), c);
}

/** Two f64x2 → one f32x4 (lo's lanes first). */
@inline
function narrow(lo: v128, hi: v128): v128 {
  return i32x4.shuffle(f32x4.demote_f64x2_zero(lo), f32x4.demote_f64x2_zero(hi), 0, 1, 4, 5);
}

/** a + c of 4 f32 lanes a, computed in f64 (c an f64x2 splat), rounded once to f32. */
@inline
function plus64(a: v128, c: v128): v128 {
  const lo = f64x2.promote_low_f32x4(a);
  const hi = f64x2.promote_low_f32x4(i32x4.shuffle(a, a, 2, 3, 2, 3));
  return narrow(f64x2.add(lo, c), f64x2.add(hi, c));
}

/**
 * 2^x for 4 lanes with x ≤ 0 (the forward's approach): x clamped at −126, n = round(x) by the 1.5·2^23
 * trick, 2^(x − n) by a degree-5 polynomial in Estrin form (≤ 3e-7 relative), 2^n put in the exponent.
 * The caller zeroes what it must (blocked keys, and P below 2^−100, which would come out as 2^−126).
 */
@inline
function pow2(x: v128): v128 {
  x = f32x4.pmax(x, f32x4.splat(-126.0));
  const magic = f32x4.splat(12582912.0);
  const shifted = f32x4.add(x, magic);
  const r = f32x4.sub(x, f32x4.sub(shifted, magic));
  const r2 = f32x4.mul(r, r);
  const a = fma4(f32x4.splat(6.9314694e-1), r, f32x4.splat(1.0000001));
  const b = fma4(f32x4.splat(5.5507131e-2), r, f32x4.splat(2.4022120e-1));
  const c = fma4(f32x4.splat(1.3276471e-3), r, f32x4.splat(9.6755410e-3));
  const p = fma4(f32x4.mul(r2, r2), c, fma4(r2, b, a));
  return f32x4.mul(p, i32x4.shl(i32x4.add(shifted, i32x4.splat(127 - 0x400000)), 23));
}

/** Keys per block (BC): the driver's block size, and the row stride of its transposed panels. */
export function bwdBlockKeys(): i32 {
  return BC;
}

/** Most query rows a `bwdTile` call takes (BR). */
export function bwdTileRows(): i32 {
  return BR;
}

/** Zeros columns [c0, c1) of the 4 tile rows from `row` in both P and dS. */
@inline
function zeroCols(P: usize, dS: usize, row: i32, c0: i32, c1: i32): void {
  if (c1 <= c0) return;
  const n = <usize>(c1 - c0) << 2;
  for (let rr = 0; rr < 4; rr++) {
    const at = <usize>(row + rr) * ROW_BYTES + (<usize>c0 << 2);
    memory.fill(P + at, 0, n);
    memory.fill(dS + at, 0, n);
  }
}

/**
 * One query tile (rows i0 … i0 + rows − 1 of one head; rows a multiple of 4, at most BR) against one key
 * block (keys j0 … j0 + cols − 1, cols ≤ BC): P, dS, and dq += dS·K, dk += dSᵀ·Q, dv += Pᵀ·dO.
 * qs: q's rows times scale·log2 e, rounded to f32 (the forward's scaled q: scores in log2 units, as lse,
 * and no overflow from a tiny scale). band = 0 when the caller's tile class is 'full'
 * (every row sees every key by the band); else each group of 4 rows clips its columns to the band and
 * each key is tested. mask/bias: pointers to element (i0, j0) of the (b, h) slice with element strides
 * (sl, ss), 0 when absent; a mask element 0 blocks, a bias is added to the scaled score (−∞ blocks).
 * The driver has checked every input finite and every sum bounded, and P is at most 1 (x ≤ 0 below).
 */
export function bwdTile(
  q: usize, qs: usize, dO64: usize, dO: usize, lse: usize, D: usize, dq: usize,
  kt: usize, vt: usize, k: usize, dk: usize, dv: usize, P: usize, dS: usize,
  rows: i32, cols: i32, E: i32, EPad: i32, Ev: i32, EvPad: i32,
  i0: i32, j0: i32, shift: i32, left: i32, right: i32, band: i32,
  mask: usize, maskSl: i32, maskSs: i32, bias: usize, biasSl: i32, biasSs: i32,
): void {
  if (rows > BR || cols > BC || (rows & 3) != 0) unreachable();
  const colsPad = (cols + 7) & ~7;
  const qRow = <usize>EPad << 2;
  const oRow = <usize>EvPad << 2;
  const oRow64 = <usize>Ev << 3;
  const panel: usize = BC * 4; // row stride of the kt panels (f32)
  const panel64: usize = BC * 8; // row stride of the vt panels (f64)
  const zero = f32x4.splat(0);
  const floor = f32x4.splat(-100.0); // log2 of the smallest P kept

  for (let r0 = 0; r0 < rows; r0 += 4) {
    const lp = lse + (<usize>r0 << 3);
    const l0 = load<f64>(lp), l1 = load<f64>(lp, 8), l2 = load<f64>(lp, 16), l3 = load<f64>(lp, 24);
    const dead0 = l0 == -Infinity, dead1 = l1 == -Infinity, dead2 = l2 == -Infinity, dead3 = l3 == -Infinity;
    if (dead0 && dead1 && dead2 && dead3) {
      zeroCols(P, dS, r0, 0, colsPad);
      continue;
    }
    // The columns any of these 4 rows may see, [cStart, cEnd), 8-aligned.
    let cStart = 0;
    let cEnd = colsPad;
    if (band != 0) {
      const lo = i0 + r0 + shift - left - j0;
      const hi = i0 + r0 + 3 + shift + right - j0;
      if (hi < 0 || lo >= cols) {
        zeroCols(P, dS, r0, 0, colsPad);
        continue;
      }
      cStart = max(lo, 0) & ~7;
      cEnd = min(colsPad, (min(hi, cols - 1) + 8) & ~7);
    }
    zeroCols(P, dS, r0, 0, cStart);
    zeroCols(P, dS, r0, cEnd, colsPad);
    // Every key of the range visible to every row, with no bias: no per-key pass.
    const plain = band == 0 && mask == 0 && bias == 0 && cEnd <= cols && !(dead0 || dead1 || dead2 || dead3);
    const pRow = P + <usize>r0 * ROW_BYTES;
    const sRow = dS + <usize>r0 * ROW_BYTES;
    // With a bias the lse is subtracted in the per-key pass, after the bias is added (in f64): x = s − lse
    // rounded to f32 first would round at the bias's magnitude (|x| ≈ 1443 for a bias of 1000), twice.
    const later = bias != 0;
    const n0 = f64x2.splat(later ? 0 : -l0), n1 = f64x2.splat(later ? 0 : -l1);
    const n2 = f64x2.splat(later ? 0 : -l2), n3 = f64x2.splat(later ? 0 : -l3);

    // x = s − lse (log2 units) of 4 rows × 8 keys: s = qs·k summed in f32, s − lse in f64, stored as f32
    // (with a bias: s alone, exactly).
    const q0 = qs + <usize>r0 * qRow;
    for (let c = cStart; c < cEnd; c += 8) {
      let a00 = zero, a01 = zero, a10 = zero, a11 = zero;
      let a20 = zero, a21 = zero, a30 = zero, a31 = zero;
      let kp = kt + (<usize>c << 2);
      let qp = q0;
      const qEnd = q0 + (<usize>E << 2);
      if (E > 0) do { // a do-while on a pointer, as attend's and the GEMM's loops
        const k0 = v128.load(kp);
        const k1 = v128.load(kp, 16);
        const x0 = v128.load32_splat(qp);
        const x1 = v128.load32_splat(qp + qRow);
        const x2 = v128.load32_splat(qp + 2 * qRow);
        const x3 = v128.load32_splat(qp + 3 * qRow);
        a00 = fma4(x0, k0, a00); a01 = fma4(x0, k1, a01);
        a10 = fma4(x1, k0, a10); a11 = fma4(x1, k1, a11);
        a20 = fma4(x2, k0, a20); a21 = fma4(x2, k1, a21);
        a30 = fma4(x3, k0, a30); a31 = fma4(x3, k1, a31);
        kp += panel;
        qp += 4;
      } while (qp < qEnd);
      const t = pRow + (<usize>c << 2);
      v128.store(t, plus64(a00, n0)); v128.store(t, plus64(a01, n0), 16);
      v128.store(t, plus64(a10, n1), ROW_BYTES); v128.store(t, plus64(a11, n1), ROW_BYTES + 16);
      v128.store(t, plus64(a20, n2), 2 * ROW_BYTES); v128.store(t, plus64(a21, n2), 2 * ROW_BYTES + 16);
      v128.store(t, plus64(a30, n3), 3 * ROW_BYTES); v128.store(t, plus64(a31, n3), 3 * ROW_BYTES + 16);
    }

    if (plain) {
      // P = 2^min(x, 0): P ≤ 1 always (a score a rounding above the lse is its row's max); P = 0 below
      // 2^−100 (< 1e-30: nothing the tolerance sees, and no denormal products, slow on x86, downstream).
      for (let rr = 0; rr < 4; rr++) {
        const t = pRow + <usize>rr * ROW_BYTES;
        for (let c = cStart; c < cEnd; c += 4) {
          const tp = t + (<usize>c << 2);
          const x = v128.load(tp);
          v128.store(tp, v128.and(pow2(f32x4.pmin(x, zero)), f32x4.gt(x, floor)));
        }
      }
    } else if (mask == 0 && bias == 0) {
      // Band (and padding keys, rows that see nothing) only: each row sees tile columns [lo, hi], so P is
      // the pass above with the columns outside zeroed by a lane mask: what the scalar pass below gives
      // (a blocked x = −∞ makes P exactly 0 there), without a per-key pass (half the diagonal tiles' time).
      for (let rr = 0; rr < 4; rr++) {
        const t = pRow + <usize>rr * ROW_BYTES;
        const dead = rr == 0 ? dead0 : rr == 1 ? dead1 : rr == 2 ? dead2 : dead3;
        const pos = <i64>(i0 + r0 + rr + shift);
        let lo: i64 = band != 0 ? pos - <i64>left - <i64>j0 : 0;
        let hi: i64 = band != 0 ? pos + <i64>right - <i64>j0 : <i64>cols;
        if (hi > <i64>(cols - 1)) hi = <i64>(cols - 1);
        if (dead) lo = <i64>cEnd;
        if (lo < -1) lo = -1;
        if (hi < -1) hi = -1;
        if (lo > <i64>cEnd) lo = <i64>cEnd;
        const vlo = i32x4.splat(<i32>lo);
        const vhi = i32x4.splat(<i32>hi);
        for (let c = cStart; c < cEnd; c += 4) {
          const idx = i32x4.add(i32x4.splat(c), LANES);
          const seen = v128.and(i32x4.ge_s(idx, vlo), i32x4.le_s(idx, vhi));
          const tp = t + (<usize>c << 2);
          const x = v128.load(tp);
          v128.store(tp, v128.and(v128.and(pow2(f32x4.pmin(x, zero)), f32x4.gt(x, floor)), seen));
        }
      }
    } else {
      // Scalar pass: band, mask, bias and padding keys → −∞ (blocked), else x plus the bias.
      const last = min(cols, cEnd);
      for (let rr = 0; rr < 4; rr++) {
        const row = r0 + rr;
        const t = pRow + <usize>rr * ROW_BYTES;
        const dead = rr == 0 ? dead0 : rr == 1 ? dead1 : rr == 2 ? dead2 : dead3;
        if (dead) {
          for (let c = cStart; c < cEnd; c++) store<f32>(t + (<usize>c << 2), NEG_INF);
          continue;
        }
        const pos = i0 + row + shift;
        const l = rr == 0 ? l0 : rr == 1 ? l1 : rr == 2 ? l2 : l3; // this row's lse, when `later`
        for (let c = cStart; c < last; c++) {
          const j = j0 + c;
          const tp = t + (<usize>c << 2);
          if (band != 0 && (j < pos - left || j > pos + right)) {
            store<f32>(tp, NEG_INF);
            continue;
          }
          if (mask != 0 && load<f32>(mask + (<usize>(row * maskSl + c * maskSs) << 2)) == 0) {
            store<f32>(tp, NEG_INF);
            continue;
          }
          // x = s + log2(e)·bias − lse in f64, rounded once. A −∞ bias blocks; a finite one that takes x to
          // −∞ leaves P = 0, as exp does in float64.
          if (bias != 0) {
            const b = <f64>load<f32>(bias + (<usize>(row * biasSl + c * biasSs) << 2));
            store<f32>(tp, <f32>(<f64>load<f32>(tp) + LOG2E64 * b - l));
          }
        }
        for (let c = max(last, cStart); c < cEnd; c++) store<f32>(t + (<usize>c << 2), NEG_INF);
      }
      // P = 2^min(x, 0) as above, so exactly 0 where x = −∞ (a blocked key).
      for (let rr = 0; rr < 4; rr++) {
        const t = pRow + <usize>rr * ROW_BYTES;
        for (let c = cStart; c < cEnd; c += 4) {
          const tp = t + (<usize>c << 2);
          const x = v128.load(tp);
          v128.store(tp, v128.and(pow2(f32x4.pmin(x, zero)), f32x4.gt(x, floor)));
        }
      }
    }

    // dP − D = dO·Vᵀ − D accumulated in f64, then dS = P∘(dP − D) in f32, 4 rows × 4 keys at a time.
    const dp = D + (<usize>r0 << 3);
    const d0 = f64x2.splat(-load<f64>(dp)), d1 = f64x2.splat(-load<f64>(dp, 8));
    const d2 = f64x2.splat(-load<f64>(dp, 16)), d3 = f64x2.splat(-load<f64>(dp, 24));
    const o0 = dO64 + <usize>r0 * oRow64;
    for (let c = cStart; c < cEnd; c += 4) {
      let a00 = d0, a01 = d0, a10 = d1, a11 = d1;
      let a20 = d2, a21 = d2, a30 = d3, a31 = d3;
      let vp = vt + (<usize>c << 3);
      let gp = o0;
      const gEnd = o0 + (<usize>Ev << 3);
      if (Ev > 0) do {
        const v0 = v128.load(vp);
        const v1 = v128.load(vp, 16);
        const x0 = v128.load64_splat(gp);
        const x1 = v128.load64_splat(gp + oRow64);
        const x2 = v128.load64_splat(gp + 2 * oRow64);
        const x3 = v128.load64_splat(gp + 3 * oRow64);
        a00 = fma2(x0, v0, a00); a01 = fma2(x0, v1, a01);
        a10 = fma2(x1, v0, a10); a11 = fma2(x1, v1, a11);
        a20 = fma2(x2, v0, a20); a21 = fma2(x2, v1, a21);
        a30 = fma2(x3, v0, a30); a31 = fma2(x3, v1, a31);
        vp += panel64;
        gp += 8;
      } while (gp < gEnd);
      const t = pRow + (<usize>c << 2);
      const u = sRow + (<usize>c << 2);
      v128.store(u, f32x4.mul(v128.load(t), narrow(a00, a01)));
      v128.store(u, f32x4.mul(v128.load(t, ROW_BYTES), narrow(a10, a11)), ROW_BYTES);
      v128.store(u, f32x4.mul(v128.load(t, 2 * ROW_BYTES), narrow(a20, a21)), 2 * ROW_BYTES);
      v128.store(u, f32x4.mul(v128.load(t, 3 * ROW_BYTES), narrow(a30, a31)), 3 * ROW_BYTES);
    }

    // dq[4 rows, :] += dS[4 rows, keys] · k[keys, :], 8 columns of E at a time.
    const jEnd = min(cEnd, cols);
    for (let e = 0; e < EPad; e += 8) {
      const ap = dq + <usize>r0 * qRow + (<usize>e << 2);
      let a00 = v128.load(ap), a01 = v128.load(ap, 16);
      let a10 = v128.load(ap + qRow), a11 = v128.load(ap + qRow, 16);
      let a20 = v128.load(ap + 2 * qRow), a21 = v128.load(ap + 2 * qRow, 16);
      let a30 = v128.load(ap + 3 * qRow), a31 = v128.load(ap + 3 * qRow, 16);
      let kp = k + <usize>cStart * qRow + (<usize>e << 2);
      let sp = sRow + (<usize>cStart << 2);
      const sEnd = sRow + (<usize>jEnd << 2);
      if (sp < sEnd) do {
        const k0 = v128.load(kp);
        const k1 = v128.load(kp, 16);
        const x0 = v128.load32_splat(sp);
        const x1 = v128.load32_splat(sp, ROW_BYTES);
        const x2 = v128.load32_splat(sp, 2 * ROW_BYTES);
        const x3 = v128.load32_splat(sp, 3 * ROW_BYTES);
        a00 = fma4(x0, k0, a00); a01 = fma4(x0, k1, a01);
        a10 = fma4(x1, k0, a10); a11 = fma4(x1, k1, a11);
        a20 = fma4(x2, k0, a20); a21 = fma4(x2, k1, a21);
        a30 = fma4(x3, k0, a30); a31 = fma4(x3, k1, a31);
        kp += qRow;
        sp += 4;
      } while (sp < sEnd);
      v128.store(ap, a00); v128.store(ap, a01, 16);
      v128.store(ap + qRow, a10); v128.store(ap + qRow, a11, 16);
      v128.store(ap + 2 * qRow, a20); v128.store(ap + 2 * qRow, a21, 16);
      v128.store(ap + 3 * qRow, a30); v128.store(ap + 3 * qRow, a31, 16);
    }
  }

  // dv[4 keys, :] += P[rows, 4 keys]ᵀ · dO[rows, :] and dk likewise from dS and q, over the rows that may
  // see any of the 4 keys (P and dS are 0 elsewhere, so the band only narrows the loop).
  for (let c = 0; c < cols; c += 4) {
    let rLo = 0;
    let rHi = rows;
    if (band != 0) {
      rLo = max(0, j0 + c - right - shift - i0);
      rHi = min(rows, j0 + c + 3 + left - shift - i0 + 1);
      if (rHi <= rLo) continue;
    }
    accumulateT(dv + <usize>c * oRow, oRow, dO, P + (<usize>c << 2), rLo, rHi, EvPad);
    accumulateT(dk + <usize>c * qRow, qRow, q, dS + (<usize>c << 2), rLo, rHi, EPad);
  }
}

/**
 * out[4 keys, 0 … n) += Σ_{i ∈ [rLo, rHi)} w[i, 4 keys] · x[i, :], for rows x with stride `ld` bytes (also
 * out's stride), w a tile column group (stride ROW_BYTES), 8 columns at a time (n a multiple of 8).
 */
@inline
function accumulateT(out: usize, ld: usize, x: usize, w: usize, rLo: i32, rHi: i32, n: i32): void {
  for (let e = 0; e < n; e += 8) {
    const ap = out + (<usize>e << 2);
    let a00 = v128.load(ap), a01 = v128.load(ap, 16);
    let a10 = v128.load(ap + ld), a11 = v128.load(ap + ld, 16);
    let a20 = v128.load(ap + 2 * ld), a21 = v128.load(ap + 2 * ld, 16);
    let a30 = v128.load(ap + 3 * ld), a31 = v128.load(ap + 3 * ld, 16);
    let xp = x + <usize>rLo * ld + (<usize>e << 2);
    let wp = w + <usize>rLo * ROW_BYTES;
    const wEnd = w + <usize>rHi * ROW_BYTES;
    if (wp < wEnd) do {
      const x0 = v128.load(xp);
      const x1 = v128.load(xp, 16);
      const w0 = v128.load32_splat(wp);
      const w1 = v128.load32_splat(wp, 4);
      const w2 = v128.load32_splat(wp, 8);
      const w3 = v128.load32_splat(wp, 12);
      a00 = fma4(w0, x0, a00); a01 = fma4(w0, x1, a01);
      a10 = fma4(w1, x0, a10); a11 = fma4(w1, x1, a11);
      a20 = fma4(w2, x0, a20); a21 = fma4(w2, x1, a21);
      a30 = fma4(w3, x0, a30); a31 = fma4(w3, x1, a31);
      xp += ld;
      wp += ROW_BYTES;
    } while (wp < wEnd);
    v128.store(ap, a00); v128.store(ap, a01, 16);
    v128.store(ap + ld, a10); v128.store(ap + ld, a11, 16);
    v128.store(ap + 2 * ld, a20); v128.store(ap + 2 * ld, a21, 16);
    v128.store(ap + 3 * ld, a30); v128.store(ap + 3 * ld, a31, 16);
  }
}

/** Largest |x| of the n floats at p; NaN if any is NaN (±∞ gives ∞). */
export function bwdMaxAbs(p: usize, n: i32): f32 {
  let m = f32x4.splat(0);
  let nan = f32x4.splat(0);
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const x = v128.load(p + (<usize>i << 2));
    m = f32x4.pmax(m, f32x4.abs(x));
    nan = v128.or(nan, f32x4.ne(x, x));
  }
  let r = max(max(f32x4.extract_lane(m, 0), f32x4.extract_lane(m, 1)), max(f32x4.extract_lane(m, 2), f32x4.extract_lane(m, 3)));
  for (; i < n; i++) {
    const x = load<f32>(p + (<usize>i << 2));
    if (x != x) return NaN;
    r = max(r, abs(x));
  }
  return v128.any_true(nan) ? NaN : r;
}

/** 1 if any of the n floats at p is NaN or above `limit` (+∞ included; −∞ and large negatives pass), else 0. */
export function bwdAbove(p: usize, n: i32, limit: f32): i32 {
  const lim = f32x4.splat(limit);
  let bad = f32x4.splat(0);
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const x = v128.load(p + (<usize>i << 2));
    bad = v128.or(bad, v128.not(f32x4.le(x, lim)));
  }
  for (; i < n; i++) if (!(load<f32>(p + (<usize>i << 2)) <= limit)) return 1;
  return v128.any_true(bad) ? 1 : 0;
}

/**
 * The largest Euclidean norm over `rows` rows of n floats (n a multiple of 4) at p, in f64 (the squares
 * summed in f64); NaN if any x is NaN, ∞ if any is ±∞. With Cauchy–Schwarz it bounds a row's f32 dot
 * products with another row: |error| ≤ n·2⁻²⁴·‖q‖·‖k‖.
 */
export function bwdMaxRowNorm(p: usize, rows: i32, n: i32): f64 {
  let worst: f64 = 0;
  for (let r = 0; r < rows; r++) {
    const row = p + (<usize>(r * n) << 2);
    let s = f64x2.splat(0);
    for (let i = 0; i < n; i += 2) {
      const x = f64x2.promote_low_f32x4(v128.load64_zero(row + (<usize>i << 2)));
      s = f64x2.add(s, f64x2.mul(x, x));
    }
    const sum = f64x2.extract_lane(s, 0) + f64x2.extract_lane(s, 1);
    if (sum != sum) return NaN;
    worst = max(worst, sum);
  }
  return Math.sqrt(worst);
}

/** x *= s for the n floats at p (n a multiple of 4). */
export function bwdScale(p: usize, n: i32, s: f32): void {
  const vs = f32x4.splat(s);
  for (let i = 0; i < n; i += 4) {
    const a = p + (<usize>i << 2);
    v128.store(a, f32x4.mul(v128.load(a), vs));
  }
}

/**
 * Rows [rows, n] of f32 at src → panels of BC rows transposed, stored as T (f32, or widened to f64):
 * panel P = [n, BC] holding rows P·BC … P·BC + BC − 1 (rows past `rows` are 0).
 */
@inline
function transposePanels<T>(src: usize, rows: i32, n: i32, dst: usize): void {
  const size = <usize>sizeof<T>();
  const panels = (rows + BC - 1) / BC;
  for (let p = 0; p < panels; p++) {
    const base = dst + <usize>p * <usize>n * BC * size;
    const r0 = p * BC;
    const m = min(BC, rows - r0);
    for (let e = 0; e < n; e++) {
      const row = base + <usize>e * BC * size;
      let from = src + (<usize>(r0 * n + e) << 2);
      for (let r = 0; r < m; r++) {
        store<T>(row + <usize>r * size, <T>load<f32>(from));
        from += <usize>n << 2;
      }
      memory.fill(row + <usize>m * size, 0, <usize>(BC - m) * size);
    }
  }
}

/** The kt layout of `bwdTile`: transposePanels in f32. */
export function bwdTranspose(src: usize, rows: i32, n: i32, dst: usize): void {
  transposePanels<f32>(src, rows, n, dst);
}

/** The vt layout of `bwdTile`: transposePanels widened to f64. */
export function bwdTransposeWiden(src: usize, rows: i32, n: i32, dst: usize): void {
  transposePanels<f64>(src, rows, n, dst);
}

/**
 * Rows [rows, n] of f32 at src → the same rows widened to f64 at dst64 ([rows, n]) and copied to dst32
 * with rows padded to nPad (the extra entries 0). No buffer overlaps another.
 */
export function bwdWiden(src: usize, rows: i32, n: i32, dst64: usize, dst32: usize, nPad: i32): void {
  for (let r = 0; r < rows; r++) {
    const from = src + (<usize>(r * n) << 2);
    const to64 = dst64 + (<usize>(r * n) << 3);
    const to32 = dst32 + (<usize>(r * nPad) << 2);
    for (let e = 0; e < n; e++) {
      const x = load<f32>(from + (<usize>e << 2));
      store<f64>(to64 + (<usize>e << 3), <f64>x);
      store<f32>(to32 + (<usize>e << 2), x);
    }
    memory.fill(to32 + (<usize>n << 2), 0, <usize>(nPad - n) << 2);
  }
}

/** Rows [rows, n] at src → [rows, nPad] at dst (nPad ≥ n; the extra entries 0). src and dst do not overlap. */
export function bwdCopyRows(src: usize, rows: i32, n: i32, dst: usize, nPad: i32): void {
  const from = <usize>n << 2;
  const to = <usize>nPad << 2;
  for (let r = 0; r < rows; r++) {
    memory.copy(dst + <usize>r * to, src + <usize>r * from, from);
    memory.fill(dst + <usize>r * to + from, 0, to - from);
  }
}

/** n f64 values from f32 pairs (hi, lo) at src: dst[i] = hi + lo (a float64 to about 2⁻⁴⁸ relative). */
export function bwdJoin(src: usize, n: i32, dst: usize): void {
  for (let i = 0; i < n; i++) {
    const at = src + (<usize>i << 3);
    store<f64>(dst + (<usize>i << 3), <f64>load<f32>(at) + <f64>load<f32>(at, 4));
  }
}

/** Largest |x| of the n f64 at p; NaN if any is NaN. */
export function bwdMaxAbs64(p: usize, n: i32): f64 {
  let r: f64 = 0;
  for (let i = 0; i < n; i++) {
    const x = load<f64>(p + (<usize>i << 3));
    if (x != x) return NaN;
    r = max(r, abs(x));
  }
  return r;
}
