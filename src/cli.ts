#!/usr/bin/env node
// The `qkv` executable: wires process argv, streams and exit code to cli/main.ts.

import { main } from './cli/main.js';
import { enableRelaxedSimd } from './cli/relaxed-simd.js';

// The FMA build of the WASM kernels where V8 can run it (Node 20 needs a flag; see cli/relaxed-simd.ts),
// before anything compiles WebAssembly (compilation is lazy: nothing above has compiled it). QKV_RELAXED_SIMD=0 keeps
// the runtime's default build (e.g. to reproduce a plain-SIMD run).
if (process.env.QKV_RELAXED_SIMD !== '0') enableRelaxedSimd();

const code = main(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
});
// `qkv train` returns a promise (it yields between steps so Ctrl-C is heard); the rest return a number.
if (typeof code === 'number') process.exitCode = code;
else
  void code.then((c) => {
    process.exitCode = c;
  });
