// The Train tab in Chromium, run from playground.test.ts on its page (one build, one browser: a second
// test file would build and train in parallel with the timed checks there, on the same cores).
// One decision to know: map redraws and step counts are recorded in the page by a MutationObserver, so
// the test sees every update, however fast the worker trains, instead of sampling a moving target.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { expect } from 'vitest';
import { inductionScore, loadCheckpoint, Trainer } from '../../src/nn/index.js';

const readout = (page: Page) => page.locator('[data-testid="train-readout"]');
const stepOf = async (page: Page) => Number(await readout(page).getAttribute('data-step'));

/** Waits for the run to reach `state` ('done', 'paused', …). */
async function waitForState(page: Page, state: string, timeout = 20_000): Promise<void> {
  await page.waitForFunction((s) => document.getElementById('trainReadout')?.dataset.state === s, state, {
    timeout,
  });
}

/** Records, in the page, every map redraw: its step and head 0's pixels (as a data URL). */
async function recordMaps(page: Page): Promise<void> {
  await page.evaluate(() => {
    const maps = document.getElementById('trainMaps')!;
    const seen: { step: number; pixels: string }[] = [];
    (window as unknown as { mapUpdates: typeof seen }).mapUpdates = seen;
    new MutationObserver(() => {
      const canvas = maps.querySelector<HTMLCanvasElement>('figure[data-heatmap="train-l0-h0"] canvas');
      if (maps.dataset.step !== undefined && canvas)
        seen.push({ step: Number(maps.dataset.step), pixels: canvas.toDataURL() });
    }).observe(maps, { attributes: true, attributeFilter: ['data-step'] });
  });
}

const mapUpdates = (page: Page) =>
  page.evaluate(() => (window as unknown as { mapUpdates: { step: number; pixels: string }[] }).mapUpdates);

