// TinyTransformer: token embedding (×√D) + sinusoidal positions, N pre-LayerNorm blocks of multi-head
// attention + GELU MLP, a final LayerNorm and an output head tied to the embedding; an encoder
// (bidirectional) or, with causal: true, a decoder. Built on the autograd, so it trains as it runs.
// One decision to know: parameter names are PyTorch's nn.TransformerEncoderLayer(norm_first=True) names
// (layers.0.self_attn.in_proj_weight, layers.0.linear1.weight, …), so a block's self_attn.* loads straight
// into MultiHeadAttention.loadStateDict and the checkpoint reads naturally in PyTorch.

import { attention } from '../autograd/attention.js';
import { add, dropout, embedding, gelu, layerNorm, linear, scale, splitLast } from '../autograd/ops.js';
import { constant, type Floats, parameter, type Var } from '../autograd/var.js';
import { sinusoidalPositionalEncoding } from '../position/sinusoidal.js';
import { Generator, isGenerator } from '../random.js';
import {
  checkAllocation,
  checkBoolean,
  checkFinite,
  checkInteger,
  checkOptionNames,
  formatValue,
} from '../shape.js';
import { Tensor } from '../tensor.js';

/** Shape of a TinyTransformer. */
export interface TransformerConfig {
  /** V: tokens in the vocabulary. */
  vocabSize: number;
  /** D: model width; a multiple of numHeads. */
  dModel: number;
  numHeads: number;
  numLayers: number;
  /** Hidden width of each block's MLP (usually 4·D). */
  dFF: number;
  /** Longest sequence (rows of the positional table). */
  maxLen: number;
  /** true: decoder (query i sees keys j ≤ i); false: bidirectional encoder. */
  causal: boolean;
  /** Scale scores by 1/√d_k (true, the default) or not at all (the article's §4.2 experiment). */
  scaleScores?: boolean;
  /** Dropout after attention and MLP outputs while training. Default 0. */
  dropout?: number;
}

/** Options of TinyTransformer.forward. */
export interface ForwardOptions {
  /** Key mask broadcastable to [B, H, L, L], 1 = may attend (e.g. padding [B, 1, 1, L]). */
  mask?: Tensor;
  /** Apply dropout (needs `generator`). Default false. */
  training?: boolean;
  generator?: Generator;
  /** Return every layer's attention weights [B, H, L, L]. */
  needWeights?: boolean;
}

const FN = 'TinyTransformer';

/** A small transformer whose parameters are autograd Vars (float32, or float64 for gradient checks). */
export class TinyTransformer {
  readonly config: Required<TransformerConfig>;
  /** Parameters by PyTorch-style name, in a fixed order. */
  readonly params = new Map<string, Var>();
  private readonly positions: Floats;

  constructor(
    config: TransformerConfig,
    { seed = 0, dtype = 'float32' }: { seed?: number; dtype?: 'float32' | 'float64' } = {},
  ) {
    if (config === null || typeof config !== 'object') {
      throw new TypeError(`${FN}: config must be an object, got ${formatValue(config)}`);
    }
    const c = { scaleScores: true, dropout: 0, ...config };
    for (const key of ['vocabSize', 'dModel', 'numHeads', 'numLayers', 'dFF', 'maxLen'] as const) {
      checkInteger(FN, key, c[key], 1);
    }
    checkBoolean(FN, 'causal', c.causal);
    checkBoolean(FN, 'scaleScores', c.scaleScores);
    if (!(typeof c.dropout === 'number' && c.dropout >= 0 && c.dropout < 1)) {
      throw new RangeError(`${FN}: dropout must be a number in [0, 1), got ${formatValue(c.dropout)}`);
    }
    checkFinite(FN, 'seed', seed);
    if (dtype !== 'float32' && dtype !== 'float64') {
      throw new TypeError(`${FN}: dtype must be 'float32' or 'float64', got ${formatValue(dtype)}`);
    }
    if (c.dModel % c.numHeads !== 0)
      throw new RangeError(`${FN}: dModel=${c.dModel} is not divisible by numHeads=${c.numHeads}`);
    const bytes = dtype === 'float64' ? 8 : 4;
    for (const [name, shape] of transformerParameterShapes(c)) checkAllocation(FN, name, shape, bytes);
    checkAllocation(FN, 'the positional table', [c.maxLen, c.dModel], 4);
    this.config = c;
    const { vocabSize: V, dModel: D, dFF: F } = c;
    const gen = new Generator(seed);
    const make = (shape: number[], init: (i: number) => number): Var => {
      let n = 1;
      for (const d of shape) n *= d;
      const data = dtype === 'float64' ? new Float64Array(n) : new Float32Array(n);
      for (let i = 0; i < n; i++) data[i] = init(i);
      return parameter(data, shape);
    };
    const uniform = (shape: number[], bound: number) => make(shape, () => gen.uniform(-bound, bound));
    const ones = (n: number) => make([n], () => 1);
    const zeros = (n: number) => make([n], () => 0);

    // Embedding N(0, 1/D): ×√D at the input gives unit-variance tokens (Vaswani §3.4) and the tied head
    // starts with logits of unit variance.
    this.params.set(
      'embedding.weight',
      make([V, D], () => gen.normal(0, 1 / Math.sqrt(D))),
    );
    for (let l = 0; l < c.numLayers; l++) {
      const p = `layers.${l}.`;
      this.params.set(`${p}norm1.weight`, ones(D));
      this.params.set(`${p}norm1.bias`, zeros(D));
      this.params.set(`${p}self_attn.in_proj_weight`, uniform([3 * D, D], Math.sqrt(6 / (4 * D)))); // Xavier over [3D, D]
      this.params.set(`${p}self_attn.in_proj_bias`, zeros(3 * D));
      this.params.set(`${p}self_attn.out_proj.weight`, uniform([D, D], 1 / Math.sqrt(D)));
      this.params.set(`${p}self_attn.out_proj.bias`, zeros(D));
      this.params.set(`${p}norm2.weight`, ones(D));
      this.params.set(`${p}norm2.bias`, zeros(D));
      this.params.set(`${p}linear1.weight`, uniform([F, D], 1 / Math.sqrt(D)));
      this.params.set(`${p}linear1.bias`, uniform([F], 1 / Math.sqrt(D)));
      this.params.set(`${p}linear2.weight`, uniform([D, F], 1 / Math.sqrt(F)));
      this.params.set(`${p}linear2.bias`, uniform([D], 1 / Math.sqrt(F)));
    }
    this.params.set('norm.weight', ones(D));
    this.params.set('norm.bias', zeros(D));
    const pe = sinusoidalPositionalEncoding(c.maxLen, D).data;
    this.positions = dtype === 'float64' ? Float64Array.from(pe) : pe;
  }

