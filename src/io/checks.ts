// Checks shared by every loader of stored models (train/checkpoint.ts, viz/checkpoint.ts, viz/stack.ts,
// text/word.ts for stored word lists):
// a file's metadata and weights are untrusted input, so each loader names what it found in the same words.

import { formatValue } from '../shape.js';

/** A value as an error message shows it: `nothing` for a missing field, else as formatValue prints it. */
export function formatFound(x: unknown): string {
  return x === undefined ? 'nothing' : formatValue(x);
}

/**
 * Checks a vocabulary: an array of distinct strings (a repeated word would make the row a token looks up
 * ambiguous). `fail` adds the caller's name (and file) to the message.
 */
export function checkVocabulary(value: unknown, field: string, fail: (message: string) => never): string[] {
  if (!Array.isArray(value))
    fail(`${field} must be an array of distinct strings, found ${formatFound(value)}`);
  const seen = new Map<string, number>();
  value.forEach((w: unknown, i) => {
    if (typeof w !== 'string') fail(`${field} entry ${i} must be a string, found ${formatFound(w)}`);
    const first = seen.get(w);
    if (first !== undefined) fail(`${field} entry ${i} repeats ${formatFound(w)} (also entry ${first})`);
    seen.set(w, i);
  });
  return value as string[];
}

/** "holds NaN at index 5" for the first NaN or ±Infinity in `data`, or undefined when all are finite. */
export function nonFiniteAt(data: ArrayLike<number>): string | undefined {
  for (let i = 0; i < data.length; i++) {
    // x − x is 0 for every finite x and NaN otherwise: one comparison per weight.
    if (data[i] - data[i] !== 0) return `holds ${data[i]} at index ${i}`;
  }
  return undefined;
}
