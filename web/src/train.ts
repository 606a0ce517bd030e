// The Train tab: task, steps and seed; Start / Pause / Reset; a live loss curve (qkv's lineChartSvg; for the
// induction task with the best head's induction score beside it, as `qkv train` plots it) and the
// sample's attention maps (the page's HeatmapCard) as the model learns; "Use this model", "Generate with
// this model" (a decoder: copy, reverse) and "Download checkpoint". One decision to know: training runs in
// a worker of its own (train-worker.ts), created on the first Start, so the compute worker that draws the
// other views is never kept waiting by a step.
// What differs between tasks (the layer to open on, the note, whether the other views can take the model)
// is read from the task's `display`, never from its name.

import { getTask, TASK_NAMES, type TaskDisplay, type TaskName } from 'qkv/nn';
import { type HeatmapSpec, lineChartSvg } from 'qkv/viz';
import { download, HeatmapCard } from './heatmap.js';
import { allLayersNote, lastLayerNote } from './train-notes.js';
import {
  ATTENTION_EVERY,
  type TrainAttention,
  type TrainReady,
  type TrainRequest,
  type TrainResponse,
  type TrainSettings,
  type TrainState,
  type TrainStep,
} from './train-protocol.js';

/** What the tab needs from the page: hand trained weights to the other views or the Generate tab. */
export interface TrainTabHost {
  /** Loads safetensors bytes as the other views' model; resolves with its description. */
  useModel(bytes: Uint8Array, step: number): Promise<string>;
  /** Loads a decoder's safetensors bytes in the Generate tab and shows it; resolves with its description. */
  generateWith(bytes: Uint8Array, step: number, task: TaskName): Promise<string>;
}

/** Steps of the running mean drawn over the raw loss. */
const MEAN_OF = 20;

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const fmtLoss = (v: number) => (Number.isFinite(v) ? v.toFixed(4) : String(v));
const fmtSeconds = (ms: number) =>
  ms < 60_000 ? `${(ms / 1000).toFixed(1)} s` : `${(ms / 60_000).toFixed(1)} min`;

function meanOfLast(values: readonly number[], n: number): number {
  const tail = values.slice(-n);
  return tail.reduce((a, b) => a + b, 0) / tail.length;
}

function runningMean(values: readonly number[], n: number): number[] {
  const out: number[] = [];
  let sum = 0;
  values.forEach((v, i) => {
    sum += v - (i >= n ? values[i - n] : 0);
    out.push(sum / Math.min(i + 1, n));
  });
  return out;
}

