// Trainer: one object that owns a task, a TinyTransformer, its optimizer (AdamW, or Muon) and the
// schedule, and advances one step per call. One decision to know: it never loops on its own and imports
// nothing from node, so the same code runs under the CLI (which yields between steps for Ctrl-C and the
// progress bar) and in a Web Worker (which posts each step's numbers and, now and then, attention maps
// to the page). With `threads` > 1 a step's batch is split over worker threads (parallel.ts), which a
// `platform` option starts.

import { crossEntropy } from '../autograd/ops.js';
import { AdamW, clipGradNorm, Muon, orthogonalise, warmupCosine } from '../autograd/optim.js';
import { backward, noGrad, release } from '../autograd/var.js';
import { decodeSafetensors, encodeSafetensors } from '../io/safetensors.js';
import { TinyTransformer, type TransformerConfig } from '../model/transformer.js';
import { Generator } from '../random.js';
import { checkFinite, checkInteger, checkOptionNames, formatValue, sameShape } from '../shape.js';
import { Tensor } from '../tensor.js';
import { saveCheckpoint } from './checkpoint.js';
import { inductionTask } from './induction.js';
import { ParallelSteps, shardSeed, type TrainPlatform } from './parallel.js';
import { pronounTask } from './pronoun.js';
import { sequenceTask, type Task, type TaskDefaults } from './tasks.js';

/** The names `qkv train --task` and getTask accept (scaling is a CLI experiment built on `copy`). */
export const TASK_NAMES = ['pronoun', 'copy', 'reverse', 'induction'] as const;
/** A built-in task's name: one of {@link TASK_NAMES}. */
export type TaskName = (typeof TASK_NAMES)[number];

/** A built-in task by name. */
export function getTask(name: string): Task {
  if (name === 'pronoun') return pronounTask;
  if (name === 'copy' || name === 'reverse') return sequenceTask(name);
  if (name === 'induction') return inductionTask();
  throw new RangeError(`getTask: unknown task '${name}' (tasks: ${TASK_NAMES.join(', ')})`);
}

