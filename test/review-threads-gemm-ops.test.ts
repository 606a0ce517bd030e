// Regressions from adversarial reviews of multi-threaded training, the worker pool, the GEMM entry and
// the autograd's element-wise fast paths (2026-12-02): each case crashed, hung, trained on a malformed
// batch, resumed inexactly, gave a wrong number, or took a bad argument without a word. Worker-based code runs
// from dist/ (npm test builds first).

import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { crossEntropy, layerNorm } from '../src/autograd/ops.js';
import { AdamW, clipGradNorm, orthogonalise } from '../src/autograd/optim.js';
import { backward, constant, parameter } from '../src/autograd/var.js';
import { type GemmProblem, gemm } from '../src/kernels/gemm.js';
import type { Batch, Task } from '../src/train/tasks.js';
import type { Trainer as TrainerClass } from '../src/train/trainer.js';
import { thrown as thrownError } from './helpers.js';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const { Trainer, getTask } = await import(`${dist}train/trainer.js`);
const { nodeTrainPlatform } = await import(`${dist}threads/train-node.js`);
const { decodeSafetensors, encodeSafetensors } = await import(`${dist}io/safetensors.js`);
const qkv = await import(`${dist}index.node.js`);

const platform = nodeTrainPlatform;
const made: TrainerClass[] = [];
afterAll(async () => {
  await Promise.all(made.map((t) => t.terminate()));
  qkv.terminateWorkers();
});

function trainer(options: Record<string, unknown>): TrainerClass {
  const t = new Trainer({ platform, ...options });
  made.push(t);
  return t;
}

/** The task with each batch replaced by `edit(batch)`. */
function editedTask(task: Task, edit: (batch: Batch) => Batch): Task {
  return {
    ...task,
    batch(generator, B, split) {
      return edit(task.batch(generator, B, split));
    },
  };
}

/** The message of what `f()` throws (it must throw). */
const thrown = (f: () => unknown): string => thrownError(f).message;

describe('Trainer threads: bad options', () => {
  it('a huge threads count is refused by the constructor, naming Trainer and threads (not a heap OOM)', () => {
    // In a child with a small heap: the constructor used to loop 2^40 times making shard generators.
    const script = `
      const { Trainer } = await import(${JSON.stringify(`${dist}train/trainer.js`)});
      const { nodeTrainPlatform } = await import(${JSON.stringify(`${dist}threads/train-node.js`)});
      try {
        new Trainer({ task: 'copy', threads: 2 ** 40, platform: nodeTrainPlatform });
        console.log('constructed');
      } catch (err) {
        console.log('threw: ' + err.message);
      }
    `;
    const r = spawnSync(process.execPath, ['--max-old-space-size=64', '--input-type=module', '-e', script], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.stderr).not.toMatch(/heap out of memory/);
    expect(r.stdout).toMatch(/threw: Trainer: threads/);
    expect(r.status).toBe(0);
  });
});

describe('Trainer threads: a malformed batch is refused as on one thread', () => {
  const copy = getTask('copy');
  const cases: [string, (b: Batch) => Batch][] = [
    ['ids longer than B·L', (b) => ({ ...b, ids: Int32Array.from([...b.ids, 1, 1, 1]) })],
    ['targets shorter than B·L', (b) => ({ ...b, targets: b.targets.slice(0, -1) })],
    ['targets longer than B·L', (b) => ({ ...b, targets: Int32Array.from([...b.targets, 1, 1]) })],
  ];
  for (const [name, edit] of cases) {
    it(`threads: 2 throws on a batch with ${name}, as threads: 1 does`, () => {
      const task = editedTask(copy, edit);
      const one = thrown(() => trainer({ task, seed: 1, batchSize: 8, threads: 1 }).trainStep());
      expect(one).toBeDefined(); // e.g. "TinyTransformer.forward: ids has 139 elements, expected B·L = 8·17"
      const two = thrown(() => trainer({ task, seed: 1, batchSize: 8, threads: 2 }).trainStep());
      expect(two).toMatch(
        /Trainer\.trainStep: the batch's (ids|targets) have \d+ elements, expected B·L = 8·17/,
      );
    });
  }

  it('threads: 3 throws on a [2, 1, 1, L] padding mask for a batch of 6 rows, as threads: 1 does', () => {
    const pronoun = getTask('pronoun');
    const task = editedTask(pronoun, (b) => {
      const m = b.mask!;
      const perRow = m.size / b.B;
      return { ...b, mask: new qkv.Tensor(m.data.slice(0, 2 * perRow), [2, ...m.shape.slice(1)]) };
    });
    const one = thrown(() => trainer({ task, seed: 1, batchSize: 6, threads: 1 }).trainStep());
    expect(one).toMatch(/TinyTransformer\.forward: mask of shape \[2,1,1,12\] does not broadcast/);
    // Each shard has 2 rows and got the whole [2, …] mask, which fits a 2-row shard: rows 2 … 5 trained
    // with rows 0 … 1's padding.
    const three = thrown(() => trainer({ task, seed: 1, batchSize: 6, threads: 3 }).trainStep());
    expect(three).toMatch(/Trainer\.trainStep: mask of shape \[2,1,1,12\] does not broadcast/);
  });
});

