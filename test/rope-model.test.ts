// TinyTransformer with positions: 'rope': the block's rotation against applyRope on split heads, the
// autograd's rope op and a rope model's loss against central differences (float64), cached decoding equal
// to the full forward, generation with and without the cache, checkpoints (round trip, refusals, and an old
// sinusoidal file writing the config it wrote before), the relative-position property, the trace, and
// `qkv train --positions rope`.

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { crossEntropy, rope } from '../src/autograd/ops.js';
import { backward, constant, noGrad, opResult, parameter, type Var } from '../src/autograd/var.js';
import { KVCache } from '../src/cache/kv-cache.js';
import { UsageError } from '../src/cli/args.js';
import { trainCommand } from '../src/cli/train.js';
import { scaledDotProductAttention, Tensor } from '../src/index.js';
import { decodeSafetensors, encodeSafetensors } from '../src/io/safetensors.js';
import { attend, type BlockParams, transformerBlock } from '../src/model/block.js';
import { tensorOps } from '../src/model/ops-tensor.js';
import { varOps } from '../src/model/ops-var.js';
import { blockParamsFrom } from '../src/model/params.js';
import { parseTransformerConfig, TinyTransformer, type TransformerConfig } from '../src/model/transformer.js';
import { applyRope } from '../src/position/rope.js';
import { WordTokenizer } from '../src/text/word.js';
import { loadCheckpoint, saveCheckpoint } from '../src/train/checkpoint.js';
import { headScores } from '../src/train/heads.js';
import { loadLanguageModel } from '../src/train/lm.js';
import { stackFromSafetensors } from '../src/viz/checkpoint.js';
import { traceStack } from '../src/viz/trace.js';

const dir = mkdtempSync(join(tmpdir(), 'qkv-rope-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) return Number.NaN;
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (!(d <= m)) m = d;
  }
  return m;
}

const ROPE: TransformerConfig = {
  vocabSize: 40,
  dModel: 32,
  numHeads: 4,
  numLayers: 2,
  dFF: 64,
  maxLen: 64,
  causal: true,
  positions: 'rope',
};

/** [B, L, H·E] → [B, H, L, E]. */
function splitHeads(x: Tensor, H: number): Tensor {
  const [B, L, W] = x.shape;
  const E = W / H;
  const out = new Float32Array(x.size);
  for (let b = 0; b < B; b++)
    for (let i = 0; i < L; i++)
      for (let h = 0; h < H; h++)
        for (let e = 0; e < E; e++)
          out[((b * H + h) * L + i) * E + e] = x.data[((b * L + i) * H + h) * E + e];
  return new Tensor(out, [B, H, L, E]);
}

/** A layer's parameters as Tensors (views of the model's float32 data). */
function tensorParams(model: TinyTransformer, layer: number): BlockParams<Tensor> {
  return blockParamsFrom((n) => {
    const v = model.params.get(n);
    return v && new Tensor(v.data as Float32Array, v.shape);
  }, `layers.${layer}.`) as BlockParams<Tensor>;
}

