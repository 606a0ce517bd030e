// The `pronoun` task, after the article's "The animal didn't cross the street because it was too tired":
// templated sentences in which the adjective alone decides what "it" is. An encoder predicts the referent
// at the position of "it" (through the tied head, so it must fetch the noun's identity).
// Two decisions to know: (referent, adjective) pairs are split once, deterministically, into train and
// held-out sets, so test sentences are unseen combinations; and half the sentences pair two animals or
// two places ("the dog didn't catch the cat because it was too slow | fast"), where the adjective picks
// subject or object. Without them a model can copy *both* nouns into "it" and keep the one whose category
// suits the adjective (measured: accuracy 1.0 with only ~0.5 of the weight on the referent); with them,
// attention itself has to pick the noun, which is what the article's claim is about.

import { noGrad } from '../autograd/var.js';
import type { TinyTransformer } from '../model/transformer.js';
import { Generator } from '../random.js';
import { Tensor } from '../tensor.js';
import { WordTokenizer } from '../text/word.js';
import type { Batch, Task } from './tasks.js';

const ANIMALS = [
  'animal',
  'dog',
  'cat',
  'horse',
  'cow',
  'fox',
  'deer',
  'rabbit',
  'sheep',
  'goat',
  'chicken',
  'duck',
  'mouse',
  'bear',
  'wolf',
  'pig',
  'donkey',
  'turtle',
  'elephant',
  'squirrel',
  'frog',
  'lion',
  'tiger',
  'hedgehog',
];
const PLACES = [
  'street',
  'road',
  'river',
  'bridge',
  'field',
  'highway',
  'path',
  'square',
  'lane',
  'stream',
  'track',
  'yard',
  'park',
  'avenue',
  'canal',
  'trail',
];
/** Adjectives that describe an animal: "it" is the animal. */
const ANIMAL_ADJ = [
  'tired',
  'sleepy',
  'scared',
  'weak',
  'slow',
  'old',
  'lazy',
  'hungry',
  'sick',
  'nervous',
  'exhausted',
  'afraid',
];
/** Adjectives that describe a place: "it" is the place. */
const PLACE_ADJ = [
  'wide',
  'busy',
  'crowded',
  'long',
  'icy',
  'muddy',
  'steep',
  'flooded',
  'dark',
  'slippery',
  'deep',
  'blocked',
];
const VERBS: [string, string][] = [
  ['cross', 'crossed'],
  ['enter', 'entered'],
  ['reach', 'reached'],
];
/** Animal–animal and place–place sentences ("the dog didn't catch the cat because it was too slow | fast",
 * "the path didn't reach the river because it was too short | far"): the adjective says whether "it" is the
 * subject or the object, so the referent cannot be told by its category alone. */
const CHASE_VERBS = ['catch', 'chase', 'follow'];
const SUBJECT_ADJ = ['tired', 'slow', 'lazy', 'sleepy', 'old', 'weak', 'exhausted'];
const OBJECT_ADJ = ['fast', 'quick', 'agile', 'clever', 'sneaky'];
const JOIN_VERBS = ['reach', 'join', 'meet'];
const SUBJECT_PLACE_ADJ = ['short', 'small', 'crooked'];
const OBJECT_PLACE_ADJ = ['far', 'distant', 'remote', 'high'];
const WORDS = ['<pad>', 'the', "didn't", "wasn't", 'by', 'because', 'it', 'was', 'too'];
const VOCAB = [
  ...new Set([
    ...WORDS,
    ...VERBS.flat(),
    ...CHASE_VERBS,
    ...JOIN_VERBS,
    ...ANIMALS,
    ...PLACES,
    ...ANIMAL_ADJ,
    ...PLACE_ADJ,
    ...OBJECT_ADJ,
    ...SUBJECT_PLACE_ADJ,
    ...OBJECT_PLACE_ADJ,
  ]),
];
/** The task's tokenizer: one id per word of VOCAB, "<pad>" (id 0) the padding. */
const TOKENIZER = new WordTokenizer(VOCAB);
const PAD = TOKENIZER.specials.pad!;
const L = 12;

