// qkv for Node (the package's "node" export condition): the public entry, with the async functions and
// createRuntime bound to worker_threads. Browsers get src/index.ts, which never imports node:*.
// Re-exports only, like src/index.ts: these named exports take precedence over the same names in
// `export *`, and importing this module installs nothing (package.json's "sideEffects" does not list it).
// The training platform on worker_threads, nodeTrainPlatform, is qkv/nn's (src/nn/index.node.ts).

export * from './index.js';
export {
  attentionBackwardAsync,
  createRuntime,
  defaultRuntime,
  MultiHeadAttention,
  scaledDotProductAttentionAsync,
  terminateWorkers,
} from './threads/node.js';
