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
 * one at a time; kills it after `timeoutMs` in all.
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
  child.on('message', (m: Report<R>) => {
    if (m.type === 'rss') peakRssMB = Math.max(peakRssMB, m.peakRssMB);
    else if (m.type === 'ready') markReady(true);
    else if (m.type === 'time') {
      const answer = pending;
      pending = undefined;
      answer?.(m.ms);
    } else result = m.result;
  });
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill('SIGKILL');
  }, timeoutMs);
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

/** Between two interleaved runs: the threads of a row that spin after its run (onnxruntime's do) go quiet. */
export const INTERLEAVE_PAUSE_MS = 25;

/**
 * Times served children in turn, one run each per cycle, every other cycle in reverse order, pausing
 * `pauseMs` before each run (a row's threads that spin after its run have gone quiet before the next row
 * starts). Stops after `maxCycles` cycles, or once some row's runs add up to `budgetMs` (at least one
 * cycle), or when a child ends. The runs' times reach each child's result.
 */
export async function interleave(
  children: ServedChild<unknown>[],
  maxCycles: number,
  budgetMs: number,
  pauseMs: number,
): Promise<void> {
  const spent = children.map(() => 0);
  for (let cycle = 0; cycle < maxCycles; cycle++) {
    const order = children.map((_, i) => i);
    if (cycle % 2) order.reverse();
    for (const i of order) {
      await new Promise((resolve) => setTimeout(resolve, pauseMs));
      const ms = await children[i].run();
      if (ms === undefined) return;
      spent[i] += ms;
    }
    if (Math.max(...spent) >= budgetMs) return;
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