describe('Trainer threads: restoreState', () => {
  it('a threads: 2 dropout state without its dropoutShards is refused (it cannot resume exactly)', () => {
    const options = { task: 'copy', seed: 7, steps: 10, batchSize: 6, threads: 2, model: { dropout: 0.2 } };
    const b = trainer(options);
    b.trainStep();
    b.trainStep();
    const { tensors, metadata } = decodeSafetensors(b.saveState());
    const state = JSON.parse(metadata['qkv.trainer']);
    expect(state.dropoutShards).toHaveLength(1);
    delete state.dropoutShards;
    const tampered = encodeSafetensors(tensors, { ...metadata, 'qkv.trainer': JSON.stringify(state) });
    const c = trainer(options);
    // It was accepted, and the next steps differed from the uninterrupted run's.
    expect(() => c.restoreState(tampered)).toThrow(/Trainer\.restoreState: dropoutShards must hold/);
  });
});

describe('the worker pool', () => {
  it('createRuntime({ idleMs: Infinity }) keeps its workers until terminateWorkers(); a longer finite idleMs is refused', async () => {
    expect(thrown(() => qkv.createRuntime({ idleMs: 2 ** 31 }))).toMatch(
      /createRuntime: idleMs must be a number of milliseconds in \[0, 2147483647\], or Infinity/,
    );
    const runtime = qkv.createRuntime({ idleMs: Number.POSITIVE_INFINITY, threads: 2 });
    const q = qkv.Tensor.randn([1, 4, 256, 32], { seed: 10 });
    await runtime.scaledDotProductAttentionAsync(q, q, q, { threads: 2 });
    expect(runtime.workers).toBeGreaterThanOrEqual(1);
    await new Promise((r) => setTimeout(r, 300));
    // setTimeout(Infinity) is setTimeout(1) in Node (a TimeoutOverflowWarning): they had ended.
    expect(runtime.workers).toBeGreaterThanOrEqual(1);
    runtime.terminateWorkers();
  });

  it('a call that fails while copying its inputs gives its buffer place back: later calls still run', async () => {
    const runtime = qkv.createRuntime({ threads: 2 });
    for (let i = 0; i < 2; i++) {
      const q = qkv.Tensor.randn([1, 4, 256, 32], { seed: i });
      const pending = runtime.scaledDotProductAttentionAsync(q, q, q);
      // The inputs are copied after the call returns: detach them now, so the copy throws.
      structuredClone(q.data.buffer, { transfer: [q.data.buffer as ArrayBuffer] });
      await expect(pending).rejects.toThrow(/detached/);
    }
    runtime.terminateWorkers(); // and the next call starts a fresh pool
    const q = qkv.Tensor.randn([1, 4, 256, 32], { seed: 5 });
    const hangs = new Promise<string>((r) => setTimeout(() => r('still pending after 10 s'), 10_000));
    const result = await Promise.race([
      runtime.scaledDotProductAttentionAsync(q, q, q).then(() => 'resolved'),
      hangs,
    ]);
    expect(result).toBe('resolved'); // the two failed calls kept both buffer places: it waited forever
    runtime.terminateWorkers();
  }, 30_000);
});

