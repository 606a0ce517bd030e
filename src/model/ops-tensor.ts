// BlockOps over plain float32 Tensors: the block forward for inference (MultiHeadAttention, the playground's
// trace), with no tape and nothing saved for a backward. One decision to know: each op computes exactly
// what its autograd twin computes (float64 sums, the same order), so a Tensor forward and a Var forward
// of the same weights agree bit for bit (test/block.test.ts) — the trace shows what training computed.

import {
  type AttentionOptions,
  type AttentionPlan,
  checkAttentionOptions,
  checkBroadcast,
  planAttention,
} from '../attention/plan.js';
import { runKernel } from '../attention/sdpa.js';
import { splitPacked } from '../autograd/attention.js';
import { geluValues, layerNormValues } from '../autograd/ops.js';
import { type KVCache, planCachedAttention } from '../cache/kv-cache.js';
import { linear as gemm, swapMiddle } from '../kernels/matmul.js';
import { checkRopeArgs, ropeTable, rotateHalfHeads } from '../position/rope.js';
import type { Generator } from '../random.js';
import { formatShape, sizeOf } from '../shape.js';
import { Tensor } from '../tensor.js';
import type { BlockOps } from './block.js';

/** How many rows of `width` a tensor holds (its leading axes flattened). */
function rows(x: Tensor, width: number): number {
  return width === 0 ? 0 : x.size / width;
}

/**
 * The heads of q [B, L, H·E], k [B, S, Hkv·E], v [B, S, Hkv·Ev] split to [B, H, L, E] … and planned as
 * one attention call; `merge` turns its output [B, H, L, Ev] back into [B, L, H·Ev]. The one place the
 * Tensor forward and MultiHeadAttention.forwardAsync split and merge heads.
 */
export function splitHeads(
  caller: string,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  H: number,
  Hkv: number,
  options: AttentionOptions,
): { plan: AttentionPlan; outSize: number; merge(out: Float32Array): Tensor } {
  const [B, L, QW] = q.shape;
  const S = k.shape[1];
  const E = QW / H;
  const Ek = k.shape[2] / Hkv;
  const Ev = v.shape[2] / Hkv;
  const qh = new Tensor(swapMiddle(q.data, B, L, H, E), [B, H, L, E]);
  const kh = new Tensor(swapMiddle(k.data, B, S, Hkv, Ek), [B, Hkv, S, Ek]);
  const vh = new Tensor(swapMiddle(v.data, B, S, Hkv, Ev), [B, Hkv, S, Ev]);
  return {
    plan: planAttention(caller, qh, kh, vh, options),
    outSize: B * H * L * Ev,
    merge: (out) => new Tensor(swapMiddle(out, B, H, L, Ev), [B, L, H * Ev]),
  };
}

/**
 * splitHeads for a cached step: k and v (this step's keys and values) are appended to `cache` at `layer`
 * and the plan reads every key the layer holds in place (KVCache's storage; no copy of the prefix).
 */
export function splitHeadsCached(
  caller: string,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  H: number,
  Hkv: number,
  cache: KVCache,
  layer: number,
  options: AttentionOptions,
): { plan: AttentionPlan; outSize: number; merge(out: Float32Array): Tensor } {
  const [B, L, QW] = q.shape;
  const Lk = k.shape[1];
  const E = QW / H;
  const Ev = v.shape[2] / Hkv;
  const qh = new Tensor(swapMiddle(q.data, B, L, H, E), [B, H, L, E]);
  const kh = new Tensor(swapMiddle(k.data, B, Lk, Hkv, k.shape[2] / Hkv), [B, Hkv, Lk, k.shape[2] / Hkv]);
  const vh = new Tensor(swapMiddle(v.data, B, Lk, Hkv, Ev), [B, Hkv, Lk, Ev]);
  // A call that throws leaves the cache as it was: the mask and bias are checked against the keys the
  // layer will hold before the update (update checks its own arguments before it changes anything).
  const S = cache.heldAfter(layer, Lk);
  const shapes = `query ${formatShape(qh.shape)}, the cache's keys after this step [${B}, ${Hkv}, ${S}, ·]`;
  checkBroadcast(caller, 'mask', options.mask, [B, H, L, S], '[B, H, L, S]', shapes);
  checkBroadcast(caller, 'bias', options.bias, [B, H, L, S], '[B, H, L, S]', shapes);
  // The other options (names, causal, window, scale, kernel, dtype) do not depend on the keys held: they
  // are checked on this step's own keys, before the update too.
  checkAttentionOptions(caller, options, E);
  cache.update(layer, kh, vh);
  return {
    plan: planCachedAttention(caller, qh, cache, layer, options),
    outSize: B * H * L * Ev,
    merge: (out) => new Tensor(swapMiddle(out, B, H, L, Ev), [B, L, H * Ev]),
  };
}

