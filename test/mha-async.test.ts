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
    // L ≥ 256: each pair's attention runs as two row blocks (152 and 149 rows), the causal band
    // classified per block rather than per pair; projection tasks of 4 heads (2 for q, 1 each for k, v).
    name: 'causal, GQA, L = 301 in two row blocks',
    layer: { embedDim: 512, numHeads: 8, numKvHeads: 4 },
    L: 301,
    S: 301,
    options: { causal: true },
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

  it('runs as one phased job on the given runtime, and unbatched input stays unbatched', async () => {
    const { platform, jobs } = inlinePlatform(2);
    const runtime = qkv.createRuntime({ platform });
    const mha = new MultiHeadAttention({ embedDim: 128, numHeads: 4, seed: 1 });
    const x = Tensor.randn([512, 128], { seed: 2 });
    const got = await mha.forwardAsync(x, x, x, { runtime, threads: 2, causal: true });
    expect(got.output.shape).toEqual([512, 128]);
    expect(got.output.data).toEqual(mha.forward(x, x, x, { causal: true }).output.data);
    // One job: the q, k and v projections, the heads and the out-projection never cross back between.
    expect([...new Set(jobs)].map((j) => j.op)).toEqual(['mha.forward']); // the job each worker was sent
    expect((jobs[0] as { args: { proj: unknown[] } }).args.proj).toHaveLength(3);
  });

  it("splits a long call into row blocks and projection tasks of several heads, with forward's bits", async () => {
    const { platform, jobs } = inlinePlatform(2);
    const runtime = qkv.createRuntime({ platform });
    const mha = new MultiHeadAttention({ embedDim: 512, numHeads: 8, seed: 1 });
    const x = Tensor.randn([1, 301, 512], { seed: 2 });
    const got = await mha.forwardAsync(x, x, x, { runtime, threads: 2, causal: true });
    expect(got.output.data).toEqual(mha.forward(x, x, x, { causal: true }).output.data);
    const { args, tasks } = jobs[0] as { args: { rowsPerTask: number; projHeads: number }; tasks: number };
    expect([args.rowsPerTask, args.projHeads]).toEqual([152, 4]);
    // 6 projection tasks (2 per part), 8 heads × 2 row blocks, and the out-projection's blocks.
    expect(tasks).toBe(6 + 16 + Math.ceil(301 / 96));
  });

  it('with a KV cache it runs in steps (projection, attention, out-projection jobs), as before', async () => {
    const { platform, jobs } = inlinePlatform(2);
    const runtime = qkv.createRuntime({ platform });
    const mha = new MultiHeadAttention({ embedDim: 128, numHeads: 4, seed: 1 });
    const x = Tensor.randn([1, 512, 128], { seed: 2 });
    const make = () => new qkv.KVCache({ numLayers: 1, numKvHeads: 4, headDim: 32, maxLength: 600 });
    const want = mha.forward(x, x, x, { causal: true, cache: make(), layer: 0 }).output.data;
    const got = await mha.forwardAsync(x, x, x, {
      runtime,
      threads: 2,
      causal: true,
      cache: make(),
      layer: 0,
    });
    expect(got.output.data).toEqual(want);
    expect(new Set(jobs.map((j) => j.op))).toEqual(new Set(['gemm', 'attention.forward']));
  });

  it('orders the one-job tasks so that every task comes after the tasks it reads', () => {
    // GQA (6 query heads over 2 key/value heads), 2 batches, out-projection blocks across a batch edge.
    const tasks = core.multiHeadTasks({
      proj: [{ problem: { M: 260 } }, { problem: { M: 260 } }, { problem: { M: 260 } }],
      problem: { B: 2, Hq: 6, Hkv: 2, L: 130 },
      rowsPerTask: 130,
      outProj: { rowsPerTask: 96 },
    }) as { kind: string; index: number; deps: number[] }[];
    expect(
      tasks
        .map((t) => t.kind)
        .join('')
        .replace(/(\w+?)\1+/g, '$1'),
    ).toBe('projattentionout');
    expect(tasks.filter((t) => t.kind === 'proj')).toHaveLength(6 + 2 + 2);
    tasks.forEach((t, i) => {
      for (const d of t.deps) expect(d).toBeLessThan(i);
    });
    // The k and v of key/value head 1 come before its query heads 3, 4, 5.
    const at = (index: number) => tasks.findIndex((t) => t.kind === 'proj' && t.index === index);
    expect(at(6 + 1)).toBeLessThan(at(3));
    expect(at(12 + 1)).toBeLessThan(at(3));
    // Out-projection rows [96, 192) span both batches: every head of both.
    const out = tasks.filter((t) => t.kind === 'out');
    expect(out.map((t) => t.deps.length)).toEqual([6, 12, 6]);
  });

  it('groups heads into projection tasks and orders row blocks block by block, every task after its reads', () => {
    // 8 query heads over 4 key/value heads, 3 heads a projection task; each pair's rows in 2 blocks.
    const tasks = core.multiHeadTasks({
      proj: [{ problem: { M: 600 } }, { problem: { M: 600 } }, { problem: { M: 600 } }],
      problem: { B: 2, Hq: 8, Hkv: 4, L: 300 },
      rowsPerTask: 152,
      outProj: { rowsPerTask: 256 },
      projHeads: 3,
    }) as { kind: string; index: number; heads?: number; deps: number[] }[];
    const proj = tasks.filter((t) => t.kind === 'proj');
    // q: heads 0–2, 3–5, 6–7; k and v: 0–2, 3.
    expect(proj.map((t) => [Math.floor(t.index / 8), t.index % 8, t.heads])).toEqual([
      [1, 0, 3],
      [2, 0, 3],
      [0, 0, 3],
      [0, 3, 3],
      [1, 3, 1],
      [2, 3, 1],
      [0, 6, 2],
    ]);
    tasks.forEach((t, i) => {
      for (const d of t.deps) expect(d).toBeLessThan(i);
    });
    // Head 7's attention waits for q heads 6–7, and k, v head 3 (7 / 2).
    const a7 = tasks.find((t) => t.kind === 'attention' && t.index === 7 * 2)!;
    expect(a7.deps.map((d) => tasks[d].index).sort((x, y) => x - y)).toEqual([6, 8 + 3, 16 + 3]);
    // Every pair's first block (index even) comes before any second block.
    const attention = tasks.filter((t) => t.kind === 'attention').map((t) => t.index % 2);
    expect(attention).toEqual([...Array(16).fill(0), ...Array(16).fill(1)]);
    // Out rows [0, 256) lie in batch 0's first block and second block (rows 152–255): 8 heads × 2.
    const out = tasks.filter((t) => t.kind === 'out');
    expect(out[0].deps.map((d) => tasks[d].index).sort((x, y) => x - y)).toEqual(
      Array.from({ length: 16 }, (_, i) => i),
    );
  });

  it('sees weights changed between two calls: setters, in-place writes, loadStateDict', async () => {
    const mha = new MultiHeadAttention({ embedDim: 64, numHeads: 4, seed: 1 });
    const x = Tensor.randn([2, 200, 64], { seed: 2 });
    const same = async () => {
      const got = await mha.forwardAsync(x, x, x, { threads: 2 });
      expect(got.output.data).toEqual(mha.forward(x).output.data);
      return got.output.data;
    };
    const first = await same();
    mha.qProjWeight = Tensor.randn([64, 64], { seed: 3 });
    const second = await same();
    expect(second).not.toEqual(first);
    mha.outProjWeight.data[5] += 1; // written in place: no setter sees it
    mha.inProjBias.data[70] = 2;
    const third = await same();
    expect(third).not.toEqual(second);
    mha.loadStateDict(new MultiHeadAttention({ embedDim: 64, numHeads: 4, seed: 9 }).stateDict());
    expect(await same()).not.toEqual(third);
  });

  it('a phased job whose GEMM kernel is refused memory goes on with the fallback', async () => {
    const { platform, jobs } = inlinePlatform(2);
    const runtime = qkv.createRuntime({ platform });
    const mha = new MultiHeadAttention({ embedDim: 64, numHeads: 4, seed: 1 });
    const x = Tensor.randn([1, 300, 64], { seed: 2 });
    const rows = wasmGemmKernel.rows;
    const supports = wasmGemmKernel.supports;
    let refused = 0;
    wasmGemmKernel.rows = () => {
      refused++;
      throw new KernelResourceError('WebAssembly.Memory(): could not allocate memory');
    };
    try {
      const got = await mha.forwardAsync(x, x, x, { runtime, threads: 2 });
      expect(jobs[0]).toMatchObject({
        op: 'mha.forward',
        args: { gemmKernel: 'wasm', gemmFallback: 'reference' },
      });
      expect(refused).toBeGreaterThanOrEqual(4); // three projections and the out-projection
      // Every product fell back to the reference: the sync forward on the reference GEMM gives the same
      // (WASM's GEMM unsupported for it, so 'auto' picks the reference: forward's one-piece WASM path,
      // which does not go through wasmGemmKernel.rows, stands aside then).
      wasmGemmKernel.supports = () => 'test: unsupported';
      const sync = mha.forward(x).output.data;
      expect(got.output.data).toEqual(sync);
    } finally {
      wasmGemmKernel.rows = rows;
      wasmGemmKernel.supports = supports;
    }
  });

  it('a worker failing in one phase cancels the job: the call rejects and the others stop', async () => {
    const { platform, jobs } = inlinePlatform(2);
    const runtime = qkv.createRuntime({ platform });
    const mha = new MultiHeadAttention({ embedDim: 64, numHeads: 4, seed: 1 });
    const x = Tensor.randn([1, 300, 64], { seed: 2 });
    const rows = wasmGemmKernel.rows;
    wasmGemmKernel.rows = () => {
      throw new Error('boom');
    };
    try {
      await expect(mha.forwardAsync(x, x, x, { runtime, threads: 2 })).rejects.toThrow(
        /MultiHeadAttention\.forwardAsync: boom/,
      );
      const job = jobs[0] as {
        buffer: SharedArrayBuffer;
        args: { finished: { offset: number; length: number } };
      };
      expect(new Int32Array(job.buffer, 0, 3)[1]).toBe(1); // cancelled
      const { offset, length } = job.args.finished;
      expect(new Int32Array(job.buffer, offset, length).every((f) => f === 0)).toBe(true); // none finished
    } finally {
      wasmGemmKernel.rows = rows;
    }
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
