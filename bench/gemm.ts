// GEMM bench (issue 10): GFLOP/s per thread of qkv's WASM GEMM against the JS loops it replaced in `linear`
// and tfjs-wasm's matMul, on the MHA projection and the training model's MLP shapes, forward and backward.
// One decision to know: the machine is shared, so every row is checked first, then the implementations
// are timed round-robin (interleaved) and medians reported, by wall clock and by this process's CPU time;
// the relaxed-SIMD (FMA) rows run in a child process started with Node 20's flag. It also measures the
// core's SIMD128 arithmetic peak (a register-only loop, compiled here from AssemblyScript), the ceiling
// any WASM kernel's GFLOP/s is read against: the plain build's multiply-then-add and the FMA build's.
//
//   npm run build && npx tsc -p bench/tsconfig.json && node bench/dist/gemm.js [--rounds 15] [--quick]
//   node bench/dist/gemm.js --drift [seconds]   (the machine's speed, 0.2 s at a time)
//   node bench/dist/gemm.js --pipes             (whether a SIMD multiply and add run side by side)

import { spawnSync } from 'node:child_process';
import { availableParallelism, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parentPort, Worker } from 'node:worker_threads';
import { RELAXED_SIMD_FLAG } from './jobs.js';

type GemmModule = typeof import('../dist/kernels/gemm.js');
type GemmProblem = import('../dist/kernels/gemm.js').GemmProblem;
type Floats = Float32Array | Float64Array;
type Run = () => void;

const lib = (path: string) => new URL(`../../dist/${path}`, import.meta.url).href; // from bench/dist/
const { gemm, referenceGemmKernel, geluTanh } = (await import(lib('kernels/gemm.js'))) as GemmModule;
const runtime = (await import(lib('kernels/wasm-runtime.js'))) as { wasmVariant?: string }; // a live binding

interface Shape {
  name: string;
  M: number;
  N: number;
  K: number;
  transA?: boolean;
  transB?: boolean;
  bias?: boolean;
  accumulate?: boolean;
  gelu?: boolean;
}

// x [1024, 512]·Wᵀ: MultiHeadAttention's projections (embedDim 512); [2048, 128]×[512, 128]ᵀ: the T1 model's
// MLP (16 × 128 tokens, d_model 128, MLP 512); each with its backward products (dX += dY·W, dW += dYᵀ·X:
// the autograd accumulates both into gradient buffers).
const SHAPES: Shape[] = [
  { name: 'MHA proj  y = x·Wᵀ + b', M: 1024, N: 512, K: 512, transB: true, bias: true },
  { name: 'MHA proj  dX += dY·W', M: 1024, N: 512, K: 512, accumulate: true },
  { name: 'MHA proj  dW += dYᵀ·X', M: 512, N: 512, K: 1024, transA: true, accumulate: true },
  { name: 'MLP up    y = x·Wᵀ + b', M: 2048, N: 512, K: 128, transB: true, bias: true },
  { name: 'MLP up    GELU(x·Wᵀ + b)', M: 2048, N: 512, K: 128, transB: true, bias: true, gelu: true },
  { name: 'MLP down  y = x·Wᵀ + b', M: 2048, N: 128, K: 512, transB: true, bias: true },
  { name: 'MLP up    dX += dY·W', M: 2048, N: 128, K: 512, accumulate: true },
  { name: 'MLP up    dW += dYᵀ·X', M: 512, N: 128, K: 2048, transA: true, accumulate: true },
];

function random(n: number, seed: number): Float32Array {
  const x = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    x[i] = s / 2 ** 32 - 0.5;
  }
  return x;
}

function problemOf(s: Shape, seed: number): GemmProblem {
  return {
    M: s.M,
    N: s.N,
    K: s.K,
    a: random(s.M * s.K, seed),
    b: random(s.K * s.N, seed + 1),
    transA: !!s.transA,
    transB: !!s.transB,
    bias: s.bias ? random(s.N, seed + 2) : undefined,
    accumulate: s.accumulate,
    gelu: s.gelu,
    precision: 'float32',
  };
}

