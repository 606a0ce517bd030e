// The Experiments tab: the article's claims, each with live numbers from qkv. (a) ÷√d_k and softmax
// saturation, with the §4.2 example recomputed; (b) W_Q = W_K; (c) causal mask; (d) a fully masked row;
// (e) memory of the n×n score matrix vs a tiled kernel. One decision to know: every figure shown is
// computed (by the worker or by qkv's exported helpers), none is typed in — except the article's own
// printed 0.768, which is quoted as what the article says.

import {
  articleScalingExample,
  formatBytes,
  type SoftmaxStats,
  scoreMatrixBytes,
  tiledKernelBytes,
} from 'qkv/viz';
import type { SaturationResult, TraceResult } from './protocol.js';

export const DK_STEPS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

const fmt = (v: number, digits = 3) => (Number.isFinite(v) ? v.toFixed(digits) : String(v));

/** A little SVG line chart: x = log2 d_k, y in [0, yMax]; one polyline per series. */
function lineChart(
  points: { x: number; ys: number[] }[],
  yMax: number,
  names: string[],
  marker: number,
  yLabel: string,
): string {
  const W = 320;
  const H = 170;
  const P = { l: 40, r: 10, t: 10, b: 34 };
  const xs = points.map((p) => Math.log2(p.x));
  const x0 = Math.min(...xs);
  const x1 = Math.max(...xs);
  const px = (x: number) => P.l + ((Math.log2(x) - x0) / (x1 - x0 || 1)) * (W - P.l - P.r);
  const py = (y: number) => H - P.b - (y / yMax) * (H - P.t - P.b);
  const colors = ['var(--accent)', 'var(--warn)'];
  const lines = names.map((_, s) => {
    const d = points.map((p) => `${px(p.x).toFixed(1)},${py(p.ys[s]).toFixed(1)}`).join(' ');
    return `<polyline fill="none" stroke="${colors[s]}" stroke-width="2" points="${d}"/>`;
  });
  const ticks = points
    .filter((_, i) => i % 2 === 0)
    .map((p) => `<text x="${px(p.x)}" y="${H - P.b + 14}" text-anchor="middle">${p.x}</text>`);
  const yt = [0, yMax / 2, yMax].map(
    (v) => `<text x="${P.l - 4}" y="${py(v) + 4}" text-anchor="end">${Number(v.toFixed(2))}</text>`,
  );
  const legend = names.map(
    (n, s) => `<text x="${P.l + 6 + s * 130}" y="${P.t + 10}" fill="${colors[s]}">— ${n}</text>`,
  );
  return `<svg class="chart" viewBox="0 0 ${W} ${H}" role="img" aria-label="${yLabel} against d_k">
<line x1="${P.l}" y1="${H - P.b}" x2="${W - P.r}" y2="${H - P.b}" class="axis"/>
<line x1="${P.l}" y1="${P.t}" x2="${P.l}" y2="${H - P.b}" class="axis"/>
<line x1="${px(marker)}" y1="${P.t}" x2="${px(marker)}" y2="${H - P.b}" class="marker"/>
${lines.join('\n')}${ticks.join('')}${yt.join('')}${legend.join('')}
<text x="${(W + P.l) / 2}" y="${H - 4}" text-anchor="middle">d_k</text>
</svg>`;
}

/** (a) The §4.2 worked example: a static table of recomputed values and the honest explanation. */
export function articleExampleHtml(): string {
  const ex = articleScalingExample();
  return `<table class="numbers" data-testid="article-example">
<thead><tr><th>scores for one query</th><th>weight on the 20</th></tr></thead>
<tbody>
<tr><td>[20, 0.5, 0.3, 0.1], not scaled</td><td data-testid="ex-unscaled">${ex.unscaled.toFixed(8)}</td></tr>
<tr><td>[20/8, 0.5, 0.3, 0.1] — the article's scaled line</td><td data-testid="ex-article">${ex.articleFormula.toFixed(3)} <span class="muted">(the article prints ${ex.articlePrinted})</span></td></tr>
<tr><td>[20, 0.5, 0.3, 0.1] / 8 — every score scaled, as attention does</td><td data-testid="ex-all">${ex.allScaled.toFixed(3)}</td></tr>
</tbody></table>
<p class="explain">Unscaled, the 20 takes 0.99999999 of the weight: softmax is saturated, its gradient
≈ 0. The article's scaled line divides only the 20 by √64 = 8 and keeps 0.5, 0.3, 0.1 as they were;
that expression is ${ex.articleFormula.toFixed(3)}, not the ${ex.articlePrinted} it prints. Attention divides
<em>every</em> score by √d_k, which gives ${ex.allScaled.toFixed(3)}. Either way the point stands: after
scaling the largest weight is far from 1, so gradients flow.</p>`;
}

