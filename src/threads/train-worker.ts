// What a data-parallel training worker runs, whatever the platform: build a replica of the model, then
// block on the step counter; each step copy the shared parameters into the replica, run the forward and
// backward of its shard with the loss seeded by the shard's weight (so the shards' gradients add up to the
// whole batch's), write the gradients, loss and dropout generator state, and say done; or, asked between
// steps, run Muon's Newton–Schulz iterations on the blocks it is given. See
// train/parallel-protocol.ts for the memory and train/parallel.ts for the calling thread's side.

import { crossEntropy } from '../autograd/ops.js';
import { type MuonJob, orthogonalise } from '../autograd/optim.js';
import { backward, release } from '../autograd/var.js';
import { TinyTransformer, type TransformerConfig } from '../model/transformer.js';
import { Generator } from '../random.js';
import { Tensor } from '../tensor.js';
import {
  COMMAND_ORTHOGONALISE,
  COMMAND_STOP,
  CONTROL,
  doneIndex,
  MASK_FLOAT16,
  MASK_FLOAT32,
  MASK_NONE,
  reportFailure,
  SLOT_F64,
  SLOT_I32,
  slotViews,
  type TrainWorkerInit,
} from '../train/parallel-protocol.js';

/**
 * Serves steps until the calling thread asks it to stop (then returns). Throws only while setting up
 * (the caller reports it); a step's error is reported through shared memory and ends the loop.
 */
export function serveTraining(init: TrainWorkerInit): void {
  const ctl = new Int32Array(init.control);
  const w = init.index;
  const model = new TinyTransformer(init.config as unknown as TransformerConfig);
  const names = [...model.params.keys()];
  const params = model.parameters();
  if (
    names.length !== init.paramNames.length ||
    names.some((name, i) => name !== init.paramNames[i] || params[i].size !== init.paramSizes[i])
  ) {
    throw new Error(
      `the replica's parameters (${names.length}) differ from the calling thread's (${init.paramNames.length})`,
    );
  }
  if (!(params[0]?.data instanceof Float32Array)) throw new Error('the replica is not float32');
  const shared = new Float32Array(init.params);
  const grads = new Float32Array(init.grads);
  const views: Float32Array[] = [];
  let offset = 0;
  for (const p of params) {
    views.push(shared.subarray(offset, offset + p.size));
    // The replica's gradients are the shared buffer itself: nothing to copy out.
    p.grad = grads.subarray(offset, offset + p.size);
    offset += p.size;
  }
  const slot = slotViews(init.slot, init.tokens, init.maskElements);
  const generator = new Generator(0);

  let seen = Atomics.load(ctl, CONTROL.step);
  Atomics.store(ctl, doneIndex(w), seen); // ready
  Atomics.notify(ctl, doneIndex(w));
  for (;;) {
    Atomics.wait(ctl, CONTROL.step, seen);
    const now = Atomics.load(ctl, CONTROL.step);
    if (now === seen) continue;
    seen = now;
    const command = Atomics.load(ctl, CONTROL.command);
    if (command === COMMAND_STOP) return;
    try {
      if (command === COMMAND_ORTHOGONALISE) orthogonaliseBlocks();
      else step();
    } catch (err) {
      reportFailure(init, err);
      return;
    }
    Atomics.store(ctl, doneIndex(w), seen);
    Atomics.notify(ctl, doneIndex(w));
  }

  /** Muon's blocks, listed in the slot's ids area, orthogonalised in place in the grads buffer. */
  function orthogonaliseBlocks(): void {
    const list = slot.ids;
    const jobs: MuonJob[] = [];
    for (let k = 0; k < list[1]; k++) {
      const [offset, rows, cols] = list.subarray(2 + 3 * k, 5 + 3 * k);
      jobs.push({ x: grads.subarray(offset, offset + rows * cols), rows, cols });
    }
    orthogonalise(jobs, list[0]);
  }

  function step(): void {
    const { f64, i32 } = slot;
    const B = i32[SLOT_I32.rows];
    if (B === 0) return;
    const L = i32[SLOT_I32.length];
    grads.fill(0);
    for (let n = 0; n < params.length; n++) (params[n].data as Float32Array).set(views[n]);
    const g = SLOT_F64.generator;
    generator.setState([
      f64[g],
      f64[g + 1],
      f64[g + 2],
      f64[g + 3],
      f64[SLOT_F64.hasSpare] === 1 ? f64[SLOT_F64.spare] : null,
    ]);
    const ids = slot.ids.slice(0, B * L);
    const targets = slot.targets.slice(0, B * L);
    let mask: Tensor | undefined;
    const kind = i32[SLOT_I32.mask];
    if (kind !== MASK_NONE) {
      const shape = Array.from(i32.subarray(SLOT_I32.maskShape, SLOT_I32.maskShape + i32[SLOT_I32.maskRank]));
      const size = shape.reduce((a, b) => a * b, 1);
      if (kind === MASK_FLOAT32) mask = new Tensor(slot.mask32.slice(0, size), shape);
      else if (kind === MASK_FLOAT16)
        mask = new Tensor(slot.mask16.slice(0, size), shape, 'float16') as unknown as Tensor;
      else throw new Error(`unknown mask kind ${kind}`);
    }
    const { logits } = model.forward(ids, B, L, { mask, training: true, generator });
    const loss = crossEntropy(logits, targets);
    backward(loss, [f64[SLOT_F64.weight]]);
    f64[SLOT_F64.loss] = loss.data[0];
    release(loss); // this step's activations and gradients serve the next one
    const [s0, s1, s2, s3, spare] = generator.getState();
    f64[g] = s0;
    f64[g + 1] = s1;
    f64[g + 2] = s2;
    f64[g + 3] = s3;
    f64[SLOT_F64.hasSpare] = spare === null ? 0 : 1;
    f64[SLOT_F64.spare] = spare ?? 0;
  }
}
