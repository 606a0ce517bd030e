// Loading checkpoints, as the CLI and the page do: from Node Buffers (pooled, at odd offsets), and refusing
// what would otherwise run as a different model: non-finite weights, and metadata of the wrong type, range
// or shape (every error names the function, the file when known, the field or tensor, expected and found).

import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { decodeSafetensors, encodeSafetensors } from '../src/io/safetensors.js';
import { TinyTransformer } from '../src/model/transformer.js';
import { Tensor } from '../src/tensor.js';
import { WordTokenizer } from '../src/text/word.js';
import { loadCheckpoint, saveCheckpoint } from '../src/train/checkpoint.js';
import { stackFromSafetensors } from '../src/viz/checkpoint.js';
import { stackFromStateDict } from '../src/viz/stack.js';
import { traceStack } from '../src/viz/trace.js';

const vocab = ['the', 'cat', 'sat', 'down'];
const config = { vocabSize: 4, dModel: 8, numHeads: 2, numLayers: 1, dFF: 16, maxLen: 8, causal: false };
const model = new TinyTransformer(config, { seed: 1 });
const good = saveCheckpoint(model, { task: 'test', step: 3, vocab });
const ids = Int32Array.from([0, 1, 2, 3]);
const logits = model.forward(ids, 1, 4).logits.data;

/** The good checkpoint with some metadata replaced (undefined deletes the key). */
function withMetadata(patch: Record<string, string | undefined>): Uint8Array {
  const { tensors, metadata } = decodeSafetensors(good);
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries({ ...metadata, ...patch })) if (v !== undefined) out[k] = v;
  return encodeSafetensors(tensors, out);
}

/** The good checkpoint as an older qkv wrote it: the vocabulary as a 'qkv.vocab' word list (given as JSON). */
function withLegacyVocab(json: string | undefined): Uint8Array {
  return withMetadata({ 'qkv.tokenizer': undefined, 'qkv.vocab': json });
}

/** The good checkpoint with qkv.config fields replaced (undefined deletes the field). */
function withConfig(patch: Record<string, unknown>): Uint8Array {
  return withMetadata({ 'qkv.config': JSON.stringify({ ...model.config, ...patch }) });
}

/** The good checkpoint with one weight replaced. */
function withWeight(name: string, index: number, value: number): Uint8Array {
  const { tensors, metadata } = decodeSafetensors(good);
  tensors[name].data[index] = value;
  return encodeSafetensors(tensors, metadata);
}

/** `bytes` as a Node Buffer at an odd offset inside a larger pooled ArrayBuffer. */
function oddBuffer(bytes: Uint8Array): Buffer {
  const buf = Buffer.concat([Buffer.alloc(7), Buffer.from(bytes)]).subarray(7);
  expect(buf.byteOffset % 4).not.toBe(0);
  return buf;
}

/** `bytes` written to a small file and read back with readFileSync (a view into Node's buffer pool). */
function fileBuffer(bytes: Uint8Array, name = 'tiny.safetensors'): Buffer {
  const path = join(mkdtempSync(join(tmpdir(), 'qkv-ckpt-')), name);
  writeFileSync(path, bytes);
  return readFileSync(path);
}

describe('loading from Node Buffers (regression: a Buffer is a view into a pooled slab)', () => {
  it('loadCheckpoint reads a Buffer at an odd offset and a readFileSync Buffer', () => {
    for (const buf of [oddBuffer(good), fileBuffer(good)]) {
      const { model: loaded, info } = loadCheckpoint(buf);
      expect(info).toEqual({ task: 'test', step: 3, tokenizer: new WordTokenizer(vocab) });
      expect(loaded.forward(ids, 1, 4).logits.data).toEqual(logits);
    }
  });

  it('the committed models/pronoun.safetensors passes every check, read with readFileSync', () => {
    const path = 'models/pronoun.safetensors';
    const { model: pronoun, info } = loadCheckpoint(readFileSync(path), path);
    expect(info.task).toBe('pronoun');
    expect(info.tokenizer?.vocabSize).toBe(pronoun.config.vocabSize); // its 'qkv.vocab', read as a WordTokenizer
    expect(stackFromSafetensors(readFileSync(path), path).layers).toHaveLength(pronoun.config.numLayers);
  });

  it('stackFromSafetensors reads a Buffer at an odd offset and a readFileSync Buffer', () => {
    for (const buf of [oddBuffer(good), fileBuffer(good)]) {
      const stack = stackFromSafetensors(buf, 'tiny.safetensors');
      expect(stack.vocab).toEqual(vocab);
      expect(stack.layers[0].selfAttn.inProjWeight?.data).toEqual(
        Float32Array.from(model.params.get('layers.0.self_attn.in_proj_weight')!.data),
      );
    }
  });
});

