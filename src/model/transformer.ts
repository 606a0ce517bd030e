// TinyTransformer: token embedding (×√D) + sinusoidal positions (or RoPE), N pre-LayerNorm blocks of
// multi-head attention + GELU MLP, a final LayerNorm and an output head tied to the embedding; an encoder
// (bidirectional) or, with causal: true, a decoder. Its blocks are block.ts's forward over the autograd's
// ops (ops-var.ts), so it trains as it runs; its parameters are the table's in params.ts.
// One decision to know: parameter names are PyTorch's nn.TransformerEncoderLayer(norm_first=True) names
// (layers.0.self_attn.in_proj_weight, layers.0.linear1.weight, …), so a block's self_attn.* loads straight
// into MultiHeadAttention.loadStateDict and the checkpoint reads naturally in PyTorch.
// With mlp: false the blocks are attention only (no norm2, linear1, linear2: Olsson et al.'s toy models);
// config.mlp is then an ordinary field, while mlp: true is not enumerable, so JSON.stringify and spreads
// leave it out and a model with MLPs writes the config, checkpoints and training states it wrote before.
// Positions follow the same rule: positions: 'sinusoidal' (a table added to the embeddings) and the default
// ropeBase 10000 are not enumerable; positions: 'rope' (no table: each block rotates every head's q and k
// by its absolute position, block.ts's attend) is an ordinary field, and so is a ropeBase other than 10000.

import { checkBroadcast } from '../attention/plan.js';
import { add, embedding, layerNorm, linear, scale } from '../autograd/ops.js';
import { constant, type Floats, parameter, type Var } from '../autograd/var.js';
import { KVCache } from '../cache/kv-cache.js';
import { type LinearWeight, packLinearWeights } from '../kernels/gemm-wasm.js';
import { sinusoidalPositionalEncoding } from '../position/sinusoidal.js';
import { Generator, isGenerator, resolveGenerator } from '../random.js';
import {
  checkAllocation,
  checkBoolean,
  checkFinite,
  checkInteger,
  checkOptionNames,
  formatValue,
  sameShape,
} from '../shape.js';
import { type DType, Tensor, type TensorLike, toTensor } from '../tensor.js';
import { transformerBlock } from './block.js';
import { tensorOps } from './ops-tensor.js';
import { varOps } from './ops-var.js';
import { blockParamsFrom, fillInit, transformerParamSpecs } from './params.js';
import { checkSampling, type SamplingOptions, sampleToken } from './sampling.js';

/** Shape of a TinyTransformer. */
export interface TransformerConfig {
  /** V: tokens in the vocabulary. */
  vocabSize: number;
  /** D: model width; a multiple of numHeads. */
  dModel: number;
  numHeads: number;
  numLayers: number;
  /** Hidden width of each block's MLP (usually 4·D); unused when `mlp` is false. */
  dFF: number;
  /** Longest sequence (rows of the sinusoidal table; with RoPE, the longest a forward or cache takes). */
  maxLen: number;
  /** true: decoder (query i sees keys j ≤ i); false: bidirectional encoder. */
  causal: boolean;
  /** Scale scores by 1/√d_k (true, the default) or not at all (the article's §4.2 experiment). */
  scaleScores?: boolean;
  /** Dropout after attention and MLP outputs while training. Default 0. */
  dropout?: number;
  /** false: attention-only blocks, x += Attn(LN(x)) with no MLP sublayer. Default true. */
  mlp?: boolean;
  /**
   * How tokens know their position: 'sinusoidal' (default) adds the sinusoidal table to the embeddings;
   * 'rope' adds nothing and rotates each head's queries and keys by their position before attention
   * (rotate-half RoPE, Su et al.), so scores depend on positions only through their difference. 'rope'
   * needs an even head width dModel / numHeads.
   */
  positions?: 'sinusoidal' | 'rope';
  /** RoPE's frequency base θ (positions: 'rope' only). Default 10000. */
  ropeBase?: number;
}

/** The values TransformerConfig.positions takes. */
export const POSITION_KINDS = ['sinusoidal', 'rope'] as const;
/** RoPE's default frequency base. */
export const DEFAULT_ROPE_BASE = 10000;

