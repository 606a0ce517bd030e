// The playground for a browser test: a Vite build of web/ into a temp dir, Vite's preview server on a
// free port, and a persistent headless Chromium (the system one, see chromium.ts) on a page that collects
// its errors. One decision to know: every request that is not to our own server is aborted as
// "internet disconnected", so a test passing here proves the page works offline.

import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { build, preview } from 'vite';
import { CHROMIUM_ARGS, ensureChromium } from './chromium.js';

/** The repository root (with a trailing slash). */
export const repo = fileURLToPath(new URL('../../', import.meta.url));
/** Where the tests write screenshots (git-ignored); openPlayground creates it. */
export const shots = join(repo, 'screenshots');
const configFile = join(repo, 'web/vite.config.ts');

/** What openPlayground gives: the page (not yet navigated), its context, the URL to open, and more. */
export interface Playground {
  page: Page;
  context: BrowserContext;
  /** The page's address on the preview server, e.g. http://127.0.0.1:41234/. */
  url: string;
  /** The build's directory (the files the server serves). */
  outDir: string;
  /** Uncaught errors and console errors of `page`, in order. */
  pageErrors: string[];
  /** Closes the browser and the server and removes the temp dirs. */
  close(): Promise<void>;
}

/** Options of openPlayground. */
export interface PlaygroundOptions {
  /** Let the page download files (export buttons, "Download checkpoint"). Default false. */
  acceptDownloads?: boolean;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Builds and serves the playground and opens a Chromium page for it; `name` tags the temp dirs. */
export async function openPlayground(name: string, options: PlaygroundOptions = {}): Promise<Playground> {
  const executablePath = ensureChromium();
  const outDir = mkdtempSync(join(tmpdir(), `qkv-web-${name}-`));
  const userDir = mkdtempSync(join(tmpdir(), `qkv-chromium-${name}-`));
  const cleanup = () => {
    for (const d of [outDir, userDir]) rmSync(d, { recursive: true, force: true });
  };
  mkdirSync(shots, { recursive: true });
  let server: Awaited<ReturnType<typeof preview>> | undefined;
  let context: BrowserContext | undefined;
  try {
    await build({ configFile, logLevel: 'warn', build: { outDir, emptyOutDir: true } });
    const port = await freePort();
    server = await preview({
      configFile,
      logLevel: 'warn',
      build: { outDir },
      preview: { port, strictPort: true, host: '127.0.0.1', open: false },
    });
    const url = `http://127.0.0.1:${port}/`;
    context = await chromium.launchPersistentContext(userDir, {
      executablePath,
      args: CHROMIUM_ARGS,
      headless: true,
      viewport: { width: 1440, height: 1000 },
      acceptDownloads: options.acceptDownloads ?? false,
      colorScheme: 'light',
    });
    const page = context.pages()[0] ?? (await context.newPage());
    const pageErrors: string[] = [];
    page.on('pageerror', (e) => pageErrors.push(e.message));
    page.on('console', (m) => m.type() === 'error' && pageErrors.push(m.text()));
    // The page must work offline: fail any request that is not to our server.
    await context.route(/.*/, (route) =>
      route.request().url().startsWith(url) ? route.continue() : route.abort('internetdisconnected'),
    );
    const ctx = context;
    const srv = server;
    return {
      page,
      context: ctx,
      url,
      outDir,
      pageErrors,
      async close() {
        await ctx.close();
        await srv.close();
        cleanup();
      },
    };
  } catch (err) {
    await context?.close();
    await server?.close();
    cleanup();
    throw err;
  }
}
