// Var: a value in a computation graph (data + shape + grad) and `backward`, the reverse sweep over it.
// One decision to know: every Var gets an increasing id when created, so creation order is the tape: the
// backward sweep visits the Vars reachable from the loss in decreasing id, each one calling the backward
// closure its op left next to the forward (micrograd's design, with typed arrays instead of scalars).
// Data may be Float32Array (training) or Float64Array (gradient checks); ops keep the type they are given.

import { thisRealm } from '../tensor.js';

/** Float storage of a Var: float32 to train, float64 to check gradients against finite differences. */
export type Floats = Float32Array | Float64Array;

let nextId = 0;
let recording = true;

/** A tensor-valued node of the graph. Leaves are parameters or constants; the rest are op results. */
export class Var {
  /** Creation order; the backward sweep runs in decreasing id. */
  readonly id = nextId++;
  #data: Floats;
  #released = false;
  readonly shape: readonly number[];
  /** ∂loss/∂this, allocated on first use (same type and length as data). */
  grad: Floats | undefined;
  /** True for parameters and for anything computed from them. */
  readonly requiresGrad: boolean;
  /** The Vars this one was computed from (none for leaves, and none when no input requires grad; emptied by `release`). */
  parents: readonly Var[];
  /** Adds this Var's grad into its parents' grads; set by the op that made it (cleared by `release`). */
  backwardFn: (() => void) | undefined;

  /** Arrays the op keeps for its backward besides the inputs' (attention's split heads); `release` frees them too. */
  saved: readonly Floats[];

  constructor(
    data: Floats,
    shape: readonly number[],
    requiresGrad = false,
    parents: readonly Var[] = [],
    backwardFn?: () => void,
    saved: readonly Floats[] = [],
  ) {
    let size = 1;
    for (const d of shape) {
      if (!Number.isSafeInteger(d) || d < 0) {
        throw new RangeError(`Var: shape [${shape.join(',')}] must hold integers ≥ 0`);
      }
      size *= d;
    }
    if (data.length !== size) {
      throw new RangeError(
        `Var: data has ${data.length} elements but shape [${shape.join(',')}] needs ${size}`,
      );
    }
    data = thisRealm(data); // another realm's array: this realm's view of the same memory
    this.#data = data;
    this.shape = Object.freeze([...shape]);
    this.requiresGrad = requiresGrad;
    this.parents = requiresGrad ? parents : [];
    this.backwardFn = requiresGrad ? backwardFn : undefined;
    this.saved = requiresGrad ? saved : [];
    // A leaf made from an op's array (a value carried into the next step: constant(h.data)) keeps it:
    // `release` must never reuse it under the leaf.
    if (this.parents.length === 0) owned.delete(data);
  }

  /** The values (float32 to train, float64 to check gradients). Throws once `release` has freed them. */
  get data(): Floats {
    if (this.#released) {
      throw new Error(
        `Var: this value [${this.shape.join(',')}] was released (autograd.release): its floats are reused by later ops`,
      );
    }
    return this.#data;
  }

  /** True once `release` has freed this Var's floats (reading `data` then throws). */
  get released(): boolean {
    return this.#released;
  }

  get size(): number {
    return this.#data.length;
  }

  /** The gradient buffer, allocated as zeros on first use. */
  gradBuffer(): Floats {
    if (!this.grad) this.grad = floatsLike(this.data, this.size);
    return this.grad;
  }

  /**
   * For an op that can write a gradient whole rather than add it: if this Var has no grad yet, allocates
   * one without zeroing it (a released array may hold old floats) and returns it, and the op must then
   * write every element as if adding to zeros; else undefined (the op adds into gradBuffer()).
   */
  freshGrad(): Floats | undefined {
    if (this.grad) return undefined;
    this.grad = floatsFor(this.data, this.size);
    return this.grad;
  }

