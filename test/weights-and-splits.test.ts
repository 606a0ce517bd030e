// Two regressions. Weights: the flash, wasm and auto kernels return attention weights in [0, 1] whose
// visible rows sum to 1, however large the (float32-finite) scores: the weights pass recomputes each
// score exactly as the pass its row max and sum came from (it summed the dot product in another order,
// and at scores of 1e15 the two differ by whole units: weights of 2980, or +∞). Splits: the WASM kernel's
// result for a query row does not depend on how rows are split into chunks or tasks, so the threaded
// calls give the sync call's bits on sliding windows (its key columns started where a chunk's band
// started, and the SIMD summation order with them) and on the last few rows of a split call (which took
// the decode path). Sync kernels run from src/; the worker pool runs the built package (dist/).

import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { attentionWeights, scaledDotProductAttention, Tensor } from '../src/index.js';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const built = await import(`${dist}index.node.js`);
afterAll(() => built.terminateWorkers());

const KERNELS = ['flash', 'wasm', 'auto'] as const;

/** Every weight in [0, 1] and every row that sees a key summing to 1; rows listed in `empty` all 0. */
function expectSoftmaxRows(label: string, w: ArrayLike<number>, S: number, empty: (row: number) => boolean) {
  const rows = w.length / S;
  for (let r = 0; r < rows; r++) {
    let sum = 0;
    for (let j = 0; j < S; j++) {
      const x = w[r * S + j];
      if (!(x >= 0 && x <= 1)) expect.fail(`${label}: weight [${r}, ${j}] = ${x}, outside [0, 1]`);
      sum += x;
    }
    if (empty(r)) {
      if (sum !== 0) expect.fail(`${label}: row ${r} sees no key but its weights sum to ${sum}`);
    } else if (!(Math.abs(sum - 1) <= 1e-5)) expect.fail(`${label}: row ${r} sums to ${sum}`);
  }
}

function scaled(shape: number[], seed: number, factor: number): Tensor {
  const t = Tensor.randn(shape, { seed });
  for (let i = 0; i < t.data.length; i++) t.data[i] *= factor;
  return t;
}

describe('attention weights stay a softmax at huge scores', () => {
  it('attentionWeights, causal, inputs of 1e4 … 1e18 (scores up to ~1e37)', () => {
    const S = 130;
    for (const factor of [1e4, 1e8, 1e15, 1e18]) {
      const q = scaled([2, 2, S, 16], 1, factor);
      const k = scaled([2, 2, S, 16], 2, factor);
      for (const kernel of KERNELS) {
        const w = attentionWeights(q, k, { causal: true, kernel }).data;
        expectSoftmaxRows(`${kernel}, inputs × ${factor}`, w, S, () => false);
      }
    }
  });

  it('a sliding window and a mask that blocks every key of query 3: that row is all 0', () => {
    const S = 70;
    const q = scaled([1, 2, S, 8], 3, 1e9);
    const k = scaled([1, 2, S, 8], 4, 1e9);
    const mask = Tensor.from(Array.from({ length: S }, (_, i) => new Array(S).fill(i === 3 ? 0 : 1)));
    for (const kernel of KERNELS) {
      const w = attentionWeights(q, k, { causal: true, window: [5, 0], mask, kernel }).data;
      expectSoftmaxRows(`${kernel}, window [5, 0], masked row`, w, S, (r) => r % S === 3);
    }
  });

  it('one key of ~1e29 wins: weights [0, 1] (were [0, +Infinity])', () => {
    const q = Tensor.from([
      [
        0.20474588871002197, -0.45741164684295654, 0.46824708580970764, -0.3821587562561035,
        0.4611563980579376, -0.41377174854278564, -0.46726474165916443, 0.1281312108039856,
        0.4825124740600586, 0.027947425842285156, 0.47547435760498047, 0.22368335723876953,
        -0.23423099517822266, -0.030684471130371094, 0.3228788375854492, -0.4365720748901367,
      ],
    ]);
    const big = [
      1.9175573338263128e29, 4.308158273924183e29, -3.389829509356695e29, 2.2389999422662618e29,
      -3.262948966694953e29, -3.976812107391019e29, 1.6142308329707753e28, -2.467997126648236e29,
      4.08529997707528e29, -4.1199708362138716e29, 4.908836112548148e29, -3.6161494897322004e29,
      7.555416139059175e28, -1.1860979000364373e29, -9.429347495738101e28, -3.3321988821677095e29,
    ];
    const k = Tensor.from([new Array(16).fill(0), big]);
    const v = Tensor.from([
      [1, 2],
      [3, 4],
    ]);
    for (const kernel of ['reference', ...KERNELS] as const) {
      expect(Array.from(attentionWeights(q, k, { kernel }).data), kernel).toEqual([0, 1]);
      expect(Array.from(scaledDotProductAttention(q, k, v, { kernel }).data), kernel).toEqual([3, 4]);
    }
  });

  it('two tied keys at scores of ~1e20 share the row: 0.5 each (lse = m + log 2 rounds to m there)', () => {
    const q = Tensor.from([[1e10, 1e10, 0, 0]]);
    const k = Tensor.from([
      [3e9, 1e9, 0, 0],
      [3e9, 1e9, 0, 0],
      [-1e9, 0, 0, 0],
    ]);
    for (const kernel of ['reference', ...KERNELS] as const) {
      expect(Array.from(attentionWeights(q, k, { kernel }).data), kernel).toEqual([0.5, 0.5, 0]);
    }
  });

  it('MultiHeadAttention needWeights, causal, inputs of 1e8 and 1e15', () => {
    const mha = new built.MultiHeadAttention({ embedDim: 32, numHeads: 4, seed: 1 });
    const S = 130;
    for (const factor of [1e8, 1e15]) {
      const x = scaled([2, S, 32], 2, factor);
      const xb = new built.Tensor(x.data, x.shape);
      for (const kernel of KERNELS) {
        const { weights } = mha.forward(xb, xb, xb, { causal: true, needWeights: true, kernel });
        expectSoftmaxRows(`MHA ${kernel}, inputs × ${factor}`, weights.data, S, () => false);
      }
    }
  });
});

