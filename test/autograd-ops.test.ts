// The autograd's hot ops (GELU, LayerNorm, softmax cross-entropy, embedding, splitLast, add, scale,
// dropout, AdamW, clipGradNorm) against plain float64 versions written here the straightforward way, forward
// and backward, float32 and float64 Vars, on random shapes with odd widths.
// One decision to know: each comparison allows what the op's storage explains — float64 Vars a few float64
// ulps of a magnitude (Σ|terms| of the plain formula), float32 Vars the float32 roundings of the result and
// of each float32 accumulation — and nothing more; NaN must land exactly where the plain version puts it.

import { describe, expect, it } from 'vitest';
import {
  add,
  crossEntropy,
  dropout,
  embedding,
  fastExp,
  gelu,
  layerNorm,
  linear,
  scale,
  splitLast,
} from '../src/autograd/ops.js';
import { AdamW, clipGradNorm } from '../src/autograd/optim.js';
import { backward, constant, type Floats, parameter, type Var } from '../src/autograd/var.js';
import { Generator } from '../src/random.js';

const F32_ULP = 2 ** -23; // float32 spacing at 1 (the rounding error is at most half of it)
const F64_ULP = 2 ** -52;
const WIDTHS = [1, 3, 17, 65, 129];
const DTYPES = ['float32', 'float64'] as const;
type Dtype = (typeof DTYPES)[number];

/** A standard normal sample, scaled. */
function normals(gen: Generator, n: number, std = 1): Float64Array {
  return Float64Array.from({ length: n }, () => gen.normal(0, std));
}

function store(values: ArrayLike<number>, dtype: Dtype): Floats {
  return dtype === 'float64' ? Float64Array.from(values) : Float32Array.from(values);
}

function param(values: ArrayLike<number>, shape: number[], dtype: Dtype): Var {
  return parameter(store(values, dtype), shape);
}

/** [rows…, width] with 1–3 leading axes of 1–3. */
function shapeWith(gen: Generator, width: number): number[] {
  const lead = Array.from(
    { length: 1 + Math.floor(gen.random() * 3) },
    () => 1 + Math.floor(gen.random() * 3),
  );
  return [...lead, width];
}

/**
 * got ≈ want elementwise: |got − want| ≤ tol·mag (mag the plain formula's Σ|terms|, ≥ |want|), and NaN
 * exactly where want has NaN; ±∞ must match exactly.
 */
function expectClose(
  label: string,
  got: ArrayLike<number>,
  want: ArrayLike<number>,
  mag: ArrayLike<number>,
  tol: number,
): void {
  expect(got.length, label).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    const g = got[i];
    const w = want[i];
    if (Number.isNaN(w) || !Number.isFinite(w)) {
      if (!Object.is(g, w) && !(Number.isNaN(g) && Number.isNaN(w)))
        expect.fail(`${label}[${i}]: got ${g}, the plain version ${w}`);
      continue;
    }
    const err = Math.abs(g - w);
    if (!(err <= tol * mag[i] + Number.MIN_VALUE))
      expect.fail(`${label}[${i}]: got ${g}, want ${w} (error ${err}, allowed ${tol * mag[i]})`);
  }
}

const rounding = (dtype: Dtype, float32Ulps: number, float64Ulps = 8) =>
  dtype === 'float32' ? float32Ulps * F32_ULP : float64Ulps * F64_ULP;

// --- the plain float64 versions ---------------------------------------------------------------------

const GELU_C = Math.sqrt(2 / Math.PI);
const GELU_A = 0.044715;

function plainGelu(v: number): number {
  return 0.5 * v * (1 + Math.tanh(GELU_C * (v + GELU_A * v * v * v)));
}

function plainGeluGrad(v: number): number {
  const t = Math.tanh(GELU_C * (v + GELU_A * v * v * v));
  return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * GELU_C * (1 + 3 * GELU_A * v * v);
}

interface LayerNormPlain {
  y: Float64Array;
  yMag: Float64Array;
  dx: Float64Array;
  dxMag: Float64Array;
  dw: Float64Array;
  dwMag: Float64Array;
  db: Float64Array;
  dbMag: Float64Array;
}

