// Rewrites docs/benchmarks.md's sections from the results files: the attention grid (between the
// bench:start and bench:end markers, from bench/results.json), P2 (bench:p2:start/end, results-p2.json),
// T1 (bench:t1:start/end, results-t1.json), G1 (bench:g1:start/end, results-g1.json) and F1
// (bench:f1:start/end, results-f1.json): each its method, machine line, targets and table.
// One decision to know: when a section's markers are missing, the section is appended to the page.

import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import {
  F1_BLOCK,
  F1_CHECK,
  F1_RUNS,
  F1_SHAPES,
  F1_TARGETS,
  type F1Group,
  type F1Row,
  f1Checks,
  f1Table,
  f1TargetsTable,
  shapeLabel,
} from './f1.js';
import {
  G1_COMMITTED,
  G1_DECODE,
  G1_EARLY,
  G1_LATE,
  G1_LONG_TOKENS,
  G1_MODEL,
  G1_NEW_TOKENS,
  G1_PAGED,
  G1_PROMPT_LEN,
  G1_SEED,
  type G1Row,
  g1Table,
  g1TargetsTable,
} from './g1.js';
import { MHA_FIXTURE_NAME, MHA_TOLERANCE, type P2Row, p2Table, p2TargetsTable } from './p2.js';
import { ORT_NODE_INSTALL } from './peers/ort-install.js';
import {
  type Machine,
  machineLine,
  markdownTable,
  memoryMarkdownTable,
  type Results,
  TABLE_ROUNDS,
  targetsMarkdownTable,
} from './results.js';
import {
  T1,
  T1_HEAP_EVERY,
  T1_LONG_STEPS,
  T1_LONG_WARMUP,
  type T1Row,
  t1Table,
  t1TargetsTable,
} from './t1.js';
import type { TableName } from './tables.js';

const START = '<!-- bench:start -->';
const END = '<!-- bench:end -->';
const MARKERS: Record<TableName, [string, string]> = {
  attention: [START, END],
  p2: ['<!-- bench:p2:start -->', '<!-- bench:p2:end -->'],
  t1: ['<!-- bench:t1:start -->', '<!-- bench:t1:end -->'],
  g1: ['<!-- bench:g1:start -->', '<!-- bench:g1:end -->'],
  f1: ['<!-- bench:f1:start -->', '<!-- bench:f1:end -->'],
};

/** A P2, T1, G1 or F1 results file: the attention grid's header, that table's rows. */
interface TableResults<R> {
  machine: Machine;
  commit: string;
  partial: boolean;
  rows: R[];
}

/** How a round of a target's rows runs, when they ran interleaved (spawn.ts's interleave). */
const INTERLEAVED_ROUND = [
  'In a round, the qkv rows of one thread count and their onnxruntime-web peer run in processes started one',
  'after another and, once every one is checked and warm, take turns one run each (every other turn in reverse',
  'order, 150 ms apart, as onnxruntime-web’s 2-thread pool spins for ~50 ms after a run; up to 30 runs',
  'each, or until the slowest row has run 4 s), so each run of a qkv row has its peer’s just before and',
  'after it: the machine’s speed changes from one second to the next (see the top of this page).',
];

/** How many rounds the rows ran in (--rounds): the most any row has; TABLE_ROUNDS for results before rounds. */
function roundsRun(rows: readonly { roundsMs?: number[] }[]): number {
  const most = Math.max(0, ...rows.map((r) => r.roundsMs?.length ?? 0));
  return most > 1 ? most : TABLE_ROUNDS;
}

