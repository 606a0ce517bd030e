// Ring two: every kernel equals the reference kernel on seeded random calls (ggml's test-backend-ops idea).
// Sizes straddle the tile sizes (1, 63, 65, 257) and every option is drawn: masks, biases, windows,
// both causal alignments, GQA, L ≠ S, E ≠ Ev, fully blocked rows.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { planAttention } from '../src/attention/plan.js';
import { type AttentionOptions, attentionWeights, scaledDotProductAttention, Tensor } from '../src/index.js';
import { chooseKernel } from '../src/kernels/registry.js';
import { probeWasm } from '../src/kernels/wasm.js';
import { expectAllClose } from './helpers.js';

const tol = { atol: 1e-5, rtol: 1e-4 };
const KERNELS = ['flash', 'wasm'] as const;

/**
 * The float64 kernels (reference, flash) agree to 1e-5 + 1e-4·|x| whatever the logits. The WASM kernel
 * computes scores in float32, whose rounding error grows with |score|·2⁻²⁴: with q·k scores of ~100
 * (the `logits: 30` draws) it is held to 1e-4 + 1e-3·|x| instead.
 */
function tolerance(kernel: string, logits: number) {
  return kernel === 'wasm' && logits > 3 ? { atol: 1e-4, rtol: 1e-3 } : tol;
}

interface Call {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  options: AttentionOptions;
  logits: number;
  label: string;
}

const sizes = fc.constantFrom(1, 2, 63, 64, 65, 100, 257);

/** A random attention call: shapes, options and seeded data. */
const arbCall = fc
  .record({
    B: fc.integer({ min: 1, max: 2 }),
    Hkv: fc.integer({ min: 1, max: 2 }),
    group: fc.integer({ min: 1, max: 3 }),
    L: sizes,
    S: sizes,
    E: fc.constantFrom(1, 3, 4, 8, 16, 33, 64),
    Ev: fc.constantFrom(1, 4, 7, 16, 64),
    causal: fc.constantFrom(false, true, 'top-left' as const, 'bottom-right' as const),
    window: fc.option(fc.tuple(fc.integer({ min: -1, max: 70 }), fc.integer({ min: -1, max: 70 })), {
      nil: undefined,
    }),
    mask: fc.constantFrom('none', 'keys', 'full', 'rows-blocked'),
    bias: fc.constantFrom('none', 'heads', 'neg-inf'),
    scale: fc.option(fc.double({ min: 0.01, max: 3, noNaN: true }), { nil: undefined }),
    logits: fc.constantFrom(1, 1, 3, 30),
    seed: fc.integer({ min: 0, max: 1e6 }),
  })
  .map((r): Call => {
    const Hq = r.Hkv * r.group;
    const q = Tensor.randn([r.B, Hq, r.L, r.E], { seed: r.seed, std: r.logits });
    const k = Tensor.randn([r.B, r.Hkv, r.S, r.E], { seed: r.seed + 1 });
    const v = Tensor.randn([r.B, r.Hkv, r.S, r.Ev], { seed: r.seed + 2 });
    const options: AttentionOptions = { causal: r.causal, window: r.window as [number, number] | undefined };
    if (r.scale !== undefined) options.scale = r.scale;
    const u = Tensor.rand([r.B, Hq, r.L, r.S], { seed: r.seed + 3 }).data;
    if (r.mask === 'keys')
      options.mask = new Tensor(
        Float32Array.from(u.subarray(0, r.B * r.S), (x) => (x < 0.8 ? 1 : 0)),
        [r.B, 1, 1, r.S],
      );
    if (r.mask === 'full')
      options.mask = new Tensor(
        Float32Array.from(u, (x) => (x < 0.7 ? 1 : 0)),
        [r.B, Hq, r.L, r.S],
      );
    if (r.mask === 'rows-blocked') {
      // Every third query row sees nothing.
      const m = new Float32Array(r.L * r.S);
      for (let i = 0; i < r.L; i++) if (i % 3 !== 0) m.fill(1, i * r.S, (i + 1) * r.S);
      options.mask = new Tensor(m, [r.L, r.S]);
    }
    if (r.bias === 'heads') options.bias = Tensor.randn([Hq, r.L, r.S], { seed: r.seed + 4 });
    if (r.bias === 'neg-inf') {
      options.bias = new Tensor(
        Float32Array.from(u.subarray(0, r.L * r.S), (x) => (x < 0.25 ? Number.NEGATIVE_INFINITY : x)),
        [r.L, r.S],
      );
    }
    return { q, k, v, options, logits: r.logits, label: JSON.stringify(r) };
  });

