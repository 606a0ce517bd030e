// SelfAttention: the article's single-head class, kept for its readers, on qkv's exact kernel.
// One decision to know: weights keep the article's x·W layout ([dModel, dK]), unlike PyTorch's Linear
// ([out, in]), and are Xavier-uniform rather than the article's ±0.01, which made every weight 0.250.

import { matmul } from '../kernels/matmul.js';
import { type RandomOptions, resolveGenerator } from '../random.js';
import { checkAllocation, checkInteger, formatShape } from '../shape.js';
import { Tensor, type TensorLike, toTensor } from '../tensor.js';
import { type CausalOption, checkBroadcast, checkOptionNames } from './plan.js';
import { attendWithWeights } from './sdpa.js';

/** Constructor options of SelfAttention (the article's AttentionConfig, camel-cased). */
export interface SelfAttentionOptions extends RandomOptions {
  dModel: number;
  dK: number;
  dV: number;
}

/** What SelfAttention.forward returns. */
export interface SelfAttentionResult {
  /** [n, dV] (or [B, n, dV]) */
  output: Tensor;
  /** [n, n] (or [B, n, n]); rows sum to 1, or are all 0 when every key is masked. */
  attentionWeights: Tensor;
}

const FORWARD = 'SelfAttention.forward';

/**
 * Single-head self-attention as in the article: Q = X·WQ, K = X·WK, V = X·WV,
 * softmax(Q·Kᵀ/√dK [masked]) · V.
 *
 * @example
 * const attn = new SelfAttention({ dModel: 512, dK: 64, dV: 64, seed: 0 });
 * const { output, attentionWeights } = attn.forward(Tensor.randn([4, 512], { seed: 1 }));
 */
export class SelfAttention {
  readonly dModel: number;
  readonly dK: number;
  readonly dV: number;
  #WQ: Tensor;
  #WK: Tensor;
  #WV: Tensor;

  constructor(options: SelfAttentionOptions) {
    checkOptionNames('SelfAttention', options, ['dModel', 'dK', 'dV', 'seed', 'generator']);
    const { dModel, dK, dV } = options;
    for (const [name, value] of Object.entries({ dModel, dK, dV }))
      checkInteger('SelfAttention', name, value, 1);
    checkAllocation('SelfAttention', 'WQ', [dModel, dK], 4);
    checkAllocation('SelfAttention', 'WV', [dModel, dV], 4);
    this.dModel = dModel;
    this.dK = dK;
    this.dV = dV;
    const gen = resolveGenerator(options, 'SelfAttention');
    const xavier = (cols: number) => {
      const bound = Math.sqrt(6 / (dModel + cols));
      return Tensor.rand([dModel, cols], { low: -bound, high: bound, generator: gen });
    };
    this.#WQ = xavier(dK);
    this.#WK = xavier(dK);
    this.#WV = xavier(dV);
  }

  /** Query projection [dModel, dK]. */
  get WQ(): Tensor {
    return this.#WQ;
  }
  set WQ(w: TensorLike) {
    this.#WQ = this.#checkWeight('WQ', w, this.dK);
  }
  /** Key projection [dModel, dK]. */
  get WK(): Tensor {
    return this.#WK;
  }
  set WK(w: TensorLike) {
    this.#WK = this.#checkWeight('WK', w, this.dK);
  }
  /** Value projection [dModel, dV]. */
  get WV(): Tensor {
    return this.#WV;
  }
  set WV(w: TensorLike) {
    this.#WV = this.#checkWeight('WV', w, this.dV);
  }

  /**
   * X [n, dModel] (or [B, n, dModel]); mask [n, n], 1 = may attend, 0 = blocked (the article's polarity).
   * `options.causal` adds a causal mask; `options.scale` replaces 1/√dK (1 turns scaling off). Any finite
   * scale is accepted, as by scaledDotProductAttention and PyTorch: 0 gives uniform weights, a negative
   * scale prefers the least similar keys.
   */
  forward(
    X: TensorLike,
    mask?: TensorLike,
    options: { causal?: CausalOption; scale?: number } = {},
  ): SelfAttentionResult {
    checkOptionNames(FORWARD, options, ['causal', 'scale']);
    const x = toTensor(X, FORWARD, 'X');
    if ((x.rank !== 2 && x.rank !== 3) || x.shape[x.rank - 1] !== this.dModel) {
      throw new RangeError(
        `${FORWARD}: X must be [n, dModel] or [B, n, dModel] with dModel=${this.dModel}, got ${formatShape(x.shape)}`,
      );
    }
    const rows = x.size / this.dModel;
    const lead = x.shape.slice(0, -1);
    const n = x.shape[x.rank - 2];
    const target = [...lead.slice(0, -1), n, n];
    const maskTensor = mask === undefined ? undefined : toTensor(mask, FORWARD, 'mask');
    const shapes = `X ${formatShape(x.shape)}${maskTensor ? `, mask ${formatShape(maskTensor.shape)}` : ''}`;
    checkBroadcast(FORWARD, 'mask', maskTensor, target, x.rank === 3 ? '[B, n, n]' : '[n, n]', shapes);
    checkAllocation(FORWARD, 'the attention weights', target, 4, ` (${shapes})`); // the output is checked by planAttention
    const project = (w: Tensor, cols: number) =>
      new Tensor(matmul(x.data, rows, this.dModel, w.data, cols), [...lead, cols]);
    const Q = project(this.#WQ, this.dK); // [n, dK]
    const K = project(this.#WK, this.dK); // [n, dK]
    const V = project(this.#WV, this.dV); // [n, dV]
    const attention = maskTensor === undefined ? options : { ...options, mask: maskTensor };
    const { output, weights } = attendWithWeights(FORWARD, Q, K, V, attention);
    return { output, attentionWeights: weights };
  }

  #checkWeight(name: string, w: TensorLike, cols: number): Tensor {
    const t = toTensor(w, `SelfAttention.${name}`, name);
    if (t.rank !== 2 || t.shape[0] !== this.dModel || t.shape[1] !== cols) {
      throw new RangeError(
        `SelfAttention.${name}: expected shape ${formatShape([this.dModel, cols])}, got ${formatShape(t.shape)}`,
      );
    }
    return t;
  }
}
