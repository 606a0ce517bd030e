// The model view: one thumbnail per (layer, head), each a button that opens that head's step-through.
// One decision to know: thumbnails paint the weights at one pixel per cell and let the canvas scale them
// up without smoothing, so a 512-token map costs one 512×512 ImageData per head. A decoder language model's
// heads carry a label under the thumbnail: the strongest of the four named scores (model-source.ts).

import { colorAt, type ScoreName } from 'qkv/viz';
import type { HeadLabel } from './protocol.js';

export const THUMB = 96;

/** The scores' names as the page writes them (the column names of `qkv heads`). */
export const PATTERN_NAMES: Record<ScoreName, string> = {
  previousToken: 'prev-token',
  duplicateToken: 'dup-token',
  induction: 'induction',
  firstToken: 'first-token',
};

const score = (v: number) => (Number.isNaN(v) ? '–' : v.toFixed(2));

/** Fills `container` with layers × heads thumbnail buttons. */
export function renderModelView(
  container: HTMLElement,
  weights: Float32Array[],
  heads: number,
  L: number,
  focus: { layer: number; head: number },
  labels: readonly HeadLabel[] | undefined,
  open: (layer: number, head: number) => void,
): void {
  container.replaceChildren();
  container.classList.toggle('labelled', labels !== undefined);
  container.style.setProperty('--heads', String(heads));
  const corner = document.createElement('div');
  corner.className = 'mv-corner';
  container.append(corner);
  for (let h = 0; h < heads; h++) {
    const label = document.createElement('div');
    label.className = 'mv-col';
    label.textContent = `head ${h}`;
    container.append(label);
  }
  weights.forEach((w, layer) => {
    const label = document.createElement('div');
    label.className = 'mv-row';
    label.textContent = `layer ${layer}`;
    container.append(label);
    for (let h = 0; h < heads; h++) {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'thumb';
      b.dataset.layer = String(layer);
      b.dataset.head = String(h);
      const label = labels?.find((x) => x.layer === layer && x.head === h);
      const named = label ? `${PATTERN_NAMES[label.pattern]} ${score(label.score)}` : '';
      b.setAttribute(
        'aria-label',
        `layer ${layer}, head ${h}${named ? ` (${named})` : ''}: open its step-through`,
      );
      b.title = label
        ? `layer ${layer}, head ${h}: ${Object.entries(label.scores)
            .map(([k, v]) => `${PATTERN_NAMES[k as ScoreName]} ${score(v)}`)
            .join(' · ')}`
        : `layer ${layer}, head ${h}`;
      if (layer === focus.layer && h === focus.head) b.setAttribute('aria-current', 'true');
      const c = document.createElement('canvas');
      c.width = L;
      c.height = L;
      const ctx = c.getContext('2d')!;
      const img = ctx.createImageData(L, L);
      for (let p = 0; p < L * L; p++) {
        const rgb = colorAt(w[h * L * L + p]);
        img.data[p * 4] = rgb[0];
        img.data[p * 4 + 1] = rgb[1];
        img.data[p * 4 + 2] = rgb[2];
        img.data[p * 4 + 3] = 255;
      }
      ctx.putImageData(img, 0, 0);
      b.append(c);
      if (label) {
        const tag = document.createElement('span');
        tag.className = 'thumb-label';
        tag.dataset.pattern = label.pattern;
        tag.dataset.score = String(label.score);
        tag.textContent = named;
        b.append(tag);
      }
      b.addEventListener('click', () => open(layer, h));
      container.append(b);
    }
  });
}
