// The model the playground and `qkv viz` look inside: token embedding + sinusoidal positions (or, for a
// checkpoint trained with positions: 'rope', no table and q, k rotated in every block), then N
// pre-LayerNorm blocks (x += Attn(LN(x)); x += MLP(LN(x)), tanh-GELU MLP), the shape of qkv's
// TinyTransformer. One decision to know: weights come from one boundary — `seededStack` (deterministic,
// untrained) or `stackFromStateDict` (a checkpoint's tensors under PyTorch nn.TransformerEncoderLayer
// names) — and both hold one weight format, a record named and shaped by the parameter table
// (model/params.ts), of which each StackLayer is a view; traceStack runs the library's own block forward.

import { checkVocabulary, formatFound, nonFiniteAt } from '../io/checks.js';
import { type BlockDims, blockParamSpecs, fillInit } from '../model/params.js';
import { Generator } from '../random.js';
import { formatShape } from '../shape.js';
import { Tensor, type TensorLike, toTensor } from '../tensor.js';
import { hashToken } from './tokens.js';

/** One block's weights, PyTorch layout: a linear map is weight [out, in] and y = x·Wᵀ + b. */
export interface StackLayer {
  norm1: { weight: Float32Array; bias: Float32Array };
  wq: Tensor; // [H·dK, D]
  wk: Tensor; // [H·dK, D]
  wv: Tensor; // [H·dV, D]
  bq: Float32Array;
  bk: Float32Array;
  bv: Float32Array;
  wo: Tensor; // [D, H·dV]
  bo: Float32Array;
  norm2: { weight: Float32Array; bias: Float32Array };
  fc1: Tensor; // [F, D]
  b1: Float32Array;
  fc2: Tensor; // [D, F]
  b2: Float32Array;
}

/** A stack of attention blocks plus the way it embeds tokens. */
export interface AttentionStack {
  dModel: number;
  heads: number;
  dK: number;
  dV: number;
  layers: StackLayer[];
  /** One line for the page: where the weights came from. */
  description: string;
  /** Token embeddings [L, D] (already scaled, e.g. ×√D), without positions. */
  embed(tokens: readonly string[]): Tensor;
  /**
   * How positions enter: 'sinusoidal' (default: the table added to the embeddings) or 'rope' (nothing
   * added; every block rotates q and k by position, base `ropeBase`, default 10000).
   */
  positions?: 'sinusoidal' | 'rope';
  ropeBase?: number;
  /** The tokens `embed` knows, when it has a fixed vocabulary (a checkpoint); undefined = any token. */
  vocab?: readonly string[];
}

/** The shape and seed of {@link seededStack}'s untrained stack (what `qkv viz` draws without --model). */
export interface SeededStackConfig {
  dModel: number;
  /** Query/key width per head (need not be dModel / heads). */
  dK: number;
  /** Value width per head; default dK. */
  dV?: number;
  heads: number;
  layers: number;
  seed: number;
}

/**
 * Block `prefix` ('layers.0.') of a record of PyTorch-named tensors as a StackLayer whose arrays are views
 * of the record's (a packed in_proj_weight [3D, D] is read as three [D, D] views, not copied).
 */
function layerView(get: (name: string) => Tensor | undefined, prefix: string): StackLayer {
  const a = `${prefix}self_attn.`;
  let w3: Tensor[];
  const packed = get(`${a}in_proj_weight`);
  if (packed) {
    const D = packed.shape[1];
    w3 = [0, 1, 2].map((k) => new Tensor(packed.data.subarray(k * D * D, (k + 1) * D * D), [D, D]));
  } else {
    w3 = ['q', 'k', 'v'].map((x) => get(`${a}${x}_proj_weight`)!);
  }
  const [wq, wk, wv] = w3;
  const qk = wq.shape[0];
  const b = get(`${a}in_proj_bias`)!.data;
  const data = (name: string) => get(prefix + name)!.data;
  return {
    norm1: { weight: data('norm1.weight'), bias: data('norm1.bias') },
    wq,
    wk,
    wv,
    bq: b.subarray(0, qk),
    bk: b.subarray(qk, 2 * qk),
    bv: b.subarray(2 * qk),
    wo: get(`${a}out_proj.weight`)!,
    bo: data('self_attn.out_proj.bias'),
    norm2: { weight: data('norm2.weight'), bias: data('norm2.bias') },
    fc1: get(`${prefix}linear1.weight`)!,
    b1: data('linear1.bias'),
    fc2: get(`${prefix}linear2.weight`)!,
    b2: data('linear2.bias'),
  };
}

