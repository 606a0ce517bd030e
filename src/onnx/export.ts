// toOnnx: MultiHeadAttention, SelfAttention and TinyTransformer (encoder or decoder, optionally with a
// key/value cache) as ONNX models that compute what qkv's forward computes, weights included as
// float32 initializers under their state-dict names.
// One decision to know: opset 17 spells attention in plain ops (MatMul, Softmax, Where, …), which every
// onnxruntime execution provider runs; opset 23 uses the standard Attention op. Both keep qkv's
// semantics where ONNX's defaults differ: causal is bottom-right aligned (query i of L sees keys
// j ≤ i + S − L, so a cached step sees its whole past), masks use qkv's polarity (nonzero = may attend),
// and a query that may see no key gets a zero output rather than an even spread (opset 17) or NaN
// (opset 23). Names follow transformers.js / Optimum: input_ids, attention_mask, position_ids,
// past_key_values.{i}.key|value → present.{i}.key|value, logits.
// The blocks are not spelled here: transformerBlock and attentionSublayer (src/model/block.ts) run over
// graphBlockOps (ops-graph.ts), whose ops append the nodes; this file makes the inputs, the embedding, the
// visibility every layer shares and the head.
// A RoPE TinyTransformer (positions: 'rope') is spelled in plain ops at either opset: cos/sin tables
// [maxLen, E/2] as initializers (rope_cos, rope_sin), gathered by position (0…L−1, or position_ids with a
// cache), and each head's halves of q and k turned (Split, Mul, Sub/Add, Concat) before attention, so the
// present keys are the rotated ones, as qkv's KVCache holds them.

import { MultiHeadAttention } from '../attention/multihead.js';
import type { CausalOption } from '../attention/plan.js';
import { SelfAttention } from '../attention/self-attention.js';
import { type AttentionParams, attentionSublayer, transformerBlock } from '../model/block.js';
import { blockParamsFrom } from '../model/params.js';
import { TinyTransformer } from '../model/transformer.js';
import { sinusoidalPositionalEncoding } from '../position/sinusoidal.js';
import { checkBoolean, checkInteger, checkOptionNames, formatValue } from '../shape.js';
import { attentionCore17, attentionCore23, type CoreInputs, causalVisible, GraphBuilder } from './graph.js';
import { type GraphValue, graphBlockOps, graphWeight } from './ops-graph.js';
import { DataType } from './proto.js';

/** The modules toOnnx exports. */
export type OnnxExportable = MultiHeadAttention | SelfAttention | TinyTransformer;

/** Fixed sizes for `dynamicAxes: false`. */
export interface OnnxFixedShape {
  /** B */
  batch: number;
  /** L: queries (tokens of this call). */
  length: number;
  /** S: keys and values of a MultiHeadAttention (default `length`). */
  keyLength?: number;
  /** S_past: tokens a kvCache model's past_key_values hold (default 0). */
  pastLength?: number;
}

/** Options of toOnnx. */
export interface OnnxExportOptions {
  /** 17 (default): plain ops, runs on every onnxruntime EP. 23: the standard Attention op. */
  opset?: 17 | 23;
  /** Batch and sequence axes symbolic (default true); false fixes them to `shape`. */
  dynamicAxes?: boolean;
  /** The sizes the inputs and outputs declare when `dynamicAxes` is false (required then). */
  shape?: OnnxFixedShape;
  /**
   * Decoder TinyTransformers only: past_key_values.{i}.key|value and position_ids inputs,
   * present.{i}.key|value outputs, for incremental decoding. Default false.
   */
  kvCache?: boolean;
  /**
   * Whether the model takes a mask input: `attn_mask` (float32, qkv's polarity: nonzero = may attend)
   * for MultiHeadAttention [B|1, H|1, L|1, S] and SelfAttention [B|1, L, L]; `attention_mask` (int64
   * [B, S], 1 = keep, 0 = padding) for TinyTransformer. Default false for the attention layers, true for
   * TinyTransformer (transformers.js and Optimum always feed it).
   */
  mask?: boolean;
  /**
   * MultiHeadAttention and SelfAttention: the forward's `causal` option, fixed into the graph (default
   * false). A TinyTransformer's own config decides for it.
   */
  causal?: CausalOption;
}

const FN = 'toOnnx';
const OPTIONS = ['opset', 'dynamicAxes', 'shape', 'kvCache', 'mask', 'causal'] as const;

