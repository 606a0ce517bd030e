// The WASM element-wise kernels of the autograd (assembly/ops.ts via src/kernels/ops-wasm.ts: softmax
// cross-entropy statistics and gradient, tanh-GELU and LayerNorm forward and backward) against float64 references
// written here with Math.exp, on odd sizes (1, 3, 17, 65, 129), sizes that take several chunks of the
// driver's scratch, a row wider than the scratch, and hostile values (NaN, ±∞, huge logits, ignored rows).
// One decision to know: LayerNorm computes in float64 and rounds once to float32, so its results must be
// the float64 reference rounded, give or take one float32 ulp; cross-entropy and GELU compute in float32
// lanes, so theirs must be within the error bounds stated in assembly/ops.ts and simd.ts (derived from
// the float32 roundings of each formula, checked here element by element). NaN / ±∞ must land exactly
// where the reference puts them, in every kernel.

import { describe, expect, it } from 'vitest';
import { crossEntropy, gelu, layerNorm } from '../src/autograd/ops.js';
import { backward, parameter } from '../src/autograd/var.js';
import {
  crossEntropyBackwardWasm,
  crossEntropyWasm,
  geluBackwardWasm,
  geluForwardWasm,
  layerNormBackwardWasm,
  layerNormWasm,
} from '../src/kernels/ops-wasm.js';
import { wasmSupport } from '../src/kernels/wasm-runtime.js';
import { tensorOps } from '../src/model/ops-tensor.js';
import { Generator } from '../src/random.js';
import { Tensor } from '../src/tensor.js';

const SIZES = [1, 3, 17, 65, 129];
const GELU_C = Math.sqrt(2 / Math.PI);
const GELU_A = 0.044715;

function normals(gen: Generator, n: number, scale = 1): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const u = gen.random() || 1e-12;
    a[i] = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * gen.random()) * scale;
  }
  return a;
}

/** float32 ulp at |v| (the subnormal spacing below the normal range). */
function ulp32(v: number): number {
  const a = Math.abs(v);
  if (a < 2 ** -126) return 2 ** -149;
  return 2 ** (Math.floor(Math.log2(a)) - 23);
}

/** got (float32) is want rounded to float32 within `ulps` float32 ulps; NaN and ±∞ exactly where want has them. */
function expectRounded(label: string, got: ArrayLike<number>, want: ArrayLike<number>, ulps = 1): void {
  expect(got.length, label).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    const w = want[i];
    const g = got[i];
    if (!Number.isFinite(w) || !Number.isFinite(Math.fround(w))) {
      if (Object.is(g, Math.fround(w))) continue;
      expect(g, `${label} [${i}]`).toBe(Math.fround(w));
    }
    const err = Math.abs(g - Math.fround(w));
    if (!(err <= ulps * ulp32(w))) expect.fail(`${label} [${i}]: got ${g}, want ${w} (error ${err})`);
  }
}

/**
 * got (float32) is within tol(i, want) of want (float64); NaN and ±∞ exactly where want (rounded to float32)
 * has them.
 */
function expectClose(
  label: string,
  got: ArrayLike<number>,
  want: ArrayLike<number>,
  tol: (i: number, want: number) => number,
): void {
  expect(got.length, label).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    const w = want[i];
    const g = got[i];
    if (!Number.isFinite(Math.fround(w))) {
      if (Object.is(g, Math.fround(w))) continue;
      expect(g, `${label} [${i}]`).toBe(Math.fround(w));
    }
    const err = Math.abs(g - w);
    if (!(err <= tol(i, w)))
      expect.fail(`${label} [${i}]: got ${g}, want ${w} (error ${err}, allowed ${tol(i, w)})`);
  }
}

/** |u| of GELU's e^(−2u) at v: the float32 error of e (and so of y for v < 0) grows with it. */
function geluU(v: number): number {
  return Math.abs(GELU_C * (v + GELU_A * v * v * v));
}

