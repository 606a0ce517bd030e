// The WASM SIMD attention backward (FlashAttention-2): JS copies a task's q, k, v, dO into this thread's
// WASM instance and walks key blocks × query tiles; assembly/attention-backward.ts runs each tile.
// One decision to know: it serves float32 problems only, and a task it cannot trust to float32 (NaN or ±∞
// inputs, |lse| past ~2800, sums that could overflow) runs on the float64 JS flash backward instead.

import { flashBackward } from './backward-flash.js';
import {
  type AttentionBackward,
  type AttentionGrads,
  type BackwardInputs,
  type BackwardProblem,
  type BroadcastView,
  type Floats,
  KernelResourceError,
} from './types.js';
import { classifyBlock, kvRow, kvRun } from './visibility.js';
import { callId, releaseWasm, type WasmRuntime, wasmSupport, withWasm } from './wasm-runtime.js';

/** The backward half of the module's exports (assembly/attention-backward.ts, and transposeK). */
interface BackwardExports {
  bwdBlockKeys(): number;
  bwdTileRows(): number;
  bwdTile(
    q: number,
    qs: number,
    dO64: number,
    dO: number,
    lse: number,
    D: number,
    dq: number,
    kt: number,
    vt: number,
    k: number,
    dk: number,
    dv: number,
    P: number,
    dS: number,
    rows: number,
    cols: number,
    E: number,
    EPad: number,
    Ev: number,
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
  ): void;
  bwdMaxAbs(p: number, n: number): number;
  bwdAbove(p: number, n: number, limit: number): number;
  bwdTranspose(src: number, rows: number, n: number, dst: number): void;
  bwdTransposeWiden(src: number, rows: number, n: number, dst: number): void;
  bwdWiden(src: number, rows: number, n: number, dst64: number, dst32: number, nPad: number): void;
  bwdMaxAbs64(p: number, n: number): number;
  bwdCopyRows(src: number, rows: number, n: number, dst: number, nPad: number): void;
  bwdJoin(src: number, n: number, dst: number): void;
  bwdScale(p: number, n: number, s: number): void;
  bwdMaxRowNorm(p: number, rows: number, n: number): number;
}

const UNBOUNDED = 1 << 30;
/**
 * Largest |lse| (natural units) trusted to float32: past it a score's rounding (|s|·2⁻²⁴) costs P more
 * than 1.7e-4 relative (the forward's TRUSTED_MAX of 4096 log2 units). Ordinary scores stay below ~100.
 */
const TRUSTED_LSE = 4096 * Math.LN2;
/** Bound on every float32 sum of the task (scores, dP, dS, dQ, dK, dV): well inside float32's 3.4e38. */
const SUM_LIMIT = 1e36;
/** A bias above this (or NaN) sends the task to the float64 kernel: its rows' lse would be past TRUSTED_LSE. */
const BIAS_LIMIT = 1e30;
/** A mask or bias up to this size is copied whole, once per call; a larger one tile by tile. */
const WHOLE_VIEW_BYTES = 4 << 20;

const pad = (n: number, m: number) => Math.ceil(n / m) * m;

/** One thread's backward driver: lays out a task's buffers in its WASM instance, keeps a call's mask/bias. */
class BackwardDriver {
  private readonly ex: BackwardExports;
  private readonly BC: number;
  private readonly BR: number;
  private f32: Float32Array;
  // Whose mask/bias sit whole in memory: the call's callId (0: none), so its tensors are not kept alive.
  private problem = 0;
  private maskWhole = false;
  private biasWhole = false;
  private biasBad = false; // the whole bias holds a NaN or a value above BIAS_LIMIT

  constructor(private readonly rt: WasmRuntime) {
    this.ex = rt.exports as unknown as BackwardExports;
    this.BC = this.ex.bwdBlockKeys();
    this.BR = this.ex.bwdTileRows();
    this.f32 = rt.f32;
  }

