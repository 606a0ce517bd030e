// The heads' layout moves and linear's bias gradient in WASM (assembly/ops.ts permuteRuns and colSums,
// driven by src/kernels/ops-wasm.ts permuteWasm and colSumsWasm, called by src/kernels/matmul.ts) against
// element loops written here: swapMiddle and its accumulating form, packed q | k | v to heads and back
// (one part, and every part at once), on odd sizes (1, 3, 17, 65, 129), several staged groups of slices,
// slices too big for the scratch (the JS loop then runs), and hostile values (NaN, ±∞, −0, huge).
// One decision to know: the moves are copies and float32 additions, and the bias sums are the JS loop's
// float64 additions in its order, so every result must be the reference's bit for bit (Object.is).

import { describe, expect, it } from 'vitest';
import {
  headsToPackedAccumulate,
  headsToPackedAccumulateParts,
  headsToPackedJob,
  linearGradBias,
  packedToHeads,
  packedToHeadsJob,
  packedToHeadsParts,
  swapMiddle,
  swapMiddleAccumulate,
  swapMiddleJob,
  WASM_LAYOUT_MIN,
} from '../src/kernels/matmul.js';
import { colSumsWasm, permuteWasm } from '../src/kernels/ops-wasm.js';
import { wasmSupport } from '../src/kernels/wasm-runtime.js';
import { Generator } from '../src/random.js';

const SIZES = [1, 3, 17, 65, 129];
const wasm = wasmSupport() === true;

/** Random floats with, when `hostile`, NaN, ±∞, −0 and huge values sprinkled in. */
function floats(gen: Generator, n: number, hostile = false): Float32Array {
  const a = new Float32Array(n);
  const odd = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -0, 3e38, -3e38];
  for (let i = 0; i < n; i++) {
    a[i] = hostile && gen.random() < 0.05 ? odd[Math.floor(gen.random() * odd.length)] : gen.random() * 8 - 4;
  }
  return a;
}

/**
 * dy [N, M] whose every column mixes pairs ±v of magnitude up to 1e20 with values in [−1, 1], in shuffled
 * rows: a small value added while the partial sum is large is lost to float64 rounding, so the column sums
 * depend on the order of the additions (a chunk of rows skipped, repeated or summed out of turn changes bits).
 */
function cancelling(gen: Generator, N: number, M: number): Float32Array {
  const dy = new Float32Array(N * M);
  for (let m = 0; m < M; m++) {
    const col: number[] = [];
    while (col.length + 2 <= N) {
      const v = Math.fround((gen.random() * 2 - 1) * 1e20);
      col.push(v, -v);
      if (col.length < N) col.push(gen.random() * 2 - 1);
    }
    while (col.length < N) col.push(gen.random() * 2 - 1);
    for (let i = col.length - 1; i > 0; i--) {
      const j = Math.floor(gen.random() * (i + 1));
      [col[i], col[j]] = [col[j], col[i]];
    }
    for (let n = 0; n < N; n++) dy[n * M + m] = col[n];
  }
  return dy;
}

function expectSame(label: string, got: ArrayLike<number>, want: ArrayLike<number>): void {
  expect(got.length, label).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    if (!Object.is(got[i], want[i])) expect.fail(`${label} [${i}]: got ${got[i]}, want ${want[i]}`);
  }
}

/** y [A, C, B, D] (= or +=) x [A, B, C, D], element by element. */
function swapRef(
  x: Float32Array,
  A: number,
  B: number,
  C: number,
  D: number,
  y: Float32Array,
  add: boolean,
): void {
  for (let a = 0; a < A; a++)
    for (let b = 0; b < B; b++)
      for (let c = 0; c < C; c++)
        for (let d = 0; d < D; d++) {
          const from = ((a * B + b) * C + c) * D + d;
          const to = ((a * C + c) * B + b) * D + d;
          y[to] = add ? Math.fround(y[to] + x[from]) : x[from];
        }
}

