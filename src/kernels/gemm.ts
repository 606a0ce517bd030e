// GEMM: the entry point every matrix product goes through, and its fallback chain (wasm → reference) over
// the GEMM kernels of the one backend table (backends.ts), the attention dispatcher's pattern.
// One decision to know: `precision` picks the arithmetic ('float64' only the reference serves); 'auto'
// takes the first kernel that supports the call, and moves on to the next when a kernel is refused memory
// at run time (KernelResourceError: it wrote nothing of C).

import { autoOrder as backendOrder, registeredBackends } from './backends.js';
import { referenceGemmKernel } from './gemm-reference.js';
import type { GemmKernel, GemmProblem } from './gemm-types.js';
import { wasmGemmKernel } from './gemm-wasm.js';
import { type Floats, KernelResourceError, overlaps } from './types.js';

export { type GemmKernel, type GemmProblem, geluTanh } from './gemm-types.js';
export { referenceGemmKernel, wasmGemmKernel };

/** Names accepted by `gemm`'s kernel argument. */
export type GemmKernelName = 'auto' | 'reference' | 'wasm';

/** The GEMM kernels of the backend table (backends.ts), by name. */
const kernels = new Map<string, GemmKernel>(
  backendOrder().flatMap((b) => (b.gemm ? [[b.name, b.gemm] as const] : [])),
);

/** Fastest first, as the backend table orders them; 'auto' walks it. */
const autoOrder = [...kernels.keys()];

/** Every registered GEMM kernel, the reference (the spec) first: what conformance tests enumerate. */
export function registeredGemmKernels(): readonly GemmKernel[] {
  return registeredBackends().flatMap((b) => (b.gemm ? [b.gemm] : []));
}

/** The kernel that serves this call; throws naming `fn` if the one asked for cannot. */
export function chooseGemmKernel(fn: string, name: GemmKernelName, problem: GemmProblem): GemmKernel {
  if (name === 'auto') {
    for (const candidate of autoOrder) {
      const kernel = kernels.get(candidate)!;
      if (kernel.supports(problem) === true) return kernel;
    }
    return referenceGemmKernel;
  }
  const kernel = kernels.get(name);
  if (!kernel)
    throw new Error(`${fn}: no GEMM kernel '${name}' (kernels: ${[...kernels.keys()].join(', ')})`);
  const ok = kernel.supports(problem);
  if (ok !== true) throw new Error(`${fn}: GEMM kernel '${name}' cannot serve this call: ${ok}`);
  return kernel;
}

/** The next kernel of the chain after `kernel` that supports the call ('auto' only). */
export function gemmFallbackFor(
  name: GemmKernelName,
  kernel: GemmKernel,
  problem: GemmProblem,
): GemmKernel | undefined {
  if (name !== 'auto') return undefined;
  for (const candidate of autoOrder.slice(autoOrder.indexOf(kernel.name) + 1)) {
    const next = kernels.get(candidate)!;
    if (next.supports(problem) === true) return next;
  }
  return undefined;
}

/**
 * Checks that the buffers hold the problem's shapes (an internal caller's bug otherwise, named with the
 * sizes): kernels index without checking.
 */
function checkSizes(p: GemmProblem, c: Floats): void {
  const { M, N, K } = p;
  const batch = p.batch ?? 1;
  const dims = [M, N, K, batch];
  if (!dims.every((d) => Number.isInteger(d) && d >= 0)) {
    throw new RangeError(`gemm: M, N, K and batch must be integers ≥ 0, got ${dims.join(', ')}`);
  }
  for (const [name, stride] of [
    ['strideA', p.strideA],
    ['strideB', p.strideB],
  ] as const) {
    if (stride !== undefined && !(Number.isSafeInteger(stride) && stride >= 0)) {
      throw new RangeError(`gemm: ${name} must be an integer ≥ 0, got ${stride}`);
    }
  }
  // C is written block by block while A, B and the bias are still read (a later K block re-reads A):
  // an output over its own input would read partial sums back.
  const inputs: [string, Floats | undefined][] = [
    ['a', p.a],
    ['b', p.b],
    ['bias', p.bias],
  ];
  for (const [name, x] of inputs) {
    if (x && overlaps(x, c))
      throw new RangeError(`gemm: c overlaps ${name}; write the product to other memory`);
  }
  const span = (stride: number | undefined, size: number) =>
    batch === 0 ? 0 : (batch - 1) * (stride ?? size) + size;
  const need: [string, number, number][] = [
    ['a', p.a.length, span(p.strideA, M * K)],
    ['b', p.b.length, span(p.strideB, K * N)],
    ['c', c.length, batch * M * N],
  ];
  if (p.bias) need.push(['bias', p.bias.length, N]);
  for (const [name, has, want] of need) {
    if (has < want) {
      throw new RangeError(
        `gemm: ${name} has ${has} elements, needs ${want} (M=${M}, N=${N}, K=${K}, batch=${batch}, transA=${p.transA}, transB=${p.transB})`,
      );
    }
  }
}

/**
 * C = op(A)·op(B) (+ bias) (+ C) (→ GELU), every row of every product of the batch, on `kernel` ('auto':
 * the WASM kernel where it serves, else the reference). Returns c.
 */
export function gemm<T extends Floats>(problem: GemmProblem, c: T, kernel: GemmKernelName = 'auto'): T {
  checkSizes(problem, c);
  const rows = (problem.batch ?? 1) * problem.M;
  const chosen = chooseGemmKernel('gemm', kernel, problem);
  try {
    chosen.rows(problem, c, 0, rows);
  } catch (err) {
    const fallback = err instanceof KernelResourceError && gemmFallbackFor(kernel, chosen, problem);
    if (!fallback) throw err;
    fallback.rows(problem, c, 0, rows); // the failed kernel wrote nothing, so accumulation stays exact
  } finally {
    chosen.release?.();
  }
  return c;
}
