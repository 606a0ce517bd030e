// A small, self-contained SVG line plot for loss curves (no dependencies; the CLI writes it to a file, the
// page can inline it). One decision to know: long series are reduced to at most `maxPoints` bucket means
// before drawing, so a 10 000-step run still gives a small file with the same shape.

/** One curve. */
export interface PlotSeries {
  label: string;
  /** y values at x = 1, 2, 3, … (training steps). */
  values: readonly number[];
  /** CSS colour; a palette colour by default. */
  color?: string;
}

/** Options of lineChartSvg. */
export interface PlotOptions {
  title: string;
  xLabel?: string;
  yLabel?: string;
  width?: number;
  height?: number;
  /** Logarithmic y axis (values must be > 0). Default false. */
  logY?: boolean;
  maxPoints?: number;
}

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd'];

function escapeXml(s: string): string {
  return s.replace(/[<>&"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Round tick values covering [lo, hi]: 1, 2 or 5 × 10ᵏ steps, about `count` of them. */
function niceTicks(lo: number, hi: number, count = 5): number[] {
  const span = hi - lo || Math.abs(hi) || 1;
  const raw = span / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const ticks: number[] = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

/**
 * Ticks of a log axis over [lo, hi] (log10 units) whose labels are `pixels` apart per unit: the richest of
 * 1‥9 × 10ᵏ, 1, 2, 5 × 10ᵏ and 10ᵏ whose neighbouring labels are at least `minGap` px apart, else every
 * few decades. Values are returned as numbers (0.2, not its log).
 */
function logTicks(lo: number, hi: number, pixels: number, minGap = 16): number[] {
  const inRange = (v: number) => Math.log10(v) >= lo - 1e-9 && Math.log10(v) <= hi + 1e-9;
  for (const mantissas of [[1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 5], [1]]) {
    const ticks: number[] = [];
    for (let k = Math.floor(lo); k <= Math.ceil(hi); k++) {
      for (const m of mantissas) {
        const v = Number((m * 10 ** k).toPrecision(12));
        if (inRange(v)) ticks.push(v);
      }
    }
    const gaps = ticks.slice(1).map((v, i) => (Math.log10(v) - Math.log10(ticks[i])) * pixels);
    if (ticks.length >= 2 && Math.min(...gaps) >= minGap) return ticks;
  }
  // Decades too close (or a range too short for two ticks): round decade steps, as on a linear axis.
  const decades = niceTicks(
    Math.floor(lo),
    Math.ceil(hi),
    Math.max(1, Math.floor((hi - lo) * (pixels / minGap))),
  )
    .filter((t) => Number.isInteger(t) && t >= lo - 1e-9 && t <= hi + 1e-9)
    .map((t) => 10 ** t);
  if (decades.length >= 2) return decades;
  // Less than a decade between two 1‥9 × 10ᵏ: round values, as on a linear axis.
  return niceTicks(10 ** lo, 10 ** hi, 3).filter(inRange);
}

function fmtTick(x: number): string {
  if (x === 0) return '0';
  if (Math.abs(x) >= 1e4 || Math.abs(x) < 1e-3) return x.toExponential(0);
  return String(Number(x.toPrecision(4)));
}

/** Bucket means: at most maxPoints [x, y] pairs, x the bucket's mean step. */
function reduce(values: readonly number[], maxPoints: number): [number, number][] {
  const per = Math.max(1, Math.ceil(values.length / maxPoints));
  const out: [number, number][] = [];
  for (let i = 0; i < values.length; i += per) {
    let sx = 0;
    let sy = 0;
    let n = 0;
    for (let j = i; j < Math.min(values.length, i + per); j++) {
      if (!Number.isFinite(values[j])) continue;
      sx += j + 1;
      sy += values[j];
      n++;
    }
    if (n) out.push([sx / n, sy / n]);
  }
  return out;
}

/** An SVG document (a string) plotting each series against its step index, with axes, ticks and a legend. */
export function lineChartSvg(series: readonly PlotSeries[], options: PlotOptions): string {
  const {
    title,
    xLabel = 'step',
    yLabel = 'loss',
    width = 640,
    height = 360,
    logY = false,
    maxPoints = 400,
  } = options;
  const m = { left: 64, right: 16, top: 36, bottom: 48 };
  const pw = width - m.left - m.right;
  const ph = height - m.top - m.bottom;
  const curves = series.map((s) => reduce(s.values, maxPoints));
  const fy = (y: number) => (logY ? Math.log10(Math.max(y, 1e-12)) : y);
  let xMax = 1;
  let yLo = Number.POSITIVE_INFINITY;
  let yHi = Number.NEGATIVE_INFINITY;
  for (const c of curves)
    for (const [x, y] of c) {
      xMax = Math.max(xMax, x);
      yLo = Math.min(yLo, fy(y));
      yHi = Math.max(yHi, fy(y));
    }
  if (!Number.isFinite(yLo)) [yLo, yHi] = [0, 1];
  if (!logY) yLo = Math.min(0, yLo);
  if (yHi === yLo) yHi = yLo + 1;
  const X = (x: number) => m.left + (pw * (x - 1)) / Math.max(1, xMax - 1);
  const Y = (v: number) => m.top + ph * (1 - (v - yLo) / (yHi - yLo));

  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<title>${escapeXml(title)}</title>`, // the accessible name of the image
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${width / 2}" y="20" text-anchor="middle" font-size="14">${escapeXml(title)}</text>`,
  ];
  // Tick values (not their logs): on a log axis 1, 2, 5 × 10ᵏ (or more, or fewer) as the height allows.
  const yTicks = logY
    ? logTicks(yLo, yHi, ph / (yHi - yLo))
    : niceTicks(yLo, yHi).filter((t) => t >= yLo - 1e-9 && t <= yHi + 1e-9);
  for (const t of yTicks) {
    const y = Y(fy(t)).toFixed(1);
    parts.push(`<line x1="${m.left}" x2="${m.left + pw}" y1="${y}" y2="${y}" stroke="#e5e5e5"/>`);
    parts.push(
      `<text x="${m.left - 6}" y="${y}" text-anchor="end" dominant-baseline="middle">${fmtTick(t)}</text>`,
    );
  }
  for (const t of niceTicks(1, xMax).filter((t) => t >= 1 && t <= xMax)) {
    const x = X(t).toFixed(1);
    parts.push(`<line x1="${x}" x2="${x}" y1="${m.top + ph}" y2="${m.top + ph + 4}" stroke="#333"/>`);
    parts.push(`<text x="${x}" y="${m.top + ph + 18}" text-anchor="middle">${fmtTick(t)}</text>`);
  }
  parts.push(`<rect x="${m.left}" y="${m.top}" width="${pw}" height="${ph}" fill="none" stroke="#333"/>`);
  parts.push(
    `<text x="${m.left + pw / 2}" y="${height - 8}" text-anchor="middle">${escapeXml(xLabel)}</text>`,
  );
  parts.push(
    `<text x="16" y="${m.top + ph / 2}" text-anchor="middle" transform="rotate(-90 16 ${m.top + ph / 2})">${escapeXml(yLabel)}${logY ? ' (log)' : ''}</text>`,
  );
  curves.forEach((c, n) => {
    const color = series[n].color ?? PALETTE[n % PALETTE.length];
    const d = c.map(([x, y], i) => `${i ? 'L' : 'M'}${X(x).toFixed(1)},${Y(fy(y)).toFixed(1)}`).join('');
    if (d) parts.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="1.5"/>`);
    const ly = m.top + 14 + 16 * n;
    parts.push(
      `<line x1="${m.left + pw - 170}" x2="${m.left + pw - 150}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"/>`,
    );
    parts.push(
      `<text x="${m.left + pw - 145}" y="${ly}" dominant-baseline="middle">${escapeXml(series[n].label)}</text>`,
    );
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
