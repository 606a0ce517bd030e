// The WASM SIMD attention kernel: JS drives chunks and copies, assembly/attention.ts runs the inner loops
// in this thread's WASM instance (wasm-runtime.ts). One decision to know: the kernel computes in float32
// and never returns a float32 artefact: rows it cannot be trusted with (huge scores, overflow, NaN or ±∞
// in the output) are recomputed in float64 by the JS tiled kernel.

import { halfTable } from '../float16.js';
import { flashKernel } from './flash.js';
import {
  type AttentionKernel,
  type AttentionOutputs,
  type AttentionProblem,
  type BroadcastView,
  float32Problem,
} from './types.js';
import { type Band, classifyBlock, headsOf, kvRow, kvRun, rowsBand, visibleRange } from './visibility.js';
import { wasmBackward } from './wasm-backward.js';
import { callId, releaseWasm, type WasmRuntime, wasmSupport, withWasm } from './wasm-runtime.js';

/** The attention half of the module's exports (assembly/attention.ts). */
interface KernelExports {
  reset(m: number, l: number, acc: number, rowsPad: number, EvPad: number): void;
  attend(
    q: number,
    kt: number,
    v: number,
    tile: number,
    m: number,
    l: number,
    acc: number,
    rows: number,
    cols: number,
    E: number,
    ldk: number,
    EvPad: number,
    i0: number,
    j0: number,
    shift: number,
    left: number,
    right: number,
    band: number,
    mask: number,
    maskSl: number,
    maskSs: number,
    bias: number,
    biasSl: number,
    biasSs: number,
    vNonFinite: number,
  ): void;
  finish(out: number, m: number, l: number, acc: number, rows: number, EvPad: number, limit: number): number;
  nonFinite(p: number, n: number): number;
  packQ(src: number, rows: number, E: number, dst: number, s: number): void;
  tileBytes(): number;
  transposeK(src: number, cols: number, E: number, dst: number, block: number, ld: number): void;
}

// Re-exported for the modules and tests that read them from here.
export {
  probeWasm,
  wasmMemoryBytes,
  wasmRuntimeFailure,
  wasmUnavailableReason,
  wasmVariant,
} from './wasm-runtime.js';

const ROW_CHUNK = 4096; // query rows per chunk: their state (m, l, acc) stays in WASM memory
// Bytes of packed query rows per chunk (each element is stored 4 times). Small while K and V of the
// head sit in memory whole, so the packed rows stay in L2 next to them; large when K and V stream,
// as every query chunk streams them again.
const Q_BUDGET_WHOLE_KV = 256 << 10;
const Q_BUDGET_STREAMED_KV = 4 << 20;
const COL_BLOCK = 512; // keys per attend call (≤ the module's TILE_COLS): 128 KB of K and of V at E = 64, in L2
const PANEL_LD = COL_BLOCK + 8; // row stride of a K^T panel
const KV_BUDGET = 8 << 20; // bytes of K and V per head copied at once; longer sequences stream
// A mask or bias up to this size is copied whole, once per call; a larger one is copied tile by tile
// as the loops reach it, so the kernel's memory stays bounded whatever L·S is.
const WHOLE_VIEW_BYTES = 4 << 20;
const UNBOUNDED = 1 << 30;
/**
 * Largest |row max| (log2 units) trusted to float32: beyond it a score's rounding (|s|·2⁻²⁴) costs the
 * softmax more than 1.7e-4 relative, so the row is recomputed in float64 by the JS tiled kernel. Only
 * huge logits or fills reach it (a −1e9 bias on every key, scores of 1e20): ordinary scores stay below
 * ~100, and the reference's answer is the float64 one (a −1e9 fill on every key changes nothing).
 */
const TRUSTED_MAX = 4096;

const pad = (n: number, m: number) => Math.ceil(n / m) * m;

/** The attention driver of one thread's WASM instance: lays out its buffers there, caches what it copied last. */
class AttentionDriver {
  private readonly exports: KernelExports;
  private f32: Float32Array;
  // Whose mask/bias are in memory: the call's callId (0: none), so its tensors are not kept alive.
  private problem = 0;
  private kvKey = ''; // which (problem, b, hk, s0, s1) K and V in memory belong to
  private maskPtr = 0;
  private biasPtr = 0;
  private maskWhole = false;
  private biasWhole = false;
  private stagePtr = 0;
  private vNonFinite = 0; // whether the V in memory holds NaN or ±∞ (attend then never multiplies 0 by it)

