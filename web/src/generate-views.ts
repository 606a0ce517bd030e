// The Generate tab's drawings, as plain HTML: the sequences as token chips, the next-token distribution
// as bars, the newest token's attention as one strip per head, and the paged KV cache as a grid of blocks.
// One decision to know: every number drawn is also written on its element (data-p, data-w, data-state …),
// so a reader can hover it and the browser tests read what a person sees, not a private hook; token labels
// always go in through textContent (a checkpoint's tokens such as <bos> are text, not markup).

import { type SamplingOptions, tokenDistribution } from 'qkv';
import { colorAt } from 'qkv/viz';
import type { PagedView, SamplingSettings, SequenceView } from './generate-protocol.js';

/** Rows shown of the next-token distribution. */
export const TOP_SHOWN = 10;

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className = '',
  text = '',
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text) e.textContent = text;
  return e;
}

const rgb = (c: readonly number[]) => `rgb(${c[0]}, ${c[1]}, ${c[2]})`;

/** The library's sampling options for the panel's settings (top-k 0 = every token). */
export function samplingOptions(s: SamplingSettings): SamplingOptions {
  return { temperature: s.temperature, topK: s.topK > 0 ? s.topK : undefined, topP: s.topP };
}

/** One line per sequence: its prompt and generated tokens as chips, then the decoded text. */
export function renderSequences(container: HTMLElement, sequences: SequenceView[], shown: number): void {
  container.replaceChildren(
    ...sequences.map((s, i) => {
      const row = el('div', i === shown ? 'gen-seq shown' : 'gen-seq');
      row.dataset.seq = String(i);
      row.dataset.tokens = String(s.tokens.length);
      row.dataset.generated = String(s.tokens.length - s.promptLength);
      row.append(el('span', 'gen-seq-label', `sequence ${i} · seed ${s.seed}`));
      const chips = el('ul', 'chips gen-chips');
      chips.setAttribute('aria-label', `sequence ${i}: tokens`);
      s.tokens.forEach((tok, j) => {
        const generated = j >= s.promptLength;
        const chip = el('li', generated ? 'chip gen' : 'chip prompt', tok);
        chip.dataset.id = String(s.ids[j]);
        if (j === s.position) chip.classList.add('newest');
        if (j >= s.fed) chip.classList.add('unfed');
        chip.title = generated
          ? `token ${j}: drawn with probability ${s.chosen[j - s.promptLength].toFixed(4)}${j >= s.fed ? ' (not fed: the model is full)' : ''}`
          : `token ${j}: prompt`;
        chips.append(chip);
      });
      row.append(chips);
      const text = el('p', 'gen-decoded mono', s.text);
      if (s.stopped) text.append(el('span', 'note', ` — stopped: ${s.stopped}.`));
      row.append(text);
      return row;
    }),
  );
}

/**
 * The distribution the next token is drawn from under `settings` (tokenDistribution, recomputed here so
 * the sliders answer at once): the top TOP_SHOWN tokens as bars, and what the rest hold.
 */
export function renderDistribution(
  container: HTMLElement,
  logits: Float32Array | undefined,
  settings: SamplingSettings,
  labels: readonly string[],
): void {
  if (!logits) {
    container.replaceChildren(el('p', 'note', 'No distribution to show.'));
    container.dataset.count = '0';
    delete container.dataset.sum;
    return;
  }
  const { ids, probs } = tokenDistribution(logits, samplingOptions(settings));
  const n = Math.min(TOP_SHOWN, ids.length);
  const table = el('table', 'numbers gen-dist-table');
  const head = el('tr');
  for (const h of ['#', 'token', '', 'probability']) head.append(el('th', '', h));
  table.append(el('thead'));
  table.tHead!.append(head);
  const body = el('tbody');
  let sum = 0;
  for (let r = 0; r < n; r++) {
    sum += probs[r];
    const tr = el('tr');
    tr.dataset.id = String(ids[r]);
    tr.dataset.p = String(probs[r]);
    tr.dataset.token = labels[ids[r]];
    const bar = el('span', 'gen-bar');
    bar.style.width = `${(probs[r] * 100).toFixed(2)}%`;
    const barCell = el('td', 'gen-bar-cell');
    barCell.append(bar);
    tr.append(el('td', '', String(r + 1)), el('td', 'mono', labels[ids[r]]), barCell);
    tr.append(el('td', 'mono', probs[r].toFixed(4)));
    body.append(tr);
  }
  table.append(body);
  let rest = 0;
  for (let r = n; r < ids.length; r++) rest += probs[r];
  const cut = logits.length - ids.length;
  const note = el(
    'p',
    'note',
    `Top ${n} hold ${sum.toFixed(4)}` +
      (ids.length > n ? `; the other ${ids.length - n} candidates ${rest.toFixed(4)}` : '') +
      (cut > 0
        ? `; ${cut} of ${logits.length} tokens are cut by ${settings.temperature === 0 ? 'greedy decoding' : 'top-k / top-p'}.`
        : '.'),
  );
  container.replaceChildren(table, note);
  container.dataset.count = String(n);
  container.dataset.sum = String(sum);
}

