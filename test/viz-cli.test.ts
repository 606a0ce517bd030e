// `qkv viz`: writes a valid SVG and PNG of the shared heatmap, deterministic, with usage errors on one
// stderr line and exit code 2 (in-process and through the built bin).

import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { main } from '../src/cli/main.js';
import { TinyTransformer } from '../src/model/transformer.js';
import { saveCheckpoint } from '../src/train/checkpoint.js';
import {
  heatmapLayout,
  readPngSize,
  seededStack,
  stepViews,
  tokenize,
  traceStack,
} from '../src/viz/index.js';

const dir = mkdtempSync(join(tmpdir(), 'qkv-viz-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function run(argv: string[]) {
  let out = '';
  let err = '';
  const code = main(argv, {
    stdout: { write: (s: string) => (out += s) },
    stderr: { write: (s: string) => (err += s) },
    env: {},
  });
  return { code, out, err };
}

/** The spec the CLI should draw for these options (defaults: d_model 64, 4 heads, d_k 16, 1 layer). */
function expectedSpec(text: string, matrix = 'weights', causal = false) {
  const tokens = tokenize(text);
  const trace = traceStack(seededStack({ dModel: 64, dK: 16, heads: 4, layers: 1, seed: 0 }), tokens, {
    causal,
  });
  return stepViews(trace.steps, tokens).find((v) => v.id === matrix)!.spec;
}

describe('qkv viz', () => {
  it('writes an SVG of the layout size with the tokens as labels', () => {
    const file = join(dir, 'w.svg');
    const { code, out, err } = run(['viz', '--text', 'the cat sat on the mat', '--out', file]);
    expect([code, err]).toEqual([0, '']);
    expect(out).toMatch(
      /^qkv viz: wrote .*w\.svg \(\d+×\d+\): softmax, layer 0 head 0, 6 tokens, seeded untrained weights/,
    );
    const svg = readFileSync(file, 'utf8');
    const L = heatmapLayout(expectedSpec('the cat sat on the mat'));
    expect(svg).toContain(`width="${L.width}" height="${L.height}"`);
    for (const t of ['the', 'cat', 'sat', 'mat']) expect(svg).toContain(`>${t}</text>`);
    expect(svg.match(/<rect x=/g)).toHaveLength(36 + 1);
  });

  it('writes a valid PNG of the layout size × pixel ratio, the same bytes every run', () => {
    const a = join(dir, 'a.png');
    const b = join(dir, 'b.png');
    expect(run(['viz', '--text', 'the cat sat', '--out', a, '--causal', '--matrix', 'masked']).code).toBe(0);
    expect(run(['viz', '--text', 'the cat sat', '--out', b, '--causal', '--matrix', 'masked']).code).toBe(0);
    const bytes = new Uint8Array(readFileSync(a));
    const L = heatmapLayout(expectedSpec('the cat sat', 'masked', true));
    expect(readPngSize(bytes)).toEqual({ width: L.width * 2, height: L.height * 2 });
    expect(Buffer.compare(readFileSync(a), readFileSync(b))).toBe(0);
    expect(run(['viz', '--text', 'the cat sat', '--out', a, '--pixel-ratio', '1']).code).toBe(0);
    expect(readPngSize(new Uint8Array(readFileSync(a))).width).toBe(
      heatmapLayout(expectedSpec('the cat sat')).width,
    );
  });

  it('bad usage: one line on stderr, exit 2, nothing written', () => {
    const cases: [string[], string][] = [
      [['viz', '--out', join(dir, 'x.svg'), '--bogus'], "Unknown option '--bogus'"],
      [['viz'], '--out <file.svg|file.png> is required'],
      [['viz', '--out', join(dir, 'x.jpg')], "--out must end in .svg or .png, got '"],
      [['viz', '--out', join(dir, 'x.svg'), '--matrix', 'nope'], '--matrix must be one of embeddings,'],
      [['viz', '--out', join(dir, 'x.svg'), '--head', '4'], "--head must be an integer from 0 to 3, got '4'"],
      [['viz', '--out', join(dir, 'x.svg'), '--text', '   '], '--text has no tokens'],
    ];
    for (const [argv, message] of cases) {
      const { code, out, err } = run(argv);
      expect(code).toBe(2);
      expect(out).toBe('');
      expect(err).toContain(message);
      expect(err.trim().split('\n')).toHaveLength(1);
    }
    expect(existsSync(join(dir, 'x.svg'))).toBe(false);
  });

  it('--model draws a checkpoint written by qkv train (here: a fresh TinyTransformer), and refuses shape options', () => {
    const vocab = ['the', 'cat', 'sat'];
    const model = new TinyTransformer(
      { vocabSize: 3, dModel: 16, numHeads: 2, numLayers: 2, dFF: 32, maxLen: 8, causal: false },
      { seed: 1 },
    );
    const ckpt = join(dir, 'tiny.safetensors');
    writeFileSync(ckpt, saveCheckpoint(model, { task: 'test', vocab }));
    const out = join(dir, 'tiny.svg');
    const ok = run([
      'viz',
      '--model',
      ckpt,
      '--text',
      'The cat sat',
      '--layer',
      '1',
      '--head',
      '1',
      '--out',
      out,
    ]);
    expect(ok.code).toBe(0);
    expect(ok.out).toContain('layer 1 head 1, 3 tokens, trained checkpoint');
    expect(readFileSync(out, 'utf8')).toContain('>cat</text>');
    expect(run(['viz', '--model', ckpt, '--head', '2', '--out', out]).err).toContain(
      '--head must be an integer from 0 to 1',
    );
    const bad = run(['viz', '--model', ckpt, '--d-model', '8', '--out', out]);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('--d-model cannot be combined with --model');
    const unknown = run(['viz', '--model', ckpt, '--text', 'the dog', '--out', out]);
    expect(unknown.code).toBe(1);
    expect(unknown.err).toContain("'dog' not in the checkpoint's 3-word vocabulary");
  });

  it('--model with a missing file: one line naming it and the bundled models, exit 1 (was a raw ENOENT)', () => {
    const out = join(tmpdir(), 'qkv-viz-missing-model.svg');
    const missing = run(['viz', '--model', 'no/such/model.safetensors', '--out', out]);
    expect(existsSync(out)).toBe(false);
    expect(missing.code).toBe(1);
    expect(missing.err).toBe(
      "qkv: viz: no such checkpoint 'no/such/model.safetensors' (the bundled models load by name: --model pronoun, --model brown-lm)\n",
    );
  });

  it('--model pronoun draws the bundled checkpoint, found from the package, not the working directory', () => {
    const out = join(dir, 'bundled.svg');
    const cwd = process.cwd();
    process.chdir(dir); // models/pronoun.safetensors is not here
    try {
      const ok = run(['viz', '--model', 'pronoun', '--layer', '1', '--out', out]);
      expect([ok.code, ok.err]).toEqual([0, '']);
      expect(ok.out).toMatch(
        /layer 1 head 0, 11 tokens, trained checkpoint .*models[/\\]pronoun\.safetensors \(task pronoun/,
      );
    } finally {
      process.chdir(cwd);
    }
    expect(readFileSync(out, 'utf8')).toContain('>animal</text>');
  });

  it('says "1 token", not "1 tokens"', () => {
    const ok = run(['viz', '--text', 'cat', '--out', join(dir, 'one.svg')]);
    expect(ok.code).toBe(0);
    expect(ok.out).toContain(', 1 token, seeded');
  });

  it('--help lists the options and every limit the errors cite; qkv --help lists the command', () => {
    const help = run(['viz', '--help']).out;
    expect(help).toContain('--matrix <id>');
    for (const limit of [
      'at most 512',
      '1 to 4096',
      '1 to 64',
      '1 to 48',
      '0 to layers − 1',
      '0 to heads − 1',
      '0 to 4294967295',
      '1 to 4',
      'only with --layer 0',
      'cannot be combined with --model',
      'pronoun, brown-lm',
    ]) {
      expect(help).toContain(limit);
    }
    expect(run(['--help']).out).toContain('qkv viz --out <file>');
  });

  it('the built bin exits 2 on a bad option', () => {
    const bin = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
    if (!existsSync(bin))
      throw new Error('dist/cli.js is missing: run `npm run build` first (npm test does)');
    const bad = spawnSync(process.execPath, [bin, 'viz', '--nope'], { encoding: 'utf8' });
    expect(bad.status).toBe(2);
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
  });
});
