// Training: the optimizer and schedule by hand, the whole TinyTransformer's gradient in float64 against
// central differences, a seeded smoke run on a tiny copy task that must reach a stated loss, checkpoints,
// the loss plot, and the `qkv train` / `qkv eval` commands.

import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { crossEntropy } from '../src/autograd/ops.js';
import { AdamW, clipGradNorm, warmupCosine } from '../src/autograd/optim.js';
import { backward, parameter } from '../src/autograd/var.js';
import { main } from '../src/cli/main.js';
import { MultiHeadAttention, Tensor } from '../src/index.js';
import { encodeSafetensors } from '../src/io/index.js';
import { TinyTransformer, transformerParameterShapes } from '../src/model/transformer.js';
import { Generator } from '../src/random.js';
import { loadCheckpoint, saveCheckpoint } from '../src/train/checkpoint.js';
import { lineChartSvg } from '../src/train/plot.js';
import { encodePronoun, pronounSentence, pronounTask } from '../src/train/pronoun.js';
import { sequenceTask } from '../src/train/tasks.js';
import { Trainer } from '../src/train/trainer.js';

async function run(argv: string[]) {
  let out = '';
  let err = '';
  const code = await main(argv, {
    stdout: { write: (s: string) => (out += s) },
    stderr: { write: (s: string) => (err += s) },
    env: {},
  });
  return { code, out, err };
}

describe('optimizer pieces', () => {
  it('AdamW: one step by hand, decay only on matrices', () => {
    const w = parameter(Float32Array.of(1, -2, 3, 0.5), [2, 2]);
    const b = parameter(Float32Array.of(1, -1), [2]);
    w.grad = Float32Array.of(0.1, -0.2, 0, 4);
    b.grad = Float32Array.of(0.5, 0);
    new AdamW([w, b], { weightDecay: 0.1 }).step(0.01);
    // First step: m̂ = g, v̂ = g², update = lr·g/(|g| + eps) = ±lr (0 where g = 0); decay w·(1 − lr·wd).
    const expectW = [1 * 0.999 - 0.01, -2 * 0.999 + 0.01, 3 * 0.999, 0.5 * 0.999 - 0.01];
    for (const [i, x] of expectW.entries()) expect(w.data[i]).toBeCloseTo(x, 6);
    expect(b.data[0]).toBeCloseTo(1 - 0.01, 6); // no decay on a bias
    expect(b.data[1]).toBeCloseTo(-1, 6);
  });

  it('warm-up + cosine schedule and gradient clipping', () => {
    const lr = warmupCosine({ maxLr: 1, minLr: 0.1, warmup: 10, total: 110 });
    expect(lr(0)).toBeCloseTo(0.1);
    expect(lr(9)).toBeCloseTo(1);
    expect(lr(60)).toBeCloseTo(0.55);
    expect(lr(110)).toBeCloseTo(0.1);
    const p = parameter(new Float32Array(2), [2]);
    p.grad = Float32Array.of(3, 4);
    expect(clipGradNorm([p], 1)).toBeCloseTo(5);
    expect(Array.from(p.grad)).toEqual([Math.fround(0.6), Math.fround(0.8)]);
  });
});

describe('TinyTransformer', () => {
  it('the whole model in float64 matches central differences (encoder with padding, and decoder)', () => {
    for (const causal of [false, true]) {
      const model = new TinyTransformer(
        { vocabSize: 7, dModel: 8, numHeads: 2, numLayers: 2, dFF: 12, maxLen: 5, causal },
        { seed: 3, dtype: 'float64' },
      );
      const ids = Int32Array.from([1, 4, 2, 6, 0, 3, 3, 5, 1, 2]);
      const targets = Int32Array.from([2, -1, 5, 0, 1, 6, -1, 4, 3, -1]);
      const mask = causal
        ? undefined
        : new Tensor(Float32Array.of(1, 1, 1, 1, 0, 1, 1, 1, 1, 1), [2, 1, 1, 5]);
      const loss = () => crossEntropy(model.forward(ids, 2, 5, { mask }).logits, targets);
      backward(loss());
      const gen = new Generator(11);
      let checked = 0;
      for (const [name, p] of model.params) {
        for (let n = 0; n < 3; n++) {
          const i = Math.floor(gen.random() * p.size);
          const keep = p.data[i];
          p.data[i] = keep + 1e-6;
          const up = loss().data[0];
          p.data[i] = keep - 1e-6;
          const down = loss().data[0];
          p.data[i] = keep;
          const numeric = (up - down) / 2e-6;
          const analytic = p.grad?.[i] ?? 0;
          if (!(Math.abs(analytic - numeric) <= 1e-4 + 1e-3 * Math.abs(numeric))) {
            expect.fail(
              `${causal ? 'decoder' : 'encoder'} ${name}[${i}]: analytic ${analytic}, numeric ${numeric}`,
            );
          }
          checked++;
        }
      }
      expect(checked).toBe(3 * model.params.size);
    }
  });

  it('transformerParameterShapes lists exactly the parameters the constructor makes', () => {
    const config = { vocabSize: 9, dModel: 8, numHeads: 2, numLayers: 3, dFF: 16, maxLen: 4, causal: true };
    const model = new TinyTransformer(config);
    expect(transformerParameterShapes(config)).toEqual([...model.params].map(([n, v]) => [n, [...v.shape]]));
  });

  it("a block's self_attn.* loads into MultiHeadAttention unchanged (PyTorch names)", () => {
    const model = new TinyTransformer(
      { vocabSize: 5, dModel: 8, numHeads: 2, numLayers: 1, dFF: 8, maxLen: 4, causal: false },
      { seed: 1 },
    );
    const sd = model.stateDict();
    const mha = new MultiHeadAttention({ embedDim: 8, numHeads: 2 });
    const prefix = 'layers.0.self_attn.';
    mha.loadStateDict(
      Object.fromEntries(
        Object.entries(sd)
          .filter(([k]) => k.startsWith(prefix))
          .map(([k, v]) => [k.slice(prefix.length), v]),
      ),
    );
    for (const [name, t] of Object.entries(mha.stateDict())) expect(t.data).toEqual(sd[prefix + name].data);
  });
});

