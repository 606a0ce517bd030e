// One bench row in its own process: build the inputs, prepare the implementation, run it once and check
// the result, then time it. Reports to the parent over IPC (its peak RSS every half second, then the result).
// A served row (job.serve) times a run only when the parent asks (spawn.ts's serveRuns).
// One decision to know: a result that fails the check is never timed.

import { readFileSync } from 'node:fs';
import {
  allRows,
  compare,
  type Expected,
  float64Rows,
  makeInputs,
  PEER_TOLERANCE,
  QKV_TOLERANCE,
} from './check.js';
import type { Job } from './jobs.js';
import { ORT_NODE_INSTALL } from './peers/ort-install.js';
import { serveRuns } from './spawn.js';

export type ChildStatus = 'ok' | 'wrong' | 'unavailable' | 'failed' | 'not installed';

export interface ChildResult {
  status: ChildStatus;
  message?: string;
  /** Timed runs, in order; empty unless status is 'ok'. */
  timesMs: number[];
  maxAbsError?: number;
  checkedAgainst?: string;
  peakRssMB: number;
}

export type ChildMessage = { type: 'rss'; peakRssMB: number } | { type: 'result'; result: ChildResult };

const peakRssMB = (): number => process.resourceUsage().maxRSS / 1024; // maxRSS is in KiB

function send(message: ChildMessage, then?: () => void): void {
  if (process.send) process.send(message, undefined, undefined, () => then?.());
  else {
    console.log(JSON.stringify(message));
    then?.();
  }
}

type Inputs = ReturnType<typeof makeInputs>;

/** Imports only the implementation this row measures, so no other library's memory shows in its RSS. */
async function prepare(job: Job, { q, k, v }: Inputs): Promise<() => Promise<Float32Array>> {
  const c = job.config;
  const impl = job.impl;
  switch (impl.kind) {
    case 'qkv':
    case 'qkv-default':
      return (await import('./qkv.js')).prepareQkv(impl, c, q, k, v);
    case 'article':
      return (await import('./peers/article.js')).prepareArticle(c, q.data, k.data, v.data);
    case 'tfjs-wasm':
      return (await import('./peers/tfjs.js')).prepareTfjs(c, q.data, k.data, v.data);
    case 'ort-web':
    case 'ort-node': {
      const which = impl.kind === 'ort-web' ? 'web' : 'node';
      const { prepareOrt } = await import('./peers/ort.js');
      return prepareOrt(which, impl.threads, job.peersDir, c, q.data, k.data, v.data);
    }
  }
}

function expectedFor(job: Job, { q, k, v }: Inputs): Expected {
  const c = job.config;
  if (job.expectedFile) {
    const bytes = readFileSync(job.expectedFile);
    const out = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
    return allRows(c, out, 'qkv reference kernel, every element');
  }
  return float64Rows(c, q.data, k.data, v.data);
}

async function timed(run: () => Promise<Float32Array>): Promise<{ ms: number; out: Float32Array }> {
  const t0 = performance.now();
  const out = await run();
  return { ms: performance.now() - t0, out };
}

async function measure(job: Job): Promise<ChildResult> {
  const isQkv = job.impl.kind === 'qkv' || job.impl.kind === 'qkv-default';
  let run: () => Promise<Float32Array>;
  let first: { ms: number; out: Float32Array };
  const inputs = makeInputs(job.config);
  try {
    run = await prepare(job, inputs);
    first = await timed(run);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    if (message.startsWith('not installed')) {
      return { status: 'not installed', message: ORT_NODE_INSTALL, timesMs: [], peakRssMB: peakRssMB() };
    }
    return { status: isQkv ? 'unavailable' : 'failed', message, timesMs: [], peakRssMB: peakRssMB() };
  }

  const expected = expectedFor(job, inputs);
  const check = compare(first.out, expected, job.config.E, isQkv ? QKV_TOLERANCE : PEER_TOLERANCE);
  const base = { maxAbsError: check.maxAbsError, checkedAgainst: expected.source };
  if (!check.ok) {
    const message = `max abs error ${check.maxAbsError.toExponential(2)} is over tolerance`;
    return { status: 'wrong', message, timesMs: [], peakRssMB: peakRssMB(), ...base };
  }
  if (job.singleRun) return { status: 'ok', timesMs: [first.ms], peakRssMB: peakRssMB(), ...base };

  if (first.ms < 1000) await run(); // one more warm-up for fast rows (JIT tiers, pool start-up)
  if (job.serve) return { status: 'ok', timesMs: await serveRuns(run), peakRssMB: peakRssMB(), ...base };
  const timesMs: number[] = [];
  let spent = 0;
  while (timesMs.length < job.maxRuns && (timesMs.length === 0 || spent < job.budgetMs)) {
    const { ms } = await timed(run);
    timesMs.push(ms);
    spent += ms;
  }
  return { status: 'ok', timesMs, peakRssMB: peakRssMB(), ...base };
}

const job = JSON.parse(process.argv[2] ?? '{}') as Job;
setInterval(() => send({ type: 'rss', peakRssMB: peakRssMB() }), 500).unref();
measure(job).then(
  (result) => send({ type: 'result', result }, () => process.exit(0)),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
