// ONNX Runtime peers: onnxruntime-web (WASM backend, a dev dependency) and onnxruntime-node (native, not a
// dependency: loaded from bench/.peers when someone installed it there). Both run the same hand-built
// attention graph (P1 and the other sizes), and PyTorch's export of nn.MultiheadAttention (P2).
// One decision to know: inputs go in as whole [B, H, L, E] tensors in one session.run, the way a user calls it.

import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Config } from '../jobs.js';
import { MHA_EMBED, MHA_LEN, type MhaFixture } from '../p2.js';
import { causalBias } from './mask.js';
import { attentionModel } from './onnx-model.js';
import { ORT_NODE_INSTALL } from './ort-install.js';

type Ort = typeof import('onnxruntime-web');

/** onnxruntime-node from `<peersDir>/node_modules`, or undefined when it is not installed there. */
export async function loadOrtNode(peersDir: string): Promise<Ort | undefined> {
  const manifest = join(peersDir, 'package.json');
  if (!existsSync(join(peersDir, 'node_modules', 'onnxruntime-node'))) return undefined;
  const entry = createRequire(manifest).resolve('onnxruntime-node');
  return (await import(pathToFileURL(entry).href)) as Ort;
}

/** The runtime with `threads` intra-op threads, and a session of `model` on it (all graph optimizations). */
async function openSession(which: 'web' | 'node', threads: number, peersDir: string, model: Uint8Array) {
  let ort: Ort;
  if (which === 'web') {
    ort = await import('onnxruntime-web');
    ort.env.wasm.numThreads = threads;
  } else {
    const loaded = await loadOrtNode(peersDir);
    if (!loaded) throw new Error(`not installed (${ORT_NODE_INSTALL})`);
    ort = loaded;
  }
  const session = await ort.InferenceSession.create(model, {
    executionProviders: [which === 'web' ? 'wasm' : 'cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
  });
  return { ort, session };
}

/** Creates the session; the returned function runs one forward pass. */
export async function prepareOrt(
  which: 'web' | 'node',
  threads: number,
  peersDir: string,
  c: Config,
  q: Float32Array,
  k: Float32Array,
  v: Float32Array,
): Promise<() => Promise<Float32Array>> {
  const model = attentionModel({ scale: 1 / Math.sqrt(c.E), masked: c.causal });
  const { ort, session } = await openSession(which, threads, peersDir, model);
  const { B, H, L, S, E } = c;
  const mask = c.causal ? new ort.Tensor('float32', causalBias(L, S), [L, S]) : undefined;

  return async () => {
    const feeds: Record<string, InstanceType<Ort['Tensor']>> = {
      q: new ort.Tensor('float32', q, [B, H, L, E]),
      k: new ort.Tensor('float32', k, [B, H, S, E]),
      v: new ort.Tensor('float32', v, [B, H, S, E]),
    };
    if (mask) feeds['mask'] = mask;
    const result = await session.run(feeds);
    return result['out'].data as Float32Array;
  };
}

/** P2: a session of the exported nn.MultiheadAttention; the returned function runs one forward pass. */
export async function prepareOrtMha(
  which: 'web' | 'node',
  threads: number,
  peersDir: string,
  f: MhaFixture,
): Promise<() => Promise<Float32Array>> {
  const { ort, session } = await openSession(which, threads, peersDir, f.bytes);
  return async () => {
    const x = new ort.Tensor('float32', f.x, [1, MHA_LEN, MHA_EMBED]);
    const result = await session.run({ x });
    return result['out'].data as Float32Array;
  };
}
