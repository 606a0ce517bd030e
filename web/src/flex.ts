// The Flex tab: pick or write a mask mod and a score mod, and see the dense mask, the block mask
// (createBlockMask at block size 16/32/128: full, partial and empty tiles, its sparsity) and the
// attention weights flexAttentionWeights gives on small random q, k, with the equivalent qkv call.
// One decision to know: everything is computed here on the page's thread (L ≤ 256 and 16 features: a few
// milliseconds), coalesced to one update per frame; an expression that does not compile (or fails while it
// runs) is reported inline and in the status line, and the views keep the last valid state.

import {
  alibiSlopes,
  type BlockMask,
  compileMask,
  compileScore,
  createBlockMask,
  flexAttentionWeights,
  type MaskMod,
  ModEvaluationError,
  ModExpressionError,
  type ScoreMod,
  Tensor,
} from 'qkv';
import type { HeatmapTheme } from 'qkv/viz';
import {
  arraysUsed,
  BIAS_TABLE,
  describeDocIds,
  docIdsFromLengths,
  MASK_PRESETS,
  type MaskPreset,
  maskExpression,
  maskPreset,
  quote,
  readsHead,
  SCORE_PRESETS,
  type ScorePreset,
  scoreExpression,
  scorePreset,
} from './flex-presets.js';
import { BlockGrid } from './flex-views.js';
import { currentTheme, HeatmapCard } from './heatmap.js';

/** What main.ts calls: when the tab is shown, and after it rewrites the URL hash. */
export interface FlexPanel {
  shown(): void;
  /** Adds the tab's state (only what differs from the defaults) to the URL hash. */
  saveToHash(): void;
}

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

/** Features per head of the random q and k. */
const E = 16;
const Q_SEED = 1;
const K_SEED = 2;

/** Hash keys of the tab's controls, and the defaults that are left out of the URL. */
const HASH_FIELDS: Record<string, string> = {
  flexL: 'fxL',
  flexHeads: 'fxH',
  flexHead: 'fxHead',
  flexBlock: 'fxBlock',
  flexMaskPreset: 'fxMask',
  flexWindow: 'fxW',
  flexPrefix: 'fxN',
  flexDocs: 'fxDocs',
  flexScorePreset: 'fxScore',
  flexCap: 'fxCap',
};
const DEFAULTS: Record<string, string> = {
  flexL: '64',
  flexHeads: '4',
  flexHead: '0',
  flexBlock: '16',
  flexMaskPreset: 'causal',
  flexWindow: '8',
  flexPrefix: '16',
  flexDocs: '16,24,24',
  flexScorePreset: 'none',
  flexCap: '2',
};

interface Resolved<M> {
  mod: M;
  /** Code for the snippet (undefined: leave the option out). */
  code: string | undefined;
  /** Whether the mod may differ between heads. */
  perHead: boolean;
  /** Arrays the code names (ids, bias, slope), for the note under the snippet. */
  arrays: string[];
}

/** An error to show against one expression (or the document lengths). */
class InputError extends Error {
  constructor(
    readonly where: 'mask' | 'score',
    message: string,
  ) {
    super(message);
  }
}

