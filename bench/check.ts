// Inputs every implementation gets, and the check each result passes before it is timed.
// One decision to know: small configs compare every element with the qkv reference kernel's output;
// big ones (where the reference would take longer than the row) compare sampled query rows with a
// float64 computation done here, independent of qkv.

import { Tensor } from 'qkv';
import type { Config } from './jobs.js';

/** Tolerances: the kernel target for qkv, a looser one for peers (other summation orders). */
export const QKV_TOLERANCE = { atol: 1e-5, rtol: 1e-4 };
export const PEER_TOLERANCE = { atol: 1e-4, rtol: 1e-3 };

/** Seeded q, k, v: [B, H, L, E], [B, H, S, E], [B, H, S, E]. The same in every process. */
export function makeInputs(c: Config): { q: Tensor; k: Tensor; v: Tensor } {
  return {
    q: Tensor.randn([c.B, c.H, c.L, c.E], { seed: 1 }),
    k: Tensor.randn([c.B, c.H, c.S, c.E], { seed: 2 }),
    v: Tensor.randn([c.B, c.H, c.S, c.E], { seed: 3 }),
  };
}

/** Expected output rows: `rows[r]` is the flat (b·H + h)·L + i index of `values[r·E .. r·E + E)`. */
export interface Expected {
  rows: Int32Array;
  values: Float64Array;
  source: string;
}

/** Up to `perHead` query rows per head, evenly spread and always including the first and last. */
function sampleRows(c: Config, perHead: number): Int32Array {
  const n = Math.min(c.L, perHead);
  const rows: number[] = [];
  for (let bh = 0; bh < c.B * c.H; bh++) {
    for (let t = 0; t < n; t++) rows.push(bh * c.L + (n === 1 ? 0 : Math.round((t * (c.L - 1)) / (n - 1))));
  }
  return Int32Array.from(new Set(rows));
}

/** Exact attention of the sampled rows in float64 (bottom-right causal, as qkv's `causal: true`). */
export function float64Rows(c: Config, q: Float32Array, k: Float32Array, v: Float32Array): Expected {
  const { L, S, E } = c;
  const rows = sampleRows(c, 32);
  const values = new Float64Array(rows.length * E);
  const scores = new Float64Array(S);
  const scale = 1 / Math.sqrt(E);
  rows.forEach((row, r) => {
    const bh = Math.floor(row / L);
    const i = row % L;
    const last = c.causal ? i + S - L : S - 1; // keys 0..last are visible
    let max = Number.NEGATIVE_INFINITY;
    for (let j = 0; j <= last; j++) {
      let dot = 0;
      for (let e = 0; e < E; e++) dot += q[row * E + e] * k[(bh * S + j) * E + e];
      scores[j] = dot * scale;
      if (scores[j] > max) max = scores[j];
    }
    let sum = 0;
    for (let j = 0; j <= last; j++) {
      scores[j] = Math.exp(scores[j] - max);
      sum += scores[j];
    }
    for (let j = 0; j <= last; j++) {
      const w = scores[j] / sum;
      for (let e = 0; e < E; e++) values[r * E + e] += w * v[(bh * S + j) * E + e];
    }
  });
  return { rows, values, source: `float64, ${rows.length} sampled query rows` };
}

/** Every row, from a full output (the qkv reference kernel's). */
export function allRows(c: Config, out: Float32Array, source: string): Expected {
  const rows = new Int32Array(c.B * c.H * c.L).map((_, i) => i);
  return { rows, values: Float64Array.from(out), source };
}

export interface CheckResult {
  ok: boolean;
  maxAbsError: number;
}

/** |got − want| ≤ atol + rtol·|want| on every expected element; a NaN anywhere fails. */
export function compare(
  got: Float32Array,
  expected: Expected,
  E: number,
  tol: { atol: number; rtol: number },
): CheckResult {
  let ok = got.length > 0;
  let maxAbsError = 0;
  let sawNaN = false;
  expected.rows.forEach((row, r) => {
    for (let e = 0; e < E; e++) {
      const want = expected.values[r * E + e];
      const err = Math.abs(got[row * E + e] - want);
      if (!(err <= tol.atol + tol.rtol * Math.abs(want))) ok = false;
      if (Number.isNaN(err)) sawNaN = true;
      else if (err > maxAbsError) maxAbsError = err;
    }
  });
  return { ok, maxAbsError: sawNaN ? Number.NaN : maxAbsError };
}
