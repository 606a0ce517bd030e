// The WASM kernel's decode path (a few query rows per head, K and V read in their stored layout, GQA
// groups in one pass) and resident KV caches (storage in the WASM runtime's arena).
// One decision to know: every expectation is the reference kernel over dense K/V built from the appended
// tensors, never read back through the cache or the kernel under test; the hostile cases put NaN and ±∞
// exactly where the band blocks them, so a kernel that multiplies a blocked key by 0 fails here.

import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { planAttention } from '../src/attention/plan.js';
import { runKernel } from '../src/attention/sdpa.js';
import { planCachedAttention } from '../src/cache/kv-cache.js';
import {
  KVCache,
  MultiHeadAttention,
  PagedKVCache,
  pagedAttention,
  scaledDotProductAttention,
  Tensor,
  TinyTransformer,
} from '../src/index.js';
import { BufferLayout } from '../src/kernels/transfer.js';
import {
  allocateResident,
  freeResident,
  liveView,
  residentView,
  wasmMemoryBytes,
  wasmResidentBytes,
  wasmSupport,
} from '../src/kernels/wasm-runtime.js';
import { closeFailure, expectAllClose } from './helpers.js';

const wasm = wasmSupport() === true;
const TOL = { atol: 2e-6, rtol: 1e-5 };

type Opts = { causal?: true | 'top-left'; window?: [number, number] };

/** [1, H, S, X] random floats (seeded). */
function rand(H: number, S: number, X: number, seed: number): Float32Array {
  return Tensor.randn([1, H, S, X], { seed }).data;
}

/** The wasm kernel's out and lse for q, k, v vs the reference kernel's; fails naming the case. */
function expectSameAsReference(
  label: string,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: Opts & { bias?: Tensor },
): void {
  const run = (kernel: 'wasm' | 'reference') => {
    const plan = planAttention('test', q, k, v, { ...options, kernel });
    const out = new Float32Array(plan.outShape.reduce((a, b) => a * b, 1));
    const lse = new Float32Array(q.shape[1] * q.shape[2]); // B = 1
    runKernel('test', plan, { out, lse });
    return { out, lse };
  };
  const got = run('wasm');
  const want = run('reference');
  const failure =
    closeFailure(`${label} out`, got.out, want.out, TOL) ??
    closeFailure(`${label} lse`, got.lse, want.lse, TOL);
  if (failure) expect.fail(failure);
}

