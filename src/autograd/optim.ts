// AdamW, a warm-up + cosine learning-rate schedule, and gradient clipping by global norm.
// One decision to know: weight decay is decoupled (Loshchilov & Hutter, arXiv:1711.05101) and, as in
// nanoGPT, applied only to parameters with two or more axes (matrices and embeddings), never to biases or
// LayerNorm gains.

import { gemm } from '../kernels/gemm.js';
import { adamwWasm } from '../kernels/ops-wasm.js';
import { checkFinite, checkInteger, formatValue } from '../shape.js';
import type { Var } from './var.js';

/** AdamW hyper-parameters (PyTorch's names and defaults, except weightDecay). */
export interface AdamWOptions {
  /** Each in [0, 1) (a beta of 1 would divide by 0 in the bias correction). Default [0.9, 0.999]. */
  betas?: [number, number];
  /** ≥ 0. Default 1e-8. */
  eps?: number;
  /** Decoupled weight decay for parameters with ≥ 2 axes. Default 0.01. */
  weightDecay?: number;
}

/** AdamW (Kingma & Ba, arXiv:1412.6980, with decoupled decay). Moments are float32, one pair per parameter. */
export class AdamW {
  readonly params: readonly Var[];
  readonly betas: [number, number];
  readonly eps: number;
  readonly weightDecay: number;
  /** Steps taken (for the bias correction). */
  t = 0;
  private readonly m: Float32Array[];
  private readonly v: Float32Array[];

  constructor(
    params: readonly Var[],
    { betas = [0.9, 0.999], eps = 1e-8, weightDecay = 0.01 }: AdamWOptions = {},
  ) {
    // PyTorch's checks: a beta of 1 divides by 1 − 1 = 0 in the bias correction (every weight NaN).
    const fn = 'AdamW';
    if (
      !Array.isArray(betas) ||
      betas.length !== 2 ||
      !betas.every((b) => typeof b === 'number' && b >= 0 && b < 1)
    ) {
      throw new RangeError(`${fn}: betas must be two numbers in [0, 1), got ${formatValue(betas)}`);
    }
    checkFinite(fn, 'eps', eps, '≥ 0');
    checkFinite(fn, 'weightDecay', weightDecay, '≥ 0');
    this.params = params;
    this.betas = betas;
    this.eps = eps;
    this.weightDecay = weightDecay;
    this.m = params.map((p) => new Float32Array(p.size));
    this.v = params.map((p) => new Float32Array(p.size));
  }

  /**
   * One update at learning rate `lr` from the parameters' current grads (missing grads count as 0): one
   * loop over each parameter, moments rounded to float32 as they are stored, nothing allocated.
   */
  step(lr: number): void {
    checkFinite('AdamW.step', 'lr', lr, '≥ 0');
    this.t++;
    const [b1, b2] = this.betas;
    const a1 = 1 - b1;
    const a2 = 1 - b2;
    // PyTorch's form: (lr / c1)·m / (√v / √c2 + eps), with both bias corrections folded into two
    // constants: one division and one square root an element (three divisions before, 1.6× slower).
    const stepSize = lr / (1 - b1 ** this.t);
    const rc2 = 1 / Math.sqrt(1 - b2 ** this.t);
    const eps = this.eps;
    for (let n = 0; n < this.params.length; n++) {
      const p = this.params[n];
      const g = p.grad;
      if (!g) continue;
      const m = this.m[n];
      const v = this.v[n];
      const decay = p.shape.length >= 2 ? 1 - lr * this.weightDecay : 1;
      const w = p.data;
      // Float32: the loop below in WASM SIMD's float64 lanes (kernels/ops-wasm.ts), the same floats.
      if (adamwWasm(w, g, m, v, { b1, a1, b2, a2, decay, stepSize, rc2, eps })) continue;
      const len = w.length;
      for (let i = 0; i < len; i++) {
        const gi = g[i];
        const mi = Math.fround(b1 * m[i] + a1 * gi);
        const vi = Math.fround(b2 * v[i] + a2 * gi * gi);
        m[i] = mi;
        v[i] = vi;
        w[i] = w[i] * decay - (stepSize * mi) / (Math.sqrt(vi) * rc2 + eps);
      }
    }
  }

  /** Clears every parameter's grad. */
  zeroGrad(): void {
    for (const p of this.params) p.grad?.fill(0);
  }

  /** The step count and copies of the moments, parameter by parameter (to resume a run exactly). */
  state(): { t: number; m: Float32Array[]; v: Float32Array[] } {
    return { t: this.t, m: this.m.map((x) => x.slice()), v: this.v.map((x) => x.slice()) };
  }

