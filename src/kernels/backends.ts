// The registry: every backend and the ops it implements (attention forward, attention backward, GEMM) in
// one table, fastest first. One decision to know: the attention and GEMM dispatchers (registry.ts,
// gemm.ts) keep their own typed entry points — an attention call and a matrix product share no problem
// type — but both read their candidates and their 'auto' order from this table, and the test rings
// enumerate it, so a backend, or an op added to one, is registered, dispatched and tested from one place.

import { flashKernel } from './flash.js';
import { referenceGemmKernel } from './gemm-reference.js';
import type { GemmKernel } from './gemm-types.js';
import { wasmGemmKernel } from './gemm-wasm.js';
import { referenceKernel } from './reference.js';
import type { AttentionKernel } from './types.js';
import { wasmKernel } from './wasm.js';

/** The operations a backend may implement. */
export type OpName = 'attention.forward' | 'attention.backward' | 'gemm';

/** A backend: its name (the `kernel` option's value) and its implementation of each op it has. */
export interface Backend {
  readonly name: 'reference' | 'flash' | 'wasm';
  /** Attention forward; its `backward`, when it has one, is the attention backward. */
  readonly attention?: AttentionKernel;
  readonly gemm?: GemmKernel;
}

/** Fastest first: the order 'auto' walks for every op (a backend that cannot serve a call declines it). */
const BACKENDS: readonly Backend[] = [
  { name: 'wasm', attention: wasmKernel, gemm: wasmGemmKernel },
  { name: 'flash', attention: flashKernel },
  { name: 'reference', attention: referenceKernel, gemm: referenceGemmKernel },
];

/** Every backend, the reference (the executable spec of every op) first: what the test rings enumerate. */
export function registeredBackends(): readonly Backend[] {
  const reference = BACKENDS.find((b) => b.name === 'reference')!;
  return [reference, ...BACKENDS.filter((b) => b !== reference)];
}

/** The backends in 'auto' order (fastest first). */
export function autoOrder(): readonly Backend[] {
  return BACKENDS;
}

/** The ops a backend implements. */
export function backendOps(backend: Backend): OpName[] {
  const ops: OpName[] = [];
  if (backend.attention) ops.push('attention.forward');
  if (backend.attention?.backward) ops.push('attention.backward');
  if (backend.gemm) ops.push('gemm');
  return ops;
}
