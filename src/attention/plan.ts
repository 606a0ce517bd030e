// The public attention layer's one job: check arguments and resolve options into an AttentionProblem.
// One decision to know: every error names the calling function, the argument and the shapes involved,
// and nothing here loops over tensor data (that is the kernels' job).

import { KERNEL_NAMES, type KernelName } from '../kernels/registry.js';
import type { AttentionProblem, BroadcastView } from '../kernels/types.js';
import { broadcastStrides, checkAllocation, checkOptionNames, formatShape, formatValue } from '../shape.js';
import { type DType, Tensor, type TensorLike, toTensor } from '../tensor.js';

/** A tensor argument of the attention functions: float32 or float16 Tensor, or nested arrays. */
export type AttentionInput = TensorLike | Tensor<DType>;

/** Causal alignment: `true` is 'bottom-right' (flash-attn's; PyTorch's is_causal when L = S). */
export type CausalOption = boolean | 'bottom-right' | 'top-left';

/** Options shared by `scaledDotProductAttention` and `attentionWeights`. */
export interface AttentionOptions {
  /** Nonzero = may attend, 0 = blocked; broadcastable to [..., L, S]. */
  mask?: TensorLike;
  /** Added to the scaled scores (ALiBi, relative bias, −Infinity); broadcastable to [..., L, S]. */
  bias?: TensorLike;
  /**
   * `true` or 'bottom-right': query i sits at position p = i + S − L and sees keys j ≤ p.
   * 'top-left': query i sees keys j ≤ i (PyTorch's is_causal).
   */
  causal?: CausalOption;
  /** [left, right]: key j is visible iff p − left ≤ j ≤ p + right; −1 = unbounded. */
  window?: readonly [number, number];
  /** Multiplies q·k; default 1/√E. */
  scale?: number;
  /**
   * Which kernel computes the call: 'auto' (default) picks the fastest that supports it; 'reference' is
   * the plain spec; 'flash' the tiled JS kernel; 'wasm' the tiled WASM SIMD kernel.
   */
  kernel?: KernelName;
  /**
   * Dtype of the result: 'float32' (default) or 'float16'. Inputs may be float16 either way; the
   * kernels accumulate in float32 or float64.
   */
  dtype?: 'float32';
}

/** The same options asking for a float16 (or a chosen) result dtype. */
export type HalfResultOptions<O> = Omit<O, 'dtype'> & { dtype: 'float16' };
export type AnyResultOptions<O> = Omit<O, 'dtype'> & { dtype?: DType };

const OPTION_NAMES = ['mask', 'bias', 'causal', 'window', 'scale', 'kernel', 'dtype'] as const;

// Lives in shape.ts (tensor.ts and the position helpers use it too); re-exported for the layers.
export { checkOptionNames };

/** Tensors of a checked call, plus the shapes a caller needs to build its outputs. */
export interface AttentionPlan {
  problem: AttentionProblem;
  /** Shape of the output: [..., Hq, L, Ev]. */
  outShape: number[];
  /** Shape of the weights: [..., Hq, L, S]. */
  weightsShape: number[];
  /** The kernel asked for. */
  kernel: KernelName;
  /** The dtype of the result. */
  dtype: DType;
}

function isHalf(x: AttentionInput | undefined): x is Tensor<'float16'> {
  return x instanceof Tensor && (x as Tensor<DType>).dtype === 'float16';
}

/**
 * Checks q, k (and v unless it is undefined) and the options, and resolves them to a kernel problem.
 * Shapes: q [..., Hq, L, E], k [..., Hkv, S, E], v [..., Hkv, S, Ev]; rank 2, 3 or 4.
 */
