// The P2, T1, G1 and F1 tables of `npm run bench`: which rows run, each in its own process
// (table-child.js), and the rows they become. One decision to know: rows run one at a time, as the attention
// grid's do, and a row's status (unavailable, not installed, wrong, timeout) is a row of the table, never a
// crash of the run.

import { loadavg } from 'node:os';
import { join } from 'node:path';
import {
  F1_IMPLS,
  F1_RUNS,
  F1_SHAPES,
  type F1Impl,
  type F1Row,
  f1Group,
  f1Name,
  f1Summary,
  finishF1Rows,
  shapeLabel,
} from './f1.js';
import type { F1Job } from './f1-rows.js';
import { finishG1Rows, G1_IMPLS, type G1Impl, type G1Row, g1Name, g1Summary } from './g1.js';
import type { G1Job } from './g1-rows.js';
import { RELAXED_SIMD_FLAG } from './jobs.js';
import { finishP2Rows, type P2Impl, type P2Row, p2Impls, p2Name, statusText } from './p2.js';
import { median } from './results.js';
import { INTERLEAVE_PAUSE_MS, interleave, runChild, serveChild, serveGroup } from './spawn.js';
import {
  finishT1Rows,
  T1_HEAP_EVERY,
  T1_LONG_STEPS,
  T1_LONG_WARMUP,
  T1_TOKENS,
  type T1Impl,
  type T1Row,
  t1Impls,
  t1Name,
} from './t1.js';
import type { TableJob, TableResult } from './table-child.js';

export type TableName = 'attention' | 'p2' | 't1' | 'g1' | 'f1';
export const TABLE_NAMES: TableName[] = ['attention', 'p2', 't1', 'g1', 'f1'];

export interface TableContext {
  /** bench/ (this file runs from bench/dist). */
  benchDir: string;
  peersDir: string;
  quick: boolean;
  /** Rounds of the speed rows (--rounds; 1 with --quick). */
  rounds: number;
  /** Keeps the row when true (--only). */
  selected: (label: string) => boolean;
  /** Prints one finished row. */
  log: (line: string) => void;
}

/** A P2 row's time limit: loading, the check and up to 4 s of runs take ~10 s on the 2-core machine. */
const P2_TIMEOUT_MS = 120_000;
/** An interleaved P2 row's limit to be ready, then between two of its replies (spawn.ts's serveChild). */
const P2_SERVED_TIMEOUT_MS = 240_000;
/** A P2 row's timed runs in a round: at most this many, or until its (slowest) row has spent P2_BUDGET_MS. */
const P2_MAX_RUNS = 30;
const P2_BUDGET_MS = 4000;

/** A T1 row's time limit: warm-up plus up to 20 s of steps (3 at least); tfjs-cpu stops after one step. */
const T1_TIMEOUT_MS = 180_000;
/** A memory row: 210 steps of about 0.5 s on this VM; 10 minutes leaves room for a slower machine. */
const T1_LONG_TIMEOUT_MS = 600_000;
/** An interleaved T1 row's limit to be ready, then between two of its replies (spawn.ts's serveChild). */
const T1_SERVED_TIMEOUT_MS = 400_000;

/**
 * A G1 row's time limit: the generation without a cache takes ~12 s a run on the 2-core machine (check
 * run + up to 3 timed); the others take seconds.
 */
const G1_TIMEOUT_MS = 300_000;

/**
 * An F1 row's time limit: the slowest rows (flex on the JS kernel at 8192, sdpa with the dense 8192² mask)
 * take 5–25 s a run on the 2-core machine: a check run, then at least 3 timed runs, ~2 min.
 */
const F1_TIMEOUT_MS = 600_000;

const script = (ctx: TableContext) => join(ctx.benchDir, 'dist', 'table-child.js');

function statusOf(result: TableResult & { timedOut?: boolean }): P2Row['status'] {
  return result.timedOut ? 'timeout' : result.status;
}

/**
 * The order a round runs `rows` in (the tables print them in their own order): each qkv row next to the
 * peer its target compares it with (`rank`: rows of equal rank keep their order; the peer's rank between
 * its qkv rows' ranks), and every other round reversed, so a machine whose speed drifts during a round
 * moves a row and its peer together, and a steady drift does not favour one side in every round.
 */
