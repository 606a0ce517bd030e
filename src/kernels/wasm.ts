// The WASM SIMD attention kernel: JS drives chunks and copies, assembly/attention.ts runs the inner loops
// in this thread's WASM instance (wasm-runtime.ts); calls of a few rows per head (decode steps) take the
// decode path instead (runDecode, assembly/decode.ts: a GQA group per pass, K/V read as stored, in place
// when a cache keeps them resident). One decision to know: the kernel computes in float32 (its sums
// round, and cancel, as float32's do) and returns nothing worse: rows it cannot be trusted with (huge
// scores, overflow, NaN or ±∞ in the output) are recomputed in float64 by the JS tiled kernel.

import { halfTable } from '../float16.js';
import { flashKernel } from './flash.js';
import {
  EMPTY,
  UNBOUNDED as FLEX_UNBOUNDED,
  type FlexMaskProgram,
  type FlexSpec,
  FULL,
  MaskOp,
  PARTIAL,
  ScoreOp,
} from './flex.js';
import {
  type AttentionKernel,
  type AttentionOutputs,
  type AttentionProblem,
  type BroadcastView,
  float32Problem,
} from './types.js';
import { type Band, classifyBlock, headsOf, kvRow, kvRun, rowsBand, visibleRange } from './visibility.js';
import { wasmBackward } from './wasm-backward.js';
import {
  callId,
  liveView,
  releaseWasm,
  residentAddress,
  type WasmRuntime,
  wasmSupport,
  withWasm,
} from './wasm-runtime.js';

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
    ldv: number,
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
    flex: number,
  ): void;
  finish(out: number, m: number, l: number, acc: number, rows: number, EvPad: number, limit: number): number;
  nonFinite(p: number, n: number): number;
  packQ(src: number, rows: number, E: number, dst: number, s: number): void;
  packV(src: number, cols: number, Ev: number, dst: number, ld: number): void;
  tileBytes(): number;
  transposeK(src: number, cols: number, E: number, dst: number, block: number, ld: number): void;
  decodeTileBytes(): number;
  decodeAttend(
    q: number,
    rowsPad: number,
    E: number,
    k: number,
    ldk: number,
    v: number,
    ldv: number,
    Ev: number,
    EvPad: number,
    n: number,
    j0: number,
    lo: number,
    hi: number,
    m: number,
    l: number,
    acc: number,
    tile: number,
  ): void;
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

/** Most query rows per task (per head) that take the decode path; longer calls take the tiled one. */
const DECODE_ROWS = 4;
/** Most rows of a GQA group the decode path computes in one pass (query heads per key head × rows). */
const DECODE_GROUP_ROWS = 64;

/**
 * Whether rows [i0, i1) take the decode path (runDecode): a call of a few rows (a decode step, a short
 * speculative block), no mask, bias or flex (those run the tiled path, which evaluates them), float32
 * inputs. The call's L decides, not the task's rows: the decode path sums in another order, and the
 * last few rows of a long call split into tasks must come out as the same bits as unsplit.
 */
function decodes(p: AttentionProblem, i0: number, i1: number): boolean {
  const rows = i1 - i0;
  return (
    !p.mask &&
    !p.bias &&
    !p.flex &&
    !p.half &&
    p.L <= DECODE_ROWS &&
    rows <= DECODE_ROWS &&
    (p.Hq / p.Hkv) * rows <= DECODE_GROUP_ROWS
  );
}

const liveProblems = new WeakMap<AttentionProblem, AttentionProblem>();

/**
 * Calls finished on this thread (bumped by the kernel's `release`): part of the decode stash's key, so
 * a problem object run again after its storage changed (a cache appended in place) is recomputed.
 */
let callsDone = 0;

/**
 * The problem with its q/k/v views live: itself, unless q, k or v views resident memory that grew since
 * the views were made (growth detaches them: a KV cache's storage, a multi-head call's projections),
 * then a copy with fresh views (kept per problem until it too goes stale).
 */
function liveProblem(p: AttentionProblem): AttentionProblem {
  const q = liveView(p.q);
  const k = liveView(p.k);
  const v = liveView(p.v);
  if (q === p.q && k === p.k && v === p.v) return p;
  const w = liveProblems.get(p);
  if (w && liveView(w.q) === w.q && liveView(w.k) === w.k && liveView(w.v) === w.v) return w;
  const fresh = { ...p, q, k, v };
  liveProblems.set(p, fresh);
  return fresh;
}

