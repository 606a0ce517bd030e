// The attention op of the autograd: multi-head scaled dot-product attention over [B, L, H·E] activations,
// forward and backward by the registry's kernels (training: the WASM forward and the FlashAttention-2 style
// backward). One decision to know: the forward saves only its output and the per-row log-sum-exp, never the
// [L, S] weights, so training memory is linear in the sequence length.

import { type AttentionOptions, planAttention } from '../attention/plan.js';
import { runKernel } from '../attention/sdpa.js';
import { type FlexMods, resolveFlex } from '../flex/flex.js';
import {
  type HeadRotation,
  headsToPackedAccumulate,
  headsToPackedAccumulateParts,
  packedToHeads,
  packedToHeadsParts,
  swapMiddle,
  swapMiddleAccumulate,
} from '../kernels/matmul.js';
import { chooseBackward } from '../kernels/registry.js';
import {
  type AttentionGrads,
  type AttentionProblem,
  type BackwardProblem,
  backwardAll,
} from '../kernels/types.js';
import { checkRopeArgs, ropeTable } from '../position/rope.js';
import { Tensor } from '../tensor.js';
import { type Floats, floatsFor, floatsLike, needsGrad, opResult, recycle, type Var } from './var.js';

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

/** The heads an attention call runs on: q [B, Hq, L, E], k [B, Hkv, S, Ek], v [B, Hkv, S, Ev]. */
interface Heads extends Pick<AttentionProblem, 'B' | 'Hq' | 'Hkv' | 'L' | 'S' | 'E' | 'Ev'> {
  /** k's head width, KW / Hkv (planAttention refuses one other than E). */
  Ek: number;
  qh: Floats;
  kh: Floats;
  vh: Floats;
}

/**
 * Runs the kernels on split heads: the op's result [B, L, Hq·Ev] (heads merged) with `inputs` as its
 * parents, whose backward computes the heads' gradients [B, H, ·, ·] and hands them to `accumulate`.
 */
function attendHeads(
  inputs: Var[],
  h: Heads,
  sdpa: Omit<AttentionOpOptions, 'numHeads' | 'numKvHeads' | 'needWeights' | 'flex'>,
  flex: FlexMods | undefined,
  needWeights: boolean,
  accumulate: (grads: AttentionGrads) => void,
): { out: Var; weights?: Tensor } {
  const { B, Hq, Hkv, L, S, E, Ek, Ev, qh, kh, vh } = h;
  const f32 = (x: Floats) => (x instanceof Float32Array ? x : Float32Array.from(x));
  const plan = planAttention(
    FN,
    new Tensor(f32(qh), [B, Hq, L, E], 'float32'),
    new Tensor(f32(kh), [B, Hkv, S, Ek], 'float32'),
    new Tensor(f32(vh), [B, Hkv, S, Ev], 'float32'),
    sdpa,
  );
  // The problem on the op's own arrays. Float32 Vars (training) ask for float32 precision, so the WASM
  // kernel serves the forward; float64 Vars (gradient checks) ask for float64, so a float64 kernel does.
  const precision = qh instanceof Float64Array ? 'float64' : 'float32';
  const problem: BackwardProblem = { ...plan.problem, q: qh, k: kh, v: vh, precision };
  if (flex) problem.flex = resolveFlex(FN, flex, B, Hq, L, S);
  const outH = floatsLike(qh, B * Hq * L * Ev); // [B, Hq, L, Ev]
  // The log-sum-exp only serves the backward: none under noGrad (or for inputs that need no gradient).
  const lse = needsGrad(inputs) ? new Float64Array(B * Hq * L) : undefined;
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

  const merged = swapMiddle(outH, B, Hq, L, Ev, floatsFor(outH, outH.length));
  const backwardFn = () => {
    const dOut = swapMiddle(result.grad!, B, L, Hq, Ev, floatsFor(outH, outH.length)); // [B, Hq, L, Ev]
    const grads: AttentionGrads = {
      dq: floatsLike(qh, qh.length),
      dk: floatsLike(kh, kh.length),
      dv: floatsLike(vh, vh.length),
    };
    const inputs = { dOut, out: outH, lse: lse! }; // opResult runs this only when a gradient is needed
    backwardAll(chooseBackward(FN, 'auto', problem, inputs), problem, inputs, grads);
    accumulate(grads);
    recycle(dOut, grads.dq, grads.dk, grads.dv); // this closure's own: nothing holds them now
  };
  // The split heads and the head-major output stay for the backward; `release` frees them with the result.
  const result = opResult(merged, [B, L, Hq * Ev], inputs, backwardFn, [qh, kh, vh, outH]);
  return { out: result, weights: weights && new Tensor(weights, [B, Hq, L, S]) };
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
  if (k.shape[0] !== B || v.shape[0] !== B || v.shape[1] !== S) {
    throw new RangeError(`${FN}: k and v must be [B, S, ·] with q's batch B and one length S (${shapes})`);
  }
  if (!(Number.isInteger(Hq) && Hq >= 1 && Number.isInteger(Hkv) && Hkv >= 1)) {
    throw new RangeError(`${FN}: numHeads and numKvHeads must be positive integers, got ${Hq} and ${Hkv}`);
  }
  if (QW % Hq !== 0 || KW % Hkv !== 0 || VW % Hkv !== 0) {
    throw new RangeError(`${FN}: widths must split into ${Hq} query and ${Hkv} key/value heads (${shapes})`);
  }
  const E = QW / Hq;
  const Ek = KW / Hkv;
  const Ev = VW / Hkv;
  // Split heads: [B, L, H, E] → [B, H, L, E].
  const heads: Heads = {
    B,
    Hq,
    Hkv,
    L,
    S,
    E,
    Ek,
    Ev,
    qh: swapMiddle(q.data, B, L, Hq, E, floatsFor(q.data, q.size)),
    kh: swapMiddle(k.data, B, S, Hkv, Ek, floatsFor(k.data, k.size)),
    vh: swapMiddle(v.data, B, S, Hkv, Ev, floatsFor(v.data, v.size)),
  };
  return attendHeads([q, k, v], heads, sdpa, flex, needWeights, (grads) => {
    // Merge heads back: [B, H, L, E] → [B, L, H, E], added straight into the grads (no merged copy).
    accumulateMerged(q, grads.dq, B, Hq, L, E);
    accumulateMerged(k, grads.dk, B, Hkv, S, Ek);
    accumulateMerged(v, grads.dv, B, Hkv, S, Ev);
  });
}

