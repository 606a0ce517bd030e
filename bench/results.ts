// The bench's results: the row and file formats, the ratio to the best portable peer, and the two renderings
// (an aligned console table and the README's markdown). One decision to know: a qkv row is compared with
// the fastest portable peer (tfjs-wasm, onnxruntime-web) using at most as many threads on the same config.

import type { ChildStatus } from './child.js';
import { type Config, configLabel, flops, type Impl, implName, isPortablePeer } from './jobs.js';

export type RowStatus = ChildStatus | 'skipped' | 'timeout';

export interface Row {
  implementation: string;
  impl: Impl;
  config: string;
  shape: Config;
  status: RowStatus;
  message?: string;
  /** Median of the timed runs; for a row a target compares, the median of its rounds' medians. */
  ms?: number;
  timesMs: number[];
  /**
   * Rows a speed target compares (see SPEED_TARGETS): each round's median (interleaved rounds after the
   * grid; in results saved before `interleaved`, the grid's run first); absent for other rows and in
   * results saved before rounds.
   */
  roundsMs?: number[];
  /** The rounds ran interleaved with the target's other rows (run.ts's runTargetRounds). */
  interleaved?: boolean;
  gflops?: number;
  peakRssMB?: number;
  maxAbsError?: number;
  checkedAgainst?: string;
  /** Peer ms / this row's ms (> 1: qkv is faster), for qkv rows with a measured peer. */
  vsBestPortablePeer?: { ratio: number; peer: string };
  /** Memory-target rows: the issue's limit on whole-process peak RSS. */
  memoryLimitMB?: number;
  /** The machine's 1-minute load average when the row started (others share this machine). */
  loadAverage1m?: number;
}

export interface Machine {
  cpu: string;
  cores: number;
  node: string;
  platform: string;
  totalMemoryMB: number;
  loadAverage: number[];
  date: string;
}

