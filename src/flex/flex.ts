// flexAttention: scaled dot-product attention whose visibility and scores are two small functions
// (PyTorch's FlexAttention: score_mod, mask_mod, block_mask). One decision to know: it plans through the
// same planAttention as scaledDotProductAttention (same shapes, GQA, float16 inputs, errors) and adds a
// `flex` part to the kernel problem; built-in mods reach the WASM kernel as data, other functions run on
// the JS tiled kernel with the same tile skipping.

import { type AttentionInput, type AttentionPlan, planAttention } from '../attention/plan.js';
import { result, runKernel } from '../attention/sdpa.js';
import type { FlexSpec, MaskMod, ScoreMod } from '../kernels/flex.js';
import type { KernelName } from '../kernels/registry.js';
import { checkOptionNames, formatShape, formatValue, sizeOf } from '../shape.js';
import { Tensor } from '../tensor.js';
import { BlockMask, createBlockMask } from './block-mask.js';
import { maskInfoOf, modName, scoreInfoOf } from './mods.js';

/** Options of flexAttention. */
export interface FlexAttentionOptions {
  /** Rewrites each scaled score: (score, b, h, qIdx, kvIdx) => number; −Infinity blocks the key. */
  scoreMod?: ScoreMod;
  /** Whether query qIdx of (b, h) sees key kvIdx. With a blockMask, the mask's own mod (pass one or the same). */
  maskMod?: MaskMod;
  /**
   * Tiles to skip (empty) and to run without the mask mod (full), from createBlockMask. Without one, a
   * built-in maskMod is reduced to 128 × 128 tiles here (cheap); another function is called for every
   * key (no tile is skipped).
   */
  blockMask?: BlockMask;
  /** Multiplies q·k before the score mod; default 1/√E. */
  scale?: number;
  /** Allow Hq ≠ Hkv (grouped-query attention: query head h uses key/value head ⌊h / (Hq/Hkv)⌋). */
  enableGqa?: boolean;
  /** Also return the log-sum-exp of each query row's scores (natural log; −Infinity for a blocked row). */
  returnLse?: boolean;
  /** Which kernel: 'auto' (default; WASM for built-in mods, else the JS tiled kernel), 'flash', 'reference', 'wasm'. */
  kernel?: KernelName;
}

const OPTIONS = ['scoreMod', 'maskMod', 'blockMask', 'scale', 'enableGqa', 'returnLse', 'kernel'] as const;

/** The flex options a planned call carries into its problem (shared with the autograd op). */
export type FlexMods = Pick<FlexAttentionOptions, 'scoreMod' | 'maskMod' | 'blockMask'>;

/**
 * Attention with a score mod, a mask mod and a block mask: for each query, softmax over the visible keys
 * of scoreMod(q·k·scale), times v. A query that sees no key gets zeros (and lse −Infinity), as everywhere
 * in qkv. Shapes as scaledDotProductAttention: q [B, Hq, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev]; rank 3
 * is [B, L, E] (one head) and rank 2 [L, E].
 *
 * @example
 * const q = Tensor.randn([1, 8, 1024, 64], { seed: 1 });
 * const docs = Int32Array.from({ length: 1024 }, (_, i) => i >> 8); // 4 documents of 256 tokens
 * const out = flexAttention(q, q, q, { maskMod: andMasks(causalMask, documentMask(docs)) });
 */
export function flexAttention(
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  options?: FlexAttentionOptions & { returnLse?: false },
): Tensor;
export function flexAttention(
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  options: FlexAttentionOptions & { returnLse: true },
): { output: Tensor; lse: Tensor };
export function flexAttention(
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput,
  options: FlexAttentionOptions = {},
): Tensor | { output: Tensor; lse: Tensor } {
  const FN = 'flexAttention';
  const plan = planFlex(FN, q, k, v, options);
  const out = new Float32Array(sizeOf(plan.outShape));
  const lse = options.returnLse ? new Float32Array(sizeOf(plan.outShape.slice(0, -1))) : undefined;
  runKernel(FN, plan, { out, lse });
  const output = result(out, plan) as Tensor;
  return lse ? { output, lse: new Tensor(lse, plan.outShape.slice(0, -1)) } : output;
}

/**
 * The attention probabilities of a flex call, [..., Hq, L, S] (rows sum to 1, or are all 0 when every key
 * is blocked): what flexAttention multiplies v by. For looking at a mod; memory is L × S.
 */
export function flexAttentionWeights(
  q: AttentionInput,
  k: AttentionInput,
  options: Omit<FlexAttentionOptions, 'returnLse'> = {},
): Tensor {
  const FN = 'flexAttentionWeights';
  const plan = planFlex(FN, q, k, undefined, options);
  const weights = new Float32Array(sizeOf(plan.weightsShape));
  runKernel(FN, plan, { weights });
  return result(weights, plan, plan.weightsShape) as Tensor;
}

