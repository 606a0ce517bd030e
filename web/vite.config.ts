// Vite config for the playground (web/). `qkv` resolves to the library's TypeScript source, so the page
// always shows the code in this checkout, with no build of the library first. Fixed port 5173.

import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const root = fileURLToPath(new URL('.', import.meta.url));

export default defineConfig({
  root,
  base: './',
  resolve: { alias: { qkv: fileURLToPath(new URL('../src/index.ts', import.meta.url)) } },
  build: { outDir: 'dist', emptyOutDir: true, target: 'es2022', chunkSizeWarningLimit: 1000 },
  worker: { format: 'es' },
  server: { port: 5173, strictPort: true },
  preview: { port: 5173, strictPort: true },
  clearScreen: false,
});
