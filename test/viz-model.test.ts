// The playground's model (src/viz/stack.ts, trace.ts): the traced steps agree with each other, with qkv's
// MultiHeadAttention on the same weights, and with the experiments' claims (causal, W_Q = W_K, a fully
// masked row); a state dict round-trips through the checkpoint boundary.

import { describe, expect, it } from 'vitest';
import { MultiHeadAttention, Tensor } from '../src/index.js';
import { TinyTransformer } from '../src/model/transformer.js';
import { saveCheckpoint } from '../src/train/checkpoint.js';
import {
  STEP_IDS,
  seededStack,
  stackFromSafetensors,
  stackFromStateDict,
  stackStateDict,
  stepViews,
  tokenize,
  traceStack,
} from '../src/viz/index.js';
import { expectAllClose } from './helpers.js';

const tokens = tokenize("The animal didn't cross the street because it was too tired");
const L = tokens.length;

describe('traceStack', () => {
  const stack = seededStack({ dModel: 32, dK: 8, heads: 4, layers: 2, seed: 3 });

  it('is deterministic, and every weights row sums to 1', () => {
    const a = traceStack(stack, tokens);
    const b = traceStack(seededStack({ dModel: 32, dK: 8, heads: 4, layers: 2, seed: 3 }), tokens);
    expect([...a.weights[1].data]).toEqual([...b.weights[1].data]);
    expect(a.weights.map((w) => w.shape)).toEqual([
      [4, L, L],
      [4, L, L],
    ]);
    for (const w of a.weights) {
      for (let r = 0; r < 4 * L; r++) {
        let sum = 0;
        for (let j = 0; j < L; j++) sum += w.data[r * L + j];
        expect(sum).toBeCloseTo(1, 5);
      }
    }
    const other = traceStack(seededStack({ dModel: 32, dK: 8, heads: 4, layers: 2, seed: 4 }), tokens);
    expect([...other.weights[0].data]).not.toEqual([...a.weights[0].data]);
  });

  it('the steps chain: scaled = scores × 1/√d_k, softmax(masked) = weights = the layer weights, output = weights·V', () => {
    const t = traceStack(stack, tokens, { focus: { layer: 1, head: 2 } });
    const s = t.steps;
    expect(s.scale).toBeCloseTo(1 / Math.sqrt(8), 12);
    expectAllClose(
      s.scaled,
      new Tensor(
        s.scores.data.map((x) => x / Math.sqrt(8)),
        [L, L],
      ),
    );
    expectAllClose(s.weights, new Tensor(t.weights[1].data.slice(2 * L * L, 3 * L * L), [L, L]));
    const soft = s.masked.data.slice();
    for (let i = 0; i < L; i++) {
      const row = soft.subarray(i * L, (i + 1) * L);
      const m = Math.max(...row);
      let z = 0;
      for (let j = 0; j < L; j++) z += Math.exp(row[j] - m);
      for (let j = 0; j < L; j++) row[j] = Math.exp(row[j] - m) / z;
    }
    expectAllClose(s.weights, new Tensor(soft, [L, L]));
    const dV = s.v.shape[1];
    const out = new Float32Array(L * dV);
    for (let i = 0; i < L; i++)
      for (let j = 0; j < L; j++)
        for (let c = 0; c < dV; c++) out[i * dV + c] += s.weights.data[i * L + j] * s.v.data[j * dV + c];
    expectAllClose(s.output, new Tensor(out, [L, dV]));
    expect(s.embeddings).toBeUndefined(); // only layer 0 shows embeddings and positions
  });

  it("layer 0's heads equal qkv's MultiHeadAttention on LayerNorm(E + PE) with the same weights", () => {
    const t = traceStack(stack, tokens, { focus: { layer: 0, head: 1 } });
    const l0 = stack.layers[0].selfAttn; // packed: H·d_k = D
    expect(l0.inProjWeight?.shape).toEqual([96, 32]);
    const mha = new MultiHeadAttention({ embedDim: 32, numHeads: 4 });
    mha.loadStateDict({
      in_proj_weight: l0.inProjWeight!,
      in_proj_bias: l0.inProjBias!,
      'out_proj.weight': l0.outProjWeight,
      'out_proj.bias': l0.outProjBias!,
    });
    const x = t.steps.normed;
    const { weights } = mha.forward(x, x, x, { needWeights: true });
    expectAllClose(weights!, t.weights[0]);
  });

  it('causal: the upper triangle is exactly 0 in every head', () => {
    const t = traceStack(stack, tokens, { causal: true });
    for (const w of t.weights)
      for (let h = 0; h < 4; h++)
        for (let i = 0; i < L; i++)
          for (let j = i + 1; j < L; j++) expect(w.data[(h * L + i) * L + j]).toBe(0);
    expect(t.steps.masked.data[1]).toBe(Number.NEGATIVE_INFINITY);
  });

  it('W_Q = W_K: Q·Kᵀ is symmetric (and off, it is not)', () => {
    const asym = (tieQK: boolean) => {
      const s = traceStack(stack, tokens, { tieQK }).steps.scores.data;
      let m = 0;
      for (let i = 0; i < L; i++)
        for (let j = 0; j < L; j++) m = Math.max(m, Math.abs(s[i * L + j] - s[j * L + i]));
      return m;
    };
    expect(asym(true)).toBeLessThan(1e-5);
    expect(asym(false)).toBeGreaterThan(0.1);
  });

  it('unscaled: the largest weight of every row grows (softmax sharpens)', () => {
    const on = traceStack(stack, tokens).steps.weights.data;
    const off = traceStack(stack, tokens, { scaled: false }).steps.weights.data;
    for (let i = 0; i < L; i++) {
      expect(Math.max(...off.subarray(i * L, (i + 1) * L))).toBeGreaterThanOrEqual(
        Math.max(...on.subarray(i * L, (i + 1) * L)) - 1e-7,
      );
    }
  });

  it("a fully masked row: qkv gives weights 0 and output 0; the article's −1e9 gives 1/L and the mean of V", () => {
    const s = traceStack(stack, tokens, { blockedQuery: 3 }).steps;
    expect([...s.weights.data.subarray(3 * L, 4 * L)].every((w) => w === 0)).toBe(true);
    const dV = s.v.shape[1];
    expect([...s.output.data.subarray(3 * dV, 4 * dV)].every((w) => w === 0)).toBe(true);
    expect(s.article!.weights.every((w) => Math.abs(w - 1 / L) < 1e-7)).toBe(true);
    for (let c = 0; c < dV; c++) {
      let mean = 0;
      for (let j = 0; j < L; j++) mean += s.v.data[j * dV + c] / L;
      expect(s.article!.output[c]).toBeCloseTo(mean, 5);
    }
  });

  it('stepViews lists every step once, in order, with token labels on the L×L matrices', () => {
    const views = stepViews(traceStack(stack, tokens).steps, tokens);
    expect(views.map((v) => v.id)).toEqual([...STEP_IDS]);
    const w = views.find((v) => v.id === 'weights')!.spec;
    expect([w.rows, w.cols, w.scale]).toEqual([L, L, 'sequential']);
    expect(w.colLabels).toEqual(tokens);
    expect(views.find((v) => v.id === 'q')!.spec.cols).toBe(8);
  });

  it('names the function and the sizes on bad arguments', () => {
    expect(() => traceStack(stack, [])).toThrow('traceStack: tokens is empty');
    expect(() => traceStack(stack, tokens, { focus: { layer: 2, head: 0 } })).toThrow(
      'traceStack: focus layer 2 head 0 is outside 2 layers × 4 heads',
    );
    expect(() => seededStack({ dModel: 0, dK: 8, heads: 1, layers: 1, seed: 0 })).toThrow(
      'seededStack: dModel must be an integer from 1 to 4096, got 0',
    );
  });
});