/** Options of TinyTransformer.forward. */
export interface ForwardOptions {
  /** Key mask broadcastable to [B, H, L, L], 1 = may attend (e.g. padding [B, 1, 1, L]). */
  mask?: Tensor;
  /** Apply dropout (needs `generator`). Default false. */
  training?: boolean;
  generator?: Generator;
  /** Return every layer's attention weights [B, H, L, L] ([B, H, L, S] with a cache). */
  needWeights?: boolean;
  /**
   * Incremental decoding: ids are the next L tokens of the sequences whose earlier tokens `cache` holds
   * (positions continue from `cache.length`); their keys and values are appended. Runs the inference
   * path (no autograd tape, no gradient); logits equal the full forward's for these positions (≤ 1e-5).
   */
  cache?: KVCache;
}

/** Options of TinyTransformer.generate. */
export interface GenerateOptions extends SamplingOptions {
  /** Tokens to generate (at most; fewer when a stop token comes). prompt length + this must be ≤ maxLen. */
  maxNewTokens: number;
  /** Seed of the sampling generator (the same seed, the same tokens). Default: the library's default generator. */
  seed?: number;
  /** Keep keys and values in a KVCache (default true); false recomputes the whole prefix each token. */
  useCache?: boolean;
  /** A token id (or ids) that ends generation; it is included in the result. */
  stop?: number | readonly number[];
  /**
   * Called with each new token as it is chosen (its id and its index among the new tokens). It must not
   * change the model's weights: generation multiplies by a packed copy of them made when it starts.
   */
  onToken?: (id: number, index: number) => void;
}

const FN = 'TinyTransformer';

/** The fields of a TransformerConfig (anything else is refused by name, here and by loadCheckpoint). */
export const CONFIG_FIELDS = [
  'vocabSize',
  'dModel',
  'numHeads',
  'numLayers',
  'dFF',
  'maxLen',
  'causal',
  'scaleScores',
  'dropout',
  'mlp',
  'positions',
  'ropeBase',
] as const;

/** Most blocks a TinyTransformer takes (each is 12 or so parameters listed by name). */
const MAX_LAYERS = 4096;

/** A small transformer whose parameters are autograd Vars (float32, or float64 for gradient checks). */
export class TinyTransformer {
  /**
   * Every field set; the defaults `mlp: true`, `positions: 'sinusoidal'` and `ropeBase: 10000` are not
   * enumerable (JSON.stringify and spreads omit them).
   */
  readonly config: Required<TransformerConfig>;
  /** Parameters by PyTorch-style name, in a fixed order. */
  readonly params = new Map<string, Var>();
  /** The sinusoidal table [maxLen, D]; undefined with positions: 'rope'. */
  private readonly positions: Floats | undefined;

