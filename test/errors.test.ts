// Bad inputs: every error names the function, the argument and the shapes involved (formatted [2,3,5,8]).
// Also: NaN in an input propagates to the output, while masking alone never creates NaN.

import { describe, expect, it } from 'vitest';
import {
  type AttentionOptions,
  alibiSlopes,
  applyRope,
  attentionWeights,
  MultiHeadAttention,
  SelfAttention,
  scaledDotProductAttention,
  sinusoidalPositionalEncoding,
  Tensor,
  type TensorLike,
} from '../src/index.js';

/** A regex that matches a message containing every part (in any order), each taken literally. */
function all(...parts: string[]): RegExp {
  const esc = (p: string) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`^${parts.map((p) => `(?=[\\s\\S]*${esc(p)})`).join('')}`);
}

const t = (shape: number[], seed = 0) => Tensor.randn(shape, { seed });
const sdpa = (q: TensorLike, k: TensorLike, v: TensorLike, o?: AttentionOptions) => () =>
  scaledDotProductAttention(q, k, v, o);

const SDPA = 'scaledDotProductAttention:';

describe('scaledDotProductAttention rejects bad input, naming function, argument and shapes', () => {
  it('query of rank 1', () => {
    expect(sdpa(t([8]), t([8]), t([8]))).toThrow(
      all(SDPA, 'query must have rank 2', 'got rank 1', 'query [8]', 'key [8]', 'value [8]'),
    );
  });

  it('query of rank 5', () => {
    const x = t([1, 2, 3, 5, 8]);
    expect(sdpa(x, x, x)).toThrow(all(SDPA, 'query', 'got rank 5', 'query [1,2,3,5,8]', 'key [1,2,3,5,8]'));
  });

  it('key rank differs from query rank', () => {
    expect(sdpa(t([2, 3, 5, 8]), t([3, 5, 8]), t([3, 5, 8]))).toThrow(
      all(SDPA, 'key has rank 3 but query has rank 4', 'query [2,3,5,8]', 'key [3,5,8]', 'value [3,5,8]'),
    );
  });

  it('value rank differs from query rank', () => {
    expect(sdpa(t([2, 3, 5, 8]), t([2, 3, 5, 8]), t([3, 5, 8]))).toThrow(
      all(SDPA, 'value has rank 3 but query has rank 4', 'query [2,3,5,8]', 'value [3,5,8]'),
    );
  });

  it('query and key with different E', () => {
    expect(sdpa(t([2, 3, 5, 8]), t([2, 3, 5, 16]), t([2, 3, 5, 8]))).toThrow(
      all(SDPA, 'key has E=16 but query has E=8', 'query [2,3,5,8]', 'key [2,3,5,16]'),
    );
  });

  it('query and key with E = 0', () => {
    expect(sdpa(t([5, 0]), t([4, 0]), t([4, 3]))).toThrow(all(SDPA, 'E=0', 'query [5,0]', 'key [4,0]'));
  });

  it('key and value with different S', () => {
    expect(sdpa(t([2, 3, 5, 8]), t([2, 3, 5, 8]), t([2, 3, 6, 8]))).toThrow(
      all(SDPA, 'value has S=6 but key has S=5', 'key [2,3,5,8]', 'value [2,3,6,8]'),
    );
  });

  it('key batch differs from query batch', () => {
    expect(sdpa(t([2, 5, 8]), t([3, 5, 8]), t([3, 5, 8]))).toThrow(
      all(SDPA, 'key has batch 3 but query has batch 2', 'query [2,5,8]', 'key [3,5,8]'),
    );
  });

  it('value batch differs from query batch', () => {
    expect(sdpa(t([2, 3, 5, 8]), t([2, 3, 5, 8]), t([1, 3, 5, 8]))).toThrow(
      all(SDPA, 'value has batch 1 but query has batch 2', 'query [2,3,5,8]', 'value [1,3,5,8]'),
    );
  });

  it('value heads differ from key heads', () => {
    expect(sdpa(t([2, 4, 5, 8]), t([2, 2, 5, 8]), t([2, 4, 5, 8]))).toThrow(
      all(SDPA, 'value has 4 heads but key has 2', 'key [2,2,5,8]', 'value [2,4,5,8]'),
    );
  });

  it('query heads not a multiple of key/value heads', () => {
    expect(sdpa(t([2, 3, 5, 8]), t([2, 2, 5, 8]), t([2, 2, 5, 8]))).toThrow(
      all(SDPA, 'Hq=3', 'not a multiple', 'Hkv=2', 'query [2,3,5,8]', 'key [2,2,5,8]'),
    );
  });

  it('mask that does not broadcast to [..., L, S]', () => {
    expect(sdpa(t([2, 3, 5, 8]), t([2, 3, 6, 8]), t([2, 3, 6, 8]), { mask: Tensor.full([4, 4], 1) })).toThrow(
      all(SDPA, 'mask of shape [4,4]', 'does not broadcast to [..., L, S] = [2,3,5,6]', 'query [2,3,5,8]'),
    );
  });

  it('mask with more axes than the weights', () => {
    expect(sdpa(t([5, 8]), t([6, 8]), t([6, 8]), { mask: Tensor.full([1, 1, 5, 6], 1) })).toThrow(
      all(SDPA, 'mask of shape [1,1,5,6]', '[..., L, S] = [5,6]'),
    );
  });

  it('bias that does not broadcast to [..., L, S]', () => {
    expect(sdpa(t([2, 5, 8]), t([2, 6, 8]), t([2, 6, 8]), { bias: Tensor.zeros([3, 5, 6]) })).toThrow(
      all(SDPA, 'bias of shape [3,5,6]', 'does not broadcast to [..., L, S] = [2,5,6]', 'key [2,6,8]'),
    );
  });

  it('mask given as ragged nested arrays', () => {
    expect(sdpa(t([2, 2]), t([2, 2]), t([2, 2]), { mask: [[1, 0], [1]] })).toThrow(
      all(SDPA, 'mask is not a valid tensor', 'ragged'),
    );
  });

  it('query that is not a tensor', () => {
    expect(sdpa('abc' as unknown as TensorLike, t([2, 2]), t([2, 2]))).toThrow(
      all(SDPA, 'query must be a Tensor or nested number arrays', 'string'),
    );
  });

  it('scale NaN', () => {
    const x = t([2, 4]);
    expect(sdpa(x, x, x, { scale: Number.NaN })).toThrow(all(SDPA, 'scale must be a finite number', 'NaN'));
  });

  it('scale Infinity', () => {
    const x = t([2, 4]);
    expect(sdpa(x, x, x, { scale: Number.POSITIVE_INFINITY })).toThrow(
      all(SDPA, 'scale must be a finite number', 'Infinity'),
    );
  });

  it('window of length 3', () => {
    const x = t([2, 4]);
    const window = [1, 2, 3] as unknown as [number, number];
    expect(sdpa(x, x, x, { window })).toThrow(all(SDPA, 'window must be [left, right]', '[1,2,3]'));
  });

  it('window with −2', () => {
    const x = t([2, 4]);
    expect(sdpa(x, x, x, { window: [-2, 0] })).toThrow(all(SDPA, 'window', '[-2,0]'));
  });

  it('window with a non-integer', () => {
    const x = t([2, 4]);
    expect(sdpa(x, x, x, { window: [1.5, 0] })).toThrow(all(SDPA, 'window', 'integers', '[1.5,0]'));
  });

  it("causal 'yes'", () => {
    const x = t([2, 4]);
    const causal = 'yes' as unknown as boolean;
    expect(sdpa(x, x, x, { causal })).toThrow(
      all(SDPA, "causal must be true, false, 'bottom-right' or 'top-left'", '"yes"'),
    );
  });

  it('an unknown option name (casual)', () => {
    const x = t([2, 4]);
    const options = { casual: true } as unknown as AttentionOptions;
    expect(sdpa(x, x, x, options)).toThrow(all(SDPA, "unknown option 'casual'", 'causal'));
  });

  it('options that are not an object', () => {
    const x = t([2, 4]);
    expect(sdpa(x, x, x, null as unknown as AttentionOptions)).toThrow(
      all(SDPA, 'options must be an object'),
    );
  });
});

