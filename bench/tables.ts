// The P2 and T1 tables of `npm run bench`: which rows run, each in its own process (table-child.js), and
// the rows they become. One decision to know: rows run one at a time, as the attention grid's do, and a
// row's status (unavailable, not installed, wrong, timeout) is a row of the table, never a crash of the run.

import { loadavg } from 'node:os';
import { join } from 'node:path';
import { RELAXED_SIMD_FLAG } from './jobs.js';
import { finishP2Rows, type P2Row, p2Impls, p2Name, statusText } from './p2.js';
import { runChild } from './spawn.js';
import { finishT1Rows, T1_IMPLS, type T1Row, t1Name } from './t1.js';
import type { TableJob, TableResult } from './table-child.js';

export type TableName = 'attention' | 'p2' | 't1';
export const TABLE_NAMES: TableName[] = ['attention', 'p2', 't1'];

export interface TableContext {
  /** bench/ (this file runs from bench/dist). */
  benchDir: string;
  peersDir: string;
  quick: boolean;
  /** Keeps the row when true (--only). */
  selected: (label: string) => boolean;
  /** Prints one finished row. */
  log: (line: string) => void;
}

/** A P2 row's time limit: loading, the check and up to 4 s of runs take ~10 s on the 2-core machine. */
const P2_TIMEOUT_MS = 120_000;
/** A T1 row's time limit: warm-up plus up to 20 s of steps (3 at least); tfjs-cpu stops after one step. */
const T1_TIMEOUT_MS = 180_000;

const script = (ctx: TableContext) => join(ctx.benchDir, 'dist', 'table-child.js');

function statusOf(result: TableResult & { timedOut?: boolean }): P2Row['status'] {
  return result.timedOut ? 'timeout' : result.status;
}

/** Runs the P2 rows (those `selected` keeps); `relaxedRows` adds qkv's FMA rows (Node 20). */
export async function runP2(ctx: TableContext, relaxedRows: boolean): Promise<P2Row[]> {
  const rows: P2Row[] = [];
  const impls = p2Impls(relaxedRows).filter((impl) => ctx.selected(`P2 ${p2Name(impl)}`));
  for (const impl of impls) {
    const row: P2Row = { implementation: p2Name(impl), impl, status: 'ok', timesMs: [] };
    row.loadAverage1m = loadavg()[0];
    const job: TableJob = {
      table: 'p2',
      impl,
      maxRuns: ctx.quick ? 3 : 30,
      budgetMs: ctx.quick ? 500 : 4000,
      peersDir: ctx.peersDir,
    };
    const execArgv = impl.kind === 'qkv' && impl.relaxed ? [RELAXED_SIMD_FLAG] : [];
    const result = await runChild<TableResult>(script(ctx), job, execArgv, P2_TIMEOUT_MS);
    Object.assign(row, {
      status: statusOf(result),
      message: result.message,
      timesMs: result.timesMs,
      peakRssMB: result.peakRssMB,
      maxAbsError: result.maxAbsError,
      checkedAgainst: result.checkedAgainst,
    });
    finishP2Rows([row]);
    ctx.log(
      `  P2 ${row.implementation}  ${row.ms === undefined ? statusText(row) : `${row.ms.toFixed(1)} ms`}`,
    );
    rows.push(row);
  }
  finishP2Rows(rows);
  return rows;
}

/** Runs the T1 rows (those `selected` keeps). */
export async function runT1(ctx: TableContext): Promise<T1Row[]> {
  const rows: T1Row[] = [];
  const impls = T1_IMPLS.filter((impl) => ctx.selected(`T1 ${t1Name(impl)}`));
  for (const impl of impls) {
    const row: T1Row = {
      implementation: t1Name(impl),
      impl,
      status: 'ok',
      timesMs: [],
      losses: [],
      warmup: 0,
      rssMB: [],
    };
    row.loadAverage1m = loadavg()[0];
    const job: TableJob = {
      table: 't1',
      impl,
      warmup: ctx.quick ? 1 : 2,
      minSteps: ctx.quick ? 2 : 3,
      maxSteps: ctx.quick ? 2 : 12,
      budgetMs: ctx.quick ? 1000 : 20_000,
    };
    const result = await runChild<TableResult>(script(ctx), job, [], T1_TIMEOUT_MS);
    Object.assign(row, {
      status: statusOf(result),
      message: result.message,
      timesMs: result.timesMs,
      peakRssMB: result.peakRssMB,
      losses: result.losses ?? [],
      warmup: result.warmup ?? 0,
      rssMB: result.rssMB ?? [],
    });
    finishT1Rows([row]);
    const speed =
      row.tokensPerSec === undefined ? statusText(row) : `${row.tokensPerSec.toFixed(0)} tokens/s`;
    ctx.log(`  T1 ${row.implementation}  ${speed}`);
    rows.push(row);
  }
  finishT1Rows(rows);
  return rows;
}