/**
 * GELU's float32 bound: u is three float32 roundings (≤ 2e-7 relative), so e = e^(−2u) is within about
 * 2·|u|·2e-7 relative, plus exp2x4's 3e-7 and the division's rounding; 1e-37 absolute where y underflows
 * (e saturates at 2^128 a little before the float64 form's y leaves the float32 range).
 */
const geluTol = (v: number, want: number) =>
  Number.isFinite(v) ? (1e-6 + 6e-7 * geluU(v)) * Math.abs(want) + 1e-37 : 0;

function plainGelu(v: number): number {
  return v / (1 + Math.exp(-2 * GELU_C * (v + GELU_A * v * v * v)));
}

function plainGeluGrad(v: number): number {
  const e = Math.exp(-2 * GELU_C * (v + GELU_A * v * v * v));
  const s = 1 / (1 + e);
  const sp = e < Number.POSITIVE_INFINITY ? e * s * s : 0;
  return s + 2 * v * sp * GELU_C * (1 + 3 * GELU_A * v * v);
}

/** Softmax cross-entropy in float64 from float32 logits: the loss sum over counted rows and dx + ∂. */
function plainCrossEntropy(
  x: Float32Array,
  N: number,
  C: number,
  targets: Int32Array,
  ignore: number,
  g: number,
  dx0: Float32Array,
): { total: number; dx: Float64Array; tol: (i: number, want: number) => number } {
  let total = 0;
  const dx = Float64Array.from(dx0);
  // Each element's float32 bound: e^(x − max) is exp2x4's (3e-7) of an argument rounded twice in float32
  // (≈ |x − max|·1.2e-7 relative error in e), times g/Σ rounded, added to dx: a few ulps of dx plus that.
  const bound = new Float64Array(N * C);
  for (let n = 0; n < N; n++) {
    const t = targets[n];
    if (t === ignore) continue;
    const o = n * C;
    let max = Number.NEGATIVE_INFINITY;
    for (let i = 0; i < C; i++) max = Math.max(max, x[o + i]);
    let sum = 0;
    for (let i = 0; i < C; i++) sum += Math.exp(x[o + i] - max);
    total += max - x[o + t] + Math.log(sum); // max − x_t first: a huge max would swallow log Σ
    for (let i = 0; i < C; i++) {
      const e = Math.exp(x[o + i] - max);
      dx[o + i] = i === t ? dx0[o + i] + g * (e / sum - 1) : dx0[o + i] + e * (g / sum);
      bound[o + i] = e === 0 ? 0 : Math.abs(g) * (e / sum) * (1e-6 + 2e-7 * Math.abs(x[o + i] - max)) + 1e-37;
    }
  }
  return { total, dx, tol: (i, want) => 2 * ulp32(want) + bound[i] };
}

/** The loss's float32 bound: log Σ is within ≈ 4e-7 of exact per counted row (Σ's relative error). */
function lossTol(rows: number, want: number): number {
  return 1e-6 * rows + 1e-12 * Math.abs(want);
}

const canRun = wasmSupport() === true;