/** Float32 error bound per element on 16 sampled rows (γ_{K+3}·Σ|terms|, as test/gemm.test.ts). */
function check(p: GemmProblem, c0: Float32Array, got: Float32Array): string | undefined {
  const abs = (x?: Float32Array | Float64Array) => x?.map(Math.abs);
  for (let r = 0; r < 16; r++) {
    const m = Math.floor((r * (p.M - 1)) / 15);
    const want = Float64Array.from(c0);
    referenceGemmKernel.rows(p, want, m, m + 1);
    const mag = Float64Array.from(c0, Math.abs);
    if (!p.accumulate) mag.fill(0);
    const absProblem = { ...p, a: abs(p.a)!, b: abs(p.b)!, bias: abs(p.bias), gelu: false, accumulate: true };
    referenceGemmKernel.rows(absProblem, mag, m, m + 1);
    const u = 2 ** -24;
    for (let j = 0; j < p.N; j++) {
      const i = m * p.N + j;
      const tol = ((p.K + 3) * u * mag[i]) / (1 - (p.K + 3) * u) + (p.gelu ? 1e-5 * Math.abs(want[i]) : 0);
      if (!(Math.abs(got[i] - want[i]) <= 1.13 * tol + 1e-30))
        return `row ${m}, col ${j}: ${got[i]} vs ${want[i]}`;
    }
  }
  return undefined;
}

interface Impl {
  name: string;
  /** Sets up (untimed) and returns one run writing into `c` (reset to c0 before each run). */
  prepare(p: GemmProblem, c: Float32Array): Run | undefined;
}

const qkvWasm: Impl = { name: 'qkv wasm', prepare: (p, c) => () => gemm(p, c, 'wasm') };

// The JS loops the GEMM replaces: src/kernels/matmul.ts's three products before it (float64 sums, llm.c's
// matmul_forward), kept here so the baseline stays put now that matmul.ts calls the GEMM.
function jsLinear(x: Floats, N: number, K: number, W: Floats, M: number, b?: Floats): Float32Array {
  const y = new Float32Array(N * M); // y[N, M] = x[N, K]·W[M, K]ᵀ + b
  for (let n = 0; n < N; n++) {
    for (let m = 0; m < M; m++) {
      let acc = b ? b[m] : 0;
      for (let k = 0; k < K; k++) acc += x[n * K + k] * W[m * K + k];
      y[n * M + m] = acc;
    }
  }
  return y;
}

function jsGradInput(dy: Floats, N: number, M: number, W: Floats, K: number, dx: Floats): void {
  const row = new Float64Array(K); // dx[N, K] += dy[N, M]·W[M, K], a row summed in float64
  for (let n = 0; n < N; n++) {
    row.fill(0);
    for (let m = 0; m < M; m++) {
      const g = dy[n * M + m];
      for (let k = 0; k < K; k++) row[k] += g * W[m * K + k];
    }
    for (let k = 0; k < K; k++) dx[n * K + k] += row[k];
  }
}

function jsGradWeight(dy: Floats, N: number, M: number, x: Floats, K: number, dW: Floats): void {
  for (let n = 0; n < N; n++) {
    for (let m = 0; m < M; m++) {
      const g = dy[n * M + m]; // dW[M, K] += dy[N, M]ᵀ·x[N, K]
      for (let k = 0; k < K; k++) dW[m * K + k] += g * x[n * K + k];
    }
  }
}

const jsLoops: Impl = {
  name: 'JS loops',
  prepare(p, c) {
    if (!p.transA && p.transB) {
      return () => {
        const y = jsLinear(p.a, p.M, p.K, p.b, p.N, p.bias); // x [M, K]·W [N, K]ᵀ
        if (p.gelu) for (let i = 0; i < y.length; i++) y[i] = geluTanh(y[i]); // the autograd's gelu loop
        c.set(y);
      };
    }
    if (!p.transA && !p.transB) return () => jsGradInput(p.a, p.M, p.K, p.b, p.N, c); // dY [M, K]·W [K, N]
    if (p.transA && !p.transB) return () => jsGradWeight(p.a, p.K, p.M, p.b, p.N, c); // dY [K, M]ᵀ·X [K, N]
    return undefined;
  },
};

