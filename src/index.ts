// qkv: the one public entry. Re-exports only; nothing reachable from here imports node:*.

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
export * as autograd from './autograd/index.js';
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
export {
  type DecodeSafetensorsOptions,
  decodeSafetensors,
  encodeSafetensors,
  type SafetensorsContents,
  SafetensorsError,
} from './io/safetensors.js';
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
export { BpeTokenizer, type BpeTrainOptions } from './text/bpe.js';
export { TOKENIZER_TYPES, tokenizerFromJSON } from './text/registry.js';
export {
  type SpecialToken,
  type Tokenizer,
  type TokenizerJSON,
  UnknownTokenError,
} from './text/tokenizer.js';
export { WordTokenizer, type WordTokenizerOptions } from './text/word.js';
export { type CheckpointInfo, loadCheckpoint, saveCheckpoint } from './train/checkpoint.js';
export {
  bestHead,
  type HeadScore,
  type HeadScoreOptions,
  type HeadScores,
  headScores,
  SCORE_NAMES,
  type ScoreName,
} from './train/heads.js';
export {
  type InductionTaskOptions,
  inductionScore,
  inductionSequence,
  inductionTask,
} from './train/induction.js';
export {
  type LanguageModelTaskOptions,
  languageModelTask,
  loadLanguageModel,
  type TextBits,
  type TextBitsOptions,
  textBits,
} from './train/lm.js';
export type { TrainPlatform, TrainWorkerHandle, TrainWorkerInit } from './train/parallel.js';
export { lineChartSvg, type PlotOptions, type PlotSeries } from './train/plot.js';
export {
  ARTICLE_SENTENCE,
  encodePronoun,
  evaluatePronoun,
  type PronounFamily,
  type PronounScore,
  type PronounSentence,
  pronounSentence,
  pronounTask,
} from './train/pronoun.js';
export {
  type Batch,
  type ScoredPosition,
  type SequenceTaskOptions,
  sequenceTask,
  type Task,
  type TaskDefaults,
  type TaskDisplay,
} from './train/tasks.js';
export {
  getTask,
  type StepInfo,
  TASK_NAMES,
  type TaskName,
  Trainer,
  type TrainerOptions,
} from './train/trainer.js';
export { type CheckpointStack, stackFromSafetensors } from './viz/checkpoint.js';
export { colorAt, type Rgb } from './viz/colormap.js';
export {
  articleScalingExample,
  formatBytes,
  type SoftmaxStats,
  saturationAt,
  scoreMatrixBytes,
  softmaxStats,
  tiledKernelBytes,
} from './viz/experiments.js';
export {
  cellAt,
  DARK_THEME,
  divergingColorAt,
  formatExact,
  formatTick,
  type HeatmapLayout,
  type HeatmapSpec,
  type HeatmapTheme,
  heatmapLayout,
  LIGHT_THEME,
} from './viz/layout.js';
export { encodePng, type RgbaImage, readPngSize, type ZlibDeflate } from './viz/png.js';
export { paintHeatmap, rasterizeHeatmap, renderHeatmapPng } from './viz/raster.js';
export { STEP_IDS, type StepId, type StepView, stepViews } from './viz/specs.js';
export {
  type AttentionStack,
  type SeededStackConfig,
  type StackLayer,
  seededStack,
  stackFromStateDict,
  stackStateDict,
} from './viz/stack.js';
export { renderHeatmapSvg, type SvgOptions } from './viz/svg.js';
export { tokenize } from './viz/tokens.js';
export { type HeadSteps, type StackTrace, type TraceOptions, traceStack } from './viz/trace.js';
