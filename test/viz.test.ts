// Shared rendering (src/viz): colour scales, layout sizes and labels, SVG and PNG output, tokens, and
// the experiment numbers. PNG pixels are decoded here with node:zlib, so the encoder is checked by an
// independent inflater, not by itself.

import { deflateSync, inflateSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { lineChartSvg } from '../src/train/plot.js';
import { glyphRows, hasGlyph } from '../src/viz/font.js';
import {
  articleScalingExample,
  colorAt,
  DARK_THEME,
  divergingColorAt,
  encodePng,
  formatBytes,
  formatExact,
  type HeatmapSpec,
  heatmapLayout,
  LIGHT_THEME,
  rasterizeHeatmap,
  readPngSize,
  renderHeatmapPng,
  renderHeatmapSvg,
  saturationAt,
  scoreMatrixBytes,
  softmaxStats,
  tiledKernelBytes,
  tokenize,
} from '../src/viz/index.js';
import { cellColor, fitLabel, textCells } from '../src/viz/layout.js';

/** Decodes an 8-bit RGBA, filter-0 PNG (what encodePng writes) back to pixels. */
function decodePng(bytes: Uint8Array): { width: number; height: number; data: Uint8Array } {
  const { width, height } = readPngSize(bytes);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const idat: Uint8Array[] = [];
  for (let o = 8; o < bytes.length; ) {
    const len = view.getUint32(o);
    const type = String.fromCharCode(...bytes.subarray(o + 4, o + 8));
    if (type === 'IDAT') idat.push(bytes.subarray(o + 8, o + 8 + len));
    o += 12 + len;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const data = new Uint8Array(width * height * 4);
  for (let y = 0; y < height; y++) {
    expect(raw[y * (width * 4 + 1)]).toBe(0); // filter type None
    data.set(raw.subarray(y * (width * 4 + 1) + 1, (y + 1) * (width * 4 + 1)), y * width * 4);
  }
  return { width, height, data };
}

const luminance = ([r, g, b]: readonly number[]) => 0.2126 * r + 0.7152 * g + 0.0722 * b;

const spec3: HeatmapSpec = {
  values: [0.5, 0.25, 0.25, 0, 1, 0, 0.1, 0.2, 0.7],
  rows: 3,
  cols: 3,
  rowLabels: ['the', 'cat', 'sat'],
  colLabels: ['the', 'cat', 'sat'],
  title: 'softmax',
};

describe('colour scales', () => {
  it('the sequential scale runs dark → bright, monotonically, and clamps; NaN is grey', () => {
    let prev = -1;
    for (let t = 0; t <= 1.0001; t += 0.05) {
      const l = luminance(colorAt(t));
      expect(l).toBeGreaterThan(prev);
      prev = l;
    }
    expect(colorAt(-3)).toEqual(colorAt(0));
    expect(colorAt(7)).toEqual(colorAt(1));
    expect(colorAt(Number.NaN)).toEqual([128, 128, 128]);
  });

  it('the diverging scale is near-white at 0, blue below, red above, symmetric in strength', () => {
    expect(Math.min(...divergingColorAt(0))).toBeGreaterThan(240);
    const [r1, , b1] = divergingColorAt(-1);
    const [r2, , b2] = divergingColorAt(1);
    expect(b1).toBeGreaterThan(r1);
    expect(r2).toBeGreaterThan(b2);
    expect(luminance(divergingColorAt(-0.5))).toBeLessThan(luminance(divergingColorAt(-0.2)));
  });

  it('±Infinity cells take the theme’s masked colour', () => {
    expect(cellColor(Number.NEGATIVE_INFINITY, 'diverging', [-1, 1], LIGHT_THEME)).toEqual(
      LIGHT_THEME.masked,
    );
    expect(cellColor(Number.NEGATIVE_INFINITY, 'sequential', [0, 1], DARK_THEME)).toEqual(DARK_THEME.masked);
  });
});

describe('heatmapLayout', () => {
  it('fits cells to about 480 px: 36 px for 4 tokens, 1 px for 512, labels thinned so they never overlap', () => {
    const small = heatmapLayout({ values: new Float32Array(16), rows: 4, cols: 4 });
    expect([small.cellWidth, small.cellHeight]).toEqual([36, 36]);
    expect(small.rowLabelStride).toBe(1);
    const big = heatmapLayout({ values: new Float32Array(512 * 512), rows: 512, cols: 512 });
    expect([big.cellWidth, big.cellHeight]).toEqual([1, 1]);
    expect(big.gridWidth).toBe(512);
    expect(big.rowLabelStride).toBe(14); // one label per 14 px line
    for (const L of [small, big]) {
      expect(L.gridX + L.gridWidth).toBeLessThan(L.width);
      expect(L.gridY + L.gridHeight).toBeLessThanOrEqual(L.height);
      expect(L.legend.x + L.legend.width).toBeLessThan(L.width);
    }
  });

  it('gives a wide [L, D] matrix cells tall enough for one token label per row', () => {
    const wide = heatmapLayout({ values: new Float32Array(7 * 64), rows: 7, cols: 64 });
    expect([wide.cellWidth, wide.cellHeight]).toEqual([7, 16]);
    expect(wide.rowLabelStride).toBe(1); // every token labelled
    expect(wide.colLabelStride).toBe(2);
    const tall = heatmapLayout({ values: new Float32Array(512 * 16), rows: 512, cols: 16 });
    expect([tall.cellWidth, tall.cellHeight]).toEqual([16, 1]);
    expect(heatmapLayout({ ...spec3, cellSize: 5 }).cellHeight).toBe(5);
  });

  it('cuts long labels to 12 cells with an ellipsis and counts CJK characters as two cells', () => {
    expect(fitLabel('internationalisation')).toBe('internation…');
    expect(textCells(fitLabel('internationalisation'))).toBe(12);
    expect(textCells('注意力')).toBe(6);
    const L = heatmapLayout({ ...spec3, rowLabels: ['a', 'bb', 'a-very-long-token-indeed'] });
    expect(L.rowLabels[2]).toBe('a-very-long…');
  });

  it('grows the left margin with the longest row label', () => {
    const short = heatmapLayout({ ...spec3, rowLabels: ['a', 'b', 'c'] });
    const long = heatmapLayout({ ...spec3, rowLabels: ['a', 'b', 'abcdefghij'] });
    expect(long.gridX - short.gridX).toBe(9 * 7);
  });

  it('names the function and the sizes on a bad spec', () => {
    expect(() => heatmapLayout({ values: [1, 2, 3], rows: 2, cols: 2 })).toThrow(
      'heatmapLayout: values has 3 elements but rows × cols = 2 × 2 = 4',
    );
    expect(() => heatmapLayout({ ...spec3, rowLabels: ['a'] })).toThrow(
      'heatmapLayout: rowLabels has 1 labels but rows = 3',
    );
    expect(() => heatmapLayout({ ...spec3, range: [1, 0] })).toThrow('range must be [lo, hi] with lo < hi');
  });

  it('prints values exactly enough to round-trip a float32', () => {
    const v = Math.fround(0.1234567);
    expect(Math.fround(Number(formatExact(v)))).toBe(v);
    expect(formatExact(-0.5)).toBe('−0.5');
    expect(formatExact(Number.NEGATIVE_INFINITY)).toBe('−∞');
  });
});

describe('renderHeatmapSvg', () => {
  it('writes one rect per cell with its exact value, escaped labels, and the layout size', () => {
    const svg = renderHeatmapSvg({ ...spec3, rowLabels: ['<b>', 'a&b', 'it'] });
    const L = heatmapLayout(spec3);
    expect(
      svg.startsWith(`<svg xmlns="http://www.w3.org/2000/svg" width="${L.width}" height="${L.height}"`),
    ).toBe(true);
    expect(svg.match(/<rect x=/g)).toHaveLength(9 + 1); // 9 cells + the legend bar
    expect(svg).toContain('&lt;b&gt;');
    expect(svg).toContain('a&amp;b');
    expect(svg).not.toContain('<b>');
    expect(svg).toContain('<title>a&amp;b → cat: 1</title>');
    expect(svg).toContain(
      `fill="#${colorAt(1)
        .map((c) => c.toString(16).padStart(2, '0'))
        .join('')}"`,
    );
    expect(svg.trim().endsWith('</svg>')).toBe(true);
  });

  it('shows masked (−∞) cells in the legend, and embeds big grids as one PNG image', () => {
    const masked = renderHeatmapSvg({
      values: [1, Number.NEGATIVE_INFINITY, 0, 2],
      rows: 2,
      cols: 2,
      scale: 'diverging',
    });
    expect(masked).toContain('−∞ masked');
    const n = 200;
    const big = renderHeatmapSvg(
      { values: new Float32Array(n * n).fill(0.5), rows: n, cols: n },
      { deflate: deflateSync },
    );
    expect(big).toContain('<image');
    expect(big).toContain('href="data:image/png;base64,');
    expect(big.length).toBeLessThan(200_000);
  });
});

describe('PNG', () => {
  it('encodePng round-trips pixels through zlib, stored and deflated', () => {
    const img = { width: 3, height: 2, data: new Uint8ClampedArray(24).map((_, i) => (i * 37) % 256) };
    for (const deflate of [undefined, deflateSync]) {
      const png = encodePng(img, { deflate });
      const back = decodePng(png);
      expect(back.width).toBe(3);
      expect(back.height).toBe(2);
      expect([...back.data]).toEqual([...img.data]);
    }
  });

  it('stored blocks split at 65535 bytes and still decode', () => {
    const img = { width: 200, height: 100, data: new Uint8ClampedArray(200 * 100 * 4).fill(200) };
    expect(decodePng(encodePng(img)).data.every((v) => v === 200)).toBe(true);
  });

  it('readPngSize rejects what is not a PNG', () => {
    expect(() => readPngSize(new Uint8Array(40))).toThrow('readPngSize: not a PNG');
    const png = encodePng({ width: 1, height: 1, data: new Uint8ClampedArray(4) });
    png[20] ^= 1; // corrupt the height
    expect(() => readPngSize(png)).toThrow('IHDR CRC mismatch');
  });

  it('rasterizeHeatmap is the layout size × pixelRatio, paints each cell its colour, and draws labels', () => {
    const L = heatmapLayout(spec3);
    const img = rasterizeHeatmap(spec3, { pixelRatio: 2 });
    expect([img.width, img.height]).toEqual([L.width * 2, L.height * 2]);
    const px = (x: number, y: number) => [
      ...img.data.subarray((y * img.width + x) * 4, (y * img.width + x) * 4 + 3),
    ];
    for (let i = 0; i < 3; i++) {
      for (let j = 0; j < 3; j++) {
        const cx = Math.floor((L.gridX + (j + 0.5) * L.cellWidth) * 2);
        const cy = Math.floor((L.gridY + (i + 0.5) * L.cellHeight) * 2);
        expect(px(cx, cy)).toEqual([...colorAt(spec3.values[i * 3 + j])]);
      }
    }
    // Some foreground (label) pixels left of the grid, on the first row's line.
    const y = Math.floor((L.gridY + 0.5 * L.cellHeight) * 2);
    let ink = 0;
    for (let x = 0; x < L.gridX * 2; x++) if (px(x, y).join() !== '255,255,255') ink++;
    expect(ink).toBeGreaterThan(2);
    const png = renderHeatmapPng(spec3, { pixelRatio: 1, deflate: deflateSync });
    expect(readPngSize(png)).toEqual({ width: L.width, height: L.height });
  });

  it('the bitmap font has every printable ASCII glyph and draws a box for others', () => {
    for (let c = 33; c < 127; c++) {
      expect(hasGlyph(String.fromCharCode(c))).toBe(true);
      expect(glyphRows(String.fromCharCode(c)).some((r) => r !== 0)).toBe(true);
    }
    expect(glyphRows(' ').every((r) => r === 0)).toBe(true);
    expect(hasGlyph('猫')).toBe(false);
    expect(glyphRows('猫')[0]).toBe(0x1f);
  });
});

describe('tokenize', () => {
  it('keeps contractions, splits punctuation and each CJK character', () => {
    expect(tokenize("The animal didn't cross the street, because it was too tired.")).toEqual([
      'The',
      'animal',
      "didn't",
      'cross',
      'the',
      'street',
      ',',
      'because',
      'it',
      'was',
      'too',
      'tired',
      '.',
    ]);
    expect(tokenize('猫追老鼠')).toEqual(['猫', '追', '老', '鼠']);
    expect(tokenize('  ')).toEqual([]);
  });
});

describe('experiment numbers', () => {
  it("§4.2: 0.99999999 unscaled, the article's formula gives 0.748 (it prints 0.768), all scaled 0.796", () => {
    const ex = articleScalingExample();
    expect(ex.unscaled.toFixed(8)).toBe('0.99999999');
    expect(ex.articleFormula.toFixed(3)).toBe('0.748');
    expect(ex.articlePrinted).toBe(0.768);
    expect(ex.allScaled.toFixed(3)).toBe('0.796');
  });

  it('Q3: 64 MiB per head at n = 4096 in fp32; a 64×64-tiled kernel needs 48 KiB', () => {
    expect(scoreMatrixBytes(4096)).toBe(64 * 2 ** 20);
    expect(formatBytes(scoreMatrixBytes(4096))).toBe('64 MiB');
    expect(scoreMatrixBytes(4096, 8, 2)).toBe(1024 * 2 ** 20);
    expect(tiledKernelBytes(4096)).toBe((64 * 64 + 2 * 4096) * 4);
    expect(formatBytes(tiledKernelBytes(4096))).toBe('48 KiB');
    expect(tiledKernelBytes(8192) - tiledKernelBytes(4096)).toBe(2 * 4096 * 4); // linear in n
  });

  it('softmaxStats: a uniform row has entropy log2 S, a one-hot row 0; all-zero rows are skipped', () => {
    const s = softmaxStats([0.25, 0.25, 0.25, 0.25, 1, 0, 0, 0, 0, 0, 0, 0], 4);
    expect(s.rows).toBe(2);
    expect(s.maxWeight).toBe(1);
    expect(s.meanMaxWeight).toBeCloseTo(0.625, 12);
    expect(s.meanEntropyBits).toBeCloseTo(1, 12);
    expect(s.uniformEntropyBits).toBe(2);
  });

  it('saturation: without ÷√d_k softmax saturates as d_k grows; with it, it does not', () => {
    const small = saturationAt(4, 16, 1);
    const large = saturationAt(512, 16, 1);
    expect(large.unscaled.meanMaxWeight).toBeGreaterThan(0.9);
    expect(large.unscaled.meanMaxWeight).toBeGreaterThan(small.unscaled.meanMaxWeight);
    expect(Math.abs(large.scaled.meanMaxWeight - small.scaled.meanMaxWeight)).toBeLessThan(0.15);
    expect(large.unscaled.meanEntropyBits).toBeLessThan(0.5);
    expect(large.scaled.meanEntropyBits).toBeGreaterThan(2);
  });
});

describe('legend ticks and loss-plot axes', () => {
  it('a PNG legend tick stands apart from its label, so "0.5" does not read as "−0.5"', () => {
    // Diverging scale over [-1, 1]: the ticks read 1, 0, −1 (the middle one is the case that misread).
    const spec: HeatmapSpec = {
      values: new Float32Array([-1, 0.5, 0, 1]),
      rows: 2,
      cols: 2,
      rowLabels: ['a', 'b'],
      colLabels: ['a', 'b'],
      scale: 'diverging',
    };
    const ratio = 2;
    const img = rasterizeHeatmap(spec, { pixelRatio: ratio });
    const L = heatmapLayout(spec);
    const ink = (x: number, y: number) => img.data[(y * img.width + x) * 4] < 128; // dark foreground
    for (const tick of L.legend.ticks) {
      const y = Math.round(tick.y * ratio - ratio / 2); // the tick mark's row (the glyphs' middle row)
      let x = (L.legend.x + L.legend.width) * ratio;
      const start = x;
      while (ink(x, y)) x++;
      const mark = x - start;
      while (!ink(x, y) && x < img.width) x++;
      const gap = x - start - mark;
      expect(mark, `tick ${tick.text}`).toBe(3 * ratio);
      // The font puts 2 px between a minus sign and a digit; the tick must be clearly farther.
      expect(gap, `gap after tick ${tick.text}`).toBeGreaterThanOrEqual(4 * ratio);
    }
  });

  it('the same gap in SVG: the label starts past the tick by more than the tick is long', () => {
    const spec: HeatmapSpec = {
      values: new Float32Array([0, 1]),
      rows: 1,
      cols: 2,
      rowLabels: ['a'],
      colLabels: ['a', 'b'],
    };
    const svg = renderHeatmapSvg(spec);
    const line = /<line x1="([\d.]+)" x2="([\d.]+)"/.exec(svg)!;
    const text = /<text x="([\d.]+)" y="[\d.]+" dominant-baseline="central"/.exec(svg)!;
    expect(Number(text[1]) - Number(line[2])).toBeGreaterThanOrEqual(4);
  });

  it('the loss plot labels its log axis at 1, 2, 5 × 10ᵏ as the height allows, not only at decades', () => {
    const labels = (values: number[], height?: number) =>
      [
        ...lineChartSvg([{ label: 'loss', values }], { title: 't', logY: true, height }).matchAll(
          /text-anchor="end" dominant-baseline="middle">([^<]*)</g,
        ),
      ].map((m) => m[1]);
    const decay = (a: number, b: number) => Array.from({ length: 200 }, (_, i) => a * (b / a) ** (i / 199));
    expect(labels(decay(2.3, 0.01))).toEqual(['0.01', '0.02', '0.05', '0.1', '0.2', '0.5', '1', '2']);
    // Less than a decade: every 1‥9 × 10ᵏ fits.
    expect(labels(decay(0.9, 0.3))).toEqual(['0.3', '0.4', '0.5', '0.6', '0.7', '0.8', '0.9']);
    // Many decades in little height: decades only, then every other decade.
    expect(labels(decay(10, 1e-4), 200)).toEqual(['1e-4', '0.001', '0.01', '0.1', '1', '10']);
    const wide = labels(decay(1e6, 1e-6), 200);
    expect(wide.length).toBeGreaterThanOrEqual(3);
    expect(wide.length).toBeLessThan(13);
  });
});
