// Runs an AttentionStack over tokens and keeps what the playground shows: every head's weights in every
// layer, and for one focused head every intermediate (X, Q, K, V, Q·Kᵀ, ÷√d_k, mask, softmax, ·V).
// One decision to know: the softmax and ·V come from qkv's own attention (attendWithWeights: both in one pass);
// only the projections and the displayed pre-softmax matrices are computed here (float64 sums).
// Every head's weights are layers·H·L² floats (48 layers × 64 heads × 512² tokens: 3.2 GB), so a caller
// that draws one head (qkv viz) asks for `focusOnly`: layers up to the focus, one layer's weights at a time.

import { attendWithWeights } from '../attention/sdpa.js';
import { sinusoidalPositionalEncoding } from '../position/sinusoidal.js';
import { Tensor } from '../tensor.js';
import type { AttentionStack, StackLayer } from './stack.js';

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
  /** Layer 0 only: token embeddings and positional encodings [L, D]. */
  embeddings?: Tensor;
  positions?: Tensor;
  /** The residual stream entering the layer [L, D] (layer 0: embeddings + positions). */
  input: Tensor;
  /** LayerNorm(input) [L, D], what the projections see. */
  normed: Tensor;
  q: Tensor; // [L, dK]
  k: Tensor; // [L, dK]
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

export interface StackTrace {
  tokens: string[];
  /** Per layer, all heads' weights [H, L, L] (empty with `focusOnly`). */
  weights: Tensor[];
  steps: HeadSteps;
}

/** y = x·Wᵀ + b for x [L, in], W [out, in]: [L, out], summed in float64. */
export function linear(x: Tensor, w: Tensor, b?: Float32Array): Tensor {
  const [L, n] = x.shape;
  const [m, n2] = w.shape;
  if (n !== n2) {
    throw new RangeError(`linear: x is [${x.shape}] but weight is [${w.shape}] (inner sizes ${n} ≠ ${n2})`);
  }
  const out = new Float32Array(L * m);
  for (let i = 0; i < L; i++) {
    for (let o = 0; o < m; o++) {
      let s = b ? b[o] : 0;
      const xi = i * n;
      const wo = o * n;
      for (let c = 0; c < n; c++) s += x.data[xi + c] * w.data[wo + c];
      out[i * m + o] = s;
    }
  }
  return new Tensor(out, [L, m]);
}

function layerNorm(x: Tensor, p: { weight: Float32Array; bias: Float32Array }): Tensor {
  const [L, D] = x.shape;
  const out = new Float32Array(L * D);
  for (let i = 0; i < L; i++) {
    let mean = 0;
    for (let c = 0; c < D; c++) mean += x.data[i * D + c];
    mean /= D;
    let variance = 0;
    for (let c = 0; c < D; c++) variance += (x.data[i * D + c] - mean) ** 2;
    const inv = 1 / Math.sqrt(variance / D + 1e-5);
    for (let c = 0; c < D; c++) out[i * D + c] = (x.data[i * D + c] - mean) * inv * p.weight[c] + p.bias[c];
  }
  return new Tensor(out, [L, D]);
}

const GELU_C = Math.sqrt(2 / Math.PI);

const add = (a: Tensor, b: Tensor) =>
  new Tensor(
    a.data.map((v, i) => v + b.data[i]),
    a.shape,
  );

/** [L, H·E] → [1, H, L, E] (split the feature axis into heads). */
function splitHeads(x: Tensor, H: number): Tensor {
  const [L, HE] = x.shape;
  const E = HE / H;
  const out = new Float32Array(L * HE);
  for (let h = 0; h < H; h++) {
    for (let i = 0; i < L; i++)
      out.set(x.data.subarray(i * HE + h * E, i * HE + (h + 1) * E), (h * L + i) * E);
  }
  return new Tensor(out, [1, H, L, E]);
}

