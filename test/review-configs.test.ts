// Regressions from an adversarial review of how the public layers and models take their configuration
// and inputs (2026-12-02): each case was a silent default, a checkpoint that saved and did not load, an
// out-of-memory crash, a hang, or an error that did not name the function and argument.

import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import {
  alibiBias,
  alibiSlopes,
  MultiHeadAttention,
  scaledDotProductAttention,
  sinusoidalPositionalEncoding,
  Tensor,
  TinyTransformer,
  type TransformerConfig,
  terminateWorkers,
} from '../src/index.js';
import { loadCheckpoint, saveCheckpoint } from '../src/nn/index.js';

afterAll(() => terminateWorkers());

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const base: TransformerConfig = {
  vocabSize: 5,
  dModel: 8,
  numHeads: 2,
  numLayers: 1,
  dFF: 16,
  maxLen: 8,
  causal: true,
};

/** Runs `body` (an ES module using `qkv`, the built main entry) in a child with a 64 MB heap. */
function child(body: string) {
  const script = `
    const qkv = await import(${JSON.stringify(`${dist}index.js`)});
    try {
      ${body}
      console.log('returned');
    } catch (err) {
      console.log('threw: ' + err.message);
    }
  `;
  return spawnSync(process.execPath, ['--max-old-space-size=64', '--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 60_000,
  });
}

describe('TinyTransformer config: unknown and undefined fields', () => {
  it('an unknown config field (typo dropuot) is refused, naming it, as MultiHeadAttention does', () => {
    expect(() => new TinyTransformer({ ...base, dropuot: 0.5 } as TransformerConfig)).toThrow(
      /^TinyTransformer config: unknown option 'dropuot'/,
    );
  });

  it('an unknown constructor option (typo sed) is refused; a null options object names TinyTransformer', () => {
    expect(() => new TinyTransformer(base, { sed: 5 } as unknown as { seed: number })).toThrow(
      /^TinyTransformer: unknown option 'sed'/,
    );
    expect(() => new TinyTransformer(base, null as unknown as { seed: number })).toThrow(
      /^TinyTransformer: options must be an object, got null/,
    );
  });

  it('dropout: undefined and scaleScores: undefined mean the default, as mlp/positions/ropeBase: undefined do', () => {
    expect(new TinyTransformer({ ...base, mlp: undefined }).config.mlp).toBe(true); // fine
    expect(new TinyTransformer({ ...base, dropout: undefined }).config.dropout).toBe(0);
    expect(new TinyTransformer({ ...base, scaleScores: undefined }).config.scaleScores).toBe(true);
  });
});

describe('checkpoints: what saveCheckpoint writes, loadCheckpoint loads', () => {
  it('no model saves a config its loader refuses: an extra field or a maxLen past 65536 is refused at once', () => {
    // Both used to build and save, then fail in loadCheckpoint ("unknown field 'note'", "maxLen 70000").
    expect(() => new TinyTransformer({ ...base, note: 'x' } as TransformerConfig)).toThrow(
      /^TinyTransformer config: unknown option 'note'/,
    );
    expect(() => new TinyTransformer({ ...base, maxLen: 70000 })).toThrow(
      /^TinyTransformer: maxLen must be at most 65536, got 70000/,
    );
    const model = new TinyTransformer({ ...base, maxLen: 65536 });
    expect(loadCheckpoint(saveCheckpoint(model)).model.config.maxLen).toBe(65536);
  });
});

