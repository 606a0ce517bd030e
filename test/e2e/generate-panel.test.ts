// The playground's Generate tab in a real Chromium (playwright-core + the system browser), on its own
// build of web/ (Vite's JS API, into a temp dir) and its own server (page.ts). The tab opens with the
// bundled language model (models/brown-lm.safetensors, fetched from the page's own server: offline); a tiny
// copy decoder is trained here with the library and opened through the tab's file input; a second one is
// trained in the page's Train tab and handed over with "Generate with this model".
// One decision to know: the tokens the page draws are checked against TinyTransformer.generate in Node
// with the same seed, so the test proves the worker's sampling loop, not just that chips appear; the
// language model is read from the build's own copy, since a training run may rewrite models/ meanwhile.

import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TinyTransformer } from '../../src/index.js';
import { loadLanguageModel, saveCheckpoint, Trainer, WordTokenizer } from '../../src/nn/index.js';
import { openPlayground, type Playground, shots } from './page.js';

const COPY_STEPS = 30;
const PROMPT = '<bos> a b c d e f g h <sep>';
const LM_PROMPT = 'The jury said';
const LM_NEW = 8;

let playground: Playground | undefined;
let page: Page;
let url: string;
let pageErrors: string[] = [];
let copyBytes: Uint8Array;
let copy: Trainer;
let lm: ReturnType<typeof loadLanguageModel>;

const readout = () => page.locator('[data-testid="gen-readout"]');
const states = async () => Number((await readout().getAttribute('data-states')) ?? 0);

/** Waits until the tab has drawn a state newer than `after` and no step is running. */
async function settled(after: number): Promise<number> {
  await page.waitForFunction(
    (n) => {
      const r = document.getElementById('genReadout')!;
      return Number(r.dataset.states ?? 0) > n && r.dataset.state === 'idle';
    },
    after,
    { timeout: 20_000 },
  );
  return states();
}

/** The probabilities of the shown next-token rows, most likely first. */
const probs = () =>
  page
    .locator('[data-testid="gen-dist"] tbody tr')
    .evaluateAll((rows) => rows.map((r) => Number((r as HTMLElement).dataset.p)));

/** Every head's attention row of the newest token: per layer, per head, the S weights. */
const attentionRows = () =>
  page
    .locator('[data-testid="gen-attn"] figure')
    .evaluateAll((figs) =>
      figs.map((f) =>
        Array.from(f.querySelectorAll('tbody tr')).map((tr) =>
          Array.from(tr.querySelectorAll('td')).map((td) => Number((td as HTMLElement).dataset.w)),
        ),
      ),
    );

/** Checks that every head's row has `S` weights in [0, 1] that sum to 1. */
async function checkAttention(layers: number, heads: number, S: number): Promise<void> {
  const rows = await attentionRows();
  expect(rows.length).toBe(layers);
  for (const layer of rows) {
    expect(layer.length).toBe(heads);
    for (const row of layer) {
      expect(row.length).toBe(S);
      for (const w of row) expect(w >= 0 && w <= 1).toBe(true);
      expect(Math.abs(row.reduce((a, b) => a + b, 0) - 1)).toBeLessThan(1e-5);
    }
  }
}

const seqTokens = (i: number) =>
  page.locator(`[data-testid="gen-text"] .gen-seq[data-seq="${i}"] li`).allTextContents();
const counts = async () => {
  const c = page.locator('[data-testid="paged-counts"]');
  return {
    shared: Number(await c.getAttribute('data-shared')),
    copied: Number(await c.getAttribute('data-copied')),
    free: Number(await c.getAttribute('data-free')),
    used: Number(await c.getAttribute('data-used')),
  };
};

/** The ids of sequence `i`'s chips (each chip carries its token id). */
const seqIds = (i: number) =>
  page
    .locator(`[data-testid="gen-text"] .gen-seq[data-seq="${i}"] li`)
    .evaluateAll((lis) => lis.map((li) => Number((li as HTMLElement).dataset.id)));

