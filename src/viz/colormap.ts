// A sequential colour scale for heatmaps, shared by the terminal demo and (later) SVG/PNG rendering.
// One decision to know: a perceptually ordered dark-blue → teal → yellow ramp (like viridis, with our
// own anchor colours), so 0 reads dark and 1 reads bright on light and dark backgrounds alike.

/** An sRGB colour, each channel 0–255. */
export type Rgb = readonly [number, number, number];

const ANCHORS: readonly Rgb[] = [
  [30, 20, 70],
  [45, 70, 140],
  [30, 130, 140],
  [60, 180, 110],
  [170, 215, 60],
  [250, 235, 80],
];

/** The colour of t ∈ [0, 1] (clamped; NaN maps to mid-grey so it is visible, never hidden). */
export function colorAt(t: number): Rgb {
  if (Number.isNaN(t)) return [128, 128, 128];
  const x = Math.min(1, Math.max(0, t)) * (ANCHORS.length - 1);
  const i = Math.min(ANCHORS.length - 2, Math.floor(x));
  const f = x - i;
  const a = ANCHORS[i];
  const b = ANCHORS[i + 1];
  return [
    Math.round(a[0] + (b[0] - a[0]) * f),
    Math.round(a[1] + (b[1] - a[1]) * f),
    Math.round(a[2] + (b[2] - a[2]) * f),
  ];
}

/** Black or white, whichever reads better on `bg` (WCAG relative luminance). */
export function textColorOn(bg: Rgb): Rgb {
  const lin = (c: number) => {
    const s = c / 255;
    return s <= 0.04045 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
  };
  const lum = 0.2126 * lin(bg[0]) + 0.7152 * lin(bg[1]) + 0.0722 * lin(bg[2]);
  return lum > 0.179 ? [0, 0, 0] : [255, 255, 255];
}
