// How a threaded forward call cuts its rows into tasks (threads/schedule.ts), and the kernel contract
// that lets the workers write into a reused shared buffer without zeroing it first: forwardRows writes
// every element of its rows' outputs, whatever they held before, on every registered kernel.

import { describe, expect, it } from 'vitest';
import { planAttention } from '../src/attention/plan.js';
import { type AttentionOptions, Tensor } from '../src/index.js';
import { registeredKernels } from '../src/kernels/registry.js';
import type { AttentionOutputs } from '../src/kernels/types.js';
import { rowSchedule, taskRows } from '../src/threads/schedule.js';

describe('rowSchedule and taskRows', () => {
  const cases: [pairs: number, L: number, threads: number][] = [];
  for (const pairs of [1, 2, 3, 8, 17])
    for (const L of [1, 3, 17, 32, 33, 65, 129, 1000, 1024, 4096])
      for (const threads of [1, 2, 3, 4, 8]) cases.push([pairs, L, threads]);

  it('covers every row of every pair exactly once, in order, in tasks starting at multiples of 32', () => {
    for (const [pairs, L, threads] of cases) {
      const { schedule, tasks } = rowSchedule(pairs, L, threads);
      const label = JSON.stringify({ pairs, L, threads, schedule });
      const seen = new Uint8Array(pairs * L);
      let last = -1; // the previous nonempty task's first flat row
      for (let t = 0; t < tasks; t++) {
        const [bh, i0, i1] = taskRows(schedule, L, t);
        if (i0 >= i1) continue;
        expect(bh >= 0 && bh < pairs && i0 >= 0 && i1 <= L, label).toBe(true);
        expect(i0 % 32, label).toBe(0);
        expect(i1 - i0 <= schedule.rowsPerTask, label).toBe(true);
        expect(bh * L + i0 > last, label).toBe(true);
        last = bh * L + i0;
        for (let i = i0; i < i1; i++) seen[bh * L + i]++;
      }
      expect(
        seen.every((x) => x === 1),
        label,
      ).toBe(true);
    }
  });

  it('gives each thread at least 4 tasks when there are rows for them, and cuts the last blocks in eighths', () => {
    // P1 on two threads: one head a task for the first six heads, then the last two in eighths.
    const p1 = rowSchedule(8, 1024, 2);
    expect(p1.schedule).toEqual({ rowsPerTask: 1024, whole: 6, subRows: 128, split: 8 });
    expect(p1.tasks).toBe(22);
    expect(taskRows(p1.schedule, 1024, 5)).toEqual([5, 0, 1024]);
    expect(taskRows(p1.schedule, 1024, 6)).toEqual([6, 0, 128]);
    expect(taskRows(p1.schedule, 1024, 21)).toEqual([7, 896, 1024]);
    // One long head on four threads: 16 blocks of 256 rows, the last four in eighths of 32.
    const long = rowSchedule(1, 4096, 4);
    expect(long.schedule).toEqual({ rowsPerTask: 256, whole: 12, subRows: 32, split: 8 });
    expect(long.tasks).toBe(44);
    // One thread has no one to balance with; blocks of 32 rows are not cut again.
    expect(rowSchedule(8, 1024, 1).schedule.split).toBe(8);
    expect(rowSchedule(8, 1024, 1).tasks).toBe(8);
    const small = rowSchedule(3, 40, 2);
    expect(small.schedule.split).toBe(1);
    expect(small.tasks).toBe(6);
  });
});

describe('forwardRows writes every element of its rows (a reused buffer is not zeroed first)', () => {
  const t = (shape: number[], seed: number) => Tensor.randn(shape, { seed });
  const blockRow = (L: number, S: number, row: number) =>
    new Tensor(
      Float32Array.from({ length: L * S }, (_, i) => (Math.floor(i / S) === row ? 0 : 1)),
      [L, S],
    );
  const minusInfRow = (L: number, S: number, row: number) =>
    new Tensor(
      Float32Array.from({ length: L * S }, (_, i) => (Math.floor(i / S) === row ? -Infinity : 0.5)),
      [L, S],
    );
  const cases: { name: string; L: number; S: number; options: AttentionOptions }[] = [
    { name: 'plain', L: 5, S: 7, options: {} },
    { name: 'a fully masked row', L: 5, S: 7, options: { mask: blockRow(5, 7, 2) } },
    { name: 'a row of −∞ bias', L: 5, S: 7, options: { bias: minusInfRow(5, 7, 4) } },
    {
      name: 'bottom-right causal, L > S (rows that see no key)',
      L: 9,
      S: 4,
      options: { causal: 'bottom-right' },
    },
    {
      name: 'a window with rows that see no key',
      L: 9,
      S: 4,
      options: { causal: 'bottom-right', window: [2, 0] },
    },
    { name: 'no keys', L: 4, S: 0, options: {} },
  ];
  for (const { name, L, S, options } of cases) {
    it(name, () => {
      const B = 2;
      const H = 2;
      const plan = planAttention('test', t([B, H, L, 8], 1), t([B, H, S, 8], 2), t([B, H, S, 8], 3), options);
      const p = plan.problem;
      const outputsOf = (fill: number): AttentionOutputs => ({
        out: new Float32Array(B * H * L * 8).fill(fill),
        weights: new Float32Array(B * H * L * S).fill(fill),
        lse: new Float32Array(B * H * L).fill(fill),
      });
      let checked = 0;
      for (const kernel of registeredKernels()) {
        // Each output alone and all together, as far as the kernel serves them.
        for (const pick of [['out'], ['weights'], ['lse', 'out'], ['out', 'weights', 'lse']] as const) {
          const outputsFor = (fill: number) => {
            const all = outputsOf(fill);
            return Object.fromEntries(pick.map((key) => [key, all[key]])) as AttentionOutputs;
          };
          if (kernel.supports(p, outputsFor(0)) !== true) continue;
          const clean = outputsFor(0);
          const dirty = outputsFor(Number.NaN);
          for (const outputs of [clean, dirty]) {
            for (let bh = 0; bh < B * H; bh++) {
              kernel.forwardRows(p, outputs, bh, 0, Math.min(L, 3));
              if (L > 3) kernel.forwardRows(p, outputs, bh, 3, L);
            }
            kernel.release?.();
          }
          for (const key of pick) {
            const a = Array.from(clean[key]!);
            const b = Array.from(dirty[key]!);
            expect(b, `${kernel.name} ${pick.join('+')}: ${key}`).toEqual(a);
            expect(a.every(Number.isFinite) || key === 'lse', `${kernel.name}: ${key} finite`).toBe(true);
          }
          checked++;
        }
      }
      expect(checked).toBeGreaterThanOrEqual(registeredKernels().length);
    });
  }
});
