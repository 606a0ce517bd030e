// `npm run train:lm`'s training, in two phases of `qkv train --task lm` (after `npm run build` and
// scripts/brown-text.mjs). One decision to know: the model learns to copy before it reads text.
// 1. Copying: every window of 64 tokens is a random segment repeated to its end (--repeats 1), scored
//    on the copies, for 1200 steps of 16 windows; the loss falls from ln 4096 to near 0 as an induction
//    head forms (about step 1000). A few million tokens of text alone never formed one (see
//    docs/language-model.md). The phase stops 1200 steps into a 3000-step schedule, the run in which
//    the head was found to form: a schedule ending at step 1200 would lower the rate before then.
// 2. Text: the Brown training text in windows of 256, starting from phase 1's weights and tokenizer
//    (--init), 2700 steps of 8 windows, one of which is a repeated segment (--repeats 0.125): on text
//    alone the head faded (best score 0.80 → 0.29 over the first 400 steps). Muon for the blocks'
//    matrices (--optimizer muon): at equal steps it led AdamW by 0.04 bits per byte after 400 steps, and
//    its steps cost about a quarter more, so 2700 fit where 3300 AdamW steps did. Peak rate 0.004 with
//    weight decay 0.1 (--weight-decay; the default is 0.01): against 0.003 with the default it trailed
//    from step 1000 to 1600 and ended 0.035 nats lower on the held-out sample (docs/language-model.md).
//    The checkpoint's qkv.trainSeconds counts both phases.
// Both phases save every 100 steps and take --resume, so running this again after an interruption
// continues where it stopped; a finished phase is a no-op. Ctrl-C reaches the running phase, which saves
// and exits 130; this script then stops with it.

import { spawn } from 'node:child_process';
import { constants } from 'node:os';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const train = '.cache/brown/train.txt';
const copy = '.cache/brown/copy.safetensors';
// What both phases share: the model's shape, threads, seed, checkpoints every 100 steps, resumable.
const common = [
  ...['--task', 'lm', '--text', train, '--d-model', '192', '--layers', '4', '--heads', '6'],
  ...['--d-ff', '768', '--positions', 'rope', '--threads', '2', '--seed', '0'],
  ...['--save-every', '100', '--resume'],
];
const phases = [
  {
    name: 'copying',
    args: [
      ...['--vocab-size', '4096', '--context', '64', '--batch-size', '16', '--lr', '0.001'],
      ...['--warmup', '100', '--dropout', '0', '--repeats', '1', '--steps', '1200'],
      ...['--schedule-steps', '3000', '--out', copy, '--plot', '.cache/brown/copy-loss.svg'],
    ],
  },
  {
    name: 'text',
    args: [
      ...['--heldout', '.cache/brown/heldout.txt', '--init', copy, '--context', '256'],
      ...['--batch-size', '8', '--lr', '0.004', '--warmup', '200', '--dropout', '0.1'],
      ...['--weight-decay', '0.1', '--optimizer', 'muon', '--repeats', '0.125'],
      ...['--steps', '2700', '--float16'],
      ...['--out', 'models/brown-lm.safetensors'],
      ...['--plot', 'docs/brown-lm-loss.svg'],
    ],
  },
];

// Ctrl-C goes to the whole process group: the phase running handles it (it saves and exits 130) and this
// process waits for it. A SIGTERM sent to this process alone is passed on to the phase.
let child;
process.on('SIGINT', () => {});
process.on('SIGTERM', () => child?.kill('SIGTERM'));
for (const [i, phase] of phases.entries()) {
  process.stderr.write(`train:lm: phase ${i + 1} of ${phases.length}, ${phase.name}\n`);
  const code = await new Promise((resolve) => {
    child = spawn(process.execPath, ['dist/cli.js', 'train', ...common, ...phase.args], {
      cwd: root,
      stdio: 'inherit',
    });
    child.on('error', (err) => {
      process.stderr.write(`train:lm: could not start phase ${i + 1}: ${err.message}\n`);
      resolve(1);
    });
    // Killed by a signal (e.g. Ctrl-C before its handler is in place): the shell's code, 128 + its number.
    child.on('exit', (status, signal) => resolve(status ?? 128 + (constants.signals[signal] ?? 0)));
  });
  if (code !== 0) process.exit(code);
}
