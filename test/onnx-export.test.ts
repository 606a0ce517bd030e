// toOnnx (qkv/onnx): every exported model runs in onnxruntime-web (WASM EP, in Node) and equals qkv's
// forward within 1e-5 — MultiHeadAttention (GQA, kdim/vdim, masks, causal both ways), SelfAttention,
// TinyTransformer encoder and decoder (sinusoidal or RoPE positions, attention-only too), with and without a
// key/value cache, opset 17 and 23 — and its structure (names, initializers, opset, IR version) is read back
// with a protobuf decoder of this file's own.
// One decision to know: weights are random everywhere (biases and LayerNorm affine included), so a
// parameter wired to the wrong place cannot hide behind a zero or a one.

import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type * as OrtTypes from 'onnxruntime-web';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KVCache } from '../src/cache/kv-cache.js';
import { UsageError } from '../src/cli/args.js';
import { exportCommand } from '../src/cli/export.js';
import { MultiHeadAttention, SelfAttention, Tensor, TinyTransformer } from '../src/index.js';
import { type OnnxExportOptions, toOnnx } from '../src/onnx/index.js';
import { loadCheckpoint, saveCheckpoint } from '../src/train/checkpoint.js';

type Ort = typeof OrtTypes;
let ort: Ort;

beforeAll(async () => {
  ort = await import('onnxruntime-web'); // Node: the "node" build, wasm from node_modules/onnxruntime-web/dist
  ort.env.wasm.numThreads = 1;
});

const TOL = 1e-5;

/** Largest |a − b|; NaN if either holds a NaN or the lengths differ. */
function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) return Number.NaN;
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (!(d <= m)) m = d;
  }
  return m;
}

function expectClose(label: string, actual: ArrayLike<number>, expected: ArrayLike<number>): void {
  const d = maxDiff(actual, expected);
  expect(d, `${label}: max |ORT − qkv| = ${d}`).toBeLessThanOrEqual(TOL);
}

async function session(bytes: Uint8Array) {
  return ort.InferenceSession.create(bytes, { executionProviders: ['wasm'], graphOptimizationLevel: 'all' });
}

const f32 = (t: Tensor) => new ort.Tensor('float32', t.data, t.shape);
const i64 = (values: ArrayLike<number>, dims: number[]) =>
  new ort.Tensor('int64', BigInt64Array.from(Array.from(values, (v) => BigInt(v))), dims);

let seed = 100;
const randn = (shape: readonly number[], scale = 1) => {
  const t = Tensor.randn([...shape], { seed: seed++ });
  for (let i = 0; i < t.size; i++) t.data[i] *= scale;
  return t;
};

// ---------- a protobuf decoder of the test's own: the model's structure, read back ----------

interface Field {
  field: number;
  wire: number;
  value: number | bigint | Uint8Array;
}

function fields(bytes: Uint8Array): Field[] {
  const out: Field[] = [];
  let pos = 0;
  const varint = (): bigint => {
    let v = 0n;
    let shift = 0n;
    for (;;) {
      const b = bytes[pos++];
      v |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) return v;
      shift += 7n;
    }
  };
  while (pos < bytes.length) {
    const tag = Number(varint());
    const field = tag >> 3;
    const wire = tag & 7;
    if (wire === 0) out.push({ field, wire, value: BigInt.asIntN(64, varint()) });
    else if (wire === 2) {
      const n = Number(varint());
      out.push({ field, wire, value: bytes.subarray(pos, pos + n) });
      pos += n;
    } else if (wire === 5) {
      out.push({
        field,
        wire,
        value: new DataView(bytes.buffer, bytes.byteOffset + pos, 4).getFloat32(0, true),
      });
      pos += 4;
    } else throw new Error(`wire type ${wire}`);
  }
  return out;
}
const text = (v: Field['value']) => new TextDecoder().decode(v as Uint8Array);
const all = (fs: Field[], n: number) => fs.filter((f) => f.field === n);
const one = (fs: Field[], n: number) => fs.find((f) => f.field === n);

interface DecodedValue {
  name: string;
  elemType: number;
  dims: (number | string)[];
}
interface DecodedModel {
  irVersion: number;
  opsets: { domain: string; version: number }[];
  producer: string;
  nodes: { op: string; inputs: string[]; outputs: string[]; attributes: string[] }[];
  initializers: Map<string, { dims: number[]; dataType: number; data: Float32Array }>;
  inputs: DecodedValue[];
  outputs: DecodedValue[];
  metadata: Record<string, string>;
}

