// flexAttention against the attention it stands for: every built-in mod equals its dense mask or bias
// through scaledDotProductAttention on every kernel; block masks skip what they say and nothing else;
// a user's mod that misbehaves gets an error naming it and where; gradients flow through the mods.

import { describe, expect, it } from 'vitest';
import { attention } from '../src/autograd/attention.js';
import { backward, opResult, parameter, type Var } from '../src/autograd/var.js';
import {
  alibiScore,
  alibiSlopes,
  andMasks,
  BlockMask,
  causalMask,
  createBlockMask,
  documentMask,
  flexAttention,
  flexAttentionWeights,
  type MaskMod,
  noopMask,
  orMasks,
  prefixLmMask,
  relativeBiasScore,
  type ScoreMod,
  scaledDotProductAttention,
  slidingWindowMask,
  softcapScore,
  Tensor,
} from '../src/index.js';
import { type KernelName, kernelSupport } from '../src/kernels/registry.js';

const KERNELS: KernelName[] = ['reference', 'flash', ...(kernelSupport().wasm ? (['wasm'] as const) : [])];

function maxDiff(a: Tensor, b: Tensor): number {
  expect(a.shape).toEqual(b.shape);
  let m = 0;
  for (let i = 0; i < a.size; i++) {
    const x = a.data[i];
    const y = b.data[i];
    if (Number.isNaN(x) || Number.isNaN(y)) {
      if (Number.isNaN(x) !== Number.isNaN(y)) return Number.POSITIVE_INFINITY;
      continue;
    }
    m = Math.max(m, Math.abs(x - y) / Math.max(1, Math.abs(y)));
  }
  return m;
}

/** The dense [L, S] 0/1 mask of a mask mod for (b, h) = (0, 0). */
function denseMask(mod: MaskMod, L: number, S: number): Tensor {
  const m = new Float32Array(L * S);
  for (let i = 0; i < L; i++) for (let j = 0; j < S; j++) m[i * S + j] = mod(0, 0, i, j) ? 1 : 0;
  return new Tensor(m, [L, S]);
}

/** The dense [H, L, S] additive bias of an additive score mod (mod(0) for each element). */
function denseBias(mod: ScoreMod, H: number, L: number, S: number): Tensor {
  const x = new Float32Array(H * L * S);
  for (let h = 0; h < H; h++)
    for (let i = 0; i < L; i++) for (let j = 0; j < S; j++) x[(h * L + i) * S + j] = mod(0, 0, h, i, j);
  return new Tensor(x, [H, L, S]);
}

function qkv(B: number, Hq: number, Hkv: number, L: number, S: number, E: number, seed: number) {
  return {
    q: Tensor.randn([B, Hq, L, E], { seed }),
    k: Tensor.randn([B, Hkv, S, E], { seed: seed + 1 }),
    v: Tensor.randn([B, Hkv, S, E], { seed: seed + 2 }),
  };
}

const TOL = 2e-5;

