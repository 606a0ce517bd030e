// Regressions from an adversarial review of MultiHeadAttention.forwardAsync and the async attention calls
// (2026-12-02): a wrong answer from a race, a crash on an empty query, a cache changed by a refused call,
// and a bare TypeError for null options. Workers load dist/ (npm test builds first), as
// test/mha-async.test.ts does.

import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { afterAll, describe, expect, it } from 'vitest';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const qkv = await import(`${dist}index.node.js`);
const { MultiHeadAttention, Tensor, KVCache } = qkv;

afterAll(() => qkv.terminateWorkers());

/** Indices where a and b differ (Object.is), as a count: 0 means bit for bit equal. */
function differing(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let n = 0;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) n++;
  return n;
}

/**
 * Real worker_threads running dist's worker-core, except that the GEMM sleeps 300 ms before it computes a
 * q in-projection task of any head but head 0 (its weight rows lie past the q weight's first head). This
 * only changes timing: every task still runs, and each attention task still waits for its own deps.
 */
function slowQueryHeadsPlatform() {
  const workerCode = `
const { parentPort } = await import('node:worker_threads');
const core = await import(${JSON.stringify(`${dist}threads/worker-core.js`)});
const { wasmGemmKernel } = await import(${JSON.stringify(`${dist}kernels/gemm.js`)});
let slow;
const rows = wasmGemmKernel.rows;
wasmGemmKernel.rows = function (p, c, m0, m1) {
  if (slow && p.b.buffer === slow.buffer && p.b.byteOffset >= slow.from && p.b.byteOffset < slow.to)
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 300);
  return rows.call(this, p, c, m0, m1);
};
parentPort.on('message', (m) => {
  const q = m.job.op === 'mha.forward' ? m.job.args.proj[0] : undefined;
  slow = q && {
    buffer: m.job.buffer,
    from: q.problem.b.offset + q.width * q.problem.K * 4,
    to: q.problem.b.offset + q.problem.b.length * 4,
  };
  core.handleMessage(m, (r) => parentPort.postMessage(r));
});`;
  return {
    name: 'slow-q-heads',
    cores: () => 2,
    sharedMemoryUnavailable: () => '',
    createWorker() {
      const w = new Worker(workerCode, { eval: true, execArgv: [] });
      return {
        post: (m: unknown) => w.postMessage(m),
        onMessage: (h: (m: unknown) => void) => w.on('message', h),
        onError: (h: (e: Error) => void) => w.on('error', h),
        ref: () => w.ref(),
        unref: () => w.unref(),
        terminate: () => void w.terminate(),
      };
    },
  };
}

describe('MultiHeadAttention.forwardAsync and the async attention calls', () => {
  it('GQA decode-sized call (L ≤ 4, no mask) equals forward when a later query head projects slowly', async () => {
    // numHeads 2 over 1 key/value head, headDim 512: each query head is its own projection task. The
    // WASM kernel's decode path computes (and keeps) every query head of the GQA group on the group's
    // first attention task, which waited only for query head 0's projection: all 2048 outputs differed.
    const runtime = qkv.createRuntime({ platform: slowQueryHeadsPlatform() });
    try {
      const mha = new MultiHeadAttention({ embedDim: 1024, numHeads: 2, numKvHeads: 1, seed: 1 });
      const x = Tensor.randn([1, 2, 1024], { seed: 2 });
      const kv = Tensor.randn([1, 33, 1024], { seed: 3 });
      const want = mha.forward(x, kv, kv).output.data;
      const got = await mha.forwardAsync(x, kv, kv, { runtime, threads: 2 });
      expect(differing(got.output.data, want)).toBe(0);
    } finally {
      runtime.terminateWorkers();
    }
  });

  it('GQA decode-sized calls equal forward on the ordinary worker_threads runtime, call after call', async () => {
    // The same race without any instrumentation: a few decode-sized GQA calls of different shapes in a row.
    const runtime = qkv.createRuntime({ threads: 2 });
    try {
      const mha = new MultiHeadAttention({ embedDim: 1024, numHeads: 2, numKvHeads: 1, seed: 1 });
      let wrong = 0;
      for (let round = 0; round < 4; round++) {
        for (const [L, S] of [
          [1, 33],
          [1, 8],
          [2, 33],
          [3, 8],
        ]) {
          const x = Tensor.randn([1, L, 1024], { seed: 7 * L + S + round });
          const kv = Tensor.randn([1, S, 1024], { seed: S + round });
          const want = mha.forward(x, kv, kv).output.data;
          const got = await mha.forwardAsync(x, kv, kv, { runtime, threads: 2 });
          if (differing(got.output.data, want) !== 0) wrong++;
        }
      }
      expect(wrong).toBe(0);
    } finally {
      runtime.terminateWorkers();
    }
  });

  it('an empty query (L = 0) resolves to forward’s [B, 0, D] output rather than a typed-array error', async () => {
    // The key/value projections alone are enough work for the one-job path.
    const runtime = qkv.createRuntime({ threads: 2 });
    try {
      const mha = new MultiHeadAttention({ embedDim: 128, numHeads: 4, seed: 1 });
      const q = new Tensor(new Float32Array(0), [2, 0, 128]);
      const kv = Tensor.randn([2, 130, 128], { seed: 2 });
      const want = mha.forward(q, kv, kv, { needWeights: true });
      expect(want.output.shape).toEqual([2, 0, 128]);
      const got = await mha.forwardAsync(q, kv, kv, { runtime, threads: 2, needWeights: true });
      expect(got.output.shape).toEqual([2, 0, 128]);
      expect(got.weights?.shape).toEqual(want.weights?.shape);
    } finally {
      runtime.terminateWorkers();
    }
  });

  it('a call with a cache that rejects an invalid option leaves the cache as it was (forward and forwardAsync)', async () => {
    const runtime = qkv.createRuntime({ threads: 2 });
    try {
      const mha = new MultiHeadAttention({ embedDim: 128, numHeads: 4, seed: 1 });
      const x = Tensor.randn([1, 300, 128], { seed: 2 });
      for (const bad of [{ causal: 'yes' }, { window: [1] }, { kernel: 'gpu' }]) {
        const cache = new KVCache({ numLayers: 1, numKvHeads: 4, headDim: 32, maxLength: 700 });
        await expect(
          mha.forwardAsync(x, x, x, { ...bad, cache, layer: 0, runtime, threads: 2 }),
        ).rejects.toThrow(/MultiHeadAttention\.forwardAsync: (causal|window|kernel) must be/);
        expect(cache.heldLength(0)).toBe(0); // it held the 300 tokens
        expect(() => mha.forward(x, x, x, { ...bad, cache, layer: 0 })).toThrow(
          /MultiHeadAttention\.forward: (causal|window|kernel) must be/,
        );
        expect(cache.heldLength(0)).toBe(0);
      }
    } finally {
      runtime.terminateWorkers();
    }
  });

  it('the async attention calls name themselves for null options, as the sync ones do', async () => {
    const q = Tensor.randn([1, 2, 4, 8], { seed: 1 });
    expect(() => qkv.attentionBackward(q, q, q, q, null)).toThrow(
      /^attentionBackward: options must be an object, got null$/,
    );
    await expect(qkv.attentionBackwardAsync(q, q, q, q, null)).rejects.toThrow(
      /^attentionBackwardAsync: options must be an object, got null$/,
    );
    await expect(qkv.scaledDotProductAttentionAsync(q, q, q, null)).rejects.toThrow(
      /^scaledDotProductAttentionAsync: options must be an object, got null$/,
    );
  });
});
