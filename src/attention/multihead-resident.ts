// A multi-head forward on this thread with its activations kept in WebAssembly memory: the in-projections
// write their heads where attention reads them, attention's output is merged there, and the
// out-projection reads it there; only x comes in and the output goes out (MultiHeadAttention.forward).
// One decision to know: the arithmetic is the step-by-step path's (the same GEMM packing and tiles, the
// same attention kernel), so the result is the same bits; this path only drops the copies between the
// steps (C blocks out to JS, the heads' split and merge, q/k/v back in, x staged three times): P2's sync
// forward ran 3.5–4% faster for it (alternated call by call in one process, AMD VM, 2026-12-02).

import { chooseGemmKernel } from '../kernels/gemm.js';
import type { GemmProblem } from '../kernels/gemm-types.js';
import { wasmGemmKernel, wasmGemmResident } from '../kernels/gemm-wasm.js';
import { linearProblem } from '../kernels/matmul.js';
import { permuteResident } from '../kernels/ops-wasm.js';
import { KernelResourceError } from '../kernels/types.js';
import { allocateResident, freeResident, residentView, wasmSupport } from '../kernels/wasm-runtime.js';
import type { MultiHeadCall } from '../runtime.js';
import { runKernel } from './sdpa.js';

const align = (bytes: number) => Math.ceil(bytes / 16) * 16;
const NO_FLOATS = new Float32Array(0);

/**
 * Runs `call` (see MultiHeadCall) on this thread's WASM instance with its activations resident; false,
 * having written nothing the caller reads, when it cannot: WASM or its GEMM does not serve these
 * products, a head's width is not a multiple of 8 (the heads are written in place, 8 columns at a time),
 * no query rows or no keys, or the engine refuses the memory. The caller then runs the steps one by one.
 */
export function multiHeadResident(fn: string, call: MultiHeadCall): boolean {
  const p = call.plan.problem;
  const { B, Hq, L, Ev } = p;
  // No keys (S = 0): the steps' zero-row products and empty softmax, not worth a path of their own.
  if (B * L * p.S === 0 || wasmSupport() !== true || p.half) return false;
  const width = Hq * Ev;
  const D = call.outWeight.length / Math.max(width, 1);
  const outProblem = linearProblem(NO_FLOATS, B * L, width, call.outWeight, D, call.outBias);
  const products: GemmProblem[] = [...call.projections.map((x) => x.problem), outProblem];
  // The step-by-step path's `linear` takes the GEMM 'auto' picks: only when that is WASM are the bits
  // the same. (The out-projection's A is resident: NO_FLOATS stands for it, a Float32Array as it is.)
  if (products.some((g) => chooseGemmKernel(fn, 'auto', g) !== wasmGemmKernel)) {
    return false;
  }
  if (call.projections.some(({ problem: g, heads, width: w }) => w % 8 !== 0 || g.N !== heads * w)) {
    return false;
  }
  // Resident memory: each projection's heads [B, heads, rows, width] (q, k, v, as splitHeads lays them
  // out), the heads' output [B, Hq, L, Ev], that output merged [B·L, Hq·Ev], and each distinct input
  // of the projections (self-attention's x once for all three; the GEMM would stage it three times).
  // Regions in order: q, k, v heads (0–2), OUT, MERGED, then the inputs from INPUTS on.
  const [OUT, MERGED, INPUTS] = [3, 4, 5];
  const inputs = [...new Set(call.projections.map(({ problem: g }) => g.a))];
  const sizes = [
    ...call.projections.map(({ problem: g }) => g.M * g.N),
    B * L * width,
    B * L * width,
    ...inputs.map((a) => {
      const g = call.projections.find(({ problem }) => problem.a === a)!.problem;
      return g.M * g.K;
    }),
  ];
  const offsets: number[] = [];
  let bytes = 0;
  for (const n of sizes) {
    offsets.push(bytes);
    bytes += align(n * 4);
  }
  const owner = {};
  let allocation: ReturnType<typeof allocateResident>;
  try {
    allocation = allocateResident(fn, bytes, owner);
  } catch (err) {
    if (err instanceof RangeError) return false;
    throw err;
  }
  if (!allocation) return false;
  try {
    const ptr = (i: number) => allocation.ptr + offsets[i];
    for (const [i, a] of inputs.entries()) {
      const at = INPUTS + i;
      residentView(allocation, offsets[at], sizes[at]).set(a.subarray(0, sizes[at]));
    }
    call.projections.forEach(({ problem: g, heads, width: w }, i) => {
      const rows = g.M / B;
      wasmGemmResident(fn, g, NO_FLOATS, {
        a: { ptr: ptr(INPUTS + inputs.indexOf(g.a)), ld: g.K },
        out: {
          ptr: ptr(i),
          rows,
          width: w,
          ld: w,
          groupStride: rows * w * 4,
          batchStride: heads * rows * w * 4,
        },
      });
    });
    const [q, k, v, out] = [0, 1, 2, OUT].map((i) => residentView(allocation, offsets[i], sizes[i]));
    runKernel(fn, { ...call.plan, problem: { ...p, q, k, v } }, { out, weights: call.weights });
    // [B, Hq, L, Ev] → [B, L, Hq, Ev]: runs of Ev floats, as splitHeads' merge moves them.
    const from = [Hq * L * Ev, L * Ev, Ev] as const;
    permuteResident(fn, ptr(OUT), ptr(MERGED), [B, Hq, L, Ev], from, [L * width, Ev, width]);
    wasmGemmResident(fn, outProblem, call.out, { a: { ptr: ptr(MERGED), ld: width } });
    return true;
  } catch (err) {
    // Memory refused part-way: nothing of call.out is written before the last product's memory is
    // ensured, and the caller's steps write every output again.
    if (err instanceof KernelResourceError) return false;
    throw err;
  } finally {
    freeResident(allocation);
    void owner;
  }
}