  /** Restores `state()`; throws naming the parameter whose moments have the wrong size. */
  loadState(state: { t: number; m: ArrayLike<number>[]; v: ArrayLike<number>[] }): void {
    const fn = 'AdamW.loadState';
    if (!(Number.isSafeInteger(state.t) && state.t >= 0))
      throw new RangeError(`${fn}: t must be a step count ≥ 0, got ${state.t}`);
    if (state.m.length !== this.params.length || state.v.length !== this.params.length) {
      throw new RangeError(
        `${fn}: moments for ${state.m.length}/${state.v.length} parameters, expected ${this.params.length}`,
      );
    }
    this.params.forEach((p, n) => {
      if (state.m[n].length !== p.size || state.v[n].length !== p.size) {
        throw new RangeError(
          `${fn}: parameter ${n} [${p.shape}] has ${p.size} weights, its moments ${state.m[n].length} and ${state.v[n].length}`,
        );
      }
    });
    this.params.forEach((_, n) => {
      this.m[n].set(state.m[n]);
      this.v[n].set(state.v[n]);
    });
    this.t = state.t;
  }
}

/** Linear warm-up to maxLr over `warmup` steps, then cosine decay to minLr at `total` (GPT-3's schedule). */
export function warmupCosine({
  maxLr,
  minLr = maxLr / 10,
  warmup,
  total,
}: {
  maxLr: number;
  minLr?: number;
  warmup: number;
  total: number;
}): (step: number) => number {
  return (step: number) => {
    if (step < warmup) return (maxLr * (step + 1)) / warmup;
    if (step >= total) return minLr;
    const progress = (step - warmup) / Math.max(1, total - warmup);
    return minLr + 0.5 * (maxLr - minLr) * (1 + Math.cos(Math.PI * progress));
  };
}

/**
 * Scales all grads so their global L2 norm is at most maxNorm (> 0; Infinity leaves them as they are);
 * returns the norm before clipping. One pass
 * for the norm (Σ g² in float64, parameter after parameter), one to scale when it is over.
 */
export function clipGradNorm(params: readonly Var[], maxNorm: number): number {
  if (typeof maxNorm !== 'number' || !(maxNorm > 0)) {
    throw new RangeError(
      `clipGradNorm: maxNorm must be a number > 0 (Infinity leaves the grads as they are), got ${formatValue(maxNorm)}`,
    );
  }
  let sq = 0;
  for (const p of params) {
    const g = p.grad;
    if (!g) continue;
    const n = g.length;
    for (let i = 0; i < n; i++) sq += g[i] * g[i];
  }
  const norm = Math.sqrt(sq);
  if (norm > maxNorm && norm > 0) {
    const c = maxNorm / norm;
    for (const p of params) {
      const g = p.grad;
      if (!g) continue;
      const n = g.length;
      for (let i = 0; i < n; i++) g[i] *= c;
    }
  }
  return norm;
}

/** One block Muon orthogonalises: x [rows, cols], row-major, replaced in place by its orthogonal factor. */
export interface MuonJob {
  x: Float32Array;
  rows: number;
  cols: number;
}

/**
 * Runs Muon's Newton–Schulz iteration on every job, in place (`orthogonalise` by default); data-parallel
 * training passes one that spreads the jobs over its threads (the results are the same bits).
 */
export type Orthogonaliser = (jobs: readonly MuonJob[], steps: number) => void;

/** Muon's hyper-parameters; the parameters it does not orthogonalise get AdamW with `adamw`. */
export interface MuonOptions {
  /** Momentum of the gradient average (Nesterov). Default 0.95. */
  momentum?: number;
  /** Newton–Schulz iterations. Default 5. */
  nsSteps?: number;
  /**
   * RMS of a matrix's update per unit of learning rate. Default 0.2, about AdamW's, so that one rate
   * serves both groups (Liu et al.).
   */
  rms?: number;
  /** Decoupled weight decay of every parameter with ≥ 2 axes (both groups). Default 0.01. */
  weightDecay?: number;
  /** AdamW's betas and eps for the other parameters. */
  adamw?: Omit<AdamWOptions, 'weightDecay'>;
  /** Who runs the Newton–Schulz iterations; default `orthogonalise` on this thread. */
  orthogonaliser?: Orthogonaliser;
}

/** A matrix Muon updates: its Var, and how many equal blocks of rows it packs (q|k|v: 3). */
export interface MuonMatrix {
  param: Var;
  blocks?: number;
}

// The quintic Newton–Schulz iteration's coefficients (Jordan et al., "Muon", 2024): they push every
// singular value of a normalised matrix into about [0.7, 1.2] in 5 steps.
const NS_A = 3.4445;
const NS_B = -4.775;
const NS_C = 2.0315;

/** Work buffers of the iteration, grown to the largest job and kept (one set per thread). */
const scratch: Float32Array[] = [];
function work(i: number, size: number): Float32Array {
  if (!scratch[i] || scratch[i].length < size) scratch[i] = new Float32Array(size);
  return scratch[i].subarray(0, size);
}

