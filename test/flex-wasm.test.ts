// Flex attention on the WASM kernel: every built-in mod, block size, shape and hostile input gives what
// the reference kernel gives (output and lse), the kernel evaluates mask and score programs exactly as
// their JS twins (runMaskProgram, runScoreProgram), and 'auto' sends built-in mods to WASM, JS mods to
// the JS tiled kernel.

import { describe, expect, it } from 'vitest';
import { planFlex } from '../src/flex/flex.js';
import {
  alibiScore,
  andMasks,
  BlockMask,
  causalMask,
  compileMask,
  createBlockMask,
  documentMask,
  type FlexAttentionOptions,
  flexAttention,
  type MaskMod,
  noopMask,
  orMasks,
  prefixLmMask,
  relativeBiasScore,
  type ScoreMod,
  slidingWindowMask,
  softcapScore,
  Tensor,
} from '../src/index.js';
import {
  type FlexBlocks,
  type FlexMaskProgram,
  type FlexScoreProgram,
  MaskOp,
  runMaskProgram,
  runScoreProgram,
  ScoreOp,
  UNBOUNDED,
} from '../src/kernels/flex.js';
import { referenceKernel } from '../src/kernels/reference.js';
import { chooseKernel, kernelSupport } from '../src/kernels/registry.js';
import { type AttentionProblem, forwardAll } from '../src/kernels/types.js';
import { wasmKernel } from '../src/kernels/wasm.js';
import { closeFailure, expectAllClose } from './helpers.js';

const TOL = { atol: 1e-5, rtol: 1e-4 };
const HALF_TOL = { atol: 1e-3, rtol: 1e-3 }; // float16 outputs: one rounding of a half apart at most
const hasWasm = !!kernelSupport().wasm;
const wasmIt = hasWasm ? it : it.skip;

type Input = Tensor<'float32'> | Tensor<'float16'>;

function qkv(B: number, Hq: number, Hkv: number, L: number, S: number, E: number, seed: number, Ev = E) {
  return {
    q: Tensor.randn([B, Hq, L, E], { seed }),
    k: Tensor.randn([B, Hkv, S, E], { seed: seed + 1 }),
    v: Tensor.randn([B, Hkv, S, Ev], { seed: seed + 2 }),
  };
}

const asFloat32 = (t: Tensor<'float32'> | Tensor<'float16'>): Tensor<'float32'> =>
  t.dtype === 'float16' ? (t as Tensor<'float16'>).to('float32') : (t as Tensor<'float32'>);

/** Why flexAttention on 'wasm' differs from 'reference' (output and lse), or [] when it does not. */
function differences(
  q: Input,
  k: Input,
  v: Input,
  options: Omit<FlexAttentionOptions, 'kernel' | 'returnLse'>,
  label: string,
  tol = TOL,
): string[] {
  const got = flexAttention(q, k, v, { ...options, kernel: 'wasm', returnLse: true });
  const want = flexAttention(q, k, v, { ...options, kernel: 'reference', returnLse: true });
  const failures: string[] = [];
  const out = closeFailure(`${label}: output`, asFloat32(got.output).data, asFloat32(want.output).data, tol);
  if (out) failures.push(out);
  const lse = closeFailure(`${label}: lse`, got.lse.data, want.lse.data, TOL);
  if (lse) failures.push(lse);
  return failures;
}

const unsortedIds = (n: number) => Int32Array.from({ length: n }, (_, i) => Math.floor(i / 23) % 5);
const sortedIds = (n: number) => Int32Array.from({ length: n }, (_, i) => Math.floor(i / 61));