export async function checkTrainTab(page: Page, shots: string, pageErrors: string[]): Promise<void> {
  // The tab is reached with the keyboard, like the others.
  await page.locator('#tab-experiments').focus();
  await page.keyboard.press('ArrowRight');
  expect(await page.locator('#tab-train').getAttribute('aria-selected')).toBe('true');
  expect(await page.locator('#panel-train').isVisible()).toBe(true);
  expect(await stepOf(page)).toBe(0);
  expect(await page.locator('#trainUse').isDisabled()).toBe(true);
  expect(await page.locator('#trainDownload').isDisabled()).toBe(true);

  // copy, 40 steps: the loss falls, the counter reaches 40, the maps are redrawn with new weights.
  await page.locator('#trainTask').selectOption('copy');
  await page.locator('#trainSteps').fill('40');
  await page.locator('#trainSeed').fill('0');
  await recordMaps(page);
  const t0 = Date.now();
  await page.locator('#trainStart').click();
  await waitForState(page, 'done');
  const seconds = (Date.now() - t0) / 1000;
  expect(await stepOf(page)).toBe(40);
  const first = Number(await readout(page).getAttribute('data-first-loss'));
  const last = Number(await readout(page).getAttribute('data-loss'));
  expect(last).toBeLessThan(first * 0.8); // seed 0: 4.41 → 2.34
  expect(await readout(page).textContent()).toMatch(/step 40\/40 · loss [0-9.]+ .* [1-9][0-9]* tokens\/s/);
  expect(await page.locator('[data-testid="train-chart"]').getAttribute('data-points')).toBe('40');
  expect(await page.locator('[data-testid="train-chart"] svg path').count()).toBe(2); // loss and its running mean
  const updates = await mapUpdates(page);
  expect(updates[0].step).toBe(0); // the untrained model first …
  expect(updates.at(-1)!.step).toBe(40); // … and the trained one last,
  expect(updates.map((u) => u.step)).toEqual([...updates.map((u) => u.step)].sort((a, b) => a - b));
  expect(updates.at(-1)!.pixels).not.toBe(updates[0].pixels); // drawn from different weights
  expect(await page.locator('[data-testid="train-maps"] figure').count()).toBe(2 * 2); // all layers × heads
  const answer = Number(await page.locator('[data-testid="train-answer-weight"]').getAttribute('data-value'));
  expect(answer).toBeGreaterThan(0);
  expect(await page.locator('[data-testid="train-output"]').count()).toBe(1);
  expect(await page.locator('[data-testid="train-status"]').textContent()).toContain(
    'Done: 40 steps of copy',
  );
  expect(await page.locator('#trainUse').isDisabled()).toBe(true); // copy models stay out of the other views
  process.stdout.write(
    `Train tab: copy, 40 steps, loss ${first.toFixed(3)} → ${last.toFixed(3)} in ${seconds} s\n`,
  );
  await page.screenshot({ path: join(shots, '09-train.png'), fullPage: true });

  // Pause, with the keyboard: the counter stops, Resume goes on from there.
  await page.locator('#trainReset').click();
  expect(await stepOf(page)).toBe(0);
  await page.locator('#trainSteps').fill('2000');
  await page.locator('#trainStart').focus();
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => Number(document.getElementById('trainReadout')?.dataset.step) >= 5);
  expect(await page.evaluate(() => document.activeElement?.id)).toBe('trainPause');
  await page.keyboard.press('Enter');
  await waitForState(page, 'paused');
  const paused = await stepOf(page);
  await page.waitForTimeout(1000);
  expect(await stepOf(page)).toBe(paused);
  expect(await page.locator('#trainStart').textContent()).toBe('Resume');
  expect(await page.evaluate(() => document.activeElement?.id)).toBe('trainStart');
  await page.keyboard.press('Enter');
  await page.waitForFunction(
    (n) => Number(document.getElementById('trainReadout')?.dataset.step) > n + 2,
    paused,
  );
  await page.locator('#trainReset').click();

  // induction, 30 steps: the best head's induction score is tracked beside the loss (steps 0, 10, 20, 30)
  // and is the one `qkv train --task induction` measures for the same run in Node.
  await page.locator('#trainTask').selectOption('induction');
  await page.locator('#trainSteps').fill('30');
  await page.locator('#trainStart').click();
  await waitForState(page, 'done');
  const trainer = new Trainer({ task: 'induction', steps: 30, seed: 0 });
  while (!trainer.done) trainer.trainStep();
  const node = inductionScore(trainer.model);
  const shown = Number(await page.locator('[data-testid="train-induction"]').getAttribute('data-value'));
  expect(shown).toBeCloseTo(node.score, 4);
  expect(await readout(page).textContent()).toContain(`(head ${node.layer}.${node.head}; highest so far`);
  expect(await page.locator('[data-testid="train-chart"]').getAttribute('data-induction-points')).toBe('4');
  expect(await page.locator('[data-testid="train-chart"] svg path').count()).toBe(3); // loss, its mean, the score
  expect(await page.locator('[data-testid="train-status"]').textContent()).toMatch(
    /Done: 30 steps of induction .*, best induction score [0-9.]+ → [0-9.]+ \(head [0-9]\.[0-9]\)/,
  );
  await page.locator('#trainReset').click();
  expect(await page.locator('[data-testid="train-chart"]').getAttribute('data-induction-points')).toBeNull();

  // Reset right after Start, before the worker has answered: the run's late messages ('ready', its first
  // steps) must not bring it back (regression: the tab stayed "running" with the controls locked).
  await page.evaluate(() => {
    document.getElementById('trainStart')!.click();
    document.getElementById('trainReset')!.click();
  });
  await page.waitForTimeout(1500);
  expect(await readout(page).getAttribute('data-state')).toBe('idle');
  expect(await stepOf(page)).toBe(0);
  expect(await page.locator('#trainStart').isDisabled()).toBe(false);
  expect(await page.locator('#trainTask').isDisabled()).toBe(false);

  // pronoun: "Use this model" shows it in the other views; "Download checkpoint" saves loadable bytes.
  await page.locator('#text').fill("The animal didn't cross the street because it was too tired");
  await page.locator('#trainTask').selectOption('pronoun');
  expect(await page.locator('#trainSteps').inputValue()).toBe('800'); // the task's default
  await page.locator('#trainSteps').fill('20');
  await page.locator('#trainStart').click();
  await waitForState(page, 'done');
  const itAnimal = Number(await page.locator('[data-testid="train-it-animal"]').getAttribute('data-value'));
  expect(itAnimal).toBeGreaterThanOrEqual(0);
  expect(itAnimal).toBeLessThanOrEqual(1);
  await page.locator('#trainUse').click();
  await expect.poll(() => page.locator('[data-testid="train-status"]').textContent()).toContain('now show');
  await expect
    .poll(() => page.locator('[data-testid="model-note"]').textContent())
    .toContain(
      'trained checkpoint from the Train tab (task pronoun, encoder, 2 layers × 4 heads, d_model 64, 20 steps',
    );
  expect(await page.locator('#source').inputValue()).toBe('trained');
  const [file] = await Promise.all([page.waitForEvent('download'), page.locator('#trainDownload').click()]);
  expect(file.suggestedFilename()).toBe('qkv-pronoun-step20.safetensors');
  const { model, info } = loadCheckpoint(new Uint8Array(readFileSync((await file.path())!)));
  expect(info).toMatchObject({ task: 'pronoun', step: 20 });
  expect(model.config.numHeads).toBe(4);
  expect(pageErrors).toEqual([]);
}
