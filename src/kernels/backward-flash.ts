// FlashAttention-2 style attention backward (Dao, arXiv:2307.08691, Algorithm 2): scores are recomputed
// tile by tile from q, k and the forward's saved log-sum-exp, so memory is O(blockQ·blockK), never O(L·S).
// One decision to know: a task is one key/value head; its outer loop runs over key blocks (dK, dV of a block
// finish in a local tile, summed over the query heads of a GQA group) and dQ of the group's rows is
// accumulated in a float64 buffer, as FA2 does — so tasks write disjoint rows and can run in parallel.

import { flexScore, flexScoreSlope } from './flex.js';
import type { AttentionBackward, AttentionGrads, BackwardInputs, BackwardProblem } from './types.js';
import { classifyBlock, isVisible, kvRow } from './visibility.js';

/** Tile sizes of the flash backward (rows of q per tile, rows of k per tile). */
export interface FlashBackwardOptions {
  blockQ?: number;
  blockK?: number;
}

/**
 * Same contract and results as the reference backward (to float rounding), but needs the forward's `out`
 * and `lse`. Passes per tile: (1) P = exp(s − lse) (2) dV += Pᵀ·dO (3) dS = P∘(dO·Vᵀ − D) (4) dQ +=
 * scale·dS·K, dK += scale·dSᵀ·Q, dbias += dS; with D_i = rowsum(dO∘O) computed per row first.
 */
