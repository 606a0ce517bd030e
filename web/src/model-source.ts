// Where the playground's weights come from: the trained checkpoint when it exists, seeded weights
// otherwise (or when asked), or the model the Train tab handed over ("Use this model"). One decision to know: the checkpoint is bundled by Vite from
// models/pronoun.safetensors (written by `qkv train --task pronoun`) and read with qkv's own safetensors
// reader; if the file is missing or unreadable the page says so and falls back to seeded weights. A
// checkpoint brings its tokenizer (stored in the file by type), which then splits the typed text.
// The 'lm' source is the language model models/brown-lm.safetensors (`qkv train --task lm` on the Brown
// corpus), bundled the same way: its byte-level BPE tokenizer reads any text, it reads at most maxLen
// tokens, and, being a decoder, its heads get scores (headScores on a small repeated-sequence probe,
// computed once per page) that the model view shows as labels.

import { Generator, type TinyTransformer } from 'qkv';
import { loadCheckpoint, type Tokenizer } from 'qkv/nn';
import {
  type AttentionStack,
  type CheckpointStack,
  headScores,
  SCORE_NAMES,
  seededStack,
  stackFromSafetensors,
} from 'qkv/viz';
import type { HeadLabel, ModelConfig, ModelSource } from './protocol.js';

const CHECKPOINT_URL = new URL('../../models/pronoun.safetensors', import.meta.url).href;
const CHECKPOINT_NAME = 'models/pronoun.safetensors';
const LM_URL = new URL('../../models/brown-lm.safetensors', import.meta.url).href;
const LM_NAME = 'models/brown-lm.safetensors';

/** The head-score probe: PROBE_COUNT sequences of PROBE_LENGTH random tokens, each repeated twice. */
const PROBE_COUNT = 4;
const PROBE_LENGTH = 24;

/** The language model: its stack for the views, the model itself for headScores, its head labels once computed. */
interface LanguageModel {
  stack: CheckpointStack;
  model: TinyTransformer;
  heads?: HeadLabel[];
  /** Ids whose text is one space-led word that encodes back to that id alone (for the probe text). */
  words?: number[];
}

let checkpoint: Promise<CheckpointStack | string> | undefined;
let languageModel: Promise<LanguageModel | string> | undefined;
let seeded: { key: string; stack: AttentionStack } | undefined;
let trained: CheckpointStack | undefined;

/** Makes safetensors bytes from the Train tab the 'trained' source; returns its description. */
export function useTrainedCheckpoint(bytes: Uint8Array): string {
  trained = stackFromSafetensors(bytes, 'from the Train tab');
  return trained.description;
}

async function fetchCheckpoint(): Promise<CheckpointStack | string> {
  try {
    const res = await fetch(CHECKPOINT_URL);
    if (!res.ok)
      return `no trained checkpoint at ${CHECKPOINT_NAME} (HTTP ${res.status}); showing seeded weights`;
    return stackFromSafetensors(new Uint8Array(await res.arrayBuffer()), CHECKPOINT_NAME);
  } catch (err) {
    return `could not read ${CHECKPOINT_NAME} (${(err as Error).message}); showing seeded weights`;
  }
}

async function fetchLanguageModel(): Promise<LanguageModel | string> {
  try {
    const res = await fetch(LM_URL);
    if (!res.ok) return `no language model at ${LM_NAME} (HTTP ${res.status}); showing seeded weights`;
    const bytes = new Uint8Array(await res.arrayBuffer());
    const { model } = loadCheckpoint(bytes, LM_NAME);
    return { stack: stackFromSafetensors(bytes, LM_NAME), model };
  } catch (err) {
    return `could not read ${LM_NAME} (${(err as Error).message}); showing seeded weights`;
  }
}