/** [1, H, L, E] → [L, H·E] (concatenate heads). */
function mergeHeads(x: Tensor): Tensor {
  const [, H, L, E] = x.shape;
  const out = new Float32Array(L * H * E);
  for (let h = 0; h < H; h++) {
    for (let i = 0; i < L; i++)
      out.set(x.data.subarray((h * L + i) * E, (h * L + i + 1) * E), i * H * E + h * E);
  }
  return new Tensor(out, [L, H * E]);
}

/** One head's [L, E] slice of a [1, H, L, E] tensor. */
function headOf(x: Tensor, h: number): Tensor {
  const [, , L, E] = x.shape;
  return new Tensor(x.data.slice(h * L * E, (h + 1) * L * E), [L, E]);
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
  const visible = (i: number, j: number) => i !== blocked && (!causal || j <= i);
  let mask: Tensor | undefined;
  if (blocked >= 0) {
    mask = Tensor.full([L, L], 1);
    mask.data.fill(0, blocked * L, (blocked + 1) * L);
  }
  const attnOptions = { causal, scale, ...(mask ? { mask } : {}) };

  const embeddings = stack.embed(tokens);
  const positions = sinusoidalPositionalEncoding(L, stack.dModel);
  let x = add(embeddings, positions);
  const weights: Tensor[] = [];
  let steps: HeadSteps | undefined;

  const focusOnly = Boolean(options.focusOnly);
  const layers = focusOnly ? stack.layers.slice(0, focus.layer + 1) : stack.layers;

  layers.forEach((layer: StackLayer, l) => {
    const normed = layerNorm(x, layer.norm1);
    const qFlat = linear(normed, layer.wq, layer.bq); // [L, H·dK]
    const kFlat = options.tieQK ? qFlat : linear(normed, layer.wk, layer.bk);
    const vFlat = linear(normed, layer.wv, layer.bv); // [L, H·dV]
    const q = splitHeads(qFlat, H); // [1, H, L, dK]
    const k = splitHeads(kFlat, H);
    const v = splitHeads(vFlat, H); // [1, H, L, dV]
    const { weights: w, output: out } = attendWithWeights('traceStack', q, k, v, attnOptions); // [1, H, L, L], [1, H, L, dV]
    if (!focusOnly) weights.push(w.reshape([H, L, L]));
    if (l === focus.layer) steps = headSteps(l, focus.head);
    if (focusOnly && l === focus.layer) return; // nothing after the focus is drawn
    const h = add(x, linear(mergeHeads(out), layer.wo, layer.bo));
    const hidden = linear(layerNorm(h, layer.norm2), layer.fc1, layer.b1);
    for (let i = 0; i < hidden.data.length; i++) {
      const z = hidden.data[i];
      hidden.data[i] = 0.5 * z * (1 + Math.tanh(GELU_C * (z + 0.044715 * z * z * z))); // tanh GELU, as TinyTransformer
    }
    x = add(h, linear(hidden, layer.fc2, layer.b2));

    function headSteps(layerIndex: number, head: number): HeadSteps {
      const qh = headOf(q, head);
      const kh = headOf(k, head);
      const vh = headOf(v, head);
      const dK = qh.shape[1];
      const scores = new Float32Array(L * L);
      for (let i = 0; i < L; i++) {
        for (let j = 0; j < L; j++) {
          let s = 0;
          for (let c = 0; c < dK; c++) s += qh.data[i * dK + c] * kh.data[j * dK + c];
          scores[i * L + j] = s;
        }
      }
      const scaled = scores.map((s) => s * scale);
      const masked = scaled.map((s, idx) =>
        visible(Math.floor(idx / L), idx % L) ? s : Number.NEGATIVE_INFINITY,
      );
      const result: HeadSteps = {
        layer: layerIndex,
        head,
        ...(layerIndex === 0 ? { embeddings, positions } : {}),
        input: x,
        normed,
        q: qh,
        k: kh,
        v: vh,
        scores: new Tensor(scores, [L, L]),
        scale,
        scaled: new Tensor(scaled, [L, L]),
        masked: new Tensor(masked, [L, L]),
        weights: new Tensor(w.data.slice(head * L * L, (head + 1) * L * L), [L, L]),
        output: headOf(out, head),
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
