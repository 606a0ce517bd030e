// Regressions from an adversarial review of the layers and the autograd (2026-12-02): each case gave a
// wrong answer, a crash, a changed cache after a refused call, or an error that did not say what was wrong.

import { fileURLToPath } from 'node:url';
import vm from 'node:vm';
import { afterAll, describe, expect, it } from 'vitest';
import { attention } from '../src/autograd/attention.js';
import { crossEntropy, layerNorm, linear } from '../src/autograd/ops.js';
import { backward, parameter } from '../src/autograd/var.js';
import { KVCache } from '../src/cache/kv-cache.js';
import { MultiHeadAttention, Tensor, terminateWorkers } from '../src/index.node.js';
import { decodeSafetensors, encodeSafetensors } from '../src/io/safetensors.js';
import { argmax, sampleToken, tokenDistribution } from '../src/model/sampling.js';
import { TinyTransformer } from '../src/model/transformer.js';
import { Generator } from '../src/random.js';
import { saveCheckpoint } from '../src/train/checkpoint.js';
import { Trainer } from '../src/train/trainer.js';
import { thrown } from './helpers.js';

afterAll(() => terminateWorkers());

const DTYPES = [Float32Array, Float64Array] as const;

describe('linear backward: 0 · NaN is NaN on every path, as in PyTorch', () => {
  for (const Arr of DTYPES) {
    it(`${Arr.name}: a NaN padding row of x whose gradient rows are 0 makes dW NaN, as 0·NaN does`, () => {
      // x row 1 is NaN padding; dy row 1 is 0 (an ignored target). dW[m, k] = Σ_n dy[n, m]·x[n, k] takes
      // 0·NaN from row 1 in every entry: NaN everywhere, on the float32 GEMM and the float64 loops alike.
      const x = parameter(Arr.from([1, 2, Number.NaN, Number.NaN]), [2, 2]);
      const w = parameter(Arr.from([0.5, -1, Number.POSITIVE_INFINITY, 3]), [2, 2]);
      const y = linear(x, w);
      backward(y, Arr.from([1, 0, 0, 0]));
      expect(Array.from(w.grad!).map(Number.isNaN)).toEqual([true, true, true, true]);
      // dx = dy·W: row 0 is [1·0.5 + 0·∞, 1·(−1) + 0·3] = [NaN, −1]; row 1 is 0·W = [0·0.5 + 0·∞, 0] = [NaN, 0].
      const dx = Array.from(x.grad!);
      expect(Number.isNaN(dx[0])).toBe(true);
      expect(dx[1]).toBe(-1);
      expect(Number.isNaN(dx[2])).toBe(true);
      expect(dx[3]).toBe(0);
    });
  }
});

describe('crossEntropy checks ignoreIndex and the class axis', () => {
  const logits = () => parameter(new Float32Array(10).fill(0.5), [2, 5]);
  it('an ignoreIndex that is not an int32 is refused, naming it (the WASM loop would read another int)', () => {
    for (const bad of [3.5, Number.NaN, 2 ** 32 + 3, Number.POSITIVE_INFINITY]) {
      expect(() => crossEntropy(logits(), new Int32Array([3, 1]), bad)).toThrow(
        /crossEntropy: ignoreIndex must be an int32/,
      );
    }
    // PyTorch's default −100 and other int32 values stay fine.
    expect(Number.isFinite(crossEntropy(logits(), new Int32Array([-100, 1]), -100).data[0])).toBe(true);
  });

  it('logits without a class axis, or with 0 classes, are refused with their shape', () => {
    expect(() => crossEntropy(parameter(new Float32Array(0), [2, 0]), new Int32Array([-1, -1]))).toThrow(
      /crossEntropy: logits \[2, ?0\] must be \[\.\.\., C\] with at least one class/,
    );
    expect(() => crossEntropy(parameter(new Float32Array(1), []), new Int32Array(1))).toThrow(
      /crossEntropy: logits \[\] must be/,
    );
  });
});