function plainLayerNorm(
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  b: ArrayLike<number>,
  dy: ArrayLike<number>,
  D: number,
): LayerNormPlain {
  const N = x.length / D;
  const r: LayerNormPlain = {
    y: new Float64Array(N * D),
    yMag: new Float64Array(N * D),
    dx: new Float64Array(N * D),
    dxMag: new Float64Array(N * D),
    dw: new Float64Array(D),
    dwMag: new Float64Array(D),
    db: new Float64Array(D),
    dbMag: new Float64Array(D),
  };
  for (let n = 0; n < N; n++) {
    const row = Array.from({ length: D }, (_, d) => x[n * D + d]);
    const mean = row.reduce((s, v) => s + v, 0) / D;
    const variance = row.reduce((s, v) => s + (v - mean) * (v - mean), 0) / D;
    const rstd = 1 / Math.sqrt(variance + 1e-5);
    const xhat = row.map((v) => (v - mean) * rstd);
    const g = Array.from({ length: D }, (_, d) => dy[n * D + d] * w[d]);
    const mg = g.reduce((s, v) => s + v, 0) / D;
    const mgx = g.reduce((s, v, d) => s + v * xhat[d], 0) / D;
    const mgAbs = g.reduce((s, v) => s + Math.abs(v), 0) / D;
    const mgxAbs = g.reduce((s, v, d) => s + Math.abs(v * xhat[d]), 0) / D;
    for (let d = 0; d < D; d++) {
      const i = n * D + d;
      r.y[i] = xhat[d] * w[d] + b[d];
      r.yMag[i] = (Math.abs(row[d]) + Math.abs(mean)) * rstd * Math.abs(w[d]) + Math.abs(b[d]);
      r.dx[i] = rstd * (g[d] - mg - xhat[d] * mgx);
      r.dxMag[i] = rstd * (Math.abs(g[d]) + mgAbs + Math.abs(xhat[d]) * mgxAbs) * (1 + Math.abs(xhat[d]));
      r.dw[d] += dy[i] * xhat[d];
      r.dwMag[d] += Math.abs(dy[i] * xhat[d]);
      r.db[d] += dy[i];
      r.dbMag[d] += Math.abs(dy[i]);
    }
  }
  return r;
}

/** Mean cross-entropy and its gradient (seeded with g), rows whose target is `ignore` left out. */
function plainCrossEntropy(
  x: ArrayLike<number>,
  targets: Int32Array,
  C: number,
  ignore: number,
  g: number,
): { loss: number; dx: Float64Array } {
  const N = targets.length;
  const dx = new Float64Array(N * C);
  let total = 0;
  let count = 0;
  for (let n = 0; n < N; n++) if (targets[n] !== ignore) count++;
  for (let n = 0; n < N; n++) {
    const t = targets[n];
    if (t === ignore) continue;
    const row = Array.from({ length: C }, (_, c) => x[n * C + c]);
    const max = Math.max(...row);
    const e = row.map((v) => Math.exp(v - max));
    const sum = e.reduce((s, v) => s + v, 0);
    total += max - row[t] + Math.log(sum); // max − x_t first: a huge max would swallow log Σ
    for (let c = 0; c < C; c++) dx[n * C + c] = (g / count) * (e[c] / sum - (c === t ? 1 : 0));
  }
  return { loss: count ? total / count : 0, dx };
}

// --- the tests ----------------------------------------------------------------------------------------

