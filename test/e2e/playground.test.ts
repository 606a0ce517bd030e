// The playground in a real Chromium (playwright-core + the system browser): it builds web/ with Vite's
// JS API into a temp dir, serves it on a free port, and drives the page as a learner would. Screenshots of
// every view land in screenshots/ (git-ignored). One decision to know: cell values are read through the
// page's own hover readout, so the tests exercise the hit-testing a person uses, not a private hook.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadLanguageModel } from '../../src/nn/index.js';
import {
  headScores,
  heatmapLayout,
  readPngSize,
  SCORE_NAMES,
  seededStack,
  stepViews,
  tokenize,
  traceStack,
} from '../../src/viz/index.js';
import { openPlayground, type Playground, repo, shots } from './page.js';
import { checkTrainTab } from './train-tab.js';

let playground: Playground | undefined;
let context: BrowserContext;
let page: Page;
let url: string;
let pageErrors: string[] = [];

/** Waits until the page has drawn a trace newer than `after` and nothing is in flight. */
async function settled(after: number): Promise<number> {
  await page.waitForFunction(
    (n) => Number(document.body.dataset.renders ?? 0) > n && document.body.dataset.busy === undefined,
    after,
    { timeout: 15_000 },
  );
  return Number(await page.evaluate(() => document.body.dataset.renders));
}

const renders = async () => Number(await page.evaluate(() => document.body.dataset.renders ?? 0));

/** Hovers cell (row, col) of a heatmap card and returns the readout's row label and value. */
async function readCell(id: string, row: number, col: number): Promise<{ value: number; text: string }> {
  const canvas = page.locator(`figure[data-heatmap="${id}"] canvas`);
  const d = await canvas.evaluate((c: HTMLCanvasElement) => ({ ...c.dataset }));
  const [cw, ch] = [Number(d.cellWidth), Number(d.cellHeight)];
  await canvas.hover({
    position: { x: Number(d.gridX) + (col + 0.5) * cw, y: Number(d.gridY) + (row + 0.5) * ch },
  });
  const out = page.locator(`[data-testid="readout-${id}"]`);
  await expect.poll(async () => out.getAttribute('data-row')).toBe(String(row));
  await expect.poll(async () => out.getAttribute('data-col')).toBe(String(col));
  return { value: Number(await out.getAttribute('data-value')), text: (await out.textContent()) ?? '' };
}

beforeAll(async () => {
  playground = await openPlayground('playground', { acceptDownloads: true });
  ({ page, context, url, pageErrors } = playground);
}, 180_000);

/** The language model exactly as the page fetches it (the build's copy: a training run may rewrite models/). */
function builtLanguageModel(): ReturnType<typeof loadLanguageModel> {
  const assets = join(playground!.outDir, 'assets');
  const file = readdirSync(assets).find((f) => f.startsWith('brown-lm') && f.endsWith('.safetensors'));
  if (!file) throw new Error(`the build has no copy of models/brown-lm.safetensors in ${assets}`);
  return loadLanguageModel(new Uint8Array(readFileSync(join(assets, file))));
}

/** A BPE token as the page shows it: its text, spaces as '·'. */
const visible = (t: string) => t.replace(/ /g, '·').replace(/\r?\n/g, '↵').replace(/\t/g, '⇥');

afterAll(async () => {
  await playground?.close();
});