describe('the GEMM entry and its callers', () => {
  const base = (extra: Partial<GemmProblem>): GemmProblem => ({
    M: 2,
    N: 3,
    K: 4,
    a: new Float32Array(16),
    b: new Float32Array(24),
    transA: false,
    transB: false,
    precision: 'float32',
    ...extra,
  });

  it('refuses a stride that is not an integer ≥ 0 (NaN passed the size check and read nothing)', () => {
    for (const kernel of ['wasm', 'reference'] as const) {
      expect(
        thrown(() =>
          gemm(base({ a: new Float32Array(1), strideA: Number.NaN }), new Float32Array(6), kernel),
        ),
      ).toBe('gemm: strideA must be an integer ≥ 0, got NaN');
      expect(thrown(() => gemm(base({ batch: 2, strideB: -12 }), new Float32Array(12), kernel))).toBe(
        'gemm: strideB must be an integer ≥ 0, got -12',
      );
    }
  });

  it('refuses a C over its own A, B or bias (past one K block, C’s partial sums were read back as A)', () => {
    const a = new Float32Array(4 * 600).fill(0.5);
    const p = (x: Float32Array): GemmProblem =>
      base({ M: 4, N: 600, K: 600, a: x, b: new Float32Array(600 * 600) });
    for (const kernel of ['wasm', 'reference'] as const) {
      expect(thrown(() => gemm(p(a), a, kernel))).toBe(
        'gemm: c overlaps a; write the product to other memory',
      );
      const shared = new Float32Array(40);
      const q = base({
        M: 1,
        N: 4,
        K: 4,
        a: shared.subarray(0, 4),
        b: shared.subarray(4, 20),
        bias: shared.subarray(20, 24),
      });
      expect(thrown(() => gemm(q, shared.subarray(10, 14), kernel))).toBe(
        'gemm: c overlaps b; write the product to other memory',
      );
      expect(thrown(() => gemm(q, shared.subarray(22, 26), kernel))).toBe(
        'gemm: c overlaps bias; write the product to other memory',
      );
      expect(() => gemm(q, shared.subarray(24, 28), kernel)).not.toThrow(); // next to it, not over it
    }
  });

  it('accumulating into C = −0 keeps −0 on the reference, as the WASM tiles do', () => {
    const p = base({ M: 1, N: 1, K: 1, a: Float32Array.of(1), b: Float32Array.of(-0), accumulate: true });
    for (const kernel of ['wasm', 'reference'] as const) {
      expect(Object.is(gemm(p, Float32Array.of(-0), kernel)[0], -0)).toBe(true);
    }
  });

  it('a Var refuses a shape of negative or fractional sizes (linear then failed inside gemm)', () => {
    expect(thrown(() => constant(new Float32Array(2), [-1, -2]))).toBe(
      'Var: shape [-1,-2] must hold integers ≥ 0',
    );
    expect(thrown(() => constant(new Float32Array(2), [0.5, 4]))).toBe(
      'Var: shape [0.5,4] must hold integers ≥ 0',
    );
  });

  it('orthogonalise checks its jobs and steps (a 6-float x for a 2×2 job was normalised over all 6)', () => {
    const x = Float32Array.of(1, 0, 0, 1, 5, 5);
    expect(thrown(() => orthogonalise([{ x, rows: 2, cols: 2 }], 5))).toBe(
      'orthogonalise: jobs[0].x must be a Float32Array of rows·cols = 2·2 elements, got 6 elements',
    );
    expect([...x]).toEqual([1, 0, 0, 1, 5, 5]); // untouched
    expect(thrown(() => orthogonalise([{ x: new Float32Array(4), rows: 2, cols: 2 }], Number.NaN))).toBe(
      'orthogonalise: steps must be a non-negative integer, got NaN',
    );
  });
});

