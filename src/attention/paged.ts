// Attention read straight from stored K/V: a KVCache's preallocated (or ring) rows and a PagedKVCache's
// blocks, on the same kernels as scaledDotProductAttention.
// One decision to know: nothing is gathered. The call is planned by planAttention over the logical K/V
// shape [B, Hkv, S, ·] (so every option is checked and resolved as for scaledDotProductAttention), then
// the problem's k and v become the storage itself with a `kv` layout, which kernels read through kvRow.

import type { PagedKVCache, StoredKV } from '../cache/paged.js';
import { checkBoolean, checkOptionNames, formatShape, sizeOf } from '../shape.js';
import { Tensor, toTensor } from '../tensor.js';
import type {
  AnyResultOptions,
  AttentionInput,
  AttentionOptions,
  AttentionPlan,
  CausalOption,
} from './plan.js';
import { planAttention } from './plan.js';
import { runKernel } from './sdpa.js';

/**
 * Plans attention of q [B, Hq, L, E] over stored K/V: planAttention's checks and option resolution over
 * the logical shapes, then the problem reads the storage through its layout (no copy). The keys are
 * positions 0 … S − 1 of what the storage holds, so causal alignment, masks and biases ([…, L, S]) refer
 * to them; a cache with a window intersects the caller's window with [w − 1, ·].
 */
export function planStoredAttention(
  fn: string,
  q: AttentionInput,
  kv: StoredKV,
  options: AnyResultOptions<AttentionOptions>,
  extraOptionNames: readonly string[] = [],
): AttentionPlan {
  const { B, Hkv, S, E, Ev } = kv;
  // Shape-only stand-ins for planAttention: views on the storage's first rows (never read as dense).
  const kShape = [B, Hkv, S, E];
  const vShape = [B, Hkv, S, Ev];
  const kStub = new Tensor(kv.k.subarray(0, sizeOf(kShape)), kShape);
  const vStub = new Tensor(kv.v.subarray(0, sizeOf(vShape)), vShape);
  const plan = planAttention(fn, q, kStub, vStub, options, extraOptionNames);
  const left = kv.window === undefined ? plan.problem.left : Math.min(plan.problem.left, kv.window - 1);
  plan.problem = { ...plan.problem, k: kv.k, v: kv.v, kv: kv.layout, left };
  return plan;
}

/** Options of pagedAttention. */
export interface PagedAttentionOptions {
  /** Multiplies q·k; default 1/√E. */
  scale?: number;
  /** 'auto' (default), 'reference', 'flash' or 'wasm', as for scaledDotProductAttention. */
  kernel?: AttentionOptions['kernel'];
  /**
   * Default true: bottom-right alignment, query i at position S − L + i of the sequence's S cached keys
   * (its own key included when q's keys were appended first). false: every query sees every key.
   */
  causal?: CausalOption;
  /** Also return the weights [Hq, L, S]; the result is then { output, weights }. Default false. */
  needWeights?: boolean;
}

const PAGED_OPTIONS = ['scale', 'kernel', 'causal', 'needWeights'] as const;

/**
 * Attention of q [Hq, L, E] over everything sequence `seq` of a PagedKVCache holds for `layer`, read
 * straight from its blocks (no gather into a contiguous copy) → [Hq, L, Ev]. Equal to
 * scaledDotProductAttention over the gathered K/V [Hkv, S, ·] with causal: true (bottom-right). Query head
 * h uses key/value head ⌊h / (Hq/Hkv)⌋ (GQA).
 *
 * @example
 * const cache = new PagedKVCache({ numLayers: 1, numKvHeads: 2, headDim: 8, numBlocks: 64 });
 * const seq = cache.allocate();
 * cache.append(seq, 0, Tensor.randn([2, 5, 8], { seed: 1 }), Tensor.randn([2, 5, 8], { seed: 2 }));
 * const out = pagedAttention(Tensor.randn([4, 1, 8], { seed: 3 }), cache, seq, 0); // [4, 1, 8]
 */
export function pagedAttention(
  q: AttentionInput,
  cache: PagedKVCache,
  seq: number,
  layer: number,
  options?: PagedAttentionOptions & { needWeights?: false },
): Tensor;
export function pagedAttention(
  q: AttentionInput,
  cache: PagedKVCache,
  seq: number,
  layer: number,
  options: PagedAttentionOptions & { needWeights: true },
): { output: Tensor; weights: Tensor };
export function pagedAttention(
  q: AttentionInput,
  cache: PagedKVCache,
  seq: number,
  layer: number,
  options: PagedAttentionOptions = {},
): Tensor | { output: Tensor; weights: Tensor } {
  const fn = 'pagedAttention';
  checkOptionNames(fn, options, PAGED_OPTIONS);
  const { needWeights = false, causal = true, ...rest } = options;
  checkBoolean(fn, 'needWeights', needWeights);
  const stored = cache.stored(fn, seq, layer);
  const qt = toTensor(q, fn, 'q');
  const context = () =>
    `(q ${formatShape(qt.shape)}, cache numKvHeads=${stored.Hkv}, headDim=${stored.E}, valueDim=${stored.Ev})`;
  if (qt.rank !== 3)
    throw new RangeError(`${fn}: q must have rank 3 [Hq, L, E], got rank ${qt.rank} ${context()}`);
  const [Hq, L, E] = qt.shape;
  if (E !== stored.E)
    throw new RangeError(`${fn}: q has E=${E} but the cache's headDim is ${stored.E} ${context()}`);
  if (Hq % stored.Hkv !== 0) {
    throw new RangeError(
      `${fn}: q has Hq=${Hq} heads, which is not a multiple of the cache's numKvHeads=${stored.Hkv} ${context()}`,
    );
  }
  const plan = planStoredAttention(fn, qt.reshape([1, Hq, L, E]), stored, { ...rest, causal });
  const out = new Float32Array(Hq * L * stored.Ev);
  const weights = needWeights ? new Float32Array(Hq * L * stored.S) : undefined;
  runKernel(fn, plan, { out, weights });
  const output = new Tensor(out, [Hq, L, stored.Ev]);
  return weights ? { output, weights: new Tensor(weights, [Hq, L, stored.S]) } : output;
}
