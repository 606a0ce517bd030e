// TinyTransformer: token embedding (×√D) + sinusoidal positions, N pre-LayerNorm blocks of multi-head
// attention + GELU MLP, a final LayerNorm and an output head tied to the embedding; an encoder
// (bidirectional) or, with causal: true, a decoder. Its blocks are block.ts's forward over the autograd's
// ops (ops-var.ts), so it trains as it runs; its parameters are the table's in params.ts.
// One decision to know: parameter names are PyTorch's nn.TransformerEncoderLayer(norm_first=True) names
// (layers.0.self_attn.in_proj_weight, layers.0.linear1.weight, …), so a block's self_attn.* loads straight
// into MultiHeadAttention.loadStateDict and the checkpoint reads naturally in PyTorch.

import { add, embedding, layerNorm, linear, scale } from '../autograd/ops.js';
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
import { transformerBlock } from './block.js';
import { varOps } from './ops-var.js';
import { blockParamsFrom, fillInit, transformerParamSpecs } from './params.js';

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
    const D = c.dModel;
    // Every parameter as the table names, shapes and initialises it (PyTorch's rules), drawn in table order.
    const gen = new Generator(seed);
    for (const { name, shape, init } of transformerParamSpecs(c)) {
      let n = 1;
      for (const d of shape) n *= d;
      const data = dtype === 'float64' ? new Float64Array(n) : new Float32Array(n);
      fillInit(init, data, gen);
      this.params.set(name, parameter(data, shape));
    }
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

    const pos = constant(this.positions.subarray(0, L * D), [L, D]);
    let x = add(scale(embedding(this.p('embedding.weight'), ids, [B, L]), Math.sqrt(D)), pos); // [B, L, D]
    const weights: Tensor[] = [];
    const attention = { numHeads: H, causal, mask, scale: scaleScores ? undefined : 1, needWeights };
    const get = (name: string) => this.params.get(name);
    for (let l = 0; l < this.config.numLayers; l++) {
      const block = transformerBlock(varOps, blockParamsFrom(get, `layers.${l}.`), x, {
        attention,
        dropout: pDrop > 0 ? { p: pDrop, generator: generator! } : undefined,
      });
      if (block.weights) weights.push(block.weights); // [B, H, L, L]
      x = block.x;
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
 * (the parameter table's, src/model/params.ts).
 */
export function transformerParameterShapes(config: TransformerConfig): [string, number[]][] {
  return transformerParamSpecs(config).map(({ name, shape }) => [name, shape]);
}

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
