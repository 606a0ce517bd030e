// `npm run bench`: five tables, each row in a fresh child process. The attention grid: qkv's kernels
// against the article's code, tfjs-wasm and ONNX Runtime on the sizes of issue 3 (results.json). P2:
// MultiHeadAttention forward against PyTorch's ONNX export in onnxruntime-web and tfjs-wasm
// (results-p2.json). T1: a training step of a 2-layer decoder against tfjs (results-t1.json). G1:
// generation — KV cache vs none, time per token vs position, a decode step against onnxruntime-web's
// Attention op, paged-cache blocks (results-g1.json). F1: flexAttention — document masking against a
// dense mask, causalMask against causal sdpa, a JS scoreMod against the built-in (results-f1.json).
// One decision to know: rows run one at a time (never in parallel) so that they do not compete for the
// two cores; a grid row estimated to take over 30 s per run is skipped and says so.
// Flags: --table <names>, --quick, --only <substring> (repeatable), --rounds <n>, --readme, --readme-only.

import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeInputs } from './check.js';
import type { ChildResult } from './child.js';
import { f1Table, f1TargetsTable } from './f1.js';
import { G1_DECODE, G1_MODEL, g1Table, g1TargetsTable } from './g1.js';
import {
  CONFIGS,
  type Config,
  configLabel,
  flops,
  type Impl,
  implName,
  implsForConfig,
  type Job,
  MEMORY_TARGETS,
  RELAXED_SIMD_FLAG,
} from './jobs.js';
import { p2Table, p2TargetsTable } from './p2.js';
import { ORT_NODE_INSTALL } from './peers/ort-install.js';
import { referenceOutput, wasmBuild } from './qkv.js';
import {
  addRatios,
  cells,
  consoleTable,
  finishRow,
  type Machine,
  machineLine,
  median,
  newRow,
  type Row,
  TABLE_ROUNDS,
  targetRowNames,
  targetsMarkdownTable,
  toJson,
} from './results.js';
import { INTERLEAVE_PAUSE_MS, interleave, runChild, serveChild, serveGroup } from './spawn.js';
import { t1Table, t1TargetsTable } from './t1.js';
import { runF1, runG1, runP2, runT1, TABLE_NAMES, type TableContext, type TableName } from './tables.js';
import { updateReadme } from './update-readme.js';

const BENCH_DIR = dirname(dirname(fileURLToPath(import.meta.url))); // bench/ (this file runs from bench/dist)
const ROOT = dirname(BENCH_DIR);
const PEERS_DIR = join(BENCH_DIR, '.peers');
const SKIP_ABOVE_MS = 30_000; // estimated time of one run
const MEMORY_SKIP_ABOVE_MS = 300_000; // the 65536 row runs once, so it may take longer
const ARTICLE_RATE = 0.65e6; // FLOP per ms: issue 3 measured the article's code at ~0.65 GFLOP/s
const FULL_REFERENCE_UP_TO = 2.2e9; // FLOPs; above this, check sampled rows in float64 instead
const CHILD_SCRIPT = join(BENCH_DIR, 'dist', 'child.js');
/** A row's timed runs (in the grid, or in an interleaved round): at most MAX_RUNS, or BUDGET_MS of them. */
const MAX_RUNS = 30;
const BUDGET_MS = 4000;
/** An interleaved row's limit to be ready, then between two of its replies (spawn.ts's serveChild). */
const SERVED_TIMEOUT_MS = 240_000;
const childArgv = (impl: Impl) => (impl.kind === 'qkv' && impl.relaxed ? [RELAXED_SIMD_FLAG] : []);

const USAGE = `usage: npm run bench -- [options]
  --table <names>      only these tables, comma-separated or repeated: attention (the kernel grid and the
                       memory targets), p2 (MultiHeadAttention forward), t1 (training step), g1
                       (generation), f1 (flex attention); default all
  --quick              the smallest size only, fewer runs and steps, no memory-target rows (a smoke run)
  --only <substring>   rows whose "implementation config" (grid), "P2 implementation", "T1 implementation",
                       "G1 row" or "F1 row" contains it, e.g. --only "ort" --only "(1,8,1024" (repeatable;
                       a partial run writes bench/results.partial.json)
  --rounds <n>         rounds of the rows the targets compare (P1's, P2's and T1's speed rows), default
                       ${TABLE_ROUNDS}: more rounds for a noisy machine
  --readme             after the run, rewrite the sections of docs/benchmarks.md whose tables ran in full
  --readme-only        only rewrite docs/benchmarks.md from bench/results.json, results-p2.json,
                       results-t1.json, results-g1.json, results-f1.json (with --table, only those
                       sections)`;

