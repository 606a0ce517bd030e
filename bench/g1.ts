// G1 (issue 11): generation. (1) A decoder the size of `npm run train:lm`'s language model generating 256
// tokens greedily from a 16-token prompt with and without a KVCache; (2) with the cache, the time per token
// early and late in a 1000-token generation; (3) one decode step of bare attention (1 query, 8 query heads
// over 2 key/value heads, 4096 cached keys) in qkv (dense inputs, a KVCache in JS arrays or resident in
// WASM memory, a PagedKVCache) and in onnxruntime-web's standard Attention op; (4) the
// blocks a PagedKVCache uses for 16 continuations forked from one 1024-token prompt; (5) the committed
// language model (models/brown-lm.safetensors) continuing a text prompt to its context length.
// One decision to know: every row is checked before it is timed — generations against the full forward's
// argmax at every generated position (teacher forcing), decode steps against qkv's reference kernel, the
// forked sequences against attention over their gathered keys — and a row failing its check has no figure.

import type { TableRowStatus } from './p2.js';
import { renderTable, statusText } from './p2.js';
import { formatMs, median } from './results.js';

/** The model of rows 1 and 2: `npm run train:lm`'s language model, with room for 1024 positions. */
export const G1_MODEL = {
  vocabSize: 4096,
  dModel: 192,
  numHeads: 6,
  numLayers: 4,
  dFF: 768,
  maxLen: 1024,
  causal: true,
} as const;
/** Weights: the model's own random initialisation with this seed (no checkpoint: the run is reproducible). */
export const G1_SEED = 0;
export const G1_PROMPT_LEN = 16;
export const G1_NEW_TOKENS = 256;
/** Row 2: a generation of this many tokens, and the two windows of token indices [from, to) compared. */
export const G1_LONG_TOKENS = 1000;
export const G1_EARLY: [number, number] = [100, 200];
export const G1_LATE: [number, number] = [900, 1000];
/**
 * Row 3: one query, Hq query heads over Hkv key/value heads, S keys (the new one last), width E; the rows
 * with projections are a MultiHeadAttention of embedDim Hq·E.
 */
export const G1_DECODE = { Hq: 8, Hkv: 2, S: 4096, E: 64 } as const;
/** Row 4: forks of one prompt, each extended by `extend` tokens one at a time. */
export const G1_PAGED = { prompt: 1024, forks: 16, extend: 64, blockSize: 16 } as const;

/**
 * Row 5: the committed language model (issue 12), greedy from a text prompt with the KV cache until its
 * context (maxLen, 256) is full. The file is read from the repository (bench/dist → ../../models).
 */
export const G1_COMMITTED = {
  file: 'models/brown-lm.safetensors',
  prompt: 'The jury said',
} as const;

export const G1_TARGETS = {
  cacheSpeedup: 10,
  decodeRatio: 1.5,
  blocksRatio: 1.2,
  committedTokensPerSec: 100,
} as const;

/** The prompt: token i is (37·i + 11) mod V. */
export function g1Prompt(): Int32Array {
  return Int32Array.from({ length: G1_PROMPT_LEN }, (_, i) => (37 * i + 11) % G1_MODEL.vocabSize);
}

export type DecodeImpl =
  | 'qkv-sdpa'
  | 'qkv-kvcache'
  | 'qkv-resident'
  | 'qkv-paged'
  | 'qkv-paged-resident'
  | 'qkv-mha'
  | 'qkv-mha-resident'
  | 'ort-web'
  | 'ort-web-past'
  | 'ort-web-mha';

export type G1Impl =
  | { kind: 'generate'; useCache: boolean }
  | { kind: 'position' }
  | { kind: 'decode'; impl: DecodeImpl }
  | { kind: 'paged' }
  | { kind: 'committed' };

