// The GEMM kernels against the spec: the reference against the definition (float64, exact), the WASM
// kernel against the reference on seeded shapes that straddle its tile and block edges (every form:
// transA × transB, bias, accumulate, GELU, batches), IEEE NaN/∞ propagation, fallback and bounded memory.

import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it, vi } from 'vitest';
import {
  chooseGemmKernel,
  type GemmKernel,
  type GemmKernelName,
  type GemmProblem,
  geluTanh,
  gemm,
  referenceGemmKernel,
  registeredGemmKernels,
  wasmGemmKernel,
} from '../src/kernels/gemm.js';
import { linearGradInput } from '../src/kernels/matmul.js';
import { type AttentionProblem, KernelResourceError } from '../src/kernels/types.js';
import { wasmKernel } from '../src/kernels/wasm.js';
import { wasmMemoryBytes } from '../src/kernels/wasm-runtime.js';
import { Generator } from '../src/random.js';

const U = 2 ** -24; // float32's unit roundoff

function randomArray(n: number, g: Generator, scale = 1): Float32Array {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = (g.random() * 2 - 1) * scale;
  return x;
}

interface Case extends GemmProblem {
  a: Float32Array;
  b: Float32Array;
  bias?: Float32Array;
  c0: Float32Array; // C before the call (used when accumulating)
}

function makeCase(
  g: Generator,
  M: number,
  N: number,
  K: number,
  o: Partial<Pick<GemmProblem, 'transA' | 'transB' | 'accumulate' | 'gelu' | 'batch' | 'strideB'>> & {
    bias?: boolean;
  } = {},
): Case {
  const batch = o.batch ?? 1;
  const strideB = o.strideB ?? K * N;
  return {
    M,
    N,
    K,
    a: randomArray(batch * M * K, g),
    b: randomArray((batch - 1) * strideB + K * N, g, 2),
    transA: o.transA ?? false,
    transB: o.transB ?? false,
    bias: o.bias ? randomArray(N, g, 3) : undefined,
    accumulate: o.accumulate,
    gelu: o.gelu,
    batch: o.batch,
    strideB: o.strideB,
    precision: 'float32',
    c0: randomArray(batch * M * N, g, 4),
  };
}

/** The reference's answer in float64 (C starting from c0). */
function reference(p: Case): Float64Array {
  const c = Float64Array.from(p.c0);
  referenceGemmKernel.rows(p, c, 0, (p.batch ?? 1) * p.M);
  return c;
}

/**
 * The error bound a float32 GEMM must meet, per element: summing n terms in float32 (products rounded or
 * fused, each addition rounded) errs by at most γ_n·Σ|term| with γ_n = n·u/(1 − n·u) (Higham, Accuracy and
 * Stability, §3.1), whatever the order or blocking. Here n = K + 3 (K products and additions, bias, C) and
 * Σ|term| = |C| + |bias| + Σ_k |a_ik|·|b_kj|, computed by the reference on absolute values. This is
 * rigorous for every K (1e-5·K·max|a|·max|b| is not, past K ≈ 170) and tight where terms cancel. GELU adds
 * at most 1.13 × that (its slope is within [−0.13, 1.13]) plus its float32 evaluation (≤ 4e-6 relative,
 * measured over [−30, 30]); 1e-30 covers float32's subnormal range.
 */
function tolerance(p: Case, m0 = 0, m1 = (p.batch ?? 1) * p.M): Float64Array {
  const abs = (x: Float32Array) => x.map(Math.abs);
  const mag = Float64Array.from(p.c0, Math.abs);
  const magProblem = { ...p, a: abs(p.a), b: abs(p.b), bias: p.bias && abs(p.bias), gelu: false };
  if (!p.accumulate) mag.fill(0);
  referenceGemmKernel.rows({ ...magProblem, accumulate: true }, mag, m0, m1);
  const n = p.K + 3;
  const gamma = (n * U) / (1 - n * U);
  return mag.map((m) => gamma * m * (p.gelu ? 1.13 : 1) + 1e-30);
}

/** The worst excess of |got − want| over the tolerance (≤ 0 passes); NaN and ∞ must match exactly. */
function worstExcess(got: Float32Array, want: Float64Array, tol: Float64Array, gelu = false): number {
  let worst = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < want.length; i++) {
    const w = want[i];
    const x = got[i];
    if (!Number.isFinite(w) || !Number.isFinite(x)) {
      if (!(Object.is(x, Math.fround(w)) || (Number.isNaN(x) && Number.isNaN(w))))
        return Number.POSITIVE_INFINITY;
      continue;
    }
    const allowed = tol[i] + (gelu ? 1e-5 * Math.abs(w) : 0);
    worst = Math.max(worst, Math.abs(x - w) - allowed);
  }
  return worst;
}

