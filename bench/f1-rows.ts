// One F1 row, in the table child's process: make q, k, v, load the kernel with a small call, note the RSS,
// set the row up (its mask, bias or block mask), run it once and check that run, then time it. Every row is checked against a float64
// computation of its rule done here (not by qkv): all query rows up to L = 1024, else sampled rows of every
// head (evenly spread, plus each document's first and last), and the last timed run is checked again.
// One decision to know: qkv runs every row with kernel 'auto'; which kernel that was is found by a small
// call of the same mods with kernel 'wasm' (the WASM kernel serves it or says why not, and 'auto' then
// takes the JS tiled kernel), and kernelSupport() tells whether the WASM kernel fell back at run time.

import {
  alibiBias,
  alibiScore,
  alibiSlopes,
  andMasks,
  causalMask,
  createBlockMask,
  documentMask,
  flexAttention,
  kernelSupport,
  type MaskMod,
  type ScoreMod,
  scaledDotProductAttention,
  Tensor,
} from 'qkv';
import { compare, type Expected } from './check.js';
import { F1_BLOCK, F1_CHECK, F1_RUNS, type F1Impl, type F1Shape, type F1Values, f1Group } from './f1.js';

export interface F1Job {
  table: 'f1';
  impl: F1Impl;
  shape: F1Shape;
  /** Untimed runs after the checked one (one fewer when the checked run took over F1_RUNS.slowMs). */
  warmup: number;
  /** Timed runs: at least minRuns, then until maxRuns or budgetMs of timed runs. */
  minRuns: number;
  maxRuns: number;
  budgetMs: number;
}

export interface F1Outcome {
  status: 'ok' | 'wrong' | 'failed' | 'unavailable';
  message?: string;
  timesMs: number[];
  values: F1Values;
  maxAbsError?: number;
  checkedAgainst?: string;
}

const rssMB = (): number => process.memoryUsage().rss / 2 ** 20;

/** Document ids: `docs` documents of L / docs tokens each, in order. */
export function docIds(s: F1Shape): Int32Array {
  const len = s.L / (s.docs ?? 1);
  return Int32Array.from({ length: s.L }, (_, i) => Math.floor(i / len));
}

/** The rule a row computes, as the check's float64 computation reads it. */
interface Rule {
  visible: (i: number, j: number) => boolean;
  /** Added to the scaled score of query i and key j of head h. */
  bias?: (h: number, i: number, j: number) => number;
  text: string;
}

/** ALiBi slopes 2^(−8(h+1)/H) for a power-of-two H, rounded to float32 as the library stores them. */
function slopes(H: number): Float64Array {
  if (!Number.isInteger(Math.log2(H))) throw new Error(`F1 checks ALiBi only for a power-of-two H, got ${H}`);
  return Float64Array.from({ length: H }, (_, h) => Math.fround(2 ** ((-8 * (h + 1)) / H)));
}

function ruleOf(impl: F1Impl, s: F1Shape): Rule {
  const ids = docIds(s);
  switch (f1Group(impl)) {
    case 'document':
      if (impl === 'flex-causal-document')
        return { visible: (i, j) => j <= i && ids[i] === ids[j], text: 'same document and kv ≤ q' };
      return { visible: (i, j) => ids[i] === ids[j], text: 'same document' };
    case 'causal':
      return { visible: (i, j) => j <= i, text: 'kv ≤ q' };
    case 'score': {
      const m = slopes(s.H);
      return { visible: () => true, bias: (h, i, j) => m[h] * (j - i), text: 'score + slope_h·(kv − q)' };
    }
  }
}

/** The query rows checked: flat (b·H + h)·L + i indices. */
function checkedRows(s: F1Shape): Int32Array {
  const per = new Set<number>();
  const { fullUpTo, sampledPerHead } = F1_CHECK;
  if (s.L <= fullUpTo) for (let i = 0; i < s.L; i++) per.add(i);
  else {
    for (let t = 0; t < sampledPerHead; t++) per.add(Math.round((t * (s.L - 1)) / (sampledPerHead - 1)));
    if (s.docs) {
      const len = s.L / s.docs;
      for (let d = 0; d < s.docs; d++) per.add(d * len).add(d * len + len - 1);
    }
  }
  const rows: number[] = [];
  const sorted = [...per].sort((a, b) => a - b);
  for (let bh = 0; bh < s.B * s.H; bh++) for (const i of sorted) rows.push(bh * s.L + i);
  return Int32Array.from(rows);
}

