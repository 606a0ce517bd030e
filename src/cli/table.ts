// Prints an attention matrix as a labelled table with row sums; in a terminal the cells become an ANSI
// heatmap (24-bit background colours). One decision to know: numbers are always printed, colour only
// adds to them, so piped output and screen readers lose nothing.

import { colorAt, textColorOn } from '../viz/colormap.js';

export interface TableOptions {
  /** Colour the cells (stdout is a terminal and NO_COLOR is unset). */
  color: boolean;
  digits?: number;
}

/** Formats weights [L, S] (row-major in `data`) with query labels down and key labels across. */
export function formatAttentionTable(
  data: ArrayLike<number>,
  rowLabels: readonly string[],
  colLabels: readonly string[],
  { color, digits = 3 }: TableOptions,
): string {
  const L = rowLabels.length;
  const S = colLabels.length;
  const cellWidth = Math.max(digits + 3, ...colLabels.map((c) => c.length)) + 1;
  const labelWidth = Math.max(5, ...rowLabels.map((r) => r.length)) + 2;
  const lines: string[] = [];
  lines.push(
    `${' '.repeat(labelWidth)}${colLabels.map((c) => c.padStart(cellWidth)).join('')}${'sum'.padStart(9)}`,
  );
  for (let i = 0; i < L; i++) {
    let line = `  ${rowLabels[i].padEnd(labelWidth - 2)}`;
    let sum = 0;
    for (let j = 0; j < S; j++) {
      const w = data[i * S + j];
      sum += w;
      const text = w.toFixed(digits).padStart(cellWidth);
      if (color) {
        const bg = colorAt(w);
        const fg = textColorOn(bg);
        line += `\x1b[48;2;${bg.join(';')}m\x1b[38;2;${fg.join(';')}m${text}\x1b[0m`;
      } else {
        line += text;
      }
    }
    line += sum.toFixed(4).padStart(9);
    lines.push(line);
  }
  if (color) {
    const ramp = Array.from(
      { length: 11 },
      (_, k) => `\x1b[48;2;${colorAt(k / 10).join(';')}m  \x1b[0m`,
    ).join('');
    lines.push(`${' '.repeat(labelWidth)}0 ${ramp} 1`);
  }
  return lines.join('\n');
}
