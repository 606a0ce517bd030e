// Structure rules that keep the library portable: nothing reachable from a public entry's browser source
// (package.json "exports": each subpath's "default" target, dist/x.js ↔ src/x.ts) imports node:* (it
// must run in browsers), each Node source ("node" condition) only adds to its browser source, and the
// source has no import cycles.

import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const src = fileURLToPath(new URL('../src/', import.meta.url));
const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));

/** The source file of a dist/ target ('./dist/nn/index.js' → src/nn/index.ts). */
const sourceOf = (target: string) => join(src, target.replace(/^\.\/dist\//, '').replace(/\.js$/, '.ts'));
type Conditions = { node?: string | { default: string }; default: string };
const entries = Object.entries(pkg.exports as Record<string, Conditions | string>)
  .filter(([subpath]) => subpath !== './package.json')
  .map(([subpath, c]) => {
    const conditions = c as Conditions;
    const node = typeof conditions.node === 'object' ? conditions.node.default : conditions.node;
    return { subpath, browser: sourceOf(conditions.default), node: node && sourceOf(node) };
  });

function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const specs = [...text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+'([^']+)'/g)].map((m) => m[1]);
  specs.push(...[...text.matchAll(/import\(\s*'([^']+)'\s*\)/g)].map((m) => m[1]));
  return specs;
}

function resolveLocal(from: string, spec: string): string {
  return resolve(dirname(from), spec.replace(/\.js$/, '.ts'));
}

it('package.json "exports" lists the entries: qkv, qkv/nn, qkv/viz, qkv/io, qkv/onnx', () => {
  expect(entries.map((e) => e.subpath)).toEqual(['.', './nn', './viz', './io', './onnx']);
  expect(relative(src, entries[0].browser)).toBe('index.ts');
  expect(relative(src, entries[0].node!)).toBe('index.node.ts');
});

for (const { subpath, browser } of entries) {
  it(`nothing reachable from '${subpath}' (src/${relative(src, browser)}) imports node:* or a package`, () => {
    const seen = new Set<string>();
    const offenders: string[] = [];
    const visit = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      for (const spec of importsOf(file)) {
        if (spec.startsWith('.')) visit(resolveLocal(file, spec));
        else offenders.push(`${relative(src, file)} imports '${spec}'`);
      }
    };
    visit(browser);
    expect(seen.size).toBeGreaterThan(3); // the walk really followed imports
    expect(offenders).toEqual([]);
  });
}

it('each Node source re-exports its browser source and adds only the Node thread platforms', () => {
  const withNode = entries.filter((e) => e.node);
  expect(withNode.map((e) => e.subpath)).toEqual(['.', './nn']);
  for (const { browser, node } of withNode) {
    const file = node!;
    const self = `./${relative(dirname(file), browser).replace(/\.ts$/, '.js')}`; // './index.js'
    expect(readFileSync(file, 'utf8'), relative(src, file)).toContain(`export * from '${self}';`);
    const others = importsOf(file).filter((spec) => spec !== self);
    expect(others.length, relative(src, file)).toBeGreaterThan(0);
    for (const spec of others) expect(spec, relative(src, file)).toMatch(/\/threads\/(node|train-node)\.js$/);
  }
});

it('src has no import cycles', () => {
  const state = new Map<string, 'open' | 'done'>();
  const cycles: string[] = [];
  const visit = (file: string, path: string[]) => {
    if (state.get(file) === 'done') return;
    if (state.get(file) === 'open') {
      cycles.push([...path.slice(path.indexOf(file)), file].map((f) => relative(src, f)).join(' → '));
      return;
    }
    state.set(file, 'open');
    for (const spec of importsOf(file))
      if (spec.startsWith('.')) visit(resolveLocal(file, spec), [...path, file]);
    state.set(file, 'done');
  };
  for (const { browser, node } of entries) {
    visit(browser, []);
    if (node) visit(node, []);
  }
  visit(join(src, 'cli.ts'), []);
  expect(cycles).toEqual([]);
});
