// `qkv viz`: renders one heatmap of the playground's step-through to an SVG or PNG file, in Node with
// no browser. One decision to know: it runs the same seeded stack and the same specs as the page
// (src/viz), so `qkv viz --text "…" --seed 3` draws what the playground shows for that sentence and seed;
// with --model the checkpoint's own tokenizer splits the text, as in the page.

import { writeFileSync } from 'node:fs';
import { deflateSync } from 'node:zlib';
import { readFileBytes } from '../io/file-node.js';
import { type Tokenizer, UnknownTokenError } from '../text/tokenizer.js';
import { stackFromSafetensors } from '../viz/checkpoint.js';
import { DARK_THEME, heatmapLayout, LIGHT_THEME } from '../viz/layout.js';
import { renderHeatmapPng } from '../viz/raster.js';
import { STEP_IDS, type StepId, stepViews } from '../viz/specs.js';
import { type AttentionStack, seededStack } from '../viz/stack.js';
import { renderHeatmapSvg } from '../viz/svg.js';
import { tokenize } from '../viz/tokens.js';
import { traceStack } from '../viz/trace.js';
import { type CliIO, integerOption, parseCommandArgs, plural, resolveModel, UsageError } from './args.js';

/** Where the command writes; the CLI passes process streams, tests pass strings. */
const DEFAULT_TEXT = "The animal didn't cross the street because it was too tired";
const MAX_TOKENS = 512;

export const VIZ_HELP = `qkv viz: draw one attention heatmap (the playground's step-through) to an SVG or PNG file

Usage: qkv viz --out <file.svg|file.png> [options]

Options:
  --text <sentence>    the input, split into tokens (at most ${MAX_TOKENS}); default
                       "${DEFAULT_TEXT}"
  --out <file>         where to write; the extension picks the format (.svg or .png)
  --matrix <id>        which step, default weights; embeddings and positions only with --layer 0:
                       ${STEP_IDS.join(', ')}
  --model <file>       a qkv checkpoint (.safetensors from qkv train), or a bundled model by name
                       (pronoun, brown-lm); its tokenizer splits --text, and a word outside its
                       vocabulary is an error. Default: seeded untrained weights shaped by --d-model,
                       --heads, --d-k, --layers and --seed, which cannot be combined with --model
  --d-model <n>        model width, 1 to 4096; default 64
  --heads <n>          heads per layer, 1 to 64; default 4
  --d-k <n>            query/key width per head, 1 to 4096; default d_model / heads
  --layers <n>         layers, 1 to 48; default 1
  --layer <n>          the layer to draw, 0 to layers − 1; default 0
  --head <n>           the head to draw, 0 to heads − 1; default 0
  --causal             causal mask: query i sees keys j ≤ i
  --unscaled           no ÷√d_k (the article's section 4.2: why the scores are divided by √d_k)
  --tie-qk             W_K = W_Q, so Q·Kᵀ is symmetric (the article's section 4.1)
  --seed <n>           seed for the untrained weights and embeddings, 0 to 4294967295; default 0
  --theme <name>       light (default) or dark
  --pixel-ratio <n>    PNG pixels per layout pixel, 1 to 4; default 2
  -h, --help           this help

Without --model the weights are seeded and untrained (deterministic: the same options draw the same
picture).
`;

/** A usage error of `qkv viz`: main prints it as one line and exits 2. */
const usage = (message: string) => new UsageError(`viz: ${message} (see qkv viz --help)`);

