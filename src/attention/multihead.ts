// MultiHeadAttention: PyTorch nn.MultiheadAttention's parameters and state-dict names, batch-first
// inputs, per-head weights, plus grouped-query heads (numKvHeads) and every option of scaledDotProductAttention.
// One decision to know: masks use qkv's polarity (nonzero = may attend), not nn.MultiheadAttention's
// boolean attn_mask (True = blocked); a key padding mask is a mask of shape [B, 1, 1, S].

import { KVCache } from '../cache/kv-cache.js';
import type { GemmProblem } from '../kernels/gemm-types.js';
import { linearProblem } from '../kernels/matmul.js';
import { attentionSublayer } from '../model/block.js';
import { splitHeads, splitHeadsCached, tensorOps } from '../model/ops-tensor.js';
import { type AttentionDims, attentionParamSpecs, fillInit, type Init, isPacked } from '../model/params.js';
import { type RandomOptions, resolveGenerator } from '../random.js';
import { type GemmPart, layerOpsOf, type MultiHeadCall, type Runtime } from '../runtime.js';
import {
  checkAllocation,
  checkBoolean,
  checkInteger,
  formatShape,
  formatValue,
  sameShape,
  sizeOf,
} from '../shape.js';
import { Tensor, type TensorLike, toTensor } from '../tensor.js';
import { defaultRuntime } from './async.js';
import { multiHeadResident } from './multihead-resident.js';
import { type AttentionOptions, checkBroadcast, checkOptionNames, planAttention } from './plan.js';

/** Constructor options of MultiHeadAttention. */
export interface MultiHeadAttentionOptions extends RandomOptions {
  /** D: width of the query input and of the output. */
  embedDim: number;
  /** H: query heads; embedDim must be a multiple of it. Each head has width embedDim / numHeads. */
  numHeads: number;
  /** Key/value heads (GQA / MQA); numHeads must be a multiple of it. Default numHeads. */
  numKvHeads?: number;
  /** Width of the key input. Default embedDim. */
  kdim?: number;
  /** Width of the value input. Default embedDim. */
  vdim?: number;
  /** Whether the input and output projections have biases. Default true. */
  bias?: boolean;
}

/** Options of MultiHeadAttention.forward: those of scaledDotProductAttention, plus `needWeights`. */
export interface MultiHeadForwardOptions extends Omit<AttentionOptions, 'scale'> {
  /** Also return the per-head attention weights [B, H, L, S]. Default false. */
  needWeights?: boolean;
  /**
   * Incremental decoding: this call's projected keys and values are appended to `cache` as layer
   * `layer`, and the queries attend over everything the layer holds (with `causal: true` the queries are
   * the newest positions: bottom-right alignment). Masks and biases then broadcast to [B, H, L, S] with S
   * the keys the layer holds.
   */
  cache?: KVCache;
  /** The cache layer this module is (required with `cache`). */
  layer?: number;
}

/** Options of MultiHeadAttention.forwardAsync: those of forward, plus where it runs. */
export interface MultiHeadAsyncOptions extends MultiHeadForwardOptions {
  /** Worker threads to use; default the runtime's, else all cores (never more than the cores). */
  threads?: number;
  /** The runtime whose workers run the call (createRuntime); default the entry's own. */
  runtime?: Runtime;
}

/** What MultiHeadAttention.forward returns. */
export interface MultiHeadForwardResult {
  /** [B, L, D] (or [L, D] for unbatched input). */
  output: Tensor;
  /** Per-head weights [B, H, L, S] (or [H, L, S]); present when `needWeights` is true. */
  weights?: Tensor;
}

const CTOR = 'MultiHeadAttention';

type ParamName =
  | 'qProjWeight'
  | 'kProjWeight'
  | 'vProjWeight'
  | 'inProjBias'
  | 'outProjWeight'
  | 'outProjBias';

