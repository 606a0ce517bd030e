#!/usr/bin/env node
// The `qkv` executable: wires process argv, streams and exit code to cli/main.ts.

import { main } from './cli/main.js';

process.exitCode = main(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
});
