// Memory that must not grow with a count: evaluation records no autograd tape and runs in batches
// (`noGrad`, Trainer.evaluate/attention, `qkv eval`), and `qkv viz` keeps one layer's weights, not
// every layer's and head's. Shown by what is recorded or kept and by a child process's peak RSS.

import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { add, linear } from '../src/autograd/ops.js';
import { backward, constant, isGradEnabled, noGrad, parameter, type Var } from '../src/autograd/var.js';
import { DEFAULT_PRONOUN_MODEL, EVAL_BATCH, evalCommand } from '../src/cli/eval.js';
import { readFileBytes } from '../src/io/file-node.js';
import { TinyTransformer } from '../src/model/transformer.js';
import { loadCheckpoint } from '../src/train/checkpoint.js';
import { evaluatePronoun } from '../src/train/pronoun.js';
import { sequenceTask } from '../src/train/tasks.js';
import { Trainer } from '../src/train/trainer.js';
import { seededStack } from '../src/viz/stack.js';
import { traceStack } from '../src/viz/trace.js';

describe('noGrad', () => {
  const w = () => parameter(Float32Array.from([1, 2, 3, 4, 5, 6]), [2, 3]);
  const x = constant(Float32Array.from([1, -1, 2]), [1, 3]);

  it('ops inside record nothing: no grad, no parents, no backward closure', () => {
    const weight = w();
    const y = noGrad(() => add(linear(x, weight), linear(x, weight)));
    expect(y.requiresGrad).toBe(false);
    expect(y.parents).toEqual([]);
    expect(y.backwardFn).toBeUndefined();
    expect(Array.from(y.data)).toEqual([2 * (1 - 2 + 6), 2 * (4 - 5 + 12)]); // the values are unchanged
    expect(() => backward(y)).toThrow(/does not depend on any parameter/);
  });

  it('recording resumes afterwards, also after a throw and when nested', () => {
    const weight = w();
    expect(() =>
      noGrad(() => {
        noGrad(() => {});
        expect(isGradEnabled()).toBe(false); // the inner call restored the outer mode, not "on"
        throw new Error('boom');
      }),
    ).toThrow('boom');
    expect(isGradEnabled()).toBe(true);
    const y = linear(x, weight);
    expect(y.requiresGrad).toBe(true);
    backward(y);
    expect(Array.from(weight.grad!)).toEqual([1, -1, 2, 1, -1, 2]);
  });
});

/** Records every TinyTransformer.forward: its batch size and whether its logits were put on the tape. */
const calls: { B: number; taped: boolean }[] = [];
const originalForward = TinyTransformer.prototype.forward;
function spyOnForward(): void {
  calls.length = 0;
  TinyTransformer.prototype.forward = function (this: TinyTransformer, ...args) {
    const result = originalForward.apply(this, args);
    const logits: Var = result.logits;
    calls.push({ B: args[1], taped: logits.requiresGrad || logits.parents.length > 0 });
    return result;
  };
}
afterEach(() => {
  TinyTransformer.prototype.forward = originalForward;
});

describe('evaluation runs in batches without the tape', () => {
  const task = sequenceTask('copy', { length: 4, symbols: 4, model: { dModel: 16, numHeads: 2, dFF: 32 } });

  it('Trainer.evaluate: one batchSize batch per forward, nothing taped, the same loss as a taped forward', () => {
    const trainer = new Trainer({ task, steps: 1, seed: 0, batchSize: 8 });
    spyOnForward();
    const loss = trainer.evaluate('test', 3);
    expect(calls).toEqual([
      { B: 8, taped: false },
      { B: 8, taped: false },
      { B: 8, taped: false },
    ]);
    TinyTransformer.prototype.forward = originalForward;
    expect(trainer.evaluate('test', 3)).toBe(loss); // deterministic, and noGrad changes no value
  });

  it('Trainer.attention: the weights only, nothing taped', () => {
    const trainer = new Trainer({ task, steps: 1, seed: 0, batchSize: 4 });
    spyOnForward();
    const weights = trainer.attention(new Int32Array(2 * 5).fill(2), 2, 5);
    expect(weights).toHaveLength(trainer.model.config.numLayers);
    for (const t of weights) expect(t.shape).toEqual([2, 2, 5, 5]);
    expect(calls).toEqual([{ B: 2, taped: false }]);
  });

  it(`qkv eval scores --count sentences ${EVAL_BATCH} at a time, untaped, with evaluatePronoun's numbers`, () => {
    // Before: one forward over every sentence with the tape recorded (--count 100000 reached 8.5 GB).
    const count = EVAL_BATCH + 44;
    spyOnForward();
    let out = '';
    const code = evalCommand(['--task', 'pronoun', '--count', String(count)], {
      stdout: { write: (s: string) => (out += s) },
      stderr: { write: () => true },
      env: {},
    });
    expect(code).toBe(0);
    expect(calls).toEqual([
      { B: EVAL_BATCH, taped: false },
      { B: 44, taped: false },
    ]);
    TinyTransformer.prototype.forward = originalForward;
    const { model } = loadCheckpoint(readFileBytes(DEFAULT_PRONOUN_MODEL));
    const whole = evaluatePronoun(model, { count, batchSize: count }); // one forward over all: batching changes nothing
    expect(out).toBe(
      `accuracy=${whole.accuracy.toFixed(4)} referent_attention=${whole.referentAttention.toFixed(4)}\n`,
    );
  });
});