/** Checks a flex call and plans it: the attention plan with its problem's `flex` part. */
export function planFlex(
  fn: string,
  q: AttentionInput,
  k: AttentionInput,
  v: AttentionInput | undefined,
  options: FlexAttentionOptions,
): AttentionPlan {
  checkOptionNames(fn, options, OPTIONS);
  const { scale, kernel, enableGqa = false } = options;
  if (typeof enableGqa !== 'boolean') {
    throw new TypeError(`${fn}: enableGqa must be true or false, got ${formatValue(enableGqa)}`);
  }
  if (options.returnLse !== undefined && typeof options.returnLse !== 'boolean') {
    throw new TypeError(`${fn}: returnLse must be true or false, got ${formatValue(options.returnLse)}`);
  }
  const plan = planAttention(fn, q, k, v, {
    ...(scale === undefined ? {} : { scale }),
    ...(kernel ? { kernel } : {}),
  });
  const p = plan.problem;
  if (p.Hq !== p.Hkv && !enableGqa) {
    throw new RangeError(
      `${fn}: query has Hq=${p.Hq} heads but key/value have Hkv=${p.Hkv}; pass enableGqa: true for grouped-query attention (output ${formatShape(plan.outShape)})`,
    );
  }
  // Flex positions are indices (top-left): no band from causal alignment.
  p.shift = 0;
  const { scoreMod, maskMod, blockMask } = options;
  p.flex = resolveFlex(fn, { scoreMod, maskMod, blockMask }, p.B, p.Hq, p.L, p.S);
  return plan;
}

/** The kernels' FlexSpec for mods checked against a call of B × Hq heads, L queries and S keys. */
export function resolveFlex(
  fn: string,
  mods: FlexMods,
  B: number,
  Hq: number,
  L: number,
  S: number,
): FlexSpec {
  if (mods === null || typeof mods !== 'object') {
    throw new TypeError(
      `${fn}: flex must be an object { maskMod?, scoreMod?, blockMask? }, got ${formatValue(mods)}`,
    );
  }
  checkOptionNames(fn, mods, ['scoreMod', 'maskMod', 'blockMask']);
  const { scoreMod, blockMask } = mods;
  let { maskMod } = mods;
  if (scoreMod !== undefined && typeof scoreMod !== 'function') {
    throw new TypeError(
      `${fn}: scoreMod must be a function (score, b, h, q, kv) => number, got ${formatValue(scoreMod)}`,
    );
  }
  if (maskMod !== undefined && typeof maskMod !== 'function') {
    throw new TypeError(
      `${fn}: maskMod must be a function (b, h, q, kv) => boolean, got ${formatValue(maskMod)}`,
    );
  }
  if (blockMask !== undefined && !(blockMask instanceof BlockMask)) {
    throw new TypeError(`${fn}: blockMask must come from createBlockMask, got ${formatValue(blockMask)}`);
  }
  if (blockMask && maskMod && maskMod !== blockMask.maskMod) {
    throw new TypeError(
      `${fn}: maskMod ${modName(maskMod)} is not the mod blockMask was built from (${modName(blockMask.maskMod)}); pass one of them`,
    );
  }
  maskMod ??= blockMask?.maskMod;
  const want = `[B=${B}, H=${Hq}, L=${L}, S=${S}]`;
  if (blockMask) {
    const okB = blockMask.B === 1 || blockMask.B === B;
    const okH = blockMask.H === 1 || blockMask.H === Hq;
    if (!okB || !okH || blockMask.L !== L || blockMask.S !== S) {
      throw new RangeError(
        `${fn}: blockMask was built for ${formatShape(blockMask.shape)} but this call's scores are ${want} (B and H may be 1)`,
      );
    }
  }
  const maskInfo = maskMod && maskInfoOf(maskMod);
  if (maskInfo && Math.max(L, S) > maskInfo.maxIndex) {
    throw new RangeError(
      `${fn}: maskMod ${maskInfo.name} covers ${maskInfo.maxIndex} positions, but this call ${want} needs ${Math.max(L, S)}`,
    );
  }
  const scoreInfo = scoreMod && scoreInfoOf(scoreMod);
  if (scoreInfo && scoreInfo.heads > 0 && scoreInfo.heads !== Hq) {
    throw new RangeError(
      `${fn}: scoreMod ${scoreInfo.name} was made for ${scoreInfo.heads} heads, but this call has Hq=${Hq} ${want}`,
    );
  }
  // A built-in mask mod without a block mask is reduced to tiles here: O(tiles), and it lets every
  // kernel skip what the mod blocks.
  const blocks = blockMask ?? (maskInfo ? createBlockMask(maskMod!, 1, 1, L, S) : undefined);
  return {
    mask: maskMod,
    score: scoreMod,
    maskProgram: maskInfo ? maskInfo.program : undefined,
    scoreProgram: scoreInfo ? scoreInfo.program : undefined,
    blocks: blocks?.toKernel(),
    maskName: maskMod ? modName(maskMod) : 'none',
    scoreName: scoreMod ? modName(scoreMod) : 'none',
  };
}