describe('the checkpoint boundary: stackFromStateDict, stackFromSafetensors', () => {
  const seeded = seededStack({ dModel: 16, dK: 4, heads: 4, layers: 2, seed: 9 });
  const vocab = [...new Set(tokens.map((t) => t.toLowerCase()))];
  const dict: Record<string, Tensor> = { ...stackStateDict(seeded), 'embedding.weight': seeded.embed(vocab) };

  it('a state dict (packed in_proj, or separate q/k/v) gives the same trace as the stack it came from', () => {
    expect(Object.keys(dict)).toContain('layers.1.self_attn.in_proj_weight'); // H·d_k = D: packed, as PyTorch
    const loaded = stackFromStateDict(dict, { heads: 4, vocab, embedScale: 1 });
    const want = traceStack(seeded, tokens, { focus: { layer: 1, head: 3 } });
    const got = traceStack(loaded, tokens, { focus: { layer: 1, head: 3 } });
    for (const l of [0, 1]) expectAllClose(got.weights[l], want.weights[l]);
    expectAllClose(got.steps.output, want.steps.output);

    const wide = seededStack({ dModel: 16, dK: 6, heads: 2, layers: 1, seed: 2 });
    const wideDict: Record<string, Tensor> = {
      ...stackStateDict(wide),
      'embedding.weight': wide.embed(vocab),
    };
    expect(Object.keys(wideDict)).toContain('layers.0.self_attn.q_proj_weight'); // H·d_k ≠ D: separate
    const wideLoaded = stackFromStateDict(wideDict, { heads: 2, vocab, embedScale: 1 });
    expect(wideLoaded.dK).toBe(6);
    expectAllClose(traceStack(wideLoaded, tokens).weights[0], traceStack(wide, tokens).weights[0]);
  });

  it("a TinyTransformer checkpoint traces to exactly TinyTransformer.forward's attention weights", () => {
    const config = {
      vocabSize: vocab.length,
      dModel: 32,
      numHeads: 4,
      numLayers: 2,
      dFF: 64,
      maxLen: 16,
      causal: false,
    };
    const model = new TinyTransformer(config, { seed: 5 });
    const stack = stackFromSafetensors(saveCheckpoint(model, { task: 'test', vocab }), 'tiny.safetensors');
    expect(stack.description).toContain(
      'trained checkpoint tiny.safetensors (task test, encoder, 2 layers × 4 heads',
    );
    const ids = Int32Array.from(tokens.map((t) => vocab.indexOf(t.toLowerCase())));
    const { weights } = model.forward(ids, 1, L, { needWeights: true });
    const trace = traceStack(stack, tokens);
    for (const l of [0, 1])
      expectAllClose(trace.weights[l], weights[l].reshape([4, L, L]), { atol: 1e-6, rtol: 1e-5 });
    expect(() => stack.embed(['zebra'])).toThrow("stackFromStateDict: 'zebra' not in the checkpoint's");
    expect(() => stackFromSafetensors(new Uint8Array(16))).toThrow();
  });

  it('says which tensor is missing or misshapen', () => {
    const { 'layers.1.linear2.bias': _, ...missing } = dict;
    expect(() => stackFromStateDict(missing, { heads: 4, vocab })).toThrow(
      "stackFromStateDict: missing tensor 'layers.1.linear2.bias'",
    );
    expect(() => stackFromStateDict(dict, { heads: 4, vocab: ['a'] })).toThrow(
      'stackFromStateDict: vocab has 1 entries but embedding.weight is [',
    );
  });
});
