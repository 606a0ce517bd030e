// The model the playground and `qkv viz` look inside: token embedding + sinusoidal positions (or, for a
// checkpoint trained with positions: 'rope', no table and q, k rotated in every block), then N
// pre-LayerNorm blocks (x += Attn(LN(x)); x += MLP(LN(x)), tanh-GELU MLP), the shape of qkv's
// TinyTransformer. One decision to know: weights come from one boundary — `seededStack` (deterministic,
// untrained) or `stackFromStateDict` (a checkpoint's tensors under PyTorch nn.TransformerEncoderLayer
// names) — and both hold one weight format, the block forward's own parameters (BlockParams of Tensors,
// read from a record named and shaped by the parameter table, model/params.ts, by blockParamsFrom), which
// traceStack hands to the library's block forward as they are. A checkpoint of an attention-only model
// (mlp: false) gives attention-only blocks.

import { checkVocabulary, formatFound, nonFiniteAt } from '../io/checks.js';
import type { AttentionBlockParams, BlockParams } from '../model/block.js';
import {
  type BlockDims,
  blockParamEntries,
  blockParamSpecs,
  blockParamsFrom,
  fillInit,
} from '../model/params.js';
import { Generator } from '../random.js';
import { formatShape } from '../shape.js';
import { Tensor, type TensorLike, toTensor } from '../tensor.js';
import { hashToken } from './tokens.js';

/**
 * One block's weights, as the block forward takes them (PyTorch layout: a linear map is weight [out, in]
 * and y = x·Wᵀ + b; q, k and v packed in one inProjWeight [3D, D] when each is [D, D], else separate).
 * Without linear1 (an AttentionBlockParams): attention only.
 */
export type StackBlock = BlockParams<Tensor> | AttentionBlockParams<Tensor>;

/** A stack of attention blocks plus the way it embeds tokens. */
export interface AttentionStack {
  dModel: number;
  heads: number;
  dK: number;
  dV: number;
  layers: StackBlock[];
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
  const stackLayers: StackBlock[] = [];
  for (let l = 0; l < layers; l++) {
    for (const { name, shape, init } of blockParamSpecs(dims, `layers.${l}.`, 'article')) {
      record[name] = Tensor.zeros(shape);
      fillInit(init, record[name].data, gen);
    }
    stackLayers.push(blockParamsFrom((name) => record[name], `layers.${l}.`));
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
 * `q_proj_weight` / `k_proj_weight` / `v_proj_weight`), copied. The embedding is not included: a seeded
 * stack embeds any word, so the caller adds `embedding.weight` for the vocabulary it wants.
 */
export function stackStateDict(stack: AttentionStack): Record<string, Tensor> {
  const out: Record<string, Tensor> = {};
  stack.layers.forEach((layer, i) => {
    for (const [name, t] of blockParamEntries(layer, `layers.${i}.`)) {
      out[name] = new Tensor(Float32Array.from(t.data), [...t.shape]);
    }
  });
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
  const layers: StackBlock[] = [];
  let widths: { qk: number; vd: number; mlp: boolean } | undefined; // layer 0's, which every layer must share
  for (let i = 0; `layers.${i}.norm1.weight` in dict; i++) {
    const p = `layers.${i}.`;
    const a = `${p}self_attn.`;
    const b = get(`${a}in_proj_bias`, 1).data;
    let qk: number;
    let vd: number;
    if (`${a}in_proj_weight` in dict) {
      // PyTorch packs Q, K and V only when all three are D wide: [3D, D].
      getShaped(`${a}in_proj_weight`, [3 * D, D], '[3·D, D] = ');
      qk = vd = D;
      if (D % H !== 0) fail(`d_model ${D} does not split into ${H} heads`);
    } else {
      const [wq, wk, wv] = ['q', 'k', 'v'].map((x) => get(`${a}${x}_proj_weight`, 2));
      if (wk.shape[0] !== wq.shape[0])
        fail(`'${a}k_proj_weight' ${formatShape(wk.shape)} must match q_proj ${formatShape(wq.shape)}`);
      qk = wq.shape[0];
      vd = wv.shape[0];
      if (
        qk === 0 ||
        vd === 0 ||
        qk % H !== 0 ||
        vd % H !== 0 ||
        [wq, wk, wv].some((w) => w.shape[1] !== D)
      ) {
        throw new RangeError(
          `${fn}: layer ${i} q_proj ${formatShape(wq.shape)} / v_proj ${formatShape(wv.shape)} do not split into ${H} heads over d_model ${D}`,
        );
      }
    }
    if (b.length !== 2 * qk + vd) {
      throw new RangeError(`${fn}: '${a}in_proj_bias' has ${b.length} values, expected ${2 * qk + vd}`);
    }
    // An attention-only block (mlp: false) has no norm2, linear1 or linear2.
    const mlp = `${p}linear1.weight` in dict || `${p}norm2.weight` in dict || `${p}linear2.weight` in dict;
    widths ??= { qk, vd, mlp };
    if (qk !== widths.qk || vd !== widths.vd) {
      fail(
        `layer ${i} has d_k ${qk / H} and d_v ${vd / H} per head but layer 0 has d_k ${widths.qk / H} and d_v ${widths.vd / H}`,
      );
    }
    if (mlp !== widths.mlp)
      fail(
        `layer ${i} ${mlp ? 'has' : 'has no'} MLP (linear1, linear2, norm2) but layer 0 ${widths.mlp ? 'has' : 'has none'}`,
      );
    let F = 0;
    if (mlp) {
      const fc1 = get(`${p}linear1.weight`, 2);
      F = fc1.shape[0];
      if (F === 0 || fc1.shape[1] !== D)
        fail(`'${p}linear1.weight' must be [F, ${D}] with F ≥ 1, got ${formatShape(fc1.shape)}`);
    }
    // Every other tensor as the parameter table shapes it for these widths (q, k and v were read above,
    // packed or not as the file stores them).
    const dims: BlockDims = { dModel: D, numHeads: H, headDim: qk / H, valueDim: vd / H, dFF: F, mlp };
    for (const { name, shape } of blockParamSpecs(dims, p)) {
      if (!name.endsWith('_proj_weight')) getShaped(name, shape);
    }
    layers.push(blockParamsFrom((name) => checked[name], p, mlp));
  }
  if (layers.length === 0) throw new Error(`${fn}: no layers (expected 'layers.0.norm1.weight' and friends)`);
  // Layers are read while layers.i.norm1.weight exists: a tensor of a later layer means one went missing.
  const stray = Object.keys(dict).find((name) => {
    const m = /^layers\.(\d+)\./.exec(name);
    return m !== null && Number(m[1]) >= layers.length;
  });
  if (stray !== undefined) {
    fail(
      `'${stray}' belongs to a layer after the ${layers.length} read, but 'layers.${layers.length}.norm1.weight' is missing`,
    );
  }
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
    dK: widths!.qk / H,
    dV: widths!.vd / H,
    layers,
    description: options.description ?? `checkpoint (${layers.length} layers, ${H} heads, d_model ${D})`,
    embed,
    vocab,
  };
}
