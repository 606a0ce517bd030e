// `qkv generate --model <checkpoint> --prompt "…"`: continues a prompt with a trained decoder, token by
// token, printing text as it comes and a tokens/s line at the end (on stderr, so stdout is the text).
// One decision to know: the text is streamed by decoding every token so far and printing what is new,
// so a tokenizer whose tokens split a character or a word (byte-level BPE) still prints it whole.

import { readFileBytes } from '../io/file-node.js';
import { UnknownTokenError } from '../text/tokenizer.js';
import { loadCheckpoint } from '../train/checkpoint.js';
import {
  type CliIO,
  integerOption,
  numberArg,
  parseCommandArgs,
  plural,
  resolveModel,
  UsageError,
} from './args.js';

export const GENERATE_HELP = `qkv generate: continue a prompt with a trained decoder checkpoint

Usage: qkv generate --model <file> (--prompt <text> | --ids <i,j,…>) [options]

Options:
  --model <file>         a decoder checkpoint (qkv train --task copy, or a language model), or
                         brown-lm, the bundled language model, by name
  --prompt <text>        the prompt, encoded with the checkpoint's tokenizer
  --ids <i,j,…>          the prompt as token ids instead (comma-separated integers)
  --max-new-tokens <n>   tokens to generate, 0 to 1048576; default 32 (prompt + n must fit the
                         model's maxLen)
  --temperature <t>      ≥ 0; 0 = greedy; default 1
  --top-k <k>            sample from the k most likely tokens only, 1 to 1073741824
  --top-p <p>            sample from the smallest set of tokens holding probability p, in (0, 1]
  --seed <n>             seed of the sampling, 0 to 4294967295; default 0 (same seed, same text)
  --no-cache             recompute the whole sequence for every token (compare the speed)
  -h, --help             this help

Prints the generated text as it comes (ids, without a tokenizer in the checkpoint); then, on stderr,
the number of tokens and tokens per second.
`;

function numberOption(values: Record<string, unknown>, name: string): number | undefined {
  const raw = values[name];
  if (raw === undefined) return undefined;
  const x = numberArg(raw);
  if (!Number.isFinite(x)) {
    throw new UsageError(`generate: --${name} must be a number, got '${String(raw)}'`);
  }
  return x;
}

/** Runs `qkv generate`; returns the exit code (0 ok, 1 runtime error, 2 bad usage). */
export function generateCommand(argv: string[], io: CliIO): number {
  const values = parseCommandArgs('generate', argv, {
    model: { type: 'string' },
    prompt: { type: 'string' },
    ids: { type: 'string' },
    'max-new-tokens': { type: 'string' },
    temperature: { type: 'string' },
    'top-k': { type: 'string' },
    'top-p': { type: 'string' },
    seed: { type: 'string' },
    'no-cache': { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.stdout.write(GENERATE_HELP);
    return 0;
  }
  if (typeof values.model !== 'string') throw new UsageError('generate: --model <checkpoint> is required');
  if ((values.prompt === undefined) === (values.ids === undefined)) {
    throw new UsageError('generate: give the prompt as --prompt <text> or --ids <i,j,…> (one of them)');
  }
  const maxNewTokens = integerOption('generate', values, 'max-new-tokens', 32, 0, 1 << 20);
  const seed = integerOption('generate', values, 'seed', 0, 0, 2 ** 32 - 1);
  const temperature = numberOption(values, 'temperature');
  const topP = numberOption(values, 'top-p');
  const topK =
    values['top-k'] === undefined ? undefined : integerOption('generate', values, 'top-k', 0, 1, 1 << 30);
  if (temperature !== undefined && temperature < 0) {
    throw new UsageError(`generate: --temperature must be ≥ 0, got '${String(values.temperature)}'`);
  }
  if (topP !== undefined && !(topP > 0 && topP <= 1)) {
    throw new UsageError(`generate: --top-p must be in (0, 1], got '${String(values['top-p'])}'`);
  }
  const resolved = resolveModel('generate', values.model);
  if ('error' in resolved) {
    io.stderr.write(`qkv: ${resolved.error}\n`);
    return 1;
  }
  const { path } = resolved;
  const { model, info } = loadCheckpoint(readFileBytes(path), path);
  const tokenizer = info.tokenizer;
  if (!model.config.causal) {
    io.stderr.write(`qkv: generate: '${path}' is an encoder (causal: false); only a decoder generates\n`);
    return 1;
  }
  let prompt: Int32Array;
  if (typeof values.ids === 'string') {
    const parts = values.ids.split(',').map((s) => s.trim());
    if (parts.some((s) => !/^\d+$/.test(s))) {
      throw new UsageError(`generate: --ids must be comma-separated token ids, got '${values.ids}'`);
    }
    prompt = Int32Array.from(parts, Number);
  } else {
    if (!tokenizer) {
      io.stderr.write(`qkv: generate: '${path}' stores no tokenizer; give the prompt as --ids\n`);
      return 1;
    }
    try {
      prompt = tokenizer.encode(String(values.prompt));
    } catch (err) {
      if (!(err instanceof UnknownTokenError)) throw err;
      io.stderr.write(`qkv: generate: ${err.message}\n`);
      return 1;
    }
  }

  // Stream: decode the prompt and everything generated so far, and print what was not printed yet.
  const made: number[] = [];
  let printed = tokenizer ? tokenizer.decode(prompt) : '';
  const show = (id: number) => {
    made.push(id);
    if (!tokenizer) {
      io.stdout.write(`${made.length > 1 ? ',' : ''}${id}`);
      return;
    }
    const text = tokenizer.decode([...prompt, ...made]);
    if (text.startsWith(printed)) io.stdout.write(text.slice(printed.length));
    else io.stdout.write(`\n${text}`); // a tokenizer whose text for a prefix changed: show it all again
    printed = text;
  };
  io.stdout.write(printed);
  const t0 = performance.now();
  const out = model.generate(prompt, {
    maxNewTokens,
    temperature,
    topK,
    topP,
    seed,
    useCache: !values['no-cache'],
    onToken: show,
  });
  const seconds = (performance.now() - t0) / 1000;
  io.stdout.write('\n');
  const rate = out.length / Math.max(seconds, 1e-9);
  io.stderr.write(
    `${plural(out.length, 'token')} in ${seconds.toFixed(2)} s: ${rate.toFixed(1)} tokens/s (${values['no-cache'] ? 'no cache' : 'KV cache'}; prompt ${plural(prompt.length, 'token')})\n`,
  );
  return 0;
}
