// The playground page: reads the controls, asks the worker for a trace, and renders the four views; the
// Train tab (train.ts) runs in a worker of its own and can hand its model over ("Use this model"), and the
// Generate tab (generate.ts, a worker of its own too) continues prompts with a decoder; the Flex tab
// (flex.ts) shows mask and score mods, their block masks and weights, computed on this thread.
// One decision to know: the page holds no model maths — it only sends the state to the worker and draws
// what comes back; at most one request is in flight and the newest state always wins.

import { derivations } from './derivations.js';
import {
  articleExampleHtml,
  blockedHtml,
  causalHtml,
  DK_STEPS,
  memoryHtml,
  modelScalingHtml,
  saturationHtml,
  symmetryHtml,
} from './experiments.js';
import { setupFlexPanel } from './flex.js';
import { setupGeneratePanel } from './generate.js';
import { drawHeadView, headColor, queryAt } from './headview.js';
import { currentTheme, HeatmapCard } from './heatmap.js';
import { renderModelView } from './modelview.js';
import { loadFromHash, saveToHash } from './permalink.js';
import {
  type LoadResult,
  MAX_TOKENS,
  type ModelConfig,
  type ModelSource,
  type ProbeResult,
  type Request,
  type Response,
  type SaturationResult,
  type TraceResult,
} from './protocol.js';

/** Words per copy of the repeated-sequence probe (model-source.ts draws them). */
const PROBE_WORDS = 24;
const PROBE_NOTE = '4 sequences of 24 random tokens, each repeated twice';

import { setupTabs } from './tabs.js';
import { setupTrainTab } from './train.js';

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const num = (id: string) => $<HTMLInputElement>(id);
const check = (id: string) => $<HTMLInputElement>(id);
const select = (id: string) => $<HTMLSelectElement>(id);

const worker = new Worker(new URL('./worker.ts', import.meta.url), { type: 'module' });
let nextId = 1;
let busy = false;
let dirty = false;
let satBusy = false;
let satDirty = false;
let latest: TraceResult | undefined;
let saturation: SaturationResult | undefined;
let focus = { layer: 0, head: 0 };
let hvQuery = -1; // picked in the select
let hvHover = -1; // under the mouse (wins while hovering)
let hvSelected: boolean[] = [];
let renders = 0;
/** The blocked row a shared link asks for, used until the select has its options. */
let initialBlocked: number | undefined;
/** Answers to "Use this model" loads, by request id. */
const pendingLoads = new Map<number, (result: LoadResult) => void>();
/** Answers to repeated-sequence probe requests, by request id. */
const pendingProbes = new Map<number, (result: ProbeResult) => void>();
/** How many probes were drawn: the seed of the next one (the first is seed 0, so it is the same every time). */
let probes = 0;

// ---- reading the controls -------------------------------------------------------------------------

function intOf(id: string, fallback: number): number {
  const el = num(id);
  const v = Math.round(Number(el.value));
  const min = Number(el.min);
  const max = Number(el.max);
  const ok = el.value !== '' && Number.isFinite(v) && v >= min && v <= max;
  el.setAttribute('aria-invalid', String(!ok));
  return ok ? v : fallback;
}

function readConfig(): ModelConfig {
  return {
    source: (['lm', 'seeded', 'trained'] as const).find((s) => s === select('source').value) ?? 'checkpoint',
    dModel: intOf('dModel', 64),
    dK: intOf('dK', 16),
    heads: intOf('heads', 4),
    layers: intOf('layers', 2),
    seed: intOf('seed', 0),
  };
}

function request(): Request {
  return {
    kind: 'trace',
    id: nextId++,
    text: $<HTMLTextAreaElement>('text').value,
    config: readConfig(),
    switches: {
      causal: check('causal').checked,
      scaled: check('scaled').checked,
      tieQK: check('tieQK').checked,
      blockedQuery: initialBlocked ?? Number(select('blocked').value),
    },
    focus,
  };
}

/** Asks for a new trace; coalesces bursts (typing) into one request after the current one returns. */
function refresh(): void {
  dirty = true;
  if (busy) return;
  dirty = false;
  busy = true;
  document.body.dataset.busy = 'true';
  worker.postMessage(request());
}

