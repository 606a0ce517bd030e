// The WASM SIMD GEMM: JS runs BLIS's three outer loops (N blocks, K blocks, M blocks) and the copies;
// assembly/gemm.ts packs the blocks and runs the 4×8 register tiles, in this thread's one WASM instance.
// One decision to know: memory is bounded whatever M, N and K are: B is packed once per (N block, K
// block) of a `rows` call, A and C stream through by blocks of rows, and the memory is sized before any
// row of C is written, so a refusal (KernelResourceError) leaves C untouched for the fallback kernel.

import { batchOffsets, type GemmKernel, type GemmProblem } from './gemm-types.js';
import { type Floats, KernelResourceError } from './types.js';
import {
  allocateResident,
  freeResident,
  releaseWasm,
  type WasmAllocation,
  type WasmRuntime,
  wasmSupport,
  withWasm,
} from './wasm-runtime.js';

/** The GEMM half of the module's exports (assembly/gemm.ts). */
interface GemmExports {
  gemmTileRows(): number;
  gemmPackA(src: number, ld: number, rows: number, kc: number, trans: number, dst: number): void;
  gemmPackB(
    src: number,
    ld: number,
    kc: number,
    cols: number,
    trans: number,
    dst: number,
    stride: number,
  ): void;
  gemmBlock(
    a: number,
    b: number,
    c: number,
    ldc: number,
    rows: number,
    cols: number,
    kc: number,
    load: number,
    bias: number,
    gelu: number,
  ): void;
  /** gemmBlock for 1–3 rows, bit for bit the same rows. */
  gemmBlockRows: GemmExports['gemmBlock'];
}

// Block sizes (BLIS's KC, MC, NC), in floats. KC: a packed B panel (KC·8 floats = 16 KB) stays in L1
// while the tiles of a row block pass under it; MC: the packed A block (MC·KC floats = 256 KB) stays in
// L2; NC: the packed B block is at most B_BUDGET bytes (L3) and the C block C_BUDGET, so B is packed
// once per call up to 2048 columns. A larger K is split into KC blocks, and C makes a round trip per block (float32
// either way: the registers accumulate in float32 too).
const KC_MAX = 512;
const MC_MAX = 128;
const B_BUDGET = 4 << 20;
/** Bytes of the C block [MC, NC]: bounds NC when K is small (K = 1 would otherwise allow all of N). */
const C_BUDGET = 1 << 20;
/** Floats of stored A or B copied at once before packing (a block's whole rows when they fit). */
const STAGE_FLOATS = 256 << 10;

const pad = (n: number, m: number) => Math.ceil(n / m) * m;

/** The K blocks of a call: how many, and their length (the last may be shorter; 0 when K = 0). */
function kBlocking(K: number): { kBlocks: number; KC: number } {
  const kBlocks = Math.max(1, Math.ceil(K / KC_MAX));
  return { kBlocks, KC: Math.ceil(K / kBlocks) };
}

/**
 * A weight W [rows, K] (PyTorch's Linear layout, read as op(B) = Wᵀ) packed once into resident memory:
 * for each K block, all its 8-column panels [pad(rows, 8)/8][kc][8], as `packB` would pack them. A call
 * whose B is these floats, or a slice of them starting at a row that is a multiple of 8, reads its panels
 * here instead of packing its B again.
 */
interface PackedWeight {
  readonly data: Float32Array;
  readonly rows: number;
  readonly K: number;
  /** Byte offset of each K block's panels from the allocation's start. */
  readonly kOffsets: number[];
  readonly allocation: WasmAllocation;
}

/** Packed weights by the buffer their floats live in (a subarray of W is a new object, its buffer is not). */
const packedWeights = new WeakMap<ArrayBufferLike, PackedWeight[]>();

/**
 * The packed copy of op(B)'s product `t` for this runtime, and the row of W it starts at, or undefined (B
 * not packed, or not at a panel boundary, or a different K).
 */