describe('non-finite weights are refused by the loaders, not by the file reader', () => {
  const tensor = 'layers.0.linear1.weight';
  for (const [label, value] of [
    ['NaN', Number.NaN],
    ['Infinity', Number.POSITIVE_INFINITY],
    ['-Infinity', Number.NEGATIVE_INFINITY],
  ] as const) {
    it(`${label} in ${tensor}`, () => {
      const bad = withWeight(tensor, 5, value);
      expect(decodeSafetensors(bad).tensors[tensor].data[5]).toBe(value); // the reader stays faithful
      expect(() => loadCheckpoint(bad, 'bad.safetensors')).toThrow(
        `loadCheckpoint: bad.safetensors: tensor '${tensor}' holds ${label} at index 5`,
      );
      expect(() => loadCheckpoint(bad)).toThrow(
        `loadCheckpoint: tensor '${tensor}' holds ${label} at index 5`,
      );
      expect(() => stackFromSafetensors(bad, 'bad.safetensors')).toThrow(
        `stackFromSafetensors: bad.safetensors: tensor '${tensor}' holds ${label} at index 5`,
      );
    });
  }

  it('the embedding and the final norm too', () => {
    expect(() => loadCheckpoint(withWeight('embedding.weight', 0, Number.NaN))).toThrow(
      "loadCheckpoint: tensor 'embedding.weight' holds NaN at index 0",
    );
    expect(() => loadCheckpoint(withWeight('norm.bias', 7, Number.POSITIVE_INFINITY))).toThrow(
      "tensor 'norm.bias' holds Infinity at index 7",
    );
  });

  it('stackFromStateDict refuses them as well', () => {
    const dict: Record<string, Tensor> = {
      ...decodeSafetensors(good).tensors,
    };
    dict['layers.0.norm2.bias'] = Tensor.from([0, 0, Number.NaN, 0, 0, 0, 0, 0]);
    expect(() => stackFromStateDict(dict, { heads: 2, vocab })).toThrow(
      "stackFromStateDict: tensor 'layers.0.norm2.bias' holds NaN at index 2",
    );
  });
});