/** Options of a Trainer; every number defaults to the task's own. */
export interface TrainerOptions {
  task: Task | string;
  seed?: number;
  steps?: number;
  /**
   * Steps the learning-rate schedule (linear warm-up, then a cosine down to lr / 10) spans; default `steps`.
   * More than `steps`: the run stops partway down the cosine, as the first phase of a longer schedule.
   */
  scheduleSteps?: number;
  batchSize?: number;
  /** Peak learning rate (after warm-up). */
  lr?: number;
  /**
   * The learning rate the cosine ends at, in [0, lr]; default lr / 10. 0 decays to zero (PyTorch's
   * CosineAnnealingLR with eta_min 0), which ends a run with its smallest, most averaging steps.
   */
  minLr?: number;
  warmup?: number;
  weightDecay?: number;
  /** Gradient clipping: max global L2 norm. Default 1. */
  clip?: number;
  /**
   * 'adamw' (default) for every parameter, or 'muon': Muon for the blocks' weight matrices (q|k|v as
   * three blocks), AdamW for the embedding, biases and gains, at one learning rate (see Muon).
   */
  optimizer?: 'adamw' | 'muon';
  /** With optimizer 'muon': the RMS of a matrix's update per unit of learning rate (Muon's `rms`), default 0.2. */
  muonRms?: number;
  /** Model overrides on top of the task's model. */
  model?: Partial<TransformerConfig>;
  /**
   * Threads a step runs on (data parallel); default 1, the calling thread alone. With n > 1 each step's
   * batch is split by rows into n shards: shard 0 runs on the calling thread, the others on worker
   * threads (started on the first step, from `platform`) holding replicas of the model; their gradients
   * are added before clipping and AdamW, which run here. With dropout 0 a run equals the one-thread run
   * up to float32 rounding; with dropout each shard draws its masks from a generator of its own, so the
   * run is as deterministic (by seed and threads) but not the one-thread run. `trainStep` stays
   * synchronous; call `terminate()` when done (idle workers never keep Node alive anyway). At most 256.
   */
  threads?: number;
  /**
   * How worker threads are made (needed when threads > 1): in Node, `nodeTrainPlatform` from the Node
   * entry (`import { nodeTrainPlatform } from 'qkv/nn'`).
   */
  platform?: TrainPlatform;
  /**
   * Milliseconds a step waits for a worker (or for it to start) before throwing, naming it; default
   * 60 000, or 10× the calling thread's own shard if longer.
   */
  threadTimeout?: number;
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

/**
 * The most threads a Trainer takes: each is a worker thread holding a replica of the model (and the
 * dropout stream of its shard), so far more than a machine's cores only costs memory; the bound turns a
 * mistyped count into an error rather than an out-of-memory crash.
 */
const MAX_TRAIN_THREADS = 256;

const TRAINER_OPTIONS = [
  'task',
  'seed',
  'steps',
  'scheduleSteps',
  'batchSize',
  'lr',
  'minLr',
  'warmup',
  'weightDecay',
  'clip',
  'optimizer',
  'muonRms',
  'model',
  'threads',
  'platform',
  'threadTimeout',
];

/**
 * Resolves a Trainer's options against the task's defaults and checks every one: a NaN or 0 `steps` would
 * make `done` never (or always) true, a NaN lr would train to NaN. Errors say when a bad value came from
 * the task's defaults rather than the options.
 */
function checkTrainerOptions(options: TrainerOptions) {
  const fn = 'Trainer';
  checkOptionNames(fn, options, TRAINER_OPTIONS);
  const given = options.task;
  let task: Task;
  if (typeof given === 'string') task = getTask(given);
  else if (
    given !== null &&
    typeof given === 'object' &&
    typeof given.batch === 'function' &&
    given.defaults !== null &&
    typeof given.defaults === 'object' &&
    typeof given.tokenizer?.encode === 'function'
  ) {
    task = given;
  } else {
    throw new TypeError(
      `${fn}: task must be a task name (${TASK_NAMES.join(', ')}) or a Task (batch, defaults, tokenizer), got ${formatValue(given)}`,
    );
  }
  // The value of a task-default option, and its name as the message should say it.
  const resolve = <K extends keyof TaskDefaults>(key: K): [unknown, string] =>
    options[key] !== undefined
      ? [options[key], key]
      : [task.defaults[key], `${key} (from the task's defaults)`];
  const [steps, stepsName] = resolve('steps');
  checkInteger(fn, stepsName, steps, 1);
  const [batchSize, batchName] = resolve('batchSize');
  checkInteger(fn, batchName, batchSize, 1);
  const [lr, lrName] = resolve('lr');
  checkFinite(fn, lrName, lr, '> 0');
  const [warmup, warmupName] = resolve('warmup');
  checkInteger(fn, warmupName, warmup, 0);
  const { seed = 0, weightDecay = 0.01, clip = 1, model = {}, optimizer = 'adamw' } = options;
  if (optimizer !== 'adamw' && optimizer !== 'muon')
    throw new RangeError(`${fn}: optimizer must be 'adamw' or 'muon', got ${formatValue(optimizer)}`);
  const { muonRms, minLr } = options;
  if (minLr !== undefined) {
    checkFinite(fn, 'minLr', minLr, '≥ 0');
    if (minLr > lr) throw new RangeError(`${fn}: minLr ${minLr} is more than lr ${lr}`);
  }
  if (muonRms !== undefined) {
    if (optimizer !== 'muon') throw new RangeError(`${fn}: muonRms needs optimizer 'muon'`);
    checkFinite(fn, 'muonRms', muonRms, '> 0');
  }
  const scheduleSteps = options.scheduleSteps !== undefined ? options.scheduleSteps : steps;
  checkInteger(fn, 'scheduleSteps', scheduleSteps, 1);
  if (scheduleSteps < (steps as number)) {
    throw new RangeError(
      `${fn}: scheduleSteps ${scheduleSteps} is less than ${stepsName} ${steps as number} (the schedule must span the run)`,
    );
  }
  checkFinite(fn, 'seed', seed);
  checkFinite(fn, 'weightDecay', weightDecay, '≥ 0');
  if (!(typeof clip === 'number' && clip > 0)) {
    throw new RangeError(
      `${fn}: clip must be a number > 0 (Infinity turns clipping off), got ${formatValue(clip)}`,
    );
  }
  if (model === null || typeof model !== 'object') {
    throw new TypeError(
      `${fn}: model must be an object of TransformerConfig overrides, got ${formatValue(model)}`,
    );
  }
  const vocabSize = model.vocabSize ?? task.model.vocabSize;
  if (task.tokenizer.vocabSize !== vocabSize) {
    throw new RangeError(
      `${fn}: the task's tokenizer has ${formatValue(task.tokenizer.vocabSize)} tokens but the model's vocabSize is ${formatValue(vocabSize)}`,
    );
  }
  const { threads = 1, platform, threadTimeout = 60_000 } = options;
  checkInteger(fn, 'threads', threads, 1);
  if (threads > MAX_TRAIN_THREADS) {
    throw new RangeError(
      `${fn}: threads must be at most ${MAX_TRAIN_THREADS} (a worker thread and a model replica per shard), got ${threads}`,
    );
  }
  checkFinite(fn, 'threadTimeout', threadTimeout, '> 0');
  if (threads > 1) {
    if (
      platform === undefined ||
      platform === null ||
      typeof platform !== 'object' ||
      typeof platform.startWorker !== 'function'
    ) {
      throw new TypeError(
        `${fn}: threads: ${threads} needs a platform to start worker threads, got ${formatValue(platform)}; in Node pass platform: nodeTrainPlatform (import { nodeTrainPlatform } from 'qkv/nn', in Node). Browsers have none yet: use threads: 1 there`,
      );
    }
    const why =
      typeof SharedArrayBuffer === 'undefined' || typeof Atomics === 'undefined'
        ? 'SharedArrayBuffer and Atomics are unavailable'
        : (platform.sharedMemoryUnavailable?.() ?? '');
    if (why) throw new Error(`${fn}: threads: ${threads} cannot run here: ${why}`);
  }
  return {
    task,
    seed,
    steps,
    scheduleSteps,
    batchSize,
    lr,
    minLr,
    warmup,
    weightDecay,
    clip,
    optimizer,
    muonRms,
    model,
    threads,
    platform,
    threadTimeout,
  };
}

/** The metadata key of a training state (Trainer.saveState). */
const STATE_KEY = 'qkv.trainer';

interface SavedState {
  run: unknown;
  adamStep: number;
  losses: number[];
  data: [number, number, number, number, number | null];
  dropout: [number, number, number, number, number | null];
  /** threads > 1: the dropout generators of shards 1 … threads − 1. */
  dropoutShards?: [number, number, number, number, number | null][];
}

/** Trains a TinyTransformer on a task, one `trainStep()` at a time. */
export class Trainer {
  readonly task: Task;
  readonly model: TinyTransformer;
  readonly optimizer: AdamW | Muon;
  readonly steps: number;
  readonly batchSize: number;
  readonly clip: number;
  readonly seed: number;
  /** Threads a step runs on (1: the calling thread only). */
  readonly threads: number;
  /** Loss of every step taken so far. */
  readonly losses: number[] = [];
  private readonly schedule: (step: number) => number;
  private readonly data: Generator;
  private readonly dropoutGen: Generator;
  private readonly options: {
    lr: number;
    minLr?: number;
    warmup: number;
    weightDecay: number;
    scheduleSteps?: number;
    optimizer?: 'muon';
    muonRms?: number;
  };
  /** threads > 1: the worker threads, and the dropout generators of shards 1 … threads − 1. */
  private readonly parallel: ParallelSteps | undefined;
  private readonly shardDropout: Generator[] = [];

