// qkv in a Vite-bundled app, in Chromium with COOP/COEP: the app imports the package by its name (a
// node_modules link to this checkout), so package.json's "exports" and "sideEffects" apply as they do for
// users, and the async call must run on ≥ 2 Web Workers and equal the sync one.
// One decision to know: the check is shown able to fail. A control package bundled the same way installs
// its thread platform the old way (an import side effect in a package that says "sideEffects": false, as
// the Node entry did); the bundler drops the installation and the same check sees no worker, while the
// same package with an honest "sideEffects": true gets its workers. Last, package.json's "sideEffects"
// must list exactly the modules that do something when imported (a static scan of src/). The subpath
// entries (qkv/nn, qkv/viz, qkv/io, qkv/onnx) are bundled the same way: each resolves through "exports"
// to its browser file and works next to the main entry (one TinyTransformer class across them).

import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { extname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, chromium } from 'playwright-core';
import ts from 'typescript';
import { build } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM_ARGS, ensureChromium } from './chromium.js';

const repo = fileURLToPath(new URL('../../', import.meta.url));
let dir: string;
let browser: Browser;
const servers: Server[] = [];

/** The app: one async call with threads: 2 and the same call inline, exposed as window.run(). */
const app = (pkg: string) => `
import { Tensor, scaledDotProductAttention, scaledDotProductAttentionAsync } from '${pkg}';
window.run = async () => {
  const q = Tensor.randn([1, 4, 256, 32], { seed: 1 });
  const k = Tensor.randn([1, 2, 300, 32], { seed: 2 });
  const v = Tensor.randn([1, 2, 300, 16], { seed: 3 });
  const got = await scaledDotProductAttentionAsync(q, k, v, { causal: true, threads: 2 });
  const want = scaledDotProductAttention(q, k, v, { causal: true });
  return {
    isolated: crossOriginIsolated,
    shape: got.shape,
    equal: got.data.length === want.data.length && got.data.every((x, i) => x === want.data[i]),
  };
};
`;

/** An app of the subpath entries: a model from qkv through qkv/nn's checkpoints, qkv/viz, qkv/io, qkv/onnx. */
const SUBPATHS_APP = `
import { Tensor, TinyTransformer } from 'qkv';
import * as nn from 'qkv/nn';
import { decodeSafetensors, encodeSafetensors } from 'qkv/io';
import { toOnnx } from 'qkv/onnx';
import { renderHeatmapSvg, seededStack, stepViews, traceStack } from 'qkv/viz';
window.run = async () => {
  const { autograd, loadCheckpoint, saveCheckpoint } = nn;
  const model = new TinyTransformer({ vocabSize: 12, dModel: 16, numHeads: 2, numLayers: 1, dFF: 32, maxLen: 8, causal: true });
  const loaded = loadCheckpoint(saveCheckpoint(model)).model;
  const ids = Int32Array.of(1, 2, 3);
  const a = autograd.noGrad(() => model.forward(ids, 1, 3).logits.data);
  const b = autograd.noGrad(() => loaded.forward(ids, 1, 3).logits.data);
  const tokens = ['the', 'cat', 'sat'];
  const trace = traceStack(seededStack({ dModel: 16, dK: 8, heads: 2, layers: 1, seed: 0 }), tokens);
  const svg = renderHeatmapSvg(stepViews(trace.steps, tokens)[0].spec);
  const decoded = decodeSafetensors(encodeSafetensors({ x: Tensor.from([[1, 2]]) }));
  return {
    sameModel: loaded instanceof TinyTransformer && a.length === 36 && a.every((x, i) => x === b[i]),
    svg: svg.startsWith('<svg'),
    tensors: Object.keys(decoded.tensors),
    onnx: toOnnx(model).length > 0,
    nodeTrainPlatform: 'nodeTrainPlatform' in nn,
  };
};
`;

