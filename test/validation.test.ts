// Argument validation beyond shapes (the reliability issue): option values of any type are described
// without throwing, oversized shapes are refused up front, nesting depth is bounded, numeric and boolean
// options are type- and range-checked, and tensors never read through a buffer that was resized.

import { describe, expect, it } from 'vitest';
import {
  type AttentionOptions,
  applyRope,
  attentionWeights,
  fromHalfBits,
  Generator,
  MultiHeadAttention,
  manualSeed,
  type NestedArray,
  SelfAttention,
  scaledDotProductAttention,
  Tensor,
  toHalfBits,
} from '../src/index.js';
import { TinyTransformer, type TransformerConfig } from '../src/model/transformer.js';
import { formatValue } from '../src/shape.js';
import { Trainer, type TrainerOptions } from '../src/train/trainer.js';
import { thrown } from './helpers.js';

/** A regex that matches a message containing every part (in any order), each taken literally. */
function all(...parts: string[]): RegExp {
  const esc = (p: string) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`^${parts.map((p) => `(?=[\\s\\S]*${esc(p)})`).join('')}`);
}

const SDPA = 'scaledDotProductAttention:';
const x24 = () => Tensor.randn([2, 4], { seed: 1 });
const sdpaWith = (options: unknown) => () => {
  const x = x24();
  return scaledDotProductAttention(x, x, x, options as AttentionOptions);
};

function circular(): Record<string, unknown> {
  const o: Record<string, unknown> = { name: 'loop' };
  o.self = o;
  return o;
}

describe('1. option values of any type are described, never re-thrown by the describer', () => {
  it('scale: 1n names the function, the option and the value', () => {
    expect(sdpaWith({ scale: 1n })).toThrow(all(SDPA, 'scale must be a finite number', '1n (bigint)'));
  });

  it('causal: 1n names the function, the option and the value', () => {
    expect(sdpaWith({ causal: 1n })).toThrow(all(SDPA, 'causal must be', 'got 1n'));
  });

  it('kernel: a circular object names the function and the option and shows the object', () => {
    expect(sdpaWith({ kernel: circular() })).toThrow(
      all(SDPA, 'kernel must be one of', '[Circular]', '"loop"'),
    );
  });

  it('dtype, window: symbols, functions and bigints are shown', () => {
    expect(sdpaWith({ dtype: Symbol('half') })).toThrow(all(SDPA, 'dtype', 'Symbol(half)'));
    expect(sdpaWith({ kernel: function fast() {} })).toThrow(all(SDPA, 'kernel', 'function fast'));
    expect(sdpaWith({ window: [1n, 0n] })).toThrow(all(SDPA, 'window', '[1n,0n]'));
    expect(sdpaWith({ window: circular() })).toThrow(all(SDPA, 'window', '[Circular]'));
  });

  it('a huge string or array is truncated in the message', () => {
    const big = thrown(sdpaWith({ kernel: 'x'.repeat(1_000_000) }));
    expect(big.message).toMatch(all(SDPA, 'kernel', 'xxxx', '…'));
    expect(big.message.length).toBeLessThan(400);
    const long = thrown(sdpaWith({ window: Array.from({ length: 100_000 }, (_, i) => i) }));
    expect(long.message).toMatch(all(SDPA, 'window', '[0,1,2', '…'));
    expect(long.message.length).toBeLessThan(400);
  });

  it('an options object that is not a plain object, or a bigint, is described', () => {
    expect(sdpaWith(1n)).toThrow(all(SDPA, 'options must be an object', '1n'));
    const x = x24();
    expect(() => scaledDotProductAttention(x, x, x, { mask: 1n as never })).toThrow(
      all(SDPA, 'mask', 'bigint'),
    );
  });

  it('formatValue never throws', () => {
    const throwing = new Proxy(
      {},
      {
        ownKeys() {
          throw new Error('no keys');
        },
        get() {
          throw new Error('no get');
        },
      },
    );
    const getter = {
      get bad() {
        throw new Error('getter');
      },
    };
    const values: unknown[] = [
      1n,
      Symbol('s'),
      () => 1,
      circular(),
      Object.create(null),
      throwing,
      getter,
      new Float32Array(3),
      new Map(),
      'x'.repeat(1e6),
      new Array(1e6).fill(1),
      undefined,
      null,
      -0,
      Number.NaN,
    ];
    for (const v of values) {
      const s = formatValue(v);
      expect(typeof s).toBe('string');
      expect(s.length).toBeLessThan(200);
    }
    expect(formatValue('2')).toBe('"2"');
    expect(formatValue([1.5, 0])).toBe('[1.5,0]');
    expect(formatValue(-0)).toBe('-0');
    expect(formatValue({ a: 1, b: 'c' })).toBe('{"a":1,"b":"c"}');
  });

  it('Tensor names itself for a bigint dtype (and Tensor.to)', () => {
    expect(() => new Tensor(new Float32Array(1) as never, [1], 1n as never)).toThrow(
      all('Tensor:', 'dtype', '1n'),
    );
    expect(() => Tensor.zeros([1]).to(1n as never)).toThrow(all('Tensor.to:', 'dtype', '1n'));
  });

  it('a symbol seed is described, not re-thrown', () => {
    expect(() => new Generator(Symbol('s') as never)).toThrow(all('Generator:', 'seed', 'Symbol(s)'));
  });
});