interface Args {
  tables: TableName[];
  quick: boolean;
  only: string[];
  readme: boolean;
  readmeOnly: boolean;
  /** Rounds of the target rows (--rounds). */
  rounds: number;
}

function parseTables(list: string): TableName[] {
  const names = list.toLowerCase().split(',').filter(Boolean);
  for (const name of names) {
    if (!(TABLE_NAMES as string[]).includes(name)) {
      console.error(`bench: unknown table '${name}' (tables: ${TABLE_NAMES.join(', ')})\n${USAGE}`);
      process.exit(2);
    }
  }
  return names as TableName[];
}

function parseArgs(argv: string[]): Args {
  const args: Args = {
    tables: [],
    quick: false,
    only: [],
    readme: false,
    readmeOnly: false,
    rounds: TABLE_ROUNDS,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--quick') args.quick = true;
    else if (a === '--table' && argv[i + 1] !== undefined) args.tables.push(...parseTables(argv[++i]));
    else if (a.startsWith('--table=')) args.tables.push(...parseTables(a.slice('--table='.length)));
    else if (a === '--rounds' || a.startsWith('--rounds=')) {
      const value = a === '--rounds' ? argv[++i] : a.slice('--rounds='.length);
      const n = Number(value);
      if (!Number.isInteger(n) || n < 1 || n > 99) {
        console.error(`bench: --rounds takes an integer from 1 to 99, got '${value}'\n${USAGE}`);
        process.exit(2);
      }
      args.rounds = n;
    } else if (a === '--readme') args.readme = true;
    else if (a === '--readme-only') args.readmeOnly = true;
    else if (a === '--help') {
      console.log(USAGE);
      process.exit(0);
    } else if (a === '--only' && argv[i + 1] !== undefined) args.only.push(argv[++i].toLowerCase());
    else if (a.startsWith('--only=')) args.only.push(a.slice('--only='.length).toLowerCase());
    else {
      console.error(`bench: unknown argument '${a}'\n${USAGE}`);
      process.exit(2);
    }
  }
  return args;
}

/** What a run costs, for estimates: the article computes the full L×S matrix even when causal. */
function work(impl: Impl, c: Config): number {
  return impl.kind === 'article' ? 4 * c.B * c.H * c.L * c.S * c.E : flops(c);
}

/** The measured tree's commit, or 'unknown' outside a git checkout. */
function commit(): string {
  try {
    const git = (...args: string[]) => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' }).trim();
    return `${git('rev-parse', '--short', 'HEAD')}${git('status', '--porcelain', '--', 'src') ? '+dirty' : ''}`;
  } catch {
    return 'unknown';
  }
}

function machine(): Machine {
  return {
    cpu: cpus()[0]?.model ?? 'unknown CPU',
    cores: cpus().length,
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    totalMemoryMB: Math.round(totalmem() / 2 ** 20),
    loadAverage: loadavg(),
    date: new Date().toISOString(),
  };
}

/** The qkv reference kernel's output for a small config, written where the children can read it. */
function writeExpected(c: Config, dir: string): string {
  const { q, k, v } = makeInputs(c);
  const file = join(dir, `expected-${c.B}-${c.H}-${c.L}-${c.E}-${c.causal}.f32`);
  const out = referenceOutput(q, k, v, c.causal);
  writeFileSync(file, new Uint8Array(out.buffer, out.byteOffset, out.byteLength));
  return file;
}

interface Planned {
  impl: Impl;
  config: Config;
  memoryLimitMB?: number;
}

interface RunContext {
  quick: boolean;
  /** Rounds of the target rows (--rounds). */
  rounds: number;
  ortNodeInstalled: boolean;
  /** Temporary directory for the expected outputs. */
  scratch: string;
  /** Config label → file with the qkv reference kernel's output. */
  expectedFiles: Map<string, string>;
  /** Implementation name → work per ms, from its last measured row (for estimates). */
  speed: Map<string, number>;
}

