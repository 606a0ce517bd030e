// The attention op of the autograd: multi-head scaled dot-product attention over [B, L, H·E] activations,
// forward and backward by the registry's kernels (training: the WASM forward and the FlashAttention-2 style
// backward). One decision to know: the forward saves only its output and the per-row log-sum-exp, never the
// [L, S] weights, so training memory is linear in the sequence length.

import { type AttentionOptions, planAttention } from '../attention/plan.js';
import { runKernel } from '../attention/sdpa.js';
import { type FlexMods, resolveFlex } from '../flex/flex.js';
import { swapMiddle, swapMiddleAccumulate } from '../kernels/matmul.js';
import { chooseBackward } from '../kernels/registry.js';
import {
  type AttentionGrads,
  type AttentionProblem,
  type BackwardProblem,
  backwardAll,
} from '../kernels/types.js';
import { Tensor } from '../tensor.js';
import { type Floats, floatsLike, needsGrad, opResult, type Var } from './var.js';

/** Options of the attention op: every scaledDotProductAttention option, plus the head layout. */
export interface AttentionOpOptions extends Omit<AttentionOptions, 'kernel'> {
  /** Hq: query heads; q's last axis is Hq·E. */
  numHeads: number;
  /** Hkv: key/value heads (GQA); default numHeads. */
  numKvHeads?: number;
  /** Also return the attention weights [B, Hq, L, S] (for plots; no gradient flows through them). */
  needWeights?: boolean;
  /**
   * Flex attention's mods (as flexAttention takes them), on top of the other options: gradients flow
   * through built-in score mods exactly and through a JS score mod by central differences.
   */
  flex?: FlexMods;
}

const FN = 'attention';

/** v.grad += the head-split gradient g [B, H, T, W] merged back to [B, T, H·W] (nothing if v needs none). */
function accumulateMerged(v: Var, g: Floats, B: number, H: number, T: number, W: number): void {
  if (v.requiresGrad) swapMiddleAccumulate(g, B, H, T, W, v.gradBuffer());
}

/**
 * q [B, L, Hq·E], k [B, S, Hkv·E], v [B, S, Hkv·Ev] → out [B, L, Hq·Ev] (heads concatenated, as
 * MultiHeadAttention before its output projection), plus the weights when asked for.
 */
export function attention(
  q: Var,
  k: Var,
  v: Var,
  options: AttentionOpOptions,
): { out: Var; weights?: Tensor } {
  const { numHeads: Hq, numKvHeads: Hkv = options.numHeads, needWeights = false, flex, ...sdpa } = options;
  const [B, L, QW] = q.shape;
  const [, S, KW] = k.shape;
  const VW = v.shape[2];
  const shapes = `q [${q.shape}], k [${k.shape}], v [${v.shape}]`;
  if (q.shape.length !== 3 || k.shape.length !== 3 || v.shape.length !== 3) {
    throw new RangeError(`${FN}: q, k and v must be [B, L, H·E] (${shapes})`);
  }
  if (!(Hq >= 1 && Hkv >= 1) || QW % Hq !== 0 || KW % Hkv !== 0 || VW % Hkv !== 0) {
    throw new RangeError(`${FN}: widths must split into ${Hq} query and ${Hkv} key/value heads (${shapes})`);
  }
  const E = QW / Hq;
  const Ev = VW / Hkv;
  // Split heads: [B, L, H, E] → [B, H, L, E].
  const qh = swapMiddle(q.data, B, L, Hq, E);
  const kh = swapMiddle(k.data, B, S, Hkv, KW / Hkv);
  const vh = swapMiddle(v.data, B, S, Hkv, Ev);
  const f32 = (x: Floats) => (x instanceof Float32Array ? x : Float32Array.from(x));
  const plan = planAttention(
    FN,
    new Tensor(f32(qh), [B, Hq, L, E], 'float32'),
    new Tensor(f32(kh), [B, Hkv, S, KW / Hkv], 'float32'),
    new Tensor(f32(vh), [B, Hkv, S, Ev], 'float32'),
    sdpa,
  );
  // The problem on the op's own arrays. Float32 Vars (training) ask for float32 precision, so the WASM
  // kernel serves the forward; float64 Vars (gradient checks) ask for float64, so a float64 kernel does.
  const precision = q.data instanceof Float64Array ? 'float64' : 'float32';
  const problem: BackwardProblem = { ...plan.problem, q: qh, k: kh, v: vh, precision };
  if (flex) problem.flex = resolveFlex(FN, flex, B, Hq, L, S);
  const outH = floatsLike(q.data, B * Hq * L * Ev); // [B, Hq, L, Ev]
  // The log-sum-exp only serves the backward: none under noGrad (or for inputs that need no gradient).
  const lse = needsGrad([q, k, v]) ? new Float64Array(B * Hq * L) : undefined;
  const weights = needWeights ? new Float32Array(B * Hq * L * S) : undefined;
  // Kernels only index their arrays, so float64 ones serve where the contract says Float32Array.
  runKernel(
    FN,
    { ...plan, problem: problem as unknown as AttentionProblem },
    {
      out: outH as Float32Array,
      lse,
      weights,
    },
  );

  const result = opResult(swapMiddle(outH, B, Hq, L, Ev), [B, L, Hq * Ev], [q, k, v], () => {
    const dOut = swapMiddle(result.grad!, B, L, Hq, Ev); // [B, Hq, L, Ev]
    const grads: AttentionGrads = {
      dq: floatsLike(q.data, q.size),
      dk: floatsLike(k.data, k.size),
      dv: floatsLike(v.data, v.size),
    };
    const inputs = { dOut, out: outH, lse: lse! }; // opResult runs this only when a gradient is needed
    backwardAll(chooseBackward(FN, 'auto', problem, inputs), problem, inputs, grads);
    // Merge heads back: [B, H, L, E] → [B, L, H, E], added straight into the grads (no merged copy).
    accumulateMerged(q, grads.dq, B, Hq, L, E);
    accumulateMerged(k, grads.dk, B, Hkv, S, KW / Hkv);
    accumulateMerged(v, grads.dv, B, Hkv, S, Ev);
  });
  return { out: result, weights: weights && new Tensor(weights, [B, Hq, L, S]) };
}
