// Hostile inputs on every kernel: each numbered item of the reliability issue as a named regression
// test, then a seeded property suite that draws NaN/±Inf values behind masks, huge and tiny scores,
// −1e9 and float32-min fills and fully masked rows, and holds every kernel (float32 and float16 inputs)
// to the reference. Sync kernels run from src/; the worker pool runs the built package (dist/).

import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { planAttention } from '../src/attention/plan.js';
import {
  type AttentionOptions,
  Generator,
  kernelSupport,
  scaledDotProductAttention,
  Tensor,
} from '../src/index.js';
import { wasmKernel, wasmMemoryBytes } from '../src/kernels/wasm.js';
import { closeFailure, expectAllClose } from './helpers.js';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const built = await import(`${dist}index.node.js`);
afterAll(() => built.terminateWorkers());

const SYNC_KERNELS = ['flash', 'wasm', 'auto'] as const;
const F32_MIN = -3.4028234663852886e38;

function sdpa(q: number[][], k: number[][], v: number[][], options: AttentionOptions): number[] {
  return Array.from(scaledDotProductAttention(q, k, v, options).data);
}

/** Each kernel's answer equals the reference's (exactly equal arrays: these cases are tiny). */
function expectEveryKernel(
  q: number[][],
  k: number[][],
  v: number[][],
  options: AttentionOptions,
  want: number[],
) {
  const ref = sdpa(q, k, v, { ...options, kernel: 'reference' });
  for (let i = 0; i < want.length; i++) expect(ref[i]).toBeCloseTo(want[i], 4);
  for (const kernel of SYNC_KERNELS) {
    const got = sdpa(q, k, v, { ...options, kernel });
    expectAllClose(new Tensor(Float32Array.from(got), [got.length]), ref, {
      atol: 1e-6,
      rtol: 1e-5,
      label: kernel,
    });
  }
}

