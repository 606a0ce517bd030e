// The Generate tab: a decoder continues a prompt one token at a time in a worker of its own
// (generate-worker.ts); the page shows the tokens as they come with a tokens/s readout, the newest token's
// attention over the cache in every head, the next-token distribution, and a paged KV cache that can fork.
// One decision to know: the page asks for one token at a time and asks for the next only when the last
// has been drawn, so Stop is heard between two tokens and the page never queues work it may throw away;
// the shown distribution is re-ranked here from the worker's logits (tokenDistribution, V numbers), so
// the temperature, top-k and top-p controls answer at once, and the worker samples with the same settings.
// The model comes from the Train tab (a copy or reverse run, "Generate with this model"), from a
// .safetensors file the reader opens (read locally, never uploaded), or BUNDLED_MODEL below (the Brown
// language model, fetched when the tab first opens).

import type {
  GenerateRequest,
  GenerateResponse,
  ModelInfo,
  ModelOrigin,
  SamplingSettings,
} from './generate-protocol.js';
import { renderAttention, renderDistribution, renderPaged, renderSequences } from './generate-views.js';

/**
 * The decoder shipped with the page, loaded when the tab first opens: the language model qkv trained on the
 * Brown corpus (byte-level BPE, so any English prompt works). Vite copies the file into the build and it is
 * fetched from the page's own server, so offline works.
 */
const BUNDLED_MODEL: { url: string; name: string } | undefined = {
  url: new URL('../../models/brown-lm.safetensors', import.meta.url).href,
  name: 'models/brown-lm.safetensors',
};

/** What main.ts may call: hand over a model the Train tab trained. */
export interface GeneratePanel {
  /** Loads safetensors bytes of a Train tab run as the model; resolves with its description. */
  useTrained(bytes: Uint8Array, step: number, task: string): Promise<string>;
  /** Called when the tab is shown (loads the bundled model the first time, if there is one). */
  shown(): void;
}

type State = Extract<GenerateResponse, { kind: 'state' }>;

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

