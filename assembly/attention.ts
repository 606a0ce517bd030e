// WASM SIMD128 inner loops of the tiled attention kernel (AssemblyScript; built twice: plain SIMD and
// relaxed-SIMD, where `madd` becomes a fused multiply-add).
// One decision to know: JS owns the memory layout and the loops over heads and chunks (src/kernels/wasm.ts);
// this module only runs one query chunk against one key/value chunk and keeps the online-softmax state
// (FlashAttention-2, arXiv:2307.08691) in memory between calls. Everything is f32; pointers are bytes.
//
// Layouts (all f32, row-major, padded by the caller):
//   q     [rowsPad/4, E, 4, 4]  query rows of the chunk, times scale·log2 e (scores in log2 units), in
//                           groups of 4 rows with every element broadcast to 4 lanes (see packQ)
//   kt    [E, ldk]          keys of the chunk, transposed; ldk is a multiple of 8 (pad columns are 0)
//   v     [EvPad/8, ldv, 8] values of the chunk in panels of 8 value columns (see packV), so pass 4
//                           reads each panel as one contiguous stream; EvPad is a multiple of 8 (pad
//                           entries are 0)
//   tile  [4, TILE_LD]      scratch: scores, then probabilities, of 4 rows
//   m, l  [rowsPad]         running max (log2 units) and running sum of 2^(s − m) per row
//   acc   [rowsPad, EvPad]  running Σ p·v, unnormalised

import { exp2x4, madd } from './simd';

const NEG_INF: f32 = -Infinity;
const MAX_F32: f32 = 3.4028234663852886e38;

const LOG2E: f32 = 1.4426950408889634;

// The score tile's row stride is a constant so that its 4 rows are addressed by immediate offsets
// (a variable stride costs an address computation per load in the P·V loop); attend calls take at
// most TILE_COLS columns. 520 rather than 512 keeps the rows off a power-of-two stride.
const TILE_COLS = 512;
const TILE_LD = 520;
const TILE_BYTES: usize = TILE_LD * 4;

/** Bytes the caller must reserve for `attend`'s score tile. */
export function tileBytes(): i32 {
  return 4 * TILE_LD * 4;
}

/** First byte the caller may use: everything below belongs to the module's static data. */
export function heapBase(): usize {
  return (__heap_base + 15) & ~15;
}

/** Resets the state of `rowsPad` rows: m = −∞, l = 0, acc = 0. */
export function reset(m: usize, l: usize, acc: usize, rowsPad: i32, EvPad: i32): void {
  for (let r = 0; r < rowsPad; r++) {
    store<f32>(m + (<usize>r << 2), NEG_INF);
    store<f32>(l + (<usize>r << 2), 0);
  }
  memory.fill(acc, 0, <usize>(rowsPad * EvPad) << 2);
}

/**
 * One query chunk against one key/value chunk.
 * Rows are absolute query indices i0 + r; columns absolute key indices j0 + c, c < cols.
 * Key j is visible to query i iff p − left ≤ j ≤ p + right (p = i + shift) and, when given, the mask
 * is nonzero; bias is added to the scaled score. `band` = 0 when every (row, column) of this call is
 * inside the band (the caller knows), so the rule is evaluated only on boundary chunks; with band = 1
 * each group of 4 rows also clips its columns to the band, so causal and windowed calls skip the
 * masked part of a chunk instead of computing and discarding it. left/right < 2^30 (2^30 = unbounded).
 * mask/bias: pointers to element (i0, j0) of the (b, h) slice, with element strides sl (rows), ss (cols).
 * flex: 0, or a flex descriptor (see flexRow): a mask program tested per key and/or a score program
 * applied to every score of this call, after the band, mask and bias.
 */