function roundOrder<R>(rows: R[], rank: (row: R) => number, round: number): R[] {
  const order = rows
    .map((row, i) => ({ row, key: rank(row), i }))
    .sort((a, b) => a.key - b.key || a.i - b.i)
    .map((x) => x.row);
  return round % 2 ? order.reverse() : order;
}

/** P2: qkv sync, onnxruntime-web t1, qkv sync FMA; qkv async t2, onnxruntime-web t2, its FMA row; the rest. */
const p2Rank = ({ impl }: P2Row) =>
  impl.kind === 'qkv'
    ? 10 * impl.threads + (impl.relaxed ? 2 : 0)
    : impl.kind === 'ort-web'
      ? 10 * impl.threads + 1
      : 100;

/** T1: qkv t1, tfjs-wasm t1 (every target's peer), qkv t1 FMA, then the 2-thread rows, then the rest. */
const t1Rank = ({ impl }: T1Row) =>
  impl.kind === 'qkv' ? 10 * impl.threads + (impl.relaxed ? 2 : 0) : impl.kind === 'tfjs-wasm' ? 11 : 100;

/**
 * Runs the P2 rows (those `selected` keeps) in ctx.rounds rounds; `relaxedRows` adds qkv's FMA rows (Node 20).
 * In a round, the rows of one target (the qkv rows at one thread count and their onnxruntime-web peer)
 * run interleaved (p2Group); the others one after another, each in its own process.
 */
export async function runP2(ctx: TableContext, relaxedRows: boolean): Promise<P2Row[]> {
  const impls = p2Impls(relaxedRows).filter((impl) => ctx.selected(`P2 ${p2Name(impl)}`));
  const rows: P2Row[] = impls.map((impl) => ({
    implementation: p2Name(impl),
    impl,
    status: 'ok',
    timesMs: [],
    roundsMs: [],
  }));
  const rounds = ctx.quick ? 1 : ctx.rounds;
  for (let round = 0; round < rounds; round++) {
    // Failed, or not installed: not run again.
    const order = roundOrder(rows, p2Rank, round).filter((row) => row.status === 'ok');
    const groups: P2Row[][] = [];
    for (const row of order) {
      const key = p2Target(row);
      const last = groups.at(-1);
      if (key !== undefined && last && p2Target(last[0]) === key) last.push(row);
      else groups.push([row]);
    }
    for (const group of groups) {
      if (round === 0) for (const row of group) row.loadAverage1m = loadavg()[0];
      const interleaved = group.length > 1;
      const results = interleaved
        ? await p2Group(ctx, group)
        : [
            await runChild<TableResult>(
              script(ctx),
              p2Job(ctx, group[0].impl, false),
              p2Argv(group[0].impl),
              P2_TIMEOUT_MS,
            ),
          ];
      group.forEach((row, i) => {
        addRound(row, results[i], rounds);
        if (interleaved) row.interleaved = true;
        if (row.status === 'ok') row.checkedAgainst = results[i].checkedAgainst;
        const ms = row.status === 'ok' ? `${median(results[i].timesMs).toFixed(1)} ms` : statusText(row);
        const mode = interleaved ? ', interleaved' : '';
        ctx.log(`  P2 ${row.implementation}${roundText(round, rounds, mode)}  ${ms}`);
      });
    }
  }
  finishP2Rows(rows);
  return rows;
}

/** The target a P2 row belongs to (its thread count), for the qkv rows and their onnxruntime-web peer. */
const p2Target = ({ impl }: P2Row) =>
  impl.kind === 'qkv' || impl.kind === 'ort-web' ? impl.threads : undefined;

const p2Argv = (impl: P2Impl) => (impl.kind === 'qkv' && impl.relaxed ? [RELAXED_SIMD_FLAG] : []);

function p2Job(ctx: TableContext, impl: P2Impl, serve: boolean): TableJob {
  return {
    table: 'p2',
    impl,
    maxRuns: ctx.quick ? 3 : P2_MAX_RUNS,
    budgetMs: ctx.quick ? 500 : P2_BUDGET_MS,
    peersDir: ctx.peersDir,
    serve,
  };
}