function decodeModel(bytes: Uint8Array): DecodedModel {
  const m = fields(bytes);
  const g = fields(one(m, 7)!.value as Uint8Array);
  const valueInfo = (b: Uint8Array): DecodedValue => {
    const v = fields(b);
    const tensor = fields(one(fields(one(v, 2)!.value as Uint8Array), 1)!.value as Uint8Array);
    const shape = fields(one(tensor, 2)!.value as Uint8Array);
    return {
      name: text(one(v, 1)!.value),
      elemType: Number(one(tensor, 1)!.value),
      dims: all(shape, 1).map((d) => {
        const dim = fields(d.value as Uint8Array)[0];
        return dim.field === 1 ? Number(dim.value) : text(dim.value);
      }),
    };
  };
  // A packed repeated int64: varints back to back.
  const packed = (b: Uint8Array) => {
    const values: number[] = [];
    let v = 0n;
    let shift = 0n;
    for (const byte of b) {
      v |= BigInt(byte & 0x7f) << shift;
      shift += 7n;
      if (byte < 0x80) {
        values.push(Number(BigInt.asIntN(64, v)));
        v = 0n;
        shift = 0n;
      }
    }
    return values;
  };
  const initializers = new Map<string, { dims: number[]; dataType: number; data: Float32Array }>();
  for (const f of all(g, 5)) {
    const t = fields(f.value as Uint8Array);
    const dimsField = one(t, 1);
    const dims = dimsField ? packed(dimsField.value as Uint8Array) : [];
    const raw = one(t, 9)!.value as Uint8Array;
    const dataType = Number(one(t, 2)!.value);
    const data = dataType === 1 ? new Float32Array(raw.slice().buffer) : new Float32Array(0);
    initializers.set(text(one(t, 8)!.value), { dims, dataType, data });
  }
  return {
    irVersion: Number(one(m, 1)!.value),
    producer: text(one(m, 2)!.value),
    opsets: all(m, 8).map((f) => {
      const o = fields(f.value as Uint8Array);
      return { domain: text(one(o, 1)?.value ?? new Uint8Array(0)), version: Number(one(o, 2)!.value) };
    }),
    nodes: all(g, 1).map((f) => {
      const n = fields(f.value as Uint8Array);
      return {
        op: text(one(n, 4)!.value),
        inputs: all(n, 1).map((x) => text(x.value)),
        outputs: all(n, 2).map((x) => text(x.value)),
        attributes: all(n, 5).map((a) => text(one(fields(a.value as Uint8Array), 1)!.value)),
      };
    }),
    initializers,
    inputs: all(g, 11).map((f) => valueInfo(f.value as Uint8Array)),
    outputs: all(g, 12).map((f) => valueInfo(f.value as Uint8Array)),
    metadata: Object.fromEntries(
      all(m, 14).map((f) => {
        const e = fields(f.value as Uint8Array);
        return [text(one(e, 1)!.value), text(one(e, 2)!.value)];
      }),
    ),
  };
}

/** Checks the structure every export shares: producer, opset, IR version, values defined before use. */
function checkStructure(model: DecodedModel, opset: 17 | 23): void {
  expect(model.producer).toBe('qkv');
  expect(model.opsets).toEqual([{ domain: '', version: opset }]);
  expect(model.irVersion).toBe(opset === 17 ? 8 : 11);
  const defined = new Set([...model.inputs.map((v) => v.name), ...model.initializers.keys(), '']);
  for (const n of model.nodes) {
    for (const i of n.inputs) expect(defined.has(i), `${n.op} reads ${i} before it is defined`).toBe(true);
    for (const o of n.outputs) defined.add(o);
  }
  for (const o of model.outputs) expect(defined.has(o.name)).toBe(true);
  const ops = new Set(model.nodes.map((n) => n.op));
  if (opset === 17) expect(ops.has('Attention')).toBe(false);
  else expect(ops.has('Attention')).toBe(true);
}

/** The state dict's tensors are initializers under the same names, bit for bit. */
function checkWeights(model: DecodedModel, dict: Record<string, Tensor>): void {
  for (const [name, t] of Object.entries(dict)) {
    const init = model.initializers.get(name);
    expect(init, `initializer ${name}`).toBeDefined();
    expect(init!.dims).toEqual(t.shape);
    expect(init!.dataType).toBe(1);
    expect(Array.from(init!.data)).toEqual(Array.from(t.data));
  }
}

