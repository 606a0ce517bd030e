// BpeTokenizer: byte-level round trips for any text (fast-check; lone surrogates read back as U+FFFD),
// training (deterministic, most frequent pair first, checked against a pair count done here), merges as a
// plain reference implementation applies them, the '<|endoftext|>' special, JSON by type tag and in
// checkpoints, a hand-written Hugging Face tokenizer.json, errors naming the field; and the Brown corpus
// text that scripts/brown-text.mjs makes (455 training documents, 45 held out).

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeSafetensors } from '../src/io/safetensors.js';
import { TinyTransformer } from '../src/model/transformer.js';
import { BpeTokenizer } from '../src/text/bpe.js';
import { tokenizerFromJSON } from '../src/text/registry.js';
import { loadCheckpoint, saveCheckpoint } from '../src/train/checkpoint.js';

const SAMPLE = [
  "The jury said it didn't find the election's results wrong; the jury's report, they'll say, was fair.",
  'Numbers 1961, 3.14 and 2,000 come up; so do naïve cafés, 猫が好き, Ελληνικά and emoji 👩‍👩‍👧 🎉.',
  '    Indented lines,\ttabs\t\tand\n\nblank lines\r\n end here.',
].join('\n');
const TEXT = Array.from({ length: 20 }, (_, i) => `${SAMPLE} (${i})`).join('<|endoftext|>');
const tok = BpeTokenizer.train(TEXT, { vocabSize: 420 });

/** GPT-2's bytes → unicode table, written out again here (an independent check of the tokenizer's). */
function byteChars(): string[] {
  const printable = (b: number) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  let n = 0;
  return Array.from({ length: 256 }, (_, b) => String.fromCharCode(printable(b) ? b : 256 + n++));
}

/** Lone surrogates → U+FFFD, as TextEncoder reads them. */
function wellFormed(s: string): string {
  return s.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');
}

const PIECES = [
  ' ',
  '   ',
  '\n',
  '\n\n',
  '\r\n',
  '\t',
  '\u00a0',
  '\u3000',
  '\ufeff',
  'e\u0301',
  'ñ',
  '猫',
  '好き',
  '한국어',
  '👩‍👩‍👧',
  '🎉',
  '🏳️‍🌈',
  "'s",
  "'ll",
  " don't",
  '<|endoftext|>',
  '<|endoftext',
  '1961',
  ' the',
];
const textArb = fc
  .array(
    fc.oneof(
      fc.string({ unit: 'binary' }),
      fc.string({ unit: 'grapheme' }),
      fc.constantFrom(...PIECES),
      fc.string({ unit: fc.constantFrom('a', 'b', ' ', 'e', 'h', 't', '\n') }),
    ),
    { maxLength: 12 },
  )
  .map((parts) => parts.join(''));

