// `qkv generate`: streams a decoder checkpoint's continuation of a prompt, the same text with and without
// the cache, and bad usage or an unusable checkpoint gives one clear line and an exit code.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { main } from '../src/cli/main.js';
import { TinyTransformer } from '../src/index.js';
import { saveCheckpoint, WordTokenizer } from '../src/nn/index.js';

const dir = mkdtempSync(join(tmpdir(), 'qkv-generate-'));
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

const words = ['the', 'cat', 'sat', 'on', 'a', 'mat', 'and', 'dog', 'ran', 'far'];
const config = {
  vocabSize: words.length,
  dModel: 16,
  numHeads: 2,
  numLayers: 1,
  dFF: 32,
  maxLen: 24,
  causal: true,
};
const decoder = join(dir, 'decoder.safetensors');
writeFileSync(
  decoder,
  saveCheckpoint(new TinyTransformer(config, { seed: 1 }), { tokenizer: new WordTokenizer(words) }),
);
const bare = join(dir, 'bare.safetensors');
writeFileSync(bare, saveCheckpoint(new TinyTransformer(config, { seed: 1 })));
const encoder = join(dir, 'encoder.safetensors');
writeFileSync(encoder, saveCheckpoint(new TinyTransformer({ ...config, causal: false }, { seed: 1 })));

describe('qkv generate', () => {
  it('prints the prompt and its continuation, the same with --no-cache, and a tokens/s line on stderr', () => {
    const args = [
      'generate',
      '--model',
      decoder,
      '--prompt',
      'the cat',
      '--max-new-tokens',
      '12',
      '--seed',
      '3',
    ];
    const cached = run(args);
    expect(cached.code).toBe(0);
    const text = cached.out.trim().split(' ');
    expect(text.slice(0, 2)).toEqual(['the', 'cat']);
    expect(text).toHaveLength(14);
    for (const w of text) expect(words).toContain(w);
    expect(cached.err).toMatch(
      /^12 tokens in \d+\.\d\d s: \d+(\.\d)? tokens\/s \(KV cache; prompt 2 tokens\)\n$/,
    );
    const uncached = run([...args, '--no-cache']);
    expect(uncached.out).toBe(cached.out);
    expect(uncached.err).toMatch(/\(no cache; prompt 2 tokens\)/);
    const greedy = ['generate', '--model', decoder, '--prompt', 'the cat', '--temperature', '0'];
    const a = run([...greedy, '--max-new-tokens', '22', '--seed', '1']);
    const b = run([...greedy, '--max-new-tokens', '22', '--seed', '2']);
    expect(a.code).toBe(0);
    expect(a.out.trim().split(' ')).toHaveLength(2 + 22); // prompt + new tokens fill maxLen exactly
    expect(b.out).toBe(a.out); // greedy: the seed does not matter
  });

  it('takes token ids and prints ids for a checkpoint without a tokenizer', () => {
    const { code, out } = run(['generate', '--model', bare, '--ids', '1,2,3', '--max-new-tokens', '5']);
    expect(code).toBe(0);
    expect(out.trim()).toMatch(/^\d+(,\d+){4}$/);
  });

  it('says what is wrong in one line', () => {
    const cases: [string[], number, RegExp][] = [
      [['generate', '--prompt', 'x'], 2, /generate: --model <checkpoint> is required/],
      [['generate', '--model', decoder], 2, /give the prompt as --prompt <text> or --ids/],
      [['generate', '--model', decoder, '--prompt', 'the', '--top-p', '2'], 2, /--top-p must be in \(0, 1\]/],
      [
        ['generate', '--model', decoder, '--prompt', 'the', '--temperature', 'hot'],
        2,
        /--temperature must be a number/,
      ],
      [
        ['generate', '--model', decoder, '--prompt', 'the', '--temperature', ''],
        2,
        /--temperature must be a number, got ''/,
      ],
      [['generate', '--model', join(dir, 'none.safetensors'), '--prompt', 'the'], 1, /no such checkpoint/],
      [['generate', '--model', encoder, '--ids', '1'], 1, /is an encoder/],
      [['generate', '--model', bare, '--prompt', 'the'], 1, /stores no tokenizer; give the prompt as --ids/],
      [['generate', '--model', decoder, '--prompt', 'the zebra'], 1, /zebra/],
      [
        ['generate', '--model', decoder, '--prompt', 'the cat', '--max-new-tokens', '30'],
        1,
        /prompt \(2 tokens\) \+ maxNewTokens \(30\) = 32 is longer than maxLen=24/,
      ],
    ];
    for (const [argv, code, message] of cases) {
      const r = run(argv);
      expect(r.code, argv.join(' ')).toBe(code);
      expect(r.err).toMatch(message);
      expect(r.err.trim().split('\n')).toHaveLength(1);
    }
  });
});
