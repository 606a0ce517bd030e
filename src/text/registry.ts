// Tokenizers by type tag: `tokenizerFromJSON` and the checkpoint metadata reader/writer both loaders share.
// One decision to know: the table of readers is fixed at build time (a new type adds one line to READERS,
// as 'bpe' did), not filled by import side effects: package.json's "sideEffects" lists only the files
// with top-level statements (the CLI and the worker entries), so a bundler may drop a module imported only
// to register itself, and its checkpoints would stop loading.

import { formatFound } from '../io/checks.js';
import { readBpeTokenizer } from './bpe.js';
import { LEGACY_VOCAB_KEY, TOKENIZER_KEY, type Tokenizer } from './tokenizer.js';
import { readWordTokenizer, wordTokenizerFromList } from './word.js';

type Fail = (message: string) => never;

/** One reader per type tag: checks the JSON (naming fields through `fail`) and builds the tokenizer. */
const READERS: Record<string, (json: unknown, fail: Fail) => Tokenizer> = {
  word: readWordTokenizer,
  bpe: readBpeTokenizer,
};

/** The type tags `tokenizerFromJSON` reads. */
export const TOKENIZER_TYPES: readonly string[] = Object.freeze(Object.keys(READERS));

/** Reads tokenizer JSON of any known type; `fail` prefixes the caller (and field) to messages. */
export function readTokenizer(json: unknown, fail: Fail): Tokenizer {
  if (json === null || typeof json !== 'object' || Array.isArray(json))
    fail(`a tokenizer must be a JSON object with a 'type', found ${formatFound(json)}`);
  const type = (json as { type?: unknown }).type;
  if (typeof type !== 'string')
    fail(
      `a tokenizer needs a string 'type' (known: ${TOKENIZER_TYPES.join(', ')}), found ${formatFound(type)}`,
    );
  const read = Object.hasOwn(READERS, type) ? READERS[type] : undefined;
  if (!read) fail(`unknown tokenizer type '${type}' (known: ${TOKENIZER_TYPES.join(', ')})`);
  return read(json, fail);
}

/**
 * Rebuilds a tokenizer from its `toJSON()` output (a parsed object), whatever its type.
 * @throws RangeError naming tokenizerFromJSON and the field: an unknown type, a missing or malformed field.
 */
export function tokenizerFromJSON(json: unknown): Tokenizer {
  return readTokenizer(json, (message) => {
    throw new RangeError(`tokenizerFromJSON: ${message}`);
  });
}

/**
 * The tokenizer a checkpoint's metadata describes: 'qkv.tokenizer' (JSON, by type) or, in files written
 * before it existed, 'qkv.vocab' (a JSON list of words → WordTokenizer); undefined when it has neither.
 * Both at once are refused (two descriptions of one vocabulary could disagree). `fail` names the file.
 */
export function tokenizerFromMetadata(metadata: Record<string, string>, fail: Fail): Tokenizer | undefined {
  const stored = metadata[TOKENIZER_KEY];
  const legacy = metadata[LEGACY_VOCAB_KEY];
  if (stored !== undefined && legacy !== undefined)
    fail(`has both ${TOKENIZER_KEY} and the older ${LEGACY_VOCAB_KEY}; a checkpoint keeps one`);
  const key = stored !== undefined ? TOKENIZER_KEY : LEGACY_VOCAB_KEY;
  const text = stored ?? legacy;
  if (text === undefined) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    fail(`${key} is not valid JSON (${(err as Error).message})`);
  }
  if (stored === undefined) return wordTokenizerFromList(json, LEGACY_VOCAB_KEY, fail);
  return readTokenizer(json, (message) => fail(`${TOKENIZER_KEY}: ${message}`));
}

/** The metadata entry that stores `tokenizer` (checked: what is written reads back as the same type). */
export function tokenizerMetadata(tokenizer: Tokenizer, fail: Fail): Record<string, string> {
  if (tokenizer === null || typeof tokenizer !== 'object' || typeof tokenizer.toJSON !== 'function')
    fail(`tokenizer must be a Tokenizer (with toJSON), found ${formatFound(tokenizer)}`);
  const json = tokenizer.toJSON();
  const reread = readTokenizer(json, (message) => fail(`tokenizer.toJSON(): ${message}`));
  if (reread.vocabSize !== tokenizer.vocabSize)
    fail(
      `tokenizer.toJSON() reads back with ${reread.vocabSize} tokens, not ${tokenizer.vocabSize} (a broken toJSON)`,
    );
  return { [TOKENIZER_KEY]: JSON.stringify(json) };
}
