// Property tests of scaledDotProductAttention / attentionWeights over seeded random shapes and options.
// Every expectation is computed independently in this file (masks from their definitions, weights·v by
// hand), so each property fails if the library drifts from the documented semantics.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type AttentionOptions,
  attentionWeights,
  type CausalOption,
  Generator,
  scaledDotProductAttention,
  Tensor,
} from '../src/index.js';
import { expectAllClose } from './helpers.js';

const RUNS = 80;
const TOL = { atol: 1e-5, rtol: 1e-4 };

// ---------------------------------------------------------------------------------------------------------
// Shapes

interface Case {
  rank: 2 | 3 | 4;
  B: number;
  Hq: number;
  Hkv: number;
  L: number;
  S: number;
  E: number;
  Ev: number;
  seed: number;
}

/** [Hq, Hkv] with Hq a multiple of Hkv and Hq ≤ 4. */
const HEAD_PAIRS: [number, number][] = [
  [1, 1],
  [2, 1],
  [2, 2],
  [3, 1],
  [3, 3],
  [4, 1],
  [4, 2],
  [4, 4],
];

const seedArb = fc.integer({ min: 0, max: 0x7fffffff });

function caseArb(ranks: (2 | 3 | 4)[] = [2, 3, 4]): fc.Arbitrary<Case> {
  return fc
    .record({
      rank: fc.constantFrom(...ranks),
      B: fc.integer({ min: 1, max: 2 }),
      heads: fc.constantFrom(...HEAD_PAIRS),
      L: fc.integer({ min: 1, max: 9 }),
      S: fc.integer({ min: 1, max: 9 }),
      E: fc.integer({ min: 1, max: 6 }),
      Ev: fc.integer({ min: 1, max: 6 }),
      seed: seedArb,
    })
    .map(({ rank, B, heads, ...rest }) => ({
      rank,
      B: rank === 2 ? 1 : B,
      Hq: rank === 4 ? heads[0] : 1,
      Hkv: rank === 4 ? heads[1] : 1,
      ...rest,
    }));
}

function qShape(c: Case): number[] {
  return c.rank === 4 ? [c.B, c.Hq, c.L, c.E] : c.rank === 3 ? [c.B, c.L, c.E] : [c.L, c.E];
}
function kvShape(c: Case, S: number, width: number): number[] {
  return c.rank === 4 ? [c.B, c.Hkv, S, width] : c.rank === 3 ? [c.B, S, width] : [S, width];
}
function weightsShape(c: Case): number[] {
  return [...qShape(c).slice(0, -1), c.S];
}

interface Inputs {
  q: Tensor;
  k: Tensor;
  v: Tensor;
}

function inputs(c: Case): Inputs {
  return {
    q: Tensor.randn(qShape(c), { seed: c.seed }),
    k: Tensor.randn(kvShape(c, c.S, c.E), { seed: c.seed + 1 }),
    v: Tensor.randn(kvShape(c, c.S, c.Ev), { seed: c.seed + 2 }),
  };
}

// ---------------------------------------------------------------------------------------------------------
// Options: masks and biases of random broadcastable shapes, causal alignment, windows

interface TensorSpec {
  /** Leading axes of the weights' shape to drop (the S axis is always kept). */
  drop: number;
  /** Per kept axis: full size (true) or 1 (false). */
  keep: boolean[];
  seed: number;
}
interface MaskSpec extends TensorSpec {
  /** Probability of a 1 per element. */
  density: number;
  /** Probability that a whole row (last axis) is zeroed. */
  rowBlock: number;
}

const tensorSpecFields = {
  drop: fc.integer({ min: 0, max: 3 }),
  keep: fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
  seed: seedArb,
};
const maskSpecArb: fc.Arbitrary<MaskSpec> = fc.record({
  ...tensorSpecFields,
  density: fc.constantFrom(0, 0.3, 0.7, 0.9, 1),
  rowBlock: fc.constantFrom(0, 0, 0.3),
});
const biasSpecArb: fc.Arbitrary<TensorSpec> = fc.record(tensorSpecFields);

function specShape(spec: TensorSpec, target: number[]): number[] {
  const drop = Math.min(spec.drop, target.length - 1);
  return target.slice(drop).map((d, i) => (spec.keep[i] ? d : 1));
}