/** Part `part` of packed x [N, L, P, H, E] ↔ heads h [N, H, L, E]; toHeads copies, else adds into x. */
function packedRef(
  x: Float32Array,
  N: number,
  L: number,
  P: number,
  part: number,
  H: number,
  E: number,
  h: Float32Array,
  toHeads: boolean,
): void {
  for (let n = 0; n < N; n++)
    for (let i = 0; i < L; i++)
      for (let hh = 0; hh < H; hh++)
        for (let e = 0; e < E; e++) {
          const p = (((n * L + i) * P + part) * H + hh) * E + e;
          const q = ((n * H + hh) * L + i) * E + e;
          if (toHeads) h[q] = x[p];
          else x[p] = Math.fround(x[p] + h[q]);
        }
}

/** db += column sums of dy [N, M] in float64, in linearGradBias's order (four rows a sweep, then the rest). */
function colSumsRef(dy: Float32Array, N: number, M: number, db: Float32Array): void {
  const s = new Float64Array(M);
  let n = 0;
  for (; n + 4 <= N; n += 4)
    for (let m = 0; m < M; m++)
      s[m] = s[m] + dy[n * M + m] + dy[(n + 1) * M + m] + dy[(n + 2) * M + m] + dy[(n + 3) * M + m];
  for (; n < N; n++) for (let m = 0; m < M; m++) s[m] += dy[n * M + m];
  for (let m = 0; m < M; m++) db[m] += s[m];
}

