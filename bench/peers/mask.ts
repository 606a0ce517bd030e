// The additive causal mask the tfjs and ONNX Runtime peers add to their scores (they have no causal flag).
// One decision to know: it uses qkv's bottom-right alignment, which is the usual one when L = S.

/** [L, S]: 0 where key j is visible to query i (j ≤ i + S − L), −Infinity where it is not. */
export function causalBias(L: number, S: number): Float32Array {
  const bias = new Float32Array(L * S);
  for (let i = 0; i < L; i++) bias.fill(Number.NEGATIVE_INFINITY, i * S + i + S - L + 1, (i + 1) * S);
  return bias;
}
