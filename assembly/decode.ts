// The decode kernel: a few query rows (the query heads of one GQA group × a few new tokens) against keys
// and values read in their stored layout, K [n, E] and V [n, Ev] row by row (a KV cache's resident
// storage, or a plain copy): no transpose, no padding of K or V. JS (src/kernels/wasm.ts, runDecode)
// calls `decodeAttend` once per run of consecutively stored keys; the online-softmax state (m, l, acc)
// stays in memory between calls and `finish` (attention.ts) normalises it.
// One decision to know: the score tile is key-major, [keys, 4 rows], so one v128 holds the 4 rows' scores
// of a key: the softmax's max, exp and sum run across rows in one vector, and P·V reads one vector per key.
//
// Layouts (f32 unless said; pointers are bytes; rows are padded by the caller to a multiple of 4):
//   q       [rowsPad, E]       query rows times scale·log2 e (scores in log2 units); pad rows are 0
//   lo, hi  i32 [rowsPad]      row r sees key j iff lo[r] ≤ j ≤ hi[r] (pad rows copy a real row's)
//   k       key c at k + 4·c·ldk, E floats;  v: value c at v + 4·c·ldv, Ev floats
//   m, l    [rowsPad]          running max (log2 units) and sum of 2^(s − m)
//   acc     [rowsPad, EvPad]   running Σ p·v, unnormalised (EvPad ≥ Ev, a multiple of 8)
//   tile    [DECODE_BLOCK, 4]  scratch: one block's scores, then probabilities

import { exp2x4, madd } from './simd';

const NEG_INF: f32 = -Infinity;
/** Keys per block: the tile is 4 KB, so a block's scores stay in L1 between the passes. */
const DECODE_BLOCK: i32 = 256;

/** Bytes the caller reserves for `decodeAttend`'s tile. */
export function decodeTileBytes(): i32 {
  return DECODE_BLOCK * 16;
}

/** [Σ a, Σ b, Σ c, Σ d]: the lanes of four vectors summed, each into one lane. */
@inline
function hsum4(a: v128, b: v128, c: v128, d: v128): v128 {
  const ab = f32x4.add(i32x4.shuffle(a, b, 0, 4, 1, 5), i32x4.shuffle(a, b, 2, 6, 3, 7));
  const cd = f32x4.add(i32x4.shuffle(c, d, 0, 4, 1, 5), i32x4.shuffle(c, d, 2, 6, 3, 7));
  return f32x4.add(i32x4.shuffle(ab, cd, 0, 1, 4, 5), i32x4.shuffle(ab, cd, 2, 3, 6, 7));
}

/** The 4 rows' dot products with key kp over dimensions E4 … E − 1 (the part E/4 vectors do not cover). */
@inline
function tailScores(q0: usize, rowBytes: usize, kp: usize, E4: i32, E: i32): v128 {
  let t0: f32 = 0, t1: f32 = 0, t2: f32 = 0, t3: f32 = 0;
  for (let e = E4; e < E; e++) {
    const o = <usize>e << 2;
    const kv = load<f32>(kp + o);
    t0 += load<f32>(q0 + o) * kv;
    t1 += load<f32>(q0 + rowBytes + o) * kv;
    t2 += load<f32>(q0 + 2 * rowBytes + o) * kv;
    t3 += load<f32>(q0 + 3 * rowBytes + o) * kv;
  }
  let t = f32x4.splat(t0);
  t = f32x4.replace_lane(t, 1, t1);
  t = f32x4.replace_lane(t, 2, t2);
  return f32x4.replace_lane(t, 3, t3);
}

/**
 * Keys j0 … j0 + n − 1 (stored at k, v) against the rowsPad query rows, in groups of 4 rows: per block of
 * keys, (1) scores s = q·k of the 4 rows, −∞ outside each row's [lo, hi]; (2) the online softmax: new max,
 * l and acc rescaled, p = 2^(s − m) (exactly 0 where blocked); (3) acc += p·v. Keys no row of the group
 * sees are skipped. A key some rows see and others do not is accumulated with the product kept only where
 * p ≠ 0, so a NaN or ±∞ in a blocked key's value never reaches a row (0·NaN is NaN).
 */
