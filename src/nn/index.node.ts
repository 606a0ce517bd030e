// qkv/nn for Node (the "./nn" export's "node" condition): the same names as src/nn/index.ts, plus
// nodeTrainPlatform, the Trainer's platform on worker_threads (`new Trainer({ threads: 2, platform:
// nodeTrainPlatform })`). Browsers get src/nn/index.ts, which never imports node:*. Re-exports only:
// importing this module starts nothing (package.json's "sideEffects" does not list it).

export { nodeTrainPlatform } from '../threads/train-node.js';
export * from './index.js';
