// The parameter-spec table: every tensor of a MultiHeadAttention, a transformer block and a TinyTransformer,
// under its PyTorch name, with its shape as a function of the config and its initialisation rule.
// One decision to know: constructors, shape checks and every loader (loadCheckpoint, stackFromStateDict,
// MultiHeadAttention.loadStateDict) read this table, so a parameter is named, shaped and initialised once.
// An attention-only model (mlp: false) lists each block's norm1 and self_attn.* only.

import type { Generator } from '../random.js';
import type { AttentionBlockParams, AttentionParams, BlockParams } from './block.js';

/** How a tensor starts: U(−bound, bound), N(0, std²), ones or zeros (drawn in table order, element by element). */
export type Init = { uniform: number } | { normal: number } | 'ones' | 'zeros';

/** One parameter: its PyTorch name, its shape and how it starts. */
export interface ParamSpec {
  name: string;
  shape: number[];
  init: Init;
}

/**
 * 'pytorch': PyTorch's own initialisation (nn.MultiheadAttention: Xavier-uniform over each stored
 * in-projection matrix, the packed [3D, D] one included, zero biases; nn.Linear: U(±1/√fan_in) for weight
 * and bias). 'article': the playground's seeded weights — Xavier over each projection on its own (so Q·K
 * has variance ≈ d_k, the article's premise) and zero biases everywhere.
 */
export type InitScheme = 'pytorch' | 'article';

/** The widths of an attention layer (MultiHeadAttention's letters; headDim·numHeads need not be D). */
export interface AttentionDims {
  /** D: query input and output width. */
  embedDim: number;
  numHeads: number;
  numKvHeads: number;
  /** E: query/key width per head. */
  headDim: number;
  /** Ev: value width per head. */
  valueDim: number;
  /** Width of the key input. */
  kdim: number;
  /** Width of the value input. */
  vdim: number;
  /** Whether the in- and out-projections have biases. */
  bias: boolean;
}

/** The widths of a pre-LayerNorm block: self-attention (kdim = vdim = D, no GQA) plus an MLP of width dFF. */
export interface BlockDims {
  dModel: number;
  numHeads: number;
  headDim: number;
  valueDim: number;
  dFF: number;
  /** false: attention only, no norm2, linear1 or linear2 (dFF is then unused). Default true. */
  mlp?: boolean;
}

/** What the whole-model table needs of a TransformerConfig. */
export interface ModelDims {
  vocabSize: number;
  dModel: number;
  numHeads: number;
  numLayers: number;
  dFF: number;
  /** false: attention-only blocks (no norm2, linear1, linear2). Default true. */
  mlp?: boolean;
}

/**
 * True when q, k and v are each [D, D] and read the same input width, which is when PyTorch stores them
 * as one in_proj_weight [3D, D].
 */
export function isPacked(d: AttentionDims): boolean {
  const { embedDim: D, numHeads: H, numKvHeads: Hkv, headDim: E, valueDim: Ev } = d;
  return d.kdim === D && d.vdim === D && H * E === D && Hkv * E === D && Hkv * Ev === D;
}

const xavier = (fanIn: number, fanOut: number): Init => ({ uniform: Math.sqrt(6 / (fanIn + fanOut)) });

/** nn.MultiheadAttention's tensors, in its state_dict order (in_proj_weight or q/k/v_proj_weight, …). */
export function attentionParamSpecs(
  d: AttentionDims,
  prefix = '',
  scheme: InitScheme = 'pytorch',
): ParamSpec[] {
  const { embedDim: D, numHeads: H, numKvHeads: Hkv, headDim: E, valueDim: Ev } = d;
  const specs: ParamSpec[] = [];
  if (isPacked(d)) {
    // The article's scheme draws each [D, D] projection with its own Xavier bound; PyTorch, the packed one.
    const init = scheme === 'article' ? xavier(D, D) : xavier(D, 3 * D);
    specs.push({ name: `${prefix}in_proj_weight`, shape: [3 * D, D], init });
  } else {
    specs.push(
      { name: `${prefix}q_proj_weight`, shape: [H * E, D], init: xavier(D, H * E) },
      { name: `${prefix}k_proj_weight`, shape: [Hkv * E, d.kdim], init: xavier(d.kdim, Hkv * E) },
      { name: `${prefix}v_proj_weight`, shape: [Hkv * Ev, d.vdim], init: xavier(d.vdim, Hkv * Ev) },
    );
  }
  if (d.bias) specs.push({ name: `${prefix}in_proj_bias`, shape: [(H + Hkv) * E + Hkv * Ev], init: 'zeros' });
  specs.push({
    name: `${prefix}out_proj.weight`,
    shape: [D, H * Ev],
    init: { uniform: 1 / Math.sqrt(H * Ev) },
  });
  if (d.bias) specs.push({ name: `${prefix}out_proj.bias`, shape: [D], init: 'zeros' });
  return specs;
}

