// T1's tfjs peers: the same decoder as qkv's TinyTransformer written in tfjs-core ops — embedding ×√D plus
// sinusoidal positions, 2 pre-LayerNorm blocks (packed q/k/v projection, causal softmax attention over
// [B, H, L, E] heads, output projection; tanh-GELU MLP), final LayerNorm, output head tied to the
// embedding — trained with tf.variableGrads, softmax cross-entropy and tf.train.adam plus decoupled weight
// decay on the matrices (AdamW, as qkv's: w ← w·(1 − lr·wd) before the Adam update, grads taken first).
// One decision to know: the peer is tuned as P1's tfjs peer is: tfjs-wasm 4.22's matMul is 13–15× slower
// with transposeA/transposeB (its own matMul gradient uses both), so every product is `mm`, whose gradient
// transposes explicitly first (weights are stored [in, out] so the forward needs no transpose either).
// tfjs-wasm has no kernel for gather's gradient (UnsortedSegmentSum), so on 'wasm' the embedding is a
// one-hot [N, V] matMul (one-hot built once, outside the step, gradient onehotᵀ·dy); on 'cpu' it is
// tf.gather. tfjs-core's gradients are registered as the @tensorflow/tfjs package would (tfjs-gradients.ts).

import * as tf from '@tensorflow/tfjs-core';
import { T1, type TrainStep, t1Batch } from '../t1.js';
import { registerAllGradients } from './tfjs-gradients.js';

/** The sinusoidal table [L, D] (qkv's sinusoidalPositionalEncoding: sin on even columns, cos on odd). */
function positions(L: number, D: number): Float32Array {
  const pe = new Float32Array(L * D);
  for (let c = 0; c < D; c++) {
    const invFreq = 10000 ** (-(c - (c % 2)) / D);
    for (let p = 0; p < L; p++) pe[p * D + c] = c % 2 === 0 ? Math.sin(p * invFreq) : Math.cos(p * invFreq);
  }
  return pe;
}