function run(kernel: GemmKernel, p: Case): Float32Array {
  const c = Float32Array.from(p.c0);
  return gemm(p, c, kernel.name as GemmKernelName);
}

describe('the reference GEMM is the definition', () => {
  it('equals the plain triple loop bit for bit in float64, for every transpose form', () => {
    const g = new Generator(1);
    for (const [transA, transB] of [
      [false, false],
      [false, true],
      [true, false],
      [true, true],
    ] as const) {
      const [M, N, K] = [5, 7, 9];
      const a = Float64Array.from({ length: M * K }, () => g.random() - 0.5);
      const b = Float64Array.from({ length: K * N }, () => g.random() - 0.5);
      const bias = Float64Array.from({ length: N }, () => g.random() - 0.5);
      const c = Float64Array.from({ length: M * N }, () => g.random() - 0.5);
      const want = new Float64Array(M * N);
      for (let i = 0; i < M; i++)
        for (let j = 0; j < N; j++) {
          let s = c[i * N + j] + bias[j];
          for (let k = 0; k < K; k++)
            s += (transA ? a[k * M + i] : a[i * K + k]) * (transB ? b[j * K + k] : b[k * N + j]);
          want[i * N + j] = geluTanh(s);
        }
      const p: GemmProblem = {
        M,
        N,
        K,
        a,
        b,
        transA,
        transB,
        bias,
        accumulate: true,
        gelu: true,
        precision: 'float64',
      };
      expect(chooseGemmKernel('test', 'auto', p)).toBe(referenceGemmKernel); // float64: only the spec serves
      expect(Array.from(gemm(p, c))).toEqual(Array.from(want));
    }
  });

  it('computes a small product by hand: [[1,2],[3,4]]·[[5,6],[7,8]] + [1, −1]', () => {
    const p: GemmProblem = {
      M: 2,
      N: 2,
      K: 2,
      a: Float32Array.of(1, 2, 3, 4),
      b: Float32Array.of(5, 6, 7, 8),
      transA: false,
      transB: false,
      bias: Float32Array.of(1, -1),
      precision: 'float32',
    };
    for (const kernel of registeredGemmKernels()) {
      expect(Array.from(gemm(p, new Float32Array(4), kernel.name as 'wasm'))).toEqual([20, 21, 44, 49]);
    }
    expect(registeredGemmKernels()[0]).toBe(referenceGemmKernel);
  });
});