describe.runIf(canRun)('WASM GELU vs the float64 tanh form', () => {
  const hostile = [
    Number.NaN,
    Number.POSITIVE_INFINITY,
    Number.NEGATIVE_INFINITY,
    -0,
    0,
    1e-30,
    -12,
    -7.3,
    -5.5,
    6,
    30,
    -30,
    3e38,
    -3e38,
  ];
  for (const n of [...SIZES, 65536 * 2 + 5]) {
    it(`n = ${n}: y, the saved e and dx (+= into an existing gradient)`, () => {
      const gen = new Generator(n);
      const x = normals(gen, n, 3);
      for (let i = 0; i < Math.min(n, hostile.length); i++) x[(i * 7919) % n] = hostile[i];
      const y = new Float32Array(n);
      const saved = new Float32Array(n);
      expect(geluForwardWasm(x, y, saved)).toBe(true);
      const yWant = Array.from(x, plainGelu);
      const eWant = Array.from(x, (v) => Math.exp(-2 * GELU_C * (v + GELU_A * v * v * v)));
      expectClose('y', y, yWant, (i, w) => geluTol(x[i], w));
      expectClose('saved e', saved, eWant, (i, w) => geluTol(x[i], w));
      // Without a save: the same y.
      const y2 = new Float32Array(n);
      expect(geluForwardWasm(x, y2)).toBe(true);
      expect(y2).toEqual(y);

      const dy = normals(gen, n);
      const dx0 = normals(gen, n);
      const dx = dx0.slice();
      expect(geluBackwardWasm(x, saved, dy, dx)).toBe(true);
      // The reference from the same saved (float32) e, as the op's backward reads it.
      const dxWant = Array.from(x, (v, i) => {
        const e = saved[i];
        const s = 1 / (1 + e);
        const sp = e < Number.POSITIVE_INFINITY ? e * s * s : 0;
        return dx0[i] + dy[i] * (s + 2 * v * sp * GELU_C * (1 + 3 * GELU_A * v * v));
      });
      // s = 1/(1 + e), e·s² and the polynomial: a few float32 roundings on each of GELU′'s two terms.
      expectClose('dx', dx, dxWant, (i, w) => {
        const e = saved[i];
        const s = 1 / (1 + e);
        const sp = e < Number.POSITIVE_INFINITY ? e * s * s : 0;
        const v = x[i];
        const terms = s + Math.abs(2 * v * sp * GELU_C * (1 + 3 * GELU_A * v * v));
        return 2 * ulp32(w) + 1e-6 * Math.abs(dy[i]) * terms;
      });
      // And the gradient itself is GELU′ (from the exact e) to float32 accuracy where x is finite.
      for (let i = 0; i < n; i++) {
        if (!Number.isFinite(x[i]) || Math.abs(x[i]) > 1e6) continue;
        const want = dx0[i] + dy[i] * plainGeluGrad(x[i]);
        expect(Math.abs(dx[i] - want)).toBeLessThanOrEqual(
          4 * ulp32(want) + 1e-6 * Math.abs(dy[i]) * (1 + Math.abs(x[i]) ** 3),
        );
      }
    });
  }

  it('the autograd gelu on float32 Vars is the op on float64 Vars to float32 accuracy (the same function)', () => {
    const gen = new Generator(9);
    for (const n of SIZES) {
      const v = normals(gen, n, 4);
      const y32 = gelu(parameter(v, [n])).data;
      const y64 = gelu(parameter(Float64Array.from(v), [n])).data;
      expectClose(`n ${n}`, y32, y64, (i, w) => geluTol(v[i], w));
    }
  });

  it('float64 arrays are not served (the JS loop keeps them)', () => {
    const x = new Float64Array(3);
    expect(geluForwardWasm(x, new Float64Array(3))).toBe(false);
    expect(geluBackwardWasm(x, new Float64Array(3), new Float64Array(3), new Float64Array(3))).toBe(false);
  });
});

