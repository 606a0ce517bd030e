// P2's tfjs peer: nn.MultiheadAttention's self-attention forward written in tfjs-core ops on the WASM
// backend, with the weights of the exported .onnx: x·W_inᵀ + b, split q/k/v, per head
// softmax(q_h·k_hᵀ/√E)·v_h, heads concatenated, ·W_outᵀ + b.
// One decision to know: it is tuned as P1's tfjs peer is: the weights are transposed once at set-up (not
// timed), K is transposed before its matMul (matMul's transposeB path is ~10× slower in tfjs-wasm 4.22),
// and heads are 2-D matMuls in a loop (its batched matMul at [8, 1024, 1024]·[8, 1024, 64] is far slower).

import '@tensorflow/tfjs-backend-wasm';
import * as tf from '@tensorflow/tfjs-core';
import { MHA_EMBED, MHA_HEADS, MHA_LEN, type MhaFixture } from '../p2.js';

/** Sets up the backend and the weights; the returned function runs one forward pass. */
export async function prepareTfjsMha(f: MhaFixture): Promise<() => Promise<Float32Array>> {
  await tf.setBackend('wasm');
  await tf.ready();
  const D = MHA_EMBED;
  const H = MHA_HEADS;
  const E = D / H;
  const L = MHA_LEN;
  const w = (name: string) => f.weights[name];
  const inProjT = tf.tidy(() => tf.transpose(tf.tensor2d(w('in_proj_weight').data, [3 * D, D]))); // [D, 3D]
  const inBias = tf.tensor1d(w('in_proj_bias').data); // [3D]
  const outProjT = tf.tidy(() => tf.transpose(tf.tensor2d(w('out_proj.weight').data, [D, D]))); // [D, D]
  const outBias = tf.tensor1d(w('out_proj.bias').data); // [D]
  const scale = 1 / Math.sqrt(E);

  return async () => {
    const out = tf.tidy(() => {
      const x = tf.tensor2d(f.x, [L, D]);
      const qkv = tf.add(tf.matMul(x, inProjT), inBias); // [L, 3D]
      const [q, k, v] = tf.split(qkv, 3, 1); // [L, D] each
      const heads = Array.from({ length: H }, (_, h) => {
        const column = (t: tf.Tensor) => tf.slice(t, [0, h * E], [L, E]) as tf.Tensor2D; // [L, E]
        const probs = tf.softmax(tf.mul(tf.matMul(column(q), tf.transpose(column(k))), scale)); // [L, L]
        return tf.matMul(probs, column(v)); // [L, E]
      });
      return tf.add(tf.matMul(tf.concat(heads, 1), outProjT), outBias); // [L, D]
    });
    const data = (await out.data()) as Float32Array;
    out.dispose();
    return data;
  };
}
