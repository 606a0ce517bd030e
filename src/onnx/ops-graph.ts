// BlockOps over an ONNX graph under construction: the block forward of src/model/block.ts, run with these
// ops, writes the nodes that compute it, so the exported graph of a TinyTransformer or a MultiHeadAttention
// is the one forward qkv runs, not a second description of it (the third BlockOps, beside ops-var.ts and
// ops-tensor.ts). One decision to know: who may see whom is not a per-call option here. The exporter builds
// the visibility once (causal over past + new keys, padding, a mask input) and hands it to every layer's
// attention with the cache inputs; an attention call that asks for a mask, a bias, a window or the weights
// is refused, since those options would otherwise be dropped without a word.

import type { BlockAttentionOptions, BlockOps, Shaped } from '../model/block.js';
import { ropeTable } from '../position/rope.js';
import { Tensor } from '../tensor.js';
import {
  attentionCore17,
  attentionCore23,
  type GraphBuilder,
  geluTanh,
  layerNorm,
  linear,
  mergeHeads,
  splitHeads,
} from './graph.js';

/** A value of the graph: its name and its shape, −1 for a size known only at run time (B, L, S). */
export interface GraphValue extends Shaped {
  readonly name: string;
}

/** How every attention of the graph sees its keys, decided once by the exporter. */
export interface GraphAttentionContext {
  opset: 17 | 23;
  /** Bool, broadcastable to [B, H, L, S]: true = may attend; undefined: every key. */
  visible?: string;
  /** Opset 23: the Attention op's own top-left is_causal (only where L = S and nothing else masks). */
  isCausal?: boolean;
  /** Per layer, in call order: past_key_values inputs [B, Hkv, S_past, ·] and the present outputs' names. */
  cache?: { past: { key: string; value: string }; present: [string, string] }[];
  /**
   * RoPE: the positions to rotate by, int64 — [L] (0…L−1, from Range) or [B, L] (position_ids) — and the
   * table length (the model's maxLen). The block's `offset` is then 0: the positions carry it.
   */
  rope?: { positions: string; maxLen: number };
}

/** A float32 initializer under a state-dict name, as a graph value. */
export function graphWeight(g: GraphBuilder, name: string, t: Tensor): GraphValue {
  return { name: g.weight(name, t), shape: t.shape };
}

/** The option keys a graph attention takes; every other one is the context's (see the header). */
const ATTENTION_KEYS = new Set(['numHeads', 'numKvHeads', 'scale', 'caller']);

