// Heatmap → a standalone SVG document (text stays text: selectable, searchable, sharp at any zoom).
// One decision to know: up to 128×128 cells each cell is a <rect> with its exact value in a <title>
// tooltip; bigger grids embed the cells as one PNG <image> (a 512×512 grid as rects would be ~20 MB).

import type { Rgb } from './colormap.js';
import {
  cellColor,
  formatExact,
  type HeatmapSpec,
  type HeatmapTheme,
  heatmapLayout,
  LIGHT_THEME,
} from './layout.js';
import { encodePng, type ZlibDeflate } from './png.js';
import { createImage, LEGEND_LABEL_OFFSET, LEGEND_TICK_LENGTH, paintHeatmap } from './raster.js';

/** Options of {@link renderHeatmapSvg}. */
export interface SvgOptions {
  /** Colours of the background, text and masked cells; default {@link LIGHT_THEME}. */
  theme?: HeatmapTheme;
  /** Compressor for the embedded PNG of large grids (node:zlib's deflateSync in Node). */
  deflate?: ZlibDeflate;
  /** Above this many cells the grid is one embedded PNG instead of rects; default 16384. */
  maxRects?: number;
}

const hex = (c: Rgb) => `#${c.map((x) => x.toString(16).padStart(2, '0')).join('')}`;

/** Escapes text for SVG content and attribute values. */
export function escapeXml(text: string): string {
  return text.replace(
    /[<>&'"]/g,
    (ch) => `&${{ '<': 'lt', '>': 'gt', '&': 'amp', "'": 'apos', '"': 'quot' }[ch]};`,
  );
}

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

/** Base64 of bytes (RFC 4648, padded), without Buffer or btoa. */
export function base64(bytes: Uint8Array): string {
  const out: string[] = [];
  for (let i = 0; i < bytes.length; i += 3) {
    const n = (bytes[i] << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0);
    out.push(
      B64[(n >>> 18) & 63],
      B64[(n >>> 12) & 63],
      i + 1 < bytes.length ? B64[(n >>> 6) & 63] : '=',
      i + 2 < bytes.length ? B64[n & 63] : '=',
    );
  }
  return out.join('');
}

/** Renders a heatmap as an SVG document string; its width and height equal `heatmapLayout(spec)`'s. */
export function renderHeatmapSvg(spec: HeatmapSpec, options: SvgOptions = {}): string {
  const theme = options.theme ?? LIGHT_THEME;
  const L = heatmapLayout(spec);
  const fg = hex(theme.foreground);
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${L.width}" height="${L.height}" viewBox="0 0 ${L.width} ${L.height}" font-family="ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace" font-size="12">`,
    `<rect width="100%" height="100%" fill="${hex(theme.background)}"/>`,
  ];
  if (spec.title)
    out.push(`<text x="8" y="${L.titleY}" fill="${fg}" font-weight="bold">${escapeXml(spec.title)}</text>`);

  const { cellWidth: cw, cellHeight: ch, gridX, gridY } = L;
  if (spec.rows * spec.cols <= (options.maxRects ?? 16384)) {
    out.push('<g shape-rendering="crispEdges">');
    for (let i = 0; i < spec.rows; i++) {
      for (let j = 0; j < spec.cols; j++) {
        const v = spec.values[i * spec.cols + j];
        const c = hex(cellColor(v, L.scale, L.range, theme));
        const label = `${L.rowLabels[i]} → ${L.colLabels[j]}: ${formatExact(v)}`;
        out.push(
          `<rect x="${gridX + j * cw}" y="${gridY + i * ch}" width="${cw}" height="${ch}" fill="${c}"><title>${escapeXml(label)}</title></rect>`,
        );
      }
    }
    out.push('</g>');
  } else {
    // Only the grid goes in the image: paint at ratio 1 and crop the grid out of the full raster.
    const full = createImage(L, 1);
    paintHeatmap(spec, L, full, 1, theme);
    const grid = createImage({ ...L, width: L.gridWidth, height: L.gridHeight }, 1);
    for (let y = 0; y < L.gridHeight; y++) {
      const from = ((gridY + y) * full.width + gridX) * 4;
      grid.data.set(full.data.subarray(from, from + L.gridWidth * 4), y * L.gridWidth * 4);
    }
    const png = encodePng(grid, { deflate: options.deflate });
    out.push(
      `<image x="${gridX}" y="${gridY}" width="${L.gridWidth}" height="${L.gridHeight}" style="image-rendering:pixelated" href="data:image/png;base64,${base64(png)}"/>`,
    );
  }

  out.push(`<g fill="${fg}">`);
  L.rowLabels.forEach((label, i) => {
    if (i % L.rowLabelStride !== 0) return;
    out.push(
      `<text x="${gridX - 4}" y="${gridY + (i + 0.5) * ch}" text-anchor="end" dominant-baseline="central">${escapeXml(label)}</text>`,
    );
  });
  L.colLabels.forEach((label, j) => {
    if (j % L.colLabelStride !== 0) return;
    const x = gridX + (j + 0.5) * cw;
    out.push(
      `<text transform="translate(${x} ${gridY - 4}) rotate(-90)" dominant-baseline="central">${escapeXml(label)}</text>`,
    );
  });
  out.push('</g>');

  // Legend: a vertical gradient, top = high end of the range.
  const { legend } = L;
  const stops: string[] = [];
  for (let s = 0; s <= 10; s++) {
    const v = L.range[1] - ((L.range[1] - L.range[0]) * s) / 10;
    stops.push(`<stop offset="${s / 10}" stop-color="${hex(cellColor(v, L.scale, L.range, theme))}"/>`);
  }
  out.push(
    `<defs><linearGradient id="qkv-legend" x1="0" y1="0" x2="0" y2="1">${stops.join('')}</linearGradient></defs>`,
    `<rect x="${legend.x}" y="${legend.y}" width="${legend.width}" height="${legend.height}" fill="url(#qkv-legend)"/>`,
  );
  // A gap between tick mark and label, so the mark does not read as a minus sign (raster.ts).
  const right = legend.x + legend.width;
  for (const t of legend.ticks) {
    out.push(
      `<line x1="${right}" x2="${right + LEGEND_TICK_LENGTH}" y1="${t.y}" y2="${t.y}" stroke="${fg}"/>`,
      `<text x="${right + LEGEND_LABEL_OFFSET}" y="${t.y}" dominant-baseline="central" fill="${fg}">${escapeXml(t.text)}</text>`,
    );
  }
  if (L.hasMasked) {
    const sw = L.maskedSwatch;
    out.push(
      `<rect x="${sw.x}" y="${sw.y}" width="${sw.size}" height="${sw.size}" fill="${hex(theme.masked)}"/>`,
      `<text x="${sw.x + sw.size + 5}" y="${sw.y + sw.size / 2}" dominant-baseline="central" fill="${fg}">${escapeXml(sw.text)}</text>`,
    );
  }
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
