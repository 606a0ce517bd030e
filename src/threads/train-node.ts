// The Node platform of data-parallel training (Trainer's `threads` option): worker_threads running
// train-worker-node.js. Only the Node entry and the CLI import this file, so the main entry stays free of
// node:*; importing it starts nothing.

import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { TrainPlatform, TrainWorkerHandle } from '../train/parallel.js';
import type { TrainWorkerInit } from '../train/parallel-protocol.js';

export const nodeTrainPlatform: TrainPlatform = {
  name: 'node',
  cores: () => availableParallelism(),
  sharedMemoryUnavailable: () => '',
  startWorker(init: TrainWorkerInit): TrainWorkerHandle {
    const url = new URL('./train-worker-node.js', import.meta.url);
    if (url.protocol === 'file:' && !existsSync(fileURLToPath(url))) {
      throw new Error(
        `the training worker ${fileURLToPath(url)} is missing: it runs from the built package (npm run build)`,
      );
    }
    // No flags for the worker, as in threads/node.ts (inherited ones can break it).
    const worker = new Worker(url, { workerData: init, execArgv: [] });
    // A blocked or idle worker must never keep Node alive.
    worker.unref();
    let alive = true;
    let lastError = '';
    const exited = new Promise<void>((resolve) =>
      worker.once('exit', () => {
        alive = false;
        resolve();
      }),
    );
    // Failures are reported through shared memory; this keeps an 'error' event from crashing the process
    // and gives its message to a calling thread that finds the worker gone.
    worker.on('error', (err) => {
      lastError = err.message;
    });
    return {
      get alive() {
        return alive;
      },
      get lastError() {
        return lastError;
      },
      terminate: async () => {
        await worker.terminate();
        await exited;
      },
    };
  },
};
