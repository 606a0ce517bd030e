// The Flex tab's block mask picture: the L × S score matrix cut into tiles of the block size, each tile
// coloured full / partial / empty (as BlockMask.kinds says), with the visible elements drawn inside the
// partial tiles. One decision to know: tiles are drawn at element scale, so a tile cut short by L (a
// 128-tile at L = 64) is drawn as the part of the matrix it covers; a readout names the tile under the
// mouse or the keyboard cursor (arrow keys), as the heatmaps do for cells.

export interface GridData {
  /** Tile kinds of the shown head, nq·nk row-major: 0 empty, 1 partial, 2 full. */
  kinds: Uint8Array;
  nq: number;
  nk: number;
  qBlock: number;
  kvBlock: number;
  L: number;
  S: number;
  /** L·S: 1 where the mask mod lets query q see key kv (for the shown head). */
  dense: Uint8Array;
  /** The head the tiles are of (for the label). */
  head: number;
}

const KIND_NAMES = ['empty', 'partial', 'full'] as const;
/** Largest drawn size of the matrix, in CSS px. */
const SIZE = 384;

const cssVar = (name: string, fallback: string) =>
  getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;

/** A canvas of tiles with a readout line; `element` goes into the page. */
export class BlockGrid {
  readonly element: HTMLElement;
  readonly canvas: HTMLCanvasElement;
  private readonly readout: HTMLOutputElement;
  private readonly marker: HTMLElement;
  private data: GridData | undefined;
  private px = 1;
  private cursor = { qb: 0, kb: 0 };

  constructor() {
    this.element = document.createElement('figure');
    this.element.className = 'flex-grid';
    const wrap = document.createElement('div');
    wrap.className = 'canvas-wrap';
    this.canvas = document.createElement('canvas');
    this.canvas.tabIndex = 0;
    this.canvas.dataset.testid = 'flex-blocks';
    this.marker = document.createElement('div');
    this.marker.className = 'cell-marker';
    this.marker.hidden = true;
    wrap.append(this.canvas, this.marker);
    const cap = document.createElement('figcaption');
    this.readout = document.createElement('output');
    this.readout.className = 'readout';
    this.readout.dataset.testid = 'flex-tile-readout';
    this.readout.textContent = 'hover a tile (or focus and use arrow keys) for its kind';
    cap.append(this.readout);
    this.element.append(wrap, cap);
    this.canvas.addEventListener('mousemove', (e) => {
      const d = this.data;
      if (!d) return;
      const r = this.canvas.getBoundingClientRect();
      const kv = Math.floor((e.clientX - r.left) / this.px);
      const q = Math.floor((e.clientY - r.top) / this.px);
      if (q < 0 || kv < 0 || q >= d.L || kv >= d.S) return;
      this.select(Math.floor(q / d.qBlock), Math.floor(kv / d.kvBlock));
    });
    this.canvas.addEventListener('keydown', (e) => this.onKey(e));
    this.canvas.addEventListener('focus', () => this.select(this.cursor.qb, this.cursor.kb));
  }

