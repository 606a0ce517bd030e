// MultiHeadAttention.forward in one piece on the WASM instance (src/attention/multihead-resident.ts): the
// projections written as heads in place, attention on resident views, the merge and out-projection there.
// One decision to know: the expectation is always the step-by-step path (attentionSublayer over
// tensorOps, what forward ran before), compared bit for bit; the pieces are checked the same way: the
// resident GEMM against the WASM GEMM, the attention kernel on views that memory growth detaches against
// the same kernel on plain arrays.

import { describe, expect, it } from 'vitest';
import { planAttention } from '../src/attention/plan.js';
import { runKernel } from '../src/attention/sdpa.js';
import { MultiHeadAttention, Tensor } from '../src/index.js';
import { type GemmProblem, gemm } from '../src/kernels/gemm.js';
import { type ResidentOut, wasmGemmResident } from '../src/kernels/gemm-wasm.js';
import {
  allocateResident,
  freeResident,
  liveView,
  residentView,
  wasmMemoryBytes,
  wasmResidentBytes,
  wasmSupport,
} from '../src/kernels/wasm-runtime.js';
import { attentionSublayer } from '../src/model/block.js';
import { tensorOps } from '../src/model/ops-tensor.js';
import { Generator } from '../src/random.js';

const wasm = wasmSupport() === true;

function randomArray(n: number, g: Generator, poison = false): Float32Array {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = g.random() * 2 - 1;
  if (poison && n > 3) [x[1], x[n >> 1], x[n - 2]] = [Number.NaN, Number.POSITIVE_INFINITY, -3e38];
  return x;
}

/** Same floats, NaNs included, signed zeros told apart; fails naming the first difference. */
function expectBitsEqual(label: string, got: Float32Array, want: Float32Array): void {
  expect(got.length, label).toBe(want.length);
  const a = new Uint32Array(got.buffer, got.byteOffset, got.length);
  const b = new Uint32Array(want.buffer, want.byteOffset, want.length);
  let first = -1;
  for (let i = 0; i < a.length && first < 0; i++) if (a[i] !== b[i]) first = i;
  expect(first, first < 0 ? '' : `${label}: element ${first}: ${got[first]} vs ${want[first]}`).toBe(-1);
}

/** forward's step-by-step path on the layer's parameters (rank-3 inputs). */
function steps(
  mha: MultiHeadAttention,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: Record<string, unknown>,
): { out: Float32Array; weights?: Float32Array } {
  const { needWeights = false, ...attention } = options;
  const { out, weights } = attentionSublayer(
    tensorOps,
    {
      qProjWeight: mha.qProjWeight,
      kProjWeight: mha.kProjWeight,
      vProjWeight: mha.vProjWeight,
      inProjBias: mha.inProjBias,
      outProjWeight: mha.outProjWeight,
      outProjBias: mha.outProjBias,
    },
    q,
    { key: k, value: v },
    {
      ...attention,
      numHeads: mha.numHeads,
      numKvHeads: mha.numKvHeads,
      needWeights: needWeights as boolean,
      caller: 'test',
    },
  );
  return { out: out.data as Float32Array, weights: weights?.data as Float32Array | undefined };
}

interface Case {
  B: number;
  L: number;
  S: number;
  D: number;
  H: number;
  Hkv?: number;
  kdim?: number;
  vdim?: number;
  bias?: boolean;
  cross?: boolean;
  options?: Record<string, unknown>;
  poison?: boolean;
}

