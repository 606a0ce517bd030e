// F1: flex attention. (1) Document masking of packed sequences, 8 documents of 1024 tokens (L = S = 8192),
// with the built-in `documentMask` against `scaledDotProductAttention` given the same visibility as a dense
// [L, S] float32 mask (built in that row's process, so its 256 MB counts in the row's peak RSS), and the
// causal variant andMasks(causalMask, documentMask); (2) `causalMask` as a block mask against
// `scaledDotProductAttention({ causal: 'top-left' })`; (3) a score mod: the built-in `alibiScore` (run in
// the WASM kernel as data) against the same ALiBi written as a plain JS function (the JS tiled kernel) and
// against sdpa with a dense alibiBias.
// One decision to know: every row is checked, before it is timed, against a float64 computation done in
// the bench from the rule itself (same document, q ≥ kv, score + slope·(kv − q)), independent of qkv;
// a row failing its check has no figure. The targets' met / not met are computed from the figures.

import type { TableRowStatus } from './p2.js';
import { renderTable, statusText } from './p2.js';
import { formatMs, median } from './results.js';

export type F1Group = 'document' | 'causal' | 'score';

/** One F1 problem: q, k, v [B, H, L, E] with L = S; `docs` documents of L / docs tokens (document group). */
export interface F1Shape {
  B: number;
  H: number;
  L: number;
  E: number;
  docs?: number;
}

/** The issue's sizes, and the small ones of `--quick`. */
export const F1_SHAPES: Record<'full' | 'quick', Record<F1Group, F1Shape>> = {
  full: {
    document: { B: 1, H: 8, L: 8192, E: 64, docs: 8 },
    causal: { B: 1, H: 8, L: 4096, E: 64 },
    score: { B: 1, H: 8, L: 1024, E: 64 },
  },
  quick: {
    document: { B: 1, H: 8, L: 2048, E: 64, docs: 8 },
    causal: { B: 1, H: 8, L: 1024, E: 64 },
    score: { B: 1, H: 8, L: 256, E: 64 },
  },
};

/** Targets: flex document ≥ 5× sdpa + dense mask; flex causal ≤ 1.1× sdpa causal; O(n) memory. */
export const F1_TARGETS = {
  documentSpeedup: 5,
  causalSlowdown: 1.1,
  /** The flex document row's RSS beyond its q, k, v ≤ this × the bytes of q, k, v and the output. */
  memoryPerIo: 2,
} as const;

/**
 * The check: every query row up to L = fullUpTo, else `sampledPerHead` rows of every head evenly spread
 * (plus each document's first and last), |out − expected| ≤ atol + rtol·|expected| with the kernels'
 * tolerance (check.ts's QKV_TOLERANCE), but 1e-4 for the score group: ALiBi without a causal mask gives
 * the first queries scores up to slope·(S − 1) ≈ 512, where float32 scores (the WASM kernel's) resolve only
 * ~3e-5, so a correct float32 kernel is ~5e-5 off there (the JS kernels score in float64).
 */
export const F1_CHECK = {
  fullUpTo: 1024,
  sampledPerHead: 24,
  tolerance: {
    document: { atol: 1e-5, rtol: 1e-4 },
    causal: { atol: 1e-5, rtol: 1e-4 },
    score: { atol: 1e-4, rtol: 1e-4 },
  } satisfies Record<F1Group, { atol: number; rtol: number }>,
} as const;

/**
 * Runs per row after the checked one: `warmup` untimed (one fewer when the checked run took over slowMs),
 * then at least minRuns timed, up to maxRuns or budgetMs of timed runs.
 */
export const F1_RUNS = {
  full: { warmup: 1, minRuns: 3, maxRuns: 20, budgetMs: 10_000 },
  quick: { warmup: 1, minRuns: 1, maxRuns: 3, budgetMs: 500 },
  slowMs: 5000,
} as const;

/** Block size of the block masks (createBlockMask's default). */
export const F1_BLOCK = 128;

