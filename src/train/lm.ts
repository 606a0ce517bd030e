// The language-modelling task: next-token prediction on windows of a tokenised text (the Brown corpus for
// the committed model, any text for yours). One decision to know: a batch is B windows of L + 1 tokens
// drawn at uniformly random offsets of the whole token stream (documents joined by the tokenizer's
// end-of-text token), so every position is scored and an epoch is a count of tokens, not of documents.

import { noGrad } from '../autograd/var.js';
import type { TinyTransformer, TransformerConfig } from '../model/transformer.js';
import type { Generator } from '../random.js';
import { checkInteger, formatValue } from '../shape.js';
import type { Tokenizer } from '../text/tokenizer.js';
import { loadCheckpoint } from './checkpoint.js';
import { tokensExcept } from './heads.js';
import type { Batch, Task, TaskDefaults } from './tasks.js';

/** Options of languageModelTask. */
export interface LanguageModelTaskOptions {
  /** Text ↔ ids; its vocabSize is the model's. */
  tokenizer: Tokenizer;
  /** The training text's token ids. */
  train: Int32Array;
  /** Held-out token ids (the 'test' split); default none ('test' batches then come from `train`). */
  test?: Int32Array;
  /** L: tokens a window predicts (the model's maxLen unless `model.maxLen` says more). */
  contextLength: number;
  /** Model shape overrides on top of the default (4 layers, D 256, 8 heads, dFF 1024). */
  model?: Partial<TransformerConfig>;
  /** Training defaults overrides. */
  defaults?: Partial<TaskDefaults>;
  /**
   * Share of each training batch's windows, in [0, 1], replaced by a repeated random segment (see
   * `repeatedWindow`): the in-context copying an induction head does, which a few million tokens of
   * natural text teach too rarely. round(B · repeats) windows per batch, the last ones. Default 0.
   */
  repeats?: number;
}

/** Shortest and longest random segment of a repeated window (capped at ⌊L / 2⌋). */
export const REPEAT_SEGMENT = { min: 8, max: 64 } as const;

const FN = 'languageModelTask';

/**
 * A decoder trained to predict each next token of windows of the text. Targets are the window shifted by
 * one; no position of a text window is ignored (a repeated window's first copy is: see `repeats`).
 */
export function languageModelTask(options: LanguageModelTaskOptions): Task {
  const { tokenizer, train, test, contextLength: L, repeats = 0 } = options;
  checkInteger(FN, 'contextLength', L, 1);
  if (!(typeof repeats === 'number' && repeats >= 0 && repeats <= 1)) {
    throw new RangeError(`${FN}: repeats must be a number in [0, 1], got ${formatValue(repeats)}`);
  }
  if (repeats > 0 && L < 2 * REPEAT_SEGMENT.min) {
    throw new RangeError(
      `${FN}: repeats needs contextLength ≥ ${2 * REPEAT_SEGMENT.min} (two copies of a segment of ${REPEAT_SEGMENT.min}), got ${L}`,
    );
  }
  // The ids a repeated segment draws from: every token but the specials, as the head scores' probe.
  const pool = tokensExcept(tokenizer.vocabSize, Object.values(tokenizer.specials));
  for (const [name, ids] of [
    ['train', train],
    ['test', test],
  ] as const) {
    if (ids === undefined && name === 'test') continue;
    if (!(ids instanceof Int32Array))
      throw new TypeError(`${FN}: ${name} must be an Int32Array of ids, got ${formatValue(ids)}`);
    if (ids.length < L + 1) {
      throw new RangeError(
        `${FN}: ${name} has ${ids.length} tokens; a window needs contextLength + 1 = ${L + 1}`,
      );
    }
    for (let i = 0; i < ids.length; i++) {
      if (!(ids[i] >= 0 && ids[i] < tokenizer.vocabSize)) {
        throw new RangeError(
          `${FN}: ${name}[${i}] = ${ids[i]} is outside the tokenizer's [0, ${tokenizer.vocabSize})`,
        );
      }
    }
  }
  const window = (stream: Int32Array, generator: Generator, B: number): Batch => {
    const ids = new Int32Array(B * L);
    const targets = new Int32Array(B * L);
    const starts = stream.length - L; // a window [s, s + L] needs s + L < length
    for (let b = 0; b < B; b++) {
      const s = Math.floor(generator.random() * starts);
      ids.set(stream.subarray(s, s + L), b * L);
      targets.set(stream.subarray(s + 1, s + L + 1), b * L);
    }
    return { ids, targets, B, L };
  };
  const withRepeats = (batch: Batch, generator: Generator): Batch => {
    const count = Math.round(batch.B * repeats);
    for (let b = batch.B - count; b < batch.B; b++) {
      repeatedWindow(
        batch.ids.subarray(b * L, (b + 1) * L),
        batch.targets.subarray(b * L, (b + 1) * L),
        pool,
        generator,
      );
    }
    return batch;
  };
  return {
    name: 'lm',
    description: `language model on ${train.length} tokens (${tokenizer.description}), windows of ${L}`,
    tokenizer,
    model: {
      vocabSize: tokenizer.vocabSize,
      dModel: 256,
      numHeads: 8,
      numLayers: 4,
      dFF: 1024,
      maxLen: L,
      causal: true,
      dropout: 0.1,
      ...options.model,
    },
    defaults: { steps: 4000, batchSize: 16, lr: 1e-3, warmup: 200, ...options.defaults },
    // Held-out batches are text only (from `train` when there is no `test`); with repeats 0 withRepeats
    // replaces no window and draws nothing.
    batch: (generator, B, split = 'train') =>
      split === 'test'
        ? window(test ?? train, generator, B)
        : withRepeats(window(train, generator, B), generator),
  };
}

