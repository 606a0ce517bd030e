// The model the playground and `qkv viz` look inside: token embedding + sinusoidal positions, then N
// pre-LayerNorm blocks (x += Attn(LN(x)); x += MLP(LN(x)), tanh-GELU MLP), the shape of qkv's
// TinyTransformer. One decision to know: weights come from one boundary — `seededStack` (deterministic,
// untrained) or `stackFromStateDict` (a checkpoint's tensors under PyTorch nn.TransformerEncoderLayer
// names) — and every attention call is qkv's own, so what the page shows is what the library computes.

import { checkVocabulary, formatFound, nonFiniteAt } from '../io/checks.js';
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
  /** The tokens `embed` knows, when it has a fixed vocabulary (a checkpoint); undefined = any token. */
  vocab?: readonly string[];
}

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

function uniform(shape: number[], bound: number, gen: Generator): Tensor {
  const t = Tensor.zeros(shape);
  for (let i = 0; i < t.data.length; i++) t.data[i] = gen.uniform(-bound, bound);
  return t;
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
  const gen = new Generator(seed);
  const F = 4 * D;
  const ones = () => new Float32Array(D).fill(1);
  const stackLayers: StackLayer[] = [];
  for (let l = 0; l < layers; l++) {
    const xq = Math.sqrt(6 / (D + H * dK));
    const xv = Math.sqrt(6 / (D + H * dV));
    stackLayers.push({
      norm1: { weight: ones(), bias: new Float32Array(D) },
      wq: uniform([H * dK, D], xq, gen),
      wk: uniform([H * dK, D], xq, gen),
      wv: uniform([H * dV, D], xv, gen),
      bq: new Float32Array(H * dK),
      bk: new Float32Array(H * dK),
      bv: new Float32Array(H * dV),
      wo: uniform([D, H * dV], 1 / Math.sqrt(H * dV), gen),
      bo: new Float32Array(D),
      norm2: { weight: ones(), bias: new Float32Array(D) },
      fc1: uniform([F, D], 1 / Math.sqrt(D), gen),
      b1: new Float32Array(F),
      fc2: uniform([D, F], 1 / Math.sqrt(F), gen),
      b2: new Float32Array(D),
    });
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
  const vec = (a: Float32Array) => new Tensor(a.slice(), [a.length]);
  const D = stack.dModel;
  const packed = stack.heads * stack.dK === D && stack.heads * stack.dV === D;
  stack.layers.forEach((l, i) => {
    const p = `layers.${i}.`;
    const a = `${p}self_attn.`;
    out[`${p}norm1.weight`] = vec(l.norm1.weight);
    out[`${p}norm1.bias`] = vec(l.norm1.bias);
    if (packed) {
      out[`${a}in_proj_weight`] = new Tensor(Float32Array.from([...l.wq.data, ...l.wk.data, ...l.wv.data]), [
        3 * D,
        D,
      ]);
    } else {
      out[`${a}q_proj_weight`] = l.wq.clone();
      out[`${a}k_proj_weight`] = l.wk.clone();
      out[`${a}v_proj_weight`] = l.wv.clone();
    }
    out[`${a}in_proj_bias`] = new Tensor(Float32Array.from([...l.bq, ...l.bk, ...l.bv]), [
      l.bq.length * 2 + l.bv.length,
    ]);
    out[`${a}out_proj.weight`] = l.wo.clone();
    out[`${a}out_proj.bias`] = vec(l.bo);
    out[`${p}norm2.weight`] = vec(l.norm2.weight);
    out[`${p}norm2.bias`] = vec(l.norm2.bias);
    out[`${p}linear1.weight`] = l.fc1.clone();
    out[`${p}linear1.bias`] = vec(l.b1);
    out[`${p}linear2.weight`] = l.fc2.clone();
    out[`${p}linear2.bias`] = vec(l.b2);
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

  const get = (name: string, rank?: number): Tensor => {
    if (!(name in dict)) {
      throw new Error(`${fn}: missing tensor '${name}' (have: ${Object.keys(dict).slice(0, 8).join(', ')}…)`);
    }
    const t = toTensor(dict[name], fn, name);
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
      w3 = [0, 1, 2].map((k) => new Tensor(w.data.slice(k * D * D, (k + 1) * D * D), [D, D]));
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
    const [bq, bk, bv] = [b.slice(0, qk), b.slice(qk, 2 * qk), b.slice(2 * qk)];
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
    layers.push({
      norm1: { weight: getShaped(`${p}norm1.weight`, [D]).data, bias: getShaped(`${p}norm1.bias`, [D]).data },
      wq,
      wk,
      wv,
      bq,
      bk,
      bv,
      wo: getShaped(`${a}out_proj.weight`, [D, vd]),
      bo: getShaped(`${a}out_proj.bias`, [D]).data,
      norm2: { weight: getShaped(`${p}norm2.weight`, [D]).data, bias: getShaped(`${p}norm2.bias`, [D]).data },
      fc1,
      b1: getShaped(`${p}linear1.bias`, [F]).data,
      fc2: getShaped(`${p}linear2.weight`, [D, F]),
      b2: getShaped(`${p}linear2.bias`, [D]).data,
    });
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