/** Wires the Train tab's controls (the markup is in index.html). */
export function setupTrainTab(host: TrainTabHost): void {
  const taskSel = $<HTMLSelectElement>('trainTask');
  const stepsIn = $<HTMLInputElement>('trainSteps');
  const seedIn = $<HTMLInputElement>('trainSeed');
  const startBtn = $<HTMLButtonElement>('trainStart');
  const pauseBtn = $<HTMLButtonElement>('trainPause');
  const resetBtn = $<HTMLButtonElement>('trainReset');
  const useBtn = $<HTMLButtonElement>('trainUse');
  const downloadBtn = $<HTMLButtonElement>('trainDownload');
  const generateBtn = $<HTMLButtonElement>('trainGenerate');
  const layerSel = $<HTMLSelectElement>('trainLayer');
  const status = $('trainStatus');
  const readout = $('trainReadout');
  const chart = $('trainChart');
  const maps = $('trainMaps');
  const attnNote = $('trainAttnNote');

  let worker: Worker | undefined;
  let state: TrainState = 'idle';
  let pausing = false;
  /** Keyboard focus was on Pause when it got disabled: it moves to the button that is next useful. */
  let refocus = false;
  let ready: TrainReady | undefined;
  /** The running task's display (its sample, pattern and layers), set with `ready`. */
  let display: TaskDisplay | undefined;
  let last: TrainStep | undefined;
  let attention: TrainAttention | undefined;
  let losses: number[] = [];
  /** The induction task: the best head's induction score at each attention message's step. */
  let scores: { step: number; score: number; layer: number; head: number }[] = [];
  let cards: HeatmapCard[] = [];
  let chartQueued = false;
  /** Resets sent whose 'idle' answer has not arrived yet (see onMessage). */
  let resetsDue = 0;

  const send = (req: TrainRequest) => worker?.postMessage(req);

  function setStatus(text: string, error = false): void {
    status.textContent = text;
    status.classList.toggle('error', error);
    status.setAttribute('role', error ? 'alert' : 'status');
  }

  function intOf(el: HTMLInputElement): number | undefined {
    const v = Number(el.value);
    const ok = el.value !== '' && Number.isInteger(v) && v >= Number(el.min) && v <= Number(el.max);
    el.setAttribute('aria-invalid', String(!ok));
    return ok ? v : undefined;
  }

  function describeTask(): void {
    const task = getTask(taskSel.value);
    const m = task.model;
    $('trainTaskNote').textContent =
      `${task.description}. Model: ${m.numLayers} layers × ${m.numHeads} heads, d_model ${m.dModel}, ` +
      `${m.causal ? 'causal decoder' : 'encoder'}; ${task.defaults.batchSize} sequences a step. ` +
      `\`qkv train --task ${task.name}\` runs ${task.defaults.steps} steps by default; the same steps and seed give the same run here.`;
  }

  function syncControls(): void {
    const idle = state === 'idle';
    for (const el of [taskSel, stepsIn, seedIn]) el.disabled = !idle;
    startBtn.disabled = state === 'running' || state === 'done';
    startBtn.textContent = state === 'paused' ? 'Resume' : 'Start';
    pauseBtn.disabled = state !== 'running' || pausing;
    resetBtn.disabled = idle;
    const trained = !idle && (last?.step ?? 0) > 0;
    downloadBtn.disabled = !trained;
    const sentences = display?.sentences === true;
    useBtn.disabled = !trained || !sentences;
    useBtn.title = sentences
      ? 'Show this model in Step-through, Head view and Model view'
      : 'Only a model that reads sentences (pronoun) fits the other views (they show a typed sentence)';
    const decoder = ready !== undefined && getTask(ready.settings.task).model.causal;
    generateBtn.disabled = !trained || !decoder;
    generateBtn.title = decoder
      ? 'Continue a prompt with this decoder in the Generate tab'
      : 'Only a decoder (copy, reverse) generates; pronoun trains an encoder';
    readout.dataset.state = state;
  }

  function drawReadout(): void {
    const s = last;
    const steps = ready?.settings.steps ?? Number(stepsIn.value);
    const eta =
      s && state === 'running' && s.step < steps
        ? ` · about ${fmtSeconds((s.elapsedMs / s.step) * (steps - s.step))} left`
        : '';
    readout.innerHTML = s
      ? `step <b data-testid="train-step">${s.step}</b>/${steps} · loss <b data-testid="train-loss">${fmtLoss(s.loss)}</b>` +
        ` (first ${fmtLoss(losses[0])}, mean of the last ${Math.min(MEAN_OF, losses.length)} ${fmtLoss(meanOfLast(losses, MEAN_OF))})` +
        ` · lr ${s.lr.toExponential(2)} · <b data-testid="train-tps">${Math.round(s.tokensPerSecond)}</b> tokens/s` +
        ` · ${s.stepMs.toFixed(0)} ms/step${eta}${inductionText()}`
      : `step <b data-testid="train-step">0</b>/${steps} · loss –`;
    readout.dataset.step = String(s?.step ?? 0);
    readout.dataset.steps = String(steps);
    if (s) {
      readout.dataset.loss = String(s.loss);
      readout.dataset.firstLoss = String(losses[0]);
    } else {
      delete readout.dataset.loss;
      delete readout.dataset.firstLoss;
    }
  }

  /** The induction task's readout: the best head's score now, and at its best so far. */
  function inductionText(): string {
    const now = scores.at(-1);
    if (!now) return '';
    const top = scores.reduce((a, b) => (b.score > a.score ? b : a));
    return (
      ` · best induction score <b data-testid="train-induction" data-value="${now.score}">${now.score.toFixed(3)}</b>` +
      ` (head ${now.layer}.${now.head}; highest so far ${top.score.toFixed(3)} at step ${top.step})`
    );
  }

  function drawChart(): void {
    chartQueued = false;
    if (losses.length === 0) {
      chart.innerHTML = '<p class="note">The loss curve appears with the first step.</p>';
      return;
    }
    if (display?.inductionScore) {
      drawInductionChart();
      return;
    }
    const series = [{ label: 'loss per step', values: losses, color: '#9aa4b8' }];
    if (losses.length >= MEAN_OF)
      series.push({
        label: `mean of ${MEAN_OF} steps`,
        values: runningMean(losses, MEAN_OF),
        color: '#2b59c3',
      });
    const s = ready!.settings;
    chart.innerHTML = lineChartSvg(series, {
      title: `${s.task}, seed ${s.seed}: training loss, step ${losses.length} of ${s.steps}`,
      width: 640,
      height: 260,
    });
    chart.dataset.points = String(losses.length);
  }

  /**
   * The induction task, as `qkv train --task induction` plots it: the loss ÷ ln V (1 = chance) and the best
   * head's induction score on one [0, 1] axis, so the loss's fall and the score's jump line up.
   */
  function drawInductionChart(): void {
    const s = ready!.settings;
    const chance = Math.log(getTask(s.task).model.vocabSize);
    const score = new Array<number>(losses.length).fill(Number.NaN); // NaN: no point at that step
    for (const r of scores) if (r.step >= 1 && r.step <= losses.length) score[r.step - 1] = r.score;
    const series = [
      { label: 'loss ÷ ln V per step', values: losses.map((x) => x / chance), color: '#9aa4b8' },
    ];
    if (losses.length >= MEAN_OF)
      series.push({
        label: `mean of ${MEAN_OF} steps`,
        values: runningMean(losses, MEAN_OF).map((x) => x / chance),
        color: '#2b59c3',
      });
    series.push({ label: 'best induction score', values: score, color: '#d9480f' });
    chart.innerHTML = lineChartSvg(series, {
      title: `${s.task}, seed ${s.seed}: loss ÷ ln V (chance = 1) and the best induction score, step ${losses.length} of ${s.steps}`,
      yLabel: 'loss ÷ ln V, induction score',
      width: 640,
      height: 260,
    });
    chart.dataset.points = String(losses.length);
    chart.dataset.inductionPoints = String(scores.length);
  }

  /** Coalesces per-step redraws of the chart into one per frame. */
  function queueChart(): void {
    if (chartQueued) return;
    chartQueued = true;
    requestAnimationFrame(drawChart);
  }

  function drawMaps(): void {
    const a = attention;
    if (!a || !ready) {
      maps.replaceChildren();
      cards = [];
      attnNote.textContent = `Press Start: the maps of the untrained model appear first, then every ${ATTENTION_EVERY} steps.`;
      delete maps.dataset.step;
      return;
    }
    const layers = a.weights.length;
    if (layerSel.options.length !== layers + 1) {
      layerSel.replaceChildren(
        ...Array.from(
          { length: layers },
          (_, l) => new Option(`layer ${l}${l === layers - 1 ? ' (last)' : ''}`, String(l)),
        ),
        new Option('all layers', 'all'),
      );
      // Pronoun: the last layer, as in the article's picture; copy/reverse: every head (the pattern may
      // form in any layer). The task says which.
      layerSel.value = display?.layers === 'last' ? String(layers - 1) : 'all';
    }
    const shown =
      layerSel.value === 'all' ? Array.from({ length: layers }, (_, l) => l) : [Number(layerSel.value)];
    const L = a.tokens.length;
    const pairs = shown.flatMap((l) => Array.from({ length: a.heads }, (_, h) => [l, h] as const));
    const ids = pairs.map(([l, h]) => `train-l${l}-h${h}`);
    if (cards.map((c) => c.id).join() !== ids.join()) {
      cards = pairs.map(
        ([l, h], i) =>
          new HeatmapCard(
            ids[i],
            () => `qkv-train-${ready?.settings.task}-step${attention?.step}-layer${l}-head${h}`,
          ),
      );
      maps.replaceChildren(...cards.map((c) => c.element));
    }
    pairs.forEach(([l, h], i) => {
      const spec: HeatmapSpec = {
        values: a.weights[l].subarray(h * L * L, (h + 1) * L * L),
        rows: L,
        cols: L,
        rowLabels: a.tokens,
        colLabels: a.tokens,
        title: `layer ${l}, head ${h} · step ${a.step}`,
        range: [0, 1],
        cellSize: Math.max(14, Math.floor(240 / L)), // ≥ the 14 px line height: every token labelled
      };
      cards[i].update(spec);
    });
    maps.dataset.step = String(a.step);
    maps.dataset.layer = layerSel.value;
    if (display)
      attnNote.innerHTML = display.layers === 'last' ? lastLayerNote(a) : allLayersNote(a, display);
  }

  function onMessage(m: TrainResponse): void {
    // Everything the worker sent before it read a Reset belongs to the discarded run (its 'ready' among
    // them, which would otherwise bring that run back): drop it until the Reset's 'idle' arrives. The
    // worker answers each reset with one 'idle', in order, so a count of those still due is enough.
    if (resetsDue > 0) {
      if (m.kind === 'state' && m.state === 'idle') resetsDue--;
      return;
    }
    if (m.kind === 'ready') {
      ready = m;
      display = getTask(m.settings.task).display;
      setStatus(
        `Training ${m.settings.task} (${m.parameters.toLocaleString('en')} parameters, ${m.settings.steps} steps of ${m.batchSize} sequences, seed ${m.settings.seed}) in a Web Worker of its own: the page and the other views stay responsive.`,
      );
    } else if (m.kind === 'step') {
      if (!ready) return; // a step from a run that was reset
      losses.push(m.loss);
      last = m;
      drawReadout();
      queueChart();
      if (m.step === 1) syncControls();
    } else if (m.kind === 'attention') {
      if (!ready) return;
      attention = m;
      if (m.induction) {
        scores.push({ step: m.step, ...m.induction });
        drawReadout();
        queueChart();
      }
      drawMaps();
    } else if (m.kind === 'state') {
      // 'idle' only confirms a Reset the page has already shown; anything else from a reset run is stale.
      if (m.state === 'idle' || !ready) return;
      state = m.state;
      pausing = false;
      const hadFocus = refocus || document.activeElement === pauseBtn;
      refocus = false;
      syncControls();
      drawReadout();
      if (state === 'paused')
        setStatus(
          `Paused after step ${m.step} of ${ready!.settings.steps}. Resume continues this run; Reset throws the model away.`,
        );
      if (state === 'done') setStatus(doneText());
      if (hadFocus) (state === 'paused' ? startBtn : state === 'done' ? resetBtn : pauseBtn).focus();
    } else if (m.kind === 'checkpoint') {
      if (m.purpose === 'download') {
        const name = `qkv-${m.task}-step${m.step}.safetensors`;
        download(new Blob([m.bytes as Uint8Array<ArrayBuffer>], { type: 'application/octet-stream' }), name);
        setStatus(
          `Saved ${name} (${(m.bytes.length / 1024).toFixed(0)} kB; \`qkv viz --model ${name}\` reads it).`,
        );
      } else if (m.purpose === 'generate') {
        setStatus(`Loading the model of step ${m.step} into the Generate tab…`);
        host.generateWith(m.bytes, m.step, m.task).then(
          (description) => setStatus(`The Generate tab continues prompts with ${description}.`),
          (err: Error) => setStatus(`Could not load the model: ${err.message}`, true),
        );
      } else {
        setStatus(`Loading the model of step ${m.step} into the other views…`);
        host.useModel(m.bytes, m.step).then(
          (description) =>
            setStatus(
              `Step-through, Head view and Model view now show this model as it was at step ${m.step} (Weights → “trained in the Train tab”): ${description}.`,
            ),
          (err: Error) => setStatus(`Could not load the model: ${err.message}`, true),
        );
      }
    } else {
      setStatus(`Training stopped: ${m.message}`, true);
    }
  }

  function doneText(): string {
    const s = ready!.settings;
    const secs = fmtSeconds(last?.elapsedMs ?? 0);
    const loss = `loss ${fmtLoss(losses[0])} → ${fmtLoss(meanOfLast(losses, MEAN_OF))} (mean of the last ${Math.min(MEAN_OF, losses.length)} steps)`;
    const next = display?.sentences
      ? 'Use this model to look inside it in the other views, or download its checkpoint.'
      : 'Generate with this model continues prompts with it in the Generate tab; Download saves its checkpoint (the other views take pronoun models only).';
    const first = scores[0];
    const now = scores.at(-1);
    const induction =
      first && now
        ? `, best induction score ${first.score.toFixed(3)} → ${now.score.toFixed(3)} (head ${now.layer}.${now.head})`
        : '';
    return `Done: ${s.steps} steps of ${s.task} in ${secs} of training, ${loss}${induction}. ${next}`;
  }

  startBtn.addEventListener('click', () => {
    const steps = intOf(stepsIn);
    const seed = intOf(seedIn);
    if (steps === undefined || seed === undefined) {
      setStatus(
        `Steps must be a whole number from ${stepsIn.min} to ${stepsIn.max}, and the seed from ${seedIn.min} to ${seedIn.max}.`,
        true,
      );
      return;
    }
    const task = taskSel.value as TaskName;
    worker ??= createWorker();
    const wasFocused = document.activeElement === startBtn;
    if (state === 'idle') setStatus('Building the model in the training worker…');
    else setStatus(`Resuming ${task} from step ${last?.step ?? 0}.`);
    send({ kind: 'start', settings: { task, steps, seed } satisfies TrainSettings });
    state = 'running';
    syncControls();
    if (wasFocused) pauseBtn.focus();
  });
  pauseBtn.addEventListener('click', () => {
    refocus = document.activeElement === pauseBtn;
    pausing = true;
    syncControls();
    setStatus('Pausing after the current step…');
    send({ kind: 'pause' });
  });
  resetBtn.addEventListener('click', () => {
    if (worker) resetsDue++; // send() goes nowhere without a worker: no 'idle' will come
    send({ kind: 'reset' });
    state = 'idle';
    pausing = false;
    ready = undefined;
    display = undefined;
    last = undefined;
    attention = undefined;
    losses = [];
    scores = [];
    delete chart.dataset.inductionPoints;
    layerSel.replaceChildren();
    syncControls();
    drawReadout();
    drawChart();
    drawMaps();
    setStatus('Reset: the model was discarded. Start trains a fresh one from the seed.');
    taskSel.focus();
  });
  useBtn.addEventListener('click', () => send({ kind: 'checkpoint', purpose: 'use' }));
  downloadBtn.addEventListener('click', () => send({ kind: 'checkpoint', purpose: 'download' }));
  generateBtn.addEventListener('click', () => send({ kind: 'checkpoint', purpose: 'generate' }));
  layerSel.addEventListener('change', drawMaps);
  taskSel.addEventListener('change', () => {
    stepsIn.value = String(getTask(taskSel.value).defaults.steps);
    describeTask();
    drawReadout();
  });

  function createWorker(): Worker {
    const w = new Worker(new URL('./train-worker.ts', import.meta.url), { type: 'module' });
    w.onmessage = (e: MessageEvent<TrainResponse>) => onMessage(e.data);
    w.onerror = (e) => {
      state = ready ? 'paused' : 'idle';
      syncControls();
      setStatus(`The training worker failed: ${e.message}`, true);
    };
    return w;
  }

  taskSel.replaceChildren(...TASK_NAMES.map((name) => new Option(name, name)));
  taskSel.value = 'pronoun';
  stepsIn.value = String(getTask('pronoun').defaults.steps);
  describeTask();
  syncControls();
  drawReadout();
  drawChart();
  drawMaps();
  setStatus(
    `Nothing trained yet. Start builds a fresh model from the seed and trains it in a Web Worker; maps refresh every ${ATTENTION_EVERY} steps.`,
  );
}
