// WordTokenizer (type 'word'): a fixed word list, one id per word — the tokenizer of the pronoun, copy and
// reverse tasks and of every checkpoint they write. One decision to know: a word outside the list is an
// error (UnknownTokenError naming each such word, as the playground has always refused them) unless the
// tokenizer is built with `unk`, which then stands for every unknown word; a word is looked up as written,
// then lower-cased ("The" is "the"), so decode gives the list's spelling back.

import { checkVocabulary, formatFound } from '../io/checks.js';
import { type SpecialToken, type Tokenizer, type TokenizerJSON, UnknownTokenError } from './tokenizer.js';

/** Words (inner apostrophes and hyphens kept: "didn't"), numbers, each punctuation mark, each Han/kana character. */
const WORD = String.raw`[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}]|[\p{L}\p{N}\p{M}]+(?:['’-][\p{L}\p{N}\p{M}]+)*|[^\s\p{L}\p{N}\p{M}]`;
const WORDS = new RegExp(WORD, 'gu');
/** The same, plus special tokens written in angle brackets ("<bos>", "<|endoftext|>") kept whole. */
const WORDS_AND_SPECIALS = new RegExp(String.raw`<[\p{L}\p{N}_|]+>|${WORD}`, 'gu');

/**
 * Splits text into word, number, punctuation and CJK-character tokens (the playground's rule); with
 * `specials`, a token in angle brackets such as "<sep>" stays one token.
 */
export function splitWords(text: string, options: { specials?: boolean } = {}): string[] {
  return text.match(options.specials ? WORDS_AND_SPECIALS : WORDS) ?? [];
}

/** Options of a WordTokenizer. */
export interface WordTokenizerOptions {
  /** A word of the list that stands for every word outside it; without it, unknown words throw. */
  unk?: string;
}

/** Special roles recognised by name in a word list: "<pad>" is the pad token, and so on. */
const NAMED_SPECIALS: SpecialToken[] = ['pad', 'bos', 'eos', 'sep'];
const JSON_FIELDS = ['type', 'words', 'unk'];
/** At most this many unknown words are quoted in an error message (all are in `error.tokens`). */
const QUOTED = 10;

type Fail = (message: string) => never;

/** Checks a word list: distinct strings, none empty or with whitespace (decode joins words with spaces). */
function checkWords(value: unknown, field: string, fail: Fail): string[] {
  const words = checkVocabulary(value, field, fail);
  if (words.length === 0) fail(`${field} must hold at least one word`);
  words.forEach((w, i) => {
    if (w === '' || /\s/u.test(w))
      fail(`${field} entry ${i} must be a word without whitespace, found ${formatFound(w)}`);
  });
  return words;
}

/** Tokenizes with a fixed word list: token id i is `words[i]`. */
export class WordTokenizer implements Tokenizer {
  readonly type = 'word';
  readonly words: readonly string[];
  readonly vocabSize: number;
  readonly specials: Readonly<Partial<Record<SpecialToken, number>>>;
  /** The word unknown words become, if any. */
  readonly unk: string | undefined;
  readonly #index: Map<string, number>;
  readonly #unkId: number | undefined;