// Every registered GEMM kernel but the reference (the spec, checked above against the definition) runs
// these differential tests: a kernel registered tomorrow is tested the day it is registered.
for (const kernel of registeredGemmKernels().filter((k) => k !== referenceGemmKernel)) {
  describe(`${kernel.name} GEMM against the reference`, () => {
    const SIZES = [1, 3, 7, 8, 9, 63, 64, 65, 257];

    it('every form on seeded sizes straddling the 4×8 tiles (transA × transB × bias × accumulate × GELU)', () => {
      const g = new Generator(7);
      const pick = () => SIZES[Math.floor(g.random() * SIZES.length)];
      let checked = 0;
      for (let trial = 0; trial < 24; trial++) {
        const [M, N, K] = [pick(), pick(), pick()];
        for (const transA of [false, true])
          for (const transB of [false, true]) {
            const o = {
              transA,
              transB,
              bias: g.random() < 0.5,
              accumulate: g.random() < 0.5,
              gelu: g.random() < 0.4,
            };
            const p = makeCase(g, M, N, K, o);
            const excess = worstExcess(run(kernel, p), reference(p), tolerance(p), o.gelu);
            expect(excess, `M=${M} N=${N} K=${K} ${JSON.stringify(o)}`).toBeLessThanOrEqual(0);
            checked++;
          }
      }
      expect(checked).toBe(96);
    });

    it('shapes across the K, M and N blocks (K = 513, 1100; M = 129, 300; N = 2049 at K = 512)', () => {
      const g = new Generator(8);
      const shapes: [number, number, number][] = [
        [9, 17, 513], // two K blocks: C makes a round trip between them
        [5, 9, 1100], // three K blocks
        [300, 24, 33], // three M blocks of 128 rows
        [129, 8, 64],
        [3, 2049, 512], // two N blocks (the packed B budget) with a partial panel
      ];
      for (const [M, N, K] of shapes)
        for (const transA of [false, true])
          for (const transB of [false, true]) {
            const o = { transA, transB, bias: true, accumulate: true, gelu: M === 9 };
            const p = makeCase(g, M, N, K, o);
            const excess = worstExcess(run(kernel, p), reference(p), tolerance(p), o.gelu);
            expect(excess, `M=${M} N=${N} K=${K} ${JSON.stringify(o)}`).toBeLessThanOrEqual(0);
          }
    });

    it('K = 0 gives bias (+ C), through GELU when asked; empty M or N does nothing', () => {
      const g = new Generator(9);
      for (const accumulate of [false, true]) {
        const p = makeCase(g, 5, 11, 0, { bias: true, accumulate, gelu: true });
        expect(worstExcess(run(kernel, p), reference(p), tolerance(p), true)).toBeLessThanOrEqual(0);
      }
      const empty = makeCase(g, 0, 5, 3);
      expect(run(kernel, empty)).toHaveLength(0);
      const none = makeCase(g, 4, 0, 3);
      expect(run(kernel, none)).toHaveLength(0);
    });

    it('batches: own B per product, one shared B (strideB 0), and rows split anywhere give the same C', () => {
      const g = new Generator(10);
      for (const strideB of [undefined, 0]) {
        for (const transB of [false, true]) {
          const p = makeCase(g, 13, 20, 37, { batch: 3, strideB, transB, bias: true });
          const whole = run(kernel, p);
          expect(worstExcess(whole, reference(p), tolerance(p))).toBeLessThanOrEqual(0);
          // Rows [0, 39) of the stacked C in uneven pieces (as a pool splits them): bit for bit the same.
          const pieces = Float32Array.from(p.c0);
          for (const [m0, m1] of [
            [0, 5],
            [5, 14],
            [14, 26],
            [26, 39],
          ])
            kernel.rows(p, pieces, m0, m1);
          expect(pieces).toEqual(whole);
        }
      }
    });

    it('the Linear products: y = x·Wᵀ + b, dX = dY·W, dW += dYᵀ·X', () => {
      const g = new Generator(11);
      const [T, In, Out] = [70, 48, 33];
      const x = randomArray(T * In, g);
      const W = randomArray(Out * In, g);
      const dY = randomArray(T * Out, g);
      const bias = randomArray(Out, g);
      const forward: GemmProblem = {
        M: T,
        N: Out,
        K: In,
        a: x,
        b: W,
        transA: false,
        transB: true,
        bias,
        precision: 'float32',
      };
      const dX: GemmProblem = {
        M: T,
        N: In,
        K: Out,
        a: dY,
        b: W,
        transA: false,
        transB: false,
        precision: 'float32',
      };
      const dW: GemmProblem = {
        M: Out,
        N: In,
        K: T,
        a: dY,
        b: x,
        transA: true,
        transB: false,
        accumulate: true,
        precision: 'float32',
      };
      for (const p of [forward, dX, dW]) {
        const c0 = randomArray(p.M * p.N, g);
        const want = Float64Array.from(c0);
        referenceGemmKernel.rows(p, want, 0, p.M);
        const got = gemm(p, Float32Array.from(c0)); // 'auto'
        for (let i = 0; i < want.length; i++) expect(Math.abs(got[i] - want[i])).toBeLessThan(1e-4);
      }
    });
  });

  describe(`${kernel.name} GEMM: IEEE special values`, () => {
    it('NaN in a row of A makes that row of C NaN, in a column of B that column; 0·∞ is NaN; ±∞ propagate', () => {
      const g = new Generator(12);
      for (const transA of [false, true])
        for (const transB of [false, true]) {
          const [M, N, K] = [9, 17, 13];
          const p = makeCase(g, M, N, K, { transA, transB, bias: true });
          const setA = (i: number, k: number, v: number) => {
            p.a[transA ? k * M + i : i * K + k] = v;
          };
          const setB = (k: number, j: number, v: number) => {
            p.b[transB ? j * K + k : k * N + j] = v;
          };
          setA(2, 5, Number.NaN); // row 2: NaN
          setB(7, 11, Number.NaN); // column 11: NaN
          setA(4, 3, Number.POSITIVE_INFINITY); // row 4: ±∞ by the sign of b[3, j] …
          setB(3, 6, 0); // … and NaN in column 6 (∞·0)
          setA(6, 0, Number.NEGATIVE_INFINITY);
          for (let j = 0; j < N; j++) setB(0, j, Math.abs(p.b[transB ? j * K : j]) + 1); // row 6: −∞
          const got = run(kernel, p);
          const want = reference(p);
          expect(worstExcess(got, want, tolerance(p))).toBeLessThanOrEqual(0);
          for (let j = 0; j < N; j++) {
            expect(got[2 * N + j]).toBeNaN();
            expect(got[6 * N + j]).toBe(j === 11 ? Number.NaN : Number.NEGATIVE_INFINITY);
          }
          for (let i = 0; i < M; i++) expect(got[i * N + 11]).toBeNaN();
          expect(got[4 * N + 6]).toBeNaN();
        }
    });

    it('GELU of NaN, ±∞ and large values is the float64 form’s', () => {
      const v = Float32Array.of(
        Number.NaN,
        Number.POSITIVE_INFINITY,
        Number.NEGATIVE_INFINITY,
        1e20,
        -1e20,
        -30,
        30,
        0,
      );
      const p: GemmProblem = {
        M: v.length,
        N: 1,
        K: 1,
        a: v,
        b: Float32Array.of(1),
        transA: false,
        transB: false,
        gelu: true,
        precision: 'float32',
      };
      const got = gemm(p, new Float32Array(v.length), kernel.name as GemmKernelName);
      expect(Array.from(got)).toEqual(Array.from(v, (x) => Math.fround(geluTanh(x))));
    });
  });
}

