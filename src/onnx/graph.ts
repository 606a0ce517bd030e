// A small ONNX graph builder and the pieces every exported module is made of: linear layers, LayerNorm,
// qkv's tanh-GELU, head split/merge and the attention core (plain ops for opset 17; the standard
// Attention op for opset 23), each computing what qkv's forward computes.
// One decision to know: the graph never bakes in a batch size or a length. Every size the ops need is
// read at run time (Shape, Range), so one graph runs at any B and L; `dynamicAxes: false` only fixes the
// dims the inputs and outputs declare.

import type { Tensor } from '../tensor.js';
import {
  type Attribute,
  DataType,
  type DataTypeCode,
  encodeModel,
  type NodeSpec,
  type TensorValue,
  type ValueSpec,
} from './proto.js';

/** The lowest float32: what a blocked score becomes before Softmax (−Infinity would make all-blocked rows NaN). */
const LOWEST = -3.4028234663852886e38;

/** Nodes, initializers, inputs and outputs of a graph under construction; values are named by string. */
export class GraphBuilder {
  readonly opset: number;
  readonly nodes: NodeSpec[] = [];
  readonly initializers: TensorValue[] = [];
  readonly inputs: ValueSpec[] = [];
  readonly outputs: ValueSpec[] = [];
  #count = 0;
  #consts = new Map<string, string>();

  constructor(opset: number) {
    this.opset = opset;
  }

  /** A fresh value name: `hint` plus a counter. */
  fresh(hint: string): string {
    return `${hint}_${this.#count++}`;
  }

  /** Adds a node; returns its outputs' names (fresh names from `hint` unless `names` are given). */
  ops(
    op: string,
    inputs: readonly string[],
    n: number,
    attributes?: Attribute[],
    names?: string[],
  ): string[] {
    const outputs = names ?? Array.from({ length: n }, () => this.fresh(op.toLowerCase()));
    this.nodes.push({ op, inputs, outputs, name: `${op}_${this.nodes.length}`, attributes });
    return outputs;
  }

  /** Adds a one-output node; returns its output's name (`name` when given). */
  op(op: string, inputs: readonly string[], attributes?: Attribute[], name?: string): string {
    return this.ops(op, inputs, 1, attributes, name === undefined ? undefined : [name])[0];
  }

  input(name: string, type: DataTypeCode, dims: readonly (number | string)[]): string {
    this.inputs.push({ name, type, dims });
    return name;
  }

  /** Declares `value` a graph output named `name` (through an Identity when the names differ). */
  output(value: string, name: string, type: DataTypeCode, dims: readonly (number | string)[]): void {
    if (value !== name) this.op('Identity', [value], undefined, name);
    this.outputs.push({ name, type, dims });
  }

  /** A float32 initializer holding a Tensor's data, under `name` (a state-dict name). */
  weight(name: string, t: Tensor): string {
    this.initializers.push({ name, dims: t.shape, value: { type: 'float32', data: t.data } });
    return name;
  }

  #constant(key: string, make: (name: string) => TensorValue): string {
    let name = this.#consts.get(key);
    if (name === undefined) {
      name = this.fresh('const');
      this.initializers.push(make(name));
      this.#consts.set(key, name);
    }
    return name;
  }

  /** An int64 constant: a 1-D tensor, or a scalar when `scalar`. */
  ints(values: readonly number[], scalar = false): string {
    return this.#constant(`i${scalar ? 's' : ''}:${values.join(',')}`, (name) => ({
      name,
      dims: scalar ? [] : [values.length],
      value: { type: 'int64', data: values },
    }));
  }

  /** A float32 scalar constant (rounded to float32, as ORT computes with it). */
  float(value: number): string {
    return this.#constant(`f:${value}`, (name) => ({
      name,
      dims: [],
      value: { type: 'float32', data: Float32Array.of(value) },
    }));
  }

  /** Dimension `axis` of `x` as a 1-D int64 tensor [1]. */
  dim(x: string, axis: number): string {
    return this.op(
      'Shape',
      [x],
      [
        { name: 'start', int: axis },
        { name: 'end', int: axis + 1 },
      ],
    );
  }

  encode(options: {
    irVersion: number;
    graphName: string;
    docString: string;
    metadata: Record<string, string>;
  }) {
    return encodeModel({
      irVersion: options.irVersion,
      opset: this.opset,
      producerVersion: '0.1.0',
      graphName: options.graphName,
      docString: options.docString,
      nodes: this.nodes,
      initializers: this.initializers,
      inputs: this.inputs,
      outputs: this.outputs,
      metadata: options.metadata,
    });
  }
}