async function tfjsImpl(): Promise<Impl | undefined> {
  try {
    await import('@tensorflow/tfjs-backend-wasm');
    const tf = await import('@tensorflow/tfjs-core');
    await tf.setBackend('wasm');
    await tf.ready();
    return {
      name: 'tfjs-wasm',
      prepare(p, c) {
        if (p.gelu) return undefined; // no GELU op in tfjs-core
        // Its best layout: a weight transposed once, untimed ([K, N]), as its transposeB path is slow.
        const [A, B] = [p.a as Float32Array, p.b as Float32Array];
        const a = p.transA ? tf.tensor2d(A, [p.K, p.M]) : tf.tensor2d(A, [p.M, p.K]);
        const b = p.transB
          ? tf.tidy(() => tf.transpose(tf.tensor2d(B, [p.N, p.K])))
          : tf.tensor2d(B, [p.K, p.N]);
        const bias = p.bias && tf.tensor1d(p.bias as Float32Array);
        return () => {
          const y = tf.tidy(() => {
            // Aᵀ transposed explicitly, inside the timed run: matMul's transposeA path runs at < 1 GFLOP/s.
            let r = tf.matMul(p.transA ? tf.transpose(a) : a, b);
            if (bias) r = tf.add(r, bias);
            if (p.accumulate) r = tf.add(r, tf.tensor2d(c, [p.M, p.N]));
            return r;
          });
          c.set(y.dataSync() as Float32Array);
          y.dispose();
        };
      },
    };
  } catch {
    return undefined;
  }
}

const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];

// Independent chains c = c·a + b of 4 lanes, all in registers, nothing loaded: `peak8` and `peak12` (8 or
// 12 chains, enough to cover a multiply-add's latency on both SIMD ports; which runs faster depends on the
// core and the build, so both are timed and the faster counts).
function peakFunction(chains: number): string {
  const c = Array.from({ length: chains }, (_, i) => `c${i}`);
  const init = c.map((v, i) => `let ${v} = f32x4.splat(${(0.1 + 0.05 * i).toFixed(2)});`).join(' ');
  const body = c.map((v) => `${v} = step(${v}, a, b);`).join(' ');
  const sum = c.reduce((x, y) => `f32x4.add(${x}, ${y})`);
  return `export function peak${chains}(n: i32, x: f32): f32 {
  const a = f32x4.splat(x);
  const b = f32x4.splat(<f32>1 - x);
  ${init}
  for (let i = 0; i < n; i++) { ${body} }
  return f32x4.extract_lane(${sum}, 0);
}`;
}
const PEAK_CHAINS = [8, 12];
const PEAK_SOURCE = `@inline function step(c: v128, a: v128, b: v128): v128 {
  if (ASC_FEATURE_RELAXED_SIMD) return f32x4.relaxed_madd(c, a, b);
  return f32x4.add(f32x4.mul(c, a), b);
}
${PEAK_CHAINS.map(peakFunction).join('\n')}`;

/** Compiles register-only AssemblyScript loops (the peak probe's, --pipes') and instantiates them. */
async function compileLoops(source: string, features: string[]): Promise<WebAssembly.Instance> {
  const { default: asc } = await import('assemblyscript/asc');
  const { binary, error } = await asc.compileString(source, {
    optimizeLevel: 3,
    runtime: 'stub',
    noAssert: true,
    enable: features,
  });
  if (error || !binary) throw new Error(`the loops did not compile: ${error?.message}`);
  return WebAssembly.instantiate(new WebAssembly.Module(Uint8Array.from(binary)));
}

/**
 * A probe of one core's SIMD128 peak: each call returns one GFLOP/s sample (the faster of the 8- and
 * 12-chain loops, ~40 ms each), the plain build's multiply-then-add or, with `fma`, the relaxed build's
 * fused multiply-add (which needs relaxed SIMD to validate). measure() takes a sample every round, beside
 * the rows, so the peak is read under the same load as they are. undefined when it cannot be compiled.
 */
async function peakProbe(fma: boolean): Promise<(() => number) | undefined> {
  try {
    const instance = await compileLoops(PEAK_SOURCE, fma ? ['simd', 'relaxed-simd'] : ['simd']);
    const loops = PEAK_CHAINS.map((chains) => {
      const peak = instance.exports[`peak${chains}`] as (n: number, x: number) => number;
      const time = (n: number) => {
        const t0 = performance.now();
        peak(n, 0.999);
        return performance.now() - t0;
      };
      let n = 1 << 16; // doubled until a run takes 40 ms
      while (n < 1 << 30 && time(n) < 40) n *= 2;
      return () => (n * chains * 8) / time(n) / 1e6; // 4 lanes × (multiply + add)
    });
    return () => Math.max(...loops.map((sample) => sample()));
  } catch {
    return undefined;
  }
}

