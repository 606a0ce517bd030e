// The WASM driver of the autograd's element-wise hot loops (assembly/ops.ts): softmax cross-entropy
// statistics and gradient, tanh-GELU and LayerNorm forward and backward, the heads' layout changes,
// linear's bias gradient, add (and dst += src), c·x, an embedding's scatter-add and AdamW's update, on
// float32 storage. src/autograd/ops.ts and optim.ts call these for float32 Vars and keep their JS loops
// for float64 ones (gradient checks), for arrays too short to pay for a call, and for runtimes without
// WASM SIMD.
// One decision to know: each call streams its arrays through a fixed scratch (CHUNK floats per array)
// in this thread's one WASM memory, sized before anything is written: a refused Memory.grow surfaces
// before the first chunk, so the caller can fall back to JS with its outputs untouched (a gradient that
// accumulates must not be half added). Each function returns false when WASM cannot serve (the JS loop
// then runs), true when it did the whole job.

import type { Floats } from './types.js';
import { KernelResourceError, overlaps } from './types.js';
import { releaseWasm, type WasmRuntime, wasmSupport, withWasm } from './wasm-runtime.js';

interface OpsExports {
  ceForward(x: number, rows: number, C: number, targets: number, ignoreIndex: number, stats: number): void;
  ceBackward(
    x: number,
    dx: number,
    rows: number,
    C: number,
    targets: number,
    ignoreIndex: number,
    stats: number,
    g: number,
  ): void;
  geluForward(x: number, y: number, saved: number, n: number): void;
  geluBackward(x: number, saved: number, dy: number, dx: number, n: number, acc: number): void;
  lnForward(
    x: number,
    w: number,
    b: number,
    y: number,
    stats: number,
    rows: number,
    D: number,
    eps: number,
  ): void;
  lnBackward(
    x: number,
    w: number,
    dy: number,
    dx: number,
    dw: number,
    db: number,
    stats: number,
    rows: number,
    D: number,
  ): void;
  permuteRuns(
    src: number,
    dst: number,
    A: number,
    B: number,
    C: number,
    D: number,
    sa: number,
    sb: number,
    sc: number,
    ta: number,
    tb: number,
    tc: number,
    acc: number,
  ): void;
  colSums(x: number, rows: number, M: number, sums: number): void;
  addRepeat(a: number, b: number, y: number, n: number, nb: number): void;
  scaleF64(x: number, y: number, n: number, c: number, acc: number): void;
  adamwStep(
    w: number,
    g: number,
    m: number,
    v: number,
    n: number,
    b1: number,
    a1: number,
    b2: number,
    a2: number,
    decay: number,
    stepSize: number,
    rc2: number,
    eps: number,
  ): void;
  scatterAddRows(dy: number, ids: number, dt: number, n: number, D: number): void;
}

/** Floats per array per chunk: 4 arrays of 64 K floats = 1 MB of scratch (L2-sized pieces, few calls). */
const CHUNK = 64 << 10;

const align = (bytes: number) => Math.ceil(bytes / 16) * 16;

/**
 * A DataView of the memory for its int32 and float64 words (targets in, row statistics out), re-made
 * after growth. A DataView, not typed views: typed arrays of the whole memory would be allocations as
 * large as it, which the autograd's memory tests (rightly) count.
 */
let dataView: DataView | undefined;
function words(rt: WasmRuntime): DataView {
  const buffer = rt.f32.buffer;
  if (dataView?.buffer !== buffer) dataView = new DataView(buffer);
  return dataView;
}

function available(x: Floats): x is Float32Array {
  return x instanceof Float32Array && wasmSupport() === true;
}

/**
 * Runs `fn` on this thread's instance with `bytes` of scratch from its base ensured first; false (and
 * nothing written) when WASM is unavailable or its memory was refused.
 */
function run(op: string, bytes: number, fn: (rt: WasmRuntime, ex: OpsExports) => void): boolean {
  try {
    withWasm(op, (rt) => {
      rt.ensure(align(rt.base) + bytes);
      rt.claim(run); // the scratch overwrites what any other driver left in memory
      fn(rt, rt.exports as unknown as OpsExports);
    });
    return true;
  } catch (err) {
    if (err instanceof KernelResourceError) return false;
    throw err;
  } finally {
    releaseWasm();
  }
}