export function attend(
  q: usize, kt: usize, v: usize, tile: usize, m: usize, l: usize, acc: usize,
  rows: i32, cols: i32, E: i32, ldk: i32, ldv: i32, EvPad: i32,
  i0: i32, j0: i32, shift: i32, left: i32, right: i32, band: i32,
  mask: usize, maskSl: i32, maskSs: i32, bias: usize, biasSl: i32, biasSs: i32, vNonFinite: i32,
  flex: usize,
): void {
  if (cols > TILE_COLS) unreachable();
  const rowsPad = (rows + 3) & ~3;
  const colsPad = (cols + 7) & ~7;
  const ldkBytes = <usize>ldk << 2;
  // "Clean" calls (no band rule, mask or bias, no padding columns) cannot produce −∞ scores in real
  // rows: pass 1 then also keeps each row's max, and pass 3 skips both its max loop and the −∞ test.
  const clean = band == 0 && mask == 0 && bias == 0 && flex == 0 && cols == colsPad;
  const ninf = f32x4.splat(NEG_INF);
  for (let r0 = 0; r0 < rowsPad; r0 += 4) {
    let rmax0 = ninf, rmax1 = ninf, rmax2 = ninf, rmax3 = ninf; // per-row max of pass 1 (clean calls)
    // The columns any of these 4 rows may see: [cStart, cEnd), 8-aligned; skip the group if none.
    let cStart = 0;
    let cEnd = colsPad;
    if (band != 0) {
      const lo = i0 + r0 + shift - left - j0; // first visible column of the group's first row
      const hi = i0 + r0 + 3 + shift + right - j0; // last visible column of its last row
      if (hi < 0 || lo >= cols) continue;
      cStart = max(lo, 0) & ~7;
      cEnd = min(colsPad, (min(hi, cols - 1) + 8) & ~7);
    }
    // Pass 1: scores of 4 rows × the group's columns, 8 columns at a time: s = (q·scale)·k.
    const q0 = q + (<usize>(r0 * E) << 4); // the group's packed [E, 4, 4] block
    for (let c = cStart; c < cEnd; c += 8) {
      let a00 = f32x4.splat(0), a01 = f32x4.splat(0);
      let a10 = f32x4.splat(0), a11 = f32x4.splat(0);
      let a20 = f32x4.splat(0), a21 = f32x4.splat(0);
      let a30 = f32x4.splat(0), a31 = f32x4.splat(0);
      let kp = kt + (<usize>c << 2);
      let qp = q0;
      // A do-while on the pointer, as the GEMM's tile: no counter, no peeled first iteration.
      const qEnd = q0 + (<usize>E << 6);
      if (E > 0) do {
        const k0 = v128.load(kp);
        const k1 = v128.load(kp, 16);
        const x0 = v128.load(qp);
        const x1 = v128.load(qp, 16);
        const x2 = v128.load(qp, 32);
        const x3 = v128.load(qp, 48);
        a00 = madd(x0, k0, a00); a01 = madd(x0, k1, a01);
        a10 = madd(x1, k0, a10); a11 = madd(x1, k1, a11);
        a20 = madd(x2, k0, a20); a21 = madd(x2, k1, a21);
        a30 = madd(x3, k0, a30); a31 = madd(x3, k1, a31);
        kp += ldkBytes;
        qp += 64;
      } while (qp < qEnd);
      // A dot product may overflow to −∞ here. Without a mask or bias the driver catches a row whose
      // scores all did (its max is −∞ though its band is not empty); with one, pass 2 clamps them.
      const t = tile + (<usize>c << 2);
      v128.store(t, a00); v128.store(t, a01, 16);
      v128.store(t, a10, TILE_BYTES); v128.store(t, a11, TILE_BYTES + 16);
      v128.store(t, a20, 2 * TILE_BYTES); v128.store(t, a21, 2 * TILE_BYTES + 16);
      v128.store(t, a30, 3 * TILE_BYTES); v128.store(t, a31, 3 * TILE_BYTES + 16);
      if (clean) {
        rmax0 = f32x4.pmax(rmax0, f32x4.pmax(a00, a01));
        rmax1 = f32x4.pmax(rmax1, f32x4.pmax(a10, a11));
        rmax2 = f32x4.pmax(rmax2, f32x4.pmax(a20, a21));
        rmax3 = f32x4.pmax(rmax3, f32x4.pmax(a30, a31));
      }
    }

    // Pass 2 (scalar, only where needed): band rule, mask, bias; padding columns are always blocked.
    for (let rr = 0; rr < 4; rr++) {
      const row = r0 + rr;
      const t = tile + <usize>rr * TILE_BYTES;
      if (row >= rows) {
        for (let c = cStart; c < cEnd; c++) store<f32>(t + (<usize>c << 2), NEG_INF);
        continue;
      }
      for (let c = max(cols, cStart); c < cEnd; c++) store<f32>(t + (<usize>c << 2), NEG_INF);
      if (band == 0 && mask == 0 && bias == 0 && flex == 0) continue;
      const pos = i0 + row + shift;
      const last = min(cols, cEnd);
      // The columns the band lets this row see (relative to j0; every column when band = 0).
      const bandLo = band != 0 ? pos - left - j0 : 0;
      const bandHi = band != 0 ? pos + right - j0 : last;
      if (mask == 0 && bias == 0 && flex != 0) {
        // Flex without a mask or bias: −∞ scores are overflows of visible keys (flexRow clamps them).
        flexRow(t, cStart, cEnd, last, i0 + row, j0, bandLo, bandHi, flex, 1);
        continue;
      }
      if (mask == 0 && bias == 0) {
        // Band only: block the few columns of the group's range that fall outside this row's band.
        const lo = min(max(pos - left - j0, cStart), last);
        const hi = max(min(pos + right - j0 + 1, last), lo);
        for (let c = cStart; c < lo; c++) store<f32>(t + (<usize>c << 2), NEG_INF);
        for (let c = hi; c < last; c++) store<f32>(t + (<usize>c << 2), NEG_INF);
        continue;
      }
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
        // A visible key's score that overflowed to −∞ becomes the lowest float: −∞ means "blocked"
        // from here on, and a row whose scores all overflowed is then flagged by finish, not zeroed.
        let s = load<f32>(tp);
        if (s == NEG_INF) s = -MAX_F32;
        if (bias != 0) {
          const bv = load<f32>(bias + (<usize>(row * biasSl + c * biasSs) << 2));
          s += LOG2E * bv;
          // A finite bias that overflows float32 in log2 units stays finite (clamped; finish then flags
          // the row for a float64 recompute); only a −∞ bias blocks, as in the reference.
          if (bv != NEG_INF && s == NEG_INF) s = -MAX_F32;
        }
        store<f32>(tp, s);
      }
      // With a mask or bias too, −∞ now means blocked (overflows were clamped above).
      if (flex != 0) flexRow(t, cStart, cEnd, last, i0 + row, j0, bandLo, bandHi, flex, 0);
    }

    // Pass 3: online softmax per row: new max, rescale l and acc, p = exp(s − m) (0 where blocked).
    for (let rr = 0; rr < 4; rr++) {
      const row = r0 + rr;
      const t = tile + <usize>rr * TILE_BYTES;
      const mp = m + (<usize>row << 2);
      // pmax (one instruction) skips NaN scores. A NaN among finite scores still reaches the output
      // through exp; a row of only NaN (and −∞) scores is caught below, where its max is −∞.
      let vmax = ninf;
      if (clean && row < rows) {
        vmax = rr == 0 ? rmax0 : rr == 1 ? rmax1 : rr == 2 ? rmax2 : rmax3;
      } else {
        for (let c = cStart; c < cEnd; c += 4) vmax = f32x4.pmax(vmax, v128.load(t + (<usize>c << 2)));
      }
      const mOld = load<f32>(mp);
      let mNew = max(
        max(max(f32x4.extract_lane(vmax, 0), f32x4.extract_lane(vmax, 1)), max(f32x4.extract_lane(vmax, 2), f32x4.extract_lane(vmax, 3))),
        mOld,
      );
      if (mNew == NEG_INF) {
        let vnan = f32x4.splat(0);
        for (let c = cStart; c < cEnd; c += 4) {
          const x = v128.load(t + (<usize>c << 2));
          vnan = v128.or(vnan, f32x4.ne(x, x));
        }
        if (v128.any_true(vnan)) mNew = NaN; // NaN scores: the row must come out NaN, not blocked
      }
      if (mNew == NEG_INF) {
        // Nothing visible to this row yet: its probabilities for this chunk are all 0.
        memory.fill(t + (<usize>cStart << 2), 0, <usize>(cEnd - cStart) << 2);
        continue;
      }
      const vm = f32x4.splat(mNew);
      let vsum = f32x4.splat(0);
      if (clean) {
        for (let c = cStart; c < cEnd; c += 4) {
          const tp = t + (<usize>c << 2);
          const p = exp2x4(f32x4.sub(v128.load(tp), vm));
          v128.store(tp, p);
          vsum = f32x4.add(vsum, p);
        }
      } else {
        for (let c = cStart; c < cEnd; c += 4) {
          const tp = t + (<usize>c << 2);
          const s = v128.load(tp);
          const p = v128.and(exp2x4(f32x4.sub(s, vm)), f32x4.ne(s, ninf)); // blocked keys: exactly 0
          v128.store(tp, p);
          vsum = f32x4.add(vsum, p);
        }
      }
      // exp2x4 rather than Mathf.exp2: the library version reads a lookup table from static data.
      const alpha = mOld == NEG_INF ? <f32>0 : f32x4.extract_lane(exp2x4(f32x4.splat(mOld - mNew)), 0);
      const sum = f32x4.extract_lane(vsum, 0) + f32x4.extract_lane(vsum, 1) + f32x4.extract_lane(vsum, 2) + f32x4.extract_lane(vsum, 3);
      store<f32>(mp, mNew);
      store<f32>(l + (<usize>row << 2), load<f32>(l + (<usize>row << 2)) * alpha + sum);
      if (alpha != 1 && mOld != NEG_INF) { // (acc is still 0 when nothing was seen)
        const va = f32x4.splat(alpha);
        const ap = acc + (<usize>(row * EvPad) << 2);
        for (let e = 0; e < EvPad; e += 4) {
          const x = ap + (<usize>e << 2);
          v128.store(x, f32x4.mul(v128.load(x), va));
        }
      }
    }

    // Pass 4: acc[4 rows, :] += p[4 rows, cols] · v[cols, :], 8 value columns at a time.
    const last = min(cols, cEnd);
    if (vNonFinite != 0 && !clean) {
      accumulateMasked(acc, v, ldv, tile, r0, EvPad, cStart, last);
      continue;
    }
    const evBytes = <usize>EvPad << 2;
    const panelBytes = <usize>ldv << 5;
    for (let e = 0; e < EvPad; e += 8) {
      const a0p = acc + (<usize>(r0 * EvPad + e) << 2);
      let a00 = v128.load(a0p), a01 = v128.load(a0p, 16);
      let a10 = v128.load(a0p + evBytes), a11 = v128.load(a0p + evBytes, 16);
      let a20 = v128.load(a0p + 2 * evBytes), a21 = v128.load(a0p + 2 * evBytes, 16);
      let a30 = v128.load(a0p + 3 * evBytes), a31 = v128.load(a0p + 3 * evBytes, 16);
      let vp = v + <usize>(e >> 3) * panelBytes + (<usize>cStart << 5);
      let tp = tile + (<usize>cStart << 2);
      const tEnd = tile + (<usize>last << 2);
      if (tp < tEnd) do {
        const v0 = v128.load(vp);
        const v1 = v128.load(vp, 16);
        const p0 = v128.load32_splat(tp);
        const p1 = v128.load32_splat(tp, TILE_BYTES);
        const p2 = v128.load32_splat(tp, 2 * TILE_BYTES);
        const p3 = v128.load32_splat(tp, 3 * TILE_BYTES);
        a00 = madd(p0, v0, a00); a01 = madd(p0, v1, a01);
        a10 = madd(p1, v0, a10); a11 = madd(p1, v1, a11);
        a20 = madd(p2, v0, a20); a21 = madd(p2, v1, a21);
        a30 = madd(p3, v0, a30); a31 = madd(p3, v1, a31);
        vp += 32;
        tp += 4;
      } while (tp < tEnd);
      v128.store(a0p, a00); v128.store(a0p, a01, 16);
      v128.store(a0p + evBytes, a10); v128.store(a0p + evBytes, a11, 16);
      v128.store(a0p + 2 * evBytes, a20); v128.store(a0p + 2 * evBytes, a21, 16);
      v128.store(a0p + 3 * evBytes, a30); v128.store(a0p + 3 * evBytes, a31, 16);
    }
  }
}

