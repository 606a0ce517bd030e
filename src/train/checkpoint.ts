// Checkpoints: a TinyTransformer to safetensors bytes and back (pure; the CLI writes the bytes atomically,
// the page can fetch them). One decision to know: the model's config, task and vocabulary travel in the
// file's __metadata__ (strings, as the format requires), so a checkpoint is self-describing.

import { decodeSafetensors, encodeSafetensors, SafetensorsError } from '../io/safetensors.js';
import {
  parseTransformerConfig,
  TENSORS_OUTSIDE_LAYERS,
  TENSORS_PER_LAYER,
  TinyTransformer,
  transformerParameterShapes,
} from '../model/transformer.js';

/** What a checkpoint says about itself besides its weights. */
export interface CheckpointInfo {
  task?: string;
  step?: number;
  vocab?: string[];
  /** Any other metadata strings. */
  extra?: Record<string, string>;
}

/** The model's weights (PyTorch-style names, float32) and config as safetensors bytes. */
export function saveCheckpoint(model: TinyTransformer, info: CheckpointInfo = {}): Uint8Array {
  const metadata: Record<string, string> = {
    format: 'pt',
    'qkv.config': JSON.stringify(model.config),
    ...info.extra,
  };
  if (info.task !== undefined) metadata['qkv.task'] = info.task;
  if (info.step !== undefined) metadata['qkv.step'] = String(info.step);
  if (info.vocab) metadata['qkv.vocab'] = JSON.stringify(info.vocab);
  return encodeSafetensors(model.stateDict(), metadata);
}

/** Rebuilds the model a checkpoint describes and loads its weights; throws a clear error on a bad file. */
export function loadCheckpoint(bytes: Uint8Array): { model: TinyTransformer; info: CheckpointInfo } {
  const { tensors, metadata } = decodeSafetensors(bytes);
  const configJson = metadata['qkv.config'];
  if (configJson === undefined) {
    throw new SafetensorsError('loadCheckpoint: no qkv.config in the metadata (not a qkv checkpoint?)');
  }
  // Check the config against the tensors present before building anything: a hostile config (a billion
  // layers, a huge vocabulary) must fail here, not in an allocation.
  const config = parseTransformerConfig(configJson);
  const names = Object.keys(tensors);
  const expected = TENSORS_OUTSIDE_LAYERS + TENSORS_PER_LAYER * config.numLayers;
  if (names.length !== expected) {
    throw new SafetensorsError(
      `loadCheckpoint: the config has ${config.numLayers} layers (${expected} tensors) but the file holds ${names.length} tensors`,
    );
  }
  for (const [name, shape] of transformerParameterShapes(config)) {
    const t = tensors[name];
    if (!t || t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
      throw new SafetensorsError(
        `loadCheckpoint: ${name} should be [${shape}] for the stored config, ${t ? `got [${t.shape}]` : 'missing'}`,
      );
    }
  }
  const model = new TinyTransformer(config);
  model.loadStateDict(tensors);
  const info: CheckpointInfo = {};
  if (metadata['qkv.task'] !== undefined) info.task = metadata['qkv.task'];
  if (metadata['qkv.step'] !== undefined) info.step = Number(metadata['qkv.step']);
  if (metadata['qkv.vocab'] !== undefined) {
    try {
      info.vocab = JSON.parse(metadata['qkv.vocab']) as string[];
    } catch {
      throw new SafetensorsError('loadCheckpoint: qkv.vocab in the metadata is not valid JSON');
    }
  }
  return { model, info };
}
