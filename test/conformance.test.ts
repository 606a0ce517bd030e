// Ring two: every registered kernel × every op it implements (backends.ts, the one table; registry.ts:
// registeredKernels, kernelOps; GEMM's ring is test/gemm.test.ts over registeredGemmKernels)
// equals the reference kernel on seeded random calls and on the tile edges (ggml's test-backend-ops idea).
// One decision to know: nothing here lists kernels — a kernel is tested the day it is registered, driven
// directly at each precision it serves; the comparisons live in test/rings/conformance.ts, where
// test/rings.test.ts shows that a wrong kernel fails them.

import { describe, expect, it } from 'vitest';
import { planAttention } from '../src/attention/plan.js';
import { scaledDotProductAttention, Tensor } from '../src/index.js';
import { autoOrder, backendOps, registeredBackends } from '../src/kernels/backends.js';
import { chooseGemmKernel, registeredGemmKernels } from '../src/kernels/gemm.js';
import { chooseKernel, registeredKernels } from '../src/kernels/registry.js';
import { forwardAll } from '../src/kernels/types.js';
import { probeWasm } from '../src/kernels/wasm.js';
import { expectAllClose } from './helpers.js';
import { outBuffer, probeDelegation, problemAt, servedPrecisions } from './rings/common.js';
import { conformanceCases, conformanceFailures, randomCalls, tileEdgeCalls } from './rings/conformance.js';

const tol = { atol: 1e-5, rtol: 1e-4 };

// The same calls for every kernel and op, so the reference computes each answer once.
const RANDOM_CALLS = randomCalls(60, 20261129);
const TILE_EDGE_CALLS = tileEdgeCalls();

/** Up to five failures, one per line (enough to see the pattern without flooding the report). */
function firstFailures(failures: string[]): string[] {
  return failures.length > 5 ? [...failures.slice(0, 5), `… and ${failures.length - 5} more`] : failures;
}

it('one backend table: every op of every backend is dispatched from it and enumerated by the rings', () => {
  const backends = registeredBackends();
  expect(backends[0].name).toBe('reference');
  // The reference is the spec of every op; together the backends implement attention (both ways) and GEMM.
  expect(backendOps(backends[0])).toEqual(['attention.forward', 'attention.backward', 'gemm']);
  expect(new Set(backends.flatMap(backendOps))).toEqual(
    new Set(['attention.forward', 'attention.backward', 'gemm']),
  );
  // Both dispatchers read the table: the same kernels, in its order, under the backends' names.
  expect(registeredKernels()).toEqual(backends.flatMap((b) => (b.attention ? [b.attention] : [])));
  expect(registeredGemmKernels()).toEqual(backends.flatMap((b) => (b.gemm ? [b.gemm] : [])));
  for (const b of backends) {
    if (b.attention) expect(b.attention.name).toBe(b.name);
    if (b.gemm) expect(b.gemm.name).toBe(b.name);
  }
  // 'auto' walks the table fastest first: an attention call and a product that WASM serves go to it.
  if (probeWasm()) {
    const q = new Tensor(new Float32Array(8), [2, 4]);
    const plan = planAttention('test', q, q, q, {});
    expect(chooseKernel('test', 'auto', plan.problem, { out: new Float32Array(8) }).name).toBe(
      autoOrder()[0].name,
    );
    const product = {
      M: 2,
      N: 2,
      K: 2,
      a: new Float32Array(4),
      b: new Float32Array(4),
      transA: false,
      transB: false,
      precision: 'float32',
    } as const;
    expect(chooseGemmKernel('test', 'auto', product).name).toBe(autoOrder()[0].name);
  }
});

it('the registry lists the reference first, and ring two covers every other kernel and each of its ops', () => {
  const kernels = registeredKernels();
  expect(kernels[0].name).toBe('reference');
  const cases = conformanceCases();
  expect(new Set(cases.map((c) => c.kernel.name))).toEqual(new Set(kernels.slice(1).map((k) => k.name)));
  expect(cases.length).toBeGreaterThanOrEqual(kernels.length - 1);
});

for (const { kernel, op } of conformanceCases()) {
  // The title says which kernel really computes each output (the WASM kernel's weights come from flash).
  const name = op === 'attention.forward' ? probeDelegation(kernel) : kernel.name;
  describe(`${op}: ${name} equals the reference`, () => {
    it(`on ${RANDOM_CALLS.length} random calls (every option, sizes straddling the tiles)`, () => {
      const failures = RANDOM_CALLS.flatMap((call) => conformanceFailures(kernel, op, call).failures);
      expect(firstFailures(failures)).toEqual([]);
    });
    it('on every L, S ∈ {1, 63, 65, 257} with causal bottom-right, a window, and neither', () => {
      const failures = TILE_EDGE_CALLS.flatMap((call) => conformanceFailures(kernel, op, call).failures);
      expect(firstFailures(failures)).toEqual([]);
    });
  });
}

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

describe.each(registeredKernels().map((kernel) => ({ kernel, name: kernel.name })))(
  'kernel $name propagates NaN',
  ({ kernel }) => {
    it('a NaN in one query row makes exactly that output row NaN, even when all its scores are NaN', () => {
      const q = Tensor.randn([1, 2, 9, 8], { seed: 1 });
      const k = Tensor.randn([1, 2, 7, 8], { seed: 2 });
      const v = Tensor.randn([1, 2, 7, 3], { seed: 3 });
      q.data[(1 * 9 + 4) * 8 + 2] = Number.NaN; // head 1, row 4
      const { problem } = planAttention('test', q, k, v, {});
      const { served } = servedPrecisions((p) => kernel.supports(p, { out: new Float32Array(0) }), problem);
      expect(served.length, 'precisions served').toBeGreaterThan(0);
      for (const precision of served) {
        const out = outBuffer(precision, 18 * 3);
        forwardAll(kernel, problemAt(problem, precision), { out });
        for (let row = 0; row < 18; row++) {
          const values = Array.from(out.subarray(row * 3, row * 3 + 3));
          expect(values.every(row === 13 ? Number.isNaN : Number.isFinite), `${precision} row ${row}`).toBe(
            true,
          );
        }
      }
    });
  },
);
