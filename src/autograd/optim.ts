// AdamW, a warm-up + cosine learning-rate schedule, and gradient clipping by global norm.
// One decision to know: weight decay is decoupled (Loshchilov & Hutter, arXiv:1711.05101) and, as in
// nanoGPT, applied only to parameters with two or more axes (matrices and embeddings), never to biases or
// LayerNorm gains.

import type { Var } from './var.js';

/** AdamW hyper-parameters (PyTorch's names and defaults, except weightDecay). */
export interface AdamWOptions {
  betas?: [number, number];
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
    this.t++;
    const [b1, b2] = this.betas;
    const a1 = 1 - b1;
    const a2 = 1 - b2;
    const c1 = 1 - b1 ** this.t;
    const c2 = 1 - b2 ** this.t;
    const eps = this.eps;
    for (let n = 0; n < this.params.length; n++) {
      const p = this.params[n];
      const g = p.grad;
      if (!g) continue;
      const m = this.m[n];
      const v = this.v[n];
      const decay = p.shape.length >= 2 ? 1 - lr * this.weightDecay : 1;
      const w = p.data;
      const len = w.length;
      for (let i = 0; i < len; i++) {
        const gi = g[i];
        const mi = Math.fround(b1 * m[i] + a1 * gi);
        const vi = Math.fround(b2 * v[i] + a2 * gi * gi);
        m[i] = mi;
        v[i] = vi;
        w[i] = w[i] * decay - (lr * (mi / c1)) / (Math.sqrt(vi / c2) + eps);
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
 * Scales all grads so their global L2 norm is at most maxNorm; returns the norm before clipping. One pass
 * for the norm (Σ g² in float64, parameter after parameter), one to scale when it is over.
 */
export function clipGradNorm(params: readonly Var[], maxNorm: number): number {
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
