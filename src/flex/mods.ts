// The built-in flex mods: each is an ordinary function (call it, compose it, pass it where PyTorch would)
// and also a small program of numbers the kernels read (kernels/flex.ts), so the WASM kernel runs it with
// no JS call per score. One decision to know: positions are the raw indices q and kv, as PyTorch's
// FlexAttention passes them (top-left alignment): for decoding against a longer cache, add the offset.

import {
  EMPTY,
  type FlexMaskProgram,
  type FlexScoreProgram,
  FULL,
  type MaskMod,
  MaskOp,
  PARTIAL,
  type ScoreMod,
  ScoreOp,
  UNBOUNDED,
} from '../kernels/flex.js';
import { alibiSlopes } from '../position/alibi.js';
import { formatValue } from '../shape.js';
import { type Tensor, type TensorLike, toTensor } from '../tensor.js';

export type { MaskMod, ScoreMod } from '../kernels/flex.js';

/** What qkv knows about a built-in mask mod: its name, its program, and what every call must match. */
interface MaskInfo {
  name: string;
  program: FlexMaskProgram;
  /** Longest query/key index the program can answer for (document ids: their count). */
  maxIndex: number;
}

/** The same for a built-in score mod; `heads` is the query head count it was made for (0: any). */
interface ScoreInfo {
  name: string;
  program: FlexScoreProgram;
  heads: number;
}

const maskInfo = new WeakMap<MaskMod, MaskInfo>();
const scoreInfo = new WeakMap<ScoreMod, ScoreInfo>();

/** The built-in description of a mask mod, or undefined for a user's function. */
export function maskInfoOf(mod: MaskMod): MaskInfo | undefined {
  return maskInfo.get(mod);
}

/** The built-in description of a score mod, or undefined for a user's function. */
export function scoreInfoOf(mod: ScoreMod): ScoreInfo | undefined {
  return scoreInfo.get(mod);
}

/** A name for any mod in messages: the built-in's, an expression's source, or the function's name. */
export function modName(mod: MaskMod | ScoreMod): string {
  const info = maskInfo.get(mod as MaskMod) ?? scoreInfo.get(mod as ScoreMod);
  if (info) return info.name;
  const source = (mod as { source?: unknown }).source;
  if (typeof source === 'string') return `'${source}'`;
  return mod.name ? `'${mod.name}'` : '(anonymous function)';
}

function defineMask(fn: MaskMod, name: string, program: FlexMaskProgram, maxIndex = Infinity): MaskMod {
  Object.defineProperty(fn, 'name', { value: name });
  maskInfo.set(fn, { name, program, maxIndex });
  return fn;
}

function defineScore(fn: ScoreMod, name: string, program: FlexScoreProgram, heads = 0): ScoreMod {
  Object.defineProperty(fn, 'name', { value: name });
  scoreInfo.set(fn, { name, program, heads });
  return fn;
}

const NO_INTS = new Int32Array(0);
const op3 = (...xs: number[]) => Int32Array.from(xs);

function checkCount(fn: string, name: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`${fn}: ${name} must be an integer ≥ ${min}, got ${formatValue(value)}`);
  }
  return value;
}

/** Every key visible (PyTorch's noop_mask). */
export const noopMask: MaskMod = defineMask(() => true, 'noopMask', {
  ops: op3(MaskOp.TRUE, 0, 0),
  ints: NO_INTS,
});

/** Query q sees keys kv ≤ q (PyTorch's causal mask: top-left, positions are indices). */
export const causalMask: MaskMod = defineMask((_b, _h, q, kv) => q >= kv, 'causalMask', {
  ops: op3(MaskOp.DIFF, 0, UNBOUNDED),
  ints: NO_INTS,
});

/**
 * A causal sliding window of `w` keys: query q sees q − w < kv ≤ q (itself and the w − 1 keys before it),
 * as `scaledDotProductAttention`'s `window: [w − 1, 0]` and the KV cache's `window: w`.
 */
export function slidingWindowMask(w: number): MaskMod {
  checkCount('slidingWindowMask', 'w', w, 1);
  // Bounds past 2^30 mean "unbounded" to the kernels (int32 programs); no sequence is that long.
  return defineMask((_b, _h, q, kv) => q >= kv && q - kv < w, `slidingWindowMask(${w})`, {
    ops: op3(MaskOp.DIFF, 0, Math.min(w - 1, UNBOUNDED)),
    ints: NO_INTS,
  });
}