// `--pipes`: whether a SIMD multiply and a SIMD add run side by side. Three register-only loops: 6 chains
// c = c·a, 6 chains d = d + a, and both at once (12 independent chains, 13 registers, no spills). If the
// core had separate multiply and add pipes, the mixed loop would run about twice as many operations a
// second as either alone (its 12 per step against their 6); if they share pipes, about as many.
const PIPES_SOURCE = (() => {
  const chains = Array.from({ length: 6 }, (_, i) => i);
  const loop = (name: string, body: (i: number) => string, vars: string[]) => `
export function ${name}(n: i32, x: f32): f32 {
  const a = f32x4.splat(x);
  ${chains.map((i) => vars.map((v) => `let ${v}${i} = f32x4.splat(${(0.5 + 0.01 * i).toFixed(2)});`).join(' ')).join(' ')}
  for (let i = 0; i < n; i++) { ${chains.map(body).join(' ')} }
  return ${chains.map((i) => vars.map((v) => `f32x4.extract_lane(${v}${i}, 0)`).join(' + ')).join(' + ')};
}`;
  return [
    loop('mulOnly', (i) => `c${i} = f32x4.mul(c${i}, a);`, ['c']),
    loop('addOnly', (i) => `d${i} = f32x4.add(d${i}, a);`, ['d']),
    loop('mixed', (i) => `c${i} = f32x4.mul(c${i}, a); d${i} = f32x4.add(d${i}, a);`, ['c', 'd']),
  ].join('\n');
})();

/** Runs the --pipes loops in 5 interleaved rounds; prints each one's median SIMD operations per ns. */
async function pipes(): Promise<void> {
  const instance = await compileLoops(PIPES_SOURCE, ['simd']);
  const loops = { mulOnly: 6, addOnly: 6, mixed: 12 };
  const samples: Record<string, number[]> = { mulOnly: [], addOnly: [], mixed: [] };
  const n = 2e7;
  for (let round = 0; round < 5; round++) {
    for (const [name, ops] of Object.entries(loops)) {
      const f = instance.exports[name] as (n: number, x: number) => number;
      f(1e5, 0.999); // compiled and warm
      const t0 = performance.now();
      f(n, 0.9999);
      samples[name].push((n * ops) / ((performance.now() - t0) * 1e6));
    }
  }
  const med = (name: string) => median(samples[name]).toFixed(2);
  console.log(
    `SIMD f32x4 operations per ns, one core, median of 5 rounds: multiplies alone ${med('mulOnly')}, ` +
      `adds alone ${med('addOnly')}, both at once ${med('mixed')}`,
  );
}

interface Row {
  shape: string;
  impl: string;
  wall: number; // GFLOP/s, median
  cpu: number;
  note?: string;
}

/**
 * Checks every implementation on every shape, then times them round-robin; `probe` (peakProbe's), when
 * given, is sampled once a round. Returns the rows and the median of the probe's samples.
 */
function measure(
  impls: Impl[],
  rounds: number,
  shapes: Shape[],
  probe?: () => number,
): { rows: Row[]; peak?: number } {
  const rows: Row[] = [];
  const peaks: number[] = [];
  for (const [n, s] of shapes.entries()) {
    const p = problemOf(s, 10 * n + 1);
    const flops = 2 * s.M * s.N * s.K;
    const c0 = random(s.M * s.N, 10 * n + 5);
    const live: { impl: Impl; run: Run; c: Float32Array; wall: number[]; cpu: number[]; reps: number }[] = [];
    for (const impl of impls) {
      const c = Float32Array.from(c0);
      const run = impl.prepare(p, c);
      if (!run) continue;
      const t0 = performance.now();
      run();
      const first = performance.now() - t0;
      const wrong = check(p, c0, c);
      if (wrong) {
        rows.push({
          shape: s.name,
          impl: impl.name,
          wall: Number.NaN,
          cpu: Number.NaN,
          note: `wrong: ${wrong}`,
        });
        continue;
      }
      run(); // warm-up (JIT tiers)
      live.push({
        impl,
        run,
        c,
        wall: [],
        cpu: [],
        reps: Math.max(1, Math.ceil(40 / Math.max(first, 0.01))),
      });
    }
    for (let round = 0; round < rounds; round++) {
      for (const x of live) {
        const t0 = performance.now();
        const u0 = process.cpuUsage();
        for (let r = 0; r < x.reps; r++) {
          x.c.set(c0);
          x.run();
        }
        const u = process.cpuUsage(u0);
        x.wall.push((performance.now() - t0) / x.reps);
        x.cpu.push((u.user + u.system) / 1000 / x.reps);
      }
      if (probe) peaks.push(probe());
    }
    for (const x of live) {
      rows.push({
        shape: s.name,
        impl: x.impl.name,
        wall: flops / median(x.wall) / 1e6,
        cpu: flops / median(x.cpu) / 1e6,
      });
    }
  }
  return { rows, peak: peaks.length ? median(peaks) : undefined };
}

