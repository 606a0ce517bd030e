// The one block forward (src/model/block.ts) and the parameter table (src/model/params.ts): the Var ops and
// the Tensor ops compute the same block bit for bit, the observer sees what the block computes, and the
// table is what TinyTransformer, MultiHeadAttention, the checkpoint loader and the viz stack use.

import { describe, expect, it } from 'vitest';
import { constant, noGrad, type Var } from '../src/autograd/var.js';
import { MultiHeadAttention, Tensor } from '../src/index.js';
import {
  attentionSublayer,
  type BlockObserver,
  type BlockParams,
  transformerBlock,
} from '../src/model/block.js';
import { tensorOps } from '../src/model/ops-tensor.js';
import { varOps } from '../src/model/ops-var.js';
import {
  attentionParamSpecs,
  blockParamSpecs,
  blockParamsFrom,
  transformerParamSpecs,
  transformerTensorCount,
} from '../src/model/params.js';
import { TinyTransformer } from '../src/model/transformer.js';
import { seededStack, stackStateDict } from '../src/viz/stack.js';

const config = { vocabSize: 11, dModel: 16, numHeads: 4, numLayers: 2, dFF: 24, maxLen: 8, causal: false };
const model = new TinyTransformer(config, { seed: 7 });
const varParams = blockParamsFrom((n) => model.params.get(n), 'layers.1.');
const asTensor = (v: Var | undefined) => v && new Tensor(v.data as Float32Array, v.shape);
const tensorParams = blockParamsFrom((n) => asTensor(model.params.get(n)), 'layers.1.');
const x = Tensor.randn([2, 5, 16], { seed: 3 });
const mask = new Tensor(Float32Array.of(1, 1, 1, 0, 0, 1, 1, 1, 1, 1), [2, 1, 1, 5]);

describe('transformerBlock over Vars and over Tensors', () => {
  it('gives the same block output, bit for bit, with a padding mask and causal', () => {
    for (const attention of [
      { numHeads: 4, mask },
      { numHeads: 4, causal: true },
    ]) {
      const byVars = noGrad(() =>
        transformerBlock(varOps, varParams, constant(x.data, x.shape), { attention }),
      );
      const byTensors = transformerBlock(tensorOps, tensorParams, x, { attention });
      expect(byTensors.x.shape).toEqual([2, 5, 16]);
      expect([...byTensors.x.data]).toEqual([...byVars.x.data]);
    }
  });

  it('the observer sees LN1(x), q/k/v, the heads and the weights, in order, as the block used them', () => {
    const order: string[] = [];
    const seen: Record<string, Tensor | undefined> = {};
    const observer: BlockObserver<Tensor> = {
      normed: (h) => {
        order.push('normed');
        seen.normed = h;
      },
      projected: (q, k, v) => {
        order.push('projected');
        Object.assign(seen, { q, k, v });
      },
      attended: (heads, w) => {
        order.push('attended');
        Object.assign(seen, { heads, w });
      },
    };
    const attention = { numHeads: 4, needWeights: true };
    const block = transformerBlock(tensorOps, tensorParams, x, { attention, observer });
    expect(order).toEqual(['normed', 'projected', 'attended']);
    const p = tensorParams;
    expect([...seen.normed!.data]).toEqual([...tensorOps.layerNorm(x, p.norm1.weight, p.norm1.bias).data]);
    expect(seen.q!.shape).toEqual([2, 5, 16]);
    expect(seen.w!.shape).toEqual([2, 4, 5, 5]);
    expect(block.weights).toBe(seen.w);
    // The residual: x + out_proj(heads) + MLP(…), so out_proj(heads) is what the block added first.
    const attn = tensorOps.linear(seen.heads!, p.selfAttn.outProjWeight, p.selfAttn.outProjBias);
    const x1 = tensorOps.add(x, attn);
    const mlp = tensorOps.linear(
      tensorOps.gelu(
        tensorOps.linear(
          tensorOps.layerNorm(x1, p.norm2.weight, p.norm2.bias),
          p.linear1.weight,
          p.linear1.bias,
        ),
      ),
      p.linear2.weight,
      p.linear2.bias,
    );
    expect([...block.x.data]).toEqual([...tensorOps.add(x1, mlp).data]);
  });

  it("MultiHeadAttention (separate q/k/v) equals the block's packed sublayer on the same weights", () => {
    const mha = new MultiHeadAttention({ embedDim: 16, numHeads: 4 });
    const prefix = 'layers.1.self_attn.';
    mha.loadStateDict(
      Object.fromEntries(
        Object.entries(model.stateDict())
          .filter(([k]) => k.startsWith(prefix))
          .map(([k, v]) => [k.slice(prefix.length), v]),
      ),
    );
    const byVars = noGrad(() =>
      attentionSublayer(varOps, varParams.selfAttn, constant(x.data, x.shape), undefined, { numHeads: 4 }),
    );
    expect([...mha.forward(x).output.data]).toEqual([...byVars.out.data]);
  });

  it('a packed inProjWeight serves self-attention only', () => {
    expect(() =>
      attentionSublayer(tensorOps, tensorParams.selfAttn, x, { key: x, value: x }, { numHeads: 4 }),
    ).toThrow('attend: a packed inProjWeight serves self-attention only');
  });
});