export type F1Impl =
  | 'flex-document'
  | 'sdpa-dense-document'
  | 'flex-causal-document'
  | 'flex-causal'
  | 'sdpa-causal'
  | 'flex-alibi'
  | 'flex-js-alibi'
  | 'sdpa-alibi-bias';

export const F1_IMPLS: F1Impl[] = [
  'flex-document',
  'sdpa-dense-document',
  'flex-causal-document',
  'flex-causal',
  'sdpa-causal',
  'flex-alibi',
  'flex-js-alibi',
  'sdpa-alibi-bias',
];

export function f1Group(impl: F1Impl): F1Group {
  if (impl.endsWith('document')) return 'document';
  if (impl.endsWith('causal')) return 'causal';
  return 'score';
}

/** The row each row's ratio is taken against: ratio = that row's ms ÷ this row's ms. */
export const F1_BASELINE: Record<F1Group, F1Impl> = {
  document: 'sdpa-dense-document',
  causal: 'sdpa-causal',
  score: 'flex-alibi',
};

export function f1Name(impl: F1Impl): string {
  switch (impl) {
    case 'flex-document':
      return 'flexAttention, documentMask block mask';
    case 'sdpa-dense-document':
      return 'scaledDotProductAttention, dense [L, S] float32 mask';
    case 'flex-causal-document':
      return 'flexAttention, andMasks(causalMask, documentMask) block mask';
    case 'flex-causal':
      return 'flexAttention, causalMask block mask';
    case 'sdpa-causal':
      return "scaledDotProductAttention, causal: 'top-left'";
    case 'flex-alibi':
      return 'flexAttention, scoreMod alibiScore(8) (built-in)';
    case 'flex-js-alibi':
      return 'flexAttention, scoreMod (s, b, h, q, kv) => s + slopes[h] * (kv - q) (JS)';
    case 'sdpa-alibi-bias':
      return 'scaledDotProductAttention, dense bias alibiBias(8, L, S)';
  }
}

export function shapeLabel(s: F1Shape): string {
  const docs = s.docs ? `, ${s.docs} docs × ${s.L / s.docs}` : '';
  return `(${s.B},${s.H},${s.L},${s.E}${docs})`;
}

/** Figures a row reports besides its times. */
export interface F1Values {
  /** The kernel that ran the row under kernel 'auto' (a probe with kernel 'wasm' decides; see f1-rows). */
  kernel?: string;
  /**
   * Process RSS once q, k, v exist and a small call has loaded the kernel, before the row's own set-up
   * (mask, bias, block mask) and its calls.
   */
  baseRssMB?: number;
  /** The set-up before the first call: building the dense mask or bias, or the block mask. */
  setupMs?: number;
  /** The block mask's percentage of skipped tiles (flex rows with a mask). */
  sparsity?: number;
  /** Bytes of q, k, v and the output, in MB (the O(n) part of any implementation's memory). */
  ioMB?: number;
  /** The first (checked) call's time. */
  firstMs?: number;
  /** Peak process RSS right after the first call: set-up and one call (later runs' uncollected outputs add more). */
  firstPeakRssMB?: number;
}

export interface F1Row {
  implementation: string;
  impl: F1Impl;
  shape: F1Shape;
  status: TableRowStatus;
  message?: string;
  /** Timed runs, ms each. */
  timesMs: number[];
  values: F1Values;
  /** Median of timesMs. */
  ms?: number;
  /** The group's baseline ms ÷ this row's ms (> 1: this row is faster). */
  vsBaseline?: number;
  peakRssMB?: number;
  /**
   * values.firstPeakRssMB − values.baseRssMB: the memory the row's set-up and one call took beyond q, k, v
   * and the loaded kernel.
   */
  extraRssMB?: number;
  maxAbsError?: number;
  checkedAgainst?: string;
  loadAverage1m?: number;
}