/** Prefix-LM: the first `prefixLength` keys are visible to every query, the rest causally (kv < n or kv ≤ q). */
export function prefixLmMask(prefixLength: number): MaskMod {
  checkCount('prefixLmMask', 'prefixLength', prefixLength, 0);
  return defineMask((_b, _h, q, kv) => kv < prefixLength || q >= kv, `prefixLmMask(${prefixLength})`, {
    ops: op3(
      MaskOp.KV_BELOW,
      Math.min(prefixLength, UNBOUNDED),
      0,
      MaskOp.DIFF,
      0,
      UNBOUNDED,
      MaskOp.OR,
      0,
      0,
    ),
    ints: NO_INTS,
  });
}

/**
 * Document masking for packed sequences: query q sees key kv when both are in the same document
 * (docIds[q] = docIds[kv]), in both directions; causal document masking is
 * `andMasks(causalMask, documentMask(ids))`. `docIds` (integers, one per position) must cover every
 * query and key index of the call.
 */
export function documentMask(docIds: TensorLike | Int32Array | readonly number[]): MaskMod {
  const FN = 'documentMask';
  const values: ArrayLike<number> =
    docIds instanceof Int32Array || Array.isArray(docIds)
      ? (docIds as ArrayLike<number>)
      : toTensor(docIds as TensorLike, FN, 'docIds').data;
  const ids = new Int32Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const x = values[i];
    if (!Number.isInteger(x) || x > 2 ** 31 - 1 || x < -(2 ** 31)) {
      throw new RangeError(`${FN}: docIds must be 32-bit integers, got ${formatValue(x)} at index ${i}`);
    }
    ids[i] = x;
  }
  const n = ids.length;
  const fn: MaskMod = (_b, _h, q, kv) => {
    if (q >= n || kv >= n) {
      throw new RangeError(`${FN}: index ${Math.max(q, kv)} is past the ${n} document ids given`);
    }
    return ids[q] === ids[kv];
  };
  return defineMask(fn, `documentMask(${n} ids)`, { ops: op3(MaskOp.SAME_DOC, 0, n), ints: ids }, n);
}

/** Joins programs: concatenates the instructions (shifting data offsets), then combines with `op`. */
function joinPrograms(parts: FlexMaskProgram[], op: number): FlexMaskProgram {
  const ints: number[] = [];
  const ops: number[] = [];
  parts.forEach((p, x) => {
    const offset = ints.length;
    ints.push(...p.ints);
    for (let i = 0; i < p.ops.length; i += 3) {
      const code = p.ops[i];
      ops.push(code, code === MaskOp.SAME_DOC ? p.ops[i + 1] + offset : p.ops[i + 1], p.ops[i + 2]);
    }
    if (x > 0) ops.push(op, 0, 0);
  });
  return { ops: Int32Array.from(ops), ints: Int32Array.from(ints) };
}

function combine(fn: string, mods: MaskMod[], all: boolean): MaskMod {
  mods.forEach((m, i) => {
    if (typeof m !== 'function') {
      throw new TypeError(
        `${fn}: argument ${i} must be a mask mod (b, h, q, kv) => boolean, got ${formatValue(m)}`,
      );
    }
  });
  // No mods: and is "every key" (noopMask), or is "no key", as PyTorch's and_masks() / or_masks().
  if (mods.length === 0) return all ? noopMask : NO_KEY;
  const call: MaskMod = all
    ? (b, h, q, kv) => mods.every((m) => m(b, h, q, kv) === true)
    : (b, h, q, kv) => mods.some((m) => m(b, h, q, kv) === true);
  // Each part must return a boolean, as flexAttention checks of a whole mod.
  const checked: MaskMod = (b, h, q, kv) => {
    for (const m of mods) {
      const r = m(b, h, q, kv) as unknown;
      if (r !== true && r !== false) {
        throw new TypeError(
          `${fn}: ${modName(m)} returned ${formatValue(r)}; a mask mod must return true or false`,
        );
      }
    }
    return call(b, h, q, kv);
  };
  const infos = mods.map((m) => maskInfo.get(m));
  const name = `${fn}(${mods.map(modName).join(', ')})`;
  if (infos.some((x) => !x)) {
    Object.defineProperty(checked, 'name', { value: name });
    return checked;
  }
  const known = infos as MaskInfo[];
  const program = joinPrograms(
    known.map((x) => x.program),
    all ? MaskOp.AND : MaskOp.OR,
  );
  return defineMask(call, name, program, Math.min(...known.map((x) => x.maxIndex)));
}