  /** The parameters in a fixed order (for the optimizer). */
  parameters(): Var[] {
    return [...this.params.values()];
  }

  /** Number of scalar parameters. */
  get numParameters(): number {
    let n = 0;
    for (const p of this.params.values()) n += p.size;
    return n;
  }

  private p(name: string): Var {
    return this.params.get(name)!;
  }

  /**
   * ids [B, L] (row-major, B·L ints in [0, V)) → logits [B, L, V], and the attention weights of every
   * layer when asked for.
   */
  forward(
    ids: Int32Array,
    B: number,
    L: number,
    options: ForwardOptions = {},
  ): { logits: Var; weights: Tensor[] } {
    const { dModel: D, numHeads: H, causal, maxLen, scaleScores, vocabSize } = this.config;
    const fwd = `${FN}.forward`;
    if (Object.prototype.toString.call(ids) !== '[object Int32Array]') {
      throw new TypeError(`${fwd}: ids must be an Int32Array of token ids, got ${formatValue(ids)}`);
    }
    checkInteger(fwd, 'B', B, 0);
    checkInteger(fwd, 'L', L, 0);
    if (ids.length !== B * L)
      throw new RangeError(`${fwd}: ids has ${ids.length} elements, expected B·L = ${B}·${L}`);
    if (L > maxLen) throw new RangeError(`${fwd}: L=${L} is longer than maxLen=${maxLen}`);
    for (let i = 0; i < ids.length; i++) {
      if (!(ids[i] >= 0 && ids[i] < vocabSize)) {
        throw new RangeError(`${fwd}: ids[${i}] = ${ids[i]} is outside [0, vocabSize=${vocabSize})`);
      }
    }
    checkOptionNames(fwd, options, ['mask', 'training', 'generator', 'needWeights']);
    const { mask, training = false, generator, needWeights = false } = options;
    checkBoolean(fwd, 'training', training);
    checkBoolean(fwd, 'needWeights', needWeights);
    if (generator !== undefined && !isGenerator(generator)) {
      throw new TypeError(`${fwd}: generator must be a Generator, got ${formatValue(generator)}`);
    }
    if (mask !== undefined && !(mask instanceof Tensor)) {
      throw new TypeError(
        `${fwd}: mask must be a Tensor broadcastable to [B, H, L, L], got ${formatValue(mask)}`,
      );
    }
    const pDrop = training ? this.config.dropout : 0;
    if (pDrop > 0 && !generator) throw new Error(`${fwd}: training with dropout needs a generator`);
    const drop = (x: Var) => (pDrop > 0 ? dropout(x, pDrop, generator!) : x);

    const pos = constant(this.positions.subarray(0, L * D), [L, D]);
    let x = add(scale(embedding(this.p('embedding.weight'), ids, [B, L]), Math.sqrt(D)), pos); // [B, L, D]
    const weights: Tensor[] = [];
    for (let l = 0; l < this.config.numLayers; l++) {
      const p = `layers.${l}.`;
      // Attention sub-block: x + out_proj(attention(split(in_proj(LN(x))))).
      const h = layerNorm(x, this.p(`${p}norm1.weight`), this.p(`${p}norm1.bias`));
      const qkv = linear(h, this.p(`${p}self_attn.in_proj_weight`), this.p(`${p}self_attn.in_proj_bias`)); // [B, L, 3D]
      const [q, k, v] = splitLast(qkv, [D, D, D]); // [B, L, D] each = [B, L, H·hd]
      const a = attention(q, k, v, {
        numHeads: H,
        causal,
        mask,
        scale: scaleScores ? undefined : 1,
        needWeights,
      });
      if (a.weights) weights.push(a.weights); // [B, H, L, L]
      x = add(
        x,
        drop(linear(a.out, this.p(`${p}self_attn.out_proj.weight`), this.p(`${p}self_attn.out_proj.bias`))),
      );
      // MLP sub-block: x + linear2(GELU(linear1(LN(x)))).
      const h2 = layerNorm(x, this.p(`${p}norm2.weight`), this.p(`${p}norm2.bias`));
      const m = linear(
        gelu(linear(h2, this.p(`${p}linear1.weight`), this.p(`${p}linear1.bias`))),
        this.p(`${p}linear2.weight`),
        this.p(`${p}linear2.bias`),
      );
      x = add(x, drop(m));
    }
    x = layerNorm(x, this.p('norm.weight'), this.p('norm.bias'));
    const logits = linear(x, this.p('embedding.weight')); // tied head: [B, L, V]
    return { logits, weights };
  }

