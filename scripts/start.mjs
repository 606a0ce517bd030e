// Serves the built playground (web/dist, from `npm run build:web`) with Vite's preview server: `npm start`
// runs it last, so `npm start -- --port 5180` and `PORT=5180 npm start` reach it. One decision to know:
// the port is strict (a busy port is a one-line error that names the flag, never a silent move to the
// next port), and SIGINT/SIGTERM close the server before the process exits, so the port is free at once.

import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { preview } from 'vite';

const root = fileURLToPath(new URL('..', import.meta.url));
const DEFAULT_PORT = 5173;
const USAGE = 'usage: npm start [-- --port <n>] (or PORT=<n> npm start); default port 5173';

/** Exits with code 2 and one line on stderr, as the qkv command does for a bad option. */
function fail(message) {
  process.stderr.write(`npm start: ${message}\n${USAGE}\n`);
  process.exit(2);
}

/** The port from --port <n> / --port=<n>, else PORT, else 5173; an integer in 1…65535. */
function portFrom(argv, env) {
  let value;
  let from = 'PORT';
  if (env.PORT !== undefined && env.PORT !== '') value = env.PORT;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--port' || arg === '-p') {
      if (i + 1 >= argv.length) fail(`${arg} needs a value`);
      value = argv[++i];
      from = '--port';
    } else if (arg.startsWith('--port=')) {
      value = arg.slice('--port='.length);
      from = '--port';
    } else if (arg === '--help' || arg === '-h') {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    } else {
      fail(`unknown argument ${JSON.stringify(arg)}`);
    }
  }
  if (value === undefined) return DEFAULT_PORT;
  const port = Number(value);
  if (!/^\d+$/.test(value) || port < 1 || port > 65535) {
    fail(`${from} must be an integer from 1 to 65535, got ${JSON.stringify(value)}`);
  }
  return port;
}

const port = portFrom(process.argv.slice(2), process.env);
if (!existsSync(`${root}web/dist/index.html`)) {
  fail('web/dist is missing: build the playground first (npm run build:web; npm start does it)');
}

let server;
try {
  server = await preview({
    configFile: `${root}web/vite.config.ts`,
    preview: { port, strictPort: true, open: false },
  });
} catch (error) {
  if (error?.code === 'EADDRINUSE' || /already in use/i.test(String(error?.message))) {
    const other = port === DEFAULT_PORT ? 5180 : port + 1;
    process.stderr.write(
      `npm start: port ${port} is busy (another npm start or server is using it). ` +
        `Serve on another port: npm start -- --port ${other} (or PORT=${other} npm start)\n`,
    );
    process.exit(1);
  }
  throw error;
}
server.printUrls();
process.stdout.write('  press Ctrl-C to stop\n');

let stopping = false;
function stop() {
  if (stopping) process.exit(130); // a second signal: stop now
  stopping = true;
  setTimeout(() => process.exit(0), 5_000).unref(); // never hang on a slow close
  server.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
}
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(signal, stop);
// `kill <pid of npm>` ends npm and its shell but not this process, which would keep the port: when the
// parent is gone (this process is handed to another), stop too.
const parent = process.ppid;
setInterval(() => process.ppid !== parent && !stopping && stop(), 500).unref();