describe.skipIf(!wasm)('the WASM decode path equals the reference kernel', () => {
  const shapes: [number, number, number, number, number, number][] = [
    // Hq, Hkv, L, S, E, Ev
    [8, 2, 1, 4096, 64, 64],
    [8, 2, 1, 1, 64, 64],
    [1, 1, 1, 1, 3, 3],
    [4, 1, 3, 17, 17, 65],
    [2, 2, 2, 100, 65, 7],
    [6, 3, 4, 33, 1, 0],
    [16, 1, 4, 300, 8, 24], // 64 rows in one group
    [3, 3, 1, 520, 5, 9], // more than one key block
  ];
  const options: Opts[] = [{}, { causal: true }, { causal: 'top-left' }, { causal: true, window: [3, 0] }];
  it('on every shape and band (S = 1, odd E, E ≠ Ev, Ev = 0, GQA)', () => {
    for (const [Hq, Hkv, L, S, E, Ev] of shapes) {
      const q = new Tensor(rand(Hq, L, E, 1), [1, Hq, L, E]);
      const k = new Tensor(rand(Hkv, S, E, 2), [1, Hkv, S, E]);
      const v = new Tensor(rand(Hkv, S, Ev, 3), [1, Hkv, S, Ev]);
      for (const o of options)
        expectSameAsReference(`${[Hq, Hkv, L, S, E, Ev]} ${JSON.stringify(o)}`, q, k, v, o);
    }
  });

  it('NaN and ±∞ in blocked keys and values never reach a row; visible ones give what the reference gives', () => {
    const [Hq, Hkv, S, E] = [4, 2, 40, 6];
    const poison = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY];
    const hostile = (x: Float32Array, X: number, rows: (j: number) => boolean) => {
      const y = x.slice();
      for (let h = 0; h < Hkv; h++)
        for (let j = 0; j < S; j++) if (rows(j)) y[(h * S + j) * X + (j % X)] = poison[j % 3];
      return y;
    };
    // `clean`: the query rows that see no hostile key (their outputs must be finite).
    const cases: { label: string; L: number; o: Opts; rows: (j: number) => boolean; clean: number[] }[] = [
      // top-left: row 0 sees key 0 only (and row 1 keys 0, 1): every later key is blocked.
      {
        label: 'top-left, keys ≥ 2 hostile',
        L: 2,
        o: { causal: 'top-left' },
        rows: (j) => j >= 2,
        clean: [0, 1],
      },
      // a window of 3 at the end: everything before it is blocked.
      {
        label: 'window, early keys hostile',
        L: 1,
        o: { causal: true, window: [2, 0] },
        rows: (j) => j < S - 3,
        clean: [0],
      },
      // bottom-right, 3 rows: the newest keys are blocked for the earlier rows only (masked P·V).
      {
        label: 'bottom-right, newest hostile',
        L: 3,
        o: { causal: true },
        rows: (j) => j >= S - 2,
        clean: [0],
      },
      // visible hostile keys: the rows come out as the reference's (NaN or ±∞ where it has them).
      {
        label: 'visible hostile keys',
        L: 1,
        o: { causal: true },
        rows: (j) => j === 5 || j === 9,
        clean: [],
      },
    ];
    for (const { label, L, o, rows, clean } of cases) {
      const q = new Tensor(rand(Hq, L, E, 4), [1, Hq, L, E]);
      const k = new Tensor(hostile(rand(Hkv, S, E, 5), E, rows), [1, Hkv, S, E]);
      const v = new Tensor(hostile(rand(Hkv, S, E, 6), E, rows), [1, Hkv, S, E]);
      expectSameAsReference(label, q, k, v, o);
      const out = scaledDotProductAttention(q, k, v, { ...o, kernel: 'wasm' }).data;
      for (let h = 0; h < Hq; h++) {
        for (const i of clean) {
          const row = out.subarray((h * L + i) * E, (h * L + i + 1) * E);
          expect(
            row.every((x) => Number.isFinite(x)),
            `${label}: head ${h} row ${i}`,
          ).toBe(true);
        }
      }
    }
  });

  it('fully blocked rows are zero with lse −∞; huge scores and −∞ bias rows give the reference’s answer', () => {
    // L = 3 over S = 2, bottom-right: query 0 sits at position −1 and sees nothing.
    const q = new Tensor(rand(2, 3, 4, 7), [1, 2, 3, 4]);
    const k = new Tensor(rand(1, 2, 4, 8), [1, 1, 2, 4]);
    const v = new Tensor(rand(1, 2, 5, 9), [1, 1, 2, 5]);
    expectSameAsReference('blocked row', q, k, v, { causal: true });
    const out = scaledDotProductAttention(q, k, v, { causal: true, kernel: 'wasm' }).data;
    expect(Array.from(out.subarray(0, 5))).toEqual([0, 0, 0, 0, 0]);
    // Scores of 1e20: float32 cannot be trusted with them, the rows are recomputed in float64.
    const huge = new Tensor(
      q.data.map((x) => x * 1e20),
      q.shape,
    );
    expectSameAsReference('huge scores', huge, k, v, {});
    // A −∞ bias on every key of a row (the tiled path serves biased calls).
    const bias = new Tensor(new Float32Array(6).fill(0).fill(Number.NEGATIVE_INFINITY, 0, 2), [1, 1, 3, 2]);
    expectSameAsReference('−∞ bias row', q, k, v, { bias });
  });
});

