// One P2, T1, G1 or F1 row in its own process. P2: load the exported layer, prepare the implementation,
// run it once and check the output, then time it. T1: run warm-up steps, then timed training steps,
// recording each step's loss and the process RSS after it, then check the losses. G1: g1-rows.ts, F1:
// f1-rows.ts (check, then time). Reports to the parent over IPC as child.ts does (peak RSS every half
// second, then the result). A served P2 or T1 row (job.serve) times a run or step only when the parent
// asks (spawn.ts's serveRuns), so the parent can interleave the rows a target compares.
// One decision to know: a P2 output that fails the check is never timed, and a T1 row whose losses fail
// the check reports no times, so a wrong implementation never shows a speed.

import type { ChildResult } from './child.js';
import type { F1Values } from './f1.js';
import type { F1Job } from './f1-rows.js';
import type { G1Values } from './g1.js';
import type { G1Job } from './g1-rows.js';
import type { P2Impl } from './p2.js';
import { ORT_NODE_INSTALL } from './peers/ort-install.js';
import { type Report, serveRuns } from './spawn.js';
import type { T1Impl, TrainStep } from './t1.js';

export type TableJob =
  | {
      table: 'p2';
      impl: P2Impl;
      /** Timed runs stop after maxRuns, or once budgetMs of timed runs has passed (at least one). */
      maxRuns: number;
      budgetMs: number;
      /** Directory holding node_modules/onnxruntime-node, for the ort-node rows. */
      peersDir: string;
      /**
       * Served (spawn.ts's serveChild): once checked and warm, time one run per request of the parent,
       * which interleaves the rows a target compares; maxRuns and budgetMs are then the parent's.
       */
      serve?: boolean;
    }
  | {
      table: 't1';
      impl: T1Impl;
      /** Warm-up steps (one fewer when the first step takes over SLOW_STEP_MS). */
      warmup: number;
      /** Timed steps: at least minSteps, then until maxSteps or budgetMs of timed steps. */
      minSteps: number;
      maxSteps: number;
      budgetMs: number;
      /** Memory rows: weigh the heap and buffers after a full GC every this many timed steps (needs --expose-gc). */
      heapEvery?: number;
      /** Served, as P2's: the parent asks for each timed step (not with heapEvery). */
      serve?: boolean;
    }
  | G1Job
  | F1Job;

export interface TableResult extends Omit<ChildResult, 'status'> {
  /** 'skipped': a T1 row whose first step alone shows it cannot finish in about a minute. */
  status: ChildResult['status'] | 'skipped';
  /** T1: every step's loss, warm-up first. */
  losses?: number[];
  /** T1: the warm-up steps taken. */
  warmup?: number;
  /** T1: process RSS after each step (MB), warm-up first. */
  rssMB?: number[];
  /** T1 memory rows: [timed step, heapUsed + external MB, RSS MB], both after a full GC. */
  heapMB?: [number, number, number][];
  /** G1: the row's figures besides its times. */
  values?: G1Values;
  /** F1: the row's figures besides its times. */
  f1Values?: F1Values;
}

/** A T1 step slower than this gets one warm-up step fewer (keeps the slowest row near a minute). */
const SLOW_STEP_MS = 5000;
/**
 * A T1 row whose first step takes longer than this stops there: warm-up plus the 3 steps a checked row
 * needs would take it past a minute. It reports that step's time, unchecked, in its message.
 */
const SKIP_STEP_MS = 15_000;

const peakRssMB = (): number => process.resourceUsage().maxRSS / 1024; // maxRSS is in KiB
const rssMB = (): number => process.memoryUsage().rss / 2 ** 20;

function send(message: Report<TableResult>, then?: () => void): void {
  if (process.send) process.send(message, undefined, undefined, () => then?.());
  else {
    console.log(JSON.stringify(message));
    then?.();
  }
}

function failure(error: unknown, isQkv: boolean): TableResult {
  const message = error instanceof Error ? error.message : String(error);
  if (message.startsWith('not installed')) {
    return { status: 'not installed', message: ORT_NODE_INSTALL, timesMs: [], peakRssMB: peakRssMB() };
  }
  return { status: isQkv ? 'unavailable' : 'failed', message, timesMs: [], peakRssMB: peakRssMB() };
}

