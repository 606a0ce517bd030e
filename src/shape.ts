// Shape helpers shared by the tensor and every public op: validation, sizes, strides, broadcasting, and
// the one format every error message uses for shapes ([2,3,5,8]).

/** Formats a shape the way every qkv error message does: `[2,3,5,8]`. */
export function formatShape(shape: readonly number[]): string {
  return `[${shape.join(',')}]`;
}

/** Number of elements of a shape (1 for a scalar shape []). */
export function sizeOf(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** Row-major strides of a shape. */
export function stridesOf(shape: readonly number[]): number[] {
  const strides = new Array<number>(shape.length);
  let s = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

/** Throws unless every size is a non-negative safe integer. `where` names the caller in the message. */
export function checkShape(shape: readonly number[], where: string): void {
  if (!Array.isArray(shape))
    throw new TypeError(`${where}: shape must be an array of sizes, got ${String(shape)}`);
  for (let i = 0; i < shape.length; i++) {
    const d = shape[i];
    if (typeof d !== 'number' || !Number.isSafeInteger(d) || d < 0) {
      throw new RangeError(
        `${where}: size ${String(d)} at axis ${i} of shape ${formatShape(shape)} is not a non-negative integer`,
      );
    }
  }
}

/**
 * Strides that read a tensor of shape `from` as if it were broadcast to `to` (NumPy rules: shapes are
 * right-aligned and each size of `from` is 1 or equal). Broadcast axes get stride 0. Returns undefined
 * when `from` does not broadcast to `to`.
 */
export function broadcastStrides(from: readonly number[], to: readonly number[]): number[] | undefined {
  if (from.length > to.length) return undefined;
  const own = stridesOf(from);
  const out = new Array<number>(to.length).fill(0);
  const shift = to.length - from.length;
  for (let i = 0; i < from.length; i++) {
    const f = from[i];
    const t = to[i + shift];
    if (f === t) out[i + shift] = f === 1 ? 0 : own[i];
    else if (f === 1) out[i + shift] = 0;
    else return undefined;
  }
  return out;
}