describe('training smoke test', () => {
  it('a 1-layer decoder learns a tiny copy task from seed 0: held-out loss 1.386 (chance) → below 0.2 in 150 steps', () => {
    const task = sequenceTask('copy', {
      length: 4,
      symbols: 4,
      model: { dModel: 16, numHeads: 2, dFF: 32, numLayers: 1 },
    });
    const trainer = new Trainer({ task, steps: 150, seed: 0, batchSize: 16, lr: 1e-2, warmup: 10 });
    const before = trainer.evaluate('test', 2);
    expect(before).toBeGreaterThan(1.2);
    while (!trainer.done) trainer.trainStep();
    const after = trainer.evaluate('test', 2);
    expect(after).toBeLessThan(0.2);
    expect(trainer.losses.every(Number.isFinite)).toBe(true);
  });

  it('the same seed gives the same run; another seed another', () => {
    const task = sequenceTask('reverse', {
      length: 3,
      symbols: 4,
      model: { dModel: 8, numHeads: 2, dFF: 8, numLayers: 1 },
    });
    const losses = (seed: number) => {
      const t = new Trainer({ task, steps: 5, seed, batchSize: 4 });
      while (!t.done) t.trainStep();
      return t.losses;
    };
    expect(losses(1)).toEqual(losses(1));
    expect(losses(2)).not.toEqual(losses(1));
  });
});

describe('pronoun task', () => {
  it('sentences: "it" and the referent are where they say, and held-out pairs never reach training', () => {
    const gen = new Generator(0);
    const pairs = (split: 'train' | 'test') => {
      const seen = new Set<string>();
      for (let n = 0; n < 3000; n++) {
        const s = pronounSentence(gen, split);
        expect(s.words[s.itIndex]).toBe('it');
        expect(encodePronoun(s.words)).toHaveLength(s.words.length);
        seen.add(`${s.words[s.referentIndex]}|${s.words[s.words.length - 1]}`);
      }
      return seen;
    };
    const train = pairs('train');
    const test = pairs('test');
    expect(test.size).toBeGreaterThan(50);
    for (const p of test) expect(train.has(p)).toBe(false);
    const batch = pronounTask.batch(gen, 4);
    expect(batch.ids.length).toBe(4 * batch.L);
    expect(Array.from(batch.targets).filter((t) => t >= 0)).toHaveLength(4); // one scored position per sentence
  });
});