function findPacked(
  rt: WasmRuntime,
  p: GemmProblem,
  bOff: number,
): { packed: PackedWeight; row0: number } | undefined {
  if (!p.transB || !(p.b instanceof Float32Array)) return undefined;
  const list = packedWeights.get(p.b.buffer);
  if (!list) return undefined;
  const start = p.b.byteOffset / 4 + bOff; // the product's first float, in the buffer
  for (const packed of list) {
    if (packed.allocation.runtime !== rt || packed.allocation.freed || packed.K !== p.K) continue;
    const rel = start - packed.data.byteOffset / 4;
    if (rel < 0 || rel % p.K !== 0) continue;
    const row0 = p.K === 0 ? 0 : rel / p.K;
    if (row0 % 8 === 0 && row0 + p.N <= packed.rows) return { packed, row0 };
  }
  return undefined;
}

/**
 * Where a product's C goes when it stays in this thread's WebAssembly memory (wasmGemmResident): rows of
 * C in batches of `rows` and columns in groups of `width` (a multiple of 8), element (m, j) at byte
 * ptr + ⌊m / rows⌋·batchStride + ⌊j / width⌋·groupStride + ((m mod rows)·ld + j mod width)·4. Heads split
 * as attention reads them, [B, H, rows, width], are rows = L, ld = width, groupStride = L·width·4 and
 * batchStride = H·L·width·4; a plain [M, N] is rows = M, width = ld = N.
 */
export interface ResidentOut {
  ptr: number;
  rows: number;
  width: number;
  ld: number;
  groupStride: number;
  batchStride: number;
}

/** op(A) [M, K] already in this thread's WebAssembly memory, row-major from byte `ptr`, rows `ld` floats apart. */
export interface ResidentIn {
  ptr: number;
  ld: number;
}

/** Where run() reads A and writes C instead of the problem's arrays (either or both). */
interface Resident {
  a?: ResidentIn;
  out?: ResidentOut;
}

/** One thread's GEMM driver: lays out its buffers from the instance's base, remembers the B it packed. */
class GemmDriver {
  private readonly ex: GemmExports;
  private readonly MR: number;
  private f32: Float32Array;
  private bKey = ''; // which (product, N block, K block) of this call's B is packed in memory
  private stageKey = ''; // which stored rows of A sit whole in the stage

  constructor(private readonly rt: WasmRuntime) {
    this.ex = rt.exports as unknown as GemmExports;
    this.MR = this.ex.gemmTileRows();
    this.f32 = rt.f32;
  }