export interface Results {
  machine: Machine;
  /** `git describe`-style commit of the measured tree, "+dirty" when it has uncommitted changes. */
  commit: string;
  partial: boolean;
  rows: Row[];
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

/**
 * How many rounds P2 and T1 run their speed rows in (1 with --quick): each round runs every row once, in
 * print order, so the rows of a round ran within minutes of each other, and a machine whose speed drifts
 * (a shared VM) moves a whole round rather than one row against the others. A row's figure is the median
 * over the rounds of each round's median.
 */
export const TABLE_ROUNDS = 3;

/**
 * The per-round ratios of a target as a cell: "1.52×, 1.48×, 1.55× (2 of 3 rounds ≥ 1.5×)"; '' for saved
 * results from before rounds.
 */
export function roundsCell(ratios: number[], target: number): string {
  if (ratios.length < 2) return '';
  const met = ratios.filter((r) => r >= target).length;
  return `${ratios.map((r) => `${r.toFixed(2)}×`).join(', ')} (${met} of ${ratios.length} rounds ≥ ${target}×)`;
}

/** Ratios of matching rounds: peer round i ÷ own round i (times: higher is a faster own row). */
export function roundRatios(own: number[] | undefined, peer: number[] | undefined): number[] {
  if (!own || !peer) return [];
  const n = Math.min(own.length, peer.length);
  return Array.from({ length: n }, (_, i) => peer[i] / own[i]);
}

export function newRow(impl: Impl, config: Config): Row {
  return {
    implementation: implName(impl),
    impl,
    config: configLabel(config),
    shape: config,
    status: 'ok',
    timesMs: [],
  };
}

/** Fills ms and GFLOP/s from the timed runs. */
export function finishRow(row: Row): void {
  if (row.status !== 'ok' || row.timesMs.length === 0) return;
  row.ms = median(row.timesMs);
  row.gflops = flops(row.shape) / row.ms / 1e6;
}

/** Sets `vsBestPortablePeer` on every measured qkv row. */
export function addRatios(rows: Row[]): void {
  for (const row of rows) {
    if (row.impl.kind !== 'qkv' || row.ms === undefined || row.memoryLimitMB !== undefined) continue;
    const threads = row.impl.threads;
    let best: Row | undefined;
    for (const peer of rows) {
      if (!isPortablePeer(peer.impl) || peer.config !== row.config || peer.ms === undefined) continue;
      if (peer.impl.threads > threads) continue;
      if (!best || peer.ms < (best.ms ?? Number.POSITIVE_INFINITY)) best = peer;
    }
    if (best?.ms !== undefined)
      row.vsBestPortablePeer = { ratio: best.ms / row.ms, peer: best.implementation };
  }
}

export function formatMs(ms: number): string {
  if (ms < 10) return ms.toFixed(2);
  if (ms < 100) return ms.toFixed(1);
  return ms.toFixed(0);
}

function statusText(row: Row): string {
  if (row.status === 'ok') return '';
  let text: string = row.status;
  if (row.message)
    text = row.status === 'skipped' ? `skipped (${row.message})` : `${row.status}: ${row.message}`;
  return text.length > 100 ? `${text.slice(0, 99)}…` : text;
}

function memoryVerdict(row: Row): string {
  if (row.memoryLimitMB === undefined || row.peakRssMB === undefined || row.status !== 'ok') return '';
  return row.peakRssMB <= row.memoryLimitMB ? ` ≤ ${row.memoryLimitMB} ✓` : ` > ${row.memoryLimitMB} ✗`;
}

/** The cells of one row: implementation, config, ms, GFLOP/s, peak RSS MB, max err, vs best peer. */
export function cells(row: Row): string[] {
  const rss = row.peakRssMB === undefined ? '' : `${row.peakRssMB.toFixed(0)}${memoryVerdict(row)}`;
  const err = row.maxAbsError === undefined ? '' : row.maxAbsError.toExponential(1);
  const ratio = row.vsBestPortablePeer
    ? `${row.vsBestPortablePeer.ratio.toFixed(2)}× vs ${row.vsBestPortablePeer.peer}`
    : '';
  if (row.ms === undefined) return [row.implementation, row.config, statusText(row), '', rss, err, ''];
  return [row.implementation, row.config, formatMs(row.ms), row.gflops?.toFixed(2) ?? '', rss, err, ratio];
}

export const HEADER = [
  'implementation',
  'config',
  'ms',
  'GFLOP/s',
  'peak RSS MB',
  'max err',
  'speed-up vs best portable peer',
];

/** Aligned plain-text table; a row without a time prints its status after the config instead. */
export function consoleTable(rows: Row[]): string {
  const measured = [HEADER, ...rows.filter((r) => r.ms !== undefined).map(cells)];
  const all = [HEADER, ...rows.map(cells)];
  const widths = HEADER.map((_, col) => Math.max(...(col < 2 ? all : measured).map((r) => r[col].length)));
  const right = new Set([2, 3, 4, 5]);
  const lines: string[] = [];
  let lastConfig = '';
  rows.forEach((row, i) => {
    if (i === 0)
      lines.push(
        HEADER.map((h, col) => (right.has(col) ? h.padStart(widths[col]) : h.padEnd(widths[col]))).join('  '),
      );
    if (row.config !== lastConfig) lines.push('');
    lastConfig = row.config;
    const r = cells(row);
    if (row.ms === undefined) {
      const rss = row.peakRssMB === undefined ? '' : `  (peak RSS ${r[4]} MB)`;
      lines.push(`${r[0].padEnd(widths[0])}  ${r[1].padEnd(widths[1])}  ${r[2]}${rss}`);
      return;
    }
    lines.push(
      r
        .map((cell, col) => (right.has(col) ? cell.padStart(widths[col]) : cell.padEnd(widths[col])))
        .join('  ')
        .trimEnd(),
    );
  });
  return lines.join('\n');
}

export function machineLine(m: Machine, commit?: string): string {
  const load = m.loadAverage.map((x) => x.toFixed(1)).join(' ');
  const at = commit ? `, qkv ${commit}` : '';
  return `${m.cpu}, ${m.cores} cores, ${Math.round(m.totalMemoryMB / 1024)} GB, Node ${m.node} (${m.platform}), ${m.date}, load average at start ${load}${at}`;
}

/** The memory targets as markdown: config, ms, peak RSS against its limit, max err or status. */
export function memoryMarkdownTable(rows: Row[]): string {
  const lines = [
    '| qkv, default options | ms | peak RSS MB | target | max err |',
    '| --- | ---: | ---: | --- | ---: |',
  ];
  for (const row of rows) {
    const ms = row.ms === undefined ? statusText(row) : formatMs(row.ms);
    const rss = row.peakRssMB === undefined ? '' : row.peakRssMB.toFixed(0);
    const met =
      row.status === 'ok' && row.peakRssMB !== undefined && row.peakRssMB <= (row.memoryLimitMB ?? 0);
    const target = `≤ ${row.memoryLimitMB} MB ${row.status !== 'ok' ? '' : met ? '✓' : '✗'}`.trim();
    const err = row.maxAbsError === undefined ? '' : row.maxAbsError.toExponential(1);
    lines.push(`| ${row.config} | ${ms.replaceAll('|', '\\|')} | ${rss} | ${target} | ${err} |`);
  }
  return lines.join('\n');
}

/** Issue 3's speed targets: at P1, qkv's default kernel ≥ 1.5× onnxruntime-web on 1 and on 2 threads. */
export const SPEED_TARGETS = [
  { config: '(1,8,1024,64)', qkv: 'qkv auto sync', peer: 'onnxruntime-web t1', label: 'P1, 1 thread' },
  { config: '(1,8,1024,64)', qkv: 'qkv auto async t2', peer: 'onnxruntime-web t2', label: 'P1, 2 threads' },
  {
    config: '(1,8,1024,64)',
    qkv: 'qkv wasm-fma sync',
    peer: 'onnxruntime-web t1',
    label: 'P1, 1 thread, FMA',
  },
  {
    config: '(1,8,1024,64)',
    qkv: 'qkv wasm-fma async t2',
    peer: 'onnxruntime-web t2',
    label: 'P1, 2 threads, FMA',
  },
] as const;
const SPEED_TARGET_RATIO = 1.5;

/** The rows the speed targets compare on `config`'s label, each named once, qkv row before its peer. */
export function targetRowNames(config: string): string[] {
  const names: string[] = [];
  for (const t of SPEED_TARGETS) {
    if (t.config !== config) continue;
    for (const name of [t.qkv, t.peer]) if (!names.includes(name)) names.push(name);
  }
  return names;
}

/**
 * The speed targets as markdown (rows whose qkv or peer row was not measured are left out), with each
 * round's ratio where the rows ran in rounds.
 */
export function targetsMarkdownTable(rows: Row[]): string {
  const rounds = rows.some((r) => (r.roundsMs?.length ?? 0) > 1);
  const lines = [
    `| target: qkv ≥ 1.5× onnxruntime-web | qkv row | qkv ms | onnxruntime-web ms | ratio | met |${rounds ? ' each round |' : ''}`,
    `| --- | --- | ---: | ---: | ---: | --- |${rounds ? ' --- |' : ''}`,
  ];
  for (const t of SPEED_TARGETS) {
    const find = (name: string) => rows.find((r) => r.implementation === name && r.config === t.config);
    const qkv = find(t.qkv);
    const peer = find(t.peer);
    if (qkv?.ms === undefined || peer?.ms === undefined) continue;
    const ratio = peer.ms / qkv.ms;
    const met = ratio >= SPEED_TARGET_RATIO ? '✓' : '✗';
    const each = rounds
      ? ` ${roundsCell(roundRatios(qkv.roundsMs, peer.roundsMs), SPEED_TARGET_RATIO)} |`
      : '';
    lines.push(
      `| ${t.label} | ${t.qkv} | ${formatMs(qkv.ms)} | ${formatMs(peer.ms)} (${t.peer}) | ${ratio.toFixed(2)}× | ${met} |${each}`,
    );
  }
  return lines.join('\n');
}

/** The README's markdown: one table of every row, grouped by config. */
export function markdownTable(rows: Row[]): string {
  const escapePipes = (s: string) => s.replaceAll('|', '\\|');
  const lines = [
    `| ${HEADER.join(' | ')} |`,
    `|${HEADER.map((_, i) => (i >= 2 && i <= 5 ? ' ---: ' : ' --- ')).join('|')}|`,
  ];
  for (const row of rows) lines.push(`| ${cells(row).map(escapePipes).join(' | ')} |`);
  return lines.join('\n');
}

/** The formatter's (Biome's) line width, from biome.json. */
const LINE_WIDTH = 110;

/**
 * JSON laid out as the project's formatter (Biome) writes it, so a fresh results.json passes
 * `npm run lint`: 2-space indent; an array of numbers on its key's line when that fits in LINE_WIDTH,
 * else filled onto as few lines as fit, one indent deeper.
 */
export function toJson(value: unknown): string {
  const round = (x: number, places: number) => Math.round(x * 10 ** places) / 10 ** places;
  const text = JSON.stringify(
    value,
    (key, v) => {
      if (key === 'timesMs') return (v as number[]).map((x) => round(x, 2));
      if (key === 'maxAbsError' && typeof v === 'number') return Number(v.toPrecision(3));
      return typeof v === 'number' ? round(v, 4) : v;
    },
    2,
  );
  const laidOut = text.replace(
    /^( *)(.*)\[\n((?: *-?[\d.e+-]+,?\n)+) *\](,?)$/gm,
    (_, indent: string, head: string, body: string, comma: string) => {
      const items = body
        .split('\n')
        .map((s) => s.trim().replace(/,$/, ''))
        .filter(Boolean);
      const oneLine = `${indent}${head}[${items.join(', ')}]${comma}`;
      if (oneLine.length <= LINE_WIDTH) return oneLine;
      const inner = `${indent}  `;
      const lines: string[] = [];
      let line = '';
      for (const [n, item] of items.entries()) {
        const piece = n < items.length - 1 ? `${item},` : item;
        if (line && `${inner}${line} ${piece}`.length > LINE_WIDTH) {
          lines.push(`${inner}${line}`);
          line = piece;
        } else line = line ? `${line} ${piece}` : piece;
      }
      lines.push(`${inner}${line}`);
      return `${indent}${head}[\n${lines.join('\n')}\n${indent}]${comma}`;
    },
  );
  return `${laidOut}\n`;
}
