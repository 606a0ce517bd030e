// The WASM backward (src/kernels/wasm-backward.ts) against the reference backward run in float64: odd
// sizes, both causal alignments, windows, broadcast masks and biases (with dbias), GQA, fully blocked rows,
// hostile inputs, float64 arrays, the registry's choice, training and the worker loop.
// One decision to know: the tolerance is float32's, 1e-5 + 1e-4·|x| (the conformance ring's for float32
// requests), and ordinary cases must run in WASM (a fallback to the JS kernel would pass unnoticed).

import { afterEach, describe, expect, it, vi } from 'vitest';
import { type AttentionOptions, planAttention } from '../src/attention/plan.js';
import { attention } from '../src/autograd/attention.js';
import { backward, parameter } from '../src/autograd/var.js';
import { Tensor } from '../src/index.js';
import { referenceBackward } from '../src/kernels/backward.js';
import { flashBackward } from '../src/kernels/backward-flash.js';
import { referenceKernel } from '../src/kernels/reference.js';
import { chooseBackward } from '../src/kernels/registry.js';
import { BufferLayout, readBack } from '../src/kernels/transfer.js';
import { type AttentionGrads, backwardAll, type Floats, forwardAll } from '../src/kernels/types.js';
import { probeWasm, wasmKernel } from '../src/kernels/wasm.js';
import { wasmBackward } from '../src/kernels/wasm-backward.js';
import { HEADER_BYTES } from '../src/threads/protocol.js';
import { handleMessage } from '../src/threads/worker-core.js';
import { closeFailure } from './helpers.js';
import { problemAt } from './rings/common.js';

const TOL = { atol: 1e-5, rtol: 1e-4 };

afterEach(() => vi.restoreAllMocks());

interface Case {
  shape: [B: number, Hq: number, Hkv: number, L: number, S: number, E: number, Ev: number];
  options?: AttentionOptions;
  seed?: number;
  /** Standard deviation of q (scores grow with it). */
  std?: number;
  /** Edits the float64 inputs before anything runs (hostile values). */
  edit?: (x: { q: Float32Array; k: Float32Array; v: Float32Array; dOut: Float32Array }) => void;
  /** Run on Float64Array q, k, v, dOut and out (a float32 request on float64 storage). */
  float64?: boolean;
}

/**
 * The WASM backward's gradients and the reference's for one call (the reference run at float64 on
 * float64 arrays, fed the reference forward's out and lse as the WASM backward is), and how many tasks
 * went to the JS flash backward.
 */
function run(c: Case): { got: AttentionGrads; want: AttentionGrads; fallbacks: number } {
  const [B, Hq, Hkv, L, S, E, Ev] = c.shape;
  const seed = c.seed ?? B * 1000 + L * 10 + S;
  const q = Tensor.randn([B, Hq, L, E], { seed, std: c.std ?? 1 });
  const k = Tensor.randn([B, Hkv, S, E], { seed: seed + 1 });
  const v = Tensor.randn([B, Hkv, S, Ev], { seed: seed + 2 });
  const dOut = Tensor.randn([B, Hq, L, Ev], { seed: seed + 3 }).data;
  c.edit?.({ q: q.data, k: k.data, v: v.data, dOut });
  const { problem } = planAttention('test', q, k, v, c.options ?? {});
  const p64 = problemAt(problem, 'float64');
  const n = B * Hq * L;
  const out = new Float64Array(n * Ev);
  const lse = new Float64Array(n);
  forwardAll(referenceKernel, p64, { out: out as unknown as Float32Array, lse });
  const grads = (Ctor: Float32ArrayConstructor | Float64ArrayConstructor): AttentionGrads => ({
    dq: new Ctor(q.size),
    dk: new Ctor(k.size),
    dv: new Ctor(v.size),
    dbias: problem.bias && new Ctor(problem.bias.data.length),
  });
  const want = grads(Float64Array);
  backwardAll(referenceBackward, p64, { dOut: Float64Array.from(dOut) }, want);

  const p = c.float64 ? { ...p64, precision: 'float32' as const } : problemAt(problem, 'float32');
  const as = (x: Floats) => (c.float64 ? Float64Array.from(x) : Float32Array.from(x));
  const got = grads(Float32Array);
  const spy = vi.spyOn(flashBackward, 'task');
  backwardAll(wasmBackward, p, { dOut: as(dOut), out: as(out), lse }, got);
  const fallbacks = spy.mock.calls.length;
  spy.mockRestore();
  return { got, want, fallbacks };
}

