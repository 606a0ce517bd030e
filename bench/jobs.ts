// What the bench measures: the problem sizes, the implementations, and one job per (implementation, size).
// One decision to know: a job is plain JSON, because each one runs in its own child process (so peak RSS
// belongs to that row alone) and reaches it through argv.

/** The V8 flag that enables relaxed SIMD on Node 20 (Node ≥ 22 and Chrome have it on by default). */
export const RELAXED_SIMD_FLAG = '--experimental-wasm-relaxed-simd';

/** One attention problem: q [B, H, L, E], k and v [B, H, S, E], fp32, forward only. */
export interface Config {
  B: number;
  H: number;
  L: number;
  S: number;
  E: number;
  causal: boolean;
}

export type QkvKernel = 'reference' | 'flash' | 'wasm' | 'auto';

/** An implementation and how it is called. */
export type Impl =
  /**
   * `relaxed`: the row's process runs with `--experimental-wasm-relaxed-simd`, so the WASM kernel uses its
   * fused multiply-add build, as Chrome and Node ≥ 22 do by default (added only where the flag is needed).
   */
  | { kind: 'qkv'; kernel: QkvKernel; mode: 'sync' | 'async'; threads: number; relaxed?: boolean }
  /** `scaledDotProductAttention(q, k, v, { causal })` with nothing else: the memory targets. */
  | { kind: 'qkv-default'; threads: 1 }
  | { kind: 'article'; threads: 1 }
  | { kind: 'tfjs-wasm'; threads: 1 }
  | { kind: 'ort-web'; threads: number }
  | { kind: 'ort-node'; threads: number };

export interface Job {
  impl: Impl;
  config: Config;
  /** Timed runs stop after this many, or once `budgetMs` of timed runs has passed (at least one). */
  maxRuns: number;
  budgetMs: number;
  /** Where the expected output is (a raw Float32Array file from the qkv reference kernel), if anywhere. */
  expectedFile?: string;
  /** Directory holding node_modules/onnxruntime-node, for the ort-node rows. */
  peersDir: string;
  /** Memory rows: one cold run, no warm-up. */
  singleRun?: boolean;
  /**
   * Served (spawn.ts's serveChild): once checked and warm, time one run per request of the parent, which
   * interleaves the rows a target compares; maxRuns and budgetMs are then the parent's.
   */
  serve?: boolean;
}

/** The sizes of issue 3, smallest first (later rows' time estimates use earlier rows' speed). */
export const CONFIGS: Config[] = [
  { B: 1, H: 8, L: 256, S: 256, E: 64, causal: false },
  { B: 1, H: 8, L: 1024, S: 1024, E: 64, causal: false }, // P1
  { B: 1, H: 1, L: 4096, S: 4096, E: 64, causal: false },
  { B: 1, H: 8, L: 4096, S: 4096, E: 64, causal: true },
];

/** The memory targets of issue 3: default options, whole-process peak RSS. */
export const MEMORY_TARGETS: { config: Config; limitMB: number }[] = [
  { config: { B: 1, H: 1, L: 4096, S: 4096, E: 64, causal: false }, limitMB: 80 },
  { config: { B: 1, H: 1, L: 65536, S: 65536, E: 64, causal: true }, limitMB: 150 },
];

export const QKV_KERNELS: QkvKernel[] = ['reference', 'flash', 'wasm', 'auto'];

export function configLabel(c: Config): string {
  const dims = `(${c.B},${c.H},${c.L},${c.E})`;
  return c.causal ? `${dims} causal` : dims;
}

/** 4·B·H·L·S·E, halved for causal attention (the work a kernel that skips blocked keys does). */
export function flops(c: Config): number {
  const full = 4 * c.B * c.H * c.L * c.S * c.E;
  return c.causal ? full / 2 : full;
}

export function implName(impl: Impl): string {
  switch (impl.kind) {
    case 'qkv': {
      const kernel = impl.relaxed ? `${impl.kernel}-fma` : impl.kernel;
      return impl.mode === 'sync' ? `qkv ${kernel} sync` : `qkv ${kernel} async t${impl.threads}`;
    }
    case 'qkv-default':
      return 'qkv default options';
    case 'article':
      return 'article number[][]';
    case 'tfjs-wasm':
      return 'tfjs-wasm tuned t1';
    case 'ort-web':
      return `onnxruntime-web t${impl.threads}`;
    case 'ort-node':
      return `onnxruntime-node t${impl.threads}`;
  }
}

/** Portable peers: no native code, so they run where qkv runs (a browser or Node). */
export function isPortablePeer(impl: Impl): boolean {
  return impl.kind === 'tfjs-wasm' || impl.kind === 'ort-web';
}

/**
 * The implementations measured on every config, in print order. `relaxedRows`: also the WASM kernel's
 * fused multiply-add build, in processes started with the flag (when this runtime does not enable it).
 */
export function implsForConfig(relaxedRows: boolean): Impl[] {
  const impls: Impl[] = [];
  for (const kernel of QKV_KERNELS) {
    impls.push({ kind: 'qkv', kernel, mode: 'sync', threads: 1 });
    impls.push({ kind: 'qkv', kernel, mode: 'async', threads: 1 });
    impls.push({ kind: 'qkv', kernel, mode: 'async', threads: 2 });
    if (kernel === 'wasm' && relaxedRows) {
      impls.push({ kind: 'qkv', kernel, mode: 'sync', threads: 1, relaxed: true });
      impls.push({ kind: 'qkv', kernel, mode: 'async', threads: 2, relaxed: true });
    }
  }
  impls.push(
    { kind: 'article', threads: 1 },
    { kind: 'tfjs-wasm', threads: 1 },
    { kind: 'ort-web', threads: 1 },
    { kind: 'ort-web', threads: 2 },
    { kind: 'ort-node', threads: 1 },
    { kind: 'ort-node', threads: 2 },
  );
  return impls;
}
