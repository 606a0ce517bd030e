// qkv: the main entry, what a newcomer needs: Tensor, scaledDotProductAttention (+ async, backward,
// paged), the layers (MultiHeadAttention, SelfAttention, TinyTransformer), positions, flexAttention, the
// KV caches and sampling for generation, kernel support and the thread runtime. The specialist surfaces
// are subpath entries (docs/api.md, "Entry points"): qkv/nn (autograd, training, tasks, checkpoints,
// tokenizers), qkv/viz (heatmaps, traces, PNG/SVG, plots), qkv/io (safetensors), qkv/onnx (export).
// Every public name lives in exactly one entry. Re-exports only; nothing reachable from here imports node:*.

export {
  type AsyncAttentionOptions,
  type AsyncBackwardOptions,
  attentionBackwardAsync,
  defaultRuntime,
  scaledDotProductAttentionAsync,
  terminateWorkers,
} from './attention/async.js';
export {
  type AttentionBackwardOptions,
  type AttentionGradients,
  attentionBackward,
} from './attention/backward.js';
export {
  type MultiHeadAsyncOptions,
  MultiHeadAttention,
  type MultiHeadAttentionOptions,
  type MultiHeadForwardOptions,
  type MultiHeadForwardResult,
} from './attention/multihead.js';
export { type PagedAttentionOptions, pagedAttention } from './attention/paged.js';
export type { AttentionInput, AttentionOptions, CausalOption } from './attention/plan.js';
export { attentionWeights, scaledDotProductAttention } from './attention/sdpa.js';
export {
  SelfAttention,
  type SelfAttentionOptions,
  type SelfAttentionResult,
} from './attention/self-attention.js';
export { KVCache, type KVCacheOptions, type KVCacheUpdate } from './cache/kv-cache.js';
export { PagedKVCache, type PagedKVCacheOptions } from './cache/paged.js';
export {
  alibiScore,
  andMasks,
  BlockMask,
  type BlockMaskOptions,
  type CompiledMask,
  type CompiledScore,
  type CompileOptions,
  causalMask,
  compileMask,
  compileScore,
  createBlockMask,
  documentMask,
  type FlexAttentionOptions,
  flexAttention,
  flexAttentionWeights,
  type MaskMod,
  ModEvaluationError,
  ModExpressionError,
  noopMask,
  orMasks,
  prefixLmMask,
  relativeBiasScore,
  type ScoreMod,
  slidingWindowMask,
  softcapScore,
} from './flex/index.js';
export { fromHalfBits, toHalfBits } from './float16.js';
export { type KernelName, kernelSupport } from './kernels/registry.js';
export {
  argmax,
  type SamplingOptions,
  sampleToken,
  type TokenDistribution,
  tokenDistribution,
} from './model/sampling.js';
export {
  DEFAULT_ROPE_BASE,
  type ForwardOptions,
  type GenerateOptions,
  POSITION_KINDS,
  parseTransformerConfig,
  TinyTransformer,
  type TransformerConfig,
} from './model/transformer.js';
export { alibiBias, alibiSlopes } from './position/alibi.js';
export { applyRope, type RopeOptions } from './position/rope.js';
export { sinusoidalPositionalEncoding } from './position/sinusoidal.js';
export { Generator, getDefaultGenerator, manualSeed, type RandomOptions } from './random.js';
export {
  type AttentionBackwardAsync,
  createRuntime,
  type Runtime,
  type RuntimeOptions,
  type ScaledDotProductAttentionAsync,
  type ThreadPlatform,
  type ThreadWorker,
} from './runtime.js';
export { formatShape } from './shape.js';
export { type DataOf, type DType, type NestedArray, Tensor, type TensorLike } from './tensor.js';
