// The main entry's async attention: scaledDotProductAttentionAsync, attentionBackwardAsync and
// terminateWorkers bound to `defaultRuntime`, a runtime on Web Workers (src/runtime.ts has the machinery).
// One decision to know: the default runtime is a plain object made when this module is evaluated and it
// starts nothing until a call needs workers; the Node entry exports the same names bound to a
// worker_threads runtime instead (src/threads/node.ts), so no import installs anything anywhere.

import { createRuntime, type Runtime } from '../runtime.js';

export type { AsyncAttentionOptions, AsyncBackwardOptions } from '../runtime.js';

/**
 * The runtime behind this entry's scaledDotProductAttentionAsync, attentionBackwardAsync and
 * terminateWorkers: Web Workers here, worker_threads from the Node entry. Set `defaultRuntime.idleMs`,
 * read `defaultRuntime.workers`, or make runtimes of your own with createRuntime.
 */
export const defaultRuntime: Runtime = /* @__PURE__ */ createRuntime();

/**
 * `scaledDotProductAttention` on worker threads (the default runtime's): same arguments, semantics and
 * result, as a Promise; plus `threads` (default all cores, never more than the cores).
 *
 * @example
 * const out = await scaledDotProductAttentionAsync(q, k, v, { causal: true, threads: 2 });
 */
export const scaledDotProductAttentionAsync = defaultRuntime.scaledDotProductAttentionAsync;

/** `attentionBackward` on the default runtime's worker threads: the same gradients, as a Promise. */
export const attentionBackwardAsync = defaultRuntime.attentionBackwardAsync;

/** Stops the default runtime's workers and frees its kept buffers; the next async call starts new ones. */
export const terminateWorkers = defaultRuntime.terminateWorkers;

/** For tests that load this module in a page: the default runtime's live worker count, as `size`. */
export function getPool(): { readonly size: number } {
  return {
    get size() {
      return defaultRuntime.workers;
    },
  };
}