describe.skipIf(!wasm)('layout moves in WASM (permuteWasm)', () => {
  it('swaps the middle axes, copying and adding, bit for bit, on odd sizes and hostile values', () => {
    const gen = new Generator(1);
    for (const D of SIZES) {
      for (const [A, B, C] of [
        [1, 3, 5],
        [2, 17, 1],
        [3, 4, 65],
        [1, 129, 3],
      ]) {
        const x = floats(gen, A * B * C * D, true);
        const want = new Float32Array(x.length);
        swapRef(x, A, B, C, D, want, false);
        const got = new Float32Array(x.length).fill(7);
        const side = (data: Float32Array, s: [number, number, number]) => ({ data, off: 0, strides: s });
        const xs: [number, number, number] = [B * C * D, C * D, D];
        const ys: [number, number, number] = [C * B * D, D, B * D];
        expect(permuteWasm([{ from: side(x, xs), to: side(got, ys) }], [A, B, C, D], false)).toBe(true);
        expectSame(`swap [${A},${B},${C},${D}]`, got, want);
        const acc = floats(gen, x.length, true);
        const wantAcc = acc.slice();
        swapRef(x, A, B, C, D, wantAcc, true);
        expect(permuteWasm([{ from: side(x, xs), to: side(acc, ys) }], [A, B, C, D], true)).toBe(true);
        expectSame(`swap += [${A},${B},${C},${D}]`, acc, wantAcc);
      }
    }
  });

  it("swapMiddle and swapMiddleAccumulate take it above WASM_LAYOUT_MIN and give the loops' results", () => {
    const gen = new Generator(2);
    // [16, 128, 4, 32] is T1's heads; [1, 1024, 8, 64] P2's; [3, 65, 17, 17] odd; [30, 256, 8, 64] more
    // than the scratch holds at once (two passes: 24 slices, then 6).
    for (const [A, B, C, D] of [
      [16, 128, 4, 32],
      [1, 1024, 8, 64],
      [3, 65, 17, 17],
      [30, 256, 8, 64],
    ]) {
      const x = floats(gen, A * B * C * D, true);
      expect(x.length).toBeGreaterThanOrEqual(WASM_LAYOUT_MIN);
      const want = new Float32Array(x.length);
      swapRef(x, A, B, C, D, want, false);
      expectSame('swapMiddle', swapMiddle(x, A, B, C, D), want);
      expectSame('swapMiddle into out', swapMiddle(x, A, B, C, D, new Float32Array(x.length)), want);
      const dst = floats(gen, x.length, true);
      const wantDst = dst.slice();
      swapRef(x, A, B, C, D, wantDst, true);
      swapMiddleAccumulate(x, A, B, C, D, dst);
      expectSame('swapMiddleAccumulate', dst, wantDst);
    }
  });

  it('splits packed q | k | v into heads and merges heads back, one part or all at once', () => {
    const gen = new Generator(3);
    for (const [N, L, H, E] of [
      [1, 3, 1, 1],
      [2, 17, 3, 3],
      [16, 128, 4, 32],
      [1, 65, 2, 17],
      [3, 129, 5, 1],
      [3, 1024, 4, 64], // P2-sized rows: a packed slice of 786 K floats
    ]) {
      const P = 3;
      const x = floats(gen, N * L * P * H * E, true);
      const n = N * H * L * E;
      const parts = [0, 1, 2].map((part) => {
        const h = new Float32Array(n);
        packedRef(x, N, L, P, part, H, E, h, true);
        return h;
      });
      for (let part = 0; part < P; part++) {
        expectSame(`packedToHeads part ${part}`, packedToHeads(x, N, L, P, part, H, E), parts[part]);
        // Straight through permuteWasm too, whatever the size.
        const got = new Float32Array(n);
        const W = H * E;
        const job = {
          from: { data: x, off: part * W, strides: [L * P * W, P * W, E] as [number, number, number] },
          to: { data: got, off: 0, strides: [H * L * E, E, L * E] as [number, number, number] },
        };
        expect(permuteWasm([job], [N, L, H, E], false)).toBe(true);
        expectSame(`permuteWasm part ${part}`, got, parts[part]);
      }
      const outs = [0, 1, 2].map(() => new Float32Array(n).fill(5));
      packedToHeadsParts(x, N, L, P, H, E, outs);
      for (const [part, o] of outs.entries()) expectSame(`packedToHeadsParts part ${part}`, o, parts[part]);

      const gs = [0, 1, 2].map(() => floats(gen, n, true));
      const dst = floats(gen, x.length, true);
      const want = dst.slice();
      for (const [part, g] of gs.entries()) packedRef(want, N, L, P, part, H, E, g, false);
      const one = dst.slice();
      for (const [part, g] of gs.entries()) headsToPackedAccumulate(g, N, L, P, part, H, E, one);
      expectSame(`headsToPackedAccumulate [${N},${L},${H},${E}]`, one, want);
      const all = dst.slice();
      headsToPackedAccumulateParts(gs, N, L, P, H, E, all);
      expectSame(`headsToPackedAccumulateParts [${N},${L},${H},${E}]`, all, want);
    }
  });

  it('refuses a slice larger than its scratch without writing, and the JS loop still gives the answer', () => {
    // One slice of 4 M floats, in and out: more than the 24 MB a call may stage.
    const [A, B, C, D] = [1, 4096, 2, 512];
    const x = floats(new Generator(4), A * B * C * D);
    const y = new Float32Array(x.length).fill(9);
    const job = {
      from: { data: x, off: 0, strides: [B * C * D, C * D, D] as [number, number, number] },
      to: { data: y, off: 0, strides: [C * B * D, D, B * D] as [number, number, number] },
    };
    expect(permuteWasm([job], [A, B, C, D], false)).toBe(false);
    expect(y.every((v) => v === 9)).toBe(true);
    const want = new Float32Array(x.length);
    swapRef(x, A, B, C, D, want, false);
    expectSame('swapMiddle (JS loop)', swapMiddle(x, A, B, C, D), want);
  });

  it("serves matmul's jobs (what swapMiddle and the packed moves hand it) at T1's and P2's sizes", () => {
    const gen = new Generator(6);
    for (const [A, B, C, D] of [
      [16, 128, 4, 32],
      [1, 1024, 8, 64],
    ]) {
      const x = floats(gen, A * B * C * D, true);
      const want = new Float32Array(x.length);
      swapRef(x, A, B, C, D, want, false);
      const got = new Float32Array(x.length);
      expect(permuteWasm([swapMiddleJob(x, B, C, D, got)], [A, B, C, D], false)).toBe(true);
      expectSame('swapMiddleJob', got, want);
    }
    for (const [N, L, H, E] of [
      [16, 128, 4, 32],
      [1, 1024, 8, 64],
    ]) {
      const x = floats(gen, N * L * 3 * H * E, true);
      const n = N * H * L * E;
      const outs = [0, 1, 2].map(() => new Float32Array(n));
      const jobs = outs.map((y, part) => packedToHeadsJob(x, L, 3, part, H, E, y));
      expect(permuteWasm(jobs, [N, L, H, E], false)).toBe(true);
      const gs = [0, 1, 2].map(() => floats(gen, n, true));
      const dst = floats(gen, x.length, true);
      const want = dst.slice();
      for (let part = 0; part < 3; part++) {
        const h = new Float32Array(n);
        packedRef(x, N, L, 3, part, H, E, h, true);
        expectSame(`packedToHeadsJob part ${part}`, outs[part], h);
        packedRef(want, N, L, 3, part, H, E, gs[part], false);
      }
      const back = gs.map((g, part) => headsToPackedJob(g, L, 3, part, H, E, dst));
      expect(permuteWasm(back, [N, H, L, E], true)).toBe(true);
      expectSame('headsToPackedJob', dst, want);
    }
  });

  it('refuses an array shorter than its runs reach, before writing anything', () => {
    const [A, B, C, D] = [30, 256, 8, 64]; // two passes: the second would run past dst's end
    const x = floats(new Generator(7), A * B * C * D);
    const dst = new Float32Array(x.length - 1).fill(3);
    expect(permuteWasm([swapMiddleJob(x, B, C, D, dst)], [A, B, C, D], true)).toBe(false);
    expect(dst.every((v) => v === 3)).toBe(true);
  });

  it('does not serve float64 arrays (gradient checks keep their loops)', () => {
    const x = new Float64Array(8);
    const job = {
      from: { data: x, off: 0, strides: [8, 4, 2] as [number, number, number] },
      to: { data: new Float64Array(8), off: 0, strides: [8, 2, 4] as [number, number, number] },
    };
    expect(permuteWasm([job], [1, 2, 2, 2], false)).toBe(false);
  });
});