/** The newest token's row over the cache: per layer a table, one strip of cells per head. */
export function renderAttention(container: HTMLElement, seq: SequenceView, heads: number): void {
  const S = seq.fed;
  const labels = seq.tokens.slice(0, S);
  const parts: HTMLElement[] = [];
  const caption = el('p', 'note');
  caption.append('Query: token ');
  caption.append(el('b', 'mono', `${seq.position} “${seq.tokens[seq.position]}”`));
  caption.append(
    ` (the newest in the cache) over the ${S} cached tokens, itself included. Each row is one head's softmax weights; it sums to 1.`,
  );
  parts.push(caption);
  seq.attention.forEach((w, layer) => {
    const fig = el('figure', 'attn-layer');
    fig.dataset.layer = String(layer);
    fig.append(el('figcaption', 'attn-caption', `layer ${layer}`));
    const table = el('table', 'attn-strip');
    const thead = el('thead');
    const hr = el('tr');
    hr.append(el('th'));
    labels.forEach((label, j) => {
      const th = el('th', j === seq.position ? 'tok self' : 'tok');
      th.append(el('span', '', label));
      th.title = `position ${j}`;
      hr.append(th);
    });
    thead.append(hr);
    table.append(thead);
    const body = el('tbody');
    for (let h = 0; h < heads; h++) {
      const tr = el('tr');
      tr.dataset.head = String(h);
      tr.append(el('th', '', `head ${h}`));
      let best = 0;
      for (let j = 1; j < S; j++) if (w[h * S + j] > w[h * S + best]) best = j;
      for (let j = 0; j < S; j++) {
        const v = w[h * S + j];
        const td = el('td', j === best ? 'w best' : 'w');
        td.style.background = rgb(colorAt(v));
        td.dataset.w = String(v);
        td.dataset.col = String(j);
        td.title = `layer ${layer}, head ${h} → ${j} “${labels[j]}”: ${v.toFixed(4)}`;
        tr.append(td);
      }
      body.append(tr);
    }
    table.append(body);
    const wrap = el('div', 'attn-wrap');
    wrap.append(table);
    fig.append(wrap);
    parts.push(fig);
  });
  container.replaceChildren(...parts);
  container.dataset.columns = String(S);
}

type BlockState = 'free' | 'seq0' | 'seq1' | 'shared';

/**
 * The paged cache: the pool of physical blocks (who holds each, which positions, free ones grey, copies
 * marked), each sequence's block table with the tokens of every block, and the counts.
 */