  constructor(private readonly rt: WasmRuntime) {
    this.exports = rt.exports as unknown as KernelExports;
    this.f32 = rt.f32;
  }

  /** Grows memory to at least `bytes`; forgets its copies if another driver used the memory meanwhile. */
  private ensure(bytes: number): void {
    this.rt.ensure(bytes);
    if (!this.rt.claim(this)) {
      this.problem = 0;
      this.kvKey = '';
    }
    this.f32 = this.rt.f32;
  }

  run(p: AttentionProblem, outputs: AttentionOutputs, bh: number, i0: number, i1: number): void {
    const { L, S, E, Ev, mask, bias } = p;
    const { out, lse } = outputs;
    // Float16 inputs are widened here, block by block, as they are copied into WASM memory.
    const half = p.half;
    const q = half ? half.q : p.q;
    const k = half ? half.k : p.k;
    const v = half ? half.v : p.v;
    const { b, h, hk } = headsOf(p, bh);
    // The band as data for the module (it evaluates the same rule); masks and biases go separately.
    const band: Band = { S, shift: p.shift, left: p.left, right: p.right };
    const EvPad = pad(Math.max(Ev, 1), 8);
    const kvCols = Math.max(8, Math.min(pad(S, 8), pad(Math.floor(KV_BUDGET / 4 / (E + EvPad)), 8)));
    const whole = pad(S, 8) <= kvCols; // K and V of the head are copied once, else streamed per chunk
    const qBudget = whole ? Q_BUDGET_WHOLE_KV : Q_BUDGET_STREAMED_KV;
    const rowChunk = Math.max(4, Math.min(ROW_CHUNK, Math.floor(qBudget / (16 * E) / 4) * 4));
    const rowsMax = pad(Math.min(rowChunk, i1 - i0), 4);
    // K^T is stored as panels of COL_BLOCK keys, [E, PANEL_LD] each, so one attend call reads 128 KB of
    // contiguous memory (a [E, S] layout spreads a tile over E pages); PANEL_LD = COL_BLOCK + 8 keeps
    // its rows off a power-of-two stride, which would map them onto the same cache sets.
    const panels = Math.ceil(kvCols / COL_BLOCK);

    // Memory map (bytes, 16-aligned), from the module's heap base (> 0, so address 0 can mean "no
    // mask/bias"): mask | bias | K^T [E, ldk] | V [kvCols, EvPad] | Q packed [rowsMax, E, 4] | m | l |
    // acc [rowsMax, EvPad] | tile [4, TILE_LD] | stage (keys or query rows as copied).
    const base = this.rt.base;
    // A mask or bias is copied whole when small, else one [rows, COL_BLOCK] tile at a time.
    const tileViewBytes = pad(rowsMax * COL_BLOCK * 4, 16);
    const maskWhole = !!mask && mask.data.length * 4 <= WHOLE_VIEW_BYTES;
    const biasWhole = !!bias && bias.data.length * 4 <= WHOLE_VIEW_BYTES;
    const maskBytes = mask ? (maskWhole ? pad(mask.data.length * 4, 16) : tileViewBytes) : 0;
    const biasBytes = bias ? (biasWhole ? pad(bias.data.length * 4, 16) : tileViewBytes) : 0;
    const ktPtr = base + maskBytes + biasBytes;
    const vPtr = ktPtr + panels * E * PANEL_LD * 4;
    const qPtr = vPtr + kvCols * EvPad * 4;
    const mPtr = qPtr + rowsMax * E * 16;
    const lPtr = mPtr + rowsMax * 4;
    const accPtr = lPtr + rowsMax * 4;
    const tilePtr = accPtr + rowsMax * EvPad * 4;
    // Keys or query rows as copied, before they are transposed or packed.
    const stagePtr = tilePtr + pad(this.exports.tileBytes(), 16);
    this.ensure(stagePtr + Math.max(kvCols, rowsMax) * E * 4);
    this.stagePtr = stagePtr;
    if (this.problem !== callId(p) || this.maskPtr !== base || this.biasPtr !== base + maskBytes) {
      // Small masks and biases are copied as given (broadcast axes stay size 1), once per call.
      this.problem = callId(p);
      this.kvKey = '';
      this.maskPtr = base;
      this.biasPtr = base + maskBytes;
      this.maskWhole = maskWhole;
      this.biasWhole = biasWhole;
      if (mask && maskWhole) this.f32.set(mask.data, this.maskPtr / 4);
      if (bias && biasWhole) this.f32.set(bias.data, this.biasPtr / 4);
    }
    const ex = this.exports;
    const f32 = this.f32;
    const left = Math.min(p.left, UNBOUNDED);
    // Scores are computed in log2 units (q · scale · log2 e), so the module's softmax uses 2^x.
    const qScale = p.scale * Math.LOG2E;
    const right = Math.min(p.right, UNBOUNDED);

    for (let r0 = i0; r0 < i1; r0 += rowChunk) {
      const r1 = Math.min(i1, r0 + rowChunk);
      const rows = r1 - r0;
      const rowsPad = pad(rows, 4);
      // Q rows of this chunk, times the scale (so the module never multiplies scores), packed in groups
      // of 4 rows (zero-padded).
      const qFrom = (bh * L + r0) * E;
      const stage = this.stagePtr / 4;
      if (half) {
        const t = halfTable();
        for (let x = 0; x < rows * E; x++) f32[stage + x] = t[q[qFrom + x]];
      } else f32.set((q as Float32Array).subarray(qFrom, qFrom + rows * E), stage);
      ex.packQ(this.stagePtr, rows, E, qPtr, qScale);
      ex.reset(mPtr, lPtr, accPtr, rowsPad, EvPad);

      const { lo: bandLo, hi: bandHi } = rowsBand(band, r0, r1);
      // K and V of the whole head when they fit the budget (loaded once, shared by every chunk and every
      // head of a GQA group); otherwise stream the band in chunks of kvCols keys.
      for (let s0 = whole ? 0 : bandLo; s0 <= bandHi; s0 += kvCols) {
        const s1 = whole ? S : Math.min(bandHi + 1, s0 + kvCols);
        this.loadKV(p, b, hk, s0, s1, ktPtr, vPtr, EvPad, k, v);
        const end = Math.min(s1, bandHi + 1);
        for (let c0 = Math.max(s0, bandLo); c0 < end; ) {
          const panel = Math.floor((c0 - s0) / COL_BLOCK);
          const c1 = Math.min(end, s0 + (panel + 1) * COL_BLOCK); // never past the panel
          const ktAt = ktPtr + (panel * E * PANEL_LD + (c0 - s0 - panel * COL_BLOCK)) * 4;
          const interior = classifyBlock(band, r0, r1, c0, c1) === 'full';
          const [maskAt, maskSl, maskSs] = this.viewArgs(
            mask,
            this.maskWhole,
            this.maskPtr,
            b,
            h,
            r0,
            c0,
            rows,
            c1 - c0,
          );
          const [biasAt, biasSl, biasSs] = this.viewArgs(
            bias,
            this.biasWhole,
            this.biasPtr,
            b,
            h,
            r0,
            c0,
            rows,
            c1 - c0,
          );
          ex.attend(
            qPtr,
            ktAt,
            vPtr + (c0 - s0) * EvPad * 4,
            tilePtr,
            mPtr,
            lPtr,
            accPtr,
            rows,
            c1 - c0,
            E,
            PANEL_LD,
            EvPad,
            r0,
            c0,
            p.shift,
            left,
            right,
            interior ? 0 : 1,
            maskAt,
            maskSl,
            maskSs,
            biasAt,
            biasSl,
            biasSs,
            this.vNonFinite,
          );
          c0 = c1;
        }
      }
      const flagged = ex.finish(accPtr, mPtr, lPtr, accPtr, rows, EvPad, TRUSTED_MAX);
      // Copy out rows (dropping the value padding) and lse = m·ln 2 + log(l) in float64.
      const acc0 = accPtr / 4;
      if (out && EvPad === Ev) out.set(f32.subarray(acc0, acc0 + rows * Ev), (bh * L + r0) * Ev);
      else if (out) {
        for (let r = 0; r < rows; r++) {
          out.set(f32.subarray(acc0 + r * EvPad, acc0 + r * EvPad + Ev), (bh * L + r0 + r) * Ev);
        }
      }
      if (lse) {
        for (let r = 0; r < rows; r++) {
          const m = f32[mPtr / 4 + r];
          lse[bh * L + r0 + r] =
            m === Number.NEGATIVE_INFINITY ? m : m * Math.LN2 + Math.log(f32[lPtr / 4 + r]);
        }
      }
      // Rows float32 could not be trusted with (finish marked them with m = NaN): huge scores, an
      // overflow, or a NaN or ±∞ that reached the output; and without a mask or bias, a row whose max
      // is −∞ though its band is not empty (every score overflowed to −∞; with a mask or bias the module
      // clamps them). The JS tiled kernel recomputes them in float64, so this kernel's answer is the
      // reference's on every input (a rare, row-by-row cost).
      const distrust = (r: number): boolean => {
        const m = f32[mPtr / 4 + r];
        if (Number.isNaN(m)) return true;
        if (m !== Number.NEGATIVE_INFINITY || mask || bias) return false;
        const [lo, hi] = visibleRange(band, r0 + r);
        return lo <= hi;
      };
      let unmasked = 0;
      if (!mask && !bias)
        for (let r = 0; r < rows; r++) if (f32[mPtr / 4 + r] === Number.NEGATIVE_INFINITY) unmasked++;
      for (let r = 0; (flagged > 0 || unmasked > 0) && r < rows; r++) {
        if (!distrust(r)) continue;
        let end = r + 1;
        while (end < rows && distrust(end)) end++;
        flashKernel.forwardRows(float32Of(p), { out, lse }, bh, r0 + r, r0 + end);
        r = end;
      }
    }
  }