/** Resolved options, with the dims inputs and outputs declare. */
interface Resolved {
  opset: 17 | 23;
  kvCache: boolean;
  mask: boolean;
  causal: false | 'bottom-right' | 'top-left';
  /** Declared dims: symbolic names, or the fixed sizes. */
  dims: {
    B: number | string;
    L: number | string;
    S: number | string;
    past: number | string;
    total: number | string;
  };
}

function resolve(module: OnnxExportable, options: OnnxExportOptions): Resolved {
  checkOptionNames(FN, options, OPTIONS);
  const { opset = 17, dynamicAxes = true, kvCache = false, shape } = options;
  const isModel = module instanceof TinyTransformer;
  const kind = moduleName(module);
  if (opset !== 17 && opset !== 23) {
    throw new RangeError(
      `${FN}: options.opset must be 17 (plain ops) or 23 (the Attention op), got ${formatValue(opset)}`,
    );
  }
  checkBoolean(FN, 'options.dynamicAxes', dynamicAxes);
  checkBoolean(FN, 'options.kvCache', kvCache);
  if (kvCache && !isModel) {
    throw new TypeError(
      `${FN}: options.kvCache cannot be expressed for a ${kind}: the cache inputs serve a decoder TinyTransformer`,
    );
  }
  if (kvCache && !(module as TinyTransformer).config.causal) {
    throw new TypeError(
      `${FN}: options.kvCache cannot be expressed for an encoder TinyTransformer (causal: false): a key/value cache serves a decoder`,
    );
  }
  const mask = options.mask ?? isModel;
  checkBoolean(FN, 'options.mask', mask);
  let causal: Resolved['causal'] = false;
  if (options.causal !== undefined) {
    if (isModel) {
      throw new TypeError(
        `${FN}: options.causal cannot be set for a TinyTransformer: its config.causal (${(module as TinyTransformer).config.causal}) decides`,
      );
    }
    const c = options.causal;
    if (c !== true && c !== false && c !== 'bottom-right' && c !== 'top-left') {
      throw new TypeError(
        `${FN}: options.causal must be true, false, 'bottom-right' or 'top-left', got ${formatValue(c)}`,
      );
    }
    causal = c === true ? 'bottom-right' : c;
  }
  let dims: Resolved['dims'] = {
    B: 'batch',
    L: 'sequence',
    S: 'key_sequence',
    past: 'past_sequence',
    total: 'total_sequence',
  };
  if (dynamicAxes) {
    if (shape !== undefined) {
      throw new TypeError(`${FN}: options.shape fixes the sizes, which needs dynamicAxes: false`);
    }
  } else {
    if (shape === null || typeof shape !== 'object') {
      throw new TypeError(
        `${FN}: options.shape { batch, length } is required with dynamicAxes: false (the fixed sizes), got ${formatValue(shape)}`,
      );
    }
    checkOptionNames(`${FN}: options.shape`, shape, ['batch', 'length', 'keyLength', 'pastLength']);
    const { batch, length, keyLength = length, pastLength = 0 } = shape;
    checkInteger(FN, 'options.shape.batch', batch, 1);
    checkInteger(FN, 'options.shape.length', length, 1);
    checkInteger(FN, 'options.shape.keyLength', keyLength, 1);
    checkInteger(FN, 'options.shape.pastLength', pastLength, 0);
    if (shape.keyLength !== undefined && !(module instanceof MultiHeadAttention)) {
      throw new TypeError(
        `${FN}: options.shape.keyLength serves a MultiHeadAttention (keys of their own length), not a ${kind}`,
      );
    }
    if (shape.pastLength !== undefined && !kvCache) {
      throw new TypeError(`${FN}: options.shape.pastLength needs kvCache: true`);
    }
    if (isModel) {
      const { maxLen } = (module as TinyTransformer).config;
      if (pastLength + length > maxLen) {
        throw new RangeError(
          `${FN}: options.shape asks for ${pastLength + length} positions (pastLength + length) but the model's positional table has maxLen=${maxLen}`,
        );
      }
    }
    dims = { B: batch, L: length, S: keyLength, past: pastLength, total: pastLength + length };
  }
  return { opset, kvCache, mask, causal, dims };
}

