// The `induction` task: a 2-layer attention-only decoder (no MLP) on random tokens in which a random
// segment of k tokens appears twice, and what its run records: the loss and the best head's induction
// score (headScores on x ‖ x, three lengths) every few steps, the step where the loss falls fastest (its phase change)
// and where the score jumps, if it does (Olsson et al., 2022, "In-context learning and induction heads").
// One decision to know: only the k − 1 predictions inside the second copy are scored (the tokens after its
// first one). Everywhere else the next token is uniformly random, so those positions would add a constant
// ln V that no model can lower and only noise to the gradient; scored this way, the loss is exactly the
// model's copying from context: ln V at chance, near 0 once a copying circuit works. The sequence's
// other tokens are all distinct, so each scored token has exactly one earlier occurrence to copy from.
// Measured (seed 0, 3000 steps, docs/induction.svg): the loss falls from its plateau (2.79 at step 1230,
// 0.55 at 1330) as the best induction score jumps (0.39 → 0.79), in layer 1; seeds 2 and 3 stay on the
// plateau for the whole run (docs/language-model.md).

import type { TransformerConfig } from '../model/transformer.js';
import type { Generator } from '../random.js';
import { checkInteger, formatValue } from '../shape.js';
import { WordTokenizer } from '../text/word.js';
import { type AttentionModel, bestHead, type HeadScore, headScores } from './heads.js';
import { lineChartSvg } from './plot.js';
import type { Task, TaskDisplay } from './tasks.js';

/** Options of inductionTask. */
export interface InductionTaskOptions {
  /** V: distinct tokens (no specials). Default 64; at least length + 1 − minSegment. */
  symbols?: number;
  /** L: input tokens per sequence (the model's maxLen). Default 32. */
  length?: number;
  /** Shortest repeated segment k. Default 4. */
  minSegment?: number;
  /** Longest repeated segment k; 2k ≤ L + 1. Default 16. */
  maxSegment?: number;
  /** Model overrides on top of the default (2 layers, D 32, 2 heads, RoPE, mlp: false). */
  model?: Partial<TransformerConfig>;
}

/** One sequence of L + 1 tokens: `tokens[first + t] === tokens[second + t]` for t < k, all others distinct. */
export interface InductionSequence {
  tokens: Int32Array;
  /** Where the segment first appears. */
  first: number;
  /** Where it appears again (≥ first + k). */
  second: number;
  /** Its length. */
  k: number;
}

const FN = 'inductionTask';

/**
 * Draws a sequence of `length + 1` ids from [0, symbols): a segment of k ∈ [minSegment, maxSegment]
 * tokens at `first` and again at `second`, every other token distinct from the rest.
 */
export function inductionSequence(
  generator: Generator,
  { symbols = 64, length = 32, minSegment = 4, maxSegment = 16 }: Omit<InductionTaskOptions, 'model'> = {},
): InductionSequence {
  const N = length + 1;
  const k = minSegment + Math.floor(generator.random() * (maxSegment - minSegment + 1));
  const first = Math.floor(generator.random() * (N - 2 * k + 1));
  const second = first + k + Math.floor(generator.random() * (N - first - 2 * k + 1));
  // N − k distinct ids: a partial Fisher–Yates shuffle of [0, symbols).
  const ids = Int32Array.from({ length: symbols }, (_, i) => i);
  for (let i = 0; i < N - k; i++) {
    const j = i + Math.floor(generator.random() * (symbols - i));
    [ids[i], ids[j]] = [ids[j], ids[i]];
  }
  const tokens = new Int32Array(N);
  let next = 0;
  for (let t = 0; t < N; t++) {
    tokens[t] = t >= second && t < second + k ? tokens[first + t - second] : ids[next++];
  }
  return { tokens, first, second, k };
}

/**
 * The induction task: inputs are a sequence's first L tokens, targets the next token at the k − 1
 * positions second … second + k − 2 (predicting the second copy's tokens after its first), −1 elsewhere.
 */
