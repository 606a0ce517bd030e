// Ring two as functions: every registered kernel × every op it implements against the reference kernel
// on seeded random calls (ggml's test-backend-ops idea), returning failures that name the kernel.
// One decision to know: each op is tested alone — the backward under test is fed the reference
// forward's out and log-sum-exp — and the reference runs at float64 on float64 arrays, the ground truth
// a kernel is held to at every precision it serves (with that precision's tolerance).

import fc from 'fast-check';
import { type AttentionOptions, planAttention } from '../../src/attention/plan.js';
import { Tensor } from '../../src/index.js';
import { kernelOps, registeredKernels } from '../../src/kernels/registry.js';
import {
  type AttentionGrads,
  type AttentionKernel,
  type AttentionProblem,
  type BackwardInputs,
  backwardAll,
  type Floats,
  forwardAll,
} from '../../src/kernels/types.js';
import { closeFailure } from '../helpers.js';
import {
  delegatesDuring,
  emptyReport,
  floats,
  nameOf,
  type Op,
  outBuffer,
  problemAt,
  type RingReport,
  servedPrecisions,
  tolerance,
} from './common.js';

/** One attention call: seeded tensors and options; `logits` is the std of q (scores grow with it). */
export interface Call {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  options: AttentionOptions;
  logits: number;
  label: string;
}

const sizes = fc.constantFrom(1, 2, 63, 64, 65, 100, 257);

/**
 * A random attention call. Sizes straddle the tile sizes (1, 63, 65, 257) and every option is drawn:
 * masks, biases, windows, both causal alignments, GQA, L ≠ S, E ≠ Ev, fully blocked rows.
 */
export const arbCall: fc.Arbitrary<Call> = fc
  .record({
    B: fc.integer({ min: 1, max: 2 }),
    Hkv: fc.integer({ min: 1, max: 2 }),
    group: fc.integer({ min: 1, max: 3 }),
    L: sizes,
    S: sizes,
    E: fc.constantFrom(1, 3, 4, 8, 16, 33, 64),
    Ev: fc.constantFrom(1, 4, 7, 16, 64),
    causal: fc.constantFrom(false, true, 'top-left' as const, 'bottom-right' as const),
    window: fc.option(fc.tuple(fc.integer({ min: -1, max: 70 }), fc.integer({ min: -1, max: 70 })), {
      nil: undefined,
    }),
    mask: fc.constantFrom('none', 'keys', 'full', 'rows-blocked'),
    bias: fc.constantFrom('none', 'heads', 'neg-inf'),
    scale: fc.option(fc.double({ min: 0.01, max: 3, noNaN: true }), { nil: undefined }),
    logits: fc.constantFrom(1, 1, 3, 30),
    seed: fc.integer({ min: 0, max: 1e6 }),
  })
  .map((r): Call => {
    const Hq = r.Hkv * r.group;
    const q = Tensor.randn([r.B, Hq, r.L, r.E], { seed: r.seed, std: r.logits });
    const k = Tensor.randn([r.B, r.Hkv, r.S, r.E], { seed: r.seed + 1 });
    const v = Tensor.randn([r.B, r.Hkv, r.S, r.Ev], { seed: r.seed + 2 });
    const options: AttentionOptions = { causal: r.causal, window: r.window as [number, number] | undefined };
    if (r.scale !== undefined) options.scale = r.scale;
    const u = Tensor.rand([r.B, Hq, r.L, r.S], { seed: r.seed + 3 }).data;
    if (r.mask === 'keys')
      options.mask = new Tensor(
        Float32Array.from(u.subarray(0, r.B * r.S), (x) => (x < 0.8 ? 1 : 0)),
        [r.B, 1, 1, r.S],
      );
    if (r.mask === 'full')
      options.mask = new Tensor(
        Float32Array.from(u, (x) => (x < 0.7 ? 1 : 0)),
        [r.B, Hq, r.L, r.S],
      );
    if (r.mask === 'rows-blocked') {
      // Every third query row sees nothing.
      const m = new Float32Array(r.L * r.S);
      for (let i = 0; i < r.L; i++) if (i % 3 !== 0) m.fill(1, i * r.S, (i + 1) * r.S);
      options.mask = new Tensor(m, [r.L, r.S]);
    }
    if (r.bias === 'heads') options.bias = Tensor.randn([Hq, r.L, r.S], { seed: r.seed + 4 });
    if (r.bias === 'neg-inf') {
      options.bias = new Tensor(
        Float32Array.from(u.subarray(0, r.L * r.S), (x) => (x < 0.25 ? Number.NEGATIVE_INFINITY : x)),
        [r.L, r.S],
      );
    }
    return { q, k, v, options, logits: r.logits, label: JSON.stringify(r) };
  });

/** `count` calls of arbCall, the same ones for every kernel and op (fast-check's seeded sample). */
export function randomCalls(count: number, seed: number): Call[] {
  return fc.sample(arbCall, { numRuns: count, seed });
}

/** Every L, S ∈ {1, 63, 65, 257} with causal bottom-right, a window, and neither: the tile edges. */
export function tileEdgeCalls(): Call[] {
  const calls: Call[] = [];
  for (const L of [1, 63, 65, 257])
    for (const S of [1, 63, 65, 257]) {
      const q = Tensor.randn([1, 2, L, 16], { seed: L * 1000 + S });
      const k = Tensor.randn([1, 2, S, 16], { seed: L * 1000 + S + 1 });
      const v = Tensor.randn([1, 2, S, 8], { seed: L * 1000 + S + 2 });
      for (const options of [{ causal: true }, { window: [20, 3] as [number, number] }, {}]) {
        calls.push({ q, k, v, options, logits: 1, label: `L=${L} S=${S} ${JSON.stringify(options)}` });
      }
    }
  return calls;
}

