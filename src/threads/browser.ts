// The browser platform for the worker pool: module Web Workers, navigator.hardwareConcurrency.
// Threads need SharedArrayBuffer, which browsers give only to cross-origin-isolated pages (COOP/COEP
// headers); elsewhere `sharedMemoryUnavailable` says so and the caller runs on one thread.

import type { Platform, PoolWorker } from './pool.js';
import type { FromWorker } from './protocol.js';

export const browserPlatform: Platform = {
  name: 'browser',
  cores: () => (typeof navigator !== 'undefined' && navigator.hardwareConcurrency) || 1,
  sharedMemoryUnavailable(): string {
    if (typeof Worker === 'undefined') return 'this runtime has no Web Workers';
    if (
      typeof SharedArrayBuffer === 'undefined' ||
      (globalThis as { crossOriginIsolated?: boolean }).crossOriginIsolated === false
    ) {
      return 'the page is not cross-origin isolated (serve it with COOP: same-origin and COEP: require-corp), so SharedArrayBuffer is unavailable';
    }
    return '';
  },
  createWorker(): PoolWorker {
    const worker = new Worker(new URL('./browser-worker.js', import.meta.url), { type: 'module' });
    return {
      post: (message) => worker.postMessage(message),
      onMessage: (handler) => worker.addEventListener('message', (e) => handler(e.data as FromWorker)),
      onError: (handler) => worker.addEventListener('error', (e) => handler(new Error(e.message))),
      ref: () => {},
      unref: () => {},
      terminate: () => worker.terminate(),
    };
  },
};