describe('attentionWeights names itself in its errors', () => {
  const AW = 'attentionWeights:';

  it('query and key with different E', () => {
    expect(() => attentionWeights(t([2, 3, 5, 8]), t([2, 3, 5, 16]))).toThrow(
      all(AW, 'key has E=16 but query has E=8', 'query [2,3,5,8]', 'key [2,3,5,16]'),
    );
  });

  it('wrong rank', () => {
    expect(() => attentionWeights(t([8]), t([8]))).toThrow(all(AW, 'got rank 1', 'query [8]', 'key [8]'));
  });

  it('mask that does not broadcast', () => {
    expect(() => attentionWeights(t([5, 8]), t([6, 8]), { mask: Tensor.full([5, 5], 1) })).toThrow(
      all(AW, 'mask of shape [5,5]', '[..., L, S] = [5,6]'),
    );
  });

  it('unknown option', () => {
    const options = { casual: true } as unknown as AttentionOptions;
    expect(() => attentionWeights(t([5, 8]), t([6, 8]), options)).toThrow(all(AW, "unknown option 'casual'"));
  });

  it('does not mention scaledDotProductAttention', () => {
    expect(() => attentionWeights(t([5, 8]), t([6, 4]))).not.toThrow(/scaledDotProductAttention/);
    expect(() => attentionWeights(t([5, 8]), t([6, 4]))).toThrow(/^attentionWeights:/);
  });
});

