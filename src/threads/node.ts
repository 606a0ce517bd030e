// The Node platform for the worker pool (worker_threads, os.availableParallelism), and the Node entry's
// default runtime on it: the same names src/attention/async.ts binds for browsers.
// Only src/index.node.ts (the package's "node" export) imports this file, so the main entry stays free
// of node:* for browsers; importing it creates objects and starts nothing.

import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { MultiHeadAttention as BrowserMultiHeadAttention } from '../attention/multihead.js';
import { createRuntime as createRuntimeOn, type Runtime, type RuntimeOptions } from '../runtime.js';
import type { Platform, PoolWorker } from './pool.js';
import type { FromWorker } from './protocol.js';

export const nodePlatform: Platform = {
  name: 'node',
  cores: () => availableParallelism(),
  sharedMemoryUnavailable: () => '',
  createWorker(): PoolWorker {
    // No flags for the worker: inherited ones can break it (--input-type applies to -e only), and a list
    // naming a V8 flag (--max-old-space-size, --experimental-wasm-relaxed-simd) throws. V8 flags are
    // per process anyway, so the workers validate relaxed SIMD exactly when the parent does.
    const worker = new Worker(new URL('./node-worker.js', import.meta.url), { execArgv: [] });
    return {
      post: (message) => worker.postMessage(message),
      onMessage: (handler) => worker.on('message', (m: FromWorker) => handler(m)),
      onError: (handler) => {
        worker.on('error', handler);
        worker.on('exit', (code) => {
          if (code !== 0) handler(new Error(`attention worker exited with code ${code}`));
        });
      },
      ref: () => worker.ref(),
      unref: () => worker.unref(),
      terminate: () => void worker.terminate(),
    };
  },
};

/** createRuntime for Node: `platform` defaults to worker_threads. */
export function createRuntime(options: RuntimeOptions = {}): Runtime {
  return createRuntimeOn({ ...options, platform: options.platform ?? nodePlatform });
}

/** The Node entry's default runtime (worker_threads); see src/attention/async.ts for the browser one. */
export const defaultRuntime: Runtime = /* @__PURE__ */ createRuntime();
export const scaledDotProductAttentionAsync = defaultRuntime.scaledDotProductAttentionAsync;
export const attentionBackwardAsync = defaultRuntime.attentionBackwardAsync;
export const terminateWorkers = defaultRuntime.terminateWorkers;

/**
 * MultiHeadAttention as the Node entry exports it: `forwardAsync` defaults to this entry's worker_threads
 * runtime (the class is otherwise the main entry's, which defaults to Web Workers).
 */
export class MultiHeadAttention extends BrowserMultiHeadAttention {
  protected override get runtime(): Runtime {
    return defaultRuntime;
  }
}
