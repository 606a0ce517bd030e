// tfjs-core with the WASM backend, called the tuned way: per head, transpose K first and then matMul
// (matMul's transposeB path is ~10× slower in tfjs-wasm 4.22), softmax, matMul; causal adds a 0/−∞ mask.
// One decision to know: tfjs-wasm turns threads off under Node, so this peer only has a 1-thread row.

import '@tensorflow/tfjs-backend-wasm';
import * as tf from '@tensorflow/tfjs-core';
import type { Config } from '../jobs.js';
import { causalBias } from './mask.js';

/** Sets up the backend and the mask; the returned function runs one forward pass. */
export async function prepareTfjs(
  c: Config,
  q: Float32Array,
  k: Float32Array,
  v: Float32Array,
): Promise<() => Promise<Float32Array>> {
  await tf.setBackend('wasm');
  await tf.ready();
  const { B, H, L, S, E } = c;
  const scale = 1 / Math.sqrt(E);
  const mask = c.causal ? tf.tensor2d(causalBias(L, S), [L, S]) : undefined; // [L, S]

  return async () => {
    const out = new Float32Array(B * H * L * E);
    for (let bh = 0; bh < B * H; bh++) {
      const head = tf.tidy(() => {
        const qh = tf.tensor2d(q.subarray(bh * L * E, (bh + 1) * L * E), [L, E]); // [L, E]
        const kh = tf.tensor2d(k.subarray(bh * S * E, (bh + 1) * S * E), [S, E]); // [S, E]
        const vh = tf.tensor2d(v.subarray(bh * S * E, (bh + 1) * S * E), [S, E]); // [S, E]
        const scores = tf.mul(tf.matMul(qh, tf.transpose(kh)), scale); // [L, S]
        const probs = tf.softmax(mask ? tf.add(scores, mask) : scores); // [L, S]
        return tf.matMul(probs, vh); // [L, E]
      });
      out.set(head.dataSync() as Float32Array, bh * L * E);
      head.dispose();
    }
    return out;
  };
}