describe('2. oversized shapes are refused up front, naming function, shape and bytes', () => {
  it('Tensor.zeros([1e6, 1e6])', () => {
    expect(() => Tensor.zeros([1e6, 1e6])).toThrow(
      all('Tensor.zeros:', '[1000000,1000000]', '1000000000000 elements', '4000000000000 bytes'),
    );
  });

  it('Tensor.randn, Tensor.rand and Tensor.full of a huge shape', () => {
    expect(() => Tensor.randn([1e5, 1e5], { seed: 0 })).toThrow(
      all('Tensor.randn:', '[100000,100000]', '40000000000 bytes'),
    );
    expect(() => Tensor.rand([1e5, 1e5], { seed: 0 })).toThrow(
      all('Tensor.rand:', '[100000,100000]', 'bytes'),
    );
    expect(() => Tensor.full([1e5, 1e5], 1)).toThrow(all('Tensor.full:', '[100000,100000]', 'bytes'));
  });

  it('scaledDotProductAttention whose output would exceed a typed array', () => {
    const L = 2 ** 17;
    const q = Tensor.zeros([L, 1]);
    const k = Tensor.zeros([1, 1]);
    const v = Tensor.zeros([1, L]);
    expect(() => scaledDotProductAttention(q, k, v)).toThrow(
      all(SDPA, 'output', '[131072,131072]', '68719476736 bytes', 'query [131072,1]', 'value [1,131072]'),
    );
  });

  it('attentionWeights whose weights would exceed a typed array', () => {
    const q = Tensor.zeros([2 ** 17, 1]);
    expect(() => attentionWeights(q, q)).toThrow(
      all('attentionWeights:', 'weights', '[131072,131072]', '68719476736 bytes', 'query [131072,1]'),
    );
  });

  it('layers whose parameters would exceed a typed array name the layer and the parameter', () => {
    expect(() => new MultiHeadAttention({ embedDim: 2 ** 17, numHeads: 1 })).toThrow(
      all('MultiHeadAttention:', 'qProjWeight', '[131072,131072]', '68719476736 bytes'),
    );
    expect(() => new SelfAttention({ dModel: 2 ** 17, dK: 1, dV: 2 ** 17 })).toThrow(
      all('SelfAttention:', 'WV', '[131072,131072]', 'bytes'),
    );
    const config = {
      vocabSize: 2 ** 20,
      dModel: 2 ** 13,
      numHeads: 1,
      numLayers: 1,
      dFF: 1,
      maxLen: 1,
      causal: true,
    };
    expect(() => new TinyTransformer(config)).toThrow(
      all('TinyTransformer:', 'embedding.weight', '[1048576,8192]', '34359738368 bytes'),
    );
  });

  it('SelfAttention.forward whose attention weights would exceed a typed array', () => {
    const attn = new SelfAttention({ dModel: 1, dK: 1, dV: 1, seed: 0 });
    expect(() => attn.forward(Tensor.zeros([70_000, 1]))).toThrow(
      all('SelfAttention.forward:', 'weights', '[70000,70000]', '19600000000 bytes', 'X [70000,1]'),
    );
  });
});

