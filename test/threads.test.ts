// The worker pool, through the built Node entry (dist/index.node.js, which `npm test` builds first):
// threaded results equal the reference, forward and backward; workers return out, weights, lse and
// gradients; float16 crosses as halves; worker errors reject with their message; processes exit; the pool's
// memory is bounded: no more workers than cores, idle workers exit, at most two shared buffers per runtime.

import { spawnSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { expectAllClose } from './helpers.js';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const qkv = await import(`${dist}index.node.js`);
const core = await import(`${dist}threads/worker-core.js`);
const { Pool } = await import(`${dist}threads/pool.js`);
const { nodePlatform } = await import(`${dist}threads/node.js`);
const { BufferLayout, readBack } = await import(`${dist}kernels/transfer.js`);
const { kernelByName } = await import(`${dist}kernels/registry.js`);
const { forwardAll, KernelResourceError } = await import(`${dist}kernels/types.js`);
const { planAttention } = await import(`${dist}attention/plan.js`);
const { rowSchedule } = await import(`${dist}threads/schedule.js`);
const { Tensor, scaledDotProductAttention, scaledDotProductAttentionAsync, defaultRuntime } = qkv;

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
        expect(defaultRuntime.workers).toBeGreaterThanOrEqual(Math.min(2, availableParallelism()));
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
    const pool = new Pool(nodePlatform);
    const job = (op: string, kernel: string) => ({
      op,
      kernel,
      buffer: new SharedArrayBuffer(64),
      tasks: 1,
      args: { problem: { L: 1 }, outputs: {}, rowsPerTask: 1 },
    });
    await expect(pool.run(job('attention.forward', 'no-such-kernel'), 2)).rejects.toThrow(
      "unknown kernel 'no-such-kernel'",
    );
    await expect(pool.run(job('conv2d', 'flash'), 2)).rejects.toThrow("unknown operation 'conv2d'");
    pool.terminate();
    // The runtime's pool works.
    const q = Tensor.randn([1, 2, 256, 32], { seed: 5 });
    const out = await scaledDotProductAttentionAsync(q, q, q, { threads: 2 });
    expectAllClose(out, scaledDotProductAttention(q, q, q), { atol: 1e-5, rtol: 1e-4 });
  });
});