export function finishF1Rows(rows: F1Row[]): void {
  for (const row of rows) {
    if (row.status === 'ok' && row.timesMs.length) row.ms = median(row.timesMs);
    const { firstPeakRssMB, baseRssMB } = row.values;
    if (firstPeakRssMB !== undefined && baseRssMB !== undefined) row.extraRssMB = firstPeakRssMB - baseRssMB;
  }
  for (const row of rows) {
    const base = rows.find((r) => r.impl === F1_BASELINE[f1Group(row.impl)]);
    if (row.ms !== undefined && base?.ms !== undefined) row.vsBaseline = base.ms / row.ms;
  }
}

/** One line for the console as a row finishes. */
export function f1Summary(row: F1Row): string {
  if (row.ms === undefined) return statusText(row);
  const rss = row.peakRssMB === undefined ? '' : `, peak RSS ${row.peakRssMB.toFixed(0)} MB`;
  return `${formatMs(row.ms)} ms (${row.timesMs.length} runs, ${row.values.kernel ?? '?'}${rss})`;
}

const F1_HEADER = [
  'row',
  'shape',
  'kernel',
  'ms',
  'runs',
  'baseline ms ÷ ms',
  'peak RSS MB',
  'set-up + 1 call MB',
  'max err',
  'load',
];

function f1Cells(row: F1Row): string[] {
  const rss = row.peakRssMB === undefined ? '' : row.peakRssMB.toFixed(0);
  const extra = row.extraRssMB === undefined ? '' : row.extraRssMB.toFixed(0);
  const err = row.maxAbsError === undefined ? '' : row.maxAbsError.toExponential(1);
  const load = row.loadAverage1m === undefined ? '' : row.loadAverage1m.toFixed(1);
  const shape = shapeLabel(row.shape);
  if (row.ms === undefined)
    return [row.implementation, statusText(row), '', '', '', '', rss, extra, err, load];
  const isBase = row.impl === F1_BASELINE[f1Group(row.impl)];
  const ratio = isBase ? 'baseline' : row.vsBaseline === undefined ? '' : `${row.vsBaseline.toFixed(2)}×`;
  const kernel = row.values.kernel ?? '';
  return [
    row.implementation,
    shape,
    kernel,
    formatMs(row.ms),
    String(row.timesMs.length),
    ratio,
    rss,
    extra,
    err,
    load,
  ];
}

/** The F1 rows as markdown (or, with `plain`, aligned text for the console). */
export function f1Table(rows: F1Row[], plain = false): string {
  const statusRows = new Set(rows.flatMap((r, i) => (r.ms === undefined ? [i] : [])));
  return renderTable(F1_HEADER, rows.map(f1Cells), new Set([3, 4, 5, 6, 7, 8, 9]), plain, statusRows);
}

/** What each row was checked against, one line per row (for the page, under the table). */
export function f1Checks(rows: F1Row[]): string {
  return rows
    .filter((r) => r.checkedAgainst)
    .map((r) => `- ${r.implementation}: ${r.checkedAgainst}${r.status === 'wrong' ? ' — FAILED' : ''}`)
    .join('\n');
}

const escapeCell = (s: string) => s.replaceAll('|', '\\|');