/**
 * Fills one window (ids and targets, L each) with a random segment x of n tokens, n uniform in
 * [REPEAT_SEGMENT.min, min(REPEAT_SEGMENT.max, ⌊L / 2⌋)], each drawn uniformly from `pool`, repeated to the
 * end: x ‖ x ‖ x ‖ … Only the predictions a copy can make are scored: targets from position n on (the token
 * after each token of a later copy is the one after its previous occurrence); the first n are −1, since a
 * random token cannot be predicted before it has been seen.
 */
export function repeatedWindow(
  ids: Int32Array,
  targets: Int32Array,
  pool: Int32Array,
  generator: Generator,
): void {
  const L = ids.length;
  const hi = Math.min(REPEAT_SEGMENT.max, Math.floor(L / 2));
  const n = REPEAT_SEGMENT.min + Math.floor(generator.random() * (hi - REPEAT_SEGMENT.min + 1));
  for (let t = 0; t < n; t++) ids[t] = pool[Math.floor(generator.random() * pool.length)];
  for (let t = n; t < L; t++) ids[t] = ids[t - n];
  for (let t = 0; t < L; t++) targets[t] = t < n ? -1 : ids[(t + 1) % n];
}

/** What textBits measured. */
export interface TextBits {
  /** Total cross-entropy of the text's tokens, in bits. */
  bits: number;
  /** Tokens scored (every token of the text). */
  tokens: number;
  /** UTF-8 bytes of the text. */
  bytes: number;
  /** bits / bytes. */
  bitsPerByte: number;
}

/** Options of textBits. */
export interface TextBitsOptions {
  /** Windows per forward; default 16. */
  batchSize?: number;
  /** New tokens scored per window after the first (the rest is context); default maxLen / 2. */
  stride?: number;
}

/**
 * The model's total cross-entropy on `text`, in bits, and per UTF-8 byte: every token is predicted from
 * the tokens before it (at most maxLen of them, at least maxLen − stride once the text is longer than a
 * window), the first one from the tokenizer's end-of-text token (so nothing goes unscored). Windows of
 * maxLen tokens slide by `stride`; each scores only the tokens no earlier window scored. No autograd tape.
 */
