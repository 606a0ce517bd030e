// Every autograd op against central finite differences, in float64 on small shapes: the op's backward
// must match (f(x + h) − f(x − h)) / 2h of the op's own forward for every input element.

import { describe, expect, it } from 'vitest';
import { attention } from '../src/autograd/attention.js';
import {
  add,
  crossEntropy,
  dropout,
  embedding,
  gelu,
  layerNorm,
  linear,
  scale,
  splitLast,
} from '../src/autograd/ops.js';
import { backward, constant, opResult, parameter, type Var } from '../src/autograd/var.js';
import { Generator, Tensor } from '../src/index.js';

const ATOL = 1e-4;
const RTOL = 1e-3;
const H = 1e-6;

function randomInput(shape: number[], seed: number, std = 1): Var {
  const t = Tensor.randn(shape, { seed, std });
  return parameter(Float64Array.from(t.data), shape);
}

/** Σ out ∘ R for a fixed random R: a scalar whose gradient reaches every output element. */
function project(out: Var, seed: number): Var {
  if (out.size === 1) return out;
  const R = Float64Array.from(Tensor.randn([out.size], { seed }).data);
  let s = 0;
  for (let i = 0; i < out.size; i++) s += out.data[i] * R[i];
  const y = opResult(Float64Array.of(s), [], [out], () => {
    const g = y.grad![0];
    const d = out.gradBuffer();
    for (let i = 0; i < out.size; i++) d[i] += g * R[i];
  });
  return y;
}

/** Checks d(project(f(inputs)))/d(input) against central differences for every element of every input. */
function gradCheck(label: string, inputs: Var[], f: (xs: Var[]) => Var, seed = 99): void {
  const loss = project(f(inputs), seed);
  backward(loss);
  let checked = 0;
  for (const [n, x] of inputs.entries()) {
    if (!x.requiresGrad) continue;
    const analytic = x.grad ?? new Float64Array(x.size);
    for (let i = 0; i < x.size; i++) {
      const keep = x.data[i];
      x.data[i] = keep + H;
      const up = project(f(inputs), seed).data[0];
      x.data[i] = keep - H;
      const down = project(f(inputs), seed).data[0];
      x.data[i] = keep;
      const numeric = (up - down) / (2 * H);
      const err = Math.abs(analytic[i] - numeric);
      if (!(err <= ATOL + RTOL * Math.abs(numeric))) {
        expect.fail(`${label}: input ${n} element ${i}: analytic ${analytic[i]}, numeric ${numeric}`);
      }
      checked++;
    }
  }
  expect(checked).toBeGreaterThan(0);
}

describe('ops vs central finite differences (float64)', () => {
  it('linear with and without bias', () => {
    gradCheck(
      'linear+b',
      [randomInput([2, 3, 4], 1), randomInput([5, 4], 2), randomInput([5], 3)],
      ([x, w, b]) => linear(x, w, b),
    );
    gradCheck('linear', [randomInput([3, 4], 4), randomInput([2, 4], 5)], ([x, w]) => linear(x, w));
  });

  it('add (same shape and broadcast over leading axes), scale', () => {
    gradCheck('add', [randomInput([2, 3], 6), randomInput([2, 3], 7)], ([a, b]) => add(a, b));
    gradCheck('add bcast', [randomInput([2, 3, 4], 8), randomInput([3, 4], 9)], ([a, b]) => add(a, b));
    gradCheck('scale', [randomInput([5], 10)], ([x]) => scale(x, -2.5));
  });

  it('layerNorm', () => {
    gradCheck(
      'layerNorm',
      [randomInput([3, 6], 11), randomInput([6], 12), randomInput([6], 13)],
      ([x, w, b]) => layerNorm(x, w, b),
    );
  });

  it('gelu', () => {
    gradCheck('gelu', [randomInput([12], 14, 2)], ([x]) => gelu(x));
  });

  it('embedding (repeated ids accumulate)', () => {
    const ids = Int32Array.from([2, 0, 2, 3, 1, 2]);
    gradCheck('embedding', [randomInput([4, 3], 15)], ([t]) => embedding(t, ids, [2, 3]));
  });

  it('splitLast', () => {
    gradCheck('splitLast', [randomInput([2, 7], 16)], ([x]) => {
      const [a, b, c] = splitLast(x, [2, 4, 1]); // [2,2], [2,4], [2,1]
      const [b0, b1] = splitLast(b, [2, 2]);
      const c2 = linear(c, constant(Float64Array.of(3, -1), [2, 1])); // [2,2]
      return add(add(add(a, b1), scale(b0, 2)), c2);
    });
  });

  it('dropout (same seed, same mask)', () => {
    gradCheck('dropout', [randomInput([20], 17)], ([x]) => dropout(x, 0.3, new Generator(5)));
  });

  it('crossEntropy with ignored rows', () => {
    const targets = Int32Array.from([1, -1, 4, 0]);
    gradCheck('crossEntropy', [randomInput([4, 5], 18, 2)], ([x]) => crossEntropy(x, targets));
  });

  it('a composite: embedding → layerNorm → linear → gelu → crossEntropy', () => {
    const ids = Int32Array.from([0, 3, 1, 2, 3, 0]);
    gradCheck(
      'composite',
      [randomInput([4, 5], 19), randomInput([5], 20), randomInput([5], 21), randomInput([4, 5], 22)],
      ([table, w, b, head]) =>
        crossEntropy(
          gelu(linear(layerNorm(embedding(table, ids, [6]), w, b), head)),
          Int32Array.from([1, 2, 3, 0, -1, 2]),
        ),
    );
  });
});