describe('built-in mods equal their dense masks and biases', () => {
  const shapes: [number, number, number, number, number][] = [
    [2, 4, 300, 300, 16], // B, H, L, S, E
    [1, 2, 37, 150, 8], // L < S
    [1, 3, 150, 40, 12], // L > S
  ];
  const docsFor = (n: number) => Int32Array.from({ length: n }, (_, i) => Math.floor(i / 23) % 5); // unsorted ids
  for (const [B, H, L, S, E] of shapes) {
    const { q, k, v } = qkv(B, H, H, L, S, E, L + S);
    const n = Math.max(L, S);
    const masks: [string, MaskMod][] = [
      ['causalMask', causalMask],
      ['slidingWindowMask(7)', slidingWindowMask(7)],
      ['prefixLmMask(20)', prefixLmMask(20)],
      ['documentMask', documentMask(docsFor(n))],
      ['causal ∧ document', andMasks(causalMask, documentMask(docsFor(n)))],
      ['prefix ∨ window', orMasks(prefixLmMask(5), slidingWindowMask(3))],
      ['noopMask', noopMask],
    ];
    for (const kernel of KERNELS) {
      for (const [name, mod] of masks) {
        it(`${name} on [${B},${H},${L},${S},${E}], kernel ${kernel}`, () => {
          const got = flexAttention(q, k, v, { maskMod: mod, kernel });
          const want = scaledDotProductAttention(q, k, v, {
            mask: denseMask(mod, L, S),
            kernel: 'reference',
          });
          expect(maxDiff(got, want)).toBeLessThan(TOL);
        });
      }
      it(`alibiScore, relativeBiasScore (shared and per head) on [${B},${H},${L},${S},${E}], kernel ${kernel}`, () => {
        const table = Array.from({ length: 9 }, (_, i) => Math.sin(i) * 2);
        const perHead = Array.from({ length: H }, (_, h) => Array.from({ length: 5 }, (_, i) => h - i * 0.5));
        for (const mod of [alibiScore(H), relativeBiasScore(table), relativeBiasScore(perHead)]) {
          const got = flexAttention(q, k, v, { scoreMod: mod, kernel });
          const want = scaledDotProductAttention(q, k, v, {
            bias: denseBias(mod, H, L, S),
            kernel: 'reference',
          });
          expect(maxDiff(got, want)).toBeLessThan(TOL);
          // with a mask too: the score mod only sees visible keys
          const both = flexAttention(q, k, v, { scoreMod: mod, maskMod: causalMask, kernel });
          const bothWant = scaledDotProductAttention(q, k, v, {
            bias: denseBias(mod, H, L, S),
            mask: denseMask(causalMask, L, S),
            kernel: 'reference',
          });
          expect(maxDiff(both, bothWant)).toBeLessThan(TOL);
        }
      });
    }
  }

  it('alibiScore uses the paper slopes, as alibiSlopes', () => {
    const mod = alibiScore(8);
    const slopes = alibiSlopes(8).data;
    for (let h = 0; h < 8; h++) expect(mod(1, 0, h, 10, 3)).toBeCloseTo(1 + slopes[h] * -7, 6);
  });

  it('softcapScore equals cap·tanh(s/cap) applied to the scaled scores (computed densely here)', () => {
    const { q, k, v } = qkv(1, 2, 2, 20, 24, 8, 5);
    const qq = new Tensor(
      q.data.map((x) => x * 6),
      q.shape,
    ); // large scores, so the cap matters
    for (const kernel of KERNELS) {
      const got = flexAttentionWeights(qq, k, { scoreMod: softcapScore(3), kernel });
      for (let h = 0; h < 2; h++) {
        for (let i = 0; i < 20; i++) {
          const s: number[] = [];
          for (let j = 0; j < 24; j++) {
            let dot = 0;
            for (let e = 0; e < 8; e++) dot += qq.data[(h * 20 + i) * 8 + e] * k.data[(h * 24 + j) * 8 + e];
            s.push(3 * Math.tanh(dot / Math.sqrt(8) / 3));
          }
          const m = Math.max(...s);
          const z = s.reduce((a, x) => a + Math.exp(x - m), 0);
          for (let j = 0; j < 24; j++) {
            expect(got.data[(h * 20 + i) * 24 + j]).toBeCloseTo(Math.exp(s[j] - m) / z, 5);
          }
        }
      }
      // out = weights · v (softcap is not additive, so there is no dense bias to compare with)
      const out = flexAttention(qq, k, v, { scoreMod: softcapScore(3), kernel });
      for (let h = 0; h < 2; h++)
        for (let i = 0; i < 20; i++)
          for (let e = 0; e < 8; e++) {
            let x = 0;
            for (let j = 0; j < 24; j++) x += got.data[(h * 20 + i) * 24 + j] * v.data[(h * 24 + j) * 8 + e];
            expect(out.data[(h * 20 + i) * 8 + e]).toBeCloseTo(x, 5);
          }
    }
  });

  it('grouped-query heads and ranks 2 and 3 behave as scaledDotProductAttention', () => {
    const { q, k, v } = qkv(2, 6, 2, 33, 33, 8, 9);
    for (const kernel of KERNELS) {
      const got = flexAttention(q, k, v, { maskMod: causalMask, enableGqa: true, kernel });
      const want = scaledDotProductAttention(q, k, v, { causal: 'top-left', kernel: 'reference' });
      expect(maxDiff(got, want)).toBeLessThan(TOL);
      const q2 = new Tensor(q.data.slice(0, 33 * 8), [33, 8]);
      const k2 = new Tensor(k.data.slice(0, 33 * 8), [33, 8]);
      const r2 = flexAttention(q2, k2, k2, { maskMod: slidingWindowMask(4), kernel });
      expect(
        maxDiff(r2, scaledDotProductAttention(q2, k2, k2, { causal: 'top-left', window: [3, 0] })),
      ).toBeLessThan(TOL);
      const q3 = new Tensor(q.data.slice(0, 2 * 33 * 8), [2, 33, 8]);
      const r3 = flexAttention(q3, q3, q3, { scoreMod: alibiScore(1), kernel });
      expect(r3.shape).toEqual([2, 33, 8]);
    }
  });
});

