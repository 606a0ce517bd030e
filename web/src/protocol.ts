// Messages between the page (main.ts) and the compute worker (worker.ts).
// One decision to know: the worker sends plain data (typed arrays, specs), never class instances, so
// structured cloning copies it once and the page never recomputes anything.

import type { ScoreName, SoftmaxStats, StepView } from 'qkv/viz';

/**
 * 'checkpoint' = the trained models/pronoun.safetensors when it exists; 'lm' = the language model
 * models/brown-lm.safetensors (byte-level BPE: any text); 'seeded' = untrained weights; 'trained' = the
 * model last handed over by the Train tab ("Use this model").
 */
export type ModelSource = 'checkpoint' | 'lm' | 'seeded' | 'trained';

/** A head's strongest named pattern (headScores on a repeated-sequence probe) and all four scores. */
export interface HeadLabel {
  layer: number;
  head: number;
  pattern: ScoreName;
  score: number;
  scores: Record<ScoreName, number>;
}

export interface ModelConfig {
  source: ModelSource;
  dModel: number;
  dK: number;
  heads: number;
  layers: number;
  seed: number;
}

export interface ExperimentSwitches {
  causal: boolean;
  scaled: boolean;
  tieQK: boolean;
  /** −1 = none. */
  blockedQuery: number;
}

export interface TraceRequest {
  kind: 'trace';
  id: number;
  text: string;
  config: ModelConfig;
  switches: ExperimentSwitches;
  focus: { layer: number; head: number };
}

export interface SaturationRequest {
  kind: 'saturation';
  id: number;
  n: number;
  seed: number;
  dKs: number[];
}

/** Safetensors bytes from the Train tab, to be the 'trained' source from now on. */
export interface LoadRequest {
  kind: 'load';
  id: number;
  bytes: Uint8Array;
}

/** Asks for the repeated-sequence probe's text (the language model's words, drawn with `seed`). */
export interface ProbeRequest {
  kind: 'probe';
  id: number;
  seed: number;
}

export type Request = TraceRequest | SaturationRequest | LoadRequest | ProbeRequest;

export interface TraceResult {
  kind: 'trace';
  id: number;
  tokens: string[];
  /** Tokens dropped beyond the limit (0 if none). */
  dropped: number;
  /** The limit: MAX_TOKENS, or the model's maxLen when that is smaller. */
  limit: number;
  description: string;
  /** The config as requested, and the model's real shape and source (a checkpoint fixes its own shape). */
  config: ModelConfig;
  model: {
    source: ModelSource;
    dModel: number;
    dK: number;
    heads: number;
    layers: number;
    /** The tokens a person may type, for a closed vocabulary (a word tokenizer); none for BPE. */
    vocab?: string[];
    /** The model's own limit on tokens (its maxLen), if it has one. */
    maxLen?: number;
    /** A decoder, trained with the causal mask. */
    decoder?: boolean;
    /** Each head's strongest named pattern, layer-major (a decoder language model only). */
    headLabels?: HeadLabel[];
  };
  /** Why the model differs from what was asked (e.g. no checkpoint file), or ''. */
  notice: string;
  switches: ExperimentSwitches;
  focus: { layer: number; head: number };
  /** Per layer, all heads' weights [H·L·L]. */
  weights: Float32Array[];
  steps: StepView[];
  /** The focused head's weight statistics as computed, and with scaling flipped, for comparison. */
  stats: SoftmaxStats;
  statsOtherScaling: SoftmaxStats;
  /** max |S − Sᵀ| and max |S| of the focused head's Q·Kᵀ (symmetry check for W_Q = W_K). */
  asymmetry: number;
  scoreMagnitude: number;
  /** For the blocked query: qkv's row and output vs the article's −1e9 row and output. */
  blocked?: {
    query: number;
    qkvWeights: number[];
    qkvOutput: number[];
    articleWeights: number[];
    articleOutput: number[];
  };
  millis: number;
}

export interface SaturationResult {
  kind: 'saturation';
  id: number;
  n: number;
  points: { dK: number; scaled: SoftmaxStats; unscaled: SoftmaxStats }[];
}

export interface ErrorResult {
  kind: 'error';
  id: number;
  message: string;
  /** The tokens and those a checkpoint's vocabulary lacks, when that was the problem. */
  tokens?: string[];
  unknown?: string[];
  /** The checkpoint's tokens a person may type (its special tokens left out). */
  vocab?: string[];
}

/** The answer to a LoadRequest: the loaded model's description, or why it could not be loaded. */
export interface LoadResult {
  kind: 'loaded';
  id: number;
  description?: string;
  error?: string;
}

/** The answer to a ProbeRequest: the probe text, or why there is none. */
export interface ProbeResult {
  kind: 'probe';
  id: number;
  text?: string;
  error?: string;
}

export type Response = TraceResult | SaturationResult | ErrorResult | LoadResult | ProbeResult;

export const MAX_TOKENS = 512;