  /**
   * Task `bkv` (see AttentionBackward). Returns false, having written nothing, when the task must run
   * on the float64 kernel instead (a non-finite input, huge scores, sums that could overflow float32).
   */
  run(p: BackwardProblem, inputs: BackwardInputs, grads: AttentionGrads, bkv: number): boolean {
    const { Hq, Hkv, L, S, E, Ev, q, k, v, scale, mask, bias } = p;
    const { dOut } = inputs;
    const out = inputs.out!;
    const lse = inputs.lse!;
    const { BC, BR } = this;
    const G = Hq / Hkv;
    const b = Math.floor(bkv / Hkv);
    const hk = bkv % Hkv;
    const h0 = hk * G;
    const firstRow = (b * Hq + h0) * L; // the group's rows are contiguous in q, dOut, out and lse

    // lse must be finite or −∞ (a row that sees nothing) and small enough for float32 scores; D_i =
    // rowsum(dO∘O) in float64 is finite exactly when every dO and O of the row is (0·∞ is NaN).
    const Dg = new Float64Array(G * L);
    let dMax = 0;
    for (let r = 0; r < G * L; r++) {
      const m = lse[firstRow + r];
      if (m !== Number.NEGATIVE_INFINITY && !(Math.abs(m) <= TRUSTED_LSE)) return false;
      let d = 0;
      const o = (firstRow + r) * Ev;
      for (let e = 0; e < Ev; e++) d += dOut[o + e] * out[o + e];
      if (!Number.isFinite(d)) return false;
      Dg[r] = d;
      dMax = Math.max(dMax, Math.abs(d));
    }

    // Memory map (bytes, 16-aligned, from the instance's base): mask | bias | q, qs [G·Lp, EP] (qs =
    // q·scale·log2 e) | dO64 [G·Lp, Ev] | dO [G·Lp, EvP] | lse, D [G·Lp] | dq [G·Lp, EP] | kᵀ panels
    // [nB, E, BC] | vᵀ panels [nB, Ev, BC] | k [Sp, EP] | dk [Sp, EP] | dv [Sp, EvP] | P, dS [BR, BC] |
    // stage (rows as copied). f64: dO64, lse, D and the vᵀ panels (dP is summed in f64); f32 else.
    // Everything is written through the f32 view and widened in WASM (no float64 view of the memory).
    // Each head's rows are padded to Lp (padding rows: lse −∞, so they contribute nothing).
    const Lp = pad(L, 4);
    const EP = pad(E, 8);
    const EvP = pad(Ev, 8);
    const nB = Math.ceil(S / BC);
    const Sp = nB * BC;
    const GL = G * Lp;
    const tileFloats = BR * BC;
    const maskWhole = !!mask && mask.data.length * 4 <= WHOLE_VIEW_BYTES;
    const biasWhole = !!bias && bias.data.length * 4 <= WHOLE_VIEW_BYTES;
    const maskFloats = mask ? (maskWhole ? mask.data.length : tileFloats) : 0;
    const biasFloats = bias ? (biasWhole ? bias.data.length : tileFloats) : 0;
    const at: Record<string, number> = {};
    let end = this.rt.base;
    for (const [name, bytes] of [
      ['mask', 4 * maskFloats],
      ['bias', 4 * biasFloats],
      ['q', 4 * GL * EP],
      ['qs', 4 * GL * EP],
      ['dO64', 8 * GL * Ev],
      ['dO', 4 * GL * EvP],
      ['lse', 8 * GL],
      ['D', 8 * GL],
      ['dq', 4 * GL * EP],
      ['kt', 4 * nB * E * BC],
      ['vt', 8 * nB * Ev * BC],
      ['k', 4 * Sp * EP],
      ['dk', 4 * Sp * EP],
      ['dv', 4 * Sp * EvP],
      ['P', 4 * tileFloats],
      ['dS', 4 * tileFloats],
      ['stage', 4 * Math.max(Math.max(L, S) * Math.max(E, Ev, 1), 2 * GL)],
    ] as const) {
      at[name] = end;
      end += pad(bytes, 16);
    }
    this.rt.ensure(end);
    if (!this.rt.claim(this)) this.problem = 0;
    this.f32 = this.rt.f32;
    const f32 = this.f32;
    const ex = this.ex;

    if (this.problem !== callId(p)) {
      // Small masks and biases are copied as given (broadcast axes stay size 1), once per call.
      this.problem = 0;
      this.maskWhole = maskWhole;
      this.biasWhole = biasWhole;
      this.biasBad = false;
      if (mask && maskWhole) f32.set(mask.data, at.mask / 4);
      if (bias && biasWhole) {
        f32.set(bias.data, at.bias / 4);
        this.biasBad = ex.bwdAbove(at.bias, bias.data.length, BIAS_LIMIT) !== 0;
      }
      this.problem = callId(p);
    }
    if (bias && (biasWhole ? this.biasBad : biasSliceBad(bias, b, h0, G, L, S))) return false;

    // q and dO of each head, as float32 in the stage, then copied with rows padded to EP / EvP (padding
    // rows 0), dO widened to f64 too; lse (log2 units, −∞ on padding rows) and D in f64, sent as f32 pairs.
    const stage = at.stage;
    const st = stage / 4;
    const zero = (ptr: number, bytes: number) => f32.fill(0, ptr / 4, (ptr + bytes) / 4);
    for (let g = 0; g < G; g++) {
      const row = firstRow + g * L;
      f32.set(q.subarray(row * E, (row + L) * E), st);
      ex.bwdCopyRows(stage, L, E, at.q + g * Lp * EP * 4, EP);
      zero(at.q + (g * Lp + L) * EP * 4, (Lp - L) * EP * 4);
      f32.set(dOut.subarray(row * Ev, (row + L) * Ev), st);
      ex.bwdWiden(stage, L, Ev, at.dO64 + g * Lp * Ev * 8, at.dO + g * Lp * EvP * 4, EvP);
      zero(at.dO64 + (g * Lp + L) * Ev * 8, (Lp - L) * Ev * 8);
      zero(at.dO + (g * Lp + L) * EvP * 4, (Lp - L) * EvP * 4);
    }
    const join = (value: (r: number) => number, padding: number, dst: number) => {
      for (let g = 0; g < G; g++) {
        for (let i = 0; i < Lp; i++) {
          const x = i < L ? value(g * L + i) : padding;
          const hi = Math.fround(x);
          const at2 = st + 2 * (g * Lp + i);
          f32[at2] = hi;
          f32[at2 + 1] = Number.isFinite(hi) ? x - hi : 0;
        }
      }
      ex.bwdJoin(stage, GL, dst);
    };
    join((r) => lse[firstRow + r] * Math.LOG2E, Number.NEGATIVE_INFINITY, at.lse);
    join((r) => Dg[r], 0, at.D);
    // K and V of the head, read run by run (kvRun) into the stage [S, ·], then transposed into panels
    // (V's widened to f64) and, for K, copied to k [Sp, EP].
    const stageKV = (src: Floats, n: number) => {
      for (let j = 0; j < S; ) {
        const run = kvRun(p, b, hk, j, S);
        const from = kvRow(p, b, hk, j) * n;
        f32.set(src.subarray(from, from + run * n), st + j * n);
        j += run;
      }
    };
    stageKV(k, E);
    ex.bwdTranspose(stage, S, E, at.kt);
    ex.bwdCopyRows(stage, S, E, at.k, EP);
    zero(at.k + S * EP * 4, (Sp - S) * EP * 4);
    stageKV(v, Ev);
    ex.bwdTransposeWiden(stage, S, Ev, at.vt);

    // Every float32 sum of the task stays finite (and far from overflow), or the task goes to float64.
    // (The f32 copies hold ±∞ where a float64 input is beyond float32's range.)
    const qMax = ex.bwdMaxAbs(at.q, GL * EP);
    // q times scale·log2 e in float32, as the forward scales it: the scores' operand (a NaN or ±∞ made
    // by the scaling fails the bound below).
    const cs = scale * Math.LOG2E;
    f32.copyWithin(at.qs / 4, at.q / 4, at.q / 4 + GL * EP);
    ex.bwdScale(at.qs, GL * EP, cs);
    const qsMax = ex.bwdMaxAbs(at.qs, GL * EP);
    const qsNorm = ex.bwdMaxRowNorm(at.qs, GL, EP);
    const kNorm = ex.bwdMaxRowNorm(at.k, Sp, EP);
    const kMax = ex.bwdMaxAbs(at.k, Sp * EP);
    const vMax = ex.bwdMaxAbs64(at.vt, nB * Ev * BC);
    const gMax = ex.bwdMaxAbs(at.dO, GL * EvP);
    const dsMax = Ev * gMax * vMax + dMax; // |dS| ≤ |dP − D| as P ≤ 1
    const bounds = [
      E * qsMax * kMax,
      dsMax,
      // dq and dk are summed before the scale multiplies them: a tiny scale does not shrink their sums.
      Math.max(1, Math.abs(scale)) * S * dsMax * kMax,
      Math.max(1, Math.abs(scale)) * G * L * dsMax * qMax,
      G * L * gMax,
    ];
    if (!bounds.every((x) => x <= SUM_LIMIT)) return false;
    // A score summed in float32 is off by at most E·2⁻²⁴·‖qs_i‖·‖k_j‖ (log2 units; Cauchy–Schwarz), and
    // typically by √E times less. Past 2⁻⁹ (P off by 0.14% at worst, about 1e-4 typically at E = 64) the
    // terms may cancel too much for float32 (q = [4097, 4096] against k = [4097, −4098] at scale 1) and
    // the task goes to float64; so does a scale·log2 e that float32 holds only as a subnormal (or 0), whose
    // rounding would scale every score wrong. Ordinary inputs stay below: causal calls with q and k of
    // standard deviation 1 or 3 at scale 1/√E ran in WASM for E = 16 … 256, except both at 3 with E = 256
    // (scores with a standard deviation near 9 nats), which went to float64.
    const csSubnormal = scale !== 0 && !(Math.abs(Math.fround(cs)) >= 2 ** -126);
    if (!(E * qsNorm * kNorm <= 2 ** 15) || csSubnormal) return false;

    f32.fill(0, at.dq / 4, at.dq / 4 + GL * EP);
    f32.fill(0, at.dk / 4, at.dk / 4 + Sp * EP);
    f32.fill(0, at.dv / 4, at.dv / 4 + Sp * EvP);
    const left = Math.min(p.left, UNBOUNDED);
    const right = Math.min(p.right, UNBOUNDED);
    const dbias = grads.dbias && bias ? grads.dbias : undefined;
    const dS0 = at.dS / 4;

    // FA2's loop order: key blocks outer (their dk, dv finish there), the group's query tiles inner.
    for (let kb = 0; kb < nB; kb++) {
      const j0 = kb * BC;
      const j1 = Math.min(S, j0 + BC);
      const cols = j1 - j0;
      for (let g = 0; g < G; g++) {
        const h = h0 + g;
        for (let i0 = 0; i0 < L; i0 += BR) {
          const i1 = Math.min(L, i0 + BR);
          const kind = classifyBlock(p, i0, i1, j0, j1);
          if (kind === 'empty') continue; // wholly outside the causal/window band
          const rows = i1 - i0;
          const r = g * Lp + i0; // the tile's first row in the group's padded rows
          const [maskAt, maskSl, maskSs] = this.viewArgs(
            mask,
            this.maskWhole,
            at.mask,
            b,
            h,
            i0,
            j0,
            rows,
            cols,
          );
          const [biasAt, biasSl, biasSs] = this.viewArgs(
            bias,
            this.biasWhole,
            at.bias,
            b,
            h,
            i0,
            j0,
            rows,
            cols,
          );
          ex.bwdTile(
            at.q + r * EP * 4,
            at.qs + r * EP * 4,
            at.dO64 + r * Ev * 8,
            at.dO + r * EvP * 4,
            at.lse + r * 8,
            at.D + r * 8,
            at.dq + r * EP * 4,
            at.kt + kb * E * BC * 4,
            at.vt + kb * Ev * BC * 8,
            at.k + j0 * EP * 4,
            at.dk + j0 * EP * 4,
            at.dv + j0 * EvP * 4,
            at.P,
            at.dS,
            pad(rows, 4),
            cols,
            E,
            EP,
            Ev,
            EvP,
            i0,
            j0,
            p.shift,
            left,
            right,
            kind === 'full' ? 0 : 1,
            maskAt,
            maskSl,
            maskSs,
            biasAt,
            biasSl,
            biasSs,
          );
          if (dbias && bias) {
            // dS is ∂loss/∂score = ∂loss/∂bias: add it at the bias element each (i, j) reads.
            const { sb, sh, sl, ss } = bias;
            for (let i = i0; i < i1; i++) {
              const from = b * sb + h * sh + i * sl + j0 * ss;
              const t = dS0 + (i - i0) * BC;
              for (let c = 0; c < cols; c++) dbias[from + c * ss] += f32[t + c];
            }
          }
        }
      }
    }

    // Out: dq and dk carry the scale; rows of q per head, of k and v run by run.
    ex.bwdScale(at.dq, GL * EP, scale);
    ex.bwdScale(at.dk, Sp * EP, scale);
    const { dq, dk, dv } = grads;
    const put = (dst: Floats, to: number, src: number, rows: number, n: number, nPad: number) => {
      if (n === nPad) dst.set(f32.subarray(src, src + rows * n), to);
      else
        for (let x = 0; x < rows; x++) dst.set(f32.subarray(src + x * nPad, src + x * nPad + n), to + x * n);
    };
    for (let g = 0; g < G; g++) put(dq, (firstRow + g * L) * E, at.dq / 4 + g * Lp * EP, L, E, EP);
    for (let j = 0; j < S; ) {
      const run = kvRun(p, b, hk, j, S);
      const row = kvRow(p, b, hk, j);
      put(dk, row * E, at.dk / 4 + j * EP, run, E, EP);
      put(dv, row * Ev, at.dv / 4 + j * EvP, run, Ev, EvP);
      j += run;
    }
    return true;
  }

