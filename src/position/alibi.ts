// ALiBi (Press et al., arXiv:2108.12409): no position embeddings; each head adds slope·(j − p) to its
// scores, a linear penalty on distance. One decision to know: p = i + S − L (bottom-right, as causal
// `true`), so the bias suits decoding with a cache; pass it as `bias` together with `causal: true`.

import { checkAllocation } from '../shape.js';
import { Tensor } from '../tensor.js';

function checkCount(fn: string, name: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`${fn}: ${name} must be an integer ≥ ${min}, got ${String(value)}`);
  }
}

/**
 * The head slopes [H]: 2^(−8/H), 2^(−16/H), … for a power of two H; otherwise the slopes of the largest
 * power of two m < H followed by every other slope of 2m (the paper's recipe).
 */
export function alibiSlopes(numHeads: number): Tensor {
  checkCount('alibiSlopes', 'numHeads', numHeads, 1);
  checkAllocation('alibiSlopes', 'the slopes', [numHeads], 4);
  const m = 2 ** Math.floor(Math.log2(numHeads));
  // Written straight into the result (a JS array of 2^28 slopes ran out of heap): slope i of m, then
  // slopes 0, 2, 4, … of 2m, that is 2^(−8·(2i + 1)/(2m)).
  const slopes = new Float32Array(numHeads);
  for (let i = 0; i < m; i++) slopes[i] = 2 ** ((-8 * (i + 1)) / m);
  for (let i = m; i < numHeads; i++) slopes[i] = 2 ** ((-8 * (2 * (i - m) + 1)) / (2 * m));
  return new Tensor(slopes, [numHeads]);
}

/** The ALiBi bias [H, L, S]: bias[h, i, j] = slope_h · (j − p) with p = i + S − L. */
export function alibiBias(numHeads: number, L: number, S: number): Tensor {
  checkCount('alibiBias', 'numHeads', numHeads, 1);
  checkCount('alibiBias', 'L', L, 0);
  checkCount('alibiBias', 'S', S, 0);
  checkAllocation('alibiBias', 'the bias', [numHeads, L, S], 4);
  const slopes = alibiSlopes(numHeads).data;
  const out = new Float32Array(numHeads * L * S);
  for (let h = 0; h < numHeads; h++)
    for (let i = 0; i < L; i++)
      for (let j = 0; j < S; j++) out[(h * L + i) * S + j] = slopes[h] * (j - (i + S - L));
  return new Tensor(out, [numHeads, L, S]);
}