function builtInMasks(n: number): [string, MaskMod][] {
  return [
    ['causalMask', causalMask],
    ['slidingWindowMask(1)', slidingWindowMask(1)],
    ['slidingWindowMask(7)', slidingWindowMask(7)],
    ['slidingWindowMask(200)', slidingWindowMask(200)],
    ['prefixLmMask(0)', prefixLmMask(0)],
    ['prefixLmMask(20)', prefixLmMask(20)],
    ['documentMask (sorted ids)', documentMask(sortedIds(n))],
    ['documentMask (unsorted ids)', documentMask(unsortedIds(n))],
    ['causal ∧ document', andMasks(causalMask, documentMask(unsortedIds(n)))],
    ['document ∧ window(50)', andMasks(documentMask(sortedIds(n)), slidingWindowMask(50))],
    ['causal ∧ window(10) (two DIFFs)', andMasks(causalMask, slidingWindowMask(10))],
    ['prefix(5) ∨ window(3)', orMasks(prefixLmMask(5), slidingWindowMask(3))],
    ['prefix(0) ∨ window(3)', orMasks(prefixLmMask(0), slidingWindowMask(3))],
    [
      '(prefix(10) ∨ causal) ∧ document',
      andMasks(orMasks(prefixLmMask(10), causalMask), documentMask(sortedIds(n))),
    ],
    ['document ∨ causal', orMasks(documentMask(unsortedIds(n)), causalMask)],
    ['andMasks() (no mods)', andMasks()],
    ['noopMask', noopMask],
  ];
}

function builtInScores(H: number): [string, ScoreMod][] {
  return [
    [`alibiScore(${H})`, alibiScore(H)],
    ['softcapScore(2)', softcapScore(2)],
    ['softcapScore(30)', softcapScore(30)],
    ['relativeBiasScore (1-D)', relativeBiasScore(Array.from({ length: 9 }, (_, i) => Math.sin(i) * 2))],
    [
      'relativeBiasScore (per head)',
      relativeBiasScore(
        Array.from({ length: H }, (_, h) => Array.from({ length: 13 }, (_, i) => h - i * 0.3)),
      ),
    ],
    [
      'relativeBiasScore with −∞ (far keys before the query blocked)',
      relativeBiasScore([Number.NEGATIVE_INFINITY, 0.5, 0, -0.5, 1]),
    ],
  ];
}

