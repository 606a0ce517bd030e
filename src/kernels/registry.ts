// Attention dispatch: a fallback chain, first kernel that supports the call wins (hono's pattern), over the
// attention kernels of the one backend table (backends.ts).
// One decision to know: 'auto' never picks the reference kernel while a tiled one can serve, so a long
// sequence never takes the materialising path by default.

import { autoOrder as backendOrder, registeredBackends } from './backends.js';
import { referenceKernel } from './reference.js';
import type {
  AttentionBackward,
  AttentionKernel,
  AttentionOutputs,
  AttentionProblem,
  BackwardInputs,
  BackwardProblem,
} from './types.js';
import { probeWasm, wasmRuntimeFailure, wasmUnavailableReason } from './wasm.js';

/** Names accepted by the `kernel` option. */
export type KernelName = 'auto' | 'reference' | 'flash' | 'wasm';

export const KERNEL_NAMES: readonly KernelName[] = ['auto', 'reference', 'flash', 'wasm'];

/** The attention kernels of the backend table (backends.ts), by name. */
const kernels = new Map<string, AttentionKernel>(
  backendOrder().flatMap((b) => (b.attention ? [[b.name, b.attention] as const] : [])),
);

/** Fastest first, as the backend table orders them; 'auto' walks this list (WASM declines where SIMD is missing). */
const autoOrder: string[] = [...kernels.keys()];

/** Every registered attention kernel, the reference (the spec) first: what conformance tests enumerate. */
export function registeredKernels(): readonly AttentionKernel[] {
  return registeredBackends().flatMap((b) => (b.attention ? [b.attention] : []));
}

/** The operations a kernel implements: every kernel runs the forward; some also the backward. */
export function kernelOps(kernel: AttentionKernel): ('attention.forward' | 'attention.backward')[] {
  return kernel.backward ? ['attention.forward', 'attention.backward'] : ['attention.forward'];
}

/**
 * The backward pass that serves a call: the named kernel's own (throwing naming `fn` if it has none or
 * cannot serve), or for 'auto' the first kernel of the chain whose backward supports the call.
 */
export function chooseBackward(
  fn: string,
  name: KernelName,
  problem: BackwardProblem,
  inputs: BackwardInputs,
): AttentionBackward {
  if (name === 'auto') {
    for (const candidate of autoOrder) {
      const backward = kernels.get(candidate)!.backward;
      if (backward && backward.supports(problem, inputs) === true) return backward;
    }
    return referenceKernel.backward!;
  }
  const kernel = kernels.get(name);
  const withBackward = [...kernels.values()].filter((k) => k.backward).map((k) => k.name);
  if (!kernel?.backward) {
    throw new Error(
      `${fn}: kernel '${name}' has no backward pass (kernels with one: ${withBackward.join(', ')}, or 'auto')`,
    );
  }
  const ok = kernel.backward.supports(problem, inputs);
  if (ok !== true) throw new Error(`${fn}: kernel '${name}' cannot serve this backward call: ${ok}`);
  return kernel.backward;
}

/**
 * Whether a backward call on kernel `name` needs the forward's out and lse: the kernel's backward says
 * so; 'auto' does when any backward it may choose does (it prefers those, given out and lse). An
 * unknown name or a kernel with no backward: false (chooseBackward then says why).
 */
export function backwardNeedsForward(name: KernelName): boolean {
  const names = name === 'auto' ? autoOrder : [name];
  return names.some((n) => kernels.get(n)?.backward?.needsForward === true);
}

/** The kernel by name (for the worker pool, which receives names). */
export function kernelByName(name: string): AttentionKernel | undefined {
  return kernels.get(name);
}

/** The kernel that serves this call; throws naming `fn` if the requested one cannot. */
export function chooseKernel(
  fn: string,
  name: KernelName,
  problem: AttentionProblem,
  outputs: AttentionOutputs,
): AttentionKernel {
  if (name === 'auto') {
    for (const candidate of autoOrder) {
      const kernel = kernels.get(candidate)!;
      if (kernel.supports(problem, outputs) === true) return kernel;
    }
    return referenceKernel;
  }
  const kernel = kernels.get(name);
  if (!kernel) {
    throw new Error(
      `${fn}: kernel '${name}' is not available in this runtime (available: ${[...kernels.keys()].join(', ')})`,
    );
  }
  const ok = kernel.supports(problem, outputs);
  if (ok !== true) throw new Error(`${fn}: kernel '${name}' cannot serve this call: ${ok}`);
  return kernel;
}

/**
 * The kernel that takes over a call 'auto' gave to `kernel` if `kernel` fails at run time for want of
 * resources (see KernelResourceError): the next one in the chain that supports the call. None for a
 * kernel asked for by name.
 */
export function fallbackFor(
  name: KernelName,
  kernel: AttentionKernel,
  problem: AttentionProblem,
  outputs: AttentionOutputs,
): AttentionKernel | undefined {
  if (name !== 'auto') return undefined;
  for (const candidate of autoOrder.slice(autoOrder.indexOf(kernel.name) + 1)) {
    const next = kernels.get(candidate)!;
    if (next.supports(problem, outputs) === true) return next;
  }
  return undefined;
}

/**
 * Which kernels run here: the WASM kernel's build ('relaxed-simd' with fused multiply-add, or 'simd')
 * or why it is unavailable; 'flash' and 'reference' run everywhere. `wasmFallback` is '' unless the WASM
 * kernel failed at run time on this thread (the engine refused it memory) and 'auto' fell back to the JS
 * kernel for that call; a kernel that could not even be instantiated is then reported unavailable.
 */
export function kernelSupport(): {
  wasm: 'relaxed-simd' | 'simd' | undefined;
  wasmUnavailable: string;
  wasmFallback: string;
} {
  const variant = probeWasm();
  const unavailable = wasmUnavailableReason();
  return {
    wasm: unavailable ? undefined : variant,
    wasmUnavailable: unavailable,
    wasmFallback: wasmRuntimeFailure(),
  };
}