/** How `streamed` moves an array: copied in, copied out, or both. */
type Stream = 'in' | 'out' | 'inout';

/**
 * Streams float32 arrays of n floats through the scratch CHUNK floats at a time: each chunk of the 'in'
 * and 'inout' arrays is copied in, `kernel` runs on the chunk (a pointer per array, in order, and its
 * length), the 'out' and 'inout' ones are copied back. False (nothing written) if WASM cannot serve or
 * an array's length is not n (checked first: a copy cannot fail half-way).
 */
function streamed(
  op: string,
  n: number,
  arrays: readonly [Float32Array, Stream][],
  kernel: (ex: OpsExports, ptrs: number[], m: number) => void,
): boolean {
  if (arrays.some(([a]) => a.length !== n)) return false;
  const chunk = Math.min(CHUNK, Math.max(n, 1));
  const bytes = align(chunk * 4);
  return run(op, arrays.length * bytes, (rt, ex) => {
    const base = align(rt.base);
    const ptrs = arrays.map((_, i) => base + i * bytes);
    const f32 = rt.f32;
    for (let i0 = 0; i0 < n; i0 += chunk) {
      const m = Math.min(chunk, n - i0);
      arrays.forEach(([a, how], i) => {
        if (how !== 'out') f32.set(a.subarray(i0, i0 + m), ptrs[i] / 4);
      });
      kernel(ex, ptrs, m);
      arrays.forEach(([a, how], i) => {
        if (how !== 'in') a.set(f32.subarray(ptrs[i] / 4, ptrs[i] / 4 + m), i0);
      });
    }
  });
}

/**
 * Cross-entropy of float32 logits X [N, C] (targets checked by the caller): Σ over rows whose target is
 * not ignoreIndex of −log softmax_target = max + log Σ e^(x − max) − x_target, each row's max and Σ into
 * stats[2n], stats[2n + 1] when given (for the backward). undefined if WASM cannot serve.
 */
export function crossEntropyWasm(
  X: Floats,
  N: number,
  C: number,
  targets: Int32Array,
  ignoreIndex: number,
  stats: Float64Array | undefined,
): number | undefined {
  if (!available(X) || C === 0) return undefined;
  const rows = Math.max(1, Math.floor(CHUNK / C));
  const xBytes = align(rows * C * 4);
  const tBytes = align(rows * 4);
  let total = 0;
  const served = run('wasm crossEntropy', xBytes + tBytes + rows * 16, (rt, ex) => {
    const xPtr = align(rt.base);
    const tPtr = xPtr + xBytes;
    const sPtr = tPtr + tBytes;
    const f32 = rt.f32;
    const w = words(rt);
    for (let r0 = 0; r0 < N; r0 += rows) {
      const r = Math.min(rows, N - r0);
      f32.set(X.subarray(r0 * C, (r0 + r) * C), xPtr / 4);
      for (let n = 0; n < r; n++) w.setInt32(tPtr + 4 * n, targets[r0 + n], true);
      ex.ceForward(xPtr, r, C, tPtr, ignoreIndex, sPtr);
      for (let n = 0; n < r; n++) {
        const t = targets[r0 + n];
        if (t === ignoreIndex) continue; // its stats were not written
        const max = w.getFloat64(sPtr + 16 * n, true);
        const sum = w.getFloat64(sPtr + 16 * n + 8, true);
        if (stats) {
          stats[2 * (r0 + n)] = max;
          stats[2 * (r0 + n) + 1] = sum;
        }
        // −log softmax_t, as the JS loop: max − x_t first, or a huge max would swallow log Σ.
        total += max - X[(r0 + n) * C + t] + Math.log(sum);
      }
    }
  });
  return served ? total : undefined;
}

/**
 * dX [N, C] += g·(softmax − onehot) on rows whose target is not ignoreIndex, from crossEntropyWasm's
 * stats. False (dX untouched) if WASM cannot serve.
 */