/** C = op(a)·op(b) (+ C) on the float32 GEMM. */
function mul(
  M: number,
  N: number,
  K: number,
  a: Float32Array,
  transA: boolean,
  b: Float32Array,
  transB: boolean,
  c: Float32Array,
  accumulate: boolean,
): void {
  gemm({ M, N, K, a, b, transA, transB, accumulate, precision: 'float32' }, c);
}

/**
 * Muon's orthogonalisation of each job, in place: x / ‖x‖_F, then `steps` quintic Newton–Schulz
 * iterations X ← a·X + (b·A + c·A²)·X with A = X·Xᵀ, on the side that makes A the smaller Gram matrix.
 * Every product is the float32 GEMM; the norm is summed in float64.
 */
export function orthogonalise(jobs: readonly MuonJob[], steps: number): void {
  const fn = 'orthogonalise';
  checkInteger(fn, 'steps', steps, 0);
  if (!Array.isArray(jobs)) throw new TypeError(`${fn}: jobs must be an array of { x, rows, cols }`);
  jobs.forEach(({ x, rows, cols }, i) => {
    checkInteger(fn, `jobs[${i}].rows`, rows, 0);
    checkInteger(fn, `jobs[${i}].cols`, cols, 0);
    if (!(x instanceof Float32Array) || x.length !== rows * cols) {
      throw new RangeError(
        `${fn}: jobs[${i}].x must be a Float32Array of rows·cols = ${rows}·${cols} elements, got ${x instanceof Float32Array ? `${x.length} elements` : typeof x}`,
      );
    }
  });
  for (const { x, rows: r, cols: c } of jobs) {
    let sq = 0;
    for (let i = 0; i < x.length; i++) sq += x[i] * x[i];
    const inv = 1 / (Math.sqrt(sq) + 1e-7);
    let X = work(0, x.length);
    for (let i = 0; i < x.length; i++) X[i] = x[i] * inv;
    let Y = work(1, x.length);
    const tall = r > c;
    const s = tall ? c : r; // the Gram matrix's side
    const l = tall ? r : c;
    const A = work(2, s * s);
    const B = work(3, s * s);
    for (let it = 0; it < steps; it++) {
      // wide: A = X·Xᵀ, B = b·A + c·A², Y = a·X + B·X; tall: A = Xᵀ·X, Y = a·X + X·B.
      mul(s, s, l, X, tall, X, !tall, A, false);
      mul(s, s, s, A, false, A, false, B, false);
      for (let i = 0; i < B.length; i++) B[i] = NS_B * A[i] + NS_C * B[i];
      for (let i = 0; i < X.length; i++) Y[i] = NS_A * X[i];
      if (tall) mul(l, s, s, X, false, B, false, Y, true);
      else mul(s, l, s, B, false, X, false, Y, true);
      [X, Y] = [Y, X];
    }
    x.set(X);
  }
}

/**
 * Muon (Jordan et al., 2024) for the hidden matrices, AdamW for the rest (embeddings, biases, gains):
 * each matrix's update is its Nesterov momentum made orthogonal by a Newton–Schulz iteration, scaled by
 * rms·√max(rows, cols) so that its RMS is rms (0.2: AdamW's, so one learning rate serves both groups;
 * Liu et al., "Muon is scalable", arXiv:2502.16982). A packed matrix is orthogonalised block by block.
 * The momentum is float32, one buffer per matrix; a NaN or ∞ in a matrix's gradient makes that whole
 * matrix NaN (the iteration mixes every entry), where AdamW would spoil only that weight.
 */
export class Muon {
  readonly params: readonly Var[];
  readonly momentum: number;
  readonly nsSteps: number;
  readonly rms: number;
  readonly weightDecay: number;
  private readonly matrices: readonly { param: Var; index: number; blocks: number }[];
  private readonly adam: AdamW;
  private readonly adamIndex: number[];
  private readonly buf: Float32Array[];
  /** Each matrix's Nesterov update, orthogonalised in place. */
  private readonly u: Float32Array[];
  private readonly orthogonaliser: Orthogonaliser;