/** How many elements differ as bits (Object.is), with the first. */
function bitDiff(a: ArrayLike<number>, b: ArrayLike<number>): string {
  let n = 0;
  let first = -1;
  for (let i = 0; i < a.length; i++) {
    if (!Object.is(a[i], b[i])) {
      n++;
      if (first < 0) first = i;
    }
  }
  return n === 0 ? 'identical' : `${n} elements differ (first at ${first}: ${a[first]} vs ${b[first]})`;
}

type Window = { window: [number, number]; causal?: boolean };
const WINDOWS: Window[] = [
  { window: [3, 0] },
  { window: [3, 2] },
  { window: [1, 1] },
  { window: [5, -1], causal: true },
  { window: [16, 0] },
];

describe('threaded results are the sync bits whatever the row split', () => {
  for (const L of [17, 256, 512]) {
    it(`MultiHeadAttention forwardAsync = forward, sliding windows, L = ${L}`, async () => {
      const mha = new built.MultiHeadAttention({ embedDim: 32, numHeads: 4, seed: 1 });
      const x = built.Tensor.randn([2, L, 32], { seed: 2 });
      for (const o of WINDOWS) {
        const sync = mha.forward(x, x, x, o).output.data;
        for (const threads of [1, 2]) {
          const got = (await mha.forwardAsync(x, x, x, { ...o, threads })).output.data;
          expect(bitDiff(got, sync), `${JSON.stringify(o)}, threads ${threads}`).toBe('identical');
        }
      }
    });

    it(`scaledDotProductAttentionAsync = scaledDotProductAttention, sliding windows, L = ${L}`, async () => {
      const q = built.Tensor.randn([1, 2, L, 8], { seed: 1 });
      const k = built.Tensor.randn([1, 2, L, 8], { seed: 2 });
      const v = built.Tensor.randn([1, 2, L, 8], { seed: 3 });
      for (const o of WINDOWS) {
        for (const kernel of ['wasm', 'auto']) {
          const sync = built.scaledDotProductAttention(q, k, v, { ...o, kernel }).data;
          for (const threads of [1, 2]) {
            const got = (await built.scaledDotProductAttentionAsync(q, k, v, { ...o, kernel, threads })).data;
            expect(bitDiff(got, sync), `${JSON.stringify(o)}, ${kernel}, threads ${threads}`).toBe(
              'identical',
            );
          }
        }
      }
    });
  }

  it('the last few rows of a split call (tasks of 32 rows; 1 to 4 left) match too', async () => {
    for (const L of [33, 97, 100]) {
      const q = built.Tensor.randn([1, 2, L, 64], { seed: 1 });
      const k = built.Tensor.randn([1, 2, L, 64], { seed: 2 });
      const v = built.Tensor.randn([1, 2, L, 64], { seed: 3 });
      for (const o of [{}, { causal: true }, { window: [50, 0] }]) {
        const sync = built.scaledDotProductAttention(q, k, v, { ...o, kernel: 'wasm' }).data;
        const got = (
          await built.scaledDotProductAttentionAsync(q, k, v, { ...o, kernel: 'wasm', threads: 2 })
        ).data;
        expect(bitDiff(got, sync), `L ${L} ${JSON.stringify(o)}`).toBe('identical');
      }
    }
  });

  it('streamed K/V (E = 1000: 2048 keys a chunk, S = 2500), windows whose band starts off the grid', async () => {
    const [L, E, Ev] = [2500, 1000, 24];
    const q = built.Tensor.randn([1, 1, L, E], { seed: 1 });
    const k = built.Tensor.randn([1, 1, L, E], { seed: 2 });
    const v = built.Tensor.randn([1, 1, L, Ev], { seed: 3 });
    for (const t of [q, k]) for (let i = 0; i < t.data.length; i++) t.data[i] *= 0.15;
    for (const o of [{ window: [300, 0] }, { window: [700, 0], causal: true }]) {
      const sync = built.scaledDotProductAttention(q, k, v, { ...o, kernel: 'wasm' }).data;
      const got = (await built.scaledDotProductAttentionAsync(q, k, v, { ...o, kernel: 'wasm', threads: 2 }))
        .data;
      expect(bitDiff(got, sync), JSON.stringify(o)).toBe('identical');
      if (o.causal) continue; // (one accuracy check is enough: the JS kernel takes a while here)
      const flash = built.scaledDotProductAttention(q, k, v, { ...o, kernel: 'flash' }).data;
      let worst = 0;
      for (let i = 0; i < sync.length; i++) worst = Math.max(worst, Math.abs(sync[i] - flash[i]));
      expect(worst, JSON.stringify(o)).toBeLessThan(1e-5);
    }
  }, 60_000);
});
