// One G1 row, in the table child's process: set the row up, run it once and check that run, then time it.
// Generation rows are checked by teacher forcing (the full forward over prompt + generated tokens must put
// each generated token at its position's argmax); decode steps against qkv's reference kernel over the same
// dense keys; the paged row by attending from every fork's blocks against its gathered keys.
// One decision to know: a generation's time is the whole `generate` call (prompt prefill included), and
// row 2's per-token times are the gaps between `onToken` calls, so they include sampling and the callback.

import { readFileSync } from 'node:fs';
import {
  KVCache,
  MultiHeadAttention,
  PagedKVCache,
  pagedAttention,
  scaledDotProductAttention,
  Tensor,
  TinyTransformer,
} from 'qkv';
import { PEER_TOLERANCE, QKV_TOLERANCE } from './check.js';
import {
  type DecodeImpl,
  G1_COMMITTED,
  G1_DECODE,
  G1_EARLY,
  G1_LATE,
  G1_LONG_TOKENS,
  G1_MODEL,
  G1_NEW_TOKENS,
  G1_PAGED,
  G1_SEED,
  type G1Impl,
  type G1Values,
  g1Prompt,
} from './g1.js';
import { headRows } from './peers/ort-decode.js';

export interface G1Job {
  table: 'g1';
  impl: G1Impl;
  /** Untimed runs after the checked one. */
  warmup: number;
  /** Timed runs stop after maxRuns, or once budgetMs of timed runs has passed (at least one). */
  maxRuns: number;
  budgetMs: number;
}

export interface G1Outcome {
  status: 'ok' | 'wrong' | 'failed' | 'unavailable';
  message?: string;
  timesMs: number[];
  values: G1Values;
  maxAbsError?: number;
  checkedAgainst?: string;
}

/** A logit this far below its row's maximum still counts as the argmax (a near-tie in float32). */
const TIE = 1e-4;

/** Runs `run` warm-up times, then times it (at least once, up to maxRuns or budgetMs). */
async function timeRuns(job: G1Job, run: () => unknown): Promise<number[]> {
  for (let i = 0; i < job.warmup; i++) await run();
  const timesMs: number[] = [];
  let spent = 0;
  while (timesMs.length < job.maxRuns && (timesMs.length === 0 || spent < job.budgetMs)) {
    const t0 = performance.now();
    await run();
    const ms = performance.now() - t0;
    timesMs.push(ms);
    spent += ms;
  }
  return timesMs;
}

/** Cached logits may differ from the full forward's by this much (the library promises 1e-5). */
const LOGIT_TOLERANCE = { atol: 1e-4, rtol: 1e-4 };

/**
 * Teacher forcing: one full forward over prompt + tokens (but the last); the logit of each generated
 * token must be its position's maximum (within TIE). With `cached`, also the same ids through a KVCache
 * (the prompt, then one token a step, as generate runs): every position's logits must match the full
 * forward's. Returns the largest logit difference (cached) or gap below the maximum (not cached).
 */
function checkGreedy(
  model: TinyTransformer,
  prompt: Int32Array,
  tokens: Int32Array,
  cached: boolean,
): { ok: boolean; error: number; message?: string } {
  const ids = new Int32Array(prompt.length + tokens.length - 1);
  ids.set(prompt);
  ids.set(tokens.subarray(0, tokens.length - 1), prompt.length);
  const logits = model.forward(ids, 1, ids.length).logits.data;
  const V = model.config.vocabSize;
  let gap = 0;
  for (let t = 0; t < tokens.length; t++) {
    const row = logits.subarray((prompt.length - 1 + t) * V, (prompt.length + t) * V);
    let max = Number.NEGATIVE_INFINITY;
    for (let i = 0; i < V; i++) if (row[i] > max) max = row[i];
    const g = max - row[tokens[t]];
    if (!(g <= TIE))
      return { ok: false, error: g, message: `token ${t} is not the full forward's argmax (gap ${g})` };
    gap = Math.max(gap, g);
  }
  if (!cached) return { ok: true, error: gap };
  const { numLayers, numHeads, dModel } = model.config;
  const cache = new KVCache({ numLayers, numKvHeads: numHeads, headDim: dModel / numHeads });
  const steps = [prompt.length, ...new Array<number>(tokens.length - 1).fill(1)];
  let at = 0;
  let worst = { ok: true, maxAbsError: 0 };
  for (const n of steps) {
    const got = model.forward(ids.subarray(at, at + n), 1, n, { cache }).logits.data as Float32Array;
    const check = compareAll(got, logits.subarray(at * V, (at + n) * V) as Float32Array, LOGIT_TOLERANCE);
    worst = { ok: worst.ok && check.ok, maxAbsError: Math.max(worst.maxAbsError, check.maxAbsError) };
    at += n;
  }
  if (!worst.ok) {
    const message = `cached logits differ from the full forward's by ${worst.maxAbsError.toExponential(2)}`;
    return { ok: false, error: worst.maxAbsError, message };
  }
  return { ok: true, error: worst.maxAbsError };
}

