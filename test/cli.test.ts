// The qkv command: demo format and determinism in-process, exit codes through the built bin.

import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { main } from '../src/cli/main.js';

function run(argv: string[], { tty = false, env = {} as Record<string, string> } = {}) {
  let out = '';
  let err = '';
  const code = main(argv, {
    stdout: { write: (s: string) => (out += s), isTTY: tty },
    stderr: { write: (s: string) => (err += s) },
    env,
  });
  return { code, out, err };
}

/** The rows of the first attention table: label then numbers, last number the row sum. */
function tableRows(out: string): number[][] {
  const lines = out.split('\n');
  const start = lines.findIndex((l) => l.includes('rows = queries')) + 2;
  const rows: number[][] = [];
  for (let i = start; i < lines.length && lines[i].trim() !== ''; i++) {
    if (/^\s+0 /.test(lines[i])) break; // colour legend
    rows.push(lines[i].trim().split(/\s+/).slice(1).map(Number));
  }
  return rows;
}

describe('qkv demo', () => {
  it("prints the article's shapes and a non-uniform attention matrix whose rows sum to 1", () => {
    const { code, out, err } = run(['demo']);
    expect(code).toBe(0);
    expect(err).toBe('');
    expect(out).toMatch(/input X\s+\[4,512\]/);
    expect(out).toMatch(/WQ, WK, WV\s+\[512,64\], \[512,64\], \[512,64\]/);
    expect(out).toMatch(/output\s+\[4,64\]/);
    expect(out).toMatch(/attention weights\s+\[4,4\]/);
    expect(out).not.toContain('\x1b['); // not a terminal: no colour codes
    const rows = tableRows(out);
    expect(rows).toHaveLength(4);
    const weights = rows.flatMap((r) => r.slice(0, 4));
    for (const r of rows) {
      expect(r).toHaveLength(5);
      expect(r[4]).toBeCloseTo(1, 4);
    }
    // The article's demo printed 0.25 ± 0.004 everywhere; ours must spread.
    expect(Math.max(...weights) - Math.min(...weights)).toBeGreaterThan(0.2);
  });

  it('the same seed prints the same output; another seed another', () => {
    const a = run(['demo', '--seed', '7']).out;
    expect(run(['demo', '--seed', '7']).out).toBe(a);
    expect(run(['demo', '--seed', '8']).out).not.toBe(a);
  });

  it('--causal zeroes the upper triangle; --tokens takes words; --heads prints every head', () => {
    const { code, out } = run([
      'demo',
      '--tokens',
      'the cat sat on the mat',
      '--causal',
      '--d-model',
      '32',
      '--heads',
      '4',
    ]);
    expect(code).toBe(0);
    expect(out).toMatch(/tokens\s+the cat sat on the mat/);
    expect(out.match(/^head \d/gm)).toEqual(['head 0', 'head 1', 'head 2', 'head 3']);
    const rows = tableRows(out);
    expect(rows).toHaveLength(6);
    rows.forEach((r, i) => {
      for (let j = i + 1; j < 6; j++) expect(r[j]).toBe(0);
      expect(r[6]).toBeCloseTo(1, 4);
    });
  });

  it('colours the table only on a terminal and honours NO_COLOR', () => {
    expect(run(['demo'], { tty: true }).out).toContain('\x1b[48;2;');
    expect(run(['demo'], { tty: true, env: { NO_COLOR: '1' } }).out).not.toContain('\x1b[');
  });

  it('help for the command and for demo', () => {
    expect(run(['--help']).out).toMatch(/qkv demo/);
    const demoHelp = run(['demo', '--help']);
    expect(demoHelp.code).toBe(0);
    for (const opt of ['--tokens', '--d-model', '--d-k', '--d-v', '--heads', '--causal', '--seed']) {
      expect(demoHelp.out).toContain(opt);
    }
  });

  it.each([
    [['demo', '--bogus'], /Unknown option '--bogus'/],
    [['demo', '--d-k', 'x'], /--d-k must be an integer/],
    [['demo', '--tokens', '0'], /--tokens must be an integer from 1/],
    [['demo', '--heads', '3'], /--d-model 512 is not divisible by --heads 3/],
    [['demo', '--heads', '8', '--d-k', '32'], /--d-k is d_model \/ heads = 64/],
    [['demo', 'extra'], /Unexpected argument 'extra'/],
    // A negative number after an option is its value (parseArgs alone calls it ambiguous); the range says no.
    [['demo', '--seed', '-1'], /demo: --seed must be an integer from 0 to 4294967295, got '-1'/],
    [['demo', '--tokens', '-3'], /--tokens must be an integer from 1 to 64, got '-3'/],
    [['demo', '--d-model', '-.5'], /--d-model must be an integer from 1 to 8192, got '-.5'/],
    [
      ['generate', '--model', 'brown-lm', '--prompt', 'a', '--temperature', '-1'],
      /--temperature must be ≥ 0/,
    ],
    [['frobnicate'], /unknown command 'frobnicate'/],
    // Checked before training (it used to train for minutes, then fail naming a temporary file).
    [
      ['train', '--task', 'pronoun', '--out', '/nonexistent/x.safetensors'],
      /cannot write --out \/nonexistent\/x.safetensors: directory \/nonexistent does not exist/,
    ],
    [
      ['train', '--task', 'copy', '--plot', '/nonexistent/c.svg'],
      /cannot write --plot \/nonexistent\/c.svg: directory \/nonexistent does not exist/,
    ],
    [['train', '--task', 'scaling', '--plot', '/'], /cannot write --plot \/: \/ is a directory/],
  ])('bad usage %j → one line on stderr, exit code 2', (argv, message) => {
    const { code, out, err } = run(argv as string[]);
    expect(code).toBe(2);
    expect(out).toBe('');
    expect(err).toMatch(message);
    expect(err.trim().split('\n')).toHaveLength(1);
  });
});

