// Heatmap geometry shared by every renderer (SVG string, PNG raster, browser canvas).
// One decision to know: all sizes are in CSS pixels with a fixed monospace text metric (7 px per
// character, 12 px font), so the SVG, the Node PNG and the canvas place every cell and label identically;
// renderers multiply by their own pixel ratio.

import { colorAt, type Rgb } from './colormap.js';

/** What to draw: a rows × cols matrix in row-major order, with optional labels. */
export interface HeatmapSpec {
  /** rows·cols values, row-major. −Infinity marks a masked score; NaN is drawn grey. */
  values: ArrayLike<number>;
  rows: number;
  cols: number;
  /** One label per row (queries); omitted = row numbers. */
  rowLabels?: readonly string[];
  /** One label per column (keys, or feature indices); omitted = column numbers. */
  colLabels?: readonly string[];
  title?: string;
  /** 'sequential' (default) maps [lo, hi] dark → bright; 'diverging' maps −m…0…+m blue → white → red. */
  scale?: 'sequential' | 'diverging';
  /** The value range the colour ends mean; default [0, 1] sequential, ±max|finite value| diverging. */
  range?: readonly [number, number];
  /**
   * Pixels per cell (square); default fits each axis in about 480 px (1 to 36 px per cell), letting
   * cells of a wide or tall matrix be up to 16 px on the short side so every token label fits.
   */
  cellSize?: number;
}

/** Colours for the parts that are not cells. Exports use `LIGHT_THEME`. */
export interface HeatmapTheme {
  background: Rgb;
  foreground: Rgb;
  /** Cells whose value is ±Infinity (masked scores). */
  masked: Rgb;
}

/** The light theme: dark text on white (the default of `qkv viz` and of exported images). */
export const LIGHT_THEME: HeatmapTheme = {
  background: [255, 255, 255],
  foreground: [28, 30, 36],
  masked: [214, 214, 220],
};
/** The dark theme: light text on a near-black background (`qkv viz --theme dark`). */
export const DARK_THEME: HeatmapTheme = {
  background: [22, 24, 30],
  foreground: [228, 230, 236],
  masked: [70, 72, 82],
};

export const FONT_SIZE = 12;
export const CHAR_WIDTH = 7;
export const LINE_HEIGHT = 14;
const MAX_LABEL_CHARS = 12;
const PAD = 8;
const LEGEND_BAR = 12;

/** A legend tick: the value, its label, and its y (CSS px, top of the image = 0). */
export interface LegendTick {
  value: number;
  text: string;
  y: number;
}

/** Where everything goes, in CSS pixels. */
export interface HeatmapLayout {
  width: number;
  height: number;
  /** Cell size in CSS px: equal for square matrices, taller than wide for e.g. [L, D] with D ≫ L. */
  cellWidth: number;
  cellHeight: number;
  /** Top-left corner of the cell grid and its size. */
  gridX: number;
  gridY: number;
  gridWidth: number;
  gridHeight: number;
  /** Every `rowLabelStride`-th row (and column) gets a label, so labels never overlap. */
  rowLabelStride: number;
  colLabelStride: number;
  rowLabels: string[];
  colLabels: string[];
  titleY: number;
  legend: { x: number; y: number; width: number; height: number; ticks: LegendTick[] };
  range: readonly [number, number];
  scale: 'sequential' | 'diverging';
  /** True when some value is ±Infinity (the legend then shows the masked swatch). */
  hasMasked: boolean;
  maskedSwatch: { x: number; y: number; size: number; text: string };
}

/** Display width in character cells: wide (CJK, full-width) characters count 2. */
export function textCells(text: string): number {
  let n = 0;
  for (const ch of text) n += isWide(ch.codePointAt(0)!) ? 2 : 1;
  return n;
}

function isWide(cp: number): boolean {
  return (
    (cp >= 0x1100 && cp <= 0x115f) ||
    (cp >= 0x2e80 && cp <= 0xa4cf) ||
    (cp >= 0xac00 && cp <= 0xd7a3) ||
    (cp >= 0xf900 && cp <= 0xfaff) ||
    (cp >= 0xfe30 && cp <= 0xfe4f) ||
    (cp >= 0xff00 && cp <= 0xff60) ||
    (cp >= 0xffe0 && cp <= 0xffe6) ||
    (cp >= 0x1f300 && cp <= 0x1faff) ||
    (cp >= 0x20000 && cp <= 0x3fffd)
  );
}

