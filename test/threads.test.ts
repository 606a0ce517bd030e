// The worker pool, through the built Node entry (dist/index.node.js, which `npm test` builds first):
// threaded results equal the reference, worker errors reject with their message, processes exit, and the
// pool's memory is bounded: no more workers than cores, idle workers exit, at most two shared buffers.

import { spawnSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { expectAllClose } from './helpers.js';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const qkv = await import(`${dist}index.node.js`);
const asyncModule = await import(`${dist}attention/async.js`);
const core = await import(`${dist}threads/worker-core.js`);
const { nodePlatform } = await import(`${dist}threads/node.js`);
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
        // It really went to workers (threads are capped at the cores, so one on a one-core machine).
        expect(asyncModule.getPool().size).toBeGreaterThanOrEqual(Math.min(2, availableParallelism()));
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

describe('the pool is bounded by the cores and lets idle workers go', () => {
  // A platform whose "workers" run the real worker code on this thread, so counting them costs nothing
  // (before the cap, threads: 256 made 256 of them; with Node's platform, 256 real ones took 2.4 GB).
  function inlinePlatform(cores: number) {
    const made = { workers: 0 };
    const platform = {
      name: 'inline',
      cores: () => cores,
      sharedMemoryUnavailable: () => '',
      createWorker() {
        made.workers++;
        let handler: (m: unknown) => void = () => {};
        return {
          post: (message: unknown) => setTimeout(() => core.handleMessage(message, handler)),
          onMessage: (h: (m: unknown) => void) => {
            handler = h;
          },
          onError: () => {},
          ref: () => {},
          unref: () => {},
          terminate: () => {},
        };
      },
    };
    return { platform, made };
  }

  afterAll(() => {
    asyncModule.setWorkerIdleTimeout?.(30_000);
    asyncModule.setThreadPlatform(nodePlatform);
  });

  it('threads: 256 makes at most as many workers as the platform has cores', async () => {
    const { platform, made } = inlinePlatform(3);
    asyncModule.setThreadPlatform(platform);
    const q = Tensor.randn([1, 8, 256, 64], { seed: 8 }); // 64 tasks of 32 rows
    const out = await scaledDotProductAttentionAsync(q, q, q, { threads: 256 });
    expectAllClose(out, scaledDotProductAttention(q, q, q), { atol: 1e-5, rtol: 1e-4 });
    expect(made.workers).toBe(3);
    expect(asyncModule.getPool().size).toBe(3);
    // The pool itself enforces the cap too (for callers of pool.run).
    asyncModule.setThreadPlatform(platform);
    const span = { offset: 16, length: 1 };
    const job = {
      kernel: 'flash',
      buffer: new SharedArrayBuffer(64),
      tasks: 0,
      rowsPerTask: 1,
      dims: { B: 1, Hq: 1, Hkv: 1, L: 1, S: 1, E: 1, Ev: 1, scale: 1, shift: 0, left: 1, right: 1 },
      q: span,
      k: span,
      v: span,
      out: span,
    };
    await asyncModule.getPool().run(job, 50);
    expect(asyncModule.getPool().size).toBe(3);
  });

  it('with Node workers, threads above availableParallelism() stops at the core count', async () => {
    asyncModule.setThreadPlatform(nodePlatform);
    const cores = availableParallelism();
    const q = Tensor.randn([1, 8, 256, 64], { seed: 9 });
    const out = await scaledDotProductAttentionAsync(q, q, q, { threads: cores + 3 });
    expectAllClose(out, scaledDotProductAttention(q, q, q), { atol: 1e-5, rtol: 1e-4 });
    expect(asyncModule.getPool().size).toBe(Math.min(cores, 64));
  });

  it('idle workers exit after the idle timeout, and the next call starts new ones', async () => {
    asyncModule.setThreadPlatform(nodePlatform);
    asyncModule.setWorkerIdleTimeout(150);
    const q = Tensor.randn([1, 4, 256, 32], { seed: 10 });
    await scaledDotProductAttentionAsync(q, q, q, { threads: 2 });
    const pool = asyncModule.getPool();
    expect(pool.size).toBeGreaterThanOrEqual(1);
    const deadline = Date.now() + 10_000; // generous: the timeout is 150 ms
    while (pool.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(pool.size).toBe(0);
    const out = await scaledDotProductAttentionAsync(q, q, q, { threads: 2 });
    expectAllClose(out, scaledDotProductAttention(q, q, q), { atol: 1e-5, rtol: 1e-4 });
    expect(pool.size).toBeGreaterThanOrEqual(1);
    // A pool that keeps being used keeps its workers: calls closer together than the timeout.
    asyncModule.setWorkerIdleTimeout(1_000);
    for (let i = 0; i < 4; i++) {
      await scaledDotProductAttentionAsync(q, q, q, { threads: 2 });
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(pool.size).toBeGreaterThanOrEqual(1);
  });
});

it('concurrent calls stay within 1.5× the memory of sequential ones, and make at most two buffers', () => {
  // 256 queries against 100 000 keys (a window keeps the compute small): a 51 MB job whose output is
  // tiny, so the job buffers are what the measurement sees. Before the bound, each concurrent call that
  // found the kept buffer busy made its own and idle workers kept them all alive: 30 calls 5 at a time
  // made 26 buffers and took the peak RSS from ~150 MB (sequential) to over 1 GB, which a GC did not
  // return. Both phases collect garbage after each round, so the peaks compare retained memory, not
  // when V8 chose to collect the discarded outputs.
  const script = `
    let made = 0;
    const Base = SharedArrayBuffer;
    globalThis.SharedArrayBuffer = class extends Base {
      constructor(...args) { super(...args); if (this.byteLength > 2 ** 20) made++; } // not node:worker's own
    };
    const { Tensor, scaledDotProductAttentionAsync, terminateWorkers } =
      await import(${JSON.stringify(`${dist}index.node.js`)});
    const q = Tensor.randn([1, 1, 256, 64], { seed: 1 });
    const kv = Tensor.randn([1, 1, 100000, 64], { seed: 2 });
    const options = { window: [8, 0], threads: 2 };
    const peak = () => process.resourceUsage().maxRSS / 1024; // MB, peak RSS so far
    const collect = async () => {
      for (let i = 0; i < 2; i++) { globalThis.gc(); await new Promise((r) => setTimeout(r, 10)); }
    };
    for (let i = 0; i < 6; i++) {
      await scaledDotProductAttentionAsync(q, kv, kv, options);
      await collect();
    }
    const sequential = peak();
    for (let round = 0; round < 6; round++) {
      await Promise.all(Array.from({ length: 5 }, () => scaledDotProductAttentionAsync(q, kv, kv, options)));
      await collect();
    }
    const settled = process.memoryUsage().rss / 2 ** 20;
    console.log(JSON.stringify({ sequential, concurrent: peak(), settled, made }));
    terminateWorkers();
  `;
  const run = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  expect(run.stderr).toBe('');
  const { sequential, concurrent, settled, made } = JSON.parse(run.stdout);
  expect(made).toBeLessThanOrEqual(2); // one running, one being filled
  expect(concurrent).toBeLessThan(1.5 * sequential);
  expect(settled).toBeLessThan(1.5 * sequential);
});