// ---------- MultiHeadAttention ----------

function randomMha(options: ConstructorParameters<typeof MultiHeadAttention>[0]): MultiHeadAttention {
  const m = new MultiHeadAttention(options);
  if (m.inProjBias) m.inProjBias = randn(m.inProjBias.shape, 0.5);
  if (m.outProjBias) m.outProjBias = randn(m.outProjBias.shape, 0.5);
  return m;
}

describe('MultiHeadAttention', () => {
  const cases: {
    name: string;
    mha: ConstructorParameters<typeof MultiHeadAttention>[0];
    causal?: boolean | 'top-left';
    sizes: [number, number, number][]; // B, L, S: one model run at each
    mask?: (B: number, H: number, L: number, S: number) => Tensor;
  }[] = [
    {
      name: 'packed, two batch sizes and lengths',
      mha: { embedDim: 16, numHeads: 4, seed: 1 },
      sizes: [
        [2, 5, 5],
        [3, 2, 7],
      ],
    },
    {
      name: 'causal (bottom-right), L < S and L > S',
      mha: { embedDim: 16, numHeads: 4, seed: 2 },
      causal: true,
      sizes: [
        [2, 3, 6],
        [1, 6, 3],
        [2, 5, 5],
      ],
    },
    {
      name: "causal 'top-left'",
      mha: { embedDim: 16, numHeads: 2, seed: 3 },
      causal: 'top-left',
      sizes: [
        [2, 4, 6],
        [1, 5, 5],
      ],
    },
    {
      name: 'L = 1',
      mha: { embedDim: 8, numHeads: 2, seed: 4 },
      causal: true,
      sizes: [
        [2, 1, 1],
        [1, 1, 9],
      ],
    },
    {
      name: 'GQA, kdim and vdim',
      mha: { embedDim: 24, numHeads: 6, numKvHeads: 2, kdim: 10, vdim: 7, seed: 5 },
      causal: true,
      sizes: [
        [2, 4, 4],
        [1, 3, 8],
      ],
    },
    {
      name: 'MQA, no bias',
      mha: { embedDim: 12, numHeads: 3, numKvHeads: 1, bias: false, seed: 6 },
      sizes: [[2, 3, 5]],
    },
    {
      name: 'key padding mask [B, 1, 1, S] with GQA',
      mha: { embedDim: 16, numHeads: 4, numKvHeads: 2, seed: 7 },
      causal: true,
      sizes: [
        [2, 4, 4],
        [3, 2, 6],
      ],
      mask: (B, _H, _L, S) =>
        new Tensor(
          Float32Array.from({ length: B * S }, (_, i) => (i % S < S - Math.floor(i / S) ? 1 : 0)),
          [B, 1, 1, S],
        ),
    },
    {
      name: 'per-head mask [B, H, L, S] with rows that see no key',
      mha: { embedDim: 8, numHeads: 2, seed: 8 },
      sizes: [[2, 3, 4]],
      mask: (B, H, L, S) =>
        new Tensor(
          Float32Array.from({ length: B * H * L * S }, (_, i) =>
            (i * 7) % 5 === 0 || ((i / S) | 0) % 4 === 1 ? 0 : 2.5,
          ),
          [B, H, L, S],
        ),
    },
  ];
  for (const opset of [17, 23] as const) {
    for (const c of cases) {
      it(`opset ${opset}: ${c.name}`, async () => {
        const mha = randomMha(c.mha);
        const options: OnnxExportOptions = { opset, mask: c.mask !== undefined };
        if (c.causal !== undefined) options.causal = c.causal;
        const bytes = toOnnx(mha, options);
        const model = decodeModel(bytes);
        checkStructure(model, opset);
        checkWeights(model, mha.stateDict());
        expect(model.inputs.map((v) => v.name)).toEqual([
          'query',
          'key',
          'value',
          ...(c.mask ? ['attn_mask'] : []),
        ]);
        expect(model.outputs).toEqual([
          { name: 'output', elemType: 1, dims: ['batch', 'sequence', mha.embedDim] },
        ]);
        const s = await session(bytes);
        for (const [B, L, S] of c.sizes) {
          const q = randn([B, L, mha.embedDim]);
          const k = randn([B, S, mha.kdim]);
          const v = randn([B, S, mha.vdim]);
          const mask = c.mask?.(B, mha.numHeads, L, S);
          const feeds: Record<string, OrtTypes.Tensor> = { query: f32(q), key: f32(k), value: f32(v) };
          if (mask) feeds.attn_mask = f32(mask);
          const got = (await s.run(feeds)).output;
          expect(got.dims).toEqual([B, L, mha.embedDim]);
          const want = mha.forward(q, k, v, { causal: c.causal ?? false, mask }).output;
          expectClose(`B=${B} L=${L} S=${S}`, got.data as Float32Array, want.data);
        }
      });
    }
  }

  it('dynamicAxes: false declares the fixed sizes and runs at them', async () => {
    const mha = randomMha({ embedDim: 8, numHeads: 2, seed: 9 });
    const bytes = toOnnx(mha, { dynamicAxes: false, shape: { batch: 2, length: 3, keyLength: 5 } });
    const model = decodeModel(bytes);
    expect(model.inputs.map((v) => v.dims)).toEqual([
      [2, 3, 8],
      [2, 5, 8],
      [2, 5, 8],
    ]);
    expect(model.outputs[0].dims).toEqual([2, 3, 8]);
    const s = await session(bytes);
    const [q, k, v] = [randn([2, 3, 8]), randn([2, 5, 8]), randn([2, 5, 8])];
    const got = (await s.run({ query: f32(q), key: f32(k), value: f32(v) })).output;
    expectClose('fixed', got.data as Float32Array, mha.forward(q, k, v).output.data);
    await expect(s.run({ query: f32(randn([1, 3, 8])), key: f32(k), value: f32(v) })).rejects.toThrow();
  });
});