/** The failures of `got` against `want` (dq, dk, dv and dbias), labelled. */
function failures(label: string, { got, want }: { got: AttentionGrads; want: AttentionGrads }): string[] {
  const out: string[] = [];
  for (const name of ['dq', 'dk', 'dv', 'dbias'] as const) {
    const g = got[name];
    const w = want[name];
    if (!g || !w) continue;
    const failure = closeFailure(`${label} ${name}`, g, w, TOL);
    if (failure) out.push(failure);
  }
  return out;
}

/** Runs `c` and expects the reference's answer, computed in WASM (no task handed to the JS kernel). */
function expectWasmMatches(label: string, c: Case): void {
  const r = run(c);
  expect(failures(label, r)).toEqual([]);
  expect(r.fallbacks, `${label}: tasks run by the JS flash backward`).toBe(0);
}

const SIZES = [1, 3, 17, 65, 129];
const BANDS: AttentionOptions[] = [
  {},
  { causal: true },
  { causal: 'top-left' },
  { window: [5, 2] },
  { causal: 'bottom-right', window: [20, 0] },
];

describe.runIf(probeWasm())('the WASM backward equals the reference backward (float32 tolerance)', () => {
  it('on every L, S ∈ {1, 3, 17, 65, 129} with E, Ev and the band varied (25 calls)', () => {
    const bad: string[] = [];
    SIZES.forEach((L, a) => {
      SIZES.forEach((S, b) => {
        const E = SIZES[(a + b) % 5];
        const Ev = SIZES[(a + 2 * b + 1) % 5];
        const options = BANDS[(a + b) % 5];
        const label = `L=${L} S=${S} E=${E} Ev=${Ev} ${JSON.stringify(options)}`;
        const r = run({ shape: [1, 2, 2, L, S, E, Ev], options });
        bad.push(...failures(label, r));
        if (r.fallbacks) bad.push(`${label}: ${r.fallbacks} tasks ran on the JS kernel`);
      });
    });
    expect(bad).toEqual([]);
  });

  it('GQA (Hq = 4 over Hkv = 2, and over 1) with causal attention and a key-padding mask', () => {
    const mask = new Tensor(
      Float32Array.from({ length: 2 * 70 }, (_, j) => (j % 7 === 3 ? 0 : 1)),
      [2, 1, 1, 70],
    );
    for (const Hkv of [2, 1]) {
      expectWasmMatches(`Hkv=${Hkv}`, { shape: [2, 4, Hkv, 67, 70, 16, 24], options: { causal: true } });
      expectWasmMatches(`Hkv=${Hkv} mask`, { shape: [2, 4, Hkv, 67, 70, 16, 24], options: { mask } });
    }
  });

  it('masks of every broadcast shape: [B,1,1,S], [L,S], [B,H,L,S]', () => {
    const [B, H, L, S] = [2, 3, 40, 75];
    const u = Tensor.rand([B, H, L, S], { seed: 9 }).data;
    const keys = new Tensor(
      Float32Array.from(u.subarray(0, B * S), (x) => (x < 0.8 ? 1 : 0)),
      [B, 1, 1, S],
    );
    const rows = new Tensor(
      Float32Array.from(u.subarray(0, L * S), (x) => (x < 0.7 ? 1 : 0)),
      [L, S],
    );
    const full = new Tensor(
      Float32Array.from(u, (x) => (x < 0.6 ? 1 : 0)),
      [B, H, L, S],
    );
    for (const [name, mask] of [
      ['keys', keys],
      ['rows', rows],
      ['full', full],
    ] as const) {
      expectWasmMatches(`mask ${name}`, { shape: [B, H, H, L, S, 33, 20], options: { mask } });
      expectWasmMatches(`mask ${name} causal`, {
        shape: [B, H, H, L, S, 33, 20],
        options: { mask, causal: true },
      });
    }
  });

  it('a bias with its gradient: [L,S] (dbias summed over B and H), [H,1,1] (over B, L, S), [B,H,L,S], −∞ entries', () => {
    const [B, H, L, S] = [2, 3, 33, 70];
    const ls = Tensor.randn([L, S], { seed: 4 });
    const heads = Tensor.randn([H, 1, 1], { seed: 5 });
    const full = Tensor.randn([B, H, L, S], { seed: 6 });
    const negInf = new Tensor(
      Float32Array.from(Tensor.rand([L, S], { seed: 7 }).data, (x) =>
        x < 0.3 ? Number.NEGATIVE_INFINITY : x,
      ),
      [L, S],
    );
    for (const [name, bias] of [
      ['[L,S]', ls],
      ['[H,1,1]', heads],
      ['[B,H,L,S]', full],
      ['−∞ entries', negInf],
    ] as const) {
      const r = run({ shape: [B, H, H, L, S, 16, 16], options: { bias, causal: 'top-left' } });
      expect(r.got.dbias, name).toBeDefined();
      expect(failures(`bias ${name}`, r)).toEqual([]);
      expect(r.fallbacks).toBe(0);
    }
  });

  it('a constant bias of 1000 on every key: added before the lse is subtracted, so rounded once', () => {
    // x = s − lse was rounded to float32 at |x| ≈ 1443 before the bias was added: up to 3× the tolerance.
    const bias = new Tensor(new Float32Array(40).fill(1000), [40]);
    expectWasmMatches('bias 1000', { shape: [1, 2, 2, 33, 40, 16, 16], options: { bias }, seed: 1 });
  });

  it('a mask and a bias past 4 MB (copied tile by tile, not whole)', () => {
    const [B, H, L, S] = [1, 2, 600, 1000]; // 1.2M elements each
    const u = Tensor.rand([B, H, L, S], { seed: 21 }).data;
    const mask = new Tensor(
      Float32Array.from(u, (x) => (x < 0.9 ? 1 : 0)),
      [B, H, L, S],
    );
    const bias = Tensor.randn([B, H, L, S], { seed: 22 });
    expectWasmMatches('big mask and bias', { shape: [B, H, 1, L, S, 8, 8], options: { mask, bias } });
  });

  it('fully blocked rows (a mask row of zeros, causal rows before the first key) give exact zero rows', () => {
    const [L, S, E] = [9, 5, 8];
    const m = new Float32Array(L * S).fill(1);
    m.fill(0, 2 * S, 3 * S); // row 2 sees nothing
    const r = run({ shape: [1, 1, 1, L, S, E, E], options: { mask: new Tensor(m, [L, S]) } });
    expect(failures('mask row', r)).toEqual([]);
    expect(r.fallbacks).toBe(0);
    expect(Array.from(r.got.dq.subarray(2 * E, 3 * E))).toEqual(new Array(E).fill(0));
    // Top-left causal with L > S: bottom-right alignment blocks the first L − S rows entirely.
    const c = run({ shape: [1, 2, 2, L, S, E, E], options: { causal: 'bottom-right' } });
    expect(failures('causal', c)).toEqual([]);
    for (let h = 0; h < 2; h++) {
      const rows = c.got.dq.subarray(h * L * E, (h * L + L - S) * E);
      expect(rows.every((x) => x === 0)).toBe(true);
    }
  });

  it('float64 storage on a float32 request, and larger logits (q of std 3)', () => {
    expectWasmMatches('float64 arrays', {
      shape: [2, 2, 1, 50, 60, 24, 8],
      options: { causal: true },
      float64: true,
    });
    expectWasmMatches('std 3', { shape: [1, 2, 2, 64, 64, 32, 32], std: 3 });
  });

  it('an empty call (L = 0 or S = 0), if the planner allows it, equals the reference', () => {
    for (const [L, S] of [
      [0, 5],
      [5, 0],
    ]) {
      let r: ReturnType<typeof run>;
      try {
        r = run({ shape: [1, 1, 1, L, S, 4, 4] });
      } catch {
        continue; // the planner refuses empty sequences
      }
      expect(failures(`L=${L} S=${S}`, r)).toEqual([]);
    }
  });
});