// Flex attention (src/kernels/flex.ts): a mask program (postfix, [op, a, b] int32 triplets) and a score
// program ([op, a, b, c] quads) evaluated here, from data, so no JS runs per score. Opcodes:
const M_TRUE = 0; // push true
const M_DIFF = 1; // push a ≤ q − kv ≤ b (±UNBOUNDED: no bound)
const M_KV_BELOW = 2; // push kv < a
const M_SAME_DOC = 3; // push ints[a + q] == ints[a + kv]
const M_AND = 4;
const M_OR = 5;
const S_ALIBI = 1; // s += floats[a + h]·(kv − q)
const S_SOFTCAP = 2; // s = cap·tanh(s / cap), cap = floats[a]
const S_REL_BIAS = 3; // s += floats[a + hh·(2b + 1) + b + clamp(kv − q, −b, b)], hh = c > 1 ? h : 0
const UNBOUNDED: i32 = 1 << 30;
const LN2: f32 = 0.6931471805599453;

/**
 * Applies the flex rule to one row of scores (log2 units) at t, columns [cStart, cEnd) (8-aligned;
 * columns ≥ last are padding, always blocked), for absolute query i and keys j0 + c. Keys outside
 * [bandLo, bandHi] (columns) are blocked, then the mask program's, then the score program rewrites the
 * score (in natural units, converted here). clampInf = 1: −∞ scores are overflows of visible keys (→ the
 * lowest float, so finish flags their row); 0: −∞ means blocked already (by a mask or a −∞ bias).
 * The descriptor at `flex` (i32): prog, nProg, ints, stack, sprog, nSprog, floats, h — programs and their
 * data as byte pointers and instruction counts, `stack` a scratch of (program depth) rows of TILE_LD
 * i32, h the query head.
 */