// ---------- SelfAttention ----------

describe('SelfAttention', () => {
  for (const opset of [17, 23] as const) {
    for (const causal of [false, true]) {
      for (const masked of [false, true]) {
        it(`opset ${opset}, causal ${causal}, mask ${masked}`, async () => {
          const attn = new SelfAttention({ dModel: 12, dK: 5, dV: 7, seed: 10 });
          const bytes = toOnnx(attn, { opset, causal, mask: masked });
          const model = decodeModel(bytes);
          checkStructure(model, opset);
          checkWeights(model, { WQ: attn.WQ, WK: attn.WK, WV: attn.WV });
          const s = await session(bytes);
          for (const [B, L] of [
            [2, 4],
            [1, 1],
            [3, 6],
          ]) {
            const x = randn([B, L, 12]);
            const mask = masked
              ? new Tensor(
                  Float32Array.from({ length: B * L * L }, (_, i) => (i % 3 === 1 ? 0 : 1)),
                  [B, L, L],
                )
              : undefined;
            const feeds: Record<string, OrtTypes.Tensor> = { input: f32(x) };
            if (mask) feeds.attn_mask = f32(mask);
            const got = (await s.run(feeds)).output;
            const want = attn.forward(x, mask, { causal }).output;
            expect(got.dims).toEqual([B, L, 7]);
            expectClose(`B=${B} L=${L}`, got.data as Float32Array, want.data);
          }
        });
      }
    }
  }
});

// ---------- TinyTransformer ----------

type Config = ConstructorParameters<typeof TinyTransformer>[0];

/** A model with every parameter random (LayerNorm weights around 1, the rest around 0). */
function randomModel(config: Config, s: number): TinyTransformer {
  const model = new TinyTransformer(config, { seed: s });
  const dict = model.stateDict();
  for (const [name, t] of Object.entries(dict)) {
    const r = randn(t.shape, name.includes('norm') ? 0.2 : 0.4);
    if (name.includes('norm') && name.endsWith('weight')) for (let i = 0; i < r.size; i++) r.data[i] += 1;
    dict[name] = r;
  }
  model.loadStateDict(dict);
  return model;
}

function ids(B: number, L: number, V: number, s: number): Int32Array {
  return Int32Array.from({ length: B * L }, (_, i) => (i * 7 + s * 13 + ((i * i) % 5)) % V);
}

const ENCODER: Config = {
  vocabSize: 23,
  dModel: 16,
  numHeads: 4,
  numLayers: 2,
  dFF: 32,
  maxLen: 24,
  causal: false,
};
const DECODER: Config = { ...ENCODER, causal: true };

