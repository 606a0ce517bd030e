// Packed, register-blocked single-precision GEMM: C = op(A)·op(B) (+ bias) (+ C), optionally through GELU
// (AssemblyScript, WASM SIMD128; the relaxed-SIMD build fuses each multiply-add).
// One decision to know: JS (src/kernels/gemm-wasm.ts) runs BLIS's loops over N, K and M blocks and does
// every copy; this module only packs a staged block and runs the macro-kernel (every 4×8 register tile of
// one packed A block against one packed B block), so each tile's K loop reads two contiguous streams.
//
// Layouts (f32, bytes for pointers, row-major unless said):
//   packed A  [rowsPad/4][kc][4]   a panel of 4 rows of op(A), k-major: one 16-byte step per k
//   packed B  [colsPad/8][kc][8]   a panel of 8 columns of op(B), k-major: one 32-byte step per k
//   C block   [rowsPad][ldc]       the caller's rows × columns of C, 8-column aligned

import { geluSpan, madd } from './simd';

const MR = 4; // rows of a register tile (4 × 8 floats = 8 accumulators)
const NR = 8; // columns of a register tile = a packed B panel

/** Rows of a register tile: the caller pads packed A blocks to a multiple of it. */
export function gemmTileRows(): i32 {
  return MR;
}

/**
 * Packs `rows` rows × `kc` columns of op(A), staged at `src` with row stride `ld` floats, into 4-row
 * panels at `dst` (rows past `rows`, up to a multiple of 4, are 0). trans = 0: element (r, k) is at
 * src[r·ld + k] (A as stored); trans = 1: at src[k·ld + r] (A stored [K, M], op(A) = Aᵀ).
 */
export function gemmPackA(src: usize, ld: i32, rows: i32, kc: i32, trans: i32, dst: usize): void {
  const ldB = <usize>ld << 2;
  const panelBytes = <usize>kc << 4; // one packed 4-row panel
  const full = rows & ~(MR - 1); // rows in whole panels
  if (trans != 0) {
    // Aᵀ: a panel's 4 rows at k are 4 consecutive floats of stored row k. Four panels at a time, so each
    // 64-byte line of the source is read once, whole (one panel at a time would come back to every line
    // four times; stored rows outer would scatter the stores over every panel, 8 KB apart).
    let g = 0;
    for (; g + 4 * MR <= full; g += 4 * MR) {
      let from = src + (<usize>g << 2);
      let to = dst + <usize>(g / MR) * panelBytes;
      for (let k = 0; k < kc; k++) {
        v128.store(to, v128.load(from));
        v128.store(to + panelBytes, v128.load(from, 16));
        v128.store(to + 2 * panelBytes, v128.load(from, 32));
        v128.store(to + 3 * panelBytes, v128.load(from, 48));
        from += ldB;
        to += 16;
      }
    }
    for (; g < full; g += MR) {
      let from = src + (<usize>g << 2);
      let to = dst + <usize>(g / MR) * panelBytes;
      for (let k = 0; k < kc; k++) {
        v128.store(to, v128.load(from));
        from += ldB;
        to += 16;
      }
    }
  } else {
    // A: 4 rows × 4 k at a time, transposed with shuffles (two levels of interleaving).
    for (let g = 0; g < full; g += MR) {
      const panel = dst + <usize>(g / MR) * panelBytes;
      const r0 = src + <usize>g * ldB;
      let k = 0;
      for (; k + 4 <= kc; k += 4) {
        const p = r0 + (<usize>k << 2);
        const x0 = v128.load(p);
        const x1 = v128.load(p + ldB);
        const x2 = v128.load(p + 2 * ldB);
        const x3 = v128.load(p + 3 * ldB);
        const t0 = i32x4.shuffle(x0, x1, 0, 4, 1, 5);
        const t1 = i32x4.shuffle(x2, x3, 0, 4, 1, 5);
        const t2 = i32x4.shuffle(x0, x1, 2, 6, 3, 7);
        const t3 = i32x4.shuffle(x2, x3, 2, 6, 3, 7);
        const o = panel + (<usize>k << 4);
        v128.store(o, i32x4.shuffle(t0, t1, 0, 1, 4, 5));
        v128.store(o, i32x4.shuffle(t0, t1, 2, 3, 6, 7), 16);
        v128.store(o, i32x4.shuffle(t2, t3, 0, 1, 4, 5), 32);
        v128.store(o, i32x4.shuffle(t2, t3, 2, 3, 6, 7), 48);
      }
      for (; k < kc; k++) {
        for (let r = 0; r < MR; r++) {
          store<f32>(panel + (<usize>(k * MR + r) << 2), load<f32>(r0 + <usize>r * ldB + (<usize>k << 2)));
        }
      }
    }
  }
  if (full == rows) return;
  // The last, partial panel: element by element, the missing rows zero.
  const panel = dst + <usize>(full / MR) * panelBytes;
  const n = rows - full;
  for (let k = 0; k < kc; k++) {
    for (let r = 0; r < MR; r++) {
      let x: f32 = 0;
      if (r < n) {
        x = trans != 0
          ? load<f32>(src + <usize>k * ldB + (<usize>(full + r) << 2))
          : load<f32>(src + <usize>(full + r) * ldB + (<usize>k << 2));
      }
      store<f32>(panel + (<usize>(k * MR + r) << 2), x);
    }
  }
}