@inline(never)
function flexRow(
  t: usize, cStart: i32, cEnd: i32, last: i32, i: i32, j0: i32, bandLo: i32, bandHi: i32,
  flex: usize, clampInf: i32,
): void {
  const prog = <usize>load<i32>(flex);
  const nProg = load<i32>(flex, 4);
  const ints = <usize>load<i32>(flex, 8);
  const stack = <usize>load<i32>(flex, 12);
  const sprog = <usize>load<i32>(flex, 16);
  const nSprog = load<i32>(flex, 20);
  const floats = <usize>load<i32>(flex, 24);
  const h = load<i32>(flex, 28);
  const iota = i32x4(0, 1, 2, 3);
  const ones = i32x4.splat(-1);
  const ninf = f32x4.splat(NEG_INF);
  const lowest = f32x4.splat(-MAX_F32);

  // The mask program, row-wise: each instruction writes or combines whole rows of lane masks (−1 = yes).
  let sp = 0;
  for (let x = 0; x < nProg; x++) {
    const ip = prog + <usize>(x * 12);
    const op = load<i32>(ip);
    const a = load<i32>(ip, 4);
    const b = load<i32>(ip, 8);
    if (op == M_AND || op == M_OR) {
      sp--;
      const y = stack + <usize>sp * TILE_BYTES;
      const z = y - TILE_BYTES;
      for (let c = cStart; c < cEnd; c += 4) {
        const o = <usize>c << 2;
        const u = v128.load(z + o);
        const w = v128.load(y + o);
        v128.store(z + o, op == M_AND ? v128.and(u, w) : v128.or(u, w));
      }
      continue;
    }
    const d = stack + <usize>sp * TILE_BYTES;
    sp++;
    if (op == M_DIFF) {
      // a ≤ i − j ≤ b ⇔ i − b ≤ j ≤ i − a: columns [i − b − j0, i − a − j0]
      const lo = i32x4.splat(b >= UNBOUNDED ? i32.MIN_VALUE : i - b - j0);
      const hi = i32x4.splat(a <= -UNBOUNDED ? i32.MAX_VALUE : i - a - j0);
      for (let c = cStart; c < cEnd; c += 4) {
        const cv = i32x4.add(i32x4.splat(c), iota);
        v128.store(d + (<usize>c << 2), v128.and(i32x4.ge_s(cv, lo), i32x4.le_s(cv, hi)));
      }
    } else if (op == M_KV_BELOW) {
      const lim = i32x4.splat(a - j0);
      for (let c = cStart; c < cEnd; c += 4) {
        v128.store(d + (<usize>c << 2), i32x4.lt_s(i32x4.add(i32x4.splat(c), iota), lim));
      }
    } else if (op == M_SAME_DOC) {
      // (the caller pads the ids, so the padding columns' loads stay inside its copy)
      const di = i32x4.splat(load<i32>(ints + (<usize>(a + i) << 2)));
      const ids = ints + (<usize>(a + j0) << 2);
      for (let c = cStart; c < cEnd; c += 4) {
        v128.store(d + (<usize>c << 2), i32x4.eq(v128.load(ids + (<usize>c << 2)), di));
      }
    } else {
      // M_TRUE (the driver refuses other opcodes)
      for (let c = cStart; c < cEnd; c += 4) v128.store(d + (<usize>c << 2), ones);
    }
  }

  // Visibility of each column (program ∧ band ∧ not padding ∧ not blocked already) into stack row
  // `vis`; −∞ scores of visible keys clamped when they are overflows.
  const vis = nProg > 0 ? stack + <usize>(sp - 1) * TILE_BYTES : stack;
  const vLast = i32x4.splat(last);
  const vLo = i32x4.splat(bandLo);
  const vHi = i32x4.splat(bandHi);
  if (nSprog == 1) {
    // One score instruction (every built-in score mod): visibility, clamp, score and select in one pass.
    const op = load<i32>(sprog);
    const a = load<i32>(sprog, 4);
    const b = load<i32>(sprog, 8);
    const cc = load<i32>(sprog, 12);
    if (op == S_ALIBI) {
      const slope = f32x4.splat(load<f32>(floats + (<usize>(a + h) << 2)) * LOG2E);
      const base = i32x4.splat(j0 - i);
      for (let c = cStart; c < cEnd; c += 4) {
        const o = t + (<usize>c << 2);
        const cv = i32x4.add(i32x4.splat(c), iota);
        let k = v128.and(i32x4.lt_s(cv, vLast), v128.and(i32x4.ge_s(cv, vLo), i32x4.le_s(cv, vHi)));
        if (nProg > 0) k = v128.and(k, v128.load(vis + (<usize>c << 2)));
        let s = v128.load(o);
        const isInf = f32x4.eq(s, ninf);
        if (clampInf != 0) s = v128.bitselect(lowest, s, isInf);
        else k = v128.andnot(k, isInf);
        s = madd(slope, f32x4.convert_i32x4_s(i32x4.add(base, cv)), s);
        s = v128.bitselect(lowest, s, f32x4.eq(s, ninf));
        v128.store(o, v128.bitselect(s, ninf, k));
      }
      return;
    }
    if (op == S_SOFTCAP) {
      const cap = load<f32>(floats + (<usize>a << 2));
      const toX = f32x4.splat(LN2 / cap);
      const back = f32x4.splat(cap * LOG2E);
      const m2 = f32x4.splat(<f32>-2 * LOG2E);
      const one = f32x4.splat(1);
      const sign = i32x4.splat(i32.MIN_VALUE);
      for (let c = cStart; c < cEnd; c += 4) {
        const o = t + (<usize>c << 2);
        const cv = i32x4.add(i32x4.splat(c), iota);
        let k = v128.and(i32x4.lt_s(cv, vLast), v128.and(i32x4.ge_s(cv, vLo), i32x4.le_s(cv, vHi)));
        if (nProg > 0) k = v128.and(k, v128.load(vis + (<usize>c << 2)));
        let s = v128.load(o);
        const isInf = f32x4.eq(s, ninf);
        if (clampInf != 0) s = v128.bitselect(lowest, s, isInf);
        else k = v128.andnot(k, isInf);
        const xs = f32x4.mul(s, toX);
        const e = exp2x4(f32x4.mul(f32x4.abs(xs), m2));
        const th = f32x4.div(f32x4.sub(one, e), f32x4.add(one, e));
        s = f32x4.mul(v128.or(th, v128.and(xs, sign)), back);
        v128.store(o, v128.bitselect(s, ninf, k));
      }
      return;
    }
    if (op == S_REL_BIAS) {
      const row = floats + (<usize>(a + (cc > 1 ? h : 0) * (2 * b + 1) + b) << 2);
      const l2e = f32x4.splat(LOG2E);
      const first = load<f32>(row - (<usize>b << 2));
      const lastEntry = load<f32>(row + (<usize>b << 2));
      for (let c = cStart; c < cEnd; c += 4) {
        const o = t + (<usize>c << 2);
        const cv = i32x4.add(i32x4.splat(c), iota);
        let k = v128.and(i32x4.lt_s(cv, vLast), v128.and(i32x4.ge_s(cv, vLo), i32x4.le_s(cv, vHi)));
        if (nProg > 0) k = v128.and(k, v128.load(vis + (<usize>c << 2)));
        let s = v128.load(o);
        const isInf = f32x4.eq(s, ninf);
        if (clampInf != 0) s = v128.bitselect(lowest, s, isInf);
        else k = v128.andnot(k, isInf);
        const bv = relBias(row, j0 + c - i, b, first, lastEntry);
        s = madd(bv, l2e, s);
        s = v128.bitselect(lowest, s, v128.andnot(f32x4.eq(s, ninf), f32x4.eq(bv, ninf)));
        v128.store(o, v128.bitselect(s, ninf, k));
      }
      return;
    }
  }
  for (let c = cStart; c < cEnd; c += 4) {
    const o = <usize>c << 2;
    const cv = i32x4.add(i32x4.splat(c), iota);
    let k = v128.and(i32x4.lt_s(cv, vLast), v128.and(i32x4.ge_s(cv, vLo), i32x4.le_s(cv, vHi)));
    if (nProg > 0) k = v128.and(k, v128.load(vis + o));
    const s = v128.load(t + o);
    const isInf = f32x4.eq(s, ninf);
    if (clampInf != 0) v128.store(t + o, v128.bitselect(lowest, s, isInf));
    else k = v128.andnot(k, isInf);
    if (nSprog == 0) v128.store(t + o, v128.bitselect(v128.load(t + o), ninf, k));
    else v128.store(vis + o, k);
  }
  if (nSprog == 0) return;

  // The score program, instruction by instruction over the row (visible or not: blocked ones are
  // reset to −∞ below). Additive terms are scaled by log2 e; a finite term that overflows float32
  // stays finite (the lowest float: finish flags the row), a −∞ term blocks.
  for (let x = 0; x < nSprog; x++) {
    const ip = sprog + <usize>(x * 16);
    const op = load<i32>(ip);
    const a = load<i32>(ip, 4);
    const b = load<i32>(ip, 8);
    const cc = load<i32>(ip, 12);
    if (op == S_ALIBI) {
      const slope = f32x4.splat(load<f32>(floats + (<usize>(a + h) << 2)) * LOG2E);
      const base = i32x4.splat(j0 - i);
      for (let c = cStart; c < cEnd; c += 4) {
        const o = t + (<usize>c << 2);
        const dist = f32x4.convert_i32x4_s(i32x4.add(base, i32x4.add(i32x4.splat(c), iota)));
        const s = madd(slope, dist, v128.load(o));
        v128.store(o, v128.bitselect(lowest, s, f32x4.eq(s, ninf)));
      }
    } else if (op == S_SOFTCAP) {
      // cap·tanh(s_nat / cap) with tanh|x| = (1 − e)/(1 + e), e = 2^(−2|x|·log2 e) ≤ 1.
      const cap = load<f32>(floats + (<usize>a << 2));
      const toX = f32x4.splat(LN2 / cap);
      const back = f32x4.splat(cap * LOG2E);
      const m2 = f32x4.splat(<f32>-2 * LOG2E);
      const one = f32x4.splat(1);
      const sign = i32x4.splat(i32.MIN_VALUE);
      for (let c = cStart; c < cEnd; c += 4) {
        const o = t + (<usize>c << 2);
        const xs = f32x4.mul(v128.load(o), toX);
        const e = exp2x4(f32x4.mul(f32x4.abs(xs), m2));
        const th = f32x4.div(f32x4.sub(one, e), f32x4.add(one, e));
        v128.store(o, f32x4.mul(v128.or(th, v128.and(xs, sign)), back));
      }
    } else {
      // S_REL_BIAS: row hh of the table, entry R + clamp(kv − q, −R, R), R = b
      const row = floats + (<usize>(a + (cc > 1 ? h : 0) * (2 * b + 1) + b) << 2);
      const l2e = f32x4.splat(LOG2E);
      const first = load<f32>(row - (<usize>b << 2));
      const lastEntry = load<f32>(row + (<usize>b << 2));
      for (let c = cStart; c < cEnd; c += 4) {
        const o = t + (<usize>c << 2);
        const bv = relBias(row, j0 + c - i, b, first, lastEntry);
        const s = madd(bv, l2e, v128.load(o));
        v128.store(o, v128.bitselect(lowest, s, v128.andnot(f32x4.eq(s, ninf), f32x4.eq(bv, ninf))));
      }
    }
  }
  for (let c = cStart; c < cEnd; c += 4) {
    const o = <usize>c << 2;
    v128.store(t + o, v128.bitselect(v128.load(t + o), ninf, v128.load(vis + o)));
  }
}

