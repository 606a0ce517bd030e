// Runs one bench row in a child process (child.js for the attention grid, table-child.js for P2 and T1)
// and collects its report: the peak RSS it sends every half second, then its result. A served child
// (`serveChild`) instead waits, once its row is prepared and checked, for the parent to ask for each
// timed run, so that `interleave` can time the rows a target compares in turn, one run each.
// One decision to know: a child that dies or overruns its time limit still yields a row (status 'failed'
// or 'timeout' via `timedOut`, with the first error line of its stderr), so one broken row never stops a run.

import { fork } from 'node:child_process';
import type { ChildResult } from './child.js';

/**
 * What a child sends: its peak RSS so far (every half second), then its result (once); a served child
 * also sends 'ready' when it waits for run requests, and each requested run's time.
 */
export type Report<R> =
  | { type: 'rss'; peakRssMB: number }
  | { type: 'result'; result: R }
  | { type: 'ready' }
  | { type: 'time'; ms: number };

/** What the parent sends a served child: time one run, or stop and send the result. */
export type ServeRequest = { type: 'run' } | { type: 'stop' };

type Outcome<R> = R & { timedOut?: boolean };

/** A row's child started by serveChild. */
export interface ServedChild<R> {
  /** Resolves to true once the child waits for run requests; false if it ended first (`finish` says why). */
  ready: Promise<boolean>;
  /** One timed run in the child: its ms, or undefined if the child has ended. */
  run(): Promise<number | undefined>;
  /** Stops the child (when still waiting for requests) and resolves to its result. */
  finish(): Promise<Outcome<R>>;
}

/** Forks `script` with the job as JSON in argv; kills it after `timeoutMs`. */
export function runChild<R extends Pick<ChildResult, 'peakRssMB'>>(
  script: string,
  job: unknown,
  execArgv: string[],
  timeoutMs: number,
): Promise<Outcome<R>> {
  return startChild<R>(script, job, execArgv, timeoutMs).finish();
}

/**
 * Forks `script` with the job (which asks it to serve: `serve: true`) and lets the parent time its runs
 * one at a time; kills it when it is not ready within `timeoutMs`, or once ready when `timeoutMs` pass
 * without a reply.
 */
export function serveChild<R extends Pick<ChildResult, 'peakRssMB'>>(
  script: string,
  job: unknown,
  execArgv: string[],
  timeoutMs: number,
): ServedChild<R> {
  return startChild<R>(script, job, execArgv, timeoutMs);
}

function startChild<R extends Pick<ChildResult, 'peakRssMB'>>(
  script: string,
  job: unknown,
  execArgv: string[],
  timeoutMs: number,
): ServedChild<R> {
  const child = fork(script, [JSON.stringify(job)], {
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    execArgv,
  });
  let peakRssMB = 0;
  let result: R | undefined;
  let stderr = '';
  let timedOut = false;
  let exited = false;
  let markReady: (ready: boolean) => void = () => {};
  const ready = new Promise<boolean>((resolve) => {
    markReady = resolve;
  });
  let pending: ((ms: number | undefined) => void) | undefined;
  child.stderr?.on('data', (chunk: Buffer) => {
    if (stderr.length < 8000) stderr += chunk.toString(); // the error comes first, its stack after
  });
  // The time limit runs from the start to the result, or, for a served child, to 'ready' and then from
  // each reply to the next: a row whose siblings are slow to load or run does not run out of time.
  let timer: NodeJS.Timeout | undefined;
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
  };
  arm();
  child.on('message', (m: Report<R>) => {
    if (m.type === 'rss') peakRssMB = Math.max(peakRssMB, m.peakRssMB);
    else if (m.type === 'ready') {
      arm();
      markReady(true);
    } else if (m.type === 'time') {
      arm();
      const answer = pending;
      pending = undefined;
      answer?.(m.ms);
    } else result = m.result;
  });
  const ended = new Promise<Outcome<R>>((resolve) => {
    child.on('exit', (code, signal) => {
      exited = true;
      clearTimeout(timer);
      markReady(false);
      pending?.(undefined);
      pending = undefined;
      if (result) return resolve(result);
      const lines = stderr.split('\n').filter((l) => l.trim() !== '');
      const reason = lines.find((l) => /\b[A-Za-z]*Error\b/.test(l)) ?? lines.at(-1) ?? '';
      const message = timedOut
        ? `no result after ${Math.round(timeoutMs / 1000)} s`
        : `exit ${code ?? signal}: ${reason}`;
      resolve({ status: 'failed', message, timesMs: [], peakRssMB, timedOut } as unknown as Outcome<R>);
    });
  });
  const send = (request: ServeRequest) => {
    if (!exited && child.connected) child.send(request);
  };
  return {
    ready,
    run: () =>
      new Promise<number | undefined>((resolve) => {
        if (exited || pending) return resolve(undefined); // one request at a time
        pending = resolve;
        send({ type: 'run' });
      }),
    finish: () => {
      send({ type: 'stop' });
      return ended;
    },
  };
}