describe.skipIf(!hasWasm)('flexAttention on the WASM kernel equals the reference', () => {
  const shapes: [number, number, number, number, number][] = [
    [2, 4, 300, 300, 16], // B, H, L, S, E
    [1, 2, 37, 150, 8], // L < S
    [1, 3, 150, 40, 12], // L > S: rows past the keys
    [1, 2, 530, 700, 64], // past one K^T panel (512 keys) and one query chunk (256 rows at E = 64)
  ];
  for (const [B, H, L, S, E] of shapes) {
    const shape = `[${B},${H},${L},${S},${E}]`;
    it(`every built-in mask mod on ${shape}`, () => {
      const { q, k, v } = qkv(B, H, H, L, S, E, L + S);
      const failures = builtInMasks(Math.max(L, S)).flatMap(([name, maskMod]) =>
        differences(q, k, v, { maskMod }, name),
      );
      expect(failures).toEqual([]);
    });
    it(`every built-in score mod, alone and with masks, on ${shape}`, () => {
      const { q, k, v } = qkv(B, H, H, L, S, E, L + S + 1);
      const masks = builtInMasks(Math.max(L, S)).filter((_, i) => i % 3 === 0);
      const failures = builtInScores(H).flatMap(([name, scoreMod]) => [
        ...differences(q, k, v, { scoreMod }, name),
        ...masks.flatMap(([maskName, maskMod]) =>
          differences(q, k, v, { scoreMod, maskMod }, `${name} with ${maskName}`),
        ),
      ]);
      expect(failures).toEqual([]);
    });
  }

  it('grouped-query heads (enableGqa), ranks 2, 3 and 4, and Ev ≠ E', () => {
    const { q, k, v } = qkv(2, 6, 2, 70, 90, 16, 3, 12);
    const failures = [
      ...differences(q, k, v, { maskMod: causalMask, enableGqa: true }, 'GQA causal'),
      ...differences(
        q,
        k,
        v,
        { maskMod: documentMask(unsortedIds(90)), scoreMod: alibiScore(6), enableGqa: true },
        'GQA doc + alibi',
      ),
      ...differences(
        q,
        k,
        v,
        { scoreMod: relativeBiasScore(Array.from({ length: 6 }, (_, h) => [h, 0, -h])), enableGqa: true },
        'GQA per-head bias',
      ),
    ];
    const q3 = new Tensor(q.data.slice(0, 2 * 70 * 16), [2, 70, 16]);
    const k3 = new Tensor(k.data.slice(0, 2 * 90 * 16), [2, 90, 16]);
    const v3 = new Tensor(v.data.slice(0, 2 * 90 * 12), [2, 90, 12]);
    failures.push(
      ...differences(q3, k3, v3, { maskMod: slidingWindowMask(9), scoreMod: alibiScore(1) }, 'rank 3'),
    );
    const q2 = new Tensor(q.data.slice(0, 70 * 16), [70, 16]);
    const k2 = new Tensor(k.data.slice(0, 90 * 16), [90, 16]);
    const v2 = new Tensor(v.data.slice(0, 90 * 12), [90, 12]);
    failures.push(
      ...differences(q2, k2, v2, { maskMod: prefixLmMask(11), scoreMod: softcapScore(1) }, 'rank 2'),
    );
    const r2 = flexAttention(q2, k2, v2, { maskMod: causalMask, kernel: 'wasm', returnLse: true });
    expect(r2.output.shape).toEqual([70, 12]);
    expect(r2.lse.shape).toEqual([70]);
    expect(failures).toEqual([]);
  });

  it('block sizes 16, 32, 100, 128 and [64, 32], [7, 300] (not dividing the 512-key panels)', () => {
    const [L, S] = [333, 777];
    const { q, k, v } = qkv(1, 2, 2, L, S, 16, 5);
    const ids = unsortedIds(S);
    const mods: [string, MaskMod][] = [
      ['causalMask', causalMask],
      ['causal ∧ document', andMasks(causalMask, documentMask(ids))],
      ['prefix(40) ∨ window(30)', orMasks(prefixLmMask(40), slidingWindowMask(30))],
      ['documentMask', documentMask(sortedIds(S))],
    ];
    const failures: string[] = [];
    for (const size of [16, 32, 100, 128, [64, 32], [7, 300]] as (number | [number, number])[]) {
      for (const [name, mod] of mods) {
        const blockMask = createBlockMask(mod, 1, 1, L, S, { blockSize: size });
        failures.push(...differences(q, k, v, { blockMask }, `${name}, blockSize ${size}`));
        failures.push(
          ...differences(
            q,
            k,
            v,
            { blockMask, scoreMod: alibiScore(2) },
            `${name} + alibi, blockSize ${size}`,
          ),
        );
      }
    }
    expect(failures).toEqual([]);
  });

  it('block masks broadcast over B and H, and per-(b, h) tile kinds (a full tile skips the mod)', () => {
    const [B, H, L, S] = [2, 3, 96, 80];
    const { q, k, v } = qkv(B, H, H, L, S, 8, 7);
    const failures: string[] = [];
    // createBlockMask with B and H: the same tiles for every (b, h), broadcast or not.
    for (const [b, h] of [
      [1, 1],
      [2, 1],
      [1, 3],
      [2, 3],
    ]) {
      const blockMask = createBlockMask(andMasks(causalMask, documentMask(unsortedIds(96))), b, h, L, S, {
        blockSize: 16,
      });
      failures.push(...differences(q, k, v, { blockMask }, `createBlockMask B=${b} H=${h}`));
    }
    // Tile kinds that differ per (b, h) and disagree with the mod: seeded random kinds.
    let seed = 12345;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (const [b, h] of [
      [2, 3],
      [1, 3],
      [2, 1],
    ]) {
      for (const [qBlock, kvBlock] of [
        [16, 16],
        [12, 20],
        [32, 8],
      ]) {
        const nq = Math.ceil(L / qBlock);
        const nk = Math.ceil(S / kvBlock);
        const kinds = Uint8Array.from({ length: b * h * nq * nk }, () => Math.floor(rand() * 3));
        for (const mod of [causalMask, slidingWindowMask(20), documentMask(unsortedIds(96))]) {
          const blockMask = new BlockMask(mod, b, h, L, S, qBlock, kvBlock, kinds);
          failures.push(
            ...differences(
              q,
              k,
              v,
              { blockMask },
              `random kinds B=${b} H=${h} ${qBlock}×${kvBlock} ${mod.name}`,
            ),
            ...differences(
              q,
              k,
              v,
              { blockMask, scoreMod: softcapScore(3) },
              `random kinds + softcap B=${b} H=${h} ${qBlock}×${kvBlock} ${mod.name}`,
            ),
          );
        }
      }
    }
    expect(failures).toEqual([]);
  });

  it('rows that see no key are exactly zero with lse −Infinity (mask mods and a −∞ score mod)', () => {
    const [L, S] = [90, 40];
    const { q, k, v } = qkv(1, 2, 2, L, S, 8, 9);
    // Queries 40… are in documents no key is in; a window of 5 leaves rows ≥ 44 without keys; prefix 0 ∨
    // window too; a relative bias of −∞ everywhere blocks every key.
    const ids = Int32Array.from({ length: L }, (_, i) => (i < 40 ? i % 3 : 3 + (i % 2)));
    const cases: [string, FlexAttentionOptions, (i: number) => boolean][] = [
      ['document (no key in the query’s document)', { maskMod: documentMask(ids) }, (i) => i >= 40],
      ['causal ∧ document', { maskMod: andMasks(causalMask, documentMask(ids)) }, (i) => i >= 40],
      [
        'document ∧ window(5)',
        { maskMod: andMasks(documentMask(ids), slidingWindowMask(5)) },
        (i) => i >= 40,
      ],
      // prefixLmMask(0) is causal (kv < 0 ∨ kv ≤ q): every row sees keys until the documents cut them
      ['prefix(0) ∨ window(5)', { maskMod: orMasks(prefixLmMask(0), slidingWindowMask(5)) }, () => false],
      [
        '(prefix(0) ∨ window(5)) ∧ document',
        { maskMod: andMasks(orMasks(prefixLmMask(0), slidingWindowMask(5)), documentMask(ids)) },
        (i) => i >= 40,
      ],
      ['window(5) + alibi', { maskMod: slidingWindowMask(5), scoreMod: alibiScore(2) }, (i) => i >= 44],
      ['relative bias −∞', { scoreMod: relativeBiasScore([Number.NEGATIVE_INFINITY]) }, () => true],
      [
        'document + softcap',
        { maskMod: documentMask(ids), scoreMod: softcapScore(1), blockMask: undefined },
        (i) => i >= 40,
      ],
    ];
    const failures: string[] = [];
    for (const [name, options, blocked] of cases) {
      failures.push(...differences(q, k, v, options, name));
      const { output, lse } = flexAttention(q, k, v, { ...options, kernel: 'wasm', returnLse: true });
      for (let h = 0; h < 2; h++) {
        for (let i = 0; i < L; i++) {
          const z = lse.data[h * L + i];
          const row = output.data.subarray((h * L + i) * 8, (h * L + i + 1) * 8);
          if (blocked(i)) {
            if (z !== Number.NEGATIVE_INFINITY || row.some((x) => !Object.is(x, 0))) {
              failures.push(`${name}: row ${i} of head ${h} is not blocked (lse ${z}, [${[...row]}])`);
            }
          } else if (!Number.isFinite(z)) failures.push(`${name}: row ${i} of head ${h} has lse ${z}`);
        }
      }
    }
    expect(failures).toEqual([]);
  });

  it('float16 inputs (read as halves by the kernel)', () => {
    const { q, k, v } = qkv(1, 4, 2, 150, 170, 16, 11);
    const [qh, kh, vh] = [q.to('float16'), k.to('float16'), v.to('float16')];
    const failures = [
      ...differences(qh, kh, vh, { maskMod: causalMask, enableGqa: true }, 'half causal', HALF_TOL),
      ...differences(
        qh,
        kh,
        vh,
        {
          maskMod: andMasks(causalMask, documentMask(unsortedIds(170))),
          scoreMod: alibiScore(4),
          enableGqa: true,
        },
        'half causal ∧ document + alibi',
        HALF_TOL,
      ),
      ...differences(qh, kh, vh, { scoreMod: softcapScore(5), enableGqa: true }, 'half softcap', HALF_TOL),
    ];
    expect(failures).toEqual([]);
  });

  it('NaN and ±Infinity in q, k and v give exactly what the reference gives', () => {
    const [H, L, S, E] = [2, 70, 60, 8];
    const failures: string[] = [];
    const plants: [string, (t: { q: Tensor; k: Tensor; v: Tensor }) => void][] = [
      ['NaN in a query', ({ q }) => (q.data[(1 * L + 33) * E + 2] = Number.NaN)],
      ['NaN in a key', ({ k }) => (k.data[(0 * S + 17) * E + 5] = Number.NaN)],
      ['+∞ in a query', ({ q }) => (q.data[(0 * L + 50) * E + 1] = Number.POSITIVE_INFINITY)],
      ['−∞ in a key', ({ k }) => (k.data[(1 * S + 3) * E] = Number.NEGATIVE_INFINITY)],
      ['+∞ in a value', ({ v }) => (v.data[(0 * S + 40) * E + 7] = Number.POSITIVE_INFINITY)],
      ['NaN in a value', ({ v }) => (v.data[(1 * S + 9) * E + 4] = Number.NaN)],
    ];
    const ids = Int32Array.from({ length: L }, (_, i) => Math.floor(i / 20));
    const options: [string, FlexAttentionOptions][] = [
      ['causal', { maskMod: causalMask }],
      ['document', { maskMod: documentMask(ids) }],
      ['window(4)', { maskMod: slidingWindowMask(4) }],
      ['alibi', { scoreMod: alibiScore(H) }],
      ['softcap', { scoreMod: softcapScore(2), maskMod: causalMask }],
      ['relative bias', { scoreMod: relativeBiasScore([1, -1, 0.5]), maskMod: documentMask(ids) }],
      [
        'block 16, causal ∧ document',
        {
          blockMask: createBlockMask(andMasks(causalMask, documentMask(ids)), 1, 1, L, S, { blockSize: 16 }),
        },
      ],
    ];
    for (const [plantName, plant] of plants) {
      const t = qkv(1, H, H, L, S, E, 13);
      plant(t);
      for (const [name, o] of options)
        failures.push(...differences(t.q, t.k, t.v, o, `${plantName}, ${name}`));
    }
    expect(failures).toEqual([]);
  });

  it('huge scores (q × 1e4, 1e20, 1e38) are recomputed where float32 cannot be trusted', () => {
    const [H, L, S, E] = [2, 80, 90, 16];
    const failures: string[] = [];
    // At 1e38 (q clipped to ±3, so it stays finite) float32 dot products overflow to ±∞: rows whose every
    // visible score is −∞ in float32 (row 0 of a causal mask, one key, half the time) are not blocked.
    for (const factor of [1e4, 1e20, 1e38]) {
      const t = qkv(1, H, H, L, S, E, 17);
      const q = new Tensor(
        t.q.data.map((x) => Math.max(-3, Math.min(3, x)) * factor),
        t.q.shape,
      );
      for (const [name, o] of [
        ['none', {}],
        ['causal', { maskMod: causalMask }],
        ['document', { maskMod: documentMask(unsortedIds(S)) }],
        ['alibi', { scoreMod: alibiScore(H) }],
        ['softcap(30)', { scoreMod: softcapScore(30), maskMod: slidingWindowMask(20) }],
        ['relative bias', { scoreMod: relativeBiasScore([3, 1, 0, -1, -3]) }],
      ] as [string, FlexAttentionOptions][]) {
        failures.push(...differences(q, t.k, t.v, o, `q × ${factor}, ${name}`));
      }
    }
    expect(failures).toEqual([]);
  });

  it('a row whose every score overflows float32 to −∞ is recomputed, not taken for a blocked row', () => {
    const [H, L, S, E] = [2, 40, 50, 16];
    const t = qkv(1, H, H, L, S, E, 31);
    // Keys all positive, query row 3 of each head hugely negative: its dot products overflow to −∞ in
    // float32 (not in the reference's float64), on every kind of tile.
    const k = new Tensor(
      t.k.data.map((x) => Math.abs(x) + 0.5),
      t.k.shape,
    );
    const q = new Tensor(Float32Array.from(t.q.data), t.q.shape);
    for (let h = 0; h < H; h++) q.data.fill(-3e38, (h * L + 3) * E, (h * L + 4) * E);
    const failures: string[] = [];
    for (const [name, o] of [
      ['no mod (one full tile)', {}],
      ['noopMask (full tiles)', { maskMod: noopMask }],
      ['causalMask (band-only partial tiles)', { maskMod: causalMask }],
      [
        'causal, blocks of 2 (full tiles before the diagonal)',
        { blockMask: createBlockMask(causalMask, 1, 1, L, S, { blockSize: 2 }) },
      ],
      ['documentMask (mask program)', { maskMod: documentMask(sortedIds(S)) }],
      ['alibi (score program)', { scoreMod: alibiScore(H) }],
    ] as [string, FlexAttentionOptions][]) {
      failures.push(...differences(q, k, t.v, o, name));
      // (its lse, ≈ −1e39, is −∞ in float32 for both kernels; its output is not zeros)
      const out = flexAttention(q, k, t.v, { ...o, kernel: 'wasm', returnLse: false });
      if (out.data.subarray(3 * E, 4 * E).every((x) => x === 0))
        failures.push(`${name}: row 3 came out blocked`);
    }
    expect(failures).toEqual([]);
  });

  it('long S streams K and V (S = 20000 keys at E = 64: more than the 8 MB copy budget)', () => {
    const [L, S, E] = [40, 20000, 64];
    const { q, k, v } = qkv(1, 2, 1, L, S, E, 19);
    // Queries' documents at the start and at the end of the keys (the middle chunk is never needed).
    const ids = Int32Array.from({ length: S }, (_, i) => (i < L || i >= 19000 ? i % 3 : 7));
    const failures: string[] = [];
    for (const [name, o] of [
      ['noopMask', { maskMod: noopMask }],
      ['documentMask', { maskMod: documentMask(ids) }],
      ['prefix(300) ∨ document', { maskMod: orMasks(prefixLmMask(300), documentMask(ids)) }],
      ['softcap', { scoreMod: softcapScore(4) }],
      [
        'document, blocks [16, 100]',
        { blockMask: createBlockMask(documentMask(ids), 1, 1, L, S, { blockSize: [16, 100] }) },
      ],
    ] as [string, FlexAttentionOptions][]) {
      failures.push(...differences(q, k, v, { ...o, enableGqa: true }, `streamed ${name}`));
    }
    // ALiBi without a causal mask favours keys ahead: +0.0625·19999 ≈ 1250 at the far end, so rows'
    // scores are ≈ 1800 in log2 units, where float32 rounds them by ~1e-4 (the kernel trusts float32
    // up to 4096: ≤ 1.7e-4 relative; scaledDotProductAttention with the same dense bias is as far off).
    failures.push(
      ...differences(
        q,
        k,
        v,
        { maskMod: documentMask(ids), scoreMod: alibiScore(2), enableGqa: true },
        'streamed document + alibi',
        { atol: 1e-4, rtol: 1e-4 },
      ),
    );
    expect(failures).toEqual([]);
  });
});