describe('TinyTransformer', () => {
  for (const opset of [17, 23] as const) {
    for (const [name, config] of [
      ['encoder', ENCODER],
      ['decoder', DECODER],
      ['decoder, scaleScores: false', { ...DECODER, scaleScores: false, numLayers: 1 }],
      ['decoder, positions: rope', { ...DECODER, positions: 'rope' }],
      ['encoder, positions: rope, ropeBase: 500', { ...ENCODER, positions: 'rope', ropeBase: 500 }],
      ['attention-only decoder (mlp: false), positions: rope', { ...DECODER, mlp: false, positions: 'rope' }],
    ] as const) {
      it(`opset ${opset}: ${name}, several shapes, padding`, async () => {
        const model = randomModel(config, 11);
        const bytes = toOnnx(model, { opset });
        const decoded = decodeModel(bytes);
        checkStructure(decoded, opset);
        checkWeights(decoded, model.stateDict());
        expect(decoded.inputs).toEqual([
          { name: 'input_ids', elemType: 7, dims: ['batch', 'sequence'] },
          { name: 'attention_mask', elemType: 7, dims: ['batch', 'sequence'] },
        ]);
        expect(decoded.outputs).toEqual([{ name: 'logits', elemType: 1, dims: ['batch', 'sequence', 23] }]);
        expect(JSON.parse(decoded.metadata['qkv.config'])).toEqual(model.config);
        const s = await session(bytes);
        const V = config.vocabSize;
        for (const [B, L, padded] of [
          [2, 6, false],
          [1, 1, false],
          [3, 4, true],
          [2, 7, true],
        ] as const) {
          const x = ids(B, L, V, B + L);
          // Padding: row b keeps its first L − 2b tokens (B=3, L=4: 4, 2, 0); a row with every key padded
          // gives zero attention weights in qkv, and the same here.
          const keep = Float32Array.from({ length: B * L }, (_, i) =>
            padded && i % L >= L - 2 * Math.floor(i / L) ? 0 : 1,
          );
          const got = (await s.run({ input_ids: i64(x, [B, L]), attention_mask: i64(keep, [B, L]) })).logits;
          const mask = padded ? new Tensor(keep, [B, 1, 1, L]) : undefined;
          const want = model.forward(x, B, L, { mask }).logits.data;
          expect(got.dims).toEqual([B, L, V]);
          expectClose(`B=${B} L=${L}${padded ? ' padded' : ''}`, got.data as Float32Array, want);
        }
      });
    }

    it(`opset ${opset}: no attention_mask input with mask: false`, async () => {
      const model = randomModel(DECODER, 12);
      const bytes = toOnnx(model, { opset, mask: false });
      const decoded = decodeModel(bytes);
      expect(decoded.inputs.map((v) => v.name)).toEqual(['input_ids']);
      // Without mask or cache L = S, so opset 23 can use the op's own (top-left) is_causal.
      const causalOps = decoded.nodes.filter(
        (n) => n.op === 'Attention' && n.attributes.includes('is_causal'),
      );
      expect(causalOps.length).toBe(opset === 23 ? DECODER.numLayers : 0);
      const s = await session(bytes);
      const x = ids(2, 5, 23, 1);
      const got = (await s.run({ input_ids: i64(x, [2, 5]) })).logits;
      expectClose('no mask', got.data as Float32Array, model.forward(x, 2, 5).logits.data);
    });

    for (const [label, decoderConfig] of [
      ['', DECODER],
      [' (positions: rope)', { ...DECODER, positions: 'rope' }],
      [' (attention only, rope)', { ...DECODER, positions: 'rope', mlp: false }],
    ] as const) {
      it(`opset ${opset}: kvCache — prefill then one-token steps equal qkv's cached forward${label}`, async () => {
        const model = randomModel(decoderConfig, 13);
        const { numLayers, numHeads: H, dModel } = DECODER;
        const E = dModel / H;
        const bytes = toOnnx(model, { opset, kvCache: true });
        const decoded = decodeModel(bytes);
        checkStructure(decoded, opset);
        expect(decoded.inputs.map((v) => v.name)).toEqual([
          'input_ids',
          'attention_mask',
          'position_ids',
          'past_key_values.0.key',
          'past_key_values.0.value',
          'past_key_values.1.key',
          'past_key_values.1.value',
        ]);
        expect(decoded.inputs[1].dims).toEqual(['batch', 'total_sequence']);
        expect(decoded.inputs[3].dims).toEqual(['batch', H, 'past_sequence', E]);
        expect(decoded.outputs.map((v) => v.name)).toEqual([
          'logits',
          'present.0.key',
          'present.0.value',
          'present.1.key',
          'present.1.value',
        ]);
        expect(decoded.outputs[1].dims).toEqual(['batch', H, 'total_sequence', E]);
        const attention = decoded.nodes.filter((n) => n.op === 'Attention');
        if (opset === 23) {
          // One Attention op per layer, reading the past and writing the present itself.
          expect(attention.map((n) => [n.inputs.slice(4), n.outputs.slice(1)])).toEqual(
            [0, 1].map((i) => [
              [`past_key_values.${i}.key`, `past_key_values.${i}.value`],
              [`present.${i}.key`, `present.${i}.value`],
            ]),
          );
          expect(attention.every((n) => !n.attributes.includes('is_causal'))).toBe(true); // bottom-right: a mask
        } else {
          expect(attention).toEqual([]);
          expect(
            decoded.nodes.filter((n) => n.op === 'Concat' && n.outputs[0].startsWith('present.')).length,
          ).toBe(4);
        }
        const s = await session(bytes);
        const B = 2;
        const cache = new KVCache({ numLayers, numKvHeads: H, headDim: E });
        let past: Record<string, OrtTypes.Tensor> = {};
        for (let i = 0; i < numLayers; i++) {
          for (const kv of ['key', 'value'])
            past[`past_key_values.${i}.${kv}`] = f32(Tensor.zeros([B, H, 0, E]));
        }
        let pastLength = 0;
        for (const [step, L] of [4, 1, 1, 1, 3, 1].entries()) {
          const x = ids(B, L, 23, step);
          const positions = Array.from({ length: B * L }, (_, i) => pastLength + (i % L));
          const out = await s.run({
            input_ids: i64(x, [B, L]),
            attention_mask: i64(new Array(B * (pastLength + L)).fill(1), [B, pastLength + L]),
            position_ids: i64(positions, [B, L]),
            ...past,
          });
          const want = model.forward(x, B, L, { cache }).logits.data;
          expectClose(`step ${step} (past ${pastLength}, L ${L})`, out.logits.data as Float32Array, want);
          pastLength += L;
          past = {};
          for (let i = 0; i < numLayers; i++) {
            for (const kv of ['key', 'value']) {
              const present = out[`present.${i}.${kv}`];
              expect(present.dims).toEqual([B, H, pastLength, E]);
              past[`past_key_values.${i}.${kv}`] = present;
            }
          }
        }
      });

      it(`opset ${opset}: greedy generation through the exported cache equals TinyTransformer.generate${label}`, async () => {
        const config = { ...decoderConfig, maxLen: 20 };
        const model = randomModel(config, 14);
        const { numLayers, numHeads: H, dModel, vocabSize: V } = config;
        const E = dModel / H;
        const s = await session(toOnnx(model, { opset, kvCache: true }));
        const prompt = Int32Array.of(3, 1, 4, 1, 5);
        const maxNewTokens = 12;
        const want = model.generate(prompt, { maxNewTokens, temperature: 0 });
        const made: number[] = [];
        let past: Record<string, OrtTypes.Tensor> = {};
        for (let i = 0; i < numLayers; i++) {
          for (const kv of ['key', 'value'])
            past[`past_key_values.${i}.${kv}`] = f32(Tensor.zeros([1, H, 0, E]));
        }
        let input: number[] = [...prompt];
        let n = 0;
        while (made.length < maxNewTokens) {
          const L = input.length;
          const out = await s.run({
            input_ids: i64(input, [1, L]),
            attention_mask: i64(new Array(n + L).fill(1), [1, n + L]),
            position_ids: i64(
              Array.from({ length: L }, (_, i) => n + i),
              [1, L],
            ),
            ...past,
          });
          n += L;
          const logits = (out.logits.data as Float32Array).subarray((L - 1) * V);
          let best = 0;
          for (let t = 1; t < V; t++) if (logits[t] > logits[best]) best = t;
          made.push(best);
          input = [best];
          past = {};
          for (let i = 0; i < numLayers; i++) {
            for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = out[`present.${i}.${kv}`];
          }
        }
        expect(made).toEqual(Array.from(want));
      });
    }
  }

  it('dynamicAxes: false with a cache declares fixed sizes', () => {
    const model = randomModel(DECODER, 15);
    const decoded = decodeModel(
      toOnnx(model, { kvCache: true, dynamicAxes: false, shape: { batch: 1, length: 1, pastLength: 7 } }),
    );
    expect(decoded.inputs.map((v) => v.dims)).toEqual([
      [1, 1],
      [1, 8],
      [1, 1],
      ...Array(4).fill([1, 4, 7, 4]),
    ]);
    expect(decoded.outputs.map((v) => v.dims)).toEqual([[1, 1, 23], ...Array(4).fill([1, 4, 8, 4])]);
  });
});