/** y = x·Wᵀ + b for a PyTorch-layout weight [M, K] (kept as stored; ORT folds the Transpose once). */
export function linear(g: GraphBuilder, x: string, weight: string, bias?: string): string {
  const wT = g.op('Transpose', [weight], [{ name: 'perm', ints: [1, 0] }]);
  const y = g.op('MatMul', [x, wT]);
  return bias === undefined ? y : g.op('Add', [y, bias]);
}

/** LayerNorm over the last axis, eps 1e-5 (LayerNormalization, opset 17+). */
export function layerNorm(g: GraphBuilder, x: string, weight: string, bias: string): string {
  return g.op(
    'LayerNormalization',
    [x, weight, bias],
    [
      { name: 'axis', int: -1 },
      { name: 'epsilon', float: 1e-5 },
    ],
  );
}

/** qkv's GELU, tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). */
export function geluTanh(g: GraphBuilder, x: string): string {
  const cube = g.op('Pow', [x, g.float(3)]);
  const inner = g.op('Add', [x, g.op('Mul', [cube, g.float(0.044715)])]);
  const t = g.op('Tanh', [g.op('Mul', [inner, g.float(Math.sqrt(2 / Math.PI))])]);
  return g.op('Mul', [g.op('Mul', [x, g.float(0.5)]), g.op('Add', [t, g.float(1)])]);
}

/** [B, L, H·E] → [B, H, L, E]. */
export function splitHeads(g: GraphBuilder, x: string, heads: number, width: number): string {
  const r = g.op('Reshape', [x, g.ints([0, 0, heads, width])]);
  return g.op('Transpose', [r], [{ name: 'perm', ints: [0, 2, 1, 3] }]);
}

/** [B, H, L, E] → [B, L, H·E]. */
export function mergeHeads(g: GraphBuilder, x: string, width: number): string {
  const t = g.op('Transpose', [x], [{ name: 'perm', ints: [0, 2, 1, 3] }]);
  return g.op('Reshape', [t, g.ints([0, 0, width])]);
}

/**
 * The causal visibility [L, S] (bool) for L queries over S keys: 'bottom-right' lets query i see keys
 * j ≤ i + S − L (the queries are the newest positions), 'top-left' keys j ≤ i.
 */
export function causalVisible(
  g: GraphBuilder,
  L: string,
  S: string,
  align: 'bottom-right' | 'top-left',
): string {
  const zero = g.ints([0], true);
  const one = g.ints([1], true);
  const scalar = (d: string) => g.op('Squeeze', [d, g.ints([0])]);
  const rows = g.op('Range', [zero, scalar(L), one]); // [L]
  const cols = g.op('Range', [zero, scalar(S), one]); // [S]
  let limit = g.op('Unsqueeze', [rows, g.ints([1])]); // [L, 1]
  if (align === 'bottom-right') limit = g.op('Add', [limit, g.op('Sub', [S, L])]); // i + S − L
  return g.op('LessOrEqual', [cols, limit]); // [L, S]
}

/** What the attention core is given: heads split, plus how queries may see keys. */
export interface CoreInputs {
  /** [B, H, L, E] */
  q: string;
  /** [B, Hkv, S, E] */
  k: string;
  /** [B, Hkv, S, Ev] */
  v: string;
  numHeads: number;
  numKvHeads: number;
  /** E and Ev: per-head widths of keys and values. */
  keyWidth: number;
  valueWidth: number;
  scale: number;
  /** Bool, broadcastable to [B, H, L, S]: true = may attend; undefined: every key. */
  visible?: string;
}