// ——— Programs: the WASM interpreter against runMaskProgram / runScoreProgram ———

/** A flex problem whose mods are the JS twins of the given programs (what the reference kernel calls). */
function programProblem(
  base: AttentionProblem,
  mask: FlexMaskProgram | undefined,
  score: FlexScoreProgram | undefined,
  blocks?: FlexBlocks,
): AttentionProblem {
  return {
    ...base,
    flex: {
      mask: mask && ((_b, _h, i, j) => runMaskProgram(mask, i, j)),
      score: score && ((s, _b, h, i, j) => runScoreProgram(score, s, h, i, j)),
      maskProgram: mask,
      scoreProgram: score,
      blocks,
      maskName: 'program',
      scoreName: 'program',
    },
  };
}

function runBoth(p: AttentionProblem): { failures: string[] } {
  const n = p.B * p.Hq * p.L;
  const got = { out: new Float32Array(n * p.Ev), lse: new Float32Array(n) };
  const want = { out: new Float32Array(n * p.Ev), lse: new Float32Array(n) };
  expect(wasmKernel.supports(p, got)).toBe(true);
  forwardAll(wasmKernel, p, got);
  forwardAll(referenceKernel, p, want);
  const failures = [
    closeFailure('output', got.out, want.out, TOL),
    closeFailure('lse', got.lse, want.lse, TOL),
  ];
  return { failures: failures.filter((x): x is string => x !== undefined) };
}

