// Test helpers: fixture loading and an allclose assertion that reports the worst element.

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { expect, vi } from 'vitest';
import { Tensor } from '../src/index.js';

/** A tensor as written by scripts/make_fixtures.py; ±Infinity and NaN are strings. */
export interface FixtureTensor {
  shape: number[];
  data: (number | string)[];
}

export function loadFixture<T>(name: string): T {
  const path = fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));
  return JSON.parse(readFileSync(path, 'utf8')) as T;
}

export function fromFixture(t: FixtureTensor): Tensor {
  return new Tensor(
    Float32Array.from(t.data, (x) => (typeof x === 'string' ? Number(x) : x)),
    t.shape,
  );
}

/** Elementwise tolerance: |actual − expected| ≤ atol + rtol·|expected|. */
export interface Tolerance {
  atol: number;
  rtol: number;
}

/**
 * Why `actual` is not close to `expected` (|a − e| ≤ atol + rtol·|e| elementwise; NaN only where expected
 * is NaN, equal infinities), naming `label` and the worst element; undefined when it is close. The
 * non-throwing form, for checks that collect failures (the test rings in test/rings/).
 */
export function closeFailure(
  label: string,
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  { atol, rtol }: Tolerance,
): string | undefined {
  if (actual.length !== expected.length) {
    return `${label}: length ${actual.length}, expected ${expected.length}`;
  }
  let worst = -1;
  let worstExcess = 0;
  for (let i = 0; i < expected.length; i++) {
    const a = actual[i];
    const e = expected[i];
    if (Number.isNaN(e) || Number.isNaN(a)) {
      if (Number.isNaN(e) !== Number.isNaN(a)) {
        worst = i;
        break;
      }
      continue;
    }
    if (!Number.isFinite(e) || !Number.isFinite(a)) {
      if (a !== e) {
        worst = i;
        break;
      }
      continue;
    }
    const excess = Math.abs(a - e) - (atol + rtol * Math.abs(e));
    if (excess > worstExcess) {
      worstExcess = excess;
      worst = i;
    }
  }
  if (worst < 0) return undefined;
  return `${label} not close at flat index ${worst}: got ${actual[worst]}, expected ${expected[worst]} (atol ${atol}, rtol ${rtol})`;
}

/**
 * Asserts |actual − expected| ≤ atol + rtol·|expected| elementwise (equal shapes; NaN only where expected
 * is NaN, equal infinities). The failure message names the worst element.
 */
export function expectAllClose(
  actual: Tensor,
  expected: Tensor | ArrayLike<number>,
  { atol = 1e-5, rtol = 1e-4, label = '' }: { atol?: number; rtol?: number; label?: string } = {},
): void {
  // Duck-typed, so tensors of the built package (dist/) compare with tensors of src/.
  const isTensor = (x: unknown): x is Tensor =>
    typeof x === 'object' && x !== null && 'shape' in x && 'data' in x;
  const want = isTensor(expected) ? expected.data : expected;
  if (isTensor(expected)) expect(actual.shape, `${label} shape`).toEqual(expected.shape);
  expect(actual.data.length, `${label} length`).toBe(want.length);
  const failure = closeFailure(label, actual.data, want, { atol, rtol });
  if (failure) expect.fail(failure);
}

/**
 * Runs `calls`, async calls of the browser entry (src/index.ts) under Node: there the entry's default
 * runtime has no Web Workers, so they run on one thread and say so, once per process, with console.warn —
 * as they must for users. A test that runs them on purpose asserts that warning here (exactly one, naming
 * `fn`) instead of printing it, so the test run stays quiet while the warning stays tested. The runtime
 * remembers the reasons it said in a global set (src/threads/runner.ts); the reason is forgotten first, so
 * the warning comes during `calls` whatever ran before in this process.
 */
export async function expectOneThreadWarning<T>(fn: string, calls: () => Promise<T>): Promise<T> {
  const reason = 'this runtime has no Web Workers';
  const said = (globalThis as { [key: symbol]: Set<string> | undefined })[
    Symbol.for('qkv.oneThreadWarnings')
  ];
  said?.delete(reason);
  const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
  try {
    const result = await calls();
    expect(warn.mock.calls).toEqual([[`qkv: ${fn} runs on one thread: ${reason}`]]);
    return result;
  } finally {
    warn.mockRestore();
  }
}

/** The error `f` throws (fails the test if it returns). */
export function thrown(f: () => unknown): Error {
  try {
    f();
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a throw');
}