export function inductionTask(options: InductionTaskOptions = {}): Task {
  const { symbols = 64, length = 32, minSegment = 4, maxSegment = 16 } = options;
  checkInteger(FN, 'symbols', symbols, 1);
  checkInteger(FN, 'length', length, 1);
  checkInteger(FN, 'minSegment', minSegment, 1);
  checkInteger(FN, 'maxSegment', maxSegment, 1);
  if (minSegment < 2 || maxSegment < minSegment || 2 * maxSegment > length + 1) {
    throw new RangeError(
      `${FN}: segments must satisfy 2 ≤ minSegment ≤ maxSegment and 2·maxSegment ≤ length + 1 = ${length + 1}, got minSegment ${minSegment}, maxSegment ${maxSegment}`,
    );
  }
  if (symbols < length + 1 - minSegment) {
    throw new RangeError(
      `${FN}: symbols must be at least length + 1 − minSegment = ${length + 1 - minSegment} (the other tokens are distinct), got ${symbols}`,
    );
  }
  const dims = { symbols, length, minSegment, maxSegment };
  const words = Array.from({ length: symbols }, (_, i) => `s${i}`);
  const tokenizer = new WordTokenizer(words);
  const L = length;
  return {
    name: 'induction',
    description: `induction: ${L} random tokens of ${symbols} in which a segment of ${minSegment}–${maxSegment} repeats; loss on the second copy`,
    tokenizer,
    display: inductionDisplay(words, L),
    model: {
      vocabSize: symbols,
      dModel: 32,
      numHeads: 2,
      numLayers: 2,
      dFF: 128, // unused: no MLP
      maxLen: L,
      causal: true,
      mlp: false,
      positions: 'rope',
      ...options.model,
    },
    defaults: { steps: 3000, batchSize: 32, lr: 3e-3, warmup: 30 },
    batch(generator, B) {
      const ids = new Int32Array(B * L);
      const targets = new Int32Array(B * L).fill(-1);
      for (let b = 0; b < B; b++) {
        const { tokens, second, k } = inductionSequence(generator, dims);
        ids.set(tokens.subarray(0, L), b * L);
        for (let t = second; t <= second + k - 2; t++) targets[b * L + t] = tokens[t + 1];
      }
      return { ids, targets, B, L };
    },
  };
}

/** The live-view sample: distinct tokens with six of them repeated near the end; each scored row reads the first copy. */
function inductionDisplay(words: readonly string[], L: number): TaskDisplay {
  const k = Math.min(6, Math.floor((L + 1) / 2));
  const first = Math.min(3, L + 1 - 2 * k);
  const second = L + 1 - k - Math.min(L + 1 - 2 * k - first, 4);
  const seq: string[] = [];
  let next = 0;
  for (let t = 0; t <= L; t++)
    seq.push(t >= second && t < second + k ? seq[first + t - second] : words[next++ % words.length]);
  return {
    sample: seq.slice(0, L),
    scored: Array.from({ length: k - 1 }, (_, i) => ({
      position: second + i,
      target: seq[second + i + 1],
      key: first + i + 1,
    })),
    pattern:
      'an induction stripe: each token of the second copy looks at the token after its first occurrence',
    layers: 'last',
    sentences: false,
    inductionScore: true,
  };
}

/**
 * The best head's induction score for the task's runs: each head's headScores induction score averaged over
 * probes of three lengths n (⌊maxLen/4⌋, ⌊3·maxLen/8⌋ and ⌊maxLen/2⌋ tokens, repeated twice; `lengths`
 * overrides them; repeats count once), then the best head. Fewer lengths when maxLen < 8: two at 6–7, one
 * (n = 2) at 4–5, where the fixed-offset caveat below applies again; maxLen < 4 has no probe.
 * One decision to know: a single probe length is a single offset (n − 1) between each query and the key it
 * scores, and a head that attends at that fixed offset scores near 1 on it without reading any token; in
 * these runs such a head appears in layer 0 before any circuit forms (0.94 at n = 16 in one run). Averaged
 * over three offsets, a positional head scores about a third, an induction head — which follows the
 * tokens — the same at every length.
 */
