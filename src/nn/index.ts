// qkv/nn: the training side (package.json "exports" → "./nn"): the autograd (one namespace, `autograd`,
// so generic op names such as add and scale do not crowd the entry), the Trainer and its tasks (copy,
// reverse, pronoun, induction, language model), checkpoints (saveCheckpoint, loadCheckpoint,
// loadLanguageModel) and the tokenizers they carry. The models themselves (TinyTransformer) are in the
// main entry, with generation. In Node the "node" condition gives src/nn/index.node.ts, which adds
// nodeTrainPlatform (the Trainer's worker_threads). Re-exports only; nothing reachable from here imports
// node:*.

export * as autograd from '../autograd/index.js';
export { BpeTokenizer, type BpeTrainOptions } from '../text/bpe.js';
export { TOKENIZER_TYPES, tokenizerFromJSON } from '../text/registry.js';
export {
  type SpecialToken,
  type Tokenizer,
  type TokenizerJSON,
  UnknownTokenError,
} from '../text/tokenizer.js';
export { WordTokenizer, type WordTokenizerOptions } from '../text/word.js';
export { type CheckpointInfo, loadCheckpoint, saveCheckpoint } from '../train/checkpoint.js';
export {
  type InductionTaskOptions,
  inductionScore,
  inductionSequence,
  inductionTask,
} from '../train/induction.js';
export {
  type LanguageModelTaskOptions,
  languageModelTask,
  loadLanguageModel,
  type TextBits,
  type TextBitsOptions,
  textBits,
} from '../train/lm.js';
export type { TrainPlatform, TrainWorkerHandle, TrainWorkerInit } from '../train/parallel.js';
export {
  ARTICLE_SENTENCE,
  encodePronoun,
  evaluatePronoun,
  type PronounFamily,
  type PronounScore,
  type PronounSentence,
  pronounSentence,
  pronounTask,
} from '../train/pronoun.js';
export {
  type Batch,
  type ScoredPosition,
  type SequenceTaskOptions,
  sequenceTask,
  type Task,
  type TaskDefaults,
  type TaskDisplay,
} from '../train/tasks.js';
export {
  getTask,
  type StepInfo,
  TASK_NAMES,
  type TaskName,
  Trainer,
  type TrainerOptions,
} from '../train/trainer.js';
