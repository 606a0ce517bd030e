// `qkv export --model <checkpoint> --out model.onnx [--opset 17|23] [--kv-cache]`: a trained checkpoint
// as an ONNX model (qkv/onnx's toOnnx), for onnxruntime, transformers.js or Optimum-style runners.
// One decision to know: the file is written atomically (temporary file, fsync, rename), like checkpoints,
// and nothing is written when the export cannot be expressed (--kv-cache on an encoder is refused first).

import { readFileBytes, unwritableReason, writeFileAtomic } from '../io/file-node.js';
import { toOnnx } from '../onnx/index.js';
import { loadCheckpoint } from '../train/checkpoint.js';
import { type CliIO, parseCommandArgs, resolveModel, UsageError } from './args.js';

export const EXPORT_HELP = `qkv export: write a checkpoint as an ONNX model

Usage: qkv export --model <file> --out <file.onnx> [--opset 17|23] [--kv-cache] [--no-mask]

Options:
  --model <file>   a qkv checkpoint (qkv train --out …), or a bundled model by name: pronoun, brown-lm
  --out <file>     where to write the ONNX model
  --opset <n>      17 (default): plain ops, runs on every onnxruntime execution provider;
                   23: the standard Attention op
  --kv-cache       decoders only: past_key_values.{i}.key|value and position_ids inputs,
                   present.{i}.key|value outputs (transformers.js / Optimum names)
  --no-mask        no attention_mask input (by default the model takes one, [B, S], 1 = keep)
  -h, --help       this help

Inputs: input_ids (int64 [B, L]) and attention_mask; output: logits [B, L, V]. Batch and sequence
axes are symbolic. Weights keep the checkpoint's names.
`;

/**
 * Runs `qkv export`; returns the exit code (0 ok, 1 runtime error, 2 bad usage).
 *
 * @example
 * exportCommand(['--model', 'models/pronoun.safetensors', '--out', 'pronoun.onnx'], { stdout: process.stdout, stderr: process.stderr, env: process.env });
 */
export function exportCommand(argv: string[], io: CliIO): number {
  const values = parseCommandArgs('export', argv, {
    model: { type: 'string' },
    out: { type: 'string' },
    opset: { type: 'string' },
    'kv-cache': { type: 'boolean' },
    'no-mask': { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.stdout.write(EXPORT_HELP);
    return 0;
  }
  if (typeof values.model !== 'string') throw new UsageError('export: --model <checkpoint> is required');
  if (typeof values.out !== 'string') throw new UsageError('export: --out <file.onnx> is required');
  const opsetRaw = values.opset ?? '17';
  if (opsetRaw !== '17' && opsetRaw !== '23') {
    throw new UsageError(`export: --opset must be 17 or 23, got '${String(opsetRaw)}'`);
  }
  const opset = Number(opsetRaw) as 17 | 23;
  const why = unwritableReason(values.out);
  if (why) throw new UsageError(`export: cannot write --out ${values.out}: ${why}`);
  const resolved = resolveModel('export', values.model);
  if ('error' in resolved) {
    io.stderr.write(`qkv: ${resolved.error}\n`);
    return 1;
  }
  const path = resolved.path;
  const { model } = loadCheckpoint(readFileBytes(path), path); // a bad file throws; main prints it, exit 1
  const kvCache = Boolean(values['kv-cache']);
  if (kvCache && !model.config.causal) {
    throw new UsageError(
      `export: --kv-cache needs a decoder; '${path}' is an encoder (causal: false), which has no cache`,
    );
  }
  const bytes = toOnnx(model, { opset, kvCache, mask: !values['no-mask'] });
  writeFileAtomic(values.out, bytes);
  const { vocabSize, dModel, numLayers, causal } = model.config;
  io.stdout.write(
    `wrote ${values.out}: ${causal ? 'decoder' : 'encoder'} (${numLayers} layers, dModel ${dModel}, vocab ${vocabSize}), opset ${opset}${kvCache ? ', KV cache' : ''}, ${bytes.length} bytes\n`,
  );
  return 0;
}
