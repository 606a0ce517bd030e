// The one block forward: multi-head attention and the pre-LayerNorm transformer block, written once over an
// op interface (BlockOps) that autograd Vars (ops-var.ts: training), plain Tensors (ops-tensor.ts:
// MultiHeadAttention, the playground's trace) and ONNX graph values (onnx/ops-graph.ts: the exporter)
// implement. One decision to know: every matrix product is
// `ops.linear`, and both implementations call kernels/matmul.ts, so a faster GEMM lands there once; an
// observer sees each intermediate as it is computed (the trace is one), so looking never forks the maths.
// An attention-only block (mlp: false, Olsson et al.'s toy models) is the same block without its MLP sublayer;
// a RoPE model's block (options.attention.rope) rotates q and k right after their projection, here, once.
// Shape letters: B batch, L queries, S keys, D model width, H heads, E and Ev per-head query/key and value widths.

import type { AttentionOptions } from '../attention/plan.js';
import type { KVCache } from '../cache/kv-cache.js';
import type { Generator } from '../random.js';
import type { Tensor } from '../tensor.js';

/** Anything with a shape: a Tensor or a Var. */
export interface Shaped {
  readonly shape: readonly number[];
}

/** A weight and its bias, PyTorch layout: y = x·Wᵀ + b, weight [M, K], bias [M]. */
export interface Affine<W> {
  weight: W;
  bias: W;
}

/**
 * An attention layer's parameters, named as nn.MultiheadAttention names them: either one packed
 * inProjWeight [3D, D] (self-attention only) or qProjWeight [H·E, D], kProjWeight [Hkv·E, kdim] and
 * vProjWeight [Hkv·Ev, vdim]; inProjBias packs the q, k and v biases [H·E + Hkv·E + Hkv·Ev].
 */
export interface AttentionParams<W> {
  inProjWeight?: W;
  qProjWeight?: W;
  kProjWeight?: W;
  vProjWeight?: W;
  inProjBias?: W;
  /** [D, H·Ev] */
  outProjWeight: W;
  outProjBias?: W;
}

/** One nn.TransformerEncoderLayer(norm_first=True)'s parameters. */
export interface BlockParams<W> {
  norm1: Affine<W>;
  selfAttn: AttentionParams<W>;
  norm2: Affine<W>;
  /** [F, D], [F] */
  linear1: Affine<W>;
  /** [D, F], [D] */
  linear2: Affine<W>;
}

/** An attention-only block's parameters (`mlp: false`): no norm2, linear1 or linear2. */
export type AttentionBlockParams<W> = Pick<BlockParams<W>, 'norm1' | 'selfAttn'>;

/** The attention options a block passes on: scaledDotProductAttention's, plus the head layout. */
export interface BlockAttentionOptions extends AttentionOptions {
  numHeads: number;
  /** Key/value heads (GQA); default numHeads. */
  numKvHeads?: number;
  /** Also compute the weights [B, H, L, S]. */
  needWeights?: boolean;
  /** The public function errors name (the Tensor ops; the autograd's op names itself). */
  caller?: string;
  /**
   * Incremental decoding: this layer's keys and values are appended to `cache` (as `layer`) and the
   * queries attend over everything it holds (causal alignment bottom-right: the new queries are the
   * newest positions). Inference only: the autograd's op refuses it when a gradient is needed.
   */
  cache?: { cache: KVCache; layer: number };
  /**
   * Rotary position embedding (rotate-half, base e.g. 10000): `attend` turns every head of q and k by
   * its absolute position, offset + row (offset: the tokens before these, e.g. the cache's length)
   * before attention. Self-attention only (the keys are at the queries' positions). Not passed on to
   * ops.attention.
   */
  rope?: { base: number; offset: number };
}