export function benchSection(results: Results): string {
  const memoryRows = results.rows.filter((r) => r.memoryLimitMB !== undefined);
  const timeRows = results.rows.filter((r) => r.memoryLimitMB === undefined);
  const rounds = roundsRun(results.rows);
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
    'machine is shared, so expect noise: the rows the targets compare run in',
    ...(results.rows.some((r) => r.interleaved)
      ? [
          `${rounds} rounds of their own after the grid.`,
          ...INTERLEAVED_ROUND,
          'Their ms is the median over the rounds of each round’s median, and the targets table gives the ratio',
          'round by round.',
        ]
      : [
          `${rounds} rounds (the grid's run the first, then each qkv row next to its onnxruntime-web row, every`,
          'other round in reverse order); their ms is the median over the rounds of each round’s median, and the',
          'targets table gives the ratio round by round.',
        ]),
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

export function p2Section(results: TableResults<P2Row>): string {
  const { atol, rtol } = MHA_TOLERANCE;
  const rounds = roundsRun(results.rows);
  return [
    MARKERS.p2[0],
    '## P2: MultiHeadAttention forward',
    '',
    '`npm run bench -- --table p2` measures `MultiHeadAttention({ embedDim: 512, numHeads: 8 })` on',
    'self-attention, x `[1, 1024, 512]`, no weights returned, against PyTorch’s own',
    '`nn.MultiheadAttention(512, 8, batch_first=True)` exported to ONNX (opset 17, by',
    `\`scripts/export_mha.py\`, committed as \`bench/fixtures/${MHA_FIXTURE_NAME}\`) in onnxruntime-web on 1 and 2`,
    'threads (graph optimizations on), and the same layer written in tfjs-core ops on the WASM backend',
    '(weights transposed once at set-up, the 8 heads as 2-D matMuls in a loop: its batched matMul is far slower, K transposed before its matMul; tfjs-wasm',
    'has no threads under Node). qkv rows call `mha.forward(x, x, x)` (sync, one thread) and',
    '`await mha.forwardAsync(x, x, x, { threads: 2 })`; the FMA rows are the same in a process with relaxed',
    'SIMD on (as above). Every row loads its weights out of that one .onnx and is checked, before it is',
    'timed, against PyTorch’s float64 output for 17 query rows (stored in the file’s metadata):',
    `|out − expected| ≤ ${atol.toExponential(0)} + ${rtol.toExponential(0)}·|expected| on every element (max err below). The rows run in`,
    ...(results.rows.some((r) => r.interleaved)
      ? [
          `${rounds} rounds, each running every row once.`,
          ...INTERLEAVED_ROUND,
          'A row’s ms is the median over the rounds of each round’s median, after two warm-up runs; runs counts',
          'them all. The ratio is',
        ]
      : [
          `${rounds} rounds, each running every row once, each qkv row next to its onnxruntime-web row and every other`,
          'round in reverse order, so a machine whose speed drifts moves a row and its peer together. A row’s ms is the median over the rounds of each',
          'round’s median of up to 30 runs (or 4 s) after two warm-up runs; runs counts them all. The ratio is',
        ]),
    'onnxruntime-web’s ms at the same thread count ÷ the row’s ms; the targets table also gives it round by',
    'round. onnxruntime-node is measured where installed (see above).',
    '',
    `Last run: ${machineLine(results.machine, results.commit)}.`,
    '',
    p2TargetsTable(results.rows),
    '',
    p2Table(results.rows),
    MARKERS.p2[1],
  ].join('\n');
}

export function t1Section(results: TableResults<T1Row>): string {
  const rounds = roundsRun(results.rows);
  return [
    MARKERS.t1[0],
    '## T1: a training step',
    '',
    '`npm run bench -- --table t1` times one training step — forward, backward, AdamW update — of a',
    `decoder with vocabulary ${T1.vocabSize}, d_model ${T1.dModel}, ${T1.numHeads} heads, ${T1.numLayers} pre-LayerNorm blocks (packed`,
    `q/k/v projection, causal attention, tanh-GELU MLP of width ${T1.dFF}), token embedding ×√d_model plus`,
    'sinusoidal positions, a final LayerNorm and an output head tied to the embedding, on a fixed batch of',
    `${T1.batch} × ${T1.seqLen} tokens (seeded, uniform over the vocabulary; targets are the next tokens) with mean`,
    `cross-entropy and AdamW (lr ${T1.lr}, betas 0.9/0.999, decoupled weight decay ${T1.weightDecay} on matrices only).`,
    'qkv: `TinyTransformer` (exactly this model: pre-LN, sinusoidal, tied head) with',
    '`autograd.crossEntropy`, `autograd.backward` and `autograd.AdamW`, then `autograd.release` (the step’s',
    'arrays serve the next step, as the tfjs rows dispose their tensors). tfjs: the same model in tfjs-core',
    'ops, trained with `tf.variableGrads`, `tf.losses.softmaxCrossEntropy` and `tf.train.adam` plus the',
    'same decoupled decay (so AdamW), on the WASM and the CPU backends; tfjs-wasm has no kernel for',
    'gather’s gradient, so there the embedding lookup is a one-hot matMul (on CPU it is `tf.gather`).',
    'tfjs-wasm has no threads under Node and tfjs-cpu is single-threaded; a qkv 2-thread row runs only',
    'where TinyTransformer.forward takes a `threads` option, else it says n/a.',
    '',
    'tokens/s = 2048 ÷ the median step time over the timed steps (up to 12, or 20 s, at least 3) after',
    ...(results.rows.some((r) => r.interleaved)
      ? [
          `warm-up steps (2, or 1 when a step takes over 5 s), in each of ${rounds} rounds. In a round the speed rows`,
          '(every one compared with tfjs-wasm) run in processes started one after another and, once every one is warm, take',
          'turns one step each (every other turn in reverse order, 150 ms apart, until the slowest row has run 20 s',
          'or 12 steps, 3 at least), as P1’s and P2’s target rows do (see the top of this page); tfjs-cpu and the',
          'memory rows run once, alone. A row’s figure is the median of its',
        ]
      : [
          `warm-up steps (2, or 1 when a step takes over 5 s), in each of ${rounds} rounds: a round runs every speed row`,
          'once, the one-thread qkv rows next to tfjs-wasm and every other round in reverse order (tfjs-cpu and the',
          'memory rows run once), and a row’s figure is the median of its',
        ]),
    'rounds’; the targets table also gives the ratio round by round. The rows start from different random weights,',
    'so they are not compared number for number: the check is that every loss is finite and the loss falls',
    'over the timed steps (shown); a row failing it reports no speed. Peak RSS is the whole process; the',
    'RSS column is the process RSS after the first and after the last timed step ("grows" above 10 MB).',
    `The memory rows (\`, ${T1_LONG_STEPS} steps\`; not with --quick) run qkv's default build for ${T1_LONG_WARMUP} warm-up and`,
    `${T1_LONG_STEPS} timed steps in a process started with --expose-gc and weigh the calling thread's JS heap plus`,
    `buffers (heapUsed + external: typed arrays and other ArrayBuffers) and the process RSS, after a full GC,`,
    `after the first timed step, every ${T1_HEAP_EVERY} and the last. No growth compares the weighings of the second half`,
    '(steps 140–200) with those from step 40 to 100: the floor of the heap and buffers within 1 MB (5 KB a step;',
    'one leaked 128 × 128 gradient a step would add 13 MB) and the median RSS within 10 MB. The RSS column and',
    'single weighings move by tens of MB with when V8 collects and frees.',
    '',
    `Last run: ${machineLine(results.machine, results.commit)}.`,
    '',
    t1TargetsTable(results.rows),
    '',
    t1Table(results.rows),
    MARKERS.t1[1],
  ].join('\n');
}

export function g1Section(results: TableResults<G1Row>): string {
  const { vocabSize, dModel, numLayers, numHeads, dFF, maxLen } = G1_MODEL;
  const { Hq, Hkv, S, E } = G1_DECODE;
  const { prompt, forks, extend, blockSize } = G1_PAGED;
  return [
    MARKERS.g1[0],
    '## G1: generation',
    '',
    '`npm run bench -- --table g1` measures incremental decoding (issue 11), one row per process, each',
    'checked before it is timed. The model is a decoder the size of `npm run train:lm`’s language model —',
    `vocabulary ${vocabSize}, d_model ${dModel}, ${numLayers} layers, ${numHeads} heads, d_ff ${dFF} — with maxLen ${maxLen} and its own`,
    `random initialisation (seed ${G1_SEED}; no checkpoint, so the run is reproducible: its greedy text is repetitive,`,
    'which changes no cost). **Cache vs no cache**: `model.generate(prompt, { maxNewTokens:',
    `${G1_NEW_TOKENS}, temperature: 0, useCache })\` from a fixed ${G1_PROMPT_LEN}-token prompt, true and false; tokens/s =`,
    `${G1_NEW_TOKENS} ÷ the median time of the whole call (prefill included) over the timed runs, after a check run`,
    'whose tokens must each be the argmax of a full forward over prompt + tokens at its position (teacher',
    'forcing), and the two rows’ tokens must be identical. **Per-token time vs position**: with the cache, a',
    `${G1_LONG_TOKENS}-token greedy generation, token i’s time being the gap between the \`onToken\` calls of tokens i − 1 and`,
    `i; the mean over tokens ${G1_EARLY.join('–')} and over ${G1_LATE.join('–')} (median over the timed runs). Attention is O(S) per`,
    'token and the rest constant, so the target is growth at most linear: late ÷ early ≤ the ratio of the',
    'windows’ mean positions. **Decode step**: bare attention of one query, q `[1, 8, 1, 64]`, over',
    `${S} keys, Hq ${Hq} / Hkv ${Hkv} (GQA), E ${E}, causal (one query at the last position sees every key): qkv’s`,
    '`scaledDotProductAttention` on dense k/v `[1, 2, 4096, 64]`; qkv’s cache steps, `KVCache.update` of the new',
    'key onto 4095 (which builds the dense k/v it returns) then `scaledDotProductAttention` (and `truncate` back),',
    'and a `PagedKVCache` sequence forked from a 4095-token prefix, `append` of the new key (copying the',
    'partly filled block) and `pagedAttention` straight from the blocks (then `free`); against',
    'onnxruntime-web (WASM, 1 thread, graph optimizations on) running a graph of the standard opset-23',
    '`Attention` op on 4-D heads (it reads Hq and Hkv from the shapes) written by `bench/peers/onnx-model.ts`,',
    'once with k/v of all 4096 keys as inputs and once with past_key/past_value of 4095 plus the new key',
    '(returning present_key/present_value, as an exported decoder runs). **Decode + projections**, the',
    'step through the public API that reads a KVCache in place: `mha.forward(x, x, x, { cache, layer: 0,',
    `causal: true })\` of a MultiHeadAttention (embedDim ${Hq * E}, ${Hq} heads, ${Hkv} key/value heads) on one token x \`[1, 1, ${Hq * E}]\`, a`,
    `KVCache holding the projected keys and values of ${S - 1} earlier tokens (\`truncate\` back after each step),`,
    'against onnxruntime-web running the same step as a graph written the same way: MatMul + Add',
    'projections with the layer’s weights, Reshape/Transpose into heads, the Attention op over',
    'past_key/past_value (qkv’s cache contents) plus the new key, heads merged, output projection. Each',
    'is checked against qkv’s reference kernel (with projections: the layer’s forward of that token over all 4096 with',
    `\`kernel: 'reference'\`; qkv rows ≤ 1e-5 + 1e-4·|x|, onnxruntime-web ≤ 1e-4 + 1e-3·|x|); ms is the median of up to`,
    '300 steps (or 3 s) after 10 warm-up steps; onnxruntime-web’s time includes copying its inputs into and',
    'its outputs out of the WASM heap, as a user’s call does. **Paged blocks**: a `PagedKVCache`',
    `(blockSize ${blockSize}) holding a ${prompt}-token prompt, ${forks} sequences forked from it, each extended by ${extend} tokens`,
    `one at a time: the blocks in use against (${prompt} + ${forks} × ${extend}) / ${blockSize}, checked by attending from every fork’s`,
    'blocks against the reference kernel over its gathered keys. **The committed language model**',
    `(issue 12): \`${G1_COMMITTED.file}\` loaded by \`loadLanguageModel\`, greedy with the cache from “${G1_COMMITTED.prompt}”`,
    'until its context (maxLen 256) is full; tokens/s = new tokens ÷ the median time of the whole call,',
    'checked by teacher forcing as above. Load average: the machine line below (at the start) and each',
    'row’s in results-g1.json.',
    '',
    `Last run: ${machineLine(results.machine, results.commit)}${results.partial ? ' — a smoke run (`--quick`: fewer runs), not final figures' : ''}.`,
    '',
    g1TargetsTable(results.rows),
    '',
    g1Table(results.rows),
    MARKERS.g1[1],
  ].join('\n');
}

export function f1Section(results: TableResults<F1Row>): string {
  const { documentSpeedup, causalSlowdown, memoryPerIo } = F1_TARGETS;
  const { fullUpTo, sampledPerHead } = F1_CHECK;
  const { minRuns, maxRuns, budgetMs } = F1_RUNS.full;
  const tol = (g: F1Group) => {
    const { atol, rtol } = F1_CHECK.tolerance[g];
    return `${atol.toExponential(0)} + ${rtol.toExponential(0)}·|expected|`;
  };
  const { document: doc, causal, score } = F1_SHAPES.full;
  const docs = doc.docs ?? 1;
  const maskMB = (doc.L * doc.L * 4) / 2 ** 20;
  return [
    MARKERS.f1[0],
    '## F1: flex attention',
    '',
    '`npm run bench -- --table f1` measures `flexAttention` (PyTorch’s FlexAttention: mask mods, score mods,',
    'block masks) against `scaledDotProductAttention` given the same attention, forward, fp32, q/k/v',
    '`[B, H, L, E]` with L = S (seeded `Tensor.randn`), every call with kernel `auto`; one row per process.',
    `**Document masking** ${shapeLabel(doc)}, ${docs} packed documents of ${doc.L / docs} tokens: flexAttention`,
    `with a block mask (\`createBlockMask(mod, 1, 1, L, S)\`, ${F1_BLOCK} × ${F1_BLOCK} tiles) of the built-in`,
    '`documentMask(ids)`, and of `andMasks(causalMask, documentMask(ids))`, against scaledDotProductAttention',
    `with the same visibility as a dense \`[${doc.L}, ${doc.L}]\` float32 mask Tensor (${maskMB} MB), built in that row’s`,
    'process before its first call, so it counts in that row’s peak RSS, as it would in a user’s.',
    `**Causal** ${shapeLabel(causal)}: flexAttention with a \`causalMask\` block mask against`,
    "`scaledDotProductAttention(q, k, v, { causal: 'top-left' })` (the same attention when L = S).",
    `**Score mod** ${shapeLabel(score)}: the built-in \`alibiScore(${score.H})\` (a program the WASM kernel reads as data)`,
    'against the same ALiBi as a plain JS function `(s, b, h, q, kv) => s + slopes[h] * (kv - q)` (which',
    'only the JS tiled kernel can call, once per score), and scaledDotProductAttention with the dense',
    `\`alibiBias(${score.H}, ${score.L}, ${score.L})\` as \`bias\`.`,
    '',
    'Each row runs once and is checked before it is timed, against a float64 computation of its rule done',
    `in the bench (not by qkv): every query row at L ≤ ${fullUpTo}, else ${sampledPerHead} evenly spread rows of every`,
    `head plus each document’s first and last; |out − expected| ≤ ${tol('document')} (max err below),`,
    `and ≤ ${tol('score')} for the score rows: ALiBi without a causal mask gives the first`,
    'queries scores up to slope·(S − 1) ≈ 512, where float32 scores (the WASM kernel’s) resolve only ~3e-5.',
    'The last timed run is checked again; a row failing a check has no figure. ms is the median of the',
    `timed runs (at least ${minRuns}, up to ${maxRuns} or ${budgetMs / 1000} s) after a warm-up run (none when the checked run`,
    `took over ${F1_RUNS.slowMs / 1000} s). The kernel column is what \`auto\` ran: a small call of the same mods with`,
    'kernel `wasm` shows whether the WASM kernel serves them (else `auto` takes the JS tiled kernel,',
    '`flash`). Peak RSS is the whole process over all its runs (it includes outputs of earlier runs not yet',
    'collected); “set-up + 1 call” is the peak RSS right after the first call minus the RSS once q, k, v',
    'exist and a small call of the row has loaded its kernel: what the row’s size adds (the mask, bias or',
    'block mask, one output, kernel buffers).',
    'The ratio column is the group’s baseline ms ÷ the row’s ms (> 1: faster than the baseline):',
    'scaledDotProductAttention with the dense mask, causal scaledDotProductAttention, the built-in',
    `alibiScore. Targets: flex document masking ≥ ${documentSpeedup}× the dense mask; its memory O(n): set-up + 1 call`,
    `≤ ${memoryPerIo} × the bytes of q, k, v and the output (linear in L; the dense row’s float32 [L, S]`,
    `mask alone is ${maskMB} MB); flex causal ≤ ${causalSlowdown}× causal scaledDotProductAttention. Load average: the`,
    'machine line (at the start) and each row’s in the table (1 minute, at the row’s start; the machine is',
    'shared).',
    '',
    `Last run: ${machineLine(results.machine, results.commit)}${results.partial ? ' — a smoke run (`--quick`: small sizes), not final figures' : ''}.`,
    '',
    f1TargetsTable(results.rows),
    '',
    f1Table(results.rows),
    '',
    'Checked against:',
    '',
    f1Checks(results.rows),
    MARKERS.f1[1],
  ].join('\n');
}

/** Replaces the text between `start` and `end` in `page` (markers included), or appends `section`. */
function replaceSection(page: string, [start, end]: [string, string], section: string): string {
  const from = page.indexOf(start);
  const to = page.indexOf(end);
  if (from >= 0 && to > from) return page.slice(0, from) + section + page.slice(to + end.length);
  return `${page.trimEnd()}\n\n${section}\n`;
}

/** Rewrites the sections of `tables` in `docsPath` from their results files (those that exist). */
export function updateReadme(files: Record<TableName, string>, docsPath: string, tables: TableName[]): void {
  let page = readFileSync(docsPath, 'utf8');
  for (const table of tables) {
    const file = files[table];
    if (!existsSync(file)) {
      console.log(`no ${file}: section ${table} of ${docsPath} left as it was`);
      continue;
    }
    const results = JSON.parse(readFileSync(file, 'utf8'));
    const sections = {
      attention: benchSection,
      p2: p2Section,
      t1: t1Section,
      g1: g1Section,
      f1: f1Section,
    };
    const section = sections[table](results);
    page = replaceSection(page, MARKERS[table], section);
    console.log(`updated ${docsPath} (${table}) from ${file}`);
  }
  writeFileSync(docsPath, page);
}