/**
 * Deterministic, untrained weights: Xavier-uniform Q/K/V projections (so Q·K has variance ≈ d_k, the
 * article's premise), U(±1/√fan_in) for the rest, LayerNorm 1/0, and one seeded N(0, 1) embedding per
 * lower-cased token (the same word gets the same vector in every sentence).
 */
export function seededStack(config: SeededStackConfig): AttentionStack {
  const fn = 'seededStack';
  const { dModel: D, dK, heads: H, layers, seed } = config;
  const dV = config.dV ?? dK;
  for (const [name, v, max] of [
    ['dModel', D, 4096],
    ['dK', dK, 4096],
    ['dV', dV, 4096],
    ['heads', H, 64],
    ['layers', layers, 48],
  ] as const) {
    if (!Number.isSafeInteger(v) || v < 1 || v > max) {
      throw new RangeError(`${fn}: ${name} must be an integer from 1 to ${max}, got ${String(v)}`);
    }
  }
  if (!Number.isFinite(seed)) throw new RangeError(`${fn}: seed must be a finite number, got ${seed}`);
  // The parameter table's block tensors under its 'article' rule, drawn in table order (per layer: Q, K,
  // V, out_proj, linear1, linear2; norms and biases draw nothing).
  const gen = new Generator(seed);
  const dims: BlockDims = { dModel: D, numHeads: H, headDim: dK, valueDim: dV, dFF: 4 * D };
  const record: Record<string, Tensor> = {};
  const stackLayers: StackLayer[] = [];
  for (let l = 0; l < layers; l++) {
    for (const { name, shape, init } of blockParamSpecs(dims, `layers.${l}.`, 'article')) {
      record[name] = Tensor.zeros(shape);
      fillInit(init, record[name].data, gen);
    }
    stackLayers.push(layerView((name) => record[name], `layers.${l}.`));
  }
  const embed = (tokens: readonly string[]): Tensor => {
    const x = new Float32Array(tokens.length * D);
    tokens.forEach((t, i) => {
      const g = new Generator((hashToken(t.toLowerCase()) ^ Math.imul(seed | 0, 0x9e3779b9)) >>> 0);
      for (let c = 0; c < D; c++) x[i * D + c] = g.normal();
    });
    return new Tensor(x, [tokens.length, D]);
  };
  const shape = `d_model ${D}, ${H} head${H > 1 ? 's' : ''} of d_k ${dK}, ${layers} layer${layers > 1 ? 's' : ''}`;
  return {
    dModel: D,
    heads: H,
    dK,
    dV,
    layers: stackLayers,
    description: `seeded untrained weights (seed ${seed}; ${shape})`,
    embed,
  };
}

/**
 * The stack's attention and MLP tensors under the names `stackFromStateDict` reads (PyTorch's
 * nn.TransformerEncoderLayer names: packed `in_proj_weight` when H·d_k = H·d_v = D, else
 * `q_proj_weight` / `k_proj_weight` / `v_proj_weight`). The embedding is not included: a seeded stack
 * embeds any word, so the caller adds `embedding.weight` for the vocabulary it wants.
 */
export function stackStateDict(stack: AttentionStack): Record<string, Tensor> {
  const out: Record<string, Tensor> = {};
  const { dModel: D, heads: H, dK, dV } = stack;
  stack.layers.forEach((l, i) => {
    const dims: BlockDims = { dModel: D, numHeads: H, headDim: dK, valueDim: dV, dFF: l.fc1.shape[0] };
    const prefix = `layers.${i}.`;
    for (const { name, shape } of blockParamSpecs(dims, prefix)) {
      out[name] = new Tensor(concat(STACK_FIELDS[name.slice(prefix.length)](l)), shape);
    }
  });
  return out;
}

