// MultiHeadAttention.forwardAsync and the pool's GEMM jobs, on the built Node entry (workers load dist/):
// the same bits as the sync forward and the inline GEMM, whatever the split, with the sync call's errors.

import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const qkv = await import(`${dist}index.node.js`);
const core = await import(`${dist}threads/worker-core.js`);
const { layerOpsOf } = await import(`${dist}runtime.js`);
const { gemm, wasmGemmKernel } = await import(`${dist}kernels/gemm.js`);
const { KernelResourceError } = await import(`${dist}kernels/types.js`);
const { MultiHeadAttention, Tensor } = qkv;

afterAll(() => qkv.terminateWorkers());

/** A platform whose "workers" run jobs on this thread, recording each job (as test/threads.test.ts's). */
function inlinePlatform(cores: number) {
  const jobs: Record<string, unknown>[] = [];
  const platform = {
    name: 'inline',
    cores: () => cores,
    sharedMemoryUnavailable: () => '',
    createWorker() {
      let handler: (m: unknown) => void = () => {};
      return {
        post: (message: { job: Record<string, unknown> }) => {
          jobs.push(message.job);
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
  return { platform, jobs };
}

const cases = [
  { name: 'self-attention, 2 threads', layer: { embedDim: 64, numHeads: 4 }, L: 300, S: 300, options: {} },
  {
    name: 'causal, GQA, weights',
    layer: { embedDim: 96, numHeads: 6, numKvHeads: 2 },
    L: 130,
    S: 130,
    options: { causal: true, needWeights: true },
  },
  {
    name: 'cross-attention (kdim, vdim), no bias, a key padding mask',
    layer: { embedDim: 64, numHeads: 2, kdim: 40, vdim: 24, bias: false },
    L: 70,
    S: 257,
    options: { mask: 'padding' },
  },
  {
    name: 'a window and a bias, bottom-right causal',
    layer: { embedDim: 32, numHeads: 4 },
    L: 65,
    S: 200,
    options: { window: [16, 0], causal: 'bottom-right', bias: 'ramp' },
  },
] as const;

describe('MultiHeadAttention.forwardAsync', () => {
  for (const c of cases) {
    it(`equals forward bit for bit: ${c.name}`, async () => {
      const mha = new MultiHeadAttention({ ...c.layer, seed: 3 });
      if (mha.hasBias) mha.inProjBias = Tensor.randn(mha.inProjBias.shape, { seed: 4 });
      const B = 2;
      const D = c.layer.embedDim;
      const x = Tensor.randn([B, c.L, D], { seed: 5 });
      const self = c.S === c.L && !('kdim' in c.layer);
      const key = self ? x : Tensor.randn([B, c.S, mha.kdim], { seed: 6 });
      const value = self ? x : Tensor.randn([B, c.S, mha.vdim], { seed: 7 });
      const options: Record<string, unknown> = { ...c.options };
      if (options.mask === 'padding') {
        const m = new Float32Array(B * c.S).fill(1);
        m.fill(0, c.S - 30, c.S); // the last 30 keys of batch 0 are padding
        options.mask = new Tensor(m, [B, 1, 1, c.S]);
      }
      if (options.bias === 'ramp') {
        options.bias = new Tensor(
          Float32Array.from({ length: c.L * c.S }, (_, i) => (i % c.S) / c.S),
          [1, 1, c.L, c.S],
        );
      }
      const sync = mha.forward(x, key, value, options);
      const async = await mha.forwardAsync(x, key, value, { ...options, threads: 2 });
      expect(async.output.shape).toEqual(sync.output.shape);
      expect(async.output.data).toEqual(sync.output.data);
      if (sync.weights) expect(async.weights?.data).toEqual(sync.weights.data);
      else expect(async.weights).toBeUndefined();
    });
  }

  it('splits its products and heads into jobs on the given runtime, and unbatched input stays unbatched', async () => {
    const { platform, jobs } = inlinePlatform(2);
    const runtime = qkv.createRuntime({ platform });
    const mha = new MultiHeadAttention({ embedDim: 128, numHeads: 4, seed: 1 });
    const x = Tensor.randn([512, 128], { seed: 2 });
    const got = await mha.forwardAsync(x, x, x, { runtime, threads: 2, causal: true });
    expect(got.output.shape).toEqual([512, 128]);
    expect(got.output.data).toEqual(mha.forward(x, x, x, { causal: true }).output.data);
    const ops = new Set(jobs.map((j) => j.op));
    expect(ops).toEqual(new Set(['gemm', 'attention.forward']));
    // Three parts in the in-projection job (q, k and v), one in the out-projection job.
    const gemmJobs = jobs.filter((j) => j.op === 'gemm') as { args: { parts: unknown[] } }[];
    expect(new Set(gemmJobs.map((j) => j.args.parts.length))).toEqual(new Set([3, 1]));
  });

  it('a small call runs inline and still gives forward’s result', async () => {
    const { platform, jobs } = inlinePlatform(2);
    const runtime = qkv.createRuntime({ platform });
    const mha = new MultiHeadAttention({ embedDim: 8, numHeads: 2, seed: 1 });
    const x = Tensor.randn([1, 5, 8], { seed: 2 });
    const got = await mha.forwardAsync(x, undefined, undefined, { runtime });
    expect(jobs).toHaveLength(0);
    expect(got.output.data).toEqual(mha.forward(x).output.data);
  });

  it('rejects what forward rejects, naming forwardAsync, plus bad threads and runtimes', async () => {
    const mha = new MultiHeadAttention({ embedDim: 16, numHeads: 2, seed: 1 });
    const x = Tensor.randn([1, 4, 16], { seed: 2 });
    await expect(mha.forwardAsync(Tensor.randn([1, 4, 15]))).rejects.toThrow(
      /MultiHeadAttention\.forwardAsync: query has width 15 but embedDim=16 \(query \[1,4,15\]/,
    );
    await expect(mha.forwardAsync(x, x, x, { threads: 0 })).rejects.toThrow(
      /MultiHeadAttention\.forwardAsync: threads must be a positive integer, got 0/,
    );
    await expect(mha.forwardAsync(x, x, x, { runtime: {} })).rejects.toThrow(
      /MultiHeadAttention\.forwardAsync: runtime must come from createRuntime/,
    );
    await expect(mha.forwardAsync(x, x, x, { thread: 2 })).rejects.toThrow(
      /MultiHeadAttention\.forwardAsync: unknown option 'thread'/,
    );
    await expect(mha.forwardAsync(x, x, x, { mask: Tensor.zeros([1, 1, 4, 5]) })).rejects.toThrow(
      /MultiHeadAttention\.forwardAsync: mask/,
    );
  });
});

describe('GEMM jobs', () => {
  const rand = (n: number, seed: number) => Tensor.randn([n], { seed }).data;

  it('products split by rows over workers equal the inline GEMM: bias, GELU, transposes, batches, accumulation', async () => {
    const runtime = qkv.createRuntime({ threads: 2 });
    try {
      const ops = layerOpsOf('test', runtime);
      const M = 517;
      const N = 131;
      const K = 200;
      const problems = [
        { M, N, K, a: rand(M * K, 1), b: rand(N * K, 2), transA: false, transB: true, bias: rand(N, 3) },
        { M, N, K, a: rand(M * K, 4), b: rand(K * N, 5), transA: false, transB: false, gelu: true },
        { M, N, K, a: rand(K * M, 6), b: rand(K * N, 7), transA: true, transB: false, accumulate: true },
        {
          M: 65,
          N,
          K,
          a: rand(3 * 65 * K, 8),
          b: rand(N * K, 9),
          transA: false,
          transB: true,
          batch: 3,
          strideB: 0,
        },
      ].map((p) => ({ ...p, precision: 'float32' as const }));
      const start = rand(M * N, 10);
      const parts = problems.map((problem, i) => {
        const rows = (problem.batch ?? 1) * problem.M;
        return { problem, c: i === 2 ? start.slice() : new Float32Array(rows * N) };
      });
      await ops.gemm('test', parts, 2);
      expect(runtime.workers).toBe(2);
      problems.forEach((problem, i) => {
        const expected = gemm(problem, i === 2 ? start.slice() : new Float32Array(parts[i].c.length));
        expect(parts[i].c).toEqual(expected);
      });
    } finally {
      runtime.terminateWorkers();
    }
  });

  it('a worker whose GEMM kernel is refused memory hands its rows to the fallback', async () => {
    const { platform, jobs } = inlinePlatform(2);
    const runtime = qkv.createRuntime({ platform });
    const rows = wasmGemmKernel.rows;
    let refused = 0;
    wasmGemmKernel.rows = () => {
      refused++;
      throw new KernelResourceError('WebAssembly.Memory(): could not allocate memory');
    };
    try {
      const M = 300;
      const N = 64;
      const K = 300;
      const problem = {
        ...{ M, N, K, a: rand(M * K, 1), b: rand(N * K, 2), transA: false, transB: true },
        precision: 'float32' as const,
      };
      const c = new Float32Array(M * N);
      await layerOpsOf('test', runtime).gemm('test', [{ problem, c }], 2);
      expect(jobs[0]).toMatchObject({ op: 'gemm', kernel: 'wasm', fallback: 'reference' });
      expect(refused).toBeGreaterThanOrEqual(1);
      wasmGemmKernel.rows = rows;
      // Every task was refused, so the reference computed every row.
      const expected = gemm(problem, new Float32Array(M * N), 'reference');
      expect(c).toEqual(expected);
    } finally {
      wasmGemmKernel.rows = rows;
    }
  });
});