describe('fastExp, the exp under GELU and float32 cross-entropy', () => {
  it('is within 2 ulp of Math.exp on [−708, 709.7], and exact at the ends of its range', () => {
    const gen = new Generator(1);
    let worst = 0;
    for (const span of [1e-6, 0.1, 1, 20, 700]) {
      for (let i = 0; i < 20000; i++) {
        const a = (gen.random() * 2 - 1) * span;
        const want = Math.exp(a);
        const ulp = 2 ** (Math.floor(Math.log2(want)) - 52);
        worst = Math.max(worst, Math.abs(fastExp(a) - want) / ulp);
      }
    }
    expect(worst).toBeLessThanOrEqual(2);
    expect(fastExp(0)).toBe(1);
    expect(fastExp(-0)).toBe(1);
    expect(fastExp(Number.NEGATIVE_INFINITY)).toBe(0);
    expect(fastExp(-800)).toBe(0);
    expect(fastExp(Number.POSITIVE_INFINITY)).toBe(Number.POSITIVE_INFINITY);
    expect(fastExp(710)).toBe(Number.POSITIVE_INFINITY);
    expect(fastExp(Number.NaN)).toBeNaN();
    for (const a of [-708, -700.25, 700.5, 709.7])
      expect(Math.abs(fastExp(a) / Math.exp(a) - 1)).toBeLessThan(1e-15);
  });
});

describe('gelu vs the plain tanh form', () => {
  for (const dtype of DTYPES) {
    it(`${dtype}: forward and backward on odd widths, tails included`, () => {
      const gen = new Generator(2);
      for (const width of WIDTHS) {
        const shape = shapeWith(gen, width);
        const n = shape.reduce((p, d) => p * d, 1);
        const values = normals(gen, n, 3);
        for (const [i, v] of [-12, -7, -5.5, -0.001, 0, 1e-9, 7, 12].entries()) if (i < n) values[i] = v;
        const x = param(values, shape, dtype);
        const dy = normals(gen, n);
        const y = gelu(x);
        backward(y, dy);
        const xs = Array.from(x.data);
        const dys = Array.from(store(dy, dtype)); // the seed as the grad buffer held it
        // The tanh form rounds 1 + tanh u: its absolute error, ~|x|·ulp(1), bounds the tails (where the
        // op, x / (1 + e^(−2u)), keeps the digits the tanh form loses).
        // Float32 Vars run the WASM kernel's float32 lanes (assembly/simd.ts geluSpan): e^(−2u) there is
        // within about (1 + 0.6·|u|)·1e-6 relative, u = √(2/π)·(v + 0.044715·v³) rounded in float32.
        const tol = rounding(dtype, 9);
        const u = (v: number) =>
          dtype === 'float32' ? Math.abs(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3)) : 0;
        const yMag = xs.map((v) => Math.abs(plainGelu(v)) * (1 + u(v)) + (Math.abs(v) * F64_ULP) / tol);
        expectClose(`${dtype} y, width ${width}`, y.data, xs.map(plainGelu), yMag, tol);
        const dxWant = xs.map((v, i) => dys[i] * plainGeluGrad(v));
        const dxMag = xs.map((v, i) => Math.abs(dys[i]) * (1 + Math.abs(v) ** 3));
        expectClose(`${dtype} dx, width ${width}`, x.grad!, dxWant, dxMag, rounding(dtype, 9));
      }
    });
  }
});

describe('layerNorm vs a plain float64 LayerNorm', () => {
  for (const dtype of DTYPES) {
    it(`${dtype}: y, ∂x, ∂weight, ∂bias on odd widths`, () => {
      const gen = new Generator(3);
      for (const width of WIDTHS) {
        const shape = shapeWith(gen, width);
        const n = shape.reduce((p, d) => p * d, 1);
        const N = n / width;
        const x = param(
          normals(gen, n, 2).map((v) => v + 0.5),
          shape,
          dtype,
        );
        const w = param(normals(gen, width), [width], dtype);
        const b = param(normals(gen, width), [width], dtype);
        const dy = store(normals(gen, n), dtype);
        const y = layerNorm(x, w, b);
        backward(y, dy);
        const p = plainLayerNorm(x.data, w.data, b.data, dy, width);
        const label = `${dtype}, width ${width}`;
        expectClose(`y ${label}`, y.data, p.y, p.yMag, rounding(dtype, 2, 64));
        expectClose(`dx ${label}`, x.grad!, p.dx, p.dxMag, rounding(dtype, 2 + width / 8, 64 * width));
        // ∂weight and ∂bias add one row at a time into the parameter's own float type.
        expectClose(`dw ${label}`, w.grad!, p.dw, p.dwMag, rounding(dtype, 2 * N + 2, 64));
        expectClose(`db ${label}`, b.grad!, p.db, p.dbMag, rounding(dtype, 2 * N + 2, 64));
      }
    });
  }

  it('an input that needs no gradient gets none; the others get the same grads as when all do', () => {
    const gen = new Generator(4);
    const xv = normals(gen, 3 * 17);
    const wv = normals(gen, 17);
    const bv = normals(gen, 17);
    const dy = normals(gen, 3 * 17);
    const x = param(xv, [3, 17], 'float64');
    const frozen = constant(Float64Array.from(wv), [17]);
    const bias = param(bv, [17], 'float64');
    backward(layerNorm(x, frozen, bias), dy);
    expect(frozen.grad).toBeUndefined();
    const p = plainLayerNorm(xv, wv, bv, dy, 17);
    expectClose('dx', x.grad!, p.dx, p.dxMag, 64 * 17 * F64_ULP);
    expectClose('db', bias.grad!, p.db, p.dbMag, 64 * F64_ULP);
  });
});