describe('the block with RoPE', () => {
  const model = new TinyTransformer(ROPE, { seed: 3 });
  const p = tensorParams(model, 1);
  const x = Tensor.randn([2, 7, 32], { seed: 5 });

  it('rotates each head of q and k exactly as applyRope on the split heads, then attends as sdpa', () => {
    for (const [offset, base] of [
      [0, 10000],
      [5, 10000],
      [3, 500],
    ]) {
      let seen: { q: Tensor; k: Tensor } | undefined;
      const got = attend(
        tensorOps,
        p.selfAttn,
        x,
        undefined,
        { numHeads: 4, causal: true, rope: { offset, base } },
        { projected: (q, k) => (seen = { q, k }) },
      ).heads;
      // Direct: project, split heads, applyRope, attend, merge.
      const [q, k, v] = tensorOps.splitLast(
        tensorOps.linear(x, p.selfAttn.inProjWeight!, p.selfAttn.inProjBias),
        [32, 32, 32],
      );
      const qh = applyRope(splitHeads(q, 4), { offset, base });
      const kh = applyRope(splitHeads(k, 4), { offset, base });
      // The observer sees q and k after the rotation, bit for bit applyRope's.
      expect([...splitHeads(seen!.q, 4).data]).toEqual([...qh.data]);
      expect([...splitHeads(seen!.k, 4).data]).toEqual([...kh.data]);
      const out = scaledDotProductAttention(qh, kh, splitHeads(v, 4), { causal: true });
      expect(maxDiff(splitHeads(got, 4).data, out.data)).toBeLessThanOrEqual(1e-6);
    }
  });

  it('gives the same block bit for bit over Vars and over Tensors', () => {
    const varParams = blockParamsFrom((n) => model.params.get(n), 'layers.1.');
    const attention = { numHeads: 4, causal: true, rope: { offset: 2, base: 10000 } };
    const byVars = noGrad(() =>
      transformerBlock(varOps, varParams, constant(x.data, x.shape), { attention }),
    );
    const byTensors = transformerBlock(tensorOps, p, x, { attention });
    expect([...byTensors.x.data]).toEqual([...byVars.x.data]);
  });

  it('scores depend only on position differences: shifting every position leaves the weights unchanged', () => {
    const weights = (rope?: { offset: number; base: number }) =>
      attend(tensorOps, p.selfAttn, x, undefined, {
        numHeads: 4,
        causal: true,
        needWeights: true,
        ...(rope ? { rope } : {}),
      }).weights!.data;
    const at0 = weights({ offset: 0, base: 10000 });
    for (const offset of [1, 13, 50]) {
      expect(maxDiff(weights({ offset, base: 10000 }), at0)).toBeLessThanOrEqual(2e-5);
    }
    expect(maxDiff(weights(), at0)).toBeGreaterThan(1e-3); // and the rotation does change them
  });

  it('refuses an odd head width and cross-attention', () => {
    const odd = Tensor.randn([1, 2, 6], { seed: 1 });
    expect(() => tensorOps.rope(odd, 2, 3, 0, 10000)).toThrow(
      /rope: headDim must be a positive even integer/,
    );
    expect(() => tensorOps.rope(odd, 4, 2, 0, 10000)).toThrow(/x must be \[B, L, H·E\]/);
    expect(() => tensorOps.rope(Tensor.randn([1, 2, 4]), 2, 2, -1, 10000)).toThrow(/offset must be/);
    expect(() => tensorOps.rope(Tensor.randn([1, 2, 4]), 2, 2, 0, 0)).toThrow(/base must be/);
    const w = Tensor.randn([32, 32], { seed: 2 });
    const unpacked = { qProjWeight: w, kProjWeight: w, vProjWeight: w, outProjWeight: w };
    expect(() =>
      attend(tensorOps, unpacked, x, { key: x, value: x }, { numHeads: 4, rope: { offset: 0, base: 1 } }),
    ).toThrow(/rope serves self-attention only/);
  });
});

// ---------- gradients (float64, central differences, as test/autograd.test.ts) ----------

const ATOL = 1e-4;
const RTOL = 1e-3;
const STEP = 1e-6;

function randomInput(shape: number[], seed: number): Var {
  return parameter(Float64Array.from(Tensor.randn(shape, { seed }).data), shape);
}

/** Σ out ∘ R for a fixed random R. */
function project(out: Var, seed: number): Var {
  if (out.size === 1) return out;
  const R = Float64Array.from(Tensor.randn([out.size], { seed }).data);
  let s = 0;
  for (let i = 0; i < out.size; i++) s += out.data[i] * R[i];
  const y = opResult(Float64Array.of(s), [], [out], () => {
    const g = y.grad![0];
    const d = out.gradBuffer();
    for (let i = 0; i < out.size; i++) d[i] += g * R[i];
  });
  return y;
}