/** Where each block tensor of the parameter table sits in a StackLayer (several arrays: packed in order). */
const STACK_FIELDS: Record<string, (l: StackLayer) => Float32Array[]> = {
  'norm1.weight': (l) => [l.norm1.weight],
  'norm1.bias': (l) => [l.norm1.bias],
  'self_attn.in_proj_weight': (l) => [l.wq.data, l.wk.data, l.wv.data],
  'self_attn.q_proj_weight': (l) => [l.wq.data],
  'self_attn.k_proj_weight': (l) => [l.wk.data],
  'self_attn.v_proj_weight': (l) => [l.wv.data],
  'self_attn.in_proj_bias': (l) => [l.bq, l.bk, l.bv],
  'self_attn.out_proj.weight': (l) => [l.wo.data],
  'self_attn.out_proj.bias': (l) => [l.bo],
  'norm2.weight': (l) => [l.norm2.weight],
  'norm2.bias': (l) => [l.norm2.bias],
  'linear1.weight': (l) => [l.fc1.data],
  'linear1.bias': (l) => [l.b1],
  'linear2.weight': (l) => [l.fc2.data],
  'linear2.bias': (l) => [l.b2],
};

/** A fresh array holding `parts` one after another. */
function concat(parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * A stack from a checkpoint's tensors (a safetensors file read into a name → tensor record), named as
 * qkv's TinyTransformer and PyTorch's nn.TransformerEncoderLayer(norm_first=True) name them:
 * `embedding.weight` [V, D] (rows named by `vocab`), and per layer i `layers.i.norm1.{weight,bias}`,
 * `layers.i.self_attn.in_proj_weight` [3D, D] (or `q_proj_weight`, `k_proj_weight`, `v_proj_weight`),
 * `layers.i.self_attn.in_proj_bias`, `layers.i.self_attn.out_proj.{weight,bias}`, `layers.i.norm2.*`,
 * `layers.i.linear1.*`, `layers.i.linear2.*`. Embeddings are multiplied by `embedScale` (default √D, as
 * TinyTransformer does). Tokens are looked up as written, then lower-cased.
 * @throws naming the option or tensor: a bad option, a missing or misshapen tensor, a NaN or ±Infinity
 * weight (it would turn every traced value into NaN), or layers that disagree on d_k or d_v.
 */
export function stackFromStateDict(
  dict: Record<string, TensorLike>,
  options: { heads: number; vocab: readonly string[]; embedScale?: number; description?: string },
): AttentionStack {
  const fn = 'stackFromStateDict';
  const fail = (message: string): never => {
    throw new RangeError(`${fn}: ${message}`);
  };
  if (dict === null || typeof dict !== 'object')
    throw new TypeError(`${fn}: dict must be a record of name → tensor, found ${formatFound(dict)}`);
  if (options === null || typeof options !== 'object')
    throw new TypeError(`${fn}: options must be an object, found ${formatFound(options)}`);
  const H = options.heads;
  if (!(Number.isSafeInteger(H) && H >= 1)) fail(`heads must be a positive integer, found ${formatFound(H)}`);
  const vocab = checkVocabulary(options.vocab, 'vocab', fail);
  if (options.embedScale !== undefined && !Number.isFinite(options.embedScale))
    fail(`embedScale must be a finite number, found ${formatFound(options.embedScale)}`);
  if (options.description !== undefined && typeof options.description !== 'string')
    fail(`description must be a string, found ${formatFound(options.description)}`);

  const checked: Record<string, Tensor> = {}; // what was read, as Tensors: the record the layers view
  const get = (name: string, rank?: number): Tensor => {
    if (!(name in dict)) {
      throw new Error(`${fn}: missing tensor '${name}' (have: ${Object.keys(dict).slice(0, 8).join(', ')}…)`);
    }
    const t = checked[name] ?? toTensor(dict[name], fn, name);
    checked[name] = t;
    if (rank !== undefined && t.rank !== rank) {
      throw new RangeError(`${fn}: '${name}' must have rank ${rank}, got shape ${formatShape(t.shape)}`);
    }
    const bad = nonFiniteAt(t.data);
    if (bad) fail(`tensor '${name}' ${bad} (weights must be finite)`);
    return t;
  };
  /** The tensor, which must have exactly `shape` (`what` spells the rule when it helps). */
  const getShaped = (name: string, shape: number[], what = ''): Tensor => {
    const t = get(name);
    if (t.rank !== shape.length || t.shape.some((d, i) => d !== shape[i]))
      fail(`'${name}' must be ${what}${formatShape(shape)}, got ${formatShape(t.shape)}`);
    return t;
  };
  const emb = get('embedding.weight', 2);
  const [V, D] = emb.shape;
  if (vocab.length !== V) {
    throw new RangeError(
      `${fn}: vocab has ${vocab.length} entries but embedding.weight is ${formatShape(emb.shape)}`,
    );
  }
  const layers: StackLayer[] = [];
  for (let i = 0; `layers.${i}.norm1.weight` in dict; i++) {
    const p = `layers.${i}.`;
    const a = `${p}self_attn.`;
    const b = get(`${a}in_proj_bias`, 1).data;
    let w3: Tensor[];
    if (`${a}in_proj_weight` in dict) {
      // PyTorch packs Q, K and V only when all three are D wide: [3D, D].
      const w = getShaped(`${a}in_proj_weight`, [3 * D, D], '[3·D, D] = ');
      w3 = [0, 1, 2].map((k) => new Tensor(w.data.subarray(k * D * D, (k + 1) * D * D), [D, D]));
    } else {
      w3 = ['q', 'k', 'v'].map((x) => get(`${a}${x}_proj_weight`, 2));
      if (w3[1].shape[0] !== w3[0].shape[0])
        fail(`'${a}k_proj_weight' ${formatShape(w3[1].shape)} must match q_proj ${formatShape(w3[0].shape)}`);
    }
    const [wq, wk, wv] = w3;
    const qk = wq.shape[0];
    const vd = wv.shape[0];
    if (b.length !== 2 * qk + vd) {
      throw new RangeError(`${fn}: '${a}in_proj_bias' has ${b.length} values, expected ${2 * qk + vd}`);
    }
    if (
      qk === 0 ||
      vd === 0 ||
      qk % H !== 0 ||
      vd % H !== 0 ||
      wq.shape[1] !== D ||
      wk.shape[1] !== D ||
      wv.shape[1] !== D
    ) {
      throw new RangeError(
        `${fn}: layer ${i} q_proj ${formatShape(wq.shape)} / v_proj ${formatShape(wv.shape)} do not split into ${H} heads over d_model ${D}`,
      );
    }
    if (i > 0 && (qk !== layers[0].wq.shape[0] || vd !== layers[0].wv.shape[0])) {
      fail(
        `layer ${i} has d_k ${qk / H} and d_v ${vd / H} per head but layer 0 has d_k ${layers[0].wq.shape[0] / H} and d_v ${layers[0].wv.shape[0] / H}`,
      );
    }
    const fc1 = get(`${p}linear1.weight`, 2);
    const F = fc1.shape[0];
    if (fc1.shape[1] !== D) fail(`'${p}linear1.weight' must be [F, ${D}], got ${formatShape(fc1.shape)}`);
    // Every other tensor as the parameter table shapes it for these widths (q, k and v were read above,
    // packed or not as the file stores them).
    const dims: BlockDims = { dModel: D, numHeads: H, headDim: qk / H, valueDim: vd / H, dFF: F };
    for (const { name, shape } of blockParamSpecs(dims, p)) {
      if (!name.endsWith('_proj_weight')) getShaped(name, shape);
    }
    layers.push(layerView((name) => checked[name], p));
  }
  if (layers.length === 0) throw new Error(`${fn}: no layers (expected 'layers.0.norm1.weight' and friends)`);
  const index = new Map(vocab.map((w, i) => [w, i]));
  const embedScale = options.embedScale ?? Math.sqrt(D);
  const embed = (tokens: readonly string[]): Tensor => {
    const x = new Float32Array(tokens.length * D);
    const unknown = tokens.filter((t) => !index.has(t) && !index.has(t.toLowerCase()));
    if (unknown.length > 0) {
      throw new RangeError(
        `${fn}: ${[...new Set(unknown)].map((t) => `'${t}'`).join(', ')} not in the checkpoint's ${V}-word vocabulary`,
      );
    }
    tokens.forEach((t, i) => {
      const row = (index.get(t) ?? index.get(t.toLowerCase()))!;
      for (let c = 0; c < D; c++) x[i * D + c] = emb.data[row * D + c] * embedScale;
    });
    return new Tensor(x, [tokens.length, D]);
  };
  return {
    dModel: D,
    heads: H,
    dK: layers[0].wq.shape[0] / H,
    dV: layers[0].wv.shape[0] / H,
    layers,
    description: options.description ?? `checkpoint (${layers.length} layers, ${H} heads, d_model ${D})`,
    embed,
    vocab,
  };
}