  update(data: GridData): void {
    this.data = data;
    const { L, S, nq, nk, qBlock, kvBlock, kinds, dense } = data;
    const px = SIZE / Math.max(L, S, 1);
    this.px = px;
    const ratio = Math.min(2, Math.max(1, Math.round(devicePixelRatio || 1)));
    const w = Math.round(S * px);
    const h = Math.round(L * px);
    this.canvas.width = w * ratio;
    this.canvas.height = h * ratio;
    this.canvas.style.width = `${w}px`;
    this.canvas.style.height = `${h}px`;
    const ctx = this.canvas.getContext('2d')!;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    const bg = cssVar('--bg', '#ffffff');
    const full = cssVar('--flex-full', '#2b59c3');
    const partialBg = cssVar('--flex-partial-bg', '#fbe3c4');
    const partial = cssVar('--flex-partial', '#d9730d');
    const line = cssVar('--border', '#d7dae2');
    ctx.fillStyle = bg;
    ctx.fillRect(0, 0, w, h);
    for (let qb = 0; qb < nq; qb++) {
      const i0 = qb * qBlock;
      const i1 = Math.min(L, i0 + qBlock);
      for (let kb = 0; kb < nk; kb++) {
        const j0 = kb * kvBlock;
        const j1 = Math.min(S, j0 + kvBlock);
        const kind = kinds[qb * nk + kb];
        if (kind === 2) {
          ctx.fillStyle = full;
          ctx.fillRect(j0 * px, i0 * px, (j1 - j0) * px, (i1 - i0) * px);
        } else if (kind === 1) {
          ctx.fillStyle = partialBg;
          ctx.fillRect(j0 * px, i0 * px, (j1 - j0) * px, (i1 - i0) * px);
          ctx.fillStyle = partial;
          for (let i = i0; i < i1; i++) {
            // Runs of visible keys in the row, one rectangle each.
            let j = j0;
            while (j < j1) {
              while (j < j1 && !dense[i * S + j]) j++;
              const a = j;
              while (j < j1 && dense[i * S + j]) j++;
              if (j > a) ctx.fillRect(a * px, i * px, (j - a) * px, px);
            }
          }
        }
      }
    }
    ctx.strokeStyle = line;
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let kb = 0; kb <= nk; kb++) {
      const x = Math.min(S, kb * kvBlock) * px;
      ctx.moveTo(Math.min(w - 0.5, Math.round(x) + 0.5), 0);
      ctx.lineTo(Math.min(w - 0.5, Math.round(x) + 0.5), h);
    }
    for (let qb = 0; qb <= nq; qb++) {
      const y = Math.min(L, qb * qBlock) * px;
      ctx.moveTo(0, Math.min(h - 0.5, Math.round(y) + 0.5));
      ctx.lineTo(w, Math.min(h - 0.5, Math.round(y) + 0.5));
    }
    ctx.stroke();
    const counts = [0, 0, 0];
    for (const k of kinds) counts[k]++;
    this.canvas.dataset.kinds = Array.from(kinds).join('');
    this.canvas.dataset.nq = String(nq);
    this.canvas.dataset.nk = String(nk);
    this.canvas.setAttribute(
      'aria-label',
      `Block mask of head ${data.head}: ${nq} query blocks by ${nk} key blocks of ${qBlock}; ${counts[2]} full, ${counts[1]} partial, ${counts[0]} empty tiles. Arrow keys move between tiles; the kind is read out below.`,
    );
    this.cursor = { qb: Math.min(this.cursor.qb, nq - 1), kb: Math.min(this.cursor.kb, nk - 1) };
    if (!this.marker.hidden) this.select(this.cursor.qb, this.cursor.kb);
  }

  /** Shows tile (qb, kb)'s kind and how many of its elements are visible. */
  select(qb: number, kb: number): void {
    const d = this.data;
    if (!d) return;
    this.cursor = { qb, kb };
    const i0 = qb * d.qBlock;
    const i1 = Math.min(d.L, i0 + d.qBlock);
    const j0 = kb * d.kvBlock;
    const j1 = Math.min(d.S, j0 + d.kvBlock);
    let seen = 0;
    for (let i = i0; i < i1; i++) for (let j = j0; j < j1; j++) seen += d.dense[i * d.S + j];
    const kind = KIND_NAMES[d.kinds[qb * d.nk + kb]];
    const what =
      kind === 'full'
        ? 'every key visible: run without calling the mask mod'
        : kind === 'empty'
          ? 'no key visible: skipped'
          : 'some keys visible: the mask mod decides per key';
    this.readout.textContent = `tile (${qb}, ${kb}) — queries ${i0}…${i1 - 1}, keys ${j0}…${j1 - 1}: ${kind} (${seen} of ${(i1 - i0) * (j1 - j0)} visible; ${what})`;
    Object.assign(this.readout.dataset, { qb: String(qb), kb: String(kb), kind });
    Object.assign(this.marker.style, {
      left: `${j0 * this.px - 1}px`,
      top: `${i0 * this.px - 1}px`,
      width: `${(j1 - j0) * this.px + 2}px`,
      height: `${(i1 - i0) * this.px + 2}px`,
    });
    this.marker.hidden = false;
  }

  private onKey(e: KeyboardEvent): void {
    const d = this.data;
    if (!d) return;
    let { qb, kb } = this.cursor;
    if (e.key === 'ArrowUp') qb--;
    else if (e.key === 'ArrowDown') qb++;
    else if (e.key === 'ArrowLeft') kb--;
    else if (e.key === 'ArrowRight') kb++;
    else if (e.key === 'Home') kb = 0;
    else if (e.key === 'End') kb = d.nk - 1;
    else return;
    e.preventDefault();
    this.select(Math.max(0, Math.min(d.nq - 1, qb)), Math.max(0, Math.min(d.nk - 1, kb)));
  }
}