describe('MultiHeadAttention rejects bad input', () => {
  const CTOR = 'MultiHeadAttention:';
  const FWD = 'MultiHeadAttention.forward:';
  const LOAD = 'MultiHeadAttention.loadStateDict:';

  it('embedDim not divisible by numHeads', () => {
    expect(() => new MultiHeadAttention({ embedDim: 10, numHeads: 3 })).toThrow(
      all(CTOR, 'embedDim=10', 'not divisible by numHeads=3'),
    );
  });

  it('numHeads not a multiple of numKvHeads', () => {
    expect(() => new MultiHeadAttention({ embedDim: 8, numHeads: 4, numKvHeads: 3 })).toThrow(
      all(CTOR, 'numHeads=4', 'not a multiple of numKvHeads=3'),
    );
  });

  it('non-integer embedDim', () => {
    expect(() => new MultiHeadAttention({ embedDim: 8.5, numHeads: 1 })).toThrow(
      all(CTOR, 'embedDim must be a positive integer', '8.5'),
    );
  });

  it('zero numHeads', () => {
    expect(() => new MultiHeadAttention({ embedDim: 8, numHeads: 0 })).toThrow(
      all(CTOR, 'numHeads must be a positive integer', 'got 0'),
    );
  });

  it('unknown constructor option', () => {
    const options = { embedDim: 8, numHeads: 2, numHead: 2 } as unknown as {
      embedDim: number;
      numHeads: number;
    };
    expect(() => new MultiHeadAttention(options)).toThrow(all(CTOR, "unknown option 'numHead'"));
  });

  const mha = () => new MultiHeadAttention({ embedDim: 8, numHeads: 2, seed: 0 });
  const mhaKv = () => new MultiHeadAttention({ embedDim: 8, numHeads: 2, kdim: 4, vdim: 6, seed: 0 });

  it('forward with the wrong query width', () => {
    const q = t([2, 5, 6]);
    expect(() => mha().forward(q, t([2, 5, 8]), t([2, 5, 8]))).toThrow(
      all(FWD, 'query has width 6 but embedDim=8', 'query [2,5,6]', 'key [2,5,8]', 'value [2,5,8]'),
    );
  });

  it('forward with a key width ≠ kdim', () => {
    expect(() => mhaKv().forward(t([2, 5, 8]), t([2, 7, 5]), t([2, 7, 6]))).toThrow(
      all(FWD, 'key has width 5 but kdim=4', 'query [2,5,8]', 'key [2,7,5]', 'value [2,7,6]'),
    );
  });

  it('forward with a value width ≠ vdim', () => {
    expect(() => mhaKv().forward(t([2, 5, 8]), t([2, 7, 4]), t([2, 7, 4]))).toThrow(
      all(FWD, 'value has width 4 but vdim=6', 'value [2,7,4]'),
    );
  });

  it('forward with value S ≠ key S', () => {
    expect(() => mhaKv().forward(t([2, 5, 8]), t([2, 7, 4]), t([2, 6, 6]))).toThrow(
      all(FWD, 'value has S=6 but key has S=7', 'key [2,7,4]', 'value [2,6,6]'),
    );
  });

  it('forward with a batch mismatch', () => {
    expect(() => mha().forward(t([2, 5, 8]), t([3, 5, 8]), t([3, 5, 8]))).toThrow(
      all(FWD, 'batch', 'query [2,5,8]', 'key [3,5,8]', 'value [3,5,8]'),
    );
  });

  it('forward with a key rank ≠ query rank', () => {
    expect(() => mha().forward(t([2, 5, 8]), t([5, 8]), t([5, 8]))).toThrow(
      all(FWD, 'key has rank 2 but query has rank 3', 'query [2,5,8]', 'key [5,8]'),
    );
  });

  it('forward with a query of rank 4', () => {
    const x = t([1, 2, 5, 8]);
    expect(() => mha().forward(x, x, x)).toThrow(all(FWD, 'query must be [B, L, D] or [L, D]', 'rank 4'));
  });

  it('forward with a mask that does not broadcast', () => {
    const x = t([2, 5, 8]);
    expect(() => mha().forward(x, x, x, { mask: Tensor.full([3, 3], 1) })).toThrow(
      all(FWD, 'mask of shape [3,3]', 'does not broadcast to [B, H, L, S] = [2,2,5,5]', 'query [2,5,8]'),
    );
  });

  it('forward with the scale option (not a forward option)', () => {
    const x = t([2, 5, 8]);
    const options = { scale: 1 } as unknown as { causal: boolean };
    expect(() => mha().forward(x, x, x, options)).toThrow(all(FWD, "unknown option 'scale'"));
  });

  const LISTING = 'in_proj_weight [24,8], in_proj_bias [24], out_proj.weight [8,8], out_proj.bias [8]';

  it('loadStateDict with an unknown name', () => {
    const m = mha();
    const dict: Record<string, TensorLike> = { ...m.stateDict(), 'in_proj.weight': Tensor.zeros([24, 8]) };
    expect(() => m.loadStateDict(dict)).toThrow(all(LOAD, 'unknown in_proj.weight', LISTING));
  });

  it('loadStateDict with a missing name', () => {
    const m = mha();
    const dict: Record<string, TensorLike> = m.stateDict();
    delete dict['out_proj.bias'];
    expect(() => m.loadStateDict(dict)).toThrow(all(LOAD, 'missing out_proj.bias', LISTING));
  });

  it('loadStateDict with a wrong shape', () => {
    const m = mha();
    const dict: Record<string, TensorLike> = { ...m.stateDict(), in_proj_weight: Tensor.zeros([8, 24]) };
    expect(() => m.loadStateDict(dict)).toThrow(
      all(LOAD, 'in_proj_weight has shape [8,24], expected [24,8]', LISTING),
    );
  });

  it('loadStateDict on an unpacked (kdim/vdim) module lists the separate projections', () => {
    const m = mhaKv();
    const dict: Record<string, TensorLike> = { ...m.stateDict(), k_proj_weight: Tensor.zeros([8, 8]) };
    expect(() => m.loadStateDict(dict)).toThrow(
      all(
        LOAD,
        'k_proj_weight has shape [8,8], expected [8,4]',
        'q_proj_weight [8,8]',
        'v_proj_weight [8,6]',
      ),
    );
  });

  it('loadStateDict leaves the module unchanged when it throws', () => {
    const m = mha();
    const before = m.stateDict();
    const dict: Record<string, TensorLike> = {
      ...m.stateDict(),
      in_proj_weight: Tensor.full([24, 8], 7),
      'out_proj.bias': Tensor.zeros([9]),
    };
    expect(() => m.loadStateDict(dict)).toThrow(all(LOAD, 'out_proj.bias has shape [9], expected [8]'));
    const after = m.stateDict();
    for (const name of Object.keys(before)) expect(after[name].data, name).toEqual(before[name].data);
  });
});