  /** release's half: the floats this Var holds (data, grad), and it forgets them and its tape. */
  static free(v: Var): Floats[] {
    const held = [v.#data, ...(v.grad ? [v.grad] : []), ...v.saved];
    v.#released = true;
    v.grad = undefined;
    v.parents = [];
    v.backwardFn = undefined;
    v.saved = [];
    return held;
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
  saved?: readonly Floats[],
): Var {
  return new Var(data, shape, needsGrad(inputs), inputs, backward, saved);
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

// Float32 arrays that `release` gave back, by length: the next float32 array of that length an op allocates
// is one of them. A training step allocates the same arrays every step (T1's model: ~110 MB in ~200 arrays),
// and a fresh typed array costs V8 a zeroed allocation and the kernel a page fault per 4 KB on first write:
// about 1.3 ms to allocate and fill 4 MB here, against 0.2 ms to refill one already touched.
const pool = new Map<number, Float32Array[]>();
let pooledBytes = 0;
/** At most this many bytes wait in the pool; past it, released arrays are left to the GC. */
const POOL_BYTES = 512 << 20;
/** Arrays made by floatsLike / floatsFor: the only ones `release` may reuse (never a caller's own array). */
const owned = new WeakSet<Floats>();
/** The arrays in the pool (so none goes in twice, without searching its length's list). */
const pooled = new WeakSet<Float32Array>();
/** Lengths asked for since the last release: a length nobody asked for in a whole step is let go. */
const asked = new Set<number>();

function fromPool(length: number): Float32Array | undefined {
  asked.add(length);
  const a = pool.get(length)?.pop();
  if (a) {
    pooledBytes -= a.byteLength;
    pooled.delete(a);
  }
  return a;
}

/**
 * A zeroed array of the same float type as `like` (float32: a released one of that length, when there is
 * one). For a custom op's outputs: an array it returns as a Var's data (or saves for its backward) is
 * reused by later ops once that Var is released, so the op must not keep it for itself across calls.
 */
export function floatsLike(like: Floats, length: number): Floats {
  if (like instanceof Float64Array) return new Float64Array(length);
  return fromPool(length)?.fill(0) ?? ownedFloats(length);
}

/** A new float32 array that `release` may later reuse. */
function ownedFloats(length: number): Float32Array {
  const a = new Float32Array(length);
  owned.add(a);
  return a;
}

/**
 * floatsLike for an array the caller writes whole before anything reads it (a product's output, a copy):
 * a released array comes back as it was left, not zeroed.
 */
export function floatsFor(like: Floats, length: number): Floats {
  if (like instanceof Float64Array) return new Float64Array(length);
  return fromPool(length) ?? ownedFloats(length);
}

/**
 * Frees the graph behind `root` (tf.dispose's counterpart, for training loops): every Var `root` was
 * computed from — not the leaves (parameters, constants, inputs), which keep their values and grads —
 * gives its float32 arrays, values and gradient, to the ops of later steps, and forgets its tape. After it,
 * reading `data` of any of those Vars (root included) throws, and `backward` through them is refused; an
 * array taken from one earlier (`const a = logits.data`), or held by a Var outside the graph that shares
 * it (a custom view op's result), is overwritten by later ops, so copy what you keep. A step that calls it
 * allocates (almost) nothing new: read the loss, update, release. The arrays wait for reuse on this
 * thread, at most 512 MB, and each release lets go of those of lengths nothing asked for since the last
 * one (about one step's worth stays while training); a second call is a no-op.
 *
 * @example
 * const loss = autograd.crossEntropy(model.forward(ids, B, L).logits, targets);
 * autograd.backward(loss);
 * opt.step(1e-3);
 * opt.zeroGrad();
 * const value = loss.data[0];
 * autograd.release(loss); // the step's activations and gradients serve the next step
 */
export function release(root: Var): void {
  if (root.released) return; // released already: nothing is left to give back
  // Arrays of lengths no op asked for since the last release (a shape of an earlier step) go to the GC,
  // so the pool holds about one step's arrays, not every shape ever released.
  for (const [length, list] of pool) {
    if (asked.has(length)) continue;
    for (const a of list) {
      pooledBytes -= a.byteLength;
      pooled.delete(a);
    }
    pool.delete(length);
  }
  asked.clear();
  const vars = new Set<Var>([root]);
  const stack = [root];
  while (stack.length) {
    for (const p of stack.pop()!.parents) {
      // A Var released with another loss (two losses on one trunk) has nothing left to give back.
      if (!vars.has(p) && !p.released) {
        vars.add(p);
        stack.push(p);
      }
    }
  }
  // A leaf's arrays are never given back, even where an op's result shares one (a custom view op); an
  // array two Vars share goes into the pool once (toPool skips one already there).
  const kept = new Set<Floats>();
  for (const v of vars) {
    if (v.parents.length === 0) {
      kept.add(v.data);
      if (v.grad) kept.add(v.grad);
    }
  }
  for (const v of vars) if (v.parents.length > 0) for (const a of Var.free(v)) if (!kept.has(a)) toPool(a);
}

function toPool(a: Floats): void {
  if (!(a instanceof Float32Array) || !owned.has(a) || pooled.has(a)) return; // pooled: never twice
  if (pooledBytes + a.byteLength > POOL_BYTES) return;
  const list = pool.get(a.length);
  if (list) list.push(a);
  else pool.set(a.length, [a]);
  pooled.add(a);
  pooledBytes += a.byteLength;
}

/**
 * Gives arrays that only the caller holds to later allocations at once (an op's backward temporaries,
 * dead when it returns). Only arrays floatsLike / floatsFor made are taken; for ops, not exported.
 */
export function recycle(...arrays: Floats[]): void {
  for (const a of arrays) toPool(a);
}

/**
 * Backpropagates from `loss` (any shape; seeded with ones, or with `seed` = ∂L/∂loss) into the grads of
 * every Var it depends on. Grads accumulate: zero the parameters' grads between steps.
 */
export function backward(loss: Var, seed?: ArrayLike<number>): void {
  if (loss.released) throw new Error('backward: the loss was released (autograd.release); compute it again');
  if (!loss.requiresGrad) throw new Error('backward: the loss does not depend on any parameter');
  if (seed && seed.length !== loss.size) {
    throw new RangeError(`backward: seed has ${seed.length} elements but the loss has ${loss.size}`);
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
  if (tape.some((v) => v.released)) {
    throw new Error('backward: the graph was released (autograd.release); compute the loss again');
  }
  const g = loss.gradBuffer(); // seeded only once nothing can refuse
  if (seed) for (let i = 0; i < g.length; i++) g[i] += seed[i];
  else for (let i = 0; i < g.length; i++) g[i] += 1;
  tape.sort((a, b) => b.id - a.id);
  for (const v of tape) if (v.backwardFn && v.grad) v.backwardFn();
}