const model = () => new TinyTransformer(G1_MODEL, { seed: G1_SEED });

/**
 * Rows 1 and 5: `m` generating greedily from `prompt`, checked by teacher forcing (checkGreedy), then timed;
 * every timed run must generate the checked tokens.
 */
async function measureGreedy(
  job: G1Job,
  m: TinyTransformer,
  prompt: Int32Array,
  maxNewTokens: number,
  useCache: boolean,
): Promise<G1Outcome> {
  const generate = () => m.generate(prompt, { maxNewTokens, temperature: 0, useCache });
  const first = generate();
  const check = checkGreedy(m, prompt, first, useCache);
  const base = {
    values: { tokens: Array.from(first) },
    maxAbsError: check.error,
    checkedAgainst: useCache
      ? `full forward: argmax and logits at all ${first.length}`
      : `full forward: argmax at all ${first.length} (err: gap below it)`,
  };
  if (!check.ok) return { status: 'wrong', message: check.message, timesMs: [], ...base };
  let changed = false;
  const timesMs = await timeRuns(job, () => {
    const again = generate();
    if (!again.every((t, i) => t === first[i])) changed = true;
  });
  if (changed)
    return { status: 'wrong', message: 'a timed run generated other tokens', timesMs: [], ...base };
  return { status: 'ok', timesMs, ...base };
}

async function measurePosition(job: G1Job): Promise<G1Outcome> {
  const m = model();
  const prompt = g1Prompt();
  const stamps = new Float64Array(G1_LONG_TOKENS);
  const earlyMs: number[] = [];
  const lateMs: number[] = [];
  // Token i's time: from token i − 1 being chosen to token i being chosen.
  const mean = ([from, to]: [number, number]) => (stamps[to - 1] - stamps[from - 1]) / (to - from);
  const generate = () =>
    m.generate(prompt, {
      maxNewTokens: G1_LONG_TOKENS,
      temperature: 0,
      useCache: true,
      onToken: (_, index) => {
        stamps[index] = performance.now();
      },
    });
  const first = generate();
  const check = checkGreedy(m, prompt, first, true);
  const base = {
    maxAbsError: check.error,
    checkedAgainst: `full forward: argmax and logits at all ${G1_LONG_TOKENS}`,
  };
  if (!check.ok) return { status: 'wrong', message: check.message, timesMs: [], values: {}, ...base };
  const timesMs = await timeRuns(job, () => {
    generate();
    earlyMs.push(mean(G1_EARLY));
    lateMs.push(mean(G1_LATE));
  });
  const warm = job.warmup; // the warm-up runs pushed too
  return {
    status: 'ok',
    timesMs,
    values: { earlyMs: earlyMs.slice(warm), lateMs: lateMs.slice(warm) },
    ...base,
  };
}

/** [Hkv, a, E] and [Hkv, b, E] → [Hkv, a + b, E]. */
function concatHeads(x: Float32Array, a: number, y: Float32Array, b: number, Hkv: number, E: number) {
  const out = new Float32Array(Hkv * (a + b) * E);
  for (let h = 0; h < Hkv; h++) {
    out.set(x.subarray(h * a * E, (h + 1) * a * E), h * (a + b) * E);
    out.set(y.subarray(h * b * E, (h + 1) * b * E), (h * (a + b) + a) * E);
  }
  return out;
}

/** Largest |got − want| and whether every element is within `tol`. */
function compareAll(got: Float32Array, want: Float32Array, tol: { atol: number; rtol: number }) {
  let ok = got.length === want.length;
  let maxAbsError = 0;
  for (let i = 0; i < want.length; i++) {
    const err = Math.abs(got[i] - want[i]);
    if (!(err <= tol.atol + tol.rtol * Math.abs(want[i]))) ok = false;
    maxAbsError = Number.isNaN(err) || Number.isNaN(maxAbsError) ? Number.NaN : Math.max(maxAbsError, err);
  }
  return { ok, maxAbsError };
}

