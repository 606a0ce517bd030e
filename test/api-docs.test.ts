// The committed API reference (docs/reference/, written by `npm run docs:api`) names exactly what the
// package's entries export: a new export, or a removed one, without regenerating fails here. Cheap: it
// parses the entries' export lists with the TypeScript parser and reads the generated Markdown; it does
// not run TypeDoc.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const REGENERATE = 'the API reference is out of date: run `npm run docs:api` and commit docs/reference/';

/** A module's exported names; `export * as ns from './x.js'` maps ns to x's file. */
function exportsOf(file: string): { names: string[]; namespaces: Map<string, string> } {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest);
  const names: string[] = [];
  const namespaces = new Map<string, string>();
  for (const stmt of source.statements) {
    const exported =
      ts.canHaveModifiers(stmt) && ts.getModifiers(stmt)?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword);
    if (ts.isExportDeclaration(stmt)) {
      const from = stmt.moduleSpecifier && (stmt.moduleSpecifier as ts.StringLiteral).text;
      const clause = stmt.exportClause;
      if (clause && ts.isNamedExports(clause)) {
        for (const el of clause.elements) names.push(el.name.text);
      } else if (clause && ts.isNamespaceExport(clause) && from) {
        names.push(clause.name.text);
        namespaces.set(clause.name.text, resolve(dirname(file), from.replace(/\.js$/, '.ts')));
      } else {
        throw new Error(
          `${file}: \`export * from '${from}'\` is not supported by this test; name the exports`,
        );
      }
    } else if (exported) {
      const named = stmt as ts.DeclarationStatement | ts.VariableStatement;
      if (ts.isVariableStatement(named)) {
        for (const d of named.declarationList.declarations) names.push(d.name.getText(source));
      } else if (named.name) {
        names.push(named.name.getText(source));
      }
    }
  }
  return { names, namespaces };
}

/** The names a generated module page documents: its `### name` headings, class pages and namespace links. */
function documentedNames(dir: string): Set<string> {
  const page = readFileSync(join(dir, 'README.md'), 'utf8');
  const names = new Set<string>();
  // Markdown escapes '_' (ARTICLE\_SENTENCE) and strikes out deprecated names (~~encodePronoun()~~).
  for (const m of page.matchAll(/^### (?:~~)?([\w\\]+?)(?:\(\))?(?:~~)?$/gm))
    names.add(m[1].replaceAll('\\', ''));
  for (const m of page.matchAll(/^- \[(\w+)\]\(namespaces\//gm)) names.add(m[1]);
  // Every class has its own page.
  if (existsSync(join(dir, 'classes'))) {
    for (const f of readdirSync(join(dir, 'classes'))) names.add(f.replace(/\.md$/, ''));
  }
  return names;
}

function compare(entry: string, dir: string): void {
  expect(
    existsSync(join(dir, 'README.md')),
    `${relative(root, dir)}/README.md is missing; ${REGENERATE}`,
  ).toBe(true);
  const { names, namespaces } = exportsOf(join(root, entry));
  const documented = documentedNames(dir);
  const missing = names.filter((n) => !documented.has(n)).sort();
  expect(missing, `exported by ${entry} but not in ${relative(root, dir)}: ${REGENERATE}`).toEqual([]);
  const stale = [...documented].filter((n) => !names.includes(n)).sort();
  expect(stale, `in ${relative(root, dir)} but no longer exported by ${entry}: ${REGENERATE}`).toEqual([]);
  for (const [ns, file] of namespaces) {
    compare(file.slice(root.length), join(dir, 'namespaces', ns));
  }
}

/** The package's entries: the "exports" subpath, the source file of its browser condition, the reference folder. */
const ENTRIES = [
  { subpath: '.', file: 'src/index.ts', dir: 'qkv' },
  { subpath: './nn', file: 'src/nn/index.ts', dir: 'qkv/nn' },
  { subpath: './viz', file: 'src/viz/index.ts', dir: 'qkv/viz' },
  { subpath: './io', file: 'src/io/index.ts', dir: 'qkv/io' },
  { subpath: './onnx', file: 'src/onnx/index.ts', dir: 'qkv/onnx' },
];

describe('docs/reference (npm run docs:api)', () => {
  const reference = join(root, 'docs/reference');

  for (const { file, dir } of ENTRIES) {
    it(`documents every name ${file} exports ('${dir}'), its namespaces' included, and no other`, () => {
      compare(file, join(reference, dir));
    });
  }

  it('package.json "exports" has exactly these entries, and the index links each', () => {
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
    expect(Object.keys(pkg.exports).filter((k) => k !== './package.json')).toEqual(
      ENTRIES.map((e) => e.subpath),
    );
    const index = readFileSync(join(reference, 'README.md'), 'utf8');
    for (const { dir } of ENTRIES) expect(index).toContain(`(${dir}/README.md)`);
  });

  it('each exported name lives in exactly one entry', () => {
    const homes = new Map<string, string[]>();
    for (const { file } of ENTRIES) {
      for (const name of exportsOf(join(root, file)).names)
        homes.set(name, [...(homes.get(name) ?? []), file]);
    }
    const twice = [...homes].filter(([, files]) => files.length > 1).map(([n, files]) => `${n}: ${files}`);
    expect(twice).toEqual([]);
    expect(homes.size).toBeGreaterThan(100); // the walk read the entries
  });

  it('holds no absolute paths or dates (regenerating elsewhere changes nothing)', () => {
    const files = readdirSync(reference, { recursive: true, encoding: 'utf8' }).filter((f) =>
      f.endsWith('.md'),
    );
    for (const f of files) {
      const text = readFileSync(join(reference, f), 'utf8');
      expect(text, f).not.toContain(root);
      expect(text, f).not.toMatch(/\bDefined in\b|\bGenerated on\b/);
    }
  });
});
