// What autograd ops keep for backward, shown by recording every typed array they allocate: crossEntropy
// keeps two float64 numbers per row (never the [N, V] softmax), layerNorm two per row (never a full-size
// x̂), dropout a byte per element; under noGrad they keep nothing at all. Gradients stay bit-identical to
// the formulas the ops used when they saved the full-size arrays, and every model forward outside a
// training step runs under noGrad.

import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { crossEntropy, dropout, gelu, layerNorm } from '../src/autograd/ops.js';
import { backward, type Floats, needsGrad, noGrad, parameter, type Var } from '../src/autograd/var.js';
import { TinyTransformer } from '../src/model/transformer.js';
import { Generator } from '../src/random.js';
import { Tensor } from '../src/tensor.js';

interface Allocation {
  type: string;
  length: number;
}

const TYPES = ['Float32Array', 'Float64Array', 'Uint8Array', 'Int32Array'] as const;

/**
 * Runs `fn` with the typed-array constructors replaced by subclasses that record each allocation (ops look
 * the globals up at call time); views of an existing buffer are not allocations and are not recorded. `instanceof` still answers for arrays made before, so float64 inputs keep
 * taking the float64 paths.
 */
function allocations<T>(fn: () => T): { result: T; made: Allocation[] } {
  const made: Allocation[] = [];
  const g = globalThis as Record<string, unknown>;
  const saved = TYPES.map((name) => g[name]);
  TYPES.forEach((name, i) => {
    const Base = saved[i] as Float64ArrayConstructor;
    g[name] = class extends Base {
      // biome-ignore lint/suspicious/noExplicitAny: forwards whatever the caller passed
      constructor(...args: any[]) {
        // @ts-expect-error: the base constructor's overloads
        super(...args);
        // A view of an existing buffer (the WASM memory the float32 ops stream through, a subarray)
        // allocates nothing: only arrays with storage of their own are counted.
        if (!(args[0] instanceof ArrayBuffer || args[0] instanceof SharedArrayBuffer))
          made.push({ type: name, length: this.length });
      }
      static override [Symbol.hasInstance](v: unknown): boolean {
        return v instanceof Base;
      }
    };
  });
  try {
    return { result: fn(), made };
  } finally {
    TYPES.forEach((name, i) => {
      g[name] = saved[i];
    });
  }
}

// The float32 ops run on the WASM module, which decodes and compiles its binary on first use: a one-time
// allocation of the process, not of an op, so it happens here, before any recording.
beforeAll(() => {
  backward(crossEntropy(gelu(parameter(new Float32Array(4), [2, 2])), Int32Array.of(0, 1)));
});

/** Elements allocated in arrays of `type` with at least `min` elements. */
const big = (made: Allocation[], type: string, min: number) =>
  made.filter((a) => a.type === type && a.length >= min).map((a) => a.length);

function randomParam(shape: number[], seed: number, float64 = false, std = 1): Var {
  const t = Tensor.randn(shape, { seed, std });
  return parameter(float64 ? Float64Array.from(t.data) : t.data, shape);
}

/** Targets in [0, V) with every fifth row ignored (−1). */
function targetsFor(N: number, V: number): Int32Array {
  return Int32Array.from({ length: N }, (_, n) => (n % 5 === 4 ? -1 : (n * 7919) % V));
}

