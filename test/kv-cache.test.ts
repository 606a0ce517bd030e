// KVCache, PagedKVCache and pagedAttention: property tests against plain concatenation and against
// scaledDotProductAttention over the gathered K/V, on every kernel; block accounting; every error.
// One decision to know: expectations never go through the cache — they are built from the appended
// tensors by concatenation (test helpers below), so a layout bug in kvRow/kvRun or in the cache fails here.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { planBackward } from '../src/attention/backward.js';
import { planStoredAttention } from '../src/attention/paged.js';
import { runKernel } from '../src/attention/sdpa.js';
import { planCachedAttention } from '../src/cache/kv-cache.js';
import {
  attentionWeights,
  KVCache,
  PagedKVCache,
  pagedAttention,
  scaledDotProductAttention,
  Tensor,
} from '../src/index.js';
import { referenceBackward } from '../src/kernels/backward.js';
import { flashBackward } from '../src/kernels/backward-flash.js';
import { flashKernel } from '../src/kernels/flash.js';
import { BufferLayout, revive } from '../src/kernels/transfer.js';
import { type AttentionProblem, backwardAll, forwardAll, type KvLayout } from '../src/kernels/types.js';
import { kvRow, kvRun } from '../src/kernels/visibility.js';
import { sizeOf } from '../src/shape.js';
import { expectAllClose } from './helpers.js';

const TOL = { atol: 1e-5, rtol: 1e-4 };
const KERNELS = ['reference', 'flash', 'wasm'] as const;
const seedArb = fc.integer({ min: 0, max: 0x7fffffff });

// ---------------------------------------------------------------------------------------------------------
// Helpers: concatenation and slicing along one axis, and reading stored K/V through the kernels' mapping

function concat(ts: readonly Tensor[], axis: number): Tensor {
  const shape = [...ts[0].shape];
  shape[axis] = ts.reduce((n, t) => n + t.shape[axis], 0);
  const outer = sizeOf(shape.slice(0, axis));
  const inner = sizeOf(shape.slice(axis + 1));
  const out = new Float32Array(sizeOf(shape));
  let offset = 0;
  for (const t of ts) {
    const n = t.shape[axis];
    for (let o = 0; o < outer; o++) {
      out.set(t.data.subarray(o * n * inner, (o + 1) * n * inner), (o * shape[axis] + offset) * inner);
    }
    offset += n;
  }
  return new Tensor(out, shape);
}

function slice(t: Tensor, axis: number, from: number, to: number): Tensor {
  const shape = [...t.shape];
  const n = shape[axis];
  shape[axis] = to - from;
  const outer = sizeOf(shape.slice(0, axis));
  const inner = sizeOf(shape.slice(axis + 1));
  const out = new Float32Array(sizeOf(shape));
  for (let o = 0; o < outer; o++) {
    out.set(t.data.subarray((o * n + from) * inner, (o * n + to) * inner), o * (to - from) * inner);
  }
  return new Tensor(out, shape);
}

/** Attention of q [B, Hq, L, E] over a KVCache layer, read in place, on the named kernel. */
function cachedAttend(
  q: Tensor,
  cache: KVCache,
  layer: number,
  options: Parameters<typeof planCachedAttention>[4],
): Tensor {
  const plan = planCachedAttention('test', q, cache, layer, options);
  const out = new Float32Array(sizeOf(plan.outShape));
  runKernel('test', plan, { out });
  return new Tensor(out, plan.outShape);
}

/** The rows [B, Hkv, S, width] a stored K or V holds, gathered through kvRow (the kernels' mapping). */
function gather(
  data: Float32Array,
  p: { B: number; Hkv: number; S: number; kv: KvLayout },
  width: number,
): Float32Array {
  const out = new Float32Array(p.B * p.Hkv * p.S * width);
  for (let b = 0; b < p.B; b++) {
    for (let hk = 0; hk < p.Hkv; hk++) {
      for (let j = 0; j < p.S; j++) {
        const row = kvRow(p, b, hk, j);
        out.set(data.subarray(row * width, (row + 1) * width), ((b * p.Hkv + hk) * p.S + j) * width);
      }
    }
  }
  return out;
}

/** Random chunk lengths summing to at most `total` (at least one chunk). */
const chunksArb = (max: number) => fc.array(fc.integer({ min: 1, max }), { minLength: 1, maxLength: 8 });

const HEADS: [number, number][] = [
  [1, 1],
  [2, 1],
  [2, 2],
  [4, 2],
  [3, 1],
];

// ---------------------------------------------------------------------------------------------------------

