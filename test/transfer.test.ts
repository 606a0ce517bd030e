// The thread protocol's serialiser (src/kernels/transfer.ts): every field of the problem types survives
// place → structured clone (what postMessage does) → revive, typed arrays keep their type (float16 bits
// stay Uint16Array), outputs start zeroed and read back, and values that cannot cross throw naming their
// path. The fixtures are typed Required<…>, so a field added to the contract fails `npm run typecheck`
// here until this test carries it; the comparisons walk whatever fields the fixtures have.

import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import type { GemmProblem } from '../src/kernels/gemm-types.js';
import { BufferLayout, type Packed, readBack, revive, sliceOf } from '../src/kernels/transfer.js';
import type {
  AttentionGrads,
  AttentionOutputs,
  AttentionProblem,
  BackwardInputs,
  BackwardProblem,
} from '../src/kernels/types.js';
import { Tensor } from '../src/tensor.js';

/** Every leaf equal: typed arrays of the same type and bits (NaN, −0 and ±Infinity included). */
function expectSameTree(got: unknown, want: unknown, path = 'tree'): void {
  if (ArrayBuffer.isView(want)) {
    expect(got?.constructor, path).toBe(want.constructor);
    const [a, b] = [Array.from(got as Float64Array), Array.from(want as Float64Array)];
    expect(a.length, `${path}.length`).toBe(b.length);
    expect(
      a.every((x, i) => Object.is(x, b[i])),
      `${path} contents`,
    ).toBe(true);
    return;
  }
  if (want !== null && typeof want === 'object') {
    expect(got !== null && typeof got === 'object', path).toBe(true);
    expect(Object.keys(got as object).sort(), `${path} keys`).toEqual(Object.keys(want).sort());
    for (const [key, value] of Object.entries(want)) {
      expectSameTree((got as Record<string, unknown>)[key], value, `${path}.${key}`);
    }
    return;
  }
  expect(Object.is(got, want), `${path}: ${String(got)} vs ${String(want)}`).toBe(true);
}

/** Typed arrays of a tree, with their paths. */
function arraysOf(x: unknown, path = 'tree'): [string, ArrayBufferView][] {
  if (ArrayBuffer.isView(x)) return [[path, x]];
  if (x === null || typeof x !== 'object') return [];
  return Object.entries(x).flatMap(([k, v]) => arraysOf(v, `${path}.${k}`));
}

/** What a worker receives: the packed tree through a structured clone, revived on the buffer. */
function cross<T>(tree: T): { revived: T; buffer: SharedArrayBuffer; packed: Packed<T> } {
  const layout = new BufferLayout(16);
  const packed = layout.place(tree, 'copy');
  const buffer = new SharedArrayBuffer(layout.byteLength);
  layout.write(buffer);
  return { revived: revive<T>(structuredClone(packed), buffer), buffer, packed };
}

const f32 = (...xs: number[]) => Float32Array.from(xs);

// Every field of AttentionProblem, optional ones included; awkward values where a value can be awkward.
const halfProblem: Required<AttentionProblem> = {
  B: 2,
  Hq: 4,
  Hkv: 2,
  L: 3,
  S: 5,
  E: 2,
  Ev: 1,
  q: new Float32Array(0),
  k: new Float32Array(0),
  v: new Float32Array(0),
  half: {
    q: Tensor.randn([2, 4, 3, 2], { seed: 1 }).to('float16').data,
    k: Uint16Array.from([0x7c00, 0xfc00, 0x7e00, 0x8000, 0x0001, ...new Array(35).fill(0x3c00)]), // ±Inf, NaN, −0, subnormal
    v: Tensor.randn([2, 2, 5, 1], { seed: 3 }).to('float16').data,
  },
  scale: 1 / Math.sqrt(2),
  mask: { data: f32(1, 0, 1, 1, 0), sb: 0, sh: 0, sl: 0, ss: 1 }, // a key padding mask [S]
  bias: { data: f32(Number.NEGATIVE_INFINITY, -0, Number.NaN), sb: 0, sh: 0, sl: 1, ss: 0 }, // [L, 1]
  shift: 2,
  left: Number.POSITIVE_INFINITY,
  right: 0,
  precision: 'float64',
  kv: { kind: 'paged', blockSize: 2, blockTable: Int32Array.from([5, 0, 3, 1, 4, 2]), tableStride: 3 },
  // Flex as data (built-in mods' programs and a block mask); JS functions never cross threads.
  flex: {
    maskName: 'documentMask',
    scoreName: 'softcapScore(30)',
    maskProgram: { ops: Int32Array.from([3, 0, 6]), ints: Int32Array.from([0, 0, 1, 1, 1, 2]) },
    scoreProgram: { ops: Int32Array.from([2, 0, 0, 0]), floats: f32(30) },
    blocks: { qBlock: 2, kvBlock: 2, nq: 2, nk: 3, kinds: Uint8Array.from([2, 1, 0, 0, 1, 2]), sb: 0, sh: 0 },
  },
};