function gradCheck(label: string, inputs: Var[], f: () => Var, limit = Number.POSITIVE_INFINITY): void {
  for (const x of inputs) x.grad = undefined;
  backward(project(f(), 99));
  let checked = 0;
  for (const [n, x] of inputs.entries()) {
    const analytic = x.grad ?? new Float64Array(x.size);
    for (let i = 0; i < Math.min(x.size, limit); i++) {
      const keep = x.data[i];
      x.data[i] = keep + STEP;
      const up = noGrad(() => project(f(), 99).data[0]);
      x.data[i] = keep - STEP;
      const down = noGrad(() => project(f(), 99).data[0]);
      x.data[i] = keep;
      const numeric = (up - down) / (2 * STEP);
      const err = Math.abs(analytic[i] - numeric);
      if (!(err <= ATOL + RTOL * Math.abs(numeric)))
        expect.fail(`${label}: input ${n} element ${i}: analytic ${analytic[i]}, numeric ${numeric}`);
      checked++;
    }
  }
  expect(checked).toBeGreaterThan(0);
}

describe('gradients', () => {
  it('the rope op (float64) against central differences, and float32 forwards as float64 rounded', () => {
    const x = randomInput([2, 3, 12], 1); // H = 2, E = 6
    gradCheck('rope', [x], () => rope(x, 2, 6, 4, 100));
    gradCheck('rope offset 0', [x], () => rope(x, 3, 4, 0, 10000));
    const x32 = parameter(Float32Array.from(x.data), x.shape);
    const y32 = rope(x32, 2, 6, 4, 100);
    expect(y32.data).toBeInstanceOf(Float32Array);
    const y64 = noGrad(() => rope(constant(Float64Array.from(x32.data), x.shape), 2, 6, 4, 100));
    expect([...y32.data]).toEqual([...Float32Array.from(y64.data)]);
    expect(() => rope(x, 2, 5, 0, 10000)).toThrow(/rope: headDim must be a positive even integer/);
  });

  it("a tiny rope TinyTransformer's loss against central differences", () => {
    const model = new TinyTransformer(
      {
        vocabSize: 7,
        dModel: 8,
        numHeads: 2,
        numLayers: 2,
        dFF: 8,
        maxLen: 6,
        causal: true,
        positions: 'rope',
      },
      { seed: 4, dtype: 'float64' },
    );
    const ids = Int32Array.of(1, 4, 2, 6, 0, 3, 5, 5, 2, 1);
    const targets = Int32Array.of(4, 2, 6, 0, 3, 5, 5, 2, 1, 0);
    const params = [
      'layers.0.self_attn.in_proj_weight',
      'layers.1.self_attn.in_proj_weight',
      'embedding.weight',
    ].map((n) => model.params.get(n)!);
    // Every element of both layers' q|k|v projections (q and k reach the loss through the rotation).
    gradCheck('rope model', params, () => crossEntropy(model.forward(ids, 2, 5).logits, targets));
  });
});

// ---------- decoding ----------

describe('a rope decoder with a KVCache', () => {
  it('cached forwards over chunks give the full forward’s logits (≤ 1e-5), and the same weights rows', () => {
    for (const seed of [1, 2, 3]) {
      const model = new TinyTransformer({ ...ROPE, ropeBase: seed === 3 ? 300 : 10000 }, { seed });
      const B = 2;
      const T = 23;
      const ids = Int32Array.from({ length: B * T }, (_, i) => (i * 7 + seed * 3 + ((i * i) % 5)) % 40);
      const full = noGrad(() => model.forward(ids, B, T, { needWeights: true }));
      const cache = new KVCache({ numLayers: 2, numKvHeads: 4, headDim: 8 });
      let t0 = 0;
      for (const L of [5, 1, 1, 7, 1, 8]) {
        const chunk = new Int32Array(B * L);
        for (let b = 0; b < B; b++) chunk.set(ids.subarray(b * T + t0, b * T + t0 + L), b * L);
        const got = model.forward(chunk, B, L, { cache, needWeights: true });
        for (let b = 0; b < B; b++) {
          const want = full.logits.data.subarray((b * T + t0) * 40, (b * T + t0 + L) * 40);
          expect(maxDiff(got.logits.data.subarray(b * L * 40, (b + 1) * L * 40), want)).toBeLessThanOrEqual(
            1e-5,
          );
        }
        // Last layer, batch 0, head 1: the new rows over every cached key.
        const S = t0 + L;
        const w = got.weights[1].data;
        for (let i = 0; i < L; i++) {
          const row = w.subarray(((0 * 4 + 1) * L + i) * S, ((0 * 4 + 1) * L + i + 1) * S);
          const wantRow = full.weights[1].data.subarray(
            ((0 * 4 + 1) * T + t0 + i) * T,
            ((0 * 4 + 1) * T + t0 + i) * T + S,
          );
          expect(maxDiff(row, wantRow)).toBeLessThanOrEqual(1e-6);
        }
        t0 += L;
      }
      expect(t0).toBe(T);
    }
  });

  it('generates the same tokens with and without the cache', () => {
    const model = new TinyTransformer(ROPE, { seed: 7 });
    for (const options of [
      { temperature: 1, seed: 3 },
      { temperature: 0.7, topK: 5, seed: 4 },
      { temperature: 0 },
    ]) {
      const cached = model.generate([1, 2, 3], { maxNewTokens: 40, ...options });
      const uncached = model.generate([1, 2, 3], { maxNewTokens: 40, ...options, useCache: false });
      expect(cached).toHaveLength(40);
      expect(Array.from(cached)).toEqual(Array.from(uncached));
    }
  });
});