  /**
   * `attend`'s pointer and (row, column) strides for a mask or bias at rows r0…, keys c0… of pair (b, h):
   * into the whole copy, or into a tile staged at `ptr` now. Zeros when there is none.
   */
  private viewArgs(
    view: BroadcastView | undefined,
    whole: boolean,
    ptr: number,
    b: number,
    h: number,
    r0: number,
    c0: number,
    rows: number,
    cols: number,
  ): [number, number, number] {
    if (!view) return [0, 0, 0];
    const at = b * view.sb + h * view.sh + r0 * view.sl + c0 * view.ss;
    if (whole) return [ptr + 4 * at, view.sl, view.ss];
    return [ptr, ...this.stageTile(view, at, rows, cols, ptr)];
  }

  /**
   * Copies the [rows, cols] tile of a mask or bias that starts at element `at` of `view.data` to the
   * float index dst/4, densely; returns the tile's (row, column) strides. Axes the view broadcasts
   * (stride 0) stay size 1, so a key-padding mask [B, 1, 1, S] costs one row per tile.
   */
  private stageTile(
    view: BroadcastView,
    at: number,
    rows: number,
    cols: number,
    dst: number,
  ): [number, number] {
    const { data, sl, ss } = view;
    const nr = sl === 0 ? 1 : rows;
    const nc = ss === 0 ? 1 : cols;
    const f32 = this.f32;
    const d = dst / 4;
    for (let r = 0; r < nr; r++) {
      const from = at + r * sl;
      if (ss === 1) f32.set(data.subarray(from, from + nc), d + r * nc);
      else for (let c = 0; c < nc; c++) f32[d + r * nc + c] = data[from + c * ss];
    }
    return [sl === 0 ? 0 : nc, ss === 0 ? 0 : 1];
  }

