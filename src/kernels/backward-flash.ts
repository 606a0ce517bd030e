// FlashAttention-2 style attention backward (Dao, arXiv:2307.08691, Algorithm 2): scores are recomputed
// tile by tile from q, k and the forward's saved log-sum-exp, so memory is O(blockQ·blockK), never O(L·S).
// One decision to know: the outer loop runs over key blocks (dK, dV of a block finish in a local tile, summed
// over the query heads of a GQA group); dQ is accumulated in a float64 buffer the size of q, as FA2 does.

import type { AttentionGrads, BackwardInputs, BackwardProblem } from './backward.js';

/** Tile sizes of the flash backward (rows of q per tile, rows of k per tile). */
export interface FlashBackwardOptions {
  blockQ?: number;
  blockK?: number;
}

/**
 * Same contract and results as referenceBackward (to float rounding), but needs the forward's `out` and
 * `lse`. Passes per tile: (1) P = exp(s − lse) (2) dV += Pᵀ·dO (3) dS = P∘(dO·Vᵀ − D) (4) dQ += scale·dS·K,
 * dK += scale·dSᵀ·Q, dbias += dS; with D_i = rowsum(dO∘O) computed once before the loop.
 */
export function flashBackward(
  p: BackwardProblem,
  inputs: BackwardInputs,
  grads: AttentionGrads,
  { blockQ = 32, blockK = 32 }: FlashBackwardOptions = {},
): void {
  const { B, Hq, Hkv, L, S, E, Ev, q, k, v, scale, mask, bias, shift, left, right } = p;
  const { dOut, out, lse } = inputs;
  if (!out || !lse)
    throw new Error('flashBackward: needs the forward output and log-sum-exp (kernel misuse)');
  const { dq, dk, dv, dbias } = grads;
  const group = Hq / Hkv;

  // D_i = Σ_e dO_ie·O_ie, one number per query row: [B, Hq, L].
  const Drow = new Float64Array(B * Hq * L);
  for (let row = 0; row < B * Hq * L; row++) {
    let d = 0;
    for (let e = 0; e < Ev; e++) d += dOut[row * Ev + e] * out[row * Ev + e];
    Drow[row] = d;
  }

  const dqAcc = new Float64Array(dq.length);
  const dbAcc = dbias ? new Float64Array(dbias.length) : undefined;
  const P = new Float64Array(blockQ * blockK); // [blockQ, blockK] tile of probabilities, then of dS
  const dKt = new Float64Array(blockK * E); // this key block's dK: [blockK, E]
  const dVt = new Float64Array(blockK * Ev); // [blockK, Ev]

  for (let b = 0; b < B; b++) {
    for (let hk = 0; hk < Hkv; hk++) {
      const kBase = (b * Hkv + hk) * S * E;
      const vBase = (b * Hkv + hk) * S * Ev;
      for (let j0 = 0; j0 < S; j0 += blockK) {
        const j1 = Math.min(S, j0 + blockK);
        const nj = j1 - j0;
        dKt.fill(0, 0, nj * E);
        dVt.fill(0, 0, nj * Ev);

        for (let h = hk * group; h < (hk + 1) * group; h++) {
          for (let i0 = 0; i0 < L; i0 += blockQ) {
            const i1 = Math.min(L, i0 + blockQ);
            // Skip tiles wholly outside the causal/window band.
            if (j1 - 1 < i0 + shift - left || j0 > i1 - 1 + shift + right) continue;

            // Pass 1: P_ij = exp(scale·q_i·k_j + bias_ij − lse_i); 0 for blocked keys and dead rows.
            for (let i = i0; i < i1; i++) {
              const row = (b * Hq + h) * L + i;
              const Prow = (i - i0) * blockK;
              const m = lse[row];
              const pos = i + shift;
              for (let j = j0; j < j1; j++) {
                if (
                  m === Number.NEGATIVE_INFINITY ||
                  j < pos - left ||
                  j > pos + right ||
                  (mask && mask.data[b * mask.sb + h * mask.sh + i * mask.sl + j * mask.ss] === 0)
                ) {
                  P[Prow + j - j0] = 0;
                  continue;
                }
                let dot = 0;
                const qRow = row * E;
                const kRow = kBase + j * E;
                for (let e = 0; e < E; e++) dot += q[qRow + e] * k[kRow + e];
                let s = dot * scale;
                if (bias) s += bias.data[b * bias.sb + h * bias.sh + i * bias.sl + j * bias.ss];
                P[Prow + j - j0] = Math.exp(s - m); // exp(−Infinity) = 0 for a −Infinity bias
              }
            }

            for (let i = i0; i < i1; i++) {
              const row = (b * Hq + h) * L + i;
              const Prow = (i - i0) * blockK;
              const oRow = row * Ev;
              const qRow = row * E;
              const Di = Drow[row];
              for (let j = j0; j < j1; j++) {
                const pij = P[Prow + j - j0];
                if (pij === 0) continue;
                // Pass 2 and 3: dV_j += P_ij·dO_i; dP_ij = dO_i·v_j; dS_ij = P_ij·(dP_ij − D_i).
                const vRow = vBase + j * Ev;
                const tv = (j - j0) * Ev;
                let dp = 0;
                for (let e = 0; e < Ev; e++) {
                  const g = dOut[oRow + e];
                  dVt[tv + e] += pij * g;
                  dp += g * v[vRow + e];
                }
                const ds = pij * (dp - Di);
                if (dbAcc && bias) dbAcc[b * bias.sb + h * bias.sh + i * bias.sl + j * bias.ss] += ds;
                // Pass 4: dQ_i += scale·dS_ij·k_j; dK_j += scale·dS_ij·q_i.
                const g = ds * scale;
                const kRow = kBase + j * E;
                const tk = (j - j0) * E;
                for (let e = 0; e < E; e++) {
                  dqAcc[qRow + e] += g * k[kRow + e];
                  dKt[tk + e] += g * q[qRow + e];
                }
              }
            }
          }
        }
        // This key block is finished for every query head of the group: write it out.
        for (let t = 0; t < nj * E; t++) dk[kBase + j0 * E + t] = dKt[t];
        for (let t = 0; t < nj * Ev; t++) dv[vBase + j0 * Ev + t] = dVt[t];
      }
    }
  }
  dq.set(dqAcc);
  if (dbias && dbAcc) dbias.set(dbAcc);
}