  /** Float32 copies of the parameters by name (PyTorch's state_dict()). */
  stateDict(): Record<string, Tensor> {
    const dict: Record<string, Tensor> = {};
    for (const [name, v] of this.params) dict[name] = new Tensor(Float32Array.from(v.data), v.shape);
    return dict;
  }

  /** Copies parameters in; throws naming every unknown, missing or mis-shaped entry. */
  loadStateDict(dict: Record<string, Tensor>): void {
    const problems: string[] = [];
    for (const name of Object.keys(dict)) if (!this.params.has(name)) problems.push(`unknown ${name}`);
    for (const [name, v] of this.params) {
      const t = dict[name];
      if (!t) problems.push(`missing ${name}`);
      else if (t.shape.length !== v.shape.length || t.shape.some((d, i) => d !== v.shape[i])) {
        problems.push(`${name} has shape [${t.shape}], expected [${v.shape}]`);
      }
    }
    if (problems.length) throw new RangeError(`${FN}.loadStateDict: ${problems.join('; ')}`);
    for (const [name, v] of this.params) v.data.set(dict[name].data);
  }
}

/**
 * Names and shapes of a config's parameters, in the model's order, computed without allocating anything
 * (loadCheckpoint compares them with a file's tensors before building the model).
 */
export function transformerParameterShapes(config: TransformerConfig): [string, number[]][] {
  const { vocabSize: V, dModel: D, dFF: F, numLayers } = config;
  const shapes: [string, number[]][] = [['embedding.weight', [V, D]]];
  for (let l = 0; l < numLayers; l++) {
    const p = `layers.${l}.`;
    shapes.push(
      [`${p}norm1.weight`, [D]],
      [`${p}norm1.bias`, [D]],
      [`${p}self_attn.in_proj_weight`, [3 * D, D]],
      [`${p}self_attn.in_proj_bias`, [3 * D]],
      [`${p}self_attn.out_proj.weight`, [D, D]],
      [`${p}self_attn.out_proj.bias`, [D]],
      [`${p}norm2.weight`, [D]],
      [`${p}norm2.bias`, [D]],
      [`${p}linear1.weight`, [F, D]],
      [`${p}linear1.bias`, [F]],
      [`${p}linear2.weight`, [D, F]],
      [`${p}linear2.bias`, [D]],
    );
  }
  shapes.push(['norm.weight', [D]], ['norm.bias', [D]]);
  return shapes;
}

/** Tensors per block, and outside the blocks (embedding, final norm). */
export const TENSORS_PER_LAYER = 12;
export const TENSORS_OUTSIDE_LAYERS = 3;
/** Longest maxLen a stored config may ask for (the positional table is allocated from it). */
export const MAX_STORED_LEN = 65536;

/** Parses and checks a TransformerConfig stored as JSON (e.g. in safetensors metadata). */
export function parseTransformerConfig(json: string): TransformerConfig {
  let c: unknown;
  try {
    c = JSON.parse(json);
  } catch (err) {
    throw new RangeError(`${FN}: config is not valid JSON (${(err as Error).message})`);
  }
  const o = c as Record<string, unknown>;
  const ints = ['vocabSize', 'dModel', 'numHeads', 'numLayers', 'dFF', 'maxLen'];
  if (
    !o ||
    typeof o !== 'object' ||
    ints.some((k) => !Number.isSafeInteger(o[k])) ||
    typeof o.causal !== 'boolean'
  ) {
    throw new RangeError(`${FN}: config ${json.slice(0, 200)} lacks one of ${ints.join(', ')}, causal`);
  }
  if ((o.maxLen as number) > MAX_STORED_LEN) {
    throw new RangeError(`${FN}: config asks for maxLen ${o.maxLen}; at most ${MAX_STORED_LEN} is accepted`);
  }
  return o as unknown as TransformerConfig;
}