describe('playground in Chromium', () => {
  it('loads the trained checkpoint by default (when it exists): "it" attends to "animal" in layer 1', async () => {
    await page.goto(url);
    await settled(0);
    const note = page.locator('[data-testid="model-note"]');
    if (!existsSync(join(repo, 'models/pronoun.safetensors'))) {
      // A fresh clone before training: the page must say it fell back to seeded weights.
      expect(await note.textContent()).toContain('no trained checkpoint');
      return;
    }
    expect(await note.textContent()).toContain('trained checkpoint models/pronoun.safetensors');
    expect(await page.locator('#dModel').isDisabled()).toBe(true);
    let before = await renders();
    await page.locator('#focusLayer').selectOption('1');
    await settled(before);
    const row = await readCell('weights', 7, 1);
    expect(row.text).toContain('row 7 “it”, column 1 “animal”');
    expect(row.value).toBeGreaterThan(0.5);
    // The derivation line recomputes the softmax from the masked scores and ends in the shown value.
    const derivation = (await page.locator('[data-testid="derivation-weights"]').textContent()) ?? '';
    expect(derivation).toMatch(/^exp\(.*\) \/ Σ_j exp\(/);
    const shown = Number(derivation.slice(derivation.lastIndexOf('=') + 1));
    expect(Math.abs(shown - row.value)).toBeLessThan(0.006); // ends in the cell's value (rounded)
    await page.screenshot({ path: join(shots, '00-trained-checkpoint.png'), fullPage: false });
    await page.locator('#tab-head').click();
    await page.locator('#hvLayer').selectOption('1');
    await page.locator('#hvQuery').selectOption('7');
    await page.screenshot({ path: join(shots, '00b-trained-head-view-it.png'), fullPage: false });
    await page.locator('#hvQuery').selectOption('-1');
    await page.locator('#hvLayer').selectOption('0');
    await page.locator('#tab-model').click();
    await page.screenshot({ path: join(shots, '00c-trained-model-view.png'), fullPage: false });
    await page.locator('#tab-steps').click();
    // A word outside the vocabulary: a clear message and a marked chip, not a crash.
    before = Number(await page.evaluate(() => document.body.dataset.renders));
    await page.locator('#text').fill('the zebra was too tired');
    await expect.poll(() => page.locator('#status').textContent()).toContain('“zebra”');
    expect(await page.locator('#chips li.unknown').allTextContents()).toEqual(['zebra']);
    expect(await page.locator('#vocab').isHidden()).toBe(false);
    await page.locator('#focusLayer').selectOption('0');
    await page.locator('#source').selectOption('seeded');
    await settled(before);
    expect(await note.textContent()).toContain('seeded untrained');
    expect(await page.locator('#dModel').isDisabled()).toBe(false);
  });

  it('tokenizes a typed sentence and labels the heatmap rows with the tokens', async () => {
    const before = await renders();
    await page.locator('#text').fill('The cat sat on the mat .');
    await settled(before);
    const tokens = ['The', 'cat', 'sat', 'on', 'the', 'mat', '.'];
    expect(await page.locator('[data-testid="chips"] li').allTextContents()).toEqual(tokens);
    for (let i = 0; i < tokens.length; i++) {
      const { text } = await readCell('weights', i, 0);
      expect(text).toContain(`row ${i} “${tokens[i]}”`);
    }
    const { text } = await readCell('weights', 0, 5);
    expect(text).toContain('column 5 “mat”');
    await page.screenshot({ path: join(shots, '01-step-through.png'), fullPage: true });
  });

  it('causal mask: every upper-triangle weight reads 0, and it did not before', async () => {
    expect((await readCell('weights', 0, 3)).value).toBeGreaterThan(0);
    const before = await renders();
    await page.locator('#causal').check();
    await settled(before);
    const L = 7;
    for (let i = 0; i < L; i++) {
      for (let j = i + 1; j < L; j++) expect((await readCell('weights', i, j)).value).toBe(0);
    }
    expect((await readCell('weights', 3, 2)).value).toBeGreaterThan(0);
    expect((await readCell('weights', 0, 0)).value).toBe(1); // the first token sees only itself
    expect((await readCell('masked', 1, 4)).value).toBe(Number.NEGATIVE_INFINITY);
    expect(await page.locator('[data-testid="derivation-masked"]').textContent()).toContain('causal mask');
    await readCell('scores', 2, 1);
    expect(await page.locator('[data-testid="derivation-scores"]').textContent()).toContain(
      'Σ over d_k = 16',
    );
    await page.locator('li[data-step="masked"]').scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(shots, '02-causal-mask.png'), fullPage: true });
    const again = await renders();
    await page.locator('#causal').uncheck();
    await settled(again);
  });

  it('scaling off: the largest weight grows to the value the page predicted', async () => {
    const maxWeight = page.locator('[data-testid="max-weight"]');
    const scaled = Number(await maxWeight.getAttribute('data-value'));
    const predicted = await page.evaluate(() => {
      const m = document
        .querySelector('[data-testid="weight-stats"]')!
        .textContent!.match(/it would be ([0-9.]+)/);
      return Number(m?.[1]);
    });
    const before = await renders();
    await page.locator('#scaled').uncheck();
    await settled(before);
    const unscaled = Number(await maxWeight.getAttribute('data-value'));
    expect(unscaled).toBeGreaterThan(scaled); // sharper softmax without ÷√d_k
    expect(unscaled).toBeCloseTo(predicted, 4);
    const back = await renders();
    await page.locator('#scaled').check();
    await settled(back);
    expect(Number(await maxWeight.getAttribute('data-value'))).toBeCloseTo(scaled, 6);
  });

  it('keyboard: arrow keys move the cell readout and switch tabs', async () => {
    const canvas = page.locator('figure[data-heatmap="weights"] canvas');
    await canvas.focus();
    await page.keyboard.press('Home');
    await page.keyboard.press('ArrowRight');
    await expect
      .poll(() => page.locator('[data-testid="readout-weights"]').getAttribute('data-col'))
      .toBe('1');
    await page.locator('#tab-steps').focus();
    await page.keyboard.press('ArrowRight');
    expect(await page.locator('#tab-head').getAttribute('aria-selected')).toBe('true');
    expect(await page.locator('#panel-head').isVisible()).toBe(true);
  });

  it('head view: draws coloured lines for the selected heads', async () => {
    await page.locator('#tab-head').click();
    const coloured = () =>
      page.locator('#headview').evaluate((c: HTMLCanvasElement) => {
        const d = c.getContext('2d')!.getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let p = 0; p < d.length; p += 4)
          if (Math.max(d[p], d[p + 1], d[p + 2]) - Math.min(d[p], d[p + 1], d[p + 2]) > 40) n++;
        return n;
      });
    const all = await coloured();
    expect(all).toBeGreaterThan(1000);
    await page.screenshot({ path: join(shots, '03-head-view.png'), fullPage: true });
    for (const h of [0, 1, 2, 3]) await page.locator(`#hvHeads input[data-head="${h}"]`).uncheck();
    expect(await coloured()).toBe(0);
    for (const h of [0, 1, 2, 3]) await page.locator(`#hvHeads input[data-head="${h}"]`).check();
  });

  it('model view: layers × heads thumbnails; clicking one opens its step-through', async () => {
    await page.locator('#tab-model').click();
    expect(await page.locator('.thumb').count()).toBe(2 * 4);
    await page.screenshot({ path: join(shots, '04-model-view.png'), fullPage: true });
    const before = await renders();
    await page.locator('.thumb[data-layer="1"][data-head="2"]').click();
    await settled(before);
    expect(await page.locator('#tab-steps').getAttribute('aria-selected')).toBe('true');
    expect(await page.locator('[data-testid="weight-stats"]').textContent()).toContain('Layer 1, head 2');
    expect(await page.locator('li[data-step="embeddings"]').count()).toBe(0); // layer 1 starts from X
  });

  it('exports the weights heatmap as a PNG of the layout size × 2, and as SVG', async () => {
    const card = page.locator('figure[data-heatmap="weights"]');
    const [png] = await Promise.all([
      page.waitForEvent('download'),
      card.locator('button[data-export="png"]').click(),
    ]);
    expect(png.suggestedFilename()).toBe('qkv-weights-layer1-head2.png');
    const bytes = new Uint8Array(readFileSync((await png.path())!));
    // The size the shared layout gives for the same matrix, computed here in Node.
    const tokens = tokenize('The cat sat on the mat .');
    const trace = traceStack(seededStack({ dModel: 64, dK: 16, heads: 4, layers: 2, seed: 0 }), tokens, {
      focus: { layer: 1, head: 2 },
    });
    const spec = stepViews(trace.steps, tokens).find((v) => v.id === 'weights')!.spec;
    const layout = heatmapLayout(spec);
    expect(readPngSize(bytes)).toEqual({ width: layout.width * 2, height: layout.height * 2 });
    // …and the page drew the same numbers Node computes.
    expect((await readCell('weights', 4, 1)).value).toBeCloseTo(spec.values[4 * 7 + 1], 6);
    const [svg] = await Promise.all([
      page.waitForEvent('download'),
      card.locator('button[data-export="svg"]').click(),
    ]);
    const text = readFileSync((await svg.path())!, 'utf8');
    expect(text.startsWith('<svg')).toBe(true);
    expect(text).toContain(`width="${layout.width}" height="${layout.height}"`);
  });

  it('experiments: the §4.2 numbers, W_Q = W_K symmetry, a fully masked row, 64 MiB at n = 4096', async () => {
    await page.locator('#tab-experiments').click();
    expect(await page.locator('[data-testid="ex-unscaled"]').textContent()).toBe('0.99999999');
    expect(await page.locator('[data-testid="ex-article"]').textContent()).toContain('0.748');
    expect(await page.locator('[data-testid="ex-all"]').textContent()).toBe('0.796');
    await page.locator('[data-testid="saturation-table"]').waitFor();

    const asym = page.locator('[data-testid="asymmetry"]');
    expect(Number(await asym.getAttribute('data-value'))).toBeGreaterThan(0.01);
    let before = await renders();
    await page.locator('#tieQK2').check();
    await settled(before);
    expect(Number(await asym.getAttribute('data-value'))).toBeLessThan(1e-4);
    expect(await page.locator('#tieQK').isChecked()).toBe(true);

    before = await renders();
    await page.locator('#blocked').selectOption('2');
    await settled(before);
    expect(await page.locator('[data-testid="qkv-row-sum"]').textContent()).toBe('0.000');
    expect(await page.locator('[data-testid="blocked-table"]').textContent()).toContain('0.143'); // 1/7

    await page.locator('#memN').fill('12');
    expect(await page.locator('[data-testid="memory-at-n"]').getAttribute('data-bytes')).toBe(
      String(64 * 2 ** 20),
    );
    expect(await page.locator('[data-testid="memory-at-n"]').textContent()).toContain('64 MiB');
    await page.screenshot({ path: join(shots, '05-experiments.png'), fullPage: true });
    before = await renders();
    await page.locator('#blocked').selectOption('-1');
    await page.locator('#tieQK2').uncheck();
    await settled(before);
  });

  it('dark theme follows the system', async () => {
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.locator('#tab-steps').click();
    const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    expect(bg).toBe('rgb(22, 24, 30)');
    await page.screenshot({ path: join(shots, '06-dark-theme.png'), fullPage: false });
    await page.emulateMedia({ colorScheme: 'light' });
  });

  it('a shared link restores the sentence, weights, switches and focused head', async () => {
    const link = `${url}#text=${encodeURIComponent('the dog sat')}&source=seeded&causal=1&scaled=0&focusLayer=1&focusHead=3&blocked=2`;
    const other = await context.newPage();
    await other.goto(link);
    await other.waitForFunction(
      () => Number(document.body.dataset.renders ?? 0) > 0 && !document.body.dataset.busy,
    );
    expect(await other.locator('[data-testid="chips"] li').allTextContents()).toEqual(['the', 'dog', 'sat']);
    expect(await other.locator('#causal').isChecked()).toBe(true);
    expect(await other.locator('#scaled').isChecked()).toBe(false);
    expect(await other.locator('#source').inputValue()).toBe('seeded');
    expect(await other.locator('[data-testid="weight-stats"]').textContent()).toContain('Layer 1, head 3');
    expect(await other.locator('#blocked').inputValue()).toBe('2');
    expect(new URL(other.url()).hash).toContain('causal=1');
    await other.close();
  });

  // Timings are printed, not asserted: wall-clock limits fail on a loaded machine and prove nothing there.
  it('512 tokens: computed in the worker, drawn as a 512-row map, and the head view stays bounded', async () => {
    const words = Array.from({ length: 512 }, (_, i) => `w${i % 97}`).join(' ');
    const before = await renders();
    await page.locator('#text').fill(words);
    await settled(before);
    expect(await page.locator('[data-testid="chips"] li').count()).toBe(512);
    // How long the 512×512 heatmap and the whole page took to draw (reported for reading, not a target).
    const drawMs = Number(
      await page.locator('figure[data-heatmap="weights"] canvas').getAttribute('data-draw-ms'),
    );
    const pageMs = Number(await page.evaluate(() => document.body.dataset.renderMs));
    expect(drawMs).toBeGreaterThan(0);
    process.stdout.write(
      `512 tokens: weights heatmap drawn in ${drawMs} ms, whole page redraw ${pageMs} ms\n`,
    );
    const canvas = page.locator('figure[data-heatmap="weights"] canvas');
    expect(await canvas.getAttribute('data-rows')).toBe('512');
    await canvas.hover({
      position: { x: Number(await canvas.getAttribute('data-grid-x')) + 300.5, y: 200.5 },
    });
    const readout = page.locator('[data-testid="readout-weights"]');
    await expect.poll(async () => Number(await readout.getAttribute('data-col'))).toBeGreaterThan(295);
    await page.screenshot({ path: join(shots, '07-512-tokens.png'), fullPage: false });
    await page.locator('#tab-head').click();
    const lines = Number(await page.locator('#headview').getAttribute('data-lines'));
    expect(lines).toBeGreaterThan(100);
    expect(lines).toBeLessThanOrEqual(20_000);
    await page.screenshot({ path: join(shots, '08-head-view-512.png'), fullPage: false });
    await page.locator('#tab-steps').click();
    expect(pageErrors).toEqual([]);
  });

  it('Train tab: copy learns (loss falls, maps redrawn), Pause stops the counter, a pronoun model is used and saved', async () => {
    await checkTrainTab(page, shots, pageErrors);
  });
  it('the language model: any text is read by its BPE, heads are labelled, the probe repeats a sequence', async () => {
    const { model, tokenizer, config } = builtLanguageModel();
    await page.locator('#tab-steps').click();
    let before = await renders();
    await page.locator('#source').selectOption('lm');
    await settled(before);
    const note = page.locator('[data-testid="model-note"]');
    expect(await note.textContent()).toContain('trained checkpoint models/brown-lm.safetensors');
    expect(await note.textContent()).toContain('Brown corpus');
    expect(await page.locator('#causal').isChecked()).toBe(true); // a decoder: the mask goes on with it
    expect(await page.locator('#vocab').isHidden()).toBe(true); // no vocabulary to keep to
    // Words the pronoun model refuses are split into BPE tokens, shown as text.
    const text = "The zebra's jury said Fulton County's election was fair.";
    before = await renders();
    await page.locator('#text').fill(text);
    await settled(before);
    const chips = tokenizer.tokenize(text).map(visible);
    expect(await page.locator('[data-testid="chips"] li').allTextContents()).toEqual(chips);
    expect(await page.locator('#chips li.unknown').count()).toBe(0);
    expect(await page.locator('#status').getAttribute('role')).toBe('status');
    expect(chips.join('').replace(/·/g, ' ')).toBe(text);
    const { text: cell } = await readCell('weights', 1, 0);
    expect(cell).toContain(`row 1 “${chips[1]}”, column 0 “${chips[0]}”`);
    expect((await readCell('weights', 0, 1)).value).toBe(0); // causal
    await page.screenshot({ path: join(shots, '00d-lm-step-through.png'), fullPage: false });

    // Longer than the model's context: the first maxLen tokens, and a note, not an error.
    const long = Array.from({ length: config.maxLen + 40 }, () => ' the').join('');
    before = await renders();
    await page.locator('#text').fill(long);
    await settled(before);
    expect(await page.locator('[data-testid="chips"] li').count()).toBe(config.maxLen);
    expect(await page.locator('#status').textContent()).toContain(
      `this model reads at most ${config.maxLen} tokens`,
    );
    expect(await page.locator('#status').getAttribute('role')).toBe('status');

    // Model view: every head labelled with its strongest score, as headScores computes it here.
    const { heads } = headScores(model, {
      seed: 0,
      count: 4,
      length: 24,
      exclude: Object.values(tokenizer.specials).filter((id): id is number => id !== undefined),
    });
    before = await renders();
    await page.locator('#tab-model').click();
    await page.locator('#mvProbe').click();
    await settled(before);
    const value = await page.locator('#text').inputValue();
    const half = value.slice(0, value.length / 2);
    expect(value).toBe(half + half);
    const probe = await page.locator('[data-testid="chips"] li').allTextContents();
    expect(probe.length).toBe(48);
    expect(probe.slice(24)).toEqual(probe.slice(0, 24));
    expect(new URL(page.url()).hash).toContain('source=lm');
    expect(await page.locator('#mvProbeNote').textContent()).toContain('stripe 23 cells below the diagonal');
    const thumbs = page.locator('[data-testid="modelgrid"] .thumb');
    expect(await thumbs.count()).toBe(config.numLayers * config.numHeads);
    const labels = await page.locator('[data-testid="modelgrid"] .thumb-label').evaluateAll((els) =>
      els.map((e) => ({
        pattern: (e as HTMLElement).dataset.pattern!,
        score: Number((e as HTMLElement).dataset.score),
        text: e.textContent ?? '',
      })),
    );
    expect(labels.length).toBe(heads.length);
    labels.forEach((label, k) => {
      const h = heads[k];
      const best = SCORE_NAMES.reduce((a, b) => (h[b] > h[a] || Number.isNaN(h[a]) ? b : a));
      expect(label.pattern).toBe(best);
      expect(label.score).toBeCloseTo(h[best], 5);
      expect(label.text).toMatch(/^(prev-token|dup-token|induction|first-token) [0-9]\.[0-9]{2}$/);
    });
    expect(await thumbs.first().getAttribute('title')).toMatch(/induction [0-9.]+/);
    await page.screenshot({ path: join(shots, '04b-lm-model-view-probe.png'), fullPage: true });
    // A link opens the language model on its text.
    const other = await context.newPage();
    await other.goto(`${url}#text=${encodeURIComponent('Fulton County')}&source=lm&causal=1`);
    await other.waitForFunction(
      () => Number(document.body.dataset.renders ?? 0) > 0 && !document.body.dataset.busy,
    );
    expect(await other.locator('#source').inputValue()).toBe('lm');
    expect(await other.locator('[data-testid="chips"] li').allTextContents()).toEqual(
      tokenizer.tokenize('Fulton County').map(visible),
    );
    await other.close();
    // The pronoun model keeps the article's sentence, and its heads carry no labels.
    before = await renders();
    await page.locator('#text').fill("The animal didn't cross the street because it was too tired");
    before = await settled(before);
    await page.locator('#source').selectOption('checkpoint');
    await settled(before);
    expect(await page.locator('[data-testid="modelgrid"] .thumb-label').count()).toBe(0);
    await page.locator('#tab-steps').click();
    expect(pageErrors).toEqual([]);
  });
});
