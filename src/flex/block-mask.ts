// createBlockMask and BlockMask: a mask mod reduced to tiles (PyTorch's create_block_mask), so attention
// skips empty tiles and runs full ones without a per-key test. One decision to know: built-in mods are
// classified from their program (no call per element, O(tiles)); any other function is called once per
// (b, h, q, kv) — O(B·H·L·S) calls, PyTorch's cost too — so build it once and reuse it.

import { EMPTY, type FlexBlocks, FULL, type MaskMod, PARTIAL } from '../kernels/flex.js';
import { checkOptionNames, formatShape, formatValue } from '../shape.js';
import { classifyProgram, maskInfoOf, modName } from './mods.js';

/** Options of createBlockMask. */
export interface BlockMaskOptions {
  /** Tile size: one number for query and key blocks, or [query rows, keys]; default 128. */
  blockSize?: number | readonly [number, number];
}

const FN = 'createBlockMask';
const GLYPH = ['  ', '░░', '██'] as const; // empty, partial, full

/**
 * A mask mod reduced to tiles of qBlockSize × kvBlockSize: per (b, h) and query block, which key blocks
 * are partial (the mask mod decides per key) and which are full (every key visible). B or H = 1
 * broadcasts over the call's batch or heads.
 */
export class BlockMask {
  /** [B, H, nq]: how many partial key blocks each query block has (PyTorch's kv_num_blocks). */
  readonly kvNumBlocks: Int32Array;
  /** [B, H, nq, nk]: their indices, ascending, padded with 0 (kv_indices). */
  readonly kvIndices: Int32Array;
  /** [B, H, nq]: how many full key blocks (full_kv_num_blocks). */
  readonly fullKvNumBlocks: Int32Array;
  /** [B, H, nq, nk]: their indices (full_kv_indices). */
  readonly fullKvIndices: Int32Array;
  /** Query blocks ⌈L / qBlockSize⌉ and key blocks ⌈S / kvBlockSize⌉. */
  readonly numQBlocks: number;
  readonly numKvBlocks: number;

  /** @internal Use createBlockMask. kinds: [B, H, nq, nk] of 0 empty, 1 partial, 2 full. */
  constructor(
    readonly maskMod: MaskMod,
    readonly B: number,
    readonly H: number,
    readonly L: number,
    readonly S: number,
    readonly qBlockSize: number,
    readonly kvBlockSize: number,
    readonly kinds: Uint8Array,
  ) {
    const nq = Math.ceil(L / qBlockSize);
    const nk = Math.ceil(S / kvBlockSize);
    if (!(kinds instanceof Uint8Array) || kinds.length !== B * H * nq * nk || kinds.some((k) => k > FULL)) {
      throw new RangeError(
        `BlockMask: kinds must be a Uint8Array of ${B}×${H}×${nq}×${nk} = ${B * H * nq * nk} entries of 0 (empty), 1 (partial) or 2 (full), got ${kinds?.length} entries`,
      );
    }
    this.numQBlocks = nq;
    this.numKvBlocks = nk;
    this.kvNumBlocks = new Int32Array(B * H * nq);
    this.fullKvNumBlocks = new Int32Array(B * H * nq);
    this.kvIndices = new Int32Array(B * H * nq * nk);
    this.fullKvIndices = new Int32Array(B * H * nq * nk);
    for (let r = 0; r < B * H * nq; r++) {
      for (let kb = 0; kb < nk; kb++) {
        const kind = kinds[r * nk + kb];
        if (kind === PARTIAL) this.kvIndices[r * nk + this.kvNumBlocks[r]++] = kb;
        else if (kind === FULL) this.fullKvIndices[r * nk + this.fullKvNumBlocks[r]++] = kb;
      }
    }
  }

  /** [B, H, L, S]: the shape of the scores this mask was built for. */
  get shape(): [number, number, number, number] {
    return [this.B, this.H, this.L, this.S];
  }

