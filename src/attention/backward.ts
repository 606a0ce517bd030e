// attentionBackward: the gradients of scaledDotProductAttention with respect to q, k, v (and the bias).
// One decision to know: it validates through the same planAttention as the forward (same errors, same
// options), runs the forward once for the output and log-sum-exp, then the chosen kernel's backward (the
// registry's chain: 'auto' takes the flash-style one; kernel: 'reference' recomputes everything row by row
// from q and k, needing no forward).

import { backwardNeedsForward, chooseBackward } from '../kernels/registry.js';
import {
  type AttentionGrads,
  type AttentionProblem,
  type BackwardInputs,
  backwardAll,
  float32Problem,
} from '../kernels/types.js';
import { formatShape, sizeOf } from '../shape.js';
import { Tensor, type TensorLike, toTensor } from '../tensor.js';
import { type AttentionInput, type AttentionOptions, type AttentionPlan, planAttention } from './plan.js';
import { runKernel } from './sdpa.js';

/**
 * Options of attentionBackward: those of scaledDotProductAttention. `kernel: 'reference'` runs the
 * reference backward (row by row from q and k alone, the spec); any other kernel computes the forward's
 * output and log-sum-exp with that kernel and runs the FlashAttention-2 backward (O(tile) memory).
 */
export type AttentionBackwardOptions = AttentionOptions;

/** Gradients of a scalar loss with respect to each input, shaped as the inputs. */
export interface AttentionGradients {
  /** Shaped as q. */
  dq: Tensor;
  /** Shaped as k; with GQA, summed over the query heads that share each key/value head. */
  dk: Tensor;
  /** Shaped as v; summed likewise. */
  dv: Tensor;
  /** Shaped as the bias (summed over the axes it was broadcast along); present when a bias was given. */
  dbias?: Tensor;
}

const FN = 'attentionBackward';

/**
 * Backward pass of scaledDotProductAttention: given dOut = ∂loss/∂output, returns ∂loss/∂q, ∂k, ∂v (and
 * ∂bias). Takes every option of the forward; gradients are float32 whatever the inputs' dtype. A fully
 * blocked query row contributes zero gradients.
 *
 * @example
 * const q = Tensor.randn([1, 4, 8, 16], { seed: 1 });
 * const k = Tensor.randn([1, 2, 8, 16], { seed: 2 });                // GQA: 2 query heads per kv head
 * const dOut = Tensor.randn([1, 4, 8, 16], { seed: 3 });
 * const { dq, dk, dv } = attentionBackward(q, k, k, dOut, { causal: true }); // [1,4,8,16], [1,2,8,16] ×2
 */
export function attentionBackward(
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  dOut: TensorLike,
  options: AttentionBackwardOptions = {},
): AttentionGradients {
  const { plan, problem, inputs, grads, shapes } = planBackward(FN, q, k, v, dOut, options);
  const [qShape, kShape, vShape, biasShape] = shapes;
  if (backwardNeedsForward(plan.kernel)) {
    // The forward's output and log-sum-exp (float64: exp(s − lse) with a float32 lse is off by ~1% once
    // |s| ~ 1e5), for the backward passes that recompute probabilities from them.
    inputs.out = new Float32Array(sizeOf(plan.outShape));
    inputs.lse = new Float64Array(problem.B * problem.Hq * problem.L);
    runKernel(
      FN,
      { ...plan, problem, dtype: 'float32' },
      { out: inputs.out as Float32Array, lse: inputs.lse },
    );
  }
  backwardAll(chooseBackward(FN, plan.kernel, problem, inputs), problem, inputs, grads);
  return {
    dq: new Tensor(grads.dq as Float32Array, qShape),
    dk: new Tensor(grads.dk as Float32Array, kShape),
    dv: new Tensor(grads.dv as Float32Array, vShape),
    ...(biasShape && grads.dbias ? { dbias: new Tensor(grads.dbias as Float32Array, biasShape) } : {}),
  };
}

/**
 * attentionBackward's checks and buffers, shared with its async twin (src/runtime.ts), so both give the
 * same errors for the same arguments.
 */
export function planBackward(
  fn: string,
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  dOut: TensorLike,
  options: AttentionBackwardOptions,
): {
  plan: AttentionPlan;
  problem: AttentionProblem;
  inputs: BackwardInputs;
  grads: AttentionGrads;
  shapes: [readonly number[], readonly number[], readonly number[], readonly number[] | undefined];
} {
  const plan = planAttention(fn, q, k, v, options);
  const shapeOf = (x: AttentionInput, arg: string) =>
    x instanceof Tensor ? x.shape : toTensor(x, fn, arg).shape;
  const [qShape, kShape, vShape] = [shapeOf(q, 'query'), shapeOf(k, 'key'), shapeOf(v, 'value')];
  const g = toTensor(dOut, fn, 'dOut');
  if (g.shape.length !== plan.outShape.length || g.shape.some((d, i) => d !== plan.outShape[i])) {
    throw new RangeError(
      `${fn}: dOut has shape ${formatShape(g.shape)} but the output has shape ${formatShape(plan.outShape)} ` +
        `(query ${formatShape(qShape)}, key ${formatShape(kShape)}, value ${formatShape(vShape)})`,
    );
  }
  const biasT = options.bias === undefined ? undefined : toTensor(options.bias, fn, 'bias');
  // The exact backward, as attentionBackward: float32 inputs, scores and log-sum-exp in float64.
  const problem = { ...float32Problem(plan.problem), precision: 'float64' as const };
  const grads: AttentionGrads = {
    dq: new Float32Array(sizeOf(qShape)),
    dk: new Float32Array(sizeOf(kShape)),
    dv: new Float32Array(sizeOf(vShape)),
    dbias: biasT ? new Float32Array(biasT.size) : undefined,
  };
  return { plan, problem, inputs: { dOut: g.data }, grads, shapes: [qShape, kShape, vShape, biasT?.shape] };
}
