// Sinusoidal positional encoding (Vaswani et al. 2017, §3.5), added to token embeddings.
// One decision to know: for an odd dModel the last column is a sine (its pair's cosine would not fit).

import { checkAllocation } from '../shape.js';
import { Tensor } from '../tensor.js';

/**
 * PE[pos, 2i] = sin(pos / 10000^(2i/dModel)), PE[pos, 2i+1] = cos(pos / 10000^(2i/dModel)).
 * Returns [length, dModel].
 */
export function sinusoidalPositionalEncoding(length: number, dModel: number): Tensor {
  const fn = 'sinusoidalPositionalEncoding';
  if (!Number.isSafeInteger(length) || length < 0) {
    throw new RangeError(`${fn}: length must be a non-negative integer, got ${String(length)}`);
  }
  if (!Number.isSafeInteger(dModel) || dModel < 1) {
    throw new RangeError(`${fn}: dModel must be a positive integer, got ${String(dModel)}`);
  }
  checkAllocation(fn, 'the table', [length, dModel], 4);
  const pe = new Float32Array(length * dModel);
  for (let c = 0; c < dModel; c++) {
    const invFreq = 10000 ** (-(c - (c % 2)) / dModel);
    for (let pos = 0; pos < length; pos++) {
      const angle = pos * invFreq;
      pe[pos * dModel + c] = c % 2 === 0 ? Math.sin(angle) : Math.cos(angle);
    }
  }
  return new Tensor(pe, [length, dModel]);
}
