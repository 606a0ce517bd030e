// The tiled attention kernel in plain JS: FlashAttention-2's forward (Dao, arXiv:2307.08691) with the
// online softmax of Milakov & Gimelshein (arXiv:1805.02867).
// One decision to know: extra memory is O(Br·Bc + Br·Ev) per call, never L×S; key tiles wholly outside
// the causal/window band are skipped and the band rule is evaluated only on tiles that straddle it.

import { flashBackward } from './backward-flash.js';
import { flexScore } from './flex.js';
import type { AttentionKernel, AttentionOutputs, AttentionProblem } from './types.js';
import {
  classifyBlock,
  finishScore,
  headsOf,
  isVisible,
  kvRow,
  maskAllows,
  rowsBand,
  visibleRange,
} from './visibility.js';

/** Query rows per tile. */
export const BLOCK_ROWS = 32;
/** Keys per tile. */
export const BLOCK_COLS = 64;

/**
 * Serves every call; with `weights` asked for it adds a pass that recomputes scores and normalises them
 * by the saved row max and sum.
 */
export const flashKernel: AttentionKernel = {
  name: 'flash',
  supports: () => true,
  backward: flashBackward,
  forwardRows(p: AttentionProblem, outputs: AttentionOutputs, bh: number, i0: number, i1: number): void {
    const { L, E, Ev, q, k, v, scale, bias, flex } = p;
    const { out, weights, lse } = outputs;
    // Weights are recomputed as exp(s − m) / l from each row's final max m and sum l (float64), not as
    // exp(s − lse): at huge scores m + log(l) rounds back to m (ulp(1e17) = 16), and two tied keys
    // would both get weight 1. The recomputed s are the same bits as pass 1's (the same `dot`, the same
    // finishing), so s ≤ m and every weight is in [0, 1].
    const rowM = weights ? new Float64Array(i1 - i0) : undefined;
    const rowL = weights ? new Float64Array(i1 - i0) : undefined;
    const { b, h, hk } = headsOf(p, bh);
    const biasBase = bias ? b * bias.sb + h * bias.sh : 0;

    const tile = new Float64Array(BLOCK_ROWS * BLOCK_COLS); // scores, then probabilities, of one tile
    const rowMax = new Float64Array(BLOCK_ROWS); // running max m_i
    const rowSum = new Float64Array(BLOCK_ROWS); // running sum l_i of exp(s − m_i)
    const acc = new Float64Array(BLOCK_ROWS * Ev); // running Σ exp(s − m_i) · v, unnormalised
    const qRow = new Float64Array(E); // the current query row

    for (let r0 = i0; r0 < i1; r0 += BLOCK_ROWS) {
      const r1 = Math.min(i1, r0 + BLOCK_ROWS);
      const rows = r1 - r0;
      rowMax.fill(Number.NEGATIVE_INFINITY);
      rowSum.fill(0);
      acc.fill(0);
      // The band of keys any row of this tile can see: tiles outside it are never visited.
      const { lo: bandLo, hi: bandHi } = rowsBand(p, r0, r1);

      for (let c0 = bandLo; c0 <= bandHi; c0 += BLOCK_COLS) {
        const c1 = Math.min(bandHi + 1, c0 + BLOCK_COLS);
        const cols = c1 - c0;
        const kind = classifyBlock(p, r0, r1, c0, c1, b, h);
        if (kind === 'empty') continue;

        // Pass 1: tile of scaled scores s = q·k·scale (+ bias); −Infinity where the key is blocked.
        for (let r = 0; r < rows; r++) {
          const i = r0 + r;
          const qBase = (bh * L + i) * E;
          const t = r * BLOCK_COLS;
          for (let e = 0; e < E; e++) qRow[e] = q[qBase + e];
          for (let c = 0; c < cols; c++) {
            const j = c0 + c;
            if (kind === 'partial' && !isVisible(p, b, h, i, j)) {
              tile[t + c] = Number.NEGATIVE_INFINITY;
              continue;
            }
            let s = dot(qRow, k, kvRow(p, b, hk, j) * E, E) * scale;
            if (bias) {
              const bv = bias.data[biasBase + i * bias.sl + j * bias.ss];
              if (flex && bv === Number.NEGATIVE_INFINITY) {
                tile[t + c] = bv; // a −∞ bias blocks the key whatever the score mod would make of it
                continue;
              }
              s += bv;
            }
            if (flex) s = flexScore(flex, s, b, h, i, j);
            tile[t + c] = s;
          }
        }

        // Pass 2: online softmax. New max, rescale what was accumulated, add this tile's exp(s − m)·v.
        for (let r = 0; r < rows; r++) {
          const t = r * BLOCK_COLS;
          let m = rowMax[r];
          for (let c = 0; c < cols; c++) m = Math.max(m, tile[t + c]);
          if (m === Number.NEGATIVE_INFINITY) continue; // nothing visible to this row yet
          const alpha = Math.exp(rowMax[r] - m); // 0 on the first visible tile
          rowMax[r] = m;
          let sum = rowSum[r] * alpha;
          const a = r * Ev;
          if (alpha !== 1) for (let e = 0; e < Ev; e++) acc[a + e] *= alpha;
          for (let c = 0; c < cols; c++) {
            const s = tile[t + c];
            if (s === Number.NEGATIVE_INFINITY) continue; // blocked: its value never reaches the output
            const w = Math.exp(s - m);
            sum += w;
            if (out) {
              const vRow = kvRow(p, b, hk, c0 + c) * Ev;
              for (let e = 0; e < Ev; e++) acc[a + e] += w * v[vRow + e];
            }
          }
          rowSum[r] = sum;
        }
      }

      // Pass 3: normalise once; rows that saw no key are 0 with lse −Infinity.
      for (let r = 0; r < rows; r++) {
        const row = bh * L + r0 + r;
        const none = rowMax[r] === Number.NEGATIVE_INFINITY;
        const z = none ? Number.NEGATIVE_INFINITY : rowMax[r] + Math.log(rowSum[r]);
        if (lse) lse[row] = z;
        if (rowM && rowL) {
          rowM[r0 + r - i0] = rowMax[r];
          rowL[r0 + r - i0] = rowSum[r];
        }
        if (!out) continue;
        const inv = none ? 0 : 1 / rowSum[r];
        for (let e = 0; e < Ev; e++) out[row * Ev + e] = none ? 0 : acc[r * Ev + e] * inv;
      }
    }

    if (weights && rowM && rowL) writeWeights(p, weights, rowM, rowL, bh, i0, i1);
  },
};

