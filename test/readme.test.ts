// The README's TypeScript examples run as written (each block in its own scope), so the docs stay true.

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { expect, it } from 'vitest';
import * as qkv from '../src/index.js';

const readme = readFileSync(fileURLToPath(new URL('../README.md', import.meta.url)), 'utf8');
const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);

it('the README has TypeScript examples', () => {
  expect(blocks.length).toBeGreaterThanOrEqual(6);
});

blocks.forEach((code, n) => {
  it(`README example ${n + 1} runs`, async () => {
    const body = code.replace(/^import[\s\S]*?from 'qkv';\n/m, '');
    const js = ts.transpileModule(body, { compilerOptions: { target: ts.ScriptTarget.ES2022 } }).outputText;
    const names = Object.keys(qkv);
    // An async function (examples may await) wrapping a block (so examples may shadow exports).
    const AsyncFunction = (async () => {}).constructor as new (
      ...args: string[]
    ) => (...a: unknown[]) => Promise<void>;
    const run = new AsyncFunction(...names, `{\n${js}\n}`);
    await expect(run(...names.map((k) => (qkv as Record<string, unknown>)[k]))).resolves.toBeUndefined();
  });
});
