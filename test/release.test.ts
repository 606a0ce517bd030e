// autograd.release: a training step's arrays serve the next step. What it must never do: change a result,
// give back an array someone else still owns (a parameter's values or grads, a caller's input), or let a
// released Var be read or differentiated silently.

import { describe, expect, it } from 'vitest';
import { crossEntropy, linear } from '../src/autograd/ops.js';
import { AdamW } from '../src/autograd/optim.js';
import {
  backward,
  constant,
  floatsFor,
  floatsLike,
  opResult,
  parameter,
  release,
  type Var,
} from '../src/autograd/var.js';
import { TinyTransformer } from '../src/model/transformer.js';

const CONFIG = {
  vocabSize: 32,
  dModel: 16,
  numHeads: 2,
  numLayers: 2,
  dFF: 32,
  maxLen: 8,
  causal: true,
} as const;

/** `steps` AdamW steps of a small TinyTransformer on one batch; the losses, and the final weights. */
function train(steps: number, releaseEach: boolean): { losses: number[]; weights: Float32Array[] } {
  const model = new TinyTransformer(CONFIG, { seed: 3 });
  const B = 3;
  const L = 8;
  const ids = Int32Array.from({ length: B * L }, (_, i) => (i * 7) % CONFIG.vocabSize);
  const targets = Int32Array.from({ length: B * L }, (_, i) => (i * 5 + 1) % CONFIG.vocabSize);
  const opt = new AdamW(model.parameters());
  const losses: number[] = [];
  for (let s = 0; s < steps; s++) {
    const loss = crossEntropy(model.forward(ids, B, L, {}).logits, targets);
    backward(loss);
    opt.step(1e-2);
    opt.zeroGrad();
    losses.push(loss.data[0]);
    if (releaseEach) release(loss);
  }
  return { losses, weights: model.parameters().map((p) => Float32Array.from(p.data)) };
}

