// A heatmap card: canvas drawing through qkv's shared layout and painter, an exact-value readout on
// hover or arrow keys, and PNG/SVG export. One decision to know: cells are painted as one ImageData
// (a 512×512 grid is a single putImageData), text is drawn by the canvas with the page's font; exports
// always use the light theme at 2× so they paste cleanly into documents.

import {
  cellAt,
  DARK_THEME,
  formatExact,
  type HeatmapLayout,
  type HeatmapSpec,
  type HeatmapTheme,
  heatmapLayout,
  LIGHT_THEME,
  paintHeatmap,
  renderHeatmapSvg,
} from 'qkv/viz';

export const EXPORT_RATIO = 2;
const FONT = '12px ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace';

export function currentTheme(): HeatmapTheme {
  return matchMedia('(prefers-color-scheme: dark)').matches ? DARK_THEME : LIGHT_THEME;
}

const css = (c: readonly number[]) => `rgb(${c[0]}, ${c[1]}, ${c[2]})`;

/** Draws `spec` into `canvas` at `ratio` device pixels per CSS pixel; returns the layout used. */
export function drawHeatmap(
  canvas: HTMLCanvasElement,
  spec: HeatmapSpec,
  ratio: number,
  theme: HeatmapTheme,
): HeatmapLayout {
  const layout = heatmapLayout(spec);
  canvas.width = layout.width * ratio;
  canvas.height = layout.height * ratio;
  const ctx = canvas.getContext('2d')!;
  const img = ctx.createImageData(canvas.width, canvas.height);
  paintHeatmap(spec, layout, img, ratio, theme);
  ctx.putImageData(img, 0, 0);
  ctx.save();
  ctx.scale(ratio, ratio);
  ctx.fillStyle = css(theme.foreground);
  ctx.font = FONT;
  ctx.textBaseline = 'middle';
  if (spec.title) {
    ctx.font = `bold ${FONT}`;
    ctx.textBaseline = 'alphabetic';
    ctx.fillText(spec.title, 8, layout.titleY);
    ctx.font = FONT;
    ctx.textBaseline = 'middle';
  }
  const { cellWidth, cellHeight, gridX, gridY } = layout;
  ctx.textAlign = 'right';
  layout.rowLabels.forEach((label, i) => {
    if (i % layout.rowLabelStride === 0) ctx.fillText(label, gridX - 4, gridY + (i + 0.5) * cellHeight);
  });
  ctx.textAlign = 'left';
  layout.colLabels.forEach((label, j) => {
    if (j % layout.colLabelStride !== 0) return;
    ctx.save();
    ctx.translate(gridX + (j + 0.5) * cellWidth, gridY - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText(label, 0, 0);
    ctx.restore();
  });
  for (const t of layout.legend.ticks) ctx.fillText(t.text, layout.legend.x + layout.legend.width + 5, t.y);
  if (layout.hasMasked) {
    const sw = layout.maskedSwatch;
    ctx.fillText(sw.text, sw.x + sw.size + 5, sw.y + sw.size / 2);
  }
  ctx.restore();
  return layout;
}

/** Saves `blob` as a file named `name` (through a temporary link). */
export function download(blob: Blob, name: string): void {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

/** The spec as a PNG blob at EXPORT_RATIO, light theme. */
export function heatmapPngBlob(spec: HeatmapSpec): Promise<Blob> {
  const canvas = document.createElement('canvas');
  drawHeatmap(canvas, spec, EXPORT_RATIO, LIGHT_THEME);
  return new Promise((resolve, reject) =>
    canvas.toBlob(
      (b) => (b ? resolve(b) : reject(new Error('heatmapPngBlob: canvas.toBlob gave null'))),
      'image/png',
    ),
  );
}

/** A figure with a heatmap canvas, a readout line, and export buttons. */
export class HeatmapCard {
  readonly element: HTMLElement;
  private readonly canvas: HTMLCanvasElement;
  private readonly readout: HTMLElement;
  private readonly marker: HTMLElement;
  private readonly derivation: HTMLElement;
  private explain: ((row: number, col: number) => string) | undefined;
  private spec: HeatmapSpec | undefined;
  private layout: HeatmapLayout | undefined;
  private cursor = { row: 0, col: 0 };

  constructor(
    readonly id: string,
    private readonly fileStem: () => string,
    caption?: string,
  ) {
    this.element = document.createElement('figure');
    this.element.className = 'heatmap';
    this.element.dataset.heatmap = id;
    const wrap = document.createElement('div');
    wrap.className = 'canvas-wrap';
    this.canvas = document.createElement('canvas');
    this.canvas.tabIndex = 0;
    this.marker = document.createElement('div');
    this.marker.className = 'cell-marker';
    this.marker.hidden = true;
    wrap.append(this.canvas, this.marker);
    const bar = document.createElement('figcaption');
    this.readout = document.createElement('output');
    this.readout.className = 'readout';
    this.readout.dataset.testid = `readout-${id}`;
    this.readout.textContent = 'hover a cell (or focus and use arrow keys) for its exact value';
    const png = button('PNG', `Download this heatmap as PNG (${EXPORT_RATIO}×)`);
    png.dataset.export = 'png';
    png.addEventListener('click', () => void this.exportPng());
    const svg = button('SVG', 'Download this heatmap as SVG');
    svg.dataset.export = 'svg';
    svg.addEventListener('click', () => this.exportSvg());
    const note = document.createElement('span');
    note.className = 'note';
    note.textContent = caption ?? '';
    bar.append(note, this.readout, png, svg);
    this.derivation = document.createElement('p');
    this.derivation.className = 'derivation';
    this.derivation.dataset.testid = `derivation-${id}`;
    this.element.append(wrap, bar, this.derivation);

    this.canvas.addEventListener('mousemove', (e) => {
      if (!this.layout) return;
      const r = this.canvas.getBoundingClientRect();
      const hit = cellAt(this.layout, e.clientX - r.left, e.clientY - r.top);
      if (hit) this.select(hit.row, hit.col);
    });
    this.canvas.addEventListener('keydown', (e) => this.onKey(e));
    this.canvas.addEventListener('focus', () => this.select(this.cursor.row, this.cursor.col));
  }

  /**
   * Sets the spec to draw and, optionally, how to explain a cell (a one-line derivation of its value,
   * shown under the readout).
   */
  update(
    spec: HeatmapSpec,
    explain?: (row: number, col: number) => string,
    theme: HeatmapTheme = currentTheme(),
  ): void {
    this.spec = spec;
    this.explain = explain;
    const ratio = Math.min(2, Math.max(1, Math.round(devicePixelRatio || 1)));
    const t0 = performance.now();
    this.layout = drawHeatmap(this.canvas, spec, ratio, theme);
    this.canvas.dataset.drawMs = (performance.now() - t0).toFixed(1);
    this.canvas.style.width = `${this.layout.width}px`;
    this.canvas.style.height = `${this.layout.height}px`;
    this.canvas.dataset.rows = String(spec.rows);
    this.canvas.dataset.cols = String(spec.cols);
    this.canvas.dataset.width = String(this.layout.width);
    this.canvas.dataset.height = String(this.layout.height);
    this.canvas.dataset.gridX = String(this.layout.gridX);
    this.canvas.dataset.gridY = String(this.layout.gridY);
    this.canvas.dataset.cellWidth = String(this.layout.cellWidth);
    this.canvas.dataset.cellHeight = String(this.layout.cellHeight);
    this.canvas.setAttribute(
      'aria-label',
      `${spec.title ?? this.id}: ${spec.rows} by ${spec.cols} heatmap. Arrow keys move between cells; the value is read out below.`,
    );
    this.cursor = {
      row: Math.min(this.cursor.row, spec.rows - 1),
      col: Math.min(this.cursor.col, spec.cols - 1),
    };
    if (!this.marker.hidden) this.select(this.cursor.row, this.cursor.col);
  }

  /** Shows cell (row, col)'s exact value in the readout (also exposed as data attributes for tests). */
  select(row: number, col: number): void {
    const spec = this.spec;
    const L = this.layout;
    if (!spec || !L) return;
    this.cursor = { row, col };
    const v = spec.values[row * spec.cols + col];
    const rowLabel = spec.rowLabels?.[row] ?? String(row);
    const colLabel = spec.colLabels?.[col] ?? String(col);
    this.readout.textContent = `row ${row} “${rowLabel}”, column ${col} “${colLabel}”: ${formatExact(v)}`;
    Object.assign(this.readout.dataset, { row: String(row), col: String(col), value: String(v) });
    this.derivation.textContent = this.explain?.(row, col) ?? '';
    const w = Math.max(L.cellWidth, 3);
    const h = Math.max(L.cellHeight, 3);
    Object.assign(this.marker.style, {
      left: `${L.gridX + col * L.cellWidth - (w - L.cellWidth) / 2 - 1}px`,
      top: `${L.gridY + row * L.cellHeight - (h - L.cellHeight) / 2 - 1}px`,
      width: `${w}px`,
      height: `${h}px`,
    });
    this.marker.hidden = false;
  }

  private onKey(e: KeyboardEvent): void {
    const spec = this.spec;
    if (!spec) return;
    let { row, col } = this.cursor;
    const step = e.shiftKey ? 8 : 1;
    if (e.key === 'ArrowUp') row -= step;
    else if (e.key === 'ArrowDown') row += step;
    else if (e.key === 'ArrowLeft') col -= step;
    else if (e.key === 'ArrowRight') col += step;
    else if (e.key === 'Home') col = 0;
    else if (e.key === 'End') col = spec.cols - 1;
    else return;
    e.preventDefault();
    this.select(Math.max(0, Math.min(spec.rows - 1, row)), Math.max(0, Math.min(spec.cols - 1, col)));
  }

  async exportPng(): Promise<void> {
    if (this.spec) download(await heatmapPngBlob(this.spec), `${this.fileStem()}.png`);
  }

  exportSvg(): void {
    if (!this.spec) return;
    download(new Blob([renderHeatmapSvg(this.spec)], { type: 'image/svg+xml' }), `${this.fileStem()}.svg`);
  }
}

export function button(text: string, title: string): HTMLButtonElement {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = text;
  b.title = title;
  return b;
}
