// Argument parsing shared by every `qkv` command: node:util's parseArgs in strict mode, one clear
// line for bad usage. One decision to know: commands throw UsageError and main.ts turns it into
// "qkv: <message>" on stderr and exit code 2, so no command prints or exits on its own.

import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type ParseArgsConfig, parseArgs } from 'node:util';

/** The streams and environment a command runs with (process's in bin; strings in tests). */
export interface CliIO {
  stdout: { write(text: string): unknown; isTTY?: boolean };
  stderr: { write(text: string): unknown; isTTY?: boolean };
  env: Record<string, string | undefined>;
}

/** Bad usage; the message starts with the command ("demo: --d-k must be …"). */
export class UsageError extends Error {}

export type ArgValues = Record<string, string | boolean | undefined>;

/** Parses `argv` for `command`; unknown options and stray arguments throw UsageError. */
export function parseCommandArgs(
  command: string,
  argv: string[],
  options: NonNullable<ParseArgsConfig['options']>,
): ArgValues {
  try {
    const args = joinNegativeValues(argv, options);
    return parseArgs({ args, strict: true, allowPositionals: false, options }).values as ArgValues;
  } catch (err) {
    // parseArgs' messages run to several sentences; keep the first (it names the option).
    const first = (err as Error).message.split(/\. |\n/)[0].replace(/\.$/, '');
    throw new UsageError(`${command}: ${first} (see qkv ${command} --help)`);
  }
}

/**
 * `--seed -1` as `--seed=-1`: parseArgs calls any value that starts with '-' ambiguous, a negative number
 * included, so a number after an option that takes a value is joined to it (the option's own check then
 * accepts it or says which range it must be in).
 */
function joinNegativeValues(argv: string[], options: NonNullable<ParseArgsConfig['options']>): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--') return [...out, ...argv.slice(i)];
    const name = arg.startsWith('--')
      ? arg.slice(2)
      : /^-\w$/.test(arg)
        ? Object.keys(options).find((key) => options[key].short === arg[1])
        : undefined;
    const next = argv[i + 1];
    if (name && options[name]?.type === 'string' && next !== undefined && /^-\.?\d/.test(next)) {
      out.push(`--${name}=${next}`);
      i++;
    } else {
      out.push(arg);
    }
  }
  return out;
}

/** "1 step", "2 steps". */
export function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

/**
 * The number a string option holds (`fallback` when it is absent), NaN for anything else — a blank value
 * included (`Number('')` is 0, which would pass for a given 0): callers' range checks then refuse it with
 * their own message.
 */
export function numberArg(raw: unknown, fallback = Number.NaN): number {
  if (raw === undefined) return fallback;
  return typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : Number.NaN;
}

/** The integer option `--name` in [min, max], or `fallback` when absent; anything else throws UsageError. */
export function integerOption(
  command: string,
  values: ArgValues,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const raw = values[name];
  if (raw === undefined) return fallback;
  if (typeof raw !== 'string' || !/^\d+$/.test(raw) || Number(raw) < min || Number(raw) > max) {
    throw new UsageError(
      `${command}: --${name} must be an integer from ${min} to ${max}, got '${String(raw)}'`,
    );
  }
  return Number(raw);
}

/** The checkpoints the package ships in models/ (package.json "files"), loaded by name from any directory. */
export const BUNDLED_MODELS = ['pronoun', 'brown-lm'] as const;

/** How each bundled model is made again, for the message when its file is missing. */
const BUNDLED_RECIPES: Record<(typeof BUNDLED_MODELS)[number], string> = {
  pronoun: 'npm run train',
  'brown-lm': 'npm run train:lm',
};

/**
 * The file of a bundled model: models/<name>.safetensors of the package, found from this file's location
 * (dist/cli/args.js and src/cli/args.ts both sit two levels below the package root), so it works from
 * any working directory and from an installed package.
 */
export function bundledModelPath(name: (typeof BUNDLED_MODELS)[number]): string {
  return fileURLToPath(new URL(`../../models/${name}.safetensors`, import.meta.url));
}

/**
 * `--model`'s value as a checkpoint file: an existing path as given, else a bundled model's name
 * (`pronoun`, `brown-lm`). Neither gives `{ error }`, a message that starts with the command and names
 * the bundled models; the command prints it as "qkv: <error>" and exits 1.
 */
export function resolveModel(command: string, value: string): { path: string } | { error: string } {
  if (existsSync(value)) return { path: value };
  const name = BUNDLED_MODELS.find((n) => n === value);
  if (name !== undefined) {
    const path = bundledModelPath(name);
    if (existsSync(path)) return { path };
    return {
      error: `${command}: the bundled model '${name}' is missing from this install: no ${path} (${BUNDLED_RECIPES[name]} makes it)`,
    };
  }
  const names = BUNDLED_MODELS.map((n) => `--model ${n}`).join(', ');
  return { error: `${command}: no such checkpoint '${value}' (the bundled models load by name: ${names})` };
}
