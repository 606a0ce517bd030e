// The WASM driver of the autograd's element-wise hot loops (assembly/ops.ts): softmax cross-entropy
// statistics and gradient, tanh-GELU and LayerNorm forward and backward, on float32 storage. src/autograd/ops.ts calls
// these for float32 Vars and keeps its JS loops for float64 ones (gradient checks) and for runtimes
// without WASM SIMD.
// One decision to know: each call streams its arrays through a fixed scratch (CHUNK floats per array)
// in this thread's one WASM memory, sized before anything is written: a refused Memory.grow surfaces
// before the first chunk, so the caller can fall back to JS with its outputs untouched (a gradient that
// accumulates must not be half added). Each function returns false when WASM cannot serve (the JS loop
// then runs), true when it did the whole job.

import type { Floats } from './types.js';
import { KernelResourceError } from './types.js';
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
  geluBackward(x: number, saved: number, dy: number, dx: number, n: number): void;
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
        total += max + Math.log(sum) - X[(r0 + n) * C + t]; // −log softmax_t, as the JS loop
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
  const n = x.length;
  const chunk = Math.min(CHUNK, Math.max(n, 1));
  const bytes = align(chunk * 4);
  return run('wasm gelu', 3 * bytes, (rt, ex) => {
    const xPtr = align(rt.base);
    const yPtr = xPtr + bytes;
    const sPtr = yPtr + bytes;
    const f32 = rt.f32;
    for (let i0 = 0; i0 < n; i0 += chunk) {
      const m = Math.min(chunk, n - i0);
      f32.set(x.subarray(i0, i0 + m), xPtr / 4);
      ex.geluForward(xPtr, yPtr, saved ? sPtr : 0, m);
      y.set(f32.subarray(yPtr / 4, yPtr / 4 + m), i0);
      if (saved) saved.set(f32.subarray(sPtr / 4, sPtr / 4 + m), i0);
    }
  });
}

/** dx += dy·GELU′(x) from the forward's saved e. False (dx untouched) if WASM cannot serve. */
export function geluBackwardWasm(x: Floats, saved: Floats, dy: Floats, dx: Floats): boolean {
  if (
    !available(x) ||
    !(saved instanceof Float32Array && dy instanceof Float32Array && dx instanceof Float32Array)
  )
    return false;
  const n = x.length;
  const chunk = Math.min(CHUNK, Math.max(n, 1));
  const bytes = align(chunk * 4);
  return run('wasm gelu', 4 * bytes, (rt, ex) => {
    const xPtr = align(rt.base);
    const sPtr = xPtr + bytes;
    const gPtr = sPtr + bytes;
    const dPtr = gPtr + bytes;
    const f32 = rt.f32;
    for (let i0 = 0; i0 < n; i0 += chunk) {
      const m = Math.min(chunk, n - i0);
      f32.set(x.subarray(i0, i0 + m), xPtr / 4);
      f32.set(saved.subarray(i0, i0 + m), sPtr / 4);
      f32.set(dy.subarray(i0, i0 + m), gPtr / 4);
      f32.set(dx.subarray(i0, i0 + m), dPtr / 4);
      ex.geluBackward(xPtr, sPtr, gPtr, dPtr, m);
      dx.set(f32.subarray(dPtr / 4, dPtr / 4 + m), i0);
    }
  });
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
