// "How was this number computed?": a one-line derivation for a cell of the step-through, built from the
// matrices the worker sent (Q, K, V, scores, …), so a learner can check each step by hand.
// One decision to know: the sums are recomputed here in float64 from the shown float32 matrices, and the
// last term always prints the value the library produced, so any disagreement would be visible.

import type { StepId } from 'qkv/viz';
import type { TraceResult } from './protocol.js';

const n = (x: number) =>
  Number.isFinite(x) ? String(Number(x.toPrecision(4))).replace('-', '−') : x > 0 ? '+∞' : '−∞';
const paren = (x: number) => (x < 0 ? `(${n(x)})` : n(x));

/** Explainers per step id, for the step-through cards. */
export function derivations(t: TraceResult): Partial<Record<StepId, (row: number, col: number) => string>> {
  const get = (id: StepId) => t.steps.find((s) => s.id === id)?.spec;
  const L = t.tokens.length;
  const q = get('q')!;
  const k = get('k')!;
  const v = get('v')!;
  const scores = get('scores')!;
  const scaled = get('scaled')!;
  const masked = get('masked')!;
  const weights = get('weights')!;
  const output = get('output')!;
  const dK = q.cols;
  const tok = (i: number) => `“${t.tokens[i]}”`;
  const out: Partial<Record<StepId, (row: number, col: number) => string>> = {
    scores: (i, j) => {
      const terms: string[] = [];
      for (let c = 0; c < Math.min(3, dK); c++)
        terms.push(`${paren(q.values[i * dK + c])}·${paren(k.values[j * dK + c])}`);
      return `Q·Kᵀ[${tok(i)}, ${tok(j)}] = Σ over d_k = ${dK} of q·k = ${terms.join(' + ')}${dK > 3 ? ' + …' : ''} = ${n(scores.values[i * L + j])}`;
    },
    scaled: (i, j) =>
      `${n(scores.values[i * L + j])} × ${t.switches.scaled ? `1/√${dK}` : '1 (scaling off)'} = ${n(scaled.values[i * L + j])}`,
    masked: (i, j) => {
      if (Number.isFinite(masked.values[i * L + j]))
        return `visible: ${n(masked.values[i * L + j])} stays as it is`;
      if (t.switches.blockedQuery === i) return `query ${tok(i)} is fully masked: every key becomes −∞`;
      return `key ${j} comes after query ${i} (causal mask): −∞`;
    },
    weights: (i, j) => {
      const row = Array.from({ length: L }, (_, c) => masked.values[i * L + c]);
      const max = Math.max(...row);
      if (max === Number.NEGATIVE_INFINITY) {
        return `every key is masked: qkv gives 0 (the article's −1e9 would give 1/${L} = ${n(1 / L)})`;
      }
      const z = row.reduce((a, x) => a + Math.exp(x - max), 0);
      const m = row[j];
      if (m === Number.NEGATIVE_INFINITY) return 'exp(−∞) = 0: a masked key gets no weight';
      return `exp(${n(m)} − ${paren(max)}) / Σ_j exp(s_j − ${paren(max)}) = ${n(Math.exp(m - max))} / ${n(z)} = ${n(weights.values[i * L + j])}`;
    },
    output: (i, c) => {
      const dV = v.cols;
      const terms = Array.from({ length: L }, (_, j) => ({
        j,
        w: weights.values[i * L + j],
        x: v.values[j * dV + c],
      }))
        .sort((a, b) => Math.abs(b.w * b.x) - Math.abs(a.w * a.x))
        .slice(0, 2)
        .map(({ j, w, x }) => `${n(w)}·${paren(x)} (${t.tokens[j]})`);
      return `Σ_j weight[${tok(i)}, j] · V[j, ${c}] = ${terms.join(' + ')}${L > 2 ? ' + …' : ''} = ${n(output.values[i * dV + c])}`;
    },
  };
  const e = get('embeddings');
  const p = get('positions');
  const x = get('input');
  if (e && p && x) {
    out.input = (i, c) => {
      const D = x.cols;
      return `E + PE = ${n(e.values[i * D + c])} + ${paren(p.values[i * D + c])} = ${n(x.values[i * D + c])}`;
    };
  }
  return out;
}