/**
 * One round of a target's rows, interleaved: each row in its own process, started one after another
 * (spawn.ts's serveGroup); once every one is checked and warm, the parent asks them for one run each in turn (spawn.ts's interleave),
 * up to P2_MAX_RUNS each, or until the slowest row's runs add up to P2_BUDGET_MS. So every run of a qkv row
 * has its peer's runs just before and after it, and a machine whose speed changes from one second to the
 * next (the project's VM does) moves both alike.
 */
async function p2Group(ctx: TableContext, group: P2Row[]): Promise<(TableResult & { timedOut?: boolean })[]> {
  const { children, ready } = await serveGroup(
    group.map(
      (row) => () =>
        serveChild<TableResult>(
          script(ctx),
          p2Job(ctx, row.impl, true),
          p2Argv(row.impl),
          P2_SERVED_TIMEOUT_MS,
        ),
    ),
  );
  const live = children.filter((_, i) => ready[i]);
  if (live.length > 0) {
    await interleave(live, {
      maxCycles: ctx.quick ? 3 : P2_MAX_RUNS,
      budgetMs: ctx.quick ? 500 : P2_BUDGET_MS,
      pauseMs: INTERLEAVE_PAUSE_MS,
    });
  }
  return Promise.all(children.map((child) => child.finish()));
}

/**
 * Adds one run of a row's child to the row: its times and this round's median, the largest peak RSS and
 * error so far; a run that did not pass (wrong, timeout, not installed) sets the row's status, so it
 * reports no speed whatever the other rounds gave.
 */
function addRound(
  row: {
    status: P2Row['status'];
    message?: string;
    timesMs: number[];
    roundsMs?: number[];
    peakRssMB?: number;
    maxAbsError?: number;
  },
  result: TableResult & { timedOut?: boolean },
  rounds: number,
): void {
  const status = statusOf(result);
  if (result.peakRssMB !== undefined) row.peakRssMB = Math.max(row.peakRssMB ?? 0, result.peakRssMB);
  if (result.maxAbsError !== undefined) {
    const prev = row.maxAbsError ?? 0;
    row.maxAbsError = Number.isNaN(result.maxAbsError) ? Number.NaN : Math.max(prev, result.maxAbsError);
  }
  if (status !== 'ok' || result.timesMs.length === 0) {
    row.status = status === 'ok' ? 'failed' : status;
    row.message = result.message ?? (status === 'ok' ? 'no timed runs' : undefined);
    return;
  }
  row.timesMs.push(...result.timesMs);
  if (rounds > 1) row.roundsMs = [...(row.roundsMs ?? []), median(result.timesMs)];
}

const roundText = (round: number, rounds: number, mode = '') =>
  rounds > 1 ? ` (round ${round + 1}/${rounds}${mode})` : mode ? ` (${mode.slice(2)})` : '';

/**
 * Runs the T1 rows (those `selected` keeps); `relaxedRows` adds qkv's FMA rows (Node 20). The speed rows
 * run in ctx.rounds rounds; tfjs-cpu (one step of about a minute) and the memory rows run once, after
 * the first round and after the last.
 */
export async function runT1(ctx: TableContext, relaxedRows: boolean): Promise<T1Row[]> {
  // The memory rows take 200 steps each (about 2 minutes): not with --quick.
  const impls = t1Impls(relaxedRows, !ctx.quick).filter((impl) => ctx.selected(`T1 ${t1Name(impl)}`));
  const rows: T1Row[] = impls.map((impl) => ({
    implementation: t1Name(impl),
    impl,
    status: 'ok',
    timesMs: [],
    losses: [],
    warmup: 0,
    rssMB: [],
  }));
  const once = (impl: T1Impl) => impl.kind === 'tfjs-cpu' || (impl.kind === 'qkv' && impl.long === true);
  const rounds = ctx.quick ? 1 : ctx.rounds;
  for (let round = 0; round < rounds; round++) {
    const speedRows = roundOrder(
      rows.filter((r) => !once(r.impl) && r.status === 'ok'),
      t1Rank,
      round,
    );
    // Every speed row is compared with tfjs-wasm: they run interleaved, a step each in turn.
    if (speedRows.length > 1) await runT1Group(ctx, speedRows, round, rounds);
    else for (const row of speedRows) await runT1Row(ctx, row, round, rounds);
    if (round === 0) {
      for (const row of rows.filter((r) => r.impl.kind === 'tfjs-cpu')) await runT1Row(ctx, row, 0, 1);
    }
  }
  for (const row of rows.filter((r) => once(r.impl) && r.impl.kind !== 'tfjs-cpu')) {
    await runT1Row(ctx, row, 0, 1);
  }
  finishT1Rows(rows);
  return rows;
}

