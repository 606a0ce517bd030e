// How a forward job's query rows are cut into tasks. Tasks are claimed in order (protocol.ts), so the
// claiming balances the threads only to within the last tasks' length: with one head a task (P1 on two
// threads: 8 tasks of ~15 ms) one worker idled ~5 ms at the end of a call in the median. So the blocks of
// rows that come last are cut again into sub-blocks of an eighth of their rows: the threads then finish
// ~1 ms apart (~2 ms with quarters), and only those blocks pay for more tasks (each stages its head's
// keys and values again when another head ran on its worker meanwhile).
// Every block and sub-block starts at a multiple of 32 rows, so rows are computed in the same 4-row
// tiles whatever the cut: the same bits on any number of threads.

/** The cut of B·Hq (batch, head) pairs of L query rows each (see rowSchedule). */
export interface RowSchedule {
  /** Rows of a block: ⌈L / rowsPerTask⌉ blocks per pair, the last may be shorter. */
  rowsPerTask: number;
  /** Blocks that are one task each: the first `whole` blocks in (pair, block) order. */
  whole: number;
  /** Rows of a sub-block of the blocks after those (a multiple of 32, at most rowsPerTask). */
  subRows: number;
  /** Sub-blocks per block after the first `whole` (⌈rowsPerTask / subRows⌉; a short block's last are empty). */
  split: number;
}

/** Sub-blocks are at least this many rows (a multiple of 4, see above). */
const MIN_ROWS = 32;

/**
 * The cut of `pairs` pairs of L rows for `threads` threads: blocks of at most one head's rows, multiples
 * of 32, at least 4 per thread; on more than one thread the last `threads` blocks are cut in eight.
 * Returns it with its task count.
 */
export function rowSchedule(
  pairs: number,
  L: number,
  threads: number,
): { schedule: RowSchedule; tasks: number } {
  const rowsPerTask = Math.min(
    L,
    Math.max(MIN_ROWS, Math.ceil((pairs * L) / (threads * 4) / MIN_ROWS) * MIN_ROWS),
  );
  const blocks = pairs * Math.ceil(L / rowsPerTask);
  const subRows = Math.min(rowsPerTask, Math.max(MIN_ROWS, Math.ceil(rowsPerTask / 8 / MIN_ROWS) * MIN_ROWS));
  const split = Math.ceil(rowsPerTask / subRows);
  const whole = split === 1 || threads === 1 ? blocks : Math.max(0, blocks - threads);
  return { schedule: { rowsPerTask, whole, subRows, split }, tasks: whole + (blocks - whole) * split };
}

/** Task `task`'s pair and rows [i0, i1) under `s` for pairs of L rows; i0 ≥ i1 when the task is empty. */
export function taskRows(s: RowSchedule, L: number, task: number): [bh: number, i0: number, i1: number] {
  const blocksPerPair = Math.ceil(L / s.rowsPerTask);
  if (task < s.whole) {
    const i0 = (task % blocksPerPair) * s.rowsPerTask;
    return [Math.floor(task / blocksPerPair), i0, Math.min(L, i0 + s.rowsPerTask)];
  }
  const block = s.whole + Math.floor((task - s.whole) / s.split);
  const start = (block % blocksPerPair) * s.rowsPerTask;
  const end = Math.min(L, start + s.rowsPerTask);
  const i0 = Math.min(end, start + ((task - s.whole) % s.split) * s.subRows);
  return [Math.floor(block / blocksPerPair), i0, Math.min(end, i0 + s.subRows)];
}