describe.skipIf(!wasm)("linear's bias gradient in WASM (colSumsWasm)", () => {
  it('adds the float64 column sums of the JS loop, bit for bit, across chunks and ragged rows', () => {
    const gen = new Generator(5);
    // Columns whose float64 sums depend on the order of their additions (see `cancelling`). M = 17 with
    // 4001 rows crosses the 64 K-float chunk (3852 rows) and ends on a ragged row; M = 65 537 takes
    // chunks of 4 rows.
    for (const [N, M] of [
      ...SIZES.map((n) => [n, SIZES[(n * 7) % SIZES.length]]),
      [4001, 17],
      [4003, 3],
      [9, 65537],
      [2048, 512],
    ]) {
      const dy = cancelling(gen, N, M);
      const db = floats(gen, M);
      const want = db.slice();
      colSumsRef(dy, N, M, want);
      // The order matters with these columns: the rows summed in reverse give other bits somewhere.
      const reversed = new Float32Array(dy.length);
      for (let n = 0; n < N; n++) reversed.set(dy.subarray(n * M, (n + 1) * M), (N - 1 - n) * M);
      const other = db.slice();
      colSumsRef(reversed, N, M, other);
      if (N >= 129) expect(other.some((v, m) => !Object.is(v, want[m]))).toBe(true);
      const got = db.slice();
      expect(colSumsWasm(dy, N, M, got)).toBe(true);
      expectSame(`colSums [${N}, ${M}]`, got, want);
      const viaLinear = db.slice();
      linearGradBias(dy, N, M, viaLinear);
      expectSame(`linearGradBias [${N}, ${M}]`, viaLinear, want);
    }
    // Hostile values land where the loop puts them: a NaN column, a +∞ column, a −∞ + ∞ column.
    const [N, M] = [4001, 5];
    const dy = cancelling(gen, N, M);
    dy[7 * M + 1] = Number.NaN;
    dy[100 * M + 2] = Number.POSITIVE_INFINITY;
    dy[3 * M + 3] = Number.POSITIVE_INFINITY;
    dy[4000 * M + 3] = Number.NEGATIVE_INFINITY;
    const want = new Float32Array(M);
    colSumsRef(dy, N, M, want);
    const got = new Float32Array(M);
    expect(colSumsWasm(dy, N, M, got)).toBe(true);
    expectSame('colSums hostile', got, want);
    expect([Number.isFinite(got[0]), got[1], got[2], got[3], Number.isFinite(got[4])]).toEqual([
      true,
      Number.NaN,
      Number.POSITIVE_INFINITY,
      Number.NaN,
      true,
    ]);
  });

  it('leaves float64 gradients to the JS loop', () => {
    expect(colSumsWasm(new Float32Array(8), 2, 4, new Float64Array(4))).toBe(false);
  });
});