/** The ops a block is written in. T is a Var (autograd) or a Tensor (inference); shapes as in the comments. */
export interface BlockOps<T extends Shaped> {
  /** x [..., K] · weight[M, K]ᵀ + bias[M] → [..., M]: the only matrix product of the forward. */
  linear(x: T, weight: T, bias?: T): T;
  /** Over the last axis, eps 1e-5, biased variance (PyTorch's). */
  layerNorm(x: T, weight: T, bias: T): T;
  /** tanh-approximate GELU. */
  gelu(x: T): T;
  /** a + b, b's shape equal to a's or a suffix of it. */
  add(a: T, b: T): T;
  /** Splits the last axis into pieces of the given widths. */
  splitLast(x: T, widths: readonly number[]): T[];
  /**
   * RoPE (rotate-half) on x [B, L, H·E], heads not split: in each head features d and d + E/2 turn by
   * (offset + i)·base^(−2d/E) at row i.
   */
  rope(x: T, numHeads: number, headDim: number, offset: number, base: number): T;
  /** q [B, L, H·E], k [B, S, Hkv·E], v [B, S, Hkv·Ev] → heads concatenated [B, L, H·Ev] (+ weights). */
  attention(q: T, k: T, v: T, options: BlockAttentionOptions): { out: T; weights?: Tensor };
  /**
   * Optional: self-attention from packed projections qkv [B, L, 3·H·E] (q | k | v per row), q and k
   * turned by options.rope when given — the same numbers as splitLast into thirds, rope and attention,
   * without their intermediate copies. `attend` uses it when it can (see there).
   */
  attentionPacked?(qkv: T, options: BlockAttentionOptions): { out: T; weights?: Tensor };
  /** Inverted dropout with probability p, masks drawn from `generator`. */
  dropout(x: T, p: number, generator: Generator): T;
}

/** What a block shows an observer, in the order it is computed; every method is optional. */
export interface BlockObserver<T> {
  /** LN1(x) [B, L, D]: what the attention projections read. */
  normed?(x: T): void;
  /** q [B, L, H·E], k [B, S, Hkv·E], v [B, S, Hkv·Ev], heads not yet split (q and k rotated, with rope). */
  projected?(q: T, k: T, v: T): void;
  /** The heads' outputs, concatenated [B, L, H·Ev], and the weights [B, H, L, S] when they were asked for. */
  attended?(out: T, weights: Tensor | undefined): void;
}

/** Key and value inputs for cross-attention (default: the query input, self-attention). */
export interface KeyValue<T> {
  key: T;
  value: T;
}

/**
 * Projects q, k and v (and rotates q and k with `options.rope`), splits heads, attends and merges heads:
 * [B, L, H·Ev], before the output projection.
 * The trace stops here on its focused layer (focusOnly); attentionSublayer adds the projection.
 */
export function attend<T extends Shaped>(
  ops: BlockOps<T>,
  p: AttentionParams<T>,
  x: T,
  kv: KeyValue<T> | undefined,
  options: BlockAttentionOptions,
  observer?: BlockObserver<T>,
): { heads: T; weights?: Tensor } {
  const H = options.numHeads;
  if (
    p.inProjWeight &&
    !kv &&
    ops.attentionPacked &&
    !observer?.projected &&
    !options.cache &&
    (options.numKvHeads ?? H) === H
  ) {
    // The packed path in one op (training's): nothing looks at q, k and v on their own.
    const a = ops.attentionPacked(ops.linear(x, p.inProjWeight, p.inProjBias), options);
    observer?.attended?.(a.out, a.weights);
    return { heads: a.out, weights: a.weights };
  }
  let q: T;
  let k: T;
  let v: T;
  if (p.inProjWeight) {
    // One product for all three (the autograd then sums ∂x in one pass, as PyTorch's packed path does).
    if (kv) throw new Error('attend: a packed inProjWeight serves self-attention only');
    const third = p.inProjWeight.shape[0] / 3;
    [q, k, v] = ops.splitLast(ops.linear(x, p.inProjWeight, p.inProjBias), [third, third, third]);
  } else {
    const wq = p.qProjWeight!;
    const wk = p.kProjWeight!;
    const wv = p.vProjWeight!;
    const widths = [wq.shape[0], wk.shape[0], wv.shape[0]];
    const [bq, bk, bv] = p.inProjBias ? ops.splitLast(p.inProjBias, widths) : [];
    q = ops.linear(x, wq, bq);
    k = ops.linear(kv?.key ?? x, wk, bk);
    v = ops.linear(kv?.value ?? x, wv, bv);
  }
  const { rope, ...rest } = options;
  if (rope) {
    if (kv) throw new Error('attend: rope serves self-attention only (keys at the queries’ positions)');
    const Hkv = options.numKvHeads ?? H;
    const E = q.shape[2] / H;
    q = ops.rope(q, H, E, rope.offset, rope.base);
    k = ops.rope(k, Hkv, k.shape[2] / Hkv, rope.offset, rope.base);
  }
  observer?.projected?.(q, k, v);
  const a = ops.attention(q, k, v, rest);
  observer?.attended?.(a.out, a.weights);
  return { heads: a.out, weights: a.weights };
}

