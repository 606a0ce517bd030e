// T1 (issue 10, item 6): one training step (forward, backward, AdamW) of a 2-layer decoder — vocab 512,
// dModel 128, 4 heads, pre-LayerNorm blocks with a 512-wide GELU MLP, sinusoidal positions, tied output
// head, causal — on a batch of 16 × 128 tokens with cross-entropy: qkv's TinyTransformer and autograd
// against the same model written in tfjs ops (WASM and CPU backends). Metric: tokens/s, 2048 per step.
// One decision to know: the rows start from different random weights, so they are not compared number for
// number; each row's check is that every loss is finite and the loss falls over the timed steps (all rows
// train on the same fixed batch, so it must), and a row that fails it reports no speed.

import type { TableRowStatus } from './p2.js';
import { renderTable, statusText } from './p2.js';
import { formatMs, median, roundRatios, roundsCell } from './results.js';

/** The model and batch of T1. */
export const T1 = {
  vocabSize: 512,
  dModel: 128,
  numHeads: 4,
  numLayers: 2,
  dFF: 512,
  batch: 16,
  seqLen: 128,
  lr: 1e-3,
  /** AdamW's decoupled weight decay on the ≥ 2-axis parameters (qkv's default and rule). */
  weightDecay: 0.01,
} as const;
export const T1_TOKENS = T1.batch * T1.seqLen;
export const T1_TARGET_RATIO = 4;

/** Timed steps of a memory row (the issue's "no per-step growth over 200 steps"), after its warm-up. */
export const T1_LONG_STEPS = 200;
export const T1_LONG_WARMUP = 10;
/** A memory row weighs the JS heap and buffers (after a full GC) every this many timed steps. */
export const T1_HEAP_EVERY = 20;

/**
 * A T1 implementation. `relaxed`: qkv in a process started with Node 20's relaxed-SIMD flag (the FMA build
 * of its WASM kernels, which the `qkv` CLI turns on by itself); a row of its own, so the default build's
 * row stays what a library user gets without the flag. `long`: a memory row, T1_LONG_STEPS timed steps
 * in a process started with --expose-gc, the heap weighed after a full GC every T1_HEAP_EVERY steps.
 */
export type T1Impl =
  | { kind: 'qkv'; threads: number; relaxed?: boolean; long?: boolean }
  | { kind: 'tfjs-wasm' | 'tfjs-cpu'; threads: 1 };

export function t1Name(impl: T1Impl): string {
  switch (impl.kind) {
    case 'qkv':
      return `qkv t${impl.threads}${impl.relaxed ? ' FMA' : ''}${impl.long ? `, ${T1_LONG_STEPS} steps` : ''}`;
    case 'tfjs-wasm':
      return 'tfjs-wasm t1';
    case 'tfjs-cpu':
      return 'tfjs-cpu t1';
  }
}

/**
 * The rows, in print order. `relaxedRows`: also qkv with the FMA build, in processes started with the flag
 * (where this runtime does not enable relaxed SIMD by default: Node 20). `longRows`: also the memory rows,
 * qkv's default build on 1 and 2 threads for T1_LONG_STEPS steps.
 */
export function t1Impls(relaxedRows: boolean, longRows = false): T1Impl[] {
  const impls: T1Impl[] = [
    { kind: 'qkv', threads: 1 },
    { kind: 'qkv', threads: 2 },
  ];
  if (relaxedRows) {
    impls.push({ kind: 'qkv', threads: 1, relaxed: true });
    impls.push({ kind: 'qkv', threads: 2, relaxed: true });
  }
  if (longRows) {
    impls.push({ kind: 'qkv', threads: 1, long: true });
    impls.push({ kind: 'qkv', threads: 2, long: true });
  }
  impls.push({ kind: 'tfjs-wasm', threads: 1 }, { kind: 'tfjs-cpu', threads: 1 });
  return impls;
}

/**
 * The fixed batch: 16 sequences of 129 tokens from an LCG (seed 7), uniform over the vocabulary; the model
 * reads the first 128 of each and predicts the next (targets are the same sequences shifted by one).
 */