describe('3. nesting depth is bounded', () => {
  const deep = (depth: number): NestedArray => {
    let a: NestedArray = 1;
    for (let i = 0; i < depth; i++) a = [a];
    return a;
  };

  it('Tensor.from of 20,000-deep arrays says the rank is too high', () => {
    expect(() => Tensor.from(deep(20_000))).toThrow(all('Tensor.from:', 'deeper than 64', 'rank'));
  });

  it('Tensor.from of 64-deep arrays still works', () => {
    expect(Tensor.from(deep(64)).rank).toBe(64);
  });

  it('a nested-array mask that is too deep names the caller and the argument', () => {
    expect(sdpaWith({ mask: deep(20_000) })).toThrow(
      all(SDPA, 'mask is not a valid tensor', 'deeper than 64'),
    );
  });

  it('a self-containing array ends with the depth error instead of looping', () => {
    const a: unknown[] = [];
    a.push(a);
    expect(() => Tensor.from(a as NestedArray)).toThrow(all('Tensor.from:', 'deeper than 64'));
  });

  it('a shape of rank > 64 is refused by the constructor and the factories', () => {
    const shape = new Array(20_000).fill(1);
    const err = thrown(() => new Tensor(new Float32Array(1), shape));
    expect(err.message).toMatch(all('Tensor:', 'rank 20000', '64'));
    expect(err.message.length).toBeLessThan(400);
    expect(() => Tensor.zeros(new Array(65).fill(1))).toThrow(all('Tensor.zeros:', 'rank 65', '64'));
    expect(Tensor.zeros(new Array(64).fill(1)).rank).toBe(64);
  });
});

describe('4. every numeric Trainer option is checked', () => {
  const make = (options: Partial<Record<keyof TrainerOptions, unknown>>) => () =>
    new Trainer({ task: 'copy', ...options } as TrainerOptions);

  it('steps: NaN, 0, −5, 2.5 and "5" are refused', () => {
    for (const steps of [Number.NaN, 0, -5, 2.5, '5', Number.POSITIVE_INFINITY]) {
      expect(make({ steps }), String(steps)).toThrow(all('Trainer:', 'steps must be a positive integer'));
    }
    expect(make({ steps: Number.NaN })).toThrow(all('Trainer:', 'got NaN'));
  });

  it('batchSize, lr, warmup, weightDecay, clip and seed are checked', () => {
    expect(make({ batchSize: 0 })).toThrow(all('Trainer:', 'batchSize must be a positive integer', 'got 0'));
    expect(make({ batchSize: 1.5 })).toThrow(all('Trainer:', 'batchSize', '1.5'));
    for (const lr of [Number.NaN, 0, -1e-3, Number.POSITIVE_INFINITY, '1e-3']) {
      expect(make({ lr }), String(lr)).toThrow(all('Trainer:', 'lr must be a finite number > 0'));
    }
    expect(make({ warmup: -1 })).toThrow(all('Trainer:', 'warmup must be a non-negative integer', '-1'));
    expect(make({ warmup: 2.5 })).toThrow(all('Trainer:', 'warmup', '2.5'));
    for (const scheduleSteps of [0, Number.NaN, '5', null]) {
      expect(make({ steps: 4, scheduleSteps }), String(scheduleSteps)).toThrow(
        all('Trainer:', 'scheduleSteps must be a positive integer'),
      );
    }
    expect(make({ steps: 4, scheduleSteps: 3 })).toThrow(
      all('Trainer:', 'scheduleSteps 3 is less than steps 4'),
    );
    for (const minLr of [-1e-4, Number.NaN, Number.POSITIVE_INFINITY, '0']) {
      expect(make({ minLr }), String(minLr)).toThrow(all('Trainer:', 'minLr must be a finite number ≥ 0'));
    }
    expect(make({ lr: 1e-3, minLr: 2e-3 })).toThrow(all('Trainer:', 'minLr 0.002 is more than lr 0.001'));
    expect(make({ weightDecay: -0.1 })).toThrow(all('Trainer:', 'weightDecay must be a finite number ≥ 0'));
    expect(make({ weightDecay: Number.NaN })).toThrow(all('Trainer:', 'weightDecay', 'NaN'));
    expect(make({ clip: 0 })).toThrow(all('Trainer:', 'clip must be a number > 0'));
    expect(make({ clip: Number.NaN })).toThrow(all('Trainer:', 'clip', 'NaN'));
    expect(make({ seed: Number.NaN })).toThrow(all('Trainer:', 'seed must be a finite number', 'NaN'));
  });

  it('bad task defaults are named as such', () => {
    const copy = new Trainer({ task: 'copy', steps: 1 }).task;
    const task = { ...copy, batch: copy.batch, defaults: { ...copy.defaults, steps: Number.NaN } };
    expect(() => new Trainer({ task })).toThrow(all('Trainer:', 'steps', 'NaN', "task's defaults"));
  });

  it('an unknown option or a non-object is refused', () => {
    expect(make({ stpes: 5 } as never)).toThrow(all('Trainer:', "unknown option 'stpes'"));
    expect(() => new Trainer(null as never)).toThrow(all('Trainer:', 'options must be an object'));
  });

  it('valid options (undefined = the default, clip Infinity, warmup 0) are accepted and finish', () => {
    const trainer = new Trainer({
      task: 'copy',
      steps: 1,
      batchSize: 2,
      warmup: 0,
      clip: Infinity,
      lr: undefined,
    });
    expect(trainer.done).toBe(false);
    trainer.trainStep();
    expect(trainer.done).toBe(true);
  });
});