describe('SelfAttention rejects bad input', () => {
  const attn = () => new SelfAttention({ dModel: 8, dK: 4, dV: 6, seed: 0 });

  it('forward with the wrong X width', () => {
    expect(() => attn().forward(t([4, 6]))).toThrow(
      all('SelfAttention.forward:', 'X must be [n, dModel] or [B, n, dModel] with dModel=8', 'got [4,6]'),
    );
  });

  it('forward with X of rank 1', () => {
    expect(() => attn().forward(t([8]))).toThrow(all('SelfAttention.forward:', 'X', 'got [8]'));
  });

  it('setting WQ with the wrong shape', () => {
    const a = attn();
    expect(() => {
      a.WQ = Tensor.zeros([4, 8]);
    }).toThrow(all('SelfAttention.WQ:', 'expected shape [8,4]', 'got [4,8]'));
  });

  it('setting WV with the wrong shape', () => {
    const a = attn();
    expect(() => {
      a.WV = Tensor.zeros([8, 4]);
    }).toThrow(all('SelfAttention.WV:', 'expected shape [8,6]', 'got [8,4]'));
  });

  it('forward with a mask that does not broadcast', () => {
    expect(() => attn().forward(t([4, 8]), Tensor.full([3, 3], 1))).toThrow(
      all('SelfAttention.forward:', 'mask of shape [3,3]', '[4,4]'),
    );
  });

  it('non-integer dModel', () => {
    expect(() => new SelfAttention({ dModel: 2.5, dK: 4, dV: 4 })).toThrow(
      all('SelfAttention:', 'dModel must be a positive integer', '2.5'),
    );
  });
});