describe('bundled models by name, limits in --help, plurals', () => {
  it.each([
    ['eval', ['eval', '--task', 'pronoun', '--model', 'pronoum']],
    ['heads', ['heads', '--model', 'nope.safetensors']],
    ['generate', ['generate', '--model', 'no/such', '--prompt', 'the']],
  ])('%s: a missing --model names the bundled models (exit 1)', (command, argv) => {
    const { code, out, err } = run(argv);
    expect(code).toBe(1);
    expect(out).toBe('');
    expect(err).toBe(
      `qkv: ${command}: no such checkpoint '${argv[argv.indexOf('--model') + 1]}' (the bundled models load by name: --model pronoun, --model brown-lm)\n`,
    );
  });

  it('eval: --model pronoun and the default are the bundled file; brown-lm is refused as not a pronoun model', () => {
    const byName = run(['eval', '--task', 'pronoun', '--model', 'pronoun', '--count', '20']);
    expect([byName.code, byName.err]).toEqual([0, '']);
    expect(run(['eval', '--task', 'pronoun', '--count', '20']).out).toBe(byName.out);
    const lm = run(['eval', '--task', 'pronoun', '--model', 'brown-lm']);
    expect(lm.code).toBe(1);
    expect(lm.err).toMatch(/models[/\\]brown-lm\.safetensors' was trained on task 'lm', not pronoun/);
  });

  it('every integer range an error cites is stated on the option in --help', () => {
    // integerOption('cmd', values, 'name', fallback, MIN, MAX) and the commands' int('name', fallback, MIN, MAX).
    const files: Record<string, string> = {
      'main.ts': 'demo',
      'viz.ts': 'viz',
      'eval.ts': 'eval',
      'heads.ts': 'heads',
      'generate.ts': 'generate',
      'train.ts': 'train',
    };
    const literal = /^[\d_ ]+(?:(?:\*\*|<<|-|\+)[\d_ ]+)*$/;
    const value = (expr: string) => Function(`return (${expr})`)() as number;
    let checked = 0;
    for (const [file, command] of Object.entries(files)) {
      const source = readFileSync(fileURLToPath(new URL(`../src/cli/${file}`, import.meta.url)), 'utf8');
      const help = run([command, '--help']).out;
      const calls = source.matchAll(
        /(?:integerOption\('\w+', values, |int\()'([\w-]+)', [^,]+, ([^,()]+), ([^,()]+)\)/g,
      );
      for (const [, name, min, max] of calls) {
        if (!literal.test(min.trim()) || !literal.test(max.trim())) continue; // a bound from the model
        // The option's line and its continuation lines.
        const lines = help.split('\n');
        const start = lines.findIndex((l) => new RegExp(`^  --${name}\\b`).test(l));
        expect(start, `qkv ${command} --help has no --${name}`).toBeGreaterThanOrEqual(0);
        let block = lines[start];
        for (let i = start + 1; i < lines.length && /^\s{8,}\S/.test(lines[i]); i++) block += lines[i];
        expect(block, `qkv ${command} --help, --${name}`).toContain(`${value(min)} to ${value(max)}`);
        checked++;
      }
    }
    expect(checked).toBeGreaterThanOrEqual(17); // the calls above with literal bounds, as of writing
  });

  it('--help states the limits the other errors cite', () => {
    const help = (command: string) => run([command, '--help']).out;
    expect(help('demo')).toContain('at most 64\n                       words');
    expect(help('demo')).toContain('dividing d_model');
    expect(help('viz')).toContain('at most 512');
    expect(help('generate')).toMatch(/in \(0, 1\]/);
    expect(help('generate')).toContain('≥ 0; 0 = greedy');
    expect(help('heads')).toContain('2 to maxLen / 2');
    expect(help('heads')).toContain('at least 2');
    expect(help('eval')).toContain("1 to the model's\n                   maxLen");
    expect(help('eval')).toContain('cannot be combined with --task');
    for (const command of ['eval', 'viz', 'heads', 'generate']) expect(help(command)).toContain('brown-lm');
  });
});

describe('the built bin', () => {
  const bin = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
  it('exists (npm test builds first)', () => {
    expect(existsSync(bin)).toBe(true);
  });
  it('runs the demo and exits 2 on a bad option', () => {
    const ok = spawnSync(process.execPath, [bin, 'demo', '--tokens', '3'], { encoding: 'utf8' });
    expect(ok.status).toBe(0);
    expect(ok.stdout).toMatch(/attention weights\s+\[3,3\]/);
    const bad = spawnSync(process.execPath, [bin, 'demo', '--nope'], { encoding: 'utf8' });
    expect(bad.status).toBe(2);
    expect(bad.stderr.trim()).toMatch(/^qkv: demo: Unknown option '--nope'/);
  });

  it('finds the bundled models by name from any working directory, and says "1 token", "1 sequence"', () => {
    const cwd = mkdtempSync(join(tmpdir(), 'qkv-cwd-'));
    try {
      const qkv = (...args: string[]) =>
        spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', cwd });
      const evaluated = qkv('eval', '--task', 'pronoun', '--model', 'pronoun', '--count', '20');
      expect([evaluated.status, evaluated.stderr]).toEqual([0, '']);
      expect(evaluated.stdout).toMatch(/^accuracy=\d\.\d{4} referent_attention=\d\.\d{4}\n$/);
      const generated = qkv(
        'generate',
        '--model',
        'brown-lm',
        '--prompt',
        'The jury',
        '--max-new-tokens',
        '1',
      );
      expect(generated.status).toBe(0);
      expect(generated.stdout).toMatch(/^The jury/);
      expect(generated.stderr).toMatch(/^1 token in .*\(KV cache; prompt \d+ tokens?\)\n$/);
      const heads = qkv('heads', '--model', 'brown-lm', '--count', '1', '--length', '4');
      expect(heads.status).toBe(0);
      expect(heads.stdout).toMatch(/: 4 layers × 6 heads; 1 sequence of 4 random tokens repeated twice/);
      expect(readdirSync(cwd)).toEqual([]); // nothing written where it ran
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  });
});