describe('checkpoint metadata is validated (regression: scaleScores "no" ran as true, vocab {length} crashed)', () => {
  const fn = 'loadCheckpoint: bad.safetensors: ';
  const cases: [string, Uint8Array, string][] = [
    [
      'scaleScores a string',
      withConfig({ scaleScores: 'no' }),
      `qkv.config field 'scaleScores' must be a boolean, found "no"`,
    ],
    [
      'causal a string',
      withConfig({ causal: 'yes' }),
      `qkv.config field 'causal' must be a boolean, found "yes"`,
    ],
    [
      'causal missing',
      withConfig({ causal: undefined }),
      `qkv.config field 'causal' must be a boolean, found nothing`,
    ],
    [
      'dModel a string',
      withConfig({ dModel: '8' }),
      `qkv.config field 'dModel' must be a positive integer, found "8"`,
    ],
    [
      'numHeads 0',
      withConfig({ numHeads: 0 }),
      `qkv.config field 'numHeads' must be a positive integer, found 0`,
    ],
    [
      'numHeads fractional',
      withConfig({ numHeads: 2.5 }),
      `qkv.config field 'numHeads' must be a positive integer, found 2.5`,
    ],
    [
      'numHeads not dividing dModel',
      withConfig({ numHeads: 3 }),
      `qkv.config field 'dModel' must be a multiple of numHeads (3), found 8`,
    ],
    [
      'numLayers negative',
      withConfig({ numLayers: -1 }),
      `qkv.config field 'numLayers' must be a positive integer, found -1`,
    ],
    [
      'maxLen too long',
      withConfig({ maxLen: 1e12 }),
      `qkv.config asks for maxLen 1000000000000, but field 'maxLen' must be an integer from 1 to 65536`,
    ],
    [
      'dropout out of range',
      withConfig({ dropout: 2 }),
      `qkv.config field 'dropout' must be a number in [0, 1), found 2`,
    ],
    [
      'dropout a string',
      withConfig({ dropout: '0.1' }),
      `qkv.config field 'dropout' must be a number in [0, 1), found "0.1"`,
    ],
    ['an unknown field', withConfig({ positional: 'rope' }), `qkv.config has an unknown field 'positional'`],
    [
      'config an array',
      withMetadata({ 'qkv.config': '[1,2]' }),
      `qkv.config must be a JSON object, found [1,2]`,
    ],
    ['config null', withMetadata({ 'qkv.config': 'null' }), `qkv.config must be a JSON object, found null`],
    ['config not JSON', withMetadata({ 'qkv.config': '{nope' }), `qkv.config is not valid JSON`],
    [
      'vocab {length: 96}',
      withLegacyVocab('{"length":96}'),
      `qkv.vocab must be an array of distinct strings, found {"length":96}`,
    ],
    ['vocab of numbers', withLegacyVocab('[1,2,3,4]'), `qkv.vocab entry 0 must be a string, found 1`],
    ['vocab with a repeat', withLegacyVocab('["the","cat","the","down"]'), `qkv.vocab entry 2 repeats "the"`],
    [
      'vocab too short',
      withLegacyVocab('["the","cat","sat"]'),
      `qkv.vocab has 3 words but qkv.config has vocabSize 4`,
    ],
    ['vocab not JSON', withLegacyVocab('[the'), `qkv.vocab is not valid JSON`],
    [
      'step a word',
      withMetadata({ 'qkv.step': 'abc' }),
      `qkv.step must be a non-negative integer, found "abc"`,
    ],
    [
      'step negative',
      withMetadata({ 'qkv.step': '-1' }),
      `qkv.step must be a non-negative integer, found "-1"`,
    ],
    [
      'step fractional',
      withMetadata({ 'qkv.step': '1.5' }),
      `qkv.step must be a non-negative integer, found "1.5"`,
    ],
    ['step empty', withMetadata({ 'qkv.step': '' }), `qkv.step must be a non-negative integer, found ""`],
  ];
  for (const [name, bytes, message] of cases) {
    it(`loadCheckpoint: ${name}`, () => {
      expect(() => loadCheckpoint(bytes, 'bad.safetensors')).toThrow(fn + message);
    });
  }

  it('loadCheckpoint still accepts what saveCheckpoint writes, and optional fields left out', () => {
    expect(loadCheckpoint(withConfig({ scaleScores: false })).model.config.scaleScores).toBe(false);
    const bare = loadCheckpoint(
      withMetadata({ 'qkv.tokenizer': undefined, 'qkv.step': undefined, 'qkv.task': undefined }),
    );
    expect(bare.info).toEqual({});
    expect(loadCheckpoint(withConfig({ scaleScores: undefined, dropout: undefined })).model.config).toEqual(
      model.config,
    );
  });

  const viz = 'stackFromSafetensors: bad.safetensors: ';
  const vizCases: [string, Uint8Array, string][] = [
    [
      'numHeads a string',
      withConfig({ numHeads: '2' }),
      `qkv.config field 'numHeads' must be a positive integer, found "2"`,
    ],
    [
      'numHeads missing',
      withConfig({ numHeads: undefined }),
      `qkv.config field 'numHeads' must be a positive integer, found nothing`,
    ],
    [
      'causal a string',
      withConfig({ causal: 'no' }),
      `qkv.config field 'causal' must be a boolean, found "no"`,
    ],
    [
      'scaleScores a string',
      withConfig({ scaleScores: 'no' }),
      `qkv.config field 'scaleScores' must be a boolean, found "no"`,
    ],
    [
      'numLayers disagreeing with the tensors',
      withConfig({ numLayers: 5 }),
      `the config has 5 layers (63 tensors) but the file holds 15 tensors`,
    ],
    [
      'dModel disagreeing with the tensors',
      withConfig({ dModel: 16 }),
      `embedding.weight should be [4,16] for the stored config, got [4,8]`,
    ],
    ['config an array', withMetadata({ 'qkv.config': '[]' }), `qkv.config must be a JSON object, found []`],
    [
      'vocab {length: 96}',
      withLegacyVocab('{"length":96}'),
      `qkv.vocab must be an array of distinct strings, found {"length":96}`,
    ],
    ['vocab with a repeat', withLegacyVocab('["the","cat","the","down"]'), `qkv.vocab entry 2 repeats "the"`],
    [
      'tokenizer missing',
      withLegacyVocab(undefined),
      `no 'qkv.tokenizer' (nor the older 'qkv.vocab') in its metadata`,
    ],
    [
      'step a word',
      withMetadata({ 'qkv.step': 'abc' }),
      `qkv.step must be a non-negative integer, found "abc"`,
    ],
    ['config not JSON', withMetadata({ 'qkv.config': '{nope' }), `qkv.config is not valid JSON`],
  ];
  for (const [name, bytes, message] of vizCases) {
    it(`stackFromSafetensors: ${name}`, () => {
      expect(() => stackFromSafetensors(bytes, 'bad.safetensors')).toThrow(viz + message);
    });
  }

  it('stackFromSafetensors reads an attention-only checkpoint: blocks without an MLP, traced as the model runs', () => {
    const attentionOnly = new TinyTransformer({ ...config, mlp: false, numLayers: 2 }, { seed: 2 });
    const bytes = saveCheckpoint(attentionOnly, { vocab });
    const stack = stackFromSafetensors(bytes, 'attn.safetensors');
    expect(stack.layers).toHaveLength(2);
    for (const layer of stack.layers) expect('linear1' in layer).toBe(false);
    const tokens = ['cat', 'the', 'down', 'sat'];
    const trace = traceStack(stack, tokens);
    const ids4 = Int32Array.from(tokens, (t) => vocab.indexOf(t));
    const { weights } = attentionOnly.forward(ids4, 1, 4, { needWeights: true });
    for (let l = 0; l < 2; l++) {
      const want = weights[l].data;
      const got = trace.weights[l].data;
      expect(got.length).toBe(want.length);
      for (let i = 0; i < want.length; i++) expect(got[i]).toBeCloseTo(want[i], 6);
    }
    // A stack whose layers disagree (one with an MLP, one without) is refused, naming the layer.
    const withMlp = decodeSafetensors(
      saveCheckpoint(new TinyTransformer({ ...config, numLayers: 2 }, { seed: 2 }), { vocab }),
    ).tensors;
    const mixed = Object.fromEntries(
      Object.entries(withMlp).filter(([n]) => !/^layers\.1\.(linear|norm2)/.test(n)),
    );
    expect(() => stackFromStateDict(mixed, { heads: 2, vocab })).toThrow(
      'stackFromStateDict: layer 1 has no MLP (linear1, linear2, norm2) but layer 0 has',
    );
    // A layer whose norm1.weight is missing is not silently the end of the stack.
    const gap = Object.fromEntries(Object.entries(withMlp).filter(([n]) => n !== 'layers.1.norm1.weight'));
    expect(() => stackFromStateDict(gap, { heads: 2, vocab })).toThrow(
      /stackFromStateDict: 'layers\.1\.[a-z_.0-9]+' belongs to a layer after the 1 read, but 'layers\.1\.norm1\.weight' is missing/,
    );
    // An MLP of width 0 is refused where it is read, not deep inside a trace.
    const empty = { ...withMlp, 'layers.0.linear1.weight': new Tensor(new Float32Array(0), [0, 8]) };
    expect(() => stackFromStateDict(empty, { heads: 2, vocab })).toThrow(
      "stackFromStateDict: 'layers.0.linear1.weight' must be [F, 8] with F ≥ 1, got [0,8]",
    );
  });

  it('stackFromSafetensors says when the checkpoint was trained without ÷√d_k', () => {
    expect(stackFromSafetensors(good, 'tiny').description).toBe(
      'trained checkpoint tiny (task test, encoder, 1 layers × 2 heads, d_model 8, 3 steps; 4-word vocabulary)',
    );
    expect(stackFromSafetensors(withConfig({ scaleScores: false }), 'tiny').description).toContain(
      'scores not scaled by 1/√d_k',
    );
  });
});