describe('Tensor rejects bad input', () => {
  it('data length mismatch', () => {
    expect(() => new Tensor(new Float32Array(5), [2, 3])).toThrow(
      all('Tensor:', 'data has 5 elements', 'shape [2,3] needs 6'),
    );
  });

  it('negative size', () => {
    expect(() => new Tensor(new Float32Array(0), [2, -1])).toThrow(
      all('Tensor:', 'size -1 at axis 1', 'shape [2,-1]', 'not a non-negative integer'),
    );
  });

  it('non-integer size', () => {
    expect(() => new Tensor(new Float32Array(3), [2, 1.5])).toThrow(
      all('Tensor:', 'size 1.5 at axis 1', 'shape [2,1.5]'),
    );
  });

  it('plain array data', () => {
    expect(() => new Tensor([1, 2] as unknown as Float32Array, [2])).toThrow(
      all('Tensor:', 'data must be a Float32Array', 'an array', 'Tensor.from'),
    );
  });

  it('Float64Array data', () => {
    expect(() => new Tensor(new Float64Array(2) as unknown as Float32Array, [2])).toThrow(
      all('Tensor:', 'data must be a Float32Array', 'Float64Array'),
    );
  });

  it('Tensor.from with ragged arrays', () => {
    expect(() => Tensor.from([[1, 2], [3]])).toThrow(
      all('Tensor.from:', 'ragged', 'at [1]', 'expected an array of length 2', 'shape [2,2]', 'got length 1'),
    );
  });

  it('Tensor.from with a number where an array is expected', () => {
    expect(() => Tensor.from([[1, 2], 3] as unknown as number[][])).toThrow(
      all('Tensor.from:', 'ragged', 'at [1]', 'shape [2,2]', 'number'),
    );
  });

  it('Tensor.from with a non-number element', () => {
    expect(() => Tensor.from([[1, 'x']] as unknown as number[][])).toThrow(
      all('Tensor.from:', 'element at [0,1]', 'string', 'not a number'),
    );
  });

  it('reshape to a different size', () => {
    expect(() => Tensor.zeros([2, 3]).reshape([4, 2])).toThrow(all('Tensor.reshape:', '[2,3]', '[4,2]'));
  });
});

