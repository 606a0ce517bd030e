// `qkv heads --model <checkpoint>`: what each attention head of a trained decoder does, as a table of
// layer.head rows × the scores the interpretability literature names (src/train/heads.ts defines them):
//   prev-token   mean weight from position i on i − 1 (i = 1 … n − 1 of random tokens, or of text windows)
//   dup-token    mean weight from a token on the earlier occurrences of the same token (queries that have one)
//   induction    on n random tokens repeated twice, mean weight from each token of the second copy on the
//                token right after its occurrence in the first copy (Olsson et al., 2022)
//   first-token  mean weight on position 0 (the attention sink), queries i ≥ 1
// One decision to know: random tokens are drawn from the checkpoint's vocabulary minus its tokenizer's
// special tokens (<pad>, <bos>, <|endoftext|>, …), which a model reads in fixed places and would
// otherwise turn a content pattern into a positional one.

import { existsSync, readFileSync } from 'node:fs';
import { readFileBytes } from '../io/file-node.js';
import { UnknownTokenError } from '../text/tokenizer.js';
import { loadCheckpoint } from '../train/checkpoint.js';
import { bestHead, type HeadScore, headScores, SCORE_NAMES, type ScoreName } from '../train/heads.js';
import { type CliIO, integerOption, parseCommandArgs, plural, resolveModel, UsageError } from './args.js';

/** The line of `qkv --help` for this command. */
export const HEADS_HELP_LINE =
  '  qkv heads --model <file>   score each attention head: previous-token, duplicate-token, induction, first-token';

export const HEADS_HELP = `qkv heads: score every attention head of a decoder checkpoint for the patterns the literature names

Usage: qkv heads --model <file> [options]

Scores, per layer.head, each a mean attention weight in [0, 1]:
  prev-token   weight from position i on position i − 1
  dup-token    weight from a token on the earlier occurrences of the same token (over the queries
               whose token occurred before)
  induction    on n random tokens repeated twice (x x), weight from each token of the second copy on
               the token right after its occurrence in the first copy (Olsson et al., 2022)
  first-token  weight on position 0, the attention sink (queries i ≥ 1)
prev-token and first-token are measured on the first copy (i = 1 … n − 1: plain random tokens) and
dup-token on the whole 2n tokens; with --text-file, all three on windows of 2n tokens of the text.
Random tokens are drawn uniformly from the vocabulary without the tokenizer's special tokens.

Options:
  --model <file>       a decoder checkpoint (qkv train --task induction, copy, lm, …), or brown-lm, the
                       bundled language model, by name; required (an encoder such as pronoun has no
                       causal attention to score)
  --length <n>         n: random tokens per copy, 2 to maxLen / 2 (the model needs maxLen ≥ 4);
                       default min(32, maxLen / 2)
  --count <n>          sequences (and text windows) averaged over, 1 to 4096; default 8
  --seed <n>           seed of the random tokens and window offsets, 0 to 4294967295; default 0 (same
                       seed, same scores)
  --text-file <file>   measure prev-token, dup-token and first-token on this text (UTF-8, at least 2
                       tokens, encoded with the checkpoint's tokenizer) instead of random tokens
  --json               print JSON ({ heads: [{ layer, head, previousToken, … }], … }) instead of the table
  -h, --help           this help
`;

const COLUMNS: [ScoreName, string][] = [
  ['previousToken', 'prev-token'],
  ['duplicateToken', 'dup-token'],
  ['induction', 'induction'],
  ['firstToken', 'first-token'],
];

/** The table: a header, one row per layer.head, scores to 3 decimals ('-' for no value), then the best heads. */
export function formatHeadTable(heads: readonly HeadScore[]): string {
  const width = 12;
  const lines = [`${'head'.padEnd(6)}${COLUMNS.map(([, label]) => label.padStart(width)).join('')}`];
  for (const h of heads) {
    const cells = COLUMNS.map(([key]) => (Number.isNaN(h[key]) ? '-' : h[key].toFixed(3)).padStart(width));
    lines.push(`${`${h.layer}.${h.head}`.padEnd(6)}${cells.join('')}`);
  }
  const best = SCORE_NAMES.filter((key) => heads.some((h) => !Number.isNaN(h[key]))).map((key) => {
    const h = bestHead(heads, key);
    return `${COLUMNS.find(([k]) => k === key)![1]} ${h.layer}.${h.head} (${h[key].toFixed(3)})`;
  });
  lines.push(`best: ${best.join(', ')}`);
  return `${lines.join('\n')}\n`;
}