function flashTask(
  p: BackwardProblem,
  inputs: BackwardInputs,
  grads: AttentionGrads,
  bkv: number,
  { blockQ = 32, blockK = 32 }: FlashBackwardOptions = {},
): void {
  const { Hq, Hkv, L, S, E, Ev, q, k, v, scale, bias } = p;
  const { dOut, out, lse } = inputs;
  if (!out || !lse)
    throw new Error('flash backward: needs the forward output and log-sum-exp (kernel misuse)');
  const { dq, dk, dv, dbias } = grads;
  const group = Hq / Hkv;
  const b = Math.floor(bkv / Hkv);
  const hk = bkv % Hkv;
  const h0 = hk * group; // the group's query heads are h0 … h0 + group − 1, rows contiguous in q

  // D_i = Σ_e dO_ie·O_ie, one number per query row of the group: [group, L].
  const firstRow = (b * Hq + h0) * L;
  const Drow = new Float64Array(group * L);
  for (let r = 0; r < group * L; r++) {
    const row = firstRow + r;
    let d = 0;
    for (let e = 0; e < Ev; e++) d += dOut[row * Ev + e] * out[row * Ev + e];
    Drow[r] = d;
  }

  const dqAcc = new Float64Array(group * L * E); // dq of the group's rows
  const P = new Float64Array(blockQ * blockK); // [blockQ, blockK] tile of probabilities
  const flex = p.flex;
  const slope = new Float64Array(flex ? blockQ * blockK : 0); // d(scoreMod)/d(score) of the tile
  const dKt = new Float64Array(blockK * E); // this key block's dK: [blockK, E]
  const dVt = new Float64Array(blockK * Ev); // [blockK, Ev]

  for (let j0 = 0; j0 < S; j0 += blockK) {
    const j1 = Math.min(S, j0 + blockK);
    const nj = j1 - j0;
    dKt.fill(0, 0, nj * E);
    dVt.fill(0, 0, nj * Ev);

    for (let h = h0; h < h0 + group; h++) {
      for (let i0 = 0; i0 < L; i0 += blockQ) {
        const i1 = Math.min(L, i0 + blockQ);
        const kind = classifyBlock(p, i0, i1, j0, j1, b, h);
        if (kind === 'empty') continue; // wholly outside the causal/window band

        // Pass 1: P_ij = exp(scale·q_i·k_j + bias_ij − lse_i); 0 for blocked keys and dead rows.
        for (let i = i0; i < i1; i++) {
          const row = (b * Hq + h) * L + i;
          const Prow = (i - i0) * blockK;
          const m = lse[row];
          for (let j = j0; j < j1; j++) {
            if (m === Number.NEGATIVE_INFINITY || (kind === 'partial' && !isVisible(p, b, h, i, j))) {
              P[Prow + j - j0] = 0;
              continue;
            }
            let dot = 0;
            const qRow = row * E;
            const kRow = kvRow(p, b, hk, j) * E;
            for (let e = 0; e < E; e++) dot += q[qRow + e] * k[kRow + e];
            let s = dot * scale;
            const bv = bias ? bias.data[b * bias.sb + h * bias.sh + i * bias.sl + j * bias.ss] : 0;
            s += bv;
            // A −∞ bias blocks the key whatever the score mod would make of it (as the forward).
            if (flex && bv === Number.NEGATIVE_INFINITY) s = bv;
            else if (flex) {
              slope[Prow + j - j0] = flexScoreSlope(flex, s, b, h, i, j);
              s = flexScore(flex, s, b, h, i, j);
            }
            P[Prow + j - j0] = Math.exp(s - m); // exp(−Infinity) = 0 for a −Infinity bias
          }
        }

        for (let i = i0; i < i1; i++) {
          const row = (b * Hq + h) * L + i;
          const r = (h - h0) * L + i; // the row within the group
          const Prow = (i - i0) * blockK;
          const oRow = row * Ev;
          const qRow = row * E;
          const Di = Drow[r];
          for (let j = j0; j < j1; j++) {
            const pij = P[Prow + j - j0];
            if (pij === 0) continue;
            // Pass 2 and 3: dV_j += P_ij·dO_i; dP_ij = dO_i·v_j; dS_ij = P_ij·(dP_ij − D_i).
            const vRow = kvRow(p, b, hk, j) * Ev;
            const tv = (j - j0) * Ev;
            let dp = 0;
            for (let e = 0; e < Ev; e++) {
              const g = dOut[oRow + e];
              dVt[tv + e] += pij * g;
              dp += g * v[vRow + e];
            }
            const ds = pij * (dp - Di);
            if (dbias && bias) dbias[b * bias.sb + h * bias.sh + i * bias.sl + j * bias.ss] += ds;
            // Pass 4: dQ_i += scale·dS_ij·k_j; dK_j += scale·dS_ij·q_i.
            const g = ds * scale * (flex ? slope[Prow + j - j0] : 1);
            const kRow = kvRow(p, b, hk, j) * E;
            const tk = (j - j0) * E;
            for (let e = 0; e < E; e++) {
              dqAcc[r * E + e] += g * k[kRow + e];
              dKt[tk + e] += g * q[qRow + e];
            }
          }
        }
      }
    }
    // This key block is finished for every query head of the group: write it out.
    for (let j = j0; j < j1; j++) {
      const kvr = kvRow(p, b, hk, j);
      for (let e = 0; e < E; e++) dk[kvr * E + e] = dKt[(j - j0) * E + e];
      for (let e = 0; e < Ev; e++) dv[kvr * Ev + e] = dVt[(j - j0) * Ev + e];
    }
  }
  for (let x = 0; x < group * L * E; x++) dq[firstRow * E + x] = dqAcc[x];
}

/** The FlashAttention-2 backward: O(tile) memory, needs the forward's out and lse. */
export const flashBackward: AttentionBackward = {
  needsForward: true,
  supports: (_p, inputs) =>
    inputs.out && inputs.lse ? true : 'it needs the forward output and log-sum-exp (pass out and lse)',
  task: (p, inputs, grads, bkv) => flashTask(p, inputs, grads, bkv),
};

/** The flash backward with other tile sizes (tests exercise tile edges with these). */
export function flashBackwardWith(options: FlashBackwardOptions): AttentionBackward {
  return { ...flashBackward, task: (p, inputs, grads, bkv) => flashTask(p, inputs, grads, bkv, options) };
}
