// Flex attention as the kernels see it (PyTorch's FlexAttention: a mask mod, a score mod, a block mask).
// One decision to know: every built-in mod is both a JS function and a small program of plain numbers
// (FlexMaskProgram / FlexScoreProgram), so JS kernels call the function while the WASM kernel evaluates
// the same rule from data, with no JS call per score; a user's own JS function runs on the JS kernels only.

/** Whether query qIdx of (b, h) may see key kvIdx. */
export type MaskMod = (b: number, h: number, qIdx: number, kvIdx: number) => boolean;
/** A new value for the scaled score of query qIdx and key kvIdx of (b, h); −Infinity blocks the key. */
export type ScoreMod = (score: number, b: number, h: number, qIdx: number, kvIdx: number) => number;

/** Mask program opcodes: each instruction is 3 int32s [op, a, b], evaluated as a stack machine (postfix). */
export const MaskOp = {
  /** Push true. */
  TRUE: 0,
  /** Push a ≤ q − kv ≤ b (bounds may be ±UNBOUNDED): causal is [0, ∞), a causal window of w keys [0, w − 1]. */
  DIFF: 1,
  /** Push kv < a (a prefix of a keys every query sees). */
  KV_BELOW: 2,
  /** Push ints[a + q] = ints[a + kv] (document ids stored at offset a; b = how many). */
  SAME_DOC: 3,
  /** Pop two, push both. */
  AND: 4,
  /** Pop two, push either. */
  OR: 5,
} as const;

/** Score program opcodes: each instruction is 4 int32s [op, a, b, c], applied in order to the score. */
export const ScoreOp = {
  /** score += floats[a + h] · (kv − q) (ALiBi; b = number of heads). */
  ALIBI: 1,
  /** score = cap · tanh(score / cap) with cap = floats[a]. */
  SOFTCAP: 2,
  /**
   * score += floats[a + hh·(2b + 1) + b + clamp(kv − q, −b, b)], b = the largest distance R the table
   * holds, hh = h when c (the table's head count) > 1, else 0.
   */
  REL_BIAS: 3,
} as const;

/** Stands for an unbounded DIFF bound (the WASM kernel reads bounds as int32). */
export const UNBOUNDED = 1 << 30;

/** A built-in mask mod as data. */
export interface FlexMaskProgram {
  /** Instructions [op, a, b] × n. */
  ops: Int32Array;
  /** Integer data the instructions point at (document ids). */
  ints: Int32Array;
}

/** A built-in score mod as data. */
export interface FlexScoreProgram {
  /** Instructions [op, a, b, c] × n. */
  ops: Int32Array;
  /** Float data the instructions point at (slopes, caps, bias tables). */
  floats: Float32Array;
}

/**
 * A block mask's tiles as the kernels read them: kinds[b·sb + h·sh + qb·nk + kb] is 0 (empty: skipped),
 * 1 (partial: the mask mod is tested per key) or 2 (full: every key visible, no test), for query block
 * qb (rows qb·qBlock …) and key block kb (keys kb·kvBlock …). sb/sh are 0 along a broadcast axis.
 */
export interface FlexBlocks {
  qBlock: number;
  kvBlock: number;
  nq: number;
  nk: number;
  kinds: Uint8Array;
  sb: number;
  sh: number;
}

export const EMPTY = 0;
export const PARTIAL = 1;
export const FULL = 2;

/**
 * The flex part of an attention problem. `mask`/`score` are the functions JS kernels call; `maskProgram`
 * /`scoreProgram` the same rules as data, present only for built-in mods (the WASM kernel needs them).
 * Without `mask` every key is visible; without `score` scores are unchanged; without `blocks` every tile
 * is partial (no skipping). `maskName`/`scoreName` name the mods in errors.
 */
export interface FlexSpec {
  mask?: MaskMod;
  score?: ScoreMod;
  maskProgram?: FlexMaskProgram;
  scoreProgram?: FlexScoreProgram;
  blocks?: FlexBlocks;
  maskName: string;
  scoreName: string;
}

/** The kind of the tile rows [i0, i1) × keys [j0, j1) of (b, h): the widest kind of the blocks it touches. */
export function flexTileKind(
  f: FlexSpec,
  b: number,
  h: number,
  i0: number,
  i1: number,
  j0: number,
  j1: number,
): number {
  const bl = f.blocks;
  if (!bl) return f.mask ? PARTIAL : FULL;
  const base = b * bl.sb + h * bl.sh;
  const qb0 = Math.floor(i0 / bl.qBlock);
  const qb1 = Math.floor((i1 - 1) / bl.qBlock);
  const kb0 = Math.floor(j0 / bl.kvBlock);
  const kb1 = Math.floor((j1 - 1) / bl.kvBlock);
  let any = false;
  let all = true;
  for (let qb = qb0; qb <= qb1; qb++) {
    for (let kb = kb0; kb <= kb1; kb++) {
      const kind = bl.kinds[base + qb * bl.nk + kb];
      if (kind !== EMPTY) any = true;
      if (kind !== FULL) all = false;
    }
  }
  if (!any) return EMPTY;
  return all ? FULL : PARTIAL;
}

/** Describes the call site of a mod for errors: "(b=0, h=1, q=5, kv=3)". */
function at(b: number, h: number, i: number, j: number): string {
  return `(b=${b}, h=${h}, q=${i}, kv=${j})`;
}

/** The mask mod's answer for (b, h, i, j), checked: it must return a boolean and not throw. */
export function flexAllows(f: FlexSpec, b: number, h: number, i: number, j: number): boolean {
  const mod = f.mask;
  if (!mod) return true;
  let r: unknown;
  try {
    r = mod(b, h, i, j);
  } catch (err) {
    throw new Error(`flexAttention: maskMod ${f.maskName} threw at ${at(b, h, i, j)}: ${messageOf(err)}`, {
      cause: err,
    });
  }
  if (r === true) return true;
  if (r === false) return false;
  throw new TypeError(
    `flexAttention: maskMod ${f.maskName} returned ${describe(r)} at ${at(b, h, i, j)}; it must return true or false`,
  );
}

