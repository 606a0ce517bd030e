// Runs an AttentionStack over tokens and keeps what the playground shows: every head's weights in every
// layer, and for one focused head every intermediate (X, Q, K, V, Q·Kᵀ, ÷√d_k, mask, softmax, ·V).
// One decision to know: the trace is an observer on the library's one block forward (model/block.ts over
// Tensors), so what it shows is what MultiHeadAttention and TinyTransformer compute; only the displayed
// pre-softmax matrices (Q·Kᵀ, scaled, masked) are computed here, for the focused head.
// Every head's weights are layers·H·L² floats (48 layers × 64 heads × 512² tokens: 3.2 GB), so a caller
// that draws one head (qkv viz) asks for `focusOnly`: layers up to the focus, one layer's weights at a time.
// A stack with positions: 'rope' adds no positional table (layer 0's input is the embeddings alone, and
// there is no `positions` step); its q and k are shown after the rotation, as the scores are computed.

import { linear } from '../kernels/matmul.js';
import { isVisible } from '../kernels/visibility.js';
import { attend, type BlockAttentionOptions, type BlockObserver, transformerBlock } from '../model/block.js';
import { tensorOps } from '../model/ops-tensor.js';
import { sinusoidalPositionalEncoding } from '../position/sinusoidal.js';
import { Tensor } from '../tensor.js';
import type { AttentionStack, StackBlock } from './stack.js';

/** Options of {@link traceStack}: the mask, the scaling, the experiments, and the head to keep. */
export interface TraceOptions {
  /** Query i sees keys j ≤ i. */
  causal?: boolean;
  /** Divide scores by √d_k (default true); false = the article's "no scaling" experiment. */
  scaled?: boolean;
  /** Use W_K := W_Q (and b_K := b_Q) in every layer, so Q·Kᵀ is symmetric (§4.1). */
  tieQK?: boolean;
  /** A query row whose keys are all masked (the fully-masked-row experiment); −1 or omitted = none. */
  blockedQuery?: number;
  /** Which head to keep every step of; default layer 0, head 0. */
  focus?: { layer: number; head: number };
  /**
   * Compute only what the focused head's steps need: stop after the focus layer (later layers cannot
   * change it) and keep no per-layer weights (`weights` is then empty), so memory is one layer's
   * [H, L, L] instead of every layer's. Default false (the playground shows every head of every layer).
   */
  focusOnly?: boolean;
}

/** Every intermediate of one head, each [rows, cols] row-major. */
export interface HeadSteps {
  layer: number;
  head: number;
  /** Layer 0 only: token embeddings and (sinusoidal stacks only) positional encodings [L, D]. */
  embeddings?: Tensor;
  positions?: Tensor;
  /**
   * Set for a RoPE stack (positions: 'rope'): no table was added, and q and k are shown after their
   * rotation by position (what Q·Kᵀ is computed from), not as the projections wrote them.
   */
  rope?: { base: number };
  /** The residual stream entering the layer [L, D] (layer 0: embeddings + positions, or embeddings with RoPE). */
  input: Tensor;
  /** LayerNorm(input) [L, D], what the projections see. */
  normed: Tensor;
  /** [L, dK]: LN(X)·W_Q (+ b), rotated by position with RoPE. */
  q: Tensor;
  /** [L, dK]: LN(X)·W_K (+ b), rotated by position with RoPE. */
  k: Tensor;
  v: Tensor; // [L, dV]
  scores: Tensor; // [L, L] Q·Kᵀ
  /** The factor the scores were multiplied by: 1/√d_k, or 1 with scaling off. */
  scale: number;
  scaled: Tensor; // [L, L]
  masked: Tensor; // [L, L], −Infinity where blocked
  weights: Tensor; // [L, L], from attentionWeights
  output: Tensor; // [L, dV], from scaledDotProductAttention
  /** For the blocked query: what the article's −1e9 fill gives instead (weights and output rows). */
  article?: { query: number; weights: Float32Array; output: Float32Array };
}

/** {@link traceStack}'s result: the tokens, every layer's weights, and the focused head's steps. */
export interface StackTrace {
  tokens: string[];
  /** Per layer, all heads' weights [H, L, L] (empty with `focusOnly`). */
  weights: Tensor[];
  steps: HeadSteps;
}