export function crossEntropyBackwardWasm(
  X: Floats,
  dX: Floats,
  N: number,
  C: number,
  targets: Int32Array,
  ignoreIndex: number,
  stats: Float64Array,
  g: number,
): boolean {
  if (!available(X) || !(dX instanceof Float32Array) || C === 0) return false;
  const rows = Math.max(1, Math.floor(CHUNK / C));
  const xBytes = align(rows * C * 4);
  const tBytes = align(rows * 4);
  return run('wasm crossEntropy', 2 * xBytes + tBytes + rows * 16, (rt, ex) => {
    const xPtr = align(rt.base);
    const dPtr = xPtr + xBytes;
    const tPtr = dPtr + xBytes;
    const sPtr = tPtr + tBytes;
    const f32 = rt.f32;
    const w = words(rt);
    for (let r0 = 0; r0 < N; r0 += rows) {
      const r = Math.min(rows, N - r0);
      const from = r0 * C;
      const to = (r0 + r) * C;
      f32.set(X.subarray(from, to), xPtr / 4);
      f32.set(dX.subarray(from, to), dPtr / 4);
      for (let n = 0; n < r; n++) {
        w.setInt32(tPtr + 4 * n, targets[r0 + n], true);
        w.setFloat64(sPtr + 16 * n, stats[2 * (r0 + n)], true);
        w.setFloat64(sPtr + 16 * n + 8, stats[2 * (r0 + n) + 1], true);
      }
      ex.ceBackward(xPtr, dPtr, r, C, tPtr, ignoreIndex, sPtr, g);
      dX.set(f32.subarray(dPtr / 4, dPtr / 4 + r * C), from);
    }
  });
}

/**
 * y = GELU(x) (tanh form, as the autograd's JS loop), and saved = e^(−2u) when given; float32 arrays of
 * x's length. False if WASM cannot serve.
 */
export function geluForwardWasm(x: Floats, y: Floats, saved?: Floats): boolean {
  if (!available(x) || !(y instanceof Float32Array) || (saved && !(saved instanceof Float32Array)))
    return false;
  const arrays: [Float32Array, Stream][] = [
    [x, 'in'],
    [y, 'out'],
  ];
  if (saved) arrays.push([saved as Float32Array, 'out']);
  return streamed('wasm gelu', x.length, arrays, (ex, [px, py, ps], m) => ex.geluForward(px, py, ps ?? 0, m));
}

/**
 * dx += dy·GELU′(x) from the forward's saved e; `fresh`: dx was just allocated, its contents count as
 * zeros and are never read (written as 0 + the product). False (dx untouched) if WASM cannot serve.
 */
export function geluBackwardWasm(x: Floats, saved: Floats, dy: Floats, dx: Floats, fresh = false): boolean {
  if (
    !available(x) ||
    !(saved instanceof Float32Array && dy instanceof Float32Array && dx instanceof Float32Array)
  )
    return false;
  const arrays: [Float32Array, Stream][] = [
    [x, 'in'],
    [saved, 'in'],
    [dy, 'in'],
    [dx, fresh ? 'out' : 'inout'],
  ];
  return streamed('wasm gelu', x.length, arrays, (ex, [px, ps, pg, pd], m) =>
    ex.geluBackward(px, ps, pg, pd, m, fresh ? 0 : 1),
  );
}

/**
 * LayerNorm of float32 X [N, D] with weight W and bias Bs [D] into y, each row's mean and rstd into
 * stats[2n], stats[2n + 1] when given. False if WASM cannot serve.
 */
export function layerNormWasm(
  X: Floats,
  W: Floats,
  Bs: Floats,
  y: Floats,
  N: number,
  D: number,
  eps: number,
  stats: Float64Array | undefined,
): boolean {
  if (
    !available(X) ||
    !(W instanceof Float32Array && Bs instanceof Float32Array && y instanceof Float32Array)
  )
    return false;
  if (D === 0 || N === 0) return false;
  const rows = Math.max(1, Math.floor(CHUNK / D));
  const xBytes = align(rows * D * 4);
  const wBytes = align(D * 4);
  return run('wasm layerNorm', 2 * xBytes + 2 * wBytes + rows * 16, (rt, ex) => {
    const xPtr = align(rt.base);
    const yPtr = xPtr + xBytes;
    const wPtr = yPtr + xBytes;
    const bPtr = wPtr + wBytes;
    const sPtr = bPtr + wBytes;
    const f32 = rt.f32;
    const words32 = words(rt);
    f32.set(W, wPtr / 4);
    f32.set(Bs, bPtr / 4);
    for (let r0 = 0; r0 < N; r0 += rows) {
      const r = Math.min(rows, N - r0);
      f32.set(X.subarray(r0 * D, (r0 + r) * D), xPtr / 4);
      ex.lnForward(xPtr, wPtr, bPtr, yPtr, sPtr, r, D, eps);
      y.set(f32.subarray(yPtr / 4, yPtr / 4 + r * D), r0 * D);
      if (stats) for (let n = 0; n < 2 * r; n++) stats[2 * r0 + n] = words32.getFloat64(sPtr + 8 * n, true);
    }
  });
}

