// Rotary position embedding (RoPE, Su et al., arXiv:2104.09864): rotate pairs of q/k features by an
// angle proportional to the position, so q·k depends on the positions only through their difference.
// One decision to know: the default pairs feature d with d + E/2 (rotate-half, as GPT-NeoX and Hugging
// Face LLaMA); `interleaved: true` pairs 2d with 2d + 1 (as GPT-J and the paper).
// ropeTable and rotateHalfHeads are the pieces TinyTransformer's `positions: 'rope'` is made of (the block's
// ops.rope, on [B, L, H·E] without splitting heads): the same angles and the same float64 products as
// applyRope, so a block's rotation and applyRope on its split heads agree bit for bit.

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
  const { cos, sin } = ropeTable(L, E, offset, base);

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

/** Positions the shared cos/sin tables may cover for one (E, base): beyond, a table is computed per call. */
const SHARED_TABLE_ELEMENTS = 1 << 20;
/** Shared tables by `${E}:${base}`: rows 0 … n−1 of cos and sin [n, E/2], grown by doubling. */
const tables = new Map<string, { cos: Float64Array; sin: Float64Array; rows: number }>();

function fillTable(
  cos: Float64Array,
  sin: Float64Array,
  from: number,
  rows: number,
  E: number,
  base: number,
  start: number,
): void {
  const half = E / 2;
  for (let d = 0; d < half; d++) {
    const invFreq = base ** ((-2 * d) / E);
    for (let i = from; i < rows; i++) {
      const angle = (start + i) * invFreq;
      cos[i * half + d] = Math.cos(angle);
      sin[i * half + d] = Math.sin(angle);
    }
  }
}

/**
 * cos and sin of RoPE's angles for positions offset … offset + L − 1: [L, E/2] each, float64, row i
 * pair d at angle (offset + i)·base^(−2d/E). Tables for positions up to about 2^20 / (E/2) are computed
 * once per (E, base) and shared (the returned arrays are views: do not write to them). E even, L and
 * offset non-negative integers, base > 0 (not checked here: applyRope and the ops check their inputs).
 */
export function ropeTable(
  L: number,
  E: number,
  offset: number,
  base: number,
): { cos: Float64Array; sin: Float64Array } {
  const half = E / 2;
  const end = offset + L;
  if (end * half > SHARED_TABLE_ELEMENTS) {
    const cos = new Float64Array(L * half);
    const sin = new Float64Array(L * half);
    fillTable(cos, sin, 0, L, E, base, offset);
    return { cos, sin };
  }
  const key = `${E}:${base}`;
  let t = tables.get(key);
  if (!t || t.rows < end) {
    const cap = Math.floor(SHARED_TABLE_ELEMENTS / Math.max(half, 1));
    const rows = Math.max(end, Math.min(Math.max(2 * (t?.rows ?? 0), 64), cap));
    const cos = new Float64Array(rows * half);
    const sin = new Float64Array(rows * half);
    const from = t ? t.rows : 0;
    if (t) {
      cos.set(t.cos);
      sin.set(t.sin);
    }
    fillTable(cos, sin, from, rows, E, base, 0);
    if (!tables.has(key) && tables.size >= 16) tables.clear(); // a handful of head widths in practice
    t = { cos, sin, rows };
    tables.set(key, t);
  }
  return { cos: t.cos.subarray(offset * half, end * half), sin: t.sin.subarray(offset * half, end * half) };
}

/** Float storage the rotation reads and writes (a Tensor's Float32Array, a Var's float32 or float64). */
type FloatArray = Float32Array | Float64Array;

/**
 * Rotate-half RoPE on x [N, L, H·E] (rows of H heads of E features; row n·L + i at table row i), written
 * to y (y = R·x), or with `transpose` accumulated into y (y += Rᵀ·x: the backward, a rotation by −angle).
 * cos and sin are ropeTable's [L, E/2]. Products in float64, stored in y's type.
 */
export function rotateHalfHeads(
  x: FloatArray,
  y: FloatArray,
  L: number,
  H: number,
  E: number,
  cos: Float64Array,
  sin: Float64Array,
  transpose = false,
): void {
  const half = E / 2;
  const W = H * E;
  const rows = W === 0 ? 0 : x.length / W;
  for (let r = 0; r < rows; r++) {
    const t = (r % L) * half;
    for (let h = 0; h < H; h++) {
      const o = r * W + h * E;
      for (let d = 0; d < half; d++) {
        const a = o + d;
        const b = a + half;
        const c = cos[t + d];
        const s = sin[t + d];
        if (transpose) {
          y[a] += x[a] * c + x[b] * s;
          y[b] += x[b] * c - x[a] * s;
        } else {
          y[a] = x[a] * c - x[b] * s;
          y[b] = x[b] * c + x[a] * s;
        }
      }
    }
  }
}

/**
 * Checks the arguments of a block's rope op (x [B, L, H·E], E even, offset a non-negative integer, base a
 * positive finite number), naming `fn`; returns L.
 */
export function checkRopeArgs(
  fn: string,
  shape: readonly number[],
  numHeads: number,
  headDim: number,
  offset: number,
  base: number,
): number {
  if (!(Number.isSafeInteger(numHeads) && numHeads >= 1))
    throw new RangeError(`${fn}: numHeads must be a positive integer, got ${formatValue(numHeads)}`);
  if (!(Number.isSafeInteger(headDim) && headDim >= 2 && headDim % 2 === 0))
    throw new RangeError(
      `${fn}: headDim must be a positive even integer (RoPE rotates pairs of features), got ${formatValue(headDim)}`,
    );
  if (shape.length !== 3 || shape[2] !== numHeads * headDim)
    throw new RangeError(
      `${fn}: x must be [B, L, H·E] = [B, L, ${numHeads}·${headDim}], got ${formatShape(shape)}`,
    );
  if (!Number.isSafeInteger(offset) || offset < 0)
    throw new RangeError(`${fn}: offset must be a non-negative integer, got ${formatValue(offset)}`);
  if (!(typeof base === 'number' && Number.isFinite(base) && base > 0))
    throw new RangeError(`${fn}: base must be a positive finite number, got ${formatValue(base)}`);
  return shape[1];
}
