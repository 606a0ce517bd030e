// Vite config for the playground (web/). `qkv` and its subpaths (qkv/nn, qkv/viz, qkv/io, qkv/onnx)
// resolve to the library's TypeScript entries, the browser ones (src/index.ts, src/<name>/index.ts), so
// the page imports what users import and always shows the code in this checkout, with no build of the
// library first. Fixed port 5173.

import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const root = fileURLToPath(new URL('.', import.meta.url));

export default defineConfig({
  root,
  base: './',
  resolve: {
    alias: [
      { find: /^qkv$/, replacement: fileURLToPath(new URL('../src/index.ts', import.meta.url)) },
      {
        find: /^qkv\/(nn|viz|io|onnx)$/,
        replacement: fileURLToPath(new URL('../src/$1/index.ts', import.meta.url)),
      },
    ],
  },
  build: { outDir: 'dist', emptyOutDir: true, target: 'es2022', chunkSizeWarningLimit: 1000 },
  worker: { format: 'es' },
  server: { port: 5173, strictPort: true },
  preview: { port: 5173, strictPort: true },
  clearScreen: false,
});
