// `qkv train`: trains a TinyTransformer on a built-in task with a progress bar on stderr, writes the
// checkpoint (safetensors, atomically) and an SVG loss curve; `--task scaling` runs the §4.2 experiment;
// `--task induction` also measures the best induction score every few steps and plots it with the loss.
// One decision to know: the loop yields to the event loop after every step, so Ctrl-C (SIGINT) is heard
// mid-training; it stops after the current step and saves a checkpoint before exiting with code 130.

import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { readFileBytes, unwritableReason, writeFileAtomic } from '../io/file-node.js';
import { decodeSafetensors } from '../io/safetensors.js';
import type { TinyTransformer } from '../model/transformer.js';
import { BpeTokenizer } from '../text/bpe.js';
import { tokenizerFromJSON } from '../text/registry.js';
import { TOKENIZER_KEY, type Tokenizer } from '../text/tokenizer.js';
import { nodeTrainPlatform } from '../threads/train-node.js';
import { loadCheckpoint, saveCheckpoint } from '../train/checkpoint.js';
import { bestHead, headScores } from '../train/heads.js';
import { type InductionRecord, inductionPlotSvg, inductionScore, phaseChange } from '../train/induction.js';
import { languageModelTask } from '../train/lm.js';
import { lineChartSvg, type PlotSeries } from '../train/plot.js';
import { evaluatePronoun } from '../train/pronoun.js';
import { sequenceTask } from '../train/tasks.js';
import { type StepInfo, TASK_NAMES, Trainer } from '../train/trainer.js';
import { type CliIO, integerOption, numberArg, parseCommandArgs, plural, UsageError } from './args.js';

export const TRAIN_HELP = `qkv train: train a tiny transformer on a built-in task

Usage: qkv train --task <name> [options]

Tasks:
  pronoun    encoder; "The animal didn't cross the street because it was too tired": predict what "it" is
  copy       decoder; continue "<bos> x1..xn <sep>" with x1..xn
  reverse    decoder; continue it with xn..x1
  scaling    the article's section 4.2: copy (6 of 8 symbols) at d_k = 64 with and without ÷√d_k,
             same seed, both curves in one plot
  lm         decoder; a language model on a text file (--text), byte-level BPE trained on it first
             (or --init's); npm run train:lm trains the committed one on the Brown corpus
  induction  2-layer attention-only decoder; random tokens in which a segment repeats, loss on the
             second copy; measures the best induction score (qkv heads) every 10 steps and plots it
             with the loss (docs/induction.svg); prints where the loss falls fastest

Options:
  --task <name>     required
  --steps <n>       training steps, 1 to 1000000; default the task's (pronoun 800, copy/reverse 600,
                    scaling 400, induction 3000, lm 4000)
  --seed <n>        seed for weights and data, 0 to 4294967295; default 0
  --out <file>      checkpoint (safetensors); default <task>.safetensors (scaling: none)
  --plot <file>     loss curve (SVG); default <out without .safetensors>.loss.svg (scaling: scaling.svg)
  --positions <kind>  sinusoidal (default: a table added to the embeddings) or rope (rotary: each head's
                    queries and keys turned by their position; needs an even d_model / heads); every
                    task but scaling
  --threads <n>     data-parallel training on n threads, 1 to 64 (each step's batch split by rows, the
                    gradients summed); default 1. With dropout the masks differ from a 1-thread run
  -h, --help        this help

Options of --task lm:
  --text <file>        the training text (UTF-8); required
  --heldout <file>     held-out text: its loss is printed every --save-every steps and at the end
  --vocab-size <n>     BPE vocabulary (bytes + merges + <|endoftext|>), 258 to 1048576; default 4096
  --context <n>        tokens per training window (the model's maxLen), 2 to 65536; default 128
  --d-model <n>        model width, 1 to 16384; default 256
  --layers <n>         blocks, 1 to 256; default 4
  --heads <n>          attention heads, 1 to 1024 (dividing --d-model); default 8
  --d-ff <n>           MLP width, 1 to 65536; default 1024
  --batch-size <n>     windows per step, 1 to 65536; default 16
  --lr <x>             peak learning rate; default 0.001
  --min-lr <x>         the learning rate the cosine ends at, 0 to --lr; default --lr / 10
  --warmup <n>         warm-up steps, 0 to 1000000; default 200
  --schedule-steps <n> steps the learning-rate schedule (warm-up, then cosine to --min-lr) spans, at least
                       --steps (which it needs); default --steps. More: the run stops partway down the
                       cosine (the first phase of a longer schedule)
  --dropout <p>        dropout after attention and MLP outputs, in [0, 1); default 0.1
  --optimizer <name>   adamw (default), or muon: Muon for the blocks' weight matrices (each update
                       orthogonalised), AdamW for the embedding, biases and gains, at one --lr
  --muon-rms <x>       with --optimizer muon: the RMS of a matrix's update per unit of --lr; default 0.2
  --weight-decay <x>   decoupled weight decay, ≥ 0: each step multiplies every parameter with ≥ 2 axes
                       (weight matrices, the embedding; not biases or gains) by 1 − lr·x; default 0.01
  --repeats <p>        share of each batch's windows, in [0, 1], that are a random segment repeated to
                       the window's end, scored on the copies: in-context copying, which natural text
                       teaches too rarely for an induction head to form in a short run; default 0
  --init <checkpoint>  start from this lm checkpoint's weights and tokenizer (not a new BPE) rather
                       than from random weights: a second phase of training (npm run train:lm: copying
                       first, then text). Its shape must be the one asked for; its context and dropout
                       may differ. Not with --vocab-size (the checkpoint's tokenizer decides it). Its
                       training time counts in this run's. A --resume that finds a training state
                       continues from that state (if it was started from this checkpoint) instead
  --save-every <n>     write the checkpoint and the training state every n steps, 1 to 1000000; default 100
  --resume             continue from the training state next to --out (<out>.state) if there is one
  --float16            store the checkpoint's weights as float16 (half the size)

Ctrl-C stops after the current step and saves the checkpoint and plot so far.
`;

