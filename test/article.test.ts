// The article's class and claims, checked: SelfAttention equals the formula, its defaults are not
// uniform, masks never leak, long rows work, and the §4.2 numbers are what softmax really gives.

import { describe, expect, it } from 'vitest';
import { attentionWeights, SelfAttention, Tensor } from '../src/index.js';
import { expectAllClose } from './helpers.js';

/** softmax(X·WQ·(X·WK)ᵀ/√dK)·X·WV in float64 on number[][], written out independently of the library. */
function articleFormula(X: number[][], WQ: number[][], WK: number[][], WV: number[][], mask?: number[][]) {
  const mul = (A: number[][], B: number[][]) =>
    A.map((row) => B[0].map((_, j) => row.reduce((s, a, k) => s + a * B[k][j], 0)));
  const Q = mul(X, WQ);
  const K = mul(X, WK);
  const V = mul(X, WV);
  const dK = WQ[0].length;
  const weights = Q.map((q, i) => {
    const s = K.map((k, j) =>
      mask && mask[i][j] === 0
        ? Number.NEGATIVE_INFINITY
        : q.reduce((a, x, e) => a + x * k[e], 0) / Math.sqrt(dK),
    );
    const m = s.reduce((a, b) => Math.max(a, b), Number.NEGATIVE_INFINITY);
    if (m === Number.NEGATIVE_INFINITY) return s.map(() => 0);
    const e = s.map((x) => Math.exp(x - m));
    const z = e.reduce((a, b) => a + b, 0);
    return e.map((x) => x / z);
  });
  return { weights, output: mul(weights, V) };
}

describe('SelfAttention (the article class)', () => {
  const n = 5;
  const dModel = 12;
  const X = Tensor.randn([n, dModel], { seed: 11 }).toArray() as number[][];

  it('equals the formula for settable WQ, WK, WV, with and without a mask, on number[][] inputs', () => {
    const attn = new SelfAttention({ dModel, dK: 4, dV: 3, seed: 1 });
    attn.WQ = Tensor.randn([dModel, 4], { seed: 2 });
    attn.WK = Tensor.randn([dModel, 4], { seed: 3 }).toArray() as number[][];
    attn.WV = Tensor.randn([dModel, 3], { seed: 4 });
    const mask = Array.from({ length: n }, (_, i) => Array.from({ length: n }, (_, j) => (j <= i ? 1 : 0)));
    for (const m of [undefined, mask]) {
      const got = attn.forward(X, m);
      const want = articleFormula(
        X,
        attn.WQ.toArray() as number[][],
        attn.WK.toArray() as number[][],
        attn.WV.toArray() as number[][],
        m,
      );
      expect(got.output.shape).toEqual([n, 3]);
      expect(got.attentionWeights.shape).toEqual([n, n]);
      expectAllClose(got.attentionWeights, want.weights.flat());
      expectAllClose(got.output, want.output.flat());
    }
  });

  it('default initialisation gives non-uniform weights (the article printed 0.250 everywhere)', () => {
    const attn = new SelfAttention({ dModel: 512, dK: 64, dV: 64, seed: 0 });
    const w = attn.forward(Tensor.randn([4, 512], { seed: 1 })).attentionWeights.data;
    expect(Math.max(...w) - Math.min(...w)).toBeGreaterThan(0.2);
  });

  it('is reproducible from its seed', () => {
    const a = new SelfAttention({ dModel, dK: 4, dV: 4, seed: 9 });
    const b = new SelfAttention({ dModel, dK: 4, dV: 4, seed: 9 });
    expect(a.forward(X).output.data).toEqual(b.forward(X).output.data);
  });

  it('a fully masked row gives 0, where the article’s −1e9 fill gives the uniform average', () => {
    const attn = new SelfAttention({ dModel, dK: 4, dV: 4, seed: 1 });
    const mask = Array.from({ length: n }, (_, i) => Array.from({ length: n }, () => (i === 2 ? 0 : 1)));
    const { output, attentionWeights: w } = attn.forward(X, mask);
    expect(Array.from(w.data.subarray(2 * n, 3 * n))).toEqual([0, 0, 0, 0, 0]);
    expect(Array.from(output.data.subarray(2 * 4, 3 * 4))).toEqual([0, 0, 0, 0]);
    // The article's recipe: every masked score −1e9, then softmax → 1/n each.
    const filled = Array.from({ length: n }, () => -1e9);
    const m = Math.max(...filled);
    const e = filled.map((x) => Math.exp(x - m));
    expect(e.map((x) => x / e.reduce((a, b) => a + b))).toEqual(Array(n).fill(1 / n));
  });
});

describe("the article's §4.2 numbers", () => {
  // Scores 20, 0.5, 0.3, 0.1 as one query against four keys (q = 1, k = score, scale chosen).
  const q = [[1]];
  const k = [[20], [0.5], [0.3], [0.1]];
  it('unscaled: the largest weight is 0.99999999…', () => {
    const w = attentionWeights(q, k, { scale: 1 }).data;
    expect(w[0]).toBeGreaterThan(0.9999999);
  });
  it('scaled: the article computes exp(20/8) against 0.5, 0.3, 0.1 → 0.748, not the 0.768 it prints', () => {
    const w = attentionWeights(q, [[20 / 8], [0.5], [0.3], [0.1]], { scale: 1 }).data;
    expect(w[0]).toBeCloseTo(0.748, 3);
    expect(Math.abs(w[0] - 0.768)).toBeGreaterThan(0.01);
    // Scaling all four scores by 1/8, as attention does, gives 0.796.
    expect(attentionWeights(q, k, { scale: 1 / 8 }).data[0]).toBeCloseTo(0.796, 3);
  });
});

it('a row of 200,000 keys (the article’s Math.max(...row) overflows the stack) works', () => {
  const S = 200_000;
  const k = Tensor.randn([S, 4], { seed: 5 });
  const w = attentionWeights(Tensor.randn([1, 4], { seed: 6 }), k).data;
  let sum = 0;
  for (const x of w) sum += x;
  expect(sum).toBeCloseTo(1, 4);
});