function refreshSaturation(): void {
  satDirty = true;
  if (satBusy) return;
  satDirty = false;
  satBusy = true;
  // The number of keys only sets the uniform entropy; capped at 64 so d_k = 1024 stays quick.
  const n = Math.min(64, Math.max(4, latest?.tokens.length ?? 11));
  worker.postMessage({ kind: 'saturation', id: nextId++, n, seed: 7, dKs: DK_STEPS } satisfies Request);
}

worker.onmessage = (e: MessageEvent<Response>) => {
  const res = e.data;
  if (res.kind === 'probe') {
    pendingProbes.get(res.id)?.(res);
    pendingProbes.delete(res.id);
    return;
  }
  if (res.kind === 'loaded') {
    pendingLoads.get(res.id)?.(res);
    pendingLoads.delete(res.id);
    return;
  }
  if (res.kind === 'saturation') {
    satBusy = false;
    saturation = res;
    if (satDirty) refreshSaturation();
    renderSaturation();
    return;
  }
  busy = false;
  if (res.kind === 'error') {
    setStatus(res.message, true);
    if (res.tokens) renderChips(res.tokens, new Set(res.unknown ?? []));
    showVocab(res.vocab);
  } else {
    const tokenCountChanged = latest?.tokens.length !== res.tokens.length;
    latest = res;
    render(res);
    if (tokenCountChanged || !saturation) refreshSaturation();
  }
  if (dirty) refresh();
  else delete document.body.dataset.busy;
};
worker.onerror = (e) => setStatus(`worker failed: ${e.message}`, true);

function setStatus(text: string, error = false): void {
  const s = $('status');
  s.textContent = text;
  s.classList.toggle('error', error);
  s.setAttribute('role', error ? 'alert' : 'status');
}

// ---- rendering --------------------------------------------------------------------------------------

const stepCards = new Map<string, HeatmapCard>();
const symmetryCard = new HeatmapCard('exp-scores', () => fileStem('scores'));
const causalCard = new HeatmapCard('exp-weights', () => fileStem('weights'));
$('exp-symmetry-map').append(symmetryCard.element);
$('exp-causal-map').append(causalCard.element);

function fileStem(id: string): string {
  return `qkv-${id}-layer${latest?.focus.layer ?? 0}-head${latest?.focus.head ?? 0}`;
}

function fillSelect(el: HTMLSelectElement, options: [string, string][], value: string): void {
  const same =
    el.options.length === options.length &&
    options.every(([v, t], i) => el.options[i].value === v && el.options[i].text === t);
  if (!same) el.replaceChildren(...options.map(([v, t]) => new Option(t, v)));
  el.value = options.some(([v]) => v === value) ? value : options[0][0];
}