// The control: the old way, module state that the package's entry sets when it is imported.
const CONTROL_THREADS = `
import { createRuntime } from 'qkv';
export { Tensor, scaledDotProductAttention } from 'qkv';
const none = {
  name: 'none',
  cores: () => 1,
  sharedMemoryUnavailable: () => 'no thread platform was installed',
  createWorker() { throw new Error('no thread platform'); },
};
let runtime = createRuntime({ platform: none });
export function setThreadPlatform(platform) { runtime = createRuntime({ platform }); }
export function scaledDotProductAttentionAsync(q, k, v, options) {
  return runtime.scaledDotProductAttentionAsync(q, k, v, options);
}
`;
const CONTROL_INDEX = `
import { defaultRuntime } from 'qkv';
import { setThreadPlatform } from './threads.js';
setThreadPlatform(defaultRuntime.platform); // what src/index.node.ts did with worker_threads
export * from './threads.js';
`;

/** Builds `source` (main.js of a page) with Vite into its own directory; returns that directory. */
async function bundle(name: string, source: string): Promise<string> {
  const root = join(dir, name);
  mkdirSync(root);
  writeFileSync(
    join(root, 'index.html'),
    '<!doctype html><title>qkv</title><script type="module" src="./main.js"></script>',
  );
  writeFileSync(join(root, 'main.js'), source);
  const outDir = join(dir, `${name}-dist`);
  await build({
    root,
    configFile: false,
    logLevel: 'warn',
    build: { outDir, emptyOutDir: true, target: 'es2022' },
    worker: { format: 'es' },
  });
  return outDir;
}

/** Serves `root` with the COOP/COEP headers that give the page SharedArrayBuffer. */
function serve(root: string): Promise<string> {
  const server = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname));
    const file = join(root, path === '/' ? 'index.html' : path);
    const headers = {
      'Cross-Origin-Opener-Policy': 'same-origin',
      'Cross-Origin-Embedder-Policy': 'require-corp',
      'Content-Type': extname(file) === '.html' ? 'text/html' : 'text/javascript',
    };
    let body: Buffer;
    try {
      if (relative(root, file).startsWith('..')) throw new Error('outside the root');
      body = readFileSync(file);
    } catch {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, headers).end(body);
  });
  servers.push(server);
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve(`http://127.0.0.1:${(server.address() as { port: number }).port}/`),
    ),
  );
}

/** Runs the bundled page; counts the Web Workers it made and those that answered, from outside the library. */
async function runPage(outDir: string) {
  const page = await browser.newPage();
  const warnings: string[] = [];
  page.on('console', (m) => m.type() === 'warning' && warnings.push(m.text()));
  await page.addInitScript(`
    window.__workers = { made: 0, answered: 0 };
    const Native = window.Worker;
    window.Worker = class extends Native {
      constructor(url, options) {
        super(url, options);
        window.__workers.made++;
        let first = true;
        this.addEventListener('message', () => first && ((first = false), window.__workers.answered++));
      }
    };
  `);
  await page.goto(await serve(outDir));
  await page.waitForFunction(() => typeof (window as { run?: unknown }).run === 'function');
  const result = await page.evaluate(async () => {
    const w = window as unknown as { run: () => Promise<Record<string, unknown>>; __workers: object };
    return { ...(await w.run()), ...w.__workers };
  });
  await page.close();
  return { ...result, warnings } as {
    isolated: boolean;
    shape: number[];
    equal: boolean;
    made: number;
    answered: number;
    warnings: string[];
  };
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'qkv-bundled-'));
  mkdirSync(join(dir, 'node_modules'));
  symlinkSync(repo, join(dir, 'node_modules', 'qkv'), 'dir');
  browser = await chromium.launch({ executablePath: ensureChromium(), args: CHROMIUM_ARGS, headless: true });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  for (const s of servers) s.close();
  if (!dir) return;
  unlinkSync(join(dir, 'node_modules', 'qkv')); // the link to this checkout goes first, on its own
  rmSync(dir, { recursive: true, force: true });
});

