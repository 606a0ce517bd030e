// Where WebAssembly SIMD is missing, 'auto' falls back to the tiled JS kernel and 'wasm' says why.
// Simulated in a child process whose WebAssembly.validate rejects every module (as a runtime without
// SIMD rejects ours), so the probe runs exactly as it would there.

import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const dist = fileURLToPath(new URL('../dist/index.js', import.meta.url));

it("without WASM SIMD, 'auto' uses the JS kernel and kernel: 'wasm' throws a clear error", () => {
  const script = `
    WebAssembly.validate = () => false;
    const { Tensor, scaledDotProductAttention, kernelSupport } = await import(${JSON.stringify(dist)});
    const q = Tensor.randn([1, 2, 33, 8], { seed: 1 });
    const auto = scaledDotProductAttention(q, q, q, { causal: true });
    const flash = scaledDotProductAttention(q, q, q, { causal: true, kernel: 'flash' });
    let error = '';
    try { scaledDotProductAttention(q, q, q, { kernel: 'wasm' }); } catch (e) { error = e.message; }
    console.log(JSON.stringify({ support: kernelSupport(), same: auto.data.every((x, i) => x === flash.data[i]), error }));
  `;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  expect(run.stderr).toBe('');
  const { support, same, error } = JSON.parse(run.stdout);
  expect(support.wasm).toBeUndefined();
  expect(support.wasmUnavailable).toMatch(/does not support WebAssembly SIMD128/);
  expect(same).toBe(true); // 'auto' took the flash kernel: bit-identical to asking for it
  expect(error).toMatch(
    /scaledDotProductAttention: kernel 'wasm' cannot serve this call: WebAssembly SIMD is unavailable/,
  );
});
