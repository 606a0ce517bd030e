// Flex attention's public names (re-exported by the package's entries).
export { BlockMask, type BlockMaskOptions, createBlockMask } from './block-mask.js';
export {
  type CompiledMask,
  type CompiledScore,
  type CompileOptions,
  compileMask,
  compileScore,
  ModEvaluationError,
  ModExpressionError,
} from './expr.js';
export { type FlexAttentionOptions, flexAttention, flexAttentionWeights } from './flex.js';
export {
  alibiScore,
  andMasks,
  causalMask,
  documentMask,
  type MaskMod,
  noopMask,
  orMasks,
  prefixLmMask,
  relativeBiasScore,
  type ScoreMod,
  slidingWindowMask,
  softcapScore,
} from './mods.js';