/**
 * Opset 17: softmax(q·kᵀ·scale, blocked scores set to the lowest float)·v → [B, H, L, Ev]. Blocked
 * weights are then set to 0, so a query that may see no key gets zero weights and a zero output, as in
 * qkv (plain Softmax would spread it evenly over the blocked keys). GQA repeats each kv head over its
 * H/Hkv query heads (Unsqueeze, Expand, Reshape), query head h reading kv head ⌊h·Hkv/H⌋, as qkv's kernels.
 */
export function attentionCore17(g: GraphBuilder, c: CoreInputs): string {
  let { k, v } = c;
  const group = c.numHeads / c.numKvHeads;
  if (group > 1) {
    const repeat = (x: string, width: number) => {
      const u = g.op('Unsqueeze', [x, g.ints([2])]); // [B, Hkv, 1, S, ·]
      const e = g.op('Expand', [u, g.ints([1, 1, group, 1, 1])]); // [B, Hkv, G, S, ·]
      return g.op('Reshape', [e, g.ints([0, c.numHeads, -1, width])]); // [B, H, S, ·]
    };
    k = repeat(k, c.keyWidth);
    v = repeat(v, c.valueWidth);
  }
  const kT = g.op('Transpose', [k], [{ name: 'perm', ints: [0, 1, 3, 2] }]);
  let scores = g.op('Mul', [g.op('MatMul', [c.q, kT]), g.float(c.scale)]); // [B, H, L, S]
  if (c.visible) scores = g.op('Where', [c.visible, scores, g.float(LOWEST)]);
  let p = g.op('Softmax', [scores], [{ name: 'axis', int: -1 }]);
  if (c.visible) p = g.op('Where', [c.visible, p, g.float(0)]);
  return g.op('MatMul', [p, v]); // [B, H, L, Ev]
}

/**
 * Opset 23: the standard Attention op on 4-D heads ([B, H, L, E]: the op reads H and Hkv, GQA included,
 * from the shapes, so q_num_heads / kv_num_heads, which serve 3-D inputs, are not set; 4-D output lets a
 * row be zeroed per head), with `visible` as its boolean attn_mask and
 * `isCausal` for the plain top-left causal case (only used where L = S). A query row that may see no
 * key is set to zero afterwards (the op's softmax would make it NaN), as qkv leaves it. With `past`,
 * the op concatenates past_key/past_value [B, Hkv, S_past, ·] before k and v and returns present_key /
 * present_value, named `present`.
 */
export function attentionCore23(
  g: GraphBuilder,
  c: CoreInputs & { isCausal?: boolean; past?: { key: string; value: string }; present?: [string, string] },
): string {
  // onnxruntime (1.30) wants the mask's query axis spelled out (no broadcast over L): expand to [L, S].
  let mask = '';
  if (c.visible) {
    const keys = c.past ? g.op('Add', [g.dim(c.past.key, 2), g.dim(c.k, 2)]) : g.dim(c.k, 2);
    const target = g.op('Concat', [g.dim(c.q, 2), keys], [{ name: 'axis', int: 0 }]);
    mask = g.op('Expand', [c.visible, target]);
  }
  const inputs = [c.q, c.k, c.v, mask];
  if (c.past) inputs.push(c.past.key, c.past.value);
  while (inputs[inputs.length - 1] === '') inputs.pop();
  const attributes: Attribute[] = [{ name: 'scale', float: c.scale }];
  if (c.isCausal) attributes.push({ name: 'is_causal', int: 1 });
  const out = c.present
    ? g.ops('Attention', inputs, 3, attributes, [g.fresh('attention'), ...c.present])[0]
    : g.op('Attention', inputs, attributes);
  if (!c.visible) return out;
  // Rows that see no key: any over S of the mask, [.., L, 1], broadcast over Ev.
  const anyVisible = g.op(
    'ReduceMax',
    [g.op('Cast', [c.visible], [{ name: 'to', int: DataType.FLOAT }]), g.ints([-1])],
    [{ name: 'keepdims', int: 1 }],
  );
  return g.op('Where', [g.op('Cast', [anyVisible], [{ name: 'to', int: DataType.BOOL }]), out, g.float(0)]);
}