  constructor(options: TrainerOptions) {
    const {
      task,
      seed,
      steps,
      scheduleSteps,
      batchSize,
      lr,
      minLr,
      warmup,
      weightDecay,
      clip,
      optimizer,
      muonRms,
      model,
      threads,
      platform,
      threadTimeout,
    } = checkTrainerOptions(options);
    this.task = task;
    this.seed = seed;
    this.steps = steps;
    this.batchSize = batchSize;
    this.clip = clip;
    this.model = new TinyTransformer({ ...task.model, ...model }, { seed });
    const params = this.model.parameters();
    if (optimizer === 'muon') {
      const matrices = [...this.model.params]
        .filter(([name, p]) => p.shape.length === 2 && name !== 'embedding.weight')
        .map(([name, param]) => ({ param, blocks: name.endsWith('in_proj_weight') ? 3 : 1 }));
      this.optimizer = new Muon(params, matrices, {
        weightDecay,
        // With threads, the iterations are spread over them (once they have started: see ParallelSteps).
        orthogonaliser: (jobs, steps) =>
          this.parallel ? this.parallel.orthogonalise(jobs, steps) : orthogonalise(jobs, steps),
        ...(muonRms === undefined ? {} : { rms: muonRms }),
      });
    } else this.optimizer = new AdamW(params, { weightDecay });
    this.schedule = warmupCosine({
      maxLr: lr,
      warmup,
      total: scheduleSteps,
      ...(minLr === undefined ? {} : { minLr }),
    });
    // A state saved before scheduleSteps, optimizer or minLr existed (or without them) has the key it always had.
    this.options = {
      lr,
      ...(minLr === undefined ? {} : { minLr }),
      warmup,
      weightDecay,
      ...(scheduleSteps === steps ? {} : { scheduleSteps }),
      ...(optimizer === 'muon' ? { optimizer } : {}),
      ...(muonRms === undefined ? {} : { muonRms }),
    };
    // Separate streams: the model's initial weights do not depend on how much data was drawn.
    this.data = new Generator(this.seed + 0x51ed);
    this.dropoutGen = new Generator(this.seed + 0xd0);
    this.threads = threads;
    if (threads > 1 && platform) {
      this.parallel = new ParallelSteps('Trainer.trainStep', platform, threads, threadTimeout, this.model);
      for (let s = 1; s < threads; s++) this.shardDropout.push(new Generator(shardSeed(seed, s)));
    }
  }