/**
 * Relative-bias entries for distances d0 … d0 + 3 (kv − q) from a table row centred at `row` (entry 0 at
 * distance 0, R = b each way; farther distances use the end entries `first` and `lastEntry`).
 */
@inline
function relBias(row: usize, d0: i32, b: i32, first: f32, lastEntry: f32): v128 {
  if (d0 >= -b && d0 + 3 <= b) return v128.load(row + <usize>(d0 << 2));
  if (d0 >= b) return f32x4.splat(lastEntry);
  if (d0 + 3 <= -b) return f32x4.splat(first);
  let bv = f32x4.splat(0);
  bv = f32x4.replace_lane(bv, 0, load<f32>(row + <usize>(min(max(d0, -b), b) << 2)));
  bv = f32x4.replace_lane(bv, 1, load<f32>(row + <usize>(min(max(d0 + 1, -b), b) << 2)));
  bv = f32x4.replace_lane(bv, 2, load<f32>(row + <usize>(min(max(d0 + 2, -b), b) << 2)));
  bv = f32x4.replace_lane(bv, 3, load<f32>(row + <usize>(min(max(d0 + 3, -b), b) << 2)));
  return bv;
}

/**
 * Pass 4 for values that hold NaN or ±∞ (kept out of `attend`, whose hot loop it would otherwise share
 * code with): a blocked key (p = 0) must add nothing, and 0·NaN is NaN, so each product is kept only
 * where p ≠ 0 (a visible key's p is never 0: exp2x4 stops at 2^−126).
 */