/**
 * LayerNorm's backward from layerNormWasm's stats: dw += Σ dy·x̂ and db += Σ dy (row by row, rounded to
 * float32 after each, as the JS loop), dx += … when dx is given. False (nothing written) if WASM cannot serve.
 */
export function layerNormBackwardWasm(
  X: Floats,
  W: Floats,
  dy: Floats,
  dx: Floats | undefined,
  dw: Floats,
  db: Floats,
  stats: Float64Array,
  N: number,
  D: number,
): boolean {
  const f32s = [W, dy, dw, db, ...(dx ? [dx] : [])].every((a) => a instanceof Float32Array);
  if (!available(X) || !f32s || D === 0 || N === 0) return false;
  // One array for two of the gradients (layerNorm(x, p, p), or x itself as the weight): this staging would
  // copy each back over the other's sum; the JS loop adds both parts into the one array.
  if (overlaps(dw, db) || (dx && (overlaps(dx, dw) || overlaps(dx, db)))) return false;
  const rows = Math.max(1, Math.floor(CHUNK / D));
  const xBytes = align(rows * D * 4);
  const wBytes = align(D * 4);
  return run('wasm layerNorm', 3 * xBytes + 3 * wBytes + rows * 16, (rt, ex) => {
    const xPtr = align(rt.base);
    const gPtr = xPtr + xBytes;
    const dPtr = gPtr + xBytes;
    const wPtr = dPtr + xBytes;
    const dwPtr = wPtr + wBytes;
    const dbPtr = dwPtr + wBytes;
    const sPtr = dbPtr + wBytes;
    const f32 = rt.f32;
    const words64 = words(rt);
    f32.set(W, wPtr / 4);
    f32.set(dw, dwPtr / 4);
    f32.set(db, dbPtr / 4);
    for (let r0 = 0; r0 < N; r0 += rows) {
      const r = Math.min(rows, N - r0);
      const from = r0 * D;
      const to = (r0 + r) * D;
      f32.set(X.subarray(from, to), xPtr / 4);
      f32.set(dy.subarray(from, to), gPtr / 4);
      if (dx) f32.set(dx.subarray(from, to), dPtr / 4);
      for (let n = 0; n < 2 * r; n++) words64.setFloat64(sPtr + 8 * n, stats[2 * r0 + n], true);
      ex.lnBackward(xPtr, wPtr, gPtr, dx ? dPtr : 0, dwPtr, dbPtr, sPtr, r, D);
      if (dx) dx.set(f32.subarray(dPtr / 4, dPtr / 4 + r * D), from);
    }
    dw.set(f32.subarray(dwPtr / 4, dwPtr / 4 + D));
    db.set(f32.subarray(dbPtr / 4, dbPtr / 4 + D));
  });
}

/**
 * Most floats a permuteWasm call stages at once, over all its arrays (24 MB): P2's packed q | k | v
 * [1, 1024, 1536] and its three heads' arrays fit in one pass.
 */
const LAYOUT_FLOATS = 6 << 20;

/** One side of a layout move: element (a, b, c, d) is data[off + a·strides[0] + b·strides[1] + c·strides[2] + d]. */
export interface LayoutSide {
  data: Floats;
  off: number;
  strides: readonly [number, number, number];
}

