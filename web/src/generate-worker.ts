// The Generate tab's worker: loads a decoder checkpoint, prefills the prompt into a KVCache, then makes
// one token per request — sample from the last logits (sampleToken, the sequence's own Generator), run
// that token through the model against the cache, and post the new token's attention row in every head,
// the next-token logits and the paged-cache picture. One decision to know: the paged cache is a mirror for
// the picture only — layer 0's keys and values of every token are appended to a PagedKVCache with small
// blocks (forks share blocks there, copy-on-write), while the model itself reads its own KVCache, one per
// sequence; a fork re-runs the fed tokens into a fresh KVCache and keeps the parent's logits and rows.

import {
  Generator,
  KVCache,
  PagedKVCache,
  sampleToken,
  Tensor,
  type TinyTransformer,
  tokenDistribution,
} from 'qkv';
import { getTask, loadCheckpoint, TASK_NAMES, type Tokenizer, UnknownTokenError } from 'qkv/nn';
import type {
  GenerateRequest,
  GenerateResponse,
  ModelInfo,
  PagedView,
  SamplingSettings,
  SequenceView,
} from './generate-protocol.js';
import { readsAsBytes, tokenLabel } from './token-label.js';

interface WorkerScope {
  onmessage: ((e: MessageEvent<GenerateRequest>) => void) | null;
  postMessage(message: GenerateResponse, transfer?: Transferable[]): void;
}
const scope = self as unknown as WorkerScope;

/** Most sequences at once: the one generated from the prompt and one fork of it. */
const MAX_SEQUENCES = 2;

interface Loaded {
  model: TinyTransformer;
  tokenizer: Tokenizer;
  info: ModelInfo;
  /** Token ids that end a sequence (the tokenizer's <eos>, if it has one). */
  stops: Set<number>;
}

interface Sequence {
  pagedId: number;
  seed: number;
  generator: Generator;
  cache: KVCache;
  ids: number[];
  promptLength: number;
  chosen: number[];
  attention: Float32Array[];
  logits?: Float32Array;
  stopped: string;
}

let loaded: Loaded | undefined;
let sequences: Sequence[] = [];
let paged: PagedKVCache | undefined;
let copies: PagedView['copies'] = [];
let forkedAt = -1;
let generated = 0;
let computeMs = 0;

const post = (m: GenerateResponse, transfer: Transferable[] = []) => scope.postMessage(m, transfer);

function newCache(model: TinyTransformer): KVCache {
  const { numLayers, numHeads, dModel } = model.config;
  return new KVCache({ numLayers, numKvHeads: numHeads, headDim: dModel / numHeads });
}

/** The language model's prompt: any English text works with a byte-level BPE tokenizer. */
const LM_PROMPT = 'The jury said';

/**
 * A prompt that suits the model: its task's sample up to the first scored position, the start of a
 * sentence for a byte-level BPE model (it reads any text), or a common word.
 */
function defaultPrompt(task: string | undefined, tokenizer: Tokenizer): string {
  if (task && (TASK_NAMES as readonly string[]).includes(task)) {
    const display = getTask(task).display;
    if (display && display.scored.length > 0)
      return display.sample.slice(0, display.scored[0].position + 1).join(' ');
  }
  if (readsAsBytes(tokenizer)) return LM_PROMPT;
  for (const word of ['The', 'the']) if (tokenizer.tokenToId(word) !== undefined) return word;
  const special = new Set(Object.values(tokenizer.specials));
  const bos = tokenizer.specials.bos;
  if (bos !== undefined) return tokenizer.idToToken(bos);
  for (let id = 0; id < tokenizer.vocabSize; id++) if (!special.has(id)) return tokenizer.idToToken(id);
  return '';
}

function load(bytes: Uint8Array, name: string, origin: ModelInfo['origin']): Loaded {
  const { model, info } = loadCheckpoint(bytes, name);
  const c = model.config;
  if (!c.causal)
    throw new Error(
      `${name} is an encoder (causal: false${info.task ? `, task ${info.task}` : ''}): every token sees the whole sentence, so it was never trained to predict the next token and cannot generate. Load a decoder: train copy or reverse in the Train tab and press “Generate with this model”, or open a checkpoint of \`qkv train --task copy\`.`,
    );
  const tokenizer = info.tokenizer;
  if (!tokenizer)
    throw new Error(`${name} has no tokenizer in its metadata, so a typed prompt cannot be read`);
  const what = info.task ? `task ${info.task}` : 'decoder';
  const step = info.step === undefined ? '' : `, ${info.step} steps`;
  const description = `${name} (${what}, ${c.numLayers} layers × ${c.numHeads} heads, d_model ${c.dModel}, ${tokenizer.description}, up to ${c.maxLen} tokens${step})`;
  const eos = tokenizer.specials.eos;
  return {
    model,
    tokenizer,
    stops: new Set(eos === undefined ? [] : [eos]),
    info: {
      name,
      origin,
      description,
      task: info.task,
      step: info.step,
      layers: c.numLayers,
      heads: c.numHeads,
      dModel: c.dModel,
      vocabSize: c.vocabSize,
      maxLen: c.maxLen,
      parameters: model.numParameters,
      labels: Array.from({ length: c.vocabSize }, (_, id) => tokenLabel(tokenizer, id)),
      defaultPrompt: defaultPrompt(info.task, tokenizer),
    },
  };
}