/** Skips the row, or runs it in a child process and turns the child's report into a row. */
async function measureRow({ impl, config, memoryLimitMB }: Planned, ctx: RunContext): Promise<Row> {
  const row = newRow(impl, config);
  if (memoryLimitMB !== undefined) row.memoryLimitMB = memoryLimitMB;
  row.loadAverage1m = loadavg()[0];
  const label = configLabel(config);
  const rate = ctx.speed.get(row.implementation) ?? (impl.kind === 'article' ? ARTICLE_RATE : undefined);
  const estimateMs = rate ? work(impl, config) / rate : undefined;
  const limit = memoryLimitMB === undefined ? SKIP_ABOVE_MS : MEMORY_SKIP_ABOVE_MS;
  if (impl.kind === 'ort-node' && !ctx.ortNodeInstalled) {
    row.status = 'not installed';
    row.message = ORT_NODE_INSTALL;
    return row;
  }
  if (estimateMs !== undefined && estimateMs > limit) {
    row.status = 'skipped';
    row.message = `est. ${Math.round(estimateMs / 1000)} s`;
    return row;
  }
  if (flops(config) <= FULL_REFERENCE_UP_TO && !ctx.expectedFiles.has(label)) {
    ctx.expectedFiles.set(label, writeExpected(config, ctx.scratch));
  }
  const job = jobOf({ impl, config, memoryLimitMB }, ctx);
  const result = await runChild<ChildResult>(
    CHILD_SCRIPT,
    job,
    childArgv(impl),
    memoryLimitMB === undefined ? 4 * limit : 1.5 * limit,
  );
  row.status = result.timedOut ? 'timeout' : result.status;
  if (result.message) row.message = result.message;
  row.timesMs = result.timesMs;
  row.peakRssMB = result.peakRssMB;
  if (result.maxAbsError !== undefined) row.maxAbsError = result.maxAbsError;
  if (result.checkedAgainst) row.checkedAgainst = result.checkedAgainst;
  finishRow(row);
  if (row.ms !== undefined) ctx.speed.set(row.implementation, work(impl, config) / row.ms);
  return row;
}

/** A speed target's rows in the order a round runs them: qkv sync, its peer, its FMA row; then 2 threads. */
function targetRank({ impl }: Row): number {
  if (impl.kind === 'qkv') return 10 * impl.threads + (impl.relaxed ? 2 : 0);
  return 10 * impl.threads + 1;
}

/**
 * Runs the rows the speed targets compare (P1) in ctx.rounds rounds of their own, interleaved: in a round,
 * the rows of one target group (a config's qkv rows at one thread count and their onnxruntime-web peer)
 * run in processes started one after another (spawn.ts's serveGroup), which, once every one is checked and warm, take turns one run each
 * (spawn.ts's interleave), every other round in reverse order. So each run of a qkv row has its peer's
 * just before and after it, and a machine whose speed changes from one second to the next (the project's
 * VM does) moves both alike; in the grid, a row and its peer run minutes apart. A row's ms becomes the
 * median of its rounds' medians (the grid's run is not one of them); a round that does not pass (wrong,
 * timeout) sets the row's status, so it reports no speed.
 */
async function runTargetRounds(rows: Row[], plan: Planned[], ctx: RunContext): Promise<void> {
  const groups = new Map<string, { row: Row; planned: Planned }[]>();
  for (const config of new Set(rows.map((r) => r.config))) {
    for (const name of targetRowNames(config)) {
      const i = rows.findIndex(
        (r) => r.implementation === name && r.config === config && r.memoryLimitMB === undefined,
      );
      if (i < 0 || rows[i].ms === undefined) continue;
      const key = `${config} t${rows[i].impl.threads ?? 1}`;
      groups.set(key, [...(groups.get(key) ?? []), { row: rows[i], planned: plan[i] }]);
    }
  }
  const targets = [...groups.values()].filter((group) => group.length > 1);
  for (const group of targets) {
    group.sort((a, b) => targetRank(a.row) - targetRank(b.row));
    for (const { row } of group) row.roundsMs = [];
  }
  for (let round = 0; round < ctx.rounds; round++) {
    for (const group of targets) {
      const live = group.filter(({ row }) => row.status === 'ok');
      if (live.length === 0) continue;
      const ordered = round % 2 ? [...live].reverse() : live;
      const { children, ready } = await serveGroup(
        ordered.map(
          ({ planned }) =>
            () =>
              serveChild<ChildResult>(
                CHILD_SCRIPT,
                { ...jobOf(planned, ctx), serve: true },
                childArgv(planned.impl),
                SERVED_TIMEOUT_MS,
              ),
        ),
      );
      const served = children.filter((_, i) => ready[i]);
      if (served.length > 0) {
        await interleave(served, { maxCycles: MAX_RUNS, budgetMs: BUDGET_MS, pauseMs: INTERLEAVE_PAUSE_MS });
      }
      const results = await Promise.all(children.map((child) => child.finish()));
      ordered.forEach(({ row }, i) => {
        addTargetRound(row, results[i], round, ctx.rounds);
      });
    }
  }
}

