// The WASM kernel copies V into panels of 8 value columns (packV), so its P·V loop reads one contiguous
// stream per panel. These cases cover what that layout changes: value widths that fill no panel, one,
// several and a partial last one; keys that end mid-panel-row; K/V streamed in chunks, where the staged
// value rows (Ev per key) outgrow the staged key rows (E per key); float16 values widened into the stage;
// NaN/±∞ values (the masked accumulation reads the same panels); and flex attention, whose driver shares
// the layout. Every case is held to the reference kernel.

import { describe, expect, it } from 'vitest';
import {
  causalMask,
  documentMask,
  flexAttention,
  kernelSupport,
  scaledDotProductAttention,
  Tensor,
} from '../src/index.js';
import { closeFailure } from './helpers.js';

const TOL = { atol: 1e-5, rtol: 1e-4 };
const HALF_TOL = { atol: 1e-3, rtol: 1e-3 };
const hasWasm = !!kernelSupport().wasm;

type Input = Tensor<'float32'> | Tensor<'float16'>;

function qkv(Hq: number, Hkv: number, L: number, S: number, E: number, Ev: number, seed: number) {
  return {
    q: Tensor.randn([1, Hq, L, E], { seed }),
    k: Tensor.randn([1, Hkv, S, E], { seed: seed + 1 }),
    v: Tensor.randn([1, Hkv, S, Ev], { seed: seed + 2 }),
  };
}

const float32Of = (t: Input): Float32Array =>
  t.dtype === 'float16' ? (t as Tensor<'float16'>).to('float32').data : (t as Tensor<'float32'>).data;

/** Why SDPA on 'wasm' differs from 'reference' for these inputs and options, or '' when it does not. */
function sdpaDifference(
  q: Input,
  k: Input,
  v: Input,
  options: { causal?: boolean; mask?: Tensor },
  label: string,
  tol = TOL,
): string {
  const got = scaledDotProductAttention(q, k, v, { ...options, kernel: 'wasm' });
  const want = scaledDotProductAttention(q, k, v, { ...options, kernel: 'reference' });
  return closeFailure(label, float32Of(got), float32Of(want), tol) ?? '';
}

describe.skipIf(!hasWasm)('the WASM kernel reads V from 8-column panels', () => {
  it('every value width (0–3 panels, partial last panel) on key counts that end mid-row', () => {
    const failures: string[] = [];
    for (const Ev of [1, 3, 7, 8, 9, 17, 65, 129]) {
      for (const [L, S, E] of [
        [5, 1, 4],
        [9, 7, 5],
        [33, 513, 16], // past one attend call (512 keys)
        [12, 1031, 64],
      ]) {
        const { q, k, v } = qkv(2, 2, L, S, E, Ev, Ev * 1000 + S);
        const label = `Ev ${Ev}, L ${L}, S ${S}, E ${E}`;
        failures.push(sdpaDifference(q, k, v, {}, label));
        failures.push(sdpaDifference(q, k, v, { causal: true }, `${label}, causal`));
      }
    }
    expect(failures.filter(Boolean)).toEqual([]);
  });

  it('grouped-query heads (3 query heads a key head) share one copy of the panels', () => {
    const { q, k, v } = qkv(6, 2, 40, 300, 16, 20, 7);
    expect(sdpaDifference(q, k, v, { causal: true }, 'GQA')).toBe('');
  });

  it('NaN and ±∞ values behind a mask add nothing; visible ones reach the output as in the reference', () => {
    const failures: string[] = [];
    for (const Ev of [3, 8, 13, 40]) {
      const L = 20;
      const S = 45;
      const { q, k, v } = qkv(1, 1, L, S, 8, Ev, Ev);
      // Poison keys 2, 9 and 30 in different value columns; the mask blocks keys 2 and 30 for every row,
      // key 9 only for even rows.
      v.data[2 * Ev + (Ev - 1)] = Number.NaN;
      v.data[9 * Ev] = Number.POSITIVE_INFINITY;
      v.data[30 * Ev + Math.floor(Ev / 2)] = Number.NEGATIVE_INFINITY;
      const m = new Float32Array(L * S).fill(1);
      for (let i = 0; i < L; i++) {
        m[i * S + 2] = 0;
        m[i * S + 30] = 0;
        if (i % 2 === 0) m[i * S + 9] = 0;
      }
      const mask = new Tensor(m, [L, S]);
      const want = scaledDotProductAttention(q, k, v, { mask, kernel: 'reference' });
      // The reference itself: even rows finite, odd rows +∞ or NaN in column 0 only.
      expect(Number.isFinite(want.data[0])).toBe(true);
      expect(Number.isFinite(want.data[Ev])).toBe(false);
      failures.push(sdpaDifference(q, k, v, { mask }, `Ev ${Ev}, poisoned values`));
    }
    expect(failures.filter(Boolean)).toEqual([]);
  });

  // KV_BUDGET (8 MB) / 4 / (E + EvPad) keys per streamed chunk: at E = 1, Ev = 129 that is 15 307 keys,
  // so 16 000 keys take two chunks, and each chunk's staged values (129 floats a key) are 129 times its
  // staged keys.
  it('K/V streamed in chunks, values far wider than keys (float32 and float16)', () => {
    const { q, k, v } = qkv(1, 1, 6, 16000, 1, 129, 11);
    for (const x of [q, k]) for (let i = 0; i < x.data.length; i++) x.data[i] *= 4; // a peaked softmax
    expect(sdpaDifference(q, k, v, {}, 'float32')).toBe('');
    expect(sdpaDifference(q, k, v, { causal: true }, 'float32, causal (bottom-right)')).toBe('');
    const [qh, kh, vh] = [q, k, v].map((t) => t.to('float16'));
    expect(sdpaDifference(qh, kh, vh, {}, 'float16', HALF_TOL)).toBe('');
  });

  it('flex attention reads the same panels (whole and streamed K/V)', () => {
    const failures: string[] = [];
    const cases: [number, number, number, number][] = [
      [50, 70, 8, 19], // L, S, E, Ev
      [6, 16000, 1, 129], // streamed
    ];
    for (const [L, S, E, Ev] of cases) {
      const { q, k, v } = qkv(2, 2, L, S, E, Ev, L + Ev);
      const ids = Int32Array.from({ length: Math.max(L, S) }, (_, i) => Math.floor(i / 17) % 3);
      for (const [name, maskMod] of [
        ['causal', causalMask],
        ['document', documentMask(ids)],
      ] as const) {
        const got = flexAttention(q, k, v, { maskMod, kernel: 'wasm' });
        const want = flexAttention(q, k, v, { maskMod, kernel: 'reference' });
        failures.push(closeFailure(`flex ${name}, L ${L}, S ${S}, Ev ${Ev}`, got.data, want.data, TOL) ?? '');
      }
    }
    expect(failures.filter(Boolean)).toEqual([]);
  });
});
