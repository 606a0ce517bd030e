// Packed weights (packLinearWeights) and the 1–3-row path of the WASM GEMM: both must give the products
// an unpacked 4-row-tile call gives, bit for bit, on every shape (K blocks, N blocks, ragged panels),
// every form (bias, accumulate, GELU, batches sharing W, slices of W), hostile values included; and what
// generate packs it frees, also when it throws.

import { describe, expect, it } from 'vitest';
import { type GemmProblem, gemm } from '../src/kernels/gemm.js';
import { packLinearWeights } from '../src/kernels/gemm-wasm.js';
import { linear } from '../src/kernels/matmul.js';
import { wasmResidentBytes } from '../src/kernels/wasm-runtime.js';
import { TinyTransformer } from '../src/model/transformer.js';
import { Generator } from '../src/random.js';

function randomArray(n: number, g: Generator): Float32Array {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = g.random() * 2 - 1;
  return x;
}

/** Same floats, NaNs included, signed zeros told apart. */
function expectBitsEqual(got: Float32Array, want: Float32Array): void {
  expect(got.length).toBe(want.length);
  const a = new Uint32Array(got.buffer, got.byteOffset, got.length);
  const b = new Uint32Array(want.buffer, want.byteOffset, want.length);
  let first = -1;
  for (let i = 0; i < a.length && first < 0; i++) if (a[i] !== b[i]) first = i;
  expect(first, first < 0 ? '' : `element ${first}: ${got[first]} vs ${want[first]}`).toBe(-1);
}