describe('crossEntropy keeps O(N), not the [N, V] softmax', () => {
  const N = 48;
  const V = 4096; // N·V = 196 608 logits

  for (const float64 of [false, true]) {
    it(`${float64 ? 'float64' : 'float32'} logits [${N}, ${V}]: forward and backward allocate only the loss, O(N) and the input's grad`, () => {
      const logits = randomParam([N, V], 1, float64, 3);
      const targets = targetsFor(N, V);
      const fwd = allocations(() => crossEntropy(logits, targets));
      expect(fwd.made.length).toBeGreaterThan(0); // the recorder saw the call
      // Nothing as long as a row: the saves are per row (N), the loss is one number.
      expect(big(fwd.made, 'Float64Array', V)).toEqual([]);
      expect(big(fwd.made, 'Float32Array', V)).toEqual([]);
      const saved = fwd.made.filter((a) => a.length > 1).reduce((s, a) => s + a.length, 0);
      expect(saved).toBeLessThanOrEqual(3 * N); // each row's max and sum, and a copy of the targets
      const bwd = allocations(() => backward(fwd.result));
      // The logits' own grad (N·V of the logits' type) and nothing else of that size: the softmax is
      // recomputed row by row from the logits.
      const type = float64 ? 'Float64Array' : 'Float32Array';
      expect(big(bwd.made, type, V)).toEqual([N * V]);
      expect(big(bwd.made, float64 ? 'Float32Array' : 'Float64Array', V)).toEqual([]);
    });
  }

  it('gradients are softmax(x) − onehot from a stored softmax (the old save): float64 bit for bit, float32 (WASM lanes) to a few ulps', () => {
    for (const float64 of [false, true]) {
      const logits = randomParam([7, 11], 2, float64, 4);
      const targets = Int32Array.from([3, -1, 0, 10, 5, -1, 1]);
      const loss = crossEntropy(logits, targets);
      backward(loss, [0.75]);
      const expected = float64 ? new Float64Array(logits.size) : new Float32Array(logits.size);
      let count = 0;
      for (const t of targets) if (t !== -1) count++;
      const g = 0.75 / count;
      let total = 0;
      for (let n = 0; n < 7; n++) {
        if (targets[n] === -1) continue;
        const row = Array.from(logits.data.subarray(n * 11, n * 11 + 11));
        const max = Math.max(...row);
        const e = row.map((x) => Math.exp(x - max));
        const sum = e.reduce((s, x) => s + x, 0);
        total += max + Math.log(sum) - row[targets[n]];
        for (let c = 0; c < 11; c++) expected[n * 11 + c] = g * (e[c] / sum - (c === targets[n] ? 1 : 0));
      }
      if (float64) {
        expect(loss.data[0]).toBe(total / count);
        expect(logits.grad).toEqual(expected);
        continue;
      }
      // Float32 logits take the WASM kernel's float32 exps (assembly/ops.ts): ≤ 1e-6 relative per term.
      expect(Math.abs(loss.data[0] - total / count)).toBeLessThanOrEqual(1e-6);
      const grad = logits.grad!;
      for (let i = 0; i < grad.length; i++) {
        expect(Math.abs(grad[i] - expected[i])).toBeLessThanOrEqual(
          1e-6 * g + 2 ** -23 * Math.abs(expected[i]),
        );
      }
    }
  });

  it('all rows ignored: loss 0, a zero gradient, no NaN', () => {
    const logits = randomParam([3, 5], 3);
    const loss = crossEntropy(logits, Int32Array.from([-1, -1, -1]));
    backward(loss);
    expect(loss.data[0]).toBe(0);
    expect(Array.from(logits.grad ?? new Float32Array(15))).toEqual(new Array(15).fill(0));
  });
});

