// Trainer: one object that owns a task, a TinyTransformer, AdamW and the schedule, and advances one step
// per call. One decision to know: it never loops on its own and imports nothing from node, so the same
// code runs under the CLI (which yields between steps for Ctrl-C and the progress bar) and in a Web Worker
// (which posts each step's numbers and, now and then, attention maps to the page).

import { crossEntropy } from '../autograd/ops.js';
import { AdamW, clipGradNorm, warmupCosine } from '../autograd/optim.js';
import { backward } from '../autograd/var.js';
import { TinyTransformer, type TransformerConfig } from '../model/transformer.js';
import { Generator } from '../random.js';
import type { Tensor } from '../tensor.js';
import { pronounTask } from './pronoun.js';
import { sequenceTask, type Task } from './tasks.js';

/** The names `qkv train --task` and getTask accept (scaling is a CLI experiment built on `copy`). */
export const TASK_NAMES = ['pronoun', 'copy', 'reverse'] as const;
export type TaskName = (typeof TASK_NAMES)[number];

/** A built-in task by name. */
export function getTask(name: string): Task {
  if (name === 'pronoun') return pronounTask;
  if (name === 'copy' || name === 'reverse') return sequenceTask(name);
  throw new RangeError(`getTask: unknown task '${name}' (tasks: ${TASK_NAMES.join(', ')})`);
}

/** Options of a Trainer; every number defaults to the task's own. */
export interface TrainerOptions {
  task: Task | string;
  seed?: number;
  steps?: number;
  batchSize?: number;
  /** Peak learning rate (after warm-up). */
  lr?: number;
  warmup?: number;
  weightDecay?: number;
  /** Gradient clipping: max global L2 norm. Default 1. */
  clip?: number;
  /** Model overrides on top of the task's model. */
  model?: Partial<TransformerConfig>;
}

/** What one training step reports. */
export interface StepInfo {
  /** 1-based index of the step just taken. */
  step: number;
  loss: number;
  lr: number;
  /** Global gradient norm before clipping. */
  gradNorm: number;
  /** Tokens in the batch. */
  tokens: number;
}

/** Trains a TinyTransformer on a task, one `trainStep()` at a time. */
export class Trainer {
  readonly task: Task;
  readonly model: TinyTransformer;
  readonly optimizer: AdamW;
  readonly steps: number;
  readonly batchSize: number;
  readonly clip: number;
  readonly seed: number;
  /** Loss of every step taken so far. */
  readonly losses: number[] = [];
  private readonly schedule: (step: number) => number;
  private readonly data: Generator;
  private readonly dropoutGen: Generator;

  constructor(options: TrainerOptions) {
    this.task = typeof options.task === 'string' ? getTask(options.task) : options.task;
    const d = this.task.defaults;
    this.seed = options.seed ?? 0;
    this.steps = options.steps ?? d.steps;
    this.batchSize = options.batchSize ?? d.batchSize;
    this.clip = options.clip ?? 1;
    this.model = new TinyTransformer({ ...this.task.model, ...options.model }, { seed: this.seed });
    this.optimizer = new AdamW(this.model.parameters(), { weightDecay: options.weightDecay ?? 0.01 });
    this.schedule = warmupCosine({
      maxLr: options.lr ?? d.lr,
      warmup: options.warmup ?? d.warmup,
      total: this.steps,
    });
    // Separate streams: the model's initial weights do not depend on how much data was drawn.
    this.data = new Generator(this.seed + 0x51ed);
    this.dropoutGen = new Generator(this.seed + 0xd0);
  }

  /** Steps taken. */
  get step(): number {
    return this.losses.length;
  }

  get done(): boolean {
    return this.step >= this.steps;
  }

  /** One step: a fresh batch, forward, backward, clip, AdamW at the scheduled learning rate. */
  trainStep(): StepInfo {
    const batch = this.task.batch(this.data, this.batchSize, 'train');
    const { logits } = this.model.forward(batch.ids, batch.B, batch.L, {
      mask: batch.mask,
      training: true,
      generator: this.dropoutGen,
    });
    const loss = crossEntropy(logits, batch.targets);
    this.optimizer.zeroGrad();
    backward(loss);
    const gradNorm = clipGradNorm(this.model.parameters(), this.clip);
    const lr = this.schedule(this.step);
    this.optimizer.step(lr);
    this.losses.push(loss.data[0]);
    return { step: this.step, loss: loss.data[0], lr, gradNorm, tokens: batch.B * batch.L };
  }

  /** Mean loss over `batches` fresh batches of a split, without training (for held-out curves). */
  evaluate(split: 'train' | 'test' = 'test', batches = 4, seed = 777): number {
    const gen = new Generator(seed);
    let total = 0;
    for (let i = 0; i < batches; i++) {
      const b = this.task.batch(gen, this.batchSize, split);
      total += crossEntropy(this.model.forward(b.ids, b.B, b.L, { mask: b.mask }).logits, b.targets).data[0];
    }
    return total / batches;
  }

  /** Attention weights of every layer ([B, H, L, L] each) on a batch of token ids, e.g. for live maps. */
  attention(ids: Int32Array, B: number, L: number, mask?: Tensor): Tensor[] {
    return this.model.forward(ids, B, L, { mask, needWeights: true }).weights;
  }
}