  /** Copies keys [s0, s1) of k[b, hk] transposed into panels [E, PANEL_LD] and v[b, hk] to [s1 − s0, EvPad], once. */
  private loadKV(
    p: AttentionProblem,
    b: number,
    hk: number,
    s0: number,
    s1: number,
    ktPtr: number,
    vPtr: number,
    EvPad: number,
    k: Float32Array | Uint16Array,
    v: Float32Array | Uint16Array,
  ): void {
    const key = `${b},${hk},${s0},${s1}`;
    if (this.kvKey === key) return; // the same K/V (the next query chunk, or another head of a GQA group)
    this.kvKey = '';
    const { E, Ev } = p;
    const f32 = this.f32;
    const cols = s1 - s0;
    const colsPad = pad(cols, 8);
    const kt = ktPtr / 4;
    const t = p.half ? halfTable() : undefined;
    if (!t) {
      // Straight copies of each run of consecutively stored keys, then the transpose in WASM (JS element
      // loops are the slow part here).
      for (let j = s0; j < s1; ) {
        const n = kvRun(p, b, hk, j, s1);
        const from = kvRow(p, b, hk, j) * E;
        f32.set((k as Float32Array).subarray(from, from + n * E), this.stagePtr / 4 + (j - s0) * E);
        j += n;
      }
      this.exports.transposeK(this.stagePtr, cols, E, ktPtr, COL_BLOCK, PANEL_LD);
    }
    for (let c0 = 0; t && c0 < cols; c0 += COL_BLOCK) {
      const n = Math.min(COL_BLOCK, cols - c0); // keys in this panel; the rest of its row is zero
      const panel = kt + (c0 / COL_BLOCK) * E * PANEL_LD;
      for (let e = 0; e < E; e++) {
        const row = panel + e * PANEL_LD;
        for (let c = 0; c < n; c++) f32[row + c] = t[k[kvRow(p, b, hk, s0 + c0 + c) * E + e]];
        f32.fill(0, row + n, row + PANEL_LD);
      }
    }
    const vv = vPtr / 4;
    if (!t && EvPad === Ev) {
      for (let j = s0; j < s1; ) {
        const n = kvRun(p, b, hk, j, s1);
        const from = kvRow(p, b, hk, j) * Ev;
        f32.set((v as Float32Array).subarray(from, from + n * Ev), vv + (j - s0) * Ev); // rows already padded
        j += n;
      }
    } else {
      for (let c = 0; c < cols; c++) {
        const from = kvRow(p, b, hk, s0 + c) * Ev;
        const to = vv + c * EvPad;
        if (t) for (let e = 0; e < Ev; e++) f32[to + e] = t[v[from + e]];
        else f32.set((v as Float32Array).subarray(from, from + Ev), to);
        f32.fill(0, to + Ev, to + EvPad);
      }
    }
    f32.fill(0, vv + cols * EvPad, vv + colsPad * EvPad);
    this.vNonFinite = this.exports.nonFinite(vPtr, cols * EvPad);
    this.kvKey = key;
  }
}