export function renderPaged(container: HTMLElement, paged: PagedView, sequences: SequenceView[]): void {
  const bs = paged.blockSize;
  const holders: number[][] = Array.from({ length: paged.numBlocks }, () => []);
  const filled = new Int32Array(paged.numBlocks);
  const logical = new Int32Array(paged.numBlocks).fill(-1);
  paged.tables.forEach((t, i) => {
    t.table.forEach((block, n) => {
      holders[block].push(i);
      filled[block] = Math.max(filled[block], Math.min(bs, t.length - n * bs));
      logical[block] = n;
    });
  });
  const stateOf = (block: number): BlockState => {
    const h = holders[block];
    if (h.length === 0) return 'free';
    if (h.length > 1) return 'shared';
    return h[0] === 0 ? 'seq0' : 'seq1';
  };
  const copyOf = new Map(paged.copies.map((c) => [c.block, c.from]));
  const shared = holders.filter((h) => h.length > 1).length;
  const copied = paged.copies.filter((c) => holders[c.block].length > 0).length;
  const used = paged.numBlocks - paged.freeBlocks;

  const counts = el('p', 'stats paged-counts');
  counts.dataset.testid = 'paged-counts';
  counts.dataset.used = String(used);
  counts.dataset.free = String(paged.freeBlocks);
  counts.dataset.shared = String(shared);
  counts.dataset.copied = String(copied);
  counts.textContent =
    `${used} of ${paged.numBlocks} blocks in use (${bs} tokens each), ${paged.freeBlocks} free · ` +
    `${shared} shared by both sequences · ${copied} copied on write`;

  const pool = el('div', 'paged-pool');
  pool.setAttribute('role', 'list');
  pool.setAttribute('aria-label', 'Physical blocks of the pool');
  for (let b = 0; b < paged.numBlocks; b++) {
    const state = stateOf(b);
    const cell = el('div', `pblock ${state}`);
    cell.setAttribute('role', 'listitem');
    cell.dataset.block = String(b);
    cell.dataset.state = state;
    cell.append(el('b', '', `#${b}`));
    const slots = el('span', 'slots');
    for (let s = 0; s < bs; s++) slots.append(el('i', s < filled[b] ? 'on' : ''));
    cell.append(slots);
    let what = 'free';
    if (state !== 'free') {
      const from = logical[b] * bs;
      what = `${from}–${from + filled[b] - 1}`;
      cell.append(el('span', 'pos', what));
    }
    const from = copyOf.get(b);
    if (from !== undefined && state !== 'free') {
      cell.dataset.copyOf = String(from);
      cell.classList.add('copy');
      cell.append(el('span', 'pos', `copy of #${from}`));
    }
    cell.title =
      state === 'free'
        ? `block ${b}: free`
        : `block ${b}: positions ${what}, held by ${holders[b].map((i) => `sequence ${i}`).join(' and ')}${from !== undefined ? `; copied from block ${from} on write` : ''}`;
    pool.append(cell);
  }

  const tables = el('div', 'paged-tables');
  paged.tables.forEach((t, i) => {
    const row = el('div', 'paged-table');
    row.dataset.seq = String(i);
    row.append(el('span', 'gen-seq-label', `sequence ${i} block table`));
    const tokens = sequences[i]?.tokens ?? [];
    t.table.forEach((block, n) => {
      const state = stateOf(block);
      const cell = el('span', `lblock ${state}`);
      cell.dataset.block = String(block);
      cell.dataset.state = state;
      cell.append(el('b', '', `#${block}`));
      cell.append(el('span', 'mono', tokens.slice(n * bs, Math.min(t.length, (n + 1) * bs)).join(' ')));
      row.append(cell);
    });
    tables.append(row);
  });

  const legend = el('p', 'note paged-legend');
  for (const [state, text] of [
    ['seq0', 'sequence 0 only'],
    ['seq1', 'sequence 1 only'],
    ['shared', 'shared (reference count 2)'],
    ['free', 'free'],
  ] as const) {
    const key = el('span', `key ${state}`);
    legend.append(key, ` ${text} `);
  }
  legend.append(el('span', 'key copy'), ' copied on write');

  const parts: HTMLElement[] = [counts, pool, tables, legend];
  if (paged.forkedAt >= 0) {
    const boundary = paged.forkedAt % bs === 0;
    const note = el(
      'p',
      'note',
      boundary
        ? `Forked at ${paged.forkedAt} tokens, a block boundary: every shared block is full, so neither sequence ever writes into one and nothing is copied.`
        : `Forked at ${paged.forkedAt} tokens: the full blocks stay shared for good; the partly filled last one was shared too, and the first sequence to write into it got a copy (copy-on-write).`,
    );
    parts.push(note);
  }
  container.replaceChildren(...parts);
}
