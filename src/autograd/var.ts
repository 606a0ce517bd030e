// Var: a value in a computation graph (data + shape + grad) and `backward`, the reverse sweep over it.
// One decision to know: every Var gets an increasing id when created, so creation order is the tape: the
// backward sweep visits the Vars reachable from the loss in decreasing id, each one calling the backward
// closure its op left next to the forward (micrograd's design, with typed arrays instead of scalars).
// Data may be Float32Array (training) or Float64Array (gradient checks); ops keep the type they are given.

/** Float storage of a Var: float32 to train, float64 to check gradients against finite differences. */
export type Floats = Float32Array | Float64Array;

let nextId = 0;
let recording = true;

/** A tensor-valued node of the graph. Leaves are parameters or constants; the rest are op results. */
export class Var {
  /** Creation order; the backward sweep runs in decreasing id. */
  readonly id = nextId++;
  readonly data: Floats;
  readonly shape: readonly number[];
  /** ∂loss/∂this, allocated on first use (same type and length as data). */
  grad: Floats | undefined;
  /** True for parameters and for anything computed from them. */
  readonly requiresGrad: boolean;
  /** The Vars this one was computed from (none for leaves, and none when no input requires grad). */
  readonly parents: readonly Var[];
  /** Adds this Var's grad into its parents' grads; set by the op that made it. */
  readonly backwardFn: (() => void) | undefined;

  constructor(
    data: Floats,
    shape: readonly number[],
    requiresGrad = false,
    parents: readonly Var[] = [],
    backwardFn?: () => void,
  ) {
    let size = 1;
    for (const d of shape) size *= d;
    if (data.length !== size) {
      throw new RangeError(
        `Var: data has ${data.length} elements but shape [${shape.join(',')}] needs ${size}`,
      );
    }
    this.data = data;
    this.shape = Object.freeze([...shape]);
    this.requiresGrad = requiresGrad;
    this.parents = requiresGrad ? parents : [];
    this.backwardFn = requiresGrad ? backwardFn : undefined;
  }

  get size(): number {
    return this.data.length;
  }

  /** The gradient buffer, allocated as zeros on first use. */
  gradBuffer(): Floats {
    if (!this.grad)
      this.grad =
        this.data instanceof Float64Array ? new Float64Array(this.size) : new Float32Array(this.size);
    return this.grad;
  }
}

/** A trainable leaf (requires grad). */
export function parameter(data: Floats, shape: readonly number[]): Var {
  return new Var(data, shape, true);
}

/** A leaf that needs no gradient (inputs, positional tables). */
export function constant(data: Floats, shape: readonly number[]): Var {
  return new Var(data, shape, false);
}

/**
 * Whether an op on `inputs` goes on the tape: an input requires grad and no `noGrad` is running. Ops ask
 * before allocating what only their backward reads (a softmax's row statistics, LayerNorm's mean and
 * rstd, a dropout mask), so an untaped forward keeps nothing beyond its outputs.
 */
export function needsGrad(inputs: readonly Var[]): boolean {
  return recording && inputs.some((v) => v.requiresGrad);
}

/**
 * The result of an op: requires grad iff `needsGrad(inputs)`; `backward` and `inputs` are kept only then
 * (otherwise the closure, and whatever it captured, is garbage as soon as the op returns). This is how
 * every op in ops.ts records itself on the tape, and how a user adds a custom op.
 */
export function opResult(
  data: Floats,
  shape: readonly number[],
  inputs: readonly Var[],
  backward: () => void,
): Var {
  return new Var(data, shape, needsGrad(inputs), inputs, backward);
}

/**
 * Runs `fn` without recording the tape (PyTorch's `torch.no_grad()`): every op result inside requires no
 * grad and keeps no parents or backward closure, so each intermediate is freed as soon as nothing reads
 * it. For evaluation and inference: a recorded forward keeps every activation of the batch alive until
 * its result is dropped. `fn` must be synchronous (the mode ends when it returns or throws).
 *
 * @example
 * const { logits } = noGrad(() => model.forward(ids, B, L)); // logits.requiresGrad === false
 */
export function noGrad<T>(fn: () => T): T {
  const saved = recording;
  recording = false;
  try {
    return fn();
  } finally {
    recording = saved;
  }
}

/** False while a `noGrad` callback runs. */
export function isGradEnabled(): boolean {
  return recording;
}

/** A zeroed array of the same float type as `like`. */
export function floatsLike(like: Floats, length: number): Floats {
  return like instanceof Float64Array ? new Float64Array(length) : new Float32Array(length);
}

/**
 * Backpropagates from `loss` (any shape; seeded with ones, or with `seed` = ∂L/∂loss) into the grads of
 * every Var it depends on. Grads accumulate: zero the parameters' grads between steps.
 */
export function backward(loss: Var, seed?: ArrayLike<number>): void {
  if (!loss.requiresGrad) throw new Error('backward: the loss does not depend on any parameter');
  const g = loss.gradBuffer();
  if (seed) {
    if (seed.length !== loss.size) {
      throw new RangeError(`backward: seed has ${seed.length} elements but the loss has ${loss.size}`);
    }
    for (let i = 0; i < g.length; i++) g[i] += seed[i];
  } else {
    for (let i = 0; i < g.length; i++) g[i] += 1;
  }
  // The tape: every Var reachable from the loss (iterative DFS, no recursion limit), newest first.
  const seen = new Set<Var>([loss]);
  const stack = [loss];
  const tape: Var[] = [];
  while (stack.length) {
    const v = stack.pop()!;
    tape.push(v);
    for (const p of v.parents) {
      if (p.requiresGrad && !seen.has(p)) {
        seen.add(p);
        stack.push(p);
      }
    }
  }
  tape.sort((a, b) => b.id - a.id);
  for (const v of tape) if (v.backwardFn && v.grad) v.backwardFn();
}
