// `qkv eval --task pronoun [--model file]`: loads a checkpoint (the committed models/pronoun.safetensors by
// default) and prints `accuracy=<x> referent_attention=<y>` on one line, measured on held-out sentences.
// One decision to know: sentences are scored EVAL_BATCH at a time without the autograd tape, so memory
// does not grow with --count (one forward over all 100 000 sentences, tape recorded, took 8.5 GB). The
// bundled models (the default pronoun, and brown-lm) are found by name from the package's location
// (args.ts: resolveModel), so they work from any working directory.

import { existsSync } from 'node:fs';
import { readFileBytes } from '../io/file-node.js';
import type { Tokenizer } from '../text/tokenizer.js';
import { loadCheckpoint } from '../train/checkpoint.js';
import { textBits } from '../train/lm.js';
import { EVAL_BATCH, evaluatePronoun, pronounTask } from '../train/pronoun.js';
import {
  type ArgValues,
  bundledModelPath,
  type CliIO,
  integerOption,
  parseCommandArgs,
  resolveModel,
  UsageError,
} from './args.js';

export const EVAL_HELP = `qkv eval: measure a trained checkpoint

Usage: qkv eval --task pronoun [--model <file>] [--family <f>] [--count <n>] [--seed <n>]
       qkv eval --model <language model> --text-file <file> [--stride <n>]

Prints one line, accuracy=<x> referent_attention=<y>, over held-out sentences (referent/adjective pairs
never seen in training): accuracy of the prediction at "it", and the mean weight that the best head of the
last layer puts from "it" on the correct noun.

Options:
  --task pronoun   the task (only pronoun has an eval)
  --model <file>   checkpoint file, or a bundled model by name (pronoun, brown-lm); default pronoun
                   (the package's models/pronoun.safetensors)
  --family <f>     article (animal/place, the article's sentence), roles (animal/animal: the adjective
                   says subject or object) or both (default)
  --count <n>      held-out sentences, 1 to 100000; default 1000
  --seed <n>       seed of the sentences, 0 to 4294967295; default 12345
  --text-file <f>  a language model's total cross-entropy on a UTF-8 text file: prints
                   bits_per_byte=<x> tokens=<n> (each token predicted from at most the model's context)
  --stride <n>     tokens scored per window after the first (the rest is context), 1 to the model's
                   maxLen; default maxLen / 2
  -h, --help       this help

--text-file needs --model (a language model: a decoder that stores its tokenizer, e.g. brown-lm) and
cannot be combined with --task.
`;

/** The committed pronoun checkpoint, the package's models/pronoun.safetensors. */
export const DEFAULT_PRONOUN_MODEL = bundledModelPath('pronoun');

export { EVAL_BATCH };