  /**
   * Rows [m0, m1) of C. With `at`, A is read from WASM memory rather than staged from p.a (p.a is then
   * not read), and C is written in place there, group by group, rather than through the C block and c (c
   * is then not touched): the same packing and tiles, so the same bits.
   */
  run(p: GemmProblem, c: Floats, m0: number, m1: number, at: Resident = {}): void {
    const { M, N, K } = p;
    if (M === 0 || N === 0 || m1 <= m0) return;
    const MR = this.MR;
    const { kBlocks, KC } = kBlocking(K); // equal K blocks (KC = 0 when K = 0: C = bias (+ C))
    const MC = Math.min(MC_MAX, pad(Math.min(M, m1 - m0), MR));
    const ncMax = Math.min(B_BUDGET / Math.max(KC, 1), C_BUDGET / MC) / 4;
    const out = at.out;
    // In place, an N block is whole groups (the C block's budget does not apply: it is not used).
    const NC = out
      ? Math.min(N, Math.max(1, Math.floor(B_BUDGET / 4 / Math.max(KC, 1) / out.width)) * out.width)
      : Math.min(pad(N, 8), Math.max(8, Math.floor(ncMax / 8) * 8));
    // Memory map (bytes from the instance's base, 16-aligned): packed B [NC/8][KC][8] | packed A
    // [MC/MR][KC][MR] | C block [MC, NC] (not in place) | bias [NC] | stage (stored rows of A or B, as copied).
    const bPtr = this.rt.base;
    const aPtr = bPtr + NC * KC * 4;
    const cPtr = aPtr + MC * KC * 4;
    const biasPtr = cPtr + (out ? 0 : MC * NC * 4); // no C block when C is written in place
    const stagePtr = biasPtr + NC * 4;
    const stageFloats = Math.max(STAGE_FLOATS, MC * KC, 8 * KC, NC);
    this.rt.ensure(stagePtr + stageFloats * 4);
    // Nothing packed is reused across calls (B may change between them, e.g. an optimizer step), only
    // within this one: the next product of a batch sharing B, the next row block.
    this.rt.claim(this);
    this.bKey = '';
    this.stageKey = '';
    this.f32 = this.rt.f32;
    const f32 = this.f32;
    const ex = this.ex;

    const batch = p.batch ?? 1;
    for (let t = Math.floor(m0 / M); t < batch && t * M < m1; t++) {
      const i0 = Math.max(m0 - t * M, 0);
      const i1 = Math.min(m1 - t * M, M);
      const off = batchOffsets(p, t);
      const resident = findPacked(this.rt, p, off.b);
      for (let jc = 0; jc < N; jc += NC) {
        const nc = Math.min(NC, N - jc);
        const ncPad = pad(nc, 8);
        if (p.bias) {
          f32.set((p.bias as Float32Array).subarray(jc, jc + nc), biasPtr / 4);
          f32.fill(0, biasPtr / 4 + nc, biasPtr / 4 + ncPad);
        }
        for (let kb = 0; kb < kBlocks; kb++) {
          // K = 0 is one empty block: C = bias (+ C), through GELU.
          const pc = kb * KC;
          const kc = Math.min(KC, K - pc);
          const first = kb === 0;
          const last = kb === kBlocks - 1;
          // The B block's panels: the resident packed weight's, or packed here.
          const bAt = resident
            ? resident.packed.allocation.ptr +
              resident.packed.kOffsets[kb] +
              ((resident.row0 + jc) / 8) * kc * 32
            : bPtr;
          if (!resident) {
            this.packB(p, p.strideB === 0 ? 0 : t, off.b, jc, nc, pc, kc, bPtr, stagePtr, stageFloats);
          }
          for (let ic = i0; ic < i1; ) {
            // In place, a row block stays within one batch of `out.rows` rows.
            const mc = Math.min(MC, i1 - ic, out ? out.rows - (ic % out.rows) : MC);
            // Pass 1: stage and pack op(A)[ic : ic + mc, pc : pc + kc] into 4-row panels.
            const [src, ld] = at.a
              ? [at.a.ptr + (ic * at.a.ld + pc) * 4, at.a.ld]
              : p.transA
                ? this.stage(p.a, off.a, M, pc, kc, ic, mc, stagePtr, stageFloats, `${t},${pc}`)
                : this.stage(p.a, off.a, K, ic, mc, pc, kc, stagePtr, stageFloats, '');
            ex.gemmPackA(src, ld, mc, kc, p.transA ? 1 : 0, aPtr);
            const load = p.accumulate || !first;
            const biasAt = first && p.bias ? biasPtr : 0;
            const gelu = last && p.gelu ? 1 : 0;
            if (out) {
              this.blockInPlace(out, aPtr, bAt, ic, mc, jc, nc, kc, load, biasAt, gelu);
              ic += mc;
              continue;
            }
            // Pass 2: the C block in (when it is added to), the macro-kernel, the C block out.
            const cAt = off.c + ic * N + jc; // C[ic, jc] of this product
            if (load) this.copyC(c, cAt, N, mc, nc, ncPad, cPtr, true);
            // 1–3 rows (a decode step): one row at a time, not a 4-row tile that is mostly padding.
            (mc < MR ? ex.gemmBlockRows : ex.gemmBlock)(
              aPtr,
              bAt,
              cPtr,
              ncPad,
              mc < MR ? mc : pad(mc, MR),
              ncPad,
              kc,
              load ? 1 : 0,
              biasAt,
              gelu,
            );
            this.copyC(c, cAt, N, mc, nc, ncPad, cPtr, false);
            ic += mc;
          }
        }
      }
    }
  }