describe('the parameter table', () => {
  it("lists TinyTransformer's parameters, in order, and counts them without listing", () => {
    expect(transformerParamSpecs(config).map((s) => [s.name, s.shape])).toEqual(
      [...model.params].map(([n, v]) => [n, [...v.shape]]),
    );
    for (const numLayers of [0, 1, 3]) {
      expect(transformerTensorCount({ ...config, numLayers })).toBe(
        transformerParamSpecs({ ...config, numLayers }).length,
      );
    }
    expect(transformerTensorCount({ ...config, numLayers: 1e9 })).toBe(3 + 12e9); // a hostile config: no list
  });

  it("is MultiHeadAttention's state dict: packed, separate (kdim, GQA) and without bias", () => {
    const cases = [
      { embedDim: 8, numHeads: 2 },
      { embedDim: 8, numHeads: 4, numKvHeads: 2, kdim: 6, vdim: 5 },
      { embedDim: 8, numHeads: 2, bias: false },
    ];
    for (const options of cases) {
      const mha = new MultiHeadAttention(options);
      const names = attentionParamSpecs({
        embedDim: mha.embedDim,
        numHeads: mha.numHeads,
        numKvHeads: mha.numKvHeads,
        headDim: mha.headDim,
        valueDim: mha.headDim,
        kdim: mha.kdim,
        vdim: mha.vdim,
        bias: mha.hasBias,
      }).map((s) => [s.name, s.shape]);
      expect(Object.entries(mha.stateDictShapes())).toEqual(names);
      expect(Object.keys(mha.stateDict())).toEqual(names.map(([n]) => n));
    }
  });

  it("is the viz stack's record: seeded layers view it, and stackStateDict writes it back", () => {
    for (const [dK, packedName] of [
      [4, 'layers.0.self_attn.in_proj_weight'],
      [3, 'layers.0.self_attn.q_proj_weight'],
    ] as const) {
      const stack = seededStack({ dModel: 8, dK, heads: 2, layers: 2, seed: 1 });
      const dict = stackStateDict(stack);
      const specs = [0, 1].flatMap((l) =>
        blockParamSpecs(
          { dModel: 8, numHeads: 2, headDim: dK, valueDim: dK, dFF: 32 },
          `layers.${l}.`,
          'article',
        ),
      );
      expect(Object.entries(dict).map(([n, t]) => [n, [...t.shape]])).toEqual(
        specs.map((s) => [s.name, s.shape]),
      );
      expect(Object.keys(dict)).toContain(packedName);
      // Article rule: every linear bias starts at zero, LayerNorm at 1/0.
      expect([...dict['layers.1.linear1.bias'].data].every((b) => b === 0)).toBe(true);
      expect([...dict['layers.1.norm2.weight'].data].every((w) => w === 1)).toBe(true);
    }
  });

  it('blockParamsFrom reads a record by PyTorch names', () => {
    const names: string[] = [];
    const p: BlockParams<string> = blockParamsFrom((n) => {
      names.push(n);
      return n.endsWith('q_proj_weight') ? undefined : n;
    }, 'layers.3.');
    expect(p.selfAttn.inProjWeight).toBe('layers.3.self_attn.in_proj_weight');
    expect(p.selfAttn.qProjWeight).toBeUndefined();
    expect(p.linear2.bias).toBe('layers.3.linear2.bias');
    expect(names.every((n) => n.startsWith('layers.3.'))).toBe(true);
  });
});