/**
 * One nn.TransformerEncoderLayer(norm_first=True)'s tensors, names prefixed (e.g. 'layers.0.'); with
 * `mlp: false` its first four (norm1 and self_attn.*) only.
 */
export function blockParamSpecs(d: BlockDims, prefix: string, scheme: InitScheme = 'pytorch'): ParamSpec[] {
  const { dModel: D, dFF: F } = d;
  const linearBias = (fanIn: number): Init =>
    scheme === 'article' ? 'zeros' : { uniform: 1 / Math.sqrt(fanIn) };
  const attention: AttentionDims = {
    ...d,
    embedDim: D,
    numKvHeads: d.numHeads,
    kdim: D,
    vdim: D,
    bias: true,
  };
  const attentionSpecs: ParamSpec[] = [
    { name: `${prefix}norm1.weight`, shape: [D], init: 'ones' },
    { name: `${prefix}norm1.bias`, shape: [D], init: 'zeros' },
    ...attentionParamSpecs(attention, `${prefix}self_attn.`, scheme),
  ];
  if (d.mlp === false) return attentionSpecs;
  return [
    ...attentionSpecs,
    { name: `${prefix}norm2.weight`, shape: [D], init: 'ones' },
    { name: `${prefix}norm2.bias`, shape: [D], init: 'zeros' },
    { name: `${prefix}linear1.weight`, shape: [F, D], init: { uniform: 1 / Math.sqrt(D) } },
    { name: `${prefix}linear1.bias`, shape: [F], init: linearBias(D) },
    { name: `${prefix}linear2.weight`, shape: [D, F], init: { uniform: 1 / Math.sqrt(F) } },
    { name: `${prefix}linear2.bias`, shape: [D], init: linearBias(F) },
  ];
}

/** A TinyTransformer block's widths: heads of width D/H. */
function modelBlockDims(c: ModelDims): BlockDims {
  const E = c.dModel / c.numHeads;
  const dims: BlockDims = { dModel: c.dModel, numHeads: c.numHeads, headDim: E, valueDim: E, dFF: c.dFF };
  if (c.mlp === false) dims.mlp = false;
  return dims;
}

/**
 * A TinyTransformer's tensors in its fixed order: the embedding (N(0, 1/D): ×√D at the input gives
 * unit-variance tokens, Vaswani §3.4, and the tied head starts with unit-variance logits), the blocks,
 * the final LayerNorm.
 */
export function transformerParamSpecs(c: ModelDims): ParamSpec[] {
  const D = c.dModel;
  const specs: ParamSpec[] = [
    { name: 'embedding.weight', shape: [c.vocabSize, D], init: { normal: 1 / Math.sqrt(D) } },
  ];
  for (let l = 0; l < c.numLayers; l++) specs.push(...blockParamSpecs(modelBlockDims(c), `layers.${l}.`));
  specs.push(
    { name: 'norm.weight', shape: [D], init: 'ones' },
    { name: 'norm.bias', shape: [D], init: 'zeros' },
  );
  return specs;
}

/** How many tensors transformerParamSpecs lists, counted without listing them (a stored config may be hostile). */
export function transformerTensorCount(c: ModelDims): number {
  const outside = transformerParamSpecs({ ...c, numLayers: 0 }).length;
  return outside + blockParamSpecs(modelBlockDims(c), '').length * c.numLayers;
}

