// P2 (issue 10, item 6): MultiHeadAttention forward, self-attention on x [1, 1024, 512], embedDim 512,
// 8 heads, no weights: qkv's MultiHeadAttention (sync, and forwardAsync on 2 worker threads) against
// onnxruntime-web running PyTorch's own ONNX export of nn.MultiheadAttention, and the same layer in tfjs-wasm.
// One decision to know: every row reads its weights out of the one committed .onnx
// (bench/fixtures/mha-512x8.onnx, written by scripts/export_mha.py) and is checked, before it is timed,
// against the PyTorch float64 output stored in that file's metadata, with one tolerance for all rows.

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { ChildStatus } from './child.js';
import { readOnnx } from './peers/onnx-read.js';
import { formatMs, median, roundRatios, roundsCell } from './results.js';

export const MHA_EMBED = 512;
export const MHA_HEADS = 8;
export const MHA_LEN = 1024;
export const MHA_FIXTURE_NAME = 'mha-512x8.onnx';
/** The committed export (from bench/dist/, where this file runs). */
export const MHA_FIXTURE = fileURLToPath(new URL(`../fixtures/${MHA_FIXTURE_NAME}`, import.meta.url));
/** The check every P2 row passes: |got − want| ≤ atol + rtol·|want| on every sampled element. */
export const MHA_TOLERANCE = { atol: 1e-5, rtol: 1e-4 };
export const MHA_TARGET_RATIO = 1.5;

/** A P2 implementation. `relaxed`: the process runs with Node 20's relaxed-SIMD flag (FMA GEMM). */
export type P2Impl =
  | { kind: 'qkv'; mode: 'sync' | 'async'; threads: number; relaxed?: boolean }
  | { kind: 'ort-web'; threads: number }
  | { kind: 'ort-node'; threads: number }
  | { kind: 'tfjs-wasm'; threads: 1 };

export function p2Name(impl: P2Impl): string {
  switch (impl.kind) {
    case 'qkv': {
      const fma = impl.relaxed ? ' FMA' : '';
      return impl.mode === 'sync' ? `qkv forward sync${fma}` : `qkv forwardAsync t${impl.threads}${fma}`;
    }
    case 'ort-web':
      return `onnxruntime-web t${impl.threads}`;
    case 'ort-node':
      return `onnxruntime-node t${impl.threads}`;
    case 'tfjs-wasm':
      return 'tfjs-wasm t1';
  }
}

/**
 * The rows, in print order. `relaxedRows`: also qkv with the FMA build of its GEMM and kernels, in
 * processes started with the flag (where this runtime does not enable relaxed SIMD by default).
 */
export function p2Impls(relaxedRows: boolean): P2Impl[] {
  const impls: P2Impl[] = [
    { kind: 'qkv', mode: 'sync', threads: 1 },
    { kind: 'qkv', mode: 'async', threads: 2 },
  ];
  if (relaxedRows) {
    impls.push({ kind: 'qkv', mode: 'sync', threads: 1, relaxed: true });
    impls.push({ kind: 'qkv', mode: 'async', threads: 2, relaxed: true });
  }
  impls.push(
    { kind: 'ort-web', threads: 1 },
    { kind: 'ort-web', threads: 2 },
    { kind: 'tfjs-wasm', threads: 1 },
    { kind: 'ort-node', threads: 1 },
    { kind: 'ort-node', threads: 2 },
  );
  return impls;
}

/** The layer as the bench uses it: PyTorch state-dict names (no "mha." prefix), input, expected rows. */
export interface MhaFixture {
  /** The .onnx file's bytes, for the ONNX Runtime rows. */
  bytes: Uint8Array;
  /** in_proj_weight [1536, 512], in_proj_bias [1536], out_proj.weight [512, 512], out_proj.bias [512]. */
  weights: Record<string, { dims: number[]; data: Float32Array }>;
  /** x [1, 1024, 512], row-major. */
  x: Float32Array;
  /** Query rows of the expected output and their values (float64, PyTorch). */
  rows: number[];
  values: Float64Array;
  source: string;
}

/**
 * The bench's input, as scripts/export_mha.py writes it into the .onnx's metadata: an LCG from 12345,
 * (s / 2³² − 0.5)·2√3 (unit variance), rounded to float32. Python repeats it bit for bit.
 */