describe.runIf(canRun)('WASM softmax cross-entropy vs float64 with Math.exp', () => {
  const cases: [number, number][] = [
    ...SIZES.map((C) => [5, C] as [number, number]),
    [129, 17],
    [3, 1],
    [70, 4096], // several chunks of rows
    [2, 70000], // a row wider than the scratch: one row a chunk
  ];
  for (const [N, C] of cases) {
    for (const ignore of [-1, 2, -100]) {
      it(`N ${N}, C ${C}, ignoreIndex ${ignore}: loss, row statistics and dx (+= into an existing gradient)`, () => {
        const gen = new Generator(N * 1000 + C + ignore);
        const x = normals(gen, N * C, 4);
        const targets = Int32Array.from({ length: N }, (_, n) =>
          n % 4 === 1 ? ignore : Math.floor(gen.random() * C),
        );
        const stats = new Float64Array(2 * N);
        const total = crossEntropyWasm(x, N, C, targets, ignore, stats);
        const g = 0.37;
        const dx0 = normals(gen, N * C);
        const dx = dx0.slice();
        expect(crossEntropyBackwardWasm(x, dx, N, C, targets, ignore, stats, g)).toBe(true);
        const want = plainCrossEntropy(x, N, C, targets, ignore, g, dx0);
        expect(total).toBeDefined();
        const counted = targets.filter((t) => t !== ignore).length;
        expect(Math.abs(total! - want.total)).toBeLessThanOrEqual(lossTol(counted, want.total));
        expectClose('dx', dx, want.dx, want.tol);
        // Ignored rows: untouched, bit for bit.
        for (let n = 0; n < N; n++) {
          if (targets[n] !== ignore) continue;
          expect(dx.subarray(n * C, (n + 1) * C)).toEqual(dx0.subarray(n * C, (n + 1) * C));
        }
        // The same total without stats (the noGrad forward).
        expect(crossEntropyWasm(x, N, C, targets, ignore, undefined)).toBe(total);
      });
    }
  }

  it('hostile logits: NaN, ±∞ and huge values give what the float64 formula gives, row by row', () => {
    const C = 7;
    const rows = [
      [0.5, Number.NaN, -1, 2, 0, 1, 3],
      [0.5, Number.POSITIVE_INFINITY, -1, 2, 0, 1, 3],
      [0.5, Number.NEGATIVE_INFINITY, -1, 2, 0, 1, 3],
      Array(C).fill(Number.NEGATIVE_INFINITY),
      [1e30, -1e30, 3e38, -3e38, 0, 1, 2],
      [88, -88, 100, -104, 700, -745, 0],
      [3e38, 3e38, 3e38, 3e38, 3e38, 3e38, 3e38],
      [0, 0, 0, 0, 0, 0, 0],
    ];
    const N = rows.length;
    const x = Float32Array.from(rows.flat());
    for (const t of [0, 1, 2, 6]) {
      const targets = Int32Array.from({ length: N }, () => t);
      const stats = new Float64Array(2 * N);
      const dx0 = new Float32Array(N * C);
      const dx = dx0.slice();
      // Row by row, so one NaN row does not hide the others' totals.
      for (let n = 0; n < N; n++) {
        const xr = x.subarray(n * C, (n + 1) * C);
        const st = new Float64Array(2);
        const total = crossEntropyWasm(xr, 1, C, targets.subarray(n, n + 1), -1, st);
        const want = plainCrossEntropy(xr, 1, C, targets.subarray(n, n + 1), -1, 1, dx0.subarray(0, C));
        if (Number.isNaN(want.total)) expect(total, `row ${n}, target ${t}`).toBeNaN();
        else if (!Number.isFinite(want.total)) expect(total).toBe(want.total);
        else expect(Math.abs(total! - want.total)).toBeLessThanOrEqual(lossTol(1, want.total));
        stats.set(st, 2 * n);
      }
      expect(crossEntropyBackwardWasm(x, dx, N, C, targets, -1, stats, 1)).toBe(true);
      const want = plainCrossEntropy(x, N, C, targets, -1, 1, dx0);
      expectClose(`dx, target ${t}`, dx, want.dx, want.tol);
      // A −∞ logit (a masked class) gets exactly no gradient, not a flushed-to-tiny one.
      expect(dx[2 * C + 1]).toBe(t === 1 ? -1 : 0);
    }
  });

  it('one class, or one class far above the rest: loss exactly 0 and no gradient (e^0 is exactly 1)', () => {
    const one = crossEntropyWasm(Float32Array.of(3.25), 1, 1, Int32Array.of(0), -1, new Float64Array(2));
    expect(one).toBe(0);
    // Rows [0, −200], [−200, 7] and [7, −∞], each target the larger.
    const x2 = Float32Array.of(0, -200, -200, 7, 7, Number.NEGATIVE_INFINITY);
    const stats = new Float64Array(6);
    const targets = Int32Array.of(0, 1, 0);
    expect(crossEntropyWasm(x2, 3, 2, targets, -1, stats)).toBe(0);
    const dx = new Float32Array(6);
    expect(crossEntropyBackwardWasm(x2, dx, 3, 2, targets, -1, stats, 0.5)).toBe(true);
    expect(Array.from(dx)).toEqual([0, 0, 0, 0, 0, 0]);
  });

  it('the autograd crossEntropy on float32 Vars against float64 Vars: the loss and ∂logits, all rows ignored too', () => {
    const gen = new Generator(11);
    for (const C of SIZES) {
      const N = 6;
      const v = normals(gen, N * C, 3);
      const targets = Int32Array.from({ length: N }, (_, n) => (n === 2 ? -1 : (n * 7) % C));
      const a = parameter(v, [N, C]);
      const b = parameter(Float64Array.from(v), [N, C]);
      const la = crossEntropy(a, targets);
      const lb = crossEntropy(b, targets);
      expectClose(`loss C ${C}`, la.data, lb.data, (_, w) => lossTol(N, w) / N + 2 * ulp32(w));
      backward(la);
      backward(lb);
      const g = b.grad!;
      // ∂logits = (softmax − onehot)/N: float32 exps, so within a few ulps of its magnitude (≤ 1/N).
      expectClose(`dx C ${C}`, a.grad!, g, (_, w) => 2 * ulp32(w) + (1e-6 * (1 + 2 * 3 * 4)) / N);
    }
    const none = parameter(new Float32Array(6), [2, 3]);
    const loss = crossEntropy(none, Int32Array.of(-1, -1));
    backward(loss);
    expect(loss.data[0]).toBe(0);
    expect(Array.from(none.grad ?? new Float32Array(6))).toEqual([0, 0, 0, 0, 0, 0]);
  });

  it('float64 logits are not served', () => {
    const x = new Float64Array(6);
    expect(crossEntropyWasm(x, 2, 3, Int32Array.of(0, 1), -1, new Float64Array(4))).toBeUndefined();
  });
});