/** Fills `data` (a fresh, zeroed array of the spec's size) by `init`, drawing from `generator` in order. */
export function fillInit(init: Init, data: Float32Array | Float64Array, generator: Generator): void {
  if (init === 'ones') data.fill(1);
  else if (init === 'zeros') data.fill(0);
  else if ('uniform' in init) {
    const b = init.uniform;
    for (let i = 0; i < data.length; i++) data[i] = generator.uniform(-b, b);
  } else {
    for (let i = 0; i < data.length; i++) data[i] = generator.normal(0, init.normal);
  }
}

/** The attention parameters found under `prefix` in a record (get returns undefined for a missing name). */
export function attentionParamsFrom<W>(
  get: (name: string) => W | undefined,
  prefix = '',
): AttentionParams<W> {
  return {
    inProjWeight: get(`${prefix}in_proj_weight`),
    qProjWeight: get(`${prefix}q_proj_weight`),
    kProjWeight: get(`${prefix}k_proj_weight`),
    vProjWeight: get(`${prefix}v_proj_weight`),
    inProjBias: get(`${prefix}in_proj_bias`),
    outProjWeight: get(`${prefix}out_proj.weight`)!,
    outProjBias: get(`${prefix}out_proj.bias`),
  };
}

/**
 * A block's parameters under `prefix` ('layers.0.') in a record of PyTorch-named tensors or Vars; with
 * `mlp` false, an attention-only block's (norm1 and self_attn.*, nothing of the MLP is read).
 */
export function blockParamsFrom<W>(get: (name: string) => W | undefined, prefix: string): BlockParams<W>;
export function blockParamsFrom<W>(
  get: (name: string) => W | undefined,
  prefix: string,
  mlp: boolean,
): BlockParams<W> | AttentionBlockParams<W>;
export function blockParamsFrom<W>(
  get: (name: string) => W | undefined,
  prefix: string,
  mlp = true,
): BlockParams<W> | AttentionBlockParams<W> {
  const pair = (name: string) => ({
    weight: get(`${prefix}${name}.weight`)!,
    bias: get(`${prefix}${name}.bias`)!,
  });
  const attention = { norm1: pair('norm1'), selfAttn: attentionParamsFrom(get, `${prefix}self_attn.`) };
  if (!mlp) return attention;
  return { ...attention, norm2: pair('norm2'), linear1: pair('linear1'), linear2: pair('linear2') };
}

/**
 * The inverse of blockParamsFrom: a block's parameters as [PyTorch name, tensor] pairs under `prefix`, in
 * the parameter table's order (an attention-only block: norm1 and self_attn.* only; absent optional
 * tensors — separate q/k/v weights of a packed layer, a bias-free layer's biases — are left out).
 */
export function blockParamEntries<W>(
  p: BlockParams<W> | AttentionBlockParams<W>,
  prefix: string,
): [string, W][] {
  const a = p.selfAttn;
  const entries: [string, W | undefined][] = [
    [`${prefix}norm1.weight`, p.norm1.weight],
    [`${prefix}norm1.bias`, p.norm1.bias],
    [`${prefix}self_attn.in_proj_weight`, a.inProjWeight],
    [`${prefix}self_attn.q_proj_weight`, a.qProjWeight],
    [`${prefix}self_attn.k_proj_weight`, a.kProjWeight],
    [`${prefix}self_attn.v_proj_weight`, a.vProjWeight],
    [`${prefix}self_attn.in_proj_bias`, a.inProjBias],
    [`${prefix}self_attn.out_proj.weight`, a.outProjWeight],
    [`${prefix}self_attn.out_proj.bias`, a.outProjBias],
  ];
  if ('linear1' in p && p.linear1 && p.linear2 && p.norm2) {
    entries.push(
      [`${prefix}norm2.weight`, p.norm2.weight],
      [`${prefix}norm2.bias`, p.norm2.bias],
      [`${prefix}linear1.weight`, p.linear1.weight],
      [`${prefix}linear1.bias`, p.linear1.bias],
      [`${prefix}linear2.weight`, p.linear2.weight],
      [`${prefix}linear2.bias`, p.linear2.bias],
    );
  }
  return entries.filter((e): e is [string, W] => e[1] !== undefined);
}
