// The `qkv` command: argument parsing, help, and exit codes (0 ok, 1 runtime error, 2 bad usage).
// One decision to know: `main` takes argv and streams as arguments, so tests run it in-process; bin
// wiring lives in src/cli.ts.

import { type ArgValues, type CliIO, integerOption, parseCommandArgs, UsageError } from './args.js';

export type { CliIO } from './args.js';

import { type DemoConfig, runDemo } from './demo.js';
import { evalCommand } from './eval.js';
import { exportCommand } from './export.js';
import { generateCommand } from './generate.js';
import { HEADS_HELP_LINE, headsCommand } from './heads.js';
import { trainCommand } from './train.js';
import { viz } from './viz.js';

const VERSION = '0.1.0';
const MAX_TOKENS = 64;

const HELP = `qkv: attention in TypeScript, exact and seeded

Usage:
  qkv demo [options]     the article's self-attention run: shapes, attention matrix, row sums
  qkv viz --out <file>   one attention heatmap (the playground's step-through) as SVG or PNG
  qkv train --task <t>   train a tiny transformer: pronoun, copy, reverse, scaling
  qkv eval --task <t>    accuracy and "it" → noun attention of a trained pronoun checkpoint
  qkv generate --model <file> --prompt <text>   continue a prompt with a trained decoder
${HEADS_HELP_LINE}
  qkv export --model <file> --out <file.onnx>   a checkpoint as an ONNX model (--opset 17|23, --kv-cache)
  qkv --help             this help
  qkv --version          the version

Run 'qkv <command> --help' (demo, viz, train, eval, generate, export, heads) for its options.
The --model of eval, viz, heads and generate takes a checkpoint file or, from any directory, a bundled
model by name: pronoun (the encoder that resolves "it" in the article's sentence) or brown-lm (the
language model), e.g. qkv generate --model brown-lm --prompt "The jury said".
`;

const DEMO_HELP = `qkv demo: run self-attention on seeded token embeddings and print the attention matrix

Usage: qkv demo [options]

Options:
  --tokens <n|words>   number of tokens (1 to 64), or the tokens themselves ("the cat sat", at most 64
                       words); default 4
  --d-model <n>        model width d_model, 1 to 8192; default 512
  --d-k <n>            query/key width d_k, 1 to 8192; default 64 (with --heads: d_model / heads)
  --d-v <n>            value width d_v, 1 to 8192; default d_k
  --heads <n>          attention heads, 1 to 64, dividing d_model; > 1 uses MultiHeadAttention (and
                       then d_k = d_v = d_model / heads); default 1
  --causal             causal mask: query i sees keys j ≤ i
  --seed <n>           seed for embeddings and weights, 0 to 4294967295; default 0 (same seed, same output)
  -h, --help           this help

Rows are queries, columns are keys, every row sums to 1. In a terminal the cells are coloured as a
heatmap (set NO_COLOR=1 to turn colour off).
`;

/** Runs the CLI; returns the exit code (a promise of it for `train`, which yields so Ctrl-C is heard). */
export function main(argv: string[], io: CliIO): number | Promise<number> {
  try {
    const [command, ...rest] = argv;
    if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
      io.stdout.write(HELP);
      return 0;
    }
    if (command === '--version' || command === '-v') {
      io.stdout.write(`${VERSION}\n`);
      return 0;
    }
    if (command === 'demo') return demo(rest, io);
    if (command === 'viz') return viz(rest, io);
    if (command === 'train') return trainCommand(rest, io);
    if (command === 'eval') return evalCommand(rest, io);
    if (command === 'generate') return generateCommand(rest, io);
    if (command === 'export') return exportCommand(rest, io);
    if (command === 'heads') return headsCommand(rest, io);
    throw new UsageError(
      `unknown command '${command}' (commands: demo, viz, train, eval, generate, export, heads; see qkv --help)`,
    );
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr.write(`qkv: ${err.message}\n`);
      return 2;
    }
    io.stderr.write(`qkv: ${(err as Error).message}\n`);
    return 1;
  }
}

function demo(argv: string[], io: CliIO): number {
  const values = parseCommandArgs('demo', argv, {
    tokens: { type: 'string' },
    'd-model': { type: 'string' },
    'd-k': { type: 'string' },
    'd-v': { type: 'string' },
    heads: { type: 'string' },
    causal: { type: 'boolean' },
    seed: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.stdout.write(DEMO_HELP);
    return 0;
  }
  const config = demoConfig(values);
  const color = Boolean(io.stdout.isTTY) && !io.env.NO_COLOR;
  io.stdout.write(runDemo(config, color));
  return 0;
}

function demoConfig(values: ArgValues): DemoConfig {
  const int = (name: string, fallback: number, min: number, max: number) =>
    integerOption('demo', values, name, fallback, min, max);
  let tokens: string[];
  const rawTokens = values.tokens;
  // A number is a count ('-3' and '2.5' included, which the count's check rejects); anything else, words.
  if (typeof rawTokens === 'string' && !/^[-+]?(\d+\.?\d*|\.\d+)$/.test(rawTokens)) {
    tokens = rawTokens.split(/[\s,]+/).filter(Boolean);
    if (tokens.length === 0)
      throw new UsageError(`demo: --tokens needs a count or at least one word, got '${rawTokens}'`);
    if (tokens.length > MAX_TOKENS) {
      throw new UsageError(`demo: --tokens has ${tokens.length} words; at most ${MAX_TOKENS} fit a table`);
    }
  } else {
    const n = int('tokens', 4, 1, MAX_TOKENS);
    tokens = Array.from({ length: n }, (_, i) => `Token${i}`);
  }
  const dModel = int('d-model', 512, 1, 8192);
  const heads = int('heads', 1, 1, 64);
  const seed = int('seed', 0, 0, 2 ** 32 - 1);
  const causal = Boolean(values.causal);
  if (heads > 1) {
    if (dModel % heads !== 0) {
      throw new UsageError(`demo: --d-model ${dModel} is not divisible by --heads ${heads}`);
    }
    const hd = dModel / heads;
    for (const name of ['d-k', 'd-v']) {
      if (values[name] !== undefined && int(name, hd, 1, 8192) !== hd) {
        throw new UsageError(
          `demo: with --heads ${heads}, --${name} is d_model / heads = ${hd}; got ${values[name]}`,
        );
      }
    }
    return { tokens, dModel, dK: hd, dV: hd, heads, causal, seed };
  }
  const dK = int('d-k', 64, 1, 8192);
  const dV = int('d-v', dK, 1, 8192);
  return { tokens, dModel, dK, dV, heads, causal, seed };
}
