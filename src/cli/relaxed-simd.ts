// Relaxed SIMD (fused multiply-add) for the `qkv` executable on Node 20, where V8 validates it only behind
// --experimental-wasm-relaxed-simd (Node ≥ 22 and Chrome ≥ 114 have it on). The GEMM, most of a training
// step, runs about 1.2–1.4× faster on the FMA build (docs/kernels-and-speed.md).
// One decision to know: this is the CLI's choice, made by src/cli.ts before any WebAssembly is compiled;
// the library never sets a V8 flag (importing it has no side effects). A library user opts in with
// `node --experimental-wasm-relaxed-simd` (or this same call before the first op). V8 flags are per
// process, so worker threads started afterwards (--threads) validate the relaxed build too.

import { setFlagsFromString } from 'node:v8';
import { RELAXED_WASM_BASE64 } from '../kernels/wasm-binary.generated.js';

/** The V8 flag that enables relaxed SIMD on Node 20. */
export const RELAXED_SIMD_FLAG = '--experimental-wasm-relaxed-simd';

function relaxedValidates(): boolean {
  try {
    return WebAssembly.validate(Uint8Array.from(atob(RELAXED_WASM_BASE64), (c) => c.charCodeAt(0)));
  } catch {
    return false;
  }
}

/**
 * Makes qkv's relaxed-SIMD build validate in this process, if it does not already: sets V8's flag (only
 * where the build does not validate, so nothing changes on Node ≥ 22). Must run before the first WASM op
 * (the build is chosen once, when the module is first compiled). Returns whether the build validates now.
 */
export function enableRelaxedSimd(): boolean {
  if (relaxedValidates()) return true;
  try {
    setFlagsFromString(RELAXED_SIMD_FLAG); // V8 only; an engine without the flag ignores it
  } catch {
    return false;
  }
  return relaxedValidates();
}