describe.runIf(probeWasm())('hostile inputs give the reference answer, never a NaN it does not give', () => {
  /** Key 2 blocked for every query by a key-padding mask. */
  const blockKey2 = (S: number) =>
    new Tensor(
      Float32Array.from({ length: S }, (_, j) => (j === 2 ? 0 : 1)),
      [1, 1, 1, S],
    );

  it('NaN and ±∞ in a blocked key (its k and v) change nothing', () => {
    const [L, S, E] = [12, 9, 8];
    const r = run({
      shape: [1, 1, 1, L, S, E, E],
      options: { mask: blockKey2(S) },
      edit: ({ k, v }) => {
        v[2 * E] = Number.NaN;
        v[2 * E + 1] = Number.POSITIVE_INFINITY;
        k[2 * E] = Number.NEGATIVE_INFINITY;
      },
    });
    expect(r.want.dq.every(Number.isFinite)).toBe(true);
    expect(failures('blocked NaN', r)).toEqual([]);
    expect(r.fallbacks).toBe(1); // the task went to the float64 kernel
  });

  it('±∞ in a visible query row: NaN exactly where the reference has NaN', () => {
    const [L, S, E] = [6, 7, 4];
    const r = run({
      shape: [1, 1, 1, L, S, E, E],
      edit: ({ q }) => {
        q[3 * E] = Number.POSITIVE_INFINITY;
      },
    });
    expect(failures('inf query', r)).toEqual([]);
  });

  it('a huge bias on a visible key (lse ~ 1e30), −1e9 and float32-min fills, huge logits', () => {
    const [L, S] = [10, 12];
    const huge = new Float32Array(L * S);
    huge[5] = 1e30;
    const r = run({ shape: [1, 1, 1, L, S, 8, 8], options: { bias: new Tensor(huge, [L, S]) } });
    expect(failures('huge bias', r)).toEqual([]);
    expect(r.fallbacks).toBe(1);
    for (const fill of [-1e9, -3.4028234663852886e38]) {
      const bias = new Float32Array(L * S).map((_, x) => (x % 3 === 0 ? fill : 0));
      for (let i = 0; i < L; i++) bias[i * S + 1] = 0; // every row sees key 1
      expectWasmMatches(`fill ${fill}`, {
        shape: [1, 1, 1, L, S, 8, 8],
        options: { bias: new Tensor(bias, [L, S]) },
      });
    }
    // Scores of ~1e4: beyond what float32 keeps to the softmax's precision, so the float64 kernel runs.
    const big = run({ shape: [1, 1, 1, L, S, 8, 8], std: 3000 });
    expect(failures('huge logits', big)).toEqual([]);
    expect(big.fallbacks).toBe(1);
  });

  it('scores summed in float32: tiny and zero scales, cancelling terms and dq sums past float32 give the reference', () => {
    // One query row against two keys (a review's cases): the scores are summed from q times scale·log2 e,
    // as the forward sums them, so q·k = 4e38 at scale 2e-38 stays finite in WASM.
    type X = { q: Float32Array; k: Float32Array; v: Float32Array; dOut: Float32Array };
    const edit =
      (q0: number[], k0: number[], v0 = [1, 2], g0?: number[]) =>
      ({ q, k, v, dOut }: X) => {
        q.set(q0);
        k.fill(0);
        k.set(k0);
        v.set(v0);
        if (g0) dOut.set(g0);
      };
    const cases: [string, number, number[], number[], number, number[]?, number[]?, number?][] = [
      ['scale 2e-38, q·k = 4e38', 2e-38, [2e19], [2e19], 0],
      ['scale 0, q·k = 4e38', 0, [2e19], [2e19], 0],
      // scale·log2 e is subnormal in float32: its rounding would scale every score wrong.
      ['scale 1e-40', 1e-40, [1e20], [1e20], 1],
      // dq = Σ dS·k is summed before the scale: 1e30 · 1e20 overflows whatever the scale.
      ['dq past float32 at scale 2e-38', 2e-38, [1], [1e20, -1e20], 1, [1e10, -1e10], [1e10]],
      ['dq past float32 at scale 0', 0, [1], [1e20, -1e20], 1, [1e10, -1e10], [1e10]],
    ];
    for (const [label, scale, q0, k0, fallbacks, v0, g0] of cases) {
      const r = run({ shape: [1, 1, 1, 1, 2, 1, 1], options: { scale }, edit: edit(q0, k0, v0, g0) });
      expect(failures(label, r)).toEqual([]);
      expect(r.fallbacks, label).toBe(fallbacks);
    }
    // Terms that cancel: q·k = 4097² − 4096·4098 = 1 from terms of 1.7e7, and a milder case whose float32
    // score is off by 2⁻¹¹: both past the Cauchy–Schwarz bound, so float64 runs.
    for (const [label, q0, k0, scale] of [
      ['4097² − 4096·4098', [4097, 4096], [4097, -4098], 1],
      ['off by 2⁻¹¹', [119.0863037109375, 106.3896484375], [100, -111.9341049194336], Math.LN2],
    ] as const) {
      const r = run({ shape: [1, 1, 1, 1, 2, 2, 1], options: { scale }, edit: edit([...q0], [...k0]) });
      expect(failures(label, r)).toEqual([]);
      expect(r.fallbacks, label).toBe(1);
    }
  });

  it('NaN or ∞ in dOut or out of a row sends the task to the float64 kernel (the reference answer)', () => {
    const r = run({
      shape: [1, 2, 1, 8, 8, 4, 4],
      options: { mask: blockKey2(8) },
      edit: ({ dOut }) => {
        dOut[5] = Number.NaN;
      },
    });
    expect(failures('NaN dOut', r)).toEqual([]);
    expect(r.fallbacks).toBe(1);
  });
});