describe('5. types and ranges of layer options', () => {
  const config: TransformerConfig = {
    vocabSize: 10,
    dModel: 8,
    numHeads: 2,
    numLayers: 1,
    dFF: 16,
    maxLen: 6,
    causal: true,
  };
  const TT = 'TinyTransformer:';
  const FWD = 'TinyTransformer.forward:';

  it('TinyTransformer.forward(ids, −1, −2) is refused', () => {
    const model = new TinyTransformer(config);
    expect(() => model.forward(new Int32Array(2), -1, -2)).toThrow(all(FWD, 'B must be', 'got -1'));
    expect(() => model.forward(new Int32Array(2), 1, 2.5)).toThrow(all(FWD, 'L must be', '2.5'));
  });

  it('TinyTransformer.forward checks ids and its options', () => {
    const model = new TinyTransformer(config);
    expect(() => model.forward([0, 1] as never, 1, 2)).toThrow(all(FWD, 'ids must be an Int32Array'));
    expect(() => model.forward(Int32Array.of(0, 10), 1, 2)).toThrow(all(FWD, 'ids[1] = 10', 'vocabSize=10'));
    expect(() => model.forward(Int32Array.of(-1, 0), 1, 2)).toThrow(all(FWD, 'ids[0] = -1'));
    const ids = Int32Array.of(0, 1);
    expect(() => model.forward(ids, 1, 2, { training: 'yes' as never })).toThrow(
      all(FWD, 'training must be true or false', '"yes"'),
    );
    expect(() => model.forward(ids, 1, 2, { needWeights: 1 as never })).toThrow(
      all(FWD, 'needWeights must be true or false', 'got 1'),
    );
    expect(() => model.forward(ids, 1, 2, { generator: {} as never })).toThrow(
      all(FWD, 'generator must be a Generator'),
    );
    expect(() => model.forward(ids, 1, 2, { mask: [[1, 1]] as never })).toThrow(
      all(FWD, 'mask must be a Tensor'),
    );
    expect(() => model.forward(ids, 1, 2, { needweights: true } as never)).toThrow(
      all(FWD, "unknown option 'needweights'"),
    );
  });

  it('TinyTransformer config: dropout, causal, scaleScores and the constructor options', () => {
    for (const dropout of [2, 1, -0.1, Number.NaN, '0.1']) {
      expect(() => new TinyTransformer({ ...config, dropout: dropout as number }), String(dropout)).toThrow(
        all(TT, 'dropout must be a number in [0, 1)'),
      );
    }
    expect(() => new TinyTransformer({ ...config, causal: 'yes' as never })).toThrow(
      all(TT, 'causal must be true or false', '"yes"'),
    );
    expect(() => new TinyTransformer({ ...config, scaleScores: 0 as never })).toThrow(
      all(TT, 'scaleScores must be true or false', 'got 0'),
    );
    expect(() => new TinyTransformer({ ...config, dModel: Symbol('d') as never })).toThrow(
      all(TT, 'dModel must be a positive integer', 'Symbol(d)'),
    );
    expect(() => new TinyTransformer(config, { seed: Number.NaN })).toThrow(all(TT, 'seed', 'NaN'));
    expect(() => new TinyTransformer(config, { dtype: 'float16' as never })).toThrow(
      all(TT, "dtype must be 'float32' or 'float64'", '"float16"'),
    );
    expect(() => new TinyTransformer(null as never)).toThrow(all(TT, 'config must be an object'));
  });

  it("MultiHeadAttention({ bias: 'no' }) and its seed and generator", () => {
    expect(() => new MultiHeadAttention({ embedDim: 8, numHeads: 2, bias: 'no' as never })).toThrow(
      all('MultiHeadAttention:', 'bias must be true or false', '"no"'),
    );
    expect(() => new MultiHeadAttention({ embedDim: 8, numHeads: 2, seed: Number.NaN })).toThrow(
      all('MultiHeadAttention:', 'seed must be a finite number', 'NaN'),
    );
    expect(() => new MultiHeadAttention({ embedDim: 8, numHeads: 2, generator: {} as never })).toThrow(
      all('MultiHeadAttention:', 'generator must be a Generator'),
    );
    expect(() => new MultiHeadAttention({ embedDim: 1n as never, numHeads: 2 })).toThrow(
      all('MultiHeadAttention:', 'embedDim must be a positive integer', '1n'),
    );
  });

  it("applyRope(x, { interleaved: 'yes' }) and its other options", () => {
    const x = Tensor.randn([4, 8], { seed: 0 });
    expect(() => applyRope(x, { interleaved: 'yes' as never })).toThrow(
      all('applyRope:', 'interleaved must be true or false', '"yes"'),
    );
    expect(() => applyRope(x, null as never)).toThrow(all('applyRope:', 'options must be an object'));
    expect(() => applyRope(x, { base: 1n as never })).toThrow(all('applyRope:', 'base', '1n'));
    expect(() => applyRope(x, { offset: 1.5 })).toThrow(all('applyRope:', 'offset', '1.5'));
  });

  it('SelfAttention: forward scale follows scaledDotProductAttention; seed and generator are checked', () => {
    const attn = new SelfAttention({ dModel: 8, dK: 4, dV: 4, seed: 0 });
    const X = Tensor.randn([3, 8], { seed: 1 });
    for (const scale of [Number.NaN, Number.POSITIVE_INFINITY, '2', 1n]) {
      expect(() => attn.forward(X, undefined, { scale: scale as number }), String(scale)).toThrow(
        all('SelfAttention.forward:', 'scale must be a finite number'),
      );
    }
    // Any finite scale is accepted, as scaledDotProductAttention accepts it (PyTorch's `scale` too).
    const negative = attn.forward(X, undefined, { scale: -1 });
    expect(negative.attentionWeights.data.every(Number.isFinite)).toBe(true);
    expect(() => attn.forward(X, undefined, { causal: 'yes' as never })).toThrow(
      all('SelfAttention.forward:', 'causal must be'),
    );
    expect(() => new SelfAttention({ dModel: 8, dK: 4, dV: 4, seed: Number.NaN })).toThrow(
      all('SelfAttention:', 'seed must be a finite number', 'NaN'),
    );
    expect(() => new SelfAttention({ dModel: 8, dK: 4, dV: 4, generator: 3 as never })).toThrow(
      all('SelfAttention:', 'generator must be a Generator', 'got 3'),
    );
  });

  it('Tensor.randn(shape, { std: NaN }) and the other random options', () => {
    expect(() => Tensor.randn([2], { std: Number.NaN })).toThrow(
      all('Tensor.randn:', 'std must be a finite number ≥ 0', 'NaN'),
    );
    expect(() => Tensor.randn([2], { std: -1 })).toThrow(all('Tensor.randn:', 'std', '-1'));
    expect(() => Tensor.randn([2], { mean: Number.POSITIVE_INFINITY })).toThrow(
      all('Tensor.randn:', 'mean must be a finite number', 'Infinity'),
    );
    expect(() => Tensor.randn([2], { seed: Number.NaN })).toThrow(all('Tensor.randn:', 'seed', 'NaN'));
    expect(() => Tensor.randn([2], { sd: 2 } as never)).toThrow(all('Tensor.randn:', "unknown option 'sd'"));
    expect(() => Tensor.rand([2], { low: Number.NaN })).toThrow(
      all('Tensor.rand:', 'low must be a finite number'),
    );
    expect(() => Tensor.rand([2], { low: 1, high: 0 })).toThrow(all('Tensor.rand:', 'low=1', 'high=0'));
    expect(() => Tensor.rand([2], { generator: {} as never })).toThrow(
      all('Tensor.rand:', 'generator must be a Generator'),
    );
    expect(() => Tensor.full([2], '1' as never)).toThrow(
      all('Tensor.full:', 'value must be a number', '"1"'),
    );
    expect(Tensor.full([2], Number.NEGATIVE_INFINITY).data[0]).toBe(Number.NEGATIVE_INFINITY);
    expect(Tensor.randn([3], { std: 0, mean: 2 }).data.every((v) => v === 2)).toBe(true);
  });

  it('fromHalfBits(70000) and toHalfBits(1n) are refused', () => {
    for (const h of [70000, -1, 1.5, Number.NaN, '1']) {
      expect(() => fromHalfBits(h as number), String(h)).toThrow(
        all('fromHalfBits:', 'must be an integer in [0, 65535]'),
      );
    }
    expect(fromHalfBits(0x3c00)).toBe(1);
    expect(fromHalfBits(0xffff)).toBeNaN();
    expect(() => toHalfBits(1n as never)).toThrow(all('toHalfBits:', 'x must be a number', '1n'));
    expect(toHalfBits(Number.NaN)).toBe(0x7e00);
  });

  it('manualSeed names itself', () => {
    expect(() => manualSeed(Number.NaN)).toThrow(all('manualSeed:', 'seed', 'NaN'));
  });
});