  /** Steps taken. */
  get step(): number {
    return this.losses.length;
  }

  get done(): boolean {
    return this.step >= this.steps;
  }

  /** One step: a fresh batch, forward, backward, clip, the optimizer at the scheduled learning rate. */
  trainStep(): StepInfo {
    if (this.parallel) return this.#parallelStep(this.parallel);
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
    const value = loss.data[0];
    release(loss); // this step's activations and gradients serve the next one
    this.losses.push(value);
    return { step: this.step, loss: value, lr, gradNorm, tokens: batch.B * batch.L };
  }

  /**
   * trainStep on `threads` threads: the same batch, its shards' gradients summed into the model's, then
   * clipping and AdamW here. A failed step (a worker's error, or no progress within the timeout) throws
   * and leaves the trainer as it was before the step, so it can be retried.
   */
  #parallelStep(parallel: ParallelSteps): StepInfo {
    const data = this.data.getState();
    const dropout = this.dropoutGen.getState();
    let batch: ReturnType<Task['batch']>;
    let loss: number;
    try {
      batch = this.task.batch(this.data, this.batchSize, 'train');
      this.optimizer.zeroGrad();
      loss = parallel.step(batch, [this.dropoutGen, ...this.shardDropout]);
    } catch (err) {
      this.data.setState(data);
      this.dropoutGen.setState(dropout);
      this.optimizer.zeroGrad();
      throw err;
    }
    const gradNorm = clipGradNorm(this.model.parameters(), this.clip);
    const lr = this.schedule(this.step);
    this.optimizer.step(lr);
    this.losses.push(loss);
    return { step: this.step, loss, lr, gradNorm, tokens: batch.B * batch.L };
  }