describe('BpeTokenizer: text → ids → text', () => {
  it('decode(encode(s)) === s for any well-formed string (unicode, emoji, marks, CJK, whitespace runs)', () => {
    fc.assert(
      fc.property(textArb, (s) => {
        const ids = tok.encode(s);
        expect(tok.decode(ids)).toBe(s);
        expect(tok.tokenize(s)).toHaveLength(ids.length);
        expect(ids.every((id) => id >= 0 && id < tok.vocabSize)).toBe(true);
      }),
      { numRuns: 500 },
    );
    for (const s of PIECES) expect(tok.decode(tok.encode(s))).toBe(s);
    expect(tok.decode(tok.encode(''))).toBe('');
    expect(tok.decode(tok.encode(TEXT))).toBe(TEXT);
  });

  it('lone surrogates come back as U+FFFD (TextEncoder writes that for them); all else is unchanged', () => {
    expect(tok.decode(tok.encode('a\ud800b'))).toBe('a\ufffdb');
    expect(tok.decode(tok.encode('\udc00'))).toBe('\ufffd');
    expect(tok.decode(tok.encode('\ud83c\udf89\ud83c'))).toBe('🎉\ufffd');
    const utf16 = fc.array(fc.integer({ min: 0, max: 0xffff }), { maxLength: 30 });
    fc.assert(
      fc.property(utf16, (codes) => {
        const s = String.fromCharCode(...codes);
        expect(tok.decode(tok.encode(s))).toBe(wellFormed(s));
      }),
      { numRuns: 300 },
    );
  });

  it("splits text with GPT-2's pattern before merging: no token crosses a chunk edge", () => {
    const t = BpeTokenizer.train('the cat the cat the cat', { vocabSize: 300 });
    expect(t.tokenize('the cat  the\n\ncat')).toEqual(['the', ' cat', ' ', ' the', '\n', '\n', 'c', 'at']);
    expect(t.tokenize("it's they'll")).toEqual(['i', 't', "'", 's', ' the', 'y', "'", 'l', 'l']);
    expect(t.idToToken(t.encode(' cat')[0])).toBe('Ġcat'); // stored in GPT-2's byte alphabet
    expect(t.tokenToId('Ġcat')).toBe(t.encode(' cat')[0]);
    expect(t.tokenToId(' cat')).toBeUndefined();
  });

  it('encodes the special token string as its id; decode and tokenize give it back', () => {
    const eos = tok.vocabSize - 1;
    expect(tok.specials).toEqual({ eos });
    expect(tok.specialTokens).toEqual(['<|endoftext|>']);
    expect(tok.idToToken(eos)).toBe('<|endoftext|>');
    expect(tok.tokenToId('<|endoftext|>')).toBe(eos);
    const ids = Array.from(tok.encode('the end<|endoftext|>The<|endoftext|><|endoftext|>'));
    expect(ids.filter((id) => id === eos)).toHaveLength(3);
    expect(ids.slice(-2)).toEqual([eos, eos]);
    expect(tok.decode(ids)).toBe('the end<|endoftext|>The<|endoftext|><|endoftext|>');
    expect(tok.tokenize('end<|endoftext|>The')).toContain('<|endoftext|>');
    expect(Array.from(tok.encode(['the', '<|endoftext|>']))).toEqual([...tok.encode('the'), eos]);
    expect(tok.description).toBe(`byte-level BPE, 420 tokens (${tok.mergeCount} merges, 1 special)`);
  });

  it('shows a token holding part of a character as <0xNN> bytes in tokenize', () => {
    const bytesOnly = BpeTokenizer.train('', { vocabSize: 257 });
    expect(bytesOnly.mergeCount).toBe(0);
    expect(bytesOnly.tokenize('猫a')).toEqual(['<0xE7>', '<0x8C>', '<0xAB>', 'a']);
    expect(bytesOnly.decode(bytesOnly.encode('猫a'))).toBe('猫a');
    expect(bytesOnly.decode([0xe7, 0x61])).toBe('\ufffda'); // a cut character reads as U+FFFD
  });

  it('merges as a plain reference does: lowest rank first, the leftmost of equal pairs, long chunks too', () => {
    const t = BpeTokenizer.train('aaaa abab aab baab aaaaaaa bbba abba', { vocabSize: 300, minFrequency: 1 });
    const json = t.toJSON() as unknown as { merges: number[] };
    const ranks = new Map<string, number>();
    for (let k = 0; k < json.merges.length; k += 2)
      ranks.set(`${t.idToToken(json.merges[k])} ${t.idToToken(json.merges[k + 1])}`, k / 2);
    const reference = (chunk: string): string[] => {
      const chars = byteChars();
      const symbols = Array.from(new TextEncoder().encode(chunk), (b) => chars[b]);
      for (;;) {
        let best = -1;
        for (let i = 0; i + 1 < symbols.length; i++) {
          const r = ranks.get(`${symbols[i]} ${symbols[i + 1]}`);
          if (r !== undefined && (best < 0 || r < ranks.get(`${symbols[best]} ${symbols[best + 1]}`)!))
            best = i;
        }
        if (best < 0) return symbols;
        symbols.splice(best, 2, symbols[best] + symbols[best + 1]);
      }
    };
    fc.assert(
      fc.property(fc.string({ unit: fc.constantFrom('a', 'b'), maxLength: 200 }), (s) => {
        expect(Array.from(t.encode(s), (id) => t.idToToken(id))).toEqual(s === '' ? [] : reference(s));
      }),
      { numRuns: 300 },
    );
  });
});