describe('layerNorm keeps two numbers per row, not a full-size x̂', () => {
  const N = 256;
  const D = 64;

  for (const float64 of [false, true]) {
    it(`${float64 ? 'float64' : 'float32'} x [${N}, ${D}]: forward allocates the output and O(N), backward only grads`, () => {
      const x = randomParam([N, D], 4, float64);
      const w = randomParam([D], 5, float64);
      const b = randomParam([D], 6, float64);
      const type = float64 ? 'Float64Array' : 'Float32Array';
      const half = (N * D) / 2;
      const fwd = allocations(() => layerNorm(x, w, b));
      // Only the output is anywhere near N·D elements, and it has the input's type.
      expect(big(fwd.made, type, half)).toEqual([N * D]);
      expect(big(fwd.made, float64 ? 'Float32Array' : 'Float64Array', half)).toEqual([]);
      const saved = fwd.made.filter((a) => a.length !== N * D).reduce((s, a) => s + a.length, 0);
      expect(saved).toBeLessThanOrEqual(2 * N);
      const seed = new Float64Array(N * D).fill(1);
      const bwd = allocations(() => backward(fwd.result, seed));
      expect(big(bwd.made, type, half)).toEqual([N * D, N * D]); // the output's and x's grads
      expect(big(bwd.made, float64 ? 'Float32Array' : 'Float64Array', half)).toEqual([]);
    });
  }

  it('gradients are bit-identical to the formulas on a stored float64 x̂ (the old save)', () => {
    for (const float64 of [false, true]) {
      const [n, d] = [5, 9];
      const x = randomParam([n, d], 7, float64, 2);
      const w = randomParam([d], 8, float64);
      const b = randomParam([d], 9, float64);
      const dy = Float64Array.from(Tensor.randn([n * d], { seed: 10 }).data);
      backward(layerNorm(x, w, b), dy);
      const make = (len: number): Floats => (float64 ? new Float64Array(len) : new Float32Array(len));
      const [dx, dw, db] = [make(n * d), make(d), make(d)];
      for (let r = 0; r < n; r++) {
        const o = r * d;
        let mean = 0;
        for (let c = 0; c < d; c++) mean += x.data[o + c];
        mean /= d;
        let v = 0;
        for (let c = 0; c < d; c++) v += (x.data[o + c] - mean) ** 2;
        const rstd = 1 / Math.sqrt(v / d + 1e-5);
        const xhat = Array.from({ length: d }, (_, c) => (x.data[o + c] - mean) * rstd);
        const g = (c: number) => (float64 ? dy[o + c] : Math.fround(dy[o + c]));
        let mg = 0;
        let mgx = 0;
        for (let c = 0; c < d; c++) {
          mg += g(c) * w.data[c];
          mgx += g(c) * w.data[c] * xhat[c];
          dw[c] += g(c) * xhat[c];
          db[c] += g(c);
        }
        mg /= d;
        mgx /= d;
        for (let c = 0; c < d; c++) dx[o + c] += rstd * (g(c) * w.data[c] - mg - xhat[c] * mgx);
      }
      expect(x.grad).toEqual(dx);
      expect(w.grad).toEqual(dw);
      expect(b.grad).toEqual(db);
    }
  });
});

describe('dropout keeps a byte per element', () => {
  it('float32 [64, 256], p = 0.25: no float64 mask; the same values and gradients as a float mask', () => {
    const x = randomParam([64, 256], 11);
    const { result: y, made } = allocations(() => dropout(x, 0.25, new Generator(12)));
    expect(big(made, 'Float64Array', 256)).toEqual([]);
    expect(big(made, 'Float32Array', 256)).toEqual([x.size]); // the output
    expect(made.filter((a) => a.type === 'Uint8Array').reduce((s, a) => s + a.length, 0)).toBeLessThanOrEqual(
      x.size,
    );
    backward(y, new Float64Array(x.size).fill(2));
    const gen = new Generator(12);
    const scaleKept = 1 / (1 - 0.25);
    for (let i = 0; i < x.size; i++) {
      const keep = gen.random() < 0.25 ? 0 : scaleKept;
      expect(y.data[i]).toBe(Math.fround(x.data[i] * keep));
      expect(x.grad![i]).toBe(Math.fround(2 * keep));
    }
  });
});