/** Multi-head attention: attend, then the output projection → [B, L, D] (MultiHeadAttention.forward). */
export function attentionSublayer<T extends Shaped>(
  ops: BlockOps<T>,
  p: AttentionParams<T>,
  x: T,
  kv: KeyValue<T> | undefined,
  options: BlockAttentionOptions,
  observer?: BlockObserver<T>,
): { out: T; weights?: Tensor } {
  const { heads, weights } = attend(ops, p, x, kv, options, observer);
  return { out: ops.linear(heads, p.outProjWeight, p.outProjBias), weights };
}

/** Options of transformerBlock. */
export interface BlockOptions<T> {
  attention: BlockAttentionOptions;
  /** Training: dropout after the attention and the MLP outputs, masks from `generator`. */
  dropout?: { p: number; generator: Generator };
  observer?: BlockObserver<T>;
  /** false: attention only, x += Attn(LN1(x)) and nothing more (p needs no MLP parameters). Default true. */
  mlp?: boolean;
}

/**
 * A pre-LayerNorm block (nn.TransformerEncoderLayer with norm_first=True, tanh-GELU MLP):
 * x += Attn(LN1(x)); x += MLP(LN2(x)); with `mlp: false` the first line only. x [B, L, D] → [B, L, D],
 * plus the weights when asked for.
 */
export function transformerBlock<T extends Shaped>(
  ops: BlockOps<T>,
  p: BlockParams<T> | AttentionBlockParams<T>,
  x: T,
  options: BlockOptions<T>,
): { x: T; weights?: Tensor } {
  const { dropout, observer, mlp = true } = options;
  const drop = (y: T) => (dropout && dropout.p > 0 ? ops.dropout(y, dropout.p, dropout.generator) : y);
  const h = ops.layerNorm(x, p.norm1.weight, p.norm1.bias);
  observer?.normed?.(h);
  const a = attentionSublayer(ops, p.selfAttn, h, undefined, options.attention, observer);
  const x1 = ops.add(x, drop(a.out));
  if (!mlp) return { x: x1, weights: a.weights };
  if (!('linear1' in p) || !p.norm2 || !p.linear1 || !p.linear2) {
    throw new TypeError(
      'transformerBlock: p has no norm2, linear1 and linear2, which the MLP sublayer needs (attention only is options.mlp: false)',
    );
  }
  const h2 = ops.layerNorm(x1, p.norm2.weight, p.norm2.bias);
  const m = ops.linear(
    ops.gelu(ops.linear(h2, p.linear1.weight, p.linear1.bias)),
    p.linear2.weight,
    p.linear2.bias,
  );
  return { x: ops.add(x1, drop(m)), weights: a.weights };
}