describe('layerNorm and attention name what is wrong with their shapes', () => {
  const P = (shape: number[]) =>
    parameter(new Float32Array(shape.reduce((a, b) => a * b, 1)).fill(0.5), shape);

  it('layerNorm of a scalar', () => {
    expect(() => layerNorm(P([]), P([1]), P([1]))).toThrow(/layerNorm: x \[\] must have at least one axis/);
  });

  it("attention refuses k or v whose batch or length differ (v's were reinterpreted before)", () => {
    for (const [k, v] of [
      [P([2, 3, 4]), P([3, 2, 4])],
      [P([2, 3, 4]), P([1, 6, 4])],
      [P([1, 3, 4]), P([1, 3, 4])],
      [P([2, 3, 4]), P([2, 2, 4])],
    ]) {
      const err = thrown(() => attention(P([2, 3, 4]), k, v, { numHeads: 1 }));
      expect(err.message).toMatch(
        /^attention: k and v must be \[B, S, ·\] with q's batch B and one length S/,
      );
      expect(err.message).toContain(`v [${v.shape}]`);
    }
  });

  it('attention refuses a fractional head count', () => {
    expect(() => attention(P([1, 2, 6]), P([1, 3, 6]), P([1, 3, 6]), { numHeads: 1.5 })).toThrow(
      /attention: numHeads and numKvHeads must be positive integers, got 1\.5/,
    );
  });
});

describe('MultiHeadAttention with a KVCache', () => {
  const mha = new MultiHeadAttention({ embedDim: 12, numHeads: 3, seed: 1 });
  const newCache = () => new KVCache({ numLayers: 1, numKvHeads: 3, headDim: 4, maxLength: 16 });

  for (const batched of [true, false]) {
    const shape = (L: number) => (batched ? [1, L, 12] : [L, 12]);
    it(`${batched ? 'batched' : 'unbatched'}: needWeights after the prompt gives weights over every cached key, sync and async alike`, async () => {
      const prompt = Tensor.randn(shape(5), { seed: 1 });
      const step = Tensor.randn(shape(1), { seed: 2 });
      const [a, b] = [newCache(), newCache()];
      mha.forward(prompt, prompt, prompt, { causal: true, cache: a, layer: 0 });
      await mha.forwardAsync(prompt, prompt, prompt, { causal: true, cache: b, layer: 0 });
      const sync = mha.forward(step, step, step, { causal: true, cache: a, layer: 0, needWeights: true });
      const async_ = await mha.forwardAsync(step, step, step, {
        causal: true,
        cache: b,
        layer: 0,
        needWeights: true,
      });
      const expected = batched ? [1, 3, 1, 6] : [3, 1, 6];
      expect(sync.weights?.shape).toEqual(expected);
      expect(async_.weights?.shape).toEqual(expected);
      expect(Array.from(async_.weights!.data)).toEqual(Array.from(sync.weights!.data));
      for (let h = 0; h < 3; h++) {
        const row = sync.weights!.data.subarray(h * 6, h * 6 + 6);
        expect(row.reduce((s, x) => s + x, 0)).toBeCloseTo(1, 5);
      }
    });
  }

  it('a call refused for its mask leaves the cache as it was, sync and async', async () => {
    for (const run of ['forward', 'forwardAsync'] as const) {
      const cache = newCache();
      const prompt = Tensor.randn([1, 5, 12], { seed: 1 });
      mha.forward(prompt, prompt, prompt, { causal: true, cache, layer: 0 });
      const step = Tensor.randn([1, 1, 12], { seed: 2 });
      const mask = new Tensor(new Float32Array(5), [1, 1, 1, 5]); // 5 keys, but the step attends to 6
      const call = () => mha[run](step, step, step, { cache, layer: 0, mask });
      if (run === 'forward') expect(call).toThrow(/does not broadcast/);
      else await expect(call()).rejects.toThrow(/does not broadcast/);
      expect(cache.length).toBe(5);
    }
  });

  it('needWeights must be a boolean', async () => {
    const x = Tensor.randn([1, 2, 12], { seed: 3 });
    for (const bad of ['no', 1, {}]) {
      expect(() => mha.forward(x, x, x, { needWeights: bad as unknown as boolean })).toThrow(
        /MultiHeadAttention\.forward: needWeights/,
      );
      await expect(mha.forwardAsync(x, x, x, { needWeights: bad as unknown as boolean })).rejects.toThrow(
        /MultiHeadAttention\.forwardAsync: needWeights/,
      );
    }
  });
});

