// The autograd's fused self-attention from packed projections (attentionPacked: qkv [B, L, 3·H·E] → heads
// in one pass, RoPE on the way, gradients added straight into qkv's grad) against the ops it replaces:
// splitLast into thirds, rope on q and k, attention. One decision to know: the fused op promises the same
// numbers bit for bit (the rotations are the rope op's float64 products, each turned gradient rounded to
// float32 as the intermediate grads round it), so every comparison here is toEqual, never a tolerance.

import { describe, expect, it } from 'vitest';
import { attention, attentionPacked } from '../src/autograd/attention.js';
import { rope, splitLast } from '../src/autograd/ops.js';
import { backward, parameter, type Var } from '../src/autograd/var.js';
import { type AttentionParams, attend, type BlockOps } from '../src/model/block.js';
import { varOps } from '../src/model/ops-var.js';
import { Generator } from '../src/random.js';
import { Tensor } from '../src/tensor.js';

type Dtype = 'float32' | 'float64';

function values(gen: Generator, n: number, dtype: Dtype): Float32Array | Float64Array {
  const a = dtype === 'float32' ? new Float32Array(n) : new Float64Array(n);
  for (let i = 0; i < n; i++) a[i] = (gen.random() - 0.5) * 4;
  return a;
}

type Rope = { base: number; offset: number } | undefined;

/** The unfused ops: splitLast, rope on q and k, attention. */
function unfused(qkv: Var, H: number, rot: Rope, options: Record<string, unknown>) {
  const third = qkv.shape[2] / 3;
  let [q, k, v] = splitLast(qkv, [third, third, third]);
  if (rot) {
    q = rope(q, H, third / H, rot.offset, rot.base);
    k = rope(k, H, third / H, rot.offset, rot.base);
  }
  return attention(q, k, v, { numHeads: H, ...options });
}

describe('attentionPacked equals splitLast + rope + attention, bit for bit', () => {
  const cases: { B: number; L: number; H: number; E: number; rot: Rope; options: Record<string, unknown> }[] =
    [
      { B: 1, L: 1, H: 1, E: 2, rot: undefined, options: {} },
      { B: 2, L: 17, H: 3, E: 6, rot: { base: 10000, offset: 0 }, options: { causal: true } },
      { B: 3, L: 5, H: 2, E: 8, rot: { base: 500, offset: 3 }, options: {} },
      {
        B: 1,
        L: 65,
        H: 4,
        E: 16,
        rot: { base: 10000, offset: 7 },
        options: { causal: true, window: [8, 0] },
      },
      { B: 2, L: 33, H: 1, E: 32, rot: undefined, options: { causal: true, needWeights: true } },
      { B: 2, L: 9, H: 2, E: 4, rot: { base: 10000, offset: 0 }, options: { scale: 0.3 } },
    ];
  for (const dtype of ['float32', 'float64'] as Dtype[]) {
    for (const [c, { B, L, H, E, rot, options }] of cases.entries()) {
      it(`${dtype}: B ${B}, L ${L}, H ${H}, E ${E}, rope ${rot ? `${rot.base}@${rot.offset}` : 'none'}, ${JSON.stringify(options)}`, () => {
        const gen = new Generator(100 + c);
        const data = values(gen, B * L * 3 * H * E, dtype);
        const dy = values(gen, B * L * H * E, dtype);
        const a = parameter(data.slice(), [B, L, 3 * H * E]);
        const b = parameter(data.slice(), [B, L, 3 * H * E]);
        const fused = attentionPacked(a, { numHeads: H, rope: rot, ...options });
        const plain = unfused(b, H, rot, options);
        expect(fused.out.shape).toEqual([B, L, H * E]);
        expect(fused.out.data).toEqual(plain.out.data);
        expect(fused.weights?.data).toEqual(plain.weights?.data);
        backward(fused.out, dy);
        backward(plain.out, dy);
        expect(a.grad).toEqual(b.grad);
        // Not all zero: the comparison saw gradients.
        expect(a.grad!.some((g) => g !== 0)).toBe(true);
      });
    }
  }

  it('a key mask and a grad that already holds values (the sums follow the unfused order)', () => {
    const gen = new Generator(7);
    const [B, L, H, E] = [2, 6, 2, 4];
    const data = values(gen, B * L * 3 * H * E, 'float32');
    const mask = new Tensor(
      Float32Array.from({ length: B * L }, (_, i) => (i % 5 === 3 ? 0 : 1)),
      [B, 1, 1, L],
    );
    const dy = values(gen, B * L * H * E, 'float32');
    const a = parameter(data.slice(), [B, L, 3 * H * E]);
    const b = parameter(data.slice(), [B, L, 3 * H * E]);
    const rot = { base: 10000, offset: 2 };
    backward(attentionPacked(a, { numHeads: H, rope: rot, mask: mask }).out, dy);
    backward(unfused(b, H, rot, { mask: mask }).out, dy);
    expect(a.grad).toEqual(b.grad);
    // A second backward adds to the grads the first left.
    backward(attentionPacked(a, { numHeads: H, rope: rot, mask: mask }).out, dy);
    backward(unfused(b, H, rot, { mask: mask }).out, dy);
    expect(a.grad).toEqual(b.grad);
  });

  it('bad shapes name the op and the shape', () => {
    const x = parameter(new Float32Array(2 * 3 * 10), [2, 3, 10]);
    expect(() => attentionPacked(x, { numHeads: 2 })).toThrow(
      /attention: packed qkv \[2,3,10\] must be \[B, L, 3·H·E\] for 2 heads/,
    );
    const odd = parameter(new Float32Array(2 * 3 * 9), [2, 3, 9]);
    expect(() => attentionPacked(odd, { numHeads: 1, rope: { base: 10000, offset: 0 } })).toThrow(/even/);
  });
});

