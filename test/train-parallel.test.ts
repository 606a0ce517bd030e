// Data-parallel training (Trainer's `threads`), through the built package (dist/, which `npm test` builds
// first: the workers run dist/threads/train-worker-node.js): with dropout 0 a threads: n run equals the
// one-thread run up to float32 rounding (odd batches, masked targets, padding masks, empty shards); with
// dropout it is deterministic and resumes exactly; worker failures and dead workers throw, naming the
// thread, instead of hanging; terminate() stops the workers and a process that trains on threads exits.

import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import type { Batch, Task } from '../src/train/tasks.js';
import type { Trainer as TrainerClass } from '../src/train/trainer.js';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const { Trainer, getTask } = await import(`${dist}train/trainer.js`);
const { languageModelTask } = await import(`${dist}train/lm.js`);
const { BpeTokenizer } = await import(`${dist}nn/index.js`);
const { nodeTrainPlatform } = await import(`${dist}threads/train-node.js`);
const { shardRows } = await import(`${dist}train/parallel.js`);
const { orthogonalise } = await import(`${dist}autograd/optim.js`);

// The built package's classes, typed by their sources.
type AnyTrainer = TrainerClass;
type AnyTask = Task;
const platform = nodeTrainPlatform;
const made: AnyTrainer[] = [];
afterAll(async () => {
  await Promise.all(made.map((t) => t.terminate()));
});

function trainer(options: Record<string, unknown>): AnyTrainer {
  const t = new Trainer({ platform, ...options });
  made.push(t);
  return t;
}

/** The task with its batches changed by `edit` (e.g. more targets ignored). */
function editedTask(task: AnyTask, edit: (batch: Batch) => void): AnyTask {
  return {
    ...task,
    batch(generator, B, split) {
      const b = task.batch(generator, B, split);
      edit(b);
      return b;
    },
  };
}

/** Largest |a − b| over every parameter, relative to the largest |a|, and the relative L2 distance. */
function paramDistance(a: AnyTrainer, b: AnyTrainer): { maxAbs: number; relL2: number } {
  let maxAbs = 0;
  let diff = 0;
  let norm = 0;
  for (const [name, p] of a.model.params) {
    const q = b.model.params.get(name)!;
    for (let i = 0; i < p.size; i++) {
      const d = p.data[i] - q.data[i];
      maxAbs = Math.max(maxAbs, Math.abs(d));
      diff += d * d;
      norm += p.data[i] * p.data[i];
    }
  }
  return { maxAbs, relL2: Math.sqrt(diff / norm) };
}

/** Largest |grad difference| relative to the largest |grad|, after the last step (grads are kept). */
function gradDistance(a: AnyTrainer, b: AnyTrainer): number {
  let maxDiff = 0;
  let maxG = 0;
  for (const [name, p] of a.model.params) {
    const q = b.model.params.get(name)!;
    const [g, h] = [p.grad!, q.grad!];
    for (let i = 0; i < p.size; i++) {
      maxDiff = Math.max(maxDiff, Math.abs(g[i] - h[i]));
      maxG = Math.max(maxG, Math.abs(g[i]));
    }
  }
  return maxDiff / maxG;
}

/** Trains `steps` steps on 1 and on `threads` threads; checks the losses, grads and weights agree. */
function expectSameRun(options: Record<string, unknown>, threads: number, steps = 3) {
  const one = trainer({ ...options, threads: 1 });
  const many = trainer({ ...options, threads });
  for (let s = 0; s < steps; s++) {
    const a = one.trainStep();
    const b = many.trainStep();
    expect(Math.abs(b.loss - a.loss)).toBeLessThanOrEqual(1e-5 * Math.max(1, Math.abs(a.loss)));
    expect(Math.abs(b.gradNorm - a.gradNorm)).toBeLessThanOrEqual(1e-5 * Math.max(1e-3, a.gradNorm));
    expect(b.tokens).toBe(a.tokens);
    expect(gradDistance(one, many)).toBeLessThan(1e-5);
  }
  const { maxAbs, relL2 } = paramDistance(one, many);
  // AdamW divides each grad by its own running RMS, so a weight whose grad is ~0 may move by up to lr
  // on rounding alone; the run as a whole agrees to ~1e-6.
  expect(relL2).toBeLessThan(1e-5);
  expect(maxAbs).toBeLessThan(1e-3 * Number(options.lr ?? 3e-3) * 100);
  return { one, many };
}

