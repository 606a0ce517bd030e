// Messages between the Generate tab (generate.ts) and its worker (generate-worker.ts).
// One decision to know: the worker owns the model, the KV caches, the paged-cache mirror and the sampling
// generators; the page sends one request per token and gets back plain data (labels, the newest token's
// attention rows, the next-token logits, the block tables), never a class instance. Every answer carries
// the `epoch` of the prompt it belongs to, so the page can drop answers that a newer prompt made stale.

/** temperature 0 = greedy; topK 0 = every token; topP 1 = no nucleus cut. */
export interface SamplingSettings {
  temperature: number;
  topK: number;
  topP: number;
}

/** Where a model came from, for the page's wording. */
export type ModelOrigin = 'train' | 'file' | 'bundled';

/** Page → worker. Requests are answered in order, one answer each. */
export type GenerateRequest =
  /** Safetensors bytes to load as the model (answer: 'model'); drops every sequence. */
  | { kind: 'load'; epoch: number; bytes: Uint8Array; name: string; origin: ModelOrigin }
  /** Start again from this prompt (the prefill) with a fresh paged cache (answer: 'state' or 'error'). */
  | { kind: 'prompt'; epoch: number; text: string; seed: number }
  /** One token for every sequence that can still grow (answer: 'state'). */
  | { kind: 'step'; epoch: number; sampling: SamplingSettings }
  /** Fork sequence 0 into a second sequence that samples with `seed` (answer: 'state' or 'error'). */
  | { kind: 'fork'; epoch: number; seed: number };

/** What the page states about a loaded decoder. */
export interface ModelInfo {
  name: string;
  origin: ModelOrigin;
  description: string;
  task?: string;
  step?: number;
  layers: number;
  heads: number;
  dModel: number;
  vocabSize: number;
  maxLen: number;
  parameters: number;
  /** Every token's label by id (idToToken; a BPE token's decoded text, see token-label.ts), for the distribution's rows. */
  labels: string[];
  /** A prompt that fits the model (a copy/reverse model: its task's sample up to <sep>). */
  defaultPrompt: string;
}

/** One sequence as the page draws it. */
export interface SequenceView {
  /** Its id in the paged cache. */
  pagedId: number;
  seed: number;
  /** Every token's label (as `labels`), prompt first. */
  tokens: string[];
  ids: number[];
  /** The decoded text of every token. */
  text: string;
  promptLength: number;
  /** Tokens that went through the model (in its KV cache); tokens.length − fed is 0, or 1 when full. */
  fed: number;
  /** Probability of each generated token under the distribution it was drawn from. */
  chosen: number[];
  /** Position of the newest fed token, whose attention row is `attention`. */
  position: number;
  /** Per layer, the newest fed token's weights over the cache, [H·S] with S = fed. */
  attention: Float32Array[];
  /** Logits after the newest fed token (V): the next token's, or, once stopped, the last token's. */
  logits?: Float32Array;
  /** Why it stopped ('' while it can grow). */
  stopped: string;
}

/** The paged cache mirror: one layer's K/V per token in blocks of `blockSize`. */
export interface PagedView {
  blockSize: number;
  numBlocks: number;
  freeBlocks: number;
  /** Per sequence: its physical block ids in token order and its length. */
  tables: { pagedId: number; table: number[]; length: number }[];
  /** Blocks made by copy-on-write: `block` is the copy of `from`, taken for sequence `pagedId`. */
  copies: { block: number; from: number; pagedId: number }[];
  /** The length sequence 0 had when it was forked (−1: no fork yet). */
  forkedAt: number;
}

export type GenerateResponse =
  | { kind: 'model'; epoch: number; info: ModelInfo }
  | {
      kind: 'state';
      epoch: number;
      sequences: SequenceView[];
      paged: PagedView;
      /** New tokens since the prompt (all sequences) and the worker's time spent making them. */
      generated: number;
      computeMs: number;
      vocabSize: number;
    }
  | {
      kind: 'error';
      epoch: number;
      /** What failed: the model (nothing loaded), the prompt, or a step. */
      about: 'model' | 'prompt' | 'step';
      message: string;
      unknown?: string[];
    };