/**
 * Between two interleaved runs, so the threads of a row that spin after its run have gone quiet before the
 * next row starts: onnxruntime-web's 2-thread P2 process, measured here with process.cpuUsage() after
 * each run, keeps about one core busy for 50 ms (11.5, 15.2 and 19.6 ms of CPU in the windows 0–10, 10–25
 * and 25–50 ms after a run, 4.5 in 50–100, 0.5 in 100–200); qkv's workers sleep in Atomics.wait.
 */
export const INTERLEAVE_PAUSE_MS = 150;

/** How long `interleave` goes on. */
export interface InterleaveLimits {
  /** Cycles at most. */
  maxCycles: number;
  /** Stop once some row's runs add up to this many ms, after at least minCycles cycles. */
  budgetMs: number;
  /** Cycles at least (default 1), budget or not. */
  minCycles?: number;
  /** Before each run (see INTERLEAVE_PAUSE_MS). */
  pauseMs: number;
}

/**
 * Starts a group's served children one at a time, each once the one before is ready (or has ended), so
 * their loading, checks and warm-up runs (whose first times decide how many warm-ups follow) do not
 * compete for the cores. Resolves to the children and whether each is ready.
 */
export async function serveGroup<R extends Pick<ChildResult, 'peakRssMB'>>(
  starts: (() => ServedChild<R>)[],
): Promise<{ children: ServedChild<R>[]; ready: boolean[] }> {
  const children: ServedChild<R>[] = [];
  const ready: boolean[] = [];
  for (const start of starts) {
    const child = start();
    children.push(child);
    ready.push(await child.ready);
  }
  return { children, ready };
}

/**
 * Times served children in turn, one run each per cycle, every other cycle in reverse order, pausing
 * before each run; stops at the limits. A child that ends leaves the turns; the others go on.
 * The runs' times reach each child's result.
 */
export async function interleave(children: ServedChild<unknown>[], limits: InterleaveLimits): Promise<void> {
  const { maxCycles, budgetMs, minCycles = 1, pauseMs } = limits;
  const spent = children.map(() => 0);
  const live = children.map(() => true);
  for (let cycle = 0; cycle < maxCycles && live.some(Boolean); cycle++) {
    const order = children.map((_, i) => i);
    if (cycle % 2) order.reverse();
    for (const i of order) {
      if (!live[i]) continue;
      await new Promise((resolve) => setTimeout(resolve, pauseMs));
      const ms = await children[i].run();
      if (ms === undefined) live[i] = false;
      else spent[i] += ms;
    }
    if (cycle + 1 >= minCycles && Math.max(...spent) >= budgetMs) return;
  }
}

/** What serveRuns talks to: the child's IPC channel (process), or a test's stand-in. */
export interface ServeChannel {
  send?(message: Report<never>): unknown;
  on(event: 'message', listener: (m: ServeRequest) => void): unknown;
  on(event: 'disconnect', listener: () => void): unknown;
  off(event: 'message', listener: (m: ServeRequest) => void): unknown;
  off(event: 'disconnect', listener: () => void): unknown;
}

/**
 * In a served child, once its row is checked and warm: sends 'ready', then answers each 'run' request
 * with one timed call of `run`, and resolves to the times when the parent sends 'stop' or goes away.
 */
export function serveRuns(
  run: () => Promise<unknown>,
  channel: ServeChannel = process as unknown as ServeChannel,
): Promise<number[]> {
  return new Promise((resolve, reject) => {
    const times: number[] = [];
    const done = () => {
      channel.off('message', onMessage);
      channel.off('disconnect', done);
      resolve(times);
    };
    const onMessage = (m: ServeRequest) => {
      if (m.type === 'stop') return done();
      const t0 = performance.now();
      run().then(() => {
        const ms = performance.now() - t0;
        times.push(ms);
        channel.send?.({ type: 'time', ms });
      }, reject);
    };
    channel.on('message', onMessage);
    channel.on('disconnect', done);
    channel.send?.({ type: 'ready' });
  });
}