function render(t: TraceResult): void {
  const t0 = performance.now();
  const L = t.tokens.length;
  focus = t.focus;
  const notice = t.notice ? ` (${t.notice}.)` : '';
  const notes: Record<ModelSource, string> = {
    checkpoint: `Model: ${t.description}, trained by \`qkv train --task pronoun\` to tell which noun “it” means. Try “tired” → “wide” and watch the “it” row of layer 1.${notice}`,
    lm: `Model: ${t.description}, a decoder trained by \`qkv train --task lm\` on the Brown corpus to predict the next token. Its byte-level BPE tokenizer reads any text (a chip per token, spaces shown as ·), up to ${t.model.maxLen ?? t.limit} tokens.${t.switches.causal ? '' : ' It was trained with the causal mask, which is off: the maps show what it would do if it could see ahead.'} The Model view labels each head with its strongest pattern; try its repeated-sequence probe.${notice}`,
    trained: `Model: ${t.description}, trained in this page on the pronoun task. Try “tired” → “wide” and watch the “it” row of the last layer.`,
    seeded: `Model: ${t.description}. The weights are deterministic and untrained, so the patterns are those of random projections, not of language.${notice}`,
  };
  $('model-note').textContent = notes[t.model.source];
  setStatus(
    `${L} token${L === 1 ? '' : 's'}${t.dropped ? ` (${t.dropped} more dropped: ${t.limit < MAX_TOKENS ? `this model reads at most ${t.limit} tokens, so the first ${t.limit} are shown` : `the limit is ${t.limit}`})` : ''} · computed in ${t.millis.toFixed(0)} ms in a Web Worker`,
  );

  renderChips(t.tokens, new Set());
  showVocab(t.model.vocab);
  const fromCheckpoint = t.model.source !== 'seeded';
  for (const [id, value] of [
    ['dModel', t.model.dModel],
    ['dK', t.model.dK],
    ['heads', t.model.heads],
    ['layers', t.model.layers],
  ] as const) {
    num(id).disabled = fromCheckpoint;
    if (fromCheckpoint) num(id).value = String(value);
  }
  num('seed').disabled = fromCheckpoint;

  const layers = Array.from(
    { length: t.model.layers },
    (_, l) => [String(l), `layer ${l}`] as [string, string],
  );
  const heads = Array.from({ length: t.model.heads }, (_, h) => [String(h), `head ${h}`] as [string, string]);
  fillSelect(select('focusLayer'), layers, String(t.focus.layer));
  fillSelect(select('focusHead'), heads, String(t.focus.head));
  fillSelect(
    select('blocked'),
    [['-1', 'none'], ...t.tokens.map((tok, i) => [String(i), `${i}: ${tok}`] as [string, string])],
    String(t.switches.blockedQuery),
  );
  check('tieQK2').checked = t.switches.tieQK;
  check('causal2').checked = t.switches.causal;

  renderSteps(t);
  // Hidden views are drawn when their tab opens (a 512-token head view is not free to rasterise).
  if (!$('panel-head').hidden) renderHeadView();
  if (!$('panel-model').hidden) renderModel();
  renderExperiments(t);
  initialBlocked = undefined;
  saveToHash();
  flexPanel.saveToHash(); // the Flex tab's keys, which saveToHash does not know
  // For the browser tests: how many traces have been drawn, and how long the last drawing took.
  document.body.dataset.renders = String(++renders);
  document.body.dataset.renderMs = (performance.now() - t0).toFixed(1);
}

function renderChips(tokens: string[], unknown: Set<string>): void {
  $('chips').replaceChildren(
    ...tokens.map((tok, i) => {
      const c = document.createElement('li');
      c.className = unknown.has(tok) ? 'chip unknown' : 'chip';
      c.textContent = tok;
      c.title = unknown.has(tok) ? `token ${i}: not in the checkpoint's vocabulary` : `token ${i}`;
      return c;
    }),
  );
}

function showVocab(vocab: string[] | undefined): void {
  const details = $<HTMLDetailsElement>('vocab');
  details.hidden = !vocab;
  if (vocab) details.querySelector('p')!.textContent = vocab.join(' '); // the worker leaves out specials
}

function renderSteps(t: TraceResult): void {
  const s = t.stats;
  const other = t.statsOtherScaling;
  const stats = $('weight-stats');
  stats.innerHTML = `Layer ${t.focus.layer}, head ${t.focus.head} · largest weight <b data-testid="max-weight" data-value="${s.maxWeight}">${s.maxWeight.toFixed(4)}</b>
    (${t.switches.scaled ? 'without' : 'with'} ÷√d_k it would be ${other.maxWeight.toFixed(4)}) · mean row entropy
    <b data-testid="entropy" data-value="${s.meanEntropyBits}">${s.meanEntropyBits.toFixed(3)}</b> bits of ${s.uniformEntropyBits.toFixed(3)} for a uniform row`;
  const list = $('steps');
  const seen = new Set<string>();
  const explain = derivations(t);
  t.steps.forEach((view, index) => {
    seen.add(view.id);
    let card = stepCards.get(view.id);
    if (!card) {
      card = new HeatmapCard(view.id, () => fileStem(view.id));
      stepCards.set(view.id, card);
      const li = document.createElement('li');
      li.className = 'step';
      li.dataset.step = view.id;
      li.innerHTML = '<h3></h3><p class="note"></p>';
      li.append(card.element);
      list.append(li);
    }
    const li = card.element.parentElement!;
    li.querySelector('h3')!.textContent = `${index + 1}. ${view.name}`;
    li.querySelector('.note')!.textContent = view.note;
    li.style.order = String(index);
    card.update(view.spec, explain[view.id]);
  });
  for (const [id, card] of stepCards) {
    if (!seen.has(id)) {
      card.element.parentElement!.remove();
      stepCards.delete(id);
    }
  }
}

