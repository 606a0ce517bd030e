// The head view (after bertviz): query tokens on the left, key tokens on the right, a line from query i
// to key j with opacity = weight, one colour per head. One decision to know: it draws on a canvas, and
// skips lines below 0.5 % weight and strokes one path per opacity level (256 levels), so 512 tokens ×
// several heads stays interactive.

import type { HeatmapTheme } from 'qkv/viz';

export const HEAD_COLORS = [
  '#1f77b4',
  '#e4572e',
  '#2ca02c',
  '#9467bd',
  '#d4a017',
  '#17becf',
  '#e377c2',
  '#8c564b',
  '#7f7f7f',
  '#bcbd22',
  '#3b5bdb',
  '#c2255c',
];

export function headColor(h: number): string {
  return HEAD_COLORS[h % HEAD_COLORS.length];
}

const MAX_LINES = 20_000;
const TOP = 26;

export interface HeadViewState {
  tokens: string[];
  /** This layer's weights [H·L·L]. */
  weights: Float32Array;
  heads: number;
  selected: boolean[];
  /** −1 = all queries. */
  query: number;
}

/** Draws the head view; returns how many lines it drew and the smallest weight drawn. */
export function drawHeadView(
  canvas: HTMLCanvasElement,
  s: HeadViewState,
  theme: HeatmapTheme,
): { lines: number; minWeight: number } {
  const L = s.tokens.length;
  const ROW = rowHeight(L);
  const width = 620;
  const height = TOP + L * ROW + 10;
  const ratio = Math.min(2, Math.max(1, Math.round(devicePixelRatio || 1)));
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext('2d')!;
  ctx.scale(ratio, ratio);
  const fg = `rgb(${theme.foreground.join(',')})`;
  ctx.fillStyle = `rgb(${theme.background.join(',')})`;
  ctx.fillRect(0, 0, width, height);
  const left = 200;
  const right = width - 200;
  ctx.font = '13px ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace';
  ctx.textBaseline = 'middle';
  ctx.fillStyle = fg;
  ctx.textAlign = 'right';
  ctx.fillText('queries', left - 8, 10);
  ctx.textAlign = 'left';
  ctx.fillText('keys', right + 8, 10);
  const y = (i: number) => TOP + (i + 0.5) * ROW;
  ctx.lineWidth = L <= 40 ? 3 : 1.5;
  // One path per (head, opacity level) instead of one stroke per line: 512 tokens × 12 heads is up to
  // 3M candidate lines, and a stroke call each would take seconds.
  const LEVELS = 256; // opacity steps of 1/256: fine enough to cut the line budget anywhere
  const levelOf = (w: number) => Math.min(LEVELS - 1, Math.floor(Math.min(1, w) * LEVELS));
  // Past MAX_LINES the faintest levels are dropped (software rasterising 10⁵ anti-aliased lines takes
  // seconds, and lines at 1 % opacity are invisible anyway); the caption says how many were drawn.
  const counts = new Array<number>(LEVELS).fill(0);
  const shown = (h: number, i: number) => s.selected[h] && (s.query < 0 || i === s.query);
  for (let h = 0; h < s.heads; h++) {
    for (let i = 0; i < L; i++) {
      if (!shown(h, i)) continue;
      for (let j = 0; j < L; j++) {
        const w = s.weights[(h * L + i) * L + j];
        if (w >= 0.005) counts[levelOf(w)]++;
      }
    }
  }
  let minLevel = 0;
  for (let level = LEVELS - 1, total = 0; level >= 0; level--) {
    total += counts[level];
    if (total > MAX_LINES) {
      minLevel = level + 1;
      break;
    }
  }
  let drawn = 0;
  for (let h = 0; h < s.heads; h++) {
    if (!s.selected[h]) continue;
    ctx.strokeStyle = headColor(h);
    // Heads that agree would draw the same line; a small vertical offset per head keeps each colour visible.
    const spread = (h - (s.heads - 1) / 2) * Math.min(3, ROW / (2 * s.heads));
    const paths = Array.from({ length: LEVELS }, () => new Path2D());
    const used = new Uint8Array(LEVELS);
    for (let i = 0; i < L; i++) {
      if (!shown(h, i)) continue;
      for (let j = 0; j < L; j++) {
        const w = s.weights[(h * L + i) * L + j];
        if (!(w >= 0.005)) continue;
        const level = levelOf(w);
        if (level < minLevel) continue;
        paths[level].moveTo(left, y(i) + spread);
        paths[level].lineTo(right, y(j) + spread);
        used[level] = 1;
        drawn++;
      }
    }
    for (let level = 0; level < LEVELS; level++) {
      if (!used[level]) continue;
      ctx.globalAlpha = (level + 0.5) / LEVELS;
      ctx.stroke(paths[level]);
    }
  }
  ctx.globalAlpha = 1;
  s.tokens.forEach((t, i) => {
    ctx.fillStyle = fg;
    ctx.globalAlpha = s.query >= 0 && s.query !== i ? 0.45 : 1;
    ctx.textAlign = 'right';
    ctx.fillText(t, left - 8, y(i));
    ctx.globalAlpha = 1;
    ctx.textAlign = 'left';
    ctx.fillText(t, right + 8, y(i));
  });
  return { lines: drawn, minWeight: Math.max(0.005, minLevel / LEVELS) };
}

/** Row pitch: roomy for a sentence, compact for long inputs. */
function rowHeight(L: number): number {
  return L <= 40 ? 26 : 18;
}

/** The query row under y (CSS px), or −1. */
export function queryAt(y: number, L: number): number {
  const i = Math.floor((y - TOP) / rowHeight(L));
  return i >= 0 && i < L ? i : -1;
}