/** One interleaved round's result, added to its row (see runTargetRounds). */
function addTargetRound(
  row: Row,
  result: ChildResult & { timedOut?: boolean },
  round: number,
  rounds: number,
): void {
  const status = result.timedOut ? 'timeout' : result.status;
  const label = `  ${row.implementation}  ${row.config} (round ${round + 1}/${rounds}, interleaved)`;
  row.peakRssMB = Math.max(row.peakRssMB ?? 0, result.peakRssMB);
  if (result.maxAbsError !== undefined) row.maxAbsError = Math.max(row.maxAbsError ?? 0, result.maxAbsError);
  if (status !== 'ok' || result.timesMs.length === 0) {
    row.status = status === 'ok' ? 'failed' : status;
    row.message = result.message ?? 'no timed runs';
    row.ms = undefined;
    row.gflops = undefined;
    console.log(`${label}  ${row.status}`);
    return;
  }
  const ms = median(result.timesMs);
  row.interleaved = true;
  row.timesMs.push(...result.timesMs);
  row.roundsMs?.push(ms);
  row.ms = median(row.roundsMs ?? []);
  row.gflops = flops(row.shape) / row.ms / 1e6;
  console.log(`${label}  ${ms.toFixed(1)} ms`);
}

/** A grid row's job (its child's timed runs: up to MAX_RUNS, or BUDGET_MS of them). */
function jobOf({ impl, config, memoryLimitMB }: Planned, ctx: RunContext): Job {
  return {
    impl,
    config,
    maxRuns: ctx.quick ? 3 : MAX_RUNS,
    budgetMs: ctx.quick ? 500 : BUDGET_MS,
    expectedFile: ctx.expectedFiles.get(configLabel(config)),
    peersDir: PEERS_DIR,
    singleRun: memoryLimitMB !== undefined,
  };
}