describe('hostile sizes: refused by name, before allocating, not a crash or a hang', () => {
  it('numLayers 2^40 is refused by the constructor (not a heap out of memory)', () => {
    const r = child(
      `new qkv.TinyTransformer({ vocabSize: 5, dModel: 8, numHeads: 2, numLayers: 2 ** 40, dFF: 16, maxLen: 8, causal: true });`,
    );
    expect(r.stderr).not.toMatch(/heap out of memory/);
    expect(r.stdout).toMatch(/threw: TinyTransformer: numLayers must be at most 4096/);
  });

  it('TinyTransformer.forward with B = 2^40, L = 0 (empty ids) returns or is refused, and does not hang', () => {
    const r = child(`
      const m = new qkv.TinyTransformer({ vocabSize: 5, dModel: 8, numHeads: 2, numLayers: 1, dFF: 16, maxLen: 8, causal: true });
      m.forward(new Int32Array(0), 2 ** 40, 0);
    `);
    expect(r.error).toBeUndefined(); // ETIMEDOUT: the child was still looping after 60 s
    expect(r.stdout).toMatch(/returned|threw: TinyTransformer\.forward/);
  });

  it('MultiHeadAttention.forward with a query [2^40, 0, D] returns or is refused, and does not hang', () => {
    const r = child(`
      const m = new qkv.MultiHeadAttention({ embedDim: 4, numHeads: 2, seed: 0 });
      m.forward(new qkv.Tensor(new Float32Array(0), [2 ** 40, 0, 4]));
    `);
    expect(r.error).toBeUndefined();
    expect(r.stdout).toMatch(/returned|threw: MultiHeadAttention\.forward/);
  });

  it('alibiSlopes(2^24) returns in a 64 MB heap (a JS array of the slopes ran out of it); alibiSlopes(2^40) names itself', () => {
    const r = child('qkv.alibiSlopes(2 ** 24);');
    expect(r.stderr).not.toMatch(/heap out of memory/);
    expect(r.stdout).toMatch(/returned|threw: alibiSlopes/);
    expect(() => alibiSlopes(2 ** 40)).toThrow(/^alibiSlopes: the slopes \[1099511627776\] would take/);
  });

  it('alibiBias and sinusoidalPositionalEncoding name themselves for a table no array can hold', () => {
    expect(() => alibiBias(2 ** 20, 2 ** 20, 2 ** 20)).toThrow(
      /^alibiBias: the bias \[1048576,1048576,1048576\] would take/,
    );
    expect(() => sinusoidalPositionalEncoding(2 ** 30, 2 ** 10)).toThrow(
      /^sinusoidalPositionalEncoding: the table \[1073741824,1024\] would take/,
    );
  });
});

describe('TinyTransformer.generate: a bad prompt is refused naming generate and prompt', () => {
  const model = new TinyTransformer(base);
  it('an array-like prompt of length 2^40 (longer than maxLen)', () => {
    expect(() => model.generate({ length: 2 ** 40 } as unknown as number[], { maxNewTokens: 1 })).toThrow(
      /^TinyTransformer\.generate: prompt \(1099511627776 tokens\) is longer than maxLen=8/,
    );
  });
  it('a prompt of bigints', () => {
    expect(() => model.generate([1n] as unknown as number[], { maxNewTokens: 1 })).toThrow(
      /^TinyTransformer\.generate: prompt\[0\] = 1n is not a token id/,
    );
  });
});

describe('loadStateDict: keys named like Object.prototype’s', () => {
  it('MultiHeadAttention.loadStateDict refuses an extra key named constructor or __proto__', () => {
    const mha = new MultiHeadAttention({ embedDim: 4, numHeads: 2, seed: 0 });
    const withConstructor: Record<string, Tensor> = { ...mha.stateDict(), constructor: Tensor.zeros([1]) };
    expect(() => mha.loadStateDict(withConstructor)).toThrow(/unknown constructor/);
    const withProto = JSON.parse('{"__proto__": 1}');
    Object.assign(withProto, mha.stateDict());
    expect(() => mha.loadStateDict(withProto)).toThrow(/unknown __proto__/);
  });
});

describe('a Tensor from another copy of qkv', () => {
  it('is refused with a reason, not "must be a Tensor …, got Tensor"', () => {
    // What a Tensor made by dist/ looks like to src/ (or a bundle's to a direct import).
    class Tensor {
      shape = [1, 1];
      data = new Float32Array(1);
    }
    const other = new Tensor();
    expect(() => scaledDotProductAttention(other as never, other as never, other as never)).toThrow(
      /^scaledDotProductAttention: query must be a Tensor or nested number arrays, got .* from another copy of qkv/,
    );
  });
});