describe('crossEntropy vs a plain softmax cross-entropy', () => {
  for (const dtype of DTYPES) {
    it(`${dtype}: loss and ∂logits, ignored rows (default −1 and a custom ignoreIndex)`, () => {
      const gen = new Generator(5);
      for (const C of WIDTHS) {
        for (const ignore of [-1, 0]) {
          const N = 1 + Math.floor(gen.random() * 9);
          const x = param(normals(gen, N * C, 4), [N, C], dtype);
          const targets = Int32Array.from({ length: N }, (_, n) =>
            n % 3 === 1 ? ignore : Math.floor(gen.random() * C),
          );
          const seed = 0.5 + gen.random();
          const loss = crossEntropy(x, targets, ignore);
          backward(loss, [seed]);
          const p = plainCrossEntropy(
            x.data,
            targets,
            C,
            ignore,
            dtype === 'float32' ? Math.fround(seed) : seed,
          );
          const label = `${dtype}, C ${C}, ignore ${ignore}`;
          // Float32 Vars run the WASM kernel's float32 exps (assembly/ops.ts): each within about 1e-6 relative.
          expectClose(`loss ${label}`, loss.data, [p.loss], [Math.abs(p.loss) + 1], rounding(dtype, 9, 64));
          const mag = Array.from(p.dx, (v) => Math.abs(v) + 1e-3 * seed); // Σ over a row is 0: small terms cancel
          expectClose(`dx ${label}`, x.grad ?? new Float64Array(N * C), p.dx, mag, rounding(dtype, 9, 64));
          // Ignored rows get exactly nothing.
          for (let n = 0; n < N; n++) {
            if (targets[n] !== ignore) continue;
            for (let c = 0; c < C; c++) expect(x.grad?.[n * C + c] ?? 0).toBe(0);
          }
        }
      }
    });
  }
});