  /** @throws naming the entry: a repeated, empty or spaced word, or an `unk` that is not in the list. */
  constructor(words: readonly string[], options: WordTokenizerOptions = {}) {
    const fail = (message: string): never => {
      throw new RangeError(`WordTokenizer: ${message}`);
    };
    if (options === null || typeof options !== 'object')
      throw new TypeError(`WordTokenizer: options must be an object, found ${formatFound(options)}`);
    this.words = Object.freeze([...checkWords(words, 'words', fail)]);
    this.vocabSize = this.words.length;
    this.#index = new Map(this.words.map((w, i) => [w, i]));
    const { unk } = options;
    if (unk !== undefined && !(typeof unk === 'string' && this.#index.has(unk)))
      fail(`unk must be one of the words, found ${formatFound(unk)}`);
    this.unk = unk;
    this.#unkId = unk === undefined ? undefined : this.#index.get(unk);
    const specials: Partial<Record<SpecialToken, number>> = {};
    for (const role of NAMED_SPECIALS) {
      const id = this.#index.get(`<${role}>`);
      if (id !== undefined) specials[role] = id;
    }
    if (this.#unkId !== undefined) specials.unk = this.#unkId;
    this.specials = Object.freeze(specials);
  }

  /** Rebuilds a tokenizer from `toJSON()` output; errors name the field. */
  static fromJSON(json: unknown): WordTokenizer {
    return readWordTokenizer(json, (message) => {
      throw new RangeError(`WordTokenizer.fromJSON: ${message}`);
    });
  }

  get description(): string {
    const unk = this.unk === undefined ? '' : `, unknown words read as ${this.unk}`;
    return `${this.vocabSize}-word vocabulary${unk}`;
  }

  /** Words, punctuation marks and <special> tokens, as typed (splitWords with specials). */
  tokenize(text: string): string[] {
    if (typeof text !== 'string')
      throw new TypeError(`WordTokenizer.tokenize: text must be a string, found ${formatFound(text)}`);
    return splitWords(text, { specials: true });
  }

  /**
   * One id per word of `text` (split by `tokenize`), or per entry of an array of words (not split).
   * @throws UnknownTokenError naming every word outside the list (when there is no `unk`).
   */
  encode(input: string | readonly string[]): Int32Array {
    const fn = 'WordTokenizer.encode';
    let pieces: readonly string[];
    if (typeof input === 'string') pieces = this.tokenize(input);
    else if (Array.isArray(input)) {
      input.forEach((w: unknown, i) => {
        if (typeof w !== 'string')
          throw new TypeError(`${fn}: input entry ${i} must be a string, found ${formatFound(w)}`);
      });
      pieces = input;
    } else {
      throw new TypeError(
        `${fn}: input must be a string or an array of strings, found ${formatFound(input)}`,
      );
    }
    const ids = new Int32Array(pieces.length);
    const unknown = new Set<string>();
    pieces.forEach((w, i) => {
      const id = this.#index.get(w) ?? this.#index.get(w.toLowerCase()) ?? this.#unkId;
      if (id === undefined) unknown.add(w);
      else ids[i] = id;
    });
    if (unknown.size > 0) {
      const all = [...unknown];
      const quoted = all.slice(0, QUOTED).map((w) => `'${w}'`);
      if (all.length > QUOTED) quoted.push(`… (${all.length - QUOTED} more)`);
      throw new UnknownTokenError(
        `${fn}: ${quoted.join(', ')} ${all.length === 1 ? 'is' : 'are'} not in the ${this.vocabSize}-word vocabulary`,
        all,
      );
    }
    return ids;
  }

  /** The words of `ids`, joined by single spaces. */
  decode(ids: ArrayLike<number>): string {
    const fn = 'WordTokenizer.decode';
    if (ids === null || typeof ids !== 'object' || typeof ids.length !== 'number')
      throw new TypeError(`${fn}: ids must be an array of token ids, found ${formatFound(ids)}`);
    return Array.from({ length: ids.length }, (_, i) => this.#word(ids[i], fn, `ids[${i}]`)).join(' ');
  }

  idToToken(id: number): string {
    return this.#word(id, 'WordTokenizer.idToToken', 'id');
  }

  tokenToId(token: string): number | undefined {
    return this.#index.get(token);
  }

  toJSON(): TokenizerJSON {
    return { type: this.type, words: [...this.words], ...(this.unk === undefined ? {} : { unk: this.unk }) };
  }

  #word(id: unknown, fn: string, name: string): string {
    if (!(Number.isInteger(id) && (id as number) >= 0 && (id as number) < this.vocabSize))
      throw new RangeError(
        `${fn}: ${name} = ${formatFound(id)} is not a token id (0 to ${this.vocabSize - 1})`,
      );
    return this.words[id as number];
  }
}

/** Reads `{ type: 'word', words, unk? }`; `fail` adds the caller's name and field to the message. */
export function readWordTokenizer(json: unknown, fail: Fail): WordTokenizer {
  if (json === null || typeof json !== 'object' || Array.isArray(json))
    fail(`a word tokenizer must be a JSON object, found ${formatFound(json)}`);
  const o = json as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (!JSON_FIELDS.includes(key))
      fail(`word tokenizer has an unknown field '${key}' (known: ${JSON_FIELDS.join(', ')})`);
  }
  if (o.type !== 'word') fail(`type must be 'word', found ${formatFound(o.type)}`);
  const words = checkWords(o.words, 'words', fail);
  if (o.unk !== undefined && !(typeof o.unk === 'string' && words.includes(o.unk)))
    fail(`unk must be one of the words, found ${formatFound(o.unk)}`);
  return new WordTokenizer(words, o.unk === undefined ? {} : { unk: o.unk as string });
}

/** A word list read from an older checkpoint's 'qkv.vocab' (errors name `field` and its entries). */
export function wordTokenizerFromList(value: unknown, field: string, fail: Fail): WordTokenizer {
  return new WordTokenizer(checkWords(value, field, fail));
}
