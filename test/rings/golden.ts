// Ring one as functions: a kernel's forward and backward against the PyTorch goldens (test/fixtures,
// written by scripts/make_fixtures.py: float32 inputs, float64 expected values), returning failures.
// One decision to know: the kernel object is driven directly (planAttention → forwardAll/backwardAll), at
// every precision it serves, so a failure names the kernel that computed the value — and a wrong
// reference kernel fails here, naming 'reference', before conformance blames the kernels compared with it.

import { type AttentionOptions, planAttention } from '../../src/attention/plan.js';
import type { CausalOption } from '../../src/index.js';
import { kernelOps } from '../../src/kernels/registry.js';
import {
  type AttentionGrads,
  type AttentionKernel,
  type BackwardInputs,
  backwardAll,
  forwardAll,
} from '../../src/kernels/types.js';
import { closeFailure, type FixtureTensor, fromFixture, loadFixture } from '../helpers.js';
import {
  addReport,
  delegatesDuring,
  emptyReport,
  floats,
  nameOf,
  outBuffer,
  problemAt,
  type RingReport,
  servedPrecisions,
  tolerance,
} from './common.js';

/** The options every golden case may carry. */
interface CaseOptions {
  name: string;
  q: FixtureTensor;
  k: FixtureTensor;
  v: FixtureTensor;
  mask?: FixtureTensor;
  bias?: FixtureTensor;
  causal?: CausalOption;
  window?: [number, number];
  scale?: number;
}

/** A forward case of sdpa.json: torch's scaled_dot_product_attention output and weights. */
export interface SdpaCase extends CaseOptions {
  out: FixtureTensor;
  weights: FixtureTensor;
}

/** A case of backward.json: PyTorch autograd's gradients for a given dOut. */
export interface BackwardCase extends CaseOptions {
  dOut: FixtureTensor;
  dq: FixtureTensor;
  dk: FixtureTensor;
  dv: FixtureTensor;
  dbias?: FixtureTensor;
}

export const sdpaGoldens = loadFixture<{ torch: string; cases: SdpaCase[] }>('sdpa.json');
export const backwardGoldens = loadFixture<{ torch: string; cases: BackwardCase[] }>('backward.json');

/** The public options a case stands for. */
export function optionsOf(c: CaseOptions): AttentionOptions {
  const o: AttentionOptions = {};
  if (c.mask) o.mask = fromFixture(c.mask);
  if (c.bias) o.bias = fromFixture(c.bias);
  if (c.causal !== undefined) o.causal = c.causal;
  if (c.window) o.window = c.window;
  if (c.scale !== undefined) o.scale = c.scale;
  return o;
}

const data = (t: FixtureTensor) => fromFixture(t).data;

/** `kernel`'s forward (out, and weights in a call of their own) against one sdpa.json case. */
export function forwardGoldenFailures(kernel: AttentionKernel, c: SdpaCase): RingReport {
  const report = emptyReport();
  const { problem } = planAttention(
    'golden',
    fromFixture(c.q),
    fromFixture(c.k),
    fromFixture(c.v),
    optionsOf(c),
  );
  const n = problem.B * problem.Hq * problem.L;
  const { served, declined } = servedPrecisions(
    (p) => kernel.supports(p, { out: new Float32Array(0) }),
    problem,
  );
  if (!served.length)
    report.failures.push(`${kernel.name}: ${c.name}: declined at every precision (${declined})`);
  for (const precision of served) {
    const p = problemAt(problem, precision);
    const tol = tolerance(precision);
    const out = outBuffer(precision, n * p.Ev);
    const outVia = delegatesDuring(kernel, () => forwardAll(kernel, p, { out, lse: new Float64Array(n) }));
    const weights = new Float32Array(n * p.S);
    const weightsVia = delegatesDuring(kernel, () => forwardAll(kernel, p, { weights }));
    for (const [output, got, want, via] of [
      ['out', out, data(c.out), outVia],
      ['weights', weights, data(c.weights), weightsVia],
    ] as const) {
      report.checks++;
      const label = `${nameOf(kernel, output, via)} @${precision}: ${c.name}: ${output}`;
      const failure = closeFailure(label, got, want, tol);
      if (failure) report.failures.push(failure);
    }
  }
  return report;
}

/**
 * `kernel`'s backward against one backward.json case, fed the out and log-sum-exp of `kernel`'s own
 * forward (the pair a caller runs). dbias must exist exactly when the case has a bias.
 */
export function backwardGoldenFailures(kernel: AttentionKernel, c: BackwardCase): RingReport {
  const report = emptyReport();
  const backward = kernel.backward;
  if (!backward) return report;
  const { problem } = planAttention(
    'golden',
    fromFixture(c.q),
    fromFixture(c.k),
    fromFixture(c.v),
    optionsOf(c),
  );
  const n = problem.B * problem.Hq * problem.L;
  const forwardOk = (precision: 'float32' | 'float64') =>
    kernel.supports({ ...problem, precision }, { out: new Float32Array(0) }) === true;
  const { served, declined } = servedPrecisions(
    (p) =>
      forwardOk(p.precision)
        ? backward.supports(p, {
            dOut: new Float32Array(0),
            out: new Float32Array(0),
            lse: new Float64Array(0),
          })
        : 'its forward declines this precision',
    problem,
  );
  if (!served.length) {
    report.failures.push(`${kernel.name} backward: ${c.name}: declined at every precision (${declined})`);
  }
  for (const precision of served) {
    const p = problemAt(problem, precision);
    const inputs: BackwardInputs = {
      dOut: floats(precision, data(c.dOut)),
      out: outBuffer(precision, n * p.Ev),
      lse: new Float64Array(n),
    };
    forwardAll(kernel, p, { out: inputs.out as Float32Array, lse: inputs.lse });
    const grads: AttentionGrads = {
      dq: floats(precision, p.q.length),
      dk: floats(precision, p.k.length),
      dv: floats(precision, p.v.length),
      dbias: p.bias && floats(precision, p.bias.data.length),
    };
    backwardAll(backward, p, inputs, grads);
    const label = `${kernel.name} backward @${precision}: ${c.name}`;
    for (const name of ['dq', 'dk', 'dv', 'dbias'] as const) {
      const want = c[name];
      const got = grads[name];
      if (!want && !got) continue;
      report.checks++;
      const failure =
        want && got
          ? closeFailure(`${label}: ${name}`, got, data(want), tolerance(precision))
          : `${label}: ${name} ${got ? 'computed but PyTorch has none' : 'missing'}`;
      if (failure) report.failures.push(failure);
    }
  }
  return report;
}

/** The whole golden ring for one kernel: every forward case, and every backward case if it has a backward. */
export function goldenFailures(kernel: AttentionKernel): RingReport {
  const report = emptyReport();
  for (const c of sdpaGoldens.cases) addReport(report, forwardGoldenFailures(kernel, c));
  if (kernelOps(kernel).includes('attention.backward')) {
    for (const c of backwardGoldens.cases) addReport(report, backwardGoldenFailures(kernel, c));
  }
  return report;
}