describe('what workers return', () => {
  it('a forward job returns out, weights and lse, each equal to the kernel run on this thread', async () => {
    const q = Tensor.randn([2, 4, 70, 16], { seed: 21 });
    const k = Tensor.randn([2, 2, 90, 16], { seed: 22 });
    const v = Tensor.randn([2, 2, 90, 8], { seed: 23 });
    const mask = new Tensor(
      Float32Array.from({ length: 90 }, (_, j) => (j % 7 ? 1 : 0)),
      [90],
    );
    const plan = planAttention('test', q, k, v, { causal: 'top-left', mask, window: [20, 0] });
    const p = plan.problem;
    const sizes = { out: p.B * p.Hq * p.L * p.Ev, weights: p.B * p.Hq * p.L * p.S, lse: p.B * p.Hq * p.L };
    const want = {
      out: new Float32Array(sizes.out),
      weights: new Float32Array(sizes.weights),
      lse: new Float64Array(sizes.lse),
    };
    forwardAll(kernelByName('flash'), p, want);
    const got = {
      out: new Float32Array(sizes.out),
      weights: new Float32Array(sizes.weights),
      lse: new Float64Array(sizes.lse),
    };
    const layout = new BufferLayout(16);
    const { schedule, tasks } = rowSchedule(p.B * p.Hq, p.L, 2);
    const args = { problem: layout.place(p, 'copy'), outputs: layout.place(got, 'zero'), schedule };
    const buffer = new SharedArrayBuffer(layout.byteLength);
    layout.write(buffer);
    const pool = new Pool(nodePlatform);
    await pool.run({ op: 'attention.forward', kernel: 'flash', buffer, tasks, args }, 2);
    pool.terminate();
    readBack(got, args.outputs, buffer);
    expect(got.out).toEqual(want.out);
    expect(got.weights).toEqual(want.weights);
    expect(got.lse).toEqual(want.lse);
    // Row 0 of each head sees only key 0, which the mask blocks: its −Infinity comes back too.
    expect(got.lse.filter((x) => x === Number.NEGATIVE_INFINITY)).toHaveLength(p.B * p.Hq);
    expect(got.lse.filter((x) => x !== 0 && Number.isFinite(x))).toHaveLength(sizes.lse - p.B * p.Hq);
  });

  for (const masked of [false, true]) {
    it(`a streamed forward job waits for the slices its tasks read${masked ? ' (a mask: all of them)' : ''}`, async () => {
      const q = Tensor.randn([2, 4, 96, 16], { seed: 31 });
      const k = Tensor.randn([2, 2, 80, 16], { seed: 32 });
      const v = Tensor.randn([2, 2, 80, 8], { seed: 33 });
      const mask = masked
        ? new Tensor(
            Float32Array.from({ length: 80 }, (_, j) => j % 5),
            [80],
          )
        : undefined;
      const p = planAttention('test', q, k, v, { causal: true, mask }).problem;
      const want = { out: new Float32Array(p.B * p.Hq * p.L * p.Ev) };
      forwardAll(kernelByName('flash'), p, want);
      const got = { out: new Float32Array(want.out.length) };
      const layout = new BufferLayout(16);
      const { schedule, tasks } = rowSchedule(p.B * p.Hq, p.L, 2);
      const args = { problem: layout.place(p, 'copy'), outputs: layout.place(got, 'none'), schedule };
      const buffer = new SharedArrayBuffer(layout.byteLength);
      const header = new Int32Array(buffer, 0, 4);
      const slices = 8;
      const pool = new Pool(nodePlatform);
      let finished = false;
      const done = pool
        .run({ op: 'attention.forward', kernel: 'flash', buffer, tasks, args, slices }, 2)
        .then(() => {
          finished = true;
        });
      // Nothing written: the workers claim their first tasks and wait.
      // Polls rather than sleeping a fixed time: starting the workers may be slow on a loaded machine.
      const until = async (ok: () => boolean) => {
        for (let waited = 0; !ok() && waited < 10_000; waited += 10)
          await new Promise((r) => setTimeout(r, 10));
      };
      await until(() => Atomics.load(header, 0) >= 2);
      expect(Atomics.load(header, 0)).toBe(2); // one task claimed by each worker, neither started
      expect(finished).toBe(false);
      // Slices 0 … 6: a mask makes every task wait for the last slice; else the first pairs' tasks run.
      for (let i = 0; i < slices - 1; i++) layout.write(buffer, [i, slices]);
      Atomics.store(header, 3, slices - 1);
      Atomics.notify(header, 3);
      if (masked) await new Promise((r) => setTimeout(r, 300));
      else await until(() => Atomics.load(header, 0) > 2);
      expect(finished).toBe(false);
      expect(Atomics.load(header, 0) > 2).toBe(!masked);
      layout.write(buffer, [slices - 1, slices]);
      Atomics.store(header, 3, slices);
      Atomics.notify(header, 3);
      await done;
      pool.terminate();
      readBack(got, args.outputs, buffer);
      expect(got.out).toEqual(want.out);
    });
  }

  it("a platform whose post runs the job inline gets an error naming why, not a hang (a streamed job's inputs come after post)", () => {
    // In a child process: a hang here is a synchronous spin of the test's own thread.
    const script = `
      const qkv = await import(${JSON.stringify(`${dist}index.node.js`)});
      const core = await import(${JSON.stringify(`${dist}threads/worker-core.js`)});
      const platform = {
        name: 'inline', cores: () => 2, sharedMemoryUnavailable: () => '',
        createWorker() {
          let handler = () => {};
          return {
            post: (m) => core.handleMessage(m, (r) => queueMicrotask(() => handler(r))),
            onMessage: (h) => { handler = h; }, onError: () => {}, ref() {}, unref() {}, terminate() {},
          };
        },
      };
      const rt = qkv.createRuntime({ platform, threads: 2 });
      const q = qkv.Tensor.randn([1, 4, 256, 32], { seed: 1 });
      // A job that is not streamed still runs there (its inputs are written before it is posted).
      const dOut = qkv.Tensor.randn([1, 4, 256, 32], { seed: 2 });
      const grads = await rt.attentionBackwardAsync(q, q, q, dOut, { kernel: 'reference' });
      console.log('backward', grads.dq.shape.join('x'));
      try {
        await rt.scaledDotProductAttentionAsync(q, q, q);
        console.log('resolved');
      } catch (err) {
        console.log('rejected:', err.message);
      }
      const again = await qkv.scaledDotProductAttentionAsync(q, q, q, { threads: 2 });
      console.log('default runtime', again.shape.join('x'));
    `;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      timeout: 20_000,
      encoding: 'utf8',
    });
    expect(r.signal, r.stderr).toBe(null);
    expect(r.stdout).toContain('backward 1x4x256x32');
    expect(r.stdout).toMatch(
      /rejected: scaledDotProductAttentionAsync: the thread platform's worker ran the job inside post\(\).*post must only send the message/,
    );
    expect(r.stdout).toContain('default runtime 1x4x256x32');
  }, 30_000);

  it('slicesRead: the slices of q (its whole GQA group), k and v a pair reads, all of them with a mask', () => {
    const q = Tensor.randn([2, 8, 64, 4], { seed: 1 });
    const kv = Tensor.randn([2, 2, 32, 4], { seed: 2 });
    const p = planAttention('test', q, kv, kv, {}).problem;
    // 16 slices: q's pair bh is slice bh, its group of 4 heads ends in slice 4j + 3, as k and v's head j.
    expect([0, 3, 4, 9, 15].map((bh) => core.slicesRead(p, 16, bh))).toEqual([4, 4, 8, 12, 16]);
    // Values with fewer columns are cut the same way; 4 slices: one per key/value head.
    const v = Tensor.randn([2, 2, 32, 1], { seed: 3 });
    expect(
      [0, 5, 8].map((bh) => core.slicesRead(planAttention('test', q, kv, v, {}).problem, 4, bh)),
    ).toEqual([1, 2, 3]);
    const mask = new Tensor(new Float32Array(32).fill(1), [32]);
    expect(core.slicesRead(planAttention('test', q, kv, kv, { mask }).problem, 8, 0)).toBe(8);
  });

  it('a streamed decode-sized GQA call (the WASM decode path reads every query head of a group) equals the sync call', async () => {
    // L = 1 and 4 query heads per key head: the first task of a group computes all four heads' rows.
    for (const [B, Hq, Hkv] of [
      [1, 8, 2],
      [3, 8, 2],
      [2, 16, 1],
    ]) {
      const q = Tensor.randn([B, Hq, 1, 64], { seed: B });
      const k = Tensor.randn([B, Hkv, 4096, 64], { seed: 10 + B });
      const v = Tensor.randn([B, Hkv, 4096, 64], { seed: 20 + B });
      const want = scaledDotProductAttention(q, k, v, { kernel: 'wasm' });
      for (let round = 0; round < 3; round++) {
        const got = await scaledDotProductAttentionAsync(q, k, v, { kernel: 'wasm', threads: 2 });
        expect(got.data, `B ${B}, Hq ${Hq}, Hkv ${Hkv}, round ${round}`).toEqual(want.data);
      }
    }
  });

  const backwardCases = [
    { name: 'GQA, causal, a bias shared by the batch (dbias summed over it)', kernel: 'auto', half: false },
    { name: 'the reference backward (no forward first)', kernel: 'reference', half: false },
    { name: 'float16 inputs', kernel: 'auto', half: true },
  ] as const;
  for (const c of backwardCases) {
    it(`attentionBackwardAsync equals attentionBackward: ${c.name}`, async () => {
      let q = Tensor.randn([2, 4, 96, 32], { seed: 31 });
      let k = Tensor.randn([2, 2, 120, 32], { seed: 32 });
      let v = Tensor.randn([2, 2, 120, 16], { seed: 33 });
      if (c.half) [q, k, v] = [q.to('float16'), k.to('float16'), v.to('float16')];
      const dOut = Tensor.randn([2, 4, 96, 16], { seed: 34 });
      const mask = new Tensor(
        Float32Array.from({ length: 120 }, (_, j) => (j % 5 ? 1 : 0)),
        [120],
      );
      const options = {
        causal: true,
        bias: Tensor.randn([4, 96, 120], { seed: 35 }),
        mask,
        kernel: c.kernel,
      };
      const want = qkv.attentionBackward(q, k, v, dOut, options);
      const runtime = qkv.createRuntime();
      const got = await runtime.attentionBackwardAsync(q, k, v, dOut, { ...options, threads: 2 });
      expect(runtime.workers).toBe(Math.min(2, availableParallelism()));
      runtime.terminateWorkers();
      for (const name of ['dq', 'dk', 'dv', 'dbias'] as const) {
        expect(got[name]?.shape).toEqual(want[name]?.shape);
        // dbias sums each worker's float64 partials: the order differs from one thread's, by an ulp at most.
        expectAllClose(got[name], want[name], { atol: 1e-6, rtol: 1e-6 });
      }
    });
  }

  it('attentionBackwardAsync validates like attentionBackward', async () => {
    const q = Tensor.randn([1, 2, 8, 4], { seed: 36 });
    await expect(qkv.attentionBackwardAsync(q, q, q, Tensor.randn([1, 2, 8, 5]))).rejects.toThrow(
      /attentionBackwardAsync: dOut has shape \[1,2,8,5\] but the output has shape \[1,2,8,4\]/,
    );
    await expect(qkv.attentionBackwardAsync(q, q, q, q, { threads: 1.5 })).rejects.toThrow(
      /attentionBackwardAsync: threads must be a positive integer, got 1.5/,
    );
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
  // A 41 MB job (q, k, v and out of 40000×64; three distinct arrays, since one array passed as q, k and
  // v is placed once) eight times over; a window keeps the compute small.
  // Each worker keeps every buffer it was sent until it collects garbage, so a buffer per call grew
  // array-buffer memory by ~340 MB here; one reused buffer plus the discarded outputs stay under 160.
  const script = `
    const { Tensor, scaledDotProductAttentionAsync, terminateWorkers } =
      await import(${JSON.stringify(`${dist}index.node.js`)});
    const [q, k, v] = [1, 2, 3].map((seed) => Tensor.randn([1, 1, 40000, 64], { seed }));
    const base = process.memoryUsage().arrayBuffers;
    for (let i = 0; i < 8; i++) await scaledDotProductAttentionAsync(q, k, v, { window: [8, 0], threads: 2 });
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
    const made = { workers: 0, jobs: [] as Record<string, unknown>[] };
    const platform = {
      name: 'inline',
      cores: () => cores,
      sharedMemoryUnavailable: () => '',
      createWorker() {
        made.workers++;
        let handler: (m: unknown) => void = () => {};
        return {
          post: (message: { job: Record<string, unknown> }) => {
            made.jobs.push(message.job);
            setTimeout(() => core.handleMessage(message, handler));
          },
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

  it('threads: 256 makes at most as many workers as the platform has cores', async () => {
    const { platform, made } = inlinePlatform(3);
    const runtime = qkv.createRuntime({ platform });
    const q = Tensor.randn([1, 8, 256, 64], { seed: 8 }); // 64 tasks of 32 rows
    const out = await runtime.scaledDotProductAttentionAsync(q, q, q, { threads: 256 });
    expectAllClose(out, scaledDotProductAttention(q, q, q), { atol: 1e-5, rtol: 1e-4 });
    expect(made.workers).toBe(3);
    expect(runtime.workers).toBe(3);
    // The pool itself enforces the cap too (for callers of pool.run).
    const pool = new Pool(platform);
    const job = {
      op: 'attention.forward',
      kernel: 'flash',
      buffer: new SharedArrayBuffer(64),
      tasks: 0,
      args: { problem: { L: 1 }, outputs: {}, rowsPerTask: 1 },
    };
    await pool.run(job, 50);
    expect(pool.size).toBe(3);
  });

  it('runtimes are independent: their own workers, defaults and termination', async () => {
    const one = inlinePlatform(2);
    const two = inlinePlatform(2);
    const a = qkv.createRuntime({ platform: one.platform, threads: 1 });
    const b = qkv.createRuntime({ platform: two.platform });
    const q = Tensor.randn([1, 4, 256, 64], { seed: 12 });
    const want = scaledDotProductAttention(q, q, q);
    expectAllClose(await a.scaledDotProductAttentionAsync(q, q, q), want, { atol: 1e-5, rtol: 1e-4 });
    expectAllClose(await b.scaledDotProductAttentionAsync(q, q, q), want, { atol: 1e-5, rtol: 1e-4 });
    expect([a.workers, b.workers, one.made.workers, two.made.workers]).toEqual([1, 2, 1, 2]); // a's threads: 1
    a.terminateWorkers();
    expect([a.workers, b.workers]).toEqual([0, 2]);
    expect(a.threads).toBe(1);
    expect(() => qkv.createRuntime({ thread: 2 })).toThrow(/createRuntime: unknown option 'thread'/);
    expect(() => qkv.createRuntime({ threads: 0 })).toThrow(
      /createRuntime: threads must be a positive integer, got 0/,
    );
    expect(() => qkv.createRuntime({ platform: {} })).toThrow(
      /createRuntime: platform must have a createWorker\(\) method/,
    );
    expect(() => {
      b.idleMs = -1;
    }).toThrow(/idleMs must be a number of milliseconds in \[0, 2147483647\]/);
  });

  it('float16 inputs cross as halves to a kernel that reads them, widened once for one that does not', async () => {
    const { platform, made } = inlinePlatform(2);
    const runtime = qkv.createRuntime({ platform });
    const x = Tensor.randn([1, 4, 256, 32], { seed: 13 }).to('float16');
    for (const kernel of ['wasm', 'flash'] as const) {
      made.jobs.length = 0;
      const got = await runtime.scaledDotProductAttentionAsync(x, x, x, { kernel, threads: 2 });
      expect(got.data).toEqual(scaledDotProductAttention(x, x, x, { kernel }).data);
      const problem = made.jobs[0].args as {
        problem: { q: { $array: string; length: number }; half?: unknown };
      };
      if (kernel === 'wasm') {
        expect(problem.problem.half).toMatchObject({ q: { $array: 'Uint16Array', length: x.size } });
        expect(problem.problem.q.length).toBe(0);
      } else {
        expect(problem.problem.half).toBeUndefined();
        expect(problem.problem.q).toMatchObject({ $array: 'Float32Array', length: x.size });
      }
    }
  });

  it("a worker whose kernel is refused memory hands the rest to Job.fallback ('auto' only)", async () => {
    const { platform, made } = inlinePlatform(2);
    const runtime = qkv.createRuntime({ platform });
    const wasm = kernelByName('wasm');
    const forwardRows = wasm.forwardRows;
    let refused = 0;
    wasm.forwardRows = () => {
      refused++;
      throw new KernelResourceError('WebAssembly.Memory(): could not allocate memory');
    };
    try {
      const q = Tensor.randn([1, 4, 256, 32], { seed: 14 });
      const got = await runtime.scaledDotProductAttentionAsync(q, q, q, { causal: true, threads: 2 });
      expect(made.jobs[0]).toMatchObject({ kernel: 'wasm', fallback: 'flash' });
      // At most once per worker: the fallback then serves that task and the rest. (These in-thread workers
      // run one after the other, so the first one usually claims every task.)
      expect(refused).toBeGreaterThanOrEqual(1);
      expect(refused).toBeLessThanOrEqual(2);
      expect(got.data).toEqual(scaledDotProductAttention(q, q, q, { causal: true, kernel: 'flash' }).data);
      await expect(
        runtime.scaledDotProductAttentionAsync(q, q, q, { kernel: 'wasm', threads: 2 }),
      ).rejects.toThrow(/scaledDotProductAttentionAsync: WebAssembly.Memory\(\): could not allocate memory/);
    } finally {
      wasm.forwardRows = forwardRows;
    }
  });

  it('with Node workers, threads above availableParallelism() stops at the core count', async () => {
    const runtime = qkv.createRuntime();
    const cores = availableParallelism();
    const q = Tensor.randn([1, 8, 256, 64], { seed: 9 });
    const out = await runtime.scaledDotProductAttentionAsync(q, q, q, { threads: cores + 3 });
    expectAllClose(out, scaledDotProductAttention(q, q, q), { atol: 1e-5, rtol: 1e-4 });
    expect(runtime.workers).toBe(Math.min(cores, 64));
    runtime.terminateWorkers();
  });

  it('idle workers exit after the idle timeout, and the next call starts new ones', async () => {
    const runtime = qkv.createRuntime({ idleMs: 150 });
    const q = Tensor.randn([1, 4, 256, 32], { seed: 10 });
    await runtime.scaledDotProductAttentionAsync(q, q, q, { threads: 2 });
    expect(runtime.workers).toBeGreaterThanOrEqual(1);
    const deadline = Date.now() + 10_000; // generous: the timeout is 150 ms
    while (runtime.workers > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(runtime.workers).toBe(0);
    const out = await runtime.scaledDotProductAttentionAsync(q, q, q, { threads: 2 });
    expectAllClose(out, scaledDotProductAttention(q, q, q), { atol: 1e-5, rtol: 1e-4 });
    expect(runtime.workers).toBeGreaterThanOrEqual(1);
    // A pool that keeps being used keeps its workers: calls far closer together than the timeout (60 s,
    // so a stalled machine cannot make this depend on the clock).
    runtime.idleMs = 60_000;
    for (let i = 0; i < 4; i++) {
      await runtime.scaledDotProductAttentionAsync(q, q, q, { threads: 2 });
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(runtime.workers).toBeGreaterThanOrEqual(1);
    runtime.terminateWorkers();
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