describe('BpeTokenizer.train', () => {
  it('merges the most frequent pair first (counted here), then the next, ties to the smaller ids', () => {
    const t = BpeTokenizer.train('abab abab abab cd', { vocabSize: 300 });
    // pairs: a b ×6, b a ×3, Ġ a ×2, … → "ab" first; then ab ab ×3 beats Ġ ab ×2.
    expect([t.idToToken(256), t.idToToken(257), t.idToToken(258)]).toEqual(['ab', 'abab', 'Ġabab']);
    expect(t.mergeCount).toBe(3); // every other pair occurs once (< minFrequency 2)
    expect(t.vocabSize).toBe(260);
    expect(t.specials).toEqual({ eos: 259 });
    expect(Array.from(t.encode(' abab'))).toEqual([258]);

    const chars = byteChars();
    const counts = new Map<string, number>();
    for (const [chunk] of SAMPLE.matchAll(
      /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu,
    )) {
      const s = Array.from(new TextEncoder().encode(chunk), (b) => chars[b]);
      for (let i = 0; i + 1 < s.length; i++)
        counts.set(`${s[i]} ${s[i + 1]}`, (counts.get(`${s[i]} ${s[i + 1]}`) ?? 0) + 1);
    }
    const top = Math.max(...counts.values());
    const best = [...counts].filter(([, c]) => c === top).map(([p]) => p);
    const first = BpeTokenizer.train(SAMPLE, { vocabSize: 300 });
    const json = first.toJSON() as unknown as { merges: number[] };
    expect(best).toContain(`${first.idToToken(json.merges[0])} ${first.idToToken(json.merges[1])}`);
  });

  it('is deterministic: the same text and options give the same merges', () => {
    const again = BpeTokenizer.train(TEXT, { vocabSize: 420 });
    expect(again.toJSON()).toEqual(tok.toJSON());
    expect(tok.vocabSize).toBe(420);
  });

  it('stops early when no pair occurs minFrequency times, and learns nothing from special tokens', () => {
    const t = BpeTokenizer.train('xy<|endoftext|>xy<|endoftext|>', { vocabSize: 1000, minFrequency: 3 });
    expect(t.mergeCount).toBe(0);
    expect(t.tokenToId('<|endoftext|>')).toBe(256);
    const two = BpeTokenizer.train('xy xy', { vocabSize: 1000, specials: ['<pad>', '<|endoftext|>'] });
    expect(two.specials).toEqual({ pad: 257, eos: 258 });
    const none = BpeTokenizer.train('xy xy', { vocabSize: 256, specials: [] });
    expect(none.specials).toEqual({});
    expect(none.decode(none.encode('<|endoftext|>'))).toBe('<|endoftext|>');
  });

  it('refuses a vocabSize below 256 + specials and other bad options, naming the option', () => {
    expect(() => BpeTokenizer.train('abc', { vocabSize: 256 })).toThrow(
      'BpeTokenizer.train: options.vocabSize must be an integer from 257 (256 byte tokens + 1 special) to 16777216, found 256',
    );
    expect(() => BpeTokenizer.train('abc', { vocabSize: 300, specials: ['<a>', '<b>'] })).not.toThrow();
    expect(() => BpeTokenizer.train('abc', { vocabSize: 257, specials: ['<a>', '<b>'] })).toThrow(
      'options.vocabSize must be an integer from 258',
    );
    expect(() => BpeTokenizer.train('abc', { vocabSize: 300.5 })).toThrow('found 300.5');
    expect(() => BpeTokenizer.train('abc', { vocabSize: 300, minFrequency: 0 })).toThrow(
      'BpeTokenizer.train: options.minFrequency must be an integer ≥ 1, found 0',
    );
    expect(() => BpeTokenizer.train('abc', { vocabSize: 300, specials: ['<a>', '<a>'] })).toThrow(
      'BpeTokenizer.train: options.specials entry 1 repeats "<a>"',
    );
    expect(() => BpeTokenizer.train('abc', { vocabSize: 300, specials: [''] })).toThrow(
      'options.specials entry 0 must be a non-empty string, found ""',
    );
    expect(() => BpeTokenizer.train(3 as unknown as string, { vocabSize: 300 })).toThrow(
      'BpeTokenizer.train: text must be a string, found 3',
    );
    expect(() => tok.decode([0, 420])).toThrow(
      'BpeTokenizer.decode: ids[1] = 420 is not a token id (0 to 419)',
    );
    expect(() => tok.idToToken(-1)).toThrow('BpeTokenizer.idToToken: id = -1 is not a token id');
    expect(() => tok.encode(['a', 1 as unknown as string])).toThrow(
      'BpeTokenizer.encode: input entry 1 must be a string, found 1',
    );
  });
});