/** The ops: each appends its nodes to `g` and returns the value it made. */
export function graphBlockOps(g: GraphBuilder, ctx: GraphAttentionContext): BlockOps<GraphValue> {
  const value = (name: string, shape: readonly number[]): GraphValue => ({ name, shape });
  const rows = (x: GraphValue) => x.shape.slice(0, -1);
  const tables = new Map<string, { cos: string; sin: string }>();
  let layer = 0;
  /** cos/sin rows of the positions, shaped to broadcast over [B, L, H, E/2]: [L, 1, E/2] or [B, L, 1, E/2]. */
  const ropeRows = (E: number, base: number) => {
    const r = ctx.rope;
    if (!r) throw new Error('graphBlockOps: rope asked for, but the exporter gave no positions');
    const key = `${E},${base}`;
    let t = tables.get(key);
    if (!t) {
      const half = E / 2;
      const { cos, sin } = ropeTable(r.maxLen, E, 0, base);
      const suffix = tables.size === 0 ? '' : `_${tables.size}`;
      const gather = (name: string, table: Float64Array) =>
        g.op('Unsqueeze', [
          g.op(
            'Gather',
            [g.weight(name, new Tensor(Float32Array.from(table), [r.maxLen, half])), r.positions],
            [{ name: 'axis', int: 0 }],
          ),
          g.ints([-2]),
        ]);
      t = { cos: gather(`rope_cos${suffix}`, cos), sin: gather(`rope_sin${suffix}`, sin) };
      tables.set(key, t);
    }
    return t;
  };
  return {
    linear: (x, weight, bias) =>
      value(linear(g, x.name, weight.name, bias?.name), [...rows(x), weight.shape[0]]),
    layerNorm: (x, weight, bias) => value(layerNorm(g, x.name, weight.name, bias.name), x.shape),
    gelu: (x) => value(geluTanh(g, x.name), x.shape),
    add: (a, b) => value(g.op('Add', [a.name, b.name]), a.shape),
    splitLast: (x, widths) =>
      g
        .ops('Split', [x.name, g.ints(widths)], widths.length, [{ name: 'axis', int: -1 }])
        .map((name, i) => value(name, [...rows(x), widths[i]])),
    rope(x, numHeads, headDim, offset, base) {
      if (offset !== 0)
        throw new Error(`graphBlockOps: rope offset ${offset}: the graph's positions carry it`);
      const { cos, sin } = ropeRows(headDim, base);
      const half = headDim / 2;
      // [B, L, H·E] → [B, L, H, E]; each head's halves (x1, x2) → (x1·cos − x2·sin, x2·cos + x1·sin).
      const heads = g.op('Reshape', [x.name, g.ints([0, 0, numHeads, headDim])]);
      const [x1, x2] = g.ops('Split', [heads, g.ints([half, half])], 2, [{ name: 'axis', int: -1 }]);
      const y1 = g.op('Sub', [g.op('Mul', [x1, cos]), g.op('Mul', [x2, sin])]);
      const y2 = g.op('Add', [g.op('Mul', [x2, cos]), g.op('Mul', [x1, sin])]);
      const y = g.op('Concat', [y1, y2], [{ name: 'axis', int: -1 }]);
      return value(g.op('Reshape', [y, g.ints([0, 0, numHeads * headDim])]), x.shape);
    },
    attention(q, k, v, options: BlockAttentionOptions) {
      for (const [key, v] of Object.entries(options)) {
        if (v !== undefined && v !== false && !ATTENTION_KEYS.has(key)) {
          throw new Error(
            `graphBlockOps: attention option '${key}' cannot be given per call: the exporter's visibility decides who sees whom`,
          );
        }
      }
      const H = options.numHeads;
      const Hkv = options.numKvHeads ?? H;
      const E = q.shape[q.shape.length - 1] / H;
      const Ev = v.shape[v.shape.length - 1] / Hkv;
      const cache = ctx.cache?.[layer];
      if (ctx.cache && !cache) throw new Error(`graphBlockOps: no cache inputs for layer ${layer}`);
      layer++;
      let kh = splitHeads(g, k.name, Hkv, k.shape[k.shape.length - 1] / Hkv);
      let vh = splitHeads(g, v.name, Hkv, Ev);
      const core = {
        q: splitHeads(g, q.name, H, E),
        numHeads: H,
        numKvHeads: Hkv,
        keyWidth: E,
        valueWidth: Ev,
        scale: options.scale ?? 1 / Math.sqrt(E),
        visible: ctx.visible,
      };
      let heads: string;
      if (ctx.opset === 17) {
        if (cache) {
          kh = g.op('Concat', [cache.past.key, kh], [{ name: 'axis', int: 2 }], cache.present[0]);
          vh = g.op('Concat', [cache.past.value, vh], [{ name: 'axis', int: 2 }], cache.present[1]);
        }
        heads = attentionCore17(g, { ...core, k: kh, v: vh });
      } else {
        heads = attentionCore23(g, {
          ...core,
          k: kh,
          v: vh,
          isCausal: ctx.isCausal,
          ...(cache ? { past: cache.past, present: cache.present } : {}),
        });
      }
      return { out: value(mergeHeads(g, heads, H * Ev), [...rows(q), H * Ev]) };
    },
    dropout() {
      throw new Error('graphBlockOps: dropout is training only; an exported graph runs inference');
    },
  };
}
