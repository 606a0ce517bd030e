// The playground's Flex tab in a real Chromium (playwright-core + the system browser), on its own build
// of web/ (Vite's JS API, into a temp dir) and its own server, like generate-panel.test.ts.
// One decision to know: what the page reports (tile counts, sparsity, tile kinds, a weight) is checked
// against createBlockMask / flexAttentionWeights run here in Node on the same mods and seeds, so the test
// proves the page shows the library's numbers, not just that something was drawn.

import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  alibiScore,
  andMasks,
  type BlockMask,
  causalMask,
  compileMask,
  createBlockMask,
  documentMask,
  flexAttentionWeights,
  slidingWindowMask,
  Tensor,
} from '../../src/index.js';
import { openPlayground, type Playground, shots } from './page.js';

let playground: Playground | undefined;
let page: Page;
let url: string;
let pageErrors: string[] = [];

const panel = () => page.locator('#panel-flex');
const counts = () => page.locator('[data-testid="flex-counts"]');
const updates = async () => Number((await panel().getAttribute('data-updates')) ?? 0);
const renders = async () => Number((await panel().getAttribute('data-renders')) ?? 0);

/** Runs `act` and waits until the tab has run an update after it (valid or not). */
async function settle(act: () => Promise<unknown>): Promise<void> {
  const before = await updates();
  await act();
  await page.waitForFunction(
    (n) => Number(document.getElementById('panel-flex')!.dataset.updates ?? 0) > n,
    before,
    { timeout: 20_000 },
  );
}

/** The tile counts and sparsity the page shows. */
async function shown() {
  const c = counts();
  return {
    full: Number(await c.getAttribute('data-full')),
    partial: Number(await c.getAttribute('data-partial')),
    empty: Number(await c.getAttribute('data-empty')),
    sparsity: Number(await c.getAttribute('data-sparsity')),
    text: (await c.textContent()) ?? '',
    kinds: (await page.locator('[data-testid="flex-blocks"]').getAttribute('data-kinds')) ?? '',
  };
}

/** The same numbers from the library in Node. */
function expected(mask: BlockMask) {
  const n = [0, 0, 0];
  for (const k of mask.kinds) n[k]++;
  return { full: n[2], partial: n[1], empty: n[0], sparsity: mask.sparsity(), kinds: mask.kinds.join('') };
}

async function expectReport(mask: BlockMask): Promise<void> {
  const want = expected(mask);
  const got = await shown();
  expect({ ...got, text: undefined }).toEqual({ ...want, text: undefined });
  expect(got.text).toContain(
    `${want.full} full, ${want.partial} partial, ${want.empty} empty tiles — ${want.sparsity.toFixed(1)}% skipped`,
  );
}

/** Pixels of a canvas that are clearly coloured (not grey/white/black). */
const colouredPixels = (selector: string) =>
  page.locator(selector).evaluate((c: HTMLCanvasElement) => {
    const d = c.getContext('2d')!.getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let p = 0; p < d.length; p += 4)
      if (Math.max(d[p], d[p + 1], d[p + 2]) - Math.min(d[p], d[p + 1], d[p + 2]) > 40) n++;
    return n;
  });

beforeAll(async () => {
  playground = await openPlayground('flex');
  ({ page, url, pageErrors } = playground);
}, 120_000);

afterAll(async () => {
  await playground?.close();
});