export function planAttention(
  fn: string,
  qIn: AttentionInput,
  kIn: AttentionInput,
  vIn: AttentionInput | undefined,
  options: AnyResultOptions<AttentionOptions>,
  extraOptionNames: readonly string[] = [],
): AttentionPlan {
  checkOptionNames(fn, options, [...OPTION_NAMES, ...extraOptionNames]);
  // All-float16 inputs stay float16 (kernels that can read halves do; runKernel widens for the rest);
  // a mix is widened here.
  const allHalf = isHalf(qIn) && isHalf(kIn) && (vIn === undefined || isHalf(vIn));
  // Below, q, k and v are read for their shapes; their data only when they are float32.
  const q = allHalf ? (qIn as unknown as Tensor) : toTensor(qIn, fn, 'query');
  const k = allHalf ? (kIn as unknown as Tensor) : toTensor(kIn, fn, 'key');
  const v = vIn === undefined ? undefined : allHalf ? (vIn as unknown as Tensor) : toTensor(vIn, fn, 'value');
  const shapes = () =>
    `query ${formatShape(q.shape)}, key ${formatShape(k.shape)}${v ? `, value ${formatShape(v.shape)}` : ''}`;

  const rank = q.rank;
  if (rank < 2 || rank > 4) {
    throw new RangeError(
      `${fn}: query must have rank 2 [L,E], 3 [B,L,E] or 4 [B,H,L,E], got rank ${rank} (${shapes()})`,
    );
  }
  if (k.rank !== rank)
    throw new RangeError(`${fn}: key has rank ${k.rank} but query has rank ${rank} (${shapes()})`);
  if (v && v.rank !== rank) {
    throw new RangeError(`${fn}: value has rank ${v.rank} but query has rank ${rank} (${shapes()})`);
  }

  const [L, E] = q.shape.slice(-2);
  const [S, Ek] = k.shape.slice(-2);
  if (Ek !== E) throw new RangeError(`${fn}: key has E=${Ek} but query has E=${E} (${shapes()})`);
  if (E === 0) throw new RangeError(`${fn}: query and key have E=0; attention needs E ≥ 1 (${shapes()})`);
  let Ev = 0;
  if (v) {
    const Sv = v.shape[rank - 2];
    if (Sv !== S) throw new RangeError(`${fn}: value has S=${Sv} but key has S=${S} (${shapes()})`);
    Ev = v.shape[rank - 1];
  }

  const B = rank >= 3 ? q.shape[0] : 1;
  for (const [name, t] of [
    ['key', k],
    ['value', v],
  ] as const) {
    if (t && rank >= 3 && t.shape[0] !== B) {
      throw new RangeError(`${fn}: ${name} has batch ${t.shape[0]} but query has batch ${B} (${shapes()})`);
    }
  }
  const Hq = rank === 4 ? q.shape[1] : 1;
  const Hkv = rank === 4 ? k.shape[1] : 1;
  if (v && rank === 4 && v.shape[1] !== Hkv) {
    throw new RangeError(`${fn}: value has ${v.shape[1]} heads but key has ${Hkv} (${shapes()})`);
  }
  if (Hkv === 0 ? Hq !== 0 : Hq % Hkv !== 0) {
    throw new RangeError(
      `${fn}: query has Hq=${Hq} heads, which is not a multiple of key/value's Hkv=${Hkv} (${shapes()})`,
    );
  }

  const outShape = [...q.shape.slice(0, -1), Ev];
  const weightsShape = [...q.shape.slice(0, -1), S];
  // Every caller allocates the output (float32, whatever the result dtype) when there is a value, and the
  // weights when there is not; a caller that also wants the weights checks them itself.
  if (v) checkAllocation(fn, 'the output', outShape, 4, ` (${shapes()})`);
  else checkAllocation(fn, 'the weights', weightsShape, 4, ` (${shapes()})`);
  const mask = resolveBroadcast(fn, 'mask', options.mask, weightsShape, shapes);
  const bias = resolveBroadcast(fn, 'bias', options.bias, weightsShape, shapes);

  const { scale, dtype, kernel, causal, left, right } = resolveOptions(fn, options, E);
  const shift = causal === 'top-left' ? 0 : S - L;

  return {
    problem: {
      B,
      Hq,
      Hkv,
      L,
      S,
      E,
      Ev,
      q: allHalf ? new Float32Array(0) : q.data,
      k: allHalf ? new Float32Array(0) : k.data,
      v: v && !allHalf ? v.data : new Float32Array(0),
      half: allHalf
        ? {
            q: (q as unknown as Tensor<'float16'>).data,
            k: (k as unknown as Tensor<'float16'>).data,
            v: v ? (v as unknown as Tensor<'float16'>).data : new Uint16Array(0),
          }
        : undefined,
      scale,
      mask,
      bias,
      shift,
      left,
      right,
      precision: 'float32',
    },
    outShape,
    weightsShape,
    kernel,
    dtype,
  };
}

