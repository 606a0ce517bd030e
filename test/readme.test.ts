// The README's TypeScript examples work as a user would paste them: each block is its own module with
// its own `import … from 'qkv'`, type-checks against the package's types (tsc, strict), and runs.
// Nothing is injected: a block that uses a name it does not import fails here (TS2304), as it would for
// the user. Each block is written to test/.readme-examples/ with 'qkv' pointing at the built Node entry (dist/index.node.js; npm test builds first).

import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { afterAll, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../', import.meta.url));
const readme = readFileSync(`${root}README.md`, 'utf8');
const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
const dir = `${root}test/.readme-examples/`;
rmSync(dir, { recursive: true, force: true });
mkdirSync(dir, { recursive: true });
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// Files as the user's project would see them ('qkv' → the Node entry) and as vitest imports them.
const files = blocks.map((code, n) => {
  const path = `${dir}example-${n + 1}.ts`;
  writeFileSync(path, `${code.replaceAll("from 'qkv'", "from '../../dist/index.node.js'")}\nexport {};\n`);
  return path;
});

it('the README has TypeScript examples, and each imports what it uses from qkv', () => {
  expect(blocks.length).toBeGreaterThanOrEqual(6);
  for (const [n, code] of blocks.entries()) {
    expect(code, `README example ${n + 1} has no import from 'qkv'`).toMatch(
      /^import \{[^}]+\} from 'qkv';/m,
    );
  }
});

it('every example type-checks as its own module (strict)', () => {
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    skipLibCheck: true,
    types: ['node'],
  };
  const program = ts.createProgram(files, options);
  const problems = ts
    .getPreEmitDiagnostics(program)
    .filter((d) => d.file && files.includes(d.file.fileName))
    .map((d) => {
      const { line } = d.file!.getLineAndCharacterOfPosition(d.start ?? 0);
      const n = files.indexOf(d.file!.fileName) + 1;
      return `README example ${n}, line ${line + 1}: TS${d.code} ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`;
    });
  expect(problems).toEqual([]);
});

files.forEach((path, n) => {
  it(`README example ${n + 1} runs`, async () => {
    await expect(import(/* @vite-ignore */ path)).resolves.toBeDefined();
  });
});