describe.runIf(probeWasm())('who runs the WASM backward', () => {
  const call = () => {
    const q = Tensor.randn([1, 2, 16, 8], { seed: 1 });
    const { problem } = planAttention('test', q, q, q, { causal: true });
    const inputs = {
      dOut: new Float32Array(q.size),
      out: new Float32Array(q.size),
      lse: new Float64Array(32),
    };
    return { problem, inputs };
  };

  it("chooseBackward('auto') picks it for a float32 problem, the flash backward for a float64 one", () => {
    const { problem, inputs } = call();
    expect(chooseBackward('x', 'auto', { ...problem, precision: 'float32' }, inputs)).toBe(wasmBackward);
    expect(wasmKernel.backward).toBe(wasmBackward);
    expect(chooseBackward('x', 'auto', { ...problem, precision: 'float64' }, inputs)).toBe(flashBackward);
    expect(wasmBackward.supports({ ...problem, precision: 'float64' }, inputs)).toMatch(/float64/);
    expect(wasmBackward.supports({ ...problem, precision: 'float32' }, { dOut: inputs.dOut })).toMatch(/lse/);
  });

  it('training (float32 Vars) runs its attention backward in WASM, equal to float64 Vars', () => {
    const spy = vi.spyOn(wasmBackward, 'task');
    const grads = (float64: boolean) => {
      const make = (seed: number, width: number) => {
        const t = Tensor.randn([2, 6, width], { seed });
        return parameter(float64 ? Float64Array.from(t.data) : t.data, t.shape);
      };
      const [q, k, v] = [make(1, 16), make(2, 8), make(3, 8)]; // 4 query heads of 4 over 2 key/value heads
      const { out } = attention(q, k, v, { numHeads: 4, numKvHeads: 2, causal: true });
      backward(out, Tensor.randn([out.size], { seed: 4 }).data);
      return [q, k, v].map((x) => x.grad!);
    };
    const f32 = grads(false);
    expect(spy).toHaveBeenCalledTimes(4); // B·Hkv tasks
    spy.mockClear();
    const f64 = grads(true);
    expect(spy).not.toHaveBeenCalled();
    for (let i = 0; i < 3; i++) expect(closeFailure(`grad ${i}`, f32[i], f64[i], TOL)).toBeUndefined();
  });

  it("a worker's loop runs it by kernel name ('wasm'), dbias in its own float64 row", () => {
    const [B, H, L, S, E] = [2, 2, 20, 24, 8];
    const q = Tensor.randn([B, H, L, E], { seed: 11 });
    const k = Tensor.randn([B, H, S, E], { seed: 12 });
    const bias = Tensor.randn([L, S], { seed: 13 });
    const { problem } = planAttention('test', q, k, k, { bias, causal: true });
    const p = { ...problem, precision: 'float32' as const };
    const n = B * H * L;
    const inputs = {
      dOut: Tensor.randn([n * E], { seed: 14 }).data,
      out: new Float32Array(n * E),
      lse: new Float64Array(n),
    };
    forwardAll(wasmKernel, p, { out: inputs.out, lse: inputs.lse });
    const want = {
      dq: new Float32Array(q.size),
      dk: new Float32Array(k.size),
      dv: new Float32Array(k.size),
      dbias: new Float32Array(L * S),
    };
    backwardAll(wasmBackward, p, inputs, want);
    // The job as the runtime packs it (src/runtime.ts), run by the worker's own message handler.
    const grads = {
      dq: new Float32Array(q.size),
      dk: new Float32Array(k.size),
      dv: new Float32Array(k.size),
    };
    const layout = new BufferLayout(HEADER_BYTES);
    const args = {
      problem: layout.place(p, 'copy', 'problem'),
      inputs: layout.place(inputs, 'copy', 'inputs'),
      grads: layout.place(grads, 'zero', 'grads'),
      dbiasParts: layout.reserve('Float64Array', L * S),
    };
    const buffer = new SharedArrayBuffer(layout.byteLength);
    layout.write(buffer);
    const replies: unknown[] = [];
    const spy = vi.spyOn(wasmBackward, 'task');
    const job = { op: 'attention.backward', kernel: 'wasm', tasks: B * H, args, buffer };
    handleMessage({ id: 1, job } as never, (m) => replies.push(m));
    expect(replies).toEqual([{ type: 'done', id: 1 }]);
    readBack(grads, args.grads, buffer);
    const dbiasParts = new Float64Array(buffer, args.dbiasParts.offset, args.dbiasParts.length);
    expect(spy).toHaveBeenCalledTimes(B * H);
    expect(grads.dq).toEqual(want.dq);
    expect(grads.dk).toEqual(want.dk);
    expect(grads.dv).toEqual(want.dv);
    expect(Float32Array.from(dbiasParts)).toEqual(want.dbias);
  });
});