/**
 * q·k for the query row `qRow` and the key at k[kBase …] (E numbers), in float64. Four partial sums:
 * independent additions run in parallel (one sum is a latency chain). The one dot product of this
 * kernel: pass 1 and the weights pass both use it, so a recomputed score is the same bits.
 */
function dot(qRow: Float64Array, k: Float32Array, kBase: number, E: number): number {
  let d0 = 0;
  let d1 = 0;
  let d2 = 0;
  let d3 = 0;
  let e = 0;
  for (; e + 3 < E; e += 4) {
    d0 += qRow[e] * k[kBase + e];
    d1 += qRow[e + 1] * k[kBase + e + 1];
    d2 += qRow[e + 2] * k[kBase + e + 2];
    d3 += qRow[e + 3] * k[kBase + e + 3];
  }
  for (; e < E; e++) d0 += qRow[e] * k[kBase + e];
  return d0 + d1 + (d2 + d3);
}

/**
 * weights[i, j] = exp(s_ij − m_i) / l_i for rows [i0, i1), from each row's final max and sum of pass 2
 * (rowM, rowL at i − i0); rows that saw no key (m = −∞) and blocked keys get 0. Only when weights are
 * asked for. s_ij is recomputed exactly as pass 1 computed it, so s ≤ m: each weight is in [0, 1] and
 * a row sums to 1 up to rounding, however large the scores.
 */
function writeWeights(
  p: AttentionProblem,
  weights: Float32Array,
  rowM: Float64Array,
  rowL: Float64Array,
  bh: number,
  i0: number,
  i1: number,
): void {
  const { L, S, E, q, k, scale } = p;
  const { b, h, hk } = headsOf(p, bh);
  const qRow = new Float64Array(E);
  for (let i = i0; i < i1; i++) {
    const row = bh * L + i;
    const base = row * S;
    weights.fill(0, base, base + S);
    const m = rowM[i - i0];
    if (m === Number.NEGATIVE_INFINITY) continue;
    const l = rowL[i - i0];
    for (let e = 0; e < E; e++) qRow[e] = q[row * E + e];
    const [lo, hi] = visibleRange(p, i);
    for (let j = lo; j <= hi; j++) {
      if (!maskAllows(p, b, h, i, j)) continue;
      const s = finishScore(p, b, h, i, j, dot(qRow, k, kvRow(p, b, hk, j) * E, E) * scale);
      weights[base + j] = s === Number.NEGATIVE_INFINITY ? 0 : Math.exp(s - m) / l;
    }
  }
}