export function textBits(
  model: TinyTransformer,
  tokenizer: Tokenizer,
  text: string,
  { batchSize = 16, stride }: TextBitsOptions = {},
): TextBits {
  const fn = 'textBits';
  const eos = tokenizer.specials.eos;
  if (eos === undefined)
    throw new TypeError(`${fn}: the tokenizer has no end-of-text token to predict the first token from`);
  if (tokenizer.vocabSize !== model.config.vocabSize) {
    throw new RangeError(
      `${fn}: the tokenizer has ${tokenizer.vocabSize} tokens but the model's vocabSize is ${model.config.vocabSize}`,
    );
  }
  const L = model.config.maxLen;
  const step = stride ?? Math.max(1, Math.floor(L / 2));
  checkInteger(fn, 'stride', step, 1);
  checkInteger(fn, 'batchSize', batchSize, 1);
  if (step > L) throw new RangeError(`${fn}: stride ${step} is longer than the model's maxLen ${L}`);
  const encoded = tokenizer.encode(text);
  const ids = new Int32Array(encoded.length + 1);
  ids[0] = eos;
  ids.set(encoded, 1);
  const bytes = new TextEncoder().encode(text).length;
  const n = encoded.length; // targets ids[1 … n]
  // Window w covers inputs ids[s, s + len) and scores targets t in [from, s + len] (t indexes ids).
  const windows: { s: number; len: number; from: number }[] = [];
  let scored = 0; // targets 1 … scored are done
  for (let s = 0; scored < n; s += step) {
    const len = Math.min(L, n - s);
    windows.push({ s, len, from: scored + 1 });
    scored = s + len;
  }
  const V = model.config.vocabSize;
  let nats = 0;
  for (let w0 = 0; w0 < windows.length; w0 += batchSize) {
    const group = windows.slice(w0, w0 + batchSize);
    const len = Math.max(...group.map((w) => w.len));
    // Windows shorter than the group's (only the last) are padded at the end; padding is never scored.
    const batch = new Int32Array(group.length * len).fill(eos);
    group.forEach((w, b) => {
      batch.set(ids.subarray(w.s, w.s + w.len), b * len);
    });
    const logits = noGrad(() => model.forward(batch, group.length, len).logits.data);
    group.forEach((w, b) => {
      for (let t = w.from; t <= w.s + w.len; t++) {
        const row = (b * len + (t - 1 - w.s)) * V;
        let max = Number.NEGATIVE_INFINITY;
        for (let v = 0; v < V; v++) max = Math.max(max, logits[row + v]);
        let sum = 0;
        for (let v = 0; v < V; v++) sum += Math.exp(logits[row + v] - max);
        nats += max - logits[row + ids[t]] + Math.log(sum); // max − x_t first (a huge max swallows log Σ)
      }
    });
  }
  const bits = nats / Math.LN2;
  return { bits, tokens: n, bytes, bitsPerByte: bytes === 0 ? Number.NaN : bits / bytes };
}

/**
 * A language model checkpoint (`qkv train --task lm`, e.g. models/brown-lm.safetensors) as a decoder,
 * its tokenizer and its config, from the file's bytes (Node or browser). Throws, naming `source`, when
 * the file is not a checkpoint, stores no tokenizer, or holds an encoder.
 *
 * @example
 * const { model, tokenizer } = loadLanguageModel(bytes);
 * const ids = model.generate(tokenizer.encode('The jury said'), { maxNewTokens: 20, temperature: 0.8, seed: 1 });
 * tokenizer.decode(ids);
 */
export function loadLanguageModel(
  bytes: Uint8Array,
  source?: string,
): { model: TinyTransformer; tokenizer: Tokenizer; config: Required<TransformerConfig> } {
  const { model, info } = loadCheckpoint(bytes, source);
  const name = source === undefined ? 'the checkpoint' : `'${source}'`;
  if (!info.tokenizer)
    throw new TypeError(`loadLanguageModel: ${name} stores no tokenizer, so text cannot be encoded`);
  if (!model.config.causal)
    throw new TypeError(`loadLanguageModel: ${name} is an encoder (causal: false), not a language model`);
  return { model, tokenizer: info.tokenizer, config: model.config };
}
