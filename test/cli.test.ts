// The qkv command: demo format and determinism in-process, exit codes through the built bin.

import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
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
});