function moduleName(module: unknown): string {
  if (module instanceof MultiHeadAttention) return 'MultiHeadAttention';
  if (module instanceof SelfAttention) return 'SelfAttention';
  if (module instanceof TinyTransformer) return 'TinyTransformer';
  return formatValue(module);
}

/** The attention core of the chosen opset. */
function core(
  g: GraphBuilder,
  r: Resolved,
  c: CoreInputs & { isCausal?: boolean; past?: { key: string; value: string }; present?: [string, string] },
): string {
  if (r.opset === 23) return attentionCore23(g, c);
  return attentionCore17(g, c);
}

/** Bool visibility: causal (when asked) and the float mask (nonzero = may attend), combined with And. */
function visibility(
  g: GraphBuilder,
  causal: string | undefined,
  mask: string | undefined,
): string | undefined {
  const m = mask === undefined ? undefined : g.op('Cast', [mask], [{ name: 'to', int: DataType.BOOL }]);
  if (causal && m) return g.op('And', [causal, m]);
  return causal ?? m;
}

function exportMultiHead(g: GraphBuilder, m: MultiHeadAttention, r: Resolved): void {
  const { B, L, S } = r.dims;
  const { embedDim: D, numHeads: H, numKvHeads: Hkv, kdim, vdim } = m;
  const query = g.input('query', DataType.FLOAT, [B, L, D]);
  const key = g.input('key', DataType.FLOAT, [B, S, kdim]);
  const value = g.input('value', DataType.FLOAT, [B, S, vdim]);
  const attnMask = r.mask
    ? g.input('attn_mask', DataType.FLOAT, [
        'attn_mask_batch',
        'attn_mask_heads',
        'attn_mask_queries',
        'attn_mask_keys',
      ])
    : undefined;
  const dict = m.stateDict();
  const w = (name: string) => graphWeight(g, name, dict[name]);
  // The block's attention sublayer over graph values. A packed in_proj_weight is split into its q, k and v
  // rows (the graph always has separate key and value inputs).
  let projections: Pick<AttentionParams<GraphValue>, 'qProjWeight' | 'kProjWeight' | 'vProjWeight'>;
  if (dict.in_proj_weight) {
    const rows = g.ops('Split', [w('in_proj_weight').name, g.ints([D, D, D])], 3, [{ name: 'axis', int: 0 }]);
    const [q, k, v] = rows.map((name): GraphValue => ({ name, shape: [D, D] }));
    projections = { qProjWeight: q, kProjWeight: k, vProjWeight: v };
  } else {
    projections = {
      qProjWeight: w('q_proj_weight'),
      kProjWeight: w('k_proj_weight'),
      vProjWeight: w('v_proj_weight'),
    };
  }
  const params: AttentionParams<GraphValue> = {
    ...projections,
    inProjBias: dict.in_proj_bias && w('in_proj_bias'),
    outProjWeight: w('out_proj.weight'),
    outProjBias: dict['out_proj.bias'] && w('out_proj.bias'),
  };
  // ONNX's is_causal is top-left; the bottom-right case (qkv's `true`) is spelled as a mask.
  const isCausal = r.opset === 23 && r.causal === 'top-left' && !attnMask;
  const causal =
    r.causal && !isCausal ? causalVisible(g, g.dim(query, 1), g.dim(key, 1), r.causal) : undefined;
  const ops = graphBlockOps(g, { opset: r.opset, visible: visibility(g, causal, attnMask), isCausal });
  const input = (name: string, width: number): GraphValue => ({ name, shape: [-1, -1, width] });
  const { out } = attentionSublayer(
    ops,
    params,
    input(query, D),
    { key: input(key, kdim), value: input(value, vdim) },
    { numHeads: H, numKvHeads: Hkv },
  );
  g.output(out.name, 'output', DataType.FLOAT, [B, L, D]);
}