describe('the autograd’s element-wise ops and optimizers', () => {
  /** |got − want| ≤ rtol·(|want| + 1) everywhere. */
  const expectNear = (got: ArrayLike<number>, want: ArrayLike<number>, rtol = 1e-5) => {
    expect(got.length).toBe(want.length);
    for (let i = 0; i < want.length; i++) {
      expect(Math.abs(got[i] - want[i]), `[${i}]: ${got[i]} against ${want[i]}`).toBeLessThanOrEqual(
        rtol * (Math.abs(want[i]) + 1),
      );
    }
  };

  it('layerNorm with one Var as weight and bias, or as x too: float32 gradients are float64’s', () => {
    // The WASM backward staged dw and db apart and copied each back over the other: float32 gave the
    // bias part alone ([-3, -1, 1, 3, 5] here).
    const xs = [1, 2, 4, -1, 0.5, 3, 3, 1, 0, 2];
    const dy = Float64Array.from({ length: 10 }, (_, i) => i - 4);
    const tied = [Float32Array, Float64Array].map((F) => {
      const x = parameter(F.from(xs), [2, 5]);
      const wb = parameter(F.of(1, 2, 3, 4, 5), [5]);
      backward(layerNorm(x, wb, wb), dy);
      return [wb.grad!, x.grad!];
    });
    expectNear(tied[0][0], tied[1][0]);
    expectNear(tied[0][1], tied[1][1]);
    const ps = [0.5, -1, 2, 3, -0.25, 1.5, 0.75];
    const all = [Float32Array, Float64Array].map((F) => {
      const p = parameter(F.from(ps), [ps.length]);
      backward(layerNorm(p, p, p), Float64Array.of(1, -2, 0.5, 3, -1, 2, 0.25));
      return p.grad!;
    });
    expectNear(all[0], all[1]);
  });

  it('crossEntropy of tied logits at any magnitude is ln C, as its gradient says (a huge max swallowed log Σ)', () => {
    for (const v of [3e38, 1e17, 1e15]) {
      const logits = parameter(Float32Array.of(v, v), [1, 2]);
      const loss = crossEntropy(logits, Int32Array.of(0));
      backward(loss);
      expect(Array.from(logits.grad!)).toEqual([-0.5, 0.5]);
      expect(loss.data[0], `logits [${v}, ${v}]`).toBeCloseTo(Math.LN2, 6); // was 0, or 0.75 at 1e15
    }
    const f64 = parameter(Float64Array.of(1e17, 1e17, 1e17), [1, 3]);
    expect(crossEntropy(f64, Int32Array.of(1)).data[0]).toBeCloseTo(Math.log(3), 12); // was 0
  });

  it('crossEntropy’s backward uses the targets of its forward, whatever the caller does to its array since', () => {
    // It read the caller's array: a target changed to 10^6 was written past its row (in WASM memory, for
    // float32 logits), and one changed to another class gave another loss's gradient.
    for (const F of [Float32Array, Float64Array]) {
      const grad = (mutate: boolean) => {
        const values = Array.from({ length: 3 * 5 }, (_, i) => Math.sin(i));
        const logits = parameter(F.from(values), [3, 5]);
        const targets = Int32Array.of(1, 4, 0);
        const loss = crossEntropy(logits, targets);
        if (mutate) targets.set([1_000_000, 2, -7]);
        backward(loss);
        return Array.from(logits.grad!);
      };
      expect(grad(true)).toEqual(grad(false));
    }
  });

  it('AdamW refuses hyper-parameters that make every weight NaN, as PyTorch does', () => {
    const w = parameter(new Float32Array(4099).fill(1), [4099, 1]); // the WASM path's size
    w.grad = new Float32Array(w.size).fill(0.1);
    expect(thrown(() => new AdamW([w], { betas: [1, 0.999] }))).toBe(
      'AdamW: betas must be two numbers in [0, 1), got [1,0.999]',
    );
    expect(thrown(() => new AdamW([w], { eps: -1 }))).toMatch(/^AdamW: eps must be/);
    expect(thrown(() => new AdamW([w], { weightDecay: Number.NaN }))).toMatch(/^AdamW: weightDecay must be/);
    const adam = new AdamW([w]);
    expect(thrown(() => adam.step(Number.NaN))).toMatch(/^AdamW\.step: lr must be/);
    expect(adam.t).toBe(0); // nothing taken
    expect(w.data[0]).toBe(1);
  });

  it('clipGradNorm refuses a NaN or non-positive maxNorm (NaN clipped nothing; −1 reversed every gradient)', () => {
    const p = parameter(Float32Array.of(0, 0), [2]);
    p.grad = Float32Array.of(3, 4);
    for (const bad of [Number.NaN, -1, 0]) {
      expect(thrown(() => clipGradNorm([p], bad))).toMatch(/^clipGradNorm: maxNorm must be a number > 0/);
    }
    expect(Array.from(p.grad)).toEqual([3, 4]);
    expect(clipGradNorm([p], Number.POSITIVE_INFINITY)).toBe(5); // off: the norm, grads unchanged
    expect(Array.from(p.grad)).toEqual([3, 4]);
  });
});