describe('blocked rows and the log-sum-exp', () => {
  it('a row the mask mod blocks entirely is zeros with lse −Infinity, never NaN', () => {
    // 40 queries, 20 keys: queries 20…39 are in document 1, every key in document 0, so they see nothing.
    const { q, k, v } = qkv(1, 2, 2, 40, 20, 8, 3);
    const ids = Int32Array.from({ length: 40 }, (_, i) => (i < 20 ? 0 : 1));
    const builtIn = andMasks(causalMask, documentMask(ids));
    const mine: MaskMod = (_b, _h, qi, kv) => kv <= qi && qi < 20;
    for (const kernel of KERNELS) {
      for (const maskMod of kernel === 'wasm' ? [builtIn] : [builtIn, mine]) {
        const { output, lse } = flexAttention(q, k, v, { maskMod, kernel, returnLse: true });
        expect(lse.shape).toEqual([1, 2, 40]);
        for (let h = 0; h < 2; h++) {
          for (let i = 0; i < 40; i++) {
            const z = lse.data[h * 40 + i];
            if (i < 20) expect(Number.isFinite(z)).toBe(true);
            else {
              expect(z).toBe(Number.NEGATIVE_INFINITY);
              for (let e = 0; e < 8; e++) expect(output.data[(h * 40 + i) * 8 + e]).toBe(0);
            }
          }
        }
        expect(output.data.some(Number.isNaN)).toBe(false);
      }
    }
  });

  it('returnLse gives log Σ exp of the visible scores (natural log)', () => {
    const { q, k, v } = qkv(1, 1, 1, 6, 9, 4, 11);
    const { lse } = flexAttention(q, k, v, { maskMod: causalMask, returnLse: true, kernel: 'reference' });
    for (let i = 0; i < 6; i++) {
      let z = 0;
      for (let j = 0; j <= i; j++) {
        let dot = 0;
        for (let e = 0; e < 4; e++) dot += q.data[i * 4 + e] * k.data[j * 4 + e];
        z += Math.exp(dot / 2);
      }
      expect(lse.data[i]).toBeCloseTo(Math.log(z), 5);
    }
  });

  it('a score mod that returns −Infinity blocks the key', () => {
    const { q, k, v } = qkv(1, 2, 2, 16, 16, 8, 13);
    const cut: ScoreMod = (s, _b, _h, qi, kv) => (kv > qi ? Number.NEGATIVE_INFINITY : s);
    const got = flexAttention(q, k, v, { scoreMod: cut, kernel: 'flash' });
    expect(maxDiff(got, scaledDotProductAttention(q, k, v, { causal: 'top-left' }))).toBeLessThan(TOL);
  });
});