/** The decode step's function for `impl`, over q, k, v (k/v hold every key, the new one last). */
async function prepareDecode(
  impl: Exclude<DecodeImpl, 'qkv-mha' | 'qkv-mha-resident' | 'ort-web-mha'>,
  q: Tensor,
  k: Tensor,
  v: Tensor,
): Promise<() => Promise<Float32Array>> {
  const { Hq, Hkv, S, E } = G1_DECODE;
  const P = S - 1;
  const past = (x: Tensor) => headRows(x.data, Hkv, S, E, P);
  const newest = (x: Tensor) => headRows(x.data, Hkv, S, E, 1, P);
  switch (impl) {
    case 'qkv-sdpa':
      return async () => scaledDotProductAttention(q, k, v, { causal: true }).data;
    case 'qkv-kvcache': {
      const cache = new KVCache({ numLayers: 1, numKvHeads: Hkv, headDim: E, maxLength: S });
      cache.update(0, new Tensor(past(k), [1, Hkv, P, E]), new Tensor(past(v), [1, Hkv, P, E]));
      const key = new Tensor(newest(k), [1, Hkv, 1, E]);
      const value = new Tensor(newest(v), [1, Hkv, 1, E]);
      return async () => {
        const all = cache.update(0, key, value);
        const out = scaledDotProductAttention(q, all.key, all.value, { causal: true }).data;
        cache.truncate(P);
        return out;
      };
    }
    case 'qkv-resident': {
      // The cache in WASM memory; the step appends in place and attends where the keys lie (no copy).
      const cache = new KVCache({ numLayers: 1, numKvHeads: Hkv, headDim: E, maxLength: S, resident: true });
      if (!cache.resident) throw new Error('WebAssembly SIMD is unavailable: the cache cannot be resident');
      cache.update(0, new Tensor(past(k), [1, Hkv, P, E]), new Tensor(past(v), [1, Hkv, P, E]));
      const key = new Tensor(newest(k), [1, Hkv, 1, E]);
      const value = new Tensor(newest(v), [1, Hkv, 1, E]);
      return async () => {
        cache.update(0, key, value);
        const out = cache.attention(0, q, { causal: true }).data;
        cache.truncate(P);
        return out;
      };
    }
    case 'qkv-paged':
    case 'qkv-paged-resident': {
      const { blockSize } = G1_PAGED;
      const numBlocks = Math.ceil(S / blockSize) + 2;
      const resident = impl === 'qkv-paged-resident';
      const cache = new PagedKVCache({
        numLayers: 1,
        numKvHeads: Hkv,
        headDim: E,
        blockSize,
        numBlocks,
        resident,
      });
      if (resident && !cache.resident)
        throw new Error('WebAssembly SIMD is unavailable: the pool cannot be resident');
      const prefix = cache.allocate();
      cache.append(prefix, 0, new Tensor(past(k), [Hkv, P, E]), new Tensor(past(v), [Hkv, P, E]));
      const key = new Tensor(newest(k), [Hkv, 1, E]);
      const value = new Tensor(newest(v), [Hkv, 1, E]);
      const q3 = new Tensor(q.data, [Hq, 1, E]);
      // A step of a sequence continuing the prefix: fork it (shares its blocks), append this token (copies
      // the partly filled last block), attend from the blocks; freeing the fork returns the copied block.
      return async () => {
        const seq = cache.fork(prefix);
        cache.append(seq, 0, key, value);
        const out = pagedAttention(q3, cache, seq, 0).data;
        cache.free(seq);
        return out;
      };
    }
    case 'ort-web':
    case 'ort-web-past': {
      const { prepareOrtDecode } = await import('./peers/ort-decode.js');
      const inputs = { Hq, Hkv, S, E, q: q.data, k: k.data, v: v.data };
      const run = await prepareOrtDecode(impl === 'ort-web-past', inputs);
      return async () => {
        const { out, presentLength } = await run();
        if (presentLength !== undefined && presentLength !== S)
          throw new Error(`present_key holds ${presentLength} keys, not ${S}`);
        return out;
      };
    }
  }
}