describe.skipIf(!hasWasm)('the WASM kernel evaluates programs as runMaskProgram and runScoreProgram', () => {
  const [B, H, L, S, E] = [1, 3, 75, 110, 8];
  const { q, k, v } = qkv(B, H, H, L, S, E, 23);
  const base = planFlex('test', q, k, v, {}).problem;
  base.flex = undefined;

  it('random mask programs (every opcode, nested and/or), on partial tiles everywhere and on block masks', () => {
    let seed = 99;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return Math.floor((seed / 2 ** 31) * n);
    };
    const ints = Int32Array.from({ length: 2 * S }, (_, i) => (i < S ? i % 4 : Math.floor((i - S) / 30)));
    const leaf = (): number[] => {
      switch (rand(4)) {
        case 0:
          return [MaskOp.TRUE, 0, 0];
        case 1: {
          const a = rand(3) === 0 ? -UNBOUNDED : rand(60) - 40;
          const b = rand(3) === 0 ? UNBOUNDED : a + rand(50);
          return [MaskOp.DIFF, a, b];
        }
        case 2:
          return [MaskOp.KV_BELOW, rand(S + 20), 0];
        default:
          return [MaskOp.SAME_DOC, rand(2) * S, S];
      }
    };
    const tree = (depth: number): number[] =>
      depth === 0 || rand(3) === 0
        ? leaf()
        : [...tree(depth - 1), ...tree(depth - 1), rand(2) === 0 ? MaskOp.AND : MaskOp.OR, 0, 0];
    const failures: string[] = [];
    for (let x = 0; x < 60; x++) {
      const prog = { ops: Int32Array.from(tree(4)), ints };
      const label = `program [${[...prog.ops]}]`;
      // No block mask: every tile partial, so every (query, key) runs the program in WASM.
      failures.push(...runBoth(programProblem(base, prog, undefined)).failures.map((f) => `${label}: ${f}`));
      // Random tile kinds: full tiles skip it, empty ones are skipped.
      const [qBlock, kvBlock] = [8 + rand(30), 8 + rand(60)];
      const nq = Math.ceil(L / qBlock);
      const nk = Math.ceil(S / kvBlock);
      const blocks: FlexBlocks = {
        qBlock,
        kvBlock,
        nq,
        nk,
        kinds: Uint8Array.from({ length: H * nq * nk }, () => (rand(4) === 0 ? 0 : rand(5) === 0 ? 2 : 1)),
        sb: 0,
        sh: nq * nk,
      };
      const withBlocks = runBoth(programProblem(base, prog, undefined, blocks)).failures;
      failures.push(...withBlocks.map((f) => `${label}, blocks ${qBlock}×${kvBlock}: ${f}`));
    }
    expect(failures).toEqual([]);
  });

  it('score programs of several instructions (alibi, softcap, relative bias, in any order)', () => {
    const floats = Float32Array.from([
      0.5,
      0.25,
      0.125,
      2.5,
      ...Array.from({ length: 3 * 7 }, (_, i) => Math.cos(i)),
    ]);
    const alibi = [ScoreOp.ALIBI, 0, 3, 0];
    const cap = [ScoreOp.SOFTCAP, 3, 0, 0];
    const relShared = [ScoreOp.REL_BIAS, 4, 3, 1];
    const relPerHead = [ScoreOp.REL_BIAS, 4, 3, 3];
    const causal = { ops: Int32Array.of(MaskOp.DIFF, 0, UNBOUNDED), ints: new Int32Array(0) };
    const failures: string[] = [];
    for (const ops of [
      [...alibi, ...cap],
      [...cap, ...alibi],
      [...relShared, ...cap, ...relPerHead],
      [...alibi, ...relPerHead, ...alibi],
      [...cap, ...cap],
    ]) {
      const prog = { ops: Int32Array.from(ops), floats };
      for (const mask of [undefined, causal]) {
        const r = runBoth(programProblem(base, mask, prog));
        failures.push(...r.failures.map((f) => `score [${ops}] ${mask ? 'causal' : ''}: ${f}`));
      }
    }
    expect(failures).toEqual([]);
  });

  it('refuses programs it cannot run, with a reason', () => {
    const bad = { ops: Int32Array.of(MaskOp.AND, 0, 0), ints: new Int32Array(0) };
    expect(wasmKernel.supports(programProblem(base, bad, undefined), {})).toMatch(/pops an empty stack/);
    const unknown = { ops: Int32Array.of(9, 0, 0), ints: new Int32Array(0) };
    expect(wasmKernel.supports(programProblem(base, unknown, undefined), {})).toMatch(/unknown opcode 9/);
    const shortIds = { ops: Int32Array.of(MaskOp.SAME_DOC, 0, 10), ints: new Int32Array(10) };
    expect(wasmKernel.supports(programProblem(base, shortIds, undefined), {})).toMatch(/document ids/);
    const past = { ops: Int32Array.of(ScoreOp.ALIBI, 0, 3, 0), floats: new Float32Array(2) };
    expect(wasmKernel.supports(programProblem(base, undefined, past), {})).toMatch(/reads past/);
  });
});

