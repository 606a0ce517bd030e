// scaledDotProductAttention and attentionWeights: softmax(q·kᵀ·scale + bias, masked) · v.
// One decision to know: a query row whose keys are all blocked gets weights 0 and output 0, never NaN
// and never the uniform average a −1e9 fill produces.

import { chooseKernel, fallbackFor } from '../kernels/registry.js';
import { type AttentionOutputs, forwardAll, KernelResourceError } from '../kernels/types.js';
import { sizeOf } from '../shape.js';
import { type DType, Tensor, type TensorLike } from '../tensor.js';
import {
  type AnyResultOptions,
  type AttentionInput,
  type AttentionOptions,
  type AttentionPlan,
  type HalfResultOptions,
  planAttention,
} from './plan.js';

/**
 * Scaled dot-product attention, softmax(q·kᵀ·scale + bias) · v with masks, causal alignment, sliding
 * windows and grouped-query heads.
 *
 * Shapes: q [..., Hq, L, E], k [..., Hkv, S, E], v [..., Hkv, S, Ev] with rank 2 [L,E], 3 [B,L,E] or
 * 4 [B,H,L,E]; returns [..., Hq, L, Ev]. Query head h uses key/value head ⌊h / (Hq/Hkv)⌋.
 *
 * @example
 * const q = Tensor.randn([1, 8, 16, 64], { seed: 1 });
 * const out = scaledDotProductAttention(q, q, q, { causal: true }); // [1, 8, 16, 64]
 */
export function scaledDotProductAttention(
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  options?: AttentionOptions,
): Tensor;
export function scaledDotProductAttention(
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  options: HalfResultOptions<AttentionOptions>,
): Tensor<'float16'>;
export function scaledDotProductAttention(
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  options: AnyResultOptions<AttentionOptions>,
): Tensor<DType>;
export function scaledDotProductAttention(
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  options: AnyResultOptions<AttentionOptions> = {},
): Tensor<DType> {
  const plan = planAttention('scaledDotProductAttention', q, k, v, options);
  const out = new Float32Array(sizeOf(plan.outShape));
  runKernel('scaledDotProductAttention', plan, { out });
  return result(out, plan);
}

/**
 * The attention probabilities softmax(q·kᵀ·scale + bias) with every restriction applied: [..., Hq, L, S].
 * Rows sum to 1, or are all 0 when every key is blocked. Takes the same options as
 * `scaledDotProductAttention`.
 */
export function attentionWeights(q: AttentionInput, k: AttentionInput, options?: AttentionOptions): Tensor;
export function attentionWeights(
  q: AttentionInput,
  k: AttentionInput,
  options: HalfResultOptions<AttentionOptions>,
): Tensor<'float16'>;
export function attentionWeights(
  q: AttentionInput,
  k: AttentionInput,
  options: AnyResultOptions<AttentionOptions>,
): Tensor<DType>;
export function attentionWeights(
  q: AttentionInput,
  k: AttentionInput,
  options: AnyResultOptions<AttentionOptions> = {},
): Tensor<DType> {
  const plan = planAttention('attentionWeights', q, k, undefined, options);
  const weights = new Float32Array(sizeOf(plan.weightsShape));
  runKernel('attentionWeights', plan, { weights });
  return result(weights, plan, plan.weightsShape);
}

/** Wraps a float32 result, rounded to float16 when the caller asked for it. */
export function result(data: Float32Array, plan: AttentionPlan, shape = plan.outShape): Tensor<DType> {
  const t = new Tensor(data, shape);
  return plan.dtype === 'float16' ? t.to('float16') : t;
}

/** Output and weights from one pass; `fn` names the public caller in errors. */
export function attendWithWeights(
  fn: string,
  q: TensorLike,
  k: TensorLike,
  v: TensorLike,
  options: AttentionOptions,
): { output: Tensor; weights: Tensor } {
  const plan = planAttention(fn, q, k, v, options);
  const out = new Float32Array(sizeOf(plan.outShape));
  const weights = new Float32Array(sizeOf(plan.weightsShape));
  runKernel(fn, plan, { out, weights });
  return { output: new Tensor(out, plan.outShape), weights: new Tensor(weights, plan.weightsShape) };
}

/** Runs a planned call on the kernel that serves it (widening float16 inputs for kernels that need float32). */
export function runKernel(fn: string, plan: AttentionPlan, outputs: AttentionOutputs): void {
  const kernel = chooseKernel(fn, plan.kernel, plan.problem, outputs);
  try {
    forwardAll(kernel, plan.problem, outputs, fallbackFor(plan.kernel, kernel, plan.problem, outputs));
  } catch (err) {
    if (err instanceof KernelResourceError) throw new KernelResourceError(`${fn}: ${err.message}`);
    throw err;
  }
}
