// The kernel contract: one visibility rule (isVisible / classifyBlock agree with each other and with
// every kernel), precision stated in the problem (training runs on the WASM kernel, gradient checks on a
// float64 one), and backward passes chosen through the registry.

import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { attention } from '../src/autograd/attention.js';
import { parameter } from '../src/autograd/var.js';
import { attentionBackward, Tensor } from '../src/index.js';
import { chooseBackward, kernelOps, registeredKernels } from '../src/kernels/registry.js';
import type { AttentionProblem } from '../src/kernels/types.js';
import { classifyBlock, isVisible, kvRow, visibleRange } from '../src/kernels/visibility.js';
import { probeWasm, wasmKernel } from '../src/kernels/wasm.js';

afterEach(() => vi.restoreAllMocks());

const arbBand = fc.record({
  L: fc.integer({ min: 1, max: 20 }),
  S: fc.integer({ min: 1, max: 20 }),
  shift: fc.integer({ min: -10, max: 20 }),
  left: fc.constantFrom(0, 1, 3, Number.POSITIVE_INFINITY),
  right: fc.constantFrom(0, 2, Number.POSITIVE_INFINITY),
  withMask: fc.boolean(),
  seed: fc.integer({ min: 0, max: 1000 }),
});

describe('the visibility rule', () => {
  it("classifyBlock agrees with isVisible on every tile: 'empty' sees nothing, 'full' sees everything", () => {
    fc.assert(
      fc.property(arbBand, ({ L, S, shift, left, right, withMask, seed }) => {
        const data = new Float32Array(L * S).map((_, x) => ((x * 7 + seed) % 5 === 0 ? 0 : 1));
        const p = {
          S,
          shift,
          left,
          right,
          mask: withMask ? { data, sb: 0, sh: 0, sl: S, ss: 1 } : undefined,
        };
        for (let i0 = 0; i0 < L; i0 += 3) {
          for (let j0 = 0; j0 < S; j0 += 4) {
            const [i1, j1] = [Math.min(L, i0 + 3), Math.min(S, j0 + 4)];
            const kind = classifyBlock(p, i0, i1, j0, j1);
            let seen = 0;
            for (let i = i0; i < i1; i++)
              for (let j = j0; j < j1; j++) seen += isVisible(p, 0, 0, i, j) ? 1 : 0;
            if (kind === 'empty') expect(seen).toBe(0);
            if (kind === 'full') expect(seen).toBe((i1 - i0) * (j1 - j0));
            for (let i = i0; i < i1; i++) {
              const [lo, hi] = visibleRange(p, i);
              for (let j = j0; j < j1; j++)
                if (isVisible(p, 0, 0, i, j)) expect(j >= lo && j <= hi).toBe(true);
            }
          }
        }
      }),
      { numRuns: 200, seed: 3 },
    );
  });

  it('kvRow is the dense [B, Hkv, S, ·] layout', () => {
    const p = { Hkv: 3, S: 5 } as AttentionProblem;
    expect(kvRow(p, 0, 0, 0)).toBe(0);
    expect(kvRow(p, 1, 2, 4)).toBe((1 * 3 + 2) * 5 + 4);
  });
});

describe('precision is stated in the problem', () => {
  const qkv = (dtype: 'float32' | 'float64') => {
    const make = (seed: number) => {
      const t = Tensor.randn([2, 6, 8], { seed });
      return parameter(dtype === 'float64' ? Float64Array.from(t.data) : t.data, t.shape);
    };
    return [make(1), make(2), make(3)] as const;
  };

  it.runIf(probeWasm())('training (float32 Vars) runs its attention forward on the WASM kernel', () => {
    const spy = vi.spyOn(wasmKernel, 'forwardRows');
    const [q, k, v] = qkv('float32');
    attention(q, k, v, { numHeads: 2, causal: true });
    expect(spy).toHaveBeenCalled();
  });

  it('gradient checks (float64 Vars) never run on the float32 WASM kernel', () => {
    const spy = vi.spyOn(wasmKernel, 'forwardRows');
    const [q, k, v] = qkv('float64');
    attention(q, k, v, { numHeads: 2, causal: true });
    expect(spy).not.toHaveBeenCalled();
  });
});

describe('backward passes come from the registry', () => {
  it('every registered kernel is listed with its ops, the reference first and with a backward', () => {
    const kernels = registeredKernels();
    expect(kernels[0].name).toBe('reference');
    expect(kernelOps(kernels[0])).toEqual(['attention.forward', 'attention.backward']);
    expect(kernels.map((k) => k.name).sort()).toEqual(['flash', 'reference', 'wasm']);
  });

  it("'auto' picks a backward that supports the call; a kernel without one is named in the error", () => {
    const problem = {} as Parameters<typeof chooseBackward>[2];
    expect(chooseBackward('f', 'auto', problem, { dOut: new Float32Array(0) })).toBe(
      registeredKernels()[0].backward, // without out and lse only the reference serves
    );
    const q = Tensor.randn([1, 2, 4, 8], { seed: 1 });
    expect(() => attentionBackward(q, q, q, q, { kernel: 'wasm' })).toThrow(
      /attentionBackward: kernel 'wasm'/,
    );
  });
});