beforeAll(async () => {
  // The decoder the page opens as a file: copy, a few steps (enough to be a real checkpoint, not to copy well).
  copy = new Trainer({ task: 'copy', steps: COPY_STEPS, seed: 0 });
  while (!copy.done) copy.trainStep();
  copyBytes = copy.checkpoint({ 'qkv.trainedIn': 'test/e2e/generate-panel.test.ts' });
  playground = await openPlayground('gen');
  ({ page, url, pageErrors } = playground);
  // The language model exactly as the page fetches it: Vite's copy in the build.
  const assets = join(playground.outDir, 'assets');
  const file = readdirSync(assets).find((f) => f.startsWith('brown-lm') && f.endsWith('.safetensors'));
  if (!file) throw new Error(`the build has no copy of models/brown-lm.safetensors in ${assets}`);
  lm = loadLanguageModel(new Uint8Array(readFileSync(join(assets, file))));
}, 180_000);

afterAll(async () => {
  await playground?.close();
});

describe('Generate tab in Chromium', () => {
  it('opens with the bundled language model, offline, and continues “The jury said” as generate does', async () => {
    await page.goto(url);
    await page.locator('#tab-generate').click();
    expect(await page.locator('#panel-generate').isVisible()).toBe(true);
    const status = page.locator('[data-testid="gen-status"]');
    await expect
      .poll(() => status.textContent(), { timeout: 60_000 })
      .toContain('Loaded models/brown-lm.safetensors');
    const text = (await status.textContent()) ?? '';
    const { config, tokenizer } = lm;
    expect(text).toContain(`${config.numLayers} layers × ${config.numHeads} heads, d_model ${config.dModel}`);
    expect(text).toContain('byte-level BPE');
    expect(text).toContain(`up to ${config.maxLen} tokens`);
    expect(await page.locator('#genModel').inputValue()).toBe('bundled');
    await settled(0);
    expect(await page.locator('#genPrompt').inputValue()).toBe(LM_PROMPT);
    const prompt = tokenizer.encode(LM_PROMPT);
    expect(await seqIds(0)).toEqual([...prompt]);
    // BPE tokens read as text, spaces made visible: 'Ġsaid' is shown as '·said'.
    const shown = await seqTokens(0);
    expect(shown.join('').replace(/·/g, ' ')).toBe(LM_PROMPT);
    for (const t of shown) expect(t).not.toContain('Ġ');
    await checkAttention(config.numLayers, config.numHeads, prompt.length);
    expect((await probs()).length).toBe(10);
    // Generate LM_NEW tokens at temperature 1, seed 0; the library draws the same ones.
    await page.locator('#genMax').fill(String(LM_NEW));
    const before = await states();
    await page.locator('#genRun').click();
    await settled(before);
    const ids = await seqIds(0);
    const eos = tokenizer.specials.eos;
    const expected = lm.model.generate(prompt, {
      maxNewTokens: LM_NEW,
      seed: 0,
      temperature: 1,
      ...(eos === undefined ? {} : { stop: eos }),
    });
    expect(ids.slice(prompt.length)).toEqual([...expected]);
    expect(expected.length).toBeGreaterThan(0);
    const decoded = tokenizer.decode(ids);
    expect(decoded.startsWith(LM_PROMPT)).toBe(true);
    expect(decoded.length).toBeGreaterThan(LM_PROMPT.length);
    const line = page.locator('[data-testid="gen-text"] .gen-seq[data-seq="0"] .gen-decoded');
    expect(await line.textContent()).toContain(decoded);
    await page.screenshot({ path: join(shots, '10a-generate-lm.png'), fullPage: true });
    process.stdout.write(`Generate tab, bundled LM: ${JSON.stringify(decoded)}\n`);
    expect(pageErrors).toEqual([]);
  });

  it('an encoder checkpoint gets a clear message', async () => {
    const encoder = new TinyTransformer(
      { vocabSize: 3, dModel: 8, numHeads: 2, numLayers: 1, dFF: 16, maxLen: 8, causal: false },
      { seed: 1 },
    );
    const bytes = saveCheckpoint(encoder, { task: 'pronoun', tokenizer: new WordTokenizer(['a', 'b', 'c']) });
    await page.locator('#genFile').setInputFiles({
      name: 'encoder.safetensors',
      mimeType: 'application/octet-stream',
      buffer: Buffer.from(bytes),
    });
    const status = page.locator('[data-testid="gen-status"]');
    await expect.poll(() => status.textContent()).toContain('is an encoder');
    expect(await status.getAttribute('role')).toBe('alert');
    expect(await page.locator('#genRun').isDisabled()).toBe(true);
  });

  it('opens a copy decoder: the prompt, its last token’s attention, a top-10 distribution', async () => {
    const before = await states();
    await page.locator('#genFile').setInputFiles({
      name: 'copy.safetensors',
      mimeType: 'application/octet-stream',
      buffer: Buffer.from(copyBytes),
    });
    await settled(before);
    expect(await page.locator('[data-testid="gen-status"]').textContent()).toContain(
      'Loaded copy.safetensors',
    );
    expect(await page.locator('#genPrompt').inputValue()).toBe(PROMPT); // the task's sample up to <sep>
    expect(await seqTokens(0)).toEqual(PROMPT.split(' '));
    await checkAttention(2, 2, 10);
    const p = await probs();
    expect(p.length).toBe(10); // 12 tokens in the vocabulary, all kept at temperature 1
    expect(p.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(1 + 1e-9);
    for (let r = 1; r < p.length; r++) expect(p[r]).toBeLessThanOrEqual(p[r - 1]);
    expect(await page.locator('[data-testid="gen-dist"]').getAttribute('data-count')).toBe('10');
  });

  it('temperature, top-k and top-p re-rank the shown distribution at once', async () => {
    const at1 = await probs();
    await page.locator('#genTemp').fill('2');
    await expect.poll(async () => (await probs())[0]).toBeLessThan(at1[0]); // flatter
    const at2 = await probs();
    expect(at2).not.toEqual(at1);
    expect(await page.locator('#genTempOut').textContent()).toBe('2.00');
    await page.locator('#genTemp').fill('0.5');
    await expect.poll(async () => (await probs())[0]).toBeGreaterThan(at1[0]); // sharper
    await page.locator('#genTemp').fill('0');
    await expect.poll(probs).toEqual([1]); // greedy: the arg-max alone
    await page.locator('#genTemp').fill('1');
    await expect.poll(probs).toEqual(at1);
    await page.locator('#genTopK').fill('3');
    await expect.poll(async () => (await probs()).length).toBe(3);
    expect(Math.abs((await probs()).reduce((a, b) => a + b, 0) - 1)).toBeLessThan(1e-9); // renormalised
    await page.locator('#genTopK').fill('0');
    await page.locator('#genTopP').fill('0.5');
    await expect.poll(async () => (await probs()).length).toBeLessThan(10);
    await page.locator('#genTopP').fill('1');
    await expect.poll(probs).toEqual(at1);
  });

  it('Step adds one token; Fork shares the blocks, and the next write copies the partial one', async () => {
    let before = await states();
    await page.locator('#genStep').click();
    before = await settled(before);
    expect((await seqTokens(0)).length).toBe(11);
    await checkAttention(2, 2, 11);
    // 11 tokens in blocks of 4: #0 and #1 full, #2 with 3 tokens; no second sequence yet.
    expect(await counts()).toMatchObject({ used: 3, shared: 0, copied: 0 });
    await page.locator('#genFork').click();
    before = await settled(before);
    expect(await seqTokens(1)).toEqual(await seqTokens(0));
    expect(await counts()).toMatchObject({ used: 3, shared: 3, copied: 0 }); // all three shared
    expect(await page.locator('[data-testid="gen-paged"] .pblock[data-state="shared"]').count()).toBe(3);
    expect(await page.locator('#genFork').isDisabled()).toBe(true);
    await page.locator('#genStep').click();
    before = await settled(before);
    // Sequence 0 wrote first into the shared partial block and got a copy; the full ones stay shared.
    const c = await counts();
    expect(c).toMatchObject({ shared: 2, copied: 1, used: 4 });
    expect(c.free).toBe(Number(await page.locator('.pblock[data-state="free"]').count()));
    const copyBlock = page.locator('[data-testid="gen-paged"] .pblock[data-copy-of]');
    expect(await copyBlock.count()).toBe(1);
    expect(await copyBlock.getAttribute('data-copy-of')).toBe('2');
    expect((await seqTokens(0)).length).toBe(12);
    expect((await seqTokens(1)).length).toBe(12);
    await page.locator('[data-testid="gen-paged"]').scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(shots, '11-generate-fork.png'), fullPage: true });
  });

  it('Generate: tokens come one at a time until maxLen, as TinyTransformer.generate draws them', async () => {
    // Record, in the page, sequence 0's token count at every drawn state.
    await page.evaluate(() => {
      const seen: number[] = [];
      (window as unknown as { genCounts: number[] }).genCounts = seen;
      const r = document.getElementById('genReadout')!;
      new MutationObserver(() => seen.push(Number(r.dataset.generated))).observe(r, {
        attributes: true,
        attributeFilter: ['data-states'],
      });
    });
    const before = await states();
    await page.locator('#genRun').click();
    await settled(before);
    const seen = await page.evaluate(() => (window as unknown as { genCounts: number[] }).genCounts);
    expect(seen.length).toBeGreaterThan(1);
    for (let i = 1; i < seen.length; i++) expect(seen[i]).toBe(seen[i - 1] + 1); // one token per state
    // copy's maxLen is 17: 10 prompt tokens + 7 fed, and an 8th drawn but not fed.
    const tokens = await seqTokens(0);
    expect(tokens.length).toBe(18);
    expect(await page.locator('[data-testid="gen-text"] .gen-seq[data-seq="0"]').textContent()).toContain(
      'maxLen',
    );
    // The library draws the same tokens with the same seed (0) and temperature (1).
    const { tokenizer } = copy.task;
    const expected = copy.model.generate(tokenizer.encode(PROMPT), {
      maxNewTokens: 7,
      seed: 0,
      temperature: 1,
    });
    expect(tokens.slice(10, 17)).toEqual(Array.from(expected, (id) => tokenizer.idToToken(id)));
    const tps = Number(await readout().getAttribute('data-tps'));
    expect(tps).toBeGreaterThan(0);
    expect(await page.locator('[data-testid="gen-tps"]').textContent()).toMatch(/^[0-9]+$/);
    expect(await page.locator('#genRun').isDisabled()).toBe(true); // nothing can grow
    await page.screenshot({ path: join(shots, '10-generate.png'), fullPage: true });
    process.stdout.write(`Generate tab: copy decoder, ${tps.toFixed(0)} tokens/s in the worker\n`);

    // Back to the prompt: one sequence again, nothing shared.
    const again = await states();
    await page.locator('#genRestart').click();
    await settled(again);
    expect(await seqTokens(0)).toEqual(PROMPT.split(' '));
    expect(await page.locator('[data-testid="gen-text"] .gen-seq').count()).toBe(1);
    expect(await counts()).toMatchObject({ shared: 0, copied: 0, used: 3 });
  });

  it('a prompt outside the vocabulary is named; Stop ends a run between two tokens', async () => {
    await page.locator('#genPrompt').fill('<bos> a zebra');
    const status = page.locator('[data-testid="gen-status"]');
    await expect.poll(() => status.textContent()).toContain('“zebra”');
    const before = await states();
    await page.locator('#genPrompt').fill(PROMPT);
    await settled(before);
    const start = await states();
    await page.locator('#genMax').fill('3');
    await page.locator('#genRun').click();
    await settled(start);
    expect((await seqTokens(0)).length).toBe(13); // new tokens: 3
    // Stop right after Generate, in one task: the step already asked for lands, and no other is asked for.
    const stop = await states();
    await page.evaluate(() => {
      document.getElementById('genRun')!.click();
      document.getElementById('genStop')!.click();
    });
    await settled(stop);
    expect((await seqTokens(0)).length).toBe(14);
    expect(await page.locator('[data-testid="gen-status"]').textContent()).toContain('Stopped');
    expect(pageErrors).toEqual([]);
  });

  it('the Train tab hands a copy run over with "Generate with this model"', async () => {
    await page.locator('#tab-train').click();
    await page.locator('#trainTask').selectOption('copy');
    await page.locator('#trainSteps').fill('10');
    await page.locator('#trainStart').click();
    await page.waitForFunction(
      () => document.getElementById('trainReadout')?.dataset.state === 'done',
      null,
      {
        timeout: 30_000,
      },
    );
    expect(await page.locator('#trainGenerate').isDisabled()).toBe(false);
    const before = await states();
    await page.locator('#trainGenerate').click();
    await settled(before);
    expect(await page.locator('#tab-generate').getAttribute('aria-selected')).toBe('true');
    expect(await page.locator('#genModel').inputValue()).toBe('train');
    expect(await page.locator('[data-testid="gen-status"]').textContent()).toContain('copy, step 10');
    await checkAttention(2, 2, 10);
    expect((await probs()).length).toBe(10);
    await expect
      .poll(() => page.locator('[data-testid="train-status"]').textContent())
      .toContain('The Generate tab continues prompts');
    const before2 = await states();
    await page.locator('#genStep').click();
    await settled(before2);
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.screenshot({ path: join(shots, '12-generate-dark.png'), fullPage: true });
    await page.emulateMedia({ colorScheme: 'light' });
    expect(pageErrors).toEqual([]);
  });
});
