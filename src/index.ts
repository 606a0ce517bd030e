// qkv: the one public entry. Re-exports only; nothing reachable from here imports node:*.

export {
  type AsyncAttentionOptions,
  scaledDotProductAttentionAsync,
  terminateWorkers,
} from './attention/async.js';
export {
  MultiHeadAttention,
  type MultiHeadAttentionOptions,
  type MultiHeadForwardOptions,
  type MultiHeadForwardResult,
} from './attention/multihead.js';
export type { AttentionInput, AttentionOptions, CausalOption } from './attention/plan.js';
export { attentionWeights, scaledDotProductAttention } from './attention/sdpa.js';
export {
  SelfAttention,
  type SelfAttentionOptions,
  type SelfAttentionResult,
} from './attention/self-attention.js';
export { fromHalfBits, toHalfBits } from './float16.js';
export { type KernelName, kernelSupport } from './kernels/registry.js';
export { alibiBias, alibiSlopes } from './position/alibi.js';
export { applyRope, type RopeOptions } from './position/rope.js';
export { sinusoidalPositionalEncoding } from './position/sinusoidal.js';
export { Generator, getDefaultGenerator, manualSeed, type RandomOptions } from './random.js';
export { formatShape } from './shape.js';
export { type DataOf, type DType, type NestedArray, Tensor, type TensorLike } from './tensor.js';