function exportSelfAttention(g: GraphBuilder, m: SelfAttention, r: Resolved): void {
  const { B, L } = r.dims;
  const x = g.input('input', DataType.FLOAT, [B, L, m.dModel]);
  const attnMask = r.mask ? g.input('attn_mask', DataType.FLOAT, ['attn_mask_batch', L, L]) : undefined;
  // The article's x·W layout: a plain MatMul, one head of width dK.
  const project = (name: string, w: SelfAttention['WQ']) =>
    g.op('Unsqueeze', [g.op('MatMul', [x, g.weight(name, w)]), g.ints([1])]); // [B, 1, L, ·]
  const q = project('WQ', m.WQ);
  const k = project('WK', m.WK);
  const v = project('WV', m.WV);
  // Keys are the queries' own positions (L = S), so both alignments are the top-left one.
  const isCausal = r.opset === 23 && r.causal !== false && !attnMask;
  const causal = r.causal && !isCausal ? causalVisible(g, g.dim(x, 1), g.dim(x, 1), 'top-left') : undefined;
  const mask = attnMask && g.op('Unsqueeze', [attnMask, g.ints([1])]); // [B|1, 1, L, L]
  const visible = visibility(g, causal, mask);
  const out = core(g, r, {
    q,
    k,
    v,
    numHeads: 1,
    numKvHeads: 1,
    keyWidth: m.dK,
    valueWidth: m.dV,
    scale: 1 / Math.sqrt(m.dK),
    visible,
    isCausal,
  });
  g.output(g.op('Squeeze', [out, g.ints([1])]), 'output', DataType.FLOAT, [B, L, m.dV]);
}

function exportTransformer(g: GraphBuilder, m: TinyTransformer, r: Resolved): void {
  const { B, L, past, total } = r.dims;
  const { vocabSize: V, dModel: D, numHeads: H, numLayers, maxLen, causal, scaleScores } = m.config;
  const E = D / H;
  const rope = m.config.positions === 'rope';
  const ids = g.input('input_ids', DataType.INT64, [B, L]);
  const attentionMask = r.mask
    ? g.input('attention_mask', DataType.INT64, [B, r.kvCache ? total : L])
    : undefined;
  const positionIds = r.kvCache ? g.input('position_ids', DataType.INT64, [B, L]) : undefined;
  const pastKV: { key: string; value: string }[] = [];
  if (r.kvCache) {
    for (let i = 0; i < numLayers; i++) {
      pastKV.push({
        key: g.input(`past_key_values.${i}.key`, DataType.FLOAT, [B, H, past, E]),
        value: g.input(`past_key_values.${i}.value`, DataType.FLOAT, [B, H, past, E]),
      });
    }
  }
  const dict = m.stateDict();
  const weights = new Map<string, GraphValue>();
  const w = (name: string): GraphValue => {
    let value = weights.get(name);
    if (!value) {
      value = graphWeight(g, name, dict[name]);
      weights.set(name, value);
    }
    return value;
  };
  const embedding = w('embedding.weight');

  // Embedding ×√D plus the sinusoidal row of each position (0…L−1, or position_ids with a cache); with
  // RoPE nothing is added and the blocks rotate q and k by the same positions.
  const Ldim = g.dim(ids, 1);
  const positions =
    positionIds ??
    g.op('Range', [g.ints([0], true), g.op('Squeeze', [Ldim, g.ints([0])]), g.ints([1], true)]);
  let x = g.op('Mul', [
    g.op('Gather', [embedding.name, ids], [{ name: 'axis', int: 0 }]),
    g.float(Math.sqrt(D)),
  ]);
  if (!rope) {
    const table = g.weight('position_table', sinusoidalPositionalEncoding(maxLen, D));
    x = g.op('Add', [x, g.op('Gather', [table, positions], [{ name: 'axis', int: 0 }])]); // [B, L, D]
  }

  // Who sees whom, once for every layer: causal (bottom-right over past + new keys) and padding.
  const S = r.kvCache ? g.op('Add', [g.dim(pastKV[0].key, 2), Ldim]) : Ldim;
  const isCausal = r.opset === 23 && causal && !r.kvCache && !attentionMask; // L = S: top-left is right
  const causalMask = causal && !isCausal ? causalVisible(g, Ldim, S, 'bottom-right') : undefined;
  const padding = attentionMask && g.op('Unsqueeze', [attentionMask, g.ints([1, 2])]); // [B, 1, 1, S]
  const ops = graphBlockOps(g, {
    opset: r.opset,
    visible: visibility(g, causalMask, padding),
    isCausal,
    cache: r.kvCache
      ? pastKV.map((past, i) => ({ past, present: [`present.${i}.key`, `present.${i}.value`] }))
      : undefined,
    rope: rope ? { positions, maxLen } : undefined,
  });

  // The blocks: transformerBlock itself (src/model/block.ts), over graph values.
  const { mlp } = m.config;
  const attention = {
    numHeads: H,
    scale: scaleScores ? undefined : 1,
    rope: rope ? { base: m.config.ropeBase, offset: 0 } : undefined,
  };
  let hidden: GraphValue = { name: x, shape: [-1, -1, D] };
  for (let i = 0; i < numLayers; i++) {
    const params = blockParamsFrom((name) => (dict[name] ? w(name) : undefined), `layers.${i}.`, mlp);
    hidden = transformerBlock(ops, params, hidden, { attention, mlp }).x;
  }
  const final = ops.layerNorm(hidden, w('norm.weight'), w('norm.bias'));
  const logits = ops.linear(final, embedding).name; // the tied head
  g.output(logits, 'logits', DataType.FLOAT, [B, L, V]);
  if (r.kvCache) {
    for (let i = 0; i < numLayers; i++) {
      g.output(`present.${i}.key`, `present.${i}.key`, DataType.FLOAT, [B, H, total, E]);
      g.output(`present.${i}.value`, `present.${i}.value`, DataType.FLOAT, [B, H, total, E]);
    }
  }
}