// ---------- config and checkpoints ----------

describe('config', () => {
  it('positions and ropeBase: rope is written, the defaults are not; bad values are refused', () => {
    const sin = new TinyTransformer({ ...ROPE, positions: undefined });
    expect(sin.config.positions).toBe('sinusoidal');
    expect(sin.config.ropeBase).toBe(10000);
    expect(Object.keys(sin.config)).not.toContain('positions');
    expect(Object.keys(sin.config)).not.toContain('ropeBase');
    const explicit = new TinyTransformer({ ...ROPE, positions: 'sinusoidal', ropeBase: 10000 });
    expect(JSON.stringify(explicit.config)).toBe(JSON.stringify(sin.config));
    const r = new TinyTransformer(ROPE);
    expect(JSON.parse(JSON.stringify(r.config))).toMatchObject({ positions: 'rope' });
    expect(Object.keys(r.config)).not.toContain('ropeBase');
    expect(new TinyTransformer({ ...ROPE, ropeBase: 500 }).config).toMatchObject({ ropeBase: 500 });
    // A spread of a rope config keeps it a rope model.
    expect(new TinyTransformer({ ...r.config }).config.positions).toBe('rope');

    expect(() => new TinyTransformer({ ...ROPE, positions: 'alibi' as 'rope' })).toThrow(
      /TinyTransformer: positions must be 'sinusoidal' or 'rope', got "alibi"/,
    );
    expect(() => new TinyTransformer({ ...ROPE, ropeBase: -1 })).toThrow(
      /TinyTransformer: ropeBase must be a positive finite number, got -1/,
    );
    expect(() => new TinyTransformer({ ...ROPE, positions: 'sinusoidal', ropeBase: 500 })).toThrow(
      /TinyTransformer: ropeBase \(500\) is RoPE's frequency base and needs positions: 'rope'/,
    );
    expect(() => new TinyTransformer({ ...ROPE, dModel: 12, numHeads: 4 })).toThrow(
      /TinyTransformer: positions: 'rope' rotates pairs .* dModel \/ numHeads = 12\/4 = 3 must be even/,
    );
    expect(() => parseTransformerConfig(JSON.stringify({ ...ROPE, positions: 'learned' }))).toThrow(
      /TinyTransformer: config field 'positions' must be 'sinusoidal' or 'rope', got "learned"/,
    );
  });
});

