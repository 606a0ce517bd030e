// `qkv demo`: the article's run, done right: seeded, non-uniform, exact, with shapes and row sums.
// One decision to know: token embeddings are seeded N(0, 1) rows, one per distinct word, so a word that
// repeats has the same embedding and the same seed always prints the same numbers.

import { MultiHeadAttention } from '../attention/multihead.js';
import { SelfAttention } from '../attention/self-attention.js';
import { Generator } from '../random.js';
import { formatShape } from '../shape.js';
import { Tensor } from '../tensor.js';
import { formatAttentionTable } from './table.js';

export interface DemoConfig {
  tokens: string[];
  dModel: number;
  dK: number;
  dV: number;
  heads: number;
  causal: boolean;
  seed: number;
}

/** Seeded embeddings [n, dModel]: each distinct token gets its own N(0, 1) row. */
export function embedTokens(tokens: readonly string[], dModel: number, seed: number): Tensor {
  const gen = new Generator(seed);
  const table = new Map<string, Float32Array>();
  const x = new Float32Array(tokens.length * dModel);
  tokens.forEach((token, i) => {
    let row = table.get(token);
    if (!row) {
      row = Tensor.randn([dModel], { generator: gen }).data;
      table.set(token, row);
    }
    x.set(row, i * dModel);
  });
  return new Tensor(x, [tokens.length, dModel]);
}

/** Runs the demo and returns the text to print. */
export function runDemo(config: DemoConfig, color: boolean): string {
  const { tokens, dModel, dK, dV, heads, causal, seed } = config;
  const n = tokens.length;
  const X = embedTokens(tokens, dModel, seed);
  const lines: string[] = [];
  const row = (label: string, value: string) => lines.push(`${label.padEnd(20)}${value}`);
  const causalNote = causal ? ', causal (query i sees keys j ≤ i)' : '';

  let perHead: { title: string; weights: Float32Array }[];
  if (heads === 1) {
    const attn = new SelfAttention({ dModel, dK, dV, seed: seed + 1 });
    const { output, attentionWeights } = attn.forward(X, undefined, { causal });
    lines.push(`qkv demo: single-head self-attention, softmax(Q·Kᵀ/√d_k)·V${causalNote}, seed ${seed}`, '');
    row('tokens', tokens.join(' '));
    row('input X', `${formatShape(X.shape)}  seeded N(0,1) embedding per distinct token`);
    row(
      'WQ, WK, WV',
      `${[attn.WQ, attn.WK, attn.WV].map((w) => formatShape(w.shape)).join(', ')}  Xavier-uniform`,
    );
    row('Q, K, V', `${formatShape([n, dK])}, ${formatShape([n, dK])}, ${formatShape([n, dV])}`);
    row('output', formatShape(output.shape));
    row('attention weights', formatShape(attentionWeights.shape));
    perHead = [
      { title: 'attention weights (rows = queries, columns = keys)', weights: attentionWeights.data },
    ];
  } else {
    const mha = new MultiHeadAttention({ embedDim: dModel, numHeads: heads, seed: seed + 1 });
    const { output, weights } = mha.forward(X, X, X, { causal, needWeights: true });
    const hd = dModel / heads;
    lines.push(
      `qkv demo: ${heads}-head self-attention, softmax(Q·Kᵀ/√d_k)·V per head${causalNote}, seed ${seed}`,
      '',
    );
    row('tokens', tokens.join(' '));
    row('input X', `${formatShape(X.shape)}  seeded N(0,1) embedding per distinct token`);
    row('in_proj_weight', `${formatShape([3 * dModel, dModel])}  Xavier-uniform (PyTorch layout)`);
    row('Q, K, V per head', `${formatShape([heads, n, hd])}  d_k = d_v = d_model / heads = ${hd}`);
    row('out_proj.weight', formatShape([dModel, dModel]));
    row('output', formatShape(output.shape));
    row('attention weights', formatShape(weights!.shape));
    perHead = Array.from({ length: heads }, (_, h) => ({
      title: `head ${h} (rows = queries, columns = keys)`,
      weights: weights!.data.subarray(h * n * n, (h + 1) * n * n),
    }));
  }
  const labels = labelTokens(tokens);
  for (const { title, weights } of perHead) {
    lines.push('', title, formatAttentionTable(weights, labels, labels, { color }));
  }
  return `${lines.join('\n')}\n`;
}

/** Column labels: the tokens, numbered when a token repeats (the₀, the₁ would be hard to type, so the#2). */
function labelTokens(tokens: readonly string[]): string[] {
  const seen = new Map<string, number>();
  return tokens.map((t) => {
    const count = (seen.get(t) ?? 0) + 1;
    seen.set(t, count);
    const label = count > 1 ? `${t}#${count}` : t;
    return label.length > 10 ? `${label.slice(0, 9)}…` : label;
  });
}