/** Runs `qkv viz`; returns the exit code (bad usage throws UsageError: one line on stderr, exit 2). */
export function viz(argv: string[], io: Pick<CliIO, 'stdout' | 'stderr'>): number {
  const values = parseCommandArgs('viz', argv, {
    text: { type: 'string' },
    out: { type: 'string' },
    model: { type: 'string' },
    matrix: { type: 'string' },
    'd-model': { type: 'string' },
    heads: { type: 'string' },
    'd-k': { type: 'string' },
    layers: { type: 'string' },
    layer: { type: 'string' },
    head: { type: 'string' },
    causal: { type: 'boolean' },
    unscaled: { type: 'boolean' },
    'tie-qk': { type: 'boolean' },
    seed: { type: 'string' },
    theme: { type: 'string' },
    'pixel-ratio': { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.stdout.write(VIZ_HELP);
    return 0;
  }
  const int = (name: string, fallback: number, min: number, max: number) =>
    integerOption('viz', values, name, fallback, min, max);
  const out = values.out;
  if (typeof out !== 'string' || out === '') throw usage('--out <file.svg|file.png> is required');
  const format = /\.svg$/i.test(out) ? 'svg' : /\.png$/i.test(out) ? 'png' : undefined;
  if (!format) throw usage(`--out must end in .svg or .png, got '${out}'`);
  const matrix = (values.matrix ?? 'weights') as string;
  if (!(STEP_IDS as readonly string[]).includes(matrix)) {
    throw usage(`--matrix must be one of ${STEP_IDS.join(', ')}, got '${matrix}'`);
  }
  const theme = values.theme ?? 'light';
  if (theme !== 'light' && theme !== 'dark') throw usage(`--theme must be light or dark, got '${theme}'`);
  const text = typeof values.text === 'string' ? values.text : DEFAULT_TEXT;
  const words = tokenize(text); // the tokens of seeded weights, which embed any word
  let modelPath = values.model;
  if (typeof modelPath !== 'string') checkTokenCount(words.length);

  let stack: AttentionStack;
  let tokenizer: Tokenizer | undefined;
  if (typeof modelPath === 'string') {
    const shaped = ['d-model', 'heads', 'd-k', 'layers', 'seed'].filter((n) => values[n] !== undefined);
    if (shaped.length > 0) {
      throw usage(
        `${shaped.map((n) => `--${n}`).join(', ')} cannot be combined with --model (the checkpoint fixes them)`,
      );
    }
    // A path relative to the clone (models/pronoun.safetensors) does not exist in a user's project; the
    // bundled models' names do.
    const resolved = resolveModel('viz', modelPath);
    if ('error' in resolved) throw new Error(resolved.error);
    modelPath = resolved.path;
    const checkpoint = stackFromSafetensors(readFileBytes(modelPath), modelPath);
    stack = checkpoint;
    tokenizer = checkpoint.tokenizer;
  } else {
    const dModel = int('d-model', 64, 1, 4096);
    const heads = int('heads', 4, 1, 64);
    const dK = int('d-k', Math.max(1, Math.floor(dModel / heads)), 1, 4096);
    const layers = int('layers', 1, 1, 48);
    const seed = int('seed', 0, 0, 2 ** 32 - 1);
    stack = seededStack({ dModel, dK, heads, layers, seed });
  }
  const layer = int('layer', 0, 0, stack.layers.length - 1);
  const head = int('head', 0, 0, stack.heads - 1);
  const pixelRatio = int('pixel-ratio', 2, 1, 4);
  if ((matrix === 'embeddings' || matrix === 'positions') && layer !== 0) {
    throw usage(`--matrix ${matrix} exists only for --layer 0`);
  }
  /** What the heatmaps are labelled with, and the tokens the stack embeds (a checkpoint's own spelling). */
  const { labels, tokens } = tokenizer
    ? checkpointTokens(tokenizer, text, modelPath as string)
    : { labels: words, tokens: words };

  const trace = traceStack(stack, tokens, {
    causal: Boolean(values.causal),
    scaled: !values.unscaled,
    tieQK: Boolean(values['tie-qk']),
    focus: { layer, head },
    focusOnly: true, // one map is drawn: every layer's and head's weights would be layers·heads·L² floats
  });
  const view = stepViews(trace.steps, labels).find((v) => v.id === (matrix as StepId))!;
  const themeColors = theme === 'dark' ? DARK_THEME : LIGHT_THEME;
  const layout = heatmapLayout(view.spec);
  let bytes: Uint8Array;
  let size: string;
  if (format === 'svg') {
    bytes = new TextEncoder().encode(
      renderHeatmapSvg(view.spec, { theme: themeColors, deflate: deflateSync }),
    );
    size = `${layout.width}×${layout.height}`;
  } else {
    bytes = renderHeatmapPng(view.spec, { theme: themeColors, pixelRatio, deflate: deflateSync });
    size = `${layout.width * pixelRatio}×${layout.height * pixelRatio} px`;
  }
  writeFileSync(out, bytes);
  io.stdout.write(
    `qkv viz: wrote ${out} (${size}): ${view.name}, layer ${layer} head ${head}, ${plural(tokens.length, 'token')}, ${stack.description}\n`,
  );
  return 0;
}

/** The checkpoint's tokenizer on the text: labels as typed, tokens as stored; unknown words are an error. */
function checkpointTokens(tokenizer: Tokenizer, text: string, path: string) {
  const labels = tokenizer.tokenize(text);
  checkTokenCount(labels.length);
  let ids: Int32Array;
  try {
    ids = tokenizer.encode(text);
  } catch (err) {
    if (!(err instanceof UnknownTokenError)) throw err;
    const words = err.tokens.map((t) => `'${t}'`).join(', ');
    throw new Error(`viz: ${words} not in the checkpoint's ${tokenizer.vocabSize}-word vocabulary (${path})`);
  }
  return { labels, tokens: Array.from(ids, (id) => tokenizer.idToToken(id)) };
}

function checkTokenCount(n: number): void {
  if (n === 0) throw usage('--text has no tokens');
  if (n > MAX_TOKENS) throw usage(`--text has ${n} tokens; at most ${MAX_TOKENS}`);
}