/** Sets up the backend, the model and the optimizer; the returned function runs one step. */
export async function prepareTfjsTrain(backend: 'wasm' | 'cpu'): Promise<TrainStep> {
  // Only the backend the row measures is loaded (its memory shows in the row's RSS).
  await import(backend === 'wasm' ? '@tensorflow/tfjs-backend-wasm' : '@tensorflow/tfjs-backend-cpu');
  await registerAllGradients();
  await tf.setBackend(backend);
  await tf.ready();
  const { vocabSize: V, dModel: D, numHeads: H, numLayers, dFF: F, batch: B, seqLen: L } = T1;
  const E = D / H;
  const N = B * L;

  let seed = 1;
  const uniform = (shape: number[], bound: number) =>
    tf.randomUniform(shape, -bound, bound, 'float32', seed++);
  const vars = new Map<string, tf.Variable>();
  const param = (name: string, init: tf.Tensor) => {
    const v = tf.variable(init, true, name);
    init.dispose();
    vars.set(name, v);
    return v;
  };
  const emb = param('embedding', tf.randomNormal([V, D], 0, 1 / Math.sqrt(D), 'float32', seed++)); // [V, D]
  const layers = Array.from({ length: numLayers }, (_, l) => ({
    ln1g: param(`l${l}.ln1.g`, tf.ones([D])),
    ln1b: param(`l${l}.ln1.b`, tf.zeros([D])),
    wIn: param(`l${l}.in_proj`, uniform([D, 3 * D], Math.sqrt(6 / (D + 3 * D)))), // [D, 3D]
    bIn: param(`l${l}.in_bias`, tf.zeros([3 * D])),
    wOut: param(`l${l}.out_proj`, uniform([D, D], 1 / Math.sqrt(D))), // [D, D]
    bOut: param(`l${l}.out_bias`, tf.zeros([D])),
    ln2g: param(`l${l}.ln2.g`, tf.ones([D])),
    ln2b: param(`l${l}.ln2.b`, tf.zeros([D])),
    w1: param(`l${l}.linear1`, uniform([D, F], 1 / Math.sqrt(D))), // [D, F]
    b1: param(`l${l}.linear1.b`, uniform([F], 1 / Math.sqrt(D))),
    w2: param(`l${l}.linear2`, uniform([F, D], 1 / Math.sqrt(F))), // [F, D]
    b2: param(`l${l}.linear2.b`, uniform([D], 1 / Math.sqrt(F))),
  }));
  const normG = param('norm.g', tf.ones([D]));
  const normB = param('norm.b', tf.zeros([D]));
  const matrices = [...vars.values()].filter((v) => v.shape.length >= 2);

  const { ids, targets } = t1Batch();
  const pe = tf.tensor3d(positions(L, D), [1, L, D]);
  const causal = new Float32Array(L * L);
  for (let i = 0; i < L; i++) causal.fill(-1e9, i * L + i + 1, (i + 1) * L);
  const mask = tf.tensor2d(causal, [L, L]); // added to the scores: 0 where j ≤ i
  const idsTensor = tf.tensor1d(ids, 'int32');
  const oneHotIds =
    backend === 'wasm' ? tf.tidy(() => tf.cast(tf.oneHot(idsTensor, V), 'float32')) : undefined;
  const oneHotTargets = tf.tidy(() => tf.cast(tf.oneHot(tf.tensor1d(targets, 'int32'), V), 'float32'));

  const layerNorm = (x: tf.Tensor, g: tf.Tensor, b: tf.Tensor) => {
    const mean = tf.mean(x, -1, true);
    const xc = tf.sub(x, mean);
    const variance = tf.mean(tf.square(xc), -1, true); // biased, as PyTorch
    return tf.add(tf.mul(tf.mul(xc, tf.rsqrt(tf.add(variance, 1e-5))), g), b);
  };
  const gelu = (x: tf.Tensor) => {
    const cube = tf.mul(tf.mul(x, x), x); // not tf.pow(x, 3): 12× slower in tfjs-wasm
    const inner = tf.mul(tf.add(x, tf.mul(cube, 0.044715)), Math.sqrt(2 / Math.PI));
    return tf.mul(tf.mul(x, 0.5), tf.add(tf.tanh(inner), 1));
  };
  const heads = (t: tf.Tensor, perm: number[]) => tf.transpose(tf.reshape(t, [B, L, H, E]), perm);
  /** Swaps the last two axes (rank 2 or 4). */
  const swap = (t: tf.Tensor) => tf.transpose(t, t.rank === 2 ? [1, 0] : [0, 1, 3, 2]);
  /** a·b (batched over leading axes) with a gradient that transposes before multiplying. */
  const mm = tf.customGrad((a, b, save) => {
    (save as tf.GradSaveFunc)([a as tf.Tensor, b as tf.Tensor]);
    return {
      value: tf.matMul(a as tf.Tensor, b as tf.Tensor),
      gradFunc: (dy: tf.Tensor, [sa, sb]: tf.Tensor[]) => [tf.matMul(dy, swap(sb)), tf.matMul(swap(sa), dy)],
    };
  }) as (a: tf.Tensor, b: tf.Tensor) => tf.Tensor;
  /** The one-hot embedding lookup [N, V]·[V, D]; only the table gets a gradient. */
  const oneHotT = oneHotIds ? tf.transpose(oneHotIds) : undefined; // [V, N]
  const lookup = tf.customGrad((table) => ({
    value: tf.matMul(oneHotIds!, table as tf.Tensor),
    gradFunc: (dy: tf.Tensor) => [tf.matMul(oneHotT!, dy)],
  })) as (table: tf.Tensor) => tf.Tensor;

  /** The mean cross-entropy of the batch, as a scalar. */
  const loss = (): tf.Scalar => {
    const tokens = oneHotIds ? lookup(emb) : tf.gather(emb, idsTensor); // [N, D]
    let x = tf.reshape(tf.add(tf.reshape(tf.mul(tokens, Math.sqrt(D)), [B, L, D]), pe), [N, D]);
    for (const p of layers) {
      const h = layerNorm(x, p.ln1g, p.ln1b);
      const [q, k, v] = tf.split(tf.add(mm(h, p.wIn), p.bIn), 3, 1); // [N, D] each
      const scores = mm(heads(q, [0, 2, 1, 3]), heads(k, [0, 2, 3, 1])); // [B, H, L, E]·[B, H, E, L]
      const probs = tf.softmax(tf.add(tf.mul(scores, 1 / Math.sqrt(E)), mask)); // [B, H, L, L]
      const o = tf.reshape(tf.transpose(mm(probs, heads(v, [0, 2, 1, 3])), [0, 2, 1, 3]), [N, D]);
      x = tf.add(x, tf.add(mm(o, p.wOut), p.bOut));
      const h2 = layerNorm(x, p.ln2g, p.ln2b);
      const m = tf.add(mm(gelu(tf.add(mm(h2, p.w1), p.b1)), p.w2), p.b2);
      x = tf.add(x, m);
    }
    const logits = mm(layerNorm(x, normG, normB), tf.transpose(emb)); // tied head: [N, V]
    return tf.losses.softmaxCrossEntropy(oneHotTargets, logits) as tf.Scalar; // mean over the N rows
  };

  const optimizer = tf.train.adam(T1.lr, 0.9, 0.999, 1e-8);
  const decay = 1 - T1.lr * T1.weightDecay;
  return async () => {
    const value = tf.tidy(() => {
      const { value, grads } = tf.variableGrads(loss);
      for (const w of matrices) w.assign(tf.mul(w, decay));
      optimizer.applyGradients(grads as Parameters<typeof optimizer.applyGradients>[0]);
      return value;
    });
    const [result] = await value.data();
    value.dispose();
    return result;
  };
}