function buildMask(spec: MaskSpec, target: number[]): Tensor {
  const shape = specShape(spec, target);
  const g = new Generator(spec.seed);
  const t = Tensor.zeros(shape);
  // Any nonzero value means "may attend": mostly 1, sometimes 2 or −0.5.
  for (let i = 0; i < t.size; i++) {
    const u = g.random();
    t.data[i] = g.random() < spec.density ? (u < 0.8 ? 1 : u < 0.9 ? 2 : -0.5) : 0;
  }
  const last = shape[shape.length - 1];
  for (let r = 0; r * last < t.size; r++) {
    if (g.random() < spec.rowBlock) t.data.fill(0, r * last, (r + 1) * last);
  }
  return t;
}

function buildBias(spec: TensorSpec, target: number[]): Tensor {
  return Tensor.randn(specShape(spec, target), { seed: spec.seed, std: 2 });
}

/** Reads `t` broadcast (NumPy rules) to the full `target` shape, written out densely. */
function expandTo(t: Tensor, target: number[]): Float32Array {
  const size = target.reduce((a, b) => a * b, 1);
  const out = new Float32Array(size);
  const r = target.length;
  const off = r - t.rank;
  const tStrides = t.strides;
  const idx = new Array<number>(r).fill(0);
  for (let flat = 0; flat < size; flat++) {
    let rem = flat;
    for (let a = r - 1; a >= 0; a--) {
      idx[a] = rem % target[a];
      rem = Math.floor(rem / target[a]);
    }
    let o = 0;
    for (let a = 0; a < t.rank; a++) o += (t.shape[a] === 1 ? 0 : idx[a + off]) * tStrides[a];
    out[flat] = t.data[o];
  }
  return out;
}

const causalArb = fc.constantFrom<CausalOption>(false, true, 'bottom-right', 'top-left');
const windowArb = fc.tuple(fc.integer({ min: -1, max: 10 }), fc.integer({ min: -1, max: 10 }));

interface OptionSpec {
  mask: MaskSpec | null;
  bias: TensorSpec | null;
  causal: CausalOption;
  window: [number, number] | null;
}
const optionSpecArb: fc.Arbitrary<OptionSpec> = fc.record({
  mask: fc.option(maskSpecArb, { freq: 3 }),
  bias: fc.option(biasSpecArb),
  causal: causalArb,
  window: fc.option(windowArb),
});

function buildOptions(c: Case, spec: OptionSpec): AttentionOptions {
  const target = weightsShape(c);
  const options: AttentionOptions = {};
  if (spec.mask) options.mask = buildMask(spec.mask, target);
  if (spec.bias) options.bias = buildBias(spec.bias, target);
  if (spec.causal !== false) options.causal = spec.causal;
  if (spec.window) options.window = spec.window;
  return options;
}

/**
 * Which keys each query row may see, [rows, S] flattened like the weights, from the documented rules:
 * p = i + S − L (no causal, true, 'bottom-right') or p = i ('top-left'); p − left ≤ j ≤ p + right with
 * −1 = unbounded; causal clamps right to 0; mask ≠ 0; bias ≠ −Infinity.
 */
function visibility(c: Case, options: AttentionOptions): Uint8Array {
  const target = weightsShape(c);
  const { L, S } = c;
  const rows = target.slice(0, -1).reduce((a, b) => a * b, 1);
  const mask = options.mask ? expandTo(options.mask as Tensor, target) : undefined;
  const bias = options.bias ? expandTo(options.bias as Tensor, target) : undefined;
  const causal = options.causal ?? false;
  const shift = causal === 'top-left' ? 0 : S - L;
  const unb = (w: number) => (w === -1 ? Number.POSITIVE_INFINITY : w);
  const left = options.window ? unb(options.window[0]) : Number.POSITIVE_INFINITY;
  let right = options.window ? unb(options.window[1]) : Number.POSITIVE_INFINITY;
  if (causal) right = Math.min(right, 0);
  const vis = new Uint8Array(rows * S);
  for (let r = 0; r < rows; r++) {
    const p = (r % L) + shift;
    for (let j = 0; j < S; j++) {
      const f = r * S + j;
      const inBand = j >= p - left && j <= p + right;
      const maskOk = mask?.[f] !== 0; // no mask: undefined !== 0
      const biasOk = !bias || bias[f] !== Number.NEGATIVE_INFINITY;
      vis[f] = inBand && maskOk && biasOk ? 1 : 0;
    }
  }
  return vis;
}