export function t1Batch(): { ids: Int32Array; targets: Int32Array } {
  const { batch: B, seqLen: L, vocabSize: V } = T1;
  const ids = new Int32Array(B * L);
  const targets = new Int32Array(B * L);
  let s = 7;
  for (let b = 0; b < B; b++) {
    const seq = new Int32Array(L + 1);
    for (let i = 0; i <= L; i++) {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      seq[i] = Math.floor((s / 2 ** 32) * V);
    }
    ids.set(seq.subarray(0, L), b * L);
    targets.set(seq.subarray(1), b * L);
  }
  return { ids, targets };
}

/** One step of a row: returns the step's loss (before the update). */
export type TrainStep = () => Promise<number>;

/** The check of T1: every loss finite, and the last timed step's loss below the first timed step's. */
export function checkLosses(losses: number[], warmup: number): { ok: boolean; message?: string } {
  const bad = losses.findIndex((l) => !Number.isFinite(l));
  if (bad >= 0) return { ok: false, message: `loss ${losses[bad]} at step ${bad}` };
  const timed = losses.slice(warmup);
  if (timed.length < 2) return { ok: false, message: 'fewer than 2 timed steps: no loss trend to check' };
  if (!(timed[timed.length - 1] < timed[0])) {
    return { ok: false, message: `loss did not fall over the timed steps (${timed[0]} → ${timed.at(-1)})` };
  }
  return { ok: true };
}

export interface T1Row {
  implementation: string;
  impl: T1Impl;
  status: TableRowStatus;
  message?: string;
  /** Timed steps (after the warm-up), ms each, of every round. */
  timesMs: number[];
  /** Each round's median step (see TABLE_ROUNDS); absent for rows run once and results saved before rounds. */
  roundsMs?: number[];
  /** Its rounds ran interleaved with the other speed rows (tables.ts's runT1Group). */
  interleaved?: boolean;
  /** Every step's loss, warm-up steps first. */
  losses: number[];
  warmup: number;
  /** Process RSS after each step, warm-up steps first (MB). */
  rssMB: number[];
  /**
   * Memory rows: [timed step (1-based), MB of the JS heap plus buffers (heapUsed + external: typed
   * arrays and other ArrayBuffers), MB of process RSS], both after a full GC, at the first timed step,
   * every T1_HEAP_EVERY, and the last.
   */
  heapMB?: [number, number, number][];
  peakRssMB?: number;
  /** Median of the timed steps (of the rounds' medians, when the row ran in rounds). */
  msPerStep?: number;
  tokensPerSec?: number;
  /** RSS after the last timed step − after the first timed step (MB). */
  rssGrowthMB?: number;
  /** This row's tokens/s ÷ tfjs-wasm's (qkv rows). */
  vsTfjsWasm?: number;
  loadAverage1m?: number;
}

/** RSS growth above this over the timed steps is reported as growth. */
const GROWTH_MB = 10;
/**
 * Growth of the heap and buffers after a full GC above this over a memory row's timed steps is reported as
 * growth: 1 MB over 200 steps is 5 KB a step, where one leaked 128 × 128 float32 gradient a step (64 KB)
 * would add 13 MB. (A step allocates tens of MB of activations and gradients, all of it to be freed.)
 */
const HEAP_GROWTH_MB = 1;

/**
 * A memory row's growth from its weighings (MB). Early: those from step 40 to the middle (the first ones
 * still see the heap warm up, and the worker threads' too); late: the last as many. A leak raises the
 * heap's floor (the least after GC) and the RSS's median (the median, because the RSS a GC leaves still
 * moves by tens of MB from one weighing to the next). Computed when the table is drawn, so --readme-only
 * draws saved results by the same rule.
 */
