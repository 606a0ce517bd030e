// attentionBackward (the public path) against PyTorch autograd (float64 goldens, every option), its edge
// rows and errors, and the flash-style backward against the reference backward on seeded random shapes
// with tile sizes that do not divide L or S (conformance uses the default tiles only).

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { planAttention } from '../src/attention/plan.js';
import { type AttentionOptions, attentionBackward, type CausalOption, Tensor } from '../src/index.js';
import { type AttentionGrads, referenceBackward } from '../src/kernels/backward.js';
import { flashBackwardWith } from '../src/kernels/backward-flash.js';
import { referenceKernel } from '../src/kernels/reference.js';
import { KERNEL_NAMES, registeredKernels } from '../src/kernels/registry.js';
import { type BackwardProblem, backwardAll, forwardAll } from '../src/kernels/types.js';
import { expectAllClose, fromFixture } from './helpers.js';
import { backwardGoldens, optionsOf } from './rings/golden.js';

const TOL = { atol: 1e-5, rtol: 1e-4 };
const fixture = backwardGoldens;

function expectFinite(t: Tensor, label: string): void {
  const bad = t.data.findIndex((x) => !Number.isFinite(x));
  expect(bad, `${label} has a non-finite value at ${bad}`).toBe(-1);
}

/**
 * The `kernel` option values attentionBackward can serve: 'auto' and each registered kernel whose backward
 * serves its float64 problems (the WASM backward is float32 only: training's).
 */
const PUBLIC_BACKWARD_KERNELS = KERNEL_NAMES.filter(
  (name) =>
    name === 'auto' ||
    registeredKernels().some(
      (k) =>
        k.name === name &&
        k.backward?.supports({ precision: 'float64' } as BackwardProblem, {
          dOut: new Float32Array(0),
          out: new Float32Array(0),
          lse: new Float64Array(0),
        }) === true,
    ),
);

// Each kernel's own backward against these goldens is ring one (test/golden.test.ts); here the public
// function, its option handling and its forward-then-backward plumbing.
describe(`public path: attentionBackward vs PyTorch ${fixture.torch} autograd`, () => {
  it('covers every option', () => {
    expect(fixture.cases.length).toBeGreaterThanOrEqual(25);
    const names = fixture.cases.map((c) => c.name).join(' | ');
    for (const word of [
      'mask',
      'bias',
      'top-left',
      'bottom-right',
      'window',
      'scale',
      'GQA',
      'MQA',
      'fully',
    ]) {
      expect(names).toContain(word);
    }
  });

  for (const kernel of PUBLIC_BACKWARD_KERNELS) {
    for (const c of fixture.cases) {
      it(`kernel: '${kernel}': ${c.name}`, () => {
        const g = attentionBackward(
          fromFixture(c.q),
          fromFixture(c.k),
          fromFixture(c.v),
          fromFixture(c.dOut),
          { ...optionsOf(c), kernel },
        );
        for (const name of ['dq', 'dk', 'dv'] as const) {
          expectFinite(g[name], name);
          expectAllClose(g[name], fromFixture(c[name]), { ...TOL, label: `${c.name} ${name}` });
        }
        if (c.dbias) {
          expect(g.dbias).toBeDefined();
          expectAllClose(g.dbias!, fromFixture(c.dbias), { ...TOL, label: `${c.name} dbias` });
        } else {
          expect(g.dbias).toBeUndefined();
        }
      });
    }
  }
});

