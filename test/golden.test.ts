// Ring one: every registered kernel (the reference first: it is the spec) against the PyTorch goldens
// (scripts/make_fixtures.py), forward and backward, then the public layer's default path against them.
// One decision to know: the per-kernel tests drive each kernel object directly at every precision it
// serves (test/rings/golden.ts), so a test named 'reference' ran the reference and nothing else; a wrong
// reference fails here by name (test/rings.test.ts proves it with the bias sign flipped).

import { describe, expect, it } from 'vitest';
import {
  alibiSlopes,
  applyRope,
  attentionWeights,
  MultiHeadAttention,
  scaledDotProductAttention,
  sinusoidalPositionalEncoding,
  Tensor,
} from '../src/index.js';
import { kernelOps, registeredKernels } from '../src/kernels/registry.js';
import { expectAllClose, type FixtureTensor, fromFixture, loadFixture } from './helpers.js';
import { probeDelegation } from './rings/common.js';
import {
  backwardGoldenFailures,
  backwardGoldens,
  forwardGoldenFailures,
  optionsOf,
  sdpaGoldens as sdpa,
} from './rings/golden.js';

const tol = { atol: 1e-5, rtol: 1e-4 };

it('the goldens have the cases the fixture script writes, and the registry lists the reference first', () => {
  expect(sdpa.cases.length).toBeGreaterThanOrEqual(30);
  expect(backwardGoldens.cases.length).toBeGreaterThanOrEqual(25);
  expect(registeredKernels()[0].name).toBe('reference');
});

for (const kernel of registeredKernels()) {
  describe(`ring one: kernel ${probeDelegation(kernel)}, attention.forward vs PyTorch ${sdpa.torch} (out, weights)`, () => {
    for (const c of sdpa.cases) {
      it(`${kernel.name}: ${c.name}`, () => {
        const { checks, failures } = forwardGoldenFailures(kernel, c);
        expect(failures).toEqual([]);
        expect(checks, 'comparisons made').toBeGreaterThanOrEqual(2);
      });
    }
  });
  if (!kernelOps(kernel).includes('attention.backward')) continue;
  describe(`ring one: kernel ${kernel.name}, attention.backward vs PyTorch ${backwardGoldens.torch} autograd`, () => {
    for (const c of backwardGoldens.cases) {
      it(`${kernel.name}: ${c.name}`, () => {
        const { checks, failures } = backwardGoldenFailures(kernel, c);
        expect(failures).toEqual([]);
        expect(checks, 'comparisons made').toBeGreaterThanOrEqual(3);
      });
    }
  });
}

describe(`public path: scaledDotProductAttention and attentionWeights (default kernel 'auto') vs PyTorch ${sdpa.torch}`, () => {
  for (const c of sdpa.cases) {
    it(c.name, () => {
      const options = optionsOf(c);
      const q = fromFixture(c.q);
      const k = fromFixture(c.k);
      const out = scaledDotProductAttention(q, k, fromFixture(c.v), options);
      expectAllClose(out, fromFixture(c.out), { ...tol, label: 'output' });
      const weights = attentionWeights(q, k, options);
      expectAllClose(weights, fromFixture(c.weights), { ...tol, label: 'weights' });
    });
  }

  it('causal: true is the bottom-right alignment', () => {
    const c = sdpa.cases.find((x) => x.causal === 'bottom-right' && x.q.shape.at(-2)! > x.k.shape.at(-2)!);
    expect(c, 'a bottom-right case with L > S').toBeDefined();
    const out = scaledDotProductAttention(fromFixture(c!.q), fromFixture(c!.k), fromFixture(c!.v), {
      causal: true,
    });
    expectAllClose(out, fromFixture(c!.out), tol);
  });
});

interface MhaCase {
  name: string;
  config: { embedDim: number; numHeads: number; kdim?: number; vdim?: number; bias: boolean };
  state: Record<string, FixtureTensor>;
  query: FixtureTensor;
  key?: FixtureTensor;
  value?: FixtureTensor;
  mask?: FixtureTensor;
  causal?: 'top-left';
  output: FixtureTensor;
  weights: FixtureTensor;
}

const mha = loadFixture<{ torch: string; cases: MhaCase[] }>('mha.json');

describe(`MultiHeadAttention vs torch.nn.MultiheadAttention ${mha.torch}`, () => {
  for (const c of mha.cases) {
    it(c.name, () => {
      const layer = new MultiHeadAttention({ ...c.config, seed: 0 });
      layer.loadStateDict(Object.fromEntries(Object.entries(c.state).map(([k, v]) => [k, fromFixture(v)])));
      const query = fromFixture(c.query);
      const key = c.key ? fromFixture(c.key) : query;
      const value = c.value ? fromFixture(c.value) : key;
      const { output, weights } = layer.forward(query, key, value, {
        mask: c.mask && fromFixture(c.mask),
        causal: c.causal,
        needWeights: true,
      });
      expectAllClose(output, fromFixture(c.output), { ...tol, label: 'output' });
      expectAllClose(weights!, fromFixture(c.weights), { ...tol, label: 'weights' });
      // The state dict goes back out under the same names, bit for bit.
      const round = layer.stateDict();
      expect(Object.keys(round).sort()).toEqual(Object.keys(c.state).sort());
      for (const [name, t] of Object.entries(c.state)) expect(round[name].data).toEqual(fromFixture(t).data);
    });
  }

  it('unbatched input [L, D] equals batch 1', () => {
    const c = mha.cases[0];
    const layer = new MultiHeadAttention({ ...c.config });
    layer.loadStateDict(Object.fromEntries(Object.entries(c.state).map(([k, v]) => [k, fromFixture(v)])));
    const [, L, D] = c.query.shape;
    const x = fromFixture(c.query);
    const first = x.data.slice(0, L * D);
    const single = layer.forward(new Tensor(first, [L, D]));
    expect(single.output.shape).toEqual([L, D]);
    expectAllClose(single.output, fromFixture(c.output).data.slice(0, L * D), tol);
  });
});

interface PositionFixture {
  sinusoidal: { length: number; dModel: number; pe: FixtureTensor }[];
  rope: {
    name: string;
    x: FixtureTensor;
    base: number;
    offset: number;
    interleaved: boolean;
    out: FixtureTensor;
  }[];
  alibiSlopes: { numHeads: number; slopes: number[] }[];
}

const position = loadFixture<PositionFixture>('position.json');

describe('positional encodings vs float64 references', () => {
  for (const c of position.sinusoidal) {
    it(`sinusoidal length ${c.length} dModel ${c.dModel}`, () => {
      expectAllClose(sinusoidalPositionalEncoding(c.length, c.dModel), fromFixture(c.pe), tol);
    });
  }
  for (const c of position.rope) {
    it(`RoPE ${c.name}`, () => {
      const out = applyRope(fromFixture(c.x), { base: c.base, offset: c.offset, interleaved: c.interleaved });
      expectAllClose(out, fromFixture(c.out), tol);
    });
  }
  for (const c of position.alibiSlopes) {
    it(`ALiBi slopes for ${c.numHeads} heads`, () => {
      expectAllClose(alibiSlopes(c.numHeads), c.slopes, { atol: 0, rtol: 1e-7 });
    });
  }
});
