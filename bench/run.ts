// `npm run bench`: qkv's kernels against the article's code, tfjs-wasm and ONNX Runtime on the sizes of
// issue 3, each (implementation, size) in a fresh child process; prints the table, writes results.json.
// One decision to know: rows run one at a time (never in parallel) so that they do not compete for the
// two cores; a row estimated to take over 30 s per run is skipped and says so.
// Flags: --quick (smallest size, fewer runs), --only <substring> (repeatable), --readme, --readme-only.

import { execFileSync, fork } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeInputs } from './check.js';
import type { ChildMessage, ChildResult } from './child.js';
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
import { ORT_NODE_INSTALL } from './peers/ort-install.js';
import { referenceOutput, wasmBuild } from './qkv.js';
import {
  addRatios,
  cells,
  consoleTable,
  finishRow,
  type Machine,
  machineLine,
  newRow,
  type Results,
  type Row,
  targetsMarkdownTable,
  toJson,
} from './results.js';
import { updateReadme } from './update-readme.js';

const BENCH_DIR = dirname(dirname(fileURLToPath(import.meta.url))); // bench/ (this file runs from bench/dist)
const ROOT = dirname(BENCH_DIR);
const PEERS_DIR = join(BENCH_DIR, '.peers');
const SKIP_ABOVE_MS = 30_000; // estimated time of one run
const MEMORY_SKIP_ABOVE_MS = 300_000; // the 65536 row runs once, so it may take longer
const ARTICLE_RATE = 0.65e6; // FLOP per ms: issue 3 measured the article's code at ~0.65 GFLOP/s
const FULL_REFERENCE_UP_TO = 2.2e9; // FLOPs; above this, check sampled rows in float64 instead

const USAGE = `usage: npm run bench -- [options]
  --quick              the smallest size only, fewer runs, no memory-target rows (a smoke run)
  --only <substring>   rows whose "implementation config" contains it, e.g. --only "ort" --only "(1,8,1024"
                       (repeatable; a partial run writes bench/results.partial.json)
  --readme             after a full run, rewrite docs/benchmarks.md's table from bench/results.json
  --readme-only        only rewrite docs/benchmarks.md's table from bench/results.json`;

interface Args {
  quick: boolean;
  only: string[];
  readme: boolean;
  readmeOnly: boolean;
}

function parseArgs(argv: string[]): Args {
  const args: Args = { quick: false, only: [], readme: false, readmeOnly: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--quick') args.quick = true;
    else if (a === '--readme') args.readme = true;
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

function runChild(job: Job, timeoutMs: number): Promise<ChildResult & { timedOut?: boolean }> {
  return new Promise((resolve) => {
    const child = fork(join(BENCH_DIR, 'dist', 'child.js'), [JSON.stringify(job)], {
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      execArgv: job.impl.kind === 'qkv' && job.impl.relaxed ? [RELAXED_SIMD_FLAG] : [],
    });
    let peakRssMB = 0;
    let result: ChildResult | undefined;
    let stderr = '';
    let timedOut = false;
    child.stderr?.on('data', (chunk: Buffer) => {
      if (stderr.length < 8000) stderr += chunk.toString(); // the error comes first, its stack after
    });
    child.on('message', (m: ChildMessage) => {
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
      resolve({ status: 'failed', message, timesMs: [], peakRssMB, timedOut });
    });
  });
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
  const job: Job = {
    impl,
    config,
    maxRuns: ctx.quick ? 3 : 30,
    budgetMs: ctx.quick ? 500 : 4000,
    expectedFile: ctx.expectedFiles.get(label),
    peersDir: PEERS_DIR,
    singleRun: memoryLimitMB !== undefined,
  };
  const result = await runChild(job, memoryLimitMB === undefined ? 4 * limit : 1.5 * limit);
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

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const resultsFile = join(BENCH_DIR, 'results.json');
  if (args.readmeOnly) {
    updateReadme(resultsFile, join(ROOT, 'docs', 'benchmarks.md'));
    return;
  }
  const partial = args.quick || args.only.length > 0;
  const selected = (impl: Impl, c: Config) =>
    args.only.length === 0 ||
    args.only.some((s) => `${implName(impl)} ${configLabel(c)}`.toLowerCase().includes(s));

  // Where relaxed SIMD is off by default (Node 20), the fused multiply-add build gets rows of its own.
  const relaxedRows = wasmBuild() === 'simd';
  const plan: Planned[] = [];
  for (const config of args.quick ? CONFIGS.slice(0, 1) : CONFIGS) {
    for (const impl of implsForConfig(relaxedRows)) if (selected(impl, config)) plan.push({ impl, config });
  }
  for (const { config, limitMB } of MEMORY_TARGETS) {
    const impl: Impl = { kind: 'qkv-default', threads: 1 };
    if (!args.quick && selected(impl, config)) plan.push({ impl, config, memoryLimitMB: limitMB });
  }

  const info = machine();
  const measured = commit();
  console.log(`qkv bench: ${machineLine(info, measured)}`);
  console.log(`${plan.length} rows, each in its own process${partial ? ' (partial run)' : ''}\n`);
  const context: RunContext = {
    quick: args.quick,
    ortNodeInstalled: existsSync(join(PEERS_DIR, 'node_modules', 'onnxruntime-node')),
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
  } finally {
    rmSync(context.scratch, { recursive: true, force: true });
  }

  addRatios(rows);
  console.log(`\n${consoleTable(rows)}\n`);
  console.log('max err: largest |out − expected| (the qkv reference kernel on small configs, float64 on');
  console.log('sampled rows on big ones). speed-up: best portable peer ms / qkv ms at ≤ the same threads.');
  console.log(`\n${targetsMarkdownTable(rows)}\n`);

  const results: Results = { machine: info, commit: measured, partial, rows };
  const file = partial ? join(BENCH_DIR, 'results.partial.json') : resultsFile;
  writeFileSync(file, toJson(results));
  console.log(`wrote ${file}`);
  if (args.readme) {
    if (partial) console.log('not updating docs/benchmarks.md from a partial run (drop --quick / --only)');
    else updateReadme(resultsFile, join(ROOT, 'docs', 'benchmarks.md'));
  }
}

await main();