describe('embedding, splitLast, add and scale vs plain loops', () => {
  for (const dtype of DTYPES) {
    it(`${dtype}: embedding gathers rows and scatter-adds repeated ids`, () => {
      const gen = new Generator(6);
      for (const D of WIDTHS) {
        const V = 5;
        const table = param(normals(gen, V * D), [V, D], dtype);
        const ids = Int32Array.from({ length: 7 }, () => Math.floor(gen.random() * V));
        ids[6] = ids[0]; // a repeat
        const dy = store(normals(gen, 7 * D), dtype);
        const y = embedding(table, ids, [7]);
        backward(y, dy);
        const want = new Float64Array(7 * D);
        const dt = new Float64Array(V * D);
        const mag = new Float64Array(V * D);
        for (let t = 0; t < 7; t++)
          for (let d = 0; d < D; d++) {
            want[t * D + d] = table.data[ids[t] * D + d];
            dt[ids[t] * D + d] += dy[t * D + d];
            mag[ids[t] * D + d] += Math.abs(dy[t * D + d]);
          }
        expect(Array.from(y.data)).toEqual(Array.from(want));
        expectClose(`${dtype} dtable, D ${D}`, table.grad!, dt, mag, rounding(dtype, 8, 8));
      }
    });

    it(`${dtype}: splitLast copies each piece and adds the pieces' grads back`, () => {
      const gen = new Generator(7);
      for (const widths of [[1], [1, 2], [17, 0, 48], [65, 64, 1], [43, 43, 43]]) {
        const W = widths.reduce((s, w) => s + w, 0);
        const shape = shapeWith(gen, W);
        const n = shape.reduce((p, d) => p * d, 1);
        const N = n / W;
        const x = param(normals(gen, n), shape, dtype);
        const pieces = splitLast(x, widths);
        const seeds = widths.map((w) => store(normals(gen, N * w), dtype));
        pieces.forEach((y, k) => {
          expect(y.shape).toEqual([...shape.slice(0, -1), widths[k]]);
          backward(y, seeds[k]);
        });
        const dx = new Float64Array(n);
        let from = 0;
        widths.forEach((w, k) => {
          const want: number[] = [];
          for (let r = 0; r < N; r++)
            for (let c = 0; c < w; c++) {
              want.push(x.data[r * W + from + c]);
              dx[r * W + from + c] += seeds[k][r * w + c];
            }
          expect(Array.from(pieces[k].data)).toEqual(want);
          from += w;
        });
        expect(Array.from(x.grad ?? new Float64Array(n))).toEqual(Array.from(dx)); // one add per element
      }
    });

    it(`${dtype}: add, same shape and broadcast over leading axes, and scale`, () => {
      const gen = new Generator(8);
      for (const D of WIDTHS) {
        const shape = shapeWith(gen, D);
        const n = shape.reduce((p, d) => p * d, 1);
        for (const bShape of [shape, [D], shape.slice(-2)]) {
          const nb = bShape.reduce((p, d) => p * d, 1);
          const a = param(normals(gen, n), shape, dtype);
          const b = param(normals(gen, nb), bShape, dtype);
          const dy = store(normals(gen, n), dtype);
          const y = add(a, b);
          backward(y, dy);
          const round = dtype === 'float32' ? Math.fround : (v: number) => v;
          expect(Array.from(y.data)).toEqual(
            Array.from({ length: n }, (_, i) => round(a.data[i] + b.data[i % nb])),
          );
          expect(Array.from(a.grad!)).toEqual(Array.from(dy));
          const db = new Float64Array(nb);
          const mag = new Float64Array(nb);
          for (let i = 0; i < n; i++) {
            db[i % nb] += dy[i];
            mag[i % nb] += Math.abs(dy[i]);
          }
          expectClose(`${dtype} db ${bShape}`, b.grad!, db, mag, rounding(dtype, n / nb + 1, 8));
        }
        const x = param(normals(gen, n), shape, dtype);
        const dy = store(normals(gen, n), dtype);
        const round = dtype === 'float32' ? Math.fround : (v: number) => v;
        const y = scale(x, Math.SQRT2);
        backward(y, dy);
        expect(Array.from(y.data)).toEqual(Array.from(x.data, (v) => round(Math.SQRT2 * v)));
        expect(Array.from(x.grad!)).toEqual(Array.from(dy, (v) => round(Math.SQRT2 * v)));
      }
    });

    it(`${dtype}: add's gradients: the first one a copy of dy, later ones added, x + x twice dy`, () => {
      const gen = new Generator(10);
      for (const D of WIDTHS) {
        const a = param(normals(gen, 3 * D), [3, D], dtype);
        const b = param(normals(gen, 3 * D), [3, D], dtype);
        const dy1 = store(normals(gen, 3 * D), dtype);
        const dy2 = store(normals(gen, 3 * D), dtype);
        backward(add(a, b), dy1); // fresh grads: copies of dy1 (not views of it)
        expect(a.grad).not.toBe(dy1);
        expect(Array.from(a.grad!)).toEqual(Array.from(dy1));
        expect(Array.from(b.grad!)).toEqual(Array.from(dy1));
        expect(a.grad).not.toBe(b.grad);
        backward(add(a, b), dy2); // existing grads: added into
        const round = dtype === 'float32' ? Math.fround : (v: number) => v;
        const sum = Array.from(dy1, (v, i) => round(v + dy2[i]));
        expect(Array.from(a.grad!)).toEqual(sum);
        expect(Array.from(b.grad!)).toEqual(sum);
        const x = param(normals(gen, 3 * D), [3, D], dtype);
        backward(add(x, x), dy1);
        expect(Array.from(x.grad!)).toEqual(Array.from(dy1, (v) => round(2 * v)));
      }
    });

    it(`${dtype}: linear's input gradient into a fresh buffer is the one added to zeros, bit for bit`, () => {
      const gen = new Generator(11);
      for (const [N, K, M] of [
        [1, 3, 17],
        [17, 65, 3],
        [65, 129, 33],
      ]) {
        const w = param(normals(gen, M * K), [M, K], dtype);
        const dy = store(normals(gen, N * M), dtype);
        const xs = [0, 1, 2].map(() => param(normals(gen, N * K), [N, K], dtype));
        xs[1].gradBuffer(); // zeros already there: the product is added to them
        xs[2].gradBuffer().fill(0.5); // a gradient already there: the product is added to it
        for (const x of xs) backward(linear(x, w), dy);
        expect(Array.from(xs[0].grad!)).toEqual(Array.from(xs[1].grad!));
        // Added to 0.5: the float32 GEMM starts its sums from it, so only close to (fresh + 0.5).
        const tol = (dtype === 'float32' ? 1e-5 : 1e-13) * K;
        xs[2].grad!.forEach((v, i) => {
          const want = xs[1].grad![i] + 0.5;
          expect(Math.abs(v - want)).toBeLessThanOrEqual(tol * (1 + Math.abs(want)));
        });
      }
    });

    it(`${dtype}: linear with K = 0 (no input features) gives the bias on every row, as PyTorch's Linear`, () => {
      const x = param([], [2, 0], dtype);
      const w = param([], [3, 0], dtype);
      const b = param([1, 2, 3], [3], dtype);
      const y = linear(x, w, b);
      expect(y.shape).toEqual([2, 3]);
      expect(Array.from(y.data)).toEqual([1, 2, 3, 1, 2, 3]);
      backward(y);
      expect(Array.from(b.grad!)).toEqual([2, 2, 2]);
      expect(x.grad?.length ?? 0).toBe(0);
    });

    it(`${dtype}: dropout draws one number per element, as the plain loop`, () => {
      for (const D of WIDTHS) {
        const gen = new Generator(9);
        const x = param(normals(gen, 3 * D), [3, D], dtype);
        const dy = store(normals(gen, 3 * D), dtype);
        const y = dropout(x, 0.3, new Generator(D));
        backward(y, dy);
        const draws = new Generator(D);
        const round = dtype === 'float32' ? Math.fround : (v: number) => v;
        for (let i = 0; i < 3 * D; i++) {
          const keep = draws.random() < 0.3 ? 0 : 1 / 0.7;
          expect(y.data[i]).toBe(round(x.data[i] * keep));
          expect(x.grad![i]).toBe(round(0 + dy[i] * keep)); // added to a zero buffer: −0 becomes 0
        }
      }
    });
  }
});