// ---------- options that cannot be expressed ----------

describe('errors', () => {
  const mha = new MultiHeadAttention({ embedDim: 8, numHeads: 2, seed: 1 });
  const encoder = new TinyTransformer(ENCODER);
  const decoder = new TinyTransformer(DECODER);
  it.each([
    [
      'kvCache on an encoder',
      () => toOnnx(encoder, { kvCache: true }),
      /toOnnx: options\.kvCache cannot be expressed for an encoder TinyTransformer \(causal: false\)/,
    ],
    [
      'kvCache on an attention layer',
      () => toOnnx(mha, { kvCache: true }),
      /toOnnx: options\.kvCache cannot be expressed for a MultiHeadAttention/,
    ],
    [
      'an unknown opset',
      () => toOnnx(mha, { opset: 18 as 17 }),
      /toOnnx: options\.opset must be 17 \(plain ops\) or 23 \(the Attention op\), got 18/,
    ],
    ['an unknown option', () => toOnnx(mha, { window: [1, 0] } as OnnxExportOptions), /toOnnx: .*window/],
    [
      'causal on a TinyTransformer',
      () => toOnnx(decoder, { causal: true }),
      /toOnnx: options\.causal cannot be set for a TinyTransformer: its config\.causal \(true\) decides/,
    ],
    [
      'a bad causal',
      () => toOnnx(mha, { causal: 'left' as 'top-left' }),
      /toOnnx: options\.causal must be true, false, 'bottom-right' or 'top-left', got "left"/,
    ],
    [
      'dynamicAxes: false without a shape',
      () => toOnnx(mha, { dynamicAxes: false }),
      /toOnnx: options\.shape \{ batch, length \} is required with dynamicAxes: false/,
    ],
    [
      'a shape with dynamic axes',
      () => toOnnx(mha, { shape: { batch: 1, length: 1 } }),
      /toOnnx: options\.shape fixes the sizes, which needs dynamicAxes: false/,
    ],
    [
      'a shape past maxLen',
      () =>
        toOnnx(decoder, {
          kvCache: true,
          dynamicAxes: false,
          shape: { batch: 1, length: 4, pastLength: 21 },
        }),
      /toOnnx: options\.shape asks for 25 positions .* maxLen=24/,
    ],
    [
      'not a module',
      () => toOnnx({} as MultiHeadAttention),
      /toOnnx: module must be a MultiHeadAttention, SelfAttention or TinyTransformer/,
    ],
  ])('%s', (_name, call, message) => {
    expect(call).toThrow(message);
  });
});

