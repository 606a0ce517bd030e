// Finds the system Chromium for the browser tests (no browser download, ever). One decision to know: if
// it is missing and we are root on Debian/Ubuntu, it is installed with apt-get; otherwise the error is one
// line that says exactly how to install it.

import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];

/** The path of a Chromium to drive with playwright-core (QKV_CHROMIUM overrides the search). */
export function ensureChromium(): string {
  const override = process.env.QKV_CHROMIUM;
  if (override) {
    if (existsSync(override)) return override;
    throw new Error(`QKV_CHROMIUM=${override} does not exist; point it at a Chromium or Chrome binary`);
  }
  const found = CANDIDATES.find((p) => existsSync(p));
  if (found) return found;
  const isRoot = process.getuid?.() === 0;
  if (isRoot && existsSync('/etc/debian_version') && existsSync('/usr/bin/apt-get')) {
    process.stderr.write(
      'qkv e2e: Chromium not found; installing it with apt-get (Debian package "chromium")…\n',
    );
    const r = spawnSync(
      'sh',
      ['-c', 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium'],
      {
        stdio: ['ignore', 'ignore', 'inherit'],
      },
    );
    if (r.status === 0 && existsSync('/usr/bin/chromium')) return '/usr/bin/chromium';
  }
  throw new Error(
    'Chromium not found for the browser tests: run `sudo apt-get update && sudo apt-get install -y chromium` (Debian/Ubuntu) or set QKV_CHROMIUM=/path/to/chrome',
  );
}

/** Launch arguments for a quiet, offline, sandbox-less headless Chromium in CI containers. */
export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--no-first-run',
  '--disable-sync',
  '--disable-quic',
  '--disable-dev-shm-usage',
];