  /**
   * `bwdTile`'s pointer and (row, column) strides for a mask or bias at rows i0…, keys j0… of pair (b, h):
   * into the whole copy, or into a [rows, cols] tile staged at `ptr` now. Zeros when there is none.
   */
  private viewArgs(
    view: BroadcastView | undefined,
    whole: boolean,
    ptr: number,
    b: number,
    h: number,
    i0: number,
    j0: number,
    rows: number,
    cols: number,
  ): [number, number, number] {
    if (!view) return [0, 0, 0];
    const { data, sb, sh, sl, ss } = view;
    const from = b * sb + h * sh + i0 * sl + j0 * ss;
    if (whole) return [ptr + 4 * from, sl, ss];
    // Broadcast axes (stride 0) stay size 1 in the tile.
    const nr = sl === 0 ? 1 : rows;
    const nc = ss === 0 ? 1 : cols;
    const f32 = this.f32;
    const d = ptr / 4;
    for (let r = 0; r < nr; r++) {
      const x = from + r * sl;
      if (ss === 1) f32.set(data.subarray(x, x + nc), d + r * nc);
      else for (let c = 0; c < nc; c++) f32[d + r * nc + c] = data[x + c * ss];
    }
    return [ptr, sl === 0 ? 0 : nc, ss === 0 ? 0 : 1];
  }
}

