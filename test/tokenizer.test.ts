// Tokenizers apart from tasks: WordTokenizer round trips and its unknown-word policy, JSON by type tag
// (tokenizerFromJSON), checkpoints that store 'qkv.tokenizer', and older checkpoints whose 'qkv.vocab'
// word list (the committed models/pronoun.safetensors) still loads as a WordTokenizer.

import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { main } from '../src/cli/main.js';
import { decodeSafetensors, encodeSafetensors } from '../src/io/safetensors.js';
import { TinyTransformer } from '../src/model/transformer.js';
import { Generator } from '../src/random.js';
import { tokenizerFromJSON } from '../src/text/registry.js';
import { type Tokenizer, UnknownTokenError } from '../src/text/tokenizer.js';
import { splitWords, WordTokenizer } from '../src/text/word.js';
import { loadCheckpoint, saveCheckpoint } from '../src/train/checkpoint.js';
import { ARTICLE_SENTENCE, pronounTask } from '../src/train/pronoun.js';
import { sequenceTask } from '../src/train/tasks.js';
import { Trainer } from '../src/train/trainer.js';
import { stackFromSafetensors } from '../src/viz/checkpoint.js';
import { tokenize } from '../src/viz/tokens.js';

const words = ['<pad>', 'the', 'cat', 'sat', "didn't", '.', '<sep>'];
const tok = new WordTokenizer(words);