describe('BpeTokenizer as JSON and in checkpoints', () => {
  it('tokenizerFromJSON(t.toJSON()) rebuilds it: same ids, same JSON, compact', () => {
    const json = tok.toJSON();
    expect(Object.keys(json).sort()).toEqual(['merges', 'specials', 'type']);
    expect(json.specials).toEqual([['<|endoftext|>', 419]]);
    const back = tokenizerFromJSON(JSON.parse(JSON.stringify(json)));
    expect(back).toBeInstanceOf(BpeTokenizer);
    expect(back.toJSON()).toEqual(json);
    expect(back.vocabSize).toBe(tok.vocabSize);
    expect(back.specials).toEqual(tok.specials);
    expect(Array.from(back.encode(TEXT))).toEqual(Array.from(tok.encode(TEXT)));
    for (let id = 0; id < tok.vocabSize; id++) expect(back.idToToken(id)).toBe(tok.idToToken(id));
    expect(BpeTokenizer.fromJSON(json).toJSON()).toEqual(json);
    expect(JSON.stringify(json).length).toBeLessThan(12 * tok.mergeCount + 100); // a few bytes per merge
  });

  it('a checkpoint stores it under qkv.tokenizer and loads it back', () => {
    const model = new TinyTransformer(
      { vocabSize: tok.vocabSize, dModel: 8, numHeads: 2, numLayers: 1, dFF: 16, maxLen: 8, causal: true },
      { seed: 1 },
    );
    const bytes = saveCheckpoint(model, { task: 't', tokenizer: tok });
    expect(JSON.parse(decodeSafetensors(bytes).metadata['qkv.tokenizer'])).toEqual(tok.toJSON());
    const { info } = loadCheckpoint(bytes);
    expect(info.tokenizer).toBeInstanceOf(BpeTokenizer);
    expect(Array.from(info.tokenizer!.encode(SAMPLE))).toEqual(Array.from(tok.encode(SAMPLE)));
  });

  it('malformed JSON is an error naming tokenizerFromJSON and the field', () => {
    const good = tok.toJSON() as unknown as { merges: number[] };
    const cases: [unknown, string][] = [
      [{ type: 'bpe', merges: [], specials: [], vocab: {} }, "bpe tokenizer has an unknown field 'vocab'"],
      [
        { type: 'bpe', merges: [1, 2, 3], specials: [] },
        'merges must be an array of token id pairs (even length)',
      ],
      [{ type: 'bpe', merges: [97, -1], specials: [] }, 'merges entry 1 must be a token id, found -1'],
      [{ type: 'bpe', merges: [97, 300], specials: [] }, 'merges entry 1 = 300 is not a token made by bytes'],
      [{ type: 'bpe', merges: [], specials: [['<|endoftext|>', 3]] }, 'specials entry 0 gives id 3 to'],
      [{ type: 'bpe', merges: [], specials: [['<|endoftext|>', 300]] }, 'no field gives token id 256'],
      [{ type: 'bpe', merges: [], specials: [['', 256]] }, 'specials entry 0 must be a [text, id] pair'],
      [{ type: 'bpe', merges: [] }, 'specials must be an array of [text, id] pairs, found nothing'],
      [
        { type: 'bpe', merges: [97, 98, 97, 98], specials: [] },
        'merges entries 2–3 repeats merges entries 0–1',
      ],
      [{ type: 'bpe', merges: [], specials: [], bytes: [1, 2] }, 'bytes must be an array of 256 token ids'],
      [{ ...good, ids: [1] }, `ids must be an array of ${good.merges.length / 2} token ids`],
      [
        { type: 'bpe', merges: [], specials: [], extra: [[256, 'a b']] },
        'token 256 = "a b" has " ", which is not in the byte alphabet',
      ],
      [{ type: 'bpe', merges: [], specials: [], extra: [[256, 'a']] }, 'token 256 repeats token 97 ("a")'],
    ];
    for (const [json, message] of cases) {
      expect(() => tokenizerFromJSON(json), JSON.stringify(json)).toThrow(`tokenizerFromJSON: ${message}`);
    }
    expect(() => BpeTokenizer.fromJSON({ type: 'word' })).toThrow(
      'BpeTokenizer.fromJSON: type must be \'bpe\', found "word"',
    );
  });
});

