// The relaxed-SIMD build (fused multiply-add) against the reference. Node 20 validates relaxed SIMD
// only behind --experimental-wasm-relaxed-simd, so this runs the built package in a child process
// with that flag and checks the child really used the relaxed build.

import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import * as generated from '../src/kernels/wasm-binary.generated.js';

const dist = fileURLToPath(new URL('../dist/index.js', import.meta.url));

it('the relaxed-SIMD kernel equals the reference on masks, biases, windows, causal, GQA', () => {
  const script = `
    const { Tensor, scaledDotProductAttention, kernelSupport } = await import(${JSON.stringify(dist)});
    let worst = 0;
    const calls = [
      [[2, 4, 65, 64], [2, 2, 257, 64], [2, 2, 257, 48], { causal: true }],
      [[1, 2, 130, 33], [1, 2, 63, 33], [1, 2, 63, 7], { causal: 'top-left', window: [10, 3] }],
      [[1, 3, 100, 16], [1, 3, 100, 16], [1, 3, 100, 16], { mask: 'rows', bias: true }],
      [[1, 1, 1, 8], [1, 1, 1, 8], [1, 1, 1, 8], {}],
    ];
    let seed = 1;
    for (const [qs, ks, vs, o] of calls) {
      const q = Tensor.randn(qs, { seed: seed++ }), k = Tensor.randn(ks, { seed: seed++ }), v = Tensor.randn(vs, { seed: seed++ });
      const options = { ...o };
      const [L, S] = [qs[2], ks[2]];
      if (o.mask) {
        const m = new Float32Array(L * S).map((_, i) => ((i * 7919) % 5 === 0 ? 0 : 1));
        for (let i = 0; i < L; i += 9) m.fill(0, i * S, (i + 1) * S);
        options.mask = new Tensor(m, [L, S]);
      }
      if (o.bias) options.bias = Tensor.randn([qs[1], L, S], { seed: seed++ });
      const want = scaledDotProductAttention(q, k, v, { ...options, kernel: 'reference' }).data;
      const got = scaledDotProductAttention(q, k, v, { ...options, kernel: 'wasm' }).data;
      for (let i = 0; i < want.length; i++) {
        const excess = Math.abs(got[i] - want[i]) - (1e-5 + 1e-4 * Math.abs(want[i]));
        if (!(excess <= 0)) worst = Math.max(worst, Number.isNaN(excess) ? Infinity : excess);
      }
    }
    console.log(JSON.stringify({ variant: kernelSupport().wasm, worst }));
  `;
  const run = spawnSync(
    process.execPath,
    ['--experimental-wasm-relaxed-simd', '--input-type=module', '-e', script],
    {
      encoding: 'utf8',
      timeout: 60_000,
    },
  );
  expect(run.stderr).toBe('');
  const { variant, worst } = JSON.parse(run.stdout);
  expect(variant).toBe('relaxed-simd');
  expect(worst).toBe(0);
});

it('a process started with V8 flags can use the worker pool, and its workers run the relaxed build', () => {
  // Workers used to be given the parent's V8 flags explicitly, which Node rejects ("invalid execArgv").
  const script = `
    const { Tensor, scaledDotProductAttention, scaledDotProductAttentionAsync, terminateWorkers } =
      await import(${JSON.stringify(dist.replace(/index\.js$/, 'index.node.js'))});
    const q = Tensor.randn([1, 4, 300, 64], { seed: 1 });
    const k = Tensor.randn([1, 4, 300, 64], { seed: 2 });
    const v = Tensor.randn([1, 4, 300, 64], { seed: 3 });
    const want = scaledDotProductAttention(q, k, v, { kernel: 'reference' }).data;
    const got = (await scaledDotProductAttentionAsync(q, k, v, { kernel: 'wasm', threads: 2 })).data;
    let worst = 0;
    for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]));
    const { Worker } = await import('node:worker_threads');
    const probe = new Worker(
      'const { parentPort } = require("node:worker_threads");' +
        'parentPort.postMessage(WebAssembly.validate(Buffer.from(process.env.RELAXED, "base64")))',
      { eval: true, execArgv: [] },
    );
    const relaxedInWorker = await new Promise((resolve) => probe.once('message', resolve));
    await probe.terminate();
    terminateWorkers();
    console.log(JSON.stringify({ worst, relaxedInWorker }));
  `;
  const { RELAXED_WASM_BASE64 } = generated;
  const run = spawnSync(
    process.execPath,
    ['--experimental-wasm-relaxed-simd', '--max-old-space-size=512', '--input-type=module', '-e', script],
    { encoding: 'utf8', timeout: 60_000, env: { ...process.env, RELAXED: RELAXED_WASM_BASE64 } },
  );
  expect(run.stderr).toBe('');
  const { worst, relaxedInWorker } = JSON.parse(run.stdout);
  expect(relaxedInWorker).toBe(true);
  expect(worst).toBeLessThan(1e-5);
});

it("the CLI's enableRelaxedSimd: the relaxed build in a process started without the flag, and in workers it starts", () => {
  // What src/cli.ts does before any WASM compiles. V8 flags are per process, so a worker started later
  // (the training workers of --threads start with execArgv: [] as this probe does) validates it too.
  const helper = fileURLToPath(new URL('../dist/cli/relaxed-simd.js', import.meta.url));
  const script = `
    const { enableRelaxedSimd } = await import(${JSON.stringify(helper)});
    const before = WebAssembly.validate(Buffer.from(process.env.RELAXED, 'base64'));
    const enabled = enableRelaxedSimd();
    const { kernelSupport } = await import(${JSON.stringify(dist)});
    const { Worker } = await import('node:worker_threads');
    const probe = new Worker(
      'const { parentPort } = require("node:worker_threads");' +
        'parentPort.postMessage(WebAssembly.validate(Buffer.from(process.env.RELAXED, "base64")))',
      { eval: true, execArgv: [] },
    );
    const relaxedInWorker = await new Promise((resolve) => probe.once('message', resolve));
    await probe.terminate();
    console.log(JSON.stringify({ before, enabled, variant: kernelSupport().wasm, relaxedInWorker, again: enableRelaxedSimd() }));
  `;
  const { RELAXED_WASM_BASE64 } = generated;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, RELAXED: RELAXED_WASM_BASE64 },
  });
  expect(run.stderr).toBe('');
  const got = JSON.parse(run.stdout);
  expect(got).toMatchObject({ enabled: true, variant: 'relaxed-simd', relaxedInWorker: true, again: true });
});
