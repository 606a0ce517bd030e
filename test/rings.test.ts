// The test rings cannot be fooled: a deliberately wrong kernel, built here as a wrapper (src/ untouched),
// fails them by name. A reference with the bias added with the wrong sign fails ring one naming
// 'reference'; a kernel with a wrong scale registered under a new name fails ring two naming it.
// One decision to know: these tests call the same functions golden.test.ts and conformance.test.ts run,
// so if a ring stopped comparing (or stopped enumerating the registry), a test here fails.

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { registeredKernels } from '../src/kernels/registry.js';
import type { AttentionKernel, BroadcastView } from '../src/kernels/types.js';
import { conformanceCases, conformanceFailures, randomCalls, tileEdgeCalls } from './rings/conformance.js';
import {
  backwardGoldenFailures,
  backwardGoldens,
  forwardGoldenFailures,
  goldenFailures,
  sdpaGoldens,
} from './rings/golden.js';

const reference = registeredKernels()[0];
const flash = registeredKernels().find((k) => k.name === 'flash')!;

/** A problem's fields a wrapper may rewrite; `edit` keeps the rest (forward and backward problems alike). */
type Edit = <P extends { scale: number; bias?: BroadcastView }>(p: P) => P;

/** `kernel` rewritten so every problem it sees (forward and backward) is first passed through `edit`. */
function wrap(kernel: AttentionKernel, name: string, edit: Edit): AttentionKernel {
  const backward = kernel.backward;
  return {
    ...kernel,
    name,
    forwardRows: (p, outputs, bh, i0, i1) => kernel.forwardRows(edit(p), outputs, bh, i0, i1),
    backward: backward && {
      supports: backward.supports,
      task: (p, inputs, grads, bkv) => backward.task(edit(p), inputs, grads, bkv),
    },
  };
}

/** The reference with the bias added with the wrong sign: s = q·k·scale − bias. */
const flippedBias = wrap(reference, 'reference', (p) =>
  p.bias ? { ...p, bias: { ...p.bias, data: p.bias.data.map((x) => -x) } } : p,
);

/** Flash with the scale 1% off, as a new kernel would be registered under its own name. */
const wrongScale = wrap(flash, 'flash-wrong-scale', (p) => ({ ...p, scale: p.scale * 1.01 }));

describe('ring one (PyTorch goldens, every registered kernel)', () => {
  it('passes the registered reference, comparing every output of every case', () => {
    const { checks, failures } = goldenFailures(reference);
    expect(failures).toEqual([]);
    // out and weights per forward case, dq/dk/dv per backward case, at each of the two precisions.
    const atLeast = 2 * (2 * sdpaGoldens.cases.length + 3 * backwardGoldens.cases.length);
    expect(checks).toBeGreaterThanOrEqual(atLeast);
  });

  it("fails a reference with the bias sign flipped, naming 'reference', on exactly the cases with a bias", () => {
    const ring = [flippedBias, ...registeredKernels().slice(1)];
    const failures = ring.flatMap((kernel) => goldenFailures(kernel).failures);
    expect(failures.length).toBeGreaterThan(0);
    for (const failure of failures) expect(failure).toMatch(/^reference( backward)? @float(32|64): /);
    for (const c of sdpaGoldens.cases) {
      expect(forwardGoldenFailures(flippedBias, c).failures.length > 0, `forward: ${c.name}`).toBe(!!c.bias);
    }
    for (const c of backwardGoldens.cases) {
      expect(backwardGoldenFailures(flippedBias, c).failures.length > 0, `backward: ${c.name}`).toBe(
        !!c.bias,
      );
    }
  });

  it('fails a kernel that declines every call instead of passing it untested', () => {
    const declines: AttentionKernel = { ...flash, name: 'declines', supports: () => 'never' };
    const { failures } = forwardGoldenFailures(declines, sdpaGoldens.cases[0]);
    expect(failures).toEqual([expect.stringMatching(/^declines: .*declined at every precision.*never/)]);
  });
});

describe('ring two (conformance, registry × op)', () => {
  const calls = [...randomCalls(6, 20261129), ...tileEdgeCalls().filter((_, i) => i % 7 === 0)];

  it('enumerates a newly registered kernel, with each op it implements', () => {
    const cases = conformanceCases([...registeredKernels(), wrongScale]);
    const ops = cases.filter((c) => c.kernel === wrongScale).map((c) => c.op);
    expect(ops).toEqual(['attention.forward', 'attention.backward']);
    expect(cases.some((c) => c.kernel === reference)).toBe(false); // the reference is what they are compared with
  });

  for (const op of ['attention.forward', 'attention.backward'] as const) {
    it(`fails a kernel with a wrong scale on ${op}, naming it (and passes the kernel it wraps)`, () => {
      const wrong = calls.flatMap((call) => conformanceFailures(wrongScale, op, call).failures);
      expect(wrong.length).toBeGreaterThan(calls.length / 2);
      for (const failure of wrong) expect(failure).toMatch(/^flash-wrong-scale /);
      expect(calls.flatMap((call) => conformanceFailures(flash, op, call).failures)).toEqual([]);
    });
  }

  it('fails a kernel that declines every call instead of passing it untested', () => {
    const declines: AttentionKernel = { ...flash, name: 'declines', supports: () => 'never' };
    const { failures } = conformanceFailures(declines, 'attention.forward', calls[0]);
    expect(failures).toEqual([
      expect.stringMatching(/^declines attention.forward: declined at every precision/),
    ]);
  });
});

it('golden.test.ts and conformance.test.ts run these ring functions over the registry, listing no kernels', () => {
  const read = (file: string) => readFileSync(new URL(file, import.meta.url), 'utf8');
  const golden = read('./golden.test.ts');
  const conformance = read('./conformance.test.ts');
  expect(golden).toMatch(/for \(const kernel of registeredKernels\(\)\)/);
  expect(golden).toMatch(/forwardGoldenFailures\(kernel, c\)/);
  expect(golden).toMatch(/backwardGoldenFailures\(kernel, c\)/);
  expect(conformance).toMatch(/for \(const \{ kernel, op \} of conformanceCases\(\)\)/);
  expect(conformance).toMatch(/conformanceFailures\(kernel, op, call\)/);
  for (const source of [golden, conformance]) {
    expect(source).not.toMatch(/\[\s*'(reference|flash|wasm)'\s*,\s*'(reference|flash|wasm)'/);
  }
});