describe('saveCheckpoint refuses what loadCheckpoint would refuse', () => {
  it('info fields', () => {
    expect(() => saveCheckpoint(model, { step: -1 })).toThrow(
      'saveCheckpoint: info.step must be a non-negative integer, found -1',
    );
    expect(() => saveCheckpoint(model, { vocab: ['a', 'a', 'b', 'c'] })).toThrow(
      'saveCheckpoint: info.vocab entry 1 repeats "a"',
    );
    expect(() => saveCheckpoint(model, { vocab: ['a'] })).toThrow(
      'saveCheckpoint: info.vocab has 1 words but the model has vocabSize 4',
    );
    expect(() => saveCheckpoint(model, { extra: { 'qkv.config': '{}' } })).toThrow(
      "saveCheckpoint: info.extra may not set 'qkv.config'",
    );
  });
});

describe('stackFromStateDict validates its options and the tensor shapes', () => {
  const dict: Record<string, Tensor> = decodeSafetensors(good).tensors;
  const cases: [string, () => unknown, string][] = [
    [
      'heads 0',
      () => stackFromStateDict(dict, { heads: 0, vocab }),
      'stackFromStateDict: heads must be a positive integer, found 0',
    ],
    [
      'heads a string',
      () => stackFromStateDict(dict, { heads: '2' as unknown as number, vocab }),
      `heads must be a positive integer, found "2"`,
    ],
    [
      'vocab not an array',
      () => stackFromStateDict(dict, { heads: 2, vocab: { length: 4 } as unknown as string[] }),
      'stackFromStateDict: vocab must be an array of distinct strings, found {"length":4}',
    ],
    [
      'vocab with a repeat',
      () => stackFromStateDict(dict, { heads: 2, vocab: ['a', 'b', 'a', 'c'] }),
      'stackFromStateDict: vocab entry 2 repeats "a"',
    ],
    [
      'embedScale NaN',
      () => stackFromStateDict(dict, { heads: 2, vocab, embedScale: Number.NaN }),
      'stackFromStateDict: embedScale must be a finite number, found NaN',
    ],
    [
      'a bias of the wrong length',
      () => stackFromStateDict({ ...dict, 'layers.0.linear1.bias': Tensor.zeros([15]) }, { heads: 2, vocab }),
      "stackFromStateDict: 'layers.0.linear1.bias' must be [16], got [15]",
    ],
    [
      'an out_proj of the wrong shape',
      () =>
        stackFromStateDict(
          { ...dict, 'layers.0.self_attn.out_proj.weight': Tensor.zeros([8, 4]) },
          { heads: 2, vocab },
        ),
      "stackFromStateDict: 'layers.0.self_attn.out_proj.weight' must be [8,8], got [8,4]",
    ],
    [
      'in_proj_weight rows not a multiple of 3',
      () =>
        stackFromStateDict(
          { ...dict, 'layers.0.self_attn.in_proj_weight': Tensor.zeros([23, 8]) },
          { heads: 2, vocab },
        ),
      "stackFromStateDict: 'layers.0.self_attn.in_proj_weight' must be [3·D, D] = [24,8], got [23,8]",
    ],
  ];
  for (const [name, call, message] of cases) {
    it(name, () => expect(call).toThrow(message));
  }

  it('layers with different d_k are refused (the stack has one d_k)', () => {
    const two = { ...dict };
    for (const [k, v] of Object.entries(dict))
      if (k.startsWith('layers.0.')) two[k.replace('layers.0.', 'layers.1.')] = v;
    delete two['layers.1.self_attn.in_proj_weight'];
    for (const x of ['q', 'k', 'v']) two[`layers.1.self_attn.${x}_proj_weight`] = Tensor.zeros([4, 8]);
    two['layers.1.self_attn.in_proj_bias'] = Tensor.zeros([12]);
    two['layers.1.self_attn.out_proj.weight'] = Tensor.zeros([8, 4]);
    expect(() => stackFromStateDict(two, { heads: 2, vocab })).toThrow(
      'stackFromStateDict: layer 1 has d_k 2 and d_v 2 per head but layer 0 has d_k 4 and d_v 4',
    );
  });
});