const text = Array.from(
  { length: 60 },
  (_, i) =>
    `The ${['cat', 'dog', 'jury', 'city'][i % 4]} said ${i} things about the ${['mat', 'park', 'bids'][i % 3]}.`,
).join(' ');
const tokenizer = BpeTokenizer.train(text, { vocabSize: 300 });
const ids = tokenizer.encode(text);
function tinyLm(dropout: number): AnyTask {
  return languageModelTask({
    tokenizer,
    train: ids,
    contextLength: 16,
    model: { dModel: 16, numHeads: 2, numLayers: 2, dFF: 32, dropout },
  });
}

describe('Trainer threads: the one-thread run up to rounding (dropout 0)', () => {
  it('shards: rows split in order, the calling thread’s shard the smallest', () => {
    expect(shardRows(16, 2)).toEqual([
      [0, 8],
      [8, 16],
    ]);
    expect(shardRows(5, 2)).toEqual([
      [0, 2],
      [2, 5],
    ]);
    expect(shardRows(2, 3)).toEqual([
      [0, 0],
      [0, 1],
      [1, 2],
    ]);
  });

  it('copy, an odd batch (9 rows) with half the targets ignored', () => {
    expectSameRun({ task: 'copy', seed: 3, steps: 10, batchSize: 9 }, 2);
  });

  it('a language model, every target scored; and 3 threads', () => {
    expectSameRun({ task: tinyLm(0), seed: 1, steps: 10, batchSize: 7, lr: 3e-3 }, 2);
    expectSameRun({ task: tinyLm(0), seed: 1, steps: 10, batchSize: 7, lr: 3e-3 }, 3, 2);
  });

  it('uneven scored targets: a shard with none, and a batch with none at all', () => {
    // Rows 4… of each batch score nothing (the worker's shard of 9 rows: 4 … 8 with 2 threads).
    const task = editedTask(getTask('copy'), (b) => b.targets.fill(-1, 4 * b.L));
    expectSameRun({ task, seed: 5, steps: 10, batchSize: 9 }, 2);
    // Only the worker's rows score: the calling thread's shard has weight 0.
    const late = editedTask(getTask('copy'), (b) => b.targets.fill(-1, 0, 6 * b.L));
    expectSameRun({ task: late, seed: 5, steps: 10, batchSize: 9 }, 2);
    const none = editedTask(getTask('copy'), (b) => b.targets.fill(-1));
    const t = trainer({ task: none, seed: 5, steps: 10, batchSize: 9, threads: 2 });
    expect(t.trainStep()).toMatchObject({ loss: 0, gradNorm: 0 });
  });

  it('padded sentences: the [B, 1, 1, L] mask is split with the rows (pronoun, an encoder)', () => {
    expectSameRun({ task: 'pronoun', seed: 2, steps: 10, batchSize: 11 }, 2, 2);
  });

  it('more threads than rows: empty shards (the calling thread’s too) do nothing', () => {
    expectSameRun({ task: 'copy', seed: 4, steps: 10, batchSize: 2 }, 3, 2);
    expectSameRun({ task: 'copy', seed: 4, steps: 10, batchSize: 1 }, 2, 2);
  });
});

describe('Trainer threads with dropout', () => {
  it('is deterministic by seed, differs from one thread, and resumes exactly from saveState', () => {
    const options = { task: tinyLm(0.2), seed: 7, steps: 10, batchSize: 6 };
    const a = trainer({ ...options, threads: 2 });
    const b = trainer({ ...options, threads: 2 });
    const one = trainer({ ...options, threads: 1 });
    const la = [1, 2, 3, 4].map(() => a.trainStep().loss);
    const lb = [1, 2].map(() => b.trainStep().loss);
    one.trainStep();
    expect(one.losses[0]).not.toBe(la[0]); // another (equally valid) dropout stream
    const saved = b.saveState();
    const c = trainer({ ...options, threads: 2 });
    c.restoreState(saved);
    lb.push(c.trainStep().loss, c.trainStep().loss);
    expect(lb).toEqual(la);
    expect(paramDistance(a, c).maxAbs).toBe(0);
    // The dropout streams depend on threads, so the run key names them.
    expect(() => trainer({ ...options, threads: 1 }).restoreState(saved)).toThrow(/"threads":2/);
  });

  it('a one-thread run with dropout 0 resumes on two threads (threads is not in its run key)', () => {
    const options = { task: 'copy', seed: 3, steps: 10, batchSize: 8 };
    const one = trainer({ ...options, threads: 1 });
    one.trainStep();
    const two = trainer({ ...options, threads: 2 });
    two.restoreState(one.saveState());
    const a = one.trainStep();
    const b = two.trainStep();
    expect(Math.abs(a.loss - b.loss)).toBeLessThan(1e-5 * a.loss);
  });
});