/** Whether the bias elements the group's heads read hold a NaN or a value above BIAS_LIMIT. */
function biasSliceBad(bias: BroadcastView, b: number, h0: number, G: number, L: number, S: number): boolean {
  const { data, sb, sh, sl, ss } = bias;
  const heads = sh === 0 ? 1 : G;
  const rows = sl === 0 ? 1 : L;
  const cols = ss === 0 ? 1 : S;
  for (let g = 0; g < heads; g++) {
    for (let i = 0; i < rows; i++) {
      const from = b * sb + (h0 + g) * sh + i * sl;
      for (let j = 0; j < cols; j++) if (!(data[from + j * ss] <= BIAS_LIMIT)) return true;
    }
  }
  return false;
}

const drivers = new WeakMap<WasmRuntime, BackwardDriver>();

/**
 * The WASM SIMD FlashAttention-2 backward: float32 problems only (float64 ones, the exact backward and
 * gradient checks, stay on the JS kernels), and it needs the forward's out and lse. Tasks whose inputs
 * float32 cannot be trusted with, or whose memory the engine refuses, run on the JS flash backward.
 */
export const wasmBackward: AttentionBackward = {
  needsForward: true,
  supports(p: BackwardProblem, inputs: BackwardInputs): true | string {
    if (p.precision !== 'float32')
      return 'it computes in float32; this call asks for float64 (exact backward, gradient checks)';
    const ok = wasmSupport();
    if (ok !== true) return ok;
    if (!inputs.out || !inputs.lse) return 'it needs the forward output and log-sum-exp (pass out and lse)';
    if (p.flex) return 'flex attention backward runs on the JS kernels';
    return true;
  },
  task(p: BackwardProblem, inputs: BackwardInputs, grads: AttentionGrads, bkv: number): void {
    let done = false;
    if (p.L > 0 && p.S > 0) {
      try {
        done = withWasm('wasm backward', (rt) => {
          let driver = drivers.get(rt);
          if (!driver) {
            driver = new BackwardDriver(rt);
            drivers.set(rt, driver);
          }
          return driver.run(p, inputs, grads, bkv);
        });
      } catch (err) {
        if (!(err instanceof KernelResourceError)) throw err;
      } finally {
        releaseWasm();
      }
    }
    // Empty calls, inputs float32 cannot be trusted with, or memory refused: the float64 JS kernel.
    if (!done) flashBackward.task(p, inputs, grads, bkv);
  },
};