describe.each(KERNELS)('kernel %s equals the reference', (kernel) => {
  it('on random calls (output and weights)', () => {
    fc.assert(
      fc.property(arbCall, ({ q, k, v, options, logits, label }) => {
        const want = scaledDotProductAttention(q, k, v, { ...options, kernel: 'reference' });
        const got = scaledDotProductAttention(q, k, v, { ...options, kernel });
        expectAllClose(got, want, { ...tolerance(kernel, logits), label: `${kernel} output ${label}` });
        const wantW = attentionWeights(q, k, { ...options, kernel: 'reference' });
        const gotW = attentionWeights(q, k, { ...options, kernel });
        expectAllClose(gotW, wantW, { ...tolerance(kernel, logits), label: `${kernel} weights ${label}` });
      }),
      { numRuns: 60, seed: 20261129 },
    );
  });

  it('on every L, S ∈ {1, 63, 65, 257} with causal bottom-right and a window', () => {
    for (const L of [1, 63, 65, 257])
      for (const S of [1, 63, 65, 257]) {
        const q = Tensor.randn([1, 2, L, 16], { seed: L * 1000 + S });
        const k = Tensor.randn([1, 2, S, 16], { seed: L * 1000 + S + 1 });
        const v = Tensor.randn([1, 2, S, 8], { seed: L * 1000 + S + 2 });
        for (const options of [{ causal: true }, { window: [20, 3] as [number, number] }, {}]) {
          const want = scaledDotProductAttention(q, k, v, { ...options, kernel: 'reference' });
          expectAllClose(scaledDotProductAttention(q, k, v, { ...options, kernel }), want, {
            ...tol,
            label: `${kernel} L=${L} S=${S} ${JSON.stringify(options)}`,
          });
        }
      }
  });
});

it("'auto' picks the WASM kernel where WASM SIMD exists (Node 20 has it), never the reference", () => {
  const q = Tensor.randn([1, 1, 8, 8], { seed: 1 });
  const problem = planAttention('test', q, q, q, {}).problem;
  expect(probeWasm()).toMatch(/simd/);
  expect(chooseKernel('test', 'auto', problem, { out: new Float32Array(64) }).name).toBe('wasm');
});

it('the WASM kernel streams K and V in chunks when a head exceeds its copy budget (8 MB)', () => {
  // E = Ev = 2048: K and V of a head take 16 KB per key, so 1500 keys stream in chunks of 512.
  const q = Tensor.randn([1, 1, 70, 2048], { seed: 7 });
  const k = Tensor.randn([1, 1, 1500, 2048], { seed: 8 });
  const v = Tensor.randn([1, 1, 1500, 2048], { seed: 9 });
  const mask = new Tensor(
    Float32Array.from({ length: 1500 }, (_, j) => (j % 7 === 3 ? 0 : 1)),
    [1500],
  );
  for (const options of [{}, { causal: true }, { window: [600, 40] as [number, number], mask }]) {
    const want = scaledDotProductAttention(q, k, v, { ...options, kernel: 'reference' });
    const got = scaledDotProductAttention(q, k, v, { ...options, kernel: 'wasm' });
    expectAllClose(got, want, { ...tol, label: `streamed ${JSON.stringify(Object.keys(options))}` });
  }
});

it('the WASM kernel splits wide heads into smaller query chunks (256 KB of packed rows each)', () => {
  // E = 1024: a packed query row takes 16 KB, so 300 rows run as 18 chunks of 16 rows and one of 12.
  const q = Tensor.randn([1, 1, 300, 1024], { seed: 13 });
  const k = Tensor.randn([1, 1, 200, 1024], { seed: 14 });
  const v = Tensor.randn([1, 1, 200, 24], { seed: 15 });
  for (const options of [{}, { causal: true }]) {
    const want = scaledDotProductAttention(q, k, v, { ...options, kernel: 'reference' });
    expectAllClose(scaledDotProductAttention(q, k, v, { ...options, kernel: 'wasm' }), want, tol);
  }
});

it('the WASM kernel carries its state across query chunks (4096 rows each)', () => {
  const q = Tensor.randn([1, 2, 4100, 4], { seed: 10 });
  const k = Tensor.randn([1, 2, 300, 4], { seed: 11 });
  const v = Tensor.randn([1, 2, 300, 5], { seed: 12 });
  for (const options of [{}, { causal: 'top-left' as const }, { window: [3, 3] as [number, number] }]) {
    const want = scaledDotProductAttention(q, k, v, { ...options, kernel: 'reference' });
    expectAllClose(scaledDotProductAttention(q, k, v, { ...options, kernel: 'wasm' }), want, tol);
  }
});

it('the embedded WASM binaries were built from the current assembly/*.ts', async () => {
  const { readdirSync, readFileSync } = await import('node:fs');
  const { createHash } = await import('node:crypto');
  const { SOURCE_SHA256 } = await import('../src/kernels/wasm-binary.generated.js');
  const dir = new URL('../assembly/', import.meta.url);
  const hash = createHash('sha256');
  for (const name of readdirSync(dir)
    .filter((f) => f.endsWith('.ts'))
    .sort()) {
    hash.update(readFileSync(new URL(name, dir)));
  }
  expect(SOURCE_SHA256, 'stale WASM build: run npm run build').toBe(hash.digest('hex'));
});

describe.each(['reference', ...KERNELS] as const)('kernel %s propagates NaN', (kernel) => {
  it('a NaN in one query row makes exactly that output row NaN, even when all its scores are NaN', () => {
    const q = Tensor.randn([1, 2, 9, 8], { seed: 1 });
    const k = Tensor.randn([1, 2, 7, 8], { seed: 2 });
    const v = Tensor.randn([1, 2, 7, 3], { seed: 3 });
    q.data[(1 * 9 + 4) * 8 + 2] = Number.NaN; // head 1, row 4
    const out = scaledDotProductAttention(q, k, v, { kernel }).data;
    for (let row = 0; row < 18; row++) {
      const values = Array.from(out.subarray(row * 3, row * 3 + 3));
      expect(values.every(row === 13 ? Number.isNaN : Number.isFinite), `row ${row}`).toBe(true);
    }
  });
});
