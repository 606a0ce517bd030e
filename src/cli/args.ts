// Argument parsing shared by every `qkv` command: node:util's parseArgs in strict mode, one clear
// line for bad usage. One decision to know: commands throw UsageError and main.ts turns it into
// "qkv: <message>" on stderr and exit code 2, so no command prints or exits on its own.

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