describe('qkv bundled by Vite', () => {
  it('runs the async call on ≥ 2 Web Workers, equal to the sync call', async () => {
    const got = await runPage(await bundle('app', app('qkv')));
    expect(got.isolated).toBe(true);
    expect(got.made).toBeGreaterThanOrEqual(2);
    expect(got.answered).toBeGreaterThanOrEqual(2);
    expect(got.equal).toBe(true);
    expect(got.shape).toEqual([1, 4, 256, 16]);
    expect(got.warnings).toEqual([]);
  }, 60_000);

  it('bundles the subpath entries by their browser conditions, working together with the main entry', async () => {
    const got = (await runPage(await bundle('subpaths', SUBPATHS_APP))) as unknown as Record<string, unknown>;
    expect(got).toMatchObject({
      sameModel: true,
      svg: true,
      tensors: ['x'],
      onnx: true,
      nodeTrainPlatform: false, // qkv/nn's browser file: the Node-only training platform is not in it
      made: 0, // nothing here asks for threads
      warnings: [],
    });
  }, 60_000);

  it('the check fails on a platform installed by an import side effect: the bundler drops it', async () => {
    const control = join(dir, 'node_modules', 'qkv-side-effect');
    mkdirSync(control);
    writeFileSync(join(control, 'threads.js'), CONTROL_THREADS);
    writeFileSync(join(control, 'index.js'), CONTROL_INDEX);
    const runs = [];
    for (const sideEffects of [false, true]) {
      writeFileSync(
        join(control, 'package.json'),
        JSON.stringify({ name: 'qkv-side-effect', type: 'module', exports: './index.js', sideEffects }),
      );
      runs.push(await runPage(await bundle(`control-${sideEffects}`, app('qkv-side-effect'))));
    }
    const [trusted, honest] = runs;
    // "sideEffects": false, trusted: the installation is gone, the call runs inline and says so once.
    expect(trusted).toMatchObject({ isolated: true, equal: true, made: 0, answered: 0 });
    expect(trusted.warnings).toEqual([
      'qkv: scaledDotProductAttentionAsync runs on one thread: no thread platform was installed',
    ]);
    // The same package with an honest flag keeps the installation and gets its workers.
    expect(honest).toMatchObject({ isolated: true, equal: true });
    expect(honest.made).toBeGreaterThanOrEqual(2);
  }, 120_000);
});

describe('package.json "sideEffects"', () => {
  // A module has import side effects when a top-level statement does something (a call, an assignment,
  // a loop, an if): declarations, imports and exports do not. Initialisers of declarations are not
  // looked into; those that create objects are marked /* @__PURE__ */ by habit.
  function topLevelEffects(file: string): string[] {
    const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022, true);
    return source.statements
      .filter(
        (s) =>
          !ts.isImportDeclaration(s) &&
          !ts.isExportDeclaration(s) &&
          !ts.isExportAssignment(s) &&
          !ts.isFunctionDeclaration(s) &&
          !ts.isClassDeclaration(s) &&
          !ts.isInterfaceDeclaration(s) &&
          !ts.isTypeAliasDeclaration(s) &&
          !ts.isEnumDeclaration(s) &&
          !ts.isModuleDeclaration(s) &&
          !ts.isVariableStatement(s) &&
          !ts.isEmptyStatement(s),
      )
      .map((s) => `${relative(repo, file)}: ${s.getText().split('\n')[0]}`);
  }

  function sources(at: string): string[] {
    return readdirSync(at).flatMap((name) => {
      const full = join(at, name);
      if (statSync(full).isDirectory()) return sources(full);
      return full.endsWith('.ts') && !full.endsWith('.d.ts') ? [full] : [];
    });
  }

  it('lists exactly the modules that do something when imported', () => {
    const declared: string[] = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')).sideEffects;
    const withEffects = sources(join(repo, 'src')).filter((f) => topLevelEffects(f).length > 0);
    const expected = withEffects.map(
      (f) => `./dist/${relative(join(repo, 'src'), f).replace(/\.ts$/, '.js')}`,
    );
    expect([...declared].sort()).toEqual(expected.sort());
  });
});