describe("the block's attend takes the packed path when nothing needs q, k and v apart", () => {
  it('same heads and gradients as the unfused ops, and the observer path still sees the projections', () => {
    const gen = new Generator(11);
    const [B, L, D, H] = [2, 13, 12, 3];
    const x0 = values(gen, B * L * D, 'float32');
    const w = values(gen, 3 * D * D, 'float32');
    const bias = values(gen, 3 * D, 'float32');
    const dy = values(gen, B * L * D, 'float32');
    const run = (ops: BlockOps<Var>, observe: boolean) => {
      const x = parameter(x0.slice(), [B, L, D]);
      const p: AttentionParams<Var> = {
        inProjWeight: parameter(w.slice(), [3 * D, D]),
        inProjBias: parameter(bias.slice(), [3 * D]),
      } as AttentionParams<Var>;
      let seen = 0;
      const observer = observe ? { projected: () => void seen++ } : undefined;
      const { heads } = attend(
        ops,
        p,
        x,
        undefined,
        { numHeads: H, causal: true, rope: { base: 10000, offset: 0 } },
        observer,
      );
      backward(heads, dy);
      return { heads: heads.data, dx: x.grad!, dw: p.inProjWeight!.grad!, db: p.inProjBias!.grad!, seen };
    };
    let packedCalls = 0;
    const counting: BlockOps<Var> = {
      ...varOps,
      attentionPacked: (qkv, options) => {
        packedCalls++;
        return varOps.attentionPacked!(qkv, options);
      },
    };
    const fused = run(counting, false);
    expect(packedCalls).toBe(1);
    const withoutPacked: BlockOps<Var> = { ...varOps, attentionPacked: undefined };
    const plain = run(withoutPacked, false);
    const observed = run(counting, true);
    expect(packedCalls).toBe(1); // an observer of the projections takes the unfused path
    expect(observed.seen).toBe(1);
    for (const other of [plain, observed]) {
      expect(fused.heads).toEqual(other.heads);
      expect(fused.dx).toEqual(other.dx);
      expect(fused.dw).toEqual(other.dw);
      expect(fused.db).toEqual(other.db);
    }
  });
});