describe("Trainer threads with optimizer 'muon'", () => {
  it('spreads the Newton–Schulz iterations over the threads, with the same bits as one thread', () => {
    for (const threads of [2, 3]) {
      const t = trainer({ task: 'copy', seed: 4, steps: 10, batchSize: 6, threads, optimizer: 'muon' });
      t.trainStep(); // starts the workers
      let seed = 1;
      const rand = () => {
        seed = (seed * 1103515245 + 12345) % 2 ** 31;
        return seed / 2 ** 31 - 0.5;
      };
      const shapes = [
        [16, 64],
        [64, 16],
        [7, 5],
        [32, 32],
        [3, 9],
      ];
      const jobs = shapes.map(([rows, cols]) => ({
        x: Float32Array.from({ length: rows * cols }, rand),
        rows,
        cols,
      }));
      const want = jobs.map((j) => ({ ...j, x: j.x.slice() }));
      orthogonalise(want, 5);
      (t as unknown as { parallel: { orthogonalise: typeof orthogonalise } }).parallel.orthogonalise(jobs, 5);
      jobs.forEach((j, i) => {
        expect(j.x).toEqual(want[i].x);
      });
      // The next step still trains (the workers' grads buffers were only borrowed between steps).
      expect(Number.isFinite(t.trainStep().loss)).toBe(true);
    }
  });

  it('a worker that dies before the iterations: its blocks run here, same bits; the next step restarts', async () => {
    const t = trainer({ task: 'copy', seed: 4, steps: 10, batchSize: 6, threads: 2, optimizer: 'muon' });
    t.trainStep();
    const parallel = (
      t as unknown as {
        parallel: {
          started: { workers: { terminate(): Promise<void> }[] };
          orthogonalise: typeof orthogonalise;
        };
      }
    ).parallel;
    await parallel.started.workers[0].terminate();
    const jobs = [
      [24, 40],
      [40, 24],
    ].map(([rows, cols], j) => ({
      x: Float32Array.from({ length: rows * cols }, (_, i) => Math.sin(i * 0.37 + j)),
      rows,
      cols,
    }));
    const want = jobs.map((job) => ({ ...job, x: job.x.slice() }));
    orthogonalise(want, 5);
    parallel.orthogonalise(jobs, 5);
    jobs.forEach((job, i) => {
      expect(job.x).toEqual(want[i].x);
    });
    expect(t.workers).toBe(0);
    expect(Number.isFinite(t.trainStep().loss)).toBe(true);
    expect(t.workers).toBe(1);
  });

  it('is deterministic by seed and resumes exactly from saveState', () => {
    const options = { task: tinyLm(0.1), seed: 7, steps: 10, batchSize: 6, optimizer: 'muon', threads: 2 };
    const a = trainer(options);
    const la = [1, 2, 3, 4].map(() => a.trainStep().loss);
    const b = trainer(options);
    const lb = [1, 2].map(() => b.trainStep().loss);
    const c = trainer(options);
    c.restoreState(b.saveState());
    lb.push(c.trainStep().loss, c.trainStep().loss);
    expect(lb).toEqual(la);
    expect(paramDistance(a, c).maxAbs).toBe(0);
  });
});

