// Files for the by-hand scripts (not run in CI), from the built package (npm run build first):
//   node scripts/onnx-samples.mjs --onnx-out <dir>   sample exports, opsets 17 and 23, for scripts/onnx_check.py
//   node scripts/onnx-samples.mjs --torch-fixture    test/fixtures/torch-roundtrip{.safetensors,-qkv.json},
//                                                   the checkpoint and logits scripts/torch_roundtrip.py starts from
// One decision to know: weights are random normal draws (biases and LayerNorm gains included), so an export
// that drops or misplaces a weight shows in the outputs; the same seeds give the same files.

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { MultiHeadAttention, SelfAttention, Tensor, TinyTransformer } from '../dist/index.node.js';
import { saveCheckpoint } from '../dist/nn/index.node.js';
import { toOnnx } from '../dist/onnx/index.js';

const { values } = parseArgs({
  options: { 'onnx-out': { type: 'string' }, 'torch-fixture': { type: 'boolean' } },
});
if (!values['onnx-out'] && !values['torch-fixture']) {
  console.error('usage: node scripts/onnx-samples.mjs [--onnx-out <dir>] [--torch-fixture]');
  process.exit(2);
}

let seed = 100;
const randn = (shape, scale = 1) => {
  const t = Tensor.randn([...shape], { seed: seed++ });
  for (let i = 0; i < t.size; i++) t.data[i] *= scale;
  return t;
};
function randomMha(options) {
  const m = new MultiHeadAttention(options);
  if (m.inProjBias) m.inProjBias = randn(m.inProjBias.shape, 0.5);
  if (m.outProjBias) m.outProjBias = randn(m.outProjBias.shape, 0.5);
  return m;
}
function randomModel(config, s) {
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

if (values['onnx-out']) {
  const dir = values['onnx-out'];
  mkdirSync(dir, { recursive: true });
  const ENCODER = {
    vocabSize: 23,
    dModel: 16,
    numHeads: 4,
    numLayers: 2,
    dFF: 32,
    maxLen: 24,
    causal: false,
  };
  const DECODER = { ...ENCODER, causal: true };
  const samples = [
    ['mha-packed', randomMha({ embedDim: 16, numHeads: 4, seed: 1 }), { causal: true, mask: true }],
    ['mha-gqa', randomMha({ embedDim: 24, numHeads: 6, numKvHeads: 2, kdim: 10, vdim: 7, seed: 2 }), {}],
    [
      'self-attention',
      new SelfAttention({ dModel: 12, dK: 5, dV: 7, seed: 3 }),
      { causal: true, mask: true },
    ],
    ['encoder', randomModel(ENCODER, 4), {}],
    ['decoder', randomModel(DECODER, 5), {}],
    ['decoder-kv-cache', randomModel(DECODER, 6), { kvCache: true }],
    ['decoder-fixed', randomModel(DECODER, 7), { dynamicAxes: false, shape: { batch: 1, length: 8 } }],
  ];
  for (const opset of [17, 23]) {
    for (const [name, module, options] of samples) {
      writeFileSync(join(dir, `${name}-opset${opset}.onnx`), toOnnx(module, { ...options, opset }));
    }
  }
  console.log(`wrote ${samples.length * 2} models to ${dir}`);
}

if (values['torch-fixture']) {
  const fixtures = fileURLToPath(new URL('../test/fixtures/', import.meta.url));
  const config = { vocabSize: 16, dModel: 16, numHeads: 2, numLayers: 2, dFF: 32, maxLen: 16, causal: true };
  const ids = Int32Array.from({ length: 16 }, (_, i) => (i * 5 + 3) % 16); // [2, 8], as the test reads them
  seed = 100;
  const model = randomModel(config, 21);
  writeFileSync(
    join(fixtures, 'torch-roundtrip.safetensors'),
    saveCheckpoint(model, { task: 'torch-roundtrip' }),
  );
  const logits = model.forward(ids, 2, 8).logits.data;
  const fixture = { ids: Array.from(ids), shape: [2, 8, 16], logits: Array.from(logits) };
  writeFileSync(join(fixtures, 'torch-roundtrip-qkv.json'), `${JSON.stringify(fixture)}\n`);
  console.log('wrote test/fixtures/torch-roundtrip.safetensors and torch-roundtrip-qkv.json');
}
