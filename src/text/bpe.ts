// BpeTokenizer (type 'bpe'): byte-level BPE as GPT-2 does it. Text is cut at special tokens
// ("<|endoftext|>"), the rest split into chunks by GPT-2's pattern (contractions, ` ?letters`, ` ?digits`,
// ` ?other marks`, whitespace runs), each chunk's UTF-8 bytes start as one token each (256 byte tokens,
// written with GPT-2's printable byte alphabet: "Ġthe" is " the"), and merges join adjacent pairs, lowest
// rank first. Trained here (`BpeTokenizer.train`), or read from a Hugging Face tokenizer.json.
// One decision to know: every byte has a token, so encode never fails and decode(encode(s)) === s for every
// well-formed string; a lone surrogate (half a UTF-16 pair) has no UTF-8 form, TextEncoder writes U+FFFD
// for it, and so decode gives U+FFFD in its place. Trained tokenizers put byte b at id b, merge k's new
// token next (256, 257, …) and the special tokens last: '<|endoftext|>' is id vocabSize − 1 (specials.eos).

import { formatFound } from '../io/checks.js';
import type { SpecialToken, Tokenizer, TokenizerJSON } from './tokenizer.js';

type Fail = (message: string) => never;

/** GPT-2's pre-tokenizer (Hugging Face's ByteLevel with use_regex), as a JS unicode regex. */
const CHUNKS = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

/** The document separator special token of trained tokenizers (GPT-2's). */
export const END_OF_TEXT = '<|endoftext|>';

/** Special tokens whose role `specials` names, by their text (the first of a role wins). */
const ROLES: Readonly<Record<string, SpecialToken>> = {
  '<|endoftext|>': 'eos',
  '<pad>': 'pad',
  '<bos>': 'bos',
  '<eos>': 'eos',
  '<sep>': 'sep',
  '<unk>': 'unk',
  '<s>': 'bos',
  '</s>': 'eos',
};

/**
 * GPT-2's bytes → unicode table: printable Latin-1 bytes ('!'…'~', '¡'…'¬', '®'…'ÿ') stand for
 * themselves, the other 68 bytes for U+0100 onwards in byte order (space, 0x20, is 'Ġ' = U+0120).
 */
const BYTE_CHARS: readonly string[] = (() => {
  const chars: string[] = [];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    chars.push(String.fromCharCode(printable ? b : 256 + n++));
  }
  return chars;
})();
const CHAR_BYTES: ReadonlyMap<string, number> = new Map(BYTE_CHARS.map((c, b) => [c, b]));

const utf8 = new TextEncoder();
/** Replaces invalid UTF-8 with U+FFFD; keeps a leading U+FEFF (the default decoder would drop it). */
const lenient = new TextDecoder('utf-8', { ignoreBOM: true });
const strict = new TextDecoder('utf-8', { ignoreBOM: true, fatal: true });

/** Chunks longer than this (in bytes) merge with a heap, O(n log n); shorter ones by scanning. */
const SCAN_MAX = 48;
/** The per-chunk encode cache is emptied when it holds this many chunks (memory stays bounded). */
const CACHE_MAX = 50_000;
/** Ids beyond this are refused when reading JSON (a typo must not allocate gigabytes). */
const MAX_ID = 1 << 24;

/** Options of `BpeTokenizer.train`. */
export interface BpeTrainOptions {
  /**
   * Number of tokens wanted: 256 byte tokens + merges + specials. Training stops sooner when no pair
   * occurs `minFrequency` times; `vocabSize` of the result says how many there are.
   */
  vocabSize: number;
  /** A pair is merged only when it occurs at least this many times in the text (default 2). */
  minFrequency?: number;
  /** Special tokens, each matched whole in text and given the last ids, in order (default ['<|endoftext|>']). */
  specials?: readonly string[];
}

/** Everything a BpeTokenizer is made of, checked (see `assemble`). */
interface Parts {
  /** id → token as stored: the byte-alphabet form ("Ġthe") or a special token's text. */
  tokens: string[];
  /** Ids of the special tokens, in the order given. */
  specialIds: number[];
  /** Rank k: left id, right id, id of the joined token, at 3k, 3k + 1, 3k + 2. */
  merges: Int32Array;
}

/** `new BpeTokenizer(parts)` for this module's readers (the constructor is private: parts are checked first). */
let build: (parts: Parts) => BpeTokenizer;

/**
 * Checks and indexes a vocabulary: every non-special token is non-empty byte-alphabet text, all 256 byte
 * tokens are there, tokens are distinct, and each merge joins two non-special tokens into one that exists.
 * `mergesName` names the merges (e.g. 'model.merges') in messages; `mergeEntry(k)` says which entry.
 */
