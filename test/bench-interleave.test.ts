// The bench's interleaved timing (bench/spawn.ts): the parent side of the serve protocol against a child
// that speaks it (test/fixtures/served-child.mjs), the child side (serveRuns) in this process, and the
// order and stopping rule of `interleave`. The timings themselves are fake: nothing here asserts time.
import { EventEmitter } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, expect, it, vi } from 'vitest';
import {
  type InterleaveLimits,
  interleave,
  type ServedChild,
  serveChild,
  serveGroup,
  serveRuns,
} from '../bench/spawn.js';

const CHILD = fileURLToPath(new URL('./fixtures/served-child.mjs', import.meta.url));

interface Fake extends ServedChild<unknown> {
  name: string;
}

/** A fake served child: each run takes `ms` (reported, not waited), and it ends after `lives` runs. */
function fake(name: string, ms: number, log: string[], lives = Infinity): Fake {
  let runs = 0;
  return {
    name,
    ready: Promise.resolve(true),
    run: async () => {
      if (runs >= lives) return undefined;
      runs++;
      log.push(name);
      return ms;
    },
    finish: async () => ({}),
  };
}

/** The order interleave runs fakes in: [name, ms per run, runs before it ends] each. */
async function turns(fakes: [string, number, number?][], limits: InterleaveLimits): Promise<string> {
  const log: string[] = [];
  await interleave(
    fakes.map(([name, ms, lives]) => fake(name, ms, log, lives)),
    limits,
  );
  return log.join('');
}

describe('interleave', () => {
  const unbounded = { budgetMs: 1e9, pauseMs: 0 };

  it('runs one call of each child per cycle, every other cycle in reverse order', async () => {
    expect(
      await turns(
        [
          ['a', 1],
          ['b', 1],
          ['c', 1],
        ],
        { maxCycles: 3, ...unbounded },
      ),
    ).toBe('abccbaabc');
  });

  it('stops once the slowest child has spent the budget, after a whole cycle', async () => {
    // o reaches 120 ms ≥ 100 in its fourth run; the cycle it ends is whole
    expect(
      await turns(
        [
          ['q', 10],
          ['o', 30],
        ],
        { maxCycles: 100, budgetMs: 100, pauseMs: 0 },
      ),
    ).toBe('qooqqooq');
  });

  it('runs minCycles cycles whatever the budget', async () => {
    const limits = { minCycles: 3, maxCycles: 12, budgetMs: 1, pauseMs: 0 };
    expect(
      await turns(
        [
          ['q', 10],
          ['o', 30],
        ],
        limits,
      ),
    ).toBe('qooqqo');
  });

  it('drops a child that has ended; the others go on', async () => {
    expect(
      await turns(
        [
          ['a', 1],
          ['b', 1, 2],
          ['c', 1],
        ],
        { maxCycles: 4, ...unbounded },
      ),
    ).toBe('abccbaacca');
  });
});

describe('serveChild', () => {
  it('times one run per request and collects the times from the result', async () => {
    const child = serveChild<{ status: string; timesMs: number[]; peakRssMB: number }>(
      CHILD,
      { ms: 7 },
      [],
      20_000,
    );
    expect(await child.ready).toBe(true);
    expect(await child.run()).toBe(7);
    expect(await child.run()).toBe(7);
    const result = await child.finish();
    expect(result.status).toBe('ok');
    expect(result.timesMs).toEqual([7, 7]);
  });

  it('the time limit runs to ready, then from reply to reply', async () => {
    // 3 replies 1.5 s apart: 4.5 s in all, over the 4 s limit, each gap well under it
    const child = serveChild<{ status: string; timesMs: number[]; peakRssMB: number; timedOut?: boolean }>(
      CHILD,
      { ms: 1500, wait: 1500 },
      [],
      4000,
    );
    expect(await child.ready).toBe(true);
    for (let i = 0; i < 3; i++) expect(await child.run()).toBe(1500);
    const result = await child.finish();
    expect(result.timedOut).toBeUndefined();
    expect(result.timesMs).toEqual([1500, 1500, 1500]);
  });

  it('a child that is not ready says so, and its result says why', async () => {
    const child = serveChild<{ status: string; message?: string; peakRssMB: number }>(
      CHILD,
      { failFirst: true },
      [],
      20_000,
    );
    expect(await child.ready).toBe(false);
    expect(await child.run()).toBeUndefined();
    const result = await child.finish();
    expect(result.status).toBe('wrong');
    expect(result.message).toBe('bad output');
  });

  it('a child that dies during a run ends that run and fails the row', async () => {
    const child = serveChild<{ status: string; message?: string; peakRssMB: number }>(
      CHILD,
      { ms: 5, dieAfter: 2 },
      [],
      20_000,
    );
    expect(await child.ready).toBe(true);
    expect(await child.run()).toBe(5);
    expect(await child.run()).toBeUndefined();
    const result = await child.finish();
    expect(result.status).toBe('failed');
    expect(result.message).toMatch(/^exit 3/);
  });
});

describe('serveGroup', () => {
  it('starts each child once the one before is ready', async () => {
    let firstReady = false;
    let secondStartedAfterFirstReady = false;
    const { children, ready } = await serveGroup([
      () => {
        const child = serveChild<{ status: string; peakRssMB: number }>(
          CHILD,
          { ms: 1, readyAfter: 200 },
          [],
          20_000,
        );
        void child.ready.then(() => {
          firstReady = true;
        });
        return child;
      },
      () => {
        secondStartedAfterFirstReady = firstReady;
        return serveChild<{ status: string; peakRssMB: number }>(CHILD, { ms: 1 }, [], 20_000);
      },
    ]);
    expect(ready).toEqual([true, true]);
    expect(secondStartedAfterFirstReady).toBe(true);
    await Promise.all(children.map((child) => child.finish()));
  });
});

describe('serveRuns', () => {
  it('answers each run request with one timed call, and resolves to the times on stop', async () => {
    const channel = new EventEmitter();
    const sent: unknown[] = [];
    const served = serveRuns(
      vi.fn(async () => new Promise((resolve) => setTimeout(resolve, 2))),
      Object.assign(channel, { send: (m: unknown) => sent.push(m) }),
    );
    expect(sent).toEqual([{ type: 'ready' }]);
    channel.emit('message', { type: 'run' });
    await vi.waitFor(() => expect(sent).toHaveLength(2));
    channel.emit('message', { type: 'run' });
    await vi.waitFor(() => expect(sent).toHaveLength(3));
    channel.emit('message', { type: 'stop' });
    const times = await served;
    expect(times).toHaveLength(2);
    expect(sent.slice(1)).toEqual(times.map((ms) => ({ type: 'time', ms })));
    expect(times.every((ms) => ms > 0)).toBe(true);
    expect(channel.listenerCount('message') + channel.listenerCount('disconnect')).toBe(0);
  });

  it('resolves to the times so far when the parent goes away', async () => {
    const channel = new EventEmitter();
    const served = serveRuns(async () => {}, channel);
    channel.emit('disconnect');
    expect(await served).toEqual([]);
  });
});