  /**
   * The macro-kernel for rows [ic, ic + mc) × columns [jc, jc + nc) of C written in place at `out` (one
   * batch of rows, whole groups of columns): per group, gemmBlock on the rows that fill 4-row tiles and
   * gemmBlockRows on the last 1–3 (bit for bit the rows a padded tile computes), so no row past the
   * block's is written.
   */
  private blockInPlace(
    out: ResidentOut,
    aPtr: number,
    bAt: number,
    ic: number,
    mc: number,
    jc: number,
    nc: number,
    kc: number,
    load: boolean,
    biasAt: number,
    gelu: number,
  ): void {
    const ex = this.ex;
    const MR = this.MR;
    const full = mc - (mc % MR);
    const row0 = out.ptr + Math.floor(ic / out.rows) * out.batchStride + (ic % out.rows) * out.ld * 4;
    for (let j = jc; j < jc + nc; j += out.width) {
      const cAt = row0 + (j / out.width) * out.groupStride;
      const bj = bAt + ((j - jc) / 8) * kc * 32;
      const biasJ = biasAt && biasAt + (j - jc) * 4;
      if (full > 0) ex.gemmBlock(aPtr, bj, cAt, out.ld, full, out.width, kc, load ? 1 : 0, biasJ, gelu);
      if (full < mc) {
        ex.gemmBlockRows(
          aPtr + (full / MR) * kc * MR * 4,
          bj,
          cAt + full * out.ld * 4,
          out.ld,
          mc - full,
          out.width,
          kc,
          load ? 1 : 0,
          biasJ,
          gelu,
        );
      }
    }
  }

  /**
   * Packs W [rows, K] (read as Wᵀ) into resident memory at byte `dst`: each K block's panels, as packB
   * packs them, one block after the other; returns the byte offset of each block's panels from dst. The
   * stage is this call's scratch (at the runtime's base, above every resident allocation).
   */
  packResident(w: Float32Array, rows: number, K: number, dst: number): number[] {
    const { kBlocks, KC } = kBlocking(K);
    const stagePtr = this.rt.base;
    const stageFloats = Math.max(STAGE_FLOATS, 8 * KC);
    this.rt.ensure(stagePtr + stageFloats * 4);
    this.rt.claim(this);
    this.bKey = '';
    this.stageKey = '';
    this.f32 = this.rt.f32;
    // W as the B of a product x·Wᵀ with N = rows: each K block is packB's block (jc 0, nc = rows), so
    // the layout is the one run() would pack, by the same code.
    const asB: GemmProblem = {
      M: 0,
      N: rows,
      K,
      a: w,
      b: w,
      transA: false,
      transB: true,
      precision: 'float32',
    };
    const offsets: number[] = [];
    let at = 0;
    for (let kb = 0; kb < kBlocks; kb++) {
      const pc = kb * KC;
      const kc = Math.min(KC, K - pc);
      offsets.push(at);
      this.packB(asB, 0, 0, 0, rows, pc, kc, dst + at, stagePtr, stageFloats);
      at += pad(rows, 8) * kc * 4;
    }
    // packB remembered what it packed as if it were this call's scratch B: it is not.
    this.bKey = '';
    this.stageKey = '';
    return offsets;
  }

  /**
   * Packs op(B)[pc : pc + kc, jc : jc + nc] of product `tb` into 8-column panels at bPtr, unless this call
   * already packed that block there (products of a batch sharing B). Stored rows are staged
   * in pieces of at most the stage's size: k rows of b [K, N], or 8·n rows of b [N, K].
   */
  private packB(
    p: GemmProblem,
    tb: number,
    bOff: number,
    jc: number,
    nc: number,
    pc: number,
    kc: number,
    bPtr: number,
    stagePtr: number,
    stageFloats: number,
  ): void {
    const key = `${tb},${jc},${pc}`;
    if (this.bKey === key) return;
    this.bKey = '';
    this.stageKey = ''; // the stage is about to be overwritten
    const { N, K } = p;
    if (p.transB) {
      // b [N, K]: stored rows are columns of op(B); 8·n of them per piece, each kc long.
      const step = Math.max(8, Math.floor(stageFloats / Math.max(kc, 1) / 8) * 8);
      for (let j = 0; j < nc; j += step) {
        const n = Math.min(step, nc - j);
        const [src, ld] = this.stage(p.b, bOff, K, jc + j, n, pc, kc, stagePtr, stageFloats, '');
        this.ex.gemmPackB(src, ld, kc, n, 1, bPtr + (j / 8) * kc * 32, kc * 8);
      }
    } else {
      // b [K, N]: stored rows are rows of op(B); as many per piece as fit, each nc long.
      const step = Math.max(1, Math.floor(stageFloats / nc));
      for (let k = 0; k < kc; k += step) {
        const n = Math.min(step, kc - k);
        const [src, ld] = this.stage(p.b, bOff, N, pc + k, n, jc, nc, stagePtr, stageFloats, '');
        this.ex.gemmPackB(src, ld, n, nc, 0, bPtr + k * 32, kc * 8);
      }
    }
    this.bKey = key;
  }

