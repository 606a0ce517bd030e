// The language-model task and resumable training: windows are next-token pairs, a run saved and resumed
// takes exactly the steps an uninterrupted run takes, and `qkv train --task lm` trains, saves and resumes.

import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { main } from '../src/cli/main.js';
import { Generator } from '../src/index.js';
import { decodeSafetensors } from '../src/io/safetensors.js';
import { autograd, BpeTokenizer, loadCheckpoint, saveCheckpoint, Trainer } from '../src/nn/index.js';
import { languageModelTask, loadLanguageModel, textBits } from '../src/train/lm.js';

const dir = mkdtempSync(join(tmpdir(), 'qkv-lm-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const text = Array.from(
  { length: 60 },
  (_, i) =>
    `The ${['cat', 'dog', 'jury', 'city'][i % 4]} said ${i} things about the ${['mat', 'park', 'bids'][i % 3]}.`,
).join(' ');
const tokenizer = BpeTokenizer.train(text, { vocabSize: 300 });
const ids = tokenizer.encode(text);

function tinyTask(dropout = 0.1) {
  return languageModelTask({
    tokenizer,
    train: ids,
    test: ids.subarray(0, 200),
    contextLength: 16,
    model: { dModel: 16, numHeads: 2, numLayers: 1, dFF: 32, dropout },
  });
}

describe('languageModelTask', () => {
  it('draws windows whose targets are the next tokens', () => {
    const task = tinyTask();
    const b = task.batch(new Generator(1), 4);
    expect([b.B, b.L]).toEqual([4, 16]);
    for (let r = 0; r < 4; r++) {
      const row = Array.from(b.ids.subarray(r * 16, r * 16 + 16));
      const start = ids.findIndex((_, s) => row.every((t, k) => ids[s + k] === t));
      expect(start).toBeGreaterThanOrEqual(0);
      expect(Array.from(b.targets.subarray(r * 16, r * 16 + 16))).toEqual(
        Array.from(ids.subarray(start + 1, start + 17)),
      );
    }
    expect(task.model).toMatchObject({ vocabSize: tokenizer.vocabSize, maxLen: 16, causal: true });
  });

  it('replaces round(B · repeats) training windows, the last ones, by a random segment repeated, scored on its copies', () => {
    const task = languageModelTask({ tokenizer, train: ids, test: ids, contextLength: 40, repeats: 0.3 });
    const eos = tokenizer.specials.eos!;
    for (const seed of [1, 2, 3, 4, 5]) {
      const b = task.batch(new Generator(seed), 8);
      // round(8 · 0.3) = 2: windows 0..5 are text, 6 and 7 are repeats.
      for (let r = 0; r < 8; r++) {
        const row = b.ids.subarray(r * 40, r * 40 + 40);
        const targets = b.targets.subarray(r * 40, r * 40 + 40);
        const inText = ids.findIndex((_, s) => row.every((t, k) => ids[s + k] === t));
        if (r < 6) {
          expect(inText).toBeGreaterThanOrEqual(0);
          expect(targets.every((t) => t >= 0)).toBe(true);
          continue;
        }
        // The period n: the first n targets are −1, every later one is the next token of the repeat.
        const n = targets.findIndex((t) => t !== -1);
        expect(n).toBeGreaterThanOrEqual(8);
        expect(n).toBeLessThanOrEqual(20); // min(64, ⌊40 / 2⌋)
        for (let t = n; t < 40; t++) expect(row[t]).toBe(row[t - n]);
        for (let t = n; t < 39; t++) expect(targets[t]).toBe(row[t + 1]);
        expect(targets[39]).toBe(row[40 % n]);
        expect(row.includes(eos)).toBe(false);
      }
    }
    // The held-out split stays text.
    const test = task.batch(new Generator(1), 8, 'test');
    expect(test.targets.every((t) => t >= 0)).toBe(true);
    // Segments draw from the whole vocabulary, not only the text's tokens.
    const seen = new Set<number>();
    for (let seed = 0; seed < 40; seed++) {
      const b = task.batch(new Generator(seed), 8);
      for (const id of b.ids.subarray(6 * 40)) seen.add(id);
    }
    expect(seen.size).toBeGreaterThan(200);
    // repeats 1: every training window repeated (a copying phase); held-out windows stay text.
    const all = languageModelTask({ tokenizer, train: ids, test: ids, contextLength: 40, repeats: 1 });
    const b = all.batch(new Generator(5), 4);
    for (let w = 0; w < 4; w++) expect(b.targets[w * 40]).toBe(-1);
    const t = all.batch(new Generator(5), 4, 'test');
    expect(t.targets.every((x) => x !== -1)).toBe(true);
    expect(() => languageModelTask({ tokenizer, train: ids, contextLength: 16, repeats: 1.5 })).toThrow(
      /languageModelTask: repeats must be a number in \[0, 1\], got 1.5/,
    );
    expect(() => languageModelTask({ tokenizer, train: ids, contextLength: 12, repeats: 0.5 })).toThrow(
      /repeats needs contextLength ≥ 16/,
    );
  });

  it('says what is wrong with its data', () => {
    const base = { tokenizer, contextLength: 16 };
    expect(() => languageModelTask({ ...base, train: ids.subarray(0, 16) })).toThrow(
      /languageModelTask: train has 16 tokens; a window needs contextLength \+ 1 = 17/,
    );
    expect(() => languageModelTask({ ...base, train: Int32Array.from({ length: 20 }, () => 300) })).toThrow(
      /train\[0\] = 300 is outside the tokenizer's \[0, 300\)/,
    );
    expect(() => languageModelTask({ ...base, train: [1, 2, 3] as unknown as Int32Array })).toThrow(
      /train must be an Int32Array/,
    );
  });
});

describe('textBits', () => {
  it('is the cross-entropy of every token given at most maxLen tokens before it (stride 1: one forward per token)', () => {
    const { model } = new Trainer({ task: tinyTask(0), seed: 2, steps: 1 });
    const sample = text.slice(0, 160);
    const ids = [tokenizer.specials.eos!, ...tokenizer.encode(sample)];
    const L = model.config.maxLen;
    let bits = 0;
    for (let t = 1; t < ids.length; t++) {
      const ctx = Int32Array.from(ids.slice(Math.max(0, t - L), t));
      const logits = autograd.noGrad(() => model.forward(ctx, 1, ctx.length).logits.data);
      const row = logits.subarray((ctx.length - 1) * 300, ctx.length * 300);
      const max = Math.max(...row);
      let sum = 0;
      for (const x of row) sum += Math.exp(x - max);
      const lse = Math.log(sum) + max;
      bits += (lse - row[ids[t]]) / Math.LN2;
    }
    expect(ids.length - 1).toBeGreaterThan(2 * L); // several windows
    const got = textBits(model, tokenizer, sample, { stride: 1, batchSize: 5 });
    expect(got.tokens).toBe(ids.length - 1);
    expect(got.bytes).toBe(new TextEncoder().encode(sample).length);
    expect(Math.abs(got.bits - bits)).toBeLessThan(1e-6 * bits);
    // bitsPerByte is bits / bytes; the bits themselves agree to 1e-6 above (float32 attention rounds
    // differently on the decode path a short context takes and on the tiled path of a batch).
    expect(got.bitsPerByte).toBeCloseTo(got.bits / got.bytes, 12);
    // The default stride (maxLen / 2) scores every token once too, with at least half a window of context.
    const halves = textBits(model, tokenizer, sample);
    expect(halves.tokens).toBe(got.tokens);
    expect(Math.abs(halves.bits - bits) / bits).toBeLessThan(0.05);
  });
});

describe('a saved and resumed run', () => {
  it('takes exactly the steps of an uninterrupted one (weights, optimizer, data and dropout streams)', () => {
    const straight = new Trainer({ task: tinyTask(), seed: 3, steps: 12, lr: 3e-3 });
    while (!straight.done) straight.trainStep();

    const first = new Trainer({ task: tinyTask(), seed: 3, steps: 12, lr: 3e-3 });
    for (let i = 0; i < 5; i++) first.trainStep();
    const state = first.saveState();
    const second = new Trainer({ task: tinyTask(), seed: 3, steps: 12, lr: 3e-3 });
    second.restoreState(state);
    expect(second.step).toBe(5);
    while (!second.done) second.trainStep();
    expect(second.losses).toEqual(straight.losses);
    for (const [name, p] of straight.model.params)
      expect(second.model.params.get(name)!.data).toEqual(p.data);
  });

  it("with scheduleSteps past steps, stops partway down the longer schedule: the longer run's first steps", () => {
    const long = new Trainer({ task: tinyTask(), seed: 3, steps: 12, lr: 3e-3, warmup: 2 });
    const phase = new Trainer({
      task: tinyTask(),
      seed: 3,
      steps: 5,
      scheduleSteps: 12,
      lr: 3e-3,
      warmup: 2,
    });
    const rates: [number, number][] = [];
    while (!phase.done) rates.push([phase.trainStep().lr, long.trainStep().lr]);
    for (const [a, b] of rates) expect(a).toBe(b);
    // Past the warm-up the rate falls, but not to the end of the cosine (lr / 10) that steps 5 would reach.
    expect(rates[4][0]).toBeGreaterThan(2.5e-3);
    expect(phase.losses).toEqual(long.losses.slice(0, 5));
    for (const [name, p] of long.model.params) expect(phase.model.params.get(name)!.data).toEqual(p.data);
    expect(() => new Trainer({ task: tinyTask(), steps: 5, scheduleSteps: 4 })).toThrow(
      /Trainer: scheduleSteps 4 is less than steps 5/,
    );
    expect(() => new Trainer({ task: tinyTask(), steps: 5, scheduleSteps: 0.5 })).toThrow(/scheduleSteps/);
  });

  it('with minLr, the cosine ends there (0: to zero); the run key changes only when minLr is given', () => {
    const rates = (minLr?: number) => {
      const t = new Trainer({
        task: tinyTask(),
        seed: 3,
        steps: 9,
        lr: 3e-3,
        warmup: 1,
        ...(minLr === undefined ? {} : { minLr }),
      });
      const out: number[] = [];
      while (!t.done) out.push(t.trainStep().lr);
      return { out, t };
    };
    const tenth = rates().out;
    const zero = rates(0).out;
    const half = rates(1.5e-3).out;
    // Step s of 9 (s ≥ 1, past the 1-step warm-up) is at progress (s − 1) / 8 of the cosine.
    const cosine = (s: number, floor: number) =>
      floor + 0.5 * (3e-3 - floor) * (1 + Math.cos((Math.PI * (s - 1)) / 8));
    for (let s = 1; s < 9; s++) {
      expect(tenth[s]).toBeCloseTo(cosine(s, 3e-4), 15);
      expect(zero[s]).toBeCloseTo(cosine(s, 0), 15);
      expect(half[s]).toBeCloseTo(cosine(s, 1.5e-3), 15);
    }
    expect(zero[0]).toBe(tenth[0]);
    expect(zero[8]).toBeLessThan(2e-4);
    // The default's state resumes in a run that names no minLr; another floor is another run.
    const a = new Trainer({ task: tinyTask(), seed: 3, steps: 9 });
    a.trainStep();
    const b = new Trainer({ task: tinyTask(), seed: 3, steps: 9, minLr: 0 });
    expect(() => b.restoreState(a.saveState())).toThrow(/the saved run differs from this one/);
    b.trainStep();
    expect(() => a.restoreState(b.saveState())).toThrow(/"minLr":0/);
  });

  it('keeps the run key of a state saved without scheduleSteps, and refuses a state of another schedule', () => {
    const a = new Trainer({ task: tinyTask(), seed: 3, steps: 6 });
    a.trainStep();
    const explicit = new Trainer({ task: tinyTask(), seed: 3, steps: 6, scheduleSteps: 6 });
    explicit.restoreState(a.saveState());
    expect(explicit.step).toBe(1);
    const longer = new Trainer({ task: tinyTask(), seed: 3, steps: 6, scheduleSteps: 12 });
    expect(() => longer.restoreState(a.saveState())).toThrow(/the saved run differs from this one/);
    longer.trainStep();
    expect(() => a.restoreState(longer.saveState())).toThrow(/"scheduleSteps":12/);
  });

  it('refuses a state from a different run, naming what differs', () => {
    const a = new Trainer({ task: tinyTask(), seed: 3, steps: 12 });
    const b = new Trainer({ task: tinyTask(), seed: 4, steps: 12 });
    expect(() => b.restoreState(a.saveState())).toThrow(
      /Trainer.restoreState: the saved run differs from this one .*"seed":3.*"seed":4/,
    );
    expect(() => b.restoreState(saveCheckpoint(b.model))).toThrow(/no qkv.trainer in the metadata/);
  });
});

describe('loadLanguageModel', () => {
  it('gives the decoder, its tokenizer and config, and refuses what is not a language model', () => {
    const { model } = new Trainer({ task: tinyTask(0), seed: 1, steps: 1 });
    const got = loadLanguageModel(saveCheckpoint(model, { tokenizer }), 'lm.safetensors');
    expect(got.tokenizer.type).toBe('bpe');
    expect(got.config).toEqual(model.config);
    expect(
      Array.from(got.model.generate(tokenizer.encode('The cat'), { maxNewTokens: 3, temperature: 0 })),
    ).toEqual(Array.from(model.generate(tokenizer.encode('The cat'), { maxNewTokens: 3, temperature: 0 })));
    expect(() => loadLanguageModel(saveCheckpoint(model), 'bare.safetensors')).toThrow(
      /loadLanguageModel: 'bare.safetensors' stores no tokenizer/,
    );
    const encoder = new Trainer({ task: 'pronoun', steps: 1 }).checkpoint(); // with its word tokenizer
    expect(() => loadLanguageModel(encoder)).toThrow(/the checkpoint is an encoder/);
  });
});

describe('float16 checkpoints', () => {
  it('store each weight as its nearest half and load back as float32', () => {
    const { model } = new Trainer({ task: tinyTask(0), seed: 1, steps: 1 });
    const half = saveCheckpoint(model, { dtype: 'float16' });
    const full = saveCheckpoint(model);
    expect(half.length).toBeLessThan(full.length * 0.6);
    const loaded = loadCheckpoint(half).model;
    for (const [name, p] of model.params) {
      const got = loaded.params.get(name)!.data;
      for (let i = 0; i < p.size; i++)
        expect(Math.abs(got[i] - p.data[i])).toBeLessThanOrEqual(Math.abs(p.data[i]) * 2 ** -11 + 2 ** -24);
    }
    expect(() => saveCheckpoint(model, { dtype: 'float64' as 'float32' })).toThrow(
      /info.dtype must be 'float32' or 'float16'/,
    );
  });
});

function run(argv: string[], onErr?: (text: string) => void) {
  let out = '';
  let err = '';
  const code = main(argv, {
    stdout: { write: (s: string) => (out += s) },
    stderr: {
      write: (s: string) => {
        err += s;
        onErr?.(s);
      },
    },
    env: {},
  });
  return Promise.resolve(code).then((c) => ({ code: c, out, err }));
}

describe('qkv train --task lm', () => {
  const textFile = join(dir, 'train.txt');
  const heldFile = join(dir, 'held.txt');
  writeFileSync(textFile, text);
  writeFileSync(heldFile, text.slice(0, 600));
  const model = ['--d-model', '16', '--layers', '1', '--heads', '2', '--d-ff', '32', '--context', '16'];
  const common = [
    'train',
    '--task',
    'lm',
    '--text',
    textFile,
    '--heldout',
    heldFile,
    '--vocab-size',
    '300',
    ...model,
  ];

  it('trains, saves every --save-every steps, and a resumed run ends where an uninterrupted one does', async () => {
    const outA = join(dir, 'a.safetensors');
    // Half of each batch a repeated random segment: the resumed run must draw the same ones.
    const a = await run([...common, '--steps', '6', '--save-every', '3', '--repeats', '0.5', '--out', outA]);
    expect(a.code).toBe(0);
    expect(a.err).toMatch(/byte-level BPE, \d+ tokens .* trained in/);
    expect(a.err).toMatch(
      /step 3: saved .*a\.safetensors; held-out loss \d+\.\d+ \(≈ \d+\.\d+ bits\/byte\); best induction head \d\.\d: 0\.\d{3}\n/,
    );
    expect(a.out).toMatch(/trained lm: 6\/6 steps/);
    expect(existsSync(`${outA}.state`)).toBe(true);

    // The same run stopped by Ctrl-C right after its step-3 save, then resumed: the same checkpoint.
    const outC = join(dir, 'c.safetensors');
    const part = await run(
      [...common, '--steps', '6', '--save-every', '3', '--repeats', '0.5', '--out', outC],
      (s) => {
        if (s.includes('step 3: saved')) process.emit('SIGINT');
      },
    );
    expect(part.code).toBe(130);
    expect(part.out).toMatch(/interrupted lm: 3\/6 steps/);
    const resumed = await run([
      ...common,
      ...['--steps', '6', '--save-every', '3', '--repeats', '0.5', '--out', outC, '--resume'],
    ]);
    expect(resumed.code).toBe(0);
    expect(resumed.err).toMatch(/resumed from .*c\.safetensors\.state at step 3/);
    // The same weights and metadata; only the training time each run records differs.
    const [c, a2] = [outC, outA].map((f) => decodeSafetensors(new Uint8Array(readFileSync(f))));
    for (const d of [c, a2]) {
      expect(Number(d.metadata['qkv.trainSeconds'])).toBeGreaterThan(0);
      delete d.metadata['qkv.trainSeconds'];
    }
    expect(c).toEqual(a2);
    expect(resumed.out).toMatch(/steps \(\d+\.\d s this run, \d+\.\d s in all\)/);

    const outB = join(dir, 'b.safetensors');
    const half = await run([...common, '--steps', '2', '--out', outB, '--float16']);
    expect(half.code).toBe(0);
    const loaded = loadCheckpoint(new Uint8Array(readFileSync(outB)));
    expect(loaded.info.tokenizer?.type).toBe('bpe');
    expect(loaded.info.task).toBe('lm');
    expect(loaded.model.config).toMatchObject({ dModel: 16, numLayers: 1, maxLen: 16, causal: true });
  });

  it('--init starts a second phase from a checkpoint: its weights and tokenizer, another context', async () => {
    const first = join(dir, 'phase1.safetensors');
    // Phase 1: copying only (every window repeated), 16-token windows.
    const a = await run([...common, '--steps', '3', '--repeats', '1', '--dropout', '0', '--out', first]);
    expect(a.code).toBe(0);
    const second = join(dir, 'phase2.safetensors');
    const shape = ['--d-model', '16', '--layers', '1', '--heads', '2', '--d-ff', '32'];
    const noVocab = ['train', '--task', 'lm', '--text', textFile, '--heldout', heldFile, ...shape];
    const phase2 = [...noVocab, '--context', '32', '--init', first];
    // A learning rate so small that one step leaves every weight where phase 1 left it, to float32 rounding.
    const b = await run([...phase2, '--steps', '1', '--lr', '1e-12', '--out', second]);
    expect(b.code).toBe(0);
    expect(b.err).toMatch(/starting from the weights of .*phase1\.safetensors \(step 3\)/);
    expect(b.err).not.toMatch(/trained in/); // no new BPE: the checkpoint's tokenizer
    const [p1, p2] = [first, second].map((f) => loadCheckpoint(new Uint8Array(readFileSync(f))));
    expect(p2.model.config.maxLen).toBe(32);
    expect(p2.info.tokenizer!.toJSON()).toEqual(p1.info.tokenizer!.toJSON());
    const fresh = new Trainer({ task: tinyTask(), seed: 0, steps: 1 }).model;
    for (const [name, p] of p1.model.params) {
      const q = p2.model.params.get(name)!.data;
      for (let i = 0; i < q.length; i++) expect(q[i]).toBeCloseTo(p.data[i], 5);
      if (name === 'embedding.weight') expect(q).not.toEqual(fresh.params.get(name)!.data);
    }
    // The training time counts both phases: phase 1 as if it had taken 1000 s.
    const timed = join(dir, 'timed.safetensors');
    const info = { task: 'lm', step: 3, tokenizer: p1.info.tokenizer };
    writeFileSync(timed, saveCheckpoint(p1.model, { ...info, extra: { 'qkv.trainSeconds': '1000' } }));
    const third = join(dir, 'phase2b.safetensors');
    const fromTimed = [
      ...noVocab,
      '--context',
      '32',
      '--init',
      timed,
      '--steps',
      '1',
      '--out',
      third,
      '--resume',
    ];
    expect((await run(fromTimed)).code).toBe(0);
    const secondsOf = (f: string) =>
      Number(decodeSafetensors(new Uint8Array(readFileSync(f))).metadata['qkv.trainSeconds']);
    expect(secondsOf(third)).toBeGreaterThan(1000);
    expect(secondsOf(third)).toBeLessThan(1100);
    // Run again with --resume: the state says it is done, so nothing is trained or rewritten.
    const before = readFileSync(third);
    const again = await run(fromTimed);
    expect(again.code).toBe(0);
    expect(again.err).toMatch(/resumed from .*phase2b\.safetensors\.state at step 1/);
    expect(again.out).toMatch(/trained lm: 1\/1 step \(0\.\d s this run, 10\d\d\.\d s in all\)/);
    expect(readFileSync(third)).toEqual(before);
    // A state keeps which checkpoint its run started from: another --init, or none, is refused.
    const otherInit = await run(fromTimed.map((x) => (x === timed ? first : x)));
    expect(otherInit.code).toBe(1);
    expect(otherInit.err).toMatch(
      /phase2b\.safetensors\.state is the state of a run started from another checkpoint .* than --init .*phase1\.safetensors.*; delete it or drop --resume/,
    );
    const plain = join(dir, 'plain.safetensors');
    expect((await run([...common, '--steps', '1', '--out', plain])).code).toBe(0);
    const notInit = await run([
      ...noVocab,
      '--context',
      '16',
      '--init',
      first,
      '--steps',
      '1',
      '--out',
      plain,
      '--resume',
    ]);
    expect(notInit.code).toBe(1);
    expect(notInit.err).toMatch(
      /plain\.safetensors\.state is the state of a run not started from --init; delete it or drop --resume/,
    );
    // A state of another run (here: other steps) names its file and what differs.
    const otherRun = await run([...common, '--steps', '2', '--out', plain, '--resume']);
    expect(otherRun.code).toBe(1);
    expect(otherRun.err).toMatch(
      /plain\.safetensors\.state is the state of another run; delete it or drop --resume \(.*"steps":1.*"steps":2/,
    );
    // --weight-decay reaches the Trainer: it is part of the run's key.
    const otherDecay = await run([
      ...common,
      '--steps',
      '1',
      '--weight-decay',
      '0.5',
      '--out',
      plain,
      '--resume',
    ]);
    expect(otherDecay.code).toBe(1);
    expect(otherDecay.err).toMatch(/state of another run; .*"weightDecay":0\.01.*"weightDecay":0\.5/);

    // Another shape, a checkpoint without a tokenizer, a missing file, --vocab-size with --init.
    const bare = join(dir, 'bare-init.safetensors');
    writeFileSync(bare, saveCheckpoint(p1.model));
    for (const [argv, message] of [
      [
        [...phase2, '--d-model', '32', '--out', second],
        /--init .*phase1\.safetensors is a model of another shape: dModel 16 there, 32 asked for/,
      ],
      [[...phase2, '--positions', 'rope', '--out', second], /positions sinusoidal there, rope asked for/],
      [
        [...noVocab, '--init', bare, '--out', second],
        /--init .*bare-init\.safetensors is not a checkpoint of --task lm \(task not recorded, no tokenizer\)/,
      ],
      [
        [...noVocab, '--init', join(dir, 'none.safetensors'), '--out', second],
        /no such --init file '.*none\.safetensors'/,
      ],
    ] as const) {
      const r = await run([...argv]);
      expect(r.code).toBe(1);
      expect(r.err).toMatch(message);
    }
    const both = await run([...common, '--init', first, '--out', second]);
    expect(both.code).toBe(2);
    expect(both.err).toMatch(/--vocab-size cannot be given with --init/);
  });

  it('qkv eval --text-file prints bits per byte, and refuses what it cannot score', async () => {
    const lm = join(dir, 'eval.safetensors');
    expect((await run([...common, '--steps', '2', '--out', lm])).code).toBe(0);
    const good = await run(['eval', '--model', lm, '--text-file', heldFile]);
    expect(good.err).toBe('');
    expect(good.out).toMatch(/^bits_per_byte=\d+\.\d{4} tokens=\d+\n$/);
    const loaded = loadCheckpoint(new Uint8Array(readFileSync(lm)));
    const direct = textBits(loaded.model, loaded.info.tokenizer!, readFileSync(heldFile, 'utf8'));
    expect(good.out).toBe(`bits_per_byte=${direct.bitsPerByte.toFixed(4)} tokens=${direct.tokens}\n`);
    const empty = join(dir, 'empty.txt');
    writeFileSync(empty, '');
    const binary = join(dir, 'binary.bin');
    writeFileSync(binary, Uint8Array.of(0x89, 0x50, 0x4e, 0x47, 0, 0xff, 0xfe));
    const nul = join(dir, 'nul.txt');
    writeFileSync(nul, 'a\u0000b');
    const bare = join(dir, 'bare.safetensors');
    writeFileSync(bare, saveCheckpoint(loaded.model));
    for (const [argv, message] of [
      [['eval', '--model', lm, '--text-file', empty], /is empty; there is nothing to score/],
      [['eval', '--model', lm, '--text-file', binary], /is not UTF-8 text/],
      [['eval', '--model', lm, '--text-file', nul], /holds NUL bytes/],
      [['eval', '--model', bare, '--text-file', heldFile], /stores no tokenizer/],
      [['eval', '--model', join(dir, 'none'), '--text-file', heldFile], /no such checkpoint/],
    ] as const) {
      const r = await run([...argv]);
      expect(r.code).toBe(1);
      expect(r.err).toMatch(message);
    }
    expect((await run(['eval', '--text-file', heldFile])).err).toMatch(/--text-file needs --model/);
  });

  it('says what is wrong before training', async () => {
    expect((await run(['train', '--task', 'lm'])).err).toMatch(/--task lm needs --text <file>/);
    expect((await run(['train', '--task', 'copy', '--text', textFile])).err).toMatch(
      /--text is an option of --task lm only/,
    );
    expect((await run([...common, '--lr', 'fast'])).err).toMatch(/--lr must be a number > 0/);
    expect((await run([...common, '--dropout', '1'])).err).toMatch(/--dropout must be a number in \[0, 1\)/);
    expect((await run([...common, '--optimizer', 'sgd'])).err).toMatch(
      /--optimizer must be adamw or muon, got 'sgd'/,
    );
    expect((await run([...common, '--muon-rms', '0.5'])).err).toMatch(/--muon-rms needs --optimizer muon/);
    expect((await run([...common, '--optimizer', 'muon', '--muon-rms', '-1'])).err).toMatch(
      /--muon-rms must be a number > 0, got '-1'/,
    );
    expect((await run([...common, '--lr', '0.01', '--min-lr', '0.02'])).err).toMatch(
      /--min-lr must be a number from 0 to --lr \(0\.01\), got '0\.02'/,
    );
    expect((await run([...common, '--min-lr', 'none'])).err).toMatch(/--min-lr must be a number/);
    // A blank value is no number (Number('') would be 0).
    expect((await run([...common, '--dropout', ''])).err).toMatch(
      /--dropout must be a number in \[0, 1\), got ''/,
    );
    expect((await run([...common, '--min-lr', ' '])).err).toMatch(/--min-lr must be a number from 0 to --lr/);
    for (const bad of ['-0.1', 'Infinity', 'none', '']) {
      expect((await run([...common, '--weight-decay', bad])).err).toMatch(
        new RegExp(`--weight-decay must be a number ≥ 0, got '${bad}'`),
      );
    }
    expect((await run([...common, '--repeats', 'half'])).err).toMatch(
      /--repeats must be a number in \[0, 1\], got 'half'/,
    );
    expect((await run([...common, '--steps', '5', '--schedule-steps', '4'])).err).toMatch(
      /--schedule-steps 4 is less than --steps 5/,
    );
    expect((await run(['train', '--task', 'copy', '--init', 'x.safetensors'])).err).toMatch(
      /--init is an option of --task lm only/,
    );
    expect((await run(['train', '--task', 'induction', '--repeats', '0.5'])).err).toMatch(
      /--repeats is an option of --task lm only/,
    );
    const missing = await run([
      'train',
      '--task',
      'lm',
      '--text',
      join(dir, 'none.txt'),
      '--out',
      join(dir, 'x.safetensors'),
    ]);
    expect(missing.code).toBe(1);
    expect(missing.err).toMatch(/no such --text file/);
  });
});
