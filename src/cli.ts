#!/usr/bin/env node
// The `qkv` executable: wires process argv, streams and exit code to cli/main.ts.

import { main } from './cli/main.js';

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