/** (a) Live saturation numbers and charts for random q, k at the chosen d_k. */
export function saturationHtml(sat: SaturationResult, dK: number): string {
  const at = sat.points.find((p) => p.dK === dK) ?? sat.points[0];
  const row = (name: string, s: SoftmaxStats) =>
    `<tr><td>${name}</td><td>${fmt(s.meanMaxWeight)}</td><td>${fmt(s.meanEntropyBits, 2)} of ${fmt(s.uniformEntropyBits, 2)}</td></tr>`;
  return `<table class="numbers" data-testid="saturation-table">
<thead><tr><th>q, k ~ N(0, 1), d_k = ${at.dK}, 256 queries × ${sat.n} keys</th><th>mean largest weight</th><th>mean row entropy (bits)</th></tr></thead>
<tbody>${row('scores ÷ √d_k', at.scaled)}${row('not scaled', at.unscaled)}</tbody></table>
<div class="charts">
${lineChart(
  sat.points.map((p) => ({ x: p.dK, ys: [p.scaled.meanMaxWeight, p.unscaled.meanMaxWeight] })),
  1,
  ['÷ √d_k', 'not scaled'],
  at.dK,
  'mean largest weight',
)}
${lineChart(
  sat.points.map((p) => ({ x: p.dK, ys: [p.scaled.meanEntropyBits, p.unscaled.meanEntropyBits] })),
  Math.max(1, at.scaled.uniformEntropyBits),
  ['÷ √d_k', 'not scaled'],
  at.dK,
  'mean row entropy',
)}
</div>
<p class="explain">Each component of q and k has variance 1, so q·k has variance d_k. Without scaling the
spread of the scores grows like √d_k and softmax turns one-hot (largest weight → 1, entropy → 0); with
÷√d_k the scores keep variance 1 at every d_k and the curves stay flat.</p>`;
}

/** (a) The model's own focused head, with scaling as switched and flipped. */
export function modelScalingHtml(t: TraceResult): string {
  const on = t.switches.scaled ? t.stats : t.statsOtherScaling;
  const off = t.switches.scaled ? t.statsOtherScaling : t.stats;
  return `<p>In the model (layer ${t.focus.layer}, head ${t.focus.head}, d_k = ${t.model.dK}): largest weight
<b>${fmt(on.maxWeight)}</b> with ÷√d_k, <b>${fmt(off.maxWeight)}</b> without; mean row entropy
${fmt(on.meanEntropyBits, 2)} vs ${fmt(off.meanEntropyBits, 2)} bits. Scaling is now <b>${t.switches.scaled ? 'on' : 'off'}</b>
(switch it in the panel on the left).</p>`;
}

/** (b) Symmetry of Q·Kᵀ. */
export function symmetryHtml(t: TraceResult): string {
  const rel = t.scoreMagnitude > 0 ? t.asymmetry / t.scoreMagnitude : 0;
  const sym = rel < 1e-6;
  return `<p data-testid="asymmetry" data-value="${t.asymmetry}">W_Q = W_K is <b>${t.switches.tieQK ? 'on' : 'off'}</b>:
max |S − Sᵀ| = <b>${t.asymmetry.toPrecision(3)}</b> against max |S| = ${t.scoreMagnitude.toPrecision(3)} —
the score matrix is <b>${sym ? 'symmetric' : 'not symmetric'}</b>${sym ? ' (up to float32 rounding)' : ''}.</p>
<p class="explain">With W_Q = W_K, S = Q·Qᵀ, so score(i, j) = score(j, i): "i looks for j" can no longer
differ from "j looks for i" (§4.1). The <em>weights</em> still differ, because softmax normalises each row
over its own scores.</p>`;
}