/** LayerNorm in float64 from float32 inputs; dw and db rounded to float32 after each row, as the op adds. */
function plainLayerNorm(
  x: Float32Array,
  w: Float32Array,
  b: Float32Array,
  dy: Float32Array,
  dx0: Float32Array,
  N: number,
  D: number,
) {
  const y = new Float64Array(N * D);
  const dx = Float64Array.from(dx0);
  const dxMag = new Float64Array(N * D);
  const dw = new Float64Array(D);
  const db = new Float64Array(D);
  const stats = new Float64Array(2 * N);
  for (let n = 0; n < N; n++) {
    const o = n * D;
    let sum = 0;
    for (let d = 0; d < D; d++) sum += x[o + d];
    const mean = sum / D;
    let v = 0;
    for (let d = 0; d < D; d++) v += (x[o + d] - mean) ** 2;
    const r = 1 / Math.sqrt(v / D + 1e-5);
    stats[2 * n] = mean;
    stats[2 * n + 1] = r;
    let mg = 0;
    let mgx = 0;
    for (let d = 0; d < D; d++) {
      const h = (x[o + d] - mean) * r;
      y[o + d] = h * w[d] + b[d];
      mg += dy[o + d] * w[d];
      mgx += dy[o + d] * w[d] * h;
      dw[d] = Math.fround(dw[d] + dy[o + d] * h);
      db[d] = Math.fround(db[d] + dy[o + d]);
    }
    mg /= D;
    mgx /= D;
    for (let d = 0; d < D; d++) {
      const h = (x[o + d] - mean) * r;
      dx[o + d] += r * (dy[o + d] * w[d] - mg - h * mgx);
      dxMag[o + d] =
        Math.abs(dx0[o + d]) + r * (Math.abs(dy[o + d] * w[d]) + Math.abs(mg) + Math.abs(h * mgx));
    }
  }
  return { y, dx, dxMag, dw, db, stats };
}

