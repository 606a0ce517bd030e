// The one visibility rule of every kernel, JS and WASM: which key a query sees (band, then mask), and
// how a tile of the score matrix classifies (FlexAttention's BlockMask idea): empty tiles are skipped,
// full tiles need no per-key test, partial tiles test each key. And where key j of a head is stored.
// One decision to know: the band (causal alignment + window) is three numbers, so the WASM kernel
// receives it as data (shift, left, right) and evaluates the same rule; masks stay per-element.

import type { AttentionProblem } from './types.js';

/** The fields the band rule reads. */
export type Band = Pick<AttentionProblem, 'S' | 'shift' | 'left' | 'right'>;

/** First and last key visible to query i under the causal/window rule (hi < lo when none is). */
export function visibleRange(p: Band, i: number): [number, number] {
  const pos = i + p.shift;
  return [Math.max(0, pos - p.left), Math.min(p.S - 1, pos + p.right)];
}

/** Whether the mask (if any) lets query i of pair (b, h) see key j; the band is not checked here. */
export function maskAllows(
  p: Pick<AttentionProblem, 'mask'>,
  b: number,
  h: number,
  i: number,
  j: number,
): boolean {
  const m = p.mask;
  if (!m) return true;
  return m.data[b * m.sb + h * m.sh + i * m.sl + j * m.ss] !== 0;
}

/** Whether query i of pair (b, h) sees key j: inside its band and allowed by the mask. */
export function isVisible(
  p: Band & Pick<AttentionProblem, 'mask'>,
  b: number,
  h: number,
  i: number,
  j: number,
): boolean {
  const pos = i + p.shift;
  return j >= pos - p.left && j <= pos + p.right && j >= 0 && j < p.S && maskAllows(p, b, h, i, j);
}

/**
 * The keys rows [i0, i1) can see between them, [lo, hi], and the keys every one of them sees,
 * [innerLo, innerHi] (empty when innerHi < innerLo). Rows' ranges move right as i grows.
 */
export function rowsBand(
  p: Band,
  i0: number,
  i1: number,
): { lo: number; hi: number; innerLo: number; innerHi: number } {
  const [lo, innerHi] = visibleRange(p, i0);
  const [innerLo, hi] = visibleRange(p, i1 - 1);
  return { lo, hi, innerLo, innerHi };
}

/** How a tile of the score matrix classifies: skip it, compute it without tests, or test each key. */
export type BlockKind = 'empty' | 'full' | 'partial';

/**
 * The tile rows [i0, i1) × keys [j0, j1): 'empty' when no row sees any of its keys by the band,
 * 'full' when every row sees every key by the band and there is no mask, else 'partial'.
 */
export function classifyBlock(
  p: Band & Pick<AttentionProblem, 'mask'>,
  i0: number,
  i1: number,
  j0: number,
  j1: number,
): BlockKind {
  const { lo, hi, innerLo, innerHi } = rowsBand(p, i0, i1);
  if (j1 - 1 < lo || j0 > hi) return 'empty';
  return !p.mask && j0 >= innerLo && j1 - 1 <= innerHi ? 'full' : 'partial';
}

/**
 * The storage row of key j of key/value head (b, hk): key j's E numbers start at kvRow·E in `k` and its
 * Ev values at kvRow·Ev in `v`. Dense [B, Hkv, S, ·] today; this is the one function a cached or paged
 * layout changes (kernels never compute K/V addresses themselves).
 */
export function kvRow(p: Pick<AttentionProblem, 'Hkv' | 'S'>, b: number, hk: number, j: number): number {
  return (b * p.Hkv + hk) * p.S + j;
}

/** How many keys from j on (up to `end`) are stored in consecutive rows (all of them, densely). */
export function kvRun(
  _p: Pick<AttentionProblem, 'Hkv' | 'S'>,
  _b: number,
  _hk: number,
  j: number,
  end: number,
): number {
  return end - j;
}

/** The query head pair (b, h) of `bh` = b·Hq + h, and its key/value head hk (PyTorch's enable_gqa mapping). */
export function headsOf(
  p: Pick<AttentionProblem, 'Hq' | 'Hkv'>,
  bh: number,
): { b: number; h: number; hk: number } {
  const b = Math.floor(bh / p.Hq);
  const h = bh % p.Hq;
  return { b, h, hk: Math.floor(h / (p.Hq / p.Hkv)) };
}