/** Exact attention of `rows` in float64 under `rule` (scale 1/√E; a row seeing no key is zeros). */
function float64Rows(s: F1Shape, q: Float32Array, k: Float32Array, v: Float32Array, rule: Rule): Expected {
  const { H, L, E } = s;
  const S = L;
  const rows = checkedRows(s);
  const values = new Float64Array(rows.length * E);
  const scores = new Float64Array(S);
  const scale = 1 / Math.sqrt(E);
  rows.forEach((row, r) => {
    const bh = Math.floor(row / L);
    const h = bh % H;
    const i = row % L;
    let max = Number.NEGATIVE_INFINITY;
    for (let j = 0; j < S; j++) {
      if (!rule.visible(i, j)) {
        scores[j] = Number.NEGATIVE_INFINITY;
        continue;
      }
      let dot = 0;
      for (let e = 0; e < E; e++) dot += q[row * E + e] * k[(bh * S + j) * E + e];
      scores[j] = dot * scale + (rule.bias ? rule.bias(h, i, j) : 0);
      if (scores[j] > max) max = scores[j];
    }
    if (max === Number.NEGATIVE_INFINITY) return;
    let sum = 0;
    for (let j = 0; j < S; j++) {
      scores[j] = scores[j] === Number.NEGATIVE_INFINITY ? 0 : Math.exp(scores[j] - max);
      sum += scores[j];
    }
    for (let j = 0; j < S; j++) {
      if (scores[j] === 0) continue;
      const w = scores[j] / sum;
      for (let e = 0; e < E; e++) values[r * E + e] += w * v[(bh * S + j) * E + e];
    }
  });
  const which = rows.length === s.B * s.H * L ? 'all' : `${rows.length / (s.B * s.H)} sampled`;
  return { rows, values, source: `float64 of ${rule.text}, ${which} query rows per head` };
}

/** A row: its call's options for a small probe (no big data), and its set-up (mask, bias, block mask). */
interface RowSpec {
  fn: 'flex' | 'sdpa';
  probe: Record<string, unknown>;
  setup: () => { run: () => Tensor; sparsity?: number };
}

function rowSpec(impl: F1Impl, s: F1Shape, q: Tensor, k: Tensor, v: Tensor): RowSpec {
  const { H, L } = s;
  const flexWith = (mod: MaskMod): RowSpec => ({
    fn: 'flex',
    probe: { maskMod: mod },
    setup: () => {
      const blockMask = createBlockMask(mod, 1, 1, L, L, { blockSize: F1_BLOCK });
      return { run: () => flexAttention(q, k, v, { blockMask }), sparsity: blockMask.sparsity() };
    },
  });
  switch (impl) {
    case 'flex-document':
      return flexWith(documentMask(docIds(s)));
    case 'flex-causal-document':
      return flexWith(andMasks(causalMask, documentMask(docIds(s))));
    case 'flex-causal':
      return flexWith(causalMask);
    case 'sdpa-dense-document':
      return {
        fn: 'sdpa',
        probe: { mask: new Tensor(new Float32Array(64 * 64).fill(1), [64, 64]) },
        setup: () => {
          const ids = docIds(s);
          // Every element written, as a user building a mask does: untouched zero pages would not count in RSS.
          const dense = new Float32Array(L * L);
          for (let i = 0; i < L; i++)
            for (let j = 0; j < L; j++) dense[i * L + j] = ids[i] === ids[j] ? 1 : 0;
          const mask = new Tensor(dense, [L, L]);
          return { run: () => scaledDotProductAttention(q, k, v, { mask }) };
        },
      };
    case 'sdpa-causal':
      return {
        fn: 'sdpa',
        probe: { causal: 'top-left' },
        setup: () => ({ run: () => scaledDotProductAttention(q, k, v, { causal: 'top-left' }) }),
      };
    case 'flex-alibi': {
      const scoreMod = alibiScore(H);
      return {
        fn: 'flex',
        probe: { scoreMod },
        setup: () => ({ run: () => flexAttention(q, k, v, { scoreMod }) }),
      };
    }
    case 'flex-js-alibi': {
      const m = alibiSlopes(H).data;
      const scoreMod: ScoreMod = (score, _b, h, qIdx, kvIdx) => score + m[h] * (kvIdx - qIdx);
      return {
        fn: 'flex',
        probe: { scoreMod },
        setup: () => ({ run: () => flexAttention(q, k, v, { scoreMod }) }),
      };
    }
    case 'sdpa-alibi-bias':
      return {
        fn: 'sdpa',
        probe: { bias: alibiBias(H, 64, 64) },
        setup: () => {
          const bias = alibiBias(H, L, L);
          return { run: () => scaledDotProductAttention(q, k, v, { bias }) };
        },
      };
  }
}

