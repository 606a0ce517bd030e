// Entry point of a Node attention worker (worker_threads).

import { parentPort } from 'node:worker_threads';
import type { ToWorker } from './protocol.js';
import { handleMessage } from './worker-core.js';

const port = parentPort;
if (!port) throw new Error('node-worker.js must run as a worker thread');
port.on('message', (message: ToWorker) => handleMessage(message, (reply) => port.postMessage(reply)));
