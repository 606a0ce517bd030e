// qkv rows: the compiled library (dist/, through the package's own name), one kernel and thread count each.
// One decision to know: the kernel/threads API is looked up at run time, not typed, so rows whose API has
// not landed yet report "unavailable: <the library's own error>" instead of breaking the build.

import type { Tensor } from 'qkv';
import * as qkv from 'qkv';
import type { Config, Impl } from './jobs.js';

type Options = Record<string, unknown>;
type SyncAttention = (q: Tensor, k: Tensor, v: Tensor, options?: Options) => Tensor;
type AsyncAttention = (q: Tensor, k: Tensor, v: Tensor, options?: Options) => Promise<Tensor>;

const api = qkv as unknown as Record<string, unknown>;

function syncAttention(): SyncAttention {
  return api['scaledDotProductAttention'] as SyncAttention;
}

/** Which build of the WASM kernel runs in this process ('relaxed-simd', 'simd'), if any. */
export function wasmBuild(): string | undefined {
  const support = api['kernelSupport'];
  return typeof support === 'function' ? (support as () => { wasm?: string })().wasm : undefined;
}

/** The function a row calls. Throws (making the row "unavailable") when the library lacks it. */
export function prepareQkv(
  impl: Extract<Impl, { kind: 'qkv' | 'qkv-default' }>,
  c: Config,
  q: Tensor,
  k: Tensor,
  v: Tensor,
): () => Promise<Float32Array> {
  if (impl.kind === 'qkv-default') {
    const sdpa = syncAttention();
    const options = c.causal ? { causal: true } : {};
    return async () => sdpa(q, k, v, options).data;
  }
  if (impl.relaxed && wasmBuild() !== 'relaxed-simd') {
    throw new Error(`the relaxed-SIMD build did not validate here (build in use: ${wasmBuild()})`);
  }
  if (impl.mode === 'sync') {
    const sdpa = syncAttention();
    const options = { causal: c.causal, kernel: impl.kernel };
    return async () => sdpa(q, k, v, options).data;
  }
  const sdpaAsync = api['scaledDotProductAttentionAsync'];
  if (typeof sdpaAsync !== 'function') throw new Error('qkv does not export scaledDotProductAttentionAsync');
  const options = { causal: c.causal, kernel: impl.kernel, threads: impl.threads };
  return async () => (await (sdpaAsync as AsyncAttention)(q, k, v, options)).data;
}

/**
 * The qkv reference kernel's output, the expected value for small configs. Uses `kernel: 'reference'`
 * where the library has that option; before kernel dispatch existed the reference was the only kernel.
 */
export function referenceOutput(q: Tensor, k: Tensor, v: Tensor, causal: boolean): Float32Array {
  const sdpa = syncAttention();
  try {
    return sdpa(q, k, v, { causal, kernel: 'reference' }).data;
  } catch (error) {
    if (!String(error).includes("unknown option 'kernel'")) throw error;
    return sdpa(q, k, v, { causal }).data;
  }
}
