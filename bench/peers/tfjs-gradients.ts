// tfjs-core's gradients for Node. tfjs-core 4.x registers no gradient by itself (the @tensorflow/tfjs union
// package does, by importing tfjs-core/dist/register_all_gradients.js), and that file is ES-module source
// with extensionless relative imports, which Node's loader refuses. This module is both the fix and its
// hook: registerAllGradients() installs `resolve` below as a module hook, then imports that file.
// One decision to know: the gradient functions come from tfjs-core's ES-module copy while the ops come from
// its CommonJS bundle; both reach the one engine and gradient registry tfjs-core keeps on globalThis, and
// tfjs-core's Tensor instanceof check is structural, so the two copies work together.

import { createRequire, type ResolveHook, register } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';

/** The module hook: inside tfjs-core's dist/, a relative import without an extension gets ".js". */
export const resolve: ResolveHook = async (specifier, context, next) => {
  try {
    return await next(specifier, context);
  } catch (error) {
    const inCore = context.parentURL?.includes('/@tensorflow/tfjs-core/dist/') ?? false;
    if (inCore && specifier.startsWith('.') && !specifier.endsWith('.js')) {
      return next(`${specifier}.js`, context);
    }
    throw error;
  }
};

/** Registers every tfjs-core gradient (what importing @tensorflow/tfjs would do). */
export async function registerAllGradients(): Promise<void> {
  register(import.meta.url); // this module, as the hook
  const core = createRequire(import.meta.url).resolve('@tensorflow/tfjs-core'); // …/dist/tf-core.node.js
  await import(pathToFileURL(join(dirname(core), 'register_all_gradients.js')).href);
}