function renderHeadView(): void {
  const t = latest;
  if (!t) return;
  const H = t.model.heads;
  const L = t.tokens.length;
  const layerSel = select('hvLayer');
  fillSelect(
    layerSel,
    Array.from({ length: t.model.layers }, (_, l) => [String(l), `layer ${l}`] as [string, string]),
    layerSel.value || '0',
  );
  if (hvSelected.length !== H) hvSelected = Array.from({ length: H }, () => true);
  const group = $('hvHeads');
  if (group.childElementCount !== H) {
    group.replaceChildren(
      ...Array.from({ length: H }, (_, h) => {
        const label = document.createElement('label');
        label.className = 'head-toggle';
        label.style.setProperty('--head', headColor(h));
        const box = document.createElement('input');
        box.type = 'checkbox';
        box.checked = hvSelected[h];
        box.dataset.head = String(h);
        box.addEventListener('change', () => {
          hvSelected[h] = box.checked;
          renderHeadView();
        });
        label.append(box, ` head ${h}`);
        return label;
      }),
    );
  }
  if (hvQuery >= L) hvQuery = -1;
  fillSelect(
    select('hvQuery'),
    [['-1', 'all'], ...t.tokens.map((tok, i) => [String(i), `${i}: ${tok}`] as [string, string])],
    String(hvQuery),
  );
  const layer = Math.min(Number(layerSel.value), t.weights.length - 1);
  const query = hvHover >= 0 && hvHover < L ? hvHover : hvQuery;
  const drawn = drawHeadView(
    $<HTMLCanvasElement>('headview'),
    { tokens: t.tokens, weights: t.weights[layer], heads: H, selected: hvSelected, query },
    currentTheme(),
  );
  const canvas = $('headview');
  canvas.dataset.lines = String(drawn.lines);
  $('hvCaption').textContent = `${drawn.lines} lines drawn (weights ≥ ${drawn.minWeight.toFixed(3)}).`;
}

function renderModel(): void {
  const t = latest;
  if (!t) return;
  const labels = t.model.headLabels;
  $('mvLabelsNote').textContent = labels
    ? `Under each head: its strongest named pattern and score (a mean attention weight from 0 to 1), measured once for this model by headScores on ${PROBE_NOTE}. Hover a head for all four scores.`
    : 'Head labels (previous-token, duplicate-token, induction, first-token) are shown for the language model, a decoder.';
  renderModelView(
    $('modelgrid'),
    t.weights,
    t.model.heads,
    t.tokens.length,
    t.focus,
    labels,
    (layer, head) => {
      focus = { layer, head };
      select('focusLayer').value = String(layer);
      select('focusHead').value = String(head);
      selectTab('tab-steps');
      refresh();
    },
  );
}

/** Sets the sentence to the repeated-sequence probe (switching to the language model, causal mask on). */
function runProbe(): void {
  const id = nextId++;
  const button = $<HTMLButtonElement>('mvProbe');
  button.disabled = true;
  pendingProbes.set(id, (res) => {
    button.disabled = false;
    if (res.text === undefined) {
      setStatus(`No probe: ${res.error ?? 'no text'}`, true);
      return;
    }
    $<HTMLTextAreaElement>('text').value = res.text;
    select('source').value = 'lm';
    check('causal').checked = true;
    $('mvProbeNote').textContent =
      `Probe ${probes - 1}: ${PROBE_WORDS} random one-token words, then the same words again. An induction head attends from each word of the second copy to the word that followed it the first time: a stripe ${PROBE_WORDS - 1} cells below the diagonal, in the lower half.`;
    refresh();
  });
  worker.postMessage({ kind: 'probe', id, seed: probes++ } satisfies Request);
}

function renderSaturation(): void {
  if (!saturation) return;
  const dK = DK_STEPS[Number(num('satDk').value)];
  $('satDkOut').textContent = String(dK);
  $('exp-saturation').innerHTML = saturationHtml(saturation, dK);
}

function renderMemory(): void {
  const n = 2 ** Number(num('memN').value);
  $('memNOut').textContent = String(n);
  $('exp-memory-text').innerHTML = memoryHtml(n, intOf('memHeads', 8), Number(select('memBlock').value));
}

