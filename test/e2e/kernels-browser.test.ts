// The built library in real Chromium: the WASM kernel (Chromium validates the relaxed-SIMD build) and its
// backward, float16, and scaledDotProductAttentionAsync on Web Workers, with and without cross-origin
// isolation. The page imports dist/ as plain ES modules from a tiny static server (no bundler involved).

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { extname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM_ARGS, ensureChromium } from './chromium.js';

const repo = fileURLToPath(new URL('../../', import.meta.url));
// biome-ignore lint/suspicious/noExplicitAny: the page's module namespace objects are untyped here
declare const load: (url: string) => Promise<any>;
let context: BrowserContext;
let userDir: string;
const servers: Server[] = [];

/** Serves the repository's dist/ and an empty page; `isolated` adds the COOP/COEP headers. */
function serve(isolated: boolean): Promise<string> {
  const server = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname));
    const headers: Record<string, string> = isolated
      ? { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' }
      : {};
    if (path === '/') {
      res
        .writeHead(200, { ...headers, 'Content-Type': 'text/html' })
        .end('<!doctype html><title>qkv</title>');
      return;
    }
    if (!path.startsWith('/dist/') || path.includes('..')) {
      res.writeHead(404).end();
      return;
    }
    try {
      const body = readFileSync(join(repo, path));
      const type = extname(path) === '.js' ? 'text/javascript' : 'application/octet-stream';
      res.writeHead(200, { ...headers, 'Content-Type': type }).end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  servers.push(server);
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      resolve(`http://127.0.0.1:${port}/`);
    }),
  );
}

async function open(url: string): Promise<{ page: Page; warnings: string[] }> {
  const page = await context.newPage();
  const warnings: string[] = [];
  page.on('console', (m) => m.type() === 'warning' && warnings.push(m.text()));
  // A loader defined from a string: Vitest rewrites import() inside the functions we pass to evaluate.
  await page.addInitScript('window.load = (url) => import(url);');
  await page.goto(url);
  return { page, warnings };
}

beforeAll(async () => {
  userDir = mkdtempSync(join(tmpdir(), 'qkv-kernels-'));
  context = await chromium.launchPersistentContext(userDir, {
    executablePath: ensureChromium(),
    args: CHROMIUM_ARGS,
    headless: true,
  });
}, 60_000);

afterAll(async () => {
  await context?.close();
  for (const s of servers) s.close();
  if (userDir) rmSync(userDir, { recursive: true, force: true });
});