/** Runs `qkv heads`; returns the exit code (0 ok, 1 runtime error). Bad usage throws UsageError (main: exit 2). */
export function headsCommand(argv: string[], io: CliIO): number {
  const values = parseCommandArgs('heads', argv, {
    model: { type: 'string' },
    length: { type: 'string' },
    count: { type: 'string' },
    seed: { type: 'string' },
    'text-file': { type: 'string' },
    json: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.stdout.write(HEADS_HELP);
    return 0;
  }
  if (typeof values.model !== 'string' || values.model === '')
    throw new UsageError('heads: --model <checkpoint> is required');
  const count = integerOption('heads', values, 'count', 8, 1, 4096);
  const seed = integerOption('heads', values, 'seed', 0, 0, 2 ** 32 - 1);
  const textFile = values['text-file'];
  if (textFile === '') throw new UsageError('heads: --text-file needs a file name');
  const resolved = resolveModel('heads', values.model);
  if ('error' in resolved) {
    io.stderr.write(`qkv: ${resolved.error}\n`);
    return 1;
  }
  const { path } = resolved;
  const { model, info } = loadCheckpoint(readFileBytes(path), path);
  const { causal, maxLen, numLayers, numHeads } = model.config;
  if (!causal) {
    io.stderr.write(
      `qkv: heads: '${path}' is an encoder (causal: false); the scores are defined for a decoder's causal attention\n`,
    );
    return 1;
  }
  const most = Math.floor(maxLen / 2);
  if (most < 2) {
    io.stderr.write(`qkv: heads: '${path}' has maxLen ${maxLen}; the probe needs 2n ≥ 4 positions\n`);
    return 1;
  }
  const length = integerOption('heads', values, 'length', Math.min(32, most), 2, most);
  let text: Int32Array | undefined;
  if (typeof textFile === 'string') {
    if (!existsSync(textFile)) {
      io.stderr.write(`qkv: heads: no such --text-file '${textFile}'\n`);
      return 1;
    }
    if (!info.tokenizer) {
      io.stderr.write(`qkv: heads: '${path}' stores no tokenizer, so --text-file cannot be encoded\n`);
      return 1;
    }
    try {
      text = info.tokenizer.encode(readFileSync(textFile, 'utf8'));
    } catch (err) {
      if (!(err instanceof UnknownTokenError)) throw err;
      io.stderr.write(`qkv: heads: --text-file ${textFile}: ${err.message}\n`);
      return 1;
    }
    if (text.length < 2) {
      io.stderr.write(
        `qkv: heads: --text-file ${textFile} has ${plural(text.length, 'token')}; at least 2 are needed\n`,
      );
      return 1;
    }
  }
  const exclude = Object.values(info.tokenizer?.specials ?? {}).filter(
    (id): id is number => id !== undefined,
  );
  const scores = headScores(model, { seed, count, length, exclude, text });
  if (values.json) {
    // NaN (no duplicate to score) becomes null, as JSON.stringify writes it.
    const out = { model: path, task: info.task ?? null, ...scores };
    io.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
    return 0;
  }
  const where =
    text === undefined
      ? `${plural(count, 'sequence')} of ${length} random tokens repeated twice`
      : `${plural(count, 'window')} of ${Math.min(2 * length, text.length)} tokens of ${textFile} (induction: ${plural(count, 'sequence')} of ${length} random tokens repeated twice)`;
  io.stdout.write(
    `qkv heads: ${path}${info.task ? ` (task ${info.task})` : ''}: ${plural(numLayers, 'layer')} × ${plural(numHeads, 'head')}; ${where}, seed ${seed}\n`,
  );
  io.stdout.write(formatHeadTable(scores.heads));
  return 0;
}