  constructor(params: readonly Var[], matrices: readonly MuonMatrix[], options: MuonOptions = {}) {
    const fn = 'Muon';
    const {
      momentum = 0.95,
      nsSteps = 5,
      rms = 0.2,
      weightDecay = 0.01,
      adamw = {},
      orthogonaliser = orthogonalise,
    } = options;
    checkFinite(fn, 'momentum', momentum, '≥ 0');
    if (momentum >= 1) throw new RangeError(`${fn}: momentum must be < 1, got ${momentum}`);
    checkInteger(fn, 'nsSteps', nsSteps, 1);
    checkFinite(fn, 'rms', rms, '> 0');
    checkFinite(fn, 'weightDecay', weightDecay, '≥ 0');
    this.params = params;
    this.momentum = momentum;
    this.nsSteps = nsSteps;
    this.rms = rms;
    this.weightDecay = weightDecay;
    this.orthogonaliser = orthogonaliser;
    this.matrices = matrices.map(({ param, blocks = 1 }) => {
      const index = params.indexOf(param);
      if (index < 0) throw new RangeError(`${fn}: a matrix [${param.shape}] is not among params`);
      if (param.shape.length !== 2 || param.shape[0] % blocks !== 0)
        throw new RangeError(
          `${fn}: matrix ${index} [${param.shape}] is not a matrix of ${blocks} row blocks`,
        );
      return { param, index, blocks };
    });
    const own = new Set(this.matrices.map((m) => m.param));
    const rest = params.filter((p) => !own.has(p));
    this.adamIndex = rest.map((p) => params.indexOf(p));
    this.adam = new AdamW(rest, { ...adamw, weightDecay });
    this.buf = this.matrices.map((m) => new Float32Array(m.param.size));
    this.u = this.matrices.map((m) => new Float32Array(m.param.size));
  }

  /** Steps taken. */
  get t(): number {
    return this.adam.t;
  }

  /**
   * One update at learning rate `lr`: AdamW's for the other parameters; for each matrix with a grad, the
   * momentum, the orthogonalised Nesterov update of every block (all at once, by the orthogonaliser), then
   * w ← w·(1 − lr·decay) − lr·rms·√max(rows, cols)·O.
   */
  step(lr: number): void {
    this.adam.step(lr);
    const mu = this.momentum;
    const jobs: MuonJob[] = [];
    const live: number[] = [];
    for (let n = 0; n < this.matrices.length; n++) {
      const { param, blocks } = this.matrices[n];
      const g = param.grad;
      if (!g) continue;
      live.push(n);
      const buf = this.buf[n];
      const u = this.u[n];
      for (let i = 0; i < buf.length; i++) {
        const b = Math.fround(mu * buf[i] + (1 - mu) * g[i]);
        buf[i] = b;
        u[i] = (1 - mu) * g[i] + mu * b;
      }
      const [rows, cols] = param.shape;
      const r = rows / blocks;
      for (let k = 0; k < blocks; k++)
        jobs.push({ x: u.subarray(k * r * cols, (k + 1) * r * cols), rows: r, cols });
    }
    this.orthogonaliser(jobs, this.nsSteps);
    const decay = 1 - lr * this.weightDecay;
    for (const n of live) {
      const { param, blocks } = this.matrices[n];
      const [rows, cols] = param.shape;
      const step = lr * this.rms * Math.sqrt(Math.max(rows / blocks, cols));
      const w = param.data;
      const o = this.u[n];
      for (let i = 0; i < w.length; i++) w[i] = w[i] * decay - step * o[i];
    }
  }

  /** Clears every parameter's grad. */
  zeroGrad(): void {
    for (const p of this.params) p.grad?.fill(0);
  }

  /** Per parameter: m = AdamW's first moment or Muon's momentum, v = AdamW's second moment (Muon: zeros). */
  state(): { t: number; m: Float32Array[]; v: Float32Array[] } {
    const a = this.adam.state();
    // Every parameter is in one group: AdamW's moments, or a matrix's momentum and no second moment.
    const m = new Array<Float32Array>(this.params.length);
    const v = new Array<Float32Array>(this.params.length);
    this.adamIndex.forEach((n, j) => {
      m[n] = a.m[j];
      v[n] = a.v[j];
    });
    this.matrices.forEach(({ param, index }, j) => {
      m[index] = this.buf[j].slice();
      v[index] = new Float32Array(param.size);
    });
    return { t: a.t, m, v };
  }

  /**
   * Restores `state()` (as saved by the Trainer); throws naming the parameter whose moments have the
   * wrong size.
   */
  loadState(state: { t: number; m: ArrayLike<number>[]; v: ArrayLike<number>[] }): void {
    const fn = 'Muon.loadState';
    if (state.m.length !== this.params.length || state.v.length !== this.params.length) {
      throw new RangeError(
        `${fn}: moments for ${state.m.length}/${state.v.length} parameters, expected ${this.params.length}`,
      );
    }
    for (const { param, index } of this.matrices) {
      if (state.m[index].length !== param.size)
        throw new RangeError(
          `${fn}: matrix ${index} [${param.shape}] has ${param.size} weights, its momentum ${state.m[index].length}`,
        );
    }
    this.adam.loadState({
      t: state.t,
      m: this.adamIndex.map((n) => state.m[n]),
      v: this.adamIndex.map((n) => state.v[n]),
    });
    this.matrices.forEach(({ index }, j) => {
      this.buf[j].set(state.m[index]);
    });
  }
}
