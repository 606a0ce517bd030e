// Messages between the Train tab (train.ts) and its training worker (train-worker.ts).
// One decision to know: the worker owns the Trainer and the page owns nothing but what it is sent, so a
// run survives tab switches and the page never waits on a step; numbers travel as plain data.

import type { TaskName } from 'qkv/nn';

/** Attention maps are posted after every this many steps, and at step 0, at the end and on pause. */
export const ATTENTION_EVERY = 10;

export interface TrainSettings {
  task: TaskName;
  steps: number;
  seed: number;
}

/** Page → worker. `start` creates the trainer if there is none, then runs (or resumes) it. */
export type TrainRequest =
  | { kind: 'start'; settings: TrainSettings }
  | { kind: 'pause' }
  | { kind: 'reset' }
  | { kind: 'checkpoint'; purpose: CheckpointPurpose };

/** What the page does with a checkpoint: show it in the views, generate with it (a decoder), or save it. */
export type CheckpointPurpose = 'use' | 'generate' | 'download';

export type TrainState = 'idle' | 'running' | 'paused' | 'done';

/** The trainer the worker built: what the page states about the run before the first step. */
export interface TrainReady {
  kind: 'ready';
  settings: TrainSettings;
  description: string;
  parameters: number;
  layers: number;
  heads: number;
  dModel: number;
  batchSize: number;
}

/** One step's numbers; `tokensPerSecond` and `elapsedMs` count time spent in steps only (not paused). */
export interface TrainStep {
  kind: 'step';
  step: number;
  steps: number;
  loss: number;
  lr: number;
  gradNorm: number;
  stepMs: number;
  elapsedMs: number;
  tokensPerSecond: number;
}

/** Attention of every layer on the sample sequence, after `step` steps (0 = the untrained model). */
export interface TrainAttention {
  kind: 'attention';
  step: number;
  tokens: string[];
  heads: number;
  /** Per layer, all heads' weights [H·L·L]. */
  weights: Float32Array[];
  /**
   * The scored positions of the sample (pronoun: "it"; copy/reverse: from <sep> on): the model's arg-max
   * `token` there, the right `target`, and `key`, the position in the sample that holds the target (pronoun:
   * "animal"), i.e. where attention should look.
   */
  predictions: { position: number; token: string; target: string; key: number }[];
  /**
   * A task whose display asks for it (the induction task): the best head's induction score at this step (inductionScore, as `qkv train
   * --task induction` records it every 10 steps), so the page can draw its jump beside the loss.
   */
  induction?: { score: number; layer: number; head: number };
}

export type TrainResponse =
  | TrainReady
  | TrainStep
  | TrainAttention
  | { kind: 'state'; state: TrainState; step: number }
  | { kind: 'checkpoint'; purpose: CheckpointPurpose; bytes: Uint8Array; task: TaskName; step: number }
  | { kind: 'error'; message: string };