/**
 * Packs `kc` rows × `cols` columns of op(B), staged at `src` with row stride `ld` floats, into 8-column
 * panels at `dst`, `panelStride` floats apart (the whole K block's kc·8, so a block can be packed in
 * pieces of k; columns past `cols`, up to a multiple of 8, are 0). trans = 0: element (k, j) is at
 * src[k·ld + j] (B stored [K, N]); trans = 1: at src[j·ld + k] (B stored [N, K]: PyTorch's weight).
 */
export function gemmPackB(src: usize, ld: i32, kc: i32, cols: i32, trans: i32, dst: usize, panelStride: i32): void {
  const ldB = <usize>ld << 2;
  for (let j0 = 0; j0 < cols; j0 += NR) {
    const panel = dst + (<usize>(j0 / NR) * <usize>panelStride << 2);
    const n = min(NR, cols - j0);
    if (n == NR && trans == 0) {
      let from = src + (<usize>j0 << 2);
      for (let k = 0; k < kc; k++) {
        const o = panel + (<usize>k << 5);
        v128.store(o, v128.load(from));
        v128.store(o, v128.load(from, 16), 16);
        from += ldB;
      }
    } else if (n == NR) {
      // Bᵀ: 8 stored rows × 4 k at a time, as two 4×4 transposes (columns 0–3 and 4–7 of the panel).
      const r0 = src + <usize>j0 * ldB;
      const r4 = r0 + 4 * ldB;
      let k = 0;
      for (; k + 4 <= kc; k += 4) {
        const kb = <usize>k << 2;
        const o = panel + (<usize>k << 5);
        for (let half = 0; half < 2; half++) {
          const p = (half == 0 ? r0 : r4) + kb;
          const x0 = v128.load(p);
          const x1 = v128.load(p + ldB);
          const x2 = v128.load(p + 2 * ldB);
          const x3 = v128.load(p + 3 * ldB);
          const t0 = i32x4.shuffle(x0, x1, 0, 4, 1, 5);
          const t1 = i32x4.shuffle(x2, x3, 0, 4, 1, 5);
          const t2 = i32x4.shuffle(x0, x1, 2, 6, 3, 7);
          const t3 = i32x4.shuffle(x2, x3, 2, 6, 3, 7);
          const h = o + (<usize>half << 4);
          v128.store(h, i32x4.shuffle(t0, t1, 0, 1, 4, 5));
          v128.store(h, i32x4.shuffle(t0, t1, 2, 3, 6, 7), 32);
          v128.store(h, i32x4.shuffle(t2, t3, 0, 1, 4, 5), 64);
          v128.store(h, i32x4.shuffle(t2, t3, 2, 3, 6, 7), 96);
        }
      }
      for (; k < kc; k++) {
        for (let j = 0; j < NR; j++) {
          store<f32>(panel + (<usize>(k * NR + j) << 2), load<f32>(r0 + <usize>j * ldB + (<usize>k << 2)));
        }
      }
    } else {
      for (let k = 0; k < kc; k++) {
        for (let j = 0; j < NR; j++) {
          let x: f32 = 0;
          if (j < n) {
            x = trans != 0
              ? load<f32>(src + <usize>(j0 + j) * ldB + (<usize>k << 2))
              : load<f32>(src + <usize>k * ldB + (<usize>(j0 + j) << 2));
          }
          store<f32>(panel + (<usize>(k * NR + j) << 2), x);
        }
      }
    }
  }
}

/**
 * GELU over C[rows, cols] (cols a multiple of 4), in place, row by row: simd.ts's geluSpan (the tanh form
 * in float32, ≤ 4e-6 relative; see there).
 */
function geluBlock(c: usize, rows: i32, cols: i32, ldcB: usize): void {
  for (let r = 0; r < rows; r++) {
    const p = c + <usize>r * ldcB;
    geluSpan(p, p, 0, cols);
  }
}

/**
 * One 4×8 register tile: c[4, 8] = (c if `load`, else 0) (+ bias[8]) + a-panel · b-panel over kc. ldcB is
 * C's row stride in bytes.
 */
