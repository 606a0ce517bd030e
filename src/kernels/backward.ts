// The reference attention backward: the spec the flash-style backward (backward-flash.ts) is checked against.
// One decision to know: it recomputes each query row's scores and softmax from q and k in float64 (it
// needs neither the forward's output nor its log-sum-exp), so it depends on nothing but the problem.
// Arrays may be Float32Array or Float64Array: the gradient checks run these same loops in float64.

import { flexScore, flexScoreSlope } from './flex.js';
import type { AttentionBackward, AttentionGrads, BackwardInputs, BackwardProblem } from './types.js';
import { kvRow, maskAllows, visibleRange } from './visibility.js';

export type { AttentionGrads, BackwardInputs, BackwardProblem, Floats } from './types.js';

/**
 * dq, dk, dv (and dbias) of O = softmax(q·kᵀ·scale + bias, masked)·v for key/value head `bkv`, row by row:
 *   P = softmax(s),  dP_j = dO·v_j,  D = Σ_j P_j·dP_j,  dS_j = P_j·(dP_j − D),
 *   dq += scale·Σ_j dS_j·k_j,  dk_j += scale·dS_j·q,  dv_j += P_j·dO,  dbias_j += dS_j.
 * A fully blocked row has P = 0, so it contributes nothing (zero gradients, never NaN).
 */
function referenceTask(p: BackwardProblem, inputs: BackwardInputs, grads: AttentionGrads, bkv: number): void {
  const { Hq, Hkv, L, S, E, Ev, q, k, v, scale, bias } = p;
  const { dOut } = inputs;
  const { dq, dk, dv, dbias } = grads;
  const group = Hq / Hkv;
  const b = Math.floor(bkv / Hkv);
  const hk = bkv % Hkv;
  const probs = new Float64Array(S); // one row: scores, then probabilities
  const dS = new Float64Array(S);
  const flex = p.flex;
  const slope = new Float64Array(flex ? S : 0); // d(scoreMod)/d(score) per key of the row
  const dqRow = new Float64Array(E);
  const dkAcc = new Float64Array(S * E); // float64 sums over queries (and GQA heads) of this head
  const dvAcc = new Float64Array(S * Ev);

  for (let h = hk * group; h < (hk + 1) * group; h++) {
    for (let i = 0; i < L; i++) {
      const row = (b * Hq + h) * L + i;
      const qBase = row * E;
      const oBase = row * Ev;
      const [lo, hi] = visibleRange(p, i); // window / causal, as the forward

      // Pass 1: scores of visible keys (−Infinity for blocked ones) and the row max, as the forward.
      let max = Number.NEGATIVE_INFINITY;
      for (let j = 0; j < S; j++) {
        if (j < lo || j > hi || !maskAllows(p, b, h, i, j)) {
          probs[j] = Number.NEGATIVE_INFINITY;
          continue;
        }
        const kRow = kvRow(p, b, hk, j) * E;
        let dot = 0;
        for (let e = 0; e < E; e++) dot += q[qBase + e] * k[kRow + e];
        let s = dot * scale;
        const bv = bias ? bias.data[b * bias.sb + h * bias.sh + i * bias.sl + j * bias.ss] : 0;
        s += bv;
        // A −∞ bias blocks the key whatever the score mod would make of it (as the forward).
        if (flex && bv === Number.NEGATIVE_INFINITY) s = bv;
        else if (flex) {
          // The score mod's slope at the unmodified score carries dS back through the mod.
          slope[j] = flexScoreSlope(flex, s, b, h, i, j);
          s = flexScore(flex, s, b, h, i, j);
        }
        probs[j] = s;
        max = Math.max(max, s);
      }
      dqRow.fill(0);
      if (max === Number.NEGATIVE_INFINITY) {
        for (let e = 0; e < E; e++) dq[qBase + e] = 0; // fully blocked row: no gradient anywhere
        continue;
      }

      // Pass 2: probabilities P_j (exact zeros for blocked keys).
      let sum = 0;
      for (let j = 0; j < S; j++) {
        const w = probs[j] === Number.NEGATIVE_INFINITY ? 0 : Math.exp(probs[j] - max);
        probs[j] = w;
        sum += w;
      }
      for (let j = 0; j < S; j++) probs[j] /= sum;

      // Pass 3: dP_j = dO·v_j and D = Σ_j P_j·dP_j; dv_j += P_j·dO.
      let D = 0;
      for (let j = 0; j < S; j++) {
        const P = probs[j];
        if (P === 0) {
          dS[j] = 0;
          continue;
        }
        let dp = 0;
        const vRow = kvRow(p, b, hk, j) * Ev;
        for (let e = 0; e < Ev; e++) {
          dp += dOut[oBase + e] * v[vRow + e];
          dvAcc[j * Ev + e] += P * dOut[oBase + e];
        }
        dS[j] = dp; // dP for now
        D += P * dp;
      }

      // Pass 4: dS_j = P_j·(dP_j − D); dq, dk (both carry the scale) and dbias.
      for (let j = 0; j < S; j++) {
        const P = probs[j];
        if (P === 0) continue;
        const ds = P * (dS[j] - D);
        if (dbias && bias) dbias[b * bias.sb + h * bias.sh + i * bias.sl + j * bias.ss] += ds;
        const g = ds * scale * (flex ? slope[j] : 1);
        const kRow = kvRow(p, b, hk, j) * E;
        for (let e = 0; e < E; e++) {
          dqRow[e] += g * k[kRow + e];
          dkAcc[j * E + e] += g * q[qBase + e];
        }
      }
      for (let e = 0; e < E; e++) dq[qBase + e] = dqRow[e];
    }
  }
  for (let j = 0; j < S; j++) {
    const kRow = kvRow(p, b, hk, j);
    for (let e = 0; e < E; e++) dk[kRow * E + e] = dkAcc[j * E + e];
    for (let e = 0; e < Ev; e++) dv[kRow * Ev + e] = dvAcc[j * Ev + e];
  }
}

/** The reference backward: needs only the problem (it recomputes the softmax), serves every call. */
export const referenceBackward: AttentionBackward = {
  supports: () => true,
  task: referenceTask,
};