/** Options of attentionPacked: the attention op's, plus RoPE on q and k. */
export interface PackedAttentionOptions extends Omit<AttentionOpOptions, 'numKvHeads'> {
  /** Rotate q and k (rotate-half RoPE) at positions offset … offset + L − 1, as the `rope` op does. */
  rope?: { base: number; offset: number };
}

/**
 * Self-attention from packed projections qkv [B, L, 3·H·E] (each row q | k | v, as PyTorch's in_proj
 * produces them) → out [B, L, H·E]: the same numbers, forward and backward, as splitLast into thirds, `rope`
 * on q and k (with options.rope), then `attention` — bit for bit — but each third goes from the packed
 * rows to split heads in one pass (rotated on the way), and the backward adds the heads' gradients
 * (turned back) straight into qkv's grad: no per-third copies, rotated copies or merged gradients.
 */
export function attentionPacked(qkv: Var, options: PackedAttentionOptions): { out: Var; weights?: Tensor } {
  const { numHeads: H, needWeights = false, flex, rope, ...sdpa } = options;
  const p = splitPacked(FN, qkv.data, qkv.shape, H, rope, (n) => floatsFor(qkv.data, n));
  const { B, L, E, rotate } = p;
  const heads: Heads = { B, Hq: H, Hkv: H, L, S: L, E, Ek: E, Ev: E, qh: p.q, kh: p.k, vh: p.v };
  return attendHeads([qkv], heads, sdpa, flex, needWeights, (grads) => {
    if (!qkv.requiresGrad) return;
    const dst = qkv.gradBuffer();
    if (!rotate) {
      headsToPackedAccumulateParts([grads.dq, grads.dk, grads.dv], B, L, 3, H, E, dst);
      return;
    }
    headsToPackedAccumulate(grads.dq, B, L, 3, 0, H, E, dst, rotate);
    headsToPackedAccumulate(grads.dk, B, L, 3, 1, H, E, dst, rotate);
    headsToPackedAccumulate(grads.dv, B, L, 3, 2, H, E, dst);
  });
}

/**
 * Packed projections [B, L, 3·H·E] (q | k | v per row) → q, k, v split into heads [B, H, L, E], q and k
 * turned by `rope` when given; checks the shape and the rope arguments, naming `fn`. The one split of
 * both attentionPacked ops (this one and the Tensor ops', model/ops-tensor.ts).
 */
export function splitPacked<T extends Float32Array | Float64Array>(
  fn: string,
  data: T,
  shape: readonly number[],
  H: number,
  rope: { base: number; offset: number } | undefined,
  alloc?: (length: number) => T,
): { B: number; L: number; E: number; rotate: HeadRotation | undefined; q: T; k: T; v: T } {
  const [B, L, W3] = shape;
  if (shape.length !== 3 || !(Number.isInteger(H) && H >= 1) || W3 % (3 * H) !== 0) {
    throw new RangeError(
      `${fn}: packed qkv [${shape}] must be [B, L, 3·H·E] for ${H} heads (q | k | v per row)`,
    );
  }
  const E = W3 / (3 * H);
  let rotate: HeadRotation | undefined;
  if (rope) {
    checkRopeArgs(fn, [B, L, H * E], H, E, rope.offset, rope.base);
    rotate = ropeTable(L, E, rope.offset, rope.base);
  }
  if (!rotate) {
    const n = B * L * H * E;
    const make = (): T =>
      alloc ? alloc(n) : ((data instanceof Float64Array ? new Float64Array(n) : new Float32Array(n)) as T);
    const [q, k, v] = [make(), make(), make()];
    packedToHeadsParts(data, B, L, 3, H, E, [q, k, v]);
    return { B, L, E, rotate, q, k, v };
  }
  return {
    B,
    L,
    E,
    rotate,
    q: packedToHeads(data, B, L, 3, 0, H, E, rotate, alloc?.(B * L * H * E)),
    k: packedToHeads(data, B, L, 3, 1, H, E, rotate, alloc?.(B * L * H * E)),
    v: packedToHeads(data, B, L, 3, 2, H, E, undefined, alloc?.(B * L * H * E)),
  };
}