export function decodeAttend(
  q: usize, rowsPad: i32, E: i32, k: usize, ldk: i32, v: usize, ldv: i32, Ev: i32, EvPad: i32,
  n: i32, j0: i32, lo: usize, hi: usize, m: usize, l: usize, acc: usize, tile: usize,
): void {
  const ninf = f32x4.splat(NEG_INF);
  const zero = f32x4.splat(0);
  const E4 = E & ~3;
  const kStep = <usize>ldk << 2;
  const rowBytes = <usize>E << 2;
  for (let r0 = 0; r0 < rowsPad; r0 += 4) {
    const loV = v128.load(lo + (<usize>r0 << 2));
    const hiV = v128.load(hi + (<usize>r0 << 2));
    // The keys any row of the group sees ([uLo, uHi]) and those every row sees ([cLo, cHi]), relative to j0.
    const l0 = i32x4.extract_lane(loV, 0), l1 = i32x4.extract_lane(loV, 1);
    const l2 = i32x4.extract_lane(loV, 2), l3 = i32x4.extract_lane(loV, 3);
    const h0 = i32x4.extract_lane(hiV, 0), h1 = i32x4.extract_lane(hiV, 1);
    const h2 = i32x4.extract_lane(hiV, 2), h3 = i32x4.extract_lane(hiV, 3);
    const uLo = max(min(min(l0, l1), min(l2, l3)) - j0, 0);
    const uHi = min(max(max(h0, h1), max(h2, h3)) - j0, n - 1);
    if (uHi < uLo) continue;
    const cLo = max(max(l0, l1), max(l2, l3)) - j0;
    const cHi = min(min(h0, h1), min(h2, h3)) - j0;
    const q0 = q + <usize>r0 * rowBytes;
    const q1 = q0 + rowBytes;
    const q2 = q1 + rowBytes;
    const q3 = q2 + rowBytes;
    const mp = m + (<usize>r0 << 2);
    const lp = l + (<usize>r0 << 2);
    const a0p = acc + (<usize>(r0 * EvPad) << 2);
    for (let c0 = uLo; c0 <= uHi; c0 += DECODE_BLOCK) {
      const c1 = min(c0 + DECODE_BLOCK, uHi + 1);
      // (1) Scores, two keys at a time (8 independent accumulator chains: one key's 4 would leave the loop
      // waiting on multiply-add latency): E/4 vector steps shared by the 4 rows, then E mod 4 scalar ones.
      let bmax = ninf;
      let c = c0;
      for (; c + 2 <= c1; c += 2) {
        const kp = k + <usize>c * kStep;
        const kq = kp + kStep;
        let a0 = zero, a1 = zero, a2 = zero, a3 = zero;
        let b0 = zero, b1 = zero, b2 = zero, b3 = zero;
        for (let e = 0; e < E4; e += 4) {
          const o = <usize>e << 2;
          const k0 = v128.load(kp + o);
          const k1 = v128.load(kq + o);
          const x0 = v128.load(q0 + o);
          const x1 = v128.load(q1 + o);
          const x2 = v128.load(q2 + o);
          const x3 = v128.load(q3 + o);
          a0 = madd(x0, k0, a0); b0 = madd(x0, k1, b0);
          a1 = madd(x1, k0, a1); b1 = madd(x1, k1, b1);
          a2 = madd(x2, k0, a2); b2 = madd(x2, k1, b2);
          a3 = madd(x3, k0, a3); b3 = madd(x3, k1, b3);
        }
        let s = hsum4(a0, a1, a2, a3);
        let t = hsum4(b0, b1, b2, b3);
        if (E4 < E) {
          s = f32x4.add(s, tailScores(q0, rowBytes, kp, E4, E));
          t = f32x4.add(t, tailScores(q0, rowBytes, kq, E4, E));
        }
        const jv = i32x4.splat(j0 + c);
        const jw = i32x4.add(jv, i32x4.splat(1));
        s = v128.bitselect(s, ninf, v128.and(i32x4.ge_s(jv, loV), i32x4.le_s(jv, hiV)));
        t = v128.bitselect(t, ninf, v128.and(i32x4.ge_s(jw, loV), i32x4.le_s(jw, hiV)));
        const tp = tile + (<usize>(c - c0) << 4);
        v128.store(tp, s);
        v128.store(tp, t, 16);
        bmax = f32x4.pmax(bmax, f32x4.pmax(s, t)); // pmax keeps bmax where a score is NaN: the driver catches such rows
      }
      if (c < c1) {
        const kp = k + <usize>c * kStep;
        let a0 = zero, a1 = zero, a2 = zero, a3 = zero;
        for (let e = 0; e < E4; e += 4) {
          const o = <usize>e << 2;
          const kv = v128.load(kp + o);
          a0 = madd(v128.load(q0 + o), kv, a0);
          a1 = madd(v128.load(q1 + o), kv, a1);
          a2 = madd(v128.load(q2 + o), kv, a2);
          a3 = madd(v128.load(q3 + o), kv, a3);
        }
        let s = hsum4(a0, a1, a2, a3);
        if (E4 < E) s = f32x4.add(s, tailScores(q0, rowBytes, kp, E4, E));
        const jv = i32x4.splat(j0 + c);
        s = v128.bitselect(s, ninf, v128.and(i32x4.ge_s(jv, loV), i32x4.le_s(jv, hiV)));
        v128.store(tile + (<usize>(c - c0) << 4), s);
        bmax = f32x4.pmax(bmax, s);
      }
      // (2) Online softmax per lane (row): a lane that has seen nothing keeps m = −∞, l = 0, acc = 0.
      const mOld = v128.load(mp);
      const mNew = f32x4.pmax(mOld, bmax);
      v128.store(mp, mNew);
      // alpha = 2^(mOld − mNew): exactly 1 where the max did not move, 0 where nothing was seen before.
      const moved = v128.bitselect(f32x4.splat(1), exp2x4(f32x4.sub(mOld, mNew)), f32x4.eq(mOld, mNew));
      const alpha = v128.and(moved, f32x4.ne(mOld, ninf));
      let vsum = zero;
      for (let c = c0; c < c1; c++) {
        const tp = tile + (<usize>(c - c0) << 4);
        const s = v128.load(tp);
        const p = v128.and(exp2x4(f32x4.sub(s, mNew)), f32x4.ne(s, ninf)); // blocked keys: exactly 0
        v128.store(tp, p);
        vsum = f32x4.add(vsum, p);
      }
      v128.store(lp, f32x4.add(f32x4.mul(v128.load(lp), alpha), vsum));
      if (!i32x4.all_true(f32x4.eq(alpha, f32x4.splat(1)))) {
        const al0 = i32x4.shuffle(alpha, alpha, 0, 0, 0, 0);
        const al1 = i32x4.shuffle(alpha, alpha, 1, 1, 1, 1);
        const al2 = i32x4.shuffle(alpha, alpha, 2, 2, 2, 2);
        const al3 = i32x4.shuffle(alpha, alpha, 3, 3, 3, 3);
        for (let rr = 0; rr < 4; rr++) {
          const va = rr == 0 ? al0 : rr == 1 ? al1 : rr == 2 ? al2 : al3;
          const ap = a0p + (<usize>(rr * EvPad) << 2);
          for (let e = 0; e < EvPad; e += 4) {
            const x = ap + (<usize>e << 2);
            v128.store(x, f32x4.mul(v128.load(x), va));
          }
        }
      }
      // (3) acc += p·v: keys every row sees as plain products, the others masked.
      const s0 = min(max(cLo, c0), c1);
      const s1 = max(min(cHi + 1, c1), s0);
      if (s0 > c0) accumulate(a0p, EvPad, Ev, v, ldv, tile, c0, c0, s0, true);
      if (s1 > s0) accumulate(a0p, EvPad, Ev, v, ldv, tile, c0, s0, s1, false);
      if (c1 > s1) accumulate(a0p, EvPad, Ev, v, ldv, tile, c0, s1, c1, true);
    }
  }
}