export function mhaInput(): Float32Array {
  const x = new Float32Array(MHA_LEN * MHA_EMBED);
  const scale = 2 * Math.sqrt(3);
  let s = 12345;
  for (let i = 0; i < x.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    x[i] = (s / 2 ** 32 - 0.5) * scale;
  }
  return x;
}

export function loadMhaFixture(path = MHA_FIXTURE): MhaFixture {
  const bytes = new Uint8Array(readFileSync(path));
  const { initializers, metadata } = readOnnx(bytes);
  const weights: MhaFixture['weights'] = {};
  for (const [name, t] of initializers) weights[name.replace(/^mha\./, '')] = t;
  const expected = metadata.get('qkv_bench_expected');
  if (!expected) throw new Error(`${path} has no qkv_bench_expected metadata (rerun scripts/export_mha.py)`);
  const { rows, values } = JSON.parse(expected) as { rows: number[]; values: number[][] };
  const source = metadata.get('qkv_bench_source') ?? 'PyTorch';
  return {
    bytes,
    weights,
    x: mhaInput(),
    rows,
    values: Float64Array.from(values.flat()),
    source: `PyTorch float64, ${rows.length} query rows (${source.split(',')[0]})`,
  };
}

/** Largest |got − want| over the expected rows; ok when every element is within MHA_TOLERANCE. */
export function checkMha(got: Float32Array, f: MhaFixture): { ok: boolean; maxAbsError: number } {
  const { atol, rtol } = MHA_TOLERANCE;
  let ok = got.length === MHA_LEN * MHA_EMBED;
  let maxAbsError = 0;
  f.rows.forEach((row, r) => {
    for (let e = 0; e < MHA_EMBED; e++) {
      const want = f.values[r * MHA_EMBED + e];
      const err = Math.abs(got[row * MHA_EMBED + e] - want);
      if (!(err <= atol + rtol * Math.abs(want))) ok = false;
      maxAbsError = Number.isNaN(err) || Number.isNaN(maxAbsError) ? Number.NaN : Math.max(maxAbsError, err);
    }
  });
  return { ok, maxAbsError };
}

export type TableRowStatus = ChildStatus | 'skipped' | 'timeout';

export interface P2Row {
  implementation: string;
  impl: P2Impl;
  status: TableRowStatus;
  message?: string;
  /** Median of the timed runs (of the rounds' medians, when the row ran in rounds). */
  ms?: number;
  /** Every timed run, of every round. */
  timesMs: number[];
  /** Each round's median (see TABLE_ROUNDS); absent in results saved before rounds. */
  roundsMs?: number[];
  /** Its rounds ran interleaved with its target's other rows (tables.ts's p2Group). */
  interleaved?: boolean;
  peakRssMB?: number;
  maxAbsError?: number;
  checkedAgainst?: string;
  /** onnxruntime-web ms at the same thread count ÷ this row's ms (qkv rows). */
  vsOrtWeb?: number;
  loadAverage1m?: number;
}

export function finishP2Rows(rows: P2Row[]): void {
  for (const row of rows) {
    if (row.status !== 'ok' || !row.timesMs.length) continue;
    row.ms = row.roundsMs?.length ? median(row.roundsMs) : median(row.timesMs);
  }
  for (const row of rows) {
    if (row.impl.kind !== 'qkv' || row.ms === undefined) continue;
    const threads = row.impl.threads;
    const peer = rows.find((r) => r.impl.kind === 'ort-web' && r.impl.threads === threads);
    if (peer?.ms !== undefined) row.vsOrtWeb = peer.ms / row.ms;
  }
}

/**
 * A row's status and message, for a cell: a message that already says what happened ("n/a: …", "not
 * available: …") stands alone; long ones are cut at 110 characters.
 */
export function statusText(row: { status: TableRowStatus; message?: string }): string {
  let text: string = row.status;
  if (row.message)
    text = /^(n\/a|not available)\b/.test(row.message) ? row.message : `${text}: ${row.message}`;
  return text.length > 110 ? `${text.slice(0, 109)}…` : text;
}

const P2_HEADER = [
  'implementation',
  'ms',
  'runs',
  'peak RSS MB',
  'max err',
  'vs onnxruntime-web, same threads',
];