describe('createBlockMask', () => {
  it('causal at 1024 with 128-tiles: PyTorch layout, 43.75% skipped, a picture', () => {
    const m = createBlockMask(causalMask, 1, 1, 1024, 1024);
    expect(m.numQBlocks).toBe(8);
    expect(m.sparsity()).toBeCloseTo(43.75, 10);
    // query block 3: key blocks 0,1,2 full, 3 partial
    expect(m.kvNumBlocks[3]).toBe(1);
    expect(m.kvIndices[3 * 8]).toBe(3);
    expect(m.fullKvNumBlocks[3]).toBe(3);
    expect([...m.fullKvIndices.subarray(3 * 8, 3 * 8 + 3)]).toEqual([0, 1, 2]);
    expect(m.blockKind(0, 0, 3, 4)).toBe('empty');
    const text = m.toString();
    expect(text).toContain('sparsity=43.75%');
    expect(text.split('\n')[4]).toBe('██████░░');
  });

  it('a built-in mod classified from its program equals a plain function classified by calls', () => {
    const ids = Int32Array.from({ length: 200 }, (_, i) => [0, 0, 1, 2, 2, 2, 3][Math.floor(i / 29)] ?? 4);
    const shuffled = Int32Array.from({ length: 200 }, (_, i) => (i * 7919) % 3);
    const mods: MaskMod[] = [
      causalMask,
      slidingWindowMask(9),
      prefixLmMask(33),
      documentMask(ids),
      documentMask(shuffled),
      andMasks(causalMask, documentMask(ids)),
      orMasks(prefixLmMask(17), slidingWindowMask(5)),
    ];
    for (const mod of mods) {
      for (const size of [16, 32, 50, [64, 24] as [number, number]]) {
        const fromProgram = createBlockMask(mod, 1, 1, 200, 170, { blockSize: size });
        const plain: MaskMod = (b, h, q, kv) => mod(b, h, q, kv);
        const fromCalls = createBlockMask(plain, 1, 1, 200, 170, { blockSize: size });
        // Each instruction is classified exactly; a combination may say 'partial' where calls know better.
        for (let x = 0; x < fromCalls.kinds.length; x++) {
          const p = fromProgram.kinds[x];
          if (p !== fromCalls.kinds[x]) expect(p, `${mod.name} tile ${x}`).toBe(1);
        }
        if (!mod.name.startsWith('andMasks') && !mod.name.startsWith('orMasks')) {
          expect(fromProgram.kinds, mod.name).toEqual(fromCalls.kinds);
        }
      }
    }
  });

  it('broadcasts B and H = 1, and keeps per-(b, h) masks apart', () => {
    const perHead: MaskMod = (_b, h, q, kv) => q - kv >= 0 && q - kv < 8 * (h + 1);
    const m = createBlockMask(perHead, 1, 3, 64, 64, { blockSize: 8 });
    expect(m.blockKind(0, 0, 7, 0)).toBe('empty');
    expect(m.blockKind(0, 2, 7, 5)).toBe('full');
    const { q, k, v } = qkv(2, 3, 3, 64, 64, 8, 21);
    for (const kernel of ['reference', 'flash'] as const) {
      const got = flexAttention(q, k, v, { blockMask: m, kernel });
      const mask = new Float32Array(3 * 64 * 64);
      for (let h = 0; h < 3; h++)
        for (let i = 0; i < 64; i++)
          for (let j = 0; j < 64; j++) mask[(h * 64 + i) * 64 + j] = perHead(0, h, i, j) ? 1 : 0;
      const want = scaledDotProductAttention(q, k, v, {
        mask: new Tensor(mask, [3, 64, 64]),
        kernel: 'reference',
      });
      expect(maxDiff(got, want)).toBeLessThan(TOL);
    }
  });

  it('with a block mask, a JS mod is called only on partial tiles', () => {
    let calls = 0;
    const counted: MaskMod = (_b, _h, q, kv) => {
      calls++;
      return q >= kv;
    };
    const m = createBlockMask(counted, 1, 1, 256, 256, { blockSize: 32 });
    const { q, k, v } = qkv(1, 1, 1, 256, 256, 8, 31);
    calls = 0;
    const got = flexAttention(q, k, v, { blockMask: m, kernel: 'flash' });
    // 8 diagonal tiles of 32×32 are partial: the rest is decided by the block mask
    expect(calls).toBe(8 * 32 * 32);
    expect(maxDiff(got, scaledDotProductAttention(q, k, v, { causal: 'top-left' }))).toBeLessThan(TOL);
  });

  it('every kernel follows the block mask where it disagrees with its mod (a full tile skips the mod)', () => {
    const m = createBlockMask(causalMask, 1, 1, 64, 64, { blockSize: 16 });
    const forged = new BlockMask(
      causalMask,
      1,
      1,
      64,
      64,
      16,
      16,
      m.kinds.map((x) => (x === 1 ? 2 : x)),
    );
    const { q, k, v } = qkv(1, 2, 2, 64, 64, 8, 41);
    const outs = KERNELS.map((kernel) => flexAttention(q, k, v, { blockMask: forged, kernel }));
    for (const o of outs.slice(1)) expect(maxDiff(o, outs[0])).toBeLessThan(TOL);
    // diagonal tiles are now whole: query 0 sees keys 0…15
    const band = scaledDotProductAttention(q, k, v, {
      mask: denseMask((_b, _h, i, j) => Math.floor(j / 16) <= Math.floor(i / 16), 64, 64),
    });
    expect(maxDiff(outs[0], band)).toBeLessThan(TOL);
  });
});

