// The worker pool, through the built Node entry (dist/index.node.js, which `npm test` builds first):
// threaded results equal the reference, worker errors reject with their message, processes exit.

import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { expectAllClose } from './helpers.js';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const qkv = await import(`${dist}index.node.js`);
const asyncModule = await import(`${dist}attention/async.js`);
const { Tensor, scaledDotProductAttention, scaledDotProductAttentionAsync } = qkv;

afterAll(() => qkv.terminateWorkers());

describe('scaledDotProductAttentionAsync', () => {
  const cases = [
    {
      name: 'causal GQA, L ≠ S, E ≠ Ev',
      q: [2, 4, 97, 32],
      k: [2, 2, 130, 32],
      v: [2, 2, 130, 24],
      options: { causal: true },
    },
    {
      name: 'top-left causal and a window',
      q: [1, 2, 200, 16],
      k: [1, 2, 150, 16],
      v: [1, 2, 150, 16],
      options: { causal: 'top-left', window: [30, 0] },
    },
    {
      name: 'mask with blocked rows and a bias',
      q: [1, 3, 129, 8],
      k: [1, 3, 129, 8],
      v: [1, 3, 129, 8],
      options: { mask: 'rows', bias: true },
    },
  ];
  for (const c of cases) {
    for (const kernel of ['auto', 'flash']) {
      it(`${c.name} (${kernel}, 2 threads) equals the reference`, async () => {
        const q = Tensor.randn(c.q, { seed: 1 });
        const k = Tensor.randn(c.k, { seed: 2 });
        const v = Tensor.randn(c.v, { seed: 3 });
        const options: Record<string, unknown> = { ...c.options };
        const [L, S] = [c.q[2], c.k[2]];
        if (options.mask === 'rows') {
          const m = new Float32Array(L * S).fill(1);
          for (let i = 0; i < L; i += 5) m.fill(0, i * S, (i + 1) * S);
          options.mask = new Tensor(m, [L, S]);
        }
        if (options.bias === true) options.bias = Tensor.randn([c.q[1], L, S], { seed: 4 });
        const want = scaledDotProductAttention(q, k, v, { ...options, kernel: 'reference' });
        const got = await scaledDotProductAttentionAsync(q, k, v, { ...options, kernel, threads: 2 });
        expectAllClose(got, want, { atol: 1e-5, rtol: 1e-4 });
        expect(asyncModule.getPool().size).toBeGreaterThanOrEqual(2); // it really went to workers
      });
    }
  }

  it('rejects bad thread counts and validates like the sync call', async () => {
    const q = Tensor.randn([1, 1, 4, 8], { seed: 1 });
    await expect(scaledDotProductAttentionAsync(q, q, q, { threads: 0 })).rejects.toThrow(
      /scaledDotProductAttentionAsync: threads must be a positive integer, got 0/,
    );
    await expect(scaledDotProductAttentionAsync(q, Tensor.randn([1, 1, 4, 6]), q)).rejects.toThrow(
      /scaledDotProductAttentionAsync: key has E=6 but query has E=8/,
    );
  });

  it('an error inside a worker rejects with the original message', async () => {
    const pool = asyncModule.getPool();
    const buffer = new SharedArrayBuffer(64);
    const span = { offset: 16, length: 1 };
    const job = {
      kernel: 'no-such-kernel',
      buffer,
      tasks: 1,
      rowsPerTask: 1,
      dims: { B: 1, Hq: 1, Hkv: 1, L: 1, S: 1, E: 1, Ev: 1, scale: 1, shift: 0, left: 1, right: 1 },
      q: span,
      k: span,
      v: span,
      out: span,
    };
    await expect(pool.run(job, 2)).rejects.toThrow("unknown kernel 'no-such-kernel'");
    // The pool still works afterwards.
    const q = Tensor.randn([1, 2, 256, 32], { seed: 5 });
    const out = await scaledDotProductAttentionAsync(q, q, q, { threads: 2 });
    expectAllClose(out, scaledDotProductAttention(q, q, q), { atol: 1e-5, rtol: 1e-4 });
  });
});

it('terminating the workers rejects a call in flight, and the next call works', async () => {
  const q = Tensor.randn([1, 8, 1024, 64], { seed: 6 });
  const pending = scaledDotProductAttentionAsync(q, q, q, { threads: 2 });
  await new Promise((r) => setTimeout(r, 5)); // let the job reach the workers
  qkv.terminateWorkers();
  await expect(pending).rejects.toThrow(
    /scaledDotProductAttentionAsync: the attention workers were terminated/,
  );
  const small = Tensor.randn([1, 2, 256, 32], { seed: 7 });
  const out = await scaledDotProductAttentionAsync(small, small, small, { threads: 2 });
  expectAllClose(out, scaledDotProductAttention(small, small, small), { atol: 1e-5, rtol: 1e-4 });
});

it('a Node process that used the pool exits on its own', () => {
  const script = `
    const { Tensor, scaledDotProductAttentionAsync } = await import(${JSON.stringify(`${dist}index.node.js`)});
    const q = Tensor.randn([1, 4, 256, 64], { seed: 1 });
    const out = await scaledDotProductAttentionAsync(q, q, q, { threads: 2 });
    console.log('done', out.shape.join('x'));
  `;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 20_000,
  });
  expect(run.error).toBeUndefined(); // a timeout would mean the workers kept it alive
  expect(run.status).toBe(0);
  expect(run.stdout.trim()).toBe('done 1x4x256x64');
});

it('repeated calls reuse one shared buffer instead of growing the process by a job each time', () => {
  // A 41 MB job (q, k, v and out of 40000×64) eight times over; a window keeps the compute small.
  // Each worker keeps every buffer it was sent until it collects garbage, so a buffer per call grew
  // array-buffer memory by ~340 MB here; one reused buffer plus the discarded outputs stay under 160.
  const script = `
    const { Tensor, scaledDotProductAttentionAsync, terminateWorkers } =
      await import(${JSON.stringify(`${dist}index.node.js`)});
    const q = Tensor.randn([1, 1, 40000, 64], { seed: 1 });
    const base = process.memoryUsage().arrayBuffers;
    for (let i = 0; i < 8; i++) await scaledDotProductAttentionAsync(q, q, q, { window: [8, 0], threads: 2 });
    console.log(Math.round((process.memoryUsage().arrayBuffers - base) / 2 ** 20));
    terminateWorkers();
  `;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  expect(run.stderr).toBe('');
  const grownMB = Number(run.stdout.trim());
  expect(grownMB).toBeGreaterThan(40); // the kept buffer itself: the measurement sees it
  expect(grownMB).toBeLessThan(160);
});
