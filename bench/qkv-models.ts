// qkv's rows of P2 and T1: MultiHeadAttention loaded from the exported PyTorch weights, and a training
// step of TinyTransformer with the autograd's cross-entropy, backward and AdamW; the compiled library
// (dist/, through the package's own name), imported only by the row that runs it.
// One decision to know: API that may not exist yet (forwardAsync, a threads option for training) is looked
// up at run time, and its absence makes the row "unavailable" with the reason, never a failed build.

import type { MhaFixture, P2Impl } from './p2.js';
import { MHA_EMBED, MHA_HEADS, MHA_LEN } from './p2.js';
import { wasmBuild } from './qkv.js';
import { T1, type T1Impl, type TrainStep, t1Batch } from './t1.js';

type Qkv = typeof import('qkv');
type QkvNn = typeof import('qkv/nn');
type Forward = (q: unknown, k: unknown, v: unknown, options?: Record<string, unknown>) => unknown;
type AsyncForward = (...args: Parameters<Forward>) => Promise<{ output: { data: Float32Array } }>;

/** MultiHeadAttention(512, 8) with the fixture's weights; the returned function runs one forward pass. */
export async function prepareQkvMha(
  impl: Extract<P2Impl, { kind: 'qkv' }>,
  f: MhaFixture,
): Promise<() => Promise<Float32Array>> {
  const { MultiHeadAttention, Tensor }: Qkv = await import('qkv');
  if (impl.relaxed && wasmBuild() !== 'relaxed-simd') {
    throw new Error(`the relaxed-SIMD build did not validate here (build in use: ${wasmBuild()})`);
  }
  const mha = new MultiHeadAttention({ embedDim: MHA_EMBED, numHeads: MHA_HEADS, seed: 0 });
  const dict = Object.fromEntries(Object.entries(f.weights).map(([n, t]) => [n, new Tensor(t.data, t.dims)]));
  mha.loadStateDict(dict);
  const x = new Tensor(f.x, [1, MHA_LEN, MHA_EMBED]);
  if (impl.mode === 'sync') return async () => mha.forward(x, x, x).output.data;
  const forwardAsync = (mha as unknown as Record<string, unknown>)['forwardAsync'];
  if (typeof forwardAsync !== 'function') {
    throw new Error('not available: MultiHeadAttention.forwardAsync does not exist in this build');
  }
  const options = { threads: impl.threads };
  return async () => (await (forwardAsync as AsyncForward).call(mha, x, x, x, options)).output.data;
}

/**
 * TinyTransformer (seed 1) and AdamW on T1's batch; the returned function runs one step and returns its
 * loss. More than one thread needs a `threads` option of TinyTransformer.forward, which is probed.
 */
export async function prepareQkvTrain(impl: Extract<T1Impl, { kind: 'qkv' }>): Promise<TrainStep> {
  const { TinyTransformer }: Qkv = await import('qkv');
  const { autograd }: QkvNn = await import('qkv/nn');
  if (impl.relaxed && wasmBuild() !== 'relaxed-simd') {
    throw new Error(`the relaxed-SIMD build did not validate here (build in use: ${wasmBuild()})`);
  }
  const { batch: B, seqLen: L } = T1;
  const model = new TinyTransformer(
    {
      vocabSize: T1.vocabSize,
      dModel: T1.dModel,
      numHeads: T1.numHeads,
      numLayers: T1.numLayers,
      dFF: T1.dFF,
      maxLen: L,
      causal: true,
    },
    { seed: 1 },
  );
  const { ids, targets } = t1Batch();
  if (impl.threads > 1) return prepareParallelTrain(impl.threads, model.config);
  const forwardOptions: Record<string, unknown> = {};
  const optimizer = new autograd.AdamW(model.parameters(), { weightDecay: T1.weightDecay });
  return async () => {
    const { logits } = model.forward(ids, B, L, forwardOptions);
    const loss = autograd.crossEntropy(logits, targets);
    autograd.backward(loss);
    optimizer.step(T1.lr);
    optimizer.zeroGrad();
    const value = loss.data[0];
    autograd.release(loss); // as tfjs's rows dispose theirs: the step's arrays serve the next step
    return value;
  };
}

/**
 * The same step on `threads` threads: qkv's data-parallel Trainer (the batch split by rows, one shard on
 * each thread, gradients summed) over a task whose every batch is T1's, at T1's constant learning rate
 * (warm-up 0 and a cosine over 10⁶ steps: the rate moves by < 1e-10 in a run) with no clipping, as the
 * one-thread row; the same weights (seed 1).
 */
async function prepareParallelTrain(threads: number, config: Record<string, unknown>): Promise<TrainStep> {
  const qkv = (await import('qkv/nn')) as QkvNn & Record<string, unknown>;
  const { Trainer, WordTokenizer } = qkv;
  const platform = qkv['nodeTrainPlatform'];
  if (platform === undefined) throw new Error('not available: this build has no nodeTrainPlatform');
  const batch = t1Batch();
  const tokenizer = new WordTokenizer(Array.from({ length: T1.vocabSize }, (_, i) => `t${i}`));
  if (tokenizer.vocabSize !== T1.vocabSize)
    throw new Error(`T1's tokenizer has ${tokenizer.vocabSize} tokens`);
  const task = {
    name: 't1',
    description: "T1's fixed batch",
    tokenizer,
    model: config,
    defaults: { steps: 1_000_000, batchSize: T1.batch, lr: T1.lr, warmup: 0 },
    batch: () => ({ ids: batch.ids, targets: batch.targets, B: T1.batch, L: T1.seqLen }),
  };
  const trainer = new Trainer({
    task: task as never,
    seed: 1,
    clip: Number.POSITIVE_INFINITY,
    weightDecay: T1.weightDecay,
    threads,
    platform: platform as never,
  });
  return async () => trainer.trainStep().loss;
}