describe('item 1: a blocked key never reaches the output, whatever its value', () => {
  it('a masked key whose value is NaN', () => {
    expectEveryKernel(
      [[1, 0]],
      [
        [1, 0],
        [0, 1],
      ],
      [
        [1, 2],
        [Number.NaN, 0],
      ],
      { mask: [[1, 0]] },
      [1, 2],
    );
  });
  it('causal: a future key whose value is +Infinity or −Infinity', () => {
    for (const inf of [Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      const v = [
        [1, 2],
        [inf, 0],
      ];
      const ref = sdpa(
        [
          [1, 0],
          [0, 1],
        ],
        [
          [1, 0],
          [0, 1],
        ],
        v,
        { causal: true, kernel: 'reference' },
      );
      expect(ref.slice(0, 2)).toEqual([1, 2]);
      expectEveryKernel(
        [
          [1, 0],
          [0, 1],
        ],
        [
          [1, 0],
          [0, 1],
        ],
        v,
        { causal: true },
        ref,
      );
    }
  });
  it('a −Infinity bias on a key whose value is −Infinity', () => {
    const bias = [[0, Number.NEGATIVE_INFINITY]];
    expectEveryKernel(
      [[1, 0]],
      [
        [1, 0],
        [0, 1],
      ],
      [
        [1, 2],
        [Number.NEGATIVE_INFINITY, 0],
      ],
      { bias },
      [1, 2],
    );
  });
  it('async on 2 threads, (1,1,256,64) causal, NaN in v[255]: earlier rows stay finite', async () => {
    const q = built.Tensor.randn([1, 1, 256, 64], { seed: 1 });
    const k = built.Tensor.randn([1, 1, 256, 64], { seed: 2 });
    const v = built.Tensor.randn([1, 1, 256, 64], { seed: 3 });
    v.data.fill(Number.NaN, 255 * 64, 256 * 64);
    const want = built.scaledDotProductAttention(q, k, v, { causal: true, kernel: 'reference' });
    const got = await built.scaledDotProductAttentionAsync(q, k, v, { causal: true, threads: 2 });
    expect(Number.isNaN(want.data[255 * 64])).toBe(true); // the last row sees v[255]
    expect(got.data.subarray(0, 255 * 64).every(Number.isFinite)).toBe(true);
    expectAllClose(got, want, { atol: 1e-5, rtol: 1e-4 });
  });
});

describe('item 2: float32 overflow never turns a finite answer into NaN', () => {
  it('bias [[3e38, 0]] (a valid float32) gives the reference [1, 2]', () => {
    expectEveryKernel(
      [[1, 0]],
      [
        [1, 0],
        [0, 1],
      ],
      [
        [1, 2],
        [3, 4],
      ],
      { bias: [[3e38, 0]] },
      [1, 2],
    );
  });
  it('q and k filled with 1e20 (scores ~1e40, past float32) give the reference answer', () => {
    const big = [
      [1e20, 1e20],
      [1e20, 1e20],
    ];
    expectEveryKernel(
      big,
      big,
      [
        [1, 2],
        [3, 4],
      ],
      {},
      [2, 3, 2, 3],
    );
  });
  it('a scale whose float32 scale·log2 e is subnormal: the WASM kernel refuses it, auto gives the reference', () => {
    // q·k = 1e46 at scale 1e-46: scores of 1 and 0 in float64; float32 holds 1e-46·log2 e as 0 or a
    // subnormal of one or two digits, which would make them 0 or wrong.
    const q = [[1e23]];
    const k = [[1e23], [0]];
    const v = [[1], [2]];
    for (const scale of [1e-46, 5e-46]) {
      const ref = sdpa(q, k, v, { scale, kernel: 'reference' });
      expect(() => sdpa(q, k, v, { scale, kernel: 'wasm' })).toThrow(/subnormal/);
      const got = sdpa(q, k, v, { scale, kernel: 'auto' });
      expectAllClose(new Tensor(Float32Array.from(got), [got.length]), ref, { atol: 1e-6, rtol: 1e-5 });
    }
  });

  it('scores of −1e40 on every key (no key "overflows into blocked")', () => {
    expectEveryKernel(
      [[1e20, 0]],
      [
        [-1e20, 0],
        [-2e20, 0],
      ],
      [
        [1, 2],
        [3, 4],
      ],
      { scale: 1 },
      [1, 2],
    );
  });
});

describe('item 3: huge additive fills have float64 semantics on every kernel', () => {
  // Decision: the reference computes scores in float64, so a −1e9 bias on every visible key changes
  // nothing (softmax is shift-invariant): 0.8808 = σ(2). PyTorch in float32 gives 0.5 (−1e9 ± 1 round
  // to the same float32); float32-min (−3.4028e38) is past float64's resolution too, so 0.5 there.
  const q = [[1]];
  const k = [[1], [-1]];
  const v = [[1], [0]];
  it('−1e9 on every key: 0.8808 (the unbiased softmax), not 0.5', () => {
    expectEveryKernel(q, k, v, { bias: [[-1e9, -1e9]], scale: 1 }, [1 / (1 + Math.exp(-2))]);
  });
  it('float32-min on every key: 0.5 on every kernel (WASM gave 0)', () => {
    expectEveryKernel(q, k, v, { bias: [[F32_MIN, F32_MIN]], scale: 1 }, [0.5]);
  });
  it('−1e9 on some keys only blocks them in effect (weight exp(−1e9) = 0)', () => {
    expectEveryKernel(
      [[1, 0]],
      [
        [1, 0],
        [0, 1],
      ],
      [
        [1, 2],
        [3, 4],
      ],
      { bias: [[0, -1e9]] },
      [1, 2],
    );
  });
});

describe("item 6: 'auto' falls back when WebAssembly memory is refused at run time", () => {
  it('under ulimit -v, auto answers on the JS kernel and kernelSupport() says why; kernel "wasm" throws naming the call', () => {
    const script = `
      const { scaledDotProductAttention: sdpa, kernelSupport, Tensor } = await import(${JSON.stringify(`${dist}index.node.js`)});
      const q = Tensor.randn([1, 2, 64, 16], { seed: 1 });
      const auto = sdpa(q, q, q);
      const flash = sdpa(q, q, q, { kernel: 'flash' });
      let wasmError = '';
      try { sdpa(q, q, q, { kernel: 'wasm' }); } catch (e) { wasmError = e.message; }
      console.log(JSON.stringify({ same: auto.data.every((x, i) => x === flash.data[i]), support: kernelSupport(), wasmError }));`;
    // 3 GB of address space: enough for Node, not for a WebAssembly memory's reservation (≥ 8 GB on x64).
    const r = spawnSync('bash', ['-c', 'ulimit -v 3000000; exec node --input-type=module -e "$0"', script], {
      encoding: 'utf8',
    });
    expect(r.status, r.stderr).toBe(0);
    const got = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    expect(got.same).toBe(true);
    expect(got.support.wasm).toBeUndefined();
    expect(got.support.wasmUnavailable).toMatch(/memory/i);
    expect(got.support.wasmFallback).toMatch(/Out of memory|memory/);
    expect(got.wasmError).toMatch(
      /^scaledDotProductAttention: kernel 'wasm' cannot serve this call: .*memory/,
    );
  });
});

describe('item 7: the WASM kernel streams large masks and biases by tiles', () => {
  it('a 64 MB mask and a 64 MB bias at L = S = 4096 keep WASM memory under 24 MB, with the reference answer', () => {
    const [L, S, E] = [4096, 4096, 8];
    const q = Tensor.randn([1, 1, L, E], { seed: 1 });
    const k = Tensor.randn([1, 1, S, E], { seed: 2 });
    const v = Tensor.randn([1, 1, S, E], { seed: 3 });
    const mask = new Float32Array(L * S);
    const g = new Generator(4);
    for (let x = 0; x < mask.length; x++) mask[x] = g.random() < 0.7 ? 1 : 0;
    mask.fill(0, 5 * S, 6 * S); // a fully masked row
    const bias = Tensor.randn([L, S], { seed: 5 });
    const options = { mask: new Tensor(mask, [L, S]), bias };
    // Every growth of WASM memory during the call is recorded (the kernel drops a grown instance after
    // the call, so the memory left afterwards would prove nothing).
    const grow = WebAssembly.Memory.prototype.grow;
    let peak = wasmMemoryBytes();
    WebAssembly.Memory.prototype.grow = function (this: WebAssembly.Memory, pages: number) {
      const before = grow.call(this, pages);
      peak = Math.max(peak, this.buffer.byteLength);
      return before;
    };
    let got: Tensor;
    try {
      got = scaledDotProductAttention(q, k, v, { ...options, kernel: 'wasm' });
    } finally {
      WebAssembly.Memory.prototype.grow = grow;
    }
    expect(peak).toBeGreaterThan(0);
    expect(peak).toBeLessThan(24 << 20);
    const want = scaledDotProductAttention(q, k, v, { ...options, kernel: 'flash' });
    expectAllClose(got, want, { atol: 1e-5, rtol: 1e-4 });
    expect(got.data.subarray(5 * E, 6 * E).every((x) => x === 0)).toBe(true);
  });
});

// ---------------------------------------------------------------------------------------------------------
// The property suite

interface Hostile {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  options: AttentionOptions;
  /** Largest finite |v|: the output is a convex mix of v's rows, so errors scale with it. */
  vMax: number;
  label: string;
}

const arbHostile = fc
  .record({
    B: fc.integer({ min: 1, max: 2 }),
    Hkv: fc.integer({ min: 1, max: 2 }),
    group: fc.integer({ min: 1, max: 2 }),
    L: fc.integer({ min: 1, max: 37 }),
    S: fc.integer({ min: 1, max: 37 }),
    E: fc.constantFrom(1, 3, 4, 8, 16),
    Ev: fc.constantFrom(1, 3, 8, 9, 17), // 9 and 17: a partial second or third value panel
    qk: fc.constantFrom(1, 1, 1, 10, 1e3, 1e20, 1e-20),
    vScale: fc.constantFrom(1, 1, 1, 1e30),
    mask: fc.constantFrom('none', 'none', 'random', 'rows-blocked', 'keys'),
    bias: fc.constantFrom(
      'none',
      'none',
      'randn',
      'fill-1e9',
      'fill-f32min',
      'one-3e38',
      'some-inf',
      'some-1e9',
    ),
    causal: fc.constantFrom(false, false, true, 'top-left' as const),
    window: fc.option(fc.tuple(fc.integer({ min: -1, max: 9 }), fc.integer({ min: -1, max: 9 })), {
      nil: undefined,
    }),
    poison: fc.constantFrom('none', 'v-nan', 'v-inf', 'v-ninf', 'v-mixed', 'q-nan', 'k-inf'),
    seed: fc.integer({ min: 0, max: 0x7fffffff }),
  })
  .map((c): Hostile => {
    const Hq = c.Hkv * c.group;
    const g = new Generator(c.seed);
    const q = Tensor.randn([c.B, Hq, c.L, c.E], { seed: c.seed + 1 });
    const k = Tensor.randn([c.B, c.Hkv, c.S, c.E], { seed: c.seed + 2 });
    const v = Tensor.randn([c.B, c.Hkv, c.S, c.Ev], { seed: c.seed + 3 });
    for (const t of [q, k]) for (let x = 0; x < t.data.length; x++) t.data[x] *= c.qk;
    for (let x = 0; x < v.data.length; x++) v.data[x] *= c.vScale;
    let vMax = 1;
    for (const x of v.data) vMax = Math.max(vMax, Math.abs(x));
    const poisons: Record<string, number[]> = {
      'v-nan': [Number.NaN],
      'v-inf': [Number.POSITIVE_INFINITY],
      'v-ninf': [Number.NEGATIVE_INFINITY],
      'v-mixed': [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY],
    };
    const pick = (n: number) => Math.floor(g.random() * n);
    if (poisons[c.poison]) {
      const values = poisons[c.poison];
      for (let n = 0; n < 3; n++) v.data[pick(v.data.length)] = values[pick(values.length)];
    }
    if (c.poison === 'q-nan') q.data[pick(q.data.length)] = Number.NaN;
    if (c.poison === 'k-inf') k.data[pick(k.data.length)] = Number.POSITIVE_INFINITY;

    const options: AttentionOptions = {};
    const [L, S] = [c.L, c.S];
    if (c.mask !== 'none') {
      const shape = c.mask === 'keys' ? [c.B, 1, 1, S] : [L, S];
      const m = new Float32Array(shape.reduce((a, b) => a * b, 1));
      for (let x = 0; x < m.length; x++) m[x] = g.random() < 0.35 ? 0 : 1;
      if (c.mask === 'rows-blocked') for (let i = 0; i < L; i += 3) m.fill(0, i * S, (i + 1) * S);
      options.mask = new Tensor(m, shape);
    }
    if (c.bias !== 'none') {
      const b =
        c.bias === 'randn'
          ? Tensor.randn([Hq, L, S], { seed: c.seed + 4 }).data
          : new Float32Array(Hq * L * S);
      for (let x = 0; x < b.length; x++) {
        if (c.bias === 'fill-1e9') b[x] = -1e9;
        else if (c.bias === 'fill-f32min') b[x] = F32_MIN;
        else if (c.bias === 'some-inf' && g.random() < 0.3) b[x] = Number.NEGATIVE_INFINITY;
        else if (c.bias === 'some-1e9' && g.random() < 0.3) b[x] = -1e9;
      }
      if (c.bias === 'one-3e38') b[pick(b.length)] = 3e38;
      options.bias = new Tensor(b, [Hq, L, S]);
    }
    if (c.causal !== false) options.causal = c.causal;
    if (c.window) options.window = c.window;
    const label = JSON.stringify({ ...c, window: c.window ?? null });
    return { q, k, v, options, vMax, label };
  });

/** The WASM kernel computes in float32: its error grows with the values' magnitude. */
function tolerance(kernel: string, vMax: number) {
  return kernel === 'flash' ? { atol: 1e-6 * vMax, rtol: 1e-5 } : { atol: 1e-4 * vMax, rtol: 1e-3 };
}

describe('property: every kernel equals the reference on hostile inputs', () => {
  it('float32 inputs: flash, wasm and auto (600 seeded problems)', () => {
    fc.assert(
      fc.property(arbHostile, ({ q, k, v, options, vMax, label }) => {
        const want = scaledDotProductAttention(q, k, v, { ...options, kernel: 'reference' });
        for (const kernel of SYNC_KERNELS) {
          const got = scaledDotProductAttention(q, k, v, { ...options, kernel });
          expectAllClose(got, want, { ...tolerance(kernel, vMax), label: `${kernel} ${label}` });
        }
      }),
      { numRuns: 600, seed: 9 },
    );
  });

  it('float16 inputs: wasm (reads halves) and auto equal the reference on the same halves (300 problems)', () => {
    fc.assert(
      fc.property(arbHostile, ({ q, k, v, options, vMax, label }) => {
        const [qh, kh, vh] = [q.to('float16'), k.to('float16'), v.to('float16')];
        const want = scaledDotProductAttention(qh, kh, vh, { ...options, kernel: 'reference' });
        for (const kernel of ['wasm', 'auto'] as const) {
          const got = scaledDotProductAttention(qh, kh, vh, { ...options, kernel });
          expectAllClose(got, want, {
            ...tolerance(kernel, Math.min(vMax, 65504)),
            label: `${kernel} f16 ${label}`,
          });
        }
      }),
      { numRuns: 300, seed: 10 },
    );
  });

  it('async on 1 and 2 worker threads (24 problems large enough to leave the inline path)', async () => {
    const arb = fc.record({
      L: fc.constantFrom(129, 256, 300),
      S: fc.constantFrom(200, 256, 301),
      causal: fc.boolean(),
      mask: fc.boolean(),
      bias: fc.constantFrom('none', 'fill-1e9', 'one-3e38'),
      poison: fc.constantFrom('v-nan', 'v-inf', 'none'),
      seed: fc.integer({ min: 0, max: 1 << 30 }),
    });
    await fc.assert(
      fc.asyncProperty(arb, async (c) => {
        const { Tensor: T } = built;
        const [L, S, E] = [c.L, c.S, 64];
        const g = new Generator(c.seed);
        const q = T.randn([1, 2, L, E], { seed: c.seed + 1 });
        const k = T.randn([1, 2, S, E], { seed: c.seed + 2 });
        const v = T.randn([1, 2, S, E], { seed: c.seed + 3 });
        const options: Record<string, unknown> = { causal: c.causal };
        if (c.poison !== 'none') {
          for (let n = 0; n < 4; n++) {
            v.data[Math.floor(g.random() * v.data.length)] =
              c.poison === 'v-nan' ? Number.NaN : Number.POSITIVE_INFINITY;
          }
        }
        if (c.mask) {
          const m = new Float32Array(L * S);
          for (let x = 0; x < m.length; x++) m[x] = g.random() < 0.3 ? 0 : 1;
          m.fill(0, 7 * S, 8 * S);
          options.mask = new T(m, [L, S]);
        }
        if (c.bias !== 'none') {
          const b = new Float32Array(L * S).fill(c.bias === 'fill-1e9' ? -1e9 : 0);
          if (c.bias === 'one-3e38') b[Math.floor(g.random() * b.length)] = 3e38;
          options.bias = new T(b, [L, S]);
        }
        const want = built.scaledDotProductAttention(q, k, v, { ...options, kernel: 'reference' });
        for (const threads of [1, 2]) {
          const got = await built.scaledDotProductAttentionAsync(q, k, v, { ...options, threads });
          expectAllClose(got, want, {
            atol: 1e-4,
            rtol: 1e-3,
            label: `async t${threads} ${JSON.stringify(c)}`,
          });
        }
      }),
      { numRuns: 24, seed: 11 },
    );
  });

  it('kernelSupport() reports no run-time fallback in a normal process', () => {
    expect(kernelSupport().wasmFallback).toBe('');
  });
});

// A bias over 4 MB is copied a [rows, 512] tile at a time, so the tile's size, and with it where the
// WASM kernel puts K and V, depends on how many query rows a call has. Its K/V copy used to be kept for
// the next call of the same problem when the mask and bias addresses matched, though K and V had moved:
// the later call read memory never written (found by a review, 2026-12-02).
describe.skipIf(!kernelSupport().wasm)(
  'one head’s rows in calls of different sizes, with a bias over 4 MB',
  () => {
    const [L, S, E, Ev] = [133, 20000, 4, 5]; // bias 133 · 20000 floats: 10.6 MB
    const TOL = { atol: 2e-5, rtol: 2e-4 };

    it('wasm kernel: rows 0–63, then 64–132, of one problem', () => {
      const q = Tensor.randn([1, 1, L, E], { seed: 1 });
      const k = Tensor.randn([1, 1, S, E], { seed: 2 });
      const v = Tensor.randn([1, 1, S, Ev], { seed: 3 });
      const bias = Tensor.randn([1, 1, L, S], { seed: 4 });
      const want = scaledDotProductAttention(q, k, v, { bias, kernel: 'reference' });
      const { problem } = planAttention('test', q, k, v, { bias, kernel: 'wasm' });
      const out = new Float32Array(L * Ev);
      wasmKernel.forwardRows(problem, { out }, 0, 0, 64);
      wasmKernel.forwardRows(problem, { out }, 0, 64, L);
      expect(closeFailure('rows in two calls', out, want.data, TOL)).toBeUndefined();
    });

    it('scaledDotProductAttentionAsync on 2 threads (its tasks have different row counts), GQA, causal', async () => {
      const q = built.Tensor.randn([1, 2, L, E], { seed: 1 });
      const k = built.Tensor.randn([1, 1, S, E], { seed: 2 });
      const v = built.Tensor.randn([1, 1, S, Ev], { seed: 3 });
      const bias = built.Tensor.randn([1, 2, L, S], { seed: 4 });
      const options = { causal: true, bias };
      const want = built.scaledDotProductAttention(q, k, v, { ...options, kernel: 'reference' });
      const got = await built.scaledDotProductAttentionAsync(q, k, v, {
        ...options,
        kernel: 'wasm',
        threads: 2,
      });
      expect(closeFailure('async t2', got.data, want.data, TOL)).toBeUndefined();
    }, 120_000);
  },
);