/** [rows, cols] → [cols, rows]. */
function transpose(x: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = x[r * cols + c];
  return out;
}

/**
 * The step with projections: a MultiHeadAttention (embedDim Hq·E, Hq heads, Hkv key/value heads) whose
 * KVCache holds the first S − 1 tokens of x [1, S, D] (a causal prefill), run on token S − 1. Returns the
 * step and what it must equal: the reference kernel's attention of that token over all S.
 */
async function prepareMhaDecode(
  impl: 'qkv-mha' | 'qkv-mha-resident' | 'ort-web-mha',
): Promise<{ run: () => Promise<Float32Array>; want: Float32Array }> {
  const { Hq, Hkv, S, E } = G1_DECODE;
  const D = Hq * E;
  const P = S - 1;
  const mha = new MultiHeadAttention({ embedDim: D, numHeads: Hq, numKvHeads: Hkv, seed: 1 });
  const x = Tensor.randn([1, S, D], { seed: 4 });
  const prefix = new Tensor(x.data.subarray(0, P * D), [1, P, D]);
  const token = new Tensor(x.data.slice(P * D), [1, 1, D]);
  const want = mha.forward(token, x, x, { kernel: 'reference' }).output.data;
  const resident = impl === 'qkv-mha-resident';
  const cache = new KVCache({ numLayers: 1, numKvHeads: Hkv, headDim: E, maxLength: S, resident });
  if (resident && !cache.resident)
    throw new Error('WebAssembly SIMD is unavailable: the cache cannot be resident');
  mha.forward(prefix, prefix, prefix, { cache, layer: 0, causal: true });
  if (impl !== 'ort-web-mha') {
    const run = async () => {
      const out = mha.forward(token, token, token, { cache, layer: 0, causal: true }).output.data;
      cache.truncate(P);
      return out;
    };
    return { run, want };
  }
  const sd = mha.stateDict();
  const bias = sd['in_proj_bias'].data;
  const kvWidth = Hkv * E;
  const weights = {
    embedDim: D,
    numHeads: Hq,
    numKvHeads: Hkv,
    wq: transpose(sd['q_proj_weight'].data, D, D),
    wk: transpose(sd['k_proj_weight'].data, kvWidth, D),
    wv: transpose(sd['v_proj_weight'].data, kvWidth, D),
    wo: transpose(sd['out_proj.weight'].data, D, D),
    bq: bias.slice(0, D),
    bk: bias.slice(D, D + kvWidth),
    bv: bias.slice(D + kvWidth),
    bo: sd['out_proj.bias'].data,
  };
  const held = cache.read(0);
  const { prepareOrtMhaDecode } = await import('./peers/ort-decode.js');
  const step = await prepareOrtMhaDecode(weights, token.data, held.key.data, held.value.data, P);
  const run = async () => {
    const { out, presentLength } = await step();
    if (presentLength !== S) throw new Error(`present_key holds ${presentLength} keys, not ${S}`);
    return out;
  };
  return { run, want };
}

async function measureDecode(job: G1Job, impl: DecodeImpl): Promise<G1Outcome> {
  const { Hq, Hkv, S, E } = G1_DECODE;
  let want: Float32Array;
  let run: () => Promise<Float32Array>;
  let first: Float32Array;
  try {
    if (impl === 'qkv-mha' || impl === 'qkv-mha-resident' || impl === 'ort-web-mha')
      ({ run, want } = await prepareMhaDecode(impl));
    else {
      const q = Tensor.randn([1, Hq, 1, E], { seed: 1 });
      const k = Tensor.randn([1, Hkv, S, E], { seed: 2 });
      const v = Tensor.randn([1, Hkv, S, E], { seed: 3 });
      want = scaledDotProductAttention(q, k, v, { causal: true, kernel: 'reference' }).data;
      run = await prepareDecode(impl, q, k, v);
    }
    first = await run();
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    return { status: impl.startsWith('qkv') ? 'unavailable' : 'failed', message, timesMs: [], values: {} };
  }
  const peer = impl.startsWith('ort');
  const check = compareAll(first, want, peer ? PEER_TOLERANCE : QKV_TOLERANCE);
  const base = { values: {}, maxAbsError: check.maxAbsError, checkedAgainst: 'qkv reference kernel' };
  if (!check.ok) {
    const message = `max abs error ${check.maxAbsError.toExponential(2)} is over tolerance`;
    return { status: 'wrong', message, timesMs: [], ...base };
  }
  return { status: 'ok', timesMs: await timeRuns(job, run), ...base };
}

