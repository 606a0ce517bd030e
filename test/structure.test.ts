// Structure rules that keep the library portable: nothing reachable from the public entry imports node:*
// (it must run in browsers), and the source has no import cycles.

import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const src = fileURLToPath(new URL('../src/', import.meta.url));

function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const specs = [...text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+'([^']+)'/g)].map((m) => m[1]);
  specs.push(...[...text.matchAll(/import\(\s*'([^']+)'\s*\)/g)].map((m) => m[1]));
  return specs;
}

function resolveLocal(from: string, spec: string): string {
  return resolve(dirname(from), spec.replace(/\.js$/, '.ts'));
}

it('nothing reachable from src/index.ts imports node:* or a package', () => {
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
  visit(join(src, 'index.ts'));
  expect(seen.size).toBeGreaterThan(5); // the walk really followed imports
  expect(offenders).toEqual([]);
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
  visit(join(src, 'index.ts'), []);
  visit(join(src, 'cli.ts'), []);
  expect(cycles).toEqual([]);
});