function assemble(
  tokens: string[],
  specialIds: number[],
  pairs: ArrayLike<number>,
  fail: Fail,
  mergeEntry: (k: number) => string,
): Parts {
  const special = new Set(specialIds);
  const index = new Map<string, number>();
  tokens.forEach((t, id) => {
    if (special.has(id)) return;
    if (t === '') fail(`token ${id} is empty`);
    for (const ch of t) {
      if (!CHAR_BYTES.has(ch))
        fail(`token ${id} = ${formatFound(t)} has ${formatFound(ch)}, which is not in the byte alphabet`);
    }
    const other = index.get(t);
    if (other !== undefined) fail(`token ${id} repeats token ${other} (${formatFound(t)})`);
    index.set(t, id);
  });
  for (const id of specialIds) {
    const other = index.get(tokens[id]);
    if (other !== undefined)
      fail(`special token ${formatFound(tokens[id])} (id ${id}) is also the text of token ${other}`);
  }
  for (let b = 0; b < 256; b++) {
    if (!index.has(BYTE_CHARS[b]))
      fail(
        `the byte 0x${b.toString(16).padStart(2, '0')} (${formatFound(BYTE_CHARS[b])}) has no token; a byte-level BPE needs all 256`,
      );
  }
  const count = pairs.length / 2;
  const merges = new Int32Array(count * 3);
  const seen = new Map<number, number>();
  for (let k = 0; k < count; k++) {
    const a = pairs[2 * k];
    const b = pairs[2 * k + 1];
    for (const id of [a, b]) {
      if (!(Number.isInteger(id) && id >= 0 && id < tokens.length) || special.has(id))
        fail(`${mergeEntry(k)} joins ${formatFound(id)}, which is not the id of an ordinary token`);
    }
    const joined = index.get(tokens[a] + tokens[b]);
    if (joined === undefined)
      fail(`${mergeEntry(k)} makes ${formatFound(tokens[a] + tokens[b])}, which is not a token`);
    const key = a * tokens.length + b;
    const first = seen.get(key);
    if (first !== undefined) fail(`${mergeEntry(k)} repeats ${mergeEntry(first)}`);
    seen.set(key, k);
    merges.set([a, b, joined], 3 * k);
  }
  return { tokens, specialIds, merges };
}

/**
 * Byte-level BPE (GPT-2 style): text ↔ ids through UTF-8 bytes and ranked merges, with special tokens
 * such as '<|endoftext|>' matched whole. Build one with `BpeTokenizer.train`, `BpeTokenizer.fromJSON`
 * (or `tokenizerFromJSON`) or `BpeTokenizer.fromHuggingFace`.
 *
 * @example
 * const tok = BpeTokenizer.train(corpus, { vocabSize: 4096 });
 * const ids = tok.encode('The jury said.<|endoftext|>');
 * tok.decode(ids); // 'The jury said.<|endoftext|>'
 * tok.tokenize(' the cat'); // [' the', ' cat']
 * tok.specials; // { eos: 4095 }
 */
export class BpeTokenizer implements Tokenizer {
  readonly type = 'bpe';
  readonly vocabSize: number;
  readonly specials: Readonly<Partial<Record<SpecialToken, number>>>;
  /** The special tokens' text, in the order given (trained: their ids follow the merges in this order). */
  readonly specialTokens: readonly string[];
  /** Number of merge rules. */
  readonly mergeCount: number;
  readonly #tokens: readonly string[];
  /** id → its bytes (a special token: its text's UTF-8). */
  readonly #bytes: Uint8Array[];
  readonly #index: Map<string, number>;
  readonly #byteIds: Int32Array;
  readonly #merges: Int32Array;
  /** left × vocabSize + right → rank. */
  readonly #ranks: Map<number, number>;
  readonly #specialIds: Map<string, number>;
  /** Splits text around special tokens (odd entries of `split` are specials), or undefined without any. */
  readonly #specialSplit: RegExp | undefined;
  readonly #labels: (string | undefined)[];
  #cache = new Map<string, Int32Array>();

  static {
    build = (parts) => new BpeTokenizer(parts);
  }