function memoryGrowth(
  heap: [number, number, number][],
): { heapGrowthMB: number; gcRssGrowthMB: number; early: string; late: string } | undefined {
  const settled = heap.filter((h) => h[0] >= 2 * T1_HEAP_EVERY);
  const k = Math.floor(settled.length / 2);
  if (k < 2 || settled.some((h) => h.length < 3)) return undefined;
  const [early, late] = [settled.slice(0, k), settled.slice(-k)];
  const floor = (hs: typeof heap) => Math.min(...hs.map((h) => h[1]));
  const steps = (hs: typeof heap) => `${hs[0][0]}–${hs[hs.length - 1][0]}`;
  return {
    heapGrowthMB: floor(late) - floor(early),
    gcRssGrowthMB: median(late.map((h) => h[2])) - median(early.map((h) => h[2])),
    early: steps(early),
    late: steps(late),
  };
}

export function finishT1Rows(rows: T1Row[]): void {
  for (const row of rows) {
    if (row.status !== 'ok' || row.timesMs.length === 0) continue;
    row.msPerStep = row.roundsMs?.length ? median(row.roundsMs) : median(row.timesMs);
    row.tokensPerSec = (T1_TOKENS / row.msPerStep) * 1000;
    const timedRss = row.rssMB.slice(row.warmup);
    if (timedRss.length >= 2) row.rssGrowthMB = timedRss[timedRss.length - 1] - timedRss[0];
  }
  const tfjs = rows.find((r) => r.impl.kind === 'tfjs-wasm');
  for (const row of rows) {
    if (row.impl.kind === 'qkv' && row.tokensPerSec !== undefined && tfjs?.tokensPerSec !== undefined) {
      row.vsTfjsWasm = row.tokensPerSec / tfjs.tokensPerSec;
    }
  }
}

const T1_HEADER = [
  'implementation',
  'tokens/s',
  'ms/step',
  'steps (warm-up + timed)',
  'loss first → last timed',
  'peak RSS MB',
  'RSS over timed steps MB',
  'heap + buffers after GC MB',
  'vs tfjs-wasm',
];

function rssText(row: T1Row): string {
  const timed = row.rssMB.slice(row.warmup);
  if (row.rssGrowthMB === undefined || timed.length < 2) return '';
  const verdict = row.rssGrowthMB > GROWTH_MB ? ' (grows)' : ' (flat)';
  return `${timed[0].toFixed(0)} → ${timed[timed.length - 1].toFixed(0)}${verdict}`;
}

function heapText(row: T1Row): string {
  const heap = row.heapMB ?? [];
  if (heap.length < 2) return '';
  const all = heap.map((h) => h[1]);
  return `${Math.min(...all).toFixed(1)}–${Math.max(...all).toFixed(1)} over ${heap.length} weighings`;
}

function t1Cells(row: T1Row): string[] {
  const rss = row.peakRssMB === undefined ? '' : row.peakRssMB.toFixed(0);
  if (row.tokensPerSec === undefined || row.msPerStep === undefined) {
    return [row.implementation, statusText(row), '', '', '', rss, '', '', ''];
  }
  const timed = row.losses.slice(row.warmup);
  const loss = `${timed[0].toFixed(3)} → ${timed[timed.length - 1].toFixed(3)}`;
  const ratio = row.vsTfjsWasm === undefined ? '' : `${row.vsTfjsWasm.toFixed(2)}×`;
  return [
    row.implementation,
    row.tokensPerSec.toFixed(0),
    formatMs(row.msPerStep),
    `${row.roundsMs && row.roundsMs.length > 1 ? `${row.roundsMs.length} × ` : ''}${row.warmup} + ${row.timesMs.length}`,
    loss,
    rss,
    rssText(row),
    heapText(row),
    ratio,
  ];
}

/** The T1 rows as markdown (or, with `plain`, aligned text for the console). */
export function t1Table(rows: T1Row[], plain = false): string {
  const statusRows = new Set(rows.flatMap((r, i) => (r.tokensPerSec === undefined ? [i] : [])));
  return renderTable(T1_HEADER, rows.map(t1Cells), new Set([1, 2, 3, 5]), plain, statusRows);
}

