// How a token is shown in the page. A word tokenizer's tokens are words and are shown as they are; a
// byte-level BPE token is stored in GPT-2's byte alphabet ("Ġthe"), which nobody reads, so it is shown as
// its decoded text with the whitespace made visible: " the" → "·the", a newline → "↵", a tab → "⇥".
// One decision to know: this is for display only — the stack still embeds tokens by their stored names.

import type { Tokenizer } from 'qkv/nn';

/** Makes the whitespace of a decoded token visible (spaces "·", newlines "↵", tabs "⇥"). */
export function visibleText(text: string): string {
  return text.replace(/ /g, '·').replace(/\r?\n/g, '↵').replace(/\t/g, '⇥');
}

/** True when the tokenizer's stored token names are not for reading (byte-level BPE). */
export function readsAsBytes(tokenizer: Tokenizer): boolean {
  return tokenizer.type === 'bpe';
}

/** The label of token `id`: the stored name for a word tokenizer, the visible decoded text for BPE. */
export function tokenLabel(tokenizer: Tokenizer, id: number): string {
  if (!readsAsBytes(tokenizer)) return tokenizer.idToToken(id);
  const special = Object.values(tokenizer.specials).includes(id);
  return special ? tokenizer.idToToken(id) : visibleText(tokenizer.decode([id]));
}