describe('checkpoints', () => {
  const tokenizer = new WordTokenizer(Array.from({ length: 40 }, (_, i) => `w${i}`));

  it('a rope model round-trips (config, logits), through loadCheckpoint and loadLanguageModel', () => {
    const model = new TinyTransformer({ ...ROPE, ropeBase: 777 }, { seed: 9 });
    const bytes = saveCheckpoint(model, { task: 'lm', tokenizer });
    const stored = JSON.parse(decodeSafetensors(bytes).metadata['qkv.config']);
    expect(stored).toMatchObject({ positions: 'rope', ropeBase: 777 });
    const { model: back } = loadCheckpoint(bytes);
    expect(back.config.positions).toBe('rope');
    expect(back.config.ropeBase).toBe(777);
    expect(JSON.stringify(back.config)).toBe(JSON.stringify(model.config));
    const ids = Int32Array.of(3, 1, 4, 1, 5, 9);
    const want = noGrad(() => model.forward(ids, 1, 6).logits.data);
    expect([...noGrad(() => back.forward(ids, 1, 6).logits.data)]).toEqual([...want]);
    const lm = loadLanguageModel(bytes, 'rope.safetensors');
    expect(lm.config.positions).toBe('rope');
    expect(Array.from(lm.model.generate([1, 2], { maxNewTokens: 8, temperature: 0 }))).toEqual(
      Array.from(model.generate([1, 2], { maxNewTokens: 8, temperature: 0 })),
    );
  });

  it('refuses unknown positions and bad ropeBase values, naming the field', () => {
    const model = new TinyTransformer(ROPE, { seed: 1 });
    const withConfig = (config: object) =>
      encodeSafetensors(model.stateDict(), { format: 'pt', 'qkv.config': JSON.stringify(config) });
    expect(() => loadCheckpoint(withConfig({ ...ROPE, positions: 'alibi' }), 'x.safetensors')).toThrow(
      /loadCheckpoint: x.safetensors: qkv.config field 'positions' must be 'sinusoidal' or 'rope', found "alibi"/,
    );
    expect(() => loadCheckpoint(withConfig({ ...ROPE, ropeBase: 'big' }))).toThrow(
      /qkv.config field 'ropeBase' must be a positive finite number/,
    );
    expect(() => loadCheckpoint(withConfig({ ...ROPE, positions: undefined, ropeBase: 5 }))).toThrow(
      /qkv.config field 'ropeBase' \(5\) needs positions: 'rope'/,
    );
    expect(() =>
      loadCheckpoint(withConfig({ ...ROPE, positions: 'rope', dModel: 32, numHeads: 32 })),
    ).toThrow(
      /qkv.config field 'positions' is 'rope', which needs an even head width, but dModel \/ numHeads = 1/,
    );
    expect(() =>
      stackFromSafetensors(
        encodeSafetensors(model.stateDict(), {
          'qkv.config': JSON.stringify({ ...ROPE, positions: 'alibi' }),
          'qkv.tokenizer': JSON.stringify(tokenizer.toJSON()),
        }),
        'x',
      ),
    ).toThrow(/stackFromSafetensors: x: qkv.config field 'positions' must be 'sinusoidal' or 'rope'/);
  });

  it('an old sinusoidal checkpoint loads and writes the config it wrote before (no new field)', () => {
    const bytes = new Uint8Array(readFileSync('models/pronoun.safetensors'));
    const before = decodeSafetensors(bytes).metadata['qkv.config'];
    expect(before).not.toContain('positions');
    const { model, info } = loadCheckpoint(bytes);
    expect(model.config.positions).toBe('sinusoidal');
    expect(JSON.stringify(model.config)).toBe(before);
    const again = saveCheckpoint(model, info);
    expect(decodeSafetensors(again).metadata['qkv.config']).toBe(before);
    // And a fresh sinusoidal model's config has exactly the fields it had before the option existed.
    expect(Object.keys(new TinyTransformer({ ...ROPE, positions: undefined }).config)).toEqual([
      'scaleScores',
      'dropout',
      'vocabSize',
      'dModel',
      'numHeads',
      'numLayers',
      'dFF',
      'maxLen',
      'causal',
    ]);
  });
});

describe('qkv heads on a rope model', () => {
  it('headScores reads a rope decoder’s weights like any other', () => {
    const model = new TinyTransformer({ ...ROPE, numLayers: 1 }, { seed: 2 });
    const scores = headScores(model, { length: 8, count: 2 });
    expect(scores.heads).toHaveLength(4);
    for (const h of scores.heads) expect(h.previousToken).toBeGreaterThanOrEqual(0);
  });
});

// ---------- the trace ----------