/**
 * A block's parameters with W_K := W_Q and b_K := b_Q (the article's tie; a packed inProjWeight is read as
 * its three [D, D] row blocks, views, not copies); untied, the block as it is.
 */
function tiedQK(layer: StackBlock, tie: boolean): StackBlock {
  if (!tie) return layer;
  const a = layer.selfAttn;
  let wq = a.qProjWeight;
  let wv = a.vProjWeight;
  if (a.inProjWeight) {
    const [rows3, D] = a.inProjWeight.shape;
    const rows = (k: number) =>
      new Tensor(a.inProjWeight!.data.subarray(k * (rows3 / 3) * D, (k + 1) * (rows3 / 3) * D), [
        rows3 / 3,
        D,
      ]);
    wq = rows(0);
    wv = rows(2);
  }
  const qk = wq!.shape[0];
  let inProjBias = a.inProjBias;
  if (inProjBias) {
    const b = inProjBias.data;
    const tied = new Float32Array(b.length);
    tied.set(b.subarray(0, qk));
    tied.set(b.subarray(0, qk), qk);
    tied.set(b.subarray(2 * qk), 2 * qk);
    inProjBias = new Tensor(tied, [b.length]);
  }
  return {
    ...layer,
    selfAttn: {
      ...a,
      inProjWeight: undefined,
      qProjWeight: wq,
      kProjWeight: wq,
      vProjWeight: wv,
      inProjBias,
    },
  };
}

/** Head h's [L, E] columns of a [1, L, H·E] tensor. */
function headOf(x: Tensor, h: number, H: number): Tensor {
  const [, L, HE] = x.shape;
  const E = HE / H;
  const out = new Float32Array(L * E);
  for (let i = 0; i < L; i++) out.set(x.data.subarray(i * HE + h * E, i * HE + (h + 1) * E), i * E);
  return new Tensor(out, [L, E]);
}