describe('position helpers reject bad input', () => {
  it('applyRope with odd E', () => {
    expect(() => applyRope(t([4, 5]))).toThrow(all('applyRope:', 'odd E=5', '[4,5]'));
  });

  it('applyRope with rank 1', () => {
    expect(() => applyRope(t([4]))).toThrow(all('applyRope:', 'x must be [..., L, E]', '[4]'));
  });

  it('sinusoidalPositionalEncoding with a negative length', () => {
    expect(() => sinusoidalPositionalEncoding(-1, 8)).toThrow(
      all('sinusoidalPositionalEncoding:', 'length must be a non-negative integer', '-1'),
    );
  });

  it('alibiSlopes(0)', () => {
    expect(() => alibiSlopes(0)).toThrow(all('alibiSlopes:', 'numHeads', '≥ 1', 'got 0'));
  });
});

describe('NaN propagates from inputs; masking alone never creates NaN', () => {
  const hasNaN = (x: Tensor) => x.data.some(Number.isNaN);

  it('a NaN in q makes its own output row NaN and leaves the other rows finite', () => {
    const q = t([2, 3, 4], 1);
    const k = t([2, 5, 4], 2);
    const v = t([2, 5, 3], 3);
    q.data[(1 * 3 + 2) * 4 + 1] = Number.NaN; // batch 1, row 2
    const out = scaledDotProductAttention(q, k, v);
    for (let r = 0; r < 6; r++) {
      const row = Array.from(out.data.subarray(r * 3, r * 3 + 3));
      if (r === 5) expect(row.every(Number.isNaN), `row ${r}`).toBe(true);
      else expect(row.every(Number.isFinite), `row ${r}`).toBe(true);
    }
    expect(hasNaN(attentionWeights(q, k))).toBe(true);
  });

  it('a NaN in a visible key or value reaches the output', () => {
    const q = t([3, 4], 1);
    const k = t([5, 4], 2);
    const v = t([5, 3], 3);
    const kNaN = k.clone();
    kNaN.data[0] = Number.NaN;
    expect(hasNaN(scaledDotProductAttention(q, kNaN, v))).toBe(true);
    const vNaN = v.clone();
    vNaN.data[4] = Number.NaN;
    expect(hasNaN(scaledDotProductAttention(q, k, vNaN))).toBe(true);
  });

  it('a NaN in the bias reaches the output', () => {
    const x = t([3, 4], 1);
    const bias = Tensor.zeros([3, 3]);
    bias.data[4] = Number.NaN;
    expect(hasNaN(scaledDotProductAttention(x, x, x, { bias }))).toBe(true);
  });

  it('fully blocked rows (mask, causal with L > S, empty window, −Infinity bias) are zeros, not NaN', () => {
    const q = t([2, 2, 6, 4], 1);
    const k = t([2, 2, 3, 4], 2);
    const v = t([2, 2, 3, 5], 3);
    const cases: AttentionOptions[] = [
      { mask: Tensor.zeros([6, 3]) },
      { mask: Tensor.zeros([2, 1, 1, 3]) },
      { causal: true },
      { causal: 'bottom-right', window: [0, 0] },
      { window: [0, 0] }, // p = i − 3 < 0 for the first three rows
      { bias: Tensor.full([6, 3], Number.NEGATIVE_INFINITY) },
      { mask: Tensor.zeros([6, 3]), bias: Tensor.full([6, 3], Number.NEGATIVE_INFINITY), causal: 'top-left' },
    ];
    for (const options of cases) {
      const out = scaledDotProductAttention(q, k, v, options);
      const w = attentionWeights(q, k, options);
      expect(hasNaN(out), JSON.stringify(Object.keys(options))).toBe(false);
      expect(hasNaN(w), JSON.stringify(Object.keys(options))).toBe(false);
      expect(out.data.every(Number.isFinite)).toBe(true);
    }
    const blocked = scaledDotProductAttention(q, k, v, { mask: Tensor.zeros([6, 3]) });
    expect(blocked.data.every((x) => x === 0)).toBe(true);
  });

  it('MultiHeadAttention with a fully blocked key padding mask gives finite output (the out-projection bias)', () => {
    const mha = new MultiHeadAttention({ embedDim: 8, numHeads: 2, seed: 0 });
    const x = t([2, 4, 8], 1);
    const { output, weights } = mha.forward(x, x, x, { mask: Tensor.zeros([2, 1, 1, 4]), needWeights: true });
    expect(hasNaN(output)).toBe(false);
    expect(weights?.data.every((w) => w === 0)).toBe(true);
  });
});

