/**
 * A small reverse-mode autograd: `Var` (a tensor that records the ops on it), the ops of a transformer
 * (linear, layerNorm, gelu, attention, crossEntropy, …), `backward`, and the AdamW and Muon optimisers. Its names
 * are re-exported as one namespace (`import { autograd } from 'qkv/nn'`), so generic op names (add, scale,
 * linear) do not crowd the library's top level.
 *
 * @packageDocumentation
 */

export { type AttentionOpOptions, attention } from './attention.js';
export {
  add,
  crossEntropy,
  dropout,
  embedding,
  gelu,
  layerNorm,
  linear,
  rope,
  scale,
  splitLast,
} from './ops.js';
export {
  AdamW,
  type AdamWOptions,
  clipGradNorm,
  Muon,
  type MuonJob,
  type MuonMatrix,
  type MuonOptions,
  type Orthogonaliser,
  orthogonalise,
  warmupCosine,
} from './optim.js';
export {
  backward,
  constant,
  type Floats,
  floatsFor,
  floatsLike,
  isGradEnabled,
  needsGrad,
  noGrad,
  opResult,
  parameter,
  release,
  Var,
} from './var.js';
