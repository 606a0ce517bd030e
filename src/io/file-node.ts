// Node-only file helpers for checkpoints: read a whole file, and write one atomically.
// One decision to know: a write goes to a temporary file in the same directory, is fsynced, then renamed
// over the target, so a crash or Ctrl-C mid-write never leaves a half-written checkpoint. Not reachable
// from src/index.ts (the library stays free of node:*); the CLI uses it.

import { closeSync, fsyncSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/** Writes `bytes` to `path` via a temporary sibling file and a rename (atomic on POSIX file systems). */
export function writeFileAtomic(path: string, bytes: Uint8Array): void {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${Date.now()}.tmp`);
  try {
    const fd = openSync(tmp, 'w');
    try {
      let off = 0;
      while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
}

/** The whole file as bytes. */
export function readFileBytes(path: string): Uint8Array {
  const b = readFileSync(path);
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}