  constructor(config: TransformerConfig, options: { seed?: number; dtype?: 'float32' | 'float64' } = {}) {
    if (config === null || typeof config !== 'object') {
      throw new TypeError(`${FN}: config must be an object, got ${formatValue(config)}`);
    }
    // A misspelt field (dropuot) would be a silent default; the second argument's too (sed).
    checkOptionNames(`${FN} config`, config, CONFIG_FIELDS);
    checkOptionNames(FN, options, ['seed', 'dtype']);
    const { seed = 0, dtype = 'float32' } = options;
    const {
      mlp = true,
      positions = 'sinusoidal',
      ropeBase = DEFAULT_ROPE_BASE,
      scaleScores = true,
      dropout = 0,
      ...rest
    } = config;
    checkBoolean(FN, 'mlp', mlp);
    checkPositions((field) => `${FN}: ${field}`, positions, ropeBase);
    const c = { scaleScores, dropout, ...rest } as Required<TransformerConfig>;
    if (mlp) Object.defineProperty(c, 'mlp', { value: true, enumerable: false });
    else c.mlp = false;
    // Defaults not enumerable, so a sinusoidal model writes the config it wrote before the option existed.
    if (positions === 'sinusoidal')
      Object.defineProperty(c, 'positions', { value: positions, enumerable: false });
    else c.positions = positions;
    if (ropeBase === DEFAULT_ROPE_BASE)
      Object.defineProperty(c, 'ropeBase', { value: ropeBase, enumerable: false });
    else c.ropeBase = ropeBase;
    for (const key of ['vocabSize', 'dModel', 'numHeads', 'numLayers', 'dFF', 'maxLen'] as const) {
      checkInteger(FN, key, c[key], 1);
    }
    // What a checkpoint can hold (loadCheckpoint refuses more), and a bound on the layers checked before
    // their parameters are listed one by one (2^40 layers ran out of heap listing them).
    if (c.maxLen > MAX_STORED_LEN) {
      throw new RangeError(`${FN}: maxLen must be at most ${MAX_STORED_LEN}, got ${c.maxLen}`);
    }
    if (c.numLayers > MAX_LAYERS) {
      throw new RangeError(`${FN}: numLayers must be at most ${MAX_LAYERS}, got ${c.numLayers}`);
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
    if (positions === 'rope' && (c.dModel / c.numHeads) % 2 !== 0) {
      throw new RangeError(
        `${FN}: positions: 'rope' rotates pairs of each head's features, so the head width dModel / numHeads = ${c.dModel}/${c.numHeads} = ${c.dModel / c.numHeads} must be even`,
      );
    }
    const bytes = dtype === 'float64' ? 8 : 4;
    for (const [name, shape] of transformerParameterShapes(c)) checkAllocation(FN, name, shape, bytes);
    if (positions === 'sinusoidal') checkAllocation(FN, 'the positional table', [c.maxLen, c.dModel], 4);
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
    if (positions === 'sinusoidal') {
      const pe = sinusoidalPositionalEncoding(c.maxLen, D).data;
      this.positions = dtype === 'float64' ? Float64Array.from(pe) : pe;
    }
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
    checkOptionNames(fwd, options, ['mask', 'training', 'generator', 'needWeights', 'cache']);
    const { mask, training = false, generator, needWeights = false, cache } = options;
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
    // Checked here, so a bad mask is named as the model's argument, not as a block's per-head attention's.
    checkBroadcast(fwd, 'mask', mask, [B, this.config.numHeads, L, L], '[B, H, L, L]', `B=${B}, L=${L}`);
    const pDrop = training ? this.config.dropout : 0;
    if (pDrop > 0 && !generator) throw new Error(`${fwd}: training with dropout needs a generator`);
    if (cache !== undefined) {
      this.#checkCache(fwd, cache, L);
      if (mask !== undefined) throw new TypeError(`${fwd}: mask is not supported with a cache`);
      if (training) throw new TypeError(`${fwd}: a cached forward is inference only (training: true given)`);
      const { logits, weights } = this.#infer(ids, B, L, cache, needWeights);
      return { logits: constant(logits, [B, L, vocabSize]), weights };
    }

    let x = scale(embedding(this.p('embedding.weight'), ids, [B, L]), Math.sqrt(D)); // [B, L, D]
    if (this.positions) x = add(x, constant(this.positions.subarray(0, L * D), [L, D]));
    const weights: Tensor[] = [];
    const attention = {
      numHeads: H,
      causal,
      mask,
      scale: scaleScores ? undefined : 1,
      needWeights,
      rope: this.#rope(0),
    };
    const get = (name: string) => this.params.get(name);
    const { mlp } = this.config;
    for (let l = 0; l < this.config.numLayers; l++) {
      const block = transformerBlock(varOps, blockParamsFrom(get, `layers.${l}.`, mlp), x, {
        attention,
        dropout: pDrop > 0 ? { p: pDrop, generator: generator! } : undefined,
        mlp,
      });
      if (block.weights) weights.push(block.weights); // [B, H, L, L]
      x = block.x;
    }
    x = layerNorm(x, this.p('norm.weight'), this.p('norm.bias'));
    const logits = linear(x, this.p('embedding.weight')); // tied head: [B, L, V]
    return { logits, weights };
  }

  /**
   * Generates up to `maxNewTokens` tokens after `prompt` (one sequence), sampling each from the last
   * position's logits (temperature 0: greedy). Returns the new tokens only. With `useCache` (default) each
   * step runs one token against a KVCache; without it, the whole sequence again — the same tokens.
   *
   * @example
   * const ids = model.generate(Int32Array.of(1, 2, 3), { maxNewTokens: 20, temperature: 0.8, topK: 40, seed: 1 });
   */
  generate(prompt: Int32Array | readonly number[], options: GenerateOptions): Int32Array {
    const fn = `${FN}.generate`;
    const { vocabSize, maxLen, causal } = this.config;
    if (options === null || typeof options !== 'object') {
      throw new TypeError(`${fn}: options must be an object with maxNewTokens, got ${formatValue(options)}`);
    }
    checkOptionNames(fn, options, [
      'maxNewTokens',
      'temperature',
      'topK',
      'topP',
      'seed',
      'useCache',
      'stop',
      'onToken',
    ]);
    const { maxNewTokens, useCache = true, stop, onToken } = options;
    if (!causal)
      throw new TypeError(`${fn}: this model is an encoder (causal: false); only a decoder generates`);
    if (
      prompt === null ||
      typeof prompt !== 'object' ||
      typeof (prompt as ArrayLike<number>).length !== 'number'
    ) {
      throw new TypeError(`${fn}: prompt must be an array of token ids, got ${formatValue(prompt)}`);
    }
    // Its length and elements checked before it is copied (an array-like of length 2^40, or bigints).
    const given = prompt as ArrayLike<unknown>;
    if (given.length > maxLen) {
      throw new RangeError(`${fn}: prompt (${given.length} tokens) is longer than maxLen=${maxLen}`);
    }
    for (let i = 0; i < given.length; i++) {
      if (typeof given[i] !== 'number') {
        throw new RangeError(
          `${fn}: prompt[${i}] = ${formatValue(given[i])} is not a token id in [0, vocabSize=${vocabSize})`,
        );
      }
    }
    const ids = Int32Array.from(prompt as ArrayLike<number>);
    if (ids.length === 0) throw new RangeError(`${fn}: prompt is empty; give at least one token`);
    for (let i = 0; i < ids.length; i++) {
      if (!(ids[i] >= 0 && ids[i] < vocabSize) || ids[i] !== (prompt as ArrayLike<number>)[i]) {
        throw new RangeError(
          `${fn}: prompt[${i}] = ${formatValue((prompt as ArrayLike<number>)[i])} is not a token id in [0, vocabSize=${vocabSize})`,
        );
      }
    }
    checkInteger(fn, 'maxNewTokens', maxNewTokens, 0);
    if (ids.length + maxNewTokens > maxLen) {
      throw new RangeError(
        `${fn}: prompt (${ids.length} tokens) + maxNewTokens (${maxNewTokens}) = ${ids.length + maxNewTokens} is longer than maxLen=${maxLen}`,
      );
    }
    checkSampling(fn, options);
    checkBoolean(fn, 'useCache', useCache);
    if (
      !(stop === undefined || typeof stop === 'number' || Array.isArray(stop) || ArrayBuffer.isView(stop))
    ) {
      throw new TypeError(`${fn}: stop must be a token id or an array of them, got ${formatValue(stop)}`);
    }
    const stops = new Set(stop === undefined ? [] : typeof stop === 'number' ? [stop] : [...stop]);
    for (const id of stops) {
      if (!(Number.isInteger(id) && id >= 0 && id < vocabSize))
        throw new RangeError(
          `${fn}: stop must be token ids in [0, vocabSize=${vocabSize}), got ${formatValue(stop)}`,
        );
    }
    if (onToken !== undefined && typeof onToken !== 'function') {
      throw new TypeError(`${fn}: onToken must be a function, got ${formatValue(onToken)}`);
    }
    const generator = resolveGenerator({ seed: options.seed }, fn);
    const sampling = { temperature: options.temperature, topK: options.topK, topP: options.topP };

    const V = vocabSize;
    const out = new Int32Array(maxNewTokens);
    if (maxNewTokens === 0) return out;
    const { numLayers, numHeads, dModel } = this.config;
    const cache = useCache
      ? new KVCache({
          numLayers,
          numKvHeads: numHeads,
          headDim: dModel / numHeads,
          maxLength: ids.length + maxNewTokens,
          // In WebAssembly memory, where the decode steps read it in place (JS arrays where WASM cannot run).
          resident: true,
        })
      : undefined;
    // Every step multiplies by the same weights: pack them for the WASM GEMM once, not once per step
    // (bit for bit the same products). Freed below; onToken must not change the weights meanwhile.
    const unpack = packLinearWeights(this.#linearWeights());
    try {
      const seq = new Int32Array(ids.length + maxNewTokens);
      seq.set(ids);
      let n = ids.length;
      // The prompt in one step (the prefill), then one token per step.
      let logits = this.#infer(ids, 1, n, cache, false).logits;
      let made = 0;
      while (made < maxNewTokens) {
        const id = sampleToken(logits.subarray(logits.length - V), sampling, generator);
        out[made++] = id;
        seq[n++] = id;
        onToken?.(id, made - 1);
        if (stops.has(id) || made === maxNewTokens) break;
        logits = cache
          ? this.#infer(Int32Array.of(id), 1, 1, cache, false).logits
          : this.#infer(seq.subarray(0, n), 1, n, undefined, false).logits;
      }
      return out.slice(0, made);
    } finally {
      cache?.dispose(); // its WebAssembly memory goes back to the arena now, not when collected
      unpack();
    }
  }

  /** The float32 matrices the forward multiplies by as x·Wᵀ (every 2-D parameter: projections, MLP, tied head). */
  #linearWeights(): LinearWeight[] {
    const out: LinearWeight[] = [];
    for (const v of this.params.values()) {
      if (v.shape.length === 2 && v.data instanceof Float32Array) {
        out.push({ data: v.data, rows: v.shape[0], cols: v.shape[1] });
      }
    }
    return out;
  }

  /** Checks a cache against this model's shape and that `L` more tokens fit in maxLen. */
  #checkCache(fn: string, cache: unknown, L: number): asserts cache is KVCache {
    if (!(cache instanceof KVCache))
      throw new TypeError(`${fn}: cache must be a KVCache, got ${formatValue(cache)}`);
    const { numLayers, numHeads, dModel, maxLen, causal } = this.config;
    const want = `numLayers ${numLayers}, numKvHeads ${numHeads}, headDim ${dModel / numHeads}`;
    const got = `numLayers ${cache.numLayers}, numKvHeads ${cache.numKvHeads}, headDim ${cache.headDim}, valueDim ${cache.valueDim}`;
    if (
      cache.numLayers !== numLayers ||
      cache.numKvHeads !== numHeads ||
      cache.headDim !== dModel / numHeads ||
      cache.valueDim !== dModel / numHeads
    ) {
      throw new RangeError(`${fn}: the cache does not fit this model (cache: ${got}; model: ${want})`);
    }
    if (!causal)
      throw new TypeError(`${fn}: a cache serves a decoder (causal: true); this model is an encoder`);
    if (cache.length + L > maxLen) {
      throw new RangeError(
        `${fn}: the cache holds ${cache.length} tokens; ${L} more would pass maxLen=${maxLen}${this.config.positions === 'rope' ? '' : ' (the positional table)'}`,
      );
    }
  }