@inline(never)
function accumulateMasked(acc: usize, v: usize, ldv: i32, tile: usize, r0: i32, EvPad: i32, cStart: i32, last: i32): void {
  const evBytes = <usize>EvPad << 2;
  const panelBytes = <usize>ldv << 5;
  const zero = f32x4.splat(0);
  for (let e = 0; e < EvPad; e += 8) {
    const a0p = acc + (<usize>(r0 * EvPad + e) << 2);
    let a00 = v128.load(a0p), a01 = v128.load(a0p, 16);
    let a10 = v128.load(a0p + evBytes), a11 = v128.load(a0p + evBytes, 16);
    let a20 = v128.load(a0p + 2 * evBytes), a21 = v128.load(a0p + 2 * evBytes, 16);
    let a30 = v128.load(a0p + 3 * evBytes), a31 = v128.load(a0p + 3 * evBytes, 16);
    let vp = v + <usize>(e >> 3) * panelBytes + (<usize>cStart << 5);
    let tp = tile + (<usize>cStart << 2);
    for (let c = cStart; c < last; c++) {
      const v0 = v128.load(vp);
      const v1 = v128.load(vp, 16);
      const p0 = v128.load32_splat(tp);
      const p1 = v128.load32_splat(tp, TILE_BYTES);
      const p2 = v128.load32_splat(tp, 2 * TILE_BYTES);
      const p3 = v128.load32_splat(tp, 3 * TILE_BYTES);
      const k0 = f32x4.ne(p0, zero), k1 = f32x4.ne(p1, zero), k2 = f32x4.ne(p2, zero), k3 = f32x4.ne(p3, zero);
      a00 = f32x4.add(a00, v128.and(f32x4.mul(p0, v0), k0)); a01 = f32x4.add(a01, v128.and(f32x4.mul(p0, v1), k0));
      a10 = f32x4.add(a10, v128.and(f32x4.mul(p1, v0), k1)); a11 = f32x4.add(a11, v128.and(f32x4.mul(p1, v1), k1));
      a20 = f32x4.add(a20, v128.and(f32x4.mul(p2, v0), k2)); a21 = f32x4.add(a21, v128.and(f32x4.mul(p2, v1), k2));
      a30 = f32x4.add(a30, v128.and(f32x4.mul(p3, v0), k3)); a31 = f32x4.add(a31, v128.and(f32x4.mul(p3, v1), k3));
      vp += 32;
      tp += 4;
    }
    v128.store(a0p, a00); v128.store(a0p, a01, 16);
    v128.store(a0p + evBytes, a10); v128.store(a0p + evBytes, a11, 16);
    v128.store(a0p + 2 * evBytes, a20); v128.store(a0p + 2 * evBytes, a21, 16);
    v128.store(a0p + 3 * evBytes, a30); v128.store(a0p + 3 * evBytes, a31, 16);
  }
}

