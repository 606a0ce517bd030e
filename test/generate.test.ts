// Cached incremental forwards (MultiHeadAttention, TinyTransformer), generation and sampling: a cached
// forward equals the full one for any chunking of the sequence, generation gives the same tokens with
// and without the cache, and bad calls say what is wrong before anything runs.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Generator, KVCache, MultiHeadAttention, Tensor, TinyTransformer } from '../src/index.js';
import { argmax, rankedIds, sampleToken, tokenDistribution } from '../src/model/sampling.js';
import { autograd } from '../src/nn/index.js';
import { expectOneThreadWarning } from './helpers.js';

/** Splits n into consecutive chunk lengths (prefill chunks, then single tokens). */
function chunksOf(n: number, cuts: number[]): number[] {
  const points = [...new Set(cuts.map((c) => 1 + (c % Math.max(1, n - 1))))].sort((a, b) => a - b);
  const sizes: number[] = [];
  let at = 0;
  for (const p of [...points, n]) {
    if (p > at && p <= n) {
      sizes.push(p - at);
      at = p;
    }
  }
  return sizes;
}

/** Rows [t0, t0 + L) of x [B, T, D] as [B, L, D]. */
function rowsOf(x: Tensor, t0: number, L: number): Tensor {
  const [B, T, D] = x.shape;
  const out = new Float32Array(B * L * D);
  for (let b = 0; b < B; b++) out.set(x.data.subarray((b * T + t0) * D, (b * T + t0 + L) * D), b * L * D);
  return new Tensor(out, [B, L, D]);
}

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
  return d;
}