describe('bad input gets a clear error', () => {
  const { q, k, v } = qkv(1, 2, 2, 8, 8, 4, 51);

  it('a mod that throws, returns NaN or a non-boolean is named with (b, h, q, kv)', () => {
    const throws: MaskMod = (_b, _h, qi) => {
      if (qi === 5) throw new Error('boom');
      return true;
    };
    expect(() => flexAttention(q, k, v, { maskMod: throws })).toThrow(
      /maskMod 'throws' threw at \(b=0, h=0, q=5, kv=0\): boom/,
    );
    const nan: ScoreMod = (s, _b, h) => (h === 1 ? Number.NaN : s);
    expect(() => flexAttention(q, k, v, { scoreMod: nan })).toThrow(
      /scoreMod 'nan' returned NaN for score .* at \(b=0, h=1, q=0, kv=0\)/,
    );
    const truthy = ((_b: number, _h: number, qi: number, kv: number) =>
      qi >= kv ? 1 : 0) as unknown as MaskMod;
    expect(() => flexAttention(q, k, v, { maskMod: truthy })).toThrow(
      /returned 1 at \(b=0, h=0, q=0, kv=0\); it must return true or false/,
    );
    expect(() => createBlockMask(truthy, 1, 1, 8, 8)).toThrow(/createBlockMask: maskMod .* returned 1/);
  });

  it('a block mask for other sizes is refused with both shapes', () => {
    const m = createBlockMask(causalMask, 1, 1, 16, 16);
    expect(() => flexAttention(q, k, v, { blockMask: m })).toThrow(
      /blockMask was built for \[1,1,16,16\] but this call's scores are \[B=1, H=2, L=8, S=8\]/,
    );
    const heads = createBlockMask(causalMask, 1, 3, 8, 8);
    expect(() => flexAttention(q, k, v, { blockMask: heads })).toThrow(/\[1,3,8,8\]/);
    expect(() => flexAttention(q, k, v, { blockMask: m, maskMod: slidingWindowMask(2) })).toThrow(
      /is not the mod blockMask was built from/,
    );
  });

  it('names the option or mod that does not fit the call', () => {
    expect(() => flexAttention(q, k, v, { scoreMod: alibiScore(4) })).toThrow(
      /alibiScore\(4\) was made for 4 heads, but this call has Hq=2/,
    );
    expect(() => flexAttention(q, k, v, { maskMod: documentMask([0, 0, 1]) })).toThrow(
      /covers 3 positions, but this call .* needs 8/,
    );
    const gq = qkv(1, 4, 2, 8, 8, 4, 52);
    expect(() => flexAttention(gq.q, gq.k, gq.v)).toThrow(
      /Hq=4 heads but key\/value have Hkv=2; pass enableGqa: true/,
    );
    expect(() => flexAttention(q, k, v, { mask: 1 } as never)).toThrow(/flexAttention/);
    expect(() => flexAttention(q, k, v, { maskMod: 3 as never })).toThrow(/maskMod must be a function/);
    expect(() => slidingWindowMask(0)).toThrow(/slidingWindowMask: w must be an integer ≥ 1, got 0/);
    expect(() => softcapScore(-1)).toThrow(/cap must be a number in \[1e-30, 1e30\]/);
    expect(() => relativeBiasScore([1, 2])).toThrow(/odd count/);
    expect(() => documentMask([0, 1.5])).toThrow(/docIds must be 32-bit integers, got 1.5 at index 1/);
    expect(() => createBlockMask(causalMask, 1, 1, 8, 8, { blockSize: 0 })).toThrow(
      /blockSize must be an integer ≥ 1/,
    );
  });

  it('review findings: huge bounds, float32 caps, empty or, typos, +Infinity, block-mask misuse', () => {
    // Window and prefix lengths past int32 behave as unbounded (no wrap in the kernels' programs).
    for (const kernel of KERNELS) {
      const wide = flexAttention(q, k, v, { maskMod: slidingWindowMask(2 ** 31 + 1), kernel });
      expect(maxDiff(wide, scaledDotProductAttention(q, k, v, { causal: 'top-left' }))).toBeLessThan(TOL);
      const prefix = flexAttention(q, k, v, { maskMod: prefixLmMask(2 ** 32 + 1), kernel });
      expect(maxDiff(prefix, scaledDotProductAttention(q, k, v))).toBeLessThan(TOL);
      // orMasks() of nothing blocks every key, as PyTorch's or_masks(): zeros.
      const none = flexAttention(q, k, v, { maskMod: orMasks(), kernel });
      expect(none.data.every((x) => x === 0)).toBe(true);
    }
    expect(() => softcapScore(1e39)).toThrow(/cap must be a number in \[1e-30, 1e30\], got 1e\+39/);
    expect(() => softcapScore(1e-46)).toThrow(/cap must be a number/);
    const up: ScoreMod = (sc, _b, _h, _qi, kv) => (kv === 0 ? Number.POSITIVE_INFINITY : sc);
    expect(() => flexAttention(q, k, v, { scoreMod: up })).toThrow(/returned Infinity for score/);
    expect(() => documentMask([-(2 ** 31), 0])).not.toThrow();
    const x = parameter(Float64Array.from(Tensor.randn([1, 8, 4], { seed: 60 }).data), [1, 8, 4]);
    expect(() => attention(x, x, x, { numHeads: 1, flex: { mask_mod: causalMask } as never })).toThrow(
      /attention: unknown option 'mask_mod'/,
    );
    expect(() => createBlockMask(causalMask, 1, 1, 8, 8, { block_size: 4 } as never)).toThrow(
      /unknown option 'block_size'/,
    );
    expect(() => createBlockMask(causalMask, 1, 1, 8, 8, null as never)).toThrow(
      /createBlockMask: options must be an object/,
    );
    expect(() => createBlockMask(causalMask, 1, 1, 8, 8, { blockSize: [4] as never })).toThrow(
      /\[queryRows, keys\]/,
    );
    const m = createBlockMask(causalMask, 1, 1, 8, 8, { blockSize: 4 });
    expect(() => m.blockKind(0, 0, 2, 0)).toThrow(/outside \[1, 1, 2, 2\]/);
    expect(() => new BlockMask(causalMask, 1, 1, 8, 8, 4, 4, new Uint8Array(3))).toThrow(
      /kinds must be a Uint8Array of 1×1×2×2/,
    );
  });

  it('a key a −Infinity bias blocks stays blocked under a score mod, on every path (forward and gradients)', () => {
    const bias = new Tensor(
      Float32Array.from({ length: 16 }, (_, n) =>
        n % 4 <= Math.floor(n / 4) ? 0 : Number.NEGATIVE_INFINITY,
      ),
      [4, 4],
    );
    const run = (dtype: 'f32' | 'f64') => {
      const xs = [61, 62, 63].map((seed) => {
        const t = Tensor.randn([1, 4, 2], { seed });
        return parameter(dtype === 'f32' ? t.data.slice() : Float64Array.from(t.data), [1, 4, 2]);
      });
      const { out } = attention(xs[0], xs[1], xs[2], {
        numHeads: 1,
        bias,
        flex: { scoreMod: softcapScore(1) },
      });
      backward(project(out, 64));
      return { out: out.data, dv: xs[2].grad! };
    };
    const a = run('f32'); // WASM forward, JS backward
    const b = run('f64'); // JS kernels
    for (let e = 0; e < 2; e++)
      expect(b.out[e]).toBeCloseTo(Tensor.randn([1, 4, 2], { seed: 63 }).data[e], 6); // row 0 sees key 0 only
    for (let i = 0; i < a.out.length; i++) expect(Math.abs(a.out[i] - b.out[i])).toBeLessThan(1e-5);
    for (let i = 0; i < a.dv.length; i++) expect(Math.abs(a.dv[i] - b.dv[i])).toBeLessThan(1e-5);
  });

  it("a JS mod on kernel 'wasm' says why, and 'auto' serves it on the JS kernel", () => {
    if (!kernelSupport().wasm) return;
    const mine: MaskMod = (_b, _h, qi, kv) => qi >= kv;
    expect(() => flexAttention(q, k, v, { maskMod: mine, kernel: 'wasm' })).toThrow(
      /flexAttention: kernel 'wasm' cannot serve this call: maskMod 'mine' is a JS function/,
    );
    const got = flexAttention(q, k, v, { maskMod: mine });
    expect(maxDiff(got, scaledDotProductAttention(q, k, v, { causal: 'top-left' }))).toBeLessThan(TOL);
  });
});

