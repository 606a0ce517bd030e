// The one WebAssembly module of qkv: every op's inner loops, built together so each thread has one
// instance and one memory (src/kernels/wasm-runtime.ts). Each op's file exports its own entry points.

export * from './attention';
export * from './attention-backward';
export * from './gemm';
export * from './ops';
export * from './decode';