describe('dispatch and fallback', () => {
  it("'wasm' refuses float64 naming why; 'auto' then takes the reference", () => {
    const p: GemmProblem = {
      M: 1,
      N: 1,
      K: 1,
      a: Float64Array.of(2),
      b: Float64Array.of(3),
      transA: false,
      transB: false,
      precision: 'float64',
    };
    expect(() => gemm(p, new Float64Array(1), 'wasm')).toThrow(/cannot serve this call: .*float64/);
    expect(gemm(p, new Float64Array(1))[0]).toBe(6);
    expect(() => gemm({ ...p, a: new Float64Array(0) }, new Float64Array(1))).toThrow(
      /gemm: a has 0 elements, needs 1/,
    );
  });

  it('a float32 call may write a float64 C (a float64 gradient buffer): the WASM kernel serves it', () => {
    const g = new Generator(16);
    const p = makeCase(g, 11, 13, 17, { accumulate: true, bias: true, transA: true });
    expect(chooseGemmKernel('test', 'auto', p)).toBe(wasmGemmKernel);
    const got = gemm(p, Float64Array.from(p.c0));
    expect(worstExcess(Float32Array.from(got), reference(p), tolerance(p))).toBeLessThanOrEqual(0);
  });

  it('a WASM kernel refused memory falls back to the reference without adding twice', () => {
    const g = new Generator(13);
    const p = makeCase(g, 20, 30, 40, { accumulate: true, bias: true });
    const spy = vi.spyOn(wasmGemmKernel, 'rows').mockImplementationOnce(() => {
      throw new KernelResourceError('wasm GEMM: growing its WebAssembly memory failed');
    });
    try {
      const got = gemm(p, Float32Array.from(p.c0));
      expect(spy).toHaveBeenCalledTimes(1);
      expect(Array.from(got)).toEqual(Array.from(Float32Array.from(reference(p))));
      expect(() => gemm(p, Float32Array.from(p.c0), 'wasm')).not.toThrow(); // named: no fallback needed now
    } finally {
      spy.mockRestore();
    }
  });
});

describe("linear's input gradient into a buffer that was just allocated", () => {
  it('`zeroed` writes dx whole and never reads it: a reused array full of NaN gives the product, float32 and mixed', () => {
    const g = new Generator(21);
    const [N, M, K] = [7, 5, 9];
    const dy = Float32Array.from({ length: N * M }, () => g.random() - 0.5);
    const W = Float32Array.from({ length: M * K }, () => g.random() - 0.5);
    for (const [label, w] of [
      ['float32', W],
      ['float64 W (the JS loop)', Float64Array.from(W)],
    ] as const) {
      const want = new Float32Array(N * K);
      linearGradInput(dy, N, M, w, K, want); // added to zeros
      const reused = new Float32Array(N * K).fill(Number.NaN);
      linearGradInput(dy, N, M, w, K, reused, true);
      expect(Array.from(reused), label).toEqual(Array.from(want));
      expect(
        want.some((x) => x !== 0),
        label,
      ).toBe(true);
    }
  });
});