/** Σ out ∘ R for a fixed random R (a scalar loss reaching every output element). */
function project(out: Var, seed: number): Var {
  const R = Float64Array.from(Tensor.randn([out.size], { seed }).data);
  let s = 0;
  for (let i = 0; i < out.size; i++) s += out.data[i] * R[i];
  const y = opResult(Float64Array.of(s), [], [out], () => {
    const d = out.gradBuffer();
    for (let i = 0; i < out.size; i++) d[i] += y.grad![0] * R[i];
  });
  return y;
}

describe('gradients through flex mods (autograd attention op with flex)', () => {
  const B = 1;
  const L = 7;
  const H = 2;
  const E = 3;
  const make = (seed: number) =>
    parameter(Float64Array.from(Tensor.randn([B, L, H * E], { seed }).data), [B, L, H * E]);
  const cases: [string, Parameters<typeof attention>[3]['flex']][] = [
    ['causal + alibi', { maskMod: causalMask, scoreMod: alibiScore(H) }],
    ['softcap', { scoreMod: softcapScore(0.7) }],
    [
      'relative bias per head + document',
      {
        scoreMod: relativeBiasScore([
          [1, 0, -1],
          [0.5, 0, 2],
        ]),
        maskMod: documentMask([0, 0, 0, 1, 1, 2, 2]),
      },
    ],
    [
      'a JS score mod (central differences)',
      { scoreMod: (s: number, _b: number, h: number) => s * s * 0.3 + h * s },
    ],
  ];
  for (const [name, flex] of cases) {
    it(`${name}: float64 gradients match finite differences`, () => {
      const inputs = [make(1), make(2), make(3)];
      const f = () => project(attention(inputs[0], inputs[1], inputs[2], { numHeads: H, flex }).out, 7);
      backward(f());
      const step = 1e-6;
      for (const x of inputs) {
        const g = x.grad!;
        for (let i = 0; i < x.size; i++) {
          const keep = x.data[i];
          x.data[i] = keep + step;
          const up = f().data[0];
          x.data[i] = keep - step;
          const down = f().data[0];
          x.data[i] = keep;
          const numeric = (up - down) / (2 * step);
          expect(Math.abs(g[i] - numeric), `${name} element ${i}`).toBeLessThan(
            1e-4 + 1e-3 * Math.abs(numeric),
          );
        }
      }
    });
  }

  it('float32 training path (tiled backward) agrees with the float64 reference', () => {
    const flex = {
      maskMod: andMasks(causalMask, documentMask(Int32Array.from({ length: 40 }, (_, i) => i >> 4))),
      scoreMod: softcapScore(2),
    };
    const grads = (dtype: 'f32' | 'f64') => {
      const xs = [1, 2, 3].map((seed) => {
        const t = Tensor.randn([2, 40, 4 * 8], { seed });
        return parameter(dtype === 'f32' ? t.data.slice() : Float64Array.from(t.data), [2, 40, 32]);
      });
      backward(project(attention(xs[0], xs[1], xs[2], { numHeads: 4, flex }).out, 9));
      return xs.map((x) => x.grad!);
    };
    const a = grads('f32');
    const b = grads('f64');
    for (let n = 0; n < 3; n++)
      for (let i = 0; i < a[n].length; i++) expect(Math.abs(a[n][i] - b[n][i])).toBeLessThan(2e-4);
  });
});
