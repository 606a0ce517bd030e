// Muon (src/autograd/optim.ts) against a float64 version written here the plain way: momentum, the quintic
// Newton–Schulz iteration, the RMS-matching scale and decoupled decay; the property the iteration is for
// (every singular value near 1); packed blocks; its AdamW group; exact resume; and bad input.

import { describe, expect, it } from 'vitest';
import { AdamW, Muon } from '../src/autograd/optim.js';
import { parameter, type Var } from '../src/autograd/var.js';
import { Generator } from '../src/random.js';
import { Trainer } from '../src/train/trainer.js';

const [NS_A, NS_B, NS_C] = [3.4445, -4.775, 2.0315];

function normals(gen: Generator, n: number): Float32Array {
  return Float32Array.from({ length: n }, () => gen.normal(0, 1));
}

/** C = A·B for dense row-major float64 matrices A [m, k], B [k, n]. */
function mm(a: Float64Array, b: Float64Array, m: number, k: number, n: number): Float64Array {
  const c = new Float64Array(m * n);
  for (let i = 0; i < m; i++)
    for (let p = 0; p < k; p++) for (let j = 0; j < n; j++) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

function transpose(a: Float64Array, m: number, n: number): Float64Array {
  const t = new Float64Array(m * n);
  for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) t[j * m + i] = a[i * n + j];
  return t;
}

/** Newton–Schulz in float64 on the wide orientation (rows ≤ cols), as Jordan et al. write it. */
function newtonSchulz(g: Float64Array, r: number, c: number, steps = 5): Float64Array {
  const tall = r > c;
  let x = tall ? transpose(g, r, c) : Float64Array.from(g);
  const [s, l] = tall ? [c, r] : [r, c];
  const norm = Math.hypot(...x);
  x = x.map((v) => v / (norm + 1e-7));
  for (let it = 0; it < steps; it++) {
    const a = mm(x, transpose(x, s, l), s, l, s);
    const aa = mm(a, a, s, s, s);
    const b = a.map((v, i) => NS_B * v + NS_C * aa[i]);
    const bx = mm(b, x, s, s, l);
    x = x.map((v, i) => NS_A * v + bx[i]);
  }
  return tall ? transpose(x, s, l) : x;
}