describe('checkpoints and plots', () => {
  it('save → load gives identical weights and logits', () => {
    const trainer = new Trainer({ task: 'copy', steps: 2, seed: 4 });
    trainer.trainStep();
    const bytes = saveCheckpoint(trainer.model, { task: 'copy', step: 1, tokenizer: trainer.task.tokenizer });
    const { model, info } = loadCheckpoint(bytes);
    expect(info).toEqual({ task: 'copy', step: 1, tokenizer: trainer.task.tokenizer });
    expect(loadCheckpoint(trainer.checkpoint()).info).toEqual(info); // the Trainer writes the same
    const b = trainer.task.batch(new Generator(1), 2);
    const a = trainer.model.forward(b.ids, b.B, b.L).logits.data;
    expect(model.forward(b.ids, b.B, b.L).logits.data).toEqual(a);
  });

  it('a checkpoint whose config disagrees with its tensors fails before building the model', () => {
    const model = new TinyTransformer({
      vocabSize: 5,
      dModel: 4,
      numHeads: 1,
      numLayers: 1,
      dFF: 4,
      maxLen: 3,
      causal: false,
    });
    const withConfig = (config: object) =>
      encodeSafetensors(model.stateDict(), { 'qkv.config': JSON.stringify({ ...model.config, ...config }) });
    expect(() => loadCheckpoint(withConfig({ numLayers: 1e9 }))).toThrow(
      /1000000000 layers .* holds 15 tensors/,
    );
    expect(() => loadCheckpoint(withConfig({ vocabSize: 1e9 }))).toThrow(
      /embedding.weight should be \[1000000000,4\]/,
    );
    expect(() => loadCheckpoint(withConfig({ maxLen: 1e12 }))).toThrow(/maxLen 1000000000000/);
    expect(() => loadCheckpoint(encodeSafetensors(model.stateDict()))).toThrow(/no qkv.config/);
  });

  it('lineChartSvg draws one path per series, with a legend', () => {
    const svg = lineChartSvg(
      [
        { label: 'a <b>', values: [3, 2, 1.5, 1] },
        { label: 'c', values: Array.from({ length: 5000 }, (_, i) => 1 / (i + 1)) },
      ],
      { title: 'loss', logY: true },
    );
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg.match(/<path /g)).toHaveLength(2);
    expect(svg).toContain('a &#60;b&#62;');
    expect(svg.length).toBeLessThan(40_000); // 5000 points reduced
  });
});

describe('qkv train / qkv eval', () => {
  it('train writes a checkpoint and a loss curve that eval-style loading accepts', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'qkv-train-'));
    const out = join(dir, 'm.safetensors');
    const {
      code,
      out: stdout,
      err,
    } = await run(['train', '--task', 'reverse', '--steps', '3', '--out', out]);
    expect(code).toBe(0);
    expect(stdout).toMatch(/trained reverse: 3\/3 steps/);
    expect(err).toMatch(/reverse .* 3\/3 loss \d/);
    expect(existsSync(join(dir, 'm.loss.svg'))).toBe(true);
    expect(loadCheckpoint(new Uint8Array(readFileSync(out))).info.task).toBe('reverse');
  });

  it('Ctrl-C (SIGINT) through the built bin: stops, saves checkpoint and plot, exits 130', async () => {
    const bin = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
    expect(existsSync(bin)).toBe(true); // npm test builds first
    const dir = mkdtempSync(join(tmpdir(), 'qkv-sigint-'));
    const out = join(dir, 'c.safetensors');
    const child = spawn(process.execPath, [
      bin,
      'train',
      '--task',
      'copy',
      '--steps',
      '100000',
      '--out',
      out,
    ]);
    let stdout = '';
    child.stdout.on('data', (d) => (stdout += d));
    // Wait until training has started (the header line), let it run a moment, then interrupt.
    await new Promise<void>((resolve) => child.stderr.once('data', () => resolve()));
    await new Promise((resolve) => setTimeout(resolve, 1500));
    child.kill('SIGINT');
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    expect(code).toBe(130);
    expect(stdout).toMatch(/^interrupted copy: \d+\/100000 steps/);
    const { info } = loadCheckpoint(new Uint8Array(readFileSync(out)));
    expect(info.step).toBeGreaterThan(0);
    expect(existsSync(join(dir, 'c.loss.svg'))).toBe(true);
  });

  it('bad options: one line on stderr, exit 2', async () => {
    for (const argv of [
      ['train'],
      ['train', '--task', 'nope'],
      ['train', '--task', 'copy', '--steps', '-3'],
      ['train', '--task', 'copy', '--bogus'],
      ['eval'],
      ['eval', '--task', 'copy'],
      ['eval', '--task', 'pronoun', '--count', 'x'],
    ]) {
      const { code, out, err } = await run(argv);
      expect(code, argv.join(' ')).toBe(2);
      expect(out).toBe('');
      expect(err.trim().split('\n'), argv.join(' ')).toHaveLength(1);
    }
  });

  it('eval on a corrupt or foreign checkpoint fails with a clear message, exit 1', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'qkv-eval-'));
    const bad = join(dir, 'bad.safetensors');
    writeFileSync(bad, new Uint8Array([1, 2, 3]));
    const r = await run(['eval', '--task', 'pronoun', '--model', bad]);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/decodeSafetensors: file has 3 bytes/);
    const copy = join(dir, 'copy.safetensors');
    await run(['train', '--task', 'copy', '--steps', '1', '--out', copy]);
    const r2 = await run(['eval', '--task', 'pronoun', '--model', copy]);
    expect(r2.code).toBe(1);
    expect(r2.err).toMatch(/trained on task 'copy'/);
  });

  it('eval of the committed checkpoint prints accuracy=… referent_attention=… on one line', async () => {
    const { code, out } = await run(['eval', '--task', 'pronoun', '--count', '200']);
    expect(code).toBe(0);
    expect(out).toMatch(/^accuracy=\d\.\d{4} referent_attention=\d\.\d{4}\n$/);
  });
});