  /**
   * The forward for inference, on Tensors (ops-tensor.ts: no tape, float32): logits [B, L, V] as a flat
   * array, and each layer's weights when asked for. With a cache, positions start at cache.length and
   * every layer appends its keys and values.
   */
  #infer(
    ids: Int32Array,
    B: number,
    L: number,
    cache: KVCache | undefined,
    needWeights: boolean,
  ): { logits: Float32Array; weights: Tensor[] } {
    const { dModel: D, numHeads: H, causal, scaleScores } = this.config;
    const tensors = new Map<string, Tensor>();
    for (const [name, v] of this.params) {
      const data = v.data instanceof Float32Array ? v.data : Float32Array.from(v.data);
      tensors.set(name, new Tensor(data, v.shape));
    }
    const get = (name: string) => tensors.get(name)!;
    // The embedding ×√D + positions, rounded to float32 at each step as the autograd's ops store them.
    // Positions start at the cache's length (before this step appends): RoPE's offset too.
    const table = get('embedding.weight').data;
    const offset = cache ? cache.length : 0;
    const positions = this.positions;
    const c = Math.sqrt(D);
    const x0 = new Float32Array(B * L * D);
    for (let r = 0; r < B * L; r++) {
      const t = ids[r] * D;
      const p = (offset + (r % L)) * D;
      for (let d = 0; d < D; d++) {
        x0[r * D + d] = table[t + d] * c;
        if (positions) x0[r * D + d] += positions[p + d];
      }
    }
    const rope = this.#rope(offset);
    let x = new Tensor(x0, [B, L, D]);
    const weights: Tensor[] = [];
    for (let l = 0; l < this.config.numLayers; l++) {
      const attention = {
        numHeads: H,
        causal,
        scale: scaleScores ? undefined : 1,
        needWeights,
        caller: `${FN}.forward`,
        cache: cache && { cache, layer: l },
        rope,
      };
      const { mlp } = this.config;
      const block = transformerBlock(tensorOps, blockParamsFrom(get, `layers.${l}.`, mlp), x, {
        attention,
        mlp,
      });
      if (block.weights) weights.push(block.weights);
      x = block.x;
    }
    x = tensorOps.layerNorm(x, get('norm.weight'), get('norm.bias'));
    return { logits: tensorOps.linear(x, get('embedding.weight')).data, weights };
  }

  /** The blocks' RoPE option for positions starting at `offset` (undefined for a sinusoidal model). */
  #rope(offset: number): { base: number; offset: number } | undefined {
    return this.config.positions === 'rope' ? { base: this.config.ropeBase, offset } : undefined;
  }

  /** Float32 copies of the parameters by name (PyTorch's state_dict()). */
  stateDict(): Record<string, Tensor> {
    const dict: Record<string, Tensor> = {};
    for (const [name, v] of this.params) dict[name] = new Tensor(Float32Array.from(v.data), v.shape);
    return dict;
  }

  /**
   * Copies parameters in (float16 tensors widened, nested arrays accepted, as MultiHeadAttention's);
   * throws naming every unknown, missing or mis-shaped entry, and changes nothing then.
   */
  loadStateDict(dict: Record<string, TensorLike | Tensor<DType>>): void {
    const fn = `${FN}.loadStateDict`;
    if (dict === null || typeof dict !== 'object' || Array.isArray(dict)) {
      throw new TypeError(`${fn}: dict must be an object of name → tensor, got ${formatValue(dict)}`);
    }
    const problems: string[] = [];
    for (const name of Object.keys(dict)) if (!this.params.has(name)) problems.push(`unknown ${name}`);
    const tensors = new Map<string, Tensor>();
    for (const [name, v] of this.params) {
      if (!Object.hasOwn(dict, name)) {
        problems.push(`missing ${name}`);
        continue;
      }
      const t = toTensor(dict[name], fn, name); // float32 (float16 widened), or a TypeError naming it
      if (!sameShape(t.shape, v.shape)) {
        problems.push(`${name} has shape [${t.shape}], expected [${v.shape}]`);
      } else tensors.set(name, t);
    }
    if (problems.length) throw new RangeError(`${fn}: ${problems.join('; ')}`);
    for (const [name, v] of this.params) v.data.set((tensors.get(name) as Tensor).data);
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
  if (o.mlp !== undefined && typeof o.mlp !== 'boolean')
    throw new RangeError(`${FN}: config field 'mlp' must be a boolean, got ${formatValue(o.mlp)}`);
  checkPositions(
    (field) => `${FN}: config field '${field}'`,
    o.positions ?? 'sinusoidal',
    o.ropeBase ?? DEFAULT_ROPE_BASE,
  );
  if ((o.maxLen as number) > MAX_STORED_LEN) {
    throw new RangeError(`${FN}: config asks for maxLen ${o.maxLen}; at most ${MAX_STORED_LEN} is accepted`);
  }
  return o as unknown as TransformerConfig;
}

/**
 * Checks `positions` ('sinusoidal' or 'rope') and `ropeBase` (a positive finite number; other than the
 * default only with 'rope'); `name(field)` says the field in messages ("TinyTransformer: positions").
 */
export function checkPositions(
  name: (field: string) => string,
  positions: unknown,
  ropeBase: unknown,
): asserts positions is 'sinusoidal' | 'rope' {
  if (!(POSITION_KINDS as readonly unknown[]).includes(positions)) {
    throw new RangeError(
      `${name('positions')} must be 'sinusoidal' or 'rope', got ${formatValue(positions)}`,
    );
  }
  if (!(typeof ropeBase === 'number' && Number.isFinite(ropeBase) && ropeBase > 0)) {
    throw new RangeError(
      `${name('ropeBase')} must be a positive finite number, got ${formatValue(ropeBase)}`,
    );
  }
  if (positions !== 'rope' && ropeBase !== DEFAULT_ROPE_BASE) {
    throw new RangeError(
      `${name('ropeBase')} (${ropeBase}) is RoPE's frequency base and needs positions: 'rope' (positions is '${positions}')`,
    );
  }
}