/** A forward call checked and brought to rank 3 (MultiHeadAttention's #prepare). */
interface Prepared {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  attention: AttentionOptions;
  needWeights: boolean;
  cache?: { cache: KVCache; layer: number };
  result(out: Tensor, weights: Tensor | undefined): MultiHeadForwardResult;
}

const FORWARD = 'MultiHeadAttention.forward';
const FORWARD_ASYNC = 'MultiHeadAttention.forwardAsync';
const FORWARD_OPTIONS = [
  'mask',
  'bias',
  'causal',
  'window',
  'kernel',
  'needWeights',
  'cache',
  'layer',
] as const;

/** y = x·Wᵀ + b as one GEMM job part: exactly the product kernels/matmul.ts `linear` hands the GEMM. */
function linearPart(x: Tensor, weight: Tensor, bias: Tensor | undefined): GemmPart {
  const problem = linearOf(x, weight, bias);
  return { problem, c: new Float32Array(problem.M * problem.N) };
}

/** linearPart's product alone (the one-job path writes its C in the workers). */
function linearOf(x: Tensor, weight: Tensor, bias: Tensor | undefined): GemmProblem {
  const [M, K] = weight.shape;
  const N = K === 0 ? 0 : x.size / K;
  return linearProblem(x.data, N, K, weight.data, M, bias?.data);
}

/**
 * Multi-head attention: project query, key and value, attend per head, concatenate, project out.
 *
 * @example
 * const mha = new MultiHeadAttention({ embedDim: 64, numHeads: 8, seed: 0 });
 * const x = Tensor.randn([2, 10, 64], { seed: 1 });
 * const { output, weights } = mha.forward(x, x, x, { causal: true, needWeights: true }); // [2,10,64], [2,8,10,10]
 */
export class MultiHeadAttention {
  readonly embedDim: number;
  readonly numHeads: number;
  readonly numKvHeads: number;
  /** Width of one head: embedDim / numHeads. */
  readonly headDim: number;
  readonly kdim: number;
  readonly vdim: number;
  readonly hasBias: boolean;

