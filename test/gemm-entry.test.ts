// Every matrix product of the forward and of the autograd's linear goes through kernels/matmul.ts, the one
// place a faster GEMM (issue 10) plugs in: the module is wrapped with counters, and MultiHeadAttention,
// TinyTransformer (forward and backward) and the playground's trace must call it for each product.

import { beforeEach, describe, expect, it, vi } from 'vitest';

const calls = { linear: 0, linearGradInput: 0, linearGradWeight: 0 };

vi.mock('../src/kernels/matmul.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../src/kernels/matmul.js')>();
  return {
    ...real,
    linear: (...args: Parameters<typeof real.linear>) => {
      calls.linear++;
      return real.linear(...args);
    },
    linearGradInput: (...args: Parameters<typeof real.linearGradInput>) => {
      calls.linearGradInput++;
      return real.linearGradInput(...args);
    },
    linearGradWeight: (...args: Parameters<typeof real.linearGradWeight>) => {
      calls.linearGradWeight++;
      return real.linearGradWeight(...args);
    },
  };
});

const { crossEntropy } = await import('../src/autograd/ops.js');
const { backward } = await import('../src/autograd/var.js');
const { MultiHeadAttention, Tensor } = await import('../src/index.js');
const { seededStack, traceStack } = await import('../src/viz/index.js');
const { TinyTransformer } = await import('../src/model/transformer.js');

beforeEach(() => {
  calls.linear = calls.linearGradInput = calls.linearGradWeight = 0;
});

describe('one GEMM entry point', () => {
  it('MultiHeadAttention.forward: q, k, v and the output projection', () => {
    const mha = new MultiHeadAttention({ embedDim: 8, numHeads: 2, numKvHeads: 1, seed: 0 });
    mha.forward(Tensor.randn([1, 3, 8], { seed: 1 }));
    expect(calls).toEqual({ linear: 4, linearGradInput: 0, linearGradWeight: 0 });
  });

  it('TinyTransformer: 4 products per block and the tied head forward; ∂x and ∂W of each backward', () => {
    const model = new TinyTransformer(
      { vocabSize: 5, dModel: 8, numHeads: 2, numLayers: 2, dFF: 8, maxLen: 4, causal: true },
      { seed: 0 },
    );
    const ids = Int32Array.from([0, 1, 2, 3]);
    const loss = crossEntropy(model.forward(ids, 1, 4).logits, Int32Array.from([1, 2, 3, 4]));
    expect(calls.linear).toBe(2 * 4 + 1);
    backward(loss);
    // Every weight is a parameter; every input but the embedding lookup's output needs ∂x too.
    expect(calls).toEqual({ linear: 9, linearGradInput: 9, linearGradWeight: 9 });
  });

  it('traceStack: the block forward per layer, and Q·Kᵀ of the focused head', () => {
    const stack = seededStack({ dModel: 8, dK: 2, heads: 4, layers: 2, seed: 0 });
    traceStack(stack, ['a', 'b', 'c']);
    // Per layer q|k|v in one product (the packed in_proj_weight, as TinyTransformer runs it), the
    // out-projection, linear1 and linear2; then Q·Kᵀ of the focused head.
    expect(calls.linear).toBe(2 * (1 + 1 + 2) + 1);
  });
});
