// BlockOps over autograd Vars: the block forward as TinyTransformer trains it (every op records its backward
// on the tape, or nothing under noGrad). One decision to know: this is a table of the autograd's own ops,
// nothing more — the maths and the gradients live in src/autograd, the block's wiring in block.ts.

import { attention, attentionPacked } from '../autograd/attention.js';
import { add, dropout, gelu, layerNorm, linear, rope, splitLast } from '../autograd/ops.js';
import type { Var } from '../autograd/var.js';
import type { BlockOps } from './block.js';

/** The autograd's ops, as the block forward calls them. */
export const varOps: BlockOps<Var> = {
  linear,
  layerNorm,
  gelu,
  add,
  splitLast,
  rope,
  attention(q, k, v, options) {
    // The autograd's op names itself in errors and has no kernel choice: drop what it does not take.
    const { caller: _caller, kernel: _kernel, ...rest } = options;
    return attention(q, k, v, rest);
  },
  attentionPacked(qkv, options) {
    // Self-attention without a cache or GQA only (block.ts's attend checks): drop what does not apply.
    const { caller: _caller, kernel: _kernel, numKvHeads: _numKvHeads, cache: _cache, ...rest } = options;
    return attentionPacked(qkv, rest);
  },
  dropout,
};