/**
 * The options that do not depend on the shapes (scale, whose default is 1/√E, dtype, kernel, causal and
 * window), checked and resolved; planAttention's, and a cached call's before it changes its cache.
 */
function resolveOptions(fn: string, options: AnyResultOptions<AttentionOptions>, E: number) {
  let scale = 1 / Math.sqrt(E);
  if (options.scale !== undefined) {
    if (typeof options.scale !== 'number' || !Number.isFinite(options.scale)) {
      const got =
        typeof options.scale === 'number'
          ? String(options.scale)
          : `${formatValue(options.scale)} (${typeof options.scale})`;
      throw new RangeError(`${fn}: scale must be a finite number, got ${got}`);
    }
    scale = options.scale;
  }

  const dtype = options.dtype ?? 'float32';
  if (dtype !== 'float32' && dtype !== 'float16') {
    throw new TypeError(`${fn}: dtype must be 'float32' or 'float16', got ${formatValue(dtype)}`);
  }

  const kernel = options.kernel ?? 'auto';
  if (!KERNEL_NAMES.includes(kernel)) {
    throw new TypeError(
      `${fn}: kernel must be one of ${KERNEL_NAMES.join(', ')}, got ${formatValue(kernel)}`,
    );
  }

  const causal = options.causal ?? false;
  if (causal !== true && causal !== false && causal !== 'bottom-right' && causal !== 'top-left') {
    throw new TypeError(
      `${fn}: causal must be true, false, 'bottom-right' or 'top-left', got ${formatValue(causal)}`,
    );
  }
  let left = Number.POSITIVE_INFINITY;
  let right = Number.POSITIVE_INFINITY;
  if (options.window !== undefined) [left, right] = resolveWindow(fn, options.window);
  if (causal) right = Math.min(right, 0);
  return { scale, dtype, kernel, causal, left, right };
}

/** Checks an attention call's option names and shape-free options (a cached call, before its update). */
export function checkAttentionOptions(fn: string, options: AttentionOptions, E: number): void {
  checkOptionNames(fn, options, OPTION_NAMES);
  resolveOptions(fn, options, E);
}

function resolveWindow(fn: string, window: unknown): [number, number] {
  const ok =
    Array.isArray(window) &&
    window.length === 2 &&
    window.every((w) => typeof w === 'number' && Number.isInteger(w) && w >= -1);
  if (!ok) {
    throw new RangeError(
      `${fn}: window must be [left, right] with integers ≥ 0, or −1 for unbounded, got ${formatValue(window)}`,
    );
  }
  const [l, r] = window as number[];
  return [l === -1 ? Number.POSITIVE_INFINITY : l, r === -1 ? Number.POSITIVE_INFINITY : r];
}

/**
 * Throws unless `value` (a mask or bias) broadcasts to `target`; for layers that check against their own
 * callers' shapes before building the per-head problem. `shapes` describes the caller's arguments.
 */
export function checkBroadcast(
  fn: string,
  arg: string,
  value: TensorLike | undefined,
  target: readonly number[],
  targetName: string,
  shapes: string,
): void {
  if (value === undefined) return;
  const t = toTensor(value, fn, arg);
  if (!broadcastStrides(t.shape, target)) {
    throw new RangeError(
      `${fn}: ${arg} of shape ${formatShape(t.shape)} does not broadcast to ${targetName} = ${formatShape(target)} (${shapes})`,
    );
  }
}

/** Broadcast strides of a mask or bias against the weights' shape, mapped onto [B, H, L, S]. */
function resolveBroadcast(
  fn: string,
  arg: string,
  value: TensorLike | undefined,
  target: number[],
  shapes: () => string,
): BroadcastView | undefined {
  if (value === undefined) return undefined;
  const t: Tensor = toTensor(value, fn, arg);
  const strides = broadcastStrides(t.shape, target);
  if (!strides) {
    throw new RangeError(
      `${fn}: ${arg} of shape ${formatShape(t.shape)} does not broadcast to [..., L, S] = ${formatShape(target)} (${shapes()})`,
    );
  }
  // target is [L,S], [B,L,S] or [B,H,L,S]; missing axes read with stride 0.
  const [sl, ss] = strides.slice(-2);
  const sb = target.length >= 3 ? strides[0] : 0;
  const sh = target.length === 4 ? strides[1] : 0;
  return { data: t.data, sb, sh, sl, ss };
}