describe.skipIf(!wasm)('MultiHeadAttention.forward in one piece equals the steps bit for bit', () => {
  const g = new Generator(11);
  const cases: Case[] = [
    { B: 1, L: 64, S: 64, D: 64, H: 8 },
    { B: 2, L: 37, S: 53, D: 64, H: 4, Hkv: 2, cross: true },
    { B: 3, L: 5, S: 9, D: 48, H: 3, kdim: 20, vdim: 7, cross: true },
    { B: 2, L: 130, S: 130, D: 96, H: 4, options: { causal: true } },
    { B: 1, L: 7, S: 19, D: 32, H: 2, options: { causal: 'top-left', window: [3, 1] }, cross: true },
    { B: 2, L: 3, S: 3, D: 16, H: 2 }, // ≤ 4 rows: the decode path
    { B: 1, L: 1, S: 1, D: 8, H: 1, bias: false },
    { B: 1, L: 600, S: 600, D: 16, H: 2, bias: false, options: { causal: true } }, // row blocks past MC
    { B: 2, L: 33, S: 41, D: 64, H: 8, Hkv: 1, cross: true, options: { needWeights: true } },
    { B: 1, L: 21, S: 21, D: 32, H: 4, poison: true },
    { B: 2, L: 9, S: 11, D: 24, H: 3, cross: true, poison: true, options: { causal: true } },
  ];
  for (const c of cases) {
    it(`B=${c.B} L=${c.L} S=${c.S} D=${c.D} H=${c.H}/${c.Hkv ?? c.H}${c.cross ? ' cross' : ''}${c.poison ? ' NaN/∞' : ''} ${JSON.stringify(c.options ?? {})}`, () => {
      const mha = new MultiHeadAttention({
        embedDim: c.D,
        numHeads: c.H,
        numKvHeads: c.Hkv,
        kdim: c.kdim,
        vdim: c.vdim,
        bias: c.bias,
        seed: c.L + c.S,
      });
      const x = new Tensor(randomArray(c.B * c.L * c.D, g, c.poison), [c.B, c.L, c.D]);
      const key = c.cross
        ? new Tensor(randomArray(c.B * c.S * (c.kdim ?? c.D), g), [c.B, c.S, c.kdim ?? c.D])
        : x;
      const value = c.cross
        ? new Tensor(randomArray(c.B * c.S * (c.vdim ?? c.D), g, c.poison), [c.B, c.S, c.vdim ?? c.D])
        : x;
      const options = { ...c.options };
      const got = mha.forward(x, key, value, options);
      const want = steps(mha, x, key, value, options);
      expectBitsEqual('output', got.output.data as Float32Array, want.out);
      if (options.needWeights) expectBitsEqual('weights', got.weights!.data as Float32Array, want.weights!);
      expect(wasmResidentBytes(), 'the call frees its activations').toBe(0);
    });
  }

  it('with a mask and an additive bias (a fully masked row included), unbatched', () => {
    const [L, S, D, H] = [12, 12, 32, 4];
    const mha = new MultiHeadAttention({ embedDim: D, numHeads: H, seed: 5 });
    const x = new Tensor(randomArray(L * D, g), [L, D]);
    const mask = new Tensor(
      Float32Array.from({ length: L * S }, (_, i) => (Math.floor(i / S) === 3 ? 0 : (i * 7) % 3 ? 1 : 0)),
      [L, S],
    );
    const bias = new Tensor(randomArray(H * L * S, g), [H, L, S]);
    const got = mha.forward(x, x, x, { mask, bias, needWeights: true });
    const x3 = new Tensor(x.data, [1, L, D]);
    const want = steps(mha, x3, x3, x3, {
      mask: new Tensor(mask.data, [1, 1, L, S]),
      bias: new Tensor(bias.data, [1, H, L, S]),
      needWeights: true,
    });
    expectBitsEqual('output', got.output.data as Float32Array, want.out);
    expectBitsEqual('weights', got.weights!.data as Float32Array, want.weights!);
  });

  it('no keys (S = 0), batched and unbatched: the steps’ result, nothing left resident', () => {
    const mha = new MultiHeadAttention({ embedDim: 16, numHeads: 2, seed: 1 });
    for (const [B, L] of [
      [1, 3],
      [2, 5],
    ]) {
      const x = new Tensor(randomArray(B * L * 16, g), [B, L, 16]);
      const empty = new Tensor(new Float32Array(0), [B, 0, 16]);
      const want = steps(mha, x, empty, empty, {}).out;
      expectBitsEqual(`B=${B}`, mha.forward(x, empty, empty).output.data as Float32Array, want);
      expect(wasmResidentBytes()).toBe(0);
    }
    const x2 = new Tensor(randomArray(5 * 16, g), [5, 16]);
    const none = new Tensor(new Float32Array(0), [0, 16]);
    expect(mha.forward(x2, none, none).output.shape).toEqual([5, 16]);
  });

  it('heads not a multiple of 8 wide take the steps, with the same result', () => {
    for (const [D, H] of [
      [12, 2],
      [20, 5],
    ]) {
      const mha = new MultiHeadAttention({ embedDim: D, numHeads: H, seed: 3 });
      const x = new Tensor(randomArray(2 * 7 * D, g), [2, 7, D]);
      expectBitsEqual(
        `width ${D / H}`,
        mha.forward(x).output.data as Float32Array,
        steps(mha, x, x, x, {}).out,
      );
    }
  });
});