  /** The kind of tile (qb, kb) of (b, h): 'empty', 'partial' or 'full'. */
  blockKind(b: number, h: number, qb: number, kb: number): 'empty' | 'partial' | 'full' {
    const ok = (x: number, n: number) => Number.isInteger(x) && x >= 0 && x < n;
    if (!ok(b, this.B) || !ok(h, this.H) || !ok(qb, this.numQBlocks) || !ok(kb, this.numKvBlocks)) {
      throw new RangeError(
        `BlockMask.blockKind: (b=${b}, h=${h}, qb=${qb}, kb=${kb}) is outside [${this.B}, ${this.H}, ${this.numQBlocks}, ${this.numKvBlocks}]`,
      );
    }
    const kind = this.kinds[((b * this.H + h) * this.numQBlocks + qb) * this.numKvBlocks + kb];
    return kind === EMPTY ? 'empty' : kind === FULL ? 'full' : 'partial';
  }

  /** Percent of tiles skipped (empty), over every (b, h) (PyTorch's sparsity()). */
  sparsity(): number {
    let empty = 0;
    for (const k of this.kinds) if (k === EMPTY) empty++;
    return this.kinds.length === 0 ? 0 : (100 * empty) / this.kinds.length;
  }

  /**
   * A text picture: one row per query block, two characters per key block (██ full, ░░ partial, blank
   * empty), for the first few (b, h); larger grids are cut at `maxBlocks` with "…".
   */
  toString(maxBlocks = 32): string {
    const lines = [
      `BlockMask(shape=${formatShape(this.shape)}, blockSize=${this.qBlockSize}×${this.kvBlockSize}, sparsity=${this.sparsity().toFixed(2)}%)`,
    ];
    const pairs = Math.min(this.B * this.H, 4);
    for (let x = 0; x < pairs; x++) {
      const b = Math.floor(x / this.H);
      const h = x % this.H;
      if (this.B * this.H > 1) lines.push(`(${b}, ${h})`);
      for (let qb = 0; qb < Math.min(this.numQBlocks, maxBlocks); qb++) {
        let row = '';
        for (let kb = 0; kb < Math.min(this.numKvBlocks, maxBlocks); kb++) {
          row += GLYPH[this.kinds[(x * this.numQBlocks + qb) * this.numKvBlocks + kb]];
        }
        if (this.numKvBlocks > maxBlocks) row += '…';
        lines.push(row.trimEnd());
      }
      if (this.numQBlocks > maxBlocks) lines.push('…');
    }
    if (this.B * this.H > pairs) lines.push(`… ${this.B * this.H - pairs} more (b, h)`);
    return lines.join('\n');
  }

  /** The tiles as the kernels read them, broadcast to a call with B batch items and H query heads. */
  toKernel(): FlexBlocks {
    const nq = this.numQBlocks;
    const nk = this.numKvBlocks;
    return {
      qBlock: this.qBlockSize,
      kvBlock: this.kvBlockSize,
      nq,
      nk,
      kinds: this.kinds,
      sb: this.B === 1 ? 0 : this.H * nq * nk,
      sh: this.H === 1 ? 0 : nq * nk,
    };
  }
}

function checkDim(name: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`${FN}: ${name} must be an integer ≥ ${min}, got ${formatValue(value)}`);
  }
  return value;
}

/**
 * Reduces `maskMod` to a BlockMask for scores [B, H, L, S] (B or H = 1 broadcast over a call's batch or
 * heads): a tile is empty when the mod blocks all its keys, full when it allows all, else partial.
 *
 * @example
 * const mask = createBlockMask(causalMask, 1, 1, 1024, 1024);
 * mask.sparsity(); // ≈ 43.75 (8 × 8 tiles of 128, 28 of them above the diagonal)
 */