describe('Muon', () => {
  it('two steps equal a float64 Muon written out here (tall, wide and packed matrices)', () => {
    const gen = new Generator(21);
    const [mu, wd, lr] = [0.9, 0.1, 0.02];
    const shapes: [number, number, number][] = [
      [9, 4, 1], // tall
      [3, 17, 1], // wide
      [12, 5, 3], // three packed blocks of [4, 5]
    ];
    const params = shapes.map(([r, c]) => parameter(normals(gen, r * c), [r, c]));
    const opt = new Muon(
      params,
      params.map((param, n) => ({ param, blocks: shapes[n][2] })),
      { momentum: mu, weightDecay: wd },
    );
    const bufs = params.map((p) => new Float64Array(p.size));
    for (let t = 1; t <= 2; t++) {
      const want = params.map((p, n) => {
        p.grad = normals(gen, p.size);
        const [rows, cols, blocks] = shapes[n];
        const r = rows / blocks;
        const u = Float64Array.from(p.grad, (g, i) => {
          bufs[n][i] = Math.fround(mu * bufs[n][i] + (1 - mu) * g); // the buffer is float32
          return (1 - mu) * g + mu * bufs[n][i];
        });
        const out = new Float64Array(p.size);
        for (let k = 0; k < blocks; k++) {
          const o = newtonSchulz(u.subarray(k * r * cols, (k + 1) * r * cols), r, cols);
          const scale = 0.2 * Math.sqrt(Math.max(r, cols));
          for (let i = 0; i < o.length; i++) {
            const j = k * r * cols + i;
            out[j] = p.data[j] * (1 - lr * wd) - lr * scale * o[i];
          }
        }
        return out;
      });
      opt.step(lr);
      params.forEach((p, n) => {
        // float32 products through 5 iterations: a few ulps of the update's size, far below lr·scale.
        for (let i = 0; i < p.size; i++) expect(Math.abs(p.data[i] - want[n][i])).toBeLessThan(2e-5);
      });
    }
    expect(opt.t).toBe(2);
  });

  it('orthogonalises: the update stretches every direction by about the same factor', () => {
    const gen = new Generator(22);
    for (const [r, c] of [
      [64, 16],
      [16, 48],
      [32, 32],
    ]) {
      const w = parameter(new Float32Array(r * c), [r, c]);
      w.grad = normals(gen, r * c);
      const opt = new Muon([w], [{ param: w }], { momentum: 0, weightDecay: 0 });
      opt.step(1);
      const scale = 0.2 * Math.sqrt(Math.max(r, c));
      const o = Float64Array.from(w.data, (v) => -v / scale);
      // ‖O·x‖ for random unit x on the smaller side: the singular values the iteration leaves, within
      // about [0.68, 1.2] (Jordan et al.); a raw gradient's spread over 10× here.
      const [rows, cols] = r >= c ? [r, c] : [c, r];
      const ot = r >= c ? o : transpose(o, r, c);
      for (let trial = 0; trial < 30; trial++) {
        const x = Float64Array.from({ length: cols }, () => gen.normal(0, 1));
        const nx = Math.hypot(...x);
        const y = mm(ot, x, rows, cols, 1);
        const stretch = Math.hypot(...y) / nx;
        expect(stretch).toBeGreaterThan(0.6);
        expect(stretch).toBeLessThan(1.25);
      }
    }
  });

  it('gives its other parameters exactly what AdamW gives them, and resumes exactly from state()', () => {
    const make = () => {
      const gen = new Generator(23);
      const w = parameter(normals(gen, 6 * 4), [6, 4]);
      const emb = parameter(normals(gen, 5 * 4), [5, 4]);
      const bias = parameter(normals(gen, 4), [4]);
      return { w, emb, bias, gen };
    };
    const grads = (gen: Generator, ps: Var[]) => {
      for (const p of ps) p.grad = normals(gen, p.size);
    };
    const a = make();
    const muon = new Muon([a.w, a.emb, a.bias], [{ param: a.w }], { weightDecay: 0.05 });
    const b = make();
    const adam = new AdamW([b.emb, b.bias], { weightDecay: 0.05 });
    for (let t = 0; t < 3; t++) {
      grads(a.gen, [a.w, a.emb, a.bias]);
      grads(b.gen, [b.w, b.emb, b.bias]);
      muon.step(0.01);
      adam.step(0.01);
    }
    expect(a.emb.data).toEqual(b.emb.data);
    expect(a.bias.data).toEqual(b.bias.data);

    // A copy restored from state() takes the same next step.
    const c = make();
    c.w.data.set(a.w.data);
    c.emb.data.set(a.emb.data);
    c.bias.data.set(a.bias.data);
    const resumed = new Muon([c.w, c.emb, c.bias], [{ param: c.w }], { weightDecay: 0.05 });
    resumed.loadState(muon.state());
    expect(resumed.t).toBe(3);
    const g = new Generator(5);
    grads(g, [a.w, a.emb, a.bias]);
    for (const [from, to] of [
      [a.w, c.w],
      [a.emb, c.emb],
      [a.bias, c.bias],
    ])
      to.grad = from.grad!.slice();
    muon.step(0.01);
    resumed.step(0.01);
    for (const [x, y] of [
      [a.w, c.w],
      [a.emb, c.emb],
      [a.bias, c.bias],
    ])
      expect(y.data).toEqual(x.data);
  });

  it('rms sets the size of a matrix update, in proportion', () => {
    const updates = [0.2, 0.5].map((rms) => {
      const gen = new Generator(24);
      const w = parameter(new Float32Array(8 * 6), [8, 6]);
      w.grad = normals(gen, w.size);
      new Muon([w], [{ param: w }], { rms, weightDecay: 0 }).step(0.1);
      return w.data;
    });
    for (let i = 0; i < updates[0].length; i++) expect(updates[1][i]).toBeCloseTo(2.5 * updates[0][i], 6);
    // RMS of the update / lr is rms (every singular value near 1, so ‖O‖²_F ≈ min(r, c)).
    const rmsGot =
      Math.sqrt(Array.from(updates[0]).reduce((a: number, v: number) => a + v * v, 0) / updates[0].length) /
      0.1;
    expect(rmsGot).toBeGreaterThan(0.2 * 0.7);
    expect(rmsGot).toBeLessThan(0.2 * 1.2);
  });

  it('a NaN or ∞ in a matrix gradient spoils that matrix only (the iteration mixes its entries)', () => {
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY]) {
      const gen = new Generator(25);
      const w = parameter(normals(gen, 5 * 4), [5, 4]);
      const other = parameter(normals(gen, 3 * 3), [3, 3]);
      w.grad = normals(gen, w.size);
      w.grad[7] = bad;
      other.grad = normals(gen, other.size);
      new Muon([w, other], [{ param: w }, { param: other }]).step(0.01);
      expect(Array.from(w.data).every(Number.isNaN)).toBe(true);
      expect(Array.from(other.data).every(Number.isFinite)).toBe(true);
    }
  });

  it('refuses matrices it cannot serve, naming them', () => {
    const w = parameter(new Float32Array(12), [4, 3]);
    const v = parameter(new Float32Array(4), [4]);
    expect(() => new Muon([w], [{ param: v }])).toThrow(/Muon: a matrix \[4\] is not among params/);
    expect(() => new Muon([w, v], [{ param: v }])).toThrow(/Muon: matrix 1 \[4\] is not a matrix/);
    expect(() => new Muon([w], [{ param: w }], { momentum: 1 })).toThrow(/Muon: momentum must be < 1, got 1/);
    expect(() => new Muon([w], [{ param: w }], { nsSteps: 0 })).toThrow(
      /Muon: nsSteps must be a positive integer/,
    );
    expect(() => new Muon([w], [{ param: w }], { rms: Number.NaN })).toThrow(/Muon: rms must be/);
    const opt = new Muon([w, v], [{ param: w }]);
    const good = opt.state();
    expect(() => opt.loadState({ ...good, m: [new Float32Array(5), good.m[1]] })).toThrow(
      /Muon.loadState: matrix 0 \[4,3\] has 12 weights, its momentum 5/,
    );
    expect(() => opt.loadState({ ...good, m: [good.m[0]] })).toThrow(
      /Muon.loadState: moments for 1\/2 parameters, expected 2/,
    );
    expect(() => new Muon([w], [{ param: w, blocks: 3 }])).toThrow(
      /Muon: matrix 0 \[4,3\] is not a matrix of 3 row blocks/,
    );
  });
});