/**
 * For each job: to (a, b, c, d) = (or +=, with `accumulate`) from (a, b, c, d) for every a < A, b < B,
 * c < C, d < D (non-negative strides): the heads' layout changes of src/kernels/matmul.ts. Sides on one
 * array with the same strides (the three parts of packed q | k | v) are staged as one span. Each group of
 * slices a goes through the scratch as straight copies of the span each array covers (a written array's
 * span copied in first unless its runs fill it: what no run writes goes back as it came) and one
 * permuteRuns call per job. False (nothing written) if WASM cannot serve or one slice's spans add up to
 * more than LAYOUT_FLOATS: the caller's JS loop then runs. The jobs must not write what another job reads.
 */
export function permuteWasm(
  jobs: readonly { from: LayoutSide; to: LayoutSide }[],
  dims: readonly [number, number, number, number],
  accumulate: boolean,
): boolean {
  const [A, B, C, D] = dims;
  if (A * B * C * D === 0 || jobs.length === 0) return false;
  if (!jobs.every((j) => available(j.from.data) && j.to.data instanceof Float32Array)) return false;
  // Floats from the first element of `n` slices to the end of their last run.
  const slice = (s: readonly number[]) => (B - 1) * s[1] + (C - 1) * s[2] + D;
  const span = (s: readonly number[], n: number) => (n - 1) * s[0] + slice(s);
  // The staged arrays: each (array, strides) once, covering its sides' offsets [lo, hi].
  type Staged = { data: Floats; strides: readonly number[]; lo: number; hi: number; written: boolean };
  const staged: Staged[] = [];
  const stage = ({ data, off, strides }: LayoutSide, written: boolean): Staged => {
    let s = staged.find((x) => x.data === data && x.strides.every((v, i) => v === strides[i]));
    if (!s) {
      s = { data, strides, lo: off, hi: off, written };
      staged.push(s);
    }
    s.lo = Math.min(s.lo, off);
    s.hi = Math.max(s.hi, off);
    s.written ||= written;
    return s;
  };
  const pairs = jobs.map((j) => ({ job: j, from: stage(j.from, false), to: stage(j.to, true) }));
  const extent = (s: Staged, n: number) => s.hi - s.lo + span(s.strides, n);
  const total = (n: number) => staged.reduce((sum, s) => sum + extent(s, n), 0);
  if (total(1) > LAYOUT_FLOATS) return false;
  // An array shorter than its runs reach: refuse before anything is written (a RangeError half-way
  // through would leave some slices moved and the caller's loop would move them again).
  if (staged.some((s) => s.lo < 0 || s.lo + extent(s, A) > s.data.length)) return false;
  // total(n) = total(1) + (n − 1)·Σ strides[0]: the most slices a pass can take.
  const perSlice = staged.reduce((sum, s) => sum + s.strides[0], 0);
  const na = perSlice === 0 ? A : Math.min(A, Math.floor((LAYOUT_FLOATS - total(1)) / perSlice) + 1);
  const bytes = staged.map((s) => align(extent(s, na) * 4));
  // Whether a written array's runs fill its span (then it need not be copied in).
  const filled = (s: Staged, n: number) =>
    !accumulate && pairs.filter((p) => p.to === s).length === 1 && n * B * C * D === extent(s, n);
  return run(
    'wasm layout',
    bytes.reduce((x, y) => x + y, 0),
    (rt, ex) => {
      const ptrs: number[] = [];
      let at = align(rt.base);
      for (const b of bytes) {
        ptrs.push(at);
        at += b;
      }
      const f32 = rt.f32;
      const ptrOf = (s: Staged, off: number) => ptrs[staged.indexOf(s)] + (off - s.lo) * 4;
      for (let a0 = 0; a0 < A; a0 += na) {
        const n = Math.min(na, A - a0);
        staged.forEach((s, i) => {
          if (s.written && filled(s, n)) return;
          const start = s.lo + a0 * s.strides[0];
          f32.set(s.data.subarray(start, start + extent(s, n)), ptrs[i] / 4);
        });
        for (const { job, from, to } of pairs) {
          const [sa, sb, sc] = job.from.strides;
          const [ta, tb, tc] = job.to.strides;
          const x = ptrOf(from, job.from.off);
          const y = ptrOf(to, job.to.off);
          ex.permuteRuns(x, y, n, B, C, D, sa, sb, sc, ta, tb, tc, accumulate ? 1 : 0);
        }
        staged.forEach((s, i) => {
          if (!s.written) return;
          s.data.set(f32.subarray(ptrs[i] / 4, ptrs[i] / 4 + extent(s, n)), s.lo + a0 * s.strides[0]);
        });
      }
    },
  );
}

