// The Train tab's sentences about the sample's attention, computed from the maps the worker sent: how much
// weight the rows that must answer put on the position that holds the answer. One decision to know: the
// figure is measured over every layer and head, never assumed to sit in a given one (copy and reverse
// form their pattern in layer 0 with seed 0, not in the last layer). Which note a task gets, and its
// words, come from the task's display (layers 'last' or 'all', its pattern) and the sample's own tokens.

import type { TaskDisplay } from 'qkv/nn';
import type { TrainAttention } from './train-protocol.js';

/** Text for innerHTML: a token such as "<sep>" must read as text, not open a tag. */
const esc = (text: string) =>
  text.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);

/** Mean weight, over the scored rows, on the key that holds each row's answer: [layer][head]. */
export function answerWeights(a: TrainAttention): number[][] {
  const L = a.tokens.length;
  return a.weights.map((w) =>
    Array.from({ length: a.heads }, (_, h) => {
      let sum = 0;
      for (const p of a.predictions) sum += w[(h * L + p.position) * L + p.key];
      return sum / a.predictions.length;
    }),
  );
}

/**
 * A task read out in the last layer (pronoun): the scored row's weight on its answer ("it" on "animal")
 * in each last-layer head, and the prediction there.
 */
export function lastLayerNote(a: TrainAttention): string {
  const last = a.weights.length - 1;
  const perHead = answerWeights(a)[last];
  const best = perHead.indexOf(Math.max(...perHead));
  const heads = perHead
    .map((v, h) => (h === best ? `<b>head ${h}: ${v.toFixed(3)}</b>` : `head ${h}: ${v.toFixed(3)}`))
    .join(' · ');
  const p = a.predictions[0];
  const row = esc(a.tokens[p.position]);
  return (
    `Weight of the “${row}” row on “${esc(a.tokens[p.key])}” in the last layer (${last}): ${heads} ` +
    `(<span data-testid="train-it-animal" data-value="${perHead[best]}">${perHead[best].toFixed(3)}</span> at best). ` +
    `At “${row}” the model predicts “${esc(p.token)}”` +
    `${p.token === p.target ? ', the right answer.' : `, not yet “${esc(p.target)}”.`}`
  );
}

/**
 * A task whose pattern may form in any layer (copy/reverse): the best head's mean weight on the token each
 * scored row must write next, and what the model writes.
 */
export function allLayersNote(a: TrainAttention, display: TaskDisplay): string {
  const n = a.predictions.length;
  const right = a.predictions.filter((p) => p.token === p.target).length;
  const written = a.predictions
    .map((p) => (p.token === p.target ? esc(p.token) : `<b>${esc(p.token)}</b>`))
    .join(' ');
  const from = esc(a.tokens[a.predictions[0].position]);
  let best = { layer: 0, head: 0, value: -1 };
  answerWeights(a).forEach((heads, layer) => {
    heads.forEach((value, head) => {
      if (value > best.value) best = { layer, head, value };
    });
  });
  // What a causal row that spread its weight evenly would put on one key, for scale.
  const uniform = a.predictions.reduce((s, p) => s + 1 / (p.position + 1), 0) / n;
  return (
    `Each row from “${from}” on should look at the symbol it must write next: in a map, ${esc(display.pattern)}. ` +
    `Mean weight there: <span data-testid="train-answer-weight" data-value="${best.value}">${best.value.toFixed(3)}</span> ` +
    `in layer ${best.layer}, head ${best.head}, the best head (spread evenly it would be ${uniform.toFixed(3)}). ` +
    `After “${from}” the model writes <span class="mono" data-testid="train-output" data-right="${right}">${written}</span> ` +
    `(${right} of ${n} right, each given the true symbols before it; wrong ones in bold).`
  );
}