  /** Worker threads alive now (0 with threads: 1, before the first step and after terminate()). */
  get workers(): number {
    return this.parallel?.workers ?? 0;
  }

  /**
   * Stops the worker threads (threads > 1; nothing to do otherwise); resolves when they have exited. A
   * later trainStep starts new ones and continues exactly as it would have.
   */
  terminate(): Promise<void> {
    return this.parallel?.terminate() ?? Promise.resolve();
  }

  /**
   * Mean loss over `batches` fresh batches of a split, without training (for held-out curves). One
   * batch of `batchSize` at a time and without the autograd tape, so memory is one batch's forward
   * whatever `batches` is.
   */
  evaluate(split: 'train' | 'test' = 'test', batches = 4, seed = 777): number {
    const gen = new Generator(seed);
    let total = 0;
    for (let i = 0; i < batches; i++) {
      const b = this.task.batch(gen, this.batchSize, split);
      total += noGrad(
        () => crossEntropy(this.model.forward(b.ids, b.B, b.L, { mask: b.mask }).logits, b.targets).data[0],
      );
    }
    return total / batches;
  }

  /**
   * The model as safetensors bytes with the task's name, the steps taken and the task's tokenizer in its
   * metadata (what `qkv train` writes and the Train tab downloads); `extra` adds metadata strings.
   */
  checkpoint(extra?: Record<string, string>): Uint8Array {
    return saveCheckpoint(this.model, {
      task: this.task.name,
      step: this.step,
      tokenizer: this.task.tokenizer,
      ...(extra === undefined ? {} : { extra }),
    });
  }

  /**
   * Everything a resumed run needs to continue exactly as if it had not stopped, as safetensors bytes:
   * the weights, AdamW's moments and step count, the data and dropout generators' states, the losses so
   * far, and the options that shape the run (restoreState refuses a run whose options differ); `extra`
   * adds metadata strings (the CLI keeps the tokenizer there).
   */
  saveState(extra: Record<string, string> = {}): Uint8Array {
    const tensors: Record<string, Tensor> = {};
    const { t, m, v } = this.optimizer.state();
    let n = 0;
    for (const [name, p] of this.model.params) {
      tensors[name] = new Tensor(Float32Array.from(p.data), p.shape);
      tensors[`optimizer.m.${name}`] = new Tensor(m[n], p.shape);
      tensors[`optimizer.v.${name}`] = new Tensor(v[n], p.shape);
      n++;
    }
    const state: SavedState = {
      run: this.#runKey(),
      adamStep: t,
      losses: this.losses,
      data: this.data.getState(),
      dropout: this.dropoutGen.getState(),
      ...(this.threads > 1 ? { dropoutShards: this.shardDropout.map((g) => g.getState()) } : {}),
    };
    return encodeSafetensors(tensors, { ...extra, [STATE_KEY]: JSON.stringify(state) });
  }

