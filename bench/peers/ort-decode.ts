// G1's decode-step peer: onnxruntime-web (WASM, one thread) running the standard opset-23 Attention op on
// one query, q [1, Hq, 1, E], either over k/v of every cached key given as inputs, or over past_key /
// past_value plus this step's key and value (the op concatenates them and returns present_key /
// present_value, the way a decoder exported with a KV cache runs); and the same step with
// MultiHeadAttention's projections around it (one token x [1, 1, D] in).
// One decision to know: every run passes whole tensors to one session.run and gets the outputs back as
// JS arrays, the way a user calls it, so the copies in and out of the WASM heap are part of its time.

import { decodeAttentionModel, type MhaDecodeWeights, mhaDecodeModel } from './onnx-model.js';

type Ort = typeof import('onnxruntime-web');

/** The step's tensors, row-major: q [1, Hq, 1, E]; k/v [1, Hkv, S, E] (every key, the new one last). */
export interface DecodeInputs {
  Hq: number;
  Hkv: number;
  S: number;
  E: number;
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
}

/** Rows 0 … n − 1 of each head of x [Hkv, S, E] → [Hkv, n, E]; with `from`, rows from … S − 1. */
export function headRows(
  x: Float32Array,
  Hkv: number,
  S: number,
  E: number,
  n: number,
  from = 0,
): Float32Array {
  const out = new Float32Array(Hkv * n * E);
  for (let h = 0; h < Hkv; h++) out.set(x.subarray((h * S + from) * E, (h * S + from + n) * E), h * n * E);
  return out;
}

/** onnxruntime-web on one thread and a session of `model` (all graph optimizations). */
async function openSession(model: Uint8Array) {
  const ort: Ort = await import('onnxruntime-web');
  ort.env.wasm.numThreads = 1;
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['wasm'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
  });
  return { ort, session };
}

/**
 * A session of the decode graph on one thread; the returned function runs one step and returns out
 * [1, Hq, 1, E] (and, with `past`, the length of present_key's sequence axis, for the check).
 */
export async function prepareOrtDecode(
  past: boolean,
  x: DecodeInputs,
): Promise<() => Promise<{ out: Float32Array; presentLength?: number }>> {
  const { ort, session } = await openSession(decodeAttentionModel({ past }));
  const { Hq, Hkv, S, E } = x;
  const tensor = (data: Float32Array, dims: number[]) => new ort.Tensor('float32', data, dims);
  const q = tensor(x.q, [1, Hq, 1, E]);
  if (!past) {
    const k = tensor(x.k, [1, Hkv, S, E]);
    const v = tensor(x.v, [1, Hkv, S, E]);
    return async () => ({ out: (await session.run({ q, k, v }))['out'].data as Float32Array });
  }
  const P = S - 1;
  const feeds = {
    q,
    k: tensor(headRows(x.k, Hkv, S, E, 1, P), [1, Hkv, 1, E]),
    v: tensor(headRows(x.v, Hkv, S, E, 1, P), [1, Hkv, 1, E]),
    past_key: tensor(headRows(x.k, Hkv, S, E, P), [1, Hkv, P, E]),
    past_value: tensor(headRows(x.v, Hkv, S, E, P), [1, Hkv, P, E]),
  };
  return async () => {
    const result = await session.run(feeds);
    return { out: result['out'].data as Float32Array, presentLength: result['present_key'].dims[2] };
  };
}

/**
 * The step with projections: a session of mhaDecodeModel; the returned function runs x [1, 1, D] over
 * past_key / past_value [1, Hkv, P, hd] and returns out [1, 1, D] and present_key's sequence length.
 */
export async function prepareOrtMhaDecode(
  weights: MhaDecodeWeights,
  x: Float32Array,
  pastKey: Float32Array,
  pastValue: Float32Array,
  P: number,
): Promise<() => Promise<{ out: Float32Array; presentLength?: number }>> {
  const { ort, session } = await openSession(mhaDecodeModel(weights));
  const { embedDim: D, numHeads, numKvHeads: Hkv } = weights;
  const hd = D / numHeads;
  const feeds = {
    x: new ort.Tensor('float32', x, [1, 1, D]),
    past_key: new ort.Tensor('float32', pastKey, [1, Hkv, P, hd]),
    past_value: new ort.Tensor('float32', pastValue, [1, Hkv, P, hd]),
  };
  return async () => {
    const result = await session.run(feeds);
    return { out: result['out'].data as Float32Array, presentLength: result['present_key'].dims[2] };
  };
}
