// Choosing the next token from a row of logits: greedy, temperature, top-k and top-p (nucleus) sampling,
// and the distribution they sample from (the playground shows it). One decision to know: the
// distribution is computed in float64 over the candidates sorted by logit (ties: lower id first), so the
// same logits, options and generator state give the same token on every machine.

import { type Generator, isGenerator } from '../random.js';
import { checkFinite, checkInteger, formatValue } from '../shape.js';

/** How the next token is chosen. */
export interface SamplingOptions {
  /** Divides the logits; 0 = greedy (the most likely token, lowest id on ties). Default 1. */
  temperature?: number;
  /** Keep only the k most likely tokens. Default: all. */
  topK?: number;
  /** Keep the fewest most likely tokens whose probabilities sum to at least p, in (0, 1]. Default 1. */
  topP?: number;
}

/** The candidates and their probabilities after temperature, top-k and top-p, most likely first. */
export interface TokenDistribution {
  ids: Int32Array;
  probs: Float64Array;
}

/** Checks sampling options, naming `fn`. */
export function checkSampling(fn: string, o: SamplingOptions): void {
  if (o === null || typeof o !== 'object') {
    throw new TypeError(`${fn}: sampling options must be an object, got ${formatValue(o)}`);
  }
  if (o.temperature !== undefined) checkFinite(fn, 'temperature', o.temperature, '≥ 0');
  if (o.topK !== undefined) checkInteger(fn, 'topK', o.topK, 1);
  if (o.topP !== undefined && !(typeof o.topP === 'number' && o.topP > 0 && o.topP <= 1)) {
    throw new RangeError(`${fn}: topP must be a number in (0, 1], got ${formatValue(o.topP)}`);
  }
}

/** Refuses an empty row of logits (no token to choose), naming `fn`. */
function checkLogits(fn: string, logits: ArrayLike<number>): void {
  if (!(logits && typeof logits.length === 'number' && logits.length >= 1)) {
    throw new RangeError(`${fn}: logits must hold at least one number, got ${formatValue(logits)}`);
  }
}

/** The index of the largest logit (the lowest index on ties; NaN counts as −Infinity). */
export function argmax(logits: ArrayLike<number>): number {
  checkLogits('argmax', logits);
  return largest(logits);
}

/** argmax without the check (callers have checked the row). */
function largest(logits: ArrayLike<number>): number {
  let best = 0;
  let max = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < logits.length; i++) {
    if (logits[i] > max) {
      max = logits[i];
      best = i;
    }
  }
  return best;
}

/**
 * The distribution `sampleToken` draws from: softmax(logits / temperature) restricted to the top-k, then
 * to the nucleus of mass topP, renormalised; most likely first. Temperature 0 gives the argmax alone.
 */
export function tokenDistribution(
  logits: ArrayLike<number>,
  options: SamplingOptions = {},
): TokenDistribution {
  checkLogits('tokenDistribution', logits);
  checkSampling('tokenDistribution', options);
  return distributionOf(logits, options);
}

/** tokenDistribution without the checks (callers have checked the row and the options). */
function distributionOf(logits: ArrayLike<number>, options: SamplingOptions): TokenDistribution {
  const { temperature = 1, topK = logits.length, topP = 1 } = options;
  if (temperature === 0 || logits.length === 1) {
    return { ids: Int32Array.of(largest(logits)), probs: Float64Array.of(1) };
  }
  const V = logits.length;
  const k = Math.min(topK, V);
  const order = rankedIds(logits, k);
  const value = (i: number) => (Number.isNaN(logits[i]) ? Number.NEGATIVE_INFINITY : logits[i]);
  const max = value(order[0]);
  if (max === Number.NEGATIVE_INFINITY || max === Number.POSITIVE_INFINITY) {
    return { ids: Int32Array.of(order[0]), probs: Float64Array.of(1) }; // nothing else can be weighed
  }
  const probs = new Float64Array(k);
  let sum = 0;
  for (let r = 0; r < k; r++) {
    probs[r] = Math.exp((value(order[r]) - max) / temperature);
    sum += probs[r];
  }
  // The nucleus: the fewest leading candidates whose mass reaches topP (at least one).
  let kept = k;
  if (topP < 1) {
    let mass = 0;
    for (let r = 0; r < k; r++) {
      mass += probs[r] / sum;
      if (mass >= topP) {
        kept = r + 1;
        break;
      }
    }
  }
  let keptSum = 0;
  for (let r = 0; r < kept; r++) keptSum += probs[r];
  const out = probs.slice(0, kept);
  for (let r = 0; r < kept; r++) out[r] /= keptSum;
  return { ids: order.slice(0, kept), probs: out };
}

/**
 * Token ids by logit, largest first (the lower id first on ties; NaN counts as −Infinity): at least the
 * first k of that order, exactly as sorting all V would give them. A small k (top-k sampling over a
 * large vocabulary, once per generated token) finds the k-th largest value by selection and sorts only
 * the ids at or above it, rather than all V.
 */
export function rankedIds(logits: ArrayLike<number>, k: number): Int32Array {
  const V = logits.length;
  const vals = new Float64Array(V);
  for (let i = 0; i < V; i++) vals[i] = Number.isNaN(logits[i]) ? Number.NEGATIVE_INFINITY : logits[i];
  const byRank = (a: number, b: number) => vals[b] - vals[a] || a - b;
  if (k * 8 >= V) return Int32Array.from({ length: V }, (_, i) => i).sort(byRank);
  const t = kthLargest(vals.slice(), k);
  const ids: number[] = [];
  for (let i = 0; i < V; i++) if (vals[i] > t) ids.push(i);
  // Ties at the threshold: the lowest ids, as the full sort's tie-break puts them.
  for (let i = 0; i < V && ids.length < k; i++) if (vals[i] === t) ids.push(i);
  return Int32Array.from(ids).sort(byRank);
}

/** The k-th largest of `a` (1 ≤ k ≤ a.length; no NaN), by Hoare's selection; reorders `a`. */
function kthLargest(a: Float64Array, k: number): number {
  const target = a.length - k; // its index in ascending order
  let lo = 0;
  let hi = a.length - 1;
  while (lo < hi) {
    const pivot = a[(lo + hi) >>> 1];
    let i = lo;
    let j = hi;
    while (i <= j) {
      while (a[i] < pivot) i++;
      while (a[j] > pivot) j--;
      if (i <= j) {
        const x = a[i];
        a[i] = a[j];
        a[j] = x;
        i++;
        j--;
      }
    }
    if (target <= j) hi = j;
    else if (target >= i) lo = i;
    else return a[target];
  }
  return a[target];
}

/** Draws the next token from `tokenDistribution(logits, options)` with one `generator.random()`. */
export function sampleToken(
  logits: ArrayLike<number>,
  options: SamplingOptions,
  generator: Generator,
): number {
  checkLogits('sampleToken', logits);
  checkSampling('sampleToken', options);
  if (!isGenerator(generator)) {
    throw new TypeError(`sampleToken: generator must be a Generator, got ${formatValue(generator)}`);
  }
  if (options.temperature === 0) return largest(logits);
  const { ids, probs } = distributionOf(logits, options);
  const u = generator.random();
  let cum = 0;
  for (let r = 0; r < ids.length; r++) {
    cum += probs[r];
    if (u < cum) return ids[r];
  }
  return ids[ids.length - 1]; // rounding left the cumulative sum a hair under 1
}