/** No key visible: orMasks() of nothing. */
const NO_KEY: MaskMod = defineMask(() => false, 'orMasks()', {
  ops: op3(MaskOp.KV_BELOW, 0, 0),
  ints: NO_INTS,
});

/** A mask mod that allows a key when every one of `mods` does (PyTorch's and_masks). */
export function andMasks(...mods: MaskMod[]): MaskMod {
  return combine('andMasks', mods, true);
}

/** A mask mod that allows a key when any of `mods` does (PyTorch's or_masks). */
export function orMasks(...mods: MaskMod[]): MaskMod {
  return combine('orMasks', mods, false);
}

/**
 * ALiBi (Press et al., arXiv:2108.12409) as a score mod: score + slope_h · (kv − q), with the paper's
 * slopes for `numHeads` heads (alibiSlopes). Query positions are indices (top-left), as every flex mod.
 */
export function alibiScore(numHeads: number): ScoreMod {
  checkCount('alibiScore', 'numHeads', numHeads, 1);
  const slopes = alibiSlopes(numHeads).data; // float32: the function and the WASM kernel use the same numbers
  return defineScore(
    (score, _b, h, q, kv) => score + slopes[h] * (kv - q),
    `alibiScore(${numHeads})`,
    { ops: Int32Array.from([ScoreOp.ALIBI, 0, numHeads, 0]), floats: slopes },
    numHeads,
  );
}

/** Soft-capping (Gemma 2, Grok): cap · tanh(score / cap), which keeps every score within (−cap, cap). */
export function softcapScore(cap: number): ScoreMod {
  // The kernels hold cap (and cap·log2 e) as float32: a cap outside [1e-30, 1e30] would not survive that.
  if (typeof cap !== 'number' || !(cap >= 1e-30 && cap <= 1e30)) {
    throw new RangeError(`softcapScore: cap must be a number in [1e-30, 1e30], got ${formatValue(cap)}`);
  }
  const c = Math.fround(cap);
  return defineScore((score) => c * Math.tanh(score / c), `softcapScore(${cap})`, {
    ops: Int32Array.from([ScoreOp.SOFTCAP, 0, 0, 0]),
    floats: Float32Array.of(c),
  });
}

/**
 * A learned-style relative position bias: score + table[R + clamp(kv − q, −R, R)] for a table of 2R + 1
 * numbers (shared by every head), or [H, 2R + 1] (one row per query head). Distances beyond R use the
 * end entries, as T5's buckets do for far keys.
 */
export function relativeBiasScore(
  table: TensorLike | readonly number[] | readonly (readonly number[])[],
): ScoreMod {
  const FN = 'relativeBiasScore';
  const t: Tensor = toTensor(table as TensorLike, FN, 'table');
  if (t.rank !== 1 && t.rank !== 2) {
    throw new RangeError(`${FN}: table must be [2R + 1] or [H, 2R + 1], got shape [${t.shape.join(', ')}]`);
  }
  const width = t.shape[t.rank - 1];
  const heads = t.rank === 2 ? t.shape[0] : 0;
  if (width % 2 !== 1 || (t.rank === 2 && heads === 0)) {
    throw new RangeError(
      `${FN}: each table row must hold 2R + 1 numbers (an odd count: distances −R … R), got shape [${t.shape.join(', ')}]`,
    );
  }
  const data = Float32Array.from(t.data);
  for (let i = 0; i < data.length; i++) {
    if (!Number.isFinite(data[i]) && data[i] !== Number.NEGATIVE_INFINITY) {
      throw new RangeError(
        `${FN}: table entries must be finite (or −Infinity to block), got ${data[i]} at ${i}`,
      );
    }
  }
  const R = (width - 1) / 2;
  const perHead = heads > 0;
  return defineScore(
    (score, _b, h, q, kv) => score + data[(perHead ? h : 0) * width + R + Math.max(-R, Math.min(R, kv - q))],
    `relativeBiasScore(${perHead ? `${heads}×` : ''}${width})`,
    { ops: Int32Array.from([ScoreOp.REL_BIAS, 0, R, perHead ? heads : 1]), floats: data },
    heads,
  );
}

