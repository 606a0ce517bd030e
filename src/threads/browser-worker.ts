// Entry point of a browser attention worker (a module Web Worker).

import type { ToWorker } from './protocol.js';
import { handleMessage } from './worker-core.js';

const scope = globalThis as unknown as {
  addEventListener(type: 'message', handler: (e: { data: ToWorker }) => void): void;
  postMessage(message: unknown): void;
};
scope.addEventListener('message', (e) => handleMessage(e.data, (reply) => scope.postMessage(reply)));