describe.runIf(canRun)('WASM LayerNorm vs float64', () => {
  const cases: [number, number][] = [
    ...SIZES.map((D) => [7, D] as [number, number]),
    [3, 1],
    [1100, 129], // several chunks
    [2, 70000], // a row wider than the scratch
  ];
  for (const [N, D] of cases) {
    it(`N ${N}, D ${D}: y, stats, dx, dw, db (all += into existing gradients)`, () => {
      const gen = new Generator(N * 7 + D);
      const x = normals(gen, N * D, 2).map((v) => v + 0.5);
      const w = normals(gen, D);
      const b = normals(gen, D);
      const dy = normals(gen, N * D);
      const y = new Float32Array(N * D);
      const stats = new Float64Array(2 * N);
      expect(layerNormWasm(x, w, b, y, N, D, 1e-5, stats)).toBe(true);
      const dx0 = normals(gen, N * D);
      const dx = dx0.slice();
      const dw = new Float32Array(D);
      const db = new Float32Array(D);
      expect(layerNormBackwardWasm(x, w, dy, dx, dw, db, stats, N, D)).toBe(true);
      const p = plainLayerNorm(x, w, b, dy, dx0, N, D);
      for (let i = 0; i < 2 * N; i++)
        expect(Math.abs(stats[i] - p.stats[i])).toBeLessThanOrEqual(1e-13 * Math.abs(p.stats[i]) + 1e-13);
      expectRounded('y', y, p.y);
      for (let i = 0; i < N * D; i++) {
        const err = Math.abs(dx[i] - p.dx[i]);
        if (!(err <= ulp32(p.dx[i]) + 1e-13 * p.dxMag[i]))
          expect.fail(`dx [${i}]: got ${dx[i]}, want ${p.dx[i]}`);
      }
      // Per-row float32 sums: a flipped rounding in one row carries on, so up to one ulp per row.
      for (let d = 0; d < D; d++) {
        expect(Math.abs(dw[d] - p.dw[d])).toBeLessThanOrEqual((N + 1) * ulp32(p.dw[d]) + 1e-6);
        expect(Math.abs(db[d] - p.db[d])).toBeLessThanOrEqual((N + 1) * ulp32(p.db[d]) + 1e-6);
      }
      // Without dx (x needs no gradient): the same dw and db.
      const dw2 = new Float32Array(D);
      const db2 = new Float32Array(D);
      expect(layerNormBackwardWasm(x, w, dy, undefined, dw2, db2, stats, N, D)).toBe(true);
      expect(dw2).toEqual(dw);
      expect(db2).toEqual(db);
    });
  }

  it('a NaN or ±∞ poisons its own row (y and dx), not the others', () => {
    const D = 5;
    for (const s of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      const x = Float32Array.of(1, s, 2, 3, 4, 0.5, -1, 2, 0, 1);
      const w = Float32Array.of(1, 2, 3, 4, 5);
      const b = Float32Array.of(0, 0, 1, 0, 0);
      const y = new Float32Array(10);
      const stats = new Float64Array(4);
      expect(layerNormWasm(x, w, b, y, 2, D, 1e-5, stats)).toBe(true);
      const dy = new Float32Array(10).fill(1);
      const dx = new Float32Array(10);
      expect(layerNormBackwardWasm(x, w, dy, dx, new Float32Array(D), new Float32Array(D), stats, 2, D)).toBe(
        true,
      );
      const p = plainLayerNorm(x, w, b, dy, new Float32Array(10), 2, D);
      const nan = (a: ArrayLike<number>) => Array.from(a, (v) => Number.isNaN(v));
      expect(nan(y)).toEqual(nan(p.y));
      expect(nan(dx)).toEqual(nan(p.dx));
      expect(nan(y.subarray(5))).toEqual([false, false, false, false, false]);
    }
  });

  it('the autograd layerNorm on float32 Vars against float64 Vars, and the Tensor ops use the same function', () => {
    const gen = new Generator(12);
    for (const D of SIZES) {
      const N = 4;
      const xv = normals(gen, N * D);
      const wv = normals(gen, D);
      const bv = normals(gen, D);
      const y32 = layerNorm(parameter(xv, [N, D]), parameter(wv, [D]), parameter(bv, [D])).data;
      const y64 = layerNorm(
        parameter(Float64Array.from(xv), [N, D]),
        parameter(Float64Array.from(wv), [D]),
        parameter(Float64Array.from(bv), [D]),
      ).data;
      expectRounded(`D ${D}`, y32, y64);
      const t = tensorOps.layerNorm(new Tensor(xv, [N, D]), new Tensor(wv, [D]), new Tensor(bv, [D]));
      expect(t.data).toEqual(y32);
    }
  });
});