/**
 * out[r, :] = acc[r, :] / l[r] (0 for rows that saw no key), for the first `rows` rows. Returns how many
 * rows float32 could not be trusted with, and marks each by setting its m to NaN: a row whose max score
 * (log2 units) is NaN, +∞ or beyond ±`limit` (float32 scores that large have lost the precision the
 * softmax needs), or whose output is not finite (an overflow, or a NaN or ±∞ value: the caller
 * recomputes such rows in float64, which also gives IEEE's answer for inputs that really are NaN).
 */
export function finish(out: usize, m: usize, l: usize, acc: usize, rows: i32, EvPad: i32, limit: f32): i32 {
  let flagged = 0;
  const zero = f32x4.splat(0);
  for (let r = 0; r < rows; r++) {
    const mp = m + (<usize>r << 2);
    const mr = load<f32>(mp);
    const seen = mr != NEG_INF;
    const inv = f32x4.splat(seen ? <f32>1 / load<f32>(l + (<usize>r << 2)) : <f32>0);
    const ap = acc + (<usize>(r * EvPad) << 2);
    const op = out + (<usize>(r * EvPad) << 2);
    let bad = zero; // x·0 is 0 for every finite x and NaN for NaN and ±∞
    for (let e = 0; e < EvPad; e += 4) {
      const x = f32x4.mul(v128.load(ap + (<usize>e << 2)), inv);
      v128.store(op + (<usize>e << 2), x);
      bad = v128.or(bad, f32x4.ne(f32x4.mul(x, zero), zero));
    }
    if (v128.any_true(bad) || (seen && !(abs(mr) <= limit))) {
      store<f32>(mp, NaN);
      flagged++;
    }
  }
  return flagged;
}

/** 1 if any of the n floats at p is NaN or ±∞, else 0. */
export function nonFinite(p: usize, n: i32): i32 {
  const zero = f32x4.splat(0);
  let bad = zero;
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const x = v128.load(p + (<usize>i << 2));
    bad = v128.or(bad, f32x4.ne(f32x4.mul(x, zero), zero));
  }
  for (; i < n; i++) {
    const x = load<f32>(p + (<usize>i << 2));
    if (x * 0 != 0) return 1;
  }
  return v128.any_true(bad) ? 1 : 0;
}

/**
 * Query rows [rows, E] (row-major, as copied from q) → `attend`'s layout, times s: groups of 4 rows,
 * each [E, 4, 4] with every element broadcast to 4 lanes (element (r, e) of group g at 16·(4gE + 4e + r)),
 * so pass 1 reads its 4 query operands with plain loads. Rows past `rows` (up to a multiple of 4) are 0.
 */
