// The Node platform for the worker pool: worker_threads, os.availableParallelism.
// Only src/index.node.ts (the package's "node" export) imports this file, so the main entry stays free
// of node:* for browsers.

import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
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