@inline
function tile(ap: usize, bp: usize, cp: usize, ldcB: usize, kc: i32, load: i32, bias: usize): void {
  // Pass 1: the accumulators: C as it is, or zero; plus the bias of these 8 columns (every row alike).
  let c00 = f32x4.splat(0), c01 = f32x4.splat(0), c10 = f32x4.splat(0), c11 = f32x4.splat(0);
  let c20 = f32x4.splat(0), c21 = f32x4.splat(0), c30 = f32x4.splat(0), c31 = f32x4.splat(0);
  if (load != 0) {
    c00 = v128.load(cp); c01 = v128.load(cp, 16);
    c10 = v128.load(cp + ldcB); c11 = v128.load(cp + ldcB, 16);
    c20 = v128.load(cp + 2 * ldcB); c21 = v128.load(cp + 2 * ldcB, 16);
    c30 = v128.load(cp + 3 * ldcB); c31 = v128.load(cp + 3 * ldcB, 16);
  }
  if (bias != 0) {
    const b0 = v128.load(bias);
    const b1 = v128.load(bias, 16);
    c00 = f32x4.add(c00, b0); c01 = f32x4.add(c01, b1);
    c10 = f32x4.add(c10, b0); c11 = f32x4.add(c11, b1);
    c20 = f32x4.add(c20, b0); c21 = f32x4.add(c21, b1);
    c30 = f32x4.add(c30, b0); c31 = f32x4.add(c31, b1);
  }
  // Pass 2: kc rank-1 updates: 2 loads of B, 4 broadcast loads of A (load32_splat is one vbroadcastss),
  // 8 multiply-adds per k; 8 accumulators + 2 B + the A operands fit x64's 16 vector registers (6 × 8
  // tiles spill under V8, measured). A do-while on the pointer: no peeled first iteration, no counter.
  if (kc > 0) {
    const end = ap + (<usize>kc << 4);
    do {
      const b0 = v128.load(bp);
      const b1 = v128.load(bp, 16);
      const a0 = v128.load32_splat(ap);
      const a1 = v128.load32_splat(ap, 4);
      const a2 = v128.load32_splat(ap, 8);
      const a3 = v128.load32_splat(ap, 12);
      c00 = madd(a0, b0, c00); c01 = madd(a0, b1, c01);
      c10 = madd(a1, b0, c10); c11 = madd(a1, b1, c11);
      c20 = madd(a2, b0, c20); c21 = madd(a2, b1, c21);
      c30 = madd(a3, b0, c30); c31 = madd(a3, b1, c31);
      ap += 16;
      bp += 32;
    } while (ap < end);
  }
  // Pass 3: the store.
  v128.store(cp, c00); v128.store(cp, c01, 16);
  v128.store(cp + ldcB, c10); v128.store(cp + ldcB, c11, 16);
  v128.store(cp + 2 * ldcB, c20); v128.store(cp + 2 * ldcB, c21, 16);
  v128.store(cp + 3 * ldcB, c30); v128.store(cp + 3 * ldcB, c31, 16);
}

/**
 * The macro-kernel (BLIS's two innermost loops): C[rows, cols] (+)= packed A [rows, kc] · packed B
 * [kc, cols], rows a multiple of 4 and cols of 8. Columns outer, rows inner: one B panel (kc·32 bytes)
 * stays in L1 while the A block streams from L2 under it. load = 1 adds to C as it is (accumulating, or
 * a later K block); bias (a pointer to the block's first column, 0 for none) is added once, by the first
 * K block; gelu = 1 on the last K block applies GELU to the block (pass 4).
 */
export function gemmBlock(
  a: usize, b: usize, c: usize, ldc: i32, rows: i32, cols: i32, kc: i32,
  load: i32, bias: usize, gelu: i32,
): void {
  const ldcB = <usize>ldc << 2;
  const aPanel = <usize>kc << 4; // bytes of one packed 4-row A panel
  const bPanel = <usize>kc << 5; // bytes of one packed 8-column B panel
  let bp = b;
  for (let j = 0; j < cols; j += NR) {
    let ap = a;
    let cp = c + (<usize>j << 2);
    const bj = bias != 0 ? bias + (<usize>j << 2) : 0;
    for (let i = 0; i < rows; i += MR) {
      tile(ap, bp, cp, ldcB, kc, load, bj);
      ap += aPanel;
      cp += ldcB << 2;
    }
    bp += bPanel;
  }
  if (gelu != 0) geluBlock(c, rows, cols, ldcB); // pass 4, over the block while it is still in L2
}

/**
 * One row of C against four B panels (32 columns): the 4×8 tile's arithmetic for a single row, each
 * element's sum in the same order (C or 0, + bias, then k = 0 … kc − 1), so a row computed here equals the
 * same row computed in a 4-row tile bit for bit. `ap` is the row's lane of a packed A panel (16-byte
 * steps); `panel` is the bytes between two B panels.
 */