  // The parameters, behind setters that check shapes: a wrong shape would make the projections read past
  // the end of their arrays (NaN, no error).
  #params: Record<ParamName, Tensor | undefined> = {
    qProjWeight: undefined,
    kProjWeight: undefined,
    vProjWeight: undefined,
    inProjBias: undefined,
    outProjWeight: undefined,
    outProjBias: undefined,
  };

  /** [D, D] */
  get qProjWeight(): Tensor {
    return this.#params.qProjWeight!;
  }
  set qProjWeight(t: Tensor) {
    this.#set('qProjWeight', t);
  }
  /** [Hkv·hd, kdim] */
  get kProjWeight(): Tensor {
    return this.#params.kProjWeight!;
  }
  set kProjWeight(t: Tensor) {
    this.#set('kProjWeight', t);
  }
  /** [Hkv·hd, vdim] */
  get vProjWeight(): Tensor {
    return this.#params.vProjWeight!;
  }
  set vProjWeight(t: Tensor) {
    this.#set('vProjWeight', t);
  }
  /** [D + 2·Hkv·hd]: the q, k and v biases, packed as PyTorch's in_proj_bias (undefined without bias). */
  get inProjBias(): Tensor | undefined {
    return this.#params.inProjBias;
  }
  set inProjBias(t: Tensor | undefined) {
    this.#set('inProjBias', t);
  }
  /** [D, D] */
  get outProjWeight(): Tensor {
    return this.#params.outProjWeight!;
  }
  set outProjWeight(t: Tensor) {
    this.#set('outProjWeight', t);
  }
  /** [D] (undefined without bias) */
  get outProjBias(): Tensor | undefined {
    return this.#params.outProjBias;
  }
  set outProjBias(t: Tensor | undefined) {
    this.#set('outProjBias', t);
  }

  /** The shape each parameter must have (undefined: the layer has no such parameter). */
  #shapeOf(name: ParamName): number[] | undefined {
    const { embedDim: D, kdim, vdim } = this;
    const kv = this.numKvHeads * this.headDim;
    const shapes: Record<ParamName, number[] | undefined> = {
      qProjWeight: [D, D],
      kProjWeight: [kv, kdim],
      vProjWeight: [kv, vdim],
      inProjBias: this.hasBias ? [D + 2 * kv] : undefined,
      outProjWeight: [D, D],
      outProjBias: this.hasBias ? [D] : undefined,
    };
    return shapes[name];
  }

  #set(name: ParamName, t: Tensor | undefined): void {
    const shape = this.#shapeOf(name);
    const fn = `MultiHeadAttention.${name}`;
    if (shape === undefined) {
      if (t !== undefined) throw new RangeError(`${fn}: this layer was built with bias: false`);
    } else if (!(t instanceof Tensor) || t.dtype !== 'float32' || !sameShape(t.shape, shape)) {
      const got = t instanceof Tensor ? `${t.dtype} ${formatShape(t.shape)}` : String(t);
      throw new RangeError(`${fn}: expected a float32 Tensor of shape ${formatShape(shape)}, got ${got}`);
    }
    this.#params[name] = t;
  }

  constructor(options: MultiHeadAttentionOptions) {
    checkOptionNames(CTOR, options, [
      'embedDim',
      'numHeads',
      'numKvHeads',
      'kdim',
      'vdim',
      'bias',
      'seed',
      'generator',
    ]);
    const {
      embedDim,
      numHeads,
      numKvHeads = numHeads,
      kdim = embedDim,
      vdim = embedDim,
      bias = true,
    } = options;
    for (const [name, value] of Object.entries({ embedDim, numHeads, numKvHeads, kdim, vdim })) {
      checkInteger(CTOR, name, value, 1);
    }
    checkBoolean(CTOR, 'bias', bias);
    if (embedDim % numHeads !== 0) {
      throw new RangeError(`${CTOR}: embedDim=${embedDim} is not divisible by numHeads=${numHeads}`);
    }
    if (numHeads % numKvHeads !== 0) {
      throw new RangeError(`${CTOR}: numHeads=${numHeads} is not a multiple of numKvHeads=${numKvHeads}`);
    }
    const kvWidth = numKvHeads * (embedDim / numHeads);
    checkAllocation(CTOR, 'qProjWeight', [embedDim, embedDim], 4);
    checkAllocation(CTOR, 'kProjWeight', [kvWidth, kdim], 4);
    checkAllocation(CTOR, 'vProjWeight', [kvWidth, vdim], 4);
    this.embedDim = embedDim;
    this.numHeads = numHeads;
    this.numKvHeads = numKvHeads;
    this.headDim = embedDim / numHeads;
    this.kdim = kdim;
    this.vdim = vdim;
    this.hasBias = bias;

    // PyTorch's _reset_parameters, as the parameter table states it (Xavier-uniform in-projections over
    // the packed [3D, D] matrix when it is packed, U(±1/√D) for out_proj.weight, zero biases).
    const gen = resolveGenerator(options, CTOR);
    const init = new Map(attentionParamSpecs(this.#dims()).map((s) => [s.name, s.init]));
    const draw = (shape: number[], rule: Init) => {
      const t = Tensor.zeros(shape);
      fillInit(rule, t.data, gen);
      return t;
    };
    // Packed, the three [D, D] blocks of in_proj_weight are drawn in order: the same numbers as one [3D, D].
    const [q, k, v] = this.packed
      ? Array(3).fill(init.get('in_proj_weight')!)
      : ['q', 'k', 'v'].map((x) => init.get(`${x}_proj_weight`)!);
    this.qProjWeight = draw([embedDim, embedDim], q);
    this.kProjWeight = draw([kvWidth, kdim], k);
    this.vProjWeight = draw([kvWidth, vdim], v);
    this.inProjBias = bias ? Tensor.zeros([embedDim + 2 * kvWidth]) : undefined;
    this.outProjWeight = draw([embedDim, embedDim], init.get('out_proj.weight')!);
    this.outProjBias = bias ? Tensor.zeros([embedDim]) : undefined;
  }

  /** The widths the parameter table is written in. */
  #dims(): AttentionDims {
    const { embedDim, numHeads, numKvHeads, headDim, kdim, vdim, hasBias } = this;
    return { embedDim, numHeads, numKvHeads, headDim, valueDim: headDim, kdim, vdim, bias: hasBias };
  }

  /** True when q, k, v weights are stored as one in_proj_weight (PyTorch: kdim = vdim = embedDim, no GQA). */
  get packed(): boolean {
    return isPacked(this.#dims());
  }

  /**
   * query [B, L, D] or [L, D]; key [B, S, kdim] (default query); value [B, S, vdim] (default key).
   * Returns output [B, L, D] and, with needWeights, per-head weights [B, H, L, S].
   */
  forward(
    query: TensorLike,
    key: TensorLike = query,
    value: TensorLike = key,
    options: MultiHeadForwardOptions = {},
  ): MultiHeadForwardResult {
    checkOptionNames(FORWARD, options, FORWARD_OPTIONS);
    const c = this.#prepare(FORWARD, query, key, value, options);
    // In one piece where WASM serves it: the same bits, without the copies between the steps.
    const whole = this.#multiHeadCall(FORWARD, c);
    if (whole && multiHeadResident(FORWARD, whole.call)) return whole.result();
    const { out, weights } = attentionSublayer(
      tensorOps,
      this.#attentionParams(),
      c.q,
      { key: c.k, value: c.v },
      {
        ...c.attention,
        numHeads: this.numHeads,
        numKvHeads: this.numKvHeads,
        needWeights: c.needWeights,
        caller: FORWARD,
        cache: c.cache,
      },
    );
    return c.result(out, weights);
  }

  /**
   * `forward` on worker threads: the projections split by rows and the heads' attention split by row
   * blocks over a runtime's workers (the entry's default runtime unless `runtime` is given). Resolves to
   * the same result as `forward`, bit for bit; runs inline when the call is small or workers cannot run.
   * The inputs and the layer's weights are read after the call returns: leave them unchanged until the
   * promise settles.
   *
   * @example
   * const { output } = await mha.forwardAsync(x, x, x, { causal: true, threads: 2 });
   */
  async forwardAsync(
    query: TensorLike,
    key: TensorLike = query,
    value: TensorLike = key,
    options: MultiHeadAsyncOptions = {},
  ): Promise<MultiHeadForwardResult> {
    checkOptionNames(FORWARD_ASYNC, options, [...FORWARD_OPTIONS, 'threads', 'runtime']);
    const { threads, runtime = this.runtime, ...forward } = options;
    if (threads !== undefined) checkInteger(FORWARD_ASYNC, 'threads', threads, 1);
    const ops = layerOpsOf(FORWARD_ASYNC, runtime);
    const c = this.#prepare(FORWARD_ASYNC, query, key, value, forward);
    const whole = this.#multiHeadCall(FORWARD_ASYNC, c);
    if (whole) {
      // One job: the projections, the heads and the out-projection never come back here in between;
      // on this thread (small calls, no workers) with the activations in its WASM memory.
      if (await ops.multiHead(FORWARD_ASYNC, whole.call, threads)) return whole.result();
      if (multiHeadResident(FORWARD_ASYNC, whole.call)) return whole.result();
    }
    // Step by step: a cache, float64 inputs, or WASM unavailable.
    const { numHeads: H, numKvHeads: Hkv } = this;
    const [B, L] = c.q.shape;
    const S = c.k.shape[1];
    const p = this.#attentionParams();
    const widths = [p.qProjWeight.shape[0], p.kProjWeight.shape[0], p.vProjWeight.shape[0]];
    // The in-projections as the block's `attend` computes them (tensorOps.linear: kernels/matmul.ts).
    const [bq, bk, bv] = p.inProjBias ? tensorOps.splitLast(p.inProjBias, widths) : [];
    const projections = [
      linearPart(c.q, p.qProjWeight, bq),
      linearPart(c.k, p.kProjWeight, bk),
      linearPart(c.v, p.vProjWeight, bv),
    ];
    await ops.gemm(FORWARD_ASYNC, projections, threads);
    const [q, k, v] = projections.map(({ c: y }, i) => new Tensor(y, [B, i === 0 ? L : S, widths[i]]));
    // The heads, as tensorOps.attention splits, attends and merges them.
    const attention = c.attention;
    const split = c.cache
      ? splitHeadsCached(FORWARD_ASYNC, q, k, v, H, Hkv, c.cache.cache, c.cache.layer, attention)
      : splitHeads(FORWARD_ASYNC, q, k, v, H, Hkv, attention);
    const out = new Float32Array(split.outSize);
    const weights = c.needWeights ? new Float32Array(sizeOf(split.plan.weightsShape)) : undefined;
    await ops.forward(FORWARD_ASYNC, split.plan, { out, weights }, threads);
    const heads = split.merge(out);
    const final = linearPart(heads, p.outProjWeight, p.outProjBias);
    await ops.gemm(FORWARD_ASYNC, [final], threads);
    // [B, H, L, S] with S the keys attended: with a cache, every key it holds, not this call's.
    const weightsShape = split.plan.weightsShape;
    return c.result(new Tensor(final.c, [B, L, this.embedDim]), weights && new Tensor(weights, weightsShape));
  }

  /**
   * The runtime `forwardAsync` uses when the call names none: the main entry's (Web Workers); the Node
   * entry's MultiHeadAttention returns its worker_threads runtime here.
   */
  protected get runtime(): Runtime {
    return defaultRuntime;
  }

  /**
   * The call as one MultiHeadCall (the in-projections exactly as the block's `attend` makes them) and
   * how to turn its outputs into the result; undefined with a cache or float64 inputs (steps only).
   */
  #multiHeadCall(fn: string, c: Prepared) {
    if (c.cache || ![c.q, c.k, c.v].every((t) => t.data instanceof Float32Array)) return undefined;
    const { numHeads: H, numKvHeads: Hkv, headDim: E, embedDim: D } = this;
    const [B, L] = c.q.shape;
    const S = c.k.shape[1];
    const p = this.#attentionParams();
    const widths = [p.qProjWeight.shape[0], p.kProjWeight.shape[0], p.vProjWeight.shape[0]];
    const [bq, bk, bv] = p.inProjBias ? tensorOps.splitLast(p.inProjBias, widths) : [];
    // Stand-ins for q, k and v (never read): one array when their shapes agree, as in self-attention.
    const stand = (heads: number, rows: number) =>
      new Tensor(new Float32Array(B * heads * rows * E), [B, heads, rows, E]);
    const sq = stand(H, L);
    const skv = Hkv === H && S === L ? sq : stand(Hkv, S);
    const plan = planAttention(fn, sq, skv, skv, c.attention);
    const out = new Float32Array(B * L * D);
    const weights = c.needWeights ? new Float32Array(sizeOf(plan.weightsShape)) : undefined;
    const call: MultiHeadCall = {
      projections: [
        { problem: linearOf(c.q, p.qProjWeight, bq), heads: H, width: E },
        { problem: linearOf(c.k, p.kProjWeight, bk), heads: Hkv, width: E },
        { problem: linearOf(c.v, p.vProjWeight, bv), heads: Hkv, width: E },
      ],
      plan,
      outWeight: p.outProjWeight.data,
      outBias: p.outProjBias?.data,
      out,
      weights,
    };
    return {
      call,
      result: () => c.result(new Tensor(out, [B, L, D]), weights && new Tensor(weights, [B, H, L, S])),
    };
  }

  #attentionParams() {
    return {
      qProjWeight: this.qProjWeight,
      kProjWeight: this.kProjWeight,
      vProjWeight: this.vProjWeight,
      inProjBias: this.inProjBias,
      outProjWeight: this.outProjWeight,
      outProjBias: this.outProjBias,
    };
  }

  /**
   * Checks a forward call and brings it to rank 3: query [B, L, D], key [B, S, kdim], value [B, S, vdim],
   * the attention options with masks and biases as Tensors, and `result` to undo the rank change.
   */
  #prepare(
    fn: string,
    query: TensorLike,
    key: TensorLike,
    value: TensorLike,
    options: MultiHeadForwardOptions,
  ): Prepared {
    const q = toTensor(query, fn, 'query');
    const k = toTensor(key, fn, 'key');
    const v = toTensor(value, fn, 'value');
    const shapes = `query ${formatShape(q.shape)}, key ${formatShape(k.shape)}, value ${formatShape(v.shape)}`;
    if (q.rank !== 2 && q.rank !== 3) {
      throw new RangeError(`${fn}: query must be [B, L, D] or [L, D], got rank ${q.rank} (${shapes})`);
    }
    for (const [name, t, width, dimName] of [
      ['query', q, this.embedDim, 'embedDim'],
      ['key', k, this.kdim, 'kdim'],
      ['value', v, this.vdim, 'vdim'],
    ] as const) {
      if (t.rank !== q.rank) {
        throw new RangeError(`${fn}: ${name} has rank ${t.rank} but query has rank ${q.rank} (${shapes})`);
      }
      const last = t.shape[t.rank - 1];
      if (last !== width) {
        throw new RangeError(`${fn}: ${name} has width ${last} but ${dimName}=${width} (${shapes})`);
      }
    }
    const batched = q.rank === 3;
    const B = batched ? q.shape[0] : 1;
    if (batched && (k.shape[0] !== B || v.shape[0] !== B)) {
      throw new RangeError(`${fn}: query, key and value must have the same batch size (${shapes})`);
    }
    const L = q.shape[q.rank - 2];
    const S = k.shape[k.rank - 2];
    if (v.shape[v.rank - 2] !== S) {
      throw new RangeError(`${fn}: value has S=${v.shape[v.rank - 2]} but key has S=${S} (${shapes})`);
    }
    const { numHeads: H, embedDim: D } = this;
    const { needWeights = false, cache, layer, ...attention } = options;
    checkBoolean(fn, 'needWeights', needWeights);
    if (cache !== undefined && !(cache instanceof KVCache)) {
      throw new TypeError(`${fn}: cache must be a KVCache, got ${formatValue(cache)}`);
    }
    if (cache) checkInteger(fn, 'layer', layer, 0);
    else if (layer !== undefined) throw new TypeError(`${fn}: layer is given without a cache`);
    // Convert nested-array masks and biases once, here, rather than in both checks below.
    if (attention.mask !== undefined) attention.mask = toTensor(attention.mask, fn, 'mask');
    if (attention.bias !== undefined) attention.bias = toTensor(attention.bias, fn, 'bias');
    if (!cache) {
      // With a cache S is what the layer will hold: the plan over its storage checks them then.
      const target = batched ? [B, H, L, S] : [H, L, S];
      const targetName = batched ? '[B, H, L, S]' : '[H, L, S]';
      checkBroadcast(fn, 'mask', attention.mask, target, targetName, shapes);
      checkBroadcast(fn, 'bias', attention.bias, target, targetName, shapes);
    }
    const rows3 = (t: Tensor) => (batched ? t : new Tensor(t.data, [1, ...t.shape])); // [L, ·] → [1, L, ·]
    return {
      q: rows3(q),
      k: rows3(k),
      v: rows3(v),
      attention,
      needWeights,
      cache: cache && { cache, layer: layer as number },
      result: (out: Tensor, weights: Tensor | undefined): MultiHeadForwardResult => ({
        output: batched ? out : new Tensor(out.data, [L, D]),
        // [B, H, L, S] → [H, L, S]; S from the weights, which with a cache cover every key it holds.
        weights: weights && (batched ? weights : new Tensor(weights.data, weights.shape.slice(1))),
      }),
    };
  }

  /** Expected state-dict names and shapes, in PyTorch nn.MultiheadAttention's naming. */
  stateDictShapes(): Record<string, number[]> {
    return Object.fromEntries(attentionParamSpecs(this.#dims()).map((s) => [s.name, s.shape]));
  }

  /** The parameters as fresh copies, named as PyTorch's nn.MultiheadAttention.state_dict(). */
  stateDict(): Record<string, Tensor> {
    const dict: Record<string, Tensor> = {};
    if (this.packed) {
      const D = this.embedDim;
      const w = new Float32Array(3 * D * D);
      w.set(this.qProjWeight.data, 0);
      w.set(this.kProjWeight.data, D * D);
      w.set(this.vProjWeight.data, 2 * D * D);
      dict.in_proj_weight = new Tensor(w, [3 * D, D]);
    } else {
      dict.q_proj_weight = this.qProjWeight.clone();
      dict.k_proj_weight = this.kProjWeight.clone();
      dict.v_proj_weight = this.vProjWeight.clone();
    }
    if (this.inProjBias) dict.in_proj_bias = this.inProjBias.clone();
    dict['out_proj.weight'] = this.outProjWeight.clone();
    if (this.outProjBias) dict['out_proj.bias'] = this.outProjBias.clone();
    return dict;
  }

  /**
   * Loads parameters named as PyTorch's nn.MultiheadAttention.state_dict() (values are copied).
   * @throws listing the expected names and shapes if a name is unknown or missing or a shape is wrong.
   */
  loadStateDict(dict: Record<string, TensorLike>): void {
    const fn = 'MultiHeadAttention.loadStateDict';
    if (dict === null || typeof dict !== 'object' || Array.isArray(dict)) {
      throw new TypeError(
        `${fn}: dict must be an object of name → tensor, got ${dict === null ? 'null' : typeof dict}`,
      );
    }
    const expected = this.stateDictShapes();
    const listing = Object.entries(expected)
      .map(([name, shape]) => `${name} ${formatShape(shape)}`)
      .join(', ');
    const given = Object.keys(dict);
    // Own keys only: `in` also finds Object.prototype's names (a key named constructor or __proto__).
    const unknown = given.filter((name) => !Object.hasOwn(expected, name));
    const missing = Object.keys(expected).filter((name) => !Object.hasOwn(dict, name));
    if (unknown.length || missing.length) {
      const parts = [];
      if (unknown.length) parts.push(`unknown ${unknown.join(', ')}`);
      if (missing.length) parts.push(`missing ${missing.join(', ')}`);
      throw new RangeError(`${fn}: ${parts.join('; ')} (expected: ${listing})`);
    }
    const tensors: Record<string, Tensor> = {};
    for (const [name, shape] of Object.entries(expected)) {
      const t = toTensor(dict[name], fn, name);
      if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
        throw new RangeError(
          `${fn}: ${name} has shape ${formatShape(t.shape)}, expected ${formatShape(shape)} (expected: ${listing})`,
        );
      }
      tensors[name] = t;
    }
    if (this.packed) {
      const D = this.embedDim;
      const w = tensors.in_proj_weight.data;
      this.qProjWeight = new Tensor(w.slice(0, D * D), [D, D]);
      this.kProjWeight = new Tensor(w.slice(D * D, 2 * D * D), [D, D]);
      this.vProjWeight = new Tensor(w.slice(2 * D * D), [D, D]);
    } else {
      this.qProjWeight = tensors.q_proj_weight.clone();
      this.kProjWeight = tensors.k_proj_weight.clone();
      this.vProjWeight = tensors.v_proj_weight.clone();
    }
    if (this.hasBias) this.inProjBias = tensors.in_proj_bias.clone();
    this.outProjWeight = tensors['out_proj.weight'].clone();
    if (this.hasBias) this.outProjBias = tensors['out_proj.bias'].clone();
  }
}
