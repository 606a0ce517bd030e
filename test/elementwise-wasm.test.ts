// The autograd's element-wise float32 loops in WASM SIMD (assembly/ops.ts via src/kernels/ops-wasm.ts: add
// and its broadcast, dst += src, c·x and dst += c·x, AdamW's update, an embedding's scatter-add) against
// the JS loops they replace, written out here: every result must be the loop's float bit for bit (Object.is,
// so −0 and NaN count), on odd lengths just past the drivers' 4096-float threshold, lengths that take
// several chunks of their scratch, and hostile values (NaN, ±∞, sums that overflow, −0, subnormals).

import { describe, expect, it } from 'vitest';
import { add, embedding, gelu, linear, scale } from '../src/autograd/ops.js';
import { AdamW } from '../src/autograd/optim.js';
import { backward, constant, parameter } from '../src/autograd/var.js';
import {
  adamwWasm,
  addWasm,
  geluBackwardWasm,
  geluForwardWasm,
  scaleWasm,
  scatterAddRowsWasm,
} from '../src/kernels/ops-wasm.js';
import { wasmSupport } from '../src/kernels/wasm-runtime.js';
import { Generator } from '../src/random.js';

const MIN = 4096; // the drivers' threshold: shorter arrays stay in JS
/** Odd lengths past the threshold, and one that takes four chunks of 64 K floats. */
const LENGTHS = [MIN + 1, MIN + 3, MIN + 17, 65 * 129, 3 * 65536 + 129];
const HOSTILE = [Number.NaN, Infinity, -Infinity, 3e38, -3e38, -0, 1e-45, -1e-40, 0];

function values(gen: Generator, n: number, hostile = true): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = (gen.random() - 0.5) * 8;
  if (hostile) for (let i = 0; i < n; i += 97) a[i] = HOSTILE[(i / 97) % HOSTILE.length];
  return a;
}

function expectSame(label: string, got: Float32Array, want: Float32Array): void {
  expect(got.length, label).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    if (!Object.is(got[i], want[i])) expect.fail(`${label} [${i}]: got ${got[i]}, want ${want[i]}`);
  }
}

const hasWasm = wasmSupport() === true;