describe('the serialiser', () => {
  it('carries every field of an AttentionProblem, float16 inputs as Uint16Array halves', () => {
    const { revived, buffer } = cross(halfProblem);
    expectSameTree(revived, halfProblem, 'problem');
    expect(revived.half?.q).toBeInstanceOf(Uint16Array);
    // Every array is a view on the shared buffer, none a copy in the message.
    for (const [path, a] of arraysOf(revived)) expect(a.buffer, path).toBe(buffer);
  });

  it('carries a float32 problem whose q, k and v are one array once, as three views of it', () => {
    const x = Tensor.randn([1, 2, 6, 4], { seed: 4 }).data;
    const problem: AttentionProblem = {
      ...halfProblem,
      B: 1,
      Hq: 2,
      Hkv: 2,
      L: 6,
      S: 6,
      E: 4,
      Ev: 4,
      q: x,
      k: x,
      v: x,
    };
    delete problem.half;
    delete problem.kv;
    delete problem.flex;
    const { revived, packed } = cross(problem);
    expectSameTree(revived, problem, 'problem');
    expect(packed.k).toEqual(packed.q);
    expect(packed.v).toEqual(packed.q);
    const layout = new BufferLayout(16);
    layout.place(problem, 'copy');
    // header + x + mask + bias, each rounded up to 16 bytes
    expect(layout.byteLength).toBe(16 + 48 * 4 + 32 + 16);
  });

  it('carries a backward problem (float64 q, k, v), its inputs, and gradients that read back', () => {
    const backward: Required<BackwardProblem> = {
      ...halfProblem,
      q: Float64Array.from({ length: 48 }, (_, i) => i / 3),
      k: Float64Array.from({ length: 40 }, (_, i) => -i),
      v: Float64Array.from({ length: 20 }, (_, i) => i * 1e-300),
    };
    delete (backward as Partial<AttentionProblem>).half;
    const inputs: Required<BackwardInputs> = {
      dOut: f32(...Array.from({ length: 24 }, (_, i) => i - 6)),
      out: f32(...Array.from({ length: 24 }, (_, i) => i / 7)),
      lse: Float64Array.from([Number.NEGATIVE_INFINITY, ...Array.from({ length: 23 }, (_, i) => i)]),
    };
    const grads: Required<AttentionGrads> = {
      dq: new Float64Array(48).fill(Number.NaN), // a dirty caller array: readBack overwrites it
      dk: new Float32Array(40),
      dv: new Float32Array(20),
      dbias: new Float64Array(3),
    };
    const layout = new BufferLayout(16);
    const packed = {
      problem: layout.place(backward, 'copy'),
      inputs: layout.place(inputs, 'copy'),
      grads: layout.place(grads, 'zero'),
    };
    const buffer = new SharedArrayBuffer(layout.byteLength);
    new Uint8Array(buffer).fill(0xff); // a reused buffer's leftovers: 'zero' places must not show them
    layout.write(buffer);
    const revived = revive<{ problem: BackwardProblem; inputs: BackwardInputs; grads: AttentionGrads }>(
      structuredClone(packed),
      buffer,
    );
    expectSameTree(revived.problem, backward, 'problem');
    expectSameTree(revived.inputs, inputs, 'inputs');
    for (const [path, a] of arraysOf(revived.grads)) {
      expect(
        Array.from(a as Float32Array).every((x) => x === 0),
        path,
      ).toBe(true);
    }
    // The worker's writes come back to the caller's arrays, each in its own type.
    const written: Required<AttentionGrads> = {
      dq: Float64Array.from({ length: 48 }, (_, i) => Math.PI * i),
      dk: f32(...Array.from({ length: 40 }, (_, i) => -i / 3)),
      dv: f32(...Array.from({ length: 20 }, (_, i) => i)),
      dbias: Float64Array.from([1e-310, -0, Number.POSITIVE_INFINITY]),
    };
    for (const key of Object.keys(written) as (keyof AttentionGrads)[]) revived.grads[key]?.set(written[key]);
    readBack(grads, packed.grads, buffer);
    expectSameTree(grads, written, 'grads');
  });

  it('carries every field of a GemmProblem (the pool’s gemm jobs), strides and flags included', () => {
    const gemmProblem: Required<GemmProblem> = {
      M: 2,
      N: 3,
      K: 4,
      a: Float32Array.from({ length: 16 }, (_, i) => (i % 5 === 0 ? Number.NaN : i - 8)),
      b: f32(Number.POSITIVE_INFINITY, -0, ...new Array(22).fill(0.5)),
      transA: true,
      transB: false,
      bias: f32(1, Number.NEGATIVE_INFINITY, 3),
      accumulate: true,
      gelu: true,
      batch: 2,
      strideA: 8,
      strideB: 0,
      precision: 'float32',
    };
    const { revived, buffer } = cross(gemmProblem);
    expectSameTree(revived, gemmProblem, 'gemm problem');
    for (const [path, a] of arraysOf(revived)) expect(a.buffer, path).toBe(buffer);
  });

  it('carries forward outputs: out, weights and a float64 lse, zeroed, with reserved scratch after them', () => {
    const outputs: Required<AttentionOutputs> = {
      out: new Float32Array(7),
      weights: new Float32Array(15),
      lse: new Float64Array(3),
    };
    const layout = new BufferLayout(16);
    const packed = layout.place(outputs, 'zero');
    const scratch = layout.reserve('Float64Array', 5);
    expect([packed.out.offset, packed.weights.offset, packed.lse.offset, scratch.offset]).toEqual([
      16, 48, 112, 144,
    ]);
    expect(layout.byteLength).toBe(192);
    const buffer = new SharedArrayBuffer(layout.byteLength);
    new Uint8Array(buffer).fill(0xff);
    layout.write(buffer);
    expect(Array.from(new Float64Array(buffer, scratch.offset, 5))).toEqual([0, 0, 0, 0, 0]);
    const revived = revive<AttentionOutputs>(packed, buffer);
    expect(revived.lse).toBeInstanceOf(Float64Array);
    expect(Array.from(revived.weights ?? [])).toEqual(new Array(15).fill(0));
  });

  it('writes in slices (a streamed job) the same bytes as in one go, and sliceOf names where each element went', () => {
    const tree = {
      a: Float32Array.from({ length: 37 }, (_, i) => i + 0.5),
      b: Int32Array.from({ length: 5 }, (_, i) => -i),
      c: new Uint16Array(0),
    };
    const layout = new BufferLayout(16);
    const packed = layout.place(tree, 'copy');
    const scratch = layout.reserve('Float64Array', 3);
    const whole = new SharedArrayBuffer(layout.byteLength);
    layout.write(whole);
    for (const n of [1, 2, 3, 8, 40]) {
      const sliced = new SharedArrayBuffer(layout.byteLength);
      new Uint8Array(sliced).fill(0xff); // zeroed places must be zeroed by slice 0
      new Uint8Array(sliced, 0, 16).fill(0); // the header is the caller's
      for (let i = 0; i < n; i++) {
        layout.write(sliced, [i, n]);
        // After slice i, exactly the elements sliceOf puts in slices 0 … i are in place.
        const a = revive<typeof tree>(packed, sliced).a;
        for (let x = 0; x < tree.a.length; x++) {
          expect(a[x] === tree.a[x], `n ${n}, slice ${i}, a[${x}]`).toBe(sliceOf(tree.a.length, x, n) <= i);
        }
      }
      expectSameTree(revive(packed, sliced), revive(packed, whole), `n = ${n}`);
      expect(Array.from(revive<Float64Array>(scratch, sliced))).toEqual([0, 0, 0]);
    }
  });

  it('refuses what cannot cross, naming where it is', () => {
    const layout = new BufferLayout();
    expect(() => layout.place({ problem: { mod: () => 0 } }, 'copy', 'args')).toThrow(
      /transfer: args\.problem\.mod is a function, which cannot cross threads/,
    );
    expect(() => layout.place({ cache: [new Map()] }, 'copy', 'args')).toThrow(
      /transfer: args\.cache\[0\] is a Map; only plain objects, arrays and typed arrays cross threads/,
    );
    expect(() => layout.place({ q: new Int8Array(2) }, 'copy', 'args')).toThrow(
      /transfer: args\.q is a Int8Array, which the thread protocol does not carry/,
    );
    const x = new Float32Array(4);
    layout.place({ q: x }, 'copy', 'problem');
    expect(() => layout.place({ out: x }, 'zero', 'outputs')).toThrow(
      /transfer: outputs\.out is both an input and an output/,
    );
  });

  it('round-trips through a real worker thread: revived there, written there, read back here', async () => {
    const transfer = fileURLToPath(new URL('../dist/kernels/transfer.js', import.meta.url));
    const layout = new BufferLayout(16);
    const out = new Float32Array(4);
    const packed = { problem: layout.place(halfProblem, 'copy'), outputs: layout.place({ out }, 'zero') };
    const buffer = new SharedArrayBuffer(layout.byteLength);
    layout.write(buffer);
    const code = `
      const { parentPort, workerData } = require('node:worker_threads');
      import(${JSON.stringify(transfer)}).then(({ revive }) => {
        const { problem, outputs } = revive(workerData.packed, workerData.buffer);
        outputs.out.set([problem.half.q[0], problem.half.k.length, problem.mask.data[1], problem.left]);
        parentPort.postMessage(problem.half.k.constructor.name);
      });
    `;
    const worker = new Worker(code, { eval: true, workerData: { packed, buffer } });
    const kind = await new Promise((resolve, reject) => worker.on('message', resolve).on('error', reject));
    await worker.terminate();
    expect(kind).toBe('Uint16Array');
    readBack({ out }, packed.outputs, buffer);
    expect(Array.from(out)).toEqual([halfProblem.half.q[0], 40, 0, Number.POSITIVE_INFINITY]);
  });
});