/** The outputs with `out` live (a view of resident memory, re-derived if growth detached it). */
function liveOutputs(outputs: AttentionOutputs): AttentionOutputs {
  const out = outputs.out && liveView(outputs.out);
  return out === outputs.out ? outputs : { ...outputs, out };
}

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
  private flexPtr = 0;
  private stagePtr = 0;
  private vNonFinite = 0; // whether the V in memory holds NaN or ±∞ (attend then never multiplies 0 by it)
  // The decode path's stash: which (call, b, hk, i0, i1) group's rows are in memory, finished, and where.
  private decodeKey = '';
  private calls = -1; // callsDone when the copies above were made
  private decodeAt = { accPtr: 0, mPtr: 0, lPtr: 0, EvPad: 0 };

  constructor(private readonly rt: WasmRuntime) {
    this.exports = rt.exports as unknown as KernelExports;
    this.f32 = rt.f32;
  }

  /** Grows memory to at least `bytes`; forgets its copies if another driver used the memory meanwhile. */
  private ensure(bytes: number): void {
    this.rt.ensure(bytes);
    // Copies are kept within a call only: a problem object run again may view rewritten storage.
    if (!this.rt.claim(this) || this.calls !== callsDone) {
      this.problem = 0;
      this.kvKey = '';
      this.calls = callsDone;
    }
    this.decodeKey = ''; // every layout of this driver starts at base: the decode stash is overwritten
    this.f32 = this.rt.f32;
  }

  run(p: AttentionProblem, outputs: AttentionOutputs, bh: number, i0: number, i1: number): void {
    if (p.flex) {
      this.runFlex(p, p.flex, outputs, bh, i0, i1);
      return;
    }
    if (decodes(p, i0, i1)) {
      this.runDecode(p, outputs, bh, i0, i1);
      return;
    }
    const { L, S, E, Ev, mask, bias } = p;
    // Float16 inputs are widened here, block by block, as they are copied into WASM memory.
    const half = p.half;
    let q = half ? half.q : p.q;
    let k = half ? half.k : p.k;
    let v = half ? half.v : p.v;
    const { b, h, hk } = headsOf(p, bh);
    // The band as data for the module (it evaluates the same rule); masks and biases go separately.
    const band: Band = { S, shift: p.shift, left: p.left, right: p.right };
    const EvPad = pad(Math.max(Ev, 1), 8);
    const budgetCols = Math.max(8, Math.min(pad(S, 8), pad(Math.floor(KV_BUDGET / 4 / (E + EvPad)), 8)));
    const whole = pad(S, 8) <= budgetCols; // K and V of the head are copied once, else streamed per chunk
    // Key columns go to `attend` on a grid fixed by absolute key index, whatever rows a chunk or task
    // holds: each call starts on an 8-key boundary (the module's 4/8-column SIMD groups, hence a row's
    // float summation order, are measured from it; keys before the band there are masked by the band
    // rule) and calls break at multiples of `grid` keys (panel and stream boundaries), so a row's result
    // is the same bits however rows are split. Streamed K/V chunks start on that grid too.
    const kvCols = whole || budgetCols < COL_BLOCK ? budgetCols : budgetCols - (budgetCols % COL_BLOCK);
    const grid = Math.min(kvCols, COL_BLOCK);
    const qBudget = whole ? Q_BUDGET_WHOLE_KV : Q_BUDGET_STREAMED_KV;
    const rowChunk = Math.max(4, Math.min(ROW_CHUNK, Math.floor(qBudget / (16 * E) / 4) * 4));
    const rowsMax = pad(Math.min(rowChunk, i1 - i0), 4);
    // K^T is stored as panels of COL_BLOCK keys, [E, PANEL_LD] each, so one attend call reads 128 KB of
    // contiguous memory (a [E, S] layout spreads a tile over E pages); PANEL_LD = COL_BLOCK + 8 keeps
    // its rows off a power-of-two stride, which would map them onto the same cache sets.
    const panels = Math.ceil(kvCols / COL_BLOCK);

    // Memory map (bytes, 16-aligned), from the module's heap base (> 0, so address 0 can mean "no
    // mask/bias"): mask | bias | K^T [E, ldk] | V [EvPad/8, kvCols, 8] | Q packed [rowsMax, E, 4] | m | l |
    // acc [rowsMax, EvPad] | tile [4, TILE_LD] | stage (keys, values or query rows as copied).
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
    // Keys, values or query rows as copied, before they are transposed or packed.
    const stagePtr = tilePtr + pad(this.exports.tileBytes(), 16);
    this.ensure(stagePtr + Math.max(kvCols * Math.max(E, Ev), rowsMax * E) * 4);
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
    // Q/K/V and the output resident in this memory (a KV cache's storage, a multi-head call's
    // activations) detached if ensure grew it: fresh views.
    const live = liveProblem(p);
    if (!half) [q, k, v] = [live.q, live.k, live.v];
    const { out, lse } = liveOutputs(outputs);
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
      for (let s0 = whole ? 0 : bandLo - (bandLo % grid); bandLo <= bandHi && s0 <= bandHi; s0 += kvCols) {
        const s1 = whole ? S : Math.min(bandHi + 1, s0 + kvCols);
        this.loadKV(p, b, hk, s0, s1, ktPtr, vPtr, kvCols, k, v);
        const end = Math.min(s1, bandHi + 1);
        for (let c0 = Math.max(s0, bandLo - (bandLo % 8)); c0 < end; ) {
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
            vPtr + (c0 - s0) * 32,
            tilePtr,
            mPtr,
            lPtr,
            accPtr,
            rows,
            c1 - c0,
            E,
            PANEL_LD,
            kvCols,
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
            0,
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
        flashKernel.forwardRows(float32Of(live), { out, lse }, bh, r0 + r, r0 + end);
        r = end;
      }
    }
  }

  /**
   * A decode-sized call (see `decodes`): the rows i0 … i1 − 1 of every query head of b's GQA group over key
   * head hk, computed in one pass over the keys by `decodeAttend`, which reads K [S, E] and V [S, Ev] as
   * stored (no transpose): in place when they are resident in this memory (a KV cache's storage), else
   * copied run by run into a stage, in chunks. The group's finished rows stay in memory, so the calls
   * for the group's other heads only copy theirs out (unless another driver used the memory meanwhile).
   */
  private runDecode(
    p: AttentionProblem,
    outputs: AttentionOutputs,
    bh: number,
    i0: number,
    i1: number,
  ): void {
    const { Hq, Hkv, L, S, Ev } = p;
    const G = Hq / Hkv;
    const { b, h, hk } = headsOf(p, bh);
    const rows = i1 - i0;
    const key = `${callsDone},${callId(p)},${b},${hk},${i0},${i1}`;
    const stashed = this.decodeKey === key && this.rt.claim(this);
    if (!stashed) this.decodeGroup(p, b, hk, i0, i1);
    const live = liveProblem(p);
    const { out, lse } = liveOutputs(outputs);
    const { accPtr, mPtr, lPtr, EvPad } = this.decodeAt;
    const f32 = this.f32;
    const band: Band = { S, shift: p.shift, left: p.left, right: p.right };
    for (let r = 0; r < rows; r++) {
      const rr = (h - hk * G) * rows + r; // this head's row r in the group
      const row = bh * L + i0 + r;
      const at = accPtr / 4 + rr * EvPad;
      if (out) out.set(f32.subarray(at, at + Ev), row * Ev);
      const m = f32[mPtr / 4 + rr];
      if (lse) lse[row] = m === Number.NEGATIVE_INFINITY ? m : m * Math.LN2 + Math.log(f32[lPtr / 4 + rr]);
      // As in `run`: rows finish flagged (m = NaN), and rows whose every visible score overflowed to −∞
      // (or was NaN), are recomputed in float64 by the JS tiled kernel.
      let distrust = Number.isNaN(m);
      if (m === Number.NEGATIVE_INFINITY) {
        const [lo, hi] = visibleRange(band, i0 + r);
        distrust = lo <= hi;
      }
      if (distrust) flashKernel.forwardRows(live, { out, lse }, bh, i0 + r, i0 + r + 1);
    }
  }

  /** Computes and finishes the group's rows (see runDecode); leaves them at this.decodeAt. */
  private decodeGroup(p: AttentionProblem, b: number, hk: number, i0: number, i1: number): void {
    const { Hq, Hkv, L, S, E, Ev } = p;
    const G = Hq / Hkv;
    const rows = i1 - i0;
    const R = G * rows;
    const rowsPad = pad(R, 4);
    const EvPad = pad(Math.max(Ev, 1), 8);
    const kAt = residentAddress(p.k, this.rt);
    const vAt = residentAddress(p.v, this.rt);
    const resident = kAt !== undefined && vAt !== undefined;
    const band: Band = { S, shift: p.shift, left: p.left, right: p.right };
    // Keys any row of the group sees.
    let uLo = S;
    let uHi = -1;
    for (let r = 0; r < rows; r++) {
      const [lo, hi] = visibleRange(band, i0 + r);
      if (lo <= hi) [uLo, uHi] = [Math.min(uLo, lo), Math.max(uHi, hi)];
    }
    // Keys per staged chunk when K and V are copied (at most KV_BUDGET bytes of them).
    const chunk = resident ? 0 : Math.max(8, Math.min(uHi - uLo + 1, Math.floor(KV_BUDGET / 4 / (E + Ev))));

    // Memory map (bytes, 16-aligned, from base): q [rowsPad, E] | lo, hi i32 [rowsPad] | m, l [rowsPad] |
    // acc [rowsPad, EvPad] | tile | K stage [chunk, E] | V stage [chunk, Ev] (the stages only when copied).
    const qPtr = this.rt.base;
    const loPtr = qPtr + pad(rowsPad * E * 4, 16);
    const hiPtr = loPtr + rowsPad * 4;
    const mPtr = hiPtr + rowsPad * 4;
    const lPtr = mPtr + rowsPad * 4;
    const accPtr = lPtr + rowsPad * 4;
    const tilePtr = accPtr + rowsPad * EvPad * 4;
    const kStage = tilePtr + pad(this.exports.decodeTileBytes(), 16);
    const vStage = kStage + pad(chunk * E * 4, 16);
    this.ensure(vStage + chunk * Ev * 4);
    this.problem = 0; // the normal path's copies (mask, K/V) were overwritten
    this.kvKey = '';
    const live = liveProblem(p);
    const f32 = this.f32;
    const i32 = new Int32Array(f32.buffer);
    const ex = this.exports;

    // Query rows of the group's heads, times scale·log2 e (scores in log2 units); pad rows are 0 and
    // copy row 0's band (so they never narrow the keys every row of a group of 4 sees).
    const qScale = p.scale * Math.LOG2E;
    f32.fill(0, qPtr / 4, qPtr / 4 + rowsPad * E);
    for (let g = 0; g < G; g++) {
      for (let r = 0; r < rows; r++) {
        const from = ((b * Hq + hk * G + g) * L + i0 + r) * E;
        const to = qPtr / 4 + (g * rows + r) * E;
        for (let e = 0; e < E; e++) f32[to + e] = live.q[from + e] * qScale;
      }
    }
    for (let rr = 0; rr < rowsPad; rr++) {
      const [lo, hi] = visibleRange(band, i0 + (rr < R ? rr % rows : 0));
      i32[loPtr / 4 + rr] = lo;
      i32[hiPtr / 4 + rr] = hi;
    }
    ex.reset(mPtr, lPtr, accPtr, rowsPad, EvPad);
    const attend = (kPtr: number, vPtr: number, n: number, j0: number) =>
      ex.decodeAttend(
        qPtr,
        rowsPad,
        E,
        kPtr,
        E,
        vPtr,
        Ev,
        Ev,
        EvPad,
        n,
        j0,
        loPtr,
        hiPtr,
        mPtr,
        lPtr,
        accPtr,
        tilePtr,
      );
    if (resident) {
      // Straight from the storage, run by run of consecutively stored keys (a ring's wrap, a page).
      for (let j = uLo; j <= uHi; ) {
        const n = kvRun(live, b, hk, j, uHi + 1);
        const row = kvRow(live, b, hk, j);
        attend(kAt + row * E * 4, vAt + row * Ev * 4, n, j);
        j += n;
      }
    } else {
      for (let s0 = uLo; s0 <= uHi; s0 += chunk) {
        const s1 = Math.min(uHi + 1, s0 + chunk);
        for (let j = s0; j < s1; ) {
          const n = kvRun(live, b, hk, j, s1);
          const row = kvRow(live, b, hk, j);
          f32.set(live.k.subarray(row * E, (row + n) * E), kStage / 4 + (j - s0) * E);
          f32.set(live.v.subarray(row * Ev, (row + n) * Ev), vStage / 4 + (j - s0) * Ev);
          j += n;
        }
        attend(kStage, vStage, s1 - s0, s0);
      }
    }
    ex.finish(accPtr, mPtr, lPtr, accPtr, R, EvPad, TRUSTED_MAX);
    this.decodeAt = { accPtr, mPtr, lPtr, EvPad };
    this.decodeKey = `${callsDone},${callId(p)},${b},${hk},${i0},${i1}`;
  }

  /**
   * A flex call (see kernels/flex.ts): query rows go by query block (a chunk holds whole blocks, each
   * packed from a 4-row boundary, so `attend` runs one block's rows at a time) and each block only
   * meets its non-empty key blocks, runs of consecutive blocks of one kind merged into one `attend`
   * call per K^T panel. Full blocks run as interior tiles (no per-key test); partial ones test the
   * mask program in WASM, except its DIFF terms ANDed at the root, which become the band (so a causal
   * or sliding-window mask runs the band path of scaledDotProductAttention). A score program runs on
   * every non-empty tile.
   */
  private runFlex(
    p: AttentionProblem,
    f: FlexSpec,
    outputs: AttentionOutputs,
    bh: number,
    i0: number,
    i1: number,
  ): void {
    const { L, S, E, Ev, mask, bias } = p;
    const half = p.half;
    let q = half ? half.q : p.q;
    let k = half ? half.k : p.k;
    let v = half ? half.v : p.v;
    const { b, h, hk } = headsOf(p, bh);
    const plan = f.mask ? (maskPlanOf(f.maskProgram!) as MaskPlan) : undefined;
    const sprog = f.score ? f.scoreProgram : undefined;
    // Bands relative to each query (shift 0): the problem's own on full tiles; on partial tiles also
    // the mask program's DIFF terms (a full tile skips the mask mod, whatever its block mask says).
    const fullBand: Band = { S, shift: 0, left: p.left - p.shift, right: p.right + p.shift };
    const partBand: Band = plan
      ? { S, shift: 0, left: Math.min(fullBand.left, plan.left), right: Math.min(fullBand.right, plan.right) }
      : fullBand;
    // Tile kinds; without a block mask, one block of every row and key.
    const bl = f.blocks;
    const qBlock = bl ? bl.qBlock : Math.max(L, 1);
    const kvBlock = bl ? bl.kvBlock : Math.max(S, 1);
    const nk = bl ? bl.nk : 1;
    const kindBase = bl ? b * bl.sb + h * bl.sh : 0;
    const noBlocks = f.mask ? PARTIAL : FULL;

    const EvPad = pad(Math.max(Ev, 1), 8);
    const kvCols = Math.max(8, Math.min(pad(S, 8), pad(Math.floor(KV_BUDGET / 4 / (E + EvPad)), 8)));
    const whole = pad(S, 8) <= kvCols;
    const qBudget = whole ? Q_BUDGET_WHOLE_KV : Q_BUDGET_STREAMED_KV;
    const rowChunk = Math.max(4, Math.min(ROW_CHUNK, Math.floor(qBudget / (16 * E) / 4) * 4));
    // Packed rows per chunk: each query block's rows start on a 4-row boundary (≤ 3 padding rows each).
    const rowsMax = Math.min(rowChunk, pad(i1 - i0, 4) + 4 * (Math.ceil((i1 - i0) / qBlock) + 1));
    const panels = Math.ceil(kvCols / COL_BLOCK);

    // Memory map: as `run`, plus the flex data (mask program, document ids, score program, its floats)
    // after the mask and bias, and the program's stack rows and two descriptors after the score tile.
    const ex = this.exports;
    const base = this.rt.base;
    const tileViewBytes = pad(rowsMax * COL_BLOCK * 4, 16);
    const maskWhole = !!mask && mask.data.length * 4 <= WHOLE_VIEW_BYTES;
    const biasWhole = !!bias && bias.data.length * 4 <= WHOLE_VIEW_BYTES;
    const maskBytes = mask ? (maskWhole ? pad(mask.data.length * 4, 16) : tileViewBytes) : 0;
    const biasBytes = bias ? (biasWhole ? pad(bias.data.length * 4, 16) : tileViewBytes) : 0;
    const progOps = plan ? plan.ops : NO_INTS;
    const ints = plan ? f.maskProgram!.ints : NO_INTS;
    const scoreOps = sprog ? sprog.ops : NO_INTS;
    const floats = sprog ? sprog.floats : NO_FLOATS;
    const flexPtr = base + maskBytes + biasBytes;
    const intsPtr = flexPtr + pad(progOps.length * 4, 16);
    const scorePtr = intsPtr + pad((ints.length + 8) * 4, 16); // ids padded: see flexRow's SAME_DOC
    const floatsPtr = scorePtr + pad(scoreOps.length * 4, 16);
    const ktPtr = floatsPtr + pad(floats.length * 4, 16);
    const vPtr = ktPtr + panels * E * PANEL_LD * 4;
    const qPtr = vPtr + kvCols * EvPad * 4;
    const mPtr = qPtr + rowsMax * E * 16;
    const lPtr = mPtr + rowsMax * 4;
    const accPtr = lPtr + rowsMax * 4;
    const tilePtr = accPtr + rowsMax * EvPad * 4;
    const tileBytes = ex.tileBytes();
    const stackPtr = tilePtr + pad(tileBytes, 16);
    const descPtr = stackPtr + Math.max(1, plan ? plan.depth : 0) * pad(tileBytes / 4, 16);
    const stagePtr = descPtr + 64;
    this.ensure(stagePtr + Math.max(kvCols * Math.max(E, Ev), rowsMax * E) * 4);
    this.stagePtr = stagePtr;
    const i32 = new Int32Array(this.f32.buffer);
    if (
      this.problem !== callId(p) ||
      this.maskPtr !== base ||
      this.biasPtr !== base + maskBytes ||
      this.flexPtr !== flexPtr
    ) {
      this.problem = callId(p);
      this.kvKey = '';
      this.maskPtr = base;
      this.biasPtr = base + maskBytes;
      this.flexPtr = flexPtr;
      this.maskWhole = maskWhole;
      this.biasWhole = biasWhole;
      if (mask && maskWhole) this.f32.set(mask.data, this.maskPtr / 4);
      if (bias && biasWhole) this.f32.set(bias.data, this.biasPtr / 4);
      i32.set(progOps, flexPtr / 4);
      i32.set(ints, intsPtr / 4);
      i32.fill(0, intsPtr / 4 + ints.length, intsPtr / 4 + ints.length + 8);
      i32.set(scoreOps, scorePtr / 4);
      this.f32.set(floats, floatsPtr / 4);
    }
    const live = liveProblem(p);
    if (!half) [q, k, v] = [live.q, live.k, live.v];
    const { out, lse } = liveOutputs(outputs);
    // Descriptors (flexRow): full tiles run the score program only, partial ones the mask program too.
    const nScore = scoreOps.length / 4;
    const nProg = progOps.length / 3;
    i32.set([0, 0, intsPtr, stackPtr, scorePtr, nScore, floatsPtr, h], descPtr / 4);
    i32.set([flexPtr, nProg, intsPtr, stackPtr, scorePtr, nScore, floatsPtr, h], descPtr / 4 + 8);
    const descFull = nScore > 0 ? descPtr : 0;
    const descPart = nScore > 0 || nProg > 0 ? descPtr + 32 : 0;
    const f32 = this.f32;
    const qScale = p.scale * Math.LOG2E;
    const cap = (x: number) => Math.max(-UNBOUNDED, Math.min(x, UNBOUNDED));

    for (let r = i0; r < i1; ) {
      // The chunk: whole query blocks (the first and last may be cut by i0, i1), ≤ rowsMax packed rows.
      const segs: Segment[] = [];
      let packed = 0;
      while (r < i1 && packed < rowsMax) {
        const qb = Math.floor(r / qBlock);
        let end = Math.min(i1, (qb + 1) * qBlock);
        if (end - r > rowsMax - packed) {
          if (segs.length > 0) break;
          end = r + rowsMax; // a query block longer than a chunk: its rows in several chunks
        }
        segs.push({ a: r, b: end, po: packed, qb, runs: [] });
        packed += pad(end - r, 4);
        r = end;
      }
      const r0 = segs[0].a;
      const rows = segs[segs.length - 1].b - r0;
      const qFrom = (bh * L + r0) * E;
      const stage = stagePtr / 4;
      if (half) {
        const t = halfTable();
        for (let x = 0; x < rows * E; x++) f32[stage + x] = t[q[qFrom + x]];
      } else f32.set((q as Float32Array).subarray(qFrom, qFrom + rows * E), stage);
      for (const seg of segs) {
        ex.packQ(stagePtr + (seg.a - r0) * E * 4, seg.b - seg.a, E, qPtr + seg.po * E * 16, qScale);
      }
      ex.reset(mPtr, lPtr, accPtr, packed, EvPad);

      // Each block's runs of non-empty key blocks, clipped to its band.
      let runEnd = 0;
      for (const seg of segs) {
        const full = rowsBand(fullBand, seg.a, seg.b);
        const part = plan ? rowsBand(partBand, seg.a, seg.b) : full;
        let prev: Run | undefined;
        for (let kb = 0; kb < nk; kb++) {
          const kind = bl ? bl.kinds[kindBase + seg.qb * nk + kb] : noBlocks;
          if (kind === EMPTY) continue;
          const band = kind === FULL ? fullBand : partBand;
          if (band.left + band.right < 0) continue; // the band is empty: no row sees a key
          const rb = kind === FULL ? full : part;
          const c0 = Math.max(kb * kvBlock, rb.lo);
          const c1 = Math.min(S, (kb + 1) * kvBlock, rb.hi + 1);
          if (c0 >= c1) continue;
          if (prev && prev.kind === kind && prev.c1 === c0) {
            prev.c1 = c1;
          } else {
            const desc = kind === FULL ? descFull : descPart;
            prev = {
              kind,
              c0,
              c1,
              band,
              innerLo: rb.innerLo,
              innerHi: rb.innerHi,
              left: cap(band.left),
              right: cap(band.right),
              desc,
              unclamped: !mask && !bias && desc === 0,
            };
            seg.runs.push(prev);
          }
          runEnd = Math.max(runEnd, c1);
        }
      }

      // K and V: the whole head once, or streamed in chunks over the keys some run needs.
      for (let next = nextKey(segs, 0); next >= 0; ) {
        const from = whole ? 0 : next;
        const s1 = whole ? S : Math.min(runEnd, next + kvCols);
        next = whole ? -1 : nextKey(segs, s1);
        this.loadKV(p, b, hk, from, s1, ktPtr, vPtr, kvCols, k, v);
        for (const seg of segs) {
          const n = seg.b - seg.a;
          for (const run of seg.runs) {
            const end = Math.min(run.c1, s1);
            for (let c0 = Math.max(run.c0, from); c0 < end; ) {
              const panel = Math.floor((c0 - from) / COL_BLOCK);
              const c1 = Math.min(end, from + (panel + 1) * COL_BLOCK); // never past the panel
              const ktAt = ktPtr + (panel * E * PANEL_LD + (c0 - from - panel * COL_BLOCK)) * 4;
              const [maskAt, maskSl, maskSs] = this.viewArgs(
                mask,
                this.maskWhole,
                this.maskPtr,
                b,
                h,
                seg.a,
                c0,
                n,
                c1 - c0,
              );
              const [biasAt, biasSl, biasSs] = this.viewArgs(
                bias,
                this.biasWhole,
                this.biasPtr,
                b,
                h,
                seg.a,
                c0,
                n,
                c1 - c0,
              );
              ex.attend(
                qPtr + seg.po * E * 16,
                ktAt,
                vPtr + (c0 - from) * 32,
                tilePtr,
                mPtr + seg.po * 4,
                lPtr + seg.po * 4,
                accPtr + seg.po * EvPad * 4,
                n,
                c1 - c0,
                E,
                PANEL_LD,
                kvCols,
                EvPad,
                seg.a,
                c0,
                0,
                run.left,
                run.right,
                c0 >= run.innerLo && c1 - 1 <= run.innerHi ? 0 : 1,
                maskAt,
                maskSl,
                maskSs,
                biasAt,
                biasSl,
                biasSs,
                this.vNonFinite,
                run.desc,
              );
              c0 = c1;
            }
          }
        }
      }

      const flagged = ex.finish(accPtr, mPtr, lPtr, accPtr, packed, EvPad, TRUSTED_MAX);
      const m0 = mPtr / 4;
      for (const seg of segs) {
        const n = seg.b - seg.a;
        const acc0 = accPtr / 4 + seg.po * EvPad;
        if (out && EvPad === Ev) out.set(f32.subarray(acc0, acc0 + n * Ev), (bh * L + seg.a) * Ev);
        else if (out) {
          for (let x = 0; x < n; x++) {
            out.set(f32.subarray(acc0 + x * EvPad, acc0 + x * EvPad + Ev), (bh * L + seg.a + x) * Ev);
          }
        }
        if (lse) {
          for (let x = 0; x < n; x++) {
            const m = f32[m0 + seg.po + x];
            lse[bh * L + seg.a + x] =
              m === Number.NEGATIVE_INFINITY ? m : m * Math.LN2 + Math.log(f32[lPtr / 4 + seg.po + x]);
          }
        }
      }
      // Rows float32 could not be trusted with (as in `run`), recomputed by the JS tiled kernel: those
      // finish flagged, and those that saw nothing though a tile that does not clamp overflows (full
      // tiles, band-only tiles) had keys for them: every score overflowed to −∞. A row that saw nothing
      // on tiles that clamp is legitimately blocked (zeros, lse −∞).
      for (const seg of segs) {
        const distrust = (x: number): boolean => {
          const m = f32[m0 + seg.po + x];
          if (Number.isNaN(m)) return true;
          return m === Number.NEGATIVE_INFINITY && seesUnclamped(seg, seg.a + x);
        };
        const n = seg.b - seg.a;
        const any = flagged > 0 || seg.runs.some((run) => run.unclamped);
        for (let x = 0; any && x < n; x++) {
          if (!distrust(x)) continue;
          let end = x + 1;
          while (end < n && distrust(end)) end++;
          flashKernel.forwardRows(float32Of(live), { out, lse }, bh, seg.a + x, seg.a + end);
          x = end;
        }
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

  /**
   * Copies keys [s0, s1) of k[b, hk] transposed into panels [E, PANEL_LD], and their values v[b, hk] into
   * panels of 8 value columns [EvPad/8, ldv, 8] (see the module's packV), once.
   */
  private loadKV(
    p: AttentionProblem,
    b: number,
    hk: number,
    s0: number,
    s1: number,
    ktPtr: number,
    vPtr: number,
    ldv: number,
    k: Float32Array | Uint16Array,
    v: Float32Array | Uint16Array,
  ): void {
    // The same K/V (the next query chunk, or another head of a GQA group) at the same place: a call with
    // another row count may move ktPtr and vPtr (a mask or bias tile is sized by the call's rows).
    const key = `${b},${hk},${s0},${s1},${ktPtr},${vPtr},${ldv}`;
    if (this.kvKey === key) return;
    this.kvKey = '';
    const { E, Ev } = p;
    const f32 = this.f32;
    const cols = s1 - s0;
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
    // Values: rows copied (or widened) into the stage as stored, checked for NaN/±∞, then packed in WASM.
    const stage = this.stagePtr / 4;
    for (let j = s0; j < s1; ) {
      const n = t ? 1 : kvRun(p, b, hk, j, s1);
      const from = kvRow(p, b, hk, j) * Ev;
      const to = stage + (j - s0) * Ev;
      if (t) for (let e = 0; e < Ev; e++) f32[to + e] = t[v[from + e]];
      else f32.set((v as Float32Array).subarray(from, from + n * Ev), to);
      j += n;
    }
    this.vNonFinite = this.exports.nonFinite(this.stagePtr, cols * Ev);
    this.exports.packV(this.stagePtr, cols, Ev, vPtr, ldv);
    this.kvKey = key;
  }
}

/** The rows of one query block in a chunk: [a, b), packed from row `po`, and its runs of key blocks. */
interface Segment {
  a: number;
  b: number;
  po: number;
  qb: number;
  runs: Run[];
}

/** Keys [c0, c1) of one kind for a segment, with the band and flex descriptor `attend` gets for them. */
interface Run {
  kind: number;
  c0: number;
  c1: number;
  band: Band;
  innerLo: number;
  innerHi: number;
  left: number;
  right: number;
  desc: number;
  /** Run without any per-key pass (no mask, bias or flex descriptor): overflows to −∞ stay −∞. */
  unclamped: boolean;
}

const NO_INTS = new Int32Array(0);
const NO_FLOATS = new Float32Array(0);

/** The first key ≥ from that some run of the chunk needs, or −1. */
function nextKey(segs: Segment[], from: number): number {
  let best = -1;
  for (const seg of segs) {
    for (const run of seg.runs) {
      if (run.c1 <= from) continue;
      const c = Math.max(run.c0, from);
      if (best < 0 || c < best) best = c;
    }
  }
  return best;
}

/** Whether query i sees a key of a run that does not clamp overflowed scores. */
function seesUnclamped(seg: Segment, i: number): boolean {
  for (const run of seg.runs) {
    if (!run.unclamped) continue;
    const [lo, hi] = visibleRange(run.band, i);
    if (Math.max(lo, run.c0) <= Math.min(hi, run.c1 - 1)) return true;
  }
  return false;
}

/**
 * A mask program as the WASM kernel runs it: its DIFF terms ANDed at the root as a band relative to
 * the query (key j visible iff i − left ≤ j ≤ i + right), the other terms as a program (postfix, ANDed;
 * empty when nothing is left), with the stack depth it needs.
 */
interface MaskPlan {
  left: number;
  right: number;
  ops: Int32Array;
  depth: number;
}

interface MaskNode {
  op: number;
  a: number;
  b: number;
  kids?: [MaskNode, MaskNode];
}

const maskPlans = new WeakMap<FlexMaskProgram, MaskPlan | string>();

/** The kernel's plan of a mask program (cached per program), or why it cannot run it. */
function maskPlanOf(p: FlexMaskProgram): MaskPlan | string {
  let plan = maskPlans.get(p);
  if (plan === undefined) {
    plan = planMask(p);
    maskPlans.set(p, plan);
  }
  return plan;
}

function planMask(p: FlexMaskProgram): MaskPlan | string {
  const { ops } = p;
  if (ops.length % 3 !== 0) return `its program has ${ops.length} numbers, not triplets`;
  const stack: MaskNode[] = [];
  for (let x = 0; x < ops.length; x += 3) {
    const op = ops[x];
    if (op === MaskOp.AND || op === MaskOp.OR) {
      if (stack.length < 2) return `its program's instruction ${x / 3} pops an empty stack`;
      const y = stack.pop()!;
      const z = stack.pop()!;
      stack.push({ op, a: 0, b: 0, kids: [z, y] });
    } else if (op === MaskOp.TRUE || op === MaskOp.DIFF || op === MaskOp.KV_BELOW || op === MaskOp.SAME_DOC) {
      stack.push({ op, a: ops[x + 1], b: ops[x + 2] });
    } else return `its program has an unknown opcode ${op}`;
  }
  const root = stack.pop() ?? { op: MaskOp.TRUE, a: 0, b: 0 };
  const terms: MaskNode[] = [];
  const conjuncts = (n: MaskNode): void => {
    if (n.op === MaskOp.AND && n.kids) {
      conjuncts(n.kids[0]);
      conjuncts(n.kids[1]);
    } else terms.push(n);
  };
  conjuncts(root);
  let left = Number.POSITIVE_INFINITY;
  let right = Number.POSITIVE_INFINITY;
  const rest: number[] = [];
  const emit = (n: MaskNode): void => {
    if (n.kids) {
      emit(n.kids[0]);
      emit(n.kids[1]);
    }
    rest.push(n.op, n.a, n.b);
  };
  for (const n of terms) {
    if (n.op === MaskOp.TRUE) continue;
    if (n.op === MaskOp.DIFF) {
      // a ≤ i − j ≤ b ⇔ i − b ≤ j ≤ i − a
      if (n.b < FLEX_UNBOUNDED) left = Math.min(left, n.b);
      if (n.a > -FLEX_UNBOUNDED) right = Math.min(right, -n.a);
      continue;
    }
    const first = rest.length === 0;
    emit(n);
    if (!first) rest.push(MaskOp.AND, 0, 0);
  }
  let depth = 0;
  let sp = 0;
  for (let x = 0; x < rest.length; x += 3) {
    sp += rest[x] === MaskOp.AND || rest[x] === MaskOp.OR ? -1 : 1;
    depth = Math.max(depth, sp);
  }
  return { left, right, ops: Int32Array.from(rest), depth };
}

/** Why the WASM kernel cannot run this flex problem's mods, or true. */
function flexSupport(p: AttentionProblem, f: FlexSpec): true | string {
  const js = "is a JS function: it runs on the JS kernels ('flash', 'reference')";
  if (f.mask && !f.maskProgram) return `maskMod ${f.maskName} ${js}`;
  if (f.score && !f.scoreProgram) return `scoreMod ${f.scoreName} ${js}`;
  if (f.mask) {
    const prog = f.maskProgram!;
    const plan = maskPlanOf(prog);
    if (typeof plan === 'string') return `maskMod ${f.maskName}: ${plan}`;
    const { ops, ints } = prog;
    for (let x = 0; x < ops.length; x += 3) {
      if (
        ops[x] === MaskOp.SAME_DOC &&
        !(ops[x + 1] >= 0 && ops[x + 1] + Math.max(p.L, p.S) <= ints.length)
      ) {
        return `maskMod ${f.maskName}: its document ids do not cover the ${Math.max(p.L, p.S)} positions of this call`;
      }
    }
  }
  if (f.score) {
    const { ops, floats } = f.scoreProgram!;
    if (ops.length % 4 !== 0)
      return `scoreMod ${f.scoreName}: its program has ${ops.length} numbers, not quads`;
    for (let x = 0; x < ops.length; x += 4) {
      const [op, a, b, c] = [ops[x], ops[x + 1], ops[x + 2], ops[x + 3]];
      const need =
        op === ScoreOp.ALIBI
          ? a + p.Hq
          : op === ScoreOp.SOFTCAP
            ? a + 1
            : op === ScoreOp.REL_BIAS && b >= 0
              ? a + (c > 1 ? p.Hq : 1) * (2 * b + 1)
              : Number.NaN;
      if (Number.isNaN(need)) return `scoreMod ${f.scoreName}: its program has an unknown opcode ${op}`;
      if (a < 0 || need > floats.length) {
        return `scoreMod ${f.scoreName}: its program reads past its ${floats.length} numbers`;
      }
    }
  }
  return true;
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
    // q is scaled by scale·log2 e in float32: a factor float32 holds only as a subnormal loses its digits.
    // (A scale of exactly 0 is exact: every score is 0.)
    if (p.scale !== 0 && !(Math.abs(Math.fround(p.scale * Math.LOG2E)) >= 2 ** -126)) {
      return `its float32 scale·log2 e (${p.scale} · log2 e) would be subnormal or 0 and lose digits`;
    }
    if (p.flex) return flexSupport(p, p.flex);
    return true;
  },
  release(): void {
    callsDone++;
    releaseWasm();
  },
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
    if (outputs.weights) {
      flashKernel.forwardRows(float32Of(liveProblem(p)), { weights: outputs.weights }, bh, i0, i1);
    }
  },
};