describe('autograd.release', () => {
  it('changes no result: the same losses and weights, bit for bit, with and without it', () => {
    const plain = train(6, false);
    const released = train(6, true);
    expect(released.losses).toEqual(plain.losses);
    released.weights.forEach((w, i) => {
      expect(Array.from(w)).toEqual(Array.from(plain.weights[i]));
    });
    expect(plain.losses[5]).toBeLessThan(plain.losses[0]);
  });

  it('gives the next allocation of that length a released array, zeroed where the op asks for zeros', () => {
    const w = parameter(
      Float32Array.from({ length: 6 * 4 }, (_, i) => i / 10),
      [6, 4],
    );
    const x = constant(
      Float32Array.from({ length: 5 * 4 }, (_, i) => i),
      [5, 4],
    );
    const y = linear(x, w); // [5, 6]: 30 floats
    const values = y.data;
    const valuesLeft = Array.from(values);
    backward(y);
    const grad = y.grad!;
    const gradValues = Array.from(grad);
    release(y);
    expect(() => y.data).toThrow(/released/);
    expect(y.released).toBe(true);
    expect(y.grad).toBeUndefined();
    // Its two arrays (values and gradient, 30 floats each) serve the next two of that length.
    const first = floatsFor(values, 30);
    expect([values, grad]).toContain(first);
    expect(Array.from(first)).toEqual(first === grad ? gradValues : valuesLeft); // as left, not zeroed
    const second = floatsLike(values, 30);
    expect([values, grad].filter((a) => a !== first)).toEqual([second]);
    expect(Array.from(second).every((v) => v === 0)).toBe(true); // zeroed
    expect(floatsFor(values, 30)).not.toBe(first); // the pool is empty again: a new array
  });

  it('never gives back a leaf array: parameters and inputs keep their values and grads', () => {
    const wData = Float32Array.from({ length: 12 }, (_, i) => i + 1);
    const w = parameter(wData, [3, 4]);
    const xData = new Float32Array(8).fill(1);
    const x = constant(xData, [2, 4]);
    // A custom op that shares its input's array (a view): releasing it must not free the parameter's.
    const view = opResult(w.data, [4, 3], [w], () => {
      const g = w.gradBuffer();
      for (let i = 0; i < g.length; i++) g[i] += view.grad![i];
    });
    const y = linear(x, w);
    const loss = opResult(new Float32Array([y.data[0] + view.data[0]]), [1], [y, view], () => {
      y.gradBuffer()[0] += loss.grad![0];
      view.gradBuffer()[0] += loss.grad![0];
    });
    backward(loss);
    const wGrad = Array.from(w.grad!);
    release(loss);
    expect(w.data).toBe(wData);
    expect(Array.from(w.data)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    expect(Array.from(w.grad!)).toEqual(wGrad);
    expect(x.data).toBe(xData);
    // None of them comes back from the pool.
    for (const a of [floatsFor(wData, 12), floatsFor(xData, 8), floatsFor(wData, 12)]) {
      expect(a).not.toBe(wData);
      expect(a).not.toBe(xData);
    }
    expect(() => view.data).toThrow(/released/);
  });

  it('two losses on one trunk: each released, the second after the first freed the trunk', () => {
    const w = parameter(
      Float32Array.from({ length: 8 * 8 }, (_, i) => Math.sin(i)),
      [8, 8],
    );
    const x = constant(
      Float32Array.from({ length: 3 * 8 }, (_, i) => Math.cos(i)),
      [3, 8],
    );
    const trunk = linear(x, w);
    const l1 = crossEntropy(linear(trunk, w), new Int32Array([0, 1, 2]));
    const l2 = crossEntropy(linear(trunk, w), new Int32Array([3, 4, 5]));
    backward(l1);
    backward(l2);
    release(l1);
    expect(() => release(l2)).not.toThrow();
    expect(l2.released).toBe(true);
    expect(Array.from(w.grad!).every(Number.isFinite)).toBe(true);
  });

  it('a value carried into the next step as a leaf (constant(h.data)) is never reused under it', () => {
    const run = (withRelease: boolean) => {
      const w = parameter(
        Float32Array.from({ length: 4 * 4 }, (_, i) => 0.1 * Math.sin(i + 1)),
        [4, 4],
      );
      const opt = new AdamW([w]);
      let carry = constant(new Float32Array(2 * 4).fill(0.5), [2, 4]);
      const losses: number[] = [];
      for (let s = 0; s < 4; s++) {
        const h = linear(carry, w);
        const loss = crossEntropy(linear(h, w), new Int32Array([s % 4, (s + 1) % 4]));
        backward(loss);
        opt.step(0.1);
        opt.zeroGrad();
        losses.push(loss.data[0]);
        carry = constant(h.data, [2, 4]); // detached: the next step reads h's floats
        if (withRelease) release(loss);
      }
      return losses;
    };
    expect(run(true)).toEqual(run(false));
  });

  it('lets go of lengths no op asked for since the last release (shapes that changed)', () => {
    const w = parameter(
      Float32Array.from({ length: 16 }, (_, i) => i / 16),
      [4, 4],
    );
    const step = (rows: number) => {
      const y = linear(constant(new Float32Array(rows * 4).fill(1), [rows, 4]), w);
      backward(y);
      const arrays = [y.data, y.grad!];
      release(y);
      return arrays;
    };
    const old = step(1001); // 4004 floats, values and gradient, into the pool
    step(7); // another shape asks for no array of 4004 floats; its release lets those go
    step(9);
    const like = new Float32Array(1);
    for (const a of [floatsFor(like, 4004), floatsFor(like, 4004)]) expect(old).not.toContain(a);
  });

  it('refuses to differentiate a released graph, or a Var computed from one, with a clear error', () => {
    const w = parameter(new Float32Array([1, 2, 3, 4]), [2, 2]);
    const x = constant(new Float32Array([1, 1, 1, 1]), [2, 2]);
    const h = linear(x, w);
    const later: Var = linear(h, w); // made before the release, from h
    const loss = crossEntropy(h, new Int32Array([0, 1]));
    backward(loss);
    release(loss);
    expect(() => backward(loss)).toThrow(/backward: the loss was released/);
    expect(() => release(loss)).not.toThrow(); // a second release is a no-op
    const like = new Float32Array(1);
    const handed = [0, 1, 2, 3].map(() => floatsFor(like, 4)); // h's values and gradient, then new ones
    expect(new Set(handed).size).toBe(4); // never the same array twice
    expect(() => backward(later)).toThrow(/backward: the graph was released/);
    expect(() => linear(h, w)).toThrow(/was released/);
  });
});