function renderExperiments(t: TraceResult): void {
  $('exp-model-scaling').innerHTML = modelScalingHtml(t);
  $('exp-symmetry-text').innerHTML = symmetryHtml(t);
  $('exp-causal-text').innerHTML = causalHtml(t);
  $('exp-blocked-text').innerHTML = blockedHtml(t);
  const scores = t.steps.find((s) => s.id === 'scores')!;
  const weights = t.steps.find((s) => s.id === 'weights')!;
  const explain = derivations(t);
  symmetryCard.update(scores.spec, explain.scores);
  causalCard.update(weights.spec, explain.weights);
}

// ---- tabs -------------------------------------------------------------------------------------------

const generatePanel = setupGeneratePanel();
const flexPanel = setupFlexPanel();
const selectTab = setupTabs((id) => {
  if (id === 'tab-head') renderHeadView();
  if (id === 'tab-model') renderModel();
  if (id === 'tab-generate') generatePanel.shown();
  if (id === 'tab-flex') flexPanel.shown();
});

// ---- the Train tab's model in the other views --------------------------------------------------------

/** Sends trained bytes to the compute worker, then shows them everywhere as Weights → trained. */
function useTrainedModel(bytes: Uint8Array, step: number): Promise<string> {
  const id = nextId++;
  return new Promise((resolve, reject) => {
    pendingLoads.set(id, (res) => {
      if (res.error !== undefined || res.description === undefined) {
        reject(new Error(res.error ?? 'no description'));
        return;
      }
      const option = [...select('source').options].find((o) => o.value === 'trained')!;
      option.disabled = false;
      option.text = `trained in the Train tab (step ${step})`;
      select('source').value = 'trained';
      refresh();
      resolve(res.description);
    });
    worker.postMessage({ kind: 'load', id, bytes } satisfies Request, [bytes.buffer]);
  });
}

setupTrainTab({
  useModel: useTrainedModel,
  generateWith: (bytes, step, task) => {
    selectTab('tab-generate');
    return generatePanel.useTrained(bytes, step, task);
  },
});

// ---- wiring -----------------------------------------------------------------------------------------

for (const id of ['text', 'dModel', 'dK', 'heads', 'layers', 'seed'])
  $(id).addEventListener('input', refresh);
for (const id of ['scaled', 'causal', 'tieQK', 'blocked']) $(id).addEventListener('change', refresh);
// The language model is a decoder: choosing it turns the causal mask on (it can be turned off again).
select('source').addEventListener('change', () => {
  if (select('source').value === 'lm') check('causal').checked = true;
  refresh();
});
$('mvProbe').addEventListener('click', runProbe);
for (const [mirror, main] of [
  ['tieQK2', 'tieQK'],
  ['causal2', 'causal'],
]) {
  $(mirror).addEventListener('change', () => {
    check(main).checked = check(mirror).checked;
    refresh();
  });
}
select('focusLayer').addEventListener('change', () => {
  focus = { ...focus, layer: Number(select('focusLayer').value) };
  refresh();
});
select('focusHead').addEventListener('change', () => {
  focus = { ...focus, head: Number(select('focusHead').value) };
  refresh();
});
select('hvLayer').addEventListener('change', renderHeadView);
select('hvQuery').addEventListener('change', () => {
  hvQuery = Number(select('hvQuery').value);
  renderHeadView();
});
const hv = $<HTMLCanvasElement>('headview');
hv.addEventListener('mousemove', (e) => {
  if (!latest) return;
  const r = hv.getBoundingClientRect();
  const q = e.clientX - r.left < r.width / 2 ? queryAt(e.clientY - r.top, latest.tokens.length) : -1;
  if (q !== hvHover) {
    hvHover = q;
    renderHeadView();
  }
});
hv.addEventListener('mouseleave', () => {
  hvHover = -1;
  renderHeadView();
});
num('satDk').addEventListener('input', renderSaturation);
for (const id of ['memN', 'memHeads', 'memBlock']) $(id).addEventListener('input', renderMemory);
matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => latest && render(latest));

$('exp-article').innerHTML = articleExampleHtml();
renderMemory();
// A shared link (#text=…&causal=1…) restores its state; the selects it names are filled after the first
// trace, so the focus and the blocked row are applied to the first request directly.
const fromHash = loadFromHash();
focus = { layer: fromHash.focusLayer ?? 0, head: fromHash.focusHead ?? 0 };
initialBlocked = fromHash.blocked ?? -1;
refresh();