/** A (referent, adjective) pair is held out when this small hash is 0 mod 5 (about 20% of pairs). */
function heldOut(referent: string, adjective: string): boolean {
  let h = 2166136261;
  for (const ch of `${referent}|${adjective}`) h = Math.imul(h ^ ch.charCodeAt(0), 16777619) >>> 0;
  return h % 5 === 0;
}

/** One sentence: its words, the index of "it" and of the referent noun. */
export interface PronounSentence {
  words: string[];
  itIndex: number;
  referentIndex: number;
}

function pick<T>(gen: Generator, xs: readonly T[]): T {
  return xs[Math.floor(gen.random() * xs.length)];
}

/** Which sentences to draw: the article's animal/place ones, the animal/animal and place/place ones, or both. */
export type PronounFamily = 'article' | 'roles' | 'both';

/** A random sentence whose (referent, adjective) pair is in the given split. */
export function pronounSentence(
  gen: Generator,
  split: 'train' | 'test',
  family: PronounFamily = 'both',
): PronounSentence {
  for (;;) {
    if (family === 'roles' || (family === 'both' && gen.random() < 0.5)) {
      const places = gen.random() < 0.5; // two places, or two animals
      const nouns = places ? PLACES : ANIMALS;
      const subject = pick(gen, nouns);
      const object = pick(gen, nouns);
      if (object === subject) continue;
      const aboutSubject = gen.random() < 0.5;
      const adjectives = places
        ? aboutSubject
          ? SUBJECT_PLACE_ADJ
          : OBJECT_PLACE_ADJ
        : aboutSubject
          ? SUBJECT_ADJ
          : OBJECT_ADJ;
      const adjective = pick(gen, adjectives);
      const referent = aboutSubject ? subject : object;
      if (heldOut(referent, adjective) !== (split === 'test')) continue;
      const verb = pick(gen, places ? JOIN_VERBS : CHASE_VERBS);
      const words = ['the', subject, "didn't", verb, 'the', object, 'because', 'it', 'was', 'too', adjective];
      return { words, itIndex: 7, referentIndex: aboutSubject ? 1 : 5 };
    }
    const animal = pick(gen, ANIMALS);
    const place = pick(gen, PLACES);
    const aboutAnimal = gen.random() < 0.5;
    const adjective = pick(gen, aboutAnimal ? ANIMAL_ADJ : PLACE_ADJ);
    const referent = aboutAnimal ? animal : place;
    if (heldOut(referent, adjective) !== (split === 'test')) continue;
    const [verb, past] = pick(gen, VERBS);
    const tail = ['because', 'it', 'was', 'too', adjective];
    // Active: the ANIMAL didn't VERB the PLACE …; passive: the PLACE wasn't VERBed by the ANIMAL …
    const words =
      gen.random() < 0.5
        ? ['the', animal, "didn't", verb, 'the', place, ...tail]
        : ['the', place, "wasn't", past, 'by', 'the', animal, ...tail];
    return { words, itIndex: words.indexOf('it'), referentIndex: words.indexOf(referent) };
  }
}

/**
 * Token ids of words (throws an UnknownTokenError naming words outside the vocabulary).
 * @deprecated Use `pronounTask.tokenizer.encode(words)`, which returns an Int32Array.
 */
export function encodePronoun(words: readonly string[]): number[] {
  return Array.from(TOKENIZER.encode(words));
}

function batchOf(sentences: PronounSentence[]): Batch {
  const B = sentences.length;
  const ids = new Int32Array(B * L).fill(PAD);
  const targets = new Int32Array(B * L).fill(-1);
  const mask = new Float32Array(B * L);
  sentences.forEach((s, b) => {
    TOKENIZER.encode(s.words).forEach((id, t) => {
      ids[b * L + t] = id;
      mask[b * L + t] = 1;
    });
    targets[b * L + s.itIndex] = ids[b * L + s.referentIndex];
  });
  return { ids, targets, B, L, mask: new Tensor(mask, [B, 1, 1, L]) };
}