/** A paged pool with room for two full sequences and a spare: blocks of 4 (16 for long contexts). */
function newPaged(model: TinyTransformer): PagedKVCache {
  const { numHeads, dModel, maxLen } = model.config;
  const blockSize = maxLen <= 128 ? 4 : 16;
  const perSequence = Math.ceil(maxLen / blockSize);
  return new PagedKVCache({
    numLayers: 1,
    numKvHeads: numHeads,
    headDim: dModel / numHeads,
    blockSize,
    numBlocks: MAX_SEQUENCES * perSequence + 2,
  });
}

/** Appends layer 0's keys and values of positions from … to − 1 (read from the model's cache) to `seq`. */
function mirror(seq: Sequence, from: number, to: number): void {
  if (!paged || to <= from) return;
  const { key, value } = seq.cache.read(0); // [1, Hkv, S, E]: every token so far
  const [, Hkv, S, E] = key.shape;
  const Ev = value.shape[3];
  const L = to - from;
  const k = new Float32Array(Hkv * L * E);
  const v = new Float32Array(Hkv * L * Ev);
  for (let h = 0; h < Hkv; h++) {
    k.set(key.data.subarray((h * S + from) * E, (h * S + to) * E), h * L * E);
    v.set(value.data.subarray((h * S + from) * Ev, (h * S + to) * Ev), h * L * Ev);
  }
  const before = paged.blockTable(seq.pagedId);
  paged.append(seq.pagedId, 0, new Tensor(k, [Hkv, L, E]), new Tensor(v, [Hkv, L, Ev]));
  const after = paged.blockTable(seq.pagedId);
  for (let n = 0; n < before.length; n++)
    if (after[n] !== before[n]) copies.push({ block: after[n], from: before[n], pagedId: seq.pagedId });
}

/** The last query row of each layer's weights [1, H, L, S] → [H·S]. */
function lastRows(weights: Tensor[], H: number): Float32Array[] {
  return weights.map((w) => {
    const [, , L, S] = w.shape;
    const out = new Float32Array(H * S);
    for (let h = 0; h < H; h++) out.set(w.data.subarray((h * L + L - 1) * S, (h * L + L) * S), h * S);
    return out;
  });
}

/**
 * Runs `ids` (the tokens after what `seq.cache` holds) through the model; sets the next logits and the
 * newest token's attention rows, and mirrors the new keys and values into the paged cache.
 */
function feed(seq: Sequence, ids: number[]): void {
  const { model, info } = loaded!;
  const V = model.config.vocabSize;
  const from = seq.cache.length;
  const input = Int32Array.from(ids);
  const { logits, weights } = model.forward(input, 1, input.length, { cache: seq.cache, needWeights: true });
  seq.logits = Float32Array.from(logits.data.subarray(logits.data.length - V));
  seq.attention = lastRows(weights, info.heads);
  mirror(seq, from, seq.cache.length);
}

function sampling(s: SamplingSettings) {
  return { temperature: s.temperature, topK: s.topK > 0 ? s.topK : undefined, topP: s.topP };
}

/** One token for `seq`: drawn from its logits, then fed unless the model's maxLen is reached. */
function step(seq: Sequence, settings: SamplingSettings): void {
  const { model, stops } = loaded!;
  if (seq.stopped || !seq.logits) return; // nothing more can be drawn
  const options = sampling(settings);
  const id = sampleToken(seq.logits, options, seq.generator);
  const dist = tokenDistribution(seq.logits, options);
  const at = dist.ids.indexOf(id);
  seq.chosen.push(at >= 0 ? dist.probs[at] : 0);
  seq.ids.push(id);
  generated++;
  // A sequence that stops keeps the logits its last token was drawn from, for the distribution view.
  if (stops.has(id)) seq.stopped = `it drew the stop token ${loaded!.tokenizer.idToToken(id)}`;
  else if (seq.cache.length >= model.config.maxLen)
    seq.stopped = `the model's maxLen (${model.config.maxLen} tokens) is reached; the last token was drawn but not fed`;
  else feed(seq, [id]);
}

function view(seq: Sequence): SequenceView {
  const { tokenizer } = loaded!;
  return {
    pagedId: seq.pagedId,
    seed: seq.seed,
    tokens: seq.ids.map((id) => tokenLabel(tokenizer, id)),
    ids: [...seq.ids],
    text: tokenizer.decode(seq.ids),
    promptLength: seq.promptLength,
    fed: seq.cache.length,
    chosen: [...seq.chosen],
    position: seq.cache.length - 1,
    attention: seq.attention.map((a) => a.slice()),
    ...(seq.logits ? { logits: seq.logits.slice() } : {}),
    stopped: seq.stopped,
  };
}

