// qkv for Node (the package's "node" export condition): the public entry, plus worker_threads for
// scaledDotProductAttentionAsync. Browsers get src/index.ts, which never imports node:*.

import { setThreadPlatform } from './attention/async.js';
import { nodePlatform } from './threads/node.js';

setThreadPlatform(nodePlatform);

export * from './index.js';
