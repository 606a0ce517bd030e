// Heatmap → RGBA pixels: cells, legend bar and (for Node) labels in the built-in bitmap font.
// One decision to know: `paintHeatmap` draws everything except text, so the browser canvas can call it
// and add text with real fonts, while `rasterizeHeatmap` (the PNG path) adds text with font.ts; both get
// the same pixels for every cell.

import type { Rgb } from './colormap.js';
import { glyphRows } from './font.js';
import {
  CHAR_WIDTH,
  cellColor,
  type HeatmapLayout,
  type HeatmapSpec,
  type HeatmapTheme,
  heatmapLayout,
  LIGHT_THEME,
  textCells,
} from './layout.js';
import { encodePng, type RgbaImage, type ZlibDeflate } from './png.js';

/** Length of a legend tick mark, from the bar's right edge (CSS px). */
export const LEGEND_TICK_LENGTH = 3;
/**
 * Where a legend tick's label starts, from the bar's right edge (CSS px). The gap after the tick mark is
 * wider than the font's space between a minus sign and a digit, so "0.5" never reads as "−0.5" (the tick
 * and the minus are the same bar on the same row).
 */
export const LEGEND_LABEL_OFFSET = 8;

/** Options of {@link rasterizeHeatmap} and {@link renderHeatmapPng}. */
export interface RasterOptions {
  /** Device pixels per CSS pixel (a positive integer); default 2 for crisp exports. */
  pixelRatio?: number;
  theme?: HeatmapTheme;
}

function fillRect(img: RgbaImage, x: number, y: number, w: number, h: number, c: Rgb): void {
  const x0 = Math.max(0, Math.round(x));
  const y0 = Math.max(0, Math.round(y));
  const x1 = Math.min(img.width, Math.round(x + w));
  const y1 = Math.min(img.height, Math.round(y + h));
  const { data, width } = img;
  for (let yy = y0; yy < y1; yy++) {
    let p = (yy * width + x0) * 4;
    for (let xx = x0; xx < x1; xx++, p += 4) {
      data[p] = c[0];
      data[p + 1] = c[1];
      data[p + 2] = c[2];
      data[p + 3] = 255;
    }
  }
}

/** A blank image of `layout`'s size times `ratio`. */
export function createImage(layout: HeatmapLayout, ratio: number): RgbaImage {
  const width = layout.width * ratio;
  const height = layout.height * ratio;
  return { width, height, data: new Uint8ClampedArray(width * height * 4) };
}

/** Paints background, cells, legend bar and masked swatch (no text) into `img` at `ratio`. */
export function paintHeatmap(
  spec: HeatmapSpec,
  layout: HeatmapLayout,
  img: RgbaImage,
  ratio: number,
  theme: HeatmapTheme = LIGHT_THEME,
): void {
  fillRect(img, 0, 0, img.width, img.height, theme.background);
  const { cellWidth, cellHeight, gridX, gridY, range, scale } = layout;
  const sw = cellWidth * ratio;
  const sh = cellHeight * ratio;
  for (let i = 0; i < spec.rows; i++) {
    for (let j = 0; j < spec.cols; j++) {
      const c = cellColor(spec.values[i * spec.cols + j], scale, range, theme);
      fillRect(img, gridX * ratio + j * sw, gridY * ratio + i * sh, sw, sh, c);
    }
  }
  const { legend } = layout;
  const top = legend.y * ratio;
  const h = legend.height * ratio;
  for (let y = 0; y < h; y++) {
    const t = 1 - y / Math.max(1, h - 1); // top = high end
    const v = range[0] + (range[1] - range[0]) * t;
    fillRect(img, legend.x * ratio, top + y, legend.width * ratio, 1, cellColor(v, scale, range, theme));
  }
  for (const tick of legend.ticks) {
    fillRect(
      img,
      (legend.x + legend.width) * ratio,
      tick.y * ratio - ratio / 2,
      LEGEND_TICK_LENGTH * ratio,
      ratio,
      theme.foreground,
    );
  }
  if (layout.hasMasked) {
    const sw = layout.maskedSwatch;
    fillRect(img, sw.x * ratio, sw.y * ratio, sw.size * ratio, sw.size * ratio, theme.masked);
  }
}