describe('Trainer threads: failures throw, naming the thread, never hang', () => {
  it('checks its options', () => {
    expect(() => new Trainer({ task: 'copy', threads: 2 })).toThrow(
      /Trainer: threads: 2 needs a platform .* platform: nodeTrainPlatform/,
    );
    expect(() => new Trainer({ task: 'copy', threads: 0, platform })).toThrow(
      /threads must be a positive integer, got 0/,
    );
    expect(() => new Trainer({ task: 'copy', threads: 2, platform, threadTimeout: -1 })).toThrow(
      /threadTimeout must be/,
    );
    const t = new Trainer({ task: 'copy', threads: 1 });
    expect(t.workers).toBe(0);
  });

  it("a worker's error is the step's error; the trainer is unchanged and the next step runs", () => {
    let bad = true;
    // Out-of-range targets in the worker's rows only (rows 4 … 8 of 9).
    const task = editedTask(getTask('copy'), (b) => {
      if (bad) b.targets[7 * b.L + b.L - 1] = 999;
    });
    const t = trainer({ task, seed: 1, steps: 10, batchSize: 9, threads: 2 });
    const before = t.saveState();
    expect(() => t.trainStep()).toThrow(
      /Trainer\.trainStep: training thread 1 \(of 2\) failed: crossEntropy: target 999 at row \d+ is outside \[0, 12\)/,
    );
    expect(t.step).toBe(0);
    expect(t.saveState()).toEqual(before); // data and dropout streams as they were
    bad = false;
    const reference = trainer({ task: 'copy', seed: 1, steps: 10, batchSize: 9, threads: 2 });
    expect(t.trainStep().loss).toBe(reference.trainStep().loss);
  });

  it('a worker that was killed: the step throws at once, naming it; the next step starts new workers', async () => {
    const t = trainer({ task: 'copy', seed: 1, steps: 10, batchSize: 8, threads: 3 });
    const reference = trainer({ task: 'copy', seed: 1, steps: 10, batchSize: 8, threads: 3 });
    t.trainStep();
    reference.trainStep();
    expect(t.workers).toBe(2);
    // Reach the second worker's handle and kill it behind the trainer's back.
    const started = (t as unknown as { parallel: { started: { workers: { terminate(): Promise<void> }[] } } })
      .parallel.started;
    await started.workers[1].terminate();
    expect(() => t.trainStep()).toThrow(/training thread 2 \(of 3\) has exited/);
    expect(t.step).toBe(1);
    expect(t.trainStep().loss).toBe(reference.trainStep().loss);
  });

  it('a worker that never answers: the step throws after threadTimeout', () => {
    // A platform whose workers never start (nor say so): only the timeout can end the wait.
    const silent = {
      name: 'silent',
      cores: () => 2,
      sharedMemoryUnavailable: () => '',
      startWorker: () => ({ alive: true, lastError: '', terminate: async () => {} }),
    };
    const t = new Trainer({ task: 'copy', threads: 2, platform: silent, threadTimeout: 300 });
    // The message names the timeout it waited for; the test's own time limit catches a wait that never ends.
    expect(() => t.trainStep()).toThrow(/training thread 1 \(of 2\) made no progress in 0\.3 s/);
  });

  it('a platform that cannot start workers, or refuses shared memory', () => {
    const broken = {
      name: 'broken',
      cores: () => 2,
      sharedMemoryUnavailable: () => '',
      startWorker: () => {
        throw new Error('no workers today');
      },
    };
    const t = new Trainer({ task: 'copy', threads: 2, platform: broken });
    expect(() => t.trainStep()).toThrow(/could not start training thread 1: no workers today/);
    expect(
      () =>
        new Trainer({
          task: 'copy',
          threads: 2,
          platform: { ...broken, sharedMemoryUnavailable: () => 'not cross-origin isolated' },
        }),
    ).toThrow(/threads: 2 cannot run here: not cross-origin isolated/);
  });
});

describe('Trainer threads: stopping', () => {
  it('terminate() stops every worker; training goes on where it was', async () => {
    const options = { task: 'copy', seed: 9, steps: 10, batchSize: 8, threads: 2 };
    const t = trainer(options);
    const reference = trainer(options);
    expect(t.workers).toBe(0); // started on the first step
    t.trainStep();
    reference.trainStep();
    expect(t.workers).toBe(1);
    await t.terminate();
    expect(t.workers).toBe(0);
    expect(t.trainStep().loss).toBe(reference.trainStep().loss);
    await t.terminate();
    await t.terminate(); // twice is fine
    expect(t.workers).toBe(0);
  });

  it('a process training on threads exits when its work is done, terminate() or not', async () => {
    const script = `
      const { Trainer } = await import(${JSON.stringify(`${dist}train/trainer.js`)});
      const { nodeTrainPlatform } = await import(${JSON.stringify(`${dist}threads/train-node.js`)});
      const t = new Trainer({ task: 'copy', steps: 3, batchSize: 8, threads: 2, platform: nodeTrainPlatform });
      while (!t.done) t.trainStep();
      console.log('trained', t.workers, t.losses.length);
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script]);
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const code = await new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        resolve(-1);
      }, 30_000);
      child.on('exit', (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    expect(out).toMatch(/trained 1 3/);
    expect(code).toBe(0);
  });
});