/**
 * One round of the T1 speed rows, interleaved as p2Group's: each row's process warms up, then the parent
 * asks them for one timed step each in turn, up to maxSteps each or until the slowest row's steps add
 * up to its budget (at least minSteps: the loss check needs them).
 */
async function runT1Group(ctx: TableContext, group: T1Row[], round: number, rounds: number): Promise<void> {
  const jobs = group.map((row) => ({ ...t1Job(ctx, row.impl), serve: true }) as TableJob);
  if (round === 0) for (const row of group) row.loadAverage1m = loadavg()[0];
  const { children, ready } = await serveGroup(
    group.map(
      (row, i) => () => serveChild<TableResult>(script(ctx), jobs[i], t1Argv(row.impl), T1_SERVED_TIMEOUT_MS),
    ),
  );
  const served = children.filter((_, i) => ready[i]);
  const { minSteps, maxSteps, budgetMs } = jobs[0] as Extract<TableJob, { table: 't1' }>;
  if (served.length > 0) {
    await interleave(served, {
      minCycles: minSteps,
      maxCycles: maxSteps,
      budgetMs,
      pauseMs: INTERLEAVE_PAUSE_MS,
    });
  }
  const results = await Promise.all(children.map((child) => child.finish()));
  group.forEach((row, i) => {
    addT1Round(ctx, row, results[i], round, rounds, ', interleaved');
  });
}

function t1Job(ctx: TableContext, impl: T1Impl): TableJob {
  const long = impl.kind === 'qkv' && impl.long === true;
  return long
    ? {
        table: 't1',
        impl,
        warmup: T1_LONG_WARMUP,
        minSteps: T1_LONG_STEPS,
        maxSteps: T1_LONG_STEPS,
        budgetMs: Number.MAX_SAFE_INTEGER,
        heapEvery: T1_HEAP_EVERY,
      }
    : {
        table: 't1',
        impl,
        warmup: ctx.quick ? 1 : 2,
        minSteps: ctx.quick ? 2 : 3,
        maxSteps: ctx.quick ? 2 : 12,
        budgetMs: ctx.quick ? 1000 : 20_000,
      };
}

function t1Argv(impl: T1Impl): string[] {
  const long = impl.kind === 'qkv' && impl.long === true;
  return [
    ...(impl.kind === 'qkv' && impl.relaxed ? [RELAXED_SIMD_FLAG] : []),
    ...(long ? ['--expose-gc'] : []),
  ];
}

/** One run of a T1 row's child (round `round` of `rounds`), added to the row. */
async function runT1Row(ctx: TableContext, row: T1Row, round: number, rounds: number): Promise<void> {
  if (row.status !== 'ok') return; // failed in an earlier round: not run again
  const { impl } = row;
  if (round === 0) row.loadAverage1m = loadavg()[0];
  const long = impl.kind === 'qkv' && impl.long === true;
  const timeout = long ? T1_LONG_TIMEOUT_MS : T1_TIMEOUT_MS;
  const result = await runChild<TableResult>(script(ctx), t1Job(ctx, impl), t1Argv(impl), timeout);
  addT1Round(ctx, row, result, round, rounds);
}

/** A T1 row's round, added to the row: the first round's losses and RSS trace stand for the row. */
function addT1Round(
  ctx: TableContext,
  row: T1Row,
  result: TableResult & { timedOut?: boolean },
  round: number,
  rounds: number,
  mode = '',
): void {
  if (mode) row.interleaved = true;
  if (round === 0) {
    // The first round's losses and RSS trace stand for the row (every round trains the same steps).
    Object.assign(row, {
      losses: result.losses ?? [],
      warmup: result.warmup ?? 0,
      rssMB: result.rssMB ?? [],
      ...(result.heapMB === undefined ? {} : { heapMB: result.heapMB }),
    });
  }
  addRound(row, result, rounds);
  const speed =
    row.status === 'ok'
      ? `${((T1_TOKENS / median(result.timesMs)) * 1000).toFixed(0)} tokens/s`
      : statusText(row);
  ctx.log(`  T1 ${row.implementation}${roundText(round, rounds, mode)}  ${speed}`);
}