/** Wires the Generate tab's controls (the markup is in index.html). */
export function setupGeneratePanel(): GeneratePanel {
  const modelSel = $<HTMLSelectElement>('genModel');
  const fileIn = $<HTMLInputElement>('genFile');
  const status = $('genStatus');
  const prompt = $<HTMLTextAreaElement>('genPrompt');
  const runBtn = $<HTMLButtonElement>('genRun');
  const stopBtn = $<HTMLButtonElement>('genStop');
  const stepBtn = $<HTMLButtonElement>('genStep');
  const restartBtn = $<HTMLButtonElement>('genRestart');
  const maxIn = $<HTMLInputElement>('genMax');
  const tempIn = $<HTMLInputElement>('genTemp');
  const topKIn = $<HTMLInputElement>('genTopK');
  const topPIn = $<HTMLInputElement>('genTopP');
  const seedIn = $<HTMLInputElement>('genSeed');
  const forkBtn = $<HTMLButtonElement>('genFork');
  const forkSeedIn = $<HTMLInputElement>('genForkSeed');
  const shownSel = $<HTMLSelectElement>('genShown');
  const readout = $('genReadout');
  const textBox = $('genText');
  const dist = $('genDist');
  const attn = $('genAttn');
  const attnReadout = $('genAttnReadout');
  const pagedBox = $('genPaged');

  let worker: Worker | undefined;
  /** Bumped by every load and prompt: answers with an older epoch are stale. */
  let epoch = 0;
  let info: ModelInfo | undefined;
  let latest: State | undefined;
  /** Models the reader can pick, by select value. */
  const sources = new Map<string, { bytes: Uint8Array; name: string; origin: ModelOrigin; label: string }>();
  let running = false;
  /** Steps a Generate run still takes (each step adds a token to every sequence that can grow). */
  let stepsLeft = 0;
  /** A step or fork is in flight. */
  let waiting = false;
  let bundledTried = false;
  let promptTimer: ReturnType<typeof setTimeout> | undefined;
  let states = 0;
  /** The Train tab's hand-over, answered when the worker has loaded (or refused) the model. */
  let pendingLoad:
    | { epoch: number; resolve: (description: string) => void; reject: (err: Error) => void }
    | undefined;

  function setStatus(text: string, error = false): void {
    status.textContent = text;
    status.classList.toggle('error', error);
    status.setAttribute('role', error ? 'alert' : 'status');
  }

  function numberOf(input: HTMLInputElement, fallback: number, integer: boolean): number {
    const v = Number(input.value);
    const ok =
      input.value !== '' &&
      Number.isFinite(v) &&
      (!integer || Number.isInteger(v)) &&
      v >= Number(input.min) &&
      v <= Number(input.max);
    input.setAttribute('aria-invalid', String(!ok));
    return ok ? v : fallback;
  }

  function settings(): SamplingSettings {
    return {
      temperature: numberOf(tempIn, 1, false),
      topK: numberOf(topKIn, 0, true),
      topP: numberOf(topPIn, 1, false),
    };
  }

  const shown = () => Math.min(Number(shownSel.value) || 0, (latest?.sequences.length ?? 1) - 1);

  function send(req: GenerateRequest, transfer: Transferable[] = []): void {
    worker ??= createWorker();
    worker.postMessage(req, transfer);
  }

  function createWorker(): Worker {
    const w = new Worker(new URL('./generate-worker.ts', import.meta.url), { type: 'module' });
    w.onmessage = (e: MessageEvent<GenerateResponse>) => onMessage(e.data);
    w.onerror = (e) => {
      running = false;
      waiting = false;
      syncControls();
      setStatus(`The generation worker failed: ${e.message}`, true);
    };
    return w;
  }

  function syncControls(): void {
    const seq0 = latest?.sequences[0];
    const canGrow = latest?.sequences.some((s) => !s.stopped) ?? false;
    runBtn.disabled = !info || !latest || running || waiting || !canGrow;
    stopBtn.disabled = !running;
    stepBtn.disabled = !info || !latest || running || waiting || !canGrow;
    restartBtn.disabled = !info;
    forkBtn.disabled =
      !latest || latest.sequences.length > 1 || !seq0 || seq0.stopped !== '' || waiting || running;
    forkBtn.title =
      latest && latest.sequences.length > 1
        ? 'There are two sequences: go back to the prompt to fork again'
        : 'Fork sequence 0: a second sequence that shares its cache blocks and samples with the fork seed';
    readout.dataset.state = running ? 'running' : 'idle';
    prompt.disabled = !info;
  }

  // ---- models ---------------------------------------------------------------------------------------

  function addSource(key: string, source: { bytes: Uint8Array; name: string; origin: ModelOrigin }): void {
    const label =
      source.origin === 'train'
        ? `trained in the Train tab (${source.name})`
        : source.origin === 'bundled'
          ? `bundled: ${source.name}`
          : `file: ${source.name}`;
    sources.set(key, { ...source, label });
    let option = [...modelSel.options].find((o) => o.value === key);
    if (!option) {
      option = new Option(label, key);
      modelSel.append(option);
    }
    option.text = label;
    modelSel.value = key;
    [...modelSel.options].find((o) => o.value === '')?.remove();
  }

  function loadSource(key: string): void {
    const source = sources.get(key);
    if (!source) return;
    running = false;
    waiting = false;
    info = undefined;
    latest = undefined;
    clearViews();
    setStatus(`Loading ${source.name} in the generation worker…`);
    const bytes = source.bytes.slice(); // the page keeps its copy to load again later
    send({ kind: 'load', epoch: ++epoch, bytes, name: source.name, origin: source.origin }, [bytes.buffer]);
    syncControls();
  }

  function clearViews(): void {
    textBox.replaceChildren();
    dist.replaceChildren();
    attn.replaceChildren();
    pagedBox.replaceChildren();
    attnReadout.textContent = '';
    delete dist.dataset.count;
    delete dist.dataset.sum;
    drawReadout();
  }

  // ---- the prompt and the steps -----------------------------------------------------------------------

  function sendPrompt(): void {
    clearTimeout(promptTimer);
    if (!info) return;
    running = false;
    waiting = true;
    send({ kind: 'prompt', epoch: ++epoch, text: prompt.value, seed: numberOf(seedIn, 0, true) });
    syncControls();
  }

  function step(): void {
    waiting = true;
    send({ kind: 'step', epoch, sampling: settings() });
    syncControls();
  }

  function generatedOf(s: State | undefined, i = 0): number {
    const seq = s?.sequences[i];
    return seq ? seq.tokens.length - seq.promptLength : 0;
  }

  function onMessage(m: GenerateResponse): void {
    if (m.epoch !== epoch) return; // an answer to a prompt or model that has since been replaced
    waiting = false;
    if (m.kind === 'model') {
      const previousDefault = info?.defaultPrompt;
      info = m.info;
      if (pendingLoad?.epoch === m.epoch) pendingLoad.resolve(m.info.description);
      pendingLoad = undefined;
      if (prompt.value.trim() === '' || prompt.value === previousDefault || m.info.task)
        prompt.value = m.info.defaultPrompt;
      forkSeedIn.value = String(numberOf(seedIn, 0, true) + 1);
      setStatus(
        `Loaded ${m.info.description}: ${m.info.parameters.toLocaleString('en')} parameters, in a Web Worker of its own.`,
      );
      sendPrompt();
      return;
    }
    if (m.kind === 'error') {
      running = false;
      if (m.about === 'model') {
        if (pendingLoad?.epoch === m.epoch) pendingLoad.reject(new Error(m.message));
        pendingLoad = undefined;
        info = undefined;
        latest = undefined;
        clearViews();
      } else if (m.about === 'prompt') {
        latest = undefined;
        clearViews();
      }
      setStatus(m.message, true);
      syncControls();
      return;
    }
    latest = m;
    render();
    if (running) {
      const canGrow = m.sequences.some((s) => !s.stopped);
      if (canGrow && --stepsLeft > 0) step();
      else {
        running = false;
        setStatus(doneText(m));
      }
    }
    syncControls();
  }

  function doneText(s: State): string {
    const why = [...new Set(s.sequences.map((q) => q.stopped).filter((w) => w))];
    const n = generatedOf(s);
    return `Generated ${n} token${n === 1 ? '' : 's'} after the prompt.${why.length ? ` Stopped: ${why.join('; ')}.` : ''}`;
  }

  // ---- drawing ----------------------------------------------------------------------------------------

  function drawReadout(): void {
    const s = latest;
    if (!s || !info) {
      readout.textContent = info ? '' : 'No model yet.';
      readout.dataset.generated = '0';
      delete readout.dataset.tps;
      return;
    }
    const tps = s.computeMs > 0 ? (s.generated / s.computeMs) * 1000 : 0;
    const seq = s.sequences[shown()];
    readout.innerHTML = '';
    const b = (text: string, id: string) => {
      const e = document.createElement('b');
      e.textContent = text;
      e.dataset.testid = id;
      return e;
    };
    readout.append(
      `${s.sequences.length === 1 ? '' : `${s.sequences.length} sequences · `}`,
      b(String(generatedOf(s)), 'gen-count'),
      generatedOf(s) === 1 ? ' new token · ' : ' new tokens · ',
      b(s.generated > 0 ? tps.toFixed(0) : '–', 'gen-tps'),
      ` tokens/s (${s.generated > 0 ? (s.computeMs / s.generated).toFixed(1) : '–'} ms a token, counting time in the worker) · cache ${seq.fed}/${info.maxLen} tokens`,
    );
    readout.dataset.generated = String(generatedOf(s));
    readout.dataset.tps = String(tps);
  }

  function drawDistribution(): void {
    const seq = latest?.sequences[shown()];
    if (!seq || !info) return;
    renderDistribution(dist, seq.logits, settings(), info.labels);
    const after = `After token ${seq.position} “${seq.tokens[seq.position]}” of sequence ${shown()}`;
    $('genDistNote').textContent = seq.stopped
      ? `${after}: the distribution token ${seq.position + 1} was drawn from, under the settings above. The sequence has stopped (${seq.stopped}).`
      : `${after}: the distribution the next token is drawn from, under the settings above.`;
  }

  function render(): void {
    const s = latest;
    if (!s || !info) return;
    const options = s.sequences.map((q, i) => [String(i), `sequence ${i} (seed ${q.seed})`]);
    if (shownSel.options.length !== options.length)
      shownSel.replaceChildren(...options.map(([v, t]) => new Option(t, v)));
    shownSel.disabled = options.length < 2;
    const i = shown();
    const seq = s.sequences[i];
    renderSequences(textBox, s.sequences, i);
    renderAttention(attn, seq, info.heads);
    drawDistribution();
    renderPaged(pagedBox, s.paged, s.sequences);
    drawReadout();
    readout.dataset.states = String(++states);
  }

  // ---- wiring -----------------------------------------------------------------------------------------

  fileIn.addEventListener('change', async () => {
    const file = fileIn.files?.[0];
    if (!file) return;
    const bytes = new Uint8Array(await file.arrayBuffer());
    addSource('file', { bytes, name: file.name, origin: 'file' });
    loadSource('file');
  });
  modelSel.addEventListener('change', () => loadSource(modelSel.value));
  prompt.addEventListener('input', () => {
    clearTimeout(promptTimer);
    running = false;
    promptTimer = setTimeout(sendPrompt, 200);
  });
  seedIn.addEventListener('input', () => {
    forkSeedIn.value = String(numberOf(seedIn, 0, true) + 1);
    sendPrompt();
  });
  restartBtn.addEventListener('click', sendPrompt);
  runBtn.addEventListener('click', () => {
    if (!latest) return;
    running = true;
    stepsLeft = numberOf(maxIn, 32, true);
    setStatus('Generating: one token per step in the worker; Stop is heard between two tokens.');
    const focused = document.activeElement === runBtn;
    if (!waiting) step();
    syncControls();
    if (focused) stopBtn.focus();
  });
  stopBtn.addEventListener('click', () => {
    running = false;
    if (latest) setStatus(`Stopped. ${doneText(latest)} Generate goes on from here; Step adds one token.`);
    syncControls();
    runBtn.focus();
  });
  stepBtn.addEventListener('click', () => {
    if (latest && !waiting) step();
  });
  forkBtn.addEventListener('click', () => {
    if (!latest) return;
    waiting = true;
    send({ kind: 'fork', epoch, seed: numberOf(forkSeedIn, 1, true) });
    setStatus(
      'Forked sequence 0: sequence 1 shares its cache blocks and draws with the fork seed from here on.',
    );
    syncControls();
  });
  shownSel.addEventListener('change', render);
  for (const input of [tempIn, topKIn, topPIn]) {
    input.addEventListener('input', () => {
      $('genTempOut').textContent = settings().temperature.toFixed(2);
      $('genTopPOut').textContent = settings().topP.toFixed(2);
      drawDistribution();
    });
  }
  attn.addEventListener('mouseover', (e) => {
    const td = (e.target as HTMLElement).closest('td');
    if (td?.title) attnReadout.textContent = td.title;
  });

  const none = new Option('none loaded: open a file, or train copy in the Train tab', '');
  modelSel.replaceChildren(none);
  syncControls();
  drawReadout();
  setStatus(
    BUNDLED_MODEL
      ? `The bundled model ${BUNDLED_MODEL.name} loads when this tab opens.`
      : 'Open a decoder checkpoint (.safetensors, read in this page, not uploaded), or train copy or reverse in the Train tab and press “Generate with this model”.',
  );

  return {
    useTrained(bytes, step, task) {
      addSource('train', { bytes, name: `${task}, step ${step}`, origin: 'train' });
      loadSource('train');
      return new Promise((resolve, reject) => {
        pendingLoad = { epoch, resolve, reject };
      });
    },
    shown() {
      if (bundledTried || !BUNDLED_MODEL || sources.size > 0) return;
      bundledTried = true;
      const { url, name } = BUNDLED_MODEL;
      setStatus(`Fetching ${name}…`);
      fetch(url)
        .then(async (res) => {
          if (!res.ok) throw new Error(`HTTP ${res.status}`);
          addSource('bundled', { bytes: new Uint8Array(await res.arrayBuffer()), name, origin: 'bundled' });
          loadSource('bundled');
        })
        .catch((err: Error) => setStatus(`Could not fetch ${name} (${err.message}).`, true));
    },
  };
}