describe('Flex tab in Chromium', () => {
  it('is reached with the keyboard (WAI-ARIA tabs) and shows its panel', async () => {
    await page.goto(url);
    expect(await panel().isVisible()).toBe(false);
    await page.locator('#tab-steps').focus();
    await page.keyboard.press('End');
    expect(await page.locator('#tab-flex').getAttribute('aria-selected')).toBe('true');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('tab-flex');
    await expect.poll(() => panel().isVisible()).toBe(true);
    await expect.poll(renders).toBeGreaterThan(0);
    // Tab moves from the selected tab into the panel's first control.
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('flexL');
    // Arrow keys go round: Home is the first tab, ArrowLeft from it is Flex again.
    await page.locator('#tab-flex').focus();
    await page.keyboard.press('Home');
    expect(await page.locator('#tab-steps').getAttribute('aria-selected')).toBe('true');
    await page.keyboard.press('ArrowLeft');
    expect(await page.locator('#tab-flex').getAttribute('aria-selected')).toBe('true');
  });

  it('causal at L = 64, block 16: the tiles and sparsity createBlockMask computes', async () => {
    expect(await page.locator('#flexMaskPreset').inputValue()).toBe('causal');
    await settle(() => page.locator('#flexL').selectOption('64'));
    await settle(() => page.locator('#flexBlock').selectOption('16'));
    await expectReport(createBlockMask(causalMask, 1, 1, 64, 64, { blockSize: 16 }));
    expect(await page.locator('#flexMaskExpr').inputValue()).toBe('q >= kv');
    expect(await page.locator('#flexWindow').isVisible()).toBe(false); // only sliding window's parameter
    expect(await page.locator('[data-testid="flex-code"]').textContent()).toBe(
      'flexAttention(q, k, v, { maskMod: causalMask })',
    );
    // Block size 32 and 128 (one tile, cut short by L = 64) are the library's too.
    await settle(() => page.locator('#flexBlock').selectOption('32'));
    await expectReport(createBlockMask(causalMask, 1, 1, 64, 64, { blockSize: 32 }));
    await settle(() => page.locator('#flexBlock').selectOption('128'));
    await expectReport(createBlockMask(causalMask, 1, 1, 64, 64, { blockSize: 128 }));
    await settle(() => page.locator('#flexBlock').selectOption('16'));
  });

  it('a broken expression shows the caret message and keeps the last valid view', async () => {
    const before = await shown();
    const rendered = await renders();
    await settle(() => page.locator('#flexMaskExpr').fill('(q >= kv) & (q - kv <'));
    const error = page.locator('[data-testid="flex-mask-error"]');
    expect(await error.isVisible()).toBe(true);
    const message = (await error.textContent()) ?? '';
    expect(message).toContain('^');
    expect(message).toContain('(q >= kv) & (q - kv <');
    expect(await page.locator('#flexMaskExpr').getAttribute('aria-invalid')).toBe('true');
    expect(await page.locator('[data-testid="flex-status"]').textContent()).toContain('last valid');
    expect(await panel().getAttribute('data-state')).toBe('error');
    expect(await renders()).toBe(rendered);
    expect(await shown()).toEqual(before);
  });

  it('the expression (q >= kv) & (q - kv < 8) gives the slidingWindowMask(8) preset’s block mask', async () => {
    const want = createBlockMask(slidingWindowMask(8), 1, 1, 64, 64, { blockSize: 16 });
    await settle(() => page.locator('#flexMaskPreset').selectOption('sliding'));
    await settle(() => page.locator('#flexWindow').fill('8'));
    await expectReport(want);
    expect(await page.locator('#flexMaskExpr').inputValue()).toBe('q >= kv && q - kv < 8');
    expect(await page.locator('[data-testid="flex-mask-error"]').isVisible()).toBe(false);
    await settle(() => page.locator('#flexMaskExpr').fill('(q >= kv) & (q - kv < 8)'));
    expect(await panel().getAttribute('data-state')).toBe('ok');
    expect(await page.locator('#flexMaskPreset').inputValue()).toBe('custom');
    await expectReport(want);
    expect(await page.locator('[data-testid="flex-code"]').textContent()).toBe(
      "flexAttention(q, k, v, { maskMod: compileMask('(q >= kv) & (q - kv < 8)') })",
    );
    // The state is in the URL: a reload opens the same expression and block mask.
    expect(decodeURIComponent(page.url())).toContain(
      'fxMaskExpr=(q >= kv) & (q - kv < 8)'.replace(/ /g, '+'),
    );
    await page.reload();
    await page.locator('#tab-flex').click();
    await expect.poll(renders).toBeGreaterThan(0);
    expect(await page.locator('#flexMaskExpr').inputValue()).toBe('(q >= kv) & (q - kv < 8)');
    await expectReport(want);
  });

  it('document masking: the preset, its expression, and a per-head expression', async () => {
    const ids = Int32Array.from({ length: 64 }, (_, i) => (i < 16 ? 0 : i < 40 ? 1 : 2));
    const want = createBlockMask(andMasks(causalMask, documentMask(ids)), 1, 1, 64, 64, { blockSize: 16 });
    await settle(() => page.locator('#flexMaskPreset').selectOption('causal-document'));
    await settle(() => page.locator('#flexDocs').fill('16,24,24'));
    await expectReport(want);
    expect(await page.locator('[data-testid="flex-code"]').textContent()).toBe(
      'flexAttention(q, k, v, { maskMod: andMasks(causalMask, documentMask(ids)) })',
    );
    await settle(() => page.locator('#flexMaskExpr').fill('(q >= kv) & (doc[q] == doc[kv])'));
    await expectReport(want);
    // A mask that reads h: one block mask per head; the counts are the shown head's, the sparsity all heads'.
    const source = 'q >= kv && q - kv < 8 * (h + 1)';
    await settle(() => page.locator('#flexMaskExpr').fill(source));
    await settle(() => page.locator('#flexHead').selectOption('3'));
    const perHead = createBlockMask(compileMask(source), 1, 4, 64, 64, { blockSize: 16 });
    const head3 = expected(createBlockMask(slidingWindowMask(32), 1, 1, 64, 64, { blockSize: 16 }));
    const got = await shown();
    expect(got.sparsity).toBeCloseTo(perHead.sparsity(), 10);
    expect([got.full, got.partial, got.empty, got.kinds]).toEqual([
      head3.full,
      head3.partial,
      head3.empty,
      head3.kinds,
    ]);
    expect(got.text).toContain(`(all heads: ${perHead.sparsity().toFixed(1)}%)`);
    await settle(() => page.locator('#flexHead').selectOption('0'));
  });

  it('draws the weights flexAttentionWeights computes (ALiBi, per head), non-blank', async () => {
    await settle(() => page.locator('#flexMaskPreset').selectOption('causal'));
    await settle(() => page.locator('#flexScorePreset').selectOption('alibi'));
    await settle(() => page.locator('#flexHead').selectOption('3'));
    expect(await page.locator('[data-testid="flex-code"]').textContent()).toBe(
      'flexAttention(q, k, v, { maskMod: causalMask, scoreMod: alibiScore(4) })',
    );
    const canvas = page.locator('figure[data-heatmap="flex-weights"] canvas');
    expect(await colouredPixels('figure[data-heatmap="flex-weights"] canvas')).toBeGreaterThan(1000);
    expect(await colouredPixels('[data-testid="flex-blocks"]')).toBeGreaterThan(1000);
    expect(await colouredPixels('figure[data-heatmap="flex-mask"] canvas')).toBeGreaterThan(1000);
    // One weight, read through the cell readout with the keyboard, against the library in Node.
    const q = Tensor.randn([1, 4, 64, 16], { seed: 1 });
    const k = Tensor.randn([1, 4, 64, 16], { seed: 2 });
    const w = flexAttentionWeights(q, k, { maskMod: causalMask, scoreMod: alibiScore(4) });
    await canvas.focus();
    for (let i = 0; i < 5; i++) await page.keyboard.press('ArrowDown');
    for (let i = 0; i < 2; i++) await page.keyboard.press('ArrowRight');
    const readout = page.locator('[data-testid="readout-flex-weights"]');
    await expect.poll(() => readout.getAttribute('data-col')).toBe('2');
    expect(await readout.getAttribute('data-row')).toBe('5');
    const value = Number(await readout.getAttribute('data-value'));
    expect(value).toBeCloseTo(w.data[3 * 64 * 64 + 5 * 64 + 2], 6);
    expect(value).toBeGreaterThan(0);
    await page.screenshot({ path: join(shots, '13-flex.png'), fullPage: true });
    // An expression that compiles but fails while it runs (bias[-1]) is reported the same way.
    const rendered = await renders();
    await settle(() => page.locator('#flexScoreExpr').fill('score + bias[kv - q]'));
    const error = page.locator('[data-testid="flex-score-error"]');
    expect(await error.isVisible()).toBe(true);
    expect(await error.textContent()).toMatch(/bias\[-1\][\s\S]*\^/);
    expect(await renders()).toBe(rendered);
    await settle(() => page.locator('#flexScorePreset').selectOption('none'));
    expect(await error.isVisible()).toBe(false);
    expect(await panel().getAttribute('data-state')).toBe('ok');
  });

  it('the copy button and the rest leave no console errors', async () => {
    await page.locator('#flexCopy').click();
    await expect.poll(() => page.locator('[data-testid="flex-status"]').textContent()).toMatch(/cop/i);
    expect(pageErrors).toEqual([]);
  });
});