  /**
   * Copies stored rows [r0, r0 + rows) × columns [c0, c0 + cols) of a matrix with `width` columns at
   * element `off` of `src` into the stage; returns the staged element (r0, c0)'s address and the staged
   * row stride. Whole rows are copied in one piece when they fit (a view and one memcpy, where a row at a
   * time costs a view per row); `key` names the window when it may be reused by the next call.
   */
  private stage(
    src: Floats,
    off: number,
    width: number,
    r0: number,
    rows: number,
    c0: number,
    cols: number,
    stagePtr: number,
    stageFloats: number,
    key: string,
  ): [number, number] {
    const s = stagePtr / 4;
    const data = src as Float32Array;
    if (rows * width <= stageFloats || cols === width) {
      // Whole rows: rows of A stored transposed are shared by every row block of C, so they stay put
      // across the M loop (`key`) until B is packed again.
      const wholeKey = key && `${key},${r0},${rows}`;
      if (!wholeKey || this.stageKey !== wholeKey) {
        const from = off + r0 * width;
        this.f32.set(data.subarray(from, from + rows * width), s);
        this.stageKey = wholeKey;
      }
      return [stagePtr + c0 * 4, width];
    }
    this.stageKey = '';
    for (let r = 0; r < rows; r++) {
      const from = off + (r0 + r) * width + c0;
      this.f32.set(data.subarray(from, from + cols), s + r * cols);
    }
    return [stagePtr, cols];
  }

  /**
   * C[rows, cols] at element `at` of c (row stride N) to the C block (row stride ldc), or back. A float64
   * C (a float64 gradient buffer in a 'float32' call) is rounded to float32 on the way in and widened on
   * the way out by the typed arrays' own conversion.
   */
  private copyC(
    c: Floats,
    at: number,
    N: number,
    rows: number,
    cols: number,
    ldc: number,
    cPtr: number,
    toWasm: boolean,
  ): void {
    const f32 = this.f32;
    const base = cPtr / 4;
    if (cols === N && ldc === N) {
      if (toWasm) f32.set(c.subarray(at, at + rows * N), base);
      else c.set(f32.subarray(base, base + rows * N), at);
      return;
    }
    for (let r = 0; r < rows; r++) {
      if (toWasm) f32.set(c.subarray(at + r * N, at + r * N + cols), base + r * ldc);
      else c.set(f32.subarray(base + r * ldc, base + r * ldc + cols), at + r * N);
    }
  }
}

const drivers = new WeakMap<WasmRuntime, GemmDriver>();

function driverOf(rt: WasmRuntime): GemmDriver {
  let driver = drivers.get(rt);
  if (!driver) {
    driver = new GemmDriver(rt);
    drivers.set(rt, driver);
  }
  return driver;
}

/** A float32 weight W [rows, cols] as a Linear layer holds it (y = x·Wᵀ). */
export interface LinearWeight {
  data: Float32Array;
  rows: number;
  cols: number;
}