/** The T1 target: qkv on one thread ≥ 4× tfjs-wasm's tokens/s; and what two threads give. */
export function t1TargetsTable(rows: T1Row[]): string {
  const lines = [
    '| target | qkv row | qkv | tfjs-wasm | ratio | met | each round |',
    '| --- | --- | ---: | ---: | ---: | --- | --- |',
  ];
  const peer = rows.find((r) => r.impl.kind === 'tfjs-wasm');
  for (const threads of [1, 2]) {
    for (const relaxed of [false, true]) {
      const qkv = rows.find(
        (r) =>
          r.impl.kind === 'qkv' && !r.impl.long && r.impl.threads === threads && !!r.impl.relaxed === relaxed,
      );
      if (!qkv || !peer || (relaxed && qkv.status !== 'ok')) continue;
      const label = `T1 ≥ ${T1_TARGET_RATIO}× tfjs-wasm tokens/s, ${threads} thread${threads > 1 ? 's' : ''}${relaxed ? ', FMA' : ''}`;
      if (qkv.tokensPerSec === undefined || peer.tokensPerSec === undefined) {
        const why = qkv.tokensPerSec === undefined ? statusText(qkv) : `tfjs-wasm ${statusText(peer)}`;
        const verdict = threads === 1 ? '—' : 'n/a';
        lines.push(`| ${label} | ${qkv.implementation} | ${why.replaceAll('|', '\\|')} | | | ${verdict} | |`);
        continue;
      }
      const ratio = qkv.tokensPerSec / peer.tokensPerSec;
      const met = ratio >= T1_TARGET_RATIO ? '✓' : '✗';
      const rounds = roundsCell(roundRatios(qkv.roundsMs, peer.roundsMs), T1_TARGET_RATIO);
      lines.push(
        `| ${label} | ${qkv.implementation} | ${qkv.tokensPerSec.toFixed(0)} tokens/s | ${peer.tokensPerSec.toFixed(0)} tokens/s (tfjs-wasm t1) | ${ratio.toFixed(2)}× | ${met} | ${rounds} |`,
      );
    }
  }
  return [...lines, ...t1MemoryTargets(rows)].join('\n');
}

/**
 * The memory targets: qkv's peak RSS (one thread) no more than tfjs-wasm's, and no per-step growth over a
 * memory row's steps (after a full GC: heap and buffers within HEAP_GROWTH_MB, RSS within GROWTH_MB).
 */
function t1MemoryTargets(rows: T1Row[]): string[] {
  const lines: string[] = [];
  const peer = rows.find((r) => r.impl.kind === 'tfjs-wasm');
  const qkv = rows.find(
    (r) => r.impl.kind === 'qkv' && r.impl.threads === 1 && !r.impl.relaxed && !r.impl.long,
  );
  if (qkv?.peakRssMB !== undefined && peer?.peakRssMB !== undefined) {
    const met = qkv.peakRssMB <= peer.peakRssMB ? '✓' : '✗';
    lines.push(
      `| T1 memory: peak RSS ≤ tfjs-wasm's | ${qkv.implementation} | ${qkv.peakRssMB.toFixed(0)} MB | ${peer.peakRssMB.toFixed(0)} MB (tfjs-wasm t1) | | ${met} | |`,
    );
  }
  for (const row of rows.filter((r) => r.impl.kind === 'qkv' && r.impl.long)) {
    const label = `T1 memory: no growth over ${T1_LONG_STEPS} steps`;
    const growth = memoryGrowth(row.heapMB ?? []);
    if (growth === undefined) {
      lines.push(
        `| ${label} | ${row.implementation} | ${statusText(row).replaceAll('|', '\\|')} | | | — | |`,
      );
      continue;
    }
    const { heapGrowthMB, gcRssGrowthMB, early, late } = growth;
    const met = heapGrowthMB <= HEAP_GROWTH_MB && gcRssGrowthMB <= GROWTH_MB ? '✓' : '✗';
    const sign = (x: number) => `${x >= 0 ? '+' : '−'}${Math.abs(x).toFixed(1)}`;
    lines.push(
      `| ${label} | ${row.implementation} | after GC, steps ${late} against ${early}: heap + buffers floor ${sign(heapGrowthMB)} MB, RSS median ${sign(gcRssGrowthMB)} MB | | | ${met} | |`,
    );
  }
  return lines;
}