/** The article's sentence, for demos: "the animal didn't cross the street because it was too tired". */
export const ARTICLE_SENTENCE = [
  'the',
  'animal',
  "didn't",
  'cross',
  'the',
  'street',
  'because',
  'it',
  'was',
  'too',
  'tired',
];

/** The pronoun task: a 2-layer encoder, D = 64, 4 heads, 800 steps of 32 sentences. */
export const pronounTask: Task = {
  name: 'pronoun',
  description: `"The <animal> didn't cross the <place> | catch the <animal> because it was too <adjective>": ${ANIMALS.length} animals, ${PLACES.length} places, ${new Set([...ANIMAL_ADJ, ...PLACE_ADJ, ...OBJECT_ADJ, ...SUBJECT_PLACE_ADJ, ...OBJECT_PLACE_ADJ]).size} adjectives`,
  tokenizer: TOKENIZER,
  display: {
    sample: ARTICLE_SENTENCE,
    scored: [
      { position: ARTICLE_SENTENCE.indexOf('it'), target: 'animal', key: ARTICLE_SENTENCE.indexOf('animal') },
    ],
    pattern: 'the “it” row on “animal”',
    layers: 'last',
    sentences: true,
  },
  model: {
    vocabSize: TOKENIZER.vocabSize,
    dModel: 64,
    numHeads: 4,
    numLayers: 2,
    dFF: 128,
    maxLen: L,
    causal: false,
  },
  defaults: { steps: 800, batchSize: 32, lr: 3e-3, warmup: 40 },
  batch(generator, batchSize, split = 'train') {
    return batchOf(Array.from({ length: batchSize }, () => pronounSentence(generator, split)));
  },
};

/** What evaluatePronoun measures on held-out sentences. */
export interface PronounScore {
  /** Share of held-out sentences whose arg-max prediction at "it" (over the whole vocabulary) is the referent. */
  accuracy: number;
  /** Best last-layer head's mean weight from the "it" row to the referent noun. */
  referentAttention: number;
  /** That head. */
  head: number;
  sentences: number;
}

/** Sentences per forward when scoring: about 10 MB of activations for the pronoun model, whatever the count. */
export const EVAL_BATCH = 256;

/**
 * Scores a model on `count` held-out sentences (unseen referent/adjective pairs) drawn from `seed`,
 * `batchSize` sentences per forward under noGrad, so memory is bounded by one batch whatever the count.
 */
export function evaluatePronoun(
  model: TinyTransformer,
  { count = 1000, seed = 12345, family = 'both' as PronounFamily, batchSize = EVAL_BATCH } = {},
): PronounScore {
  const gen = new Generator(seed);
  const V = TOKENIZER.vocabSize;
  const H = model.config.numHeads;
  let correct = 0;
  const perHead = new Float64Array(H);
  for (let start = 0; start < count; start += batchSize) {
    const sentences = Array.from({ length: Math.min(batchSize, count - start) }, () =>
      pronounSentence(gen, 'test', family),
    );
    const { ids, B, mask } = batchOf(sentences);
    const { logits, weights } = noGrad(() => model.forward(ids, B, L, { mask, needWeights: true }));
    const last = weights[weights.length - 1].data; // [B, H, L, L]
    sentences.forEach((s, b) => {
      const o = (b * L + s.itIndex) * V;
      let best = PAD === 0 ? 1 : 0; // never <pad>: it is no answer
      for (let c = best + 1; c < V; c++)
        if (c !== PAD && logits.data[o + c] > logits.data[o + best]) best = c;
      if (best === ids[b * L + s.referentIndex]) correct++;
      for (let h = 0; h < H; h++) perHead[h] += last[((b * H + h) * L + s.itIndex) * L + s.referentIndex];
    });
  }
  let head = 0;
  for (let h = 1; h < H; h++) if (perHead[h] > perHead[head]) head = h;
  return { accuracy: correct / count, referentAttention: perHead[head] / count, head, sentences: count };
}
