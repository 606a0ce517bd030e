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
    // Workers inherit only engine flags (e.g. --experimental-wasm-relaxed-simd), not the parent's
    // entry flags such as --input-type or -e, which a worker rejects.
    const execArgv = process.execArgv.filter((a) =>
      /^--(experimental|wasm|max-old-space-size|stack-size|no-warnings)/.test(a),
    );
    const worker = new Worker(new URL('./node-worker.js', import.meta.url), { execArgv });
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