describe('the library in Chromium', () => {
  it('runs the relaxed-SIMD WASM kernel, equal to the reference on every option, and float16', async () => {
    const { page } = await open(await serve(false));
    const result = await page.evaluate(async () => {
      const qkv = await load('/dist/index.js');
      const { Tensor, scaledDotProductAttention: sdpa } = qkv;
      let seed = 1;
      let worst = 0;
      const calls = [
        [[2, 4, 65, 64], [2, 2, 130, 64], [2, 2, 130, 40], { causal: true }],
        [[1, 2, 70, 33], [1, 2, 63, 33], [1, 2, 63, 7], { causal: 'top-left', window: [9, 2] }],
        [[1, 3, 40, 16], [1, 3, 40, 16], [1, 3, 40, 16], { bias: 'heads', mask: 'keys' }],
      ] as const;
      for (const [qs, ks, vs, o] of calls) {
        const q = Tensor.randn(qs, { seed: seed++ });
        const k = Tensor.randn(ks, { seed: seed++ });
        const v = Tensor.randn(vs, { seed: seed++ });
        const options: Record<string, unknown> = { ...o };
        if ('bias' in o) options.bias = Tensor.randn([qs[1], qs[2], ks[2]], { seed: seed++ });
        if ('mask' in o)
          options.mask = new Tensor(
            Float32Array.from({ length: ks[2] }, (_, j) => (j % 4 ? 1 : 0)),
            [ks[2]],
          );
        const want = sdpa(q, k, v, { ...options, kernel: 'reference' }).data;
        const got = sdpa(q, k, v, { ...options, kernel: 'wasm' }).data;
        for (let i = 0; i < want.length; i++) {
          const excess = Math.abs(got[i] - want[i]) - (1e-5 + 1e-4 * Math.abs(want[i]));
          if (!(excess <= 0))
            worst = Math.max(worst, Number.isNaN(excess) ? Number.POSITIVE_INFINITY : excess);
        }
      }
      const x = Tensor.randn([1, 2, 50, 32], { seed: 99 });
      const half = sdpa(x.to('float16'), x.to('float16'), x.to('float16'), { dtype: 'float16' });
      const full = sdpa(
        x.to('float16').to('float32'),
        x.to('float16').to('float32'),
        x.to('float16').to('float32'),
      );
      return {
        support: qkv.kernelSupport(),
        worst,
        halfExact:
          half.dtype === 'float16' &&
          half.data.every((h: number, i: number) => h === full.to('float16').data[i]),
      };
    });
    expect(result.support.wasm).toBe('relaxed-simd');
    expect(result.worst).toBe(0);
    expect(result.halfExact).toBe(true);
  });

  it('runs the WASM attention backward (float32, training) equal to the reference backward', async () => {
    const { page } = await open(await serve(false));
    const result = await page.evaluate(async () => {
      const { Tensor } = await load('/dist/index.js');
      const { planAttention } = await load('/dist/attention/plan.js');
      const { wasmBackward } = await load('/dist/kernels/wasm-backward.js');
      const { flashBackward } = await load('/dist/kernels/backward-flash.js');
      const { referenceBackward } = await load('/dist/kernels/backward.js');
      const { referenceKernel } = await load('/dist/kernels/reference.js');
      const { chooseBackward } = await load('/dist/kernels/registry.js');
      const { backwardAll, forwardAll } = await load('/dist/kernels/types.js');
      // GQA, causal, a bias with its gradient, odd sizes; the reference in float64 on float64 arrays.
      const [B, Hq, Hkv, L, S, E] = [2, 4, 2, 70, 90, 33];
      const q = Tensor.randn([B, Hq, L, E], { seed: 1 });
      const k = Tensor.randn([B, Hkv, S, E], { seed: 2 });
      const v = Tensor.randn([B, Hkv, S, E], { seed: 3 });
      const bias = Tensor.randn([L, S], { seed: 4 });
      const { problem } = planAttention('e2e', q, k, v, { causal: true, bias });
      const f64 = (t: { data: Float32Array }) => Float64Array.from(t.data);
      const p64 = { ...problem, q: f64(q), k: f64(k), v: f64(v), precision: 'float64' };
      const n = B * Hq * L;
      const out = new Float64Array(n * E);
      const lse = new Float64Array(n);
      forwardAll(referenceKernel, p64, { out, lse });
      const dOut = Tensor.randn([n * E], { seed: 5 }).data;
      const grads = (Ctor: Float32ArrayConstructor | Float64ArrayConstructor) => ({
        dq: new Ctor(q.size),
        dk: new Ctor(k.size),
        dv: new Ctor(v.size),
        dbias: new Ctor(L * S),
      });
      const want = grads(Float64Array);
      backwardAll(referenceBackward, p64, { dOut: Float64Array.from(dOut) }, want);
      const p32 = { ...problem, precision: 'float32' };
      const inputs = { dOut, out: Float32Array.from(out), lse };
      let fallbacks = 0;
      const task = flashBackward.task;
      flashBackward.task = (...args: unknown[]) => {
        fallbacks++;
        task(...args);
      };
      const got = grads(Float32Array);
      backwardAll(wasmBackward, p32, inputs, got);
      flashBackward.task = task;
      let worst = 0;
      for (const name of ['dq', 'dk', 'dv', 'dbias'] as const) {
        for (let i = 0; i < want[name].length; i++) {
          const excess = Math.abs(got[name][i] - want[name][i]) - (1e-5 + 1e-4 * Math.abs(want[name][i]));
          if (!(excess <= 0))
            worst = Math.max(worst, Number.isNaN(excess) ? Number.POSITIVE_INFINITY : excess);
        }
      }
      return { chosen: chooseBackward('e2e', 'auto', p32, inputs) === wasmBackward, fallbacks, worst };
    });
    expect(result.chosen).toBe(true);
    expect(result.fallbacks).toBe(0);
    expect(result.worst).toBe(0);
  });

  it('without cross-origin isolation, the async call runs on one thread, equal to the sync one, and says so once', async () => {
    const { page, warnings } = await open(await serve(false));
    const result = await page.evaluate(async () => {
      const { Tensor, scaledDotProductAttention, scaledDotProductAttentionAsync } =
        await load('/dist/index.js');
      const q = Tensor.randn([1, 4, 256, 64], { seed: 1 });
      const a = await scaledDotProductAttentionAsync(q, q, q, { causal: true, threads: 2 });
      const b = await scaledDotProductAttentionAsync(q, q, q, { threads: 2 });
      const sync = scaledDotProductAttention(q, q, q, { causal: true });
      const { getPool } = await load('/dist/attention/async.js');
      return {
        isolated: crossOriginIsolated,
        same: a.data.every((x: number, i: number) => x === sync.data[i]),
        b: b.shape,
        workers: getPool().size,
      };
    });
    expect(result.isolated).toBe(false);
    expect(result.same).toBe(true);
    expect(result.b).toEqual([1, 4, 256, 64]);
    expect(result.workers).toBe(0);
    expect(warnings.filter((w) => w.includes('runs on one thread'))).toHaveLength(1);
    expect(warnings[0]).toMatch(/not cross-origin isolated/);
  });

  it('with COOP/COEP, the async call runs on Web Workers and equals the reference', async () => {
    const { page, warnings } = await open(await serve(true));
    const result = await page.evaluate(async () => {
      const { Tensor, scaledDotProductAttention, scaledDotProductAttentionAsync } =
        await load('/dist/index.js');
      const q = Tensor.randn([1, 4, 300, 32], { seed: 2 });
      const k = Tensor.randn([1, 2, 280, 32], { seed: 3 });
      const v = Tensor.randn([1, 2, 280, 16], { seed: 4 });
      const got = await scaledDotProductAttentionAsync(q, k, v, { causal: true, threads: 2 });
      const want = scaledDotProductAttention(q, k, v, { causal: true, kernel: 'reference' });
      let worst = 0;
      for (let i = 0; i < want.data.length; i++) {
        worst = Math.max(
          worst,
          Math.abs(got.data[i] - want.data[i]) - (1e-5 + 1e-4 * Math.abs(want.data[i])),
        );
      }
      const { getPool } = await load('/dist/attention/async.js');
      return { isolated: crossOriginIsolated, worst, workers: getPool().size };
    });
    expect(result.isolated).toBe(true);
    expect(result.workers).toBe(2);
    expect(result.worst).toBeLessThanOrEqual(0);
    expect(warnings).toEqual([]);
  });

  it('with COOP/COEP, MultiHeadAttention.forwardAsync runs its one job on Web Workers: forward, bit for bit', async () => {
    const { page, warnings } = await open(await serve(true));
    const result = await page.evaluate(async () => {
      const { Tensor, MultiHeadAttention } = await load('/dist/index.js');
      // GQA and causal: the job's tasks wait on one another (Atomics.wait in the workers).
      const mha = new MultiHeadAttention({ embedDim: 96, numHeads: 6, numKvHeads: 2, seed: 3 });
      const x = Tensor.randn([2, 200, 96], { seed: 5 });
      const got = await mha.forwardAsync(x, x, x, { causal: true, threads: 2 });
      const want = mha.forward(x, x, x, { causal: true });
      let differ = 0;
      for (let i = 0; i < want.output.data.length; i++) {
        if (!Object.is(got.output.data[i], want.output.data[i])) differ++;
      }
      return { isolated: crossOriginIsolated, differ, length: got.output.data.length };
    });
    expect(result.isolated).toBe(true);
    expect(result.length).toBe(2 * 200 * 96);
    expect(result.differ).toBe(0);
    expect(warnings).toEqual([]);
  });

  it("moves heads' layouts and sums linear's bias gradient in WASM, bit for bit the element loops", async () => {
    const { page } = await open(await serve(false));
    const result = await page.evaluate(async () => {
      const mm = await load('/dist/kernels/matmul.js');
      const { permuteWasm } = await load('/dist/kernels/ops-wasm.js');
      let s = 9;
      const rand = (n: number) =>
        Float32Array.from({ length: n }, (_, i) => {
          s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
          return i % 97 === 5 ? Number.NaN : i % 89 === 3 ? -0 : (s / 2 ** 32 - 0.5) * 8;
        });
      let differ = 0;
      const same = (a: ArrayLike<number>, b: ArrayLike<number>) => {
        for (let i = 0; i < b.length; i++) if (!Object.is(a[i], b[i])) differ++;
      };
      // swapMiddle [A, B, C, D] → [A, C, B, D] and its accumulating form, on odd sizes.
      const [A, B, C, D] = [3, 65, 17, 17];
      const x = rand(A * B * C * D);
      const want = new Float32Array(x.length);
      const acc = rand(x.length);
      const wantAcc = acc.slice();
      for (let a = 0; a < A; a++)
        for (let b = 0; b < B; b++)
          for (let c = 0; c < C; c++)
            for (let d = 0; d < D; d++) {
              const from = ((a * B + b) * C + c) * D + d;
              const to = ((a * C + c) * B + b) * D + d;
              want[to] = x[from];
              wantAcc[to] = Math.fround(wantAcc[to] + x[from]);
            }
      same(mm.swapMiddle(x, A, B, C, D), want);
      mm.swapMiddleAccumulate(x, A, B, C, D, acc);
      same(acc, wantAcc);
      // Packed q | k | v [N, L, 3, H, E] → three [N, H, L, E], and the heads' gradients added back.
      const [N, L, H, E] = [3, 129, 4, 17];
      const packed = rand(N * L * 3 * H * E);
      const n = N * H * L * E;
      const outs = [0, 1, 2].map(() => new Float32Array(n));
      mm.packedToHeadsParts(packed, N, L, 3, H, E, outs);
      const gs = [0, 1, 2].map(() => rand(n));
      const dst = rand(packed.length);
      const wantDst = dst.slice();
      for (let part = 0; part < 3; part++) {
        const heads = new Float32Array(n);
        for (let b = 0; b < N; b++)
          for (let i = 0; i < L; i++)
            for (let h = 0; h < H; h++)
              for (let e = 0; e < E; e++) {
                const p = (((b * L + i) * 3 + part) * H + h) * E + e;
                const q = ((b * H + h) * L + i) * E + e;
                heads[q] = packed[p];
                wantDst[p] = Math.fround(wantDst[p] + gs[part][q]);
              }
        same(outs[part], heads);
      }
      mm.headsToPackedAccumulateParts(gs, N, L, 3, H, E, dst);
      same(dst, wantDst);
      // linear's bias gradient: float64 column sums, in row order. Each column repeats v, −v (|v| up to
      // 4e19), w (|w| ≤ 4): a w added before the next v is lost to rounding, so the sums depend on the
      // order of the additions.
      const [R, M] = [4001, 17];
      const big = rand(R * M);
      const dy = Float32Array.from({ length: R * M }, (_, i) => {
        const r = Math.floor(i / M);
        const v = big[(r - (r % 3)) * M + (i % M)];
        const w = Number.isNaN(v) ? 1 : v;
        return r % 3 === 2 ? w : r % 3 === 1 ? -w * 1e19 : w * 1e19;
      });
      const db = rand(M).map((v: number) => (Number.isNaN(v) ? 0.5 : v));
      const sums = new Float64Array(M);
      let r = 0;
      for (; r + 4 <= R; r += 4)
        for (let m = 0; m < M; m++)
          sums[m] = sums[m] + dy[r * M + m] + dy[(r + 1) * M + m] + dy[(r + 2) * M + m] + dy[(r + 3) * M + m];
      for (; r < R; r++) for (let m = 0; m < M; m++) sums[m] += dy[r * M + m];
      const wantDb = db.map((v: number, m: number) => v + sums[m]);
      mm.linearGradBias(dy, R, M, db);
      same(db, wantDb);
      const served = permuteWasm(
        [
          {
            from: { data: x, off: 0, strides: [B * C * D, C * D, D] },
            to: { data: new Float32Array(x.length), off: 0, strides: [C * B * D, D, B * D] },
          },
        ],
        [A, B, C, D],
        false,
      );
      return { served, differ };
    });
    expect(result.served).toBe(true);
    expect(result.differ).toBe(0);
  });

  it("runs the autograd's add, scale, AdamW and embedding scatter in WASM, bit for bit the JS loops", async () => {
    const { page } = await open(await serve(false));
    const result = await page.evaluate(async () => {
      const { addWasm, scaleWasm, adamwWasm, scatterAddRowsWasm } = await load('/dist/kernels/ops-wasm.js');
      let s = 3;
      const rand = (n: number) =>
        Float32Array.from({ length: n }, (_, i) => {
          s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
          return i % 97 === 5
            ? Number.NaN
            : i % 89 === 3
              ? -0
              : i % 83 === 1
                ? 3e38
                : (s / 2 ** 32 - 0.5) * 8;
        });
      let differ = 0;
      const same = (a: ArrayLike<number>, b: ArrayLike<number>) => {
        for (let i = 0; i < b.length; i++) if (!Object.is(a[i], b[i])) differ++;
      };
      const served: boolean[] = [];
      const n = 65 * 129; // odd, past the 4096-float threshold
      const a = rand(n);
      const b = rand(n);
      const y = new Float32Array(n);
      served.push(addWasm(a, b, y));
      same(
        y,
        a.map((v, i) => v + b[i]),
      );
      const row = rand(129);
      served.push(addWasm(a, row, y));
      same(
        y,
        a.map((v, i) => v + row[i % 129]),
      );
      const c = Math.PI;
      served.push(scaleWasm(a, y, c, false));
      same(
        y,
        a.map((v) => c * v),
      );
      const acc = b.slice();
      served.push(scaleWasm(a, acc, c, true));
      same(
        acc,
        b.map((v, i) => v + c * a[i]),
      );
      // AdamW: two steps against the JS loop of src/autograd/optim.ts.
      const w = rand(n).map((v) => (Number.isFinite(v) && Math.abs(v) < 1e3 ? v : 0.5));
      const ref = w.slice();
      const [m, v, mr, vr] = [0, 1, 2, 3].map(() => new Float32Array(n));
      for (let t = 1; t <= 2; t++) {
        const g = rand(n);
        const k = {
          b1: 0.9,
          a1: 0.1,
          b2: 0.999,
          a2: 1 - 0.999,
          decay: 0.99,
          stepSize: 0.01 / (1 - 0.9 ** t),
          rc2: 1 / Math.sqrt(1 - 0.999 ** t),
          eps: 1e-8,
        };
        for (let i = 0; i < n; i++) {
          const mi = Math.fround(k.b1 * mr[i] + k.a1 * g[i]);
          const vi = Math.fround(k.b2 * vr[i] + k.a2 * g[i] * g[i]);
          mr[i] = mi;
          vr[i] = vi;
          ref[i] = ref[i] * k.decay - (k.stepSize * mi) / (Math.sqrt(vi) * k.rc2 + k.eps);
        }
        served.push(adamwWasm(w, g, m, v, k));
      }
      same(w, ref);
      same(m, mr);
      same(v, vr);
      // Embedding scatter-add: repeated ids, rows of 17.
      const D = 17;
      const ids = Int32Array.from({ length: 400 }, (_, t) => (t * 7) % 23);
      const dy = rand(400 * D);
      const dt = rand(23 * D);
      const want = dt.slice();
      for (let t = 0; t < 400; t++) for (let d = 0; d < D; d++) want[ids[t] * D + d] += dy[t * D + d];
      served.push(scatterAddRowsWasm(dy, ids, dt, D));
      same(dt, want);
      return { served, differ };
    });
    expect(result.served).toEqual([true, true, true, true, true, true, true]);
    expect(result.differ).toBe(0);
  });

  it("runs training's WASM element-wise ops (cross-entropy, GELU, LayerNorm), float32 within their error bounds of float64", async () => {
    const { page } = await open(await serve(false));
    const result = await page.evaluate(async () => {
      const ops = await load('/dist/autograd/ops.js');
      const { parameter, backward } = await load('/dist/autograd/var.js');
      const { geluForwardWasm } = await load('/dist/kernels/ops-wasm.js');
      const served = geluForwardWasm(new Float32Array(3), new Float32Array(3));
      let s = 5;
      const rand = (n: number) =>
        Float32Array.from({ length: n }, () => {
          s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
          return (s / 2 ** 32 - 0.5) * 8;
        });
      // Worst |float32 − float64| in float32 ulps of the float64 value, over every output and gradient.
      let worst = 0;
      const compare = (a: ArrayLike<number>, b: ArrayLike<number>) => {
        for (let i = 0; i < b.length; i++) {
          const w = b[i];
          const ulp = 2 ** (Math.floor(Math.log2(Math.max(Math.abs(w), 2 ** -126))) - 23);
          worst = Math.max(worst, Math.abs(a[i] - Math.fround(w)) / ulp);
        }
      };
      for (const [N, C] of [
        [5, 17],
        [33, 129],
        [3, 4096],
      ]) {
        const x = rand(N * C);
        const w = rand(C);
        const b = rand(C);
        const targets = Int32Array.from({ length: N }, (_, n) => (n === 1 ? -1 : (n * 7) % C));
        const as = (a: Float32Array, f64: boolean) => (f64 ? Float64Array.from(a) : a.slice());
        // Each op on the same inputs in float32 and float64 Vars: outputs within a rounding, gradients
        // (which sum over rows and cancel) within 1e-5 of the array's largest.
        const gradsClose = (g: ArrayLike<number>, r: ArrayLike<number>) => {
          let scale = 0;
          for (let i = 0; i < r.length; i++) scale = Math.max(scale, Math.abs(r[i]));
          for (let i = 0; i < r.length; i++) {
            if (!(Math.abs(g[i] - r[i]) <= 1e-5 * scale)) worst = Number.POSITIVE_INFINITY;
          }
        };
        const seed = rand(N * C);
        // LayerNorm computes in float64 (within a rounding); GELU and cross-entropy in float32 lanes, within
        // 8e-6 relative here (assembly/simd.ts, ops.ts: (1 + 0.6·|u|)·1e-6 for GELU, |u| ≤ 5.5 at |x| ≤ 4).
        const pair = (
          op: (f64: boolean) => { y: ArrayLike<number>; grads: ArrayLike<number>[] },
          relative = false,
        ) => {
          const a = op(false);
          const r = op(true);
          if (!relative) compare(a.y, r.y);
          else
            for (let i = 0; i < r.y.length; i++) {
              if (!(Math.abs(a.y[i] - r.y[i]) <= 8e-6 * Math.abs(r.y[i]) + 1e-37))
                worst = Number.POSITIVE_INFINITY;
            }
          for (let i = 0; i < a.grads.length; i++) gradsClose(a.grads[i], r.grads[i]);
        };
        pair((f64) => {
          const [px, pw, pb] = [
            parameter(as(x, f64), [N, C]),
            parameter(as(w, f64), [C]),
            parameter(as(b, f64), [C]),
          ];
          const y = ops.layerNorm(px, pw, pb);
          backward(y, seed);
          return { y: y.data, grads: [px.grad, pw.grad, pb.grad] };
        });
        pair((f64) => {
          const px = parameter(as(x, f64), [N, C]);
          const y = ops.gelu(px);
          backward(y, seed);
          return { y: y.data, grads: [px.grad] };
        }, true);
        pair((f64) => {
          const px = parameter(as(x, f64), [N, C]);
          const loss = ops.crossEntropy(px, targets);
          backward(loss);
          return { y: loss.data, grads: [px.grad] };
        }, true);
      }
      return { served, worst };
    });
    expect(result.served).toBe(true);
    expect(result.worst).toBeLessThanOrEqual(2);
  });
});