const drivers = new WeakMap<WasmRuntime, AttentionDriver>();

const widenedProblems = new WeakMap<AttentionProblem, AttentionProblem>();

/** The problem with float32 q, k, v, made once per problem (for the weights pass on float16 inputs). */
function float32Of(p: AttentionProblem): AttentionProblem {
  if (!p.half) return p;
  let w = widenedProblems.get(p);
  if (!w) {
    w = float32Problem(p);
    widenedProblems.set(p, w);
  }
  return w;
}

/** The WASM SIMD kernel; `supports` says why not when the runtime lacks WASM SIMD. */
export const wasmKernel: AttentionKernel = {
  name: 'wasm',
  float16: true,
  supports(p: AttentionProblem): true | string {
    const ok = wasmSupport();
    if (ok !== true) return ok;
    // Exact backward passes and gradient checks ask for float64 scores and log-sum-exp.
    if (p.precision === 'float64') return 'it computes scores in float32; this call asks for float64';
    return true;
  },
  release: releaseWasm,
  backward: wasmBackward,
  forwardRows(p: AttentionProblem, outputs: AttentionOutputs, bh: number, i0: number, i1: number): void {
    if (outputs.out || outputs.lse) {
      withWasm('wasm kernel', (rt) => {
        let driver = drivers.get(rt);
        if (!driver) {
          driver = new AttentionDriver(rt);
          drivers.set(rt, driver);
        }
        driver.run(p, outputs, bh, i0, i1);
      });
    }
    // Weights are an L×S output the caller asked to materialise: the JS tiled kernel writes them in
    // float64 from exact scores (the f32 scores here would cost accuracy on huge logits).
    if (outputs.weights) flashKernel.forwardRows(float32Of(p), { weights: outputs.weights }, bh, i0, i1);
  },
};
