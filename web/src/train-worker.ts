// The training worker: owns one qkv Trainer and calls trainStep() in a loop, posting every step's numbers
// and, every ATTENTION_EVERY steps, the attention of every layer on a fixed sample sequence.
// One decision to know: the loop yields to the event loop after every step (a MessageChannel round trip,
// not setTimeout, which browsers clamp to 4 ms), so Pause, Reset and checkpoint requests are heard between
// two steps. Same task, steps and seed as `qkv train` give the same run: this is the same Trainer. The
// sample and its scored positions come from the task (`task.display`), its ids from the task's tokenizer.

import { autograd, inductionScore, type ScoredPosition, type Task, Trainer } from 'qkv/nn';
import {
  ATTENTION_EVERY,
  type TrainAttention,
  type TrainRequest,
  type TrainResponse,
  type TrainSettings,
} from './train-protocol.js';

interface WorkerScope {
  onmessage: ((e: MessageEvent<TrainRequest>) => void) | null;
  postMessage(message: TrainResponse, transfer?: Transferable[]): void;
}
const scope = self as unknown as WorkerScope;
const post = (m: TrainResponse, transfer: Transferable[] = []) => scope.postMessage(m, transfer);

interface Sample {
  tokens: string[];
  ids: Int32Array;
  /** Positions whose prediction is shown, the token expected there, and where that token sits. */
  scored: readonly ScoredPosition[];
}

let trainer: Trainer | undefined;
let settings: TrainSettings | undefined;
let sample: Sample | undefined;
let running = false;
/** Bumped by Reset: a loop from an older run stops at its next check and posts nothing more. */
let run = 0;
/** The run whose loop is active, or −1: Start while a loop is still winding down must not start another. */
let loopRun = -1;
let elapsedMs = 0;
let tokensSeen = 0;
let lastAttentionStep = -1;

// A zero-delay yield: a message to ourselves is a task, so messages from the page queued meanwhile run.
const channel = new MessageChannel();
let wake: (() => void) | undefined;
channel.port1.onmessage = () => {
  const w = wake;
  wake = undefined;
  w?.();
};
const yieldToEvents = () =>
  new Promise<void>((resolve) => {
    wake = resolve;
    channel.port2.postMessage(0);
  });

/** The sequence whose attention the page shows (the task's display sample), or none if the task has none. */
function sampleFor(task: Task): Sample | undefined {
  const d = task.display;
  if (!d) return undefined;
  return { tokens: [...d.sample], ids: task.tokenizer.encode(d.sample), scored: d.scored };
}

function postAttention(t: Trainer, s: Sample | undefined): void {
  if (!s) return;
  const L = s.ids.length;
  // Untaped (noGrad): a taped forward would keep every activation alive until the next map is posted.
  const { logits, weights } = autograd.noGrad(() => t.model.forward(s.ids, 1, L, { needWeights: true })); // [1, L, V]; [1, H, L, L]
  const { tokenizer } = t.task;
  const V = tokenizer.vocabSize;
  const pad = tokenizer.specials.pad; // padding is never an answer (as in evaluatePronoun)
  const predictions = s.scored.map(({ position, target, key }) => {
    let best = -1;
    for (let c = 0; c < V; c++) {
      if (c !== pad && (best < 0 || logits.data[position * V + c] > logits.data[position * V + best]))
        best = c;
    }
    return { position, token: tokenizer.idToToken(best), target, key };
  });
  const copies = weights.map((w) => Float32Array.from(w.data));
  const message: TrainAttention = {
    kind: 'attention',
    step: t.step,
    tokens: s.tokens,
    heads: t.model.config.numHeads,
    weights: copies,
    predictions,
    ...(t.task.display?.inductionScore ? { induction: inductionScore(t.model) } : {}),
  };
  post(
    message,
    copies.map((c) => c.buffer),
  );
  lastAttentionStep = t.step;
}

function create(next: TrainSettings): Trainer {
  const t = new Trainer({ task: next.task, steps: next.steps, seed: next.seed });
  const c = t.model.config;
  settings = next;
  sample = sampleFor(t.task);
  elapsedMs = 0;
  tokensSeen = 0;
  post({
    kind: 'ready',
    settings: next,
    description: t.task.description,
    parameters: t.model.numParameters,
    layers: c.numLayers,
    heads: c.numHeads,
    dModel: c.dModel,
    batchSize: t.batchSize,
  });
  postAttention(t, sample);
  return t;
}

async function loop(id: number): Promise<void> {
  loopRun = id;
  post({ kind: 'state', state: 'running', step: trainer?.step ?? 0 });
  while (running && id === run && trainer && !trainer.done) {
    const t0 = performance.now();
    try {
      const info = trainer.trainStep();
      const ms = performance.now() - t0;
      elapsedMs += ms;
      tokensSeen += info.tokens;
      post({
        kind: 'step',
        step: info.step,
        steps: trainer.steps,
        loss: info.loss,
        lr: info.lr,
        gradNorm: info.gradNorm,
        stepMs: ms,
        elapsedMs,
        tokensPerSecond: tokensSeen / (elapsedMs / 1000),
      });
      if (info.step % ATTENTION_EVERY === 0 || trainer.done) postAttention(trainer, sample);
    } catch (err) {
      running = false;
      post({ kind: 'error', message: `step ${trainer.step + 1} failed: ${(err as Error).message}` });
    }
    await yieldToEvents();
  }
  if (loopRun === id) loopRun = -1;
  if (id !== run || !trainer) return;
  running = false;
  if (lastAttentionStep !== trainer.step) postAttention(trainer, sample);
  post({ kind: 'state', state: trainer.done ? 'done' : 'paused', step: trainer.step });
}

scope.onmessage = (e) => {
  const req = e.data;
  try {
    if (req.kind === 'start') {
      trainer ??= create(req.settings);
      if (trainer.done) return post({ kind: 'state', state: 'done', step: trainer.step });
      running = true;
      if (loopRun !== run) void loop(run);
    } else if (req.kind === 'pause') {
      running = false;
    } else if (req.kind === 'reset') {
      running = false;
      run++;
      trainer = undefined;
      settings = undefined;
      lastAttentionStep = -1;
      post({ kind: 'state', state: 'idle', step: 0 });
    } else {
      if (!trainer || !settings) return post({ kind: 'error', message: 'nothing trained yet: press Start' });
      const bytes = trainer.checkpoint({
        'qkv.seed': String(settings.seed),
        'qkv.trainedIn': 'qkv playground, Train tab',
      });
      post({ kind: 'checkpoint', purpose: req.purpose, bytes, task: settings.task, step: trainer.step }, [
        bytes.buffer,
      ]);
    }
  } catch (err) {
    post({ kind: 'error', message: (err as Error).message });
  }
};