  private constructor(parts: Parts) {
    const { tokens, specialIds, merges } = parts;
    this.vocabSize = tokens.length;
    this.#tokens = Object.freeze(tokens);
    this.#merges = merges;
    this.mergeCount = merges.length / 3;
    const special = new Set(specialIds);
    this.#index = new Map(tokens.map((t, id) => [t, id]));
    this.#bytes = tokens.map((t, id) =>
      special.has(id) ? utf8.encode(t) : Uint8Array.from(t, (ch) => CHAR_BYTES.get(ch)!),
    );
    this.#byteIds = Int32Array.from(BYTE_CHARS, (ch) => this.#index.get(ch)!);
    this.#ranks = new Map();
    for (let k = 0; k < this.mergeCount; k++)
      this.#ranks.set(merges[3 * k] * this.vocabSize + merges[3 * k + 1], k);
    this.specialTokens = Object.freeze(specialIds.map((id) => tokens[id]));
    this.#specialIds = new Map(specialIds.map((id) => [tokens[id], id]));
    const roles: Partial<Record<SpecialToken, number>> = {};
    for (const id of specialIds) {
      const role = Object.hasOwn(ROLES, tokens[id]) ? ROLES[tokens[id]] : undefined;
      if (role !== undefined && roles[role] === undefined) roles[role] = id;
    }
    this.specials = Object.freeze(roles);
    // Longest first, so a special that starts another one's text never cuts it short.
    const alternatives = [...this.specialTokens]
      .sort((x, y) => y.length - x.length)
      .map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
    this.#specialSplit = alternatives.length > 0 ? new RegExp(`(${alternatives.join('|')})`, 'u') : undefined;
    this.#labels = new Array(this.vocabSize);
  }

  /**
   * Learns merges from `text`: counts each chunk once (a word → count map), then repeatedly merges the
   * most frequent adjacent pair (ties: the pair of smaller ids), updating pair counts only in the words
   * that hold it. Special tokens in `text` separate chunks and are not learned from. Deterministic: the
   * same text and options give the same merges.
   * @throws RangeError naming the option: a vocabSize below 256 + the number of specials, a minFrequency
   *   below 1, specials that repeat or are empty.
   */
  static train(text: string, options: BpeTrainOptions): BpeTokenizer {
    const fn = 'BpeTokenizer.train';
    if (typeof text !== 'string')
      throw new TypeError(`${fn}: text must be a string, found ${formatFound(text)}`);
    if (options === null || typeof options !== 'object')
      throw new TypeError(`${fn}: options must be an object with a vocabSize, found ${formatFound(options)}`);
    const fail: Fail = (message: string): never => {
      throw new RangeError(`${fn}: ${message}`);
    };
    const specials = options.specials ?? [END_OF_TEXT];
    if (!Array.isArray(specials))
      fail(`options.specials must be an array of strings, found ${formatFound(specials)}`);
    specials.forEach((s: unknown, i) => {
      if (typeof s !== 'string' || s === '')
        fail(`options.specials entry ${i} must be a non-empty string, found ${formatFound(s)}`);
      if (specials.indexOf(s) !== i) fail(`options.specials entry ${i} repeats ${formatFound(s)}`);
    });
    const { vocabSize } = options;
    const least = 256 + specials.length;
    if (!(Number.isInteger(vocabSize) && vocabSize >= least && vocabSize <= MAX_ID))
      fail(
        `options.vocabSize must be an integer from ${least} (256 byte tokens + ${specials.length} special) to ${MAX_ID}, found ${formatFound(vocabSize)}`,
      );
    const minFrequency = options.minFrequency ?? 2;
    if (!(Number.isInteger(minFrequency) && minFrequency >= 1))
      fail(`options.minFrequency must be an integer ≥ 1, found ${formatFound(minFrequency)}`);

    const pairs = learnMerges(text, specials, vocabSize - specials.length, minFrequency);
    const tokens = [...BYTE_CHARS];
    const index = new Map(tokens.map((t, id) => [t, id]));
    for (let k = 0; k < pairs.length; k += 2) {
      const joined = tokens[pairs[k]] + tokens[pairs[k + 1]];
      if (!index.has(joined)) {
        index.set(joined, tokens.length);
        tokens.push(joined);
      }
    }
    const specialIds = specials.map((s) => {
      tokens.push(s);
      return tokens.length - 1;
    });
    return new BpeTokenizer(assemble(tokens, specialIds, pairs, fail, (k) => `merge ${k}`));
  }

  /** Rebuilds a tokenizer from `toJSON()` output; errors name the field. */
  static fromJSON(json: unknown): BpeTokenizer {
    return readBpeTokenizer(json, (message) => {
      throw new RangeError(`BpeTokenizer.fromJSON: ${message}`);
    });
  }

  /**
   * Reads a Hugging Face tokenizer.json (its text or the parsed object) whose model.type is "BPE" with a
   * ByteLevel pre_tokenizer (GPT-2's regex, no added prefix space): model.vocab, model.merges ("a b"
   * strings or [a, b] pairs) and added_tokens (as special tokens, matched whole). Ids are kept as given
   * and must run from 0 to vocabSize − 1. A ByteLevel (or no) decoder and post_processor are accepted;
   * a normalizer, dropout, subword prefixes/suffixes, byte_fallback, ignore_merges, or added tokens with
   * lstrip/rstrip/single_word are refused (encode would give other ids than the original).
   * @throws RangeError naming BpeTokenizer.fromHuggingFace and the field that is malformed or unsupported.
   */
  static fromHuggingFace(json: unknown): BpeTokenizer {
    const fail: Fail = (message: string): never => {
      throw new RangeError(`BpeTokenizer.fromHuggingFace: ${message}`);
    };
    let parsed = json;
    if (typeof json === 'string') {
      try {
        parsed = JSON.parse(json);
      } catch (err) {
        fail(`json is not valid JSON (${(err as Error).message})`);
      }
    }
    return readHuggingFace(parsed, fail);
  }

  get description(): string {
    const n = this.specialTokens.length;
    return `byte-level BPE, ${this.vocabSize} tokens (${this.mergeCount} merges, ${n} special${n === 1 ? '' : 's'})`;
  }

  /**
   * Token ids of `text` (special tokens' text becomes their id), or of each piece of an array on its
   * own, concatenated. Never throws for a string: every byte has a token.
   */
  encode(input: string | readonly string[]): Int32Array {
    const fn = 'BpeTokenizer.encode';
    if (typeof input === 'string') return Int32Array.from(this.#encodeText(input));
    if (!Array.isArray(input))
      throw new TypeError(
        `${fn}: input must be a string or an array of strings, found ${formatFound(input)}`,
      );
    const ids: number[] = [];
    input.forEach((piece: unknown, i) => {
      if (typeof piece !== 'string')
        throw new TypeError(`${fn}: input entry ${i} must be a string, found ${formatFound(piece)}`);
      for (const id of this.#encodeText(piece)) ids.push(id);
    });
    return Int32Array.from(ids);
  }

  /**
   * The text of `ids`: their bytes, read as UTF-8 (bytes that are not valid UTF-8, as a cut in the middle
   * of a character gives, read as U+FFFD). decode(encode(s)) === s when s has no lone surrogates.
   */
  decode(ids: ArrayLike<number>): string {
    const fn = 'BpeTokenizer.decode';
    if (ids === null || typeof ids !== 'object' || typeof ids.length !== 'number')
      throw new TypeError(`${fn}: ids must be an array of token ids, found ${formatFound(ids)}`);
    let length = 0;
    for (let i = 0; i < ids.length; i++) length += this.#bytes[this.#check(ids[i], fn, `ids[${i}]`)].length;
    const bytes = new Uint8Array(length);
    let at = 0;
    for (let i = 0; i < ids.length; i++) {
      bytes.set(this.#bytes[ids[i]], at);
      at += this.#bytes[ids[i]].length;
    }
    return lenient.decode(bytes);
  }

  /**
   * The tokens `encode(text)` gives, as a person reads them: each token's decoded text (" the", "<|endoftext|>").
   * A token that holds part of a character shows those bytes as <0xNN> ("<0xE7><0x8C>").
   */
  tokenize(text: string): string[] {
    if (typeof text !== 'string')
      throw new TypeError(`BpeTokenizer.tokenize: text must be a string, found ${formatFound(text)}`);
    return this.#encodeText(text).map((id) => {
      this.#labels[id] ??= this.#specialIds.has(this.#tokens[id]) ? this.#tokens[id] : label(this.#bytes[id]);
      return this.#labels[id];
    });
  }

  /** The token as stored: GPT-2's byte alphabet ("Ġthe" for " the"), or a special token's text. */
  idToToken(id: number): string {
    return this.#tokens[this.#check(id, 'BpeTokenizer.idToToken', 'id')];
  }

  /** The id of a token as `idToToken` writes it ("Ġthe", "<|endoftext|>"), or undefined. */
  tokenToId(token: string): number | undefined {
    return this.#index.get(token);
  }

  /**
   * Compact JSON: `{ type: 'bpe', merges, specials }` with merges as a flat list of id pairs in rank order
   * and specials as [text, id] pairs; the tokens follow from them (each merge's token takes the next free
   * id). `bytes`, `extra` and `ids` appear only for layouts that rule does not give (Hugging Face files).
   */
  toJSON(): TokenizerJSON {
    const merges = this.#merges;
    const pairs: number[] = [];
    const made = new Set<number>();
    for (let k = 0; k < this.mergeCount; k++) {
      pairs.push(merges[3 * k], merges[3 * k + 1]);
      made.add(merges[3 * k + 2]);
    }
    const specials = [...this.#specialIds].map(([text, id]) => [text, id]);
    const json: TokenizerJSON = { type: this.type, merges: pairs, specials };
    if (this.#byteIds.some((id, b) => id !== b)) json.bytes = Array.from(this.#byteIds);
    const bytes = new Set(this.#byteIds);
    const extra: [number, string][] = [];
    this.#tokens.forEach((t, id) => {
      if (!bytes.has(id) && !made.has(id) && !this.#specialIds.has(t)) extra.push([id, t]);
    });
    if (extra.length > 0) json.extra = extra;
    // The ids the next-free rule gives; `ids` is written only when they differ from the real ones.
    const taken = new Set([...bytes, ...this.#specialIds.values(), ...extra.map(([id]) => id)]);
    let free = 0;
    const seen = new Set([...bytes, ...extra.map(([id]) => id)]);
    let implied = true;
    for (let k = 0; k < this.mergeCount && implied; k++) {
      const id = merges[3 * k + 2];
      if (seen.has(id)) continue;
      while (taken.has(free)) free++;
      implied = id === free;
      taken.add(id);
      seen.add(id);
    }
    if (!implied) json.ids = Array.from({ length: this.mergeCount }, (_, k) => merges[3 * k + 2]);
    return json;
  }

  #check(id: unknown, fn: string, name: string): number {
    if (!(Number.isInteger(id) && (id as number) >= 0 && (id as number) < this.vocabSize))
      throw new RangeError(
        `${fn}: ${name} = ${formatFound(id)} is not a token id (0 to ${this.vocabSize - 1})`,
      );
    return id as number;
  }

  #encodeText(text: string): number[] {
    const ids: number[] = [];
    const parts = this.#specialSplit ? text.split(this.#specialSplit) : [text];
    parts.forEach((part, i) => {
      if (i % 2 === 1) {
        ids.push(this.#specialIds.get(part)!);
        return;
      }
      for (const [chunk] of part.matchAll(CHUNKS)) {
        let chunkIds = this.#cache.get(chunk);
        if (chunkIds === undefined) {
          chunkIds = this.#mergeChunk(chunk);
          if (this.#cache.size >= CACHE_MAX) this.#cache = new Map();
          this.#cache.set(chunk, chunkIds);
        }
        for (const id of chunkIds) ids.push(id);
      }
    });
    return ids;
  }

  /** One chunk's ids: its bytes' tokens, then merges by rank (lowest first; the leftmost of equals). */
  #mergeChunk(chunk: string): Int32Array {
    const bytes = utf8.encode(chunk);
    const ids = Array.from(bytes, (b) => this.#byteIds[b]);
    if (ids.length > SCAN_MAX) return this.#mergeLong(ids);
    const V = this.vocabSize;
    for (;;) {
      let best = -1;
      let bestRank = Number.POSITIVE_INFINITY;
      for (let i = 0; i + 1 < ids.length; i++) {
        const rank = this.#ranks.get(ids[i] * V + ids[i + 1]);
        if (rank !== undefined && rank < bestRank) {
          bestRank = rank;
          best = i;
        }
      }
      if (best < 0) return Int32Array.from(ids);
      ids.splice(best, 2, this.#merges[3 * bestRank + 2]);
    }
  }

  /** The same merges as #mergeChunk for long chunks: a linked list of symbols and a heap of (rank, position). */
  #mergeLong(ids: number[]): Int32Array {
    const n = ids.length;
    const V = this.vocabSize;
    const sym = Int32Array.from(ids);
    const next = Int32Array.from({ length: n }, (_, i) => (i + 1 < n ? i + 1 : -1));
    const prev = Int32Array.from({ length: n }, (_, i) => i - 1);
    const alive = new Uint8Array(n).fill(1);
    const heap = new PairHeap((x, y) => x.rank < y.rank || (x.rank === y.rank && x.at < y.at));
    const push = (i: number): void => {
      if (i < 0 || next[i] < 0) return;
      const rank = this.#ranks.get(sym[i] * V + sym[next[i]]);
      if (rank !== undefined) heap.push({ rank, at: i, key: sym[i] * V + sym[next[i]] });
    };
    for (let i = 0; i + 1 < n; i++) push(i);
    for (let top = heap.pop(); top !== undefined; top = heap.pop()) {
      const i = top.at;
      const j = next[i];
      if (!alive[i] || j < 0 || sym[i] * V + sym[j] !== top.key) continue; // stale
      sym[i] = this.#merges[3 * top.rank + 2];
      alive[j] = 0;
      next[i] = next[j];
      if (next[j] >= 0) prev[next[j]] = i;
      push(prev[i]);
      push(i);
    }
    const out: number[] = [];
    for (let i = 0; i >= 0; i = next[i]) out.push(sym[i]);
    return Int32Array.from(out);
  }
}

/** A token's bytes as text: complete UTF-8 characters as themselves, other bytes as <0xNN>. */
function label(bytes: Uint8Array): string {
  try {
    return strict.decode(bytes);
  } catch {
    // fall through: part of a character
  }
  let out = '';
  for (let i = 0; i < bytes.length; ) {
    const b = bytes[i];
    const size =
      b < 0x80 ? 1 : b >= 0xc2 && b < 0xe0 ? 2 : b >= 0xe0 && b < 0xf0 ? 3 : b >= 0xf0 && b < 0xf5 ? 4 : 0;
    if (size > 0 && i + size <= bytes.length) {
      try {
        out += strict.decode(bytes.subarray(i, i + size));
        i += size;
        continue;
      } catch {
        // not a character: show the lead byte
      }
    }
    out += `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`;
    i++;
  }
  return out;
}

interface HeapEntry {
  rank: number;
  at: number;
  key: number;
}

/** A binary heap; `before(x, y)` is true when x comes out first. */
class PairHeap {
  readonly #items: HeapEntry[] = [];
  readonly #before: (x: HeapEntry, y: HeapEntry) => boolean;
  constructor(before: (x: HeapEntry, y: HeapEntry) => boolean) {
    this.#before = before;
  }
  push(item: HeapEntry): void {
    const a = this.#items;
    a.push(item);
    for (let i = a.length - 1; i > 0; ) {
      const p = (i - 1) >> 1;
      if (!this.#before(a[i], a[p])) break;
      [a[i], a[p]] = [a[p], a[i]];
      i = p;
    }
  }
  pop(): HeapEntry | undefined {
    const a = this.#items;
    const top = a[0];
    const last = a.pop();
    if (a.length > 0 && last !== undefined) {
      a[0] = last;
      for (let i = 0; ; ) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && this.#before(a[l], a[m])) m = l;
        if (r < a.length && this.#before(a[r], a[m])) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m], a[i]];
        i = m;
      }
    }
    return top;
  }
}

/**
 * The training loop: returns merges as a flat list of id pairs (byte b is id b, merge k's token the next
 * new id), stopping at `maxTokens` tokens or when the best pair occurs fewer than `minFrequency` times.
 */
function learnMerges(
  text: string,
  specials: readonly string[],
  maxTokens: number,
  minFrequency: number,
): number[] {
  // 1. Each distinct chunk once, with its count.
  const counts = new Map<string, number>();
  const alternatives = [...specials]
    .sort((x, y) => y.length - x.length)
    .map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  const segments = alternatives.length > 0 ? text.split(new RegExp(alternatives.join('|'), 'u')) : [text];
  for (const segment of segments) {
    for (const [chunk] of segment.matchAll(CHUNKS)) counts.set(chunk, (counts.get(chunk) ?? 0) + 1);
  }
  const words: Int32Array[] = [];
  const freq: number[] = [];
  for (const [chunk, count] of counts) {
    words.push(Int32Array.from(utf8.encode(chunk)));
    freq.push(count);
  }
  // 2. Pair counts, where each pair occurs, and a lazy max-heap of (count, pair): an entry whose count is
  //    out of date is put back with the current count when it comes to the top.
  const cap = maxTokens;
  const pairCount = new Map<number, number>();
  const where = new Map<number, number[]>();
  const heap = new CountHeap();
  /** Pairs whose count grew since the last `pushGrown` (each goes into the heap once, with its new count). */
  const grown = new Set<number>();
  const add = (key: number, delta: number, w: number): void => {
    const count = (pairCount.get(key) ?? 0) + delta;
    if (count <= 0) pairCount.delete(key);
    else pairCount.set(key, count);
    if (delta > 0) {
      grown.add(key);
      const list = where.get(key);
      if (list === undefined) where.set(key, [w]);
      else if (list[list.length - 1] !== w) list.push(w);
    }
  };
  const pushGrown = (): void => {
    for (const key of grown) heap.push(pairCount.get(key)!, key);
    grown.clear();
  };
  words.forEach((word, w) => {
    for (let i = 0; i + 1 < word.length; i++) add(word[i] * cap + word[i + 1], freq[w], w);
  });
  pushGrown();
  // 3. Merge the best pair, updating counts only in the words that hold it.
  const strings = new Map<string, number>(BYTE_CHARS.map((c, b) => [c, b]));
  const tokens = [...BYTE_CHARS];
  const merges: number[] = [];
  const visited = new Int32Array(words.length).fill(-1);
  const delta = new Map<number, number>();
  const done = new Set<number>();
  let step = 0;
  while (tokens.length < maxTokens) {
    let key = -1;
    let count = 0;
    while (heap.size > 0) {
      const k = heap.pop();
      const c = heap.popped;
      const current = pairCount.get(k) ?? 0;
      if (current === c) {
        key = k;
        count = c;
        break;
      }
      if (current > 0 && current < c) heap.push(current, k);
    }
    if (key < 0 || count < minFrequency) break;
    const a = Math.floor(key / cap);
    const b = key % cap;
    const text = tokens[a] + tokens[b];
    let joined = strings.get(text);
    if (joined === undefined) {
      joined = tokens.length;
      tokens.push(text);
      strings.set(text, joined);
    }
    // A merge whose token equals an older one can bring a merged pair back: join it again, but as the
    // same rule (a rule appears once).
    if (!done.has(key)) merges.push(a, b);
    done.add(key);
    step++;
    for (const w of where.get(key) ?? []) {
      if (visited[w] === step) continue;
      visited[w] = step;
      const word = words[w];
      const merged: number[] = [];
      for (let i = 0; i < word.length; ) {
        if (i + 1 < word.length && word[i] === a && word[i + 1] === b) {
          merged.push(joined);
          i += 2;
        } else merged.push(word[i++]);
      }
      if (merged.length === word.length) continue; // the pair left this word in an earlier merge
      delta.clear();
      for (let i = 0; i + 1 < word.length; i++) {
        const k = word[i] * cap + word[i + 1];
        delta.set(k, (delta.get(k) ?? 0) - 1);
      }
      for (let i = 0; i + 1 < merged.length; i++) {
        const k = merged[i] * cap + merged[i + 1];
        delta.set(k, (delta.get(k) ?? 0) + 1);
      }
      for (const [k, d] of delta) if (d !== 0) add(k, d * freq[w], w);
      words[w] = Int32Array.from(merged);
    }
    where.delete(key);
    pushGrown();
  }
  return merges;
}

/** Max-heap of (count, pair key): larger count first, then the smaller key (the pair of smaller ids). */
class CountHeap {
  readonly #counts: number[] = [];
  readonly #keys: number[] = [];
  get size(): number {
    return this.#counts.length;
  }
  #before(i: number, j: number): boolean {
    const c = this.#counts;
    return c[i] > c[j] || (c[i] === c[j] && this.#keys[i] < this.#keys[j]);
  }
  #swap(i: number, j: number): void {
    const c = this.#counts;
    const k = this.#keys;
    const count = c[i];
    const key = k[i];
    c[i] = c[j];
    k[i] = k[j];
    c[j] = count;
    k[j] = key;
  }
  push(count: number, key: number): void {
    this.#counts.push(count);
    this.#keys.push(key);
    for (let i = this.#counts.length - 1; i > 0; ) {
      const p = (i - 1) >> 1;
      if (!this.#before(i, p)) break;
      this.#swap(i, p);
      i = p;
    }
  }
  /** The count of the entry `pop` returned last. */
  popped = 0;
  /** Takes the top entry out: returns its key, its count goes to `popped`. */
  pop(): number {
    this.popped = this.#counts[0];
    const top = this.#keys[0];
    const last = this.#counts.length - 1;
    this.#swap(0, last);
    this.#counts.pop();
    this.#keys.pop();
    const n = this.#counts.length;
    for (let i = 0; ; ) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < n && this.#before(l, m)) m = l;
      if (r < n && this.#before(r, m)) m = r;
      if (m === i) break;
      this.#swap(i, m);
      i = m;
    }
    return top;
  }
}

const JSON_FIELDS = ['type', 'merges', 'specials', 'bytes', 'extra', 'ids'];

function isId(x: unknown): x is number {
  return Number.isInteger(x) && (x as number) >= 0 && (x as number) < MAX_ID;
}

/** Reads `toJSON()` output ({ type: 'bpe', merges, specials, bytes?, extra?, ids? }); `fail` names the caller. */
export function readBpeTokenizer(json: unknown, fail: Fail): BpeTokenizer {
  if (json === null || typeof json !== 'object' || Array.isArray(json))
    fail(`a bpe tokenizer must be a JSON object, found ${formatFound(json)}`);
  const o = json as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (!JSON_FIELDS.includes(key))
      fail(`bpe tokenizer has an unknown field '${key}' (known: ${JSON_FIELDS.join(', ')})`);
  }
  if (o.type !== 'bpe') fail(`type must be 'bpe', found ${formatFound(o.type)}`);
  const { merges, specials, bytes, extra, ids } = o;
  if (!Array.isArray(merges) || merges.length % 2 !== 0)
    fail(`merges must be an array of token id pairs (even length), found ${formatFound(merges)}`);
  merges.forEach((id: unknown, i) => {
    if (!isId(id)) fail(`merges entry ${i} must be a token id, found ${formatFound(id)}`);
  });
  if (!Array.isArray(specials))
    fail(`specials must be an array of [text, id] pairs, found ${formatFound(specials)}`);
  specials.forEach((p: unknown, i) => {
    if (!(Array.isArray(p) && p.length === 2 && typeof p[0] === 'string' && p[0] !== '' && isId(p[1])))
      fail(`specials entry ${i} must be a [text, id] pair, found ${formatFound(p)}`);
  });
  if (bytes !== undefined && !(Array.isArray(bytes) && bytes.length === 256))
    fail(`bytes must be an array of 256 token ids, found ${formatFound(bytes)}`);
  if (extra !== undefined && !Array.isArray(extra))
    fail(`extra must be an array of [id, token] pairs, found ${formatFound(extra)}`);
  (extra ?? []).forEach((p: unknown, i: number) => {
    if (!(Array.isArray(p) && p.length === 2 && isId(p[0]) && typeof p[1] === 'string'))
      fail(`extra entry ${i} must be an [id, token] pair, found ${formatFound(p)}`);
  });
  if (ids !== undefined && !(Array.isArray(ids) && ids.length === merges.length / 2))
    fail(`ids must be an array of ${merges.length / 2} token ids (one per merge), found ${formatFound(ids)}`);

  const tokens: string[] = [];
  const put = (id: unknown, token: string, field: string): void => {
    if (!isId(id)) fail(`${field} must be a token id, found ${formatFound(id)}`);
    if (tokens[id] !== undefined)
      fail(`${field} gives id ${id} to ${formatFound(token)}, but it is already ${formatFound(tokens[id])}`);
    tokens[id] = token;
  };
  const strings = new Map<string, number>();
  for (let b = 0; b < 256; b++) {
    const id = bytes === undefined ? b : (bytes as unknown[])[b];
    put(id, BYTE_CHARS[b], `bytes entry ${b}`);
    strings.set(BYTE_CHARS[b], id as number);
  }
  const specialIds = (specials as [string, number][]).map(([text, id], i) => {
    put(id, text, `specials entry ${i}`);
    return id;
  });
  for (const [i, [id, token]] of ((extra ?? []) as [number, string][]).entries()) {
    put(id, token, `extra entry ${i}`);
    strings.set(token, id);
  }
  let free = 0;
  const special = new Set(specialIds);
  for (let k = 0; k < merges.length / 2; k++) {
    const [a, b] = [merges[2 * k], merges[2 * k + 1]] as number[];
    for (const [at, id] of [
      [2 * k, a],
      [2 * k + 1, b],
    ]) {
      if (tokens[id] === undefined || special.has(id))
        fail(`merges entry ${at} = ${id} is not a token made by bytes, extra or an earlier merge`);
    }
    const text = tokens[a] + tokens[b];
    const existing = strings.get(text);
    if (ids !== undefined) {
      const id = (ids as unknown[])[k];
      if (existing !== undefined && id !== existing)
        fail(`ids entry ${k} = ${formatFound(id)}, but merge ${k} makes token ${existing} again`);
      if (existing === undefined) put(id, text, `ids entry ${k}`);
      strings.set(text, id as number);
    } else if (existing === undefined) {
      while (tokens[free] !== undefined) free++;
      tokens[free] = text;
      strings.set(text, free);
    }
  }
  for (let id = 0; id < tokens.length; id++) {
    if (tokens[id] === undefined)
      fail(`no field gives token id ${id} (ids must run from 0 to ${tokens.length - 1} without gaps)`);
  }
  return build(
    assemble(tokens, specialIds, merges as number[], fail, (k) => `merges entries ${2 * k}–${2 * k + 1}`),
  );
}

/** The Hugging Face reader behind `BpeTokenizer.fromHuggingFace`. */
function readHuggingFace(json: unknown, fail: Fail): BpeTokenizer {
  const isObject = (x: unknown): x is Record<string, unknown> =>
    x !== null && typeof x === 'object' && !Array.isArray(x);
  if (!isObject(json)) fail(`a tokenizer.json must be a JSON object, found ${formatFound(json)}`);
  const { model } = json;
  if (!isObject(model)) fail(`model must be an object, found ${formatFound(model)}`);
  if (model.type !== 'BPE')
    fail(`model.type must be "BPE" (only BPE models are read), found ${formatFound(model.type)}`);
  const off = (field: string, value: unknown, ok: unknown[]): void => {
    if (!ok.includes(value))
      fail(
        `${field} = ${formatFound(value)} is not supported (only ${ok.map((v) => formatFound(v)).join(' or ')})`,
      );
  };
  off('model.dropout', model.dropout, [undefined, null, 0]);
  off('model.continuing_subword_prefix', model.continuing_subword_prefix, [undefined, null, '']);
  off('model.end_of_word_suffix', model.end_of_word_suffix, [undefined, null, '']);
  off('model.byte_fallback', model.byte_fallback, [undefined, false]);
  off('model.ignore_merges', model.ignore_merges, [undefined, false]);
  if (json.normalizer !== undefined && json.normalizer !== null)
    fail(
      `normalizer must be null (a byte-level BPE reads text as it is), found ${formatFound(json.normalizer)}`,
    );
  const pre = json.pre_tokenizer;
  if (!isObject(pre) || pre.type !== 'ByteLevel')
    fail(
      `pre_tokenizer must be {"type": "ByteLevel", …} (GPT-2's split), found ${formatFound(isObject(pre) ? pre.type : pre)}`,
    );
  off('pre_tokenizer.add_prefix_space', pre.add_prefix_space, [undefined, false]);
  off('pre_tokenizer.use_regex', pre.use_regex, [undefined, true]);
  for (const field of ['decoder', 'post_processor']) {
    const value = json[field];
    if (value !== undefined && value !== null && !(isObject(value) && value.type === 'ByteLevel'))
      fail(
        `${field} must be null or of type "ByteLevel", found ${formatFound(isObject(value) ? value.type : value)}`,
      );
  }

  const { vocab, merges } = model;
  if (!isObject(vocab)) fail(`model.vocab must be an object of token → id, found ${formatFound(vocab)}`);
  const tokens: string[] = [];
  const put = (id: unknown, token: string, field: string): void => {
    if (!isId(id)) fail(`${field} must be a token id (an integer ≥ 0), found ${formatFound(id)}`);
    if (tokens[id] !== undefined && tokens[id] !== token)
      fail(
        `${field} gives id ${id} to ${formatFound(token)}, but model.vocab gives it to ${formatFound(tokens[id])}`,
      );
    tokens[id] = token;
  };
  const vocabEntries = Object.entries(vocab);
  for (const [token, id] of vocabEntries) put(id, token, `model.vocab[${JSON.stringify(token)}]`);
  const added = json.added_tokens ?? [];
  if (!Array.isArray(added)) fail(`added_tokens must be an array, found ${formatFound(added)}`);
  const specialIds: number[] = [];
  added.forEach((t: unknown, i) => {
    const field = `added_tokens[${i}]`;
    if (!isObject(t)) fail(`${field} must be an object with id and content, found ${formatFound(t)}`);
    if (typeof t.content !== 'string' || t.content === '')
      fail(`${field}.content must be a non-empty string, found ${formatFound(t.content)}`);
    for (const flag of ['single_word', 'lstrip', 'rstrip'])
      off(`${field}.${flag}`, t[flag], [undefined, false]);
    put(t.id, t.content, `${field}.id`);
    if (specialIds.includes(t.id as number)) fail(`${field}.id = ${t.id} repeats an earlier added token`);
    specialIds.push(t.id as number);
  });
  for (let id = 0; id < tokens.length; id++) {
    if (tokens[id] === undefined)
      fail(
        `no token has id ${id} in model.vocab or added_tokens (ids must run from 0 to ${tokens.length - 1})`,
      );
  }
  if (!Array.isArray(merges)) fail(`model.merges must be an array, found ${formatFound(merges)}`);
  const index = new Map(vocabEntries);
  const pairs: number[] = [];
  merges.forEach((m: unknown, k) => {
    let parts: unknown[] | undefined;
    if (typeof m === 'string') parts = m.split(' ');
    else if (Array.isArray(m)) parts = m;
    if (!(parts && parts.length === 2 && typeof parts[0] === 'string' && typeof parts[1] === 'string'))
      fail(`model.merges[${k}] must be "left right" or ["left", "right"], found ${formatFound(m)}`);
    for (const part of parts as string[]) {
      const id = index.get(part);
      if (id === undefined)
        fail(`model.merges[${k}] joins ${formatFound(part)}, which is not in model.vocab`);
      pairs.push(id as number);
    }
  });
  return build(assemble(tokens, specialIds, pairs, fail, (k) => `model.merges[${k}]`));
}