describe('AdamW and clipGradNorm vs hand-computed steps', () => {
  it('one and two AdamW steps: decay on matrices only, float32 moments, bias correction', () => {
    const gen = new Generator(10);
    const [b1, b2, eps, wd, lr] = [0.8, 0.95, 1e-6, 0.1, 0.01];
    for (const dtype of DTYPES) {
      const W = param(normals(gen, 3 * 5), [3, 5], dtype);
      const b = param(normals(gen, 5), [5], dtype);
      const idle = param(normals(gen, 4), [2, 2], dtype); // no grad: untouched
      const params = [W, b, idle];
      const opt = new AdamW(params, { betas: [b1, b2], eps, weightDecay: wd });
      const m = params.map((p) => new Float64Array(p.size));
      const v = params.map((p) => new Float64Array(p.size));
      const idleBefore = Array.from(idle.data);
      for (let t = 1; t <= 2; t++) {
        W.grad = store(normals(gen, 15), dtype);
        b.grad = store(normals(gen, 5), dtype);
        const want = [W, b].map((p, k) => {
          const decay = p.shape.length >= 2 ? 1 - lr * wd : 1;
          return Array.from(p.data, (w, i) => {
            const g = p.grad![i];
            m[k][i] = Math.fround(b1 * m[k][i] + (1 - b1) * g); // moments are float32
            v[k][i] = Math.fround(b2 * v[k][i] + (1 - b2) * g * g);
            const mHat = m[k][i] / (1 - b1 ** t);
            const vHat = v[k][i] / (1 - b2 ** t);
            return w * decay - (lr * mHat) / (Math.sqrt(vHat) + eps);
          });
        });
        opt.step(lr);
        [W, b].forEach((p, k) => {
          const mag = want[k].map((w) => Math.abs(w) + lr);
          expectClose(`${dtype} step ${t} param ${k}`, p.data, want[k], mag, rounding(dtype, 1, 16));
        });
        expect(Array.from(idle.data)).toEqual(idleBefore);
      }
      expect(opt.t).toBe(2);
    }
  });

  it('clipGradNorm: the global norm over float32 and float64 grads, scaling only above maxNorm', () => {
    const gen = new Generator(11);
    const a = param(normals(gen, 17), [17], 'float32');
    const b = param(normals(gen, 65), [5, 13], 'float64');
    const none = param(normals(gen, 3), [3], 'float32'); // no grad
    a.grad = store(normals(gen, 17), 'float32');
    b.grad = store(normals(gen, 65), 'float64');
    let sq = 0;
    for (const g of [a.grad, b.grad]) for (const v of g) sq += v * v;
    const norm = Math.sqrt(sq);
    const [ga, gb] = [Array.from(a.grad), Array.from(b.grad)];
    expect(clipGradNorm([a, b, none], norm * 2)).toBeCloseTo(norm, 12);
    expect(Array.from(a.grad)).toEqual(ga); // under the limit: unchanged
    expect(clipGradNorm([a, b, none], norm / 4)).toBeCloseTo(norm, 12);
    const c = 1 / 4;
    expectClose(
      'a clipped',
      a.grad,
      ga.map((g) => g * c),
      ga.map((g) => Math.abs(g)),
      F32_ULP,
    );
    expectClose(
      'b clipped',
      b.grad,
      gb.map((g) => g * c),
      gb.map((g) => Math.abs(g)),
      4 * F64_ULP,
    );
    expect(none.grad).toBeUndefined();
  });

  it('clipGradNorm of a zero gradient is 0 and leaves it zero (no 0/0)', () => {
    const p = param([1, 2, 3], [3], 'float32');
    p.grad = new Float32Array(3);
    expect(clipGradNorm([p], 1)).toBe(0);
    expect(Array.from(p.grad)).toEqual([0, 0, 0]);
    expect(clipGradNorm([], 1)).toBe(0);
  });
});

