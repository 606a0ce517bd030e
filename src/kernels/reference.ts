// The reference attention kernel: the spec every faster kernel is checked against.
// One decision to know: it materialises the scores one query row at a time ([S] in float64), so memory
// is O(S) whatever L is; the full [L, S] weights exist only when the caller asks for them.

import { referenceBackward } from './backward.js';
import type { AttentionKernel, AttentionOutputs, AttentionProblem } from './types.js';
import { finishScore, headsOf, kvRow, maskAllows, visibleRange } from './visibility.js';

/** Serves every call; plain loops, float64 accumulation, blocked keys skipped (never −1e9). */
export const referenceKernel: AttentionKernel = {
  name: 'reference',
  supports: () => true,
  backward: referenceBackward,
  forwardRows(p: AttentionProblem, outputs: AttentionOutputs, bh: number, i0: number, i1: number): void {
    const { L, S, E, Ev, q, k, v, scale, bias } = p;
    const { out, weights, lse } = outputs;
    const scores = new Float64Array(S); // one row of scores, then of unnormalised weights
    const blocked = new Uint8Array(S); // 1 where the key is blocked (or its bias is −Infinity)
    const acc = new Float64Array(Ev);

    const { b, h, hk } = headsOf(p, bh);

    for (let i = i0; i < i1; i++) {
      const row = bh * L + i; // index of (b, h, i) in [B, Hq, L]
      const qBase = row * E; // q[b, h, i] : [E]
      const [lo, hi] = visibleRange(p, i); // window / causal

      // Pass 1: scaled scores (+ bias) of visible keys, −Infinity for blocked ones; row max.
      let max = Number.NEGATIVE_INFINITY;
      for (let j = 0; j < S; j++) {
        if (j < lo || j > hi || !maskAllows(p, b, h, i, j)) {
          scores[j] = Number.NEGATIVE_INFINITY;
          continue;
        }
        let dot = 0;
        const kRow = kvRow(p, b, hk, j) * E;
        for (let e = 0; e < E; e++) dot += q[qBase + e] * k[kRow + e];
        const s = bias || p.flex ? finishScore(p, b, h, i, j, dot * scale) : dot * scale;
        scores[j] = s;
        max = Math.max(max, s); // Math.max keeps a NaN score visible (a `>` test would drop it)
      }

      // A row whose every key is blocked (mask, window, causal, or −Infinity bias) is all zeros.
      if (max === Number.NEGATIVE_INFINITY) {
        if (weights) weights.fill(0, row * S, row * S + S);
        if (out) out.fill(0, row * Ev, row * Ev + Ev);
        if (lse) lse[row] = Number.NEGATIVE_INFINITY;
        continue;
      }

      // Pass 2: exp(s − max) and the row sum (the whole row is here, so no online rescaling).
      let sum = 0;
      for (let j = 0; j < S; j++) {
        const s = scores[j];
        blocked[j] = s === Number.NEGATIVE_INFINITY ? 1 : 0;
        const w = blocked[j] ? 0 : Math.exp(s - max);
        scores[j] = w;
        sum += w;
      }
      if (lse) lse[row] = max + Math.log(sum);

      // Pass 3: normalise, write weights, accumulate weights · V over the unblocked keys.
      const inv = 1 / sum;
      if (weights) for (let j = 0; j < S; j++) weights[row * S + j] = scores[j] * inv;
      if (out) {
        acc.fill(0);
        for (let j = 0; j < S; j++) {
          if (blocked[j]) continue; // a blocked key's value never reaches the output
          const w = scores[j];
          const vRow = kvRow(p, b, hk, j) * Ev;
          for (let e = 0; e < Ev; e++) acc[e] += w * v[vRow + e];
        }
        for (let e = 0; e < Ev; e++) out[row * Ev + e] = acc[e] * inv;
      }
    }
  },
};