describe('6. tensors over resizable or growable buffers', () => {
  it('a resizable ArrayBuffer shrunk after construction leaves the tensor intact', () => {
    const rab = new (ArrayBuffer as unknown as new (n: number, o: object) => ArrayBuffer)(16, {
      maxByteLength: 64,
    });
    const tracking = new Float32Array(rab); // length-tracking view
    tracking.set([1, 2, 3, 4]);
    const t = new Tensor(tracking, [2, 2]);
    const fixed = new Tensor(new Float32Array(rab, 0, 4), [4]);
    (rab as unknown as { resize(n: number): void }).resize(4);
    expect(t.size).toBe(4);
    expect(t.toArray()).toEqual([
      [1, 2],
      [3, 4],
    ]);
    expect(Array.from(fixed.data)).toEqual([1, 2, 3, 4]);
    expect(scaledDotProductAttention(t, t, t).data.every(Number.isFinite)).toBe(true);
  });

  it('a growable SharedArrayBuffer grown after construction keeps the size and stays shared', () => {
    const gsab = new (SharedArrayBuffer as unknown as new (n: number, o: object) => SharedArrayBuffer)(16, {
      maxByteLength: 64,
    });
    const tracking = new Float32Array(gsab);
    const t = new Tensor(tracking, [4]);
    (gsab as unknown as { grow(n: number): void }).grow(32);
    expect(tracking.length).toBe(8);
    expect(t.size).toBe(4);
    expect(t.data.length).toBe(4);
    tracking[1] = 5; // still the same memory: a shared buffer is for sharing
    expect(t.get(1)).toBe(5);
  });

  it('a fixed-size buffer is still wrapped, not copied', () => {
    const data = new Float32Array(4);
    const t = new Tensor(data, [4]);
    data[0] = 7;
    expect(t.get(0)).toBe(7);
    expect(t.data).toBe(data);
  });
});