describe('MultiHeadAttention with a KVCache', () => {
  it('chunked cached forwards equal the causal forward over the whole sequence (GQA, any chunking)', () => {
    fc.assert(
      fc.property(
        fc.record({
          T: fc.integer({ min: 1, max: 40 }),
          B: fc.integer({ min: 1, max: 2 }),
          heads: fc.constantFrom<[number, number]>([4, 4], [4, 2], [4, 1], [2, 2]),
          cuts: fc.array(fc.nat(), { maxLength: 6 }),
          seed: fc.nat(),
        }),
        ({ T, B, heads: [H, Hkv], cuts, seed }) => {
          const D = 8 * H;
          const mha = new MultiHeadAttention({ embedDim: D, numHeads: H, numKvHeads: Hkv, seed });
          const x = Tensor.randn([B, T, D], { seed: seed + 1 });
          const full = mha.forward(x, x, x, { causal: true }).output;
          const cache = new KVCache({ numLayers: 1, numKvHeads: Hkv, headDim: 8 });
          let t0 = 0;
          for (const L of chunksOf(T, cuts)) {
            const chunk = rowsOf(x, t0, L);
            const got = mha.forward(chunk, chunk, chunk, { causal: true, cache, layer: 0 }).output;
            expect(maxDiff(got.data, rowsOf(full, t0, L).data)).toBeLessThanOrEqual(1e-5);
            t0 += L;
          }
          expect(cache.length).toBe(T);
        },
      ),
      { numRuns: 40 },
    );
  });

  it('a window cache equals sliding-window attention over the whole sequence', () => {
    const mha = new MultiHeadAttention({ embedDim: 32, numHeads: 4, seed: 2 });
    const T = 50;
    const w = 7;
    const x = Tensor.randn([1, T, 32], { seed: 3 });
    const full = mha.forward(x, x, x, { causal: true, window: [w - 1, 0] }).output;
    const cache = new KVCache({ numLayers: 1, numKvHeads: 4, headDim: 8, window: w });
    let t0 = 0;
    for (const L of [12, 1, 1, 5, 1, 9, 1, 20]) {
      const chunk = rowsOf(x, t0, L);
      const got = mha.forward(chunk, chunk, chunk, { causal: true, cache, layer: 0 }).output;
      expect(maxDiff(got.data, rowsOf(full, t0, L).data)).toBeLessThanOrEqual(1e-5);
      t0 += L;
    }
    expect(t0).toBe(T);
    expect(cache.heldLength(0)).toBeLessThanOrEqual(w - 1 + 20);
  });

  it('forwardAsync with a cache equals forward with one (on one thread: no Web Workers in Node)', async () => {
    const mha = new MultiHeadAttention({ embedDim: 64, numHeads: 4, seed: 4 });
    const x = Tensor.randn([1, 200, 64], { seed: 5 });
    const c1 = new KVCache({ numLayers: 1, numKvHeads: 4, headDim: 16 });
    const c2 = new KVCache({ numLayers: 1, numKvHeads: 4, headDim: 16 });
    await expectOneThreadWarning('MultiHeadAttention.forwardAsync', async () => {
      for (const [t0, L] of [
        [0, 150],
        [150, 1],
        [151, 49],
      ]) {
        const chunk = rowsOf(x, t0, L);
        const a = mha.forward(chunk, chunk, chunk, { causal: true, cache: c1, layer: 0 }).output;
        const b = (
          await mha.forwardAsync(chunk, chunk, chunk, { causal: true, cache: c2, layer: 0, threads: 2 })
        ).output;
        expect(b.data).toEqual(a.data);
      }
    });
  });

  it('says what is wrong with a cache call', () => {
    const mha = new MultiHeadAttention({ embedDim: 16, numHeads: 2, seed: 1 });
    const x = Tensor.randn([1, 3, 16], { seed: 2 });
    const cache = new KVCache({ numLayers: 2, numKvHeads: 2, headDim: 8 });
    expect(() => mha.forward(x, x, x, { cache, layer: 2 })).toThrow(/KVCache.update: layer/);
    expect(() => mha.forward(x, x, x, { cache })).toThrow(
      /MultiHeadAttention.forward: layer must be a non-negative integer, got undefined/,
    );
    expect(() => mha.forward(x, x, x, { layer: 0 })).toThrow(/layer is given without a cache/);
    expect(() => mha.forward(x, x, x, { cache: {} as KVCache, layer: 0 })).toThrow(/cache must be a KVCache/);
    const wrong = new KVCache({ numLayers: 1, numKvHeads: 2, headDim: 4 });
    expect(() => mha.forward(x, x, x, { cache: wrong, layer: 0 })).toThrow(
      /KVCache.update: key must be \[B, numKvHeads/,
    );
  });
});

const config = { vocabSize: 40, dModel: 32, numHeads: 4, numLayers: 2, dFF: 64, maxLen: 64, causal: true };

describe('TinyTransformer with a KVCache', () => {
  it('cached forwards over any chunking give the full forward’s logits (≤ 1e-5)', () => {
    fc.assert(
      fc.property(
        fc.record({
          T: fc.integer({ min: 1, max: 30 }),
          B: fc.integer({ min: 1, max: 2 }),
          cuts: fc.array(fc.nat(), { maxLength: 5 }),
          seed: fc.nat(),
        }),
        ({ T, B, cuts, seed }) => {
          const model = new TinyTransformer(config, { seed });
          const gen = new Generator(seed);
          const ids = Int32Array.from({ length: B * T }, () => Math.floor(gen.random() * 40));
          const full = autograd.noGrad(() => model.forward(ids, B, T).logits.data);
          const cache = new KVCache({ numLayers: 2, numKvHeads: 4, headDim: 8 });
          let t0 = 0;
          for (const L of chunksOf(T, cuts)) {
            const chunk = new Int32Array(B * L);
            for (let b = 0; b < B; b++) chunk.set(ids.subarray(b * T + t0, b * T + t0 + L), b * L);
            const got = model.forward(chunk, B, L, { cache }).logits;
            expect(got.shape).toEqual([B, L, 40]);
            for (let b = 0; b < B; b++) {
              const want = full.subarray((b * T + t0) * 40, (b * T + t0 + L) * 40);
              expect(maxDiff(got.data.subarray(b * L * 40, (b + 1) * L * 40), want)).toBeLessThanOrEqual(
                1e-5,
              );
            }
            t0 += L;
          }
        },
      ),
      { numRuns: 25 },
    );
  });

  it('a cached step returns the new rows of every layer’s weights over everything cached', () => {
    const model = new TinyTransformer(config, { seed: 2 });
    const ids = Int32Array.of(3, 1, 4, 1, 5, 9, 2);
    const full = autograd.noGrad(() => model.forward(ids, 1, 7, { needWeights: true }).weights);
    const cache = new KVCache({ numLayers: 2, numKvHeads: 4, headDim: 8 });
    model.forward(ids.subarray(0, 5), 1, 5, { cache });
    const { weights } = model.forward(ids.subarray(5), 1, 2, { cache, needWeights: true });
    expect(weights.map((w) => w.shape)).toEqual([
      [1, 4, 2, 7],
      [1, 4, 2, 7],
    ]);
    weights.forEach((w, l) => {
      for (let h = 0; h < 4; h++) {
        for (let i = 0; i < 2; i++) {
          const got = w.data.subarray((h * 2 + i) * 7, (h * 2 + i + 1) * 7);
          const want = full[l].data.subarray((h * 7 + 5 + i) * 7, (h * 7 + 6 + i) * 7);
          expect(maxDiff(got, want)).toBeLessThanOrEqual(1e-6);
        }
      }
    });
    // read(layer): what the layer holds, as the last update returned it.
    const held = cache.read(1);
    expect(held.key.shape).toEqual([1, 4, 7, 8]);
    expect(held.value.shape).toEqual([1, 4, 7, 8]);
    expect(() => new KVCache({ numLayers: 1, numKvHeads: 1, headDim: 2 }).read(0)).toThrow(
      /KVCache.read: the cache is empty/,
    );
  });

  it('a cached forward records no tape and refuses what it cannot do', () => {
    const model = new TinyTransformer(config, { seed: 1 });
    const cache = new KVCache({ numLayers: 2, numKvHeads: 4, headDim: 8 });
    const out = model.forward(Int32Array.of(1, 2, 3), 1, 3, { cache });
    expect(out.logits.requiresGrad).toBe(false);
    const fn = /TinyTransformer.forward: /;
    expect(() => model.forward(Int32Array.of(1), 1, 1, { cache, training: true })).toThrow(fn);
    const mismatched = new KVCache({ numLayers: 3, numKvHeads: 4, headDim: 8 });
    expect(() => model.forward(Int32Array.of(1), 1, 1, { cache: mismatched })).toThrow(
      /the cache does not fit this model \(cache: numLayers 3, numKvHeads 4, headDim 8, valueDim 8; model: numLayers 2, numKvHeads 4, headDim 8\)/,
    );
    const long = new Int32Array(62);
    expect(() => model.forward(long, 1, 62, { cache })).toThrow(
      /holds 3 tokens; 62 more would pass maxLen=64/,
    );
    const encoder = new TinyTransformer({ ...config, causal: false }, { seed: 1 });
    expect(() =>
      encoder.forward(Int32Array.of(1), 1, 1, {
        cache: new KVCache({ numLayers: 2, numKvHeads: 4, headDim: 8 }),
      }),
    ).toThrow(/a cache serves a decoder/);
  });
});

describe('TinyTransformer.generate', () => {
  const model = new TinyTransformer(config, { seed: 7 });

  it('gives the same tokens with and without the cache, and the same seed gives the same tokens', () => {
    for (const options of [
      { temperature: 1, seed: 3 },
      { temperature: 0.7, topK: 5, seed: 4 },
      { temperature: 1.3, topP: 0.9, seed: 5 },
      { temperature: 0 },
    ]) {
      const cached = model.generate([1, 2, 3], { maxNewTokens: 40, ...options });
      const uncached = model.generate([1, 2, 3], { maxNewTokens: 40, ...options, useCache: false });
      expect(Array.from(cached)).toEqual(Array.from(uncached));
      expect(cached).toHaveLength(40);
      expect(Array.from(model.generate([1, 2, 3], { maxNewTokens: 40, ...options }))).toEqual(
        Array.from(cached),
      );
    }
    const a = model.generate([5], { maxNewTokens: 30, seed: 1 });
    const b = model.generate([5], { maxNewTokens: 30, seed: 2 });
    expect(Array.from(a)).not.toEqual(Array.from(b)); // 30 draws over 40 tokens: different seeds differ
  });

  it('greedy decoding takes the argmax of the full forward at every step', () => {
    const prompt = [4, 9];
    const got = model.generate(prompt, { maxNewTokens: 10, temperature: 0 });
    const seq = [...prompt];
    for (let i = 0; i < 10; i++) {
      const logits = autograd.noGrad(() => model.forward(Int32Array.from(seq), 1, seq.length).logits.data);
      seq.push(argmax(logits.subarray((seq.length - 1) * 40)));
    }
    expect(Array.from(got)).toEqual(seq.slice(2));
  });

  it('streams tokens to onToken and stops after a stop token', () => {
    const all = model.generate([1], { maxNewTokens: 30, seed: 9 });
    const stopAt = all[5];
    const first = all.indexOf(stopAt);
    const seen: [number, number][] = [];
    const got = model.generate([1], {
      maxNewTokens: 30,
      seed: 9,
      stop: [stopAt],
      onToken: (id, i) => seen.push([id, i]),
    });
    expect(Array.from(got)).toEqual(Array.from(all.subarray(0, first + 1)));
    expect(seen).toEqual(Array.from(got, (id, i) => [id, i]));
    expect(model.generate([1], { maxNewTokens: 0 })).toHaveLength(0);
  });

  it('says what is wrong before generating', () => {
    const fn = /TinyTransformer.generate: /;
    expect(() => model.generate([1, 2], { maxNewTokens: 63 })).toThrow(
      /prompt \(2 tokens\) \+ maxNewTokens \(63\) = 65 is longer than maxLen=64/,
    );
    expect(() => model.generate([1], { maxNewTokens: 3, temperature: Number.NaN })).toThrow(
      /temperature must be/,
    );
    expect(() => model.generate([1], { maxNewTokens: 3, temperature: -1 })).toThrow(/temperature/);
    expect(() => model.generate([1], { maxNewTokens: 3, topK: 0 })).toThrow(/topK/);
    expect(() => model.generate([1], { maxNewTokens: 3, topP: 1.5 })).toThrow(
      /topP must be a number in \(0, 1\]/,
    );
    expect(() => model.generate([], { maxNewTokens: 3 })).toThrow(/prompt is empty/);
    expect(() => model.generate([40], { maxNewTokens: 3 })).toThrow(/prompt\[0\] = 40 is not a token id/);
    expect(() => model.generate([1.5], { maxNewTokens: 3 })).toThrow(fn);
    expect(() => model.generate([1], { maxNewTokens: -1 })).toThrow(/maxNewTokens/);
    expect(() => model.generate([1], { maxNewTokens: 3, seed: Number.NaN })).toThrow(fn);
    const encoder = new TinyTransformer({ ...config, causal: false }, { seed: 1 });
    expect(() => encoder.generate([1], { maxNewTokens: 1 })).toThrow(/only a decoder generates/);
  });
});

describe('sampling', () => {
  it('top-k ranks by selection exactly as a full sort would (ties to the lower id, NaN as −∞, ±∞)', () => {
    const g = new Generator(21);
    const fullSort = (x: Float32Array) => {
      const v = (i: number) => (Number.isNaN(x[i]) ? Number.NEGATIVE_INFINITY : x[i]);
      return Int32Array.from({ length: x.length }, (_, i) => i).sort((a, b) => v(b) - v(a) || a - b);
    };
    let checked = 0;
    for (let trial = 0; trial < 60; trial++) {
      const V = [1, 2, 7, 64, 500, 4096][trial % 6];
      const x = new Float32Array(V);
      // Few distinct values so ties cross the k-th place; some NaN and ±∞.
      for (let i = 0; i < V; i++) {
        const r = g.random();
        x[i] =
          r < 0.05
            ? Number.NaN
            : r < 0.08
              ? Number.NEGATIVE_INFINITY
              : r < 0.1
                ? Number.POSITIVE_INFINITY
                : Math.floor(g.random() * (trial % 2 ? 5 : 1000));
      }
      const want = fullSort(x);
      for (const k of [1, 2, 3, 10, 40, V - 1, V]) {
        if (k < 1 || k > V) continue;
        expect(Array.from(rankedIds(x, k).subarray(0, k)), `V=${V} k=${k}`).toEqual(
          Array.from(want.subarray(0, k)),
        );
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(300);
  });

  const logits = Float32Array.of(0.5, 2, -1, 2, 1);

  it('greedy picks the first maximum; top-k 1 and a tiny top-p are greedy too', () => {
    expect(argmax(logits)).toBe(1);
    const gen = new Generator(0);
    expect(sampleToken(logits, { temperature: 0 }, gen)).toBe(1);
    for (let i = 0; i < 20; i++) expect(sampleToken(logits, { topK: 1 }, gen)).toBe(1);
    for (let i = 0; i < 20; i++) expect(sampleToken(logits, { topP: 1e-9 }, gen)).toBe(1);
  });

  it('the distribution is softmax(logits / T), cut to top-k and the top-p nucleus, renormalised', () => {
    const T = 0.5;
    const z = Array.from(logits, (l) => Math.exp(l / T));
    const sum = z.reduce((a, b) => a + b);
    const all = tokenDistribution(logits, { temperature: T });
    expect(Array.from(all.ids)).toEqual([1, 3, 4, 0, 2]);
    all.ids.forEach((id, r) => {
      expect(all.probs[r]).toBeCloseTo(z[id] / sum, 12);
    });
    const k2 = tokenDistribution(logits, { temperature: T, topK: 2 });
    expect(Array.from(k2.ids)).toEqual([1, 3]);
    expect(Array.from(k2.probs)).toEqual([0.5, 0.5]);
    // Two tied leaders hold 2·e⁴ / (2·e⁴ + e² + e + e⁻²) ≈ 0.93 of the mass: p = 0.9 keeps just them.
    expect(Array.from(tokenDistribution(logits, { temperature: T, topP: 0.9 }).ids)).toEqual([1, 3]);
    expect(Array.from(tokenDistribution(logits, { temperature: T, topP: 0.95 }).ids)).toEqual([1, 3, 4]);
  });

  it('draws in proportion to the distribution', () => {
    const gen = new Generator(11);
    const counts = new Float64Array(5);
    const n = 20000;
    for (let i = 0; i < n; i++) counts[sampleToken(logits, {}, gen)]++;
    const { ids, probs } = tokenDistribution(logits);
    ids.forEach((id, r) => {
      expect(Math.abs(counts[id] / n - probs[r])).toBeLessThan(0.015);
    });
  });
});
