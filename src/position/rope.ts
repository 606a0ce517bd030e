// Rotary position embedding (RoPE, Su et al., arXiv:2104.09864): rotate pairs of q/k features by an
// angle proportional to the position, so q·k depends on the positions only through their difference.
// One decision to know: the default pairs feature d with d + E/2 (rotate-half, as GPT-NeoX and Hugging
// Face LLaMA); `interleaved: true` pairs 2d with 2d + 1 (as GPT-J and the paper).

import { checkBoolean, checkOptionNames, formatShape, formatValue } from '../shape.js';
import { Tensor, type TensorLike, toTensor } from '../tensor.js';

/** Options of applyRope. */
export interface RopeOptions {
  /** Frequency base θ: pair d turns at base^(−2d/E) radians per position. Default 10000. */
  base?: number;
  /** Position of the first row (e.g. the cache length when decoding). Default 0. */
  offset?: number;
  /** Pair features (2d, 2d+1) instead of (d, d + E/2). Default false. */
  interleaved?: boolean;
}

/**
 * Rotates x [..., L, E] (E even): row i is at position offset + i. Returns a new tensor of x's shape.
 *
 * @example
 * const q = applyRope(Tensor.randn([1, 8, 16, 64], { seed: 0 }), { offset: 0 });
 */
export function applyRope(x: TensorLike, options: RopeOptions = {}): Tensor {
  const fn = 'applyRope';
  const t = toTensor(x, fn, 'x');
  checkOptionNames(fn, options, ['base', 'offset', 'interleaved']);
  const { base = 10000, offset = 0, interleaved = false } = options;
  checkBoolean(fn, 'interleaved', interleaved);
  if (t.rank < 2) throw new RangeError(`${fn}: x must be [..., L, E], got ${formatShape(t.shape)}`);
  const [L, E] = t.shape.slice(-2);
  if (E % 2 !== 0)
    throw new RangeError(`${fn}: x has odd E=${E}; RoPE rotates pairs (x ${formatShape(t.shape)})`);
  if (!(typeof base === 'number' && Number.isFinite(base) && base > 0)) {
    throw new RangeError(`${fn}: base must be a positive finite number, got ${formatValue(base)}`);
  }
  if (!Number.isSafeInteger(offset) || offset < 0) {
    throw new RangeError(`${fn}: offset must be a non-negative integer, got ${formatValue(offset)}`);
  }

  const half = E / 2;
  // cos/sin table [L, E/2] in float64, shared by every leading index.
  const cos = new Float64Array(L * half);
  const sin = new Float64Array(L * half);
  for (let d = 0; d < half; d++) {
    const invFreq = base ** ((-2 * d) / E);
    for (let i = 0; i < L; i++) {
      const angle = (offset + i) * invFreq;
      cos[i * half + d] = Math.cos(angle);
      sin[i * half + d] = Math.sin(angle);
    }
  }

  const src = t.data;
  const out = new Float32Array(src.length);
  const rows = L === 0 ? 0 : src.length / E; // every [E] row, over all leading axes
  for (let r = 0; r < rows; r++) {
    const i = r % L;
    const base0 = r * E;
    for (let d = 0; d < half; d++) {
      const a = interleaved ? base0 + 2 * d : base0 + d; // first of the pair
      const b = interleaved ? a + 1 : a + half; // second of the pair
      const c = cos[i * half + d];
      const s = sin[i * half + d];
      out[a] = src[a] * c - src[b] * s;
      out[b] = src[b] * c + src[a] * s;
    }
  }
  return new Tensor(out, t.shape);
}