describe('TinyTransformer: loadStateDict and forward check what they are given', () => {
  const cfg = { vocabSize: 10, dModel: 12, numHeads: 3, numLayers: 1, dFF: 16, maxLen: 8, causal: true };

  it('loadStateDict widens float16 tensors (they were copied in as raw bit patterns)', () => {
    const model = new TinyTransformer(cfg, { seed: 1 });
    const ids = Int32Array.of(1, 2, 3);
    const dict = model.stateDict();
    const half = Object.fromEntries(Object.entries(dict).map(([k, t]) => [k, t.to('float16')]));
    const other = new TinyTransformer(cfg, { seed: 2 });
    other.loadStateDict(half);
    // The float16 roundings of the same weights: logits within float16's precision of the original.
    const a = model.forward(ids, 1, 3).logits.data;
    const b = other.forward(ids, 1, 3).logits.data;
    for (let i = 0; i < a.length; i++) expect(Math.abs(a[i] - b[i])).toBeLessThan(0.05);
    // Nested arrays load as MultiHeadAttention's do, and give the same model bit for bit.
    const nested = Object.fromEntries(Object.entries(dict).map(([k, t]) => [k, t.toArray()]));
    other.loadStateDict(nested);
    expect(Array.from(other.forward(ids, 1, 3).logits.data)).toEqual(Array.from(a));
  });

  it('loadStateDict refuses a dict that is not an object, naming itself', () => {
    const model = new TinyTransformer(cfg, { seed: 1 });
    for (const bad of [null, 3, []]) {
      expect(() => model.loadStateDict(bad as never)).toThrow(
        /TinyTransformer\.loadStateDict: dict must be an object of name → tensor/,
      );
    }
  });

  it('forward names a mask that does not broadcast as its own argument', () => {
    const model = new TinyTransformer(cfg, { seed: 1 });
    for (const shape of [
      [3, 3],
      [2, 1, 1, 2],
    ]) {
      const err = thrown(() => model.forward(Int32Array.of(1, 2), 1, 2, { mask: Tensor.zeros(shape) }));
      expect(err.message).toMatch(
        /^TinyTransformer\.forward: mask of shape .* does not broadcast to \[B, H, L, L\] = \[1, ?3, ?2, ?2\]/,
      );
    }
  });
});

describe('typed arrays from another realm (vm, iframe, worker) work like this realm’s', () => {
  it('an autograd Var over one takes the float32 kernels, as this realm’s array does, bit for bit', () => {
    const F32 = vm.runInNewContext('Float32Array') as Float32ArrayConstructor;
    const run = (make: (a: Float32Array) => Float32Array) => {
      const x = parameter(make(Float32Array.from({ length: 6 * 40 }, (_, i) => Math.sin(i))), [6, 40]);
      const w = parameter(make(Float32Array.from({ length: 9 * 40 }, (_, i) => Math.cos(i))), [9, 40]);
      const y = linear(x, w);
      backward(
        y,
        Float32Array.from({ length: 54 }, (_, i) => (i % 7) - 3),
      );
      return [y.data, x.grad!, w.grad!].map((a) => Array.from(a));
    };
    const foreign = run((a) => new F32(a));
    expect(foreign).toEqual(run((a) => a));
    expect(parameter(new F32(2), [2]).data instanceof Float32Array).toBe(true);
  });

  it('a Tensor over one is a view of this realm over the same memory; forward and forwardAsync agree', async () => {
    // The built package: forwardAsync's workers run dist/ (npm test builds it first).
    const dist = fileURLToPath(new URL('../dist/', import.meta.url));
    const qkv = await import(`${dist}index.node.js`);
    const F32 = vm.runInNewContext('Float32Array') as Float32ArrayConstructor;
    const x = qkv.Tensor.randn([2, 200, 64], { seed: 2 }); // large enough for the workers (not inline)
    const foreign = new F32(x.data);
    const xr = new qkv.Tensor(foreign, [2, 200, 64]);
    expect(xr.data instanceof Float32Array).toBe(true);
    foreign[0] = 7; // the same memory, not a copy
    expect(xr.data[0]).toBe(7);
    foreign[0] = x.data[0];
    const mha = new qkv.MultiHeadAttention({ embedDim: 64, numHeads: 4, seed: 1 });
    const same = mha.forward(x).output.data;
    expect(Array.from(mha.forward(xr).output.data)).toEqual(Array.from(same));
    const viaThreads = await mha.forwardAsync(xr, xr, xr, { threads: 2 });
    expect(Array.from(viaThreads.output.data)).toEqual(Array.from(same));
    qkv.terminateWorkers();
  });
});

