// Node-only file helpers for checkpoints: read a whole file, and write one atomically.
// One decision to know: a write goes to a temporary file in the same directory, is fsynced, then renamed
// over the target, so a crash or Ctrl-C mid-write never leaves a half-written checkpoint. Not reachable
// from src/index.ts (the library stays free of node:*); the CLI uses it.

import {
  accessSync,
  closeSync,
  constants,
  fsyncSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
} from 'node:fs';
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

/**
 * Why a file could not be written at `path` ('' when it can): its directory is missing, not a directory
 * or not writable, or the path is a directory. Checked before long work, so a bad path fails in a second,
 * not after minutes of training.
 */
export function unwritableReason(path: string): string {
  const dir = dirname(path);
  try {
    if (!statSync(dir).isDirectory()) return `${dir} is not a directory`;
  } catch {
    return `directory ${dir} does not exist`;
  }
  try {
    accessSync(dir, constants.W_OK);
  } catch {
    return `directory ${dir} is not writable`;
  }
  try {
    if (statSync(path).isDirectory()) return `${path} is a directory`;
  } catch {
    // no file there yet: it will be created
  }
  return '';
}
