// qkv/viz: seeing attention (package.json "exports" → "./viz"): model traces (traceStack, seededStack,
// stackFromSafetensors), the playground's step views, head scores (headScores, bestHead), heatmap layout
// and themes, SVG and PNG rendering, colour maps, loss-curve plots and the article's experiments. Shared
// by `qkv viz`, `qkv heads` and the playground (web/). Re-exports only; nothing here imports node:* (PNG
// compression takes a deflate function from the caller).

export {
  bestHead,
  type HeadScore,
  type HeadScoreOptions,
  type HeadScores,
  headScores,
  SCORE_NAMES,
  type ScoreName,
} from '../train/heads.js';
export { lineChartSvg, type PlotOptions, type PlotSeries } from '../train/plot.js';
export { type CheckpointStack, stackFromSafetensors } from './checkpoint.js';
export { colorAt, type Rgb } from './colormap.js';
export {
  articleScalingExample,
  formatBytes,
  type SoftmaxStats,
  saturationAt,
  scoreMatrixBytes,
  softmaxStats,
  tiledKernelBytes,
} from './experiments.js';
export {
  cellAt,
  DARK_THEME,
  divergingColorAt,
  formatExact,
  formatTick,
  type HeatmapLayout,
  type HeatmapSpec,
  type HeatmapTheme,
  heatmapLayout,
  LIGHT_THEME,
} from './layout.js';
export { encodePng, type RgbaImage, readPngSize, type ZlibDeflate } from './png.js';
export { paintHeatmap, rasterizeHeatmap, renderHeatmapPng } from './raster.js';
export { STEP_IDS, type StepId, type StepView, stepViews } from './specs.js';
export {
  type AttentionStack,
  type SeededStackConfig,
  type StackBlock,
  seededStack,
  stackFromStateDict,
  stackStateDict,
} from './stack.js';
export { renderHeatmapSvg, type SvgOptions } from './svg.js';
export { tokenize } from './tokens.js';
export { type HeadSteps, type StackTrace, type TraceOptions, traceStack } from './trace.js';