/**
 * Draws `text` in the bitmap font. (x, y) is the left end of the text's vertical middle in CSS px;
 * `rotated` draws it reading bottom-to-top starting at (x, y), as column labels are.
 */
function drawText(
  img: RgbaImage,
  text: string,
  x: number,
  y: number,
  ratio: number,
  c: Rgb,
  rotated = false,
): void {
  let offset = 0;
  for (const ch of text) {
    const wide = textCells(ch) === 2;
    const rows = glyphRows(ch);
    const scaleX = wide ? 2 : 1; // a wide character's box spans two cells
    for (let gy = 0; gy < 7; gy++) {
      for (let gx = 0; gx < 5; gx++) {
        if (!(rows[gy] & (0x10 >> gx))) continue;
        const tx = offset + 1 + gx * scaleX; // along the text (CSS px)
        const ty = gy - 3.5; // across the text, from its middle
        if (rotated) fillRect(img, (x + ty) * ratio, (y - tx - scaleX) * ratio, ratio, ratio * scaleX, c);
        else fillRect(img, (x + tx) * ratio, (y + ty) * ratio, ratio * scaleX, ratio, c);
      }
    }
    offset += CHAR_WIDTH * (wide ? 2 : 1);
  }
}

/** Draws the title, row and column labels, tick labels and the masked note with the bitmap font. */
export function drawBitmapLabels(
  spec: HeatmapSpec,
  layout: HeatmapLayout,
  img: RgbaImage,
  ratio: number,
  theme: HeatmapTheme = LIGHT_THEME,
): void {
  const fg = theme.foreground;
  if (spec.title) drawText(img, spec.title, 8, layout.titleY - 4, ratio, fg);
  const { cellWidth, cellHeight, gridX, gridY } = layout;
  layout.rowLabels.forEach((label, i) => {
    if (i % layout.rowLabelStride !== 0) return;
    const w = textCells(label) * CHAR_WIDTH;
    drawText(img, label, gridX - 4 - w, gridY + (i + 0.5) * cellHeight, ratio, fg);
  });
  layout.colLabels.forEach((label, j) => {
    if (j % layout.colLabelStride !== 0) return;
    drawText(img, label, gridX + (j + 0.5) * cellWidth, gridY - 4, ratio, fg, true);
  });
  for (const tick of layout.legend.ticks) {
    drawText(img, tick.text, layout.legend.x + layout.legend.width + LEGEND_LABEL_OFFSET, tick.y, ratio, fg);
  }
  if (layout.hasMasked) {
    const sw = layout.maskedSwatch;
    drawText(img, sw.text, sw.x + sw.size + 5, sw.y + sw.size / 2, ratio, fg);
  }
}

/** The whole heatmap as RGBA pixels: `heatmapLayout(spec)` size times `pixelRatio` (default 2). */
export function rasterizeHeatmap(spec: HeatmapSpec, options: RasterOptions = {}): RgbaImage {
  const ratio = options.pixelRatio ?? 2;
  if (!Number.isSafeInteger(ratio) || ratio < 1 || ratio > 8) {
    throw new RangeError(`rasterizeHeatmap: pixelRatio must be an integer from 1 to 8, got ${ratio}`);
  }
  const theme = options.theme ?? LIGHT_THEME;
  const layout = heatmapLayout(spec);
  const img = createImage(layout, ratio);
  paintHeatmap(spec, layout, img, ratio, theme);
  drawBitmapLabels(spec, layout, img, ratio, theme);
  return img;
}

/** The heatmap as PNG bytes: `heatmapLayout(spec)` size × `pixelRatio` (default 2), bitmap-font labels. */
export function renderHeatmapPng(
  spec: HeatmapSpec,
  options: RasterOptions & { deflate?: ZlibDeflate } = {},
): Uint8Array {
  return encodePng(rasterizeHeatmap(spec, options), { deflate: options.deflate });
}