export function createBlockMask(
  maskMod: MaskMod,
  B: number,
  H: number,
  L: number,
  S: number,
  options: BlockMaskOptions = {},
): BlockMask {
  if (typeof maskMod !== 'function') {
    throw new TypeError(
      `${FN}: maskMod must be a function (b, h, q, kv) => boolean, got ${formatValue(maskMod)}`,
    );
  }
  if (options === null || typeof options !== 'object') {
    throw new TypeError(`${FN}: options must be an object { blockSize? }, got ${formatValue(options)}`);
  }
  checkOptionNames(FN, options, ['blockSize']);
  checkDim('B', B, 1);
  checkDim('H', H, 1);
  checkDim('L', L, 0);
  checkDim('S', S, 0);
  const size = options.blockSize ?? 128;
  if (typeof size !== 'number' && !(Array.isArray(size) && size.length === 2)) {
    throw new TypeError(`${FN}: blockSize must be a number or [queryRows, keys], got ${formatValue(size)}`);
  }
  const [qBlock, kvBlock] = typeof size === 'number' ? [size, size] : size;
  checkDim('blockSize', qBlock, 1);
  checkDim('blockSize', kvBlock, 1);
  const nq = Math.ceil(L / qBlock);
  const nk = Math.ceil(S / kvBlock);
  if (B * H * nq * nk > 2 ** 28) {
    throw new RangeError(
      `${FN}: ${B}×${H}×${nq}×${nk} tiles is too many; use a larger blockSize (got ${qBlock}×${kvBlock} for L=${L}, S=${S})`,
    );
  }
  const info = maskInfoOf(maskMod);
  if (info && Math.max(L, S) > info.maxIndex) {
    throw new RangeError(
      `${FN}: ${info.name} covers ${info.maxIndex} positions, but L=${L} and S=${S} need ${Math.max(L, S)}`,
    );
  }
  const kinds = new Uint8Array(B * H * nq * nk);
  if (info) {
    // The same program for every (b, h): built-in mask mods do not depend on b or h.
    const one = classifyProgram(info.program, L, S, qBlock, kvBlock);
    for (let x = 0; x < B * H; x++) kinds.set(one, x * nq * nk);
  } else {
    for (let b = 0; b < B; b++)
      for (let h = 0; h < H; h++)
        classifyByCalls(maskMod, kinds, (b * H + h) * nq * nk, b, h, L, S, qBlock, kvBlock);
  }
  return new BlockMask(maskMod, B, H, L, S, qBlock, kvBlock, kinds);
}

/** Classifies the tiles of (b, h) by calling the mod for every element (stopping a tile once it is partial). */
function classifyByCalls(
  mod: MaskMod,
  kinds: Uint8Array,
  base: number,
  b: number,
  h: number,
  L: number,
  S: number,
  qBlock: number,
  kvBlock: number,
): void {
  const nk = Math.ceil(S / kvBlock);
  for (let i0 = 0, qb = 0; i0 < L; i0 += qBlock, qb++) {
    for (let j0 = 0, kb = 0; j0 < S; j0 += kvBlock, kb++) {
      let seen = 0; // bit 1: some key allowed, bit 2: some key blocked
      for (let i = i0; i < Math.min(L, i0 + qBlock) && seen !== 3; i++) {
        for (let j = j0; j < Math.min(S, j0 + kvBlock); j++) {
          const r = call(mod, b, h, i, j);
          seen |= r ? 1 : 2;
          if (seen === 3) break;
        }
      }
      kinds[base + qb * nk + kb] = seen === 1 ? FULL : seen === 2 ? EMPTY : PARTIAL;
    }
  }
}

function call(mod: MaskMod, b: number, h: number, i: number, j: number): boolean {
  let r: unknown;
  try {
    r = mod(b, h, i, j);
  } catch (err) {
    throw new Error(
      `${FN}: maskMod ${modName(mod)} threw at (b=${b}, h=${h}, q=${i}, kv=${j}): ${err instanceof Error ? err.message : String(err)}`,
      { cause: err },
    );
  }
  if (r !== true && r !== false) {
    throw new TypeError(
      `${FN}: maskMod ${modName(mod)} returned ${formatValue(r)} at (b=${b}, h=${h}, q=${i}, kv=${j}); it must return true or false`,
    );
  }
  return r;
}