/** Shortens a label to at most `max` character cells, ending in '…' when cut. */
export function fitLabel(label: string, max = MAX_LABEL_CHARS): string {
  if (textCells(label) <= max) return label;
  let out = '';
  for (const ch of label) {
    if (textCells(out + ch) > max - 1) break;
    out += ch;
  }
  return `${out}…`;
}

/** A compact number for ticks and cells: 3 significant digits, exponent outside [0.001, 10000). */
export function formatTick(v: number): string {
  if (v === Number.NEGATIVE_INFINITY) return '−∞';
  if (v === Number.POSITIVE_INFINITY) return '+∞';
  if (Number.isNaN(v)) return 'NaN';
  if (v === 0) return '0';
  const a = Math.abs(v);
  const s = a >= 10000 || a < 0.001 ? v.toExponential(2) : String(Number(v.toPrecision(3)));
  return s.replace('-', '−');
}

/** A value to 9 significant digits (enough to round-trip a float32), trailing zeros dropped. */
export function formatExact(v: number): string {
  if (!Number.isFinite(v)) return formatTick(v);
  if (v === 0) return '0';
  return String(Number(v.toPrecision(9))).replace('-', '−');
}

/** The colour range a spec means: its `range`, or the default for its scale. */
export function resolveRange(spec: HeatmapSpec): readonly [number, number] {
  if (spec.range) return spec.range;
  if ((spec.scale ?? 'sequential') === 'sequential') return [0, 1];
  let m = 0;
  for (let i = 0; i < spec.values.length; i++) {
    const v = spec.values[i];
    if (Number.isFinite(v) && Math.abs(v) > m) m = Math.abs(v);
  }
  return m === 0 ? [-1, 1] : [-m, m];
}

/** Blue → white → red for t ∈ [−1, 1] (clamped; NaN grey): signed values such as Q, K and raw scores. */
export function divergingColorAt(t: number): Rgb {
  if (Number.isNaN(t)) return [128, 128, 128];
  const x = Math.min(1, Math.max(-1, t));
  const end: Rgb = x < 0 ? [40, 90, 190] : [200, 45, 45];
  const f = Math.abs(x) ** 0.85; // a little lift so small values are not lost in white
  const mid = 246;
  return [
    Math.round(mid + (end[0] - mid) * f),
    Math.round(mid + (end[1] - mid) * f),
    Math.round(mid + (end[2] - mid) * f),
  ];
}

/** The colour of one value under a spec's scale and range (`theme.masked` for ±Infinity). */
export function cellColor(
  v: number,
  scale: 'sequential' | 'diverging',
  range: readonly [number, number],
  theme: HeatmapTheme = LIGHT_THEME,
): Rgb {
  if (v === Number.POSITIVE_INFINITY || v === Number.NEGATIVE_INFINITY) return theme.masked;
  const [lo, hi] = range;
  if (scale === 'diverging') {
    const m = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
    return divergingColorAt(v / m);
  }
  return colorAt(hi === lo ? 0 : (v - lo) / (hi - lo));
}

/** Checks a spec and names what is wrong (function, argument, sizes). */
export function checkSpec(fn: string, spec: HeatmapSpec): void {
  const { rows, cols } = spec;
  if (!Number.isSafeInteger(rows) || rows < 1 || !Number.isSafeInteger(cols) || cols < 1) {
    throw new RangeError(`${fn}: rows and cols must be positive integers, got rows=${rows} cols=${cols}`);
  }
  if (!spec.values || spec.values.length !== rows * cols) {
    throw new RangeError(
      `${fn}: values has ${spec.values?.length ?? 0} elements but rows × cols = ${rows} × ${cols} = ${rows * cols}`,
    );
  }
  if (spec.rowLabels && spec.rowLabels.length !== rows) {
    throw new RangeError(`${fn}: rowLabels has ${spec.rowLabels.length} labels but rows = ${rows}`);
  }
  if (spec.colLabels && spec.colLabels.length !== cols) {
    throw new RangeError(`${fn}: colLabels has ${spec.colLabels.length} labels but cols = ${cols}`);
  }
  if (spec.cellSize !== undefined && !(Number.isSafeInteger(spec.cellSize) && spec.cellSize >= 1)) {
    throw new RangeError(`${fn}: cellSize must be a positive integer, got ${spec.cellSize}`);
  }
  if (spec.range && !(spec.range[0] < spec.range[1])) {
    throw new RangeError(`${fn}: range must be [lo, hi] with lo < hi, got [${spec.range.join(', ')}]`);
  }
}

