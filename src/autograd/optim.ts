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

  /** One update at learning rate `lr` from the parameters' current grads (missing grads count as 0). */
  step(lr: number): void {
    this.t++;
    const [b1, b2] = this.betas;
    const c1 = 1 - b1 ** this.t;
    const c2 = 1 - b2 ** this.t;
    this.params.forEach((p, n) => {
      const g = p.grad;
      if (!g) return;
      const m = this.m[n];
      const v = this.v[n];
      const decay = p.shape.length >= 2 ? 1 - lr * this.weightDecay : 1;
      const w = p.data;
      for (let i = 0; i < w.length; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        w[i] = w[i] * decay - (lr * (m[i] / c1)) / (Math.sqrt(v[i] / c2) + this.eps);
      }
    });
  }

  /** Clears every parameter's grad. */
  zeroGrad(): void {
    for (const p of this.params) p.grad?.fill(0);
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

/** Scales all grads so their global L2 norm is at most maxNorm; returns the norm before clipping. */
export function clipGradNorm(params: readonly Var[], maxNorm: number): number {
  let sq = 0;
  for (const p of params) if (p.grad) for (const g of p.grad) sq += g * g;
  const norm = Math.sqrt(sq);
  if (norm > maxNorm && norm > 0) {
    const c = maxNorm / norm;
    for (const p of params) if (p.grad) for (let i = 0; i < p.grad.length; i++) p.grad[i] *= c;
  }
  return norm;
}