/**
 * permuteWasm's move on floats already in this thread's WebAssembly memory (byte pointers into a resident
 * allocation), in place there: to (a, b, c, ·) = from (a, b, c, ·), runs of D floats, strides in floats.
 * Nothing is staged; the two spans must not overlap.
 */
export function permuteResident(
  fn: string,
  from: number,
  to: number,
  dims: readonly [number, number, number, number],
  fromStrides: readonly [number, number, number],
  toStrides: readonly [number, number, number],
): void {
  const [A, B, C, D] = dims;
  const [sa, sb, sc] = fromStrides;
  const [ta, tb, tc] = toStrides;
  withWasm(fn, (rt) =>
    (rt.exports as unknown as OpsExports).permuteRuns(from, to, A, B, C, D, sa, sb, sc, ta, tb, tc, 0),
  );
}

/**
 * db[M] += the column sums of dy [N, M], summed in float64 exactly as linearGradBias's JS loop sums them
 * (each column's rows added one after the other, in row order, whatever the chunks), so the result is that
 * loop's bit for bit.
 * False (db untouched) if WASM cannot serve.
 */
export function colSumsWasm(dy: Floats, N: number, M: number, db: Floats): boolean {
  if (!available(dy) || !(db instanceof Float32Array) || M === 0 || N === 0) return false;
  const rows = Math.max(4, Math.floor(CHUNK / M / 4) * 4);
  const xBytes = align(Math.min(rows, N) * M * 4);
  return run('wasm linear bias grad', xBytes + align(M * 8), (rt, ex) => {
    const xPtr = align(rt.base);
    const sPtr = xPtr + xBytes;
    const f32 = rt.f32;
    f32.fill(0, sPtr / 4, sPtr / 4 + 2 * M);
    for (let r0 = 0; r0 < N; r0 += rows) {
      const r = Math.min(rows, N - r0);
      f32.set(dy.subarray(r0 * M, (r0 + r) * M), xPtr / 4);
      ex.colSums(xPtr, r, M, sPtr);
    }
    const w = words(rt);
    for (let m = 0; m < M; m++) db[m] += w.getFloat64(sPtr + 8 * m, true);
  });
}

/**
 * Element-wise ops of fewer floats than this stay in their JS loops: a WASM call's fixed cost (the
 * instance, the views, the copies' set-up) is a few microseconds, a JS loop's a few ns a float.
 */
const ELEMENTWISE_MIN = 4096;

/**
 * y = a + b over float32 arrays, b either a's length or repeating every b.length floats (a's length a
 * multiple of it, b.length ≤ CHUNK): float32 sums, the JS loop's bit for bit. y may be a (dst += src).
 * False (y untouched) if WASM cannot serve or the arrays are small.
 */
export function addWasm(a: Floats, b: Floats, y: Floats): boolean {
  const n = a.length;
  const nb = b.length;
  if (
    n < ELEMENTWISE_MIN ||
    !available(a) ||
    !(b instanceof Float32Array && y instanceof Float32Array) ||
    y.length !== n ||
    nb === 0 ||
    n % nb !== 0 ||
    (nb !== n && nb > CHUNK)
  )
    return false;
  if (nb === n) {
    const arrays: [Float32Array, Stream][] = [
      [a, 'in'],
      [b, 'in'],
      [y, 'out'],
    ];
    return streamed('wasm add', n, arrays, (ex, [pa, pb, py], m) => ex.addRepeat(pa, pb, py, m, m));
  }
  // b repeating: staged once, a and y streamed by whole repeats of b.
  const chunk = Math.floor(CHUNK / nb) * nb;
  const bytes = align(chunk * 4);
  return run('wasm add', 2 * bytes, (rt, ex) => {
    const aPtr = align(rt.base);
    const bPtr = aPtr + bytes;
    const f32 = rt.f32;
    f32.set(b, bPtr / 4);
    for (let i0 = 0; i0 < n; i0 += chunk) {
      const m = Math.min(chunk, n - i0);
      f32.set(a.subarray(i0, i0 + m), aPtr / 4);
      ex.addRepeat(aPtr, bPtr, aPtr, m, nb);
      y.set(f32.subarray(aPtr / 4, aPtr / 4 + m), i0);
    }
  });
}