describe('BpeTokenizer.fromHuggingFace', () => {
  // A GPT-2-shaped tokenizer.json, by hand: the 256 byte characters (ids 0–255, in the byte-alphabet order
  // GPT-2 uses: printable bytes first), five merges, and <|endoftext|> last, in vocab and added_tokens.
  const chars = byteChars();
  const order = [...chars].sort((x, y) => x.charCodeAt(0) - y.charCodeAt(0));
  const vocab: Record<string, number> = Object.fromEntries(order.map((c, id) => [c, id]));
  const made = ['Ġt', 'he', 'Ġthe', 'in', 'Ġa'];
  made.forEach((t, k) => {
    vocab[t] = 256 + k;
  });
  vocab['<|endoftext|>'] = 261;
  const hf = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [
      {
        id: 261,
        content: '<|endoftext|>',
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: true,
        special: true,
      },
    ],
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: '',
      end_of_word_suffix: '',
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges: ['Ġ t', 'h e', ['Ġt', 'he'], 'i n', 'Ġ a'],
    },
  };

  it('loads vocab, merges ("a b" or [a, b]) and added_tokens, and encodes as GPT-2 would', () => {
    const t = BpeTokenizer.fromHuggingFace(hf);
    expect(t.vocabSize).toBe(262);
    expect(t.specials).toEqual({ eos: 261 });
    expect(t.idToToken(0)).toBe('!'); // GPT-2's order: id 0 is "!", space ("Ġ") comes after the printable bytes
    expect(t.tokenToId('Ġ')).toBe(vocab['Ġ']);
    expect(Array.from(t.encode(' the'))).toEqual([258]);
    expect(Array.from(t.encode('the in a<|endoftext|>'))).toEqual([vocab.t, 257, vocab['Ġ'], 259, 260, 261]);
    expect(t.tokenize('the thin')).toEqual(['t', 'he', ' t', 'h', 'in']);
    expect(t.decode(t.encode('the thin 猫<|endoftext|>'))).toBe('the thin 猫<|endoftext|>');
    // The same file as text; and through our JSON (bytes in GPT-2's order) and back.
    expect(BpeTokenizer.fromHuggingFace(JSON.stringify(hf)).toJSON()).toEqual(t.toJSON());
    const json = t.toJSON();
    expect(json.bytes).toHaveLength(256);
    expect(json.ids).toBeUndefined(); // merges take the next free ids, 256…260
    const back = tokenizerFromJSON(JSON.parse(JSON.stringify(json)));
    for (let id = 0; id < t.vocabSize; id++) expect(back.idToToken(id)).toBe(t.idToToken(id));
    expect(Array.from(back.encode('the in a<|endoftext|>'))).toEqual(
      Array.from(t.encode('the in a<|endoftext|>')),
    );
  });

  it('keeps any id layout through toJSON: specials first, merges out of order, unreachable tokens', () => {
    const shifted = Object.fromEntries(Object.entries(vocab).map(([k, id]) => [k, id === 261 ? 0 : id + 1]));
    shifted.he = 262; // out of the merges' order
    shifted.Ġthe = 259;
    shifted.xyz = 258; // no merge makes it
    const odd = {
      ...hf,
      added_tokens: [{ ...hf.added_tokens[0], id: 0 }],
      model: { ...hf.model, vocab: shifted },
    };
    const t = BpeTokenizer.fromHuggingFace(odd);
    expect(t.specials).toEqual({ eos: 0 });
    const json = t.toJSON();
    expect(json.extra).toEqual([[258, 'xyz']]);
    expect(json.ids).toBeDefined();
    const back = tokenizerFromJSON(JSON.parse(JSON.stringify(json)));
    for (let id = 0; id < t.vocabSize; id++) expect(back.idToToken(id)).toBe(t.idToToken(id));
    expect(back.toJSON()).toEqual(json);
    expect(Array.from(back.encode(' the he'))).toEqual([259, t.tokenToId('Ġ'), 262]);
  });

  it('refuses malformed or unsupported files, naming the field', () => {
    const with_ = (patch: Record<string, unknown>, model: Record<string, unknown> = {}) => ({
      ...hf,
      ...patch,
      model: { ...hf.model, ...model },
    });
    const gap = { ...vocab };
    delete gap.in;
    const cases: [unknown, string][] = [
      ['{"model": ', 'json is not valid JSON'],
      [[], 'a tokenizer.json must be a JSON object, found'],
      [{ ...hf, model: null }, 'model must be an object, found null'],
      [
        with_({}, { type: 'WordPiece' }),
        'model.type must be "BPE" (only BPE models are read), found "WordPiece"',
      ],
      [with_({}, { dropout: 0.1 }), 'model.dropout = 0.1 is not supported'],
      [
        with_({}, { continuing_subword_prefix: '##' }),
        'model.continuing_subword_prefix = "##" is not supported',
      ],
      [with_({}, { byte_fallback: true }), 'model.byte_fallback = true is not supported'],
      [with_({}, { ignore_merges: true }), 'model.ignore_merges = true is not supported'],
      [with_({ normalizer: { type: 'NFC' } }), 'normalizer must be null'],
      [with_({ pre_tokenizer: { type: 'Metaspace' } }), 'pre_tokenizer must be {"type": "ByteLevel", …}'],
      [
        with_({ pre_tokenizer: null }),
        'pre_tokenizer must be {"type": "ByteLevel", …} (GPT-2\'s split), found null',
      ],
      [
        with_({ pre_tokenizer: { type: 'ByteLevel', add_prefix_space: true } }),
        'pre_tokenizer.add_prefix_space = true is not supported',
      ],
      [
        with_({ post_processor: { type: 'TemplateProcessing' } }),
        'post_processor must be null or of type "ByteLevel"',
      ],
      [with_({}, { vocab: [] }), 'model.vocab must be an object of token → id, found []'],
      [
        with_({}, { vocab: { ...vocab, x: -1 } }),
        'model.vocab["x"] must be a token id (an integer ≥ 0), found -1',
      ],
      [
        with_({}, { vocab: { ...vocab, zz: 5 } }),
        'model.vocab["zz"] gives id 5 to "zz", but model.vocab gives it to',
      ],
      [with_({}, { vocab: gap, merges: ['Ġ t'] }), 'no token has id 259 in model.vocab or added_tokens'],
      [with_({}, { merges: ['Ġ t', 'h e x'] }), 'model.merges[1] must be "left right" or ["left", "right"]'],
      [with_({}, { merges: 'Ġ t' }), 'model.merges must be an array'],
      [with_({}, { merges: ['Ġ q9'] }), 'model.merges[0] joins "q9", which is not in model.vocab'],
      [with_({}, { merges: ['Ġ h'] }), 'model.merges[0] makes "Ġh", which is not a token'],
      [with_({}, { merges: ['Ġ t', 'Ġ t'] }), 'model.merges[1] repeats model.merges[0]'],
      [
        with_({}, { merges: ['Ġ <|endoftext|>'] }),
        'model.merges[0] joins 261, which is not the id of an ordinary token',
      ],
      [with_({ added_tokens: {} }), 'added_tokens must be an array'],
      [
        with_({ added_tokens: [{ id: 261 }] }),
        'added_tokens[0].content must be a non-empty string, found nothing',
      ],
      [
        with_({ added_tokens: [{ ...hf.added_tokens[0], lstrip: true }] }),
        'added_tokens[0].lstrip = true is not supported',
      ],
      [
        with_({ added_tokens: [{ ...hf.added_tokens[0], id: 7 }] }),
        'added_tokens[0].id gives id 7 to "<|endoftext|>", but model.vocab gives it to "(',
      ],
      [
        with_({}, { vocab: { ...vocab, 'a b': 262 } }),
        'token 262 = "a b" has " ", which is not in the byte alphabet',
      ],
      [
        with_(
          {},
          { vocab: Object.fromEntries(Object.entries(vocab).filter(([k]) => k !== 'Ā')), merges: [] },
        ),
        'no token has id',
      ],
    ];
    for (const [json, message] of cases) {
      expect(() => BpeTokenizer.fromHuggingFace(json), message).toThrow(
        `BpeTokenizer.fromHuggingFace: ${message}`,
      );
    }
    // All 256 bytes are needed: drop one and give its id to another token.
    const noNul: Record<string, number> = { ...vocab, xyz: vocab['Ā'] };
    delete noNul['Ā'];
    expect(() => BpeTokenizer.fromHuggingFace(with_({}, { vocab: noNul }))).toThrow(
      'BpeTokenizer.fromHuggingFace: the byte 0x00 ("Ā") has no token; a byte-level BPE needs all 256',
    );
  });
});