/** Samples the probe takes per core in peakAllCores (the median is kept). */
const ALL_CORES_SAMPLES = 5;

/**
 * The plain SIMD128 peak per core while every core runs the probe at once: this thread and a worker per
 * other core sample it together (workers compile it first, then all start on one message), the median
 * of every thread's samples. Read against the one-core peak, it bounds how a kernel at the peak can scale
 * with threads on this machine (cores that share a physical core or a power budget slow each other).
 */
async function peakAllCores(): Promise<number | undefined> {
  const probe = await peakProbe(false);
  const cores = availableParallelism();
  if (!probe || cores < 2) return undefined;
  const self = fileURLToPath(import.meta.url);
  const workers = Array.from({ length: cores - 1 }, () => new Worker(self, { argv: ['--peak-worker'] }));
  try {
    const message = (w: Worker) =>
      new Promise<unknown>((resolve, reject) => {
        w.once('message', resolve);
        w.once('error', reject);
      });
    const ready = await Promise.all(workers.map(message));
    if (ready.some((r) => r !== 'ready')) return undefined;
    const results = workers.map(message);
    for (const w of workers) w.postMessage('go');
    const samples = Array.from({ length: ALL_CORES_SAMPLES }, () => probe());
    for (const r of await Promise.all(results)) samples.push(...(r as number[]));
    return median(samples);
  } finally {
    for (const w of workers) void w.terminate();
  }
}

const args = process.argv.slice(2);
const rounds = Number(args[args.indexOf('--rounds') + 1]) || (args.includes('--quick') ? 5 : 15);
const shapes = args.includes('--quick') ? SHAPES.filter((_, i) => i % 3 === 0) : SHAPES;

/**
 * `--drift [seconds]`: how this machine's speed moves from one moment to the next. Runs qkv's GEMM on the
 * projection shape back to back for `seconds` (default 60) and prints the GFLOP/s of each 0.2 s window,
 * then their spread. On the project's VM it moves between about 14 and 32 GFLOP/s within seconds, which is
 * why the bench interleaves the rows a target compares run by run (spawn.ts's interleave).
 */
function drift(seconds: number): void {
  const p = problemOf({ name: 'drift', M: 256, N: 512, K: 512, transB: true }, 7);
  const c = new Float32Array(p.M * p.N);
  const flop = 2 * p.M * p.N * p.K;
  const windows: number[] = [];
  const t0 = performance.now();
  let line: string[] = [];
  while (performance.now() - t0 < seconds * 1000) {
    const w0 = performance.now();
    let calls = 0;
    while (performance.now() - w0 < 200) {
      gemm(p, c, 'wasm');
      calls++;
    }
    windows.push((calls * flop) / (performance.now() - w0) / 1e6);
    line.push(windows[windows.length - 1].toFixed(0));
    if (line.length === 25) {
      console.log(`${((performance.now() - t0) / 1000).toFixed(0).padStart(4)} s  ${line.join(' ')}`);
      line = [];
    }
  }
  if (line.length)
    console.log(`${((performance.now() - t0) / 1000).toFixed(0).padStart(4)} s  ${line.join(' ')}`);
  const sorted = [...windows].sort((x, y) => x - y);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))].toFixed(1);
  console.log(
    `qkv GEMM ${p.M}×${p.N}×${p.K} (plain build: ${runtime.wasmVariant}), GFLOP/s per 0.2 s window over ${seconds} s: ` +
      `min ${at(0)}, quartiles ${at(0.25)} / ${at(0.5)} / ${at(0.75)}, max ${at(1)}`,
  );
}

