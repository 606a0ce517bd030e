// The one visibility rule of every kernel, JS and WASM: which key a query sees (band, then mask), and
// how a tile of the score matrix classifies (FlexAttention's BlockMask idea): empty tiles are skipped,
// full tiles need no per-key test, partial tiles test each key. And where key j of a head is stored
// (kvRow/kvRun: dense, a KV cache's strided or ring storage, or a paged pool).
// One decision to know: the band (causal alignment + window) is three numbers, so the WASM kernel
// receives it as data (shift, left, right) and evaluates the same rule; masks stay per-element.

import { EMPTY, FULL, flexScore, flexTileKind, flexVisible } from './flex.js';
import type { AttentionProblem } from './types.js';

/** The fields the band rule reads. */
export type Band = Pick<AttentionProblem, 'S' | 'shift' | 'left' | 'right'>;

/** First and last key visible to query i under the causal/window rule (hi < lo when none is). */
export function visibleRange(p: Band, i: number): [number, number] {
  const pos = i + p.shift;
  return [Math.max(0, pos - p.left), Math.min(p.S - 1, pos + p.right)];
}

/**
 * Whether the mask (if any) and the flex rule (if any: block mask, then mask mod) let query i of pair
 * (b, h) see key j; the band is not checked here.
 */
export function maskAllows(
  p: Pick<AttentionProblem, 'mask' | 'flex'>,
  b: number,
  h: number,
  i: number,
  j: number,
): boolean {
  const m = p.mask;
  if (m && m.data[b * m.sb + h * m.sh + i * m.sl + j * m.ss] === 0) return false;
  return !p.flex || flexVisible(p.flex, b, h, i, j);
}

/** Score s of query i and key j of pair (b, h) with the bias added and the flex score mod applied. */
export function finishScore(
  p: Pick<AttentionProblem, 'bias' | 'flex'>,
  b: number,
  h: number,
  i: number,
  j: number,
  s: number,
): number {
  const bias = p.bias;
  if (bias) {
    const bv = bias.data[b * bias.sb + h * bias.sh + i * bias.sl + j * bias.ss];
    // A key a −∞ bias blocks stays blocked: a score mod never sees it (soft-capping would revive it).
    if (p.flex && bv === Number.NEGATIVE_INFINITY) return bv;
    s += bv;
  }
  return p.flex ? flexScore(p.flex, s, b, h, i, j) : s;
}

/** Whether query i of pair (b, h) sees key j: inside its band and allowed by the mask. */
export function isVisible(
  p: Band & Pick<AttentionProblem, 'mask' | 'flex'>,
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
 * The tile rows [i0, i1) × keys [j0, j1) of pair (b, h): 'empty' when no row sees any of its keys by the
 * band (or by a flex block mask), 'full' when every row sees every key by the band, there is no mask and
 * the flex rule (if any) makes the tile full, else 'partial'. b and h matter only for a flex problem.
 */
export function classifyBlock(
  p: Band & Pick<AttentionProblem, 'mask' | 'flex'>,
  i0: number,
  i1: number,
  j0: number,
  j1: number,
  b = 0,
  h = 0,
): BlockKind {
  const { lo, hi, innerLo, innerHi } = rowsBand(p, i0, i1);
  if (j1 - 1 < lo || j0 > hi) return 'empty';
  const flex = p.flex ? flexTileKind(p.flex, b, h, i0, i1, j0, j1) : FULL;
  if (flex === EMPTY) return 'empty';
  return !p.mask && flex === FULL && j0 >= innerLo && j1 - 1 <= innerHi ? 'full' : 'partial';
}

/** The fields kvRow and kvRun read. */
export type KvShape = Pick<AttentionProblem, 'Hkv' | 'S' | 'kv'>;

/**
 * The storage row of key j of key/value head (b, hk): key j's E numbers start at kvRow·E in `k` and its
 * Ev values at kvRow·Ev in `v`. Dense [B, Hkv, S, ·] unless the problem has a `kv` layout (a cache's
 * strided or ring storage, a paged pool; see KvLayout): this is the one function a layout changes
 * (kernels never compute K/V addresses themselves).
 */
export function kvRow(p: KvShape, b: number, hk: number, j: number): number {
  const kv = p.kv;
  if (kv === undefined) return (b * p.Hkv + hk) * p.S + j;
  if (kv.kind === 'strided') {
    const slot = kv.start + j; // start < stride and j < S ≤ stride: one subtraction wraps the ring
    return (b * p.Hkv + hk) * kv.stride + (slot >= kv.stride ? slot - kv.stride : slot);
  }
  const bs = kv.blockSize;
  const n = Math.floor(j / bs);
  return (kv.blockTable[b * kv.tableStride + n] * p.Hkv + hk) * bs + (j - n * bs);
}

/**
 * How many keys from j on (up to `end`) are stored in consecutive rows: all of them densely; up to the
 * ring's wrap for a strided layout; up to the end of j's block for a paged one (a block boundary ends a
 * run even when the next block happens to follow it). Copy loops go run by run (the WASM kernel's K/V load).
 */
export function kvRun(p: KvShape, _b: number, _hk: number, j: number, end: number): number {
  const kv = p.kv;
  if (kv === undefined) return end - j;
  if (kv.kind === 'strided') {
    const slot = (kv.start + j) % kv.stride;
    return Math.min(end - j, kv.stride - slot);
  }
  return Math.min(end - j, kv.blockSize - (j % kv.blockSize));
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