describe('layer errors name the caller’s own shapes', () => {
  it('MultiHeadAttention.forward: a mask that does not broadcast names query/key/value and [B, H, L, S]', () => {
    const mha = new MultiHeadAttention({ embedDim: 8, numHeads: 2, seed: 0 });
    const x = Tensor.randn([2, 5, 8], { seed: 1 });
    expect(() => mha.forward(x, x, x, { mask: Tensor.zeros([3, 3]) })).toThrow(
      'MultiHeadAttention.forward: mask of shape [3,3] does not broadcast to [B, H, L, S] = [2,2,5,5] (query [2,5,8], key [2,5,8], value [2,5,8])',
    );
  });
  it('MultiHeadAttention.loadStateDict(null) names the function', () => {
    const mha = new MultiHeadAttention({ embedDim: 8, numHeads: 2, seed: 0 });
    expect(() => mha.loadStateDict(null as never)).toThrow(
      /MultiHeadAttention.loadStateDict: dict must be an object/,
    );
  });
  it('SelfAttention.forward: a mask that does not broadcast names X and mask', () => {
    const attn = new SelfAttention({ dModel: 8, dK: 4, dV: 6, seed: 0 });
    expect(() => attn.forward(Tensor.randn([4, 8], { seed: 1 }), Tensor.zeros([3, 3]))).toThrow(
      'SelfAttention.forward: mask of shape [3,3] does not broadcast to [n, n] = [4,4] (X [4,8], mask [3,3])',
    );
  });
  it('a non-number scale says what it was', () => {
    const q = Tensor.randn([2, 4], { seed: 1 });
    expect(() => scaledDotProductAttention(q, q, q, { scale: '2' as never })).toThrow(/got "2" \(string\)/);
  });
});

describe('MultiHeadAttention parameters are checked when set', () => {
  it('a wrong shape or a bias on a bias-free layer throws, naming the parameter and shapes', () => {
    const mha = new MultiHeadAttention({ embedDim: 8, numHeads: 2, seed: 0 });
    expect(() => {
      mha.qProjWeight = Tensor.zeros([4, 8]);
    }).toThrow('MultiHeadAttention.qProjWeight: expected a float32 Tensor of shape [8,8], got float32 [4,8]');
    expect(() => {
      mha.inProjBias = Tensor.zeros([3]);
    }).toThrow(/inProjBias: expected a float32 Tensor of shape \[24\]/);
    const plain = new MultiHeadAttention({ embedDim: 8, numHeads: 2, bias: false, seed: 0 });
    expect(() => {
      plain.outProjBias = Tensor.zeros([8]);
    }).toThrow(/outProjBias: this layer was built with bias: false/);
    mha.qProjWeight = Tensor.zeros([8, 8]); // the right shape is accepted
    expect(mha.qProjWeight.data.every((x) => x === 0)).toBe(true);
  });
});