describe('one WASM instance, two drivers', () => {
  it('a GEMM between two attention calls on the same problem does not leave the attention driver stale K/V', () => {
    const g = new Generator(15);
    const [L, S, E] = [33, 70, 16];
    const problem: AttentionProblem = {
      B: 1,
      Hq: 1,
      Hkv: 1,
      L,
      S,
      E,
      Ev: E,
      q: randomArray(L * E, g),
      k: randomArray(S * E, g),
      v: randomArray(S * E, g),
      scale: 0.25,
      shift: 0,
      left: Number.POSITIVE_INFINITY,
      right: Number.POSITIVE_INFINITY,
      precision: 'float32',
    };
    const first = new Float32Array(L * E);
    wasmKernel.forwardRows(problem, { out: first }, 0, 0, L); // K and V now sit in WASM memory
    const p = makeCase(g, 40, 300, 200, { transB: true, bias: true }); // overwrites them
    expect(worstExcess(run(wasmGemmKernel, p), reference(p), tolerance(p))).toBeLessThanOrEqual(0);
    const again = new Float32Array(L * E);
    wasmKernel.forwardRows(problem, { out: again }, 0, 0, L);
    expect(again).toEqual(first);
  });
});

describe('memory', () => {
  it('large operands stream: 51 MB of A, 51 MB of Wᵀ, K = 1.6M, 31 MB of C keep WASM memory under 16 MB', () => {
    const g = new Generator(14);
    const grow = WebAssembly.Memory.prototype.grow;
    let peak = wasmMemoryBytes();
    WebAssembly.Memory.prototype.grow = function (this: WebAssembly.Memory, pages: number) {
      const before = grow.call(this, pages);
      peak = Math.max(peak, this.buffer.byteLength);
      return before;
    };
    const cases = [
      makeCase(g, 200_000, 8, 64, { bias: true }), // tall A
      makeCase(g, 8, 200_000, 64, { transB: true }), // wide Wᵀ (a vocabulary-sized head)
      makeCase(g, 8, 8, 1_600_000, { transA: true, accumulate: true }), // a long K (dW over many tokens)
      makeCase(g, 130, 60_000, 1, { bias: true }), // K = 1: 31 MB of C, in blocks
    ];
    const results: Float32Array[] = [];
    try {
      for (const p of cases) results.push(run(wasmGemmKernel, p));
    } finally {
      WebAssembly.Memory.prototype.grow = grow;
    }
    expect(peak).toBeLessThan(16 << 20);
    // The last rows of each, against the reference's same rows (a kernel's `rows` serves any range alone).
    for (const [n, p] of cases.entries()) {
      const m0 = p.M - 3;
      const want = Float64Array.from(p.c0);
      referenceGemmKernel.rows(p, want, m0, p.M);
      const tol = tolerance(p, m0, p.M);
      const excess = worstExcess(
        results[n].subarray(m0 * p.N),
        want.subarray(m0 * p.N),
        tol.subarray(m0 * p.N),
      );
      expect(excess, `case ${n}`).toBeLessThanOrEqual(0);
    }
  });
});

it('the relaxed-SIMD build (fused multiply-add) agrees with the reference', () => {
  const dist = fileURLToPath(new URL('../dist/kernels/gemm.js', import.meta.url));
  const script = `
    const { gemm, referenceGemmKernel } = await import(${JSON.stringify(dist)});
    const runtime = await import(${JSON.stringify(dist.replace(/gemm\.js$/, 'wasm-runtime.js'))});
    let seed = 1, worst = 0;
    const rnd = (n) => Float32Array.from({ length: n }, () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) - 0.5);
    for (const [M, N, K, transA, transB] of [[65, 63, 257, false, true], [9, 130, 600, true, false], [3, 8, 1, false, false]]) {
      const p = { M, N, K, a: rnd(M * K), b: rnd(K * N), bias: rnd(N), transA, transB, gelu: K === 257, precision: 'float32' };
      const got = gemm(p, new Float32Array(M * N), 'wasm');
      const want = new Float64Array(M * N);
      referenceGemmKernel.rows(p, want, 0, M);
      for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) / (K * 1e-6 + 1e-6 * Math.abs(want[i])));
    }
    console.log(JSON.stringify({ variant: runtime.wasmVariant, worst }));
  `;
  const run = spawnSync(
    process.execPath,
    ['--experimental-wasm-relaxed-simd', '--input-type=module', '-e', script],
    {
      encoding: 'utf8',
      timeout: 60_000,
    },
  );
  expect(run.stderr).toBe('');
  const { variant, worst } = JSON.parse(run.stdout);
  expect(variant).toBe('relaxed-simd');
  expect(worst).toBeLessThanOrEqual(1);
});