/** The attention grid and the memory targets: runs, prints, returns the rows. */
async function runAttention(args: Args, relaxedRows: boolean, ortNodeInstalled: boolean): Promise<Row[]> {
  const selected = (impl: Impl, c: Config) =>
    args.only.length === 0 ||
    args.only.some((s) => `${implName(impl)} ${configLabel(c)}`.toLowerCase().includes(s));
  const plan: Planned[] = [];
  for (const config of args.quick ? CONFIGS.slice(0, 1) : CONFIGS) {
    for (const impl of implsForConfig(relaxedRows)) if (selected(impl, config)) plan.push({ impl, config });
  }
  for (const { config, limitMB } of MEMORY_TARGETS) {
    const impl: Impl = { kind: 'qkv-default', threads: 1 };
    if (!args.quick && selected(impl, config)) plan.push({ impl, config, memoryLimitMB: limitMB });
  }
  console.log(`attention grid: ${plan.length} rows`);
  const context: RunContext = {
    quick: args.quick,
    rounds: args.rounds,
    ortNodeInstalled,
    scratch: mkdtempSync(join(tmpdir(), 'qkv-bench-')),
    expectedFiles: new Map(),
    speed: new Map(),
  };
  const rows: Row[] = [];
  try {
    for (const planned of plan) {
      const row = await measureRow(planned, context);
      rows.push(row);
      const c = cells(row);
      console.log(`  ${c[0]}  ${c[1]}  ${row.ms === undefined ? c[2] : `${c[2]} ms, ${c[3]} GFLOP/s`}`);
    }
    if (!args.quick) await runTargetRounds(rows, plan, context);
  } finally {
    rmSync(context.scratch, { recursive: true, force: true });
  }
  if (rows.length === 0) return rows;
  addRatios(rows);
  console.log(`\n${consoleTable(rows)}\n`);
  console.log('max err: largest |out − expected| (the qkv reference kernel on small configs, float64 on');
  console.log('sampled rows on big ones). speed-up: best portable peer ms / qkv ms at ≤ the same threads.');
  console.log(`\n${targetsMarkdownTable(rows)}\n`);
  return rows;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const docs = join(ROOT, 'docs', 'benchmarks.md');
  const files = {
    attention: join(BENCH_DIR, 'results.json'),
    p2: join(BENCH_DIR, 'results-p2.json'),
    t1: join(BENCH_DIR, 'results-t1.json'),
    g1: join(BENCH_DIR, 'results-g1.json'),
    f1: join(BENCH_DIR, 'results-f1.json'),
  };
  if (args.readmeOnly) {
    updateReadme(files, docs, args.tables.length ? [...new Set(args.tables)] : TABLE_NAMES);
    return;
  }
  const tables = args.tables.length ? [...new Set(args.tables)] : TABLE_NAMES;
  const partial = args.quick || args.only.length > 0;
  // Where relaxed SIMD is off by default (Node 20), the fused multiply-add build gets rows of its own.
  const relaxedRows = wasmBuild() === 'simd';

  const info = machine();
  const measured = commit();
  console.log(`qkv bench: ${machineLine(info, measured)}`);
  console.log(
    `tables: ${tables.join(', ')}; each row in its own process${partial ? ' (partial run)' : ''}\n`,
  );
  const ortNodeInstalled = existsSync(join(PEERS_DIR, 'node_modules', 'onnxruntime-node'));
  const tableContext: TableContext = {
    benchDir: BENCH_DIR,
    peersDir: PEERS_DIR,
    quick: args.quick,
    rounds: args.rounds,
    selected: (label) => args.only.length === 0 || args.only.some((s) => label.toLowerCase().includes(s)),
    log: (line) => console.log(line),
  };

  const results: Partial<Record<TableName, unknown[]>> = {};
  if (tables.includes('attention'))
    results.attention = await runAttention(args, relaxedRows, ortNodeInstalled);
  if (tables.includes('p2')) {
    console.log('P2: MultiHeadAttention forward, self-attention, x [1, 1024, 512], embedDim 512, 8 heads');
    const rows = await runP2(tableContext, relaxedRows);
    results.p2 = rows;
    if (rows.length) console.log(`\n${p2Table(rows, true)}\n\n${p2TargetsTable(rows)}\n`);
  }
  if (tables.includes('t1')) {
    console.log('T1: training step, 2-layer decoder, batch 16 × 128 tokens');
    const rows = await runT1(tableContext, relaxedRows);
    results.t1 = rows;
    if (rows.length) console.log(`\n${t1Table(rows, true)}\n\n${t1TargetsTable(rows)}\n`);
  }

  if (tables.includes('g1')) {
    const { vocabSize, dModel, numLayers, numHeads, dFF, maxLen } = G1_MODEL;
    const { Hq, Hkv, S, E } = G1_DECODE;
    console.log(
      `G1: generation, decoder V ${vocabSize} D ${dModel} ${numLayers} layers ${numHeads} heads dFF ${dFF} maxLen ${maxLen}; ` +
        `decode step Hq ${Hq} Hkv ${Hkv} S ${S} E ${E}`,
    );
    const rows = await runG1(tableContext);
    results.g1 = rows;
    if (rows.length) console.log(`\n${g1Table(rows, true)}\n\n${g1TargetsTable(rows)}\n`);
  }

  if (tables.includes('f1')) {
    console.log(
      `F1: flex attention${args.quick ? ' (--quick: small sizes)' : ''}; each row checked against float64, then timed`,
    );
    const rows = await runF1(tableContext);
    results.f1 = rows;
    if (rows.length) console.log(`\n${f1Table(rows, true)}\n\n${f1TargetsTable(rows)}\n`);
  }

  const header = { machine: info, commit: measured, partial };
  if (partial) {
    const file = join(BENCH_DIR, 'results.partial.json');
    const tablesRun = { p2: results.p2, t1: results.t1, g1: results.g1, f1: results.f1 };
    writeFileSync(file, toJson({ ...header, rows: results.attention ?? [], ...tablesRun }));
    console.log(`wrote ${file}`);
    if (args.readme)
      console.log('not updating docs/benchmarks.md from a partial run (drop --quick / --only)');
    return;
  }
  for (const table of tables) {
    writeFileSync(files[table], toJson({ ...header, rows: results[table] ?? [] }));
    console.log(`wrote ${files[table]}`);
  }
  if (args.readme) updateReadme(files, docs, tables);
}

await main();