export function inductionScore(
  model: AttentionModel,
  { seed = 1, count = 8, lengths }: { seed?: number; count?: number; lengths?: readonly number[] } = {},
): { score: number; layer: number; head: number } {
  const L = model.config.maxLen;
  if (lengths !== undefined && !Array.isArray(lengths))
    throw new TypeError(
      `inductionScore: lengths must be an array of probe lengths, got ${formatValue(lengths)}`,
    );
  const ns = [
    ...new Set(
      lengths ?? [Math.floor(L / 4), Math.floor((3 * L) / 8), Math.floor(L / 2)].filter((n) => n >= 2),
    ),
  ];
  if (ns.length === 0) {
    throw new RangeError(
      lengths
        ? 'inductionScore: lengths must name at least one probe length'
        : `inductionScore: maxLen ${L} is too short for a probe of 2 tokens repeated twice`,
    );
  }
  let mean: HeadScore[] | undefined;
  for (const length of ns) {
    const { heads } = headScores(model, { seed, count, length });
    mean ??= heads.map((h) => ({ ...h, induction: 0 }));
    for (const [i, h] of heads.entries()) mean[i].induction += h.induction / ns.length;
  }
  const best = bestHead(mean as HeadScore[], 'induction');
  return { score: best.induction, layer: best.layer, head: best.head };
}

/** One measurement of an induction run. */
export interface InductionRecord {
  /** Steps taken (0: before training). */
  step: number;
  /** Mean training loss of the steps since the previous record (NaN at step 0). */
  loss: number;
  /** The best head's induction score, and that head. */
  induction: number;
  layer: number;
  head: number;
}

/**
 * Where the phase change happens. By the induction score (default): the record from which the score stays
 * at or above halfway between the first record's and the highest (`threshold`); undefined when it never
 * rises by 0.2 or ends below that line.
 * By the loss: the record where it falls fastest, over `window` records either side (`threshold` is that
 * fall), after the first tenth of the records (where every run falls from its initial loss to chance);
 * undefined when it never falls by 0.2. `before` and `after` are the value `window` records either side.
 */
export function phaseChange(
  records: readonly InductionRecord[],
  by: 'induction' | 'loss' = 'induction',
  window = 5,
): { step: number; threshold: number; before: number; after: number } | undefined {
  if (!Array.isArray(records) || records.length === 0)
    throw new RangeError(`phaseChange: records must be a non-empty array, got ${formatValue(records)}`);
  const around = (rs: readonly InductionRecord[], i: number, key: 'induction' | 'loss') => ({
    before: rs[Math.max(0, i - window)][key],
    after: rs[Math.min(rs.length - 1, i + window)][key],
  });
  if (by === 'loss') {
    const measured = records.filter((r) => Number.isFinite(r.loss));
    let best = -1;
    let fall = 0.2;
    for (let i = Math.max(window, Math.ceil(measured.length / 10)); i + window < measured.length; i++) {
      const d = measured[i - window].loss - measured[i + window].loss;
      if (d > fall) [best, fall] = [i, d];
    }
    if (best < 0) return undefined;
    return { step: measured[best].step, threshold: fall, ...around(measured, best, 'loss') };
  }
  const start = records[0].induction;
  const top = Math.max(...records.map((r) => r.induction));
  if (!(top - start >= 0.2)) return undefined;
  const threshold = (start + top) / 2;
  // The jump that lasts: the record after the last one below the threshold (a score that rose and fell
  // back has no phase change).
  let i = records.length;
  while (i > 0 && records[i - 1].induction >= threshold) i--;
  if (i === records.length) return undefined;
  return { step: records[i].step, threshold, ...around(records, i, 'induction') };
}

/**
 * The run as one chart: the training loss ÷ ln V (1 = chance; every step) and the best induction score
 * (at each record), both in [0, 1] on one axis, so the loss drop and the score's jump line up.
 */
export function inductionPlotSvg(
  losses: readonly number[],
  records: readonly InductionRecord[],
  { vocabSize, title }: { vocabSize: number; title: string },
): string {
  const chance = Math.log(vocabSize);
  const score = new Array<number>(losses.length).fill(Number.NaN); // NaN: no point drawn at that step
  for (const r of records) if (r.step >= 1 && r.step <= losses.length) score[r.step - 1] = r.induction;
  return lineChartSvg(
    [
      { label: `loss ÷ ln ${vocabSize} (chance = 1)`, values: losses.map((x) => x / chance) },
      { label: 'best induction score', values: score },
    ],
    { title, yLabel: 'loss ÷ ln V, induction score', maxPoints: 600 },
  );
}