/** Per query block and key block, the min and max document id (for classifying SAME_DOC tiles). */
interface DocRanges {
  qMin: Int32Array;
  qMax: Int32Array;
  kMin: Int32Array;
  kMax: Int32Array;
}

function docRanges(ids: Int32Array, n: number, block: number, count: number): [Int32Array, Int32Array] {
  const lo = new Int32Array(count);
  const hi = new Int32Array(count);
  for (let x = 0; x < count; x++) {
    let a = 2 ** 31 - 1;
    let b = -(2 ** 31);
    for (let i = x * block; i < Math.min(n, (x + 1) * block); i++) {
      a = Math.min(a, ids[i]);
      b = Math.max(b, ids[i]);
    }
    lo[x] = a;
    hi[x] = b;
  }
  return [lo, hi];
}

/**
 * Classifies every tile of an L × S score matrix under a mask program, from the program alone (no call
 * per element): kinds[qb·nk + kb] = EMPTY, PARTIAL or FULL. Exact for each instruction; and/or combine
 * the kinds (a combination the rule cannot decide is PARTIAL, which only costs a per-key test).
 */
export function classifyProgram(
  p: FlexMaskProgram,
  L: number,
  S: number,
  qBlock: number,
  kvBlock: number,
): Uint8Array {
  const nq = Math.ceil(L / qBlock);
  const nk = Math.ceil(S / kvBlock);
  const docs = new Map<number, DocRanges>();
  for (let x = 0; x < p.ops.length; x += 3) {
    if (p.ops[x] !== MaskOp.SAME_DOC) continue;
    const ids = p.ints.subarray(p.ops[x + 1], p.ops[x + 1] + p.ops[x + 2]);
    const [qMin, qMax] = docRanges(ids, L, qBlock, nq);
    const [kMin, kMax] = docRanges(ids, S, kvBlock, nk);
    docs.set(x, { qMin, qMax, kMin, kMax });
  }
  const kinds = new Uint8Array(nq * nk);
  const stack: number[] = [];
  for (let qb = 0; qb < nq; qb++) {
    const i0 = qb * qBlock;
    const i1 = Math.min(L, i0 + qBlock);
    for (let kb = 0; kb < nk; kb++) {
      const j0 = kb * kvBlock;
      const j1 = Math.min(S, j0 + kvBlock);
      stack.length = 0;
      for (let x = 0; x < p.ops.length; x += 3) {
        const a = p.ops[x + 1];
        const b = p.ops[x + 2];
        switch (p.ops[x]) {
          case MaskOp.TRUE:
            stack.push(FULL);
            break;
          case MaskOp.DIFF: {
            const dMin = i0 - (j1 - 1);
            const dMax = i1 - 1 - j0;
            const lo = a <= -UNBOUNDED ? -Infinity : a;
            const hi = b >= UNBOUNDED ? Infinity : b;
            stack.push(dMax < lo || dMin > hi ? EMPTY : dMin >= lo && dMax <= hi ? FULL : PARTIAL);
            break;
          }
          case MaskOp.KV_BELOW:
            stack.push(j1 - 1 < a ? FULL : j0 >= a ? EMPTY : PARTIAL);
            break;
          case MaskOp.SAME_DOC: {
            const d = docs.get(x)!;
            const [qa, qz, ka, kz] = [d.qMin[qb], d.qMax[qb], d.kMin[kb], d.kMax[kb]];
            stack.push(qa === qz && ka === kz && qa === ka ? FULL : qz < ka || kz < qa ? EMPTY : PARTIAL);
            break;
          }
          case MaskOp.AND: {
            const y = stack.pop()!;
            const z = stack.pop()!;
            stack.push(y === EMPTY || z === EMPTY ? EMPTY : y === FULL && z === FULL ? FULL : PARTIAL);
            break;
          }
          case MaskOp.OR: {
            const y = stack.pop()!;
            const z = stack.pop()!;
            stack.push(y === FULL || z === FULL ? FULL : y === EMPTY && z === EMPTY ? EMPTY : PARTIAL);
            break;
          }
          default:
            throw new Error(`classifyProgram: unknown opcode ${p.ops[x]}`);
        }
      }
      kinds[qb * nk + kb] = stack.pop() ?? FULL;
    }
  }
  return kinds;
}