/**
 * Which kernel 'auto' gives this row: 'wasm' if the WASM kernel serves a small call of the same options,
 * else 'flash'. Then the same small call with 'auto', so the kernel 'auto' uses is loaded (and its fixed
 * memory counted) before the row's base RSS is taken.
 */
function probeKernel(spec: RowSpec, s: F1Shape): { kernel: string; why?: string } {
  const x = Tensor.randn([1, s.H, 64, s.E], { seed: 9 });
  const call = (kernel: 'wasm' | 'auto') => {
    const options = { ...spec.probe, kernel };
    if (spec.fn === 'flex') flexAttention(x, x, x, options);
    else scaledDotProductAttention(x, x, x, options);
  };
  let result: { kernel: string; why?: string };
  try {
    call('wasm');
    result = { kernel: 'wasm' };
  } catch (error) {
    result = { kernel: 'flash', why: error instanceof Error ? error.message : String(error) };
  }
  call('auto');
  return result;
}

async function measure(job: F1Job): Promise<F1Outcome> {
  const s = job.shape;
  const n = s.B * s.H * s.L * s.E;
  const q = Tensor.randn([s.B, s.H, s.L, s.E], { seed: 1 });
  const k = Tensor.randn([s.B, s.H, s.L, s.E], { seed: 2 });
  const v = Tensor.randn([s.B, s.H, s.L, s.E], { seed: 3 });
  // The expected rows first, so their memory is in the base RSS.
  const expected = float64Rows(
    s,
    q.data as Float32Array,
    k.data as Float32Array,
    v.data as Float32Array,
    ruleOf(job.impl, s),
  );
  const spec = rowSpec(job.impl, s, q, k, v);
  const probe = probeKernel(spec, s);
  const values: F1Values = {
    kernel: `auto → ${probe.kernel}`,
    baseRssMB: rssMB(),
    ioMB: (4 * n * 4) / 2 ** 20,
  };
  const t0 = performance.now();
  const prepared = spec.setup();
  values.setupMs = performance.now() - t0;
  if (prepared.sparsity !== undefined) values.sparsity = prepared.sparsity;

  const tolerance = F1_CHECK.tolerance[f1Group(job.impl)];
  const check = (out: Tensor) => compare(out.data as Float32Array, expected, s.E, tolerance);
  const t1 = performance.now();
  const output = prepared.run();
  values.firstMs = performance.now() - t1;
  values.firstPeakRssMB = process.resourceUsage().maxRSS / 1024; // KiB
  const first = check(output);
  const base = { values, maxAbsError: first.maxAbsError, checkedAgainst: expected.source };
  const message = probe.why ? `wasm kernel: ${probe.why}` : undefined;
  if (!first.ok) {
    const wrong = `max abs error ${first.maxAbsError.toExponential(2)} is over tolerance`;
    return { status: 'wrong', message: wrong, timesMs: [], ...base };
  }

  const warmup = values.firstMs > F1_RUNS.slowMs ? Math.max(0, job.warmup - 1) : job.warmup;
  for (let i = 0; i < warmup; i++) prepared.run();
  const timesMs: number[] = [];
  let spent = 0;
  let last: Tensor | undefined;
  while (timesMs.length < job.minRuns || (timesMs.length < job.maxRuns && spent < job.budgetMs)) {
    const t = performance.now();
    last = prepared.run();
    const ms = performance.now() - t;
    timesMs.push(ms);
    spent += ms;
  }
  const again = last ? check(last) : first;
  if (!again.ok) {
    const wrong = `the last timed run is off by ${again.maxAbsError.toExponential(2)}`;
    return { status: 'wrong', message: wrong, timesMs: [], ...base };
  }
  const fallback = kernelSupport().wasmFallback;
  if (fallback && probe.kernel === 'wasm') values.kernel = `auto → flash (wasm fell back: ${fallback})`;
  return { status: 'ok', timesMs, ...base, ...(message ? { message } : {}) };
}

export async function measureF1(job: F1Job): Promise<F1Outcome> {
  try {
    return await measure(job);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    return { status: 'unavailable', message, timesMs: [], values: {} };
  }
}