function postState(epoch: number): void {
  const views = sequences.map(view);
  const p = paged!;
  const transfer: Transferable[] = [];
  for (const v of views) {
    for (const a of v.attention) transfer.push(a.buffer);
    if (v.logits) transfer.push(v.logits.buffer);
  }
  post(
    {
      kind: 'state',
      epoch,
      sequences: views,
      paged: {
        blockSize: p.blockSize,
        numBlocks: p.numBlocks,
        freeBlocks: p.freeBlocks,
        tables: sequences.map((s) => ({
          pagedId: s.pagedId,
          table: [...p.blockTable(s.pagedId)],
          length: p.length(s.pagedId),
        })),
        copies: copies.map((c) => ({ ...c })),
        forkedAt,
      },
      generated,
      computeMs,
      vocabSize: loaded!.model.config.vocabSize,
    },
    transfer,
  );
}

function startPrompt(epoch: number, text: string, seed: number) {
  const { model, tokenizer } = loaded!;
  let ids: Int32Array;
  try {
    ids = tokenizer.encode(text);
  } catch (err) {
    if (!(err instanceof UnknownTokenError)) throw err;
    sequences = [];
    const words = err.tokens.map((t) => `“${t}”`).join(', ');
    return post({
      kind: 'error',
      epoch,
      about: 'prompt',
      message: `The model knows ${tokenizer.vocabSize} tokens (${tokenizer.description}), not ${words}.`,
      unknown: err.tokens,
    });
  }
  const { maxLen } = model.config;
  if (ids.length === 0 || ids.length > maxLen) {
    sequences = [];
    return post({
      kind: 'error',
      epoch,
      about: 'prompt',
      message:
        ids.length === 0
          ? 'Type a prompt: it has no tokens yet.'
          : `The prompt has ${ids.length} tokens; this model reads at most ${maxLen}.`,
    });
  }
  paged = newPaged(model);
  copies = [];
  forkedAt = -1;
  generated = 0;
  computeMs = 0;
  const seq: Sequence = {
    pagedId: paged.allocate(),
    seed,
    generator: new Generator(seed),
    cache: newCache(model),
    ids: [...ids],
    promptLength: ids.length,
    chosen: [],
    attention: [],
    stopped: '',
  };
  sequences = [seq];
  feed(seq, [...ids]);
  postState(epoch);
}

function fork(epoch: number, seed: number) {
  const parent = sequences[0];
  const { model } = loaded!;
  const refuse = (message: string) => post({ kind: 'error', epoch, about: 'step', message });
  if (!parent || !paged) return refuse('Nothing to fork: load a model and give a prompt first.');
  if (sequences.length >= MAX_SEQUENCES)
    return refuse('There are two sequences already: go back to the prompt to fork again.');
  if (parent.stopped)
    return refuse(`Sequence 0 cannot grow (${parent.stopped}), so a fork could not either.`);
  const child: Sequence = {
    pagedId: paged.fork(parent.pagedId),
    seed,
    generator: new Generator(seed),
    cache: newCache(model),
    ids: [...parent.ids],
    promptLength: parent.promptLength,
    chosen: [...parent.chosen],
    attention: parent.attention.map((a) => a.slice()),
    logits: parent.logits?.slice(),
    stopped: '',
  };
  // The child's own KVCache for the model (the paged mirror shares the parent's blocks instead).
  model.forward(Int32Array.from(parent.ids), 1, parent.ids.length, { cache: child.cache });
  forkedAt = parent.cache.length;
  sequences.push(child);
  postState(epoch);
}

scope.onmessage = (e) => {
  const req = e.data;
  try {
    if (req.kind === 'load') {
      loaded = undefined;
      sequences = [];
      try {
        loaded = load(req.bytes, req.name, req.origin);
      } catch (err) {
        return post({ kind: 'error', epoch: req.epoch, about: 'model', message: (err as Error).message });
      }
      return post({ kind: 'model', epoch: req.epoch, info: loaded.info });
    }
    if (!loaded)
      return post({ kind: 'error', epoch: req.epoch, about: 'model', message: 'No model is loaded.' });
    if (req.kind === 'prompt') return startPrompt(req.epoch, req.text, req.seed);
    if (req.kind === 'fork') return fork(req.epoch, req.seed);
    if (sequences.length === 0)
      return post({ kind: 'error', epoch: req.epoch, about: 'step', message: 'No prompt to continue.' });
    const t0 = performance.now();
    for (const seq of sequences) step(seq, req.sampling);
    computeMs += performance.now() - t0;
    postState(req.epoch);
  } catch (err) {
    post({ kind: 'error', epoch: req.epoch, about: 'step', message: (err as Error).message });
  }
};
