// The Tokenizer contract: text ↔ token ids, kept apart from tasks and models so a word list and a
// byte-level BPE plug into the same trainer, checkpoints and views. One decision to know: a tokenizer is
// stored by its `type` tag (`toJSON()` → `{ type, … }`, checkpoint key 'qkv.tokenizer'), and registry.ts
// maps each tag to its reader — a new kind of tokenizer adds one reader there, nothing else changes.

/** Roles a token can play besides text; a tokenizer lists the ids it has for them in `specials`. */
export type SpecialToken = 'pad' | 'bos' | 'eos' | 'sep' | 'unk';

/** What `toJSON()` returns: plain JSON whose `type` picks the reader (registry.ts) that rebuilds it. */
export interface TokenizerJSON {
  type: string;
  [field: string]: unknown;
}

/**
 * Maps text to token ids and back. Ids run from 0 to vocabSize − 1 and index the model's embedding rows.
 * Implementations: WordTokenizer (type 'word': a fixed word list, for the pronoun/copy/reverse tasks) and
 * BpeTokenizer (type 'bpe': byte-level BPE as GPT-2 does it, for the language model).
 */
export interface Tokenizer {
  /** The type tag stored in checkpoints ('word', 'bpe'). */
  readonly type: string;
  /** Number of ids (the model's vocabSize). */
  readonly vocabSize: number;
  /** Ids of the special tokens this tokenizer has (e.g. `{ pad: 0 }`, `{ bos: 0, sep: 1 }`). */
  readonly specials: Readonly<Partial<Record<SpecialToken, number>>>;
  /** One line for people, e.g. "96-word vocabulary". */
  readonly description: string;
  /**
   * Token ids of `text`, or of text already split into pieces (each piece encoded on its own; a word
   * tokenizer maps each piece to exactly one id). Throws UnknownTokenError for text it cannot encode.
   */
  encode(input: string | readonly string[]): Int32Array;
  /** The text of `ids` (ids out of range throw). */
  decode(ids: ArrayLike<number>): string;
  /**
   * One label per token that `encode(text)` gives, in order, as a person reads it (a word tokenizer: each
   * word as typed). Never throws on unknown words, so a view can show and mark them.
   */
  tokenize(text: string): string[];
  /** The token with this id, as stored (distinct for every id: heatmap rows and embedding rows use it). */
  idToToken(id: number): string;
  /** The id of exactly this token, or undefined (no case folding or <unk> substitution here). */
  tokenToId(token: string): number | undefined;
  /** Plain JSON that `tokenizerFromJSON` turns back into an equal tokenizer. */
  toJSON(): TokenizerJSON;
}

/** Thrown by `encode` when text holds tokens outside a closed vocabulary; `tokens` lists them once each. */
export class UnknownTokenError extends RangeError {
  readonly tokens: string[];
  constructor(message: string, tokens: string[]) {
    super(message);
    this.name = 'UnknownTokenError';
    this.tokens = tokens;
  }
}

/** The checkpoint metadata key that holds `JSON.stringify(tokenizer.toJSON())`. */
export const TOKENIZER_KEY = 'qkv.tokenizer';
/** The key older checkpoints (models/pronoun.safetensors) use: a JSON list of words, read as a WordTokenizer. */
export const LEGACY_VOCAB_KEY = 'qkv.vocab';