/**
 * y = c·x (acc false) or y += c·x (acc true) over float32 arrays of one length, in float64 rounded once to
 * float32 as the JS loops. False (y untouched) if WASM cannot serve or the arrays are small.
 */
export function scaleWasm(x: Floats, y: Floats, c: number, acc: boolean): boolean {
  const n = x.length;
  if (n < ELEMENTWISE_MIN || !available(x) || !(y instanceof Float32Array)) return false; // lengths: streamed
  const arrays: [Float32Array, Stream][] = [
    [x, 'in'],
    [y, acc ? 'inout' : 'out'],
  ];
  return streamed('wasm scale', n, arrays, (ex, [px, py], m) => ex.scaleF64(px, py, m, c, acc ? 1 : 0));
}

/** AdamW's per-step constants (src/autograd/optim.ts computes them once a step). */
export interface AdamWConstants {
  b1: number;
  a1: number;
  b2: number;
  a2: number;
  decay: number;
  stepSize: number;
  rc2: number;
  eps: number;
}

/**
 * AdamW's update of float32 parameters w with grads g and moments m, v (one length), the JS loop's float64
 * operations in its order (assembly/ops.ts adamwStep): the same floats. False (nothing written) if WASM
 * cannot serve or the parameter is small.
 */
export function adamwWasm(
  w: Floats,
  g: Floats,
  m: Float32Array,
  v: Float32Array,
  k: AdamWConstants,
): boolean {
  const n = w.length;
  if (n < ELEMENTWISE_MIN || !available(w) || !(g instanceof Float32Array)) return false; // lengths: streamed
  const arrays: [Float32Array, Stream][] = [
    [w, 'inout'],
    [g, 'in'],
    [m, 'inout'],
    [v, 'inout'],
  ];
  return streamed('wasm AdamW', n, arrays, (ex, [pw, pg, pm, pv], len) =>
    ex.adamwStep(pw, pg, pm, pv, len, k.b1, k.a1, k.b2, k.a2, k.decay, k.stepSize, k.rc2, k.eps),
  );
}

/** Most floats of an embedding table's gradient scatterAddRowsWasm stages (16 MB). */
const SCATTER_TABLE_FLOATS = 4 << 20;

/**
 * dt[ids[t]·D + d] += dy[t·D + d] for every t (an embedding's backward), float32 sums in the JS loop's
 * order. False (dt untouched) if WASM cannot serve, the table is large, or an id is outside dt's rows.
 */
export function scatterAddRowsWasm(dy: Floats, ids: Int32Array, dt: Floats, D: number): boolean {
  const n = ids.length;
  const V = D === 0 ? 0 : dt.length / D;
  if (
    n * D < ELEMENTWISE_MIN ||
    !available(dy) ||
    !(dt instanceof Float32Array) ||
    dy.length !== n * D ||
    dt.length > SCATTER_TABLE_FLOATS ||
    !Number.isInteger(V)
  )
    return false;
  for (let t = 0; t < n; t++) if (!(ids[t] >= 0 && ids[t] < V)) return false;
  const rows = Math.max(1, Math.floor(CHUNK / D));
  const yBytes = align(rows * D * 4);
  const iBytes = align(rows * 4);
  const tBytes = align(dt.length * 4);
  return run('wasm embedding backward', yBytes + iBytes + tBytes, (rt, ex) => {
    const tPtr = align(rt.base);
    const yPtr = tPtr + tBytes;
    const iPtr = yPtr + yBytes;
    const f32 = rt.f32;
    const i32 = new Int32Array(f32.buffer, iPtr, rows);
    f32.set(dt, tPtr / 4);
    for (let t0 = 0; t0 < n; t0 += rows) {
      const r = Math.min(rows, n - t0);
      f32.set(dy.subarray(t0 * D, (t0 + r) * D), yPtr / 4);
      i32.set(ids.subarray(t0, t0 + r));
      ex.scatterAddRows(yPtr, iPtr, tPtr, r, D);
    }
    dt.set(f32.subarray(tPtr / 4, tPtr / 4 + dt.length));
  });
}