async function measureP2(job: Extract<TableJob, { table: 'p2' }>): Promise<TableResult> {
  const { impl } = job;
  const { loadMhaFixture, checkMha } = await import('./p2.js');
  const fixture = loadMhaFixture();
  let run: () => Promise<Float32Array>;
  let first: Float32Array;
  let firstMs: number;
  try {
    if (impl.kind === 'qkv') run = await (await import('./qkv-models.js')).prepareQkvMha(impl, fixture);
    else if (impl.kind === 'tfjs-wasm')
      run = await (await import('./peers/tfjs-mha.js')).prepareTfjsMha(fixture);
    else {
      const { prepareOrtMha } = await import('./peers/ort.js');
      run = await prepareOrtMha(
        impl.kind === 'ort-web' ? 'web' : 'node',
        impl.threads,
        job.peersDir,
        fixture,
      );
    }
    const t0 = performance.now();
    first = await run();
    firstMs = performance.now() - t0;
  } catch (error) {
    return failure(error, impl.kind === 'qkv');
  }
  const check = checkMha(first, fixture);
  const base = { maxAbsError: check.maxAbsError, checkedAgainst: fixture.source };
  if (!check.ok) {
    const message = `max abs error ${check.maxAbsError.toExponential(2)} is over tolerance`;
    return { status: 'wrong', message, timesMs: [], peakRssMB: peakRssMB(), ...base };
  }
  if (firstMs < 1000) await run(); // one more warm-up for fast rows (JIT tiers, pool start-up)
  if (job.serve) return { status: 'ok', timesMs: await serveRuns(run), peakRssMB: peakRssMB(), ...base };
  const timesMs: number[] = [];
  let spent = 0;
  while (timesMs.length < job.maxRuns && (timesMs.length === 0 || spent < job.budgetMs)) {
    const t0 = performance.now();
    await run();
    const ms = performance.now() - t0;
    timesMs.push(ms);
    spent += ms;
  }
  return { status: 'ok', timesMs, peakRssMB: peakRssMB(), ...base };
}

async function measureT1(job: Extract<TableJob, { table: 't1' }>): Promise<TableResult> {
  const { impl } = job;
  const { checkLosses, T1_TOKENS } = await import('./t1.js');
  let step: TrainStep;
  const losses: number[] = [];
  const rss: number[] = [];
  const stepMs: number[] = [];
  const timedStep = async () => {
    const t0 = performance.now();
    losses.push(await step());
    stepMs.push(performance.now() - t0);
    rss.push(rssMB());
  };
  let warmup = job.warmup;
  try {
    if (impl.kind === 'qkv') step = await (await import('./qkv-models.js')).prepareQkvTrain(impl);
    else {
      const { prepareTfjsTrain } = await import('./peers/tfjs-train.js');
      step = await prepareTfjsTrain(impl.kind === 'tfjs-wasm' ? 'wasm' : 'cpu');
    }
    await timedStep();
    if (stepMs[0] > SLOW_STEP_MS && warmup > 1) warmup--;
  } catch (error) {
    return failure(error, impl.kind === 'qkv');
  }
  if (stepMs[0] > SKIP_STEP_MS) {
    const s = stepMs[0] / 1000;
    const message =
      `one step took ${s.toFixed(0)} s (≈ ${(T1_TOKENS / s).toFixed(0)} tokens/s, unchecked); ` +
      `warm-up + ${job.minSteps} checked steps would take ${Math.round(s * (1 + job.minSteps))} s`;
    return { status: 'skipped', message, timesMs: [], losses, warmup: 1, rssMB: rss, peakRssMB: peakRssMB() };
  }
  while (stepMs.length < warmup) await timedStep();
  const { heapEvery } = job;
  const gc = (globalThis as { gc?: () => void }).gc;
  if (heapEvery !== undefined && gc === undefined)
    return failure(new Error('a memory row needs node --expose-gc'), impl.kind === 'qkv');
  const heap: [number, number, number][] = [];
  let spent = 0;
  if (job.serve) await serveRuns(timedStep); // the parent asks for each timed step (stepMs records them)
  while (
    !job.serve &&
    (stepMs.length - warmup < job.minSteps || (stepMs.length - warmup < job.maxSteps && spent < job.budgetMs))
  ) {
    await timedStep();
    spent += stepMs[stepMs.length - 1];
    // Outside the step's time: after the first timed step, every heapEvery-th, and the last.
    const n = stepMs.length - warmup;
    if (gc && heapEvery !== undefined && (n === 1 || n % heapEvery === 0 || n === job.maxSteps)) {
      gc();
      const m = process.memoryUsage();
      heap.push([n, (m.heapUsed + m.external) / 2 ** 20, m.rss / 2 ** 20]);
    }
  }
  const timesMs = stepMs.slice(warmup);
  const check = checkLosses(losses, warmup);
  const base = {
    losses,
    warmup,
    rssMB: rss,
    peakRssMB: peakRssMB(),
    ...(heapEvery === undefined ? {} : { heapMB: heap }),
  };
  if (!check.ok) return { status: 'wrong', message: check.message, timesMs: [], ...base };
  return { status: 'ok', timesMs, ...base };
}

async function measureG1(job: G1Job): Promise<TableResult> {
  const outcome = await (await import('./g1-rows.js')).measureG1(job);
  return { ...outcome, peakRssMB: peakRssMB() };
}

async function measureF1(job: F1Job): Promise<TableResult> {
  const { values, ...outcome } = await (await import('./f1-rows.js')).measureF1(job);
  return { ...outcome, f1Values: values, peakRssMB: peakRssMB() };
}

const job = JSON.parse(process.argv[2] ?? '{}') as TableJob;
setInterval(() => send({ type: 'rss', peakRssMB: peakRssMB() }), 500).unref();
const measured =
  job.table === 'p2'
    ? measureP2(job)
    : job.table === 't1'
      ? measureT1(job)
      : job.table === 'g1'
        ? measureG1(job)
        : measureF1(job);
measured.then(
  (result) => send({ type: 'result', result }, () => process.exit(0)),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
