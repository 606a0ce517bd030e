// Runs one bench row in a child process (child.js for the attention grid, table-child.js for P2 and T1)
// and collects its report: the peak RSS it sends every half second, then its result.
// One decision to know: a child that dies or overruns its time limit still yields a row (status 'failed'
// or 'timeout' via `timedOut`, with the first error line of its stderr), so one broken row never stops a run.

import { fork } from 'node:child_process';
import type { ChildResult } from './child.js';

/** What a child sends: its peak RSS so far (every half second), then its result (once). */
export type Report<R> = { type: 'rss'; peakRssMB: number } | { type: 'result'; result: R };

/** Forks `script` with the job as JSON in argv; kills it after `timeoutMs`. */
export function runChild<R extends Pick<ChildResult, 'peakRssMB'>>(
  script: string,
  job: unknown,
  execArgv: string[],
  timeoutMs: number,
): Promise<R & { timedOut?: boolean }> {
  return new Promise((resolve) => {
    const child = fork(script, [JSON.stringify(job)], {
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      execArgv,
    });
    let peakRssMB = 0;
    let result: R | undefined;
    let stderr = '';
    let timedOut = false;
    child.stderr?.on('data', (chunk: Buffer) => {
      if (stderr.length < 8000) stderr += chunk.toString(); // the error comes first, its stack after
    });
    child.on('message', (m: Report<R>) => {
      if (m.type === 'rss') peakRssMB = Math.max(peakRssMB, m.peakRssMB);
      else result = m.result;
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (result) return resolve(result);
      const lines = stderr.split('\n').filter((l) => l.trim() !== '');
      const reason = lines.find((l) => /\b[A-Za-z]*Error\b/.test(l)) ?? lines.at(-1) ?? '';
      const message = timedOut
        ? `no result after ${Math.round(timeoutMs / 1000)} s`
        : `exit ${code ?? signal}: ${reason}`;
      resolve({ status: 'failed', message, timesMs: [], peakRssMB, timedOut } as unknown as R & {
        timedOut?: boolean;
      });
    });
  });
}
