// Test helpers: fixture loading and an allclose assertion that reports the worst element.

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
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
  let worst = -1;
  let worstExcess = 0;
  for (let i = 0; i < want.length; i++) {
    const a = actual.data[i];
    const e = want[i];
    if (Number.isNaN(e) || Number.isNaN(a)) {
      if (Number.isNaN(e) !== Number.isNaN(a)) {
        worst = i;
        worstExcess = Number.POSITIVE_INFINITY;
        break;
      }
      continue;
    }
    if (!Number.isFinite(e) || !Number.isFinite(a)) {
      if (a !== e) {
        worst = i;
        worstExcess = Number.POSITIVE_INFINITY;
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
  if (worst >= 0) {
    expect.fail(
      `${label} not close at flat index ${worst}: got ${actual.data[worst]}, expected ${want[worst]} (atol ${atol}, rtol ${rtol})`,
    );
  }
}