/** The block forward's ops on Tensors ([..., D] for the row-wise ops; [B, L, H·E] for attention). */
export const tensorOps: BlockOps<Tensor> = {
  linear(x, weight, bias) {
    const [M, K] = weight.shape;
    const y = gemm(x.data, rows(x, K), K, weight.data, 0, M, bias?.data);
    return new Tensor(y, [...x.shape.slice(0, -1), M]);
  },

  layerNorm(x, weight, bias) {
    const D = x.shape[x.rank - 1];
    const y = new Float32Array(x.size);
    // The autograd's own function, so both forwards agree bit for bit.
    layerNormValues(x.data, weight.data, bias.data, y, D === 0 ? 0 : x.size / D, D, 1e-5);
    return new Tensor(y, x.shape);
  },

  gelu(x) {
    const y = new Float32Array(x.size);
    geluValues(x.data, y); // the autograd's own loop, so both forwards agree bit for bit
    return new Tensor(y, x.shape);
  },

  add(a, b) {
    const y = new Float32Array(a.size);
    const nb = b.size;
    for (let i = 0; i < a.size; i++) y[i] = a.data[i] + b.data[i % nb];
    return new Tensor(y, a.shape);
  },

  splitLast(x, widths) {
    const W = x.shape[x.rank - 1];
    const N = rows(x, W);
    let start = 0;
    return widths.map((w) => {
      const y = new Float32Array(N * w);
      for (let n = 0; n < N; n++) y.set(x.data.subarray(n * W + start, n * W + start + w), n * w);
      start += w;
      return new Tensor(y, [...x.shape.slice(0, -1), w]);
    });
  },

  rope(x, numHeads, headDim, offset, base) {
    const L = checkRopeArgs('rope', x.shape, numHeads, headDim, offset, base);
    const { cos, sin } = ropeTable(L, headDim, offset, base);
    const y = new Float32Array(x.size);
    rotateHalfHeads(x.data, y, L, numHeads, headDim, cos, sin); // the autograd's loop: bit for bit its rope
    return new Tensor(y, x.shape);
  },

  attention(q, k, v, options) {
    const {
      numHeads: H,
      numKvHeads: Hkv = H,
      needWeights = false,
      caller = 'attention',
      cache,
      ...sdpa
    } = options;
    const split = cache
      ? splitHeadsCached(caller, q, k, v, H, Hkv, cache.cache, cache.layer, sdpa)
      : splitHeads(caller, q, k, v, H, Hkv, sdpa);
    const out = new Float32Array(split.outSize);
    const weights = needWeights ? new Float32Array(sizeOf(split.plan.weightsShape)) : undefined;
    runKernel(caller, split.plan, { out, weights });
    // [B, H, L, S]: with a cache S is every key the layer holds, not this step's k.
    const weightsTensor = weights && new Tensor(weights, [q.shape[0], H, q.shape[1], split.plan.problem.S]);
    return { out: split.merge(out), weights: weightsTensor };
  },

  attentionPacked(qkv, options) {
    // Self-attention without a cache or GQA (block.ts's attend checks): heads straight from the packed
    // rows, q and k turned on the way — the numbers of splitLast, rope and attention above, bit for bit.
    const {
      numHeads: H,
      needWeights = false,
      caller = 'attention',
      rope,
      numKvHeads: _numKvHeads,
      cache: _cache,
      ...sdpa
    } = options;
    const { B, L, E, q, k, v } = splitPacked(caller, qkv.data, qkv.shape, H, rope);
    const heads = (x: Float32Array) => new Tensor(x, [B, H, L, E]);
    const plan = planAttention(caller, heads(q), heads(k), heads(v), sdpa);
    const out = new Float32Array(B * H * L * E);
    const weights = needWeights ? new Float32Array(sizeOf(plan.weightsShape)) : undefined;
    runKernel(caller, plan, { out, weights });
    return {
      out: new Tensor(swapMiddle(out, B, H, L, E), [B, L, H * E]),
      weights: weights && new Tensor(weights, [B, H, L, L]),
    };
  },

  dropout(x, p, generator: Generator) {
    if (!(p >= 0 && p < 1)) throw new RangeError(`dropout: p must be in [0, 1), got ${p}`);
    if (p === 0) return x;
    const keep = 1 / (1 - p);
    const y = new Float32Array(x.size);
    // random()'s numbers, in order, in blocks (Generator.fillRandom): the autograd's masks.
    const u = new Float64Array(Math.min(x.size, 4096));
    for (let i0 = 0; i0 < x.size; i0 += u.length) {
      const m = Math.min(u.length, x.size - i0);
      generator.fillRandom(m === u.length ? u : u.subarray(0, m));
      for (let j = 0; j < m; j++) y[i0 + j] = x.data[i0 + j] * (u[j] < p ? 0 : keep);
    }
    return new Tensor(y, x.shape);
  },
};
