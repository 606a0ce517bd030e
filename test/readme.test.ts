// The TypeScript examples of README.md and docs/*.md work as a user would paste them: every ```ts block
// that imports from 'qkv' (or a subpath: 'qkv/nn', 'qkv/viz', 'qkv/io', 'qkv/onnx') is its own module
// with its own import lines, type-checks against the package's shipped types (tsc, strict), and runs
// with Node. Nothing is injected: a block that uses a name it does not import fails here (TS2304), as it
// would for the user.
// One decision to know: the examples run against the package as a user installs it: `npm pack` (the
// tarball of what package.json's "files" ships, built by npm test first) installed with npm into
// test/.readme-examples/<pid>/, a small app of its own; each block is a module there importing 'qkv', so a
// file missing from the tarball or a wrong "exports" entry fails here. Each block runs in a Node process
// of its own whose working directory is that folder (files a block writes land there, and are removed).

import { execFile, execFileSync } from 'node:child_process';
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import ts from 'typescript';
import { afterAll, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../', import.meta.url));
const documents = [
  'README.md',
  ...readdirSync(`${root}docs`)
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`),
];
const importsQkv = /^import [^;]*? from 'qkv(\/[\w-]+)?';/m;

/** Every ```ts block of every document, with the line its code starts on; those importing qkv are the examples. */
const allBlocks = documents.flatMap((doc) => {
  const text = readFileSync(`${root}${doc}`, 'utf8');
  return [...text.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => ({
    doc,
    code: m[1],
    line: text.slice(0, m.index).split('\n').length + 1,
  }));
});
const examples = allBlocks.filter((b) => importsQkv.test(b.code));

const dir = `${root}test/.readme-examples/${process.pid}/`; // one folder per run: two runs never clash
rmSync(dir, { recursive: true, force: true });
mkdirSync(dir, { recursive: true });
symlinkSync('../../../models', `${dir}models`); // a block may read the committed checkpoints by their path
// The app: qkv from its packed tarball (no scripts run: npm test has built dist/, which the tarball holds).
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const packed = JSON.parse(
  execFileSync(npm, ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], {
    cwd: root,
    encoding: 'utf8',
  }),
) as { filename: string }[];
const tarball = `${dir}${packed[0].filename}`;
writeFileSync(
  `${dir}package.json`,
  JSON.stringify({
    name: 'readme-examples',
    private: true,
    type: 'module',
    dependencies: { qkv: `file:${tarball}` },
  }),
);
execFileSync(
  npm,
  ['install', '--offline', '--ignore-scripts', '--no-audit', '--no-fund', '--no-package-lock'],
  {
    cwd: dir,
    stdio: 'ignore',
  },
);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const named = examples.map((b, n) => {
  const base = `${dir}${b.doc.replace(/\.md$/, '').replace('/', '-')}-${n + 1}`;
  const label = `${b.doc} example at line ${b.line}`;
  writeFileSync(`${base}.ts`, `${b.code}\nexport {};\n`);
  // What Node runs: the same code with the types stripped, import lines untouched.
  const js = ts.transpileModule(b.code, {
    compilerOptions: {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.ESNext,
      verbatimModuleSyntax: true,
    },
  }).outputText;
  writeFileSync(`${base}.mjs`, js);
  return { ...b, label, ts: `${base}.ts`, mjs: `${base}.mjs` };
});

it('the examples resolve qkv to the installed tarball, not to the repository', () => {
  const installed = `${dir}node_modules/qkv/`;
  expect(lstatSync(installed.slice(0, -1)).isSymbolicLink()).toBe(false); // a copy, as a registry install gives
  expect(JSON.parse(readFileSync(`${installed}package.json`, 'utf8')).name).toBe('qkv');
  expect(existsSync(`${installed}dist/index.js`)).toBe(true);
  expect(existsSync(`${installed}test`)).toBe(false); // only what "files" ships
});

it('the README and docs have TypeScript examples, and every block that uses qkv imports it', () => {
  expect(examples.filter((b) => b.doc === 'README.md').length).toBeGreaterThanOrEqual(1);
  expect(examples.filter((b) => b.doc === 'docs/api.md').length).toBeGreaterThanOrEqual(8);
  // A block that calls qkv's API (not onnxruntime's ort.Tensor) with no import line would be skipped silently.
  const uses =
    /(?<![.\w])(Tensor|scaledDotProductAttention|MultiHeadAttention|TinyTransformer|Trainer)\b[.(]/;
  const missing = allBlocks.filter(
    (b) => !importsQkv.test(b.code) && uses.test(b.code) && !/^interface /m.test(b.code),
  );
  expect(missing.map((b) => `${b.doc}:${b.line}`)).toEqual([]);
});

it('every example type-checks as its own module (strict) against the shipped types', () => {
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    skipLibCheck: true,
    types: ['node'],
  };
  const files = named.map((b) => b.ts);
  const program = ts.createProgram(files, options);
  const problems = ts
    .getPreEmitDiagnostics(program)
    .filter((d) => d.file && files.includes(d.file.fileName))
    .map((d) => {
      const { line } = d.file!.getLineAndCharacterOfPosition(d.start ?? 0);
      const b = named[files.indexOf(d.file!.fileName)];
      return `${b.doc}:${b.line + line}: TS${d.code} ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`;
    });
  expect(problems).toEqual([]);
});

const run = promisify(execFile);
for (const b of named) {
  it(`${b.label} runs with Node`, async () => {
    await expect(
      run(process.execPath, [b.mjs], { cwd: dir, timeout: 110_000 }).then(() => 'ran'),
    ).resolves.toBe('ran');
  }, 120_000); // generous: a loaded machine runs the flash kernel's example several times slower
}