/** Runs `qkv eval`; returns the exit code (0 ok, 1 runtime error, 2 bad usage). */
export function evalCommand(argv: string[], io: CliIO): number {
  const values = parseCommandArgs('eval', argv, {
    task: { type: 'string' },
    model: { type: 'string' },
    family: { type: 'string' },
    count: { type: 'string' },
    seed: { type: 'string' },
    'text-file': { type: 'string' },
    stride: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.stdout.write(EVAL_HELP);
    return 0;
  }
  if (values['text-file'] !== undefined) return evalText(values, io);
  if (values.task === undefined)
    throw new UsageError('eval: --task is required (tasks with an eval: pronoun)');
  if (values.task !== 'pronoun') {
    throw new UsageError(`eval: no eval for task '${String(values.task)}' (tasks with an eval: pronoun)`);
  }
  const count = integerOption('eval', values, 'count', 1000, 1, 100_000);
  const seed = integerOption('eval', values, 'seed', 12345, 0, 2 ** 32 - 1);
  const family = values.family ?? 'both';
  if (family !== 'article' && family !== 'roles' && family !== 'both') {
    throw new UsageError(`eval: --family must be article, roles or both, got '${String(family)}'`);
  }
  const resolved = resolveModel('eval', typeof values.model === 'string' ? values.model : 'pronoun');
  if ('error' in resolved) {
    io.stderr.write(`qkv: ${resolved.error}\n`);
    return 1;
  }
  const { path } = resolved;
  const { model, info } = loadCheckpoint(readFileBytes(path), path); // a bad file throws; main prints it, exit 1
  if (info.task !== undefined && info.task !== 'pronoun') {
    io.stderr.write(`qkv: eval: '${path}' was trained on task '${info.task}', not pronoun\n`);
    return 1;
  }
  // Ids must mean the same words: compare the stored tokenizer with the task's, by their JSON.
  const want = pronounTask.tokenizer;
  const stored = info.tokenizer;
  if (stored && JSON.stringify(stored.toJSON()) !== JSON.stringify(want.toJSON())) {
    io.stderr.write(
      `qkv: eval: '${path}' has a tokenizer that differs from the pronoun task's (${howTheyDiffer(stored, want)}); retrain it\n`,
    );
    return 1;
  }
  const score = evaluatePronoun(model, { count, seed, family });
  io.stdout.write(
    `accuracy=${score.accuracy.toFixed(4)} referent_attention=${score.referentAttention.toFixed(4)}\n`,
  );
  return 0;
}

/** `--text-file`: a language model's bits per byte on a text file. */
function evalText(values: ArgValues, io: CliIO): number {
  if (values.task !== undefined) throw new UsageError('eval: give --task or --text-file, not both');
  if (typeof values.model !== 'string')
    throw new UsageError('eval: --text-file needs --model <language model checkpoint>');
  const file = String(values['text-file']);
  const resolved = resolveModel('eval', values.model);
  if ('error' in resolved) {
    io.stderr.write(`qkv: ${resolved.error}\n`);
    return 1;
  }
  const { path } = resolved;
  if (!existsSync(file)) {
    io.stderr.write(`qkv: eval: no such text file '${file}'\n`);
    return 1;
  }
  const bytes = readFileBytes(file);
  if (bytes.length === 0) {
    io.stderr.write(`qkv: eval: '${file}' is empty; there is nothing to score\n`);
    return 1;
  }
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    io.stderr.write(`qkv: eval: '${file}' is not UTF-8 text\n`);
    return 1;
  }
  if (text.includes('\u0000')) {
    io.stderr.write(`qkv: eval: '${file}' holds NUL bytes: a binary file, not text\n`);
    return 1;
  }
  const { model, info } = loadCheckpoint(readFileBytes(path), path);
  if (!info.tokenizer) {
    io.stderr.write(`qkv: eval: '${path}' stores no tokenizer, so its ids cannot be matched to text\n`);
    return 1;
  }
  if (!model.config.causal) {
    io.stderr.write(
      `qkv: eval: '${path}' is an encoder (causal: false); bits per byte needs a language model\n`,
    );
    return 1;
  }
  const stride =
    values.stride === undefined
      ? undefined
      : integerOption('eval', values, 'stride', 0, 1, model.config.maxLen);
  const r = textBits(model, info.tokenizer, text, { stride });
  io.stdout.write(`bits_per_byte=${r.bitsPerByte.toFixed(4)} tokens=${r.tokens}\n`);
  return 0;
}

/** The first difference between two tokenizers, for the message: type, size, or the first id that differs. */
function howTheyDiffer(a: Tokenizer, b: Tokenizer): string {
  if (a.type !== b.type) return `type '${a.type}', not '${b.type}'`;
  if (a.vocabSize !== b.vocabSize) return `${a.vocabSize} tokens, not ${b.vocabSize}`;
  for (let id = 0; id < a.vocabSize; id++) {
    if (a.idToToken(id) !== b.idToToken(id))
      return `id ${id} is '${a.idToToken(id)}' there but '${b.idToToken(id)}' in the task`;
  }
  return `${a.description}, not ${b.description}`;
}
