// The Flex tab's presets: each built-in mask and score mod with the expression that means the same thing
// and the qkv code that makes it. One decision to know: a preset uses the built-in mod itself (so the page
// shows the BlockMask the library computes from the mod's program), while an edited expression is
// compiled with compileMask / compileScore and reads the same numbers through named arrays (doc, slope,
// bias), so a preset's expression gives the same mask and scores as the preset.

import {
  alibiScore,
  andMasks,
  causalMask,
  documentMask,
  type MaskMod,
  noopMask,
  prefixLmMask,
  relativeBiasScore,
  type ScoreMod,
  slidingWindowMask,
  softcapScore,
} from 'qkv';

export const MASK_PRESETS = ['none', 'causal', 'sliding', 'prefix', 'document', 'causal-document'] as const;
export const SCORE_PRESETS = ['none', 'alibi', 'softcap', 'relbias'] as const;
export type MaskPreset = (typeof MASK_PRESETS)[number];
export type ScorePreset = (typeof SCORE_PRESETS)[number];

/** The relative bias preset's table: score + BIAS_TABLE[R + clamp(kv − q, −R, R)], shared by every head. */
export const BIAS_RADIUS = 4;
export const BIAS_TABLE: readonly number[] = [-2, -1.5, -1, -0.5, 0, -0.5, -1, -1.5, -2];

export interface MaskParams {
  window: number;
  prefix: number;
  docIds: Int32Array;
}

export interface ScoreParams {
  heads: number;
  cap: number;
}

/** A mod ready to use: the function, and the code that makes it (undefined: the option is left out). */
export interface Built<M> {
  mod: M;
  code: string | undefined;
}

/** The expression equivalent to a mask preset (b, h, q, kv → true/false). */
export function maskExpression(preset: MaskPreset, p: MaskParams): string {
  switch (preset) {
    case 'none':
      return 'true';
    case 'causal':
      return 'q >= kv';
    case 'sliding':
      return `q >= kv && q - kv < ${p.window}`;
    case 'prefix':
      return `kv < ${p.prefix} || q >= kv`;
    case 'document':
      return 'doc[q] == doc[kv]';
    case 'causal-document':
      return 'q >= kv && doc[q] == doc[kv]';
  }
}

/** The expression equivalent to a score preset (score, b, h, q, kv → number). */
export function scoreExpression(preset: ScorePreset, p: ScoreParams): string {
  switch (preset) {
    case 'none':
      return 'score';
    case 'alibi':
      return 'score + slope[h] * (kv - q)';
    case 'softcap':
      return `${p.cap} * tanh(score / ${p.cap})`;
    case 'relbias':
      return `score + bias[${BIAS_RADIUS} + clamp(kv - q, -${BIAS_RADIUS}, ${BIAS_RADIUS})]`;
  }
}

/** The built-in mask mod of a preset (noopMask for none, which the code leaves out). */
export function maskPreset(preset: MaskPreset, p: MaskParams): Built<MaskMod> {
  switch (preset) {
    case 'none':
      return { mod: noopMask, code: undefined };
    case 'causal':
      return { mod: causalMask, code: 'causalMask' };
    case 'sliding':
      return { mod: slidingWindowMask(p.window), code: `slidingWindowMask(${p.window})` };
    case 'prefix':
      return { mod: prefixLmMask(p.prefix), code: `prefixLmMask(${p.prefix})` };
    case 'document':
      return { mod: documentMask(p.docIds), code: 'documentMask(ids)' };
    case 'causal-document':
      return {
        mod: andMasks(causalMask, documentMask(p.docIds)),
        code: 'andMasks(causalMask, documentMask(ids))',
      };
  }
}

/** The built-in score mod of a preset (undefined for none). */
export function scorePreset(preset: ScorePreset, p: ScoreParams): Built<ScoreMod | undefined> {
  switch (preset) {
    case 'none':
      return { mod: undefined, code: undefined };
    case 'alibi':
      return { mod: alibiScore(p.heads), code: `alibiScore(${p.heads})` };
    case 'softcap':
      return { mod: softcapScore(p.cap), code: `softcapScore(${p.cap})` };
    case 'relbias':
      return { mod: relativeBiasScore(BIAS_TABLE), code: 'relativeBiasScore(bias)' };
  }
}

/** A JS single-quoted string literal of `s`. */
export function quote(s: string): string {
  return `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'").replace(/\r?\n/g, ' ')}'`;
}

/** Which of the page's arrays an expression indexes (by name, followed by '['). */
export function arraysUsed(source: string, names: readonly string[]): string[] {
  return names.filter((n) => new RegExp(`\\b${n}\\s*\\[`).test(source));
}

/** Whether an expression reads the head index h (then the block mask is built per head). */
export function readsHead(source: string): boolean {
  return /\bh\b/.test(source);
}

/**
 * Document ids for `n` positions from a list of document lengths ("16,24,24"), repeated until the n
 * positions are filled (each repeat starts new documents). Throws a RangeError with a readable message.
 */
export function docIdsFromLengths(text: string, n: number): Int32Array {
  const parts = text
    .split(/[\s,;]+/)
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const lengths = parts.map(Number);
  if (lengths.length === 0 || lengths.some((x) => !Number.isInteger(x) || x < 1 || x > 100_000)) {
    throw new RangeError(
      `document lengths: write whole numbers ≥ 1 separated by commas, e.g. 16,24,24 (got "${text.trim()}")`,
    );
  }
  const ids = new Int32Array(n);
  let pos = 0;
  let doc = 0;
  while (pos < n) {
    const len = lengths[doc % lengths.length];
    ids.fill(doc, pos, Math.min(n, pos + len));
    pos += len;
    doc++;
  }
  return ids;
}

/** "[0 ×16, 1 ×24, 2 ×24]": run-length text of document ids. */
export function describeDocIds(ids: Int32Array, maxRuns = 8): string {
  const runs: string[] = [];
  let start = 0;
  let count = 0;
  for (let i = 1; i <= ids.length; i++) {
    if (i === ids.length || ids[i] !== ids[start]) {
      count++;
      if (runs.length < maxRuns) runs.push(`${ids[start]} ×${i - start}`);
      start = i;
    }
  }
  return `[${runs.join(', ')}${count > maxRuns ? `, … (${count} documents)` : ''}]`;
}