describe('packLinearWeights', () => {
  // [M, N, K]: one row, rows in a partial tile, the tied head's shape, K past one 512-block, N past
  // one N block, ragged N (not a multiple of 8), K = 1.
  const shapes: [number, number, number][] = [
    [1, 24, 16],
    [2, 40, 33],
    [3, 61, 520],
    [1, 4096, 192],
    [5, 17, 9],
    [4, 8, 1],
    [1, 2100, 1100],
    [9, 64, 64],
  ];
  for (const [M, N, K] of shapes) {
    it(`x·Wᵀ at M=${M}, N=${N}, K=${K}: packed equals unpacked bit for bit (bias, accumulate, GELU, NaN/∞)`, () => {
      const g = new Generator(M * 1000 + N + K);
      for (const gelu of [false, true]) {
        for (const accumulate of [false, true]) {
          const a = randomArray(M * K, g);
          const W = randomArray(N * K, g);
          const bias = randomArray(N, g);
          a[0] = Number.NaN;
          if (K > 1) a[K - 1] = Number.POSITIVE_INFINITY;
          W[W.length - 1] = -1e30;
          const c0 = randomArray(M * N, g);
          const p: GemmProblem = {
            M,
            N,
            K,
            a,
            b: W,
            transA: false,
            transB: true,
            bias,
            gelu,
            accumulate,
            precision: 'float32',
          };
          const unpacked = gemm(p, c0.slice(), 'wasm');
          const unpack = packLinearWeights([{ data: W, rows: N, cols: K }]);
          expect(wasmResidentBytes()).toBeGreaterThanOrEqual(N * K * 4);
          let packed: Float32Array;
          try {
            packed = gemm(p, c0.slice(), 'wasm');
          } finally {
            unpack();
          }
          expectBitsEqual(packed, unpacked);
          expect(wasmResidentBytes()).toBe(0);
        }
      }
    });
  }

  it('a slice of W at a multiple of 8 rows (in_proj’s q, k, v) reads the packed copy; other slices pack as before', () => {
    const g = new Generator(7);
    const [M, N, K] = [3, 96, 40];
    const W = randomArray(N * K, g);
    const a = randomArray(M * K, g);
    const slices = [
      [0, 32],
      [32, 32],
      [64, 32],
      [8, 5],
      [3, 20], // not at a panel boundary: unpacked
    ];
    const want = slices.map(([r0, n]) => linear(a, M, K, W, r0, n));
    const unpack = packLinearWeights([{ data: W, rows: N, cols: K }]);
    const got = slices.map(([r0, n]) => linear(a, M, K, W, r0, n));
    // The packed copy is what is read: change W's floats (which the caller must not do) and packed
    // slices still give the old products, the unpacked slice the new one.
    W.fill(0);
    const stale = slices.map(([r0, n]) => linear(a, M, K, W, r0, n));
    unpack();
    for (let i = 0; i < slices.length; i++) expectBitsEqual(got[i], want[i]);
    for (let i = 0; i < 4; i++) expectBitsEqual(stale[i], want[i]);
    expect(stale[4].every((v) => v === 0)).toBe(true);
    // Freed: W's floats are read again.
    expect(linear(a, M, K, W, 0, 32).every((v) => v === 0)).toBe(true);
  });

  it('batches sharing W (strideB 0) and a batch of distinct W both read it right', () => {
    const g = new Generator(11);
    const [M, N, K, batch] = [2, 16, 24, 3];
    const a = randomArray(batch * M * K, g);
    const W = randomArray(batch * N * K, g);
    const shared: GemmProblem = {
      M,
      N,
      K,
      a,
      b: W,
      transA: false,
      transB: true,
      batch,
      strideB: 0,
      precision: 'float32',
    };
    const distinct: GemmProblem = { ...shared, strideB: undefined };
    const want = [
      gemm(shared, new Float32Array(batch * M * N)),
      gemm(distinct, new Float32Array(batch * M * N)),
    ];
    const unpack = packLinearWeights([{ data: W, rows: batch * N, cols: K }]);
    const got = [
      gemm(shared, new Float32Array(batch * M * N)),
      gemm(distinct, new Float32Array(batch * M * N)),
    ];
    unpack();
    expectBitsEqual(got[0], want[0]);
    expectBitsEqual(got[1], want[1]);
  });

  it('one to three rows equal the same rows of a 4-row tile, bit for bit', () => {
    const g = new Generator(3);
    for (const [N, K] of [
      [72, 100],
      [40, 7],
      [33, 600],
    ]) {
      const W = randomArray(N * K, g);
      const x = randomArray(4 * K, g);
      const bias = randomArray(N, g);
      x[5] = Number.NaN;
      const full = linear(x, 4, K, W, 0, N, bias);
      for (let rows = 1; rows <= 3; rows++) {
        for (let r = 0; r + rows <= 4; r++) {
          const part = linear(x.subarray(r * K, (r + rows) * K), rows, K, W, 0, N, bias);
          expectBitsEqual(part, full.subarray(r * N, (r + rows) * N));
        }
      }
    }
  });

  it('skips what it cannot pack (wrong length, empty) and its release is idempotent', () => {
    const unpack = packLinearWeights([
      { data: new Float32Array(10), rows: 3, cols: 4 },
      { data: new Float32Array(0), rows: 0, cols: 4 },
    ]);
    expect(wasmResidentBytes()).toBe(0);
    unpack();
    unpack();
  });
});

describe('generate packs its weights for the steps', () => {
  const config = { vocabSize: 50, dModel: 16, numHeads: 2, numLayers: 2, dFF: 32, maxLen: 64, causal: true };

  it('gives the tokens of a step-by-step forward, and frees the packed copies (also when onToken throws)', () => {
    const model = new TinyTransformer(config, { seed: 5 });
    const prompt = Int32Array.of(1, 2, 3);
    const ids = model.generate(prompt, { maxNewTokens: 12, temperature: 0 });
    expect(wasmResidentBytes()).toBe(0);
    // Greedy decoding by full forwards (no cache, no packing).
    const seq = [...prompt];
    for (let i = 0; i < 12; i++) {
      const logits = model.forward(Int32Array.from(seq), 1, seq.length).logits.data;
      const last = logits.subarray((seq.length - 1) * 50);
      let best = 0;
      for (let v = 1; v < 50; v++) if (last[v] > last[best]) best = v;
      seq.push(best);
    }
    expect([...ids]).toEqual(seq.slice(3));
    let seen = 0;
    expect(() =>
      model.generate(prompt, {
        maxNewTokens: 5,
        onToken: () => {
          seen = wasmResidentBytes();
          throw new Error('stop');
        },
      }),
    ).toThrow('stop');
    expect(seen).toBeGreaterThan(0); // the packed weights (and the cache) were resident during the call
    expect(wasmResidentBytes()).toBe(0);
  });
});