describe('kernel choice for flex calls', () => {
  const { q, k, v } = qkv(1, 2, 2, 16, 16, 8, 29);
  const outputs = { out: new Float32Array(2 * 16 * 8) };
  const pick = (options: FlexAttentionOptions) =>
    chooseKernel('flexAttention', 'auto', planFlex('flexAttention', q, k, v, options).problem, outputs).name;

  wasmIt("'auto' runs built-in mods on the WASM kernel and JS mods on the JS tiled kernel", () => {
    expect(pick({ maskMod: causalMask })).toBe('wasm');
    expect(
      pick({ maskMod: andMasks(causalMask, documentMask(unsortedIds(16))), scoreMod: alibiScore(2) }),
    ).toBe('wasm');
    expect(pick({ blockMask: createBlockMask(slidingWindowMask(3), 1, 2, 16, 16, { blockSize: 4 }) })).toBe(
      'wasm',
    );
    expect(pick({ scoreMod: softcapScore(5) })).toBe('wasm');
    expect(pick({})).toBe('wasm');
    const mine: MaskMod = (_b, _h, qi, kv) => qi >= kv;
    const myScore: ScoreMod = (s) => s * 0.5;
    expect(pick({ maskMod: mine })).toBe('flash');
    expect(pick({ scoreMod: myScore })).toBe('flash');
    expect(pick({ maskMod: andMasks(causalMask, mine) })).toBe('flash');
    expect(pick({ maskMod: compileMask('q >= kv') })).toBe('flash');
    expect(pick({ maskMod: causalMask, scoreMod: myScore })).toBe('flash');
  });

  wasmIt("kernel 'wasm' refuses a JS mod, naming it", () => {
    const mine: MaskMod = (_b, _h, qi, kv) => qi >= kv;
    const myScore: ScoreMod = (s) => s * 0.5;
    expect(() => flexAttention(q, k, v, { maskMod: mine, kernel: 'wasm' })).toThrow(
      /kernel 'wasm' cannot serve this call: maskMod 'mine' is a JS function: it runs on the JS kernels \('flash', 'reference'\)/,
    );
    expect(() => flexAttention(q, k, v, { scoreMod: myScore, maskMod: causalMask, kernel: 'wasm' })).toThrow(
      /scoreMod 'myScore' is a JS function/,
    );
    // …and 'auto' serves them (on flash) with the same answer as the built-in on WASM
    const auto = flexAttention(q, k, v, { maskMod: mine });
    expectAllClose(auto, flexAttention(q, k, v, { maskMod: causalMask, kernel: 'wasm' }), TOL);
  });

  wasmIt('float64 calls stay off the WASM kernel', () => {
    const p = planFlex('flexAttention', q, k, v, { maskMod: causalMask }).problem;
    expect(wasmKernel.supports({ ...p, precision: 'float64' }, outputs)).toMatch(/float64/);
  });
});