describe('WordTokenizer', () => {
  it('encodes text and word arrays to ids, decodes them back, and knows its specials', () => {
    expect(Array.from(tok.encode("the cat didn't sat ."))).toEqual([1, 2, 4, 3, 5]);
    expect(Array.from(tok.encode(['the', 'cat']))).toEqual([1, 2]);
    expect(tok.decode(Int32Array.of(1, 2, 4, 3, 5))).toBe("the cat didn't sat .");
    expect(tok.decode([])).toBe('');
    expect(tok.specials).toEqual({ pad: 0, sep: 6 });
    expect(tok.vocabSize).toBe(7);
    expect(tok.type).toBe('word');
    expect(tok.description).toBe('7-word vocabulary');
    expect(tok.idToToken(2)).toBe('cat');
    expect(tok.tokenToId('cat')).toBe(2);
    expect(tok.tokenToId('Cat')).toBeUndefined(); // exact: the case fallback is encode's
  });

  it('splits punctuation off words (the playground rule) and keeps <special> tokens whole', () => {
    expect(tok.tokenize('The cat sat.<sep> the')).toEqual(['The', 'cat', 'sat', '.', '<sep>', 'the']);
    expect(Array.from(tok.encode('The cat sat.<sep> the'))).toEqual([1, 2, 3, 5, 6, 1]);
    const text = "The animal didn't cross the street, because it was too tired. 猫が好き";
    expect(splitWords(text)).toEqual(tokenize(text)); // the seeded views split the same way
    expect(tok.tokenize('a <b> c')).toEqual(['a', '<b>', 'c']);
    expect(tokenize('a <b> c')).toEqual(['a', '<', 'b', '>', 'c']);
  });

  it('looks a word up as written, then lower-cased; decode gives the list spelling', () => {
    expect(Array.from(tok.encode('THE Cat'))).toEqual([1, 2]);
    expect(tok.decode(tok.encode('THE Cat'))).toBe('the cat');
    const both = new WordTokenizer(['The', 'the']);
    expect(Array.from(both.encode('The the THE'))).toEqual([0, 1, 1]);
  });

  it('round-trips random sentences of its words (decode ∘ encode = identity)', () => {
    const gen = new Generator(3);
    const t = pronounTask.tokenizer;
    for (let n = 0; n < 200; n++) {
      const length = 1 + Math.floor(gen.random() * 20);
      const ids = Int32Array.from({ length }, () => Math.floor(gen.random() * t.vocabSize));
      const text = t.decode(ids);
      expect(t.encode(text)).toEqual(ids);
      expect(t.decode(t.encode(text))).toBe(text);
    }
  });

  it('refuses unknown words with an UnknownTokenError naming each once, unless built with unk', () => {
    let err: unknown;
    try {
      tok.encode('the zebra and the zebra');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(UnknownTokenError);
    expect(err).toBeInstanceOf(RangeError);
    expect((err as UnknownTokenError).tokens).toEqual(['zebra', 'and']);
    expect((err as Error).message).toBe(
      "WordTokenizer.encode: 'zebra', 'and' are not in the 7-word vocabulary",
    );
    const many = Array.from({ length: 12 }, (_, i) => `w${i}`).join(' ');
    expect(() => tok.encode(many)).toThrow("'w9', … (2 more) are not in the 7-word vocabulary");

    const withUnk = new WordTokenizer(['<unk>', 'the', 'cat'], { unk: '<unk>' });
    expect(Array.from(withUnk.encode('the zebra cat'))).toEqual([1, 0, 2]);
    expect(withUnk.specials).toEqual({ unk: 0 });
    expect(withUnk.description).toBe('3-word vocabulary, unknown words read as <unk>');
  });

  it('refuses bad word lists, options and ids, naming the function and entry', () => {
    expect(() => new WordTokenizer(['a', 'b', 'a'])).toThrow('WordTokenizer: words entry 2 repeats "a"');
    expect(() => new WordTokenizer(['a', 'b c'])).toThrow(
      'WordTokenizer: words entry 1 must be a word without whitespace, found "b c"',
    );
    expect(() => new WordTokenizer([])).toThrow('WordTokenizer: words must hold at least one word');
    expect(() => new WordTokenizer(['a'], { unk: 'b' })).toThrow(
      'WordTokenizer: unk must be one of the words, found "b"',
    );
    expect(() => tok.decode([1, 7])).toThrow('WordTokenizer.decode: ids[1] = 7 is not a token id (0 to 6)');
    expect(() => tok.idToToken(-1)).toThrow('WordTokenizer.idToToken: id = -1 is not a token id');
    expect(() => tok.encode(5 as unknown as string)).toThrow(
      'WordTokenizer.encode: input must be a string or an array of strings, found 5',
    );
    expect(() => tok.encode(['the', 3 as unknown as string])).toThrow(
      'WordTokenizer.encode: input entry 1 must be a string, found 3',
    );
  });
});

describe('tokenizers as JSON, by type tag', () => {
  it('tokenizerFromJSON(t.toJSON()) rebuilds an equal tokenizer, through a JSON string too', () => {
    for (const t of [tok, new WordTokenizer(['<unk>', 'x'], { unk: '<unk>' }), pronounTask.tokenizer]) {
      const json = t.toJSON();
      expect(json.type).toBe('word');
      const back = tokenizerFromJSON(JSON.parse(JSON.stringify(json)));
      expect(back).toBeInstanceOf(WordTokenizer);
      expect(back).toEqual(t);
      expect(back.toJSON()).toEqual(json);
      expect(WordTokenizer.fromJSON(json)).toEqual(t);
    }
    expect(tok.toJSON()).toEqual({ type: 'word', words });
  });

  it('an unknown type or a malformed field is an error naming tokenizerFromJSON and the field', () => {
    const cases: [unknown, string][] = [
      [
        { type: 'sentencepiece', merges: [] },
        "tokenizerFromJSON: unknown tokenizer type 'sentencepiece' (known: word, bpe)",
      ],
      [{ type: 'toString' }, "tokenizerFromJSON: unknown tokenizer type 'toString' (known: word, bpe)"],
      [
        { words: ['a'] },
        "tokenizerFromJSON: a tokenizer needs a string 'type' (known: word, bpe), found nothing",
      ],
      [['a', 'b'], "tokenizerFromJSON: a tokenizer must be a JSON object with a 'type', found"],
      [null, "tokenizerFromJSON: a tokenizer must be a JSON object with a 'type', found null"],
      [{ type: 'word', words: ['a', 'a'] }, 'tokenizerFromJSON: words entry 1 repeats "a"'],
      [{ type: 'word' }, 'tokenizerFromJSON: words must be an array of distinct strings, found nothing'],
      [
        { type: 'word', words: ['a'], lowercase: false },
        "tokenizerFromJSON: word tokenizer has an unknown field 'lowercase' (known: type, words, unk)",
      ],
      [
        { type: 'word', words: ['a'], unk: 'b' },
        'tokenizerFromJSON: unk must be one of the words, found "b"',
      ],
    ];
    for (const [json, message] of cases) expect(() => tokenizerFromJSON(json), message).toThrow(message);
    expect(() => WordTokenizer.fromJSON({ type: 'bpe', words: ['a'] })).toThrow(
      `WordTokenizer.fromJSON: type must be 'word', found "bpe"`,
    );
  });
});

describe('tasks hold tokenizers', () => {
  it('copy/reverse: <bos> and <sep> are specials, and the display sample encodes to the batch layout', () => {
    const task = sequenceTask('reverse', { length: 3, symbols: 4 });
    expect(task.tokenizer.toJSON()).toEqual({ type: 'word', words: ['<bos>', '<sep>', 'a', 'b', 'c', 'd'] });
    expect(task.tokenizer.specials).toEqual({ bos: 0, sep: 1 });
    const d = task.display!;
    expect(d.sample.join(' ')).toBe('<bos> a b c <sep> c b');
    expect(Array.from(task.tokenizer.encode(d.sample.join(' ')))).toEqual([0, 2, 3, 4, 1, 4, 3]);
    expect(d.scored.map((s) => [s.position, s.target, s.key])).toEqual([
      [4, 'c', 3],
      [5, 'b', 2],
      [6, 'a', 1],
    ]);
    const batch = task.batch(new Generator(0), 2);
    expect(batch.ids[0]).toBe(task.tokenizer.specials.bos);
    expect(batch.ids[4]).toBe(task.tokenizer.specials.sep);
  });

  it("pronoun: the article's sentence is the sample; batches pad with the tokenizer's <pad>", () => {
    const { tokenizer, display } = pronounTask;
    expect(display?.sample).toEqual(ARTICLE_SENTENCE);
    expect(display?.scored).toEqual([{ position: 7, target: 'animal', key: 1 }]);
    expect(tokenizer.specials.pad).toBe(0);
    const batch = pronounTask.batch(new Generator(0), 1);
    expect(batch.ids[batch.L - 1]).toBe(tokenizer.specials.pad); // 11 words in 12 slots
    expect(tokenizer.decode(batch.ids.subarray(0, 11)).split(' ')).toHaveLength(11);
  });

  it("the Trainer refuses a tokenizer that does not fit the model's vocabSize", () => {
    const copy = sequenceTask('copy');
    const task = { ...copy, tokenizer: new WordTokenizer(['a', 'b']) };
    expect(() => new Trainer({ task })).toThrow(
      "Trainer: the task's tokenizer has 2 tokens but the model's vocabSize is 12",
    );
    expect(() => new Trainer({ task: { ...copy, tokenizer: undefined as unknown as Tokenizer } })).toThrow(
      'Trainer: task must be a task name (pronoun, copy, reverse, induction) or a Task (batch, defaults, tokenizer)',
    );
  });
});

describe('checkpoints store the tokenizer by type', () => {
  const config = { vocabSize: 7, dModel: 8, numHeads: 2, numLayers: 1, dFF: 16, maxLen: 8, causal: false };
  const model = new TinyTransformer(config, { seed: 2 });

  it("saveCheckpoint writes 'qkv.tokenizer' (its toJSON) and no 'qkv.vocab'; load gives the tokenizer back", () => {
    const bytes = saveCheckpoint(model, { task: 't', tokenizer: tok });
    const { metadata } = decodeSafetensors(bytes);
    expect(JSON.parse(metadata['qkv.tokenizer'])).toEqual(tok.toJSON());
    expect(metadata['qkv.vocab']).toBeUndefined();
    const { info } = loadCheckpoint(bytes);
    expect(info.tokenizer).toBeInstanceOf(WordTokenizer);
    expect(info.tokenizer).toEqual(tok);
    expect(info).not.toHaveProperty('vocab');
    const stack = stackFromSafetensors(bytes, 't.safetensors');
    expect(stack.tokenizer).toEqual(tok);
    expect(stack.vocab).toEqual(words);
    expect(stack.description).toContain('; 7-word vocabulary)');
    // The deprecated `vocab` option writes the same thing.
    expect(decodeSafetensors(saveCheckpoint(model, { vocab: words })).metadata['qkv.tokenizer']).toBe(
      metadata['qkv.tokenizer'],
    );
  });

  it('the Trainer writes its task name, step and tokenizer', () => {
    const trainer = new Trainer({ task: 'copy', steps: 1, batchSize: 2 });
    const { info } = loadCheckpoint(trainer.checkpoint({ 'qkv.note': 'x' }));
    expect(info).toEqual({ task: 'copy', step: 0, tokenizer: trainer.task.tokenizer });
  });

  it("the committed models/pronoun.safetensors (a 'qkv.vocab' list) loads as the pronoun task's WordTokenizer", () => {
    const path = 'models/pronoun.safetensors';
    const bytes = readFileSync(path);
    const { metadata } = decodeSafetensors(bytes);
    expect(metadata['qkv.tokenizer']).toBeUndefined(); // still the older format
    expect(JSON.parse(metadata['qkv.vocab'])).toHaveLength(pronounTask.tokenizer.vocabSize);
    const { info } = loadCheckpoint(bytes, path);
    expect(info.tokenizer).toBeInstanceOf(WordTokenizer);
    expect(info.tokenizer!.toJSON()).toEqual(pronounTask.tokenizer.toJSON());
    const stack = stackFromSafetensors(bytes, path);
    expect(stack.tokenizer.encode(ARTICLE_SENTENCE)).toEqual(pronounTask.tokenizer.encode(ARTICLE_SENTENCE));
    expect(stack.description).toContain('96-word vocabulary');
  });

  it('qkv eval refuses a pronoun checkpoint whose tokenizer maps ids to other words, naming the first', async () => {
    const swapped = [...(pronounTask.tokenizer.toJSON().words as string[])];
    [swapped[1], swapped[2]] = [swapped[2], swapped[1]];
    const model = new TinyTransformer(pronounTask.model, { seed: 0 });
    const path = join(mkdtempSync(join(tmpdir(), 'qkv-tok-')), 'swapped.safetensors');
    writeFileSync(path, saveCheckpoint(model, { task: 'pronoun', tokenizer: new WordTokenizer(swapped) }));
    let err = '';
    const code = await main(['eval', '--task', 'pronoun', '--model', path], {
      stdout: { write: () => true },
      stderr: { write: (s: string) => (err += s) },
      env: {},
    });
    expect(code).toBe(1);
    expect(err).toContain(
      "has a tokenizer that differs from the pronoun task's (id 1 is 'didn't' there but 'the' in the task)",
    );
  });

  it('refuses what would load as another tokenizer: unknown type, both keys, a size mismatch, a foreign toJSON', () => {
    const good = saveCheckpoint(model, { tokenizer: tok });
    const patched = (patch: Record<string, string | undefined>) => {
      const { tensors, metadata } = decodeSafetensors(good);
      const out: Record<string, string> = {};
      for (const [k, v] of Object.entries({ ...metadata, ...patch })) if (v !== undefined) out[k] = v;
      return encodeSafetensors(tensors, out);
    };
    const cases: [Uint8Array, string][] = [
      [
        patched({ 'qkv.tokenizer': '{"type":"sentencepiece","merges":[]}' }),
        "qkv.tokenizer: unknown tokenizer type 'sentencepiece' (known: word, bpe)",
      ],
      [patched({ 'qkv.tokenizer': '{"type":"word"' }), 'qkv.tokenizer is not valid JSON'],
      [
        patched({ 'qkv.tokenizer': '{"type":"word","words":["a","a"]}' }),
        'qkv.tokenizer: words entry 1 repeats "a"',
      ],
      [
        patched({ 'qkv.vocab': JSON.stringify(words) }),
        'has both qkv.tokenizer and the older qkv.vocab; a checkpoint keeps one',
      ],
    ];
    for (const [bytes, message] of cases) {
      expect(() => loadCheckpoint(bytes, 'f.safetensors')).toThrow(
        `loadCheckpoint: f.safetensors: ${message}`,
      );
      expect(() => stackFromSafetensors(bytes, 'f.safetensors')).toThrow(
        `stackFromSafetensors: f.safetensors: ${message}`,
      );
    }
    const short = patched({ 'qkv.tokenizer': JSON.stringify({ type: 'word', words: ['a', 'b'] }) });
    expect(() => loadCheckpoint(short)).toThrow(
      'loadCheckpoint: qkv.tokenizer has 2 tokens but qkv.config has vocabSize 7',
    );
    expect(() => stackFromSafetensors(short, 's')).toThrow(
      'stackFromSafetensors: s: qkv.tokenizer has 2 tokens but qkv.config has vocabSize 7',
    );

    expect(() => saveCheckpoint(model, { tokenizer: new WordTokenizer(['a']) })).toThrow(
      'saveCheckpoint: info.tokenizer has 1 tokens but the model has vocabSize 7',
    );
    expect(() => saveCheckpoint(model, { tokenizer: tok, vocab: words })).toThrow(
      'saveCheckpoint: give info.tokenizer or info.vocab (deprecated), not both',
    );
    // A tokenizer whose type no loader knows would save a file nothing can load.
    const toy: Tokenizer = { ...tok, type: 'toy', toJSON: () => ({ type: 'toy' }) } as unknown as Tokenizer;
    expect(() => saveCheckpoint(model, { tokenizer: toy })).toThrow(
      "saveCheckpoint: info.tokenizer.toJSON(): unknown tokenizer type 'toy' (known: word, bpe)",
    );
    expect(() => saveCheckpoint(model, { extra: { 'qkv.tokenizer': '{}' } })).toThrow(
      "saveCheckpoint: info.extra may not set 'qkv.tokenizer'",
    );
  });
});
