// The compute worker: runs the stack and the experiments off the main thread, so typing stays smooth
// even at 512 tokens. One decision to know: only the newest request matters — the page drops answers to
// stale ids — so the worker simply answers in order. Text is split by the checkpoint's tokenizer when
// the model has one (labels as typed, a BPE token's whitespace made visible; the tokens it embeds in the
// tokenizer's spelling), by words otherwise; a model with a maxLen reads that many tokens at most.

import { attentionWeights, Tensor } from 'qkv';
import { type Tokenizer, UnknownTokenError } from 'qkv/nn';
import { saturationAt, softmaxStats, stepViews, tokenize, traceStack } from 'qkv/viz';
import { loadStack, probeText, useTrainedCheckpoint } from './model-source.js';
import {
  type ErrorResult,
  MAX_TOKENS,
  type Request,
  type Response,
  type TraceRequest,
  type TraceResult,
} from './protocol.js';
import { readsAsBytes, visibleText } from './token-label.js';

interface WorkerScope {
  onmessage: ((e: MessageEvent<Request>) => void) | null;
  postMessage(message: Response): void;
}
const scope = self as unknown as WorkerScope;

/** The tokens a person may type, for the vocabulary list under the input: every token but the specials. */
function wordsOf(tokenizer: Tokenizer): string[] {
  const special = new Set(Object.values(tokenizer.specials));
  return Array.from({ length: tokenizer.vocabSize }, (_, id) => id)
    .filter((id) => !special.has(id))
    .map((id) => tokenizer.idToToken(id));
}

async function trace(req: TraceRequest): Promise<TraceResult | ErrorResult> {
  const t0 = performance.now();
  const { stack, tokenizer, source, notice, maxLen, decoder, heads } = await loadStack(req.config);
  const bytes = tokenizer !== undefined && readsAsBytes(tokenizer);
  // A BPE token is shown as its text with visible whitespace (" the" → "·the"), see token-label.ts.
  const all = tokenizer
    ? tokenizer.tokenize(req.text).map((t) => (bytes ? visibleText(t) : t))
    : tokenize(req.text);
  const limit = Math.min(MAX_TOKENS, maxLen ?? MAX_TOKENS);
  /** The chips and heatmap labels (as typed), and the tokens the stack embeds. */
  const labels = all.slice(0, limit);
  let tokens = labels;
  if (labels.length === 0)
    return {
      kind: 'error',
      id: req.id,
      message: 'Type a sentence: there are no tokens yet.',
      tokens: labels,
    };
  if (tokenizer) {
    let ids: Int32Array;
    try {
      ids = tokenizer.encode(req.text);
    } catch (err) {
      if (!(err instanceof UnknownTokenError)) throw err;
      return {
        kind: 'error',
        id: req.id,
        message: `The trained checkpoint knows ${tokenizer.vocabSize} words, not ${err.tokens.map((t) => `“${t}”`).join(', ')}. Use its words (listed below) or switch Weights to seeded.`,
        tokens: labels,
        unknown: err.tokens,
        vocab: wordsOf(tokenizer),
      };
    }
    if (ids.length !== all.length)
      throw new Error(`the tokenizer gave ${ids.length} ids but ${all.length} labels for the same text`);
    tokens = Array.from(ids.subarray(0, labels.length), (id) => tokenizer.idToToken(id));
  }
  const { causal, scaled, tieQK, blockedQuery } = req.switches;
  const blocked = blockedQuery < tokens.length ? blockedQuery : -1;
  const focus = {
    layer: Math.min(req.focus.layer, stack.layers.length - 1),
    head: Math.min(req.focus.head, stack.heads - 1),
  };
  const result = traceStack(stack, tokens, { causal, scaled, tieQK, blockedQuery: blocked, focus });
  const s = result.steps;
  const L = tokens.length;
  // The same head with scaling flipped: q and k are unchanged, only the factor differs.
  const other = attentionWeights(s.q, s.k, {
    causal,
    scale: scaled ? 1 : 1 / Math.sqrt(s.q.shape[1]),
    ...(blocked >= 0 ? { mask: blockMask(L, blocked) } : {}),
  });
  let asymmetry = 0;
  let scoreMagnitude = 0;
  for (let i = 0; i < L; i++) {
    for (let j = 0; j < L; j++) {
      const a = s.scores.data[i * L + j];
      asymmetry = Math.max(asymmetry, Math.abs(a - s.scores.data[j * L + i]));
      scoreMagnitude = Math.max(scoreMagnitude, Math.abs(a));
    }
  }
  const dV = s.v.shape[1];
  return {
    kind: 'trace',
    id: req.id,
    tokens: labels,
    dropped: all.length - labels.length,
    limit,
    description: stack.description,
    config: req.config,
    model: {
      source,
      dModel: stack.dModel,
      dK: stack.dK,
      heads: stack.heads,
      layers: stack.layers.length,
      ...(tokenizer && !bytes ? { vocab: wordsOf(tokenizer) } : {}),
      ...(maxLen !== undefined ? { maxLen } : {}),
      ...(decoder !== undefined ? { decoder } : {}),
      ...(heads ? { headLabels: heads } : {}),
    },
    notice,
    switches: { ...req.switches, blockedQuery: blocked },
    focus,
    weights: result.weights.map((w) => w.data),
    steps: stepViews(s, labels),
    stats: softmaxStats(s.weights.data, L),
    statsOtherScaling: softmaxStats(other.data, L),
    asymmetry,
    scoreMagnitude,
    ...(s.article
      ? {
          blocked: {
            query: s.article.query,
            qkvWeights: [...s.weights.data.subarray(blocked * L, (blocked + 1) * L)],
            qkvOutput: [...s.output.data.subarray(blocked * dV, (blocked + 1) * dV)],
            articleWeights: [...s.article.weights],
            articleOutput: [...s.article.output],
          },
        }
      : {}),
    millis: performance.now() - t0,
  };
}

function blockMask(L: number, row: number): Tensor {
  const m = Tensor.full([L, L], 1);
  m.data.fill(0, row * L, (row + 1) * L);
  return m;
}

scope.onmessage = async (e) => {
  const req = e.data;
  try {
    if (req.kind === 'trace') scope.postMessage(await trace(req));
    else if (req.kind === 'probe') {
      try {
        scope.postMessage({ kind: 'probe', id: req.id, text: await probeText(req.seed) });
      } catch (err) {
        scope.postMessage({ kind: 'probe', id: req.id, error: (err as Error).message });
      }
    } else if (req.kind === 'load') {
      try {
        scope.postMessage({ kind: 'loaded', id: req.id, description: useTrainedCheckpoint(req.bytes) });
      } catch (err) {
        scope.postMessage({ kind: 'loaded', id: req.id, error: (err as Error).message });
      }
    } else {
      const points = req.dKs.map((dK) => ({ dK, ...saturationAt(dK, req.n, req.seed) }));
      scope.postMessage({ kind: 'saturation', id: req.id, n: req.n, points });
    }
  } catch (err) {
    scope.postMessage({ kind: 'error', id: req.id, message: (err as Error).message });
  }
};