/** Wires the Flex tab (markup in index.html). */
export function setupFlexPanel(): FlexPanel {
  const panel = $('panel-flex');
  const sel = (id: string) => $<HTMLSelectElement>(id);
  const inp = (id: string) => $<HTMLInputElement>(id);
  const maskExpr = $<HTMLTextAreaElement>('flexMaskExpr');
  const scoreExpr = $<HTMLTextAreaElement>('flexScoreExpr');
  const maskError = $('flexMaskError');
  const scoreError = $('flexScoreError');
  const status = $('flexStatus');
  const code = $('flexCode');
  const codeNote = $('flexCodeNote');
  const counts = $('flexCounts');

  const denseCard = new HeatmapCard('flex-mask', () => `qkv-flex-mask-head${sel('flexHead').value}`);
  const weightsCard = new HeatmapCard('flex-weights', () => `qkv-flex-weights-head${sel('flexHead').value}`);
  const grid = new BlockGrid();
  $('flexDense').append(denseCard.element);
  $('flexBlocks').append(grid.element);
  $('flexWeights').append(weightsCard.element);

  let visible = false;
  let pending = false;
  let updates = 0;
  let renders = 0;
  let inputs: { key: string; q: Tensor; k: Tensor } | undefined;
  // The last valid view, redrawn on theme changes.
  let lastDraw: (() => void) | undefined;

  // ---- reading the controls ---------------------------------------------------------------------------

  const intOf = (id: string, fallback: number): number => {
    const el = inp(id);
    const v = Number(el.value);
    const ok = el.value.trim() !== '' && Number.isInteger(v) && v >= Number(el.min) && v <= Number(el.max);
    el.setAttribute('aria-invalid', String(!ok));
    return ok ? v : fallback;
  };
  const capOf = (): number => {
    const el = inp('flexCap');
    const v = Number(el.value);
    const ok = el.value.trim() !== '' && Number.isFinite(v) && v > 0 && v <= 1000;
    el.setAttribute('aria-invalid', String(!ok));
    return ok ? v : 2;
  };
  const maskPresetOf = (): MaskPreset | 'custom' =>
    MASK_PRESETS.find((p) => p === sel('flexMaskPreset').value) ?? 'custom';
  const scorePresetOf = (): ScorePreset | 'custom' =>
    SCORE_PRESETS.find((p) => p === sel('flexScorePreset').value) ?? 'custom';

  function fillHeads(): void {
    const H = Number(sel('flexHeads').value);
    const head = sel('flexHead');
    const keep = Math.min(Number(head.value) || 0, H - 1);
    if (head.options.length !== H) {
      head.replaceChildren(...Array.from({ length: H }, (_, h) => new Option(`head ${h}`, String(h))));
    }
    head.value = String(keep);
  }

  /** Shows only the parameter fields the presets use; writes a preset's expression into its editor. */
  function syncPresets(writeExpressions: boolean): void {
    const m = maskPresetOf();
    const s = scorePresetOf();
    $('flexWindowField').hidden = m !== 'sliding';
    $('flexPrefixField').hidden = m !== 'prefix';
    const docs = m === 'document' || m === 'causal-document' || m === 'custom';
    $('flexDocsField').hidden = !docs;
    $('flexDocsNote').hidden = !docs;
    $('flexCapField').hidden = s !== 'softcap';
    if (!writeExpressions) return;
    if (m !== 'custom') {
      maskExpr.value = maskExpression(m, {
        window: intOf('flexWindow', 8),
        prefix: intOf('flexPrefix', 16),
        docIds: new Int32Array(0),
      });
    }
    if (s !== 'custom')
      scoreExpr.value = scoreExpression(s, { heads: Number(sel('flexHeads').value), cap: capOf() });
  }

  // ---- building the mods --------------------------------------------------------------------------------

  function resolveMask(docIds: Int32Array): Resolved<MaskMod> {
    const preset = maskPresetOf();
    if (preset !== 'custom') {
      const built = maskPreset(preset, {
        window: intOf('flexWindow', 8),
        prefix: intOf('flexPrefix', 16),
        docIds,
      });
      return {
        mod: built.mod,
        code: built.code,
        perHead: false,
        arrays: preset === 'document' || preset === 'causal-document' ? ['ids'] : [],
      };
    }
    const source = maskExpr.value;
    let mod: MaskMod;
    try {
      mod = compileMask(source, { arrays: { doc: docIds } });
    } catch (err) {
      throw new InputError('mask', messageOf(err));
    }
    const used = arraysUsed(source, ['doc']);
    const opts = used.length > 0 ? ', { arrays: { doc: ids } }' : '';
    return {
      mod,
      code: `compileMask(${quote(source)}${opts})`,
      perHead: readsHead(source),
      arrays: used.length ? ['ids'] : [],
    };
  }

  function resolveScore(H: number): Resolved<ScoreMod | undefined> {
    const preset = scorePresetOf();
    if (preset !== 'custom') {
      const built = scorePreset(preset, { heads: H, cap: capOf() });
      return {
        mod: built.mod,
        code: built.code,
        perHead: preset === 'alibi',
        arrays: preset === 'relbias' ? ['bias'] : [],
      };
    }
    const source = scoreExpr.value;
    const slope = alibiSlopes(H).data;
    let mod: ScoreMod;
    try {
      mod = compileScore(source, { arrays: { slope, bias: BIAS_TABLE, doc: currentDocIds } });
    } catch (err) {
      throw new InputError('score', messageOf(err));
    }
    const used = arraysUsed(source, ['slope', 'bias', 'doc']);
    const parts = used.map((n) =>
      n === 'slope' ? `slope: alibiSlopes(${H}).data` : n === 'doc' ? 'doc: ids' : 'bias',
    );
    const opts = parts.length ? `, { arrays: { ${parts.join(', ')} } }` : '';
    return {
      mod,
      code: `compileScore(${quote(source)}${opts})`,
      perHead: readsHead(source),
      arrays: used.flatMap((n) => (n === 'doc' ? ['ids'] : n === 'bias' ? ['bias'] : [])),
    };
  }

  // The document ids the score expression may read too (set before the score is compiled).
  let currentDocIds: Int32Array = new Int32Array(0);

  function qk(H: number, L: number): { q: Tensor; k: Tensor } {
    const key = `${H}×${L}`;
    if (inputs?.key !== key) {
      inputs = {
        key,
        q: Tensor.randn([1, H, L, E], { seed: Q_SEED }),
        k: Tensor.randn([1, H, L, E], { seed: K_SEED }),
      };
    }
    return inputs;
  }

  // ---- the update -----------------------------------------------------------------------------------------

  function schedule(): void {
    if (!visible || pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      update();
    });
  }

  function showError(where: 'mask' | 'score' | undefined, message: string): void {
    for (const [w, el, editor] of [
      ['mask', maskError, maskExpr],
      ['score', scoreError, scoreExpr],
    ] as const) {
      const on = w === where;
      el.hidden = !on;
      el.textContent = on ? message : '';
      editor.setAttribute('aria-invalid', String(on));
    }
  }

  function update(): void {
    panel.dataset.updates = String(++updates);
    const t0 = performance.now();
    const L = Number(sel('flexL').value);
    const H = Number(sel('flexHeads').value);
    const head = Math.min(Number(sel('flexHead').value) || 0, H - 1);
    const blockSize = Number(sel('flexBlock').value);
    let mask: Resolved<MaskMod>;
    let score: Resolved<ScoreMod | undefined>;
    let blockMask: BlockMask;
    let weights: Tensor;
    const dense = new Uint8Array(L * L);
    try {
      let docIds: Int32Array;
      try {
        docIds = docIdsFromLengths(inp('flexDocs').value, L);
        inp('flexDocs').setAttribute('aria-invalid', 'false');
      } catch (err) {
        inp('flexDocs').setAttribute('aria-invalid', 'true');
        const m = maskPresetOf();
        const needed =
          m === 'document' ||
          m === 'causal-document' ||
          (m === 'custom' && arraysUsed(maskExpr.value, ['doc']).length > 0) ||
          (scorePresetOf() === 'custom' && arraysUsed(scoreExpr.value, ['doc']).length > 0);
        if (needed) throw new InputError('mask', messageOf(err));
        docIds = new Int32Array(L);
      }
      currentDocIds = docIds;
      mask = resolveMask(docIds);
      score = resolveScore(H);
      try {
        blockMask = createBlockMask(mask.mod, 1, mask.perHead ? H : 1, L, L, { blockSize });
        const mh = mask.perHead ? head : 0;
        for (let i = 0; i < L; i++)
          for (let j = 0; j < L; j++) dense[i * L + j] = mask.mod(0, mh, i, j) ? 1 : 0;
      } catch (err) {
        throw new InputError('mask', messageOf(err));
      }
      try {
        const { q, k } = qk(H, L);
        weights = flexAttentionWeights(q, k, { blockMask, ...(score.mod ? { scoreMod: score.mod } : {}) });
      } catch (err) {
        const cause = (err as { cause?: unknown }).cause ?? err;
        const where =
          cause instanceof ModEvaluationError &&
          cause.source === maskExpr.value &&
          maskPresetOf() === 'custom'
            ? 'mask'
            : 'score';
        throw new InputError(where, messageOf(err));
      }
    } catch (err) {
      const where = err instanceof InputError ? err.where : undefined;
      const message = messageOf(err);
      showError(where, message);
      const first = message.split('\n')[0];
      status.textContent = `${where === 'score' ? 'Score' : 'Mask'} mod: ${first} — the views show the last valid state.`;
      status.classList.add('error');
      panel.dataset.state = 'error';
      return;
    }
    showError(undefined, '');
    status.classList.remove('error');
    panel.dataset.state = 'ok';

    // Tiles of the shown head, and their counts.
    const nq = blockMask.numQBlocks;
    const nk = blockMask.numKvBlocks;
    const bh = blockMask.H === 1 ? 0 : head;
    const kinds = blockMask.kinds.slice(bh * nq * nk, (bh + 1) * nq * nk);
    const n = [0, 0, 0];
    for (const x of kinds) n[x]++;
    const headSparsity = (100 * n[0]) / kinds.length;
    const all = blockMask.sparsity();
    counts.textContent =
      `${n[2]} full, ${n[1]} partial, ${n[0]} empty tiles — ${headSparsity.toFixed(1)}% skipped` +
      (blockMask.H > 1 && Math.abs(all - headSparsity) > 1e-9 ? ` (all heads: ${all.toFixed(1)}%)` : '');
    Object.assign(counts.dataset, {
      full: String(n[2]),
      partial: String(n[1]),
      empty: String(n[0]),
      sparsity: String(all),
      headSparsity: String(headSparsity),
    });

    // The code.
    const options = [
      ...(mask.code ? [`maskMod: ${mask.code}`] : []),
      ...(score.code ? [`scoreMod: ${score.code}`] : []),
    ];
    code.textContent = `flexAttention(q, k, v${options.length ? `, { ${options.join(', ')} }` : ''})`;
    $('flexBlockCode').textContent =
      `createBlockMask(${mask.code ?? 'noopMask'}, 1, ${blockMask.H}, ${L}, ${L}, { blockSize: ${blockSize} })` +
      (blockMask.H > 1 ? ' — per head: the expression reads h' : '');
    const notes: string[] = [];
    const arrays = new Set([...mask.arrays, ...score.arrays]);
    if (arrays.has('ids')) notes.push(`ids = ${describeDocIds(currentDocIds)} (document id × positions)`);
    if (arrays.has('bias')) notes.push(`bias = [${BIAS_TABLE.join(', ')}] (kv − q = −4 … 4)`);
    notes.push(`q, k: Tensor.randn([1, ${H}, ${L}, ${E}]); the maps show head ${head}`);
    codeNote.textContent = notes.join(' · ');

    const w = weights.data.subarray(head * L * L, (head + 1) * L * L);
    const shown = Float32Array.from(w, (x, i) => (dense[i] ? x : Number.NEGATIVE_INFINITY));
    let max = 0;
    for (let i = 0; i < shown.length; i++) if (shown[i] > max) max = shown[i];
    const kindOf = (i: number, j: number) =>
      ['empty', 'partial', 'full'][kinds[Math.floor(i / blockSize) * nk + Math.floor(j / blockSize)]];
    const denseValues = Float32Array.from(dense, (x) => (x ? 1 : Number.NEGATIVE_INFINITY));
    const draw = () => {
      const theme = currentTheme();
      const blank: HeatmapTheme = { ...theme, masked: theme.background };
      denseCard.update(
        { values: denseValues, rows: L, cols: L, title: `mask, head ${head}: ${L} × ${L}`, range: [0, 1] },
        (i, j) =>
          `mask_mod(0, ${head}, ${i}, ${j}) = ${dense[i * L + j] ? 'true: visible' : 'false: blocked'}; its tile is ${kindOf(i, j)}`,
        blank,
      );
      grid.update({ kinds, nq, nk, qBlock: blockSize, kvBlock: blockSize, L, S: L, dense, head });
      weightsCard.update(
        {
          values: shown,
          rows: L,
          cols: L,
          title: `weights, head ${head} (colour 0 … ${max.toPrecision(3)})`,
          range: [0, max > 0 ? max : 1],
        },
        (i, j) =>
          dense[i * L + j]
            ? `query ${i} gives key ${j} weight ${w[i * L + j].toPrecision(4)} (tile ${kindOf(i, j)})`
            : `query ${i} does not see key ${j}: weight 0`,
      );
    };
    draw();
    lastDraw = draw;
    const maskName = maskPresetOf() === 'custom' ? 'the mask expression' : (mask.code ?? 'no mask');
    const scoreName = scorePresetOf() === 'custom' ? 'the score expression' : score.code;
    status.textContent = `${maskName}${scoreName ? ` with ${scoreName}` : ''}: L = S = ${L}, ${H} head${H === 1 ? '' : 's'}, tiles of ${blockSize} — ${counts.textContent} · ${(performance.now() - t0).toFixed(0)} ms`;
    panel.dataset.renders = String(++renders);
    persist();
  }

  // ---- the URL hash ---------------------------------------------------------------------------------------

  function persist(): void {
    const params = new URLSearchParams(location.hash.slice(1));
    for (const [id, key] of Object.entries(HASH_FIELDS)) {
      const v = (document.getElementById(id) as HTMLInputElement | HTMLSelectElement).value;
      if (v === DEFAULTS[id]) params.delete(key);
      else params.set(key, v);
    }
    for (const [key, editor, custom] of [
      ['fxMaskExpr', maskExpr, maskPresetOf() === 'custom'],
      ['fxScoreExpr', scoreExpr, scorePresetOf() === 'custom'],
    ] as const) {
      if (custom) params.set(key, editor.value);
      else params.delete(key);
    }
    const text = params.toString();
    if (text !== location.hash.slice(1)) history.replaceState(null, '', `#${text}`);
  }

  function restore(): void {
    const params = new URLSearchParams(location.hash.slice(1));
    const heads = params.get('fxH');
    if (heads !== null && [...sel('flexHeads').options].some((o) => o.value === heads))
      sel('flexHeads').value = heads;
    fillHeads();
    for (const [id, key] of Object.entries(HASH_FIELDS)) {
      const v = params.get(key);
      if (v === null || id === 'flexHeads') continue;
      const el = document.getElementById(id) as HTMLInputElement | HTMLSelectElement;
      if (el instanceof HTMLSelectElement && ![...el.options].some((o) => o.value === v)) continue;
      el.value = v.slice(0, 200);
    }
    syncPresets(true);
    const m = params.get('fxMaskExpr');
    if (m !== null && maskPresetOf() === 'custom') maskExpr.value = m.slice(0, 2000);
    const s = params.get('fxScoreExpr');
    if (s !== null && scorePresetOf() === 'custom') scoreExpr.value = s.slice(0, 2000);
  }

  // ---- wiring ---------------------------------------------------------------------------------------------

  sel('flexHeads').addEventListener('change', () => {
    fillHeads();
    syncPresets(true);
    schedule();
  });
  for (const id of ['flexL', 'flexHead', 'flexBlock']) sel(id).addEventListener('change', schedule);
  for (const id of ['flexMaskPreset', 'flexScorePreset']) {
    sel(id).addEventListener('change', () => {
      syncPresets(true);
      schedule();
    });
  }
  for (const id of ['flexWindow', 'flexPrefix', 'flexCap']) {
    inp(id).addEventListener('input', () => {
      syncPresets(true);
      schedule();
    });
  }
  inp('flexDocs').addEventListener('input', schedule);
  maskExpr.addEventListener('input', () => {
    sel('flexMaskPreset').value = 'custom';
    syncPresets(false);
    schedule();
  });
  scoreExpr.addEventListener('input', () => {
    sel('flexScorePreset').value = 'custom';
    syncPresets(false);
    schedule();
  });
  $('flexCopy').addEventListener('click', () => void copyCode());
  matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => visible && lastDraw?.());

  async function copyCode(): Promise<void> {
    const text = code.textContent ?? '';
    try {
      await navigator.clipboard.writeText(text);
      status.textContent = 'Copied the call to the clipboard.';
    } catch {
      // No clipboard permission (or an insecure page): select the text so Ctrl+C copies it.
      const range = document.createRange();
      range.selectNodeContents(code);
      const s = getSelection();
      s?.removeAllRanges();
      s?.addRange(range);
      status.textContent =
        'The clipboard is not available here; the call is selected: press Ctrl+C (⌘C) to copy it.';
    }
  }

  restore();

  return {
    shown() {
      visible = true;
      schedule();
    },
    saveToHash: persist,
  };
}

function messageOf(err: unknown): string {
  if (err instanceof ModExpressionError) return err.message;
  return err instanceof Error ? err.message : String(err);
}