if (args.includes('--pipes')) {
  await pipes();
} else if (args.includes('--drift')) {
  drift(Number(args[args.indexOf('--drift') + 1]) || 60);
} else if (args.includes('--peak-worker')) {
  // One of peakAllCores' workers: compile the probe, say so, sample it when told.
  const port = parentPort;
  const probe = await peakProbe(false);
  port?.postMessage(probe ? 'ready' : 'unavailable');
  port?.once('message', () => port.postMessage(Array.from({ length: ALL_CORES_SAMPLES }, () => probe?.())));
} else if (args.includes('--child-fma')) {
  // The relaxed-SIMD build: only qkv's row, reported to the parent as JSON.
  const { rows, peak } = measure(
    [{ ...qkvWasm, name: 'qkv wasm-fma' }],
    rounds,
    shapes,
    await peakProbe(true),
  );
  console.log(JSON.stringify({ variant: runtime.wasmVariant, rows, fmaPeak: peak }));
} else {
  const load0 = loadavg()
    .map((x) => x.toFixed(1))
    .join(' ');
  const tfjs = await tfjsImpl();
  const { rows, peak: plainPeak } = measure(
    [qkvWasm, jsLoops, ...(tfjs ? [tfjs] : [])],
    rounds,
    shapes,
    await peakProbe(false),
  );
  const self = fileURLToPath(import.meta.url);
  const child = spawnSync(process.execPath, [RELAXED_SIMD_FLAG, self, '--child-fma', ...args], {
    encoding: 'utf8',
  });
  const fma =
    child.status === 0
      ? (JSON.parse(child.stdout) as { variant: string; rows: Row[]; fmaPeak?: number })
      : undefined;
  if (fma?.variant === 'relaxed-simd') rows.push(...fma.rows);
  const load1 = loadavg()
    .map((x) => x.toFixed(1))
    .join(' ');
  const impls = ['qkv wasm', 'qkv wasm-fma', 'JS loops', 'tfjs-wasm'];
  console.log(
    `GEMM, 1 thread, GFLOP/s (2·M·N·K / median time; wall clock | CPU time), ${rounds} interleaved rounds`,
  );
  console.log(
    `qkv build ${runtime.wasmVariant}; FMA child: ${fma?.variant ?? child.stderr.trim()}; load ${load0} → ${load1}`,
  );
  const gf = (x?: number) => (x === undefined ? 'not measured' : `${x.toFixed(1)} GFLOP/s`);
  const alone = await peakProbe(false).then((p) => p && median(Array.from({ length: ALL_CORES_SAMPLES }, p)));
  const allCores = await peakAllCores();
  console.log(
    `SIMD128 peak of one core (chains of c·a + b in registers, sampled every round beside the rows): plain multiply + add ${gf(plainPeak)}, FMA ${gf(fma?.fmaPeak)}`,
  );
  console.log(
    `plain peak per core with all ${availableParallelism()} cores running it at once (${ALL_CORES_SAMPLES} samples each, median): ${gf(allCores)}; the same on one core just before: ${gf(alone)}\n`,
  );
  console.log(`| shape | M×N×K | ${impls.join(' | ')} | qkv ÷ JS | qkv ÷ tfjs |`);
  console.log(`| --- | --- |${impls.map(() => ' ---: |').join('')} ---: | ---: |`);
  for (const s of shapes) {
    const of = (impl: string) => rows.find((r) => r.shape === s.name && r.impl === impl);
    const cell = (r?: Row) => (!r ? '—' : r.note ? r.note : `${r.wall.toFixed(1)} \\| ${r.cpu.toFixed(1)}`);
    const ratio = (a?: Row, b?: Row) =>
      a && b && !b.note && !a.note ? `${(a.wall / b.wall).toFixed(1)}×` : '—';
    const dims = `${s.M}×${s.N}×${s.K}`;
    console.log(
      `| ${s.name} | ${dims} | ${impls.map((i) => cell(of(i))).join(' | ')} | ${ratio(of('qkv wasm'), of('JS loops'))} | ${ratio(of('qkv wasm'), of('tfjs-wasm'))} |`,
    );
  }
}