describe('attentionBackward edge rows and errors', () => {
  it('a fully blocked row gives exactly zero gradients, never NaN', () => {
    const q = Tensor.randn([1, 1, 3, 4], { seed: 1 });
    const k = Tensor.randn([1, 1, 3, 4], { seed: 2 });
    const v = Tensor.randn([1, 1, 3, 4], { seed: 3 });
    const dOut = Tensor.randn([1, 1, 3, 4], { seed: 4 });
    const mask = Tensor.from([
      [1, 1, 0],
      [0, 0, 0],
      [1, 0, 1],
    ]);
    for (const kernel of ['reference', 'flash'] as const) {
      const { dq, dk, dv } = attentionBackward(q, k, v, dOut, { mask, kernel });
      for (const t of [dq, dk, dv]) expectFinite(t, kernel);
      expect(Array.from(dq.data.subarray(4, 8))).toEqual([0, 0, 0, 0]); // row 1 sees nothing
      // Key 1 is seen only by row 0; key 2 only by row 2: both still get gradients.
      expect(dk.data.subarray(4, 8).some((x) => x !== 0)).toBe(true);
    }
    // Everything blocked: all zero.
    const none = attentionBackward(q, k, v, dOut, { mask: Tensor.zeros([3, 3]) });
    for (const t of [none.dq, none.dk, none.dv]) expect(t.data.every((x) => x === 0)).toBe(true);
  });

  it('float16 inputs give the gradients of their float32 values (gradients are float32)', () => {
    const [q, k, v] = [1, 2, 3].map((seed) => Tensor.randn([1, 2, 5, 4], { seed }).to('float16'));
    const dOut = Tensor.randn([1, 2, 5, 4], { seed: 4 });
    const half = attentionBackward(q, k, v, dOut, { causal: true });
    const wide = attentionBackward(q.to('float32'), k.to('float32'), v.to('float32'), dOut, { causal: true });
    for (const name of ['dq', 'dk', 'dv'] as const) {
      expect(half[name].dtype).toBe('float32');
      expect(half[name].data).toEqual(wide[name].data);
    }
  });

  it('names the function and shapes in its errors', () => {
    const q = Tensor.randn([2, 3, 4]);
    expect(() => attentionBackward(q, q, q, Tensor.zeros([2, 3, 5]))).toThrow(
      /attentionBackward: dOut has shape \[2,3,5\] but the output has shape \[2,3,4\] \(query \[2,3,4\]/,
    );
    expect(() => attentionBackward(q, Tensor.randn([2, 3, 5]), q, q)).toThrow(
      /attentionBackward: key has E=5/,
    );
    expect(() => attentionBackward(q, q, q, q, { casual: true } as AttentionOptions)).toThrow(
      /attentionBackward: unknown option 'casual'/,
    );
  });

  it('dbias is summed over the axes the bias was broadcast along', () => {
    const q = Tensor.randn([2, 2, 3, 4], { seed: 5 });
    const k = Tensor.randn([2, 2, 5, 4], { seed: 6 });
    const v = Tensor.randn([2, 2, 5, 4], { seed: 7 });
    const dOut = Tensor.randn([2, 2, 3, 4], { seed: 8 });
    const full = Tensor.zeros([2, 2, 3, 5]);
    const small = Tensor.zeros([5]);
    const a = attentionBackward(q, k, v, dOut, { bias: full }).dbias!;
    const b = attentionBackward(q, k, v, dOut, { bias: small }).dbias!;
    expect(b.shape).toEqual([5]);
    const summed = new Float32Array(5);
    for (let t = 0; t < a.size; t++) summed[t % 5] += a.data[t];
    expectAllClose(b, summed, { atol: 1e-5, rtol: 1e-4 });
  });
});

// ---------------------------------------------------------------------------------------------------------
// flash-style backward == reference backward on random problems (float64 arrays, so the comparison is tight)

interface RandomCase {
  B: number;
  Hkv: number;
  group: number;
  L: number;
  S: number;
  E: number;
  Ev: number;
  blockQ: number;
  blockK: number;
  causal: CausalOption;
  window: [number, number] | undefined;
  withMask: boolean;
  withBias: boolean;
  scale: number | undefined;
  seed: number;
}

const randomCase: fc.Arbitrary<RandomCase> = fc.record({
  B: fc.integer({ min: 1, max: 2 }),
  Hkv: fc.integer({ min: 1, max: 2 }),
  group: fc.integer({ min: 1, max: 3 }),
  L: fc.integer({ min: 1, max: 19 }),
  S: fc.integer({ min: 1, max: 19 }),
  E: fc.integer({ min: 1, max: 6 }),
  Ev: fc.integer({ min: 1, max: 5 }),
  blockQ: fc.integer({ min: 1, max: 7 }),
  blockK: fc.integer({ min: 1, max: 7 }),
  causal: fc.constantFrom<CausalOption>(false, true, 'top-left'),
  window: fc.option(fc.tuple(fc.integer({ min: -1, max: 4 }), fc.integer({ min: -1, max: 4 })), {
    nil: undefined,
  }),
  withMask: fc.boolean(),
  withBias: fc.boolean(),
  scale: fc.option(fc.double({ min: 0.05, max: 2, noNaN: true }), { nil: undefined }),
  seed: fc.integer({ min: 0, max: 0x7fffffff }),
});

function runBoth(c: RandomCase): { ref: AttentionGrads; flash: AttentionGrads } {
  const Hq = c.Hkv * c.group;
  let seed = c.seed;
  const q = Tensor.randn([c.B, Hq, c.L, c.E], { seed: seed++ });
  const k = Tensor.randn([c.B, c.Hkv, c.S, c.E], { seed: seed++ });
  const v = Tensor.randn([c.B, c.Hkv, c.S, c.Ev], { seed: seed++ });
  const dOut = Float64Array.from(Tensor.randn([c.B, Hq, c.L, c.Ev], { seed: seed++ }).data);
  const options: AttentionOptions = { causal: c.causal, scale: c.scale };
  if (c.window) options.window = c.window[1] > 0 && c.causal ? [c.window[0], 0] : c.window;
  if (c.withMask) {
    const m = Tensor.rand([c.B, 1, c.L, c.S], { seed: seed++ });
    options.mask = new Tensor(
      m.data.map((x) => (x < 0.3 ? 0 : 1)),
      m.shape,
    );
  }
  if (c.withBias) {
    const b = Tensor.randn([Hq, c.L, c.S], { seed: seed++ });
    options.bias = new Tensor(
      b.data.map((x) => (x < -1.5 ? Number.NEGATIVE_INFINITY : x)),
      b.shape,
    );
  }
  const { problem } = planAttention('test', q, k, v, options);
  const wide = {
    ...problem,
    q: Float64Array.from(q.data),
    k: Float64Array.from(k.data),
    v: Float64Array.from(v.data),
  };
  const grads = (): AttentionGrads => ({
    dq: new Float64Array(q.size),
    dk: new Float64Array(k.size),
    dv: new Float64Array(v.size),
    dbias: c.withBias ? new Float64Array(c.L * c.S * Hq) : undefined,
  });
  const out = new Float64Array(c.B * Hq * c.L * c.Ev);
  const lse = new Float64Array(c.B * Hq * c.L);
  // The reference kernel only indexes its arrays: fed float64, it is an exact float64 forward.
  forwardAll(referenceKernel, wide as unknown as typeof problem, {
    out: out as unknown as Float32Array,
    lse: lse as unknown as Float32Array,
  });
  const ref = grads();
  backwardAll(referenceBackward, wide, { dOut }, ref);
  const flash = grads();
  backwardAll(flashBackwardWith({ blockQ: c.blockQ, blockK: c.blockK }), wide, { dOut, out, lse }, flash);
  return { ref, flash };
}

describe('flash-style backward equals the reference backward', () => {
  it('on random shapes, options and tile sizes', () => {
    fc.assert(
      fc.property(randomCase, (c) => {
        const { ref, flash } = runBoth(c);
        for (const name of ['dq', 'dk', 'dv', 'dbias'] as const) {
          const a = ref[name];
          const b = flash[name];
          if (!a || !b) continue;
          for (let t = 0; t < a.length; t++) {
            if (!Number.isFinite(b[t]) || Math.abs(a[t] - b[t]) > 1e-9 + 1e-7 * Math.abs(a[t])) {
              throw new Error(`${name}[${t}]: reference ${a[t]}, flash ${b[t]}`);
            }
          }
        }
      }),
      { numRuns: 150, seed: 42 },
    );
  });
});

it('the default backward stays exact for large logits (its forward takes a float64 log-sum-exp)', () => {
  const q = Tensor.randn([1, 2, 40, 16], { seed: 1 });
  const k = Tensor.randn([1, 2, 40, 16], { seed: 2 });
  const v = Tensor.randn([1, 2, 40, 16], { seed: 3 });
  const dOut = Tensor.randn([1, 2, 40, 16], { seed: 4 });
  for (const scale of [300, 3000]) {
    const want = attentionBackward(q, k, v, dOut, { scale, kernel: 'reference' });
    const got = attentionBackward(q, k, v, dOut, { scale });
    for (const name of ['dq', 'dk', 'dv'] as const) {
      let worst = 0;
      for (let i = 0; i < want[name].data.length; i++) {
        worst = Math.max(
          worst,
          Math.abs(got[name].data[i] - want[name].data[i]) / (1 + Math.abs(want[name].data[i])),
        );
      }
      expect(worst, `${name} at scale ${scale}`).toBeLessThan(1e-4);
    }
  }
});