  /**
   * Continues from `saveState()` bytes: this Trainer must have been made with the same task, model and
   * options (the run's shape is compared, naming what differs).
   */
  restoreState(bytes: Uint8Array): void {
    const fn = 'Trainer.restoreState';
    const { tensors, metadata } = decodeSafetensors(bytes);
    let state: SavedState;
    try {
      state = JSON.parse(metadata[STATE_KEY] ?? 'null');
    } catch {
      throw new RangeError(`${fn}: ${STATE_KEY} is not valid JSON`);
    }
    if (!state || typeof state !== 'object')
      throw new RangeError(`${fn}: no ${STATE_KEY} in the metadata (not a training state?)`);
    const here = this.#runKey();
    if (JSON.stringify(state.run) !== JSON.stringify(here)) {
      throw new RangeError(
        `${fn}: the saved run differs from this one (saved ${JSON.stringify(state.run)}; this ${JSON.stringify(here)})`,
      );
    }
    const m: Float32Array[] = [];
    const v: Float32Array[] = [];
    for (const [name, p] of this.model.params) {
      for (const key of [name, `optimizer.m.${name}`, `optimizer.v.${name}`]) {
        const t = tensors[key];
        if (!t || !sameShape(t.shape, p.shape))
          throw new RangeError(`${fn}: ${key} is missing or is not [${p.shape}]`);
      }
      m.push(tensors[`optimizer.m.${name}`].data);
      v.push(tensors[`optimizer.v.${name}`].data);
    }
    // Losses: one a step taken, at most the run's steps (JSON wrote a NaN loss as null: it is NaN again).
    const saved: unknown = state.losses;
    if (
      !Array.isArray(saved) ||
      saved.length > this.steps ||
      saved.some((x) => x !== null && typeof x !== 'number')
    )
      throw new RangeError(`${fn}: losses must be at most ${this.steps} numbers (one a step taken)`);
    const losses = saved.map((x) => (x === null ? Number.NaN : (x as number)));
    // Everything else is checked by setting it; if any part is refused, what was set is put back, so a
    // refused state leaves the Trainer as it was.
    const before = {
      optimizer: this.optimizer.state(),
      data: this.data.getState(),
      dropout: this.dropoutGen.getState(),
      shards: this.shardDropout.map((g) => g.getState()),
    };
    try {
      this.optimizer.loadState({ t: state.adamStep, m, v });
      this.data.setState(state.data);
      this.dropoutGen.setState(state.dropout);
      // With dropout 0 (the only case the run key lets differ in threads) the shards' streams are unused.
      // With dropout, a threads run's shards each have a stream: a state without all of them cannot resume
      // this run exactly, so it is refused (a one-thread state has no shards and no threads in its key).
      const shards = state.dropoutShards;
      if (this.model.config.dropout > 0 && this.shardDropout.length > 0) {
        if (!Array.isArray(shards) || shards.length !== this.shardDropout.length) {
          throw new Error(
            `dropoutShards must hold the dropout streams of the ${this.shardDropout.length} worker shard(s) of a threads: ${this.threads} run, got ${Array.isArray(shards) ? `${shards.length}` : formatValue(shards)}`,
          );
        }
      }
      if (Array.isArray(shards) && shards.length === this.shardDropout.length) {
        shards.forEach((s, i) => {
          this.shardDropout[i].setState(s);
        });
      }
    } catch (err) {
      this.optimizer.loadState(before.optimizer);
      this.data.setState(before.data);
      this.dropoutGen.setState(before.dropout);
      before.shards.forEach((s, i) => {
        this.shardDropout[i].setState(s);
      });
      throw new RangeError(`${fn}: ${(err as Error).message}`);
    }
    for (const [name, p] of this.model.params) p.data.set(tensors[name].data);
    this.losses.length = 0;
    this.losses.push(...losses);
  }

  /** What a resumed run must share with the saved one: the task, the model and every option. */
  #runKey() {
    return {
      task: this.task.name,
      tokenizer: this.task.tokenizer.description,
      model: this.model.config,
      seed: this.seed,
      steps: this.steps,
      batchSize: this.batchSize,
      clip: this.clip,
      options: this.options,
      // Threads change the run only through dropout's streams (one per shard); a one-thread run's key is
      // the key it always was.
      ...(this.threads > 1 && this.model.config.dropout > 0 ? { threads: this.threads } : {}),
    };
  }

  /**
   * Attention weights of every layer ([B, H, L, L] each) on a batch of token ids, e.g. for live maps.
   * No tape is recorded: only the weights outlive the call.
   */
  attention(ids: Int32Array, B: number, L: number, mask?: Tensor): Tensor[] {
    return noGrad(() => this.model.forward(ids, B, L, { mask, needWeights: true }).weights);
  }
}