export function g1Name(impl: G1Impl): string {
  const { Hkv, S } = G1_DECODE;
  switch (impl.kind) {
    case 'generate':
      return `generate ${G1_NEW_TOKENS}, ${impl.useCache ? 'cache' : 'no cache'}`;
    case 'position':
      return `per-token time vs position (cache, ${G1_LONG_TOKENS} tokens)`;
    case 'paged':
      return `paged blocks: ${G1_PAGED.forks} forks of a ${G1_PAGED.prompt}-token prompt + ${G1_PAGED.extend} each`;
    case 'committed':
      return `generate to 256 tokens, cache: ${G1_COMMITTED.file} from "${G1_COMMITTED.prompt}"`;
    case 'decode':
      switch (impl.impl) {
        case 'qkv-sdpa':
          return `decode: qkv scaledDotProductAttention, k/v [1, ${Hkv}, ${S}, 64]`;
        case 'qkv-kvcache':
          return `decode: qkv KVCache.update (${S - 1} + 1) + scaledDotProductAttention`;
        case 'qkv-resident':
          return `decode: qkv KVCache (resident) update (${S - 1} + 1) + KVCache.attention`;
        case 'qkv-paged':
          return `decode: qkv PagedKVCache append (${S - 1} + 1) + pagedAttention`;
        case 'qkv-paged-resident':
          return `decode: qkv PagedKVCache (resident) append (${S - 1} + 1) + pagedAttention`;
        case 'ort-web':
          return `decode: onnxruntime-web Attention, k/v [1, ${Hkv}, ${S}, 64]`;
        case 'ort-web-past':
          return `decode: onnxruntime-web Attention, past ${S - 1} + 1`;
        case 'qkv-mha':
          return `decode + projections: qkv MultiHeadAttention.forward, KVCache ${S - 1} + 1`;
        case 'qkv-mha-resident':
          return `decode + projections: qkv MultiHeadAttention.forward, KVCache (resident) ${S - 1} + 1`;
        case 'ort-web-mha':
          return `decode + projections: onnxruntime-web MatMul + Attention, past ${S - 1} + 1`;
      }
  }
}

export const G1_IMPLS: G1Impl[] = [
  { kind: 'generate', useCache: true },
  { kind: 'generate', useCache: false },
  { kind: 'position' },
  { kind: 'decode', impl: 'qkv-sdpa' },
  { kind: 'decode', impl: 'qkv-kvcache' },
  { kind: 'decode', impl: 'qkv-resident' },
  { kind: 'decode', impl: 'qkv-paged' },
  { kind: 'decode', impl: 'qkv-paged-resident' },
  { kind: 'decode', impl: 'ort-web' },
  { kind: 'decode', impl: 'ort-web-past' },
  { kind: 'decode', impl: 'qkv-mha' },
  { kind: 'decode', impl: 'qkv-mha-resident' },
  { kind: 'decode', impl: 'ort-web-mha' },
  { kind: 'paged' },
  { kind: 'committed' },
];

/** Figures a row reports besides its times. */
export interface G1Values {
  /** Rows 1, 2 and 5: the generated tokens (rows 1 and 5: all; row 2: not kept). */
  tokens?: number[];
  /** Row 2: mean ms per token over the early and late windows, per timed run. */
  earlyMs?: number[];
  lateMs?: number[];
  /** Row 4. */
  blocksUsed?: number;
  idealBlocks?: number;
}

export interface G1Row {
  implementation: string;
  impl: G1Impl;
  status: TableRowStatus;
  message?: string;
  /** Timed runs, ms each (a whole generation, or one decode step). */
  timesMs: number[];
  values: G1Values;
  /** Median of timesMs. */
  ms?: number;
  /** Rows 1 and 5: new tokens ÷ the median generation time. */
  tokensPerSec?: number;
  /** Row 2: medians over the runs of the windows' means. */
  earlyMsPerToken?: number;
  lateMsPerToken?: number;
  /** Row 1: whether this row's tokens equal the other row 1's (set when both ran). */
  sameTokens?: boolean;
  peakRssMB?: number;
  maxAbsError?: number;
  checkedAgainst?: string;
  loadAverage1m?: number;
}

export function finishG1Rows(rows: G1Row[]): void {
  for (const row of rows) {
    if (row.status !== 'ok') continue;
    if (row.timesMs.length) row.ms = median(row.timesMs);
    if (row.impl.kind === 'generate' && row.ms !== undefined)
      row.tokensPerSec = (G1_NEW_TOKENS / row.ms) * 1000;
    if (row.impl.kind === 'committed' && row.ms !== undefined && row.values.tokens)
      row.tokensPerSec = (row.values.tokens.length / row.ms) * 1000;
    if (row.values.earlyMs?.length) row.earlyMsPerToken = median(row.values.earlyMs);
    if (row.values.lateMs?.length) row.lateMsPerToken = median(row.values.lateMs);
  }
  const [cached, uncached] = [true, false].map((useCache) =>
    rows.find((r) => r.impl.kind === 'generate' && r.impl.useCache === useCache),
  );
  if (cached?.values.tokens && uncached?.values.tokens) {
    const a = cached.values.tokens;
    const b = uncached.values.tokens;
    const same = a.length === b.length && a.every((t, i) => t === b[i]);
    cached.sameTokens = same;
    uncached.sameTokens = same;
  }
}