describe.skipIf(!wasm)('the resident GEMM (wasmGemmResident) equals the WASM GEMM bit for bit', () => {
  // [batches of rows, rows per batch, groups, width, K]: partial 4-row tiles, one row, K past a 512-block,
  // N past one N block (B_BUDGET / K / width groups), width 8.
  const shapes: [number, number, number, number, number][] = [
    [1, 1024, 8, 64, 512],
    [3, 5, 2, 8, 9],
    [2, 130, 3, 16, 33],
    [1, 1, 1, 8, 1],
    [2, 7, 4, 24, 1100],
    [1, 3, 40, 64, 600],
  ];
  for (const [batches, rows, groups, width, K] of shapes) {
    it(`${batches}×${rows} rows, ${groups} groups of ${width}, K=${K}: C in place and A resident (bias, accumulate, GELU)`, () => {
      const g = new Generator(batches * rows + groups * width + K);
      const M = batches * rows;
      const N = groups * width;
      for (const [accumulate, gelu, withBias] of [
        [false, false, true],
        [true, false, true],
        [false, true, true],
        [false, false, false],
      ] as const) {
        const a = randomArray(M * K, g, true);
        const w = randomArray(N * K, g);
        const bias = withBias ? randomArray(N, g) : undefined;
        const c0 = randomArray(M * N, g);
        const p: GemmProblem = {
          M,
          N,
          K,
          a,
          b: w,
          transA: false,
          transB: true,
          bias,
          accumulate,
          gelu,
          precision: 'float32',
        };
        const want = gemm(p, c0.slice(), 'wasm');
        // C in place as heads [batches, groups, rows, width]; A staged from p.a, then read resident.
        const owner = {};
        const allocation = allocateResident('test', (M * K + M * N) * 4, owner)!;
        try {
          const heads = residentView(allocation, 0, M * N);
          const asHeads = (flat: Float32Array, into: Float32Array) => {
            for (let m = 0; m < M; m++)
              for (let j = 0; j < N; j++) {
                const [b, r, h, e] = [Math.floor(m / rows), m % rows, Math.floor(j / width), j % width];
                into[((b * groups + h) * rows + r) * width + e] = flat[m * N + j];
              }
          };
          const out: ResidentOut = {
            ptr: allocation.ptr,
            rows,
            width,
            ld: width,
            groupStride: rows * width * 4,
            batchStride: groups * rows * width * 4,
          };
          for (const residentA of [false, true]) {
            asHeads(c0, liveView(heads));
            if (residentA) residentView(allocation, M * N * 4, M * K).set(a);
            const at = residentA ? { a: { ptr: allocation.ptr + M * N * 4, ld: K }, out } : { out };
            wasmGemmResident('test', p, new Float32Array(0), at);
            const expected = new Float32Array(M * N);
            asHeads(want, expected);
            expectBitsEqual(
              `accumulate ${accumulate}, gelu ${gelu}, A resident ${residentA}`,
              liveView(heads),
              expected,
            );
          }
          // A plain [M, N] in place: one group as wide as N (a multiple of 8), one batch of rows.
          const flat = residentView(allocation, 0, M * N);
          flat.set(c0);
          wasmGemmResident('test', p, new Float32Array(0), {
            out: { ptr: allocation.ptr, rows: M, width: N, ld: N, groupStride: 0, batchStride: 0 },
          });
          expectBitsEqual('plain C', liveView(flat), want);
        } finally {
          freeResident(allocation);
        }
      }
    });
  }

  it('refuses what it cannot write in place, naming the function and the sizes', () => {
    const p: GemmProblem = {
      M: 4,
      N: 12,
      K: 3,
      a: new Float32Array(12),
      b: new Float32Array(36),
      transA: false,
      transB: true,
      precision: 'float32',
    };
    const out = { ptr: 16, rows: 4, width: 12, ld: 12, groupStride: 0, batchStride: 0 };
    expect(() => wasmGemmResident('f', p, new Float32Array(0), { out })).toThrow(/^f: .*width=12/);
    expect(() => wasmGemmResident('f', { ...p, transA: true }, new Float32Array(48), {})).toThrow(/^f: /);
  });
});

describe.skipIf(!wasm)('attention on resident views survives memory growth', () => {
  it('q, k, v and out views that the kernel’s own growth detaches are re-derived', () => {
    const [Hq, Hkv, L, S, E] = [4, 2, 37, 300, 16];
    const g = new Generator(3);
    const data = [Hq * L * E, Hkv * S * E, Hkv * S * E].map((n) => randomArray(n, g));
    const t = (x: Float32Array, H: number, n: number) => new Tensor(x, [1, H, n, E]);
    for (const options of [{ causal: true }, {}, { bias: new Tensor(randomArray(L * S, g), [1, 1, L, S]) }]) {
      const plain = (q: Float32Array, k: Float32Array, v: Float32Array) =>
        planAttention('test', t(q, Hq, L), t(k, Hkv, S), t(v, Hkv, S), { ...options, kernel: 'wasm' });
      const want = new Float32Array(Hq * L * E);
      runKernel('test', plain(data[0], data[1], data[2]), { out: want });
      // The views end where memory ends (a filler below them, nothing else resident), so the kernel's
      // scratch, above every allocation, can only be had by growing the memory under them.
      expect(wasmResidentBytes()).toBe(0);
      const owner = {};
      const bytes = 4 * (2 * Hq * L * E + 2 * Hkv * S * E);
      const probe = allocateResident('test', 16, owner)!;
      freeResident(probe);
      const room = Math.floor((wasmMemoryBytes() - probe.ptr - bytes) / 16) * 16 - 16;
      const filler = room > 0 ? allocateResident('test', room, owner) : undefined;
      const allocation = allocateResident('test', bytes, owner)!;
      try {
        let offset = 0;
        const [q, k, v, out] = [...data, want].map((x, i) => {
          const view = residentView(allocation, offset, x.length);
          offset += x.length * 4;
          if (i < 3) view.set(x);
          return view;
        });
        const before = q.buffer;
        runKernel('test', plain(q, k, v), { out });
        expect(liveView(q).buffer, 'the call grew the memory (the views it was given are detached)').not.toBe(
          before,
        );
        expectBitsEqual(`out ${JSON.stringify(Object.keys(options))}`, liveView(out), want);
      } finally {
        freeResident(allocation);
        if (filler) freeResident(filler);
      }
    }
  });
});