/**
 * acc[4 rows, 0 … Ev) += Σ_{c ∈ [from, to)} p[c, rows] · v[c, :], 8 value columns at a time (then 4, then
 * one). `masked`: each product is kept only where p ≠ 0 (keys some rows do not see).
 */
@inline(never)
function accumulate(
  acc: usize, EvPad: i32, Ev: i32, v: usize, ldv: i32, tile: usize, tile0: i32, from: i32, to: i32, masked: bool,
): void {
  const zero = f32x4.splat(0);
  const evBytes = <usize>EvPad << 2;
  const vStep = <usize>ldv << 2;
  const tStart = tile + (<usize>(from - tile0) << 4);
  const vStart = v + <usize>from * vStep;
  let e = 0;
  for (; e + 8 <= Ev; e += 8) {
    const ap = acc + (<usize>e << 2);
    let a00 = v128.load(ap), a01 = v128.load(ap, 16);
    let a10 = v128.load(ap + evBytes), a11 = v128.load(ap + evBytes, 16);
    let a20 = v128.load(ap + 2 * evBytes), a21 = v128.load(ap + 2 * evBytes, 16);
    let a30 = v128.load(ap + 3 * evBytes), a31 = v128.load(ap + 3 * evBytes, 16);
    let vp = vStart + (<usize>e << 2);
    let tp = tStart;
    if (masked) {
      for (let c = from; c < to; c++) {
        const v0 = v128.load(vp);
        const v1 = v128.load(vp, 16);
        const p0 = v128.load32_splat(tp);
        const p1 = v128.load32_splat(tp, 4);
        const p2 = v128.load32_splat(tp, 8);
        const p3 = v128.load32_splat(tp, 12);
        const k0 = f32x4.ne(p0, zero), k1 = f32x4.ne(p1, zero), k2 = f32x4.ne(p2, zero), k3 = f32x4.ne(p3, zero);
        a00 = f32x4.add(a00, v128.and(f32x4.mul(p0, v0), k0)); a01 = f32x4.add(a01, v128.and(f32x4.mul(p0, v1), k0));
        a10 = f32x4.add(a10, v128.and(f32x4.mul(p1, v0), k1)); a11 = f32x4.add(a11, v128.and(f32x4.mul(p1, v1), k1));
        a20 = f32x4.add(a20, v128.and(f32x4.mul(p2, v0), k2)); a21 = f32x4.add(a21, v128.and(f32x4.mul(p2, v1), k2));
        a30 = f32x4.add(a30, v128.and(f32x4.mul(p3, v0), k3)); a31 = f32x4.add(a31, v128.and(f32x4.mul(p3, v1), k3));
        vp += vStep;
        tp += 16;
      }
    } else {
      for (let c = from; c < to; c++) {
        const v0 = v128.load(vp);
        const v1 = v128.load(vp, 16);
        const p0 = v128.load32_splat(tp);
        const p1 = v128.load32_splat(tp, 4);
        const p2 = v128.load32_splat(tp, 8);
        const p3 = v128.load32_splat(tp, 12);
        a00 = madd(p0, v0, a00); a01 = madd(p0, v1, a01);
        a10 = madd(p1, v0, a10); a11 = madd(p1, v1, a11);
        a20 = madd(p2, v0, a20); a21 = madd(p2, v1, a21);
        a30 = madd(p3, v0, a30); a31 = madd(p3, v1, a31);
        vp += vStep;
        tp += 16;
      }
    }
    v128.store(ap, a00); v128.store(ap, a01, 16);
    v128.store(ap + evBytes, a10); v128.store(ap + evBytes, a11, 16);
    v128.store(ap + 2 * evBytes, a20); v128.store(ap + 2 * evBytes, a21, 16);
    v128.store(ap + 3 * evBytes, a30); v128.store(ap + 3 * evBytes, a31, 16);
  }
  for (; e + 4 <= Ev; e += 4) {
    const ap = acc + (<usize>e << 2);
    let a0 = v128.load(ap), a1 = v128.load(ap + evBytes);
    let a2 = v128.load(ap + 2 * evBytes), a3 = v128.load(ap + 3 * evBytes);
    let vp = vStart + (<usize>e << 2);
    let tp = tStart;
    for (let c = from; c < to; c++) {
      const x = v128.load(vp);
      const p0 = v128.load32_splat(tp);
      const p1 = v128.load32_splat(tp, 4);
      const p2 = v128.load32_splat(tp, 8);
      const p3 = v128.load32_splat(tp, 12);
      if (masked) {
        a0 = f32x4.add(a0, v128.and(f32x4.mul(p0, x), f32x4.ne(p0, zero)));
        a1 = f32x4.add(a1, v128.and(f32x4.mul(p1, x), f32x4.ne(p1, zero)));
        a2 = f32x4.add(a2, v128.and(f32x4.mul(p2, x), f32x4.ne(p2, zero)));
        a3 = f32x4.add(a3, v128.and(f32x4.mul(p3, x), f32x4.ne(p3, zero)));
      } else {
        a0 = madd(p0, x, a0);
        a1 = madd(p1, x, a1);
        a2 = madd(p2, x, a2);
        a3 = madd(p3, x, a3);
      }
      vp += vStep;
      tp += 16;
    }
    v128.store(ap, a0);
    v128.store(ap + evBytes, a1);
    v128.store(ap + 2 * evBytes, a2);
    v128.store(ap + 3 * evBytes, a3);
  }
  for (; e < Ev; e++) {
    for (let rr = 0; rr < 4; rr++) {
      const ap = acc + <usize>rr * evBytes + (<usize>e << 2);
      let a = load<f32>(ap);
      let vp = vStart + (<usize>e << 2);
      let tp = tStart + (<usize>rr << 2);
      for (let c = from; c < to; c++) {
        const p = load<f32>(tp);
        if (!masked || p != 0) a += p * load<f32>(vp);
        vp += vStep;
        tp += 16;
      }
      store<f32>(ap, a);
    }
  }
}
