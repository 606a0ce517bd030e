// Long sequences never allocate an L×S matrix: every typed array and every WASM memory growth made
// during the call is recorded, and the largest must be far below L·S elements.

import { afterEach, beforeEach, expect, it } from 'vitest';
import { attentionWeights, type KernelName, scaledDotProductAttention, Tensor } from '../src/index.js';

let largest = 0; // elements (typed arrays) or 4-byte words (WASM memory)
const saved = { Float32Array, Float64Array, grow: WebAssembly.Memory.prototype.grow };

beforeEach(() => {
  largest = 0;
  for (const name of ['Float32Array', 'Float64Array'] as const) {
    const Base = saved[name];
    // A subclass that records sizes; kernels look the global up at call time, so they use it.
    const Recording = class extends (Base as Float64ArrayConstructor) {
      // biome-ignore lint/suspicious/noExplicitAny: forwards whatever the caller passed
      constructor(...args: any[]) {
        // @ts-expect-error: the base constructor's overloads
        super(...args);
        largest = Math.max(largest, this.length);
      }
    };
    (globalThis as Record<string, unknown>)[name] = Recording;
  }
  WebAssembly.Memory.prototype.grow = function (this: WebAssembly.Memory, pages: number) {
    const before = saved.grow.call(this, pages);
    largest = Math.max(largest, this.buffer.byteLength / 4);
    return before;
  };
});

afterEach(() => {
  globalThis.Float32Array = saved.Float32Array;
  globalThis.Float64Array = saved.Float64Array;
  WebAssembly.Memory.prototype.grow = saved.grow;
});

const cases: [KernelName, number, boolean][] = [
  ['auto', 8192, false], // the default path: the WASM kernel
  ['auto', 8192, true],
  ['flash', 1024, true],
  ['flash', 1024, false],
];

it.each(cases)('kernel %s, L = S = %i, causal %s: no allocation near L×S', (kernel, n, causal) => {
  const q = saved.Float32Array.from({ length: n * 64 }, (_, i) => Math.sin(i));
  const x = new Tensor(q, [1, 1, n, 64]);
  largest = 0;
  const out = scaledDotProductAttention(x, x, x, { kernel, causal });
  expect(out.shape).toEqual([1, 1, n, 64]);
  expect(largest).toBeGreaterThan(0); // the instrumentation saw the call's allocations
  // The output itself is L×64; anything of L·S/8 or more would be a materialised score matrix.
  expect(largest).toBeLessThan((n * n) / 8);
});

it('the instrumentation sees an L×S allocation when one is made', () => {
  const n = 1024;
  const x = Tensor.randn([n, 16], { seed: 1 });
  largest = 0;
  attentionWeights(x, x); // asks for the [L, S] weights, so it must allocate them
  expect(largest).toBeGreaterThanOrEqual(n * n);
  largest = 0;
  scaledDotProductAttention(x, x, x, { kernel: 'reference' }); // one [S] row at a time
  expect(largest).toBeLessThan((n * n) / 8);
});

it('a 64 MB mask is streamed, not copied into WASM memory; a call that grew it past 64 MB frees it', async () => {
  const { spawnSync } = await import('node:child_process');
  const { fileURLToPath } = await import('node:url');
  const dist = fileURLToPath(new URL('../dist/index.js', import.meta.url));
  const script = `
    const { scaledDotProductAttention, Tensor } = await import(${JSON.stringify(dist)});
    const { wasmMemoryBytes } = await import(${JSON.stringify(dist.replace(/index\.js$/, 'kernels/wasm.js'))});
    const mb = () => process.memoryUsage().arrayBuffers / 1048576;
    const base = mb();
    const withMask = (() => {
      const q = Tensor.randn([1, 4, 2048, 32], { seed: 1 });
      const mask = Tensor.full([1, 4, 2048, 2048], 1); // 64 MB: tiles of it are copied as the loops reach them
      scaledDotProductAttention(q, q, q, { mask });
      return wasmMemoryBytes();
    })();
    const wide = (() => {
      const q = Tensor.randn([1, 1, 64, 32768], { seed: 2 }); // K^T panels of E = 32768 rows: > 64 MB
      scaledDotProductAttention(q, q, q);
    })();
    for (let i = 0; i < 3; i++) { globalThis.gc(); await new Promise((r) => setTimeout(r, 20)); }
    console.log(JSON.stringify({ kept: mb() - base, withMask, wasm: wasmMemoryBytes() }));
  `;
  const run = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', script], {
    encoding: 'utf8',
  });
  expect(run.stderr).toBe('');
  const { kept, withMask, wasm } = JSON.parse(run.stdout);
  expect(withMask).toBeGreaterThan(0);
  expect(withMask).toBeLessThan(16 << 20); // the mask never entered WASM memory whole
  expect(kept).toBeLessThan(16); // the caller's mask is not kept alive by the kernel
  expect(wasm).toBe(0); // the kernel dropped its grown instance (WASM memory cannot shrink)
});
