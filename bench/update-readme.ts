// Rewrites docs/benchmarks.md's table (between the bench:start and bench:end markers) from
// bench/results.json: the machine line and the table. One decision to know: when the markers are missing,
// the section is appended to the page.

import { readFileSync, writeFileSync } from 'node:fs';
import { ORT_NODE_INSTALL } from './peers/ort-install.js';
import {
  machineLine,
  markdownTable,
  memoryMarkdownTable,
  type Results,
  targetsMarkdownTable,
} from './results.js';

const START = '<!-- bench:start -->';
const END = '<!-- bench:end -->';

export function benchSection(results: Results): string {
  const memoryRows = results.rows.filter((r) => r.memoryLimitMB !== undefined);
  const timeRows = results.rows.filter((r) => r.memoryLimitMB === undefined);
  return [
    START,
    '## Benchmarks',
    '',
    '`npm run bench` (after `npm ci`) measures forward attention, fp32, q/k/v `[B, H, L, E]` with L = S, on',
    'the sizes of issue 3: qkv (each kernel; sync, and async on 1 and 2 worker threads), the seed article’s',
    '`number[][]` code, tfjs with the WASM backend (tuned: per head, K transposed before matMul), and ONNX',
    'Runtime running MatMul → Softmax → MatMul: onnxruntime-web (WASM) and onnxruntime-node (native; not a',
    'dependency, measured only where installed with',
    `\`${ORT_NODE_INSTALL}\`).`,
    'Each row runs in a fresh Node process, and its output is checked (against the qkv reference kernel, or',
    'float64 on sampled rows for the big sizes) before it is timed. ms is the median of the timed runs (up to',
    '30, or 4 s, after a warm-up run); peak RSS is the whole process; GFLOP/s counts 4·B·H·L·S·E (half for',
    'causal). The speed-up is peer ms ÷ qkv',
    'ms for the fastest portable peer (tfjs-wasm, onnxruntime-web) on at most as many threads; > 1 means',
    'qkv is faster. `--quick` and `--only <substring>` run a subset; `--readme` rewrites this section. The',
    'machine is shared, so expect noise.',
    '',
    'The `wasm-fma` rows are the WASM kernel’s relaxed-SIMD build (fused multiply-add), which Chrome and',
    'Node ≥ 22 run by default; Node 20 validates it only behind `--experimental-wasm-relaxed-simd`, so where',
    'the bench runs on Node 20 these rows run in processes started with that flag (the default rows do not).',
    '',
    `Last run: ${machineLine(results.machine, results.commit)}.`,
    '',
    targetsMarkdownTable(timeRows),
    '',
    markdownTable(timeRows),
    '',
    'Memory targets (whole-process peak RSS; one cold run in a fresh process):',
    '',
    memoryMarkdownTable(memoryRows),
    END,
  ].join('\n');
}

/** Replaces the marked section of `readmePath` (or inserts it) with one built from `resultsPath`. */
export function updateReadme(resultsPath: string, readmePath: string): void {
  const results = JSON.parse(readFileSync(resultsPath, 'utf8')) as Results;
  const readme = readFileSync(readmePath, 'utf8');
  const section = benchSection(results);
  const start = readme.indexOf(START);
  const end = readme.indexOf(END);
  let next: string;
  if (start >= 0 && end > start) {
    next = readme.slice(0, start) + section + readme.slice(end + END.length);
  } else {
    next = `${readme.trimEnd()}\n\n${section}\n`;
  }
  writeFileSync(readmePath, next);
  console.log(`updated ${readmePath} from ${resultsPath}`);
}