/** Computes where the title, labels, cells and legend go. */
export function heatmapLayout(spec: HeatmapSpec): HeatmapLayout {
  checkSpec('heatmapLayout', spec);
  const { rows, cols } = spec;
  const scale = spec.scale ?? 'sequential';
  const range = resolveRange(spec);
  const cellsFor = (n: number) => Math.max(1, Math.min(36, Math.floor(480 / n)));
  const cellWidth = spec.cellSize ?? Math.min(cellsFor(cols), Math.max(cellsFor(rows), 16));
  const cellHeight = spec.cellSize ?? Math.min(cellsFor(rows), Math.max(cellsFor(cols), 16));
  const rowLabelStride = Math.ceil(LINE_HEIGHT / cellHeight);
  const colLabelStride = Math.ceil(LINE_HEIGHT / cellWidth);
  const rowLabels = (spec.rowLabels ?? Array.from({ length: rows }, (_, i) => String(i))).map((l) =>
    fitLabel(l),
  );
  const colLabels = (spec.colLabels ?? Array.from({ length: cols }, (_, j) => String(j))).map((l) =>
    fitLabel(l),
  );
  const widest = (labels: string[], stride: number) =>
    labels.reduce((m, l, i) => (i % stride === 0 ? Math.max(m, textCells(l)) : m), 1);
  const rowLabelWidth = widest(rowLabels, rowLabelStride) * CHAR_WIDTH + 6;
  const colLabelHeight = widest(colLabels, colLabelStride) * CHAR_WIDTH + 6;
  const titleHeight = spec.title ? LINE_HEIGHT + 8 : 0;

  const gridX = PAD + rowLabelWidth;
  const gridY = PAD + titleHeight + colLabelHeight;
  const gridWidth = cols * cellWidth;
  const gridHeight = rows * cellHeight;

  const hasMasked = Array.prototype.some.call(
    spec.values,
    (v: number) => v === Number.POSITIVE_INFINITY || v === Number.NEGATIVE_INFINITY,
  );
  const legendHeight = Math.max(96, Math.min(gridHeight, 240));
  const legendX = gridX + gridWidth + 14;
  const legendY = gridY;
  const tickValues = [range[1], (range[0] + range[1]) / 2, range[0]]; // top of the bar is the high end
  const ticks = tickValues.map((value, i) => ({
    value,
    text: formatTick(value),
    y: legendY + (i * legendHeight) / (tickValues.length - 1),
  }));
  const tickWidth = Math.max(...ticks.map((t) => textCells(t.text))) * CHAR_WIDTH;
  const maskedText = '−∞ masked';
  const swatch = { x: legendX, y: legendY + legendHeight + 10, size: LEGEND_BAR, text: maskedText };
  const legendText = Math.max(tickWidth, hasMasked ? textCells(maskedText) * CHAR_WIDTH : 0);
  const legendRight = legendX + LEGEND_BAR + 6 + legendText;
  const titleWidth = spec.title ? PAD + textCells(spec.title) * CHAR_WIDTH : 0;
  const width = Math.ceil(Math.max(legendRight + PAD, titleWidth + PAD));
  const bottom = Math.max(gridY + gridHeight, legendY + legendHeight + (hasMasked ? LEGEND_BAR + 12 : 6));
  const height = Math.ceil(bottom + PAD);
  return {
    width,
    height,
    cellWidth,
    cellHeight,
    gridX,
    gridY,
    gridWidth,
    gridHeight,
    rowLabelStride,
    colLabelStride,
    rowLabels,
    colLabels,
    titleY: PAD + LINE_HEIGHT - 3,
    legend: { x: legendX, y: legendY, width: LEGEND_BAR, height: legendHeight, ticks },
    range,
    scale,
    hasMasked,
    maskedSwatch: swatch,
  };
}

/** The cell under a point (CSS px), or undefined outside the grid. */
export function cellAt(
  layout: HeatmapLayout,
  x: number,
  y: number,
): { row: number; col: number } | undefined {
  const col = Math.floor((x - layout.gridX) / layout.cellWidth);
  const row = Math.floor((y - layout.gridY) / layout.cellHeight);
  if (x < layout.gridX || y < layout.gridY) return undefined;
  if (row >= layout.gridHeight / layout.cellHeight || col >= layout.gridWidth / layout.cellWidth)
    return undefined;
  return { row, col };
}