describe('qkv viz keeps one layer of weights', () => {
  it('traceStack with focusOnly: the focused steps unchanged, no per-layer weights, no later layer run', () => {
    const stack = seededStack({ dModel: 16, dK: 4, heads: 4, layers: 4, seed: 2 });
    const tokens = ['a', 'b', 'c', 'd', 'e', 'f', 'g'];
    const options = { causal: true, focus: { layer: 2, head: 3 } };
    const full = traceStack(stack, tokens, options);
    const later = stack.layers[3];
    const lean = traceStack({ ...stack, layers: [...stack.layers.slice(0, 3), poisoned(later)] }, tokens, {
      ...options,
      focusOnly: true,
    });
    expect(full.weights).toHaveLength(4);
    expect(lean.weights).toEqual([]);
    expect(lean.steps).toEqual(full.steps);
  });

  it('qkv viz --layers 16 --heads 64 with 384 tokens stays far below the layers × heads × L² weights', () => {
    // Every layer's [64, 384, 384] weights are 16 × 37.7 MB = 604 MB; the old trace kept them all (48
    // layers × 64 heads × 512 tokens took 3.3 GB). Now the peak is the process plus one layer's weights.
    const cli = fileURLToPath(new URL('../dist/cli/viz.js', import.meta.url));
    const dir = mkdtempSync(join(tmpdir(), 'qkv-viz-memory-'));
    const out = join(dir, 'map.png');
    const script = `
      const { viz } = await import(${JSON.stringify(cli)});
      const text = Array.from({ length: 384 }, (_, i) => 'w' + i).join(' ');
      const argv = ['--layers', '16', '--heads', '64', '--text', text, '--out', ${JSON.stringify(out)}];
      const code = viz(argv, { stdout: { write: () => true }, stderr: { write: (s) => process.stderr.write(s) } });
      console.log(JSON.stringify({ code, peakMB: process.resourceUsage().maxRSS / 1024 }));
    `;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    rmSync(dir, { recursive: true, force: true });
    expect(run.stderr).toBe('');
    const { code, peakMB } = JSON.parse(run.stdout);
    expect(code).toBe(0);
    expect(peakMB).toBeLessThan(300);
  }, 60_000);
});

describe('a synchronous loop of steps keeps no step’s arrays', () => {
  it('training and noGrad forwards on the WASM kernels: array-buffer memory flat over 30 steps without an await', () => {
    // The WASM drivers remembered their last call through a WeakRef, and a WeakRef keeps its target until
    // the current job ends: a loop that never awaits (Trainer.trainStep in a while loop, as the README
    // shows) kept every step's q, k, v and activations, ~5 MB a step at this size (1.3 GB at step 200).
    const dist = fileURLToPath(new URL('../dist/', import.meta.url));
    const script = `
      const { TinyTransformer } = await import(${JSON.stringify(`${dist}index.node.js`)});
      const { autograd } = await import(${JSON.stringify(`${dist}nn/index.node.js`)});
      const { AdamW, crossEntropy, backward, noGrad } = autograd;
      const m = new TinyTransformer({ vocabSize: 512, dModel: 128, numHeads: 4, numLayers: 2, dFF: 512, maxLen: 128, causal: true }, { seed: 1 });
      const opt = new AdamW(m.parameters());
      const ids = new Int32Array(16 * 128).map((_, i) => (i * 7919) % 512);
      const step = () => {
        const loss = crossEntropy(m.forward(ids, 16, 128).logits, ids);
        opt.zeroGrad();
        backward(loss);
        opt.step(1e-3);
        noGrad(() => m.forward(ids, 16, 128));
      };
      // Array buffers are freed by a sweeper after the collection: collect and wait until it settles.
      const settled = async () => {
        let last = Infinity;
        for (let i = 0; i < 20; i++) {
          gc();
          await new Promise((r) => setTimeout(r, 20));
          const now = process.memoryUsage().arrayBuffers;
          if (now >= last) return now;
          last = now;
        }
        return last;
      };
      for (let i = 0; i < 3; i++) step();
      const before = await settled();
      for (let i = 0; i < 30; i++) step();
      console.log(JSON.stringify({ grownMB: ((await settled()) - before) / 2 ** 20 }));
    `;
    const run = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', script], {
      encoding: 'utf8',
      timeout: 120_000,
    });
    expect(run.stderr).toBe('');
    const { grownMB } = JSON.parse(run.stdout);
    expect(grownMB).toBeLessThan(40); // 399 MB before the fix (30 steps × ~13 MB kept)
  }, 120_000);
});

/** A layer whose weights throw when read: proves that focusOnly never runs it. */
function poisoned<T extends object>(layer: T): T {
  return new Proxy(layer, {
    get() {
      throw new Error('a layer after the focus was run');
    },
  });
}