function measurePaged(): G1Outcome {
  const { prompt, forks, extend, blockSize } = G1_PAGED;
  const { Hq, Hkv, E } = G1_DECODE;
  const numBlocks = 2 * (prompt / blockSize + forks * Math.ceil(extend / blockSize + 1));
  const cache = new PagedKVCache({ numLayers: 1, numKvHeads: Hkv, headDim: E, blockSize, numBlocks });
  const promptK = Tensor.randn([Hkv, prompt, E], { seed: 2 }).data;
  const promptV = Tensor.randn([Hkv, prompt, E], { seed: 3 }).data;
  const t0 = performance.now();
  const root = cache.allocate();
  cache.append(root, 0, new Tensor(promptK, [Hkv, prompt, E]), new Tensor(promptV, [Hkv, prompt, E]));
  const seqs: { seq: number; k: Float32Array; v: Float32Array }[] = [];
  for (let f = 0; f < forks; f++) {
    const seq = cache.fork(root);
    const k = Tensor.randn([Hkv, extend, E], { seed: 100 + 2 * f }).data;
    const v = Tensor.randn([Hkv, extend, E], { seed: 101 + 2 * f }).data;
    for (let t = 0; t < extend; t++) {
      const row = (x: Float32Array) => new Tensor(headRows(x, Hkv, extend, E, 1, t), [Hkv, 1, E]);
      cache.append(seq, 0, row(k), row(v));
    }
    seqs.push({ seq, k, v });
  }
  const ms = performance.now() - t0;
  const values = {
    blocksUsed: numBlocks - cache.freeBlocks,
    idealBlocks: (prompt + forks * extend) / blockSize,
  };
  // Every fork must read the shared prompt and its own tokens: its attention from the blocks against the
  // reference kernel over its gathered keys.
  const q = Tensor.randn([Hq, 1, E], { seed: 7 });
  const S = prompt + extend;
  let ok = true;
  let maxAbsError = 0;
  for (const { seq, k, v } of seqs) {
    const got = pagedAttention(q, cache, seq, 0).data;
    const key = new Tensor(concatHeads(promptK, prompt, k, extend, Hkv, E), [1, Hkv, S, E]);
    const value = new Tensor(concatHeads(promptV, prompt, v, extend, Hkv, E), [1, Hkv, S, E]);
    const q4 = new Tensor(q.data, [1, Hq, 1, E]); // rank 4: heads on axis 1 (GQA)
    const want = scaledDotProductAttention(q4, key, value, { causal: true, kernel: 'reference' }).data;
    const check = compareAll(got, want, QKV_TOLERANCE);
    ok &&= check.ok && cache.length(seq) === S;
    maxAbsError = Math.max(maxAbsError, check.maxAbsError);
  }
  const base = {
    values,
    maxAbsError,
    checkedAgainst: `all ${forks} forks vs reference kernel`,
  };
  if (!ok) return { status: 'wrong', message: 'a fork does not read its own keys', timesMs: [], ...base };
  return { status: 'ok', timesMs: [ms], ...base };
}

/**
 * Row 5: the committed language model, greedy with the KV cache from a text prompt until its context is
 * full, checked by teacher forcing as row 1 is.
 */
async function measureCommitted(job: G1Job): Promise<G1Outcome> {
  const { loadLanguageModel } = await import('qkv/nn');
  const file = new URL(`../../${G1_COMMITTED.file}`, import.meta.url); // from bench/dist/
  const { model: m, tokenizer, config } = loadLanguageModel(readFileSync(file), G1_COMMITTED.file);
  const prompt = tokenizer.encode(G1_COMMITTED.prompt);
  return measureGreedy(job, m, prompt, config.maxLen - prompt.length, true);
}

export async function measureG1(job: G1Job): Promise<G1Outcome> {
  const { impl } = job;
  try {
    switch (impl.kind) {
      case 'generate':
        return await measureGreedy(job, model(), g1Prompt(), G1_NEW_TOKENS, impl.useCache);
      case 'position':
        return await measurePosition(job);
      case 'decode':
        return await measureDecode(job, impl.impl);
      case 'paged':
        return measurePaged();
      case 'committed':
        return await measureCommitted(job);
    }
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    return { status: 'unavailable', message, timesMs: [], values: {} };
  }
}