describe('scripts/brown-text.mjs', () => {
  it('detokenises tagged sentences and splits the 500 documents 455 / 45 by name', async () => {
    const script = '../scripts/brown-text.mjs';
    const brown = await import(script);
    expect(
      brown.detokenize("``/`` Only/rb a/at handful/nn ''/'' ,/, the/at jury/nn said/vbd Jr./np ./. "),
    ).toBe('"Only a handful", the jury said Jr.');
    expect(brown.detokenize("He/pps said/vbd ,/, '/' Don't/do* worry/vb '/' (/( twice/rb )/) !/.")).toBe(
      "He said, 'Don't worry' (twice)!",
    );
    const { train, heldout, trainNames, heldoutNames } = brown.brownText();
    expect(trainNames).toHaveLength(455);
    expect(heldoutNames).toHaveLength(45);
    expect(heldoutNames.every((name: string) => name.endsWith('9'))).toBe(true);
    expect(heldoutNames.slice(0, 3)).toEqual(['ca09', 'ca19', 'ca29']);
    expect(train.split('<|endoftext|>')).toHaveLength(455);
    expect(heldout.split('<|endoftext|>')).toHaveLength(45);
    expect(train.startsWith('The Fulton County Grand Jury said Friday an investigation of')).toBe(true);
    // No tags, no `` or '' quotes (but 12'' inches stay), no space before punctuation.
    expect(train).not.toMatch(/\w\/(?:at|nn|in|jj|vbd?|cc|np)\b|``|(?<!\d)''| [,.;:!?]/);
  });
});