/** The strongest named pattern of every head (layer-major), computed the first time it is asked for. */
function headLabelsOf(lm: LanguageModel): HeadLabel[] {
  if (lm.heads) return lm.heads;
  const { tokenizer } = lm.stack;
  const exclude = Object.values(tokenizer.specials).filter((id): id is number => id !== undefined);
  const { heads } = headScores(lm.model, { seed: 0, count: PROBE_COUNT, length: PROBE_LENGTH, exclude });
  lm.heads = heads.map((h) => {
    const scores = Object.fromEntries(SCORE_NAMES.map((name) => [name, h[name]])) as HeadLabel['scores'];
    let best: HeadLabel['pattern'] = 'previousToken';
    for (const name of SCORE_NAMES) if (h[name] > h[best] || Number.isNaN(h[best])) best = name;
    return { layer: h.layer, head: h.head, pattern: best, score: h[best], scores };
  });
  return lm.heads;
}

/** What loadStack gives: the weights, the checkpoint's tokenizer (none for seeded weights: any word), … */
export interface LoadedStack {
  stack: AttentionStack;
  tokenizer?: Tokenizer;
  source: ModelSource;
  /** Why the model differs from what was asked for, or ''. */
  notice: string;
  /** The most tokens the model reads (its maxLen), when it has a limit of its own. */
  maxLen?: number;
  /** The model is a decoder (trained with the causal mask). */
  decoder?: boolean;
  /** Each head's strongest named pattern (a decoder language model's; layer-major). */
  heads?: HeadLabel[];
}

/** The stack for `config`, its tokenizer, its source, and a notice when it is not what was asked for. */
export async function loadStack(config: ModelConfig): Promise<LoadedStack> {
  if (config.source === 'trained') {
    if (trained) return { stack: trained, tokenizer: trained.tokenizer, source: 'trained', notice: '' };
    const fallback = await loadStack({ ...config, source: 'checkpoint' });
    const why = 'nothing has been trained in this page yet: see the Train tab';
    return { ...fallback, notice: fallback.notice ? `${why}; ${fallback.notice}` : why };
  }
  if (config.source === 'lm') {
    languageModel ??= fetchLanguageModel();
    const result = await languageModel;
    if (typeof result === 'string') return { stack: seededFor(config), source: 'seeded', notice: result };
    const { stack, model } = result;
    return {
      stack,
      tokenizer: stack.tokenizer,
      source: 'lm',
      notice: '',
      maxLen: model.config.maxLen,
      decoder: model.config.causal,
      heads: headLabelsOf(result),
    };
  }
  if (config.source === 'checkpoint') {
    checkpoint ??= fetchCheckpoint();
    const result = await checkpoint;
    if (typeof result !== 'string')
      return { stack: result, tokenizer: result.tokenizer, source: 'checkpoint', notice: '' };
    return { stack: seededFor(config), source: 'seeded', notice: result };
  }
  return { stack: seededFor(config), source: 'seeded', notice: '' };
}

function seededFor(config: ModelConfig): AttentionStack {
  const { dModel, dK, heads, layers, seed } = config;
  const key = JSON.stringify([dModel, dK, heads, layers, seed]);
  if (seeded?.key !== key) seeded = { key, stack: seededStack({ dModel, dK, heads, layers, seed }) };
  return seeded.stack;
}

/**
 * The repeated-sequence probe as text: `n` words drawn (seeded) from the language model's vocabulary, each
 * a single token, written twice. Its tokens are x ‖ x, so an induction head attends from each token of the
 * second copy to the token after its first occurrence: a stripe n − 1 below the diagonal.
 */
export async function probeText(seed: number, n = PROBE_LENGTH): Promise<string> {
  languageModel ??= fetchLanguageModel();
  const lm = await languageModel;
  if (typeof lm === 'string') throw new Error(`the probe needs the language model: ${lm}`);
  const { tokenizer } = lm.stack;
  if (!lm.words) {
    lm.words = [];
    for (let id = 0; id < tokenizer.vocabSize; id++) {
      const text = tokenizer.decode([id]);
      if (!/^ [a-z]{2,}$/.test(text)) continue;
      const back = tokenizer.encode(text);
      if (back.length === 1 && back[0] === id) lm.words.push(id);
    }
  }
  const words = lm.words;
  if (words.length === 0) throw new Error(`${LM_NAME} has no single-token words to draw the probe from`);
  const gen = new Generator(seed);
  const x = Array.from({ length: n }, () => words[Math.floor(gen.random() * words.length)]);
  const once = tokenizer.decode(x);
  return `${once}${once}`;
}