describe('attention op vs central finite differences (float64)', () => {
  const shapes = (B: number, L: number, S: number, Hq: number, Hkv: number, E: number, seed: number) => [
    randomInput([B, L, Hq * E], seed),
    randomInput([B, S, Hkv * E], seed + 1),
    randomInput([B, S, Hkv * E], seed + 2),
  ];
  const cases: [string, Var[], Parameters<typeof attention>[3]][] = [
    ['plain', shapes(2, 3, 4, 2, 2, 3, 30), { numHeads: 2 }],
    ['causal bottom-right L>S (dead rows)', shapes(1, 5, 3, 2, 2, 2, 33), { numHeads: 2, causal: true }],
    ['causal top-left', shapes(1, 4, 4, 1, 1, 3, 36), { numHeads: 1, causal: 'top-left' }],
    ['window + scale', shapes(1, 5, 5, 2, 2, 2, 39), { numHeads: 2, window: [1, 1], scale: 0.7 }],
    ['GQA 4 → 2', shapes(1, 3, 4, 4, 2, 2, 42), { numHeads: 4, numKvHeads: 2 }],
    [
      'key padding mask',
      shapes(2, 3, 4, 1, 1, 3, 45),
      { numHeads: 1, mask: Tensor.from([[[[1, 1, 0, 1]]], [[[0, 1, 1, 0]]]]) },
    ],
    ['bias', shapes(1, 3, 4, 2, 2, 2, 48), { numHeads: 2, bias: Tensor.randn([2, 3, 4], { seed: 51 }) }],
  ];
  for (const [name, inputs, options] of cases) {
    it(name, () => {
      gradCheck(`attention ${name}`, inputs, ([q, k, v]) => attention(q, k, v, options).out);
    });
  }

  it('float32 forward matches float64 and dead rows give zeros', () => {
    const [q, k, v] = shapes(1, 5, 3, 2, 2, 2, 60);
    const f64 = attention(q, k, v, { numHeads: 2, causal: true }).out;
    const to32 = (x: Var) => parameter(Float32Array.from(x.data), x.shape);
    const q32 = to32(q);
    const f32 = attention(q32, to32(k), to32(v), { numHeads: 2, causal: true }).out;
    for (let i = 0; i < f64.size; i++) expect(Math.abs(f32.data[i] - f64.data[i])).toBeLessThan(1e-5);
    backward(project(f32, 1));
    expect(Array.from(q32.grad!.subarray(0, 8))).toEqual(new Array(8).fill(0)); // rows 0,1 see no key
    expect(q32.grad!.every(Number.isFinite)).toBe(true);
  });
});