describe('NaN and ±∞ go where the plain versions put them (nothing masked)', () => {
  const specials = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY];
  const nanPattern = (xs: ArrayLike<number>) => Array.from(xs, (v) => (Number.isNaN(v) ? 'NaN' : v));

  for (const dtype of DTYPES) {
    it(`${dtype}: gelu forward and backward`, () => {
      const xs = [...specials, 0, -0, 1, -1, -40, 40, 1e30, -1e30];
      const x = param(xs, [xs.length], dtype);
      const y = gelu(x);
      backward(y, new Float64Array(xs.length).fill(1));
      const round = dtype === 'float32' ? Math.fround : (v: number) => v;
      const xsStored = Array.from(x.data);
      for (let i = 0; i < xs.length; i++) {
        const want = round(plainGelu(xsStored[i]));
        const dWant = round(plainGeluGrad(xsStored[i]));
        for (const [got, w] of [
          [y.data[i], want],
          [x.grad![i], dWant],
        ]) {
          if (Number.isNaN(w) || !Number.isFinite(w))
            expect(got).toBe(w); // Object.is: NaN is NaN
          else expect(Math.abs(got - w)).toBeLessThanOrEqual(Math.abs(w) * 1e-6 + 1e-30);
        }
      }
    });

    it(`${dtype}: layerNorm, crossEntropy, add, dropout, AdamW and clipGradNorm`, () => {
      const D = 5;
      for (const s of specials) {
        // layerNorm: a special in row 0 poisons that row (forward and ∂x), not row 1.
        const xv = [1, s, 2, 3, 4, 0.5, -1, 2, 0, 1];
        const x = param(xv, [2, D], dtype);
        const w = param([1, 2, 3, 4, 5], [D], dtype);
        const b = param([0, 0, 1, 0, 0], [D], dtype);
        const dy = new Float64Array(2 * D).fill(1);
        const y = layerNorm(x, w, b);
        backward(y, dy);
        const p = plainLayerNorm(x.data, w.data, b.data, store(dy, dtype), D);
        expect(nanPattern(y.data).map((v) => v === 'NaN')).toEqual(nanPattern(p.y).map((v) => v === 'NaN'));
        expect(nanPattern(x.grad!).map((v) => v === 'NaN')).toEqual(nanPattern(p.dx).map((v) => v === 'NaN'));

        // crossEntropy: a special logit in a counted row makes the loss what the plain formula makes it.
        const logits = param([0.5, s, -1, 2, 0, 1], [2, 3], dtype);
        for (const targets of [Int32Array.of(0, 2), Int32Array.of(1, 2), Int32Array.of(-1, 2)]) {
          logits.grad = undefined;
          const loss = crossEntropy(logits, targets);
          backward(loss);
          const q = plainCrossEntropy(logits.data, targets, 3, -1, 1);
          if (Number.isNaN(q.loss)) expect(loss.data[0]).toBeNaN();
          else expect(loss.data[0]).toBeCloseTo(q.loss, 5);
          expect(nanPattern(logits.grad!).map((v) => v === 'NaN')).toEqual(
            nanPattern(q.dx).map((v) => v === 'NaN'),
          );
        }

        // add: x + special everywhere the plain sum has it.
        const a = param([1, s, 3], [3], dtype);
        const c = param([s, 1, -Number.POSITIVE_INFINITY], [3], dtype);
        expect(nanPattern(add(a, c).data)).toEqual(nanPattern([1 + s, s + 1, 3 - Number.POSITIVE_INFINITY]));

        // dropout: a dropped NaN or ∞ is NaN (∞·0), a kept one stays.
        const dx = param([s, s, s, s, s, s, s, s], [8], dtype);
        const dropped = dropout(dx, 0.5, new Generator(1));
        const draws = new Generator(1);
        expect(nanPattern(dropped.data)).toEqual(
          nanPattern(Array.from({ length: 8 }, () => s * (draws.random() < 0.5 ? 0 : 2))),
        );

        // clipGradNorm: the norm is NaN or ∞ as Σ g² is; ∞ > maxNorm scales by 0 (∞·0 = NaN), NaN does not.
        const cp = param([1, 2], [2], dtype);
        cp.grad = store([s, 1], dtype);
        const norm = clipGradNorm([cp], 1);
        if (Number.isNaN(s)) {
          expect(norm).toBeNaN();
          expect(nanPattern(cp.grad)).toEqual(['NaN', 1]);
        } else {
          expect(norm).toBe(Number.POSITIVE_INFINITY);
          expect(nanPattern(cp.grad)).toEqual(['NaN', 0]);
        }

        // AdamW: m̂/√v̂ of a special grad is ∞/∞ or NaN, so that weight is NaN; the other is updated.
        const wp = param([1, 2], [2], dtype);
        wp.grad = store([s, 1], dtype);
        new AdamW([wp]).step(0.1);
        expect(wp.data[0]).toBeNaN();
        expect(Number.isFinite(wp.data[1])).toBe(true);
      }
    });
  }
});