// ---------------------------------------------------------------------------------------------------------
// Tensor helpers written for the tests

/** Permutes axis `axis` of t: out[..., j, ...] = t[..., perm[j], ...]. */
function permuteAxis(t: Tensor, axis: number, perm: number[]): Tensor {
  const shape = [...t.shape];
  const outer = shape.slice(0, axis).reduce((a, b) => a * b, 1);
  const n = shape[axis];
  const inner = shape.slice(axis + 1).reduce((a, b) => a * b, 1);
  const out = new Float32Array(t.size);
  for (let o = 0; o < outer; o++)
    for (let j = 0; j < n; j++)
      for (let x = 0; x < inner; x++) out[(o * n + j) * inner + x] = t.data[(o * n + perm[j]) * inner + x];
  return new Tensor(out, shape);
}

/** repeat_interleave on axis 1 of [B, H, S, D]: each head repeated `times` times consecutively. */
function repeatHeads(t: Tensor, times: number): Tensor {
  const [B, H, S, D] = t.shape;
  const out = new Float32Array(B * H * times * S * D);
  const block = S * D;
  for (let b = 0; b < B; b++)
    for (let h = 0; h < H * times; h++) {
      const src = (b * H + Math.floor(h / times)) * block;
      out.set(t.data.subarray(src, src + block), (b * H * times + h) * block);
    }
  return new Tensor(out, [B, H * times, S, D]);
}

function scaled(t: Tensor, s: number): Tensor {
  return new Tensor(
    t.data.map((x) => x * s),
    t.shape,
  );
}

/** Random permutation of 0..n−1 (Fisher–Yates on a seeded generator). */
function permutation(n: number, seed: number): number[] {
  const g = new Generator(seed);
  const p = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(g.random() * (i + 1));
    [p[i], p[j]] = [p[j], p[i]];
  }
  return p;
}

function rowSum(w: Float32Array, r: number, S: number): number {
  let s = 0;
  for (let j = 0; j < S; j++) s += w[r * S + j];
  return s;
}

const EXACT = { atol: 0, rtol: 0 };
const NEAR_EXACT = { atol: 1e-6, rtol: 0 };

// ---------------------------------------------------------------------------------------------------------