/** Runs `stack` on `tokens` and returns every head's weights plus the focused head's steps. */
export function traceStack(
  stack: AttentionStack,
  tokens: readonly string[],
  options: TraceOptions = {},
): StackTrace {
  const fn = 'traceStack';
  const L = tokens.length;
  if (L < 1) throw new RangeError(`${fn}: tokens is empty; give at least one token`);
  const focus = options.focus ?? { layer: 0, head: 0 };
  if (
    !(focus.layer >= 0 && focus.layer < stack.layers.length && focus.head >= 0 && focus.head < stack.heads)
  ) {
    throw new RangeError(
      `${fn}: focus layer ${focus.layer} head ${focus.head} is outside ${stack.layers.length} layers × ${stack.heads} heads`,
    );
  }
  const blocked = options.blockedQuery ?? -1;
  if (!(Number.isInteger(blocked) && blocked >= -1 && blocked < L)) {
    throw new RangeError(`${fn}: blockedQuery must be −1 or a query index below ${L}, got ${blocked}`);
  }
  const causal = Boolean(options.causal);
  const { heads: H } = stack;
  const scale = options.scaled === false ? 1 : 1 / Math.sqrt(stack.dK);
  let mask: Tensor | undefined;
  if (blocked >= 0) {
    mask = Tensor.full([L, L], 1);
    mask.data.fill(0, blocked * L, (blocked + 1) * L);
  }
  // The kernels' own rule (band, then mask) for the step-by-step view's masked scores, as the blocks'
  // attention plans it for these options: L = S, causal top-left = bottom-right, no window.
  const band = {
    S: L,
    shift: 0,
    left: Number.POSITIVE_INFINITY,
    right: causal ? 0 : Number.POSITIVE_INFINITY,
    mask: mask && { data: mask.data, sb: 0, sh: 0, sl: L, ss: 1 },
  };
  const visible = (i: number, j: number) => isVisible(band, 0, 0, i, j);
  const rope = stack.positions === 'rope' ? { base: stack.ropeBase ?? 10000 } : undefined;
  const attention: BlockAttentionOptions = {
    numHeads: H,
    causal,
    scale,
    ...(mask ? { mask } : {}),
    needWeights: true,
    caller: fn,
    ...(rope ? { rope: { base: rope.base, offset: 0 } } : {}),
  };

  const embeddings = stack.embed(tokens);
  // RoPE: nothing is added (the blocks rotate q and k); otherwise the sinusoidal table.
  const positions = rope ? undefined : sinusoidalPositionalEncoding(L, stack.dModel);
  let x = (positions ? tensorOps.add(embeddings, positions) : embeddings).reshape([1, L, stack.dModel]); // [1, L, D]
  const weights: Tensor[] = [];
  let steps: HeadSteps | undefined;

  const focusOnly = Boolean(options.focusOnly);
  const layers = focusOnly ? stack.layers.slice(0, focus.layer + 1) : stack.layers;

  layers.forEach((layer: StackBlock, l) => {
    const p = tiedQK(layer, Boolean(options.tieQK));
    // What the block shows as it runs: LN1(x), q, k, v [1, L, H·E], the heads' outputs and weights.
    const seen: { normed?: Tensor; q?: Tensor; k?: Tensor; v?: Tensor; heads?: Tensor; w?: Tensor } = {};
    const observer: BlockObserver<Tensor> = {
      normed: (h) => Object.assign(seen, { normed: h }),
      projected: (q, k, v) => Object.assign(seen, { q, k, v }),
      attended: (heads, w) => Object.assign(seen, { heads, w }),
    };
    const input = x;
    if (focusOnly && l === focus.layer) {
      // Nothing after the focused layer's attention is drawn: stop there (no out-projection, no MLP).
      const normed = tensorOps.layerNorm(x, p.norm1.weight, p.norm1.bias);
      observer.normed!(normed);
      attend(tensorOps, p.selfAttn, normed, undefined, attention, observer);
    } else {
      x = transformerBlock(tensorOps, p, x, { attention, observer, mlp: 'linear1' in p }).x;
    }
    const w = seen.w!; // [1, H, L, L]
    if (!focusOnly) weights.push(w.reshape([H, L, L]));
    if (l === focus.layer) steps = headSteps(l, focus.head);

    function headSteps(layerIndex: number, head: number): HeadSteps {
      const qh = headOf(seen.q!, head, H);
      const kh = headOf(seen.k!, head, H);
      const vh = headOf(seen.v!, head, H);
      const dK = qh.shape[1];
      const scores = linear(qh.data, L, dK, kh.data, 0, L); // Q·Kᵀ [L, L], the library's one product
      const scaled = scores.map((s) => s * scale);
      const masked = scaled.map((s, idx) =>
        visible(Math.floor(idx / L), idx % L) ? s : Number.NEGATIVE_INFINITY,
      );
      const D = stack.dModel;
      const result: HeadSteps = {
        layer: layerIndex,
        head,
        ...(layerIndex === 0 ? { embeddings, ...(positions ? { positions } : {}) } : {}),
        ...(rope ? { rope } : {}),
        input: input.reshape([L, D]),
        normed: seen.normed!.reshape([L, D]),
        q: qh,
        k: kh,
        v: vh,
        scores: new Tensor(scores, [L, L]),
        scale,
        scaled: new Tensor(scaled, [L, L]),
        masked: new Tensor(masked, [L, L]),
        weights: new Tensor(w.data.slice(head * L * L, (head + 1) * L * L), [L, L]),
        output: headOf(seen.heads!, head, H),
      };
      if (blocked >= 0) result.article = articleRow(vh, blocked, L);
      return result;
    }
  });
  return { tokens: [...tokens], weights, steps: steps! };
}

/**
 * The article's masking for a fully blocked query row: it writes −1e9 into every blocked cell (here all
 * of them), then a stable softmax subtracts the row max (−1e9), so every key gets exp(0): a uniform 1/L.
 */
function articleRow(
  v: Tensor,
  i: number,
  L: number,
): { query: number; weights: Float32Array; output: Float32Array } {
  const row = new Array<number>(L).fill(-1e9);
  const max = Math.max(...row);
  const e = row.map((s) => Math.exp(s - max));
  const sum = e.reduce((a, b) => a + b, 0);
  const weights = Float32Array.from(e, (x) => x / sum);
  const dV = v.shape[1];
  const output = new Float32Array(dV);
  for (let j = 0; j < L; j++) for (let c = 0; c < dV; c++) output[c] += weights[j] * v.data[j * dV + c];
  return { query: i, weights, output };
}