// ---------- the CLI ----------

describe('qkv export', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'qkv-onnx-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const run = (argv: string[]) => {
    let out = '';
    let err = '';
    const code = exportCommand(argv, {
      stdout: { write: (s: string) => (out += s) },
      stderr: { write: (s: string) => (err += s) },
      env: {},
    });
    return { code, out, err };
  };

  it('writes a file onnxruntime loads, with the checkpoint’s logits', async () => {
    const model = randomModel(DECODER, 16);
    const ckpt = join(dir, 'decoder.safetensors');
    writeFileSync(ckpt, saveCheckpoint(model));
    for (const [opset, extra] of [
      ['17', []],
      ['23', ['--kv-cache']],
    ] as const) {
      const out = join(dir, `decoder-${opset}.onnx`);
      const r = run(['--model', ckpt, '--out', out, '--opset', opset, ...extra]);
      expect(r.code).toBe(0);
      expect(r.out).toMatch(
        new RegExp(
          `^wrote .*decoder-${opset}\\.onnx: decoder \\(2 layers, dModel 16, vocab 23\\), opset ${opset}`,
        ),
      );
      const s = await session(new Uint8Array(readFileSync(out)));
      const x = ids(1, 3, 23, 2);
      const feeds: Record<string, OrtTypes.Tensor> = {
        input_ids: i64(x, [1, 3]),
        attention_mask: i64([1, 1, 1], [1, 3]),
      };
      if (extra.length) {
        feeds.position_ids = i64([0, 1, 2], [1, 3]);
        for (let i = 0; i < 2; i++) {
          for (const kv of ['key', 'value'])
            feeds[`past_key_values.${i}.${kv}`] = f32(Tensor.zeros([1, 4, 0, 4]));
        }
      }
      const got = (await s.run(feeds)).logits.data as Float32Array;
      expectClose(`cli opset ${opset}`, got, model.forward(x, 1, 3).logits.data);
    }
  });

  it('refuses bad usage with one clear line', () => {
    const encoder = join(dir, 'encoder.safetensors');
    writeFileSync(encoder, saveCheckpoint(randomModel(ENCODER, 17)));
    const out = join(dir, 'x.onnx');
    expect(() => run(['--out', out])).toThrow(new UsageError('export: --model <checkpoint> is required'));
    expect(() => run(['--model', encoder])).toThrow(new UsageError('export: --out <file.onnx> is required'));
    expect(() => run(['--model', encoder, '--out', out, '--opset', '18'])).toThrow(
      new UsageError("export: --opset must be 17 or 23, got '18'"),
    );
    expect(() => run(['--model', encoder, '--out', out, '--kv-cache'])).toThrow(
      /export: --kv-cache needs a decoder; .* is an encoder/,
    );
    expect(() => run(['--model', encoder, '--out', join(dir, 'nope', 'x.onnx')])).toThrow(
      /export: cannot write --out .*does not exist/,
    );
    expect(() => run(['--bogus'])).toThrow(UsageError);
    expect(run(['--model', join(dir, 'missing.safetensors'), '--out', out])).toMatchObject({
      code: 1,
      err: /no such checkpoint/,
    });
    expect(run(['--help']).out).toMatch(/^qkv export: write a checkpoint as an ONNX model/);
  });
});

