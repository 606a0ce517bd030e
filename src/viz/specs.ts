// The step-through as a list of heatmap specs, shared by the page and `qkv viz --matrix <id>`, so both
// show the same matrix under the same title, labels and colour scale.
// One decision to know: signed matrices (X, Q, K, V, scores, output) use the diverging scale centred on 0;
// only the softmax weights use the sequential [0, 1] scale.

import type { HeatmapSpec } from './layout.js';
import type { HeadSteps } from './trace.js';

/**
 * The step-through's matrices in order, by id (`qkv viz --matrix <id>`): embeddings and positions (layer 0
 * only), the block input, the normed input, Q, K, V, the scores Q·Kᵀ, scaled, masked, the softmax
 * weights, and the head's output.
 */
export const STEP_IDS = [
  'embeddings',
  'positions',
  'input',
  'normed',
  'q',
  'k',
  'v',
  'scores',
  'scaled',
  'masked',
  'weights',
  'output',
] as const;
/** One of {@link STEP_IDS}. */
export type StepId = (typeof STEP_IDS)[number];

/** One matrix of the step-through: its id, heading and note, and the heatmap that draws it. */
export interface StepView {
  id: StepId;
  /** A short heading, e.g. "Q·Kᵀ". */
  name: string;
  /** One sentence on what the step does. */
  note: string;
  spec: HeatmapSpec;
}

const columns = (n: number) => Array.from({ length: n }, (_, j) => String(j));

/** The heatmaps of one head's step-through, in order (embeddings and positions only for layer 0). */
export function stepViews(steps: HeadSteps, tokens: readonly string[]): StepView[] {
  const L = tokens.length;
  const where = `layer ${steps.layer}, head ${steps.head}`;
  const matrix = (
    id: StepId,
    name: string,
    note: string,
    data: Float32Array,
    cols: number,
    sequential = false,
  ): StepView => ({
    id,
    name,
    note,
    spec: {
      values: data,
      rows: L,
      cols,
      rowLabels: tokens,
      colLabels:
        cols === L && id !== 'q' && id !== 'k' && id !== 'v' && id !== 'output' ? tokens : columns(cols),
      title: `${name} [${L}×${cols}] · ${where}`,
      scale: sequential ? 'sequential' : 'diverging',
    },
  });
  const D = steps.input.shape[1];
  const dK = steps.q.shape[1];
  const dV = steps.v.shape[1];
  const scaleText =
    steps.scale === 1 ? '×1 (scaling off)' : `÷√${dK} = ×${Number(steps.scale.toPrecision(4))}`;
  const views: StepView[] = [];
  if (steps.embeddings && steps.positions) {
    views.push(
      matrix(
        'embeddings',
        'E: token embeddings',
        'One vector per token, looked up by the word.',
        steps.embeddings.data,
        D,
      ),
      matrix(
        'positions',
        'PE: sinusoidal positions',
        'sin/cos waves of the position, added so order matters.',
        steps.positions.data,
        D,
      ),
      matrix('input', 'X = E + PE', 'What the first layer reads.', steps.input.data, D),
    );
  } else if (steps.layer === 0) {
    // A RoPE model adds no positions to the embeddings: it rotates q and k by position instead.
    views.push(
      matrix(
        'input',
        'X = E',
        'Token embeddings; positions enter as rotations of Q and K.',
        steps.input.data,
        D,
      ),
    );
  } else {
    views.push(
      matrix(
        'input',
        `X: layer ${steps.layer} input`,
        'The residual stream after the previous layer.',
        steps.input.data,
        D,
      ),
    );
  }
  views.push(
    matrix(
      'normed',
      'LayerNorm(X)',
      'Each row rescaled to mean 0, variance 1 (pre-LN block).',
      steps.normed.data,
      D,
    ),
    steps.rope
      ? matrix(
          'q',
          'Q = RoPE(LN(X)·W_Q)',
          `Queries, each rotated by its position (d_k = ${dK}).`,
          steps.q.data,
          dK,
        )
      : matrix('q', 'Q = LN(X)·W_Q', `Queries: what each token looks for (d_k = ${dK}).`, steps.q.data, dK),
    steps.rope
      ? matrix(
          'k',
          'K = RoPE(LN(X)·W_K)',
          'Keys, rotated by position: Q·Kᵀ sees only distances.',
          steps.k.data,
          dK,
        )
      : matrix('k', 'K = LN(X)·W_K', 'Keys: what each token offers to be found by.', steps.k.data, dK),
    matrix('v', 'V = LN(X)·W_V', `Values: what each token passes on (d_v = ${dV}).`, steps.v.data, dV),
    matrix('scores', 'Q·Kᵀ', 'Row i, column j: how well query i matches key j.', steps.scores.data, L),
    matrix(
      'scaled',
      `Q·Kᵀ ${steps.scale === 1 ? '(not scaled)' : '÷ √d_k'}`,
      `Scores ${scaleText}.`,
      steps.scaled.data,
      L,
    ),
    matrix(
      'masked',
      'mask',
      'Blocked cells become −∞ (grey), so softmax gives them 0.',
      steps.masked.data,
      L,
    ),
    matrix(
      'weights',
      'softmax',
      'Each row becomes weights that sum to 1 (or all 0 if fully masked).',
      steps.weights.data,
      L,
      true,
    ),
    matrix(
      'output',
      'softmax·V',
      'Each token’s output: the weighted average of the values.',
      steps.output.data,
      dV,
    ),
  );
  return views;
}