describe('under noGrad an op keeps nothing for backward', () => {
  const N = 32;
  const V = 2048;

  it('crossEntropy, layerNorm, gelu and dropout allocate their outputs only and return Vars with no parents or closure', () => {
    const logits = randomParam([N, V], 13);
    const w = randomParam([V], 14);
    const b = randomParam([V], 15);
    const targets = targetsFor(N, V);
    const generator = new Generator(1);
    const run = (label: string, op: () => Var, outputs: number[]) => {
      const { result, made } = allocations(() => noGrad(op));
      expect(
        made.map((a) => a.length).sort((p, q) => p - q),
        label,
      ).toEqual(outputs);
      expect(result.requiresGrad, label).toBe(false);
      expect(result.parents, label).toEqual([]);
      expect(result.backwardFn, label).toBeUndefined();
    };
    run('crossEntropy', () => crossEntropy(logits, targets), [1]);
    run('layerNorm', () => layerNorm(logits, w, b), [N * V]);
    run('gelu', () => gelu(logits), [N * V]);
    // The mask's draws are still made (the generator advances as in training), but no mask is kept.
    run('dropout', () => dropout(logits, 0.5, generator), [N * V]);
    expect(needsGrad([logits])).toBe(true); // what ops ask before allocating a save
    expect(noGrad(() => needsGrad([logits]))).toBe(false);
  });

  it('values under noGrad are the taped values', () => {
    const logits = randomParam([N, V], 16);
    const targets = targetsFor(N, V);
    expect(noGrad(() => crossEntropy(logits, targets)).data).toEqual(crossEntropy(logits, targets).data);
    const [w, b] = [randomParam([V], 17), randomParam([V], 18)];
    expect(noGrad(() => layerNorm(logits, w, b)).data).toEqual(layerNorm(logits, w, b).data);
  });
});

describe('a training step of TinyTransformer keeps no float64 activation', () => {
  it('float32 forward + crossEntropy + backward: no Float64Array as large as the [B, L, D] activations', () => {
    const model = new TinyTransformer(
      { vocabSize: 512, dModel: 32, numHeads: 4, numLayers: 2, dFF: 64, maxLen: 16, causal: true },
      { seed: 1 },
    );
    const [B, L] = [4, 16];
    const gen = new Generator(2);
    const ids = Int32Array.from({ length: B * L }, () => Math.floor(gen.random() * 512));
    const targets = Int32Array.from({ length: B * L }, (_, i) => (i % L === L - 1 ? -1 : ids[i + 1]));
    const { made } = allocations(() => {
      const loss = crossEntropy(model.forward(ids, B, L).logits, targets);
      backward(loss);
      return loss;
    });
    // Per-row statistics (B·L rows, B·H·L attention rows) are float64; nothing of activation size is.
    expect(big(made, 'Float64Array', B * L * 32)).toEqual([]);
  });
});

describe('every model forward outside a training step runs under noGrad', () => {
  it('src/ and web/src/: each `.forward(` on a TinyTransformer is inside noGrad(…), cached, or a training step', () => {
    const root = fileURLToPath(new URL('..', import.meta.url));
    const files: string[] = [];
    const walk = (dir: string) => {
      for (const e of readdirSync(join(root, dir), { withFileTypes: true })) {
        const rel = join(dir, e.name);
        if (e.isDirectory()) walk(rel);
        else if (/\.ts$/.test(e.name) && !e.name.endsWith('.d.ts')) files.push(rel);
      }
    };
    walk('src');
    walk('web/src');
    const untaped: string[] = [];
    let seen = 0;
    for (const file of files) {
      const lines = readFileSync(join(root, file), 'utf8').split('\n');
      lines.forEach((line, i) => {
        if (!/\bmodel\.forward\(/.test(line)) return;
        if (/^\s*(\*|\/\/)/.test(line)) return; // a doc comment's example (release's is a training step), not a call
        seen++;
        // A cached forward runs the Tensor inference path: it records no tape (test/generate.test.ts).
        if (/\{[^}]*\bcache\b/.test(line)) return;
        const around = lines.slice(Math.max(0, i - 2), i + 1).join('\n');
        // Training steps record the tape on purpose: Trainer.trainStep and its data-parallel shards
        // (the calling thread's in train/parallel.ts, the workers' in threads/train-worker.ts).
        const trainingFile = ['trainer.ts', 'parallel.ts', 'train-worker.ts'].some((f) => file.endsWith(f));
        const training = trainingFile && /training: true/.test(lines.slice(i, i + 3).join('\n'));
        if (!/noGrad\(/.test(around) && !training) untaped.push(`${file}:${i + 1}: ${line.trim()}`);
      });
    }
    expect(seen).toBeGreaterThanOrEqual(4); // trainStep, evaluate, attention, evaluatePronoun, the worker
    expect(untaped).toEqual([]);
  });
});