/** G1's runs per row: one check run, then warm-up and timed runs (fewer with --quick). */
function g1Job(impl: G1Impl, quick: boolean): G1Job {
  switch (impl.kind) {
    case 'generate':
      return impl.useCache
        ? { table: 'g1', impl, warmup: 1, maxRuns: quick ? 3 : 10, budgetMs: quick ? 3000 : 10_000 }
        : { table: 'g1', impl, warmup: 0, maxRuns: quick ? 1 : 3, budgetMs: quick ? 0 : 30_000 };
    case 'position':
      return { table: 'g1', impl, warmup: 0, maxRuns: quick ? 1 : 3, budgetMs: quick ? 0 : 20_000 };
    case 'decode':
      return { table: 'g1', impl, warmup: 10, maxRuns: quick ? 30 : 300, budgetMs: quick ? 300 : 3000 };
    case 'paged':
      return { table: 'g1', impl, warmup: 0, maxRuns: 1, budgetMs: 0 };
    case 'committed':
      return { table: 'g1', impl, warmup: 1, maxRuns: quick ? 3 : 10, budgetMs: quick ? 3000 : 10_000 };
  }
}

/** Runs the G1 rows (those `selected` keeps). */
export async function runG1(ctx: TableContext): Promise<G1Row[]> {
  const rows: G1Row[] = [];
  const impls = G1_IMPLS.filter((impl) => ctx.selected(`G1 ${g1Name(impl)}`));
  for (const impl of impls) {
    const row: G1Row = { implementation: g1Name(impl), impl, status: 'ok', timesMs: [], values: {} };
    row.loadAverage1m = loadavg()[0];
    const result = await runChild<TableResult>(script(ctx), g1Job(impl, ctx.quick), [], G1_TIMEOUT_MS);
    Object.assign(row, {
      status: statusOf(result),
      message: result.message,
      timesMs: result.timesMs,
      peakRssMB: result.peakRssMB,
      maxAbsError: result.maxAbsError,
      checkedAgainst: result.checkedAgainst,
      values: result.values ?? {},
    });
    finishG1Rows([row]);
    ctx.log(`  G1 ${row.implementation}  ${g1Summary(row)}`);
    rows.push(row);
  }
  finishG1Rows(rows);
  return rows;
}

/** F1's job per row: its shape and runs (F1_RUNS; smaller with --quick). */
function f1Job(impl: F1Impl, quick: boolean): F1Job {
  const size = quick ? 'quick' : 'full';
  return { table: 'f1', impl, shape: F1_SHAPES[size][f1Group(impl)], ...F1_RUNS[size] };
}

/** Runs the F1 rows (those `selected` keeps). */
export async function runF1(ctx: TableContext): Promise<F1Row[]> {
  const rows: F1Row[] = [];
  const impls = F1_IMPLS.filter((impl) => ctx.selected(`F1 ${f1Name(impl)}`));
  for (const impl of impls) {
    const job = f1Job(impl, ctx.quick);
    const row: F1Row = {
      implementation: f1Name(impl),
      impl,
      shape: job.shape,
      status: 'ok',
      timesMs: [],
      values: {},
    };
    row.loadAverage1m = loadavg()[0];
    const result = await runChild<TableResult>(script(ctx), job, [], F1_TIMEOUT_MS);
    Object.assign(row, {
      status: statusOf(result),
      message: result.message,
      timesMs: result.timesMs,
      peakRssMB: result.peakRssMB,
      maxAbsError: result.maxAbsError,
      checkedAgainst: result.checkedAgainst,
      values: result.f1Values ?? {},
    });
    finishF1Rows([row]);
    ctx.log(`  F1 ${row.implementation} ${shapeLabel(row.shape)}  ${f1Summary(row)}`);
    rows.push(row);
  }
  finishF1Rows(rows);
  return rows;
}