/**
 * Packs Linear weights once into this thread's WebAssembly memory, so that every WASM GEMM reading one of
 * them as x·Wᵀ (or a slice of it starting at a multiple of 8 rows, as in_proj's q, k, v) uses the packed
 * copy instead of packing W again: a decode step's products are one row each, and packing W cost more than
 * multiplying by it. Results are bit for bit those of an unpacked call. Returns the function that frees the
 * copies. The caller must not change the weights' floats before calling it: the packed copy would not see
 * the change. Packing is an optimisation: where WASM cannot run, or memory is refused, weights stay
 * unpacked (the calls pack them as before).
 */
export function packLinearWeights(weights: readonly LinearWeight[]): () => void {
  if (wasmSupport() !== true) return () => {};
  const owner = {};
  const done: PackedWeight[] = [];
  for (const { data, rows, cols } of weights) {
    if (!(data instanceof Float32Array) || rows * cols === 0 || data.length !== rows * cols) continue;
    let allocation: WasmAllocation | undefined;
    try {
      allocation = allocateResident('packLinearWeights', pad(rows, 8) * cols * 4, owner);
      if (!allocation) break;
      const a = allocation;
      const kOffsets = withWasm('packLinearWeights', (rt) =>
        driverOf(rt).packResident(data, rows, cols, a.ptr),
      );
      releaseWasm();
      const packed: PackedWeight = { data, rows, K: cols, kOffsets, allocation };
      const list = packedWeights.get(data.buffer) ?? [];
      list.push(packed);
      packedWeights.set(data.buffer, list);
      done.push(packed);
    } catch (err) {
      if (allocation) freeResident(allocation);
      if (!(err instanceof RangeError || err instanceof KernelResourceError)) throw err;
      break; // memory refused: the rest stay unpacked
    }
  }
  let freed = false;
  return () => {
    if (freed) return;
    freed = true;
    for (const packed of done) {
      const list = packedWeights.get(packed.data.buffer);
      const i = list ? list.indexOf(packed) : -1;
      if (list && i >= 0) list.splice(i, 1);
      if (list?.length === 0) packedWeights.delete(packed.data.buffer);
      freeResident(packed.allocation);
    }
    void owner; // the allocations' finalizer owner lives as long as this function
  };
}

/**
 * C = x·Wᵀ + b (a `linear` problem: not transposed A, one product) on this thread's WASM instance with A
 * and/or C in its memory (`at`), where a chain of products and attention keeps its activations: A read in
 * place rather than staged from p.a, C written in place (see ResidentOut) rather than copied out to c.
 * The same packing and tiles as wasmGemmKernel, so the same bits. The pointers are the caller's resident
 * allocation; KernelResourceError (memory refused) before any of C is written.
 */
export function wasmGemmResident(fn: string, p: GemmProblem, c: Floats, at: Resident): void {
  if (p.transA || (p.batch ?? 1) !== 1)
    throw new Error(`${fn}: a resident GEMM reads A untransposed, one product`);
  if (p.M === 0 || p.N === 0) return; // no rows or columns of C: nothing to write (and rows may be 0)
  const out = at.out;
  if (out && (out.width % 8 !== 0 || p.N % out.width !== 0 || p.M % out.rows !== 0)) {
    throw new Error(
      `${fn}: C in place needs whole groups of a multiple of 8 columns and whole batches of rows (N=${p.N}, width=${out.width}, M=${p.M}, rows=${out.rows})`,
    );
  }
  withWasm(fn, (rt) => driverOf(rt).run(p, c, 0, p.M, at));
}

/** The WASM SIMD GEMM; `supports` says why not when WASM SIMD is missing or the call needs float64. */
export const wasmGemmKernel: GemmKernel = {
  name: 'wasm',
  supports(p: GemmProblem): true | string {
    const ok = wasmSupport();
    if (ok !== true) return ok;
    if (p.precision === 'float64') return 'it accumulates in float32; this call asks for float64';
    if (!(p.a instanceof Float32Array && p.b instanceof Float32Array)) return 'its operands are float32 only';
    if (p.bias && !(p.bias instanceof Float32Array)) return 'its bias is float32 only';
    return true;
  },
  release: releaseWasm,
  rows(p: GemmProblem, c: Floats, m0: number, m1: number): void {
    withWasm('wasm GEMM', (rt) => driverOf(rt).run(p, c, m0, m1));
  },
};