interface TrainArgs {
  task: string;
  steps?: number;
  seed: number;
  /** --threads: data-parallel training threads (1: the calling thread only). */
  threads: number;
  /** --positions; undefined: the model's default (sinusoidal). */
  positions?: 'sinusoidal' | 'rope';
  out?: string;
  plot?: string;
  lm?: LmArgs;
}

/** The options of --task lm. */
interface LmArgs {
  text: string;
  heldout?: string;
  vocabSize: number;
  context: number;
  dModel: number;
  layers: number;
  heads: number;
  dFF: number;
  batchSize: number;
  lr: number;
  /** --min-lr: where the cosine ends, when it is not lr / 10. */
  minLr?: number;
  warmup: number;
  /** --schedule-steps: the schedule's length when it is not --steps. */
  scheduleSteps?: number;
  dropout: number;
  repeats: number;
  /** --init: the checkpoint whose weights and tokenizer the run starts from. */
  init?: string;
  saveEvery: number;
  resume: boolean;
  float16: boolean;
  optimizer: 'adamw' | 'muon';
  muonRms?: number;
  /** --weight-decay, when given (else Trainer's default). */
  weightDecay?: number;
}

/** --optimizer: 'adamw' (default) or 'muon'. */
function optimizerOption(value: unknown): 'adamw' | 'muon' {
  if (value === undefined || value === 'adamw') return 'adamw';
  if (value === 'muon') return 'muon';
  throw new UsageError(`train: --optimizer must be adamw or muon, got '${String(value)}'`);
}

/** --muon-rms: a number > 0, with --optimizer muon only. */
function muonRmsOption(value: unknown, optimizer: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (optimizer !== 'muon') throw new UsageError('train: --muon-rms needs --optimizer muon');
  const x = numberArg(value);
  if (!(Number.isFinite(x) && x > 0))
    throw new UsageError(`train: --muon-rms must be a number > 0, got '${String(value)}'`);
  return x;
}