/** The (kernel, op) pairs ring two tests: every kernel after the reference (the first) × kernelOps. */
export function conformanceCases(
  kernels: readonly AttentionKernel[] = registeredKernels(),
): { kernel: AttentionKernel; op: Op }[] {
  return kernels.slice(1).flatMap((kernel) => kernelOps(kernel).map((op) => ({ kernel, op })));
}

/** The reference's answers for a call, computed once (float64 arrays, float64 precision). */
interface Expected {
  problem: AttentionProblem;
  out: Float64Array;
  lse: Float64Array;
  weights: Float32Array;
  dOut: Float64Array;
  grads?: AttentionGrads;
}

const expectedCache = new WeakMap<AttentionKernel, WeakMap<Call, Expected>>();

function expectedOf(reference: AttentionKernel, call: Call, withGrads: boolean): Expected {
  let byCall = expectedCache.get(reference);
  if (!byCall) {
    byCall = new WeakMap();
    expectedCache.set(reference, byCall);
  }
  let e = byCall.get(call);
  if (!e) {
    const { problem } = planAttention('conformance', call.q, call.k, call.v, call.options);
    const p = problemAt(problem, 'float64');
    const n = p.B * p.Hq * p.L;
    const out = new Float64Array(n * p.Ev);
    const lse = new Float64Array(n);
    const weights = new Float32Array(n * p.S);
    forwardAll(reference, p, { out: out as unknown as Float32Array, lse });
    forwardAll(reference, p, { weights });
    const dOut = Float64Array.from(Tensor.randn([n * p.Ev], { seed: call.q.size + 17 }).data);
    e = { problem, out, lse, weights, dOut };
    byCall.set(call, e);
  }
  if (withGrads && !e.grads) {
    const p = problemAt(e.problem, 'float64');
    e.grads = gradsFor(p, 'float64');
    backwardAll(reference.backward!, p, { dOut: e.dOut, out: e.out, lse: e.lse }, e.grads);
  }
  return e;
}

function gradsFor(p: AttentionProblem, precision: 'float32' | 'float64'): AttentionGrads {
  return {
    dq: floats(precision, p.q.length),
    dk: floats(precision, p.k.length),
    dv: floats(precision, p.v.length),
    dbias: p.bias && floats(precision, p.bias.data.length),
  };
}

/**
 * `kernel`'s `op` against `reference` on one call, at every precision the kernel serves: the forward's
 * out, lse and weights (weights in a call of their own, labelled with the kernel that computed them), or
 * the backward's dq, dk, dv and dbias. A kernel that serves the call at no precision fails (ring two
 * must not pass by testing nothing).
 */
export function conformanceFailures(
  kernel: AttentionKernel,
  op: Op,
  call: Call,
  reference: AttentionKernel = registeredKernels()[0],
): RingReport {
  const report = emptyReport();
  const backward = op === 'attention.backward';
  const want = expectedOf(reference, call, backward);
  const { problem } = want;
  const n = problem.B * problem.Hq * problem.L;
  const fail = (failure: string | undefined) => failure && report.failures.push(failure);
  const { served, declined } = servedPrecisions(
    (p) =>
      backward
        ? kernel.backward!.supports(p, { dOut: want.dOut, out: want.out, lse: want.lse })
        : kernel.supports(p, { out: new Float32Array(0) }),
    problem,
  );
  if (!served.length)
    fail(`${kernel.name} ${op}: declined at every precision (${declined}) on ${call.label}`);

  for (const precision of served) {
    const p = problemAt(problem, precision);
    const tol = tolerance(precision, call.logits);
    const compare = (name: string, got: ArrayLike<number>, expected: ArrayLike<number>) => {
      report.checks++;
      fail(closeFailure(`${name} @${precision}: ${call.label}`, got, expected, tol));
    };
    if (!backward) {
      const out = outBuffer(precision, n * p.Ev);
      const lse = new Float64Array(n);
      const outVia = delegatesDuring(kernel, () => forwardAll(kernel, p, { out, lse }));
      compare(`${nameOf(kernel, 'out', outVia)} ${op} out`, out, want.out);
      compare(`${nameOf(kernel, 'lse', outVia)} ${op} lse`, lse, want.lse);
      const weights = new Float32Array(n * p.S);
      const weightsVia = delegatesDuring(kernel, () => forwardAll(kernel, p, { weights }));
      compare(`${nameOf(kernel, 'weights', weightsVia)} ${op} weights`, weights, want.weights);
    } else {
      const inputs: BackwardInputs = {
        dOut: floats(precision, want.dOut),
        out: floats(precision, want.out),
        lse: want.lse,
      };
      const grads = gradsFor(p, precision);
      backwardAll(kernel.backward!, p, inputs, grads);
      for (const name of ['dq', 'dk', 'dv', 'dbias'] as const) {
        const got: Floats | undefined = grads[name];
        const expected = want.grads![name];
        if (got && expected) compare(`${kernel.name} ${op} ${name}`, got, expected);
      }
    }
  }
  return report;
}
