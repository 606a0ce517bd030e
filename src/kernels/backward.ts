// The reference attention backward: the spec the flash-style backward (backward-flash.ts) is checked against.
// One decision to know: it recomputes each query row's scores and softmax from q and k in float64 (it
// needs neither the forward's output nor its log-sum-exp), so it depends on nothing but the problem.
// Arrays may be Float32Array or Float64Array: the gradient checks run these same loops in float64.

import { type AttentionProblem, visibleRange } from './types.js';

/** Float storage the backward kernels read and write: float32 for training, float64 for gradient checks. */
export type Floats = Float32Array | Float64Array;

/** An AttentionProblem whose q, k and v may be float64 (the kernels only index them). */
export type BackwardProblem = Omit<AttentionProblem, 'q' | 'k' | 'v'> & { q: Floats; k: Floats; v: Floats };

/** What a backward kernel reads besides the problem. */
export interface BackwardInputs {
  /** [B, Hq, L, Ev]: the gradient of the loss with respect to the attention output. */
  dOut: Floats;
  /** [B, Hq, L, Ev]: the forward output (the flash backward needs it for D = rowsum(dO∘O)). */
  out?: Floats;
  /** [B, Hq, L]: the forward's log-sum-exp per row (−Infinity for a fully blocked row). */
  lse?: Floats;
}

/** What a backward kernel writes (overwritten, not accumulated). */
export interface AttentionGrads {
  /** [B, Hq, L, E] */
  dq: Floats;
  /** [B, Hkv, S, E]: summed over the Hq/Hkv query heads that share each key head (GQA). */
  dk: Floats;
  /** [B, Hkv, S, Ev]: summed likewise. */
  dv: Floats;
  /** Same length as problem.bias.data: ∂loss/∂bias, summed over the axes the bias was broadcast along. */
  dbias?: Floats;
}

/**
 * dq, dk, dv (and dbias) of O = softmax(q·kᵀ·scale + bias, masked)·v, row by row:
 *   P = softmax(s),  dP_j = dO·v_j,  D = Σ_j P_j·dP_j,  dS_j = P_j·(dP_j − D),
 *   dq += scale·Σ_j dS_j·k_j,  dk_j += scale·dS_j·q,  dv_j += P_j·dO,  dbias_j += dS_j.
 * A fully blocked row has P = 0, so it contributes nothing (zero gradients, never NaN).
 */
export function referenceBackward(p: BackwardProblem, inputs: BackwardInputs, grads: AttentionGrads): void {
  const { B, Hq, Hkv, L, S, E, Ev, q, k, v, scale, mask, bias } = p;
  const { dOut } = inputs;
  const { dq, dk, dv, dbias } = grads;
  const group = Hq / Hkv;
  const probs = new Float64Array(S); // one row: scores, then probabilities
  const dS = new Float64Array(S);
  const dqRow = new Float64Array(E);
  const dkAcc = new Float64Array(dk.length); // float64 sums over queries (and GQA heads)
  const dvAcc = new Float64Array(dv.length);
  const dbAcc = dbias ? new Float64Array(dbias.length) : undefined;

  for (let b = 0; b < B; b++) {
    for (let h = 0; h < Hq; h++) {
      const hk = Math.floor(h / group);
      const kBase = (b * Hkv + hk) * S * E; // k[b, hk] : [S, E]
      const vBase = (b * Hkv + hk) * S * Ev; // v[b, hk] : [S, Ev]
      for (let i = 0; i < L; i++) {
        const row = (b * Hq + h) * L + i;
        const qBase = row * E;
        const oBase = row * Ev;
        const [lo, hi] = visibleRange(p, i); // window / causal, as the forward

        // Pass 1: scores of visible keys (−Infinity for blocked ones) and the row max, as the forward.
        let max = Number.NEGATIVE_INFINITY;
        for (let j = 0; j < S; j++) {
          if (
            j < lo ||
            j > hi ||
            (mask && mask.data[b * mask.sb + h * mask.sh + i * mask.sl + j * mask.ss] === 0)
          ) {
            probs[j] = Number.NEGATIVE_INFINITY;
            continue;
          }
          let dot = 0;
          for (let e = 0; e < E; e++) dot += q[qBase + e] * k[kBase + j * E + e];
          let s = dot * scale;
          if (bias) s += bias.data[b * bias.sb + h * bias.sh + i * bias.sl + j * bias.ss];
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
          const vRow = vBase + j * Ev;
          for (let e = 0; e < Ev; e++) {
            dp += dOut[oBase + e] * v[vRow + e];
            dvAcc[vRow + e] += P * dOut[oBase + e];
          }
          dS[j] = dp; // dP for now
          D += P * dp;
        }

        // Pass 4: dS_j = P_j·(dP_j − D); dq, dk (both carry the scale) and dbias.
        for (let j = 0; j < S; j++) {
          const P = probs[j];
          if (P === 0) continue;
          const ds = P * (dS[j] - D);
          if (dbAcc && bias) dbAcc[b * bias.sb + h * bias.sh + i * bias.sl + j * bias.ss] += ds;
          const g = ds * scale;
          const kRow = kBase + j * E;
          for (let e = 0; e < E; e++) {
            dqRow[e] += g * k[kRow + e];
            dkAcc[kRow + e] += g * q[qBase + e];
          }
        }
        for (let e = 0; e < E; e++) dq[qBase + e] = dqRow[e];
      }
    }
  }
  dk.set(dkAcc);
  dv.set(dvAcc);
  if (dbias && dbAcc) dbias.set(dbAcc);
}