function parse(argv: string[]): TrainArgs | 'help' {
  const values = parseCommandArgs('train', argv, {
    task: { type: 'string' },
    steps: { type: 'string' },
    seed: { type: 'string' },
    out: { type: 'string' },
    plot: { type: 'string' },
    positions: { type: 'string' },
    threads: { type: 'string' },
    text: { type: 'string' },
    heldout: { type: 'string' },
    'vocab-size': { type: 'string' },
    context: { type: 'string' },
    'd-model': { type: 'string' },
    layers: { type: 'string' },
    heads: { type: 'string' },
    'd-ff': { type: 'string' },
    'batch-size': { type: 'string' },
    lr: { type: 'string' },
    'min-lr': { type: 'string' },
    warmup: { type: 'string' },
    'schedule-steps': { type: 'string' },
    dropout: { type: 'string' },
    repeats: { type: 'string' },
    init: { type: 'string' },
    'save-every': { type: 'string' },
    resume: { type: 'boolean' },
    float16: { type: 'boolean' },
    optimizer: { type: 'string' },
    'muon-rms': { type: 'string' },
    'weight-decay': { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) return 'help';
  const int = (name: string, min: number, max: number) =>
    values[name] === undefined ? undefined : integerOption('train', values, name, 0, min, max);
  const task = values.task;
  const known = [...TASK_NAMES, 'scaling', 'lm'];
  if (typeof task !== 'string') throw new UsageError(`train: --task is required (${known.join(', ')})`);
  if (!known.includes(task))
    throw new UsageError(`train: unknown task '${task}' (tasks: ${known.join(', ')})`);
  for (const name of ['out', 'plot'] as const) {
    if (values[name] === '') throw new UsageError(`train: --${name} needs a file name`);
  }
  // The output paths are checked now, before training, not when the checkpoint is written minutes later.
  const out = (values.out as string | undefined) ?? (task === 'scaling' ? undefined : `${task}.safetensors`);
  const plot = (values.plot as string | undefined) ?? (task === 'scaling' ? 'scaling.svg' : undefined);
  for (const [name, path] of [
    ['out', out],
    ['plot', plot],
  ] as const) {
    const why = path === undefined ? '' : unwritableReason(path);
    if (why) throw new UsageError(`train: cannot write --${name} ${path}: ${why}`);
  }
  const positions = values.positions;
  if (positions !== undefined && positions !== 'sinusoidal' && positions !== 'rope')
    throw new UsageError(`train: --positions must be sinusoidal or rope, got '${String(positions)}'`);
  if (positions !== undefined && task === 'scaling')
    throw new UsageError(
      'train: --positions is not an option of --task scaling (the §4.2 experiment is fixed)',
    );
  const lmOnly = [
    'text',
    'heldout',
    'vocab-size',
    'context',
    'd-model',
    'layers',
    'heads',
    'd-ff',
    'batch-size',
    'lr',
    'min-lr',
    'warmup',
    'schedule-steps',
    'dropout',
    'repeats',
    'init',
    'save-every',
    'resume',
    'float16',
    'optimizer',
    'muon-rms',
    'weight-decay',
  ];
  let lm: LmArgs | undefined;
  if (task === 'lm') {
    if (typeof values.text !== 'string' || values.text === '')
      throw new UsageError('train: --task lm needs --text <file> (the training text)');
    const lr = numberArg(values.lr, 1e-3);
    if (!(Number.isFinite(lr) && lr > 0))
      throw new UsageError(`train: --lr must be a number > 0, got '${String(values.lr)}'`);
    const dropout = numberArg(values.dropout, 0.1);
    if (!(dropout >= 0 && dropout < 1)) {
      throw new UsageError(`train: --dropout must be a number in [0, 1), got '${String(values.dropout)}'`);
    }
    const repeats = numberArg(values.repeats, 0);
    if (!(repeats >= 0 && repeats <= 1)) {
      throw new UsageError(`train: --repeats must be a number in [0, 1], got '${String(values.repeats)}'`);
    }
    const minLr = values['min-lr'] === undefined ? undefined : numberArg(values['min-lr']);
    if (minLr !== undefined && !(minLr >= 0 && minLr <= lr)) {
      throw new UsageError(
        `train: --min-lr must be a number from 0 to --lr (${lr}), got '${String(values['min-lr'])}'`,
      );
    }
    const weightDecay = values['weight-decay'] === undefined ? undefined : numberArg(values['weight-decay']);
    if (weightDecay !== undefined && !(Number.isFinite(weightDecay) && weightDecay >= 0)) {
      throw new UsageError(
        `train: --weight-decay must be a number ≥ 0, got '${String(values['weight-decay'])}'`,
      );
    }
    if (values.init === '') throw new UsageError('train: --init needs a checkpoint file name');
    if (values.init !== undefined && values['vocab-size'] !== undefined) {
      throw new UsageError(
        "train: --vocab-size cannot be given with --init (the checkpoint's tokenizer decides the vocabulary)",
      );
    }
    lm = {
      text: values.text,
      heldout: values.heldout as string | undefined,
      vocabSize: integerOption('train', values, 'vocab-size', 4096, 258, 1 << 20),
      context: integerOption('train', values, 'context', 128, 2, 1 << 16),
      dModel: integerOption('train', values, 'd-model', 256, 1, 1 << 14),
      layers: integerOption('train', values, 'layers', 4, 1, 256),
      heads: integerOption('train', values, 'heads', 8, 1, 1024),
      dFF: integerOption('train', values, 'd-ff', 1024, 1, 1 << 16),
      batchSize: integerOption('train', values, 'batch-size', 16, 1, 1 << 16),
      lr,
      ...(minLr === undefined ? {} : { minLr }),
      warmup: integerOption('train', values, 'warmup', 200, 0, 1_000_000),
      scheduleSteps: int('schedule-steps', 1, 1_000_000),
      dropout,
      repeats,
      init: values.init as string | undefined,
      saveEvery: integerOption('train', values, 'save-every', 100, 1, 1_000_000),
      resume: Boolean(values.resume),
      float16: Boolean(values.float16),
      optimizer: optimizerOption(values.optimizer),
      muonRms: muonRmsOption(values['muon-rms'], values.optimizer),
      ...(weightDecay === undefined ? {} : { weightDecay }),
    };
    const steps = int('steps', 1, 1_000_000);
    if (lm.scheduleSteps !== undefined && steps === undefined) {
      throw new UsageError(
        'train: --schedule-steps needs --steps (the steps this run takes of the schedule)',
      );
    }
    if (lm.scheduleSteps !== undefined && steps !== undefined && lm.scheduleSteps < steps) {
      throw new UsageError(
        `train: --schedule-steps ${lm.scheduleSteps} is less than --steps ${steps} (the schedule must span the run)`,
      );
    }
    if (positions === 'rope' && (lm.dModel % lm.heads !== 0 || (lm.dModel / lm.heads) % 2 !== 0))
      throw new UsageError(
        `train: --positions rope needs an even head width, but --d-model ${lm.dModel} / --heads ${lm.heads} is not an even integer`,
      );
  } else {
    const stray = lmOnly.find((name) => values[name] !== undefined);
    if (stray) throw new UsageError(`train: --${stray} is an option of --task lm only`);
  }
  return {
    task,
    steps: int('steps', 1, 1_000_000),
    seed: int('seed', 0, 2 ** 32 - 1) ?? 0,
    threads: int('threads', 1, 64) ?? 1,
    positions,
    out: values.out as string | undefined,
    plot: values.plot as string | undefined,
    lm,
  };
}

/** Runs `qkv train`; resolves to the exit code (0 done, 1 error, 2 bad usage, 130 interrupted). */
export function trainCommand(argv: string[], io: CliIO): number | Promise<number> {
  const args = parse(argv); // bad usage throws UsageError: main prints it and exits 2
  if (args === 'help') {
    io.stdout.write(TRAIN_HELP);
    return 0;
  }
  const run =
    args.task === 'scaling'
      ? runScaling(args, io)
      : args.lm
        ? runLanguageModel(args, args.lm, io)
        : args.task === 'induction'
          ? runInduction(args, io)
          : runTask(args, io);
  return run.catch((err: unknown) => {
    io.stderr.write(`qkv: train: ${(err as Error).message}\n`);
    return 1;
  });
}

/** Ctrl-C → a flag the loop checks between steps (the handler is removed when training ends). */
function interruptFlag(): { readonly hit: boolean; dispose(): void } {
  const state = { hit: false };
  const onSigint = () => {
    state.hit = true;
  };
  process.on('SIGINT', onSigint);
  return {
    get hit() {
      return state.hit;
    },
    dispose: () => process.off('SIGINT', onSigint),
  };
}

const nextTick = () => new Promise<void>((resolve) => setImmediate(resolve));

function clock(seconds: number): string {
  if (!Number.isFinite(seconds)) return '--:--';
  const s = Math.round(seconds);
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
}

/** Trains one Trainer to the end (or to Ctrl-C), drawing the progress bar. Returns whether it was interrupted. */
async function loop(
  trainer: Trainer,
  label: string,
  io: CliIO,
  stop: { readonly hit: boolean },
  onStep?: (info: StepInfo) => void,
): Promise<boolean> {
  const tty = Boolean(io.stderr.isTTY);
  const first = trainer.step;
  const t0 = performance.now();
  let tokens = 0;
  let lastDraw = t0;
  let ema = Number.NaN;
  while (!trainer.done && !stop.hit) {
    const info = trainer.trainStep();
    onStep?.(info);
    tokens += info.tokens;
    ema = Number.isNaN(ema) ? info.loss : 0.9 * ema + 0.1 * info.loss;
    const now = performance.now();
    const elapsed = (now - t0) / 1000;
    const last = info.step === trainer.steps;
    const tenth = Math.max(1, Math.floor(trainer.steps / 10));
    // A terminal gets a redrawn bar (10 per second at most); a log gets a line per tenth or per 10 s.
    const due = tty ? now - lastDraw > 100 : info.step % tenth === 0 || now - lastDraw > 10_000;
    if (due || last || stop.hit) {
      lastDraw = now;
      const done = info.step - first; // steps of this run (a resumed run starts past 0)
      const frac = info.step / trainer.steps;
      const width = 24;
      const filled = Math.round(frac * width);
      const bar = `${'█'.repeat(filled)}${'░'.repeat(width - filled)}`;
      const eta = (elapsed / done) * (trainer.steps - info.step);
      const line =
        `${label} ${bar} ${info.step}/${trainer.steps} loss ${info.loss.toFixed(4)} (avg ${ema.toFixed(4)}) ` +
        `${(tokens / Math.max(elapsed, 1e-9) / 1000).toFixed(1)}k tok/s ETA ${clock(eta)}`;
      io.stderr.write(tty ? `\r\x1b[2K${line}${last ? '\n' : ''}` : `${line}\n`);
    }
    await nextTick(); // lets SIGINT in
  }
  if (tty && stop.hit) io.stderr.write('\n');
  return stop.hit;
}

function stripExtension(path: string): string {
  return path.replace(/\.safetensors$/, '');
}

/** The model overrides --positions asks for (none without it: the task's model as it was). */
function positionsOverride(args: TrainArgs): { positions?: 'sinusoidal' | 'rope' } {
  return args.positions === undefined ? {} : { positions: args.positions };
}

/** The Trainer options --threads asks for: Node's worker_threads for more than one. */
function threadOptions(args: TrainArgs): { threads?: number; platform?: typeof nodeTrainPlatform } {
  return args.threads > 1 ? { threads: args.threads, platform: nodeTrainPlatform } : {};
}

/** ', 2 threads' when training on more than one thread (the progress line's words). */
function threadsNote(args: TrainArgs): string {
  return args.threads > 1 ? `, ${args.threads} threads` : '';
}

/** ', RoPE' for a rotary model, '' for sinusoidal positions (the progress line's words). */
function positionsNote(positions: 'sinusoidal' | 'rope'): string {
  return positions === 'rope' ? ', RoPE' : '';
}

async function runTask(args: TrainArgs, io: CliIO): Promise<number> {
  const trainer = new Trainer({
    task: args.task,
    seed: args.seed,
    steps: args.steps,
    model: positionsOverride(args),
    ...threadOptions(args),
  });
  const out = args.out ?? `${args.task}.safetensors`;
  const plot = args.plot ?? `${stripExtension(out)}.loss.svg`;
  const { model } = trainer;
  io.stderr.write(
    `qkv train: ${trainer.task.description}; ${model.config.numLayers} layers, D=${model.config.dModel}, ` +
      `${model.config.numHeads} heads${positionsNote(model.config.positions)}, ${model.numParameters} parameters, ${plural(trainer.steps, 'step')}, seed ${args.seed}${threadsNote(args)}\n`,
  );
  const stop = interruptFlag();
  const t0 = performance.now();
  let interrupted: boolean;
  try {
    interrupted = await loop(trainer, args.task, io, stop);
  } finally {
    stop.dispose();
    await trainer.terminate();
  }
  const seconds = (performance.now() - t0) / 1000;
  writeFileAtomic(out, trainer.checkpoint()); // config, task, step and the task's tokenizer in the metadata
  writeFileSync(
    plot,
    lineChartSvg([{ label: `${args.task} (seed ${args.seed})`, values: trainer.losses }], {
      title: `qkv train --task ${args.task}: training loss`,
      yLabel: 'cross-entropy',
      logY: true,
    }),
  );
  const losses = trainer.losses;
  const tail = losses.slice(-20);
  const final = tail.reduce((s, x) => s + x, 0) / Math.max(1, tail.length);
  io.stdout.write(
    `${interrupted ? 'interrupted' : 'trained'} ${args.task}: ${trainer.step}/${plural(trainer.steps, 'step')} in ${seconds.toFixed(1)} s, ` +
      `loss ${losses[0]?.toFixed(4) ?? '-'} → ${final.toFixed(4)} (mean of last ${tail.length}); checkpoint ${out}, loss curve ${plot}\n`,
  );
  if (args.task === 'pronoun' && !interrupted) {
    const score = evaluatePronoun(model);
    io.stdout.write(
      `accuracy=${score.accuracy.toFixed(4)} referent_attention=${score.referentAttention.toFixed(4)}\n`,
    );
  }
  return interrupted ? 130 : 0;
}

/**
 * `--task lm`: byte-level BPE trained on the text (or the one a resumed run saved), then a decoder on
 * windows of it, saving the checkpoint and the training state every --save-every steps so an interrupted
 * run continues exactly where it stopped (--resume).
 */
async function runLanguageModel(args: TrainArgs, o: LmArgs, io: CliIO): Promise<number> {
  const out = args.out ?? 'lm.safetensors';
  const statePath = `${out}.state`;
  const plot = args.plot ?? `${stripExtension(out)}.loss.svg`;
  const read = (path: string, what: string) => {
    if (!existsSync(path)) throw new Error(`no such ${what} file '${path}'`);
    return readFileSync(path, 'utf8');
  };
  const text = read(o.text, '--text');
  const heldText = o.heldout === undefined ? undefined : read(o.heldout, '--heldout');
  let saved: Uint8Array | undefined;
  let savedMeta: Record<string, string> = {};
  let tokenizer: Tokenizer;
  let init: (ReturnType<typeof loadCheckpoint> & { seconds: number }) | undefined;
  // Which checkpoint the run started from (--init), kept in every state it saves; undefined: random weights.
  let initKey: string | undefined;
  if (o.resume && existsSync(statePath)) {
    saved = readFileBytes(statePath);
    savedMeta = decodeSafetensors(saved).metadata;
    const json = savedMeta[TOKENIZER_KEY];
    if (json === undefined) throw new Error(`${statePath} holds no tokenizer (not a qkv training state?)`);
    tokenizer = tokenizerFromJSON(JSON.parse(json));
    initKey = savedMeta[INIT_KEY];
    // A state is the run it was: one started from random weights must not pass for a later phase.
    if (o.init !== undefined) {
      const again = existsSync(o.init) ? initKeyOf(readFileBytes(o.init)).key : initKey;
      if (initKey === undefined || initKey !== again) {
        throw new Error(
          `${statePath} is the state of a run ${initKey === undefined ? 'not started from --init' : `started from another checkpoint (${initKey}) than --init ${o.init} (${again})`}; delete it or drop --resume`,
        );
      }
    }
  } else if (o.init !== undefined) {
    if (!existsSync(o.init)) throw new Error(`no such --init file '${o.init}'`);
    const bytes = readFileBytes(o.init);
    const { key, metadata } = initKeyOf(bytes);
    // Its training time carries over: the final checkpoint's qkv.trainSeconds is every phase's.
    init = { ...loadCheckpoint(bytes, o.init), seconds: Number(metadata[SECONDS_KEY] ?? 0) || 0 };
    initKey = key;
    if (init.info.task !== 'lm' || init.info.tokenizer === undefined) {
      throw new Error(
        `--init ${o.init} is not a checkpoint of --task lm (task ${init.info.task ?? 'not recorded'}, ${init.info.tokenizer ? 'a' : 'no'} tokenizer)`,
      );
    }
    tokenizer = init.info.tokenizer;
  } else {
    const t0 = performance.now();
    tokenizer = BpeTokenizer.train(text, { vocabSize: o.vocabSize });
    io.stderr.write(
      `qkv train: ${tokenizer.description} trained in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
    );
  }
  const train = tokenizer.encode(text);
  const test = heldText === undefined ? undefined : tokenizer.encode(heldText);
  const task = languageModelTask({
    tokenizer,
    train,
    test,
    contextLength: o.context,
    repeats: o.repeats,
    model: {
      dModel: o.dModel,
      numHeads: o.heads,
      numLayers: o.layers,
      dFF: o.dFF,
      dropout: o.dropout,
      ...positionsOverride(args),
    },
  });
  const trainer = new Trainer({
    task,
    seed: args.seed,
    steps: args.steps,
    batchSize: o.batchSize,
    lr: o.lr,
    ...(o.minLr === undefined ? {} : { minLr: o.minLr }),
    warmup: o.warmup,
    optimizer: o.optimizer,
    ...(o.muonRms === undefined ? {} : { muonRms: o.muonRms }),
    ...(o.weightDecay === undefined ? {} : { weightDecay: o.weightDecay }),
    ...(o.scheduleSteps === undefined ? {} : { scheduleSteps: o.scheduleSteps }),
    ...threadOptions(args),
  });
  // Training time summed over every run of a resumed training (the state keeps it) and, with --init,
  // over the phase that made the checkpoint.
  let trainedBefore = 0;
  if (saved) {
    trainedBefore = Number(savedMeta[SECONDS_KEY] ?? 0) || 0;
    try {
      trainer.restoreState(saved);
    } catch (err) {
      throw new Error(
        `${statePath} is the state of another run; delete it or drop --resume (${(err as Error).message})`,
      );
    }
    io.stderr.write(`qkv train: resumed from ${statePath} at step ${trainer.step}\n`);
  } else if (init) {
    startFrom(trainer.model, init.model, o.init as string);
    trainedBefore = init.seconds;
    io.stderr.write(`qkv train: starting from the weights of ${o.init} (step ${init.info.step ?? '?'})\n`);
  }
  const { model } = trainer;
  const c = model.config;
  io.stderr.write(
    `qkv train: ${task.description}; ${c.numLayers} layers, D=${c.dModel}, ${c.numHeads} heads${positionsNote(c.positions)}, dFF ${c.dFF}, ` +
      `${model.numParameters} parameters, ${plural(trainer.steps, 'step')} of ${o.batchSize}×${o.context} tokens, seed ${args.seed}${threadsNote(args)}\n`,
  );
  // Bits per byte of the held-out text, estimated from the mean loss of random windows.
  const heldBytes = heldText === undefined ? 0 : new TextEncoder().encode(heldText).length;
  const heldOut = () => {
    if (!test) return '';
    const loss = trainer.evaluate('test', 8);
    return `held-out loss ${loss.toFixed(4)} (≈ ${((loss / Math.LN2) * (test.length / heldBytes)).toFixed(3)} bits/byte)`;
  };
  // The best induction head, on the probe `qkv heads` uses (random tokens but the specials, repeated).
  const exclude = Object.values(tokenizer.specials);
  const induction = () => {
    const best = bestHead(headScores(model, { exclude }).heads, 'induction');
    return `best induction head ${best.layer}.${best.head}: ${best.induction.toFixed(3)}`;
  };
  const stop = interruptFlag();
  const t0 = performance.now();
  const trainSeconds = () => trainedBefore + (performance.now() - t0) / 1000;
  const save = () => {
    // Milliseconds: a short run on a quiet machine must not record 0.0 s.
    const seconds = trainSeconds().toFixed(3);
    writeFileAtomic(
      out,
      saveCheckpoint(model, {
        task: 'lm',
        step: trainer.step,
        tokenizer,
        dtype: o.float16 ? 'float16' : 'float32',
        extra: { [SECONDS_KEY]: seconds },
      }),
    );
    writeFileAtomic(
      statePath,
      trainer.saveState({
        [TOKENIZER_KEY]: JSON.stringify(tokenizer.toJSON()),
        [SECONDS_KEY]: seconds,
        ...(initKey === undefined ? {} : { [INIT_KEY]: initKey }),
      }),
    );
  };
  let interrupted: boolean;
  const firstStep = trainer.step;
  try {
    interrupted = await loop(trainer, 'lm', io, stop, (info) => {
      if (info.step % o.saveEvery !== 0 || info.step === trainer.steps) return;
      save();
      const held = heldOut();
      io.stderr.write(
        `${io.stderr.isTTY ? '\n' : ''}step ${info.step}: saved ${out}${held ? `; ${held}` : ''}; ${induction()}\n`,
      );
    });
  } finally {
    stop.dispose();
    await trainer.terminate();
  }
  // A resumed run that had already finished takes no step and leaves its files as they are (a rerun of
  // npm run train:lm must not rewrite the committed checkpoint with a new training time).
  const idle = saved !== undefined && trainer.step === firstStep;
  if (!idle) save();
  const seconds = (performance.now() - t0) / 1000;
  if (!idle) {
    writeFileSync(
      plot,
      lineChartSvg([{ label: `lm (seed ${args.seed})`, values: trainer.losses }], {
        title: 'qkv train --task lm: training loss',
        yLabel: 'cross-entropy',
        logY: true,
      }),
    );
  }
  const tail = trainer.losses.slice(-50);
  const final = tail.reduce((sum, x) => sum + x, 0) / Math.max(1, tail.length);
  const held = heldOut();
  io.stdout.write(
    `${interrupted ? 'interrupted' : 'trained'} lm: ${trainer.step}/${plural(trainer.steps, 'step')} (${seconds.toFixed(1)} s this run, ${trainSeconds().toFixed(1)} s in all), ` +
      `training loss ${final.toFixed(4)} (mean of last ${tail.length})${held ? `, ${held}` : ''}; checkpoint ${out}, state ${statePath}, loss curve ${plot}\n`,
  );
  return interrupted ? 130 : 0;
}

/**
 * Copies `from`'s weights into `model` (a run's fresh model) after checking that everything but the context
 * (maxLen) and dropout, which a later phase may change, is the same: the tensors' shapes alone would let a
 * sinusoidal checkpoint start a RoPE run.
 */
function startFrom(model: TinyTransformer, from: TinyTransformer, path: string): void {
  const a = model.config;
  const b = from.config;
  const fields = [
    'scaleScores',
    'vocabSize',
    'dModel',
    'numHeads',
    'numLayers',
    'dFF',
    'causal',
    'mlp',
    'positions',
    'ropeBase',
  ] as const;
  const differ = fields.filter((f) => (a[f] ?? null) !== (b[f] ?? null));
  if (differ.length) {
    throw new Error(
      `--init ${path} is a model of another shape: ${differ.map((f) => `${f} ${String(b[f])} there, ${String(a[f])} asked for`).join('; ')}`,
    );
  }
  model.loadStateDict(from.stateDict());
}

/** The state's record of the --init checkpoint a run started from. */
const INIT_KEY = 'qkv.initFrom';

/**
 * What identifies an --init checkpoint in a state (its step and training time, and its size), and its
 * metadata.
 */
function initKeyOf(bytes: Uint8Array): { key: string; metadata: Record<string, string> } {
  const { metadata } = decodeSafetensors(bytes);
  const key = `step ${metadata['qkv.step'] ?? '?'}, ${metadata[SECONDS_KEY] ?? '?'} s trained, ${bytes.length} bytes`;
  return { key, metadata };
}

/** Seconds of training so far, summed over resumed runs: kept in the state and the checkpoint's metadata. */
const SECONDS_KEY = 'qkv.trainSeconds';

/** Steps between two measurements of the induction score in `--task induction`. */
const INDUCTION_EVERY = 10;

/**
 * `--task induction`: trains the attention-only decoder, measuring the best head's induction score (and
 * the mean loss since the last measurement) every INDUCTION_EVERY steps, then plots both and names the
 * step of the phase change.
 */
async function runInduction(args: TrainArgs, io: CliIO): Promise<number> {
  const trainer = new Trainer({
    task: 'induction',
    seed: args.seed,
    steps: args.steps,
    model: positionsOverride(args),
    ...threadOptions(args),
  });
  const out = args.out ?? 'induction.safetensors';
  const plot = args.plot ?? `${stripExtension(out)}.loss.svg`;
  const { model } = trainer;
  const c = model.config;
  io.stderr.write(
    `qkv train: ${trainer.task.description}; ${c.numLayers} layers, attention only${positionsNote(c.positions)}, D=${c.dModel}, ` +
      `${c.numHeads} heads, ${model.numParameters} parameters, ${plural(trainer.steps, 'step')}, seed ${args.seed}${threadsNote(args)}\n`,
  );
  const records: InductionRecord[] = [];
  const measure = (step: number, loss: number) => {
    const { score, layer, head } = inductionScore(model);
    records.push({ step, loss, induction: score, layer, head });
  };
  measure(0, Number.NaN);
  let sum = 0;
  let since = 0;
  const stop = interruptFlag();
  const t0 = performance.now();
  let interrupted: boolean;
  try {
    interrupted = await loop(trainer, 'induction', io, stop, (info) => {
      sum += info.loss;
      since++;
      if (info.step % INDUCTION_EVERY !== 0 && info.step !== trainer.steps) return;
      measure(info.step, sum / since);
      sum = 0;
      since = 0;
    });
  } finally {
    stop.dispose();
    await trainer.terminate();
  }
  if (since > 0) measure(trainer.step, sum / since); // interrupted between two measurements
  const seconds = (performance.now() - t0) / 1000;
  writeFileAtomic(out, trainer.checkpoint());
  writeFileSync(
    plot,
    inductionPlotSvg(trainer.losses, records, {
      vocabSize: c.vocabSize,
      title: `qkv train --task induction (seed ${args.seed}): loss and best induction score`,
    }),
  );
  const f = (x: number) => (Number.isNaN(x) ? '-' : x.toFixed(3));
  const tenth = Math.max(INDUCTION_EVERY, Math.round(trainer.steps / 10 / INDUCTION_EVERY) * INDUCTION_EVERY);
  io.stdout.write('step    loss  induction  head\n');
  for (const [i, r] of records.entries()) {
    if (i === 0 || i === records.length - 1 || r.step % tenth === 0)
      io.stdout.write(
        `${String(r.step).padStart(4)} ${f(r.loss).padStart(7)} ${f(r.induction).padStart(10)}  ${r.layer}.${r.head}\n`,
      );
  }
  const [start, end] = [records[0], records[records.length - 1]];
  const change = phaseChange(records);
  const drop = phaseChange(records, 'loss');
  const span = 5 * INDUCTION_EVERY;
  const phase = change
    ? `the best induction score jumps at step ${change.step} (≥ ${f(change.threshold)}, halfway up, from there on): ${f(change.before)} at ${Math.max(0, change.step - span)} → ${f(change.after)} at ${change.step + span}`
    : 'the best induction score never rose by 0.2';
  const fall = drop
    ? `the loss falls fastest at step ${drop.step}: ${f(drop.before)} at ${drop.step - span} → ${f(drop.after)} at ${drop.step + span}`
    : 'the loss never fell by 0.2 within 100 steps';
  io.stdout.write(
    `${interrupted ? 'interrupted' : 'trained'} induction: ${trainer.step}/${plural(trainer.steps, 'step')} in ${seconds.toFixed(1)} s; ` +
      `loss ${f(records[1]?.loss ?? Number.NaN)} (first ${INDUCTION_EVERY} steps) → ${f(end.loss)} (last ${INDUCTION_EVERY}), chance ln ${c.vocabSize} = ${f(Math.log(c.vocabSize))}; ` +
      `best induction score ${f(start.induction)} (step 0, head ${start.layer}.${start.head}) → ${f(end.induction)} (head ${end.layer}.${end.head})\n` +
      `${phase}\n${fall}\n` +
      `checkpoint ${out}, plot ${plot}\n`,
  );
  return interrupted ? 130 : 0;
}

/** The §4.2 experiment: copy at d_k = 64 (one head, D = 64, 2 layers), with and without ÷√d_k, same seed. */
async function runScaling(args: TrainArgs, io: CliIO): Promise<number> {
  const steps = args.steps ?? 400;
  const plot = args.plot ?? 'scaling.svg';
  const make = (scaleScores: boolean) =>
    new Trainer({
      task: sequenceTask('copy', {
        length: 6,
        symbols: 8,
        model: { dModel: 64, numHeads: 1, dFF: 128, numLayers: 2, scaleScores },
      }),
      seed: args.seed,
      steps,
      ...threadOptions(args),
    });
  const runs = [
    { label: 'softmax(QKᵀ/√d_k)', trainer: make(true) },
    { label: 'softmax(QKᵀ), no scaling', trainer: make(false) },
  ];
  io.stderr.write(
    `qkv train --task scaling: copy 6 of 8 symbols, 2 layers, d_model = d_k = 64 (one head), ${plural(steps, 'step')}, seed ${args.seed}${threadsNote(args)}\n`,
  );
  const stop = interruptFlag();
  let interrupted = false;
  try {
    for (const run of runs) {
      if (!interrupted) interrupted = await loop(run.trainer, run.label, io, stop);
    }
  } finally {
    stop.dispose();
    for (const run of runs) await run.trainer.terminate();
  }
  const series: PlotSeries[] = runs.map((r) => ({ label: r.label, values: r.trainer.losses }));
  writeFileSync(
    plot,
    lineChartSvg(series, {
      title: `§4.2: copy task, d_k = 64, same seed (${args.seed}): with and without ÷√d_k`,
      yLabel: 'cross-entropy',
      logY: true,
    }),
  );
  for (const r of runs) {
    const l = r.trainer.losses;
    const mean = (a: number[]) => a.reduce((s, x) => s + x, 0) / Math.max(1, a.length);
    const marks = [50, 100, 150, 200, 300, l.length].filter(
      (n, i, all) => n <= l.length && all.indexOf(n) === i,
    );
    const at = marks.map((n) => `${n}: ${mean(l.slice(Math.max(0, n - 10), n)).toFixed(4)}`).join(', ');
    io.stdout.write(`${r.label}: loss at step ${at} (each the mean of the 10 steps up to it)\n`);
  }
  io.stdout.write(`loss curves: ${plot}\n`);
  return interrupted ? 130 : 0;
}