describe('traceStack on a rope checkpoint', () => {
  it('adds no positions, shows rotated q and k, and its weights are the model’s', () => {
    const model = new TinyTransformer(ROPE, { seed: 11 });
    const tokenizer = new WordTokenizer(Array.from({ length: 40 }, (_, i) => `w${i}`));
    const stack = stackFromSafetensors(saveCheckpoint(model, { tokenizer }), 'rope.safetensors');
    expect(stack.positions).toBe('rope');
    expect(stack.description).toContain('RoPE');
    const tokens = ['w3', 'w1', 'w4', 'w1', 'w5', 'w9', 'w2'];
    const ids = Int32Array.from(tokens, (t) => Number(t.slice(1)));
    const want = noGrad(() => model.forward(ids, 1, 7, { needWeights: true }).weights);
    for (const layer of [0, 1]) {
      const trace = traceStack(stack, tokens, { causal: true, focus: { layer, head: 2 } });
      expect(maxDiff(trace.weights[layer].data, want[layer].data)).toBeLessThanOrEqual(1e-5);
      const s = trace.steps;
      expect(s.positions).toBeUndefined();
      expect(s.rope).toEqual({ base: 10000 });
      if (layer === 0) expect([...s.input.data]).toEqual([...s.embeddings!.data]); // X = E, nothing added
      // Q·Kᵀ of the shown (rotated) q and k is what the softmax read.
      let max = 0;
      for (let i = 0; i < 7; i++) {
        const row = s.masked.data.subarray(i * 7, i * 7 + i + 1);
        const m = Math.max(...row);
        const e = Array.from(row, (v) => Math.exp(v - m));
        const sum = e.reduce((a, b) => a + b, 0);
        for (let j = 0; j <= i; j++) max = Math.max(max, Math.abs(e[j] / sum - s.weights.data[i * 7 + j]));
      }
      expect(max).toBeLessThanOrEqual(1e-5);
    }
  });
});

// ---------- qkv train --positions ----------

describe('qkv train --positions', () => {
  const io = () => {
    const io = { out: '', err: '' };
    return {
      io,
      cli: {
        stdout: { write: (s: string) => (io.out += s) },
        stderr: { write: (s: string) => (io.err += s) },
        env: {},
      },
    };
  };

  it('--task induction --positions rope trains a rope model', async () => {
    const out = join(dir, 'induction.safetensors');
    const { io: got, cli } = io();
    const code = await trainCommand(
      [
        '--task',
        'induction',
        '--positions',
        'rope',
        '--steps',
        '3',
        '--out',
        out,
        '--plot',
        join(dir, 'i.svg'),
      ],
      cli,
    );
    expect(code, got.err).toBe(0);
    expect(got.err).toMatch(/attention only, RoPE/);
    const { model } = loadCheckpoint(new Uint8Array(readFileSync(out)));
    expect(model.config).toMatchObject({ positions: 'rope', mlp: false });
  }, 60_000);

  it('--task lm --positions rope trains a rope language model', async () => {
    const text = join(dir, 'text.txt');
    writeFileSync(text, 'the cat sat on the mat. the dog sat on the log. '.repeat(40));
    const out = join(dir, 'lm.safetensors');
    const { io: got, cli } = io();
    const code = await trainCommand(
      [
        '--task',
        'lm',
        '--text',
        text,
        '--vocab-size',
        '270',
        '--context',
        '8',
        '--d-model',
        '16',
        '--layers',
        '1',
        '--heads',
        '2',
        '--d-ff',
        '16',
        '--steps',
        '2',
        '--positions',
        'rope',
        '--out',
        out,
      ],
      cli,
    );
    expect(code, got.err).toBe(0);
    const { model } = loadLanguageModel(new Uint8Array(readFileSync(out)));
    expect(model.config.positions).toBe('rope');
  }, 60_000);

  it('refuses bad --positions usage', () => {
    const { cli } = io();
    expect(() => trainCommand(['--task', 'copy', '--positions', 'alibi'], cli)).toThrow(
      new UsageError("train: --positions must be sinusoidal or rope, got 'alibi'"),
    );
    expect(() => trainCommand(['--task', 'scaling', '--positions', 'rope'], cli)).toThrow(
      /--positions is not an option of --task scaling/,
    );
    expect(() =>
      trainCommand(
        ['--task', 'lm', '--text', 'x.txt', '--d-model', '12', '--heads', '4', '--positions', 'rope'],
        cli,
      ),
    ).toThrow(/--positions rope needs an even head width/);
  });
});