@inline
function rowTile4(
  ap: usize, bp: usize, panel: usize, cp: usize, kc: i32, load: i32, bias: usize,
): void {
  let c0 = f32x4.splat(0), c1 = f32x4.splat(0), c2 = f32x4.splat(0), c3 = f32x4.splat(0);
  let c4 = f32x4.splat(0), c5 = f32x4.splat(0), c6 = f32x4.splat(0), c7 = f32x4.splat(0);
  if (load != 0) {
    c0 = v128.load(cp); c1 = v128.load(cp, 16); c2 = v128.load(cp, 32); c3 = v128.load(cp, 48);
    c4 = v128.load(cp, 64); c5 = v128.load(cp, 80); c6 = v128.load(cp, 96); c7 = v128.load(cp, 112);
  }
  if (bias != 0) {
    c0 = f32x4.add(c0, v128.load(bias)); c1 = f32x4.add(c1, v128.load(bias, 16));
    c2 = f32x4.add(c2, v128.load(bias, 32)); c3 = f32x4.add(c3, v128.load(bias, 48));
    c4 = f32x4.add(c4, v128.load(bias, 64)); c5 = f32x4.add(c5, v128.load(bias, 80));
    c6 = f32x4.add(c6, v128.load(bias, 96)); c7 = f32x4.add(c7, v128.load(bias, 112));
  }
  if (kc > 0) {
    const end = ap + (<usize>kc << 4);
    let b0 = bp, b1 = bp + panel, b2 = bp + 2 * panel, b3 = bp + 3 * panel;
    do {
      const a = v128.load32_splat(ap);
      c0 = madd(a, v128.load(b0), c0); c1 = madd(a, v128.load(b0, 16), c1);
      c2 = madd(a, v128.load(b1), c2); c3 = madd(a, v128.load(b1, 16), c3);
      c4 = madd(a, v128.load(b2), c4); c5 = madd(a, v128.load(b2, 16), c5);
      c6 = madd(a, v128.load(b3), c6); c7 = madd(a, v128.load(b3, 16), c7);
      ap += 16;
      b0 += 32; b1 += 32; b2 += 32; b3 += 32;
    } while (ap < end);
  }
  v128.store(cp, c0); v128.store(cp, c1, 16); v128.store(cp, c2, 32); v128.store(cp, c3, 48);
  v128.store(cp, c4, 64); v128.store(cp, c5, 80); v128.store(cp, c6, 96); v128.store(cp, c7, 112);
}

/** One row of C against one B panel (8 columns); the same arithmetic as rowTile4. */
@inline
function rowTile1(ap: usize, bp: usize, cp: usize, kc: i32, load: i32, bias: usize): void {
  let c0 = f32x4.splat(0), c1 = f32x4.splat(0);
  if (load != 0) {
    c0 = v128.load(cp); c1 = v128.load(cp, 16);
  }
  if (bias != 0) {
    c0 = f32x4.add(c0, v128.load(bias)); c1 = f32x4.add(c1, v128.load(bias, 16));
  }
  if (kc > 0) {
    const end = ap + (<usize>kc << 4);
    do {
      const a = v128.load32_splat(ap);
      c0 = madd(a, v128.load(bp), c0); c1 = madd(a, v128.load(bp, 16), c1);
      ap += 16;
      bp += 32;
    } while (ap < end);
  }
  v128.store(cp, c0); v128.store(cp, c1, 16);
}

/**
 * gemmBlock for a block of 1–3 rows (a decode step's single token): the 4×8 tile would spend three
 * quarters of its multiply-adds on the packed A panel's zero rows. Each row runs on its own through
 * rowTile4 / rowTile1 (one A lane against 32 or 8 columns), with gemmBlock's arguments and results,
 * bit for bit.
 */
export function gemmBlockRows(
  a: usize, b: usize, c: usize, ldc: i32, rows: i32, cols: i32, kc: i32,
  load: i32, bias: usize, gelu: i32,
): void {
  const ldcB = <usize>ldc << 2;
  const bPanel = <usize>kc << 5;
  for (let r = 0; r < rows; r++) {
    const ap = a + (<usize>r << 2); // lane r of the (single) packed A panel
    const cr = c + <usize>r * ldcB;
    let j = 0;
    for (; j + 4 * NR <= cols; j += 4 * NR) {
      const bj = bias != 0 ? bias + (<usize>j << 2) : 0;
      rowTile4(ap, b + <usize>(j / NR) * bPanel, bPanel, cr + (<usize>j << 2), kc, load, bj);
    }
    for (; j < cols; j += NR) {
      const bj = bias != 0 ? bias + (<usize>j << 2) : 0;
      rowTile1(ap, b + <usize>(j / NR) * bPanel, cr + (<usize>j << 2), kc, load, bj);
    }
  }
  if (gelu != 0) geluBlock(c, rows, cols, ldcB);
}
