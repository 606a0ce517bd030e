// The bench's interleaved timing (bench/spawn.ts): the parent side of the serve protocol against a child
// that speaks it (test/fixtures/served-child.mjs), the child side (serveRuns) in this process, and the
// order and stopping rule of `interleave`. The timings themselves are fake: nothing here asserts time.
import { EventEmitter } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, expect, it, vi } from 'vitest';
import { interleave, type ServedChild, serveChild, serveGroup, serveRuns } from '../bench/spawn.js';

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

describe('interleave', () => {
  it('runs one call of each child per cycle, every other cycle in reverse order', async () => {
    const log: string[] = [];
    await interleave([fake('a', 1, log), fake('b', 1, log), fake('c', 1, log)], {
      maxCycles: 3,
      budgetMs: 1e9,
      pauseMs: 0,
    });
    expect(log.join('')).toBe('abccbaabc');
  });

  it('stops once the slowest child has spent the budget, after a whole cycle', async () => {
    const log: string[] = [];
    await interleave([fake('q', 10, log), fake('o', 30, log)], { maxCycles: 100, budgetMs: 100, pauseMs: 0 });
    // o reaches 120 ms ≥ 100 in its fourth run; the cycle it ends is whole
    expect(log.join('')).toBe('qooqqooq');
  });

  it('runs minCycles cycles whatever the budget', async () => {
    const log: string[] = [];
    await interleave([fake('q', 10, log), fake('o', 30, log)], {
      minCycles: 3,
      maxCycles: 12,
      budgetMs: 1,
      pauseMs: 0,
    });
    expect(log.join('')).toBe('qooqqo');
  });

  it('drops a child that has ended; the others go on', async () => {
    const log: string[] = [];
    await interleave([fake('a', 1, log), fake('b', 1, log, 2), fake('c', 1, log)], {
      maxCycles: 4,
      budgetMs: 1e9,
      pauseMs: 0,
    });
    expect(log.join('')).toBe('abccbaacca');
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
    // 3 runs of 400 ms after 400 ms of loading: 1.6 s in all, each wait under the 1 s limit
    const child = serveChild<{ status: string; timesMs: number[]; peakRssMB: number; timedOut?: boolean }>(
      CHILD,
      { ms: 400, wait: 400, readyAfter: 400 },
      [],
      1000,
    );
    expect(await child.ready).toBe(true);
    for (let i = 0; i < 3; i++) expect(await child.run()).toBe(400);
    const result = await child.finish();
    expect(result.timedOut).toBeUndefined();
    expect(result.timesMs).toEqual([400, 400, 400]);
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
    const started: number[] = [];
    const at = performance.now();
    const { children, ready } = await serveGroup(
      [300, 0].map((readyAfter) => () => {
        started.push(performance.now() - at);
        return serveChild<{ status: string; peakRssMB: number }>(CHILD, { ms: 1, readyAfter }, [], 20_000);
      }),
    );
    expect(ready).toEqual([true, true]);
    expect(started[1]).toBeGreaterThanOrEqual(300);
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