describe.runIf(hasWasm)('element-wise WASM loops: the JS loops bit for bit', () => {
  for (const n of LENGTHS) {
    it(`n = ${n}: a + b, dst += src, c·x and dst += c·x`, () => {
      const gen = new Generator(n);
      const a = values(gen, n);
      const b = values(gen, n);
      const want = new Float32Array(n);
      for (let i = 0; i < n; i++) want[i] = a[i] + b[i];
      const y = new Float32Array(n).fill(7);
      expect(addWasm(a, b, y)).toBe(true);
      expectSame('a + b', y, want);
      const dst = a.slice();
      expect(addWasm(dst, b, dst)).toBe(true); // y may be a
      expectSame('dst += src', dst, want);

      const c = Math.SQRT2 * 8; // not a float32: the float64 product must be rounded once
      const scaled = new Float32Array(n);
      for (let i = 0; i < n; i++) scaled[i] = c * a[i];
      const ys = new Float32Array(n).fill(3);
      expect(scaleWasm(a, ys, c, false)).toBe(true);
      expectSame('c·x', ys, scaled);
      const acc = b.slice();
      const accWant = b.slice();
      for (let i = 0; i < n; i++) accWant[i] += c * a[i];
      expect(scaleWasm(a, acc, c, true)).toBe(true);
      expectSame('dst += c·x', acc, accWant);
    });
  }

  for (const nb of [1, 3, 17, 65, 129]) {
    it(`b repeating every ${nb} floats over ${Math.ceil(MIN / nb) + 2} repeats`, () => {
      const gen = new Generator(nb);
      const reps = Math.ceil(MIN / nb) + 2;
      const a = values(gen, nb * reps);
      const b = values(gen, nb);
      const want = new Float32Array(a.length);
      for (let o = 0; o < a.length; o += nb) for (let j = 0; j < nb; j++) want[o + j] = a[o + j] + b[j];
      const y = new Float32Array(a.length);
      expect(addWasm(a, b, y)).toBe(true);
      expectSame('a + b repeated', y, want);
    });
  }

  it('a repeating b longer than the scratch, a length not a multiple of b, short or float64 arrays: not served, nothing written', () => {
    const big = new Float32Array(2 * 70000);
    const y = new Float32Array(big.length).fill(5);
    expect(addWasm(big, new Float32Array(70000), y)).toBe(false);
    expect(addWasm(new Float32Array(MIN + 1), new Float32Array(2), new Float32Array(MIN + 1))).toBe(false);
    expect(addWasm(new Float32Array(MIN - 1), new Float32Array(MIN - 1), new Float32Array(MIN - 1))).toBe(
      false,
    );
    expect(addWasm(new Float64Array(MIN), new Float64Array(MIN), new Float64Array(MIN))).toBe(false);
    expect(scaleWasm(new Float64Array(MIN), new Float64Array(MIN), 2, false)).toBe(false);
    expect(y.every((v) => v === 5)).toBe(true);
  });

  for (const n of [MIN + 1, MIN + 17, 3 * 65536 + 3]) {
    it(`AdamW on ${n} parameters, 3 steps: weights and both moments`, () => {
      const gen = new Generator(n + 1);
      const w = values(gen, n, false);
      const want = w.slice();
      const m = new Float32Array(n);
      const v = new Float32Array(n);
      const mw = new Float32Array(n);
      const vw = new Float32Array(n);
      const [b1, b2, eps, lr, wd] = [0.9, 0.999, 1e-8, 3e-3, 0.1];
      for (let t = 1; t <= 3; t++) {
        const g = values(gen, n); // NaN, ±∞ and huge grads too: they must poison exactly what JS poisons
        const k = {
          b1,
          a1: 1 - b1,
          b2,
          a2: 1 - b2,
          decay: 1 - lr * wd,
          stepSize: lr / (1 - b1 ** t),
          rc2: 1 / Math.sqrt(1 - b2 ** t),
          eps,
        };
        for (let i = 0; i < n; i++) {
          const gi = g[i];
          const mi = Math.fround(k.b1 * mw[i] + k.a1 * gi);
          const vi = Math.fround(k.b2 * vw[i] + k.a2 * gi * gi);
          mw[i] = mi;
          vw[i] = vi;
          want[i] = want[i] * k.decay - (k.stepSize * mi) / (Math.sqrt(vi) * k.rc2 + k.eps);
        }
        expect(adamwWasm(w, g, m, v, k)).toBe(true);
        expectSame(`w, step ${t}`, w, want);
        expectSame(`m, step ${t}`, m, mw);
        expectSame(`v, step ${t}`, v, vw);
      }
    });
  }

  it('the AdamW class: a large parameter (WASM) and a small one (JS) take the same update', () => {
    const gen = new Generator(5);
    const n = MIN + 5;
    const big = parameter(values(gen, n, false), [n]);
    const small = parameter(big.data.slice(0, 64), [64]);
    const opt = new AdamW([big, small], { weightDecay: 0 });
    for (let t = 0; t < 3; t++) {
      const g = values(gen, n, false);
      big.grad = g;
      small.grad = g.slice(0, 64);
      opt.step(1e-2);
    }
    expectSame('first 64 weights', big.data.slice(0, 64) as Float32Array, small.data as Float32Array);
  });

  for (const D of [3, 17, 129]) {
    it(`embedding scatter-add, D = ${D}: repeated ids summed in order, several chunks`, () => {
      const gen = new Generator(D);
      const V = 37;
      const n = D === 3 ? 50000 : Math.ceil(MIN / D) + 3; // D = 3: three chunks of rows
      const ids = new Int32Array(n).map(() => Math.floor(gen.random() * V));
      const dy = values(gen, n * D);
      const dt = values(gen, V * D, false);
      const want = dt.slice();
      for (let t = 0; t < n; t++) for (let d = 0; d < D; d++) want[ids[t] * D + d] += dy[t * D + d];
      expect(scatterAddRowsWasm(dy, ids, dt, D)).toBe(true);
      expectSame('dt', dt, want);
    });
  }

  it('an id outside the table: not served, the table untouched', () => {
    const D = 64;
    const ids = new Int32Array(100).fill(2);
    ids[77] = 10;
    const dt = new Float32Array(10 * D).fill(1);
    expect(scatterAddRowsWasm(new Float32Array(100 * D).fill(1), ids, dt, D)).toBe(false);
    ids[77] = -1;
    expect(scatterAddRowsWasm(new Float32Array(100 * D).fill(1), ids, dt, D)).toBe(false);
    expect(dt.every((v) => v === 1)).toBe(true);
  });

  it('GELU backward into a gradient just allocated: written whole, never read, the floats of adding to zeros', () => {
    const gen = new Generator(31);
    const n = MIN + 3;
    const x = values(gen, n);
    const saved = new Float32Array(n);
    expect(geluForwardWasm(x, new Float32Array(n), saved)).toBe(true);
    const dy = values(gen, n);
    dy[5] = -0; // a −0 product: adding it to a zero-filled gradient gives +0, and so must the fresh write
    const want = new Float32Array(n);
    expect(geluBackwardWasm(x, saved, dy, want)).toBe(true);
    const fresh = new Float32Array(n).fill(Number.NaN);
    expect(geluBackwardWasm(x, saved, dy, fresh, true)).toBe(true);
    expectSame('fresh dx', fresh, want);
    expect(Object.is(fresh[5], 0)).toBe(true);
  });

  it('GELU arrays of different lengths: not served, nothing written (the JS loop then runs on what it is given)', () => {
    const n = 65536 + 100;
    const x = new Float32Array(n).fill(0.5);
    const dx = new Float32Array(65536 + 10);
    expect(geluBackwardWasm(x, new Float32Array(n), new Float32Array(n).fill(1), dx)).toBe(false);
    expect(dx.every((v) => v === 0)).toBe(true);
    expect(geluForwardWasm(x, new Float32Array(n - 1))).toBe(false);
  });

  it('Var.freshGrad: an unzeroed buffer the first time (the op writes it whole), then undefined', () => {
    const v = parameter(new Float32Array(8), [8]);
    const g = v.freshGrad();
    expect(g).toBe(v.grad);
    expect(g?.length).toBe(8);
    expect(v.freshGrad()).toBeUndefined(); // a grad exists now: ops add into gradBuffer()
    expect(v.gradBuffer()).toBe(g);
    // Through the autograd: gelu(linear(x)) writes both fresh grads; the same as float64 Vars.
    const gen = new Generator(4);
    const [x0, w0] = [values(gen, 64 * 80, false), values(gen, 96 * 80, false)];
    const run = (F: Float32ArrayConstructor | Float64ArrayConstructor) => {
      const x = parameter(F.from(x0), [64, 80]);
      const w = parameter(F.from(w0), [96, 80]);
      const y = gelu(linear(x, w));
      backward(
        y,
        Array.from({ length: y.size }, (_, i) => (i % 5) - 2),
      );
      return [x.grad!, w.grad!];
    };
    const a = run(Float32Array);
    const r = run(Float64Array);
    for (let t = 0; t < 2; t++) {
      let scale = 0;
      for (const v of r[t]) scale = Math.max(scale, Math.abs(v));
      for (let i = 0; i < r[t].length; i++)
        expect(Math.abs(a[t][i] - r[t][i])).toBeLessThanOrEqual(2e-5 * scale);
    }
  });

  it('through the autograd: add, scale and embedding on float32 Vars match their float64 twins', () => {
    const gen = new Generator(9);
    const [N, D, V] = [80, 64, 50]; // 5120 floats: past the threshold
    const table32 = values(gen, V * D, false);
    const ids = new Int32Array(N).map(() => Math.floor(gen.random() * V));
    const bias32 = values(gen, D, false);
    const run = (table: Float32Array | Float64Array, bias: Float32Array | Float64Array) => {
      const t = parameter(table, [V, D]);
      const e = embedding(t, ids, [N]);
      const s = scale(e, 3);
      const y = add(add(s, e), constant(bias, [D]));
      backward(
        y,
        Array.from({ length: y.size }, (_, i) => (i % 7) - 3),
      );
      return { y: y.data, grad: t.grad! };
    };
    const f32 = run(table32, bias32);
    const f64 = run(Float64Array.from(table32), Float64Array.from(bias32));
    // Small integers as gradients and float32 inputs: both float types give results within rounding.
    for (let i = 0; i < f64.y.length; i++) expect(f32.y[i]).toBeCloseTo(f64.y[i], 4);
    for (let i = 0; i < f64.grad.length; i++) expect(f32.grad[i]).toBeCloseTo(f64.grad[i], 3);
  });
});