/**
 * Exports a MultiHeadAttention, SelfAttention or TinyTransformer as an ONNX model (ModelProto bytes)
 * that computes the module's forward: weights as float32 initializers under their state-dict names,
 * batch and sequence axes symbolic unless `dynamicAxes: false`.
 *
 * Inputs and outputs: MultiHeadAttention `query` [B, L, D], `key` [B, S, kdim], `value` [B, S, vdim]
 * (+ `attn_mask` with `mask: true`) → `output` [B, L, D]; SelfAttention `input` [B, L, dModel] →
 * `output` [B, L, dV]; TinyTransformer `input_ids` int64 [B, L] (+ `attention_mask` int64 [B, S]) →
 * `logits` [B, L, V], and with `kvCache: true` also `position_ids` int64 [B, L] and
 * `past_key_values.{i}.key|value` [B, H, S_past, E] → `present.{i}.key|value` [B, H, S_past + L, E].
 *
 * @throws naming the option when it cannot be expressed (kvCache on an encoder, an unknown opset, …).
 *
 * @example
 * import { TinyTransformer } from 'qkv';
 * import { toOnnx } from 'qkv/onnx';
 * const model = new TinyTransformer({ vocabSize: 100, dModel: 32, numHeads: 4, numLayers: 2, dFF: 64, maxLen: 64, causal: true });
 * const bytes = toOnnx(model, { kvCache: true }); // a Uint8Array: write it to model.onnx
 */
export function toOnnx(module: OnnxExportable, options: OnnxExportOptions = {}): Uint8Array {
  if (
    !(
      module instanceof MultiHeadAttention ||
      module instanceof SelfAttention ||
      module instanceof TinyTransformer
    )
  ) {
    throw new TypeError(
      `${FN}: module must be a MultiHeadAttention, SelfAttention or TinyTransformer, got ${formatValue(module)}`,
    );
  }
  const r = resolve(module, options);
  const g = new GraphBuilder(r.opset);
  const metadata: Record<string, string> = { 'qkv.module': moduleName(module) };
  if (module instanceof MultiHeadAttention) {
    exportMultiHead(g, module, r);
    const { embedDim, numHeads, numKvHeads, kdim, vdim, hasBias } = module;
    metadata['qkv.config'] = JSON.stringify({
      embedDim,
      numHeads,
      numKvHeads,
      kdim,
      vdim,
      bias: hasBias,
      causal: r.causal,
    });
  } else if (module instanceof SelfAttention) {
    exportSelfAttention(g, module, r);
    const { dModel, dK, dV } = module;
    metadata['qkv.config'] = JSON.stringify({ dModel, dK, dV, causal: r.causal });
  } else {
    exportTransformer(g, module, r);
    metadata['qkv.config'] = JSON.stringify(module.config);
  }
  return g.encode({
    // IR 8 is what onnx 1.12 (opset 17) reads; IR 11 came with opset 23 (onnx 1.18).
    irVersion: r.opset === 17 ? 8 : 11,
    graphName: moduleName(module),
    docString: `qkv ${moduleName(module)}, opset ${r.opset}${r.kvCache ? ', with a key/value cache' : ''}`,
    metadata,
  });
}