describe('sampling helpers, generate, safetensors, checkpoints and Trainer states (a third review)', () => {
  const cfg = { vocabSize: 11, dModel: 12, numHeads: 3, numLayers: 1, dFF: 16, maxLen: 8, causal: true };

  it('tokenDistribution, sampleToken and argmax check what generate checks', () => {
    const g = new Generator(1);
    expect(() => sampleToken([1, 2, 3], { topK: 0 }, g)).toThrow(/sampleToken: topK/);
    expect(() => sampleToken([], {}, g)).toThrow(/sampleToken: logits must hold at least one number/);
    expect(() => argmax([])).toThrow(/argmax: logits must hold at least one number/);
    expect(() => tokenDistribution([1, 2], { topK: 1.5 })).toThrow(/tokenDistribution: topK/);
    expect(() => tokenDistribution([1, 2], { temperature: Number.NaN })).toThrow(
      /tokenDistribution: temperature/,
    );
    expect(() => tokenDistribution([0, 0, 5], { temperature: -1 })).toThrow(/tokenDistribution: temperature/);
    for (const topP of [2, Number.NaN, -1]) {
      expect(() => tokenDistribution([1, 2], { topP })).toThrow(
        /tokenDistribution: topP must be a number in/,
      );
    }
    expect(() => sampleToken([1, 2], {}, undefined as never)).toThrow(
      /sampleToken: generator must be a Generator/,
    );
    // Valid calls are unchanged: greedy, and a draw from the distribution.
    expect(argmax([1, 5, 5])).toBe(1);
    expect(tokenDistribution([0, 0, 5], { topK: 1 }).ids[0]).toBe(2);
  });

  it('generate names a bad prompt or stop, and refuses stop ids outside the vocabulary', () => {
    const model = new TinyTransformer(cfg, { seed: 1 });
    const opts = { maxNewTokens: 2, seed: 1 };
    expect(() => model.generate(null as never, opts)).toThrow(
      /TinyTransformer\.generate: prompt must be an array/,
    );
    for (const stop of [null, {}]) {
      expect(() => model.generate([1, 2], { ...opts, stop: stop as never })).toThrow(
        /TinyTransformer\.generate: stop must be a token id or an array of them/,
      );
    }
    for (const stop of [-1, [999], 1.5]) {
      expect(() => model.generate([1, 2], { ...opts, stop })).toThrow(
        /TinyTransformer\.generate: stop must be token ids in \[0, vocabSize=11\)/,
      );
    }
    expect(model.generate([1, 2], { ...opts, stop: [3, 4] }).length).toBeGreaterThan(0);
  });

  it('encodeSafetensors keeps a tensor named __proto__ and refuses metadata that is not a record', () => {
    const proto = '__proto__'; // an own key of a null-prototype record, as the decoder makes them
    const tensors = Object.create(null) as Record<string, Tensor>;
    tensors[proto] = new Tensor(Float32Array.of(1, 2), [2]);
    tensors.w = new Tensor(Float32Array.of(3), [1]);
    const back = decodeSafetensors(encodeSafetensors(tensors));
    expect(Object.keys(back.tensors).sort()).toEqual(['__proto__', 'w']);
    expect(Array.from(back.tensors[proto].data)).toEqual([1, 2]);
    for (const metadata of ['abc', ['x'], 5, true, null]) {
      expect(() => encodeSafetensors({ w: tensors.w }, metadata as never)).toThrow(
        /encodeSafetensors: metadata must be a record of name → string/,
      );
    }
  });

  it('saveCheckpoint refuses a float16 save of a weight that would round to Infinity, naming it', () => {
    const model = new TinyTransformer(cfg, { seed: 1 });
    model.params.get('embedding.weight')!.data[3] = 70000;
    expect(() => saveCheckpoint(model, { dtype: 'float16' })).toThrow(
      /embedding\.weight\[3\] = 70000 rounds to ±Infinity in float16/,
    );
    model.params.get('embedding.weight')!.data[3] = 65504; // the largest float16: fine
    expect(saveCheckpoint(model, { dtype: 'float16' }).length).toBeGreaterThan(0);
  });

  it('Trainer.restoreState refuses a bad state without changing anything, and keeps a NaN loss', () => {
    const base = { task: 'copy', steps: 4, batchSize: 2, seed: 1 } as const;
    const edited = (edit: (s: Record<string, unknown>, t: Record<string, Tensor>) => void) => {
      const a = new Trainer(base);
      a.trainStep();
      const d = decodeSafetensors(a.saveState());
      const s = JSON.parse(d.metadata['qkv.trainer']);
      edit(s, d.tensors as Record<string, Tensor>);
      d.metadata['qkv.trainer'] = JSON.stringify(s);
      return encodeSafetensors(d.tensors as Record<string, Tensor>, d.metadata);
    };
    const cases: [string, (s: Record<string, unknown>, t: Record<string, Tensor>) => void][] = [
      [
        'adamStep −1',
        (s) => {
          s.adamStep = -1;
        },
      ],
      [
        'no data generator state',
        (s) => {
          delete s.data;
        },
      ],
      [
        'losses null',
        (s) => {
          s.losses = null;
        },
      ],
      [
        'losses a string',
        (s) => {
          s.losses = 'abc';
        },
      ],
      [
        '7 losses for 4 steps',
        (s) => {
          s.losses = [1, 2, 3, 4, 5, 6, 7];
        },
      ],
      [
        'a weight stored transposed',
        (_, t) => {
          const name = Object.keys(t).find(
            (k) => !k.startsWith('optimizer') && t[k].shape.length === 2 && t[k].shape[0] !== t[k].shape[1],
          ) as string;
          t[name] = new Tensor(t[name].data as Float32Array, [...t[name].shape].reverse());
        },
      ],
    ];
    for (const [, edit] of cases) {
      const b = new Trainer(base);
      const weights = Float32Array.from(b.model.params.get('embedding.weight')!.data);
      const adam = JSON.stringify(Array.from(b.saveState()));
      expect(() => b.restoreState(edited(edit))).toThrow(/^Trainer\.restoreState: /);
      expect(Array.from(b.model.params.get('embedding.weight')!.data)).toEqual(Array.from(weights));
      expect(b.losses).toEqual([]);
      expect(JSON.stringify(Array.from(b.saveState()))).toBe(adam); // optimizer and generators as they were
    }
    // A diverged run's NaN loss (JSON null) is NaN again after a resume.
    const a = new Trainer(base);
    a.model.params.get('embedding.weight')!.data.fill(Number.NaN);
    a.trainStep();
    const c = new Trainer(base);
    c.restoreState(a.saveState());
    expect(c.losses.length).toBe(1);
    expect(Number.isNaN(c.losses[0])).toBe(true);
  });
});