/** The score mod applied to score s of (b, h, i, j), checked: a number, NaN only from a NaN score. */
export function flexScore(f: FlexSpec, s: number, b: number, h: number, i: number, j: number): number {
  const mod = f.score;
  if (!mod) return s;
  let r: unknown;
  try {
    r = mod(s, b, h, i, j);
  } catch (err) {
    throw new Error(`flexAttention: scoreMod ${f.scoreName} threw at ${at(b, h, i, j)}: ${messageOf(err)}`, {
      cause: err,
    });
  }
  if (
    typeof r === 'number' &&
    (!Number.isNaN(r) || Number.isNaN(s)) &&
    (r !== Number.POSITIVE_INFINITY || s === r)
  )
    return r;
  throw new TypeError(
    `flexAttention: scoreMod ${f.scoreName} returned ${describe(r)} for score ${s} at ${at(b, h, i, j)}; it must return a number (−Infinity blocks the key; NaN or +Infinity only for such a score)`,
  );
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function describe(r: unknown): string {
  if (typeof r === 'string') return JSON.stringify(r);
  if (typeof r === 'number' || typeof r === 'boolean' || r === undefined || r === null) return String(r);
  return typeof r;
}

/** Evaluates a mask program for (i, j) (the JS twin of the WASM kernel's interpreter; tests compare them). */
export function runMaskProgram(p: FlexMaskProgram, i: number, j: number): boolean {
  const { ops, ints } = p;
  const stack: boolean[] = [];
  for (let x = 0; x < ops.length; x += 3) {
    const a = ops[x + 1];
    const b = ops[x + 2];
    switch (ops[x]) {
      case MaskOp.TRUE:
        stack.push(true);
        break;
      case MaskOp.DIFF: {
        const d = i - j;
        stack.push((a <= -UNBOUNDED || d >= a) && (b >= UNBOUNDED || d <= b));
        break;
      }
      case MaskOp.KV_BELOW:
        stack.push(j < a);
        break;
      case MaskOp.SAME_DOC:
        stack.push(ints[a + i] === ints[a + j]);
        break;
      case MaskOp.AND: {
        const y = stack.pop()!;
        const z = stack.pop()!;
        stack.push(z && y);
        break;
      }
      case MaskOp.OR: {
        const y = stack.pop()!;
        const z = stack.pop()!;
        stack.push(z || y);
        break;
      }
      default:
        throw new Error(`runMaskProgram: unknown opcode ${ops[x]}`);
    }
  }
  return stack.pop() ?? true;
}

/** Applies a score program to s for (h, i, j) (the JS twin of the WASM kernel's; tests compare them). */
export function runScoreProgram(p: FlexScoreProgram, s: number, h: number, i: number, j: number): number {
  const { ops, floats } = p;
  for (let x = 0; x < ops.length; x += 4) {
    const a = ops[x + 1];
    const b = ops[x + 2];
    const c = ops[x + 3];
    switch (ops[x]) {
      case ScoreOp.ALIBI:
        s += floats[a + h] * (j - i);
        break;
      case ScoreOp.SOFTCAP: {
        const cap = floats[a];
        s = cap * Math.tanh(s / cap);
        break;
      }
      case ScoreOp.REL_BIAS: {
        const d = Math.max(-b, Math.min(b, j - i));
        s += floats[a + (c > 1 ? h : 0) * (2 * b + 1) + b + d];
        break;
      }
      default:
        throw new Error(`runScoreProgram: unknown opcode ${ops[x]}`);
    }
  }
  return s;
}

/**
 * d(scoreMod)/d(score) at s for (b, h, i, j): exact for built-in mods (additive ones give 1, soft-capping
 * 1 − tanh²(s/cap)); a JS function's by a central difference in float64 (its step is 1e-4 relative).
 */
export function flexScoreSlope(f: FlexSpec, s: number, b: number, h: number, i: number, j: number): number {
  if (!f.score) return 1;
  const prog = f.scoreProgram;
  if (prog) {
    let slope = 1;
    const { ops, floats } = prog;
    for (let x = 0; x < ops.length; x += 4) {
      if (ops[x] === ScoreOp.SOFTCAP) {
        const cap = floats[ops[x + 1]];
        const t = Math.tanh(s / cap);
        slope *= 1 - t * t;
        s = cap * t;
      } else s = runScoreProgram({ ops: ops.subarray(x, x + 4), floats }, s, h, i, j);
    }
    return slope;
  }
  const step = 1e-4 * Math.max(1, Math.abs(s));
  const up = flexScore(f, s + step, b, h, i, j);
  const down = flexScore(f, s - step, b, h, i, j);
  const d = (up - down) / (2 * step);
  return Number.isFinite(d) ? d : 0;
}

/**
 * Whether query i of (b, h) sees key j under the flex rule: its tile is not empty, and it is full or the
 * mask mod allows it (PyTorch's rule: a full block skips the mask mod, so a block mask decides too).
 */
export function flexVisible(f: FlexSpec, b: number, h: number, i: number, j: number): boolean {
  const bl = f.blocks;
  if (bl) {
    const kind =
      bl.kinds[b * bl.sb + h * bl.sh + Math.floor(i / bl.qBlock) * bl.nk + Math.floor(j / bl.kvBlock)];
    if (kind === EMPTY) return false;
    if (kind === FULL) return true;
  }
  return flexAllows(f, b, h, i, j);
}