describe("Trainer's optimizer: 'muon'", () => {
  it('trains, is deterministic, resumes exactly, and is part of the run key', () => {
    const options = { task: 'copy', seed: 2, steps: 6, optimizer: 'muon' } as const;
    const straight = new Trainer(options);
    while (!straight.done) straight.trainStep();
    expect(straight.losses.every(Number.isFinite)).toBe(true);
    const first = new Trainer(options);
    for (let i = 0; i < 3; i++) first.trainStep();
    const second = new Trainer(options);
    second.restoreState(first.saveState());
    while (!second.done) second.trainStep();
    expect(second.losses).toEqual(straight.losses);
    for (const [name, p] of straight.model.params)
      expect(second.model.params.get(name)!.data).toEqual(p.data);
    const adam = new Trainer({ ...options, optimizer: 'adamw' });
    expect(() => adam.restoreState(first.saveState())).toThrow(/"optimizer":"muon"/);
    expect(adam.losses).toEqual([]);
    expect(() => new Trainer({ ...options, optimizer: 'adamw', muonRms: 0.5 })).toThrow(
      /Trainer: muonRms needs optimizer 'muon'/,
    );
    expect(() => new Trainer({ ...options, muonRms: 0 })).toThrow(/Trainer: muonRms must be/);
    expect(() => new Trainer({ ...options, optimizer: 'sgd' as 'muon' })).toThrow(
      /Trainer: optimizer must be 'adamw' or 'muon', got "sgd"/,
    );
  });
});