function p2Cells(row: P2Row): string[] {
  const rss = row.peakRssMB === undefined ? '' : row.peakRssMB.toFixed(0);
  const err = row.maxAbsError === undefined ? '' : row.maxAbsError.toExponential(1);
  if (row.ms === undefined) return [row.implementation, statusText(row), '', rss, err, ''];
  const ratio = row.vsOrtWeb === undefined ? '' : `${row.vsOrtWeb.toFixed(2)}×`;
  return [row.implementation, formatMs(row.ms), String(row.timesMs.length), rss, err, ratio];
}

/** The P2 rows as markdown (or, with `plain`, aligned text for the console). */
export function p2Table(rows: P2Row[], plain = false): string {
  const statusRows = new Set(rows.flatMap((r, i) => (r.ms === undefined ? [i] : [])));
  return renderTable(P2_HEADER, rows.map(p2Cells), new Set([1, 2, 3, 4, 5]), plain, statusRows);
}

/** The P2 targets: qkv ≥ 1.5× onnxruntime-web on 1 thread and on 2 threads (rows that ran). */
export function p2TargetsTable(rows: P2Row[]): string {
  const lines = [
    `| target: qkv ≥ ${MHA_TARGET_RATIO}× onnxruntime-web | qkv row | qkv ms | onnxruntime-web ms | ratio | met | each round |`,
    '| --- | --- | ---: | ---: | ---: | --- | --- |',
  ];
  const find = (pred: (impl: P2Impl) => boolean) => rows.find((r) => pred(r.impl));
  for (const threads of [1, 2]) {
    for (const relaxed of [false, true]) {
      const qkv = find((i) => i.kind === 'qkv' && i.threads === threads && !!i.relaxed === relaxed);
      const peer = find((i) => i.kind === 'ort-web' && i.threads === threads);
      if (!qkv || !peer || (relaxed && qkv.status !== 'ok')) continue;
      const label = `P2, ${threads} thread${threads > 1 ? 's' : ''}${relaxed ? ', FMA' : ''}`;
      if (qkv.ms === undefined || peer.ms === undefined) {
        const why = qkv.ms === undefined ? statusText(qkv) : `${peer.implementation} ${statusText(peer)}`;
        lines.push(`| ${label} | ${qkv.implementation} | ${escapeCell(why)} | | | — | |`);
        continue;
      }
      const ratio = peer.ms / qkv.ms;
      const met = ratio >= MHA_TARGET_RATIO ? '✓' : '✗';
      const rounds = roundsCell(roundRatios(qkv.roundsMs, peer.roundsMs), MHA_TARGET_RATIO);
      lines.push(
        `| ${label} | ${qkv.implementation} | ${formatMs(qkv.ms)} | ${formatMs(peer.ms)} (${peer.implementation}) | ${ratio.toFixed(2)}× | ${met} | ${rounds} |`,
      );
    }
  }
  return lines.join('\n');
}

const escapeCell = (s: string) => s.replaceAll('|', '\\|');

/**
 * Markdown (header, separator, rows) or aligned plain text; `right`: the right-aligned columns. A row whose
 * second cell is a status (`statusRows`) does not widen that column in plain text: it is printed as is.
 */
export function renderTable(
  header: string[],
  body: string[][],
  right: Set<number>,
  plain: boolean,
  statusRows: Set<number> = new Set(),
): string {
  if (!plain) {
    const sep = header.map((_, i) => (right.has(i) ? ' ---: ' : ' --- ')).join('|');
    const lines = body.map((r) => `| ${r.map(escapeCell).join(' | ')} |`);
    return [`| ${header.join(' | ')} |`, `|${sep}|`, ...lines].join('\n');
  }
  const all = [header, ...body];
  const sized = [header, ...body.filter((_, i) => !statusRows.has(i))];
  const widths = header.map((_, c) => Math.max(...(c === 0 ? all : sized).map((r) => (r[c] ?? '').length)));
  const line = (r: string[]) =>
    r
      .map((cell, c) => (right.has(c) ? cell.padStart(widths[c]) : cell.padEnd(widths[c])))
      .join('  ')
      .trimEnd();
  return [
    line(header),
    ...body.map((r, i) => (statusRows.has(i) ? `${r[0].padEnd(widths[0])}  ${r[1]}` : line(r))),
  ].join('\n');
}