// ---------- files for the hand-run scripts (scripts/onnx_check.py, scripts/torch_roundtrip.py) ----------

const FIXTURES = fileURLToPath(new URL('./fixtures/', import.meta.url));
const TORCH_CONFIG: Config = {
  vocabSize: 16,
  dModel: 16,
  numHeads: 2,
  numLayers: 2,
  dFF: 32,
  maxLen: 16,
  causal: true,
};
/** The token ids the torch round trip checks logits on: [2, 8]. */
const TORCH_IDS = Int32Array.from({ length: 16 }, (_, i) => (i * 5 + 3) % 16);

describe('the PyTorch round trip (scripts/torch_roundtrip.py)', () => {
  // The files themselves are written by scripts/onnx-samples.mjs (by hand, with the python scripts).
  it('the committed qkv fixture is what qkv computes from the committed checkpoint', () => {
    const { model } = loadCheckpoint(
      new Uint8Array(readFileSync(join(FIXTURES, 'torch-roundtrip.safetensors'))),
    );
    const fixture = JSON.parse(readFileSync(join(FIXTURES, 'torch-roundtrip-qkv.json'), 'utf8'));
    expect(fixture.ids).toEqual(Array.from(TORCH_IDS));
    expectClose('qkv fixture', model.forward(TORCH_IDS, 2, 8).logits.data, fixture.logits);
  });

  it('qkv loads the checkpoint PyTorch trained and saved (scripts/torch_roundtrip.py) and computes its logits', () => {
    const path = join(FIXTURES, 'torch-roundtrip-trained.safetensors');
    expect(existsSync(path), `${path}: run scripts/torch_roundtrip.py`).toBe(true);
    const { model, info } = loadCheckpoint(new Uint8Array(readFileSync(path)), path);
    expect(model.config).toEqual({ ...TORCH_CONFIG, scaleScores: true, dropout: 0 });
    expect(info.step).toBeGreaterThan(0);
    const fixture = JSON.parse(readFileSync(join(FIXTURES, 'torch-roundtrip-torch.json'), 'utf8'));
    expect(fixture.ids).toEqual(Array.from(TORCH_IDS));
    expectClose('PyTorch-trained logits', model.forward(TORCH_IDS, 2, 8).logits.data, fixture.logits);
    // Training moved the weights: the trained logits are not the untrained ones.
    const before = JSON.parse(readFileSync(join(FIXTURES, 'torch-roundtrip-qkv.json'), 'utf8')).logits;
    expect(maxDiff(fixture.logits, before)).toBeGreaterThan(0.01);
  });
});