const G1_HEADER = ['row', 'result', 'runs', 'check', 'max err', 'peak RSS MB'];

function msText(ms: number): string {
  return ms < 1 ? ms.toFixed(3) : formatMs(ms);
}

function resultText(row: G1Row): string | undefined {
  switch (row.impl.kind) {
    case 'generate':
    case 'committed':
      if (row.tokensPerSec === undefined || row.ms === undefined) return undefined;
      return `${row.tokensPerSec.toFixed(0)} tokens/s (${formatMs(row.ms)} ms)`;
    case 'position':
      if (row.earlyMsPerToken === undefined || row.lateMsPerToken === undefined) return undefined;
      return `${msText(row.earlyMsPerToken)} → ${msText(row.lateMsPerToken)} ms/token (tokens ${G1_EARLY.join('–')} → ${G1_LATE.join('–')})`;
    case 'decode':
      return row.ms === undefined ? undefined : `${msText(row.ms)} ms`;
    case 'paged': {
      const { blocksUsed, idealBlocks } = row.values;
      if (row.status !== 'ok' || blocksUsed === undefined || idealBlocks === undefined) return undefined;
      return `${blocksUsed} blocks (ideal ${idealBlocks})`;
    }
  }
}

/** One line for the console as a row finishes: its result, or its status. */
export function g1Summary(row: G1Row): string {
  return resultText(row) ?? statusText(row);
}

function checkText(row: G1Row): string {
  const base = row.checkedAgainst ?? '';
  if (row.sameTokens === undefined) return base;
  return `${base}; ${row.sameTokens ? 'tokens = the other row’s' : 'tokens DIFFER from the other row’s'}`;
}

function g1Cells(row: G1Row): string[] {
  const rss = row.peakRssMB === undefined ? '' : row.peakRssMB.toFixed(0);
  const err = row.maxAbsError === undefined ? '' : row.maxAbsError.toExponential(1);
  const result = resultText(row);
  if (result === undefined) return [row.implementation, statusText(row), '', '', err, rss];
  const runs = row.impl.kind === 'paged' ? '' : String(row.timesMs.length);
  return [row.implementation, result, runs, checkText(row), err, rss];
}

/** The G1 rows as markdown (or, with `plain`, aligned text for the console). */
export function g1Table(rows: G1Row[], plain = false): string {
  const statusRows = new Set(rows.flatMap((r, i) => (resultText(r) === undefined ? [i] : [])));
  return renderTable(G1_HEADER, rows.map(g1Cells), new Set([2, 4, 5]), plain, statusRows);
}

const escapeCell = (s: string) => s.replaceAll('|', '\\|');