export function packQ(src: usize, rows: i32, E: i32, dst: usize, s: f32): void {
  const rowsPad = (rows + 3) & ~3;
  const vs = f32x4.splat(s);
  for (let g = 0; g < rowsPad; g += 4) {
    const d = dst + (<usize>(g * E) << 4);
    for (let rr = 0; rr < 4; rr++) {
      const row = g + rr;
      const from = src + (<usize>(row * E) << 2);
      let e = 0;
      if (row >= rows) {
        for (; e < E; e++) v128.store(d + (<usize>(e * 4 + rr) << 4), f32x4.splat(0));
        continue;
      }
      for (; e + 4 <= E; e += 4) {
        const x = f32x4.mul(v128.load(from + (<usize>e << 2)), vs);
        const o = d + (<usize>(e * 4 + rr) << 4);
        v128.store(o, i32x4.shuffle(x, x, 0, 0, 0, 0));
        v128.store(o, i32x4.shuffle(x, x, 1, 1, 1, 1), 64);
        v128.store(o, i32x4.shuffle(x, x, 2, 2, 2, 2), 128);
        v128.store(o, i32x4.shuffle(x, x, 3, 3, 3, 3), 192);
      }
      for (; e < E; e++) v128.store(d + (<usize>(e * 4 + rr) << 4), f32x4.splat(load<f32>(from + (<usize>e << 2)) * s));
    }
  }
}

/**
 * Value rows [cols, Ev] (row-major, as copied from v) → `attend`'s value panels [EvPad/8, ld, 8]: panel P
 * holds value columns 8P … 8P + 7 of every key, 32 bytes per key, so `attend`'s P·V loop reads one
 * contiguous stream per panel instead of one cache line per key. Value columns ≥ Ev and keys cols …
 * colsPad − 1 (colsPad = cols rounded up to 8; ld ≥ colsPad) are 0.
 */
export function packV(src: usize, cols: i32, Ev: i32, dst: usize, ld: i32): void {
  const colsPad = (cols + 7) & ~7;
  const EvPad = (max(Ev, 1) + 7) & ~7;
  const step = <usize>Ev << 2; // bytes from one key to the next in src
  for (let e0 = 0; e0 < EvPad; e0 += 8) {
    const panel = dst + (<usize>(e0 >> 3) * <usize>ld << 5);
    const w = min(8, Ev - e0); // real value columns in this panel
    let from = src + (<usize>e0 << 2);
    if (w == 8) {
      for (let c = 0; c < cols; c++) {
        const o = panel + (<usize>c << 5);
        v128.store(o, v128.load(from));
        v128.store(o, v128.load(from, 16), 16);
        from += step;
      }
    } else {
      for (let c = 0; c < cols; c++) {
        const o = panel + (<usize>c << 5);
        for (let e = 0; e < 8; e++) {
          let x: f32 = 0;
          if (e < w) x = load<f32>(from + (<usize>e << 2)); // (a branch: a select would load past the row)
          store<f32>(o + (<usize>e << 2), x);
        }
        from += step;
      }
    }
    memory.fill(panel + (<usize>cols << 5), 0, <usize>(colsPad - cols) << 5);
  }
}

/**
 * Keys [cols, E] (row-major, as copied from k) → K^T panels: panel P holds keys P·block … P·block +
 * block − 1 as [E, ld] (ld ≥ block; the unused tail of each row is zeroed).
 */
export function transposeK(src: usize, cols: i32, E: i32, dst: usize, block: i32, ld: i32): void {
  const step = <usize>E << 2; // bytes from one key to the next in src
  for (let c0 = 0; c0 < cols; c0 += block) {
    const n = min(block, cols - c0);
    const panel = dst + (<usize>(c0 / block) * <usize>E * <usize>ld << 2);
    const ldBytes = <usize>ld << 2;
    let c = 0;
    // 4 keys × 4 dimensions at a time: load 4 key rows, transpose the 4×4 block with shuffles.
    for (; c + 4 <= n; c += 4) {
      const from = src + <usize>(c0 + c) * step;
      let e = 0;
      for (; e + 4 <= E; e += 4) {
        const p = from + (<usize>e << 2);
        const r0 = v128.load(p);
        const r1 = v128.load(p + step);
        const r2 = v128.load(p + 2 * step);
        const r3 = v128.load(p + 3 * step);
        const t0 = i32x4.shuffle(r0, r1, 0, 4, 1, 5);
        const t1 = i32x4.shuffle(r2, r3, 0, 4, 1, 5);
        const t2 = i32x4.shuffle(r0, r1, 2, 6, 3, 7);
        const t3 = i32x4.shuffle(r2, r3, 2, 6, 3, 7);
        const o = panel + <usize>e * ldBytes + (<usize>c << 2);
        v128.store(o, i32x4.shuffle(t0, t1, 0, 1, 4, 5));
        v128.store(o + ldBytes, i32x4.shuffle(t0, t1, 2, 3, 6, 7));
        v128.store(o + 2 * ldBytes, i32x4.shuffle(t2, t3, 0, 1, 4, 5));
        v128.store(o + 3 * ldBytes, i32x4.shuffle(t2, t3, 2, 3, 6, 7));
      }
      for (; e < E; e++) {
        for (let i = 0; i < 4; i++) {
          store<f32>(panel + <usize>e * ldBytes + (<usize>(c + i) << 2), load<f32>(from + <usize>i * step + (<usize>e << 2)));
        }
      }
    }
    for (; c < n; c++) {
      const from = src + <usize>(c0 + c) * step;
      for (let e = 0; e < E; e++) store<f32>(panel + <usize>e * ldBytes + (<usize>c << 2), load<f32>(from + (<usize>e << 2)));
    }
    for (let e = 0; e < E; e++) memory.fill(panel + <usize>e * ldBytes + (<usize>n << 2), 0, <usize>(ld - n) << 2);
  }
}