/** The F1 targets: one line each, with the figures compared, the ratio and whether it is met. */
export function f1TargetsTable(rows: F1Row[]): string {
  const lines = ['| target | measured | ratio | met |', '| --- | --- | ---: | --- |'];
  const find = (impl: F1Impl) => rows.find((r) => r.impl === impl);
  const why = (...rs: (F1Row | undefined)[]) => {
    const bad = rs.find((r) => r && r.status !== 'ok');
    return bad ? escapeCell(`${bad.implementation}: ${statusText(bad)}`) : 'not measured';
  };
  const on = (r: F1Row) => (r.values.kernel ? ` (${r.values.kernel})` : '');

  const flexDoc = find('flex-document');
  const dense = find('sdpa-dense-document');
  if (flexDoc || dense) {
    const s = (flexDoc ?? dense)!.shape;
    const label = `documentMask ${shapeLabel(s)}: flexAttention ≥ ${F1_TARGETS.documentSpeedup}× scaledDotProductAttention + dense mask`;
    if (flexDoc?.ms !== undefined && dense?.ms !== undefined) {
      const ratio = dense.ms / flexDoc.ms;
      const met = ratio >= F1_TARGETS.documentSpeedup ? '✓' : '✗';
      const measured = `${formatMs(flexDoc.ms)} ms${on(flexDoc)} vs ${formatMs(dense.ms)} ms${on(dense)}`;
      lines.push(`| ${label} | ${measured} | ${ratio.toFixed(2)}× | ${met} |`);
    } else lines.push(`| ${label} | ${why(flexDoc, dense)} | | — |`);
  }
  if (flexDoc) {
    const io = flexDoc.values.ioMB;
    const bound = io === undefined ? undefined : F1_TARGETS.memoryPerIo * io;
    const label =
      `documentMask: O(n) memory — flexAttention’s set-up + one call (peak RSS beyond q, k, v) ≤ ${F1_TARGETS.memoryPerIo} × ` +
      `(q, k, v, out)${bound === undefined ? '' : ` = ${bound.toFixed(0)} MB`}, linear in L ` +
      `(the float32 [L, S] mask alone is ${((flexDoc.shape.L * flexDoc.shape.L * 4) / 2 ** 20).toFixed(0)} MB)`;
    if (flexDoc.status === 'ok' && flexDoc.extraRssMB !== undefined && bound !== undefined) {
      const denseText =
        dense?.extraRssMB !== undefined ? `; dense-mask row ${dense.extraRssMB.toFixed(0)} MB` : '';
      const measured = `${flexDoc.extraRssMB.toFixed(0)} MB (process peak over all runs ${flexDoc.peakRssMB?.toFixed(0)} MB)${denseText}`;
      const met = flexDoc.extraRssMB <= bound ? '✓' : '✗';
      lines.push(`| ${label} | ${measured} | ${(flexDoc.extraRssMB / bound).toFixed(2)}× | ${met} |`);
    } else lines.push(`| ${label} | ${why(flexDoc)} | | — |`);
  }

  const flexCausal = find('flex-causal');
  const sdpaCausal = find('sdpa-causal');
  if (flexCausal || sdpaCausal) {
    const s = (flexCausal ?? sdpaCausal)!.shape;
    const label = `causalMask block mask ${shapeLabel(s)}: flexAttention ms ≤ ${F1_TARGETS.causalSlowdown} × scaledDotProductAttention causal`;
    if (flexCausal?.ms !== undefined && sdpaCausal?.ms !== undefined) {
      const ratio = flexCausal.ms / sdpaCausal.ms;
      const met = ratio <= F1_TARGETS.causalSlowdown ? '✓' : '✗';
      const measured = `${formatMs(flexCausal.ms)} ms${on(flexCausal)} vs ${formatMs(sdpaCausal.ms)} ms${on(sdpaCausal)}`;
      lines.push(`| ${label} | ${measured} | ${ratio.toFixed(2)}× | ${met} |`);
    } else lines.push(`| ${label} | ${why(flexCausal, sdpaCausal)} | | — |`);
  }

  const builtin = find('flex-alibi');
  const js = find('flex-js-alibi');
  if (builtin || js) {
    const s = (builtin ?? js)!.shape;
    const label = `cost of a JS scoreMod ${shapeLabel(s)}: JS ALiBi ms ÷ built-in alibiScore ms (reported; no target)`;
    if (builtin?.ms !== undefined && js?.ms !== undefined) {
      const measured = `${formatMs(js.ms)} ms${on(js)} vs ${formatMs(builtin.ms)} ms${on(builtin)}`;
      lines.push(`| ${label} | ${measured} | ${(js.ms / builtin.ms).toFixed(2)}× | — |`);
    } else lines.push(`| ${label} | ${why(builtin, js)} | | — |`);
  }
  return lines.join('\n');
}