/** The G1 targets: one line each, with the figures compared, the ratio and whether it is met. */
export function g1TargetsTable(rows: G1Row[]): string {
  const lines = ['| target | measured | ratio | met |', '| --- | --- | ---: | --- |'];
  const find = (pred: (impl: G1Impl) => boolean) => rows.find((r) => pred(r.impl));
  const why = (...rs: (G1Row | undefined)[]) => {
    const bad = rs.find((r) => r && r.status !== 'ok');
    return bad ? escapeCell(`${bad.implementation}: ${statusText(bad)}`) : 'not measured';
  };

  const cached = find((i) => i.kind === 'generate' && i.useCache);
  const uncached = find((i) => i.kind === 'generate' && !i.useCache);
  if (cached || uncached) {
    const label = `generation with a KVCache ≥ ${G1_TARGETS.cacheSpeedup}× without, same tokens`;
    if (cached?.tokensPerSec !== undefined && uncached?.tokensPerSec !== undefined) {
      const ratio = cached.tokensPerSec / uncached.tokensPerSec;
      const same = cached.sameTokens === true;
      const met = ratio >= G1_TARGETS.cacheSpeedup && same ? '✓' : '✗';
      const measured = `${cached.tokensPerSec.toFixed(0)} vs ${uncached.tokensPerSec.toFixed(0)} tokens/s; tokens ${same ? 'identical' : 'differ'}`;
      lines.push(`| ${label} | ${measured} | ${ratio.toFixed(1)}× | ${met} |`);
    } else lines.push(`| ${label} | ${why(cached, uncached)} | | — |`);
  }

  const position = find((i) => i.kind === 'position');
  if (position) {
    // Linear growth in the per-token cost at most: late ÷ early ≤ the ratio of the windows' mean positions.
    const mid = ([a, b]: [number, number]) => G1_PROMPT_LEN + (a + b - 1) / 2;
    const bound = mid(G1_LATE) / mid(G1_EARLY);
    const label = `ms/token at tokens ${G1_LATE.join('–')} ÷ at ${G1_EARLY.join('–')} ≤ ${bound.toFixed(1)} (at most linear in position)`;
    if (position.earlyMsPerToken !== undefined && position.lateMsPerToken !== undefined) {
      const ratio = position.lateMsPerToken / position.earlyMsPerToken;
      const measured = `${msText(position.lateMsPerToken)} vs ${msText(position.earlyMsPerToken)} ms/token`;
      lines.push(`| ${label} | ${measured} | ${ratio.toFixed(2)}× | ${ratio <= bound ? '✓' : '✗'} |`);
    } else lines.push(`| ${label} | ${why(position)} | | — |`);
  }

  const pairs: [DecodeImpl, DecodeImpl, string][] = [
    ['qkv-resident', 'ort-web-past', 'cache step, past 4095 + 1'],
    ['qkv-kvcache', 'ort-web-past', 'cache step, past 4095 + 1'],
    ['qkv-paged-resident', 'ort-web-past', 'cache step, past 4095 + 1'],
    ['qkv-paged', 'ort-web-past', 'cache step, past 4095 + 1'],
    ['qkv-sdpa', 'ort-web', 'k/v of 4096 keys as inputs'],
    ['qkv-mha-resident', 'ort-web-mha', 'with projections, past 4095 + 1'],
    ['qkv-mha', 'ort-web-mha', 'with projections, past 4095 + 1'],
  ];
  for (const [mine, theirs, what] of pairs) {
    const qkv = find((i) => i.kind === 'decode' && i.impl === mine);
    const peer = find((i) => i.kind === 'decode' && i.impl === theirs);
    if (!qkv || !peer) continue;
    const mineName = qkv.implementation.replace(/^decode( \+ projections)?: /, '');
    const label = `decode step (${what}): ${mineName} ≥ ${G1_TARGETS.decodeRatio}× onnxruntime-web t1`;
    if (qkv.ms !== undefined && peer.ms !== undefined) {
      const ratio = peer.ms / qkv.ms;
      const met = ratio >= G1_TARGETS.decodeRatio ? '✓' : '✗';
      lines.push(`| ${label} | ${msText(qkv.ms)} vs ${msText(peer.ms)} ms | ${ratio.toFixed(2)}× | ${met} |`);
    } else lines.push(`| ${label} | ${why(qkv, peer)} | | — |`);
  }

  const committed = find((i) => i.kind === 'committed');
  if (committed) {
    const label = `generation with the committed language model, one thread ≥ ${G1_TARGETS.committedTokensPerSec} tokens/s`;
    if (committed.tokensPerSec !== undefined) {
      const ratio = committed.tokensPerSec / G1_TARGETS.committedTokensPerSec;
      const met = ratio >= 1 ? '✓' : '✗';
      lines.push(
        `| ${label} | ${committed.tokensPerSec.toFixed(0)} tokens/s | ${ratio.toFixed(1)}× | ${met} |`,
      );
    } else lines.push(`| ${label} | ${why(committed)} | | — |`);
  }

  const paged = find((i) => i.kind === 'paged');
  if (paged) {
    const { prompt, forks, extend, blockSize } = G1_PAGED;
    const label = `paged blocks ≤ ${G1_TARGETS.blocksRatio}× (${prompt} + ${forks} × ${extend}) / ${blockSize}`;
    const { blocksUsed, idealBlocks } = paged.values;
    if (paged.status === 'ok' && blocksUsed !== undefined && idealBlocks !== undefined) {
      const ratio = blocksUsed / idealBlocks;
      const met = ratio <= G1_TARGETS.blocksRatio ? '✓' : '✗';
      lines.push(`| ${label} | ${blocksUsed} vs ${idealBlocks} blocks | ${ratio.toFixed(2)}× | ${met} |`);
    } else lines.push(`| ${label} | ${why(paged)} | | — |`);
  }
  return lines.join('\n');
}
