// Word tokens for the playground and `qkv viz`: what a learner types is what the heatmap labels show.
// One decision to know: words keep inner apostrophes and hyphens ("didn't" is one token), punctuation is
// its own token, and each Han/kana character is a token (Chinese has no spaces between words). The rule
// lives in text/word.ts: a WordTokenizer splits text the same way (keeping "<sep>"-style tokens whole).

import { splitWords } from '../text/word.js';

/** Splits text into word, number, punctuation and CJK-character tokens. */
export function tokenize(text: string): string[] {
  return splitWords(text);
}

/** FNV-1a over code points plus a final mix: a seeded embedding depends on the token, not its position. */
export function hashToken(token: string): number {
  let h = 0x811c9dc5;
  for (const ch of token) h = Math.imul(h ^ ch.codePointAt(0)!, 0x01000193);
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b); // so one-letter tokens differ in the high bits too
  return (h ^ (h >>> 13)) >>> 0;
}