describe('properties of scaledDotProductAttention / attentionWeights', () => {
  it('rows sum to 1 or are exactly 0 when fully blocked; never NaN; blocked rows output exactly 0', () => {
    let fullyBlockedRows = 0;
    let openRows = 0;
    fc.assert(
      fc.property(caseArb(), optionSpecArb, (c, spec) => {
        const { q, k, v } = inputs(c);
        const options = buildOptions(c, spec);
        const w = attentionWeights(q, k, options);
        const out = scaledDotProductAttention(q, k, v, options);
        expect(w.shape).toEqual(weightsShape(c));
        expect(out.shape).toEqual([...qShape(c).slice(0, -1), c.Ev]);
        const vis = visibility(c, options);
        const rows = w.size / c.S;
        for (let f = 0; f < w.size; f++) {
          expect(Number.isNaN(w.data[f]), `weight ${f} is NaN`).toBe(false);
          expect(w.data[f]).toBeGreaterThanOrEqual(0);
          expect(w.data[f]).toBeLessThanOrEqual(1);
          if (!vis[f]) expect(w.data[f], `blocked key at flat ${f} has weight`).toBe(0);
        }
        for (let f = 0; f < out.size; f++) expect(Number.isFinite(out.data[f]), `output ${f}`).toBe(true);
        for (let r = 0; r < rows; r++) {
          let any = false;
          for (let j = 0; j < c.S; j++) any ||= vis[r * c.S + j] === 1;
          if (any) {
            openRows++;
            expect(Math.abs(rowSum(w.data, r, c.S) - 1), `row ${r} sum`).toBeLessThanOrEqual(1e-5);
          } else {
            fullyBlockedRows++;
            for (let j = 0; j < c.S; j++)
              expect(w.data[r * c.S + j] === 0, `row ${r} weight ${j}`).toBe(true);
            for (let e = 0; e < c.Ev; e++)
              expect(out.data[r * c.Ev + e] === 0, `row ${r} output ${e}`).toBe(true);
          }
        }
      }),
      { numRuns: 150 },
    );
    // The generators must actually produce both kinds of rows.
    expect(fullyBlockedRows).toBeGreaterThan(0);
    expect(openRows).toBeGreaterThan(0);
  });

  it('permuting keys and values together (and mask/bias columns) leaves the output unchanged', () => {
    fc.assert(
      fc.property(
        caseArb(),
        fc.option(maskSpecArb),
        fc.option(biasSpecArb),
        seedArb,
        (c, maskSpec, biasSpec, permSeed) => {
          const { q, k, v } = inputs(c);
          const target = weightsShape(c);
          const perm = permutation(c.S, permSeed);
          const sAxis = c.rank - 2;
          const options: AttentionOptions = {};
          const permuted: AttentionOptions = {};
          // Keep the S axis full so that permuting it means something (a size-1 S axis is permutation-free).
          const withS = <T extends TensorSpec>(s: T): T => {
            const keep = [...s.keep];
            keep[target.length - 1 - Math.min(s.drop, target.length - 1)] = true;
            return { ...s, keep };
          };
          if (maskSpec) {
            const m = buildMask(withS(maskSpec), target);
            options.mask = m;
            permuted.mask = permuteAxis(m, m.rank - 1, perm);
          }
          if (biasSpec) {
            const b = buildBias(withS(biasSpec), target);
            options.bias = b;
            permuted.bias = permuteAxis(b, b.rank - 1, perm);
          }
          const kp = permuteAxis(k, sAxis, perm);
          const vp = permuteAxis(v, sAxis, perm);
          const out = scaledDotProductAttention(q, k, v, options);
          const outP = scaledDotProductAttention(q, kp, vp, permuted);
          expectAllClose(outP, out, { ...TOL, label: 'output' });
          // Weights follow the permutation: w'[..., j] = w[..., perm[j]].
          const w = attentionWeights(q, k, options);
          const wP = attentionWeights(q, kp, permuted);
          expectAllClose(wP, permuteAxis(w, w.rank - 1, perm), { ...TOL, label: 'weights' });
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('a 0 in the mask equals −Infinity in the bias', () => {
    fc.assert(
      fc.property(
        caseArb(),
        maskSpecArb,
        fc.boolean(),
        seedArb,
        causalArb,
        fc.option(windowArb),
        (c, maskSpec, extraBias, biasSeed, causal, window) => {
          const { q, k, v } = inputs(c);
          const target = weightsShape(c);
          const base: AttentionOptions = { causal };
          if (window) base.window = window;
          let mask: Tensor;
          let other: Tensor | undefined;
          if (extraBias) {
            // Full-shaped mask plus a finite bias: {mask, bias} vs {bias + (−Infinity where mask is 0)}.
            mask = buildMask({ ...maskSpec, drop: 0, keep: [true, true, true, true] }, target);
            other = Tensor.randn(target, { seed: biasSeed, std: 2 });
          } else {
            mask = buildMask(maskSpec, target);
          }
          const asBias = new Tensor(
            mask.data.map((m, i) => (m === 0 ? Number.NEGATIVE_INFINITY : other ? other.data[i] : 0)),
            mask.shape,
          );
          const withMask: AttentionOptions = { ...base, mask, ...(other ? { bias: other } : {}) };
          const withBias: AttentionOptions = { ...base, bias: asBias };
          expectAllClose(
            scaledDotProductAttention(q, k, v, withBias),
            scaledDotProductAttention(q, k, v, withMask),
            { ...EXACT, label: 'output' },
          );
          expectAllClose(attentionWeights(q, k, withBias), attentionWeights(q, k, withMask), {
            ...EXACT,
            label: 'weights',
          });
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('grouped-query attention equals explicitly repeated key/value heads (repeat_interleave)', () => {
    fc.assert(
      fc.property(caseArb([4]), optionSpecArb, (c, spec) => {
        const { q, k, v } = inputs(c);
        const options = buildOptions(c, spec);
        const group = c.Hq / c.Hkv;
        const kr = repeatHeads(k, group);
        const vr = repeatHeads(v, group);
        expectAllClose(
          scaledDotProductAttention(q, kr, vr, options),
          scaledDotProductAttention(q, k, v, options),
          { ...NEAR_EXACT, label: 'output' },
        );
        expectAllClose(attentionWeights(q, kr, options), attentionWeights(q, k, options), {
          ...NEAR_EXACT,
          label: 'weights',
        });
      }),
      { numRuns: RUNS },
    );
  });

  it("causal true / 'bottom-right' equals mask j ≤ i + S − L; 'top-left' equals mask j ≤ i (L > S too)", () => {
    fc.assert(
      fc.property(
        caseArb(),
        fc.constantFrom<CausalOption>(true, 'bottom-right', 'top-left'),
        fc.option(biasSpecArb),
        (c, causal, biasSpec) => {
          const { q, k, v } = inputs(c);
          const offset = causal === 'top-left' ? 0 : c.S - c.L;
          const m = Tensor.zeros([c.L, c.S]);
          for (let i = 0; i < c.L; i++)
            for (let j = 0; j < c.S; j++) m.data[i * c.S + j] = j <= i + offset ? 1 : 0;
          const extra: AttentionOptions = biasSpec ? { bias: buildBias(biasSpec, weightsShape(c)) } : {};
          const viaCausal = { ...extra, causal };
          const viaMask = { ...extra, mask: m };
          expectAllClose(
            scaledDotProductAttention(q, k, v, viaCausal),
            scaledDotProductAttention(q, k, v, viaMask),
            { ...NEAR_EXACT, label: `output causal=${causal}` },
          );
          expectAllClose(attentionWeights(q, k, viaCausal), attentionWeights(q, k, viaMask), {
            ...NEAR_EXACT,
            label: `weights causal=${causal}`,
          });
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('window [l, r] equals the band mask p − l ≤ j ≤ p + r (p = i + S − L; top-left: p = i, r clamped to 0)', () => {
    const mode = fc.constantFrom<CausalOption>(false, 'top-left', true, 'bottom-right');
    fc.assert(
      fc.property(caseArb(), windowArb, mode, (c, window, causal) => {
        const { q, k, v } = inputs(c);
        const [l, r] = window;
        const p0 = causal === 'top-left' ? 0 : c.S - c.L;
        const m = Tensor.zeros([c.L, c.S]);
        for (let i = 0; i < c.L; i++) {
          const p = i + p0;
          for (let j = 0; j < c.S; j++) {
            const leftOk = l === -1 || j >= p - l;
            let rightOk = r === -1 || j <= p + r;
            if (causal) rightOk = rightOk && j <= p;
            m.data[i * c.S + j] = leftOk && rightOk ? 1 : 0;
          }
        }
        const viaWindow: AttentionOptions = causal ? { window, causal } : { window };
        expectAllClose(
          scaledDotProductAttention(q, k, v, viaWindow),
          scaledDotProductAttention(q, k, v, { mask: m }),
          { ...NEAR_EXACT, label: `output window=${window} causal=${causal}` },
        );
        expectAllClose(attentionWeights(q, k, viaWindow), attentionWeights(q, k, { mask: m }), {
          ...NEAR_EXACT,
          label: `weights window=${window} causal=${causal}`,
        });
      }),
      { numRuns: RUNS },
    );
  });

  it('output equals attentionWeights · v computed by hand', () => {
    fc.assert(
      fc.property(caseArb(), optionSpecArb, (c, spec) => {
        const { q, k, v } = inputs(c);
        const options = buildOptions(c, spec);
        const w = attentionWeights(q, k, options);
        const out = scaledDotProductAttention(q, k, v, options);
        const { B, Hq, Hkv, L, S, Ev } = c;
        const group = Hq / Hkv;
        const expected = new Float64Array(B * Hq * L * Ev);
        for (let b = 0; b < B; b++)
          for (let h = 0; h < Hq; h++)
            for (let i = 0; i < L; i++) {
              const row = (b * Hq + h) * L + i;
              const hk = Math.floor(h / group);
              for (let j = 0; j < S; j++) {
                const wij = w.data[row * S + j];
                for (let e = 0; e < Ev; e++)
                  expected[row * Ev + e] += wij * v.data[((b * Hkv + hk) * S + j) * Ev + e];
              }
            }
        expectAllClose(out, expected, { ...TOL, label: 'output vs weights·v' });
      }),
      { numRuns: RUNS },
    );
  });

  it('weights equal a softmax of q·kᵀ·scale + bias over the visible keys, computed by hand', () => {
    fc.assert(
      fc.property(
        caseArb(),
        optionSpecArb,
        fc.option(fc.double({ min: -3, max: 3, noNaN: true, noDefaultInfinity: true })),
        (c, spec, scale) => {
          const { q, k } = inputs(c);
          const options = buildOptions(c, spec);
          if (scale !== null) options.scale = scale;
          const w = attentionWeights(q, k, options);
          const vis = visibility(c, options);
          const bias = options.bias ? expandTo(options.bias as Tensor, weightsShape(c)) : undefined;
          const { B, Hq, Hkv, L, S, E } = c;
          const sc = scale ?? 1 / Math.sqrt(E);
          const expected = new Float64Array(w.size);
          for (let b = 0; b < B; b++)
            for (let h = 0; h < Hq; h++)
              for (let i = 0; i < L; i++) {
                const r = (b * Hq + h) * L + i;
                const hk = Math.floor(h / (Hq / Hkv));
                const z: number[] = [];
                for (let j = 0; j < S; j++) {
                  let dot = 0;
                  for (let e = 0; e < E; e++)
                    dot += q.data[r * E + e] * k.data[((b * Hkv + hk) * S + j) * E + e];
                  z.push(vis[r * S + j] ? dot * sc + (bias ? bias[r * S + j] : 0) : Number.NEGATIVE_INFINITY);
                }
                const m = z.reduce((a, x) => Math.max(a, x), Number.NEGATIVE_INFINITY);
                if (m === Number.NEGATIVE_INFINITY) continue; // all blocked: expected row stays 0
                const ex = z.map((x) => (x === Number.NEGATIVE_INFINITY ? 0 : Math.exp(x - m)));
                const total = ex.reduce((a, x) => a + x, 0);
                for (let j = 0; j < S; j++) expected[r * S + j] = ex[j] / total;
              }
          expectAllClose(w, expected, { ...TOL, label: 'weights vs hand softmax' });
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('attentionWeights is invariant to adding a constant to every score through the bias', () => {
    fc.assert(
      fc.property(caseArb(), optionSpecArb, fc.integer({ min: -800, max: 800 }), (c, spec, c8) => {
        const shiftBy = c8 / 8; // exact in float32
        const { q, k } = inputs(c);
        const options = buildOptions(c, spec);
        const shifted: AttentionOptions = { ...options };
        if (options.bias) {
          const b = options.bias as Tensor;
          shifted.bias = new Tensor(
            b.data.map((x) => x + shiftBy),
            b.shape,
          );
        } else {
          shifted.bias = Tensor.full([], shiftBy); // a scalar broadcasts to every score
        }
        const w = attentionWeights(q, k, options);
        const ws = attentionWeights(q, k, shifted);
        const vis = visibility(c, options);
        // Compare the rows that are not fully blocked (blocked rows are 0 either way; checked elsewhere).
        const keep: number[] = [];
        for (let r = 0; r < w.size / c.S; r++) {
          let any = false;
          for (let j = 0; j < c.S; j++) any ||= vis[r * c.S + j] === 1;
          if (any) for (let j = 0; j < c.S; j++) keep.push(r * c.S + j);
        }
        const pick = (t: Tensor) =>
          new Tensor(
            Float32Array.from(keep, (f) => t.data[f]),
            [keep.length],
          );
        expectAllClose(pick(ws), pick(w), { ...TOL, label: `shift ${shiftBy}` });
      }),
      { numRuns: RUNS },
    );
  });

  it('scale: s equals scaling q by s·√E with the default scale', () => {
    fc.assert(
      fc.property(
        caseArb(),
        fc.double({ min: -4, max: 4, noNaN: true, noDefaultInfinity: true }),
        causalArb,
        (c, s, causal) => {
          const { q, k, v } = inputs(c);
          const qs = scaled(q, s * Math.sqrt(c.E));
          expectAllClose(attentionWeights(q, k, { scale: s, causal }), attentionWeights(qs, k, { causal }), {
            ...TOL,
            label: `weights scale=${s}`,
          });
          expectAllClose(
            scaledDotProductAttention(q, k, v, { scale: s, causal }),
            scaledDotProductAttention(qs, k, v, { causal }),
            { ...TOL, label: `output scale=${s}` },
          );
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('a rank-2 (or rank-3) call equals the same call at rank 4 with the missing axes of size 1', () => {
    fc.assert(
      fc.property(caseArb([2, 3]), optionSpecArb, (c, spec) => {
        const { q, k, v } = inputs(c);
        const options = buildOptions(c, spec);
        const to4 = (t: Tensor) =>
          t.rank === 2 ? t.reshape([1, 1, ...t.shape]) : t.reshape([t.shape[0], 1, ...t.shape.slice(1)]);
        // Masks/biases of rank 3 ([B, L, S]) must become [B, 1, L, S] at rank 4; lower ranks broadcast as is.
        const opt4: AttentionOptions = { ...options };
        if (c.rank === 3) {
          for (const key of ['mask', 'bias'] as const) {
            const t = options[key] as Tensor | undefined;
            if (t && t.rank === 3) opt4[key] = to4(t);
          }
        }
        const out = scaledDotProductAttention(q, k, v, options);
        const out4 = scaledDotProductAttention(to4(q), to4(k), to4(v), opt4);
        expect(out4.shape).toEqual([c.B, 1, c.L, c.Ev]);
        expectAllClose(out4.reshape(out.shape as number[]), out, { ...EXACT, label: 'output' });
        const w = attentionWeights(q, k, options);
        const w4 = attentionWeights(to4(q), to4(k), opt4);
        expectAllClose(w4.reshape(w.shape as number[]), w, { ...EXACT, label: 'weights' });
      }),
      { numRuns: RUNS },
    );
  });

  it('very large logits (q, k × 1e3 or 1e4): weights finite, rows sum to 1, output a convex mix of v', () => {
    fc.assert(
      fc.property(caseArb(), fc.constantFrom(1e3, 1e4), causalArb, (c, factor, causal) => {
        const base = inputs(c);
        const q = scaled(base.q, factor);
        const k = scaled(base.k, factor);
        const { v } = base;
        const options: AttentionOptions = { causal };
        const w = attentionWeights(q, k, options);
        const out = scaledDotProductAttention(q, k, v, options);
        const vis = visibility(c, options);
        for (let f = 0; f < w.size; f++) expect(Number.isFinite(w.data[f]), `weight ${f}`).toBe(true);
        for (let f = 0; f < out.size; f++) expect(Number.isFinite(out.data[f]), `output ${f}`).toBe(true);
        const { B, Hq, Hkv, L, S, Ev } = c;
        const group = Hq / Hkv;
        for (let b = 0; b < B; b++)
          for (let h = 0; h < Hq; h++)
            for (let i = 0; i < L; i++) {
              const r = (b * Hq + h) * L + i;
              let any = false;
              for (let j = 0; j < S; j++) any ||= vis[r * S + j] === 1;
              if (!any) continue;
              expect(Math.abs(rowSum(w.data, r, S) - 1), `row ${r} sum`).toBeLessThanOrEqual(1e-5);
              for (let e = 0; e < Ev; e++) {
                let lo = Number.POSITIVE_INFINITY;
                let hi = Number.NEGATIVE_INFINITY;
                for (let j = 0; j < S; j++) {
                  if (!vis[r * S + j]) continue;
                  const x = v.data[((b * Hkv + Math.floor(h / group)) * S + j) * Ev + e];
                  lo = Math.min(lo, x);
                  hi = Math.max(hi, x);
                }
                const o = out.data[r * Ev + e];
                expect(o).toBeGreaterThanOrEqual(lo - 1e-5);
                expect(o).toBeLessThanOrEqual(hi + 1e-5);
              }
            }
      }),
      { numRuns: RUNS },
    );
  });

  it('a long row (L=1, S=200000, E=4) runs without a stack overflow and its weights sum to 1', () => {
    const S = 200_000;
    const q = Tensor.randn([1, 4], { seed: 11 });
    const k = Tensor.randn([S, 4], { seed: 12 });
    const v = Tensor.randn([S, 3], { seed: 13 });
    const w = attentionWeights(q, k);
    expect(w.shape).toEqual([1, S]);
    let sum = 0;
    let nonFinite = 0;
    for (const x of w.data) {
      if (!Number.isFinite(x)) nonFinite++;
      sum += x;
    }
    expect(nonFinite).toBe(0);
    expect(Math.abs(sum - 1)).toBeLessThanOrEqual(1e-5);
    const out = scaledDotProductAttention(q, k, v, { causal: true, window: [S, 0] });
    expect(out.shape).toEqual([1, 3]);
    for (const x of out.data) expect(Number.isFinite(x)).toBe(true);
  });
});