/** (c) Causal mask summary: the sum of the upper triangle of the focused head's weights. */
export function causalHtml(t: TraceResult): string {
  const w = t.steps.find((s) => s.id === 'weights')!.spec;
  const L = w.rows;
  let upper = 0;
  for (let i = 0; i < L; i++) for (let j = i + 1; j < L; j++) upper += w.values[i * L + j];
  return `<p data-testid="upper-sum" data-value="${upper}">Causal is <b>${t.switches.causal ? 'on' : 'off'}</b>:
the weights above the diagonal (query i on a later key j &gt; i) add up to <b>${upper.toPrecision(3)}</b>.
${t.switches.causal ? 'Every token sees only itself and earlier tokens, as in a decoder (GPT).' : 'Every token sees every token, as in an encoder (BERT).'}</p>`;
}

/** (d) The fully masked row: qkv vs the article's −1e9. */
export function blockedHtml(t: TraceResult): string {
  const b = t.blocked;
  if (!b) {
    return '<p>Pick a query in <b>Fully mask row</b> (left panel) to block every key for it.</p>';
  }
  const list = (xs: number[], n = 6) =>
    `[${xs
      .slice(0, n)
      .map((x) => fmt(x))
      .join(', ')}${xs.length > n ? ', …' : ''}]`;
  const norm = (xs: number[]) => Math.sqrt(xs.reduce((a, x) => a + x * x, 0));
  return `<table class="numbers" data-testid="blocked-table">
<thead><tr><th>query “${t.tokens[b.query]}” (row ${b.query}), every key masked</th><th>weights</th><th>sum</th><th>output (first values)</th><th>‖output‖</th></tr></thead>
<tbody>
<tr><td>qkv (0 in the mask)</td><td>${list(b.qkvWeights)}</td><td data-testid="qkv-row-sum">${fmt(b.qkvWeights.reduce((a, x) => a + x, 0))}</td><td>${list(b.qkvOutput, 4)}</td><td>${fmt(norm(b.qkvOutput))}</td></tr>
<tr><td>the article (−1e9, then softmax)</td><td>${list(b.articleWeights)}</td><td>${fmt(b.articleWeights.reduce((a, x) => a + x, 0))}</td><td>${list(b.articleOutput, 4)}</td><td>${fmt(norm(b.articleOutput))}</td></tr>
</tbody></table>
<p class="explain">With −1e9 in every cell the row max is −1e9 too, so softmax sees all-equal scores and
returns 1/${t.tokens.length} for each key: the token silently receives the average of values it was
never allowed to see. qkv gives weights 0 and output 0 for such a row (PyTorch's math path gives NaN).</p>`;
}

/** (e) Memory of the n×n matrix vs a tiled kernel. */
export function memoryHtml(n: number, heads: number, block: number): string {
  const ns = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536];
  if (!ns.includes(n)) ns.push(n);
  ns.sort((a, b) => a - b);
  const rows = ns
    .map(
      (m) =>
        `<tr${m === n ? ' class="current"' : ''}><td>${m}</td><td>${formatBytes(scoreMatrixBytes(m))}</td><td>${formatBytes(scoreMatrixBytes(m, heads))}</td><td>${formatBytes(tiledKernelBytes(m, block))}</td><td>${formatBytes(heads * tiledKernelBytes(m, block))}</td></tr>`,
    )
    .join('');
  return `<p data-testid="memory-at-n" data-bytes="${scoreMatrixBytes(n)}">At n = <b>${n}</b>: the fp32 score matrix is
<b>${formatBytes(scoreMatrixBytes(n))}</b> per head (n² × 4 bytes; ${formatBytes(scoreMatrixBytes(n, heads))} for ${heads} heads); a tiled kernel
needs <b>${formatBytes(tiledKernelBytes(n, block))}</b> per head: one ${block}×${block} block of scores
(${formatBytes(block * block * 4)}) plus a running max and sum per query row (2n × 4 bytes).</p>
<table class="numbers"><thead><tr><th>n</th><th>n×n scores, 1 head</th><th>${heads} heads</th><th>tiled, 1 head</th><th>tiled, ${heads} heads</th></tr></thead><tbody>${rows}</tbody></table>
<p class="explain">The article's Q3: 4096² × 4 B = 64 MiB for one head (its "64MB"), and that grows 4×
each time n doubles. FlashAttention (arXiv:2205.14135, 2307.08691) never stores the matrix: it walks key
blocks with an online softmax (arXiv:1805.02867), so its extra memory grows like n. The arithmetic is the
same O(n²·d); only the memory changes.</p>`;
}
