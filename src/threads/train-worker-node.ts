// Entry point of a Node data-parallel training worker (worker_threads; see train-worker.ts). Its init
// arrives as workerData, so it needs no message and reports every failure, even failing to load the
// model's modules or exiting, through shared memory: the calling thread is blocked in Atomics.wait and
// would not see a worker's 'error' event.

import { workerData } from 'node:worker_threads';
import { reportFailure, type TrainWorkerInit } from '../train/parallel-protocol.js';

const init = workerData as TrainWorkerInit;
let finished = false;
process.on('exit', (code) => {
  if (!finished) reportFailure(init, new Error(`the worker exited (code ${code}) in the middle of a step`));
});
try {
  const { serveTraining } = await import('./train-worker.js');
  serveTraining(init);
} catch (err) {
  reportFailure(init, err);
}
finished = true;