describe('kvRow / kvRun layouts', () => {
  it('runs are consecutive rows, end at a ring wrap or a block boundary, and cover the keys', () => {
    fc.assert(
      fc.property(
        fc.record({
          paged: fc.boolean(),
          B: fc.integer({ min: 1, max: 2 }),
          Hkv: fc.integer({ min: 1, max: 3 }),
          S: fc.integer({ min: 0, max: 40 }),
          extra: fc.integer({ min: 0, max: 9 }),
          start: fc.nat(),
          blockSize: fc.integer({ min: 1, max: 7 }),
          seed: seedArb,
        }),
        ({ paged, B, Hkv, S, extra, start, blockSize, seed }) => {
          const stride = S + extra;
          const blocks = Math.ceil(S / blockSize);
          let kv: KvLayout;
          let rows: number;
          if (paged) {
            // A random permutation of physical blocks per batch item, out of B·blocks + 3.
            const ids = Array.from({ length: B * blocks + 3 }, (_, i) => i);
            for (let i = ids.length - 1; i > 0; i--) {
              const r = (seed * (i + 7)) % (i + 1);
              [ids[i], ids[r]] = [ids[r], ids[i]];
            }
            kv = {
              kind: 'paged',
              blockSize,
              blockTable: Int32Array.from(ids.slice(0, B * blocks)),
              tableStride: blocks,
            };
            rows = ids.length * Hkv * blockSize;
          } else {
            if (stride === 0) return;
            kv = { kind: 'strided', stride, start: start % stride };
            rows = B * Hkv * stride;
          }
          const p = { B, Hkv, S, kv };
          const seen = new Set<number>();
          for (let b = 0; b < B; b++) {
            for (let hk = 0; hk < Hkv; hk++) {
              for (let j = 0; j < S; ) {
                const n = kvRun(p, b, hk, j, S);
                expect(n).toBeGreaterThanOrEqual(1);
                for (let t = 0; t < n; t++) expect(kvRow(p, b, hk, j + t)).toBe(kvRow(p, b, hk, j) + t);
                // A run ends at a block boundary (paged) or where the ring wraps (strided), or at the end.
                if (j + n < S && kv.kind === 'paged') expect((j + n) % blockSize).toBe(0);
                if (j + n < S && kv.kind === 'strided') {
                  expect(kvRow(p, b, hk, j + n)).not.toBe(kvRow(p, b, hk, j + n - 1) + 1);
                }
                j += n;
              }
              for (let j = 0; j < S; j++) {
                const r = kvRow(p, b, hk, j);
                expect(r).toBeGreaterThanOrEqual(0);
                expect(r).toBeLessThan(rows);
                seen.add(r);
              }
            }
          }
          expect(seen.size).toBe(B * Hkv * S); // no two keys share a row
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe('KVCache', () => {
  it('update returns the concatenation of everything appended, through growth and maxLength storage', () => {
    fc.assert(
      fc.property(
        fc.record({
          B: fc.integer({ min: 1, max: 2 }),
          Hkv: fc.integer({ min: 1, max: 3 }),
          E: fc.integer({ min: 1, max: 5 }),
          Ev: fc.integer({ min: 0, max: 5 }),
          layers: fc.integer({ min: 1, max: 3 }),
          chunks: chunksArb(20),
          bounded: fc.boolean(),
          seed: seedArb,
        }),
        ({ B, Hkv, E, Ev, layers, chunks, bounded, seed }) => {
          const total = chunks.reduce((a, b) => a + b, 0);
          const cache = new KVCache({
            numLayers: layers,
            numKvHeads: Hkv,
            headDim: E,
            valueDim: Ev,
            maxLength: bounded ? total : undefined,
          });
          const ks: Tensor[][] = Array.from({ length: layers }, () => []);
          const vs: Tensor[][] = Array.from({ length: layers }, () => []);
          let length = 0;
          chunks.forEach((L, step) => {
            for (let layer = 0; layer < layers; layer++) {
              const s = seed + 10 * step + layer;
              const k = Tensor.randn([B, Hkv, L, E], { seed: s });
              const v = Tensor.randn([B, Hkv, L, Ev], { seed: s + 5 });
              ks[layer].push(k);
              vs[layer].push(v);
              const r = cache.update(layer, k, v);
              // length is the last layer's: it moves once the step has reached every layer.
              expect(cache.length).toBe(layer === layers - 1 ? length + L : length);
              expect(cache.layerLength(layer)).toBe(length + L);
              expect(Array.from(r.key.data)).toEqual(Array.from(concat(ks[layer], 2).data));
              expect(r.key.shape).toEqual([B, Hkv, length + L, E]);
              expect(Array.from(r.value.data)).toEqual(Array.from(concat(vs[layer], 2).data));
              expect(r.value.shape).toEqual([B, Hkv, length + L, Ev]);
            }
            length += L;
          });
          // An earlier result stays readable after later appends (they never overwrite its rows).
          const first = cache.update(0, Tensor.zeros([B, Hkv, 0, E]), Tensor.zeros([B, Hkv, 0, Ev]));
          expect(first.key.shape).toEqual([B, Hkv, total, E]);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('attention read through the cache layout equals scaledDotProductAttention over the concatenation, on every kernel', () => {
    fc.assert(
      fc.property(
        fc.record({
          B: fc.integer({ min: 1, max: 2 }),
          heads: fc.constantFrom(...HEADS),
          E: fc.integer({ min: 1, max: 6 }),
          Ev: fc.integer({ min: 1, max: 6 }),
          chunks: chunksArb(40),
          causal: fc.constantFrom(true, false),
          withBias: fc.boolean(),
          seed: seedArb,
        }),
        ({ B, heads: [Hq, Hkv], E, Ev, chunks, causal, withBias, seed }) => {
          const cache = new KVCache({ numLayers: 1, numKvHeads: Hkv, headDim: E, valueDim: Ev });
          const ks: Tensor[] = [];
          const vs: Tensor[] = [];
          chunks.forEach((L, step) => {
            ks.push(Tensor.randn([B, Hkv, L, E], { seed: seed + step }));
            vs.push(Tensor.randn([B, Hkv, L, Ev], { seed: seed + step + 100 }));
            cache.update(0, ks[step], vs[step]);
            const S = cache.length;
            const q = Tensor.randn([B, Hq, L, E], { seed: seed + step + 200 });
            const bias = withBias ? Tensor.randn([L, S], { seed: seed + step + 300 }) : undefined;
            const K = concat(ks, 2);
            const V = concat(vs, 2);
            const want = scaledDotProductAttention(q, K, V, { causal, bias, kernel: 'reference' });
            for (const kernel of KERNELS) {
              expectAllClose(cachedAttend(q, cache, 0, { causal, bias, kernel }), want, {
                ...TOL,
                label: kernel,
              });
            }
          });
        },
      ),
      { numRuns: 40 },
    );
  });

  it('a window cache equals sliding-window attention (window [w − 1, 0], causal) over the whole sequence', () => {
    let wrapped = 0;
    fc.assert(
      fc.property(
        fc.record({
          B: fc.integer({ min: 1, max: 2 }),
          heads: fc.constantFrom(...HEADS),
          E: fc.integer({ min: 1, max: 5 }),
          Ev: fc.integer({ min: 1, max: 5 }),
          w: fc.integer({ min: 1, max: 12 }),
          chunks: fc.array(fc.oneof(fc.constant(1), fc.integer({ min: 1, max: 15 })), {
            minLength: 1,
            maxLength: 12,
          }),
          maxLength: fc.boolean(),
          seed: seedArb,
        }),
        ({ B, heads: [Hq, Hkv], E, Ev, w, chunks, maxLength, seed }) => {
          const T = chunks.reduce((a, b) => a + b, 0);
          const cache = new KVCache({
            numLayers: 1,
            numKvHeads: Hkv,
            headDim: E,
            valueDim: Ev,
            window: w,
            maxLength: maxLength ? T : undefined,
          });
          const K = Tensor.randn([B, Hkv, T, E], { seed });
          const V = Tensor.randn([B, Hkv, T, Ev], { seed: seed + 1 });
          const Q = Tensor.randn([B, Hq, T, E], { seed: seed + 2 });
          const window = [w - 1, 0] as const;
          const full = scaledDotProductAttention(Q, K, V, { causal: true, window, kernel: 'reference' });
          let t0 = 0;
          for (const L of chunks) {
            const r = cache.update(0, slice(K, 2, t0, t0 + L), slice(V, 2, t0, t0 + L));
            const held = Math.min(t0 + L, w - 1 + L);
            expect(cache.length).toBe(t0 + L); // every token, not only the held ones
            expect(cache.heldLength(0)).toBe(held);
            if (L === 1) expect(held).toBe(Math.min(t0 + 1, w)); // one-token steps hold the last w
            // The update's tensors are the held tokens, oldest first.
            expect(Array.from(r.key.data)).toEqual(Array.from(slice(K, 2, t0 + L - held, t0 + L).data));
            expect(Array.from(r.value.data)).toEqual(Array.from(slice(V, 2, t0 + L - held, t0 + L).data));
            const q = slice(Q, 2, t0, t0 + L);
            const want = slice(full, 2, t0, t0 + L);
            expectAllClose(scaledDotProductAttention(q, r.key, r.value, { causal: true, window }), want, TOL);
            const stored = cache.attentionInputs(0);
            if (stored.layout.kind === 'strided' && stored.layout.start + held > stored.layout.stride)
              wrapped++;
            for (const kernel of KERNELS) {
              // The cache applies its window itself; passing it again changes nothing.
              expectAllClose(cachedAttend(q, cache, 0, { causal: true, kernel }), want, {
                ...TOL,
                label: kernel,
              });
              expectAllClose(cachedAttend(q, cache, 0, { causal: true, window, kernel }), want, TOL);
            }
            t0 += L;
          }
        },
      ),
      { numRuns: 60 },
    );
    expect(wrapped, 'cases read a ring that had wrapped').toBeGreaterThan(10);
  });

  it('a window cache needs no more than w rows per head for one-token decoding', () => {
    const cache = new KVCache({ numLayers: 1, numKvHeads: 1, headDim: 2, window: 5 });
    for (let t = 0; t < 40; t++)
      cache.update(0, Tensor.randn([1, 1, 1, 2], { seed: t }), Tensor.full([1, 1, 1, 2], 1));
    const stored = cache.attentionInputs(0);
    expect(stored.layout).toMatchObject({ kind: 'strided', stride: 5 });
    expect(stored.k.length).toBe(5 * 2);
    expect(stored.S).toBe(5);
    expect(cache.length).toBe(40);
  });

  it('truncate keeps the first n tokens; appending after it continues from there', () => {
    const cache = new KVCache({ numLayers: 2, numKvHeads: 2, headDim: 3 });
    const a = Tensor.randn([1, 2, 10, 3], { seed: 1 });
    const b = Tensor.randn([1, 2, 4, 3], { seed: 2 });
    for (const layer of [0, 1]) cache.update(layer, a, a);
    cache.truncate(6);
    expect(cache.length).toBe(6);
    const r = cache.update(0, b, b);
    expect(Array.from(r.key.data)).toEqual(Array.from(concat([slice(a, 2, 0, 6), b], 2).data));
    expect(cache.length).toBe(6); // layer 1 has not been updated this step
    cache.update(1, b, b);
    expect(cache.length).toBe(10);
    // With a window, a cut may only drop tokens the window still holds beyond w − 1 of them.
    const win = new KVCache({ numLayers: 1, numKvHeads: 1, headDim: 1, window: 3 });
    const x = Tensor.from([[[[1], [2], [3], [4], [5], [6]]]]);
    win.update(0, x, x); // holds 3 … 6 (w − 1 + L_new = 8 ≥ 6: all six)
    win.update(0, Tensor.from([[[[7]]]]), Tensor.from([[[[7]]]])); // holds 5, 6, 7
    win.truncate(6); // needs 5, 6: held
    const r2 = win.update(0, Tensor.from([[[[8]]]]), Tensor.from([[[[8]]]]));
    expect(Array.from(r2.key.data)).toEqual([5, 6, 8]);
    expect(() => win.truncate(5)).toThrow(
      /needs tokens 3 … 4 of layer 0, but its window \(w=3\) has dropped every token before 4/,
    );
    win.truncate(0);
    expect(win.length).toBe(0);
  });

  it('reset empties the cache and lets the batch size change', () => {
    const cache = new KVCache({ numLayers: 1, numKvHeads: 1, headDim: 2 });
    expect(cache.update(0, Tensor.zeros([2, 1, 0, 2]), Tensor.zeros([2, 1, 0, 2])).key.shape).toEqual([
      2, 1, 0, 2,
    ]);
    cache.update(0, Tensor.full([2, 1, 3, 2], 1), Tensor.full([2, 1, 3, 2], 1));
    cache.reset();
    expect(cache.length).toBe(0);
    const k = Tensor.randn([3, 1, 2, 2], { seed: 4 });
    const r = cache.update(0, k, k);
    expect(Array.from(r.key.data)).toEqual(Array.from(k.data));
  });

  it('update tensors are built lazily: reading them after their rows were overwritten throws', () => {
    const cache = new KVCache({ numLayers: 1, numKvHeads: 1, headDim: 1, window: 2 });
    const one = (x: number) => Tensor.from([[[[x]]]]);
    const r1 = cache.update(0, one(1), one(1));
    const r2 = cache.update(0, one(2), one(2));
    const r3 = cache.update(0, one(3), one(3)); // the ring (2 rows) overwrites token 1
    expect(Array.from(r3.key.data)).toEqual([2, 3]);
    expect(() => r2.key).toThrow(
      /^KVCache\.update: layer 0's key\/value were read after the window cache was updated again \(its ring overwrote the oldest rows\)/,
    );
    expect(r1).toBeDefined();
    // Each cause is named as it happened, and by the call that made the result.
    const named = new KVCache({ numLayers: 1, numKvHeads: 1, headDim: 1 });
    named.update(0, one(1), one(1));
    const read = named.read(0);
    named.truncate(0);
    expect(() => read.key).toThrow(
      /^KVCache\.read: layer 0's key\/value were read after the cache was truncated to 0 tokens/,
    );
    const u = named.update(0, one(1), one(1));
    named.reset();
    expect(() => u.value).toThrow(/^KVCache\.update: .* read after the cache was reset,/);
    const plain = new KVCache({ numLayers: 1, numKvHeads: 1, headDim: 1 });
    const p1 = plain.update(0, one(1), one(1));
    plain.update(0, one(2), one(2));
    expect(Array.from(p1.key.data)).toEqual([1]); // appends never overwrite
    plain.truncate(0);
    const p2 = plain.update(0, one(5), one(5));
    plain.reset();
    expect(() => p2.value).toThrow(/KVCache.update/);
  });

  it('errors name the function, the argument and the shapes', () => {
    const cache = new KVCache({ numLayers: 2, numKvHeads: 2, headDim: 4, valueDim: 3, maxLength: 5 });
    const k = (B: number, L: number, H = 2, E = 4) => Tensor.zeros([B, H, L, E]);
    const v = (B: number, L: number, H = 2, Ev = 3) => Tensor.zeros([B, H, L, Ev]);
    expect(() => cache.update(2, k(1, 1), v(1, 1))).toThrow(
      'KVCache.update: layer must be an integer in [0, 1] (numLayers = 2), got 2',
    );
    expect(() => cache.update(-1, k(1, 1), v(1, 1))).toThrow(/layer must be an integer in \[0, 1\]/);
    expect(() => cache.update(0.5, k(1, 1), v(1, 1))).toThrow(/layer must be an integer/);
    expect(() => cache.update(0, k(1, 1, 3), v(1, 1))).toThrow(
      'KVCache.update: key must be [B, numKvHeads, L_new, headDim] (key [1,3,1,4], value [1,2,1,3]; the cache expects [B, 2, L_new, 4] and [B, 2, L_new, 3])',
    );
    expect(() => cache.update(0, k(1, 1, 2, 5), v(1, 1))).toThrow(
      /key must be \[B, numKvHeads, L_new, headDim\] \(key \[1,2,1,5\]/,
    );
    expect(() => cache.update(0, Tensor.zeros([2, 1, 4]), v(1, 1))).toThrow(/key must be .*key \[2,1,4\]/);
    expect(() => cache.update(0, k(1, 1), v(1, 1, 2, 4))).toThrow(
      /value must be \[B, numKvHeads, L_new, valueDim\] \(key \[1,2,1,4\], value \[1,2,1,4\]/,
    );
    expect(() => cache.update(0, k(1, 2), v(1, 1))).toThrow(
      /key and value must have the same B and L_new \(key \[1,2,2,4\], value \[1,2,1,3\]/,
    );
    cache.update(0, k(1, 2), v(1, 2));
    expect(() => cache.update(1, k(2, 2), v(2, 2))).toThrow(
      /KVCache.update: key has batch B=2 but the sequence in the cache has B=1; B cannot change mid-sequence \(reset\(\) first\) \(key \[2,2,2,4\]/,
    );
    expect(() => cache.update(0, k(1, 4), v(1, 4))).toThrow(
      /KVCache.update: layer 0 would hold 6 tokens \(2 \+ L_new=4\), more than maxLength=5 \(key \[1,2,4,4\]/,
    );
    expect(cache.layerLength(0)).toBe(2); // a failed update changes nothing
    expect(() => cache.truncate(3)).toThrow('KVCache.truncate: n=3 but layer 0 holds only 2 tokens');
    expect(() => cache.truncate(-1)).toThrow(/n must be a non-negative integer/);
    expect(() => cache.layerLength(7)).toThrow(/KVCache.layerLength: layer must be an integer in \[0, 1\]/);
    expect(() => new KVCache({ numLayers: 0, numKvHeads: 1, headDim: 1 })).toThrow(
      'KVCache: numLayers must be a positive integer, got 0',
    );
    expect(() => new KVCache({ numLayers: 1, numKvHeads: 1, headDim: 1, window: 0 })).toThrow(
      /window must be a positive integer/,
    );
    expect(() => new KVCache({ numLayers: 1, numKvHeads: 1, headDim: 1, maxLen: 3 } as never)).toThrow(
      /unknown option 'maxLen'/,
    );
    expect(() => new KVCache({ numLayers: 1, numKvHeads: 1, headDim: 1 }).attentionInputs(0)).toThrow(
      /the cache is empty/,
    );
  });
});

describe('PagedKVCache and pagedAttention', () => {
  const opArb = fc.record({
    kind: fc.constantFrom('allocate', 'append', 'append', 'append', 'fork', 'free'),
    pick: fc.nat(),
    layer: fc.nat(),
    L: fc.oneof(fc.constant(1), fc.integer({ min: 1, max: 20 })),
    seed: seedArb,
  });

  it('equals contiguous K/V after random appends, forks and frees; forks never change their parent', () => {
    fc.assert(
      fc.property(
        fc.record({
          heads: fc.constantFrom(...HEADS),
          E: fc.integer({ min: 1, max: 5 }),
          Ev: fc.integer({ min: 1, max: 5 }),
          layers: fc.integer({ min: 1, max: 2 }),
          blockSize: fc.integer({ min: 1, max: 8 }),
          numBlocks: fc.integer({ min: 4, max: 40 }),
          ops: fc.array(opArb, { minLength: 1, maxLength: 25 }),
          seed: seedArb,
        }),
        ({ heads: [Hq, Hkv], E, Ev, layers, blockSize, numBlocks, ops, seed }) => {
          const cache = new PagedKVCache({
            numLayers: layers,
            numKvHeads: Hkv,
            headDim: E,
            valueDim: Ev,
            blockSize,
            numBlocks,
          });
          // The expectation: each live sequence's K and V per layer, as plain tensors [Hkv, S, ·].
          const shadow = new Map<number, { k: Tensor; v: Tensor }[]>();
          const empty = () =>
            Array.from({ length: layers }, () => ({
              k: Tensor.zeros([Hkv, 0, E]),
              v: Tensor.zeros([Hkv, 0, Ev]),
            }));
          const live = () => [...shadow.keys()];
          const check = () => {
            const used = new Set<number>();
            for (const [id, kv] of shadow) {
              const table = cache.blockTable(id);
              const longest = Math.max(...kv.map((x) => x.k.shape[1]));
              expect(table.length).toBe(Math.ceil(longest / blockSize));
              expect(new Set(table).size).toBe(table.length);
              for (const b of table) used.add(b);
              kv.forEach((x, layer) => {
                const stored = cache.stored('test', id, layer);
                const p = { B: 1, Hkv, S: stored.S, kv: stored.layout };
                expect(Array.from(gather(stored.k, p, E))).toEqual(Array.from(x.k.data));
                expect(Array.from(gather(stored.v, p, Ev))).toEqual(Array.from(x.v.data));
              });
              expect(cache.length(id)).toBe(kv[layers - 1].k.shape[1]);
            }
            expect(numBlocks - cache.freeBlocks).toBe(used.size); // no block leaks, none is counted twice
          };
          for (const op of ops) {
            const ids = live();
            const id = ids[op.pick % Math.max(1, ids.length)];
            if (op.kind === 'allocate' || id === undefined) {
              shadow.set(cache.allocate(), empty());
            } else if (op.kind === 'fork') {
              shadow.set(
                cache.fork(id),
                shadow.get(id)!.map((x) => ({ ...x })),
              );
            } else if (op.kind === 'free') {
              cache.free(id);
              shadow.delete(id);
            } else {
              const layer = op.layer % layers;
              const k = Tensor.randn([Hkv, op.L, E], { seed: op.seed });
              const v = Tensor.randn([Hkv, op.L, Ev], { seed: op.seed + 1 });
              const free = cache.freeBlocks;
              try {
                cache.append(id, layer, k, v);
              } catch (err) {
                expect((err as Error).message).toMatch(/the block pool is exhausted/);
                expect(cache.freeBlocks).toBe(free);
                check();
                continue;
              }
              const x = shadow.get(id)![layer];
              shadow.get(id)![layer] = { k: concat([x.k, k], 1), v: concat([x.v, v], 1) };
            }
            check();
          }
          // Attention straight from the blocks, on every kernel, equals attention over the concatenation.
          for (const [id, kv] of shadow) {
            kv.forEach(({ k, v }, layer) => {
              const S = k.shape[1];
              const L = Math.max(1, Math.min(S, 3));
              const q = Tensor.randn([Hq, L, E], { seed: seed + id });
              const want = scaledDotProductAttention(
                q.reshape([1, Hq, L, E]),
                k.reshape([1, Hkv, S, E]),
                v.reshape([1, Hkv, S, Ev]),
                {
                  causal: true,
                  kernel: 'reference',
                },
              ).reshape([Hq, L, Ev]);
              for (const kernel of KERNELS) {
                expectAllClose(pagedAttention(q, cache, id, layer, { kernel }), want, {
                  ...TOL,
                  label: kernel,
                });
              }
            });
          }
        },
      ),
      { numRuns: 80 },
    );
  });

  it('fork shares blocks; the first append to a shared partial block copies it, leaving the parent as it was', () => {
    const cache = new PagedKVCache({ numLayers: 2, numKvHeads: 1, headDim: 2, blockSize: 4, numBlocks: 10 });
    const a = cache.allocate();
    const k = Tensor.randn([1, 6, 2], { seed: 1 });
    cache.append(a, 0, k, k);
    cache.append(a, 1, k, k);
    expect(Array.from(cache.blockTable(a))).toEqual([0, 1]);
    const b = cache.fork(a);
    expect(Array.from(cache.blockTable(b))).toEqual([0, 1]);
    expect(cache.freeBlocks).toBe(8);
    const x = Tensor.randn([1, 1, 2], { seed: 2 });
    cache.append(b, 0, x, x); // copies block 1 (the partial one) for every layer
    expect(Array.from(cache.blockTable(b))).toEqual([0, 2]);
    cache.append(b, 1, x, x);
    expect(Array.from(cache.blockTable(b))).toEqual([0, 2]);
    expect(cache.freeBlocks).toBe(7);
    const q = Tensor.randn([2, 1, 2], { seed: 3 });
    const want = (kk: Tensor) =>
      scaledDotProductAttention(
        q.reshape([1, 2, 1, 2]),
        kk.reshape([1, 1, kk.shape[1], 2]),
        kk.reshape([1, 1, kk.shape[1], 2]),
        {
          causal: true,
        },
      ).reshape([2, 1, 2]);
    for (const layer of [0, 1]) {
      expectAllClose(pagedAttention(q, cache, a, layer), want(k), TOL);
      expectAllClose(pagedAttention(q, cache, b, layer), want(concat([k, x], 1)), TOL);
    }
    // The parent now owns block 1 alone: its append writes in place.
    cache.append(a, 0, x, x);
    expect(Array.from(cache.blockTable(a))).toEqual([0, 1]);
    cache.free(a);
    expect(cache.freeBlocks).toBe(8); // block 0 is still b's
    cache.free(b);
    expect(cache.freeBlocks).toBe(10);
  });

  it('16 sequences forked from one 1024-token prompt, each extended by 64 tokens, share the prompt blocks', () => {
    for (const [prompt, expected] of [
      [1024, 128], // 64 prompt blocks + 16 × 4: exactly ⌈(1024 + 16·64) / 16⌉
      [1000, 143], // 63 prompt blocks (the last partial) + 16 × 5: each child copies the partial block once
    ] as const) {
      const cache = new PagedKVCache({
        numLayers: 2,
        numKvHeads: 1,
        headDim: 2,
        blockSize: 16,
        numBlocks: 256,
      });
      const root = cache.allocate();
      const kp = Tensor.randn([1, prompt, 2], { seed: 1 });
      for (const layer of [0, 1]) cache.append(root, layer, kp, kp);
      const children = Array.from({ length: 16 }, () => cache.fork(root));
      for (const child of children) {
        for (let t = 0; t < 64; t++) {
          const x = Tensor.randn([1, 1, 2], { seed: 100 * child + t });
          for (const layer of [0, 1]) cache.append(child, layer, x, x);
        }
        expect(cache.length(child)).toBe(prompt + 64);
      }
      const used = 256 - cache.freeBlocks;
      const ideal = Math.ceil((prompt + 16 * 64) / 16);
      expect(used).toBe(expected);
      expect(used).toBeLessThanOrEqual(1.2 * ideal);
      // A child reads the prompt it shares, then its own tokens.
      const child = children[3];
      const own = Array.from({ length: 64 }, (_, t) => Tensor.randn([1, 1, 2], { seed: 100 * child + t }));
      const kc = concat([kp, ...own], 1).reshape([1, 1, prompt + 64, 2]);
      const q = Tensor.randn([2, 2, 2], { seed: 9 });
      const want = scaledDotProductAttention(q.reshape([1, 2, 2, 2]), kc, kc, { causal: true }).reshape([
        2, 2, 2,
      ]);
      expectAllClose(pagedAttention(q, cache, child, 1), want, TOL);
    }
  });

  it('pagedAttention: GQA, bottom-right causal alignment, weights, and a K/V that the WASM kernel streams', () => {
    // E = 1024: 1100 keys of K and V take 9 MB per head, past the WASM kernel's 8 MB copy budget.
    const Hkv = 2;
    const E = 1024;
    const S = 1100;
    const cache = new PagedKVCache({ numLayers: 1, numKvHeads: Hkv, headDim: E, numBlocks: 80 });
    const s = cache.allocate();
    const k = Tensor.randn([Hkv, S, E], { seed: 1 });
    const v = Tensor.randn([Hkv, S, E], { seed: 2 });
    for (let t = 0; t < S; t += 300)
      cache.append(s, 0, slice(k, 1, t, Math.min(S, t + 300)), slice(v, 1, t, Math.min(S, t + 300)));
    const q = Tensor.randn([4, 3, E], { seed: 3 });
    const want = scaledDotProductAttention(
      q.reshape([1, 4, 3, E]),
      k.reshape([1, Hkv, S, E]),
      v.reshape([1, Hkv, S, E]),
      {
        causal: true,
        kernel: 'reference',
      },
    ).reshape([4, 3, E]);
    for (const kernel of KERNELS)
      expectAllClose(pagedAttention(q, cache, s, 0, { kernel }), want, { ...TOL, label: kernel });

    const small = new PagedKVCache({ numLayers: 1, numKvHeads: 1, headDim: 3, blockSize: 2, numBlocks: 8 });
    const id = small.allocate();
    const ks = Tensor.randn([1, 7, 3], { seed: 4 });
    small.append(id, 0, ks, ks);
    const qs = Tensor.randn([2, 4, 3], { seed: 5 });
    const dense = ks.reshape([1, 1, 7, 3]);
    const { output, weights } = pagedAttention(qs, small, id, 0, { needWeights: true, scale: 0.3 });
    expectAllClose(
      output,
      scaledDotProductAttention(qs.reshape([1, 2, 4, 3]), dense, dense, { causal: true, scale: 0.3 }).reshape(
        [2, 4, 3],
      ),
      TOL,
    );
    expectAllClose(
      weights,
      attentionWeights(qs.reshape([1, 2, 4, 3]), dense, { causal: true, scale: 0.3 }).reshape([2, 4, 7]),
      TOL,
    );
    // Query i sits at position S − L + i: the first of 4 queries over 7 keys sees keys 0 … 3.
    expect(Array.from(weights.data.subarray(4, 7))).toEqual([0, 0, 0]);
    const open = pagedAttention(qs, small, id, 0, { causal: false });
    expectAllClose(
      open,
      scaledDotProductAttention(qs.reshape([1, 2, 4, 3]), dense, dense).reshape([2, 4, 3]),
      TOL,
    );
    // An empty sequence (or layer) attends to nothing: zeros.
    const none = pagedAttention(qs, small, small.allocate(), 0);
    expect(Array.from(none.data).every((x) => x === 0)).toBe(true);
  });

  it('errors: exhausted pool (nothing changed), freed and unknown ids, shapes, layers, options', () => {
    const cache = new PagedKVCache({
      numLayers: 2,
      numKvHeads: 2,
      headDim: 3,
      valueDim: 2,
      blockSize: 4,
      numBlocks: 3,
    });
    const s = cache.allocate();
    const k = (L: number, H = 2, E = 3) => Tensor.zeros([H, L, E]);
    const v = (L: number, H = 2, Ev = 2) => Tensor.zeros([H, L, Ev]);
    cache.append(s, 0, k(10), v(10));
    expect(() => cache.append(s, 0, k(3), v(3))).toThrow(
      'PagedKVCache.append: the block pool is exhausted: sequence 0 needs 1 more block(s) of 4 tokens for layer 0 (length 10 → 13) but 0 of 3 are free; free() finished sequences or make the cache with more numBlocks',
    );
    expect(cache.layerLength(s, 0)).toBe(10);
    const f = cache.fork(s);
    expect(() => cache.append(f, 0, k(1), v(1))).toThrow(/needs 1 more block\(s\) .* but 0 of 3 are free/); // the copy-on-write
    expect(cache.layerLength(f, 0)).toBe(10);
    cache.free(f);
    expect(() => cache.append(f, 0, k(1), v(1))).toThrow(
      'PagedKVCache.append: sequence 1 was freed; ids are not reused (allocate() or fork() a new one)',
    );
    expect(() => cache.free(f)).toThrow(/PagedKVCache.free: sequence 1 was freed/);
    expect(() => cache.length(99)).toThrow(
      'PagedKVCache.length: no sequence 99 in this cache (ids come from allocate() or fork(); 1 live)',
    );
    expect(() => cache.fork(-1)).toThrow(/PagedKVCache.fork: no sequence -1/);
    expect(() => cache.blockTable(Number.NaN)).toThrow(/no sequence NaN/);
    expect(() => cache.append(s, 2, k(1), v(1))).toThrow(
      'PagedKVCache.append: layer must be an integer in [0, 1] (numLayers = 2), got 2',
    );
    expect(() => cache.append(s, 1, k(1, 1), v(1))).toThrow(
      'PagedKVCache.append: key must be [numKvHeads, L_new, headDim] (key [1,1,3], value [2,1,2]; the cache expects [2, L_new, 3] and [2, L_new, 2])',
    );
    expect(() => cache.append(s, 1, k(1), v(1, 2, 3))).toThrow(
      /value must be \[numKvHeads, L_new, valueDim\] \(key \[2,1,3\], value \[2,1,3\]/,
    );
    expect(() => cache.append(s, 1, k(2), v(1))).toThrow(
      /key has L_new=2 tokens but value has 1 \(key \[2,2,3\], value \[2,1,2\]/,
    );
    expect(() => cache.append(s, 1, Tensor.zeros([1, 2, 1, 3]), v(1))).toThrow(
      /key must be .*key \[1,2,1,3\]/,
    );
    expect(() => new PagedKVCache({ numLayers: 1, numKvHeads: 1, headDim: 1, numBlocks: 0 })).toThrow(
      'PagedKVCache: numBlocks must be a positive integer, got 0',
    );
    expect(() => new PagedKVCache({ numLayers: 1, numKvHeads: 1, headDim: 1 } as never)).toThrow(
      /numBlocks must be a positive integer, got undefined/,
    );

    const q = Tensor.zeros([4, 1, 3]);
    expect(() => pagedAttention(Tensor.zeros([1, 4, 1, 3]), cache, s, 0)).toThrow(
      'pagedAttention: q must have rank 3 [Hq, L, E], got rank 4 (q [1,4,1,3], cache numKvHeads=2, headDim=3, valueDim=2)',
    );
    expect(() => pagedAttention(Tensor.zeros([4, 1, 2]), cache, s, 0)).toThrow(
      /q has E=2 but the cache's headDim is 3 \(q \[4,1,2\]/,
    );
    expect(() => pagedAttention(Tensor.zeros([3, 1, 3]), cache, s, 0)).toThrow(
      /q has Hq=3 heads, which is not a multiple of the cache's numKvHeads=2 \(q \[3,1,3\]/,
    );
    expect(() => pagedAttention(q, cache, f, 0)).toThrow(/pagedAttention: sequence 1 was freed/);
    expect(() => pagedAttention(q, cache, s, 5)).toThrow(
      /pagedAttention: layer must be an integer in \[0, 1\]/,
    );
    expect(() => pagedAttention(q, cache, s, 0, { window: [1, 0] } as never)).toThrow(
      /pagedAttention: unknown option 'window'/,
    );
    expect(() => pagedAttention(q, cache, s, 0, { kernel: 'gpu' as never })).toThrow(
      /pagedAttention: kernel must be one of/,
    );
    expect(() => pagedAttention(q, cache, s, 0, { needWeights: 'yes' as never })).toThrow(
      `pagedAttention: needWeights must be true or false, got "yes"`,
    );
    expect(() => pagedAttention(q, cache, s, 0, { scale: Number.NaN })).toThrow(
      /pagedAttention: scale must be a finite number/,
    );
  });
});

describe('the backward kernels through a cache layout', () => {
  it('write dk and dv through kvRow: equal to the dense backward, gathered', () => {
    for (const paged of [false, true]) {
      const [B, Hq, Hkv, L, E, Ev] = [paged ? 1 : 2, 4, 2, 5, 3, 2];
      const chunks = [7, 1, 5, 3];
      const S = chunks.reduce((a, b) => a + b, 0);
      const K = Tensor.randn([B, Hkv, S, E], { seed: 1 });
      const V = Tensor.randn([B, Hkv, S, Ev], { seed: 2 });
      const q = Tensor.randn([B, Hq, L, E], { seed: 3 });
      const dOut = Tensor.randn([B, Hq, L, Ev], { seed: 4 });
      // The stored K/V: a window cache whose ring has wrapped, or a paged sequence with a copied block.
      let stored: ReturnType<KVCache['attentionInputs']>;
      if (paged) {
        const cache = new PagedKVCache({
          numLayers: 1,
          numKvHeads: Hkv,
          headDim: E,
          valueDim: Ev,
          blockSize: 3,
          numBlocks: 20,
        });
        const junk = cache.allocate();
        cache.append(junk, 0, Tensor.full([Hkv, 4, E], 1), Tensor.full([Hkv, 4, Ev], 1));
        const seq = cache.allocate();
        let t = 0;
        for (const n of chunks) {
          cache.append(
            seq,
            0,
            slice(K, 2, t, t + n).reshape([Hkv, n, E]),
            slice(V, 2, t, t + n).reshape([Hkv, n, Ev]),
          );
          if (t === 0) cache.free(junk); // its blocks come back in another order
          t += n;
        }
        stored = cache.stored('test', seq, 0);
        expect(Array.from(stored.layout.kind === 'paged' ? stored.layout.blockTable : [])).toEqual([
          2, 3, 4, 1, 0, 5,
        ]);
      } else {
        // w = 6 over chunks 7, 1, 5, 3: the ring wraps, grows (unrolled) and wraps again.
        const cache = new KVCache({ numLayers: 1, numKvHeads: Hkv, headDim: E, valueDim: Ev, window: 6 });
        let t = 0;
        for (const n of chunks) {
          cache.update(0, slice(K, 2, t, t + n), slice(V, 2, t, t + n));
          t += n;
        }
        stored = cache.attentionInputs(0);
        expect(stored.layout).toEqual({ kind: 'strided', stride: 10, start: 6 });
        expect(stored.S).toBe(8);
      }
      const held = stored.S;
      const Kh = slice(K, 2, S - held, S);
      const Vh = slice(V, 2, S - held, S);
      const options = { causal: true as const, window: [4, 0] as const };
      for (const backward of [referenceBackward, flashBackward]) {
        const dense = planBackward('test', q, Kh, Vh, dOut, options);
        const out = new Float32Array(B * Hq * L * Ev);
        const lse = new Float64Array(B * Hq * L);
        runKernel('test', { ...dense.plan, problem: dense.problem }, { out, lse });
        dense.inputs.out = out;
        dense.inputs.lse = lse;
        backwardAll(backward, dense.problem, dense.inputs, dense.grads);

        const plan = planStoredAttention('test', q, stored, options);
        const problem = { ...plan.problem, precision: 'float64' as const };
        const grads = {
          dq: new Float32Array(q.size),
          dk: new Float32Array(stored.k.length),
          dv: new Float32Array(stored.v.length),
        };
        backwardAll(backward, problem, dense.inputs, grads);
        const p = { B, Hkv, S: held, kv: stored.layout };
        expectAllClose(new Tensor(grads.dq, q.shape), dense.grads.dq, { ...TOL, label: 'dq' });
        expectAllClose(new Tensor(gather(grads.dk as Float32Array, p, E), Kh.shape), dense.grads.dk, {
          ...TOL,
          label: 'dk',
        });
        expectAllClose(new Tensor(gather(grads.dv as Float32Array, p, Ev), Vh.shape), dense.grads.dv, {
          ...TOL,
          label: 'dv',
        });
      }
    }
  });
});

describe('a problem with a K/V layout crosses threads', () => {
  it('the paged layout (its block table an Int32Array) is packed and revived like any field', () => {
    const cache = new PagedKVCache({ numLayers: 1, numKvHeads: 1, headDim: 4, blockSize: 2, numBlocks: 8 });
    const a = cache.allocate();
    const b = cache.allocate();
    for (let t = 0; t < 5; t++) {
      for (const s of [a, b])
        cache.append(
          s,
          0,
          Tensor.randn([1, 1, 4], { seed: 10 * s + t }),
          Tensor.randn([1, 1, 4], { seed: 7 * s + t }),
        );
    }
    const q = Tensor.randn([1, 2, 3, 4], { seed: 1 });
    const plan = planStoredAttention('test', q, cache.stored('test', b, 0), { causal: true });
    const want = new Float32Array(2 * 3 * 4);
    forwardAll(flashKernel, plan.problem, { out: want });
    const layout = new BufferLayout(16);
    const packed = layout.place(plan.problem, 'copy');
    const buffer = new SharedArrayBuffer(layout.byteLength);
    layout.write(buffer);
    const revived = revive<AttentionProblem>(structuredClone(packed), buffer);
    expect(revived.kv).toEqual(plan.problem.kv);
    const got = new Float32Array(want.length);
    forwardAll(flashKernel, revived, { out: got });
    expect(Array.from(got)).toEqual(Array.from(want));
  });
});