describe.skipIf(!wasm)('resident KV caches', () => {
  const [Hkv, E, Ev] = [2, 8, 5];
  /** [1, Hkv, a + b, X] from [1, Hkv, a, X] and [1, Hkv, b, X]. */
  const concat = (x: Float32Array, a: number, y: Float32Array, b: number, X: number) => {
    const out = new Float32Array(Hkv * (a + b) * X);
    for (let h = 0; h < Hkv; h++) {
      out.set(x.subarray(h * a * X, (h + 1) * a * X), h * (a + b) * X);
      out.set(y.subarray(h * b * X, (h + 1) * b * X), (h * (a + b) + a) * X);
    }
    return out;
  };
  /** Attention of q over what `layer` 0 of the cache holds, through the plan the model uses. */
  const cached = (q: Tensor, cache: KVCache) => {
    const plan = planCachedAttention('test', q, cache, 0, { causal: true });
    const out = new Float32Array(plan.outShape.reduce((a, b) => a * b, 1));
    runKernel('test', plan, { out });
    return new Tensor(out, plan.outShape);
  };

  it('appends in place, reads in place, and survives memory growth and other drivers’ scratch', () => {
    const before = wasmResidentBytes();
    const cache = new KVCache({ numLayers: 1, numKvHeads: Hkv, headDim: E, valueDim: Ev, resident: true });
    expect(cache.resident).toBe(true);
    let k = rand(Hkv, 7, E, 11);
    let v = rand(Hkv, 7, Ev, 12);
    let S = 7;
    cache.update(0, new Tensor(k, [1, Hkv, 7, E]), new Tensor(v, [1, Hkv, 7, Ev]));
    expect(wasmResidentBytes()).toBeGreaterThanOrEqual(before + 16 * Hkv * (E + Ev) * 4);
    const q = new Tensor(rand(6, 1, E, 13), [1, 6, 1, E]);
    for (let step = 0; step < 40; step++) {
      const k1 = rand(Hkv, 1, E, 100 + step);
      const v1 = rand(Hkv, 1, Ev, 200 + step);
      const result = cache.update(0, new Tensor(k1, [1, Hkv, 1, E]), new Tensor(v1, [1, Hkv, 1, Ev]));
      k = concat(k, S, k1, 1, E);
      v = concat(v, S, v1, 1, Ev);
      S++;
      if (step === 20) {
        // Grow the memory (detaching every view of it), and let other drivers use the scratch.
        const grown = wasmMemoryBytes();
        const big = allocateResident('test', grown, {})!;
        expect(wasmMemoryBytes()).toBeGreaterThan(grown);
        const mha = new MultiHeadAttention({ embedDim: 32, numHeads: 4, seed: 1 });
        const x = Tensor.randn([1, 300, 32], { seed: 3 });
        mha.forward(x, x, x, { causal: true });
        freeResident(big);
      }
      const kt = new Tensor(k, [1, Hkv, S, E]);
      const vt = new Tensor(v, [1, Hkv, S, Ev]);
      expect(Array.from(result.key.data)).toEqual(Array.from(kt.data));
      expect(Array.from(result.value.data)).toEqual(Array.from(vt.data));
      const want = scaledDotProductAttention(q, kt, vt, { causal: true, kernel: 'reference' });
      expectAllClose(cached(q, cache), want, { ...TOL, label: `step ${step}` });
    }
    cache.dispose();
    expect(wasmResidentBytes()).toBe(before);
    expect(cache.length).toBe(0);
  });

  it('a result read after its layer grew its resident storage throws; dispose leaves the cache usable', () => {
    const cache = new KVCache({ numLayers: 1, numKvHeads: 1, headDim: 4, resident: true });
    const one = (x: number) => new Tensor(new Float32Array(4).fill(x), [1, 1, 1, 4]);
    const r1 = cache.update(0, one(1), one(1)); // capacity 16
    for (let i = 0; i < 15; i++) cache.update(0, one(2), one(2));
    const r17 = cache.update(0, one(3), one(3)); // grows: the first allocation is freed
    expect(r17.key.shape).toEqual([1, 1, 17, 4]);
    expect(() => r1.key).toThrow(/KVCache.update: .*read after the resident cache grew its storage/);
    const held = cache.read(0); // not read yet
    cache.dispose();
    expect(() => held.value).toThrow(/was disposed/);
    const again = cache.update(0, one(4), one(4));
    expect(Array.from(again.key.data)).toEqual([4, 4, 4, 4]);
    cache.dispose();
  });

  it('a window cache’s ring is read in place across its wrap', () => {
    const w = 5;
    const cache = new KVCache({
      numLayers: 1,
      numKvHeads: Hkv,
      headDim: E,
      valueDim: Ev,
      window: w,
      resident: true,
    });
    const ks: Float32Array[] = [];
    const vs: Float32Array[] = [];
    const q = new Tensor(rand(4, 1, E, 21), [1, 4, 1, E]);
    for (let t = 0; t < 13; t++) {
      ks.push(rand(Hkv, 1, E, 300 + t));
      vs.push(rand(Hkv, 1, Ev, 400 + t));
      cache.update(0, new Tensor(ks[t], [1, Hkv, 1, E]), new Tensor(vs[t], [1, Hkv, 1, Ev]));
      const from = Math.max(0, t + 1 - w);
      const n = t + 1 - from;
      let k = new Float32Array(0);
      let v = new Float32Array(0);
      for (let j = from; j <= t; j++) {
        k = concat(k, j - from, ks[j], 1, E);
        v = concat(v, j - from, vs[j], 1, Ev);
      }
      const want = scaledDotProductAttention(
        q,
        new Tensor(k, [1, Hkv, n, E]),
        new Tensor(v, [1, Hkv, n, Ev]),
        {
          causal: true,
          kernel: 'reference',
        },
      );
      expectAllClose(cached(q, cache), want, { ...TOL, label: `token ${t}` });
    }
    cache.dispose();
  });

  it('keeps its instance past the 64 MB a call may leave behind', () => {
    // 2 × 36 MB of storage up front (maxLength): the instance is past 64 MB, yet it stays after calls.
    const cache = new KVCache({
      numLayers: 1,
      numKvHeads: 1,
      headDim: 64,
      maxLength: 140_000,
      resident: true,
    });
    const k = rand(1, 3, 64, 31);
    cache.update(0, new Tensor(k, [1, 1, 3, 64]), new Tensor(k, [1, 1, 3, 64]));
    expect(wasmMemoryBytes()).toBeGreaterThan(64 << 20);
    const resident = wasmResidentBytes();
    const q = new Tensor(rand(2, 1, 64, 32), [1, 2, 1, 64]);
    const want = scaledDotProductAttention(q, new Tensor(k, [1, 1, 3, 64]), new Tensor(k, [1, 1, 3, 64]), {
      causal: true,
      kernel: 'reference',
    });
    expectAllClose(cached(q, cache), want, TOL); // the call ends with releaseWasm
    expectAllClose(cached(q, cache), want, TOL);
    expect(wasmResidentBytes()).toBe(resident);
    expect(Array.from(cache.read(0).key.data)).toEqual(Array.from(k));
    cache.dispose();
  });

  it('MultiHeadAttention with a resident cache equals the uncached forward (GQA)', () => {
    const mha = new MultiHeadAttention({ embedDim: 64, numHeads: 8, numKvHeads: 2, seed: 5 });
    const x = Tensor.randn([1, 24, 64], { seed: 6 });
    const full = mha.forward(x, x, x, { causal: true }).output.data;
    for (const resident of [true, false]) {
      const cache = new KVCache({ numLayers: 1, numKvHeads: 2, headDim: 8, resident });
      const steps = [10, 1, 1, 3, 1, 4, 1, 1, 1, 1];
      let at = 0;
      for (const n of steps) {
        const xs = new Tensor(x.data.slice(at * 64, (at + n) * 64), [1, n, 64]);
        const got = mha.forward(xs, xs, xs, { cache, layer: 0, causal: true }).output;
        expectAllClose(got, full.subarray(at * 64, (at + n) * 64), {
          atol: 1e-5,
          rtol: 1e-5,
          label: `at ${at}`,
        });
        at += n;
      }
      cache.dispose();
    }
  });

  it('generate frees its resident cache', () => {
    const before = wasmResidentBytes();
    const model = new TinyTransformer(
      { vocabSize: 50, dModel: 16, numHeads: 2, numLayers: 2, dFF: 32, maxLen: 64, causal: true },
      { seed: 1 },
    );
    const a = model.generate([1, 2, 3], { maxNewTokens: 20, temperature: 0 });
    const b = model.generate([1, 2, 3], { maxNewTokens: 20, temperature: 0, useCache: false });
    expect(Array.from(a)).toEqual(Array.from(b));
    expect(wasmResidentBytes()).toBe(before);
  });

  it('residentView / liveView: a view detached by growth is re-derived with the same contents', () => {
    const owner = {};
    const a = allocateResident('test', 64, owner)!;
    const view = residentView(a, 16, 4);
    view.set([1, 2, 3, 4]);
    const big = allocateResident('test', wasmMemoryBytes(), owner)!; // past the memory's end: it grows
    expect(view.length).toBe(0); // detached
    const live = liveView(view);
    expect(Array.from(live)).toEqual([1, 2, 3, 4]);
    expect(liveView(live)).toBe(live);
    freeResident(big);
    freeResident(a);
    expect(() => liveView(view)).toThrow(/freed/);
  });

  it('KVCache.attention reads the layer in place, as scaledDotProductAttention over update’s key/value', () => {
    for (const resident of [true, false]) {
      const cache = new KVCache({ numLayers: 2, numKvHeads: Hkv, headDim: E, valueDim: Ev, resident });
      expect(() => cache.attention(1, new Tensor(rand(4, 1, E, 1), [1, 4, 1, E]))).toThrow(
        /KVCache.attention: layer 1 holds no keys; update it first/,
      );
      const all = cache.update(
        1,
        new Tensor(rand(Hkv, 9, E, 2), [1, Hkv, 9, E]),
        new Tensor(rand(Hkv, 9, Ev, 3), [1, Hkv, 9, Ev]),
      );
      for (const L of [1, 2, 9]) {
        const q = new Tensor(rand(4, L, E, 4), [1, 4, L, E]);
        const want = scaledDotProductAttention(q, all.key, all.value, { causal: true, kernel: 'reference' });
        expectAllClose(cache.attention(1, q, { causal: true }), want, {
          ...TOL,
          label: `resident ${resident}, L ${L}`,
        });
      }
      expect(() => cache.attention(1, new Tensor(rand(4, 1, 3, 5), [1, 4, 1, 3]))).toThrow(
        /KVCache.attention: key has E=8 but query has E=3/,
      );
      expect(() => cache.attention(2, new Tensor(rand(4, 1, E, 1), [1, 4, 1, E]))).toThrow(
        /KVCache.attention: layer must be an integer in \[0, 1\]/,
      );
      cache.dispose();
    }
  });

  it('a resident view placed for the workers is copied live even if growth detached it before the write', () => {
    const owner = {};
    const a = allocateResident('test', 32, owner)!;
    const view = residentView(a, 0, 8);
    view.set([1, 2, 3, 4, 5, 6, 7, 8]);
    const layout = new BufferLayout();
    const placed = layout.place({ k: view }, 'copy');
    const big = allocateResident('test', wasmMemoryBytes(), owner)!; // grows (the runner awaits in between)
    expect(view.length).toBe(0);
    const buffer = new ArrayBuffer(layout.byteLength);
    layout.write(buffer);
    expect(Array.from(new Float32Array(buffer, placed.k.offset, 8))).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    freeResident(big);
    freeResident(a);
  });

  it('a resident view freed before the workers’ copy throws, even when no growth detached it', () => {
    // An async call places the cache's views, then awaits; a dispose (or a regrowth) meanwhile frees the
    // storage, and another cache may already be writing there: the copy must refuse, never read it.
    const a = allocateResident('test', 32, {})!;
    const view = residentView(a, 0, 8);
    view.set([1, 2, 3, 4, 5, 6, 7, 8]);
    const layout = new BufferLayout();
    layout.place({ k: view }, 'copy');
    freeResident(a);
    const other = allocateResident('test', 32, {})!; // the freed bytes, taken by someone else
    residentView(other, 0, 8).fill(50);
    expect(view.length).toBe(8); // not detached: only the freed flag can tell
    expect(() => layout.write(new ArrayBuffer(layout.byteLength))).toThrow(
      /resident WebAssembly memory was read after it was freed: its KV cache was disposed or grew its storage while a call that reads it was still running/,
    );
    freeResident(other);
  });

  it('MultiHeadAttention.forwardAsync whose resident cache is disposed while it waits rejects, never answers from freed memory', async () => {
    // The built Node entry: its workers run the built files, so the call really waits for them.
    const qkv = await import(`${fileURLToPath(new URL('../dist/', import.meta.url))}index.node.js`);
    try {
      const D = 64;
      const mha = new qkv.MultiHeadAttention({ embedDim: D, numHeads: 8, numKvHeads: 2, seed: 3 });
      const cache = new qkv.KVCache({
        numLayers: 1,
        numKvHeads: 2,
        headDim: 8,
        maxLength: 400,
        resident: true,
      });
      expect(cache.resident).toBe(true);
      const x0 = new qkv.Tensor(rand(1, 200, D, 41), [1, 200, D]);
      mha.forward(x0, x0, x0, { cache, layer: 0, causal: true });
      const x = new qkv.Tensor(rand(1, 100, D, 42), [1, 100, D]);
      const pending = mha.forwardAsync(x, x, x, { cache, layer: 0, causal: true, threads: 2 });
      // Once the call has appended x (its projections come first), it reads the cache from the workers.
      while (cache.layerLength(0) === 200) await Promise.resolve();
      cache.dispose();
      const other = new qkv.KVCache({
        numLayers: 1,
        numKvHeads: 2,
        headDim: 8,
        maxLength: 400,
        resident: true,
      });
      const fill = new qkv.Tensor(new Float32Array(2 * 300 * 8).fill(50), [1, 2, 300, 8]);
      other.update(0, fill, fill); // the freed bytes, taken by another cache
      await expect(pending).rejects.toThrow(/read after it was freed: its KV cache was disposed/);
      other.dispose();
    } finally {
      await qkv.terminateWorkers();
    }
  });

  it('dispose gives a big instance’s memory back at once (no kernel call needed)', () => {
    const cache = new KVCache({
      numLayers: 1,
      numKvHeads: 1,
      headDim: 64,
      maxLength: 140_000,
      resident: true,
    });
    const k = new Tensor(rand(1, 3, 64, 43), [1, 1, 3, 64]);
    cache.update(0, k, k);
    expect(wasmMemoryBytes()).toBeGreaterThan(64 << 20);
    cache.dispose();
    expect(wasmResidentBytes()).toBe(0);
    expect(wasmMemoryBytes()).toBe(0); // the instance is dropped; the next call makes a fresh one
  });

  it('a resident PagedKVCache reads its blocks in place, across forks, copy-on-write and memory growth', () => {
    const before = wasmResidentBytes();
    const opts = { numLayers: 2, numKvHeads: Hkv, headDim: E, valueDim: Ev, blockSize: 4, numBlocks: 32 };
    const resident = new PagedKVCache({ ...opts, resident: true });
    const plain = new PagedKVCache(opts);
    expect(resident.resident).toBe(true);
    expect(wasmResidentBytes()).toBeGreaterThan(before);
    const caches = [resident, plain];
    const kp = new Tensor(rand(Hkv, 10, E, 41).subarray(0, Hkv * 10 * E), [Hkv, 10, E]);
    const vp = new Tensor(rand(Hkv, 10, Ev, 42), [Hkv, 10, Ev]);
    const roots = caches.map((c) => c.allocate());
    caches.forEach((c, i) => {
      for (const layer of [0, 1]) c.append(roots[i], layer, kp, vp);
    });
    const q = new Tensor(rand(4, 1, E, 43).subarray(0, 4 * E), [4, 1, E]);
    for (let f = 0; f < 3; f++) {
      const seqs = caches.map((c, i) => c.fork(roots[i]));
      for (let t = 0; t < 5; t++) {
        const k1 = new Tensor(rand(Hkv, 1, E, 500 + 10 * f + t).subarray(0, Hkv * E), [Hkv, 1, E]);
        const v1 = new Tensor(rand(Hkv, 1, Ev, 600 + 10 * f + t), [Hkv, 1, Ev]);
        caches.forEach((c, i) => {
          for (const layer of [0, 1]) c.append(seqs[i], layer, k1, v1);
        });
        if (f === 1 && t === 2) {
          const big = allocateResident('test', wasmMemoryBytes(), {})!; // detaches the pools' views
          freeResident(big);
        }
        for (const layer of [0, 1]) {
          const got = pagedAttention(q, resident, seqs[0], layer);
          const want = pagedAttention(q, plain, seqs[1], layer, { kernel: 'reference' });
          expectAllClose(got, want, { ...TOL, label: `fork ${f} token ${t} layer ${layer}` });
        }
      }
    }
    resident.dispose();
    expect(wasmResidentBytes()).toBe(before);
    expect(() => resident.allocate()).toThrow(/PagedKVCache.allocate: the cache was disposed/);
    expect(() => pagedAttention(q, resident, roots[0], 0)).toThrow(/pagedAttention: the cache was disposed/);
    expect(() => new PagedKVCache({ ...opts, resident: 1 as unknown as boolean })).toThrow(
      /PagedKVCache: resident must be true or false, got 1/,
    );
  });

  it('a plan run again after its cache was rewritten in place reads the new rows (no stale stash)', () => {
    const cache = new KVCache({ numLayers: 1, numKvHeads: 1, headDim: E, maxLength: 8, resident: true });
    const k = rand(1, 5, E, 51);
    const v = rand(1, 5, E, 52);
    cache.update(0, new Tensor(k, [1, 1, 5, E]), new Tensor(v, [1, 1, 5, E]));
    const q = new Tensor(rand(3, 1, E, 53), [1, 3, 1, E]);
    const plan = planCachedAttention('test', q, cache, 0, { causal: true });
    const run = () => {
      const out = new Float32Array(3 * E);
      runKernel('test', plan, { out });
      return out;
    };
    const want = (kk: Float32Array, vv: Float32Array) =>
      scaledDotProductAttention(q, new Tensor(kk, [1, 1, 5, E]), new Tensor(vv, [1, 1, 5, E]), {
        causal: true,
        kernel: 'reference',
      });
    expectAllClose(new Tensor(run(), [1, 3, 1, E]), want(k, v), TOL);
    cache.truncate(4);
    const k2 = rand(1, 1, E, 54);
    const v2 = rand(1, 1, E, 55);
    cache.update(0, new Tensor(k2, [1, 1, 1, E]), new Tensor(v2, [1, 1, 1, E]));
    k.set(k2, 4 * E);
    v.set(v2, 4 * E);
    expectAllClose(new Tensor(run(), [1, 3, 1, E]), want(k, v), TOL);
    // The tiled path (more rows than a decode step) likewise recopies K/V for each call.
    const q8 = new Tensor(rand(3, 8, E, 56), [1, 3, 8, E]);
    const tiled = planCachedAttention('test', q8, cache, 0, {});
    const runTiled = () => {
      const out = new Float32Array(3 * 8 * E);
      runKernel('test', tiled, { out });
      return new Tensor(out, [1, 3, 8, E]);
    };
    const wantTiled = (kk: Float32Array, vv: Float32Array) =>
      scaledDotProductAttention(q8, new Tensor(kk, [1, 1, 5, E]), new Tensor(vv, [1, 1, 5, E]), {
        kernel: 'reference',
      });
    expectAllClose(runTiled(), wantTiled(k, v), TOL);
    cache.truncate(4);
    cache.update(
      0,
      new Tensor(
        k2.map((x) => -x),
        [1, 1, 1, E],
      ),
      new Tensor(
        v2.map((x) => 2 * x),
        [1, 1, 1, E],
      ),
    );
    k.set(
      k2.map((x) => -x),
      4 * E,
    );
    v.set(
      v2.map((x) => 2 * x),
      4 * E,
    );
    expectAllClose(runTiled(), wantTiled(k, v), TOL);
    cache.dispose();
  });

  it('bad options name KVCache and the option', () => {
    expect(
      () => new KVCache({ numLayers: 1, numKvHeads: 1, headDim: 4, resident: 'yes' as unknown as boolean }),
    ).toThrow(/KVCache: resident must be true or false, got/);
  });
});
