// The FlexAttention expression compiler: masks and score mods agree with the equivalent JS lambdas on a grid,
// every compile error carries a caret and a hint, runtime index errors name the array and the call, and
// nothing outside the language (globals, prototypes, statements) gets through.

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  type CompileOptions,
  compileMask,
  compileScore,
  MAX_DEPTH,
  MAX_SOURCE_LENGTH,
  ModEvaluationError,
  ModExpressionError,
} from '../src/flex/expr.js';

type Mask = (b: number, h: number, q: number, kv: number) => boolean;
type Score = (s: number, b: number, h: number, q: number, kv: number) => number;

const BS = [0, 1];
const HS = [0, 2];
const N = 8;
const SCORES = [-3.5, 0, 0.25, 7];

/** Every (b, h, q, kv) of a small grid. */
function* grid(): Generator<[number, number, number, number]> {
  for (const b of BS)
    for (const h of HS) for (let q = 0; q < N; q++) for (let kv = 0; kv < N; kv++) yield [b, h, q, kv];
}

function sameMask(source: string, expected: Mask, options?: CompileOptions): void {
  const f = compileMask(source, options);
  for (const [b, h, q, kv] of grid()) {
    const got = f(b, h, q, kv);
    if (got !== expected(b, h, q, kv)) {
      throw new Error(
        `${source} at (b=${b}, h=${h}, q=${q}, kv=${kv}): got ${got}, want ${expected(b, h, q, kv)}`,
      );
    }
  }
}

function sameScore(source: string, expected: Score, options?: CompileOptions): void {
  const f = compileScore(source, options);
  for (const s of SCORES) {
    for (const [b, h, q, kv] of grid()) {
      const got = f(s, b, h, q, kv);
      const want = expected(s, b, h, q, kv);
      if (!Object.is(got, want) && Math.abs(got - want) > 1e-12) {
        throw new Error(`${source} at (s=${s}, b=${b}, h=${h}, q=${q}, kv=${kv}): got ${got}, want ${want}`);
      }
    }
  }
}

/** The compile error of a mask (or score) expression, asserting its class and caret. */
function compileError(
  source: string,
  kind: 'mask' | 'score' = 'mask',
  options?: CompileOptions,
): ModExpressionError {
  try {
    if (kind === 'mask') compileMask(source, options);
    else compileScore(source, options);
  } catch (err) {
    expect(err).toBeInstanceOf(ModExpressionError);
    expect(err).toBeInstanceOf(SyntaxError);
    const e = err as ModExpressionError;
    expect(e.source).toBe(source);
    expect(e.message.startsWith(e.detail)).toBe(true);
    return e;
  }
  throw new Error(`expected ${JSON.stringify(source)} not to compile`);
}

/** Asserts the error's column and that the message ends with the source line and a caret under it. */
function expectCaret(e: ModExpressionError, column: number): void {
  expect(e.column).toBe(column);
  const lines = e.message.split('\n');
  expect(lines.at(-2)).toBe(`  ${e.source}`);
  expect(lines.at(-1)).toBe(`  ${' '.repeat(column)}^`);
}

describe('masks', () => {
  it('causal q >= kv (and the q_idx / kv_idx aliases)', () => {
    sameMask('q >= kv', (_b, _h, q, kv) => q >= kv);
    sameMask('q_idx >= kv_idx', (_b, _h, q, kv) => q >= kv);
  });

  it('sliding window q - kv < 4 && kv <= q', () => {
    sameMask('q - kv < 4 && kv <= q', (_b, _h, q, kv) => q - kv < 4 && kv <= q);
  });

  it('document mask doc[q] == doc[kv] with a typed array and a plain array', () => {
    const doc = new Int32Array([0, 0, 0, 1, 1, 2, 2, 2]);
    sameMask('doc[q] == doc[kv]', (_b, _h, q, kv) => doc[q] === doc[kv], { arrays: { doc } });
    const plain = [...doc];
    sameMask('doc[q] === doc[kv]', (_b, _h, q, kv) => plain[q] === plain[kv], { arrays: { doc: plain } });
  });

  it('PyTorch style (q >= kv) & (doc[q] == doc[kv]) and | as boolean or', () => {
    const doc = new Int32Array([0, 0, 1, 1, 1, 2, 3, 3]);
    const arrays = { doc };
    sameMask('(q >= kv) & (doc[q] == doc[kv])', (_b, _h, q, kv) => q >= kv && doc[q] === doc[kv], { arrays });
    sameMask('(kv == 0) | (q == kv)', (_b, _h, q, kv) => kv === 0 || q === kv);
    // `&` binds tighter than `|`, like JS.
    sameMask('q == 0 | q == 1 & kv == 1', (_b, _h, q, kv) => q === 0 || (q === 1 && kv === 1));
  });

  it('and / or / not keywords; not binds looser than comparisons (as in Python)', () => {
    sameMask('q >= kv and not kv == 0', (_b, _h, q, kv) => q >= kv && !(kv === 0));
    sameMask('not q >= kv or h == 2', (_b, h, q, kv) => !(q >= kv) || h === 2);
    sameMask('not (q > kv) & (b == 1)', (b, _h, q, kv) => !(q > kv && b === 1));
    sameMask('!(q > kv) & (b == 1)', (b, _h, q, kv) => !(q > kv) && b === 1);
    sameMask('~(q > kv)', (_b, _h, q, kv) => q <= kv);
  });

  it('ternaries, where, booleans and functions', () => {
    sameMask('b == 0 ? q >= kv : true', (b, _h, q, kv) => (b === 0 ? q >= kv : true));
    sameMask('where(h == 0, q >= kv, q - kv < 2 && q >= kv)', (_b, h, q, kv) =>
      h === 0 ? q >= kv : q - kv < 2 && q >= kv,
    );
    sameMask('abs(q - kv) <= 2', (_b, _h, q, kv) => Math.abs(q - kv) <= 2);
    sameMask('floor(q / 4) == floor(kv / 4)', (_b, _h, q, kv) => Math.floor(q / 4) === Math.floor(kv / 4));
    sameMask(
      'min(q, kv, 3) == max(1, sign(kv))',
      (_b, _h, q, kv) => Math.min(q, kv, 3) === Math.max(1, Math.sign(kv)),
    );
    sameMask('clamp(q - kv, 0, 3) == 3', (_b, _h, q, kv) => Math.min(Math.max(q - kv, 0), 3) === 3);
    sameMask('true', () => true);
    sameMask('false || q == kv', (_b, _h, q, kv) => q === kv);
    sameMask('q != kv == (b == 1)', (b, _h, q, kv) => (q !== kv) === (b === 1));
    sameMask('q >= kv !== false', (_b, _h, q, kv) => q >= kv);
  });

  it('returns real booleans, and a read-only source / toString()', () => {
    const f = compileMask('q >= kv');
    expect(f(0, 0, 1, 0)).toBe(true);
    expect(f(0, 0, 0, 1)).toBe(false);
    expect(f.source).toBe('q >= kv');
    expect(String(f)).toBe('q >= kv');
    expect(`${f}`).toBe('q >= kv');
    expect(() => {
      (f as { source: string }).source = 'x';
    }).toThrow(TypeError);
    expect(f.source).toBe('q >= kv');
    // Two compiles of the same text are independent functions.
    const g = compileMask('q >= kv');
    expect(g).not.toBe(f);
    expect(g.source).toBe('q >= kv');
  });
});

describe('score mods', () => {
  it('score + 0.5 * (kv - q)', () => {
    sameScore('score + 0.5 * (kv - q)', (s, _b, _h, q, kv) => s + 0.5 * (kv - q));
  });

  it('30 * tanh(score / 30)', () => {
    sameScore('30 * tanh(score / 30)', (s) => 30 * Math.tanh(s / 30));
    const f = compileScore('30 * tanh(score / 30)');
    expect(f(1e6, 0, 0, 0, 0)).toBeCloseTo(30, 12);
    expect(f.source).toBe('30 * tanh(score / 30)');
    expect(f.toString()).toBe('30 * tanh(score / 30)');
  });

  it('ternaries with -inf / Infinity and where', () => {
    sameScore('q >= kv ? score : -inf', (s, _b, _h, q, kv) => (q >= kv ? s : -Infinity));
    sameScore('where(kv > q, -Infinity, score * 2)', (s, _b, _h, q, kv) => (kv > q ? -Infinity : s * 2));
    sameScore('b == 1 ? h == 2 ? 1 : 2 : 3', (_s, b, h) => (b === 1 ? (h === 2 ? 1 : 2) : 3));
    sameScore('q > kv ? 1 : q < kv ? -1 : 0', (_s, _b, _h, q, kv) => (q > kv ? 1 : q < kv ? -1 : 0));
  });

  it('number literals: fractions, exponents, leading dot', () => {
    sameScore('1.5e2 + .25 - 2E-1 + 3. + 1e+1', () => 150 + 0.25 - 0.2 + 3 + 10);
  });

  it('functions, per-head tables, IEEE division', () => {
    const slope = new Float32Array([0.5, 0.25, 0.125]);
    sameScore('score - slope[h] * abs(q - kv)', (s, _b, h, q, kv) => s - slope[h] * Math.abs(q - kv), {
      arrays: { slope },
    });
    sameScore(
      'round(score) + ceil(score) + sqrt(q) + exp(-kv) + log(q + 1)',
      (s, _b, _h, q, kv) => Math.round(s) + Math.ceil(s) + Math.sqrt(q) + Math.exp(-kv) + Math.log(q + 1),
    );
    sameScore(
      'clamp(score, -1, 1) + max(q, kv) - min(q, kv)',
      (s, _b, _h, q, kv) => Math.min(Math.max(s, -1), 1) + Math.max(q, kv) - Math.min(q, kv),
    );
    const f = compileScore('score / (q - kv)');
    expect(f(1, 0, 0, 3, 3)).toBe(Infinity);
    expect(f(-1, 0, 0, 3, 3)).toBe(-Infinity);
    expect(f(0, 0, 0, 3, 3)).toBeNaN();
  });
});

describe('precedence and associativity match JS', () => {
  const masks: [string, Mask][] = [
    ['q - kv * 2 + 1 > b % 3 == h < 2', (b, h, q, kv) => q - kv * 2 + 1 > b % 3 === h < 2],
    ['q > 2 || kv > 3 && b == 1', (b, _h, q, kv) => q > 2 || (kv > 3 && b === 1)],
    ['q > 2 && kv > 3 || b == 1', (b, _h, q, kv) => (q > 2 && kv > 3) || b === 1],
    ['!(q > 2) == kv < 3', (_b, _h, q, kv) => !(q > 2) === kv < 3],
    ['q > kv ? kv > 2 : q > 4 || b == 1', (b, _h, q, kv) => (q > kv ? kv > 2 : q > 4 || b === 1)],
    ['-q + kv * -2 >= -(b - h) - 3', (b, h, q, kv) => -q + kv * -2 >= -(b - h) - 3],
    ['q - kv - 1 < 0', (_b, _h, q, kv) => q - kv - 1 < 0],
    ['q / 2 / 2 * 4 == q', (_b, _h, q) => (q / 2 / 2) * 4 === q],
    ['q % 3 * 2 == kv % 4 + 1', (_b, _h, q, kv) => (q % 3) * 2 === (kv % 4) + 1],
    ['- - q == q', () => true],
  ];
  for (const [source, js] of masks) it(source, () => sameMask(source, js));

  const scores: [string, Score][] = [
    ['score + q * kv - h / 2', (s, _b, h, q, kv) => s + q * kv - h / 2],
    ['score - q - kv', (s, _b, _h, q, kv) => s - q - kv],
    ['score * -q % 5 + +kv', (s, _b, _h, q, kv) => ((s * -q) % 5) + kv],
    ['(score + q) * (kv - 1) / (b + 1)', (s, b, _h, q, kv) => ((s + q) * (kv - 1)) / (b + 1)],
    ['q > kv ? score : kv > 5 ? -score : 0', (s, _b, _h, q, kv) => (q > kv ? s : kv > 5 ? -s : 0)],
  ];
  for (const [source, js] of scores) it(source, () => sameScore(source, js));

  it('random typed expressions agree with JS (the test uses JS as the oracle)', () => {
    let seed = 12345;
    const rand = (n: number) => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return (seed >>> 8) % n;
    };
    const pick = <T>(xs: T[]): T => xs[rand(xs.length)];
    const num = (d: number): string => {
      if (d <= 0 || rand(4) === 0) return pick(['q', 'kv', 'b', 'h', '2', '3', '0.5', '1']);
      switch (rand(5)) {
        case 0:
          return `- ${num(d - 1)}`;
        case 1:
          return `(${bool(d - 1)} ? ${num(d - 1)} : ${num(d - 1)})`;
        case 2:
          return `${pick(['abs', 'floor'])}(${num(d - 1)})`;
        case 3:
          return `(${num(d - 1)})`;
        default:
          return `${num(d - 1)} ${pick(['+', '-', '*', '/', '%'])} ${num(d - 1)}`;
      }
    };
    const bool = (d: number): string => {
      if (d <= 0 || rand(5) === 0) return pick(['true', 'false', 'q >= kv', 'b == 1']);
      switch (rand(5)) {
        case 0:
          return `!(${bool(d - 1)})`;
        case 1:
          return `${num(d - 1)} ${pick(['<', '<=', '>', '>=', '==', '!='])} ${num(d - 1)}`;
        case 2:
          return `${bool(d - 1)} ${pick(['==', '!=', '===', '!=='])} ${bool(d - 1)}`;
        case 3:
          return `(${bool(d - 1)})`;
        default:
          return `${bool(d - 1)} ${pick(['&&', '||'])} ${bool(d - 1)}`;
      }
    };
    let compiled = 0;
    for (let n = 0; n < 300; n++) {
      const source = bool(5);
      let f: Mask;
      try {
        f = compileMask(source);
      } catch (err) {
        // Unparenthesized text can re-associate into a mixed-type comparison (JS coerces; we reject).
        expect(err).toBeInstanceOf(ModExpressionError);
        continue;
      }
      compiled++;
      const js = new Function('b', 'h', 'q', 'kv', `const { abs, floor } = Math; return ${source};`) as Mask;
      for (const [b, h, q, kv] of grid()) {
        if (f(b, h, q, kv) !== js(b, h, q, kv))
          throw new Error(`${source} differs at (${b}, ${h}, ${q}, ${kv})`);
      }
    }
    expect(compiled).toBeGreaterThan(150);
  });
});

describe('compile errors carry a caret and a hint', () => {
  it('unknown identifier lists the allowed names', () => {
    const e = compileError('q >= foo', 'mask', { arrays: { doc: [0] } });
    expectCaret(e, 5);
    expect(e.message).toMatch(/unknown name 'foo'/);
    expect(e.message).toContain('variables b, h, q (q_idx), kv (kv_idx)');
    expect(e.message).toContain('functions abs, floor');
    expect(e.message).toContain('arrays doc');
    expect(e.message).not.toContain('score');
    expect(compileError('foo(q)').message).toMatch(/unknown function 'foo'/);
    expect(compileError('foo[q] == 1').message).toMatch(
      /unknown array 'foo'.*no arrays \(pass them in options\.arrays\)/,
    );
    expect(compileError('score + foo', 'score').message).toContain('variables score, b, h');
  });

  it('score in a mask names it', () => {
    const e = compileError('q >= kv && score > 0');
    expectCaret(e, 11);
    expect(e.message).toContain("'score' is only available in score expressions");
  });

  it('globals, prototype names and JS keywords are unknown identifiers', () => {
    const options = { arrays: { doc: new Int32Array(4) } };
    for (const name of [
      'constructor',
      '__proto__',
      'prototype',
      'toString',
      'valueOf',
      'hasOwnProperty',
      'globalThis',
      'window',
      'process',
      'require',
      'eval',
      'Function',
      'Math',
      'this',
      'self',
      'undefined',
      'NaN',
      'length',
      'new',
      'import',
    ]) {
      const e = compileError(`q >= kv && ${name} == 1`, 'mask', options);
      expect(e.message).toContain(`unknown name '${name}'`);
      expectCaret(e, 11);
      expect(compileError(`${name}(q) == 1`, 'mask', options).message).toContain(
        `unknown function '${name}'`,
      );
      expect(compileError(`${name}[0] == 1`, 'mask', options).message).toContain(`unknown array '${name}'`);
    }
  });

  it('statements, property access, strings and assignment never reach eval or Function', () => {
    const e = compileError('q >= kv; process.exit()');
    expectCaret(e, 7);
    expect(e.message).toContain("unexpected character ';'");
    expect(compileError('q >= kv && process.exit()').message).toContain("unknown name 'process'");
    expect(compileError('doc.constructor == 1', 'mask', { arrays: { doc: [1] } }).message).toContain(
      'doc is an array; index it, e.g. doc[q]',
    );
    expect(compileError('abs.constructor("return 1")() == 1').message).toContain('abs is a function');
    expect(compileError('q >= kv && "a" == "a"').message).toContain('there are no strings');
    expect(compileError('q = kv').message).toContain('compare with ==');
    expect(compileError('q >= kv, kv >= 0').message).toContain("unexpected ','");
    expect(compileError('(() => true)()').message).toContain("expected a value, found ')'");
    expect(compileError('q ** 2 > 1').message).toContain('there is no ** operator');
    expect(compileError('[q][0] == 1').message).toContain("expected a value, found '['");
  });

  it('the module contains no eval or Function constructor, and compiling calls neither', () => {
    const text = readFileSync(new URL('../src/flex/expr.ts', import.meta.url), 'utf8')
      .replace(/\/\*[\s\S]*?\*\//g, '')
      .replace(/\/\/.*$/gm, '');
    expect(text).toContain('function compileMask');
    expect(text).not.toMatch(/\beval\s*\(|new\s+Function|\bFunction\s*\(|import\s*\(/);
    const g = globalThis as { eval: unknown; Function: unknown };
    const saved = [g.eval, g.Function];
    g.eval = () => {
      throw new Error('eval called');
    };
    g.Function = () => {
      throw new Error('Function called');
    };
    try {
      const m = compileMask('q >= kv && doc[q] == doc[kv] ? true : abs(q - kv) < 2', {
        arrays: { doc: [0, 0, 1] },
      });
      expect(m(0, 0, 2, 1)).toBe(true);
      expect(m(0, 0, 0, 2)).toBe(false);
      expect(compileScore('30 * tanh(score / 30)')(0, 0, 0, 0, 0)).toBe(0);
    } finally {
      [g.eval, g.Function] = saved;
    }
  });

  it('type errors', () => {
    let e = compileError('q + (kv > 1) > 0');
    expectCaret(e, 4);
    expect(e.message).toContain("'+' needs numbers, but '(kv > 1)' is true/false");
    expect(e.message).toContain('(kv > 1 ? 1 : 0)');

    e = compileError('!3');
    expectCaret(e, 1);
    expect(e.message).toContain("'!' needs true/false, but '3' is a number");

    e = compileError('!q >= kv');
    expectCaret(e, 1);
    expect(e.message).toContain('binds tighter than comparisons');

    e = compileError('q - kv');
    expectCaret(e, 0);
    expect(e.message).toContain('a mask expression must be true/false, e.g. q >= kv');

    e = compileError('q >= kv', 'score');
    expectCaret(e, 0);
    expect(e.message).toContain('a score expression must be a number, e.g. score + (kv - q)');
    expect(e.message).toContain('q >= kv ? score : -inf');

    e = compileError('q > kv ? 1 : true');
    expectCaret(e, 13);
    expect(e.message).toContain(
      "the branches of ?: must have the same type, but '1' is a number and 'true' is true/false",
    );

    e = compileError('q ? true : false');
    expectCaret(e, 0);
    expect(e.message).toContain('the condition of ?: must be true/false');

    e = compileError('where(q > 0, 1, q > kv)');
    expect(e.message).toContain('the branches of where must have the same type');
    expect(compileError('where(q, true, false)').message).toContain(
      'the condition of where must be true/false',
    );

    e = compileError('q < kv < 3');
    expectCaret(e, 0);
    expect(e.message).toContain('comparisons do not chain');

    e = compileError('q == (kv > 1)');
    expectCaret(e, 5);
    expect(e.message).toContain("'==' compares two numbers or two true/false values");

    e = compileError('q & kv');
    expectCaret(e, 0);
    expect(e.message).toContain("('&' is the boolean and here)");

    expect(compileError('q >= kv && 1').message).toContain("'&&' needs true/false on both sides");
    expect(compileError('-(q > kv)', 'score').message).toContain("unary '-' needs a number");
    expect(compileError('not q', 'mask').message).toContain("'not' needs true/false");
    expect(compileError('q == not kv').message).toContain("put 'not …' in parentheses");
    expect(compileError('abs(q > kv) > 0').message).toContain('abs needs numbers');
    expect(compileError('doc[q > 1] == 0', 'mask', { arrays: { doc: [0] } }).message).toContain(
      'the index of doc must be a number',
    );
  });

  it('arity errors point at the function', () => {
    let e = compileError('min(q) > 0');
    expectCaret(e, 0);
    expect(e.message).toContain('min takes at least 2 arguments, got 1');
    e = compileError('q > abs(q, kv)');
    expectCaret(e, 4);
    expect(e.message).toContain('abs takes 1 argument, got 2');
    expect(compileError('clamp(q, 1) > 0').message).toContain('clamp takes 3 arguments (x, lo, hi), got 2');
    expect(compileError('where(q > 0, true)').message).toContain('where takes 3 arguments');
    expect(compileError('abs > 0').message).toContain('abs is a function; call it');
  });

  it('unbalanced parentheses and brackets', () => {
    let e = compileError('(q >= kv');
    expectCaret(e, 0);
    expect(e.message).toContain("missing ')': this '(' is never closed");
    e = compileError('((q >= kv) && (kv > 1)');
    expectCaret(e, 0);
    e = compileError('q >= kv)');
    expectCaret(e, 7);
    expect(e.message).toContain("unexpected ')': there is no '(' to close");
    e = compileError('(q >= kv]');
    expectCaret(e, 8);
    expect(e.message).toContain("expected ')' to close the '(' at column 0, found ']'");
    e = compileError('max(q, kv > 1', 'score');
    expectCaret(e, 3);
    expect(e.message).toContain('call of max is never closed');
    e = compileError('doc[q == 1', 'mask', { arrays: { doc: [0] } });
    expectCaret(e, 3);
    expect(e.message).toContain("missing ']'");
    e = compileError('q > kv ? true false');
    expectCaret(e, 14);
    expect(e.message).toContain("expected ':' of the ?: at column 7, found 'false'");
  });

  it('trailing garbage and truncated input', () => {
    let e = compileError('q >= kv kv');
    expectCaret(e, 8);
    expect(e.message).toContain("unexpected 'kv' after a complete expression (a missing operator?)");
    e = compileError('q >= kv)(');
    expectCaret(e, 7);
    e = compileError('q >=');
    expectCaret(e, 4);
    expect(e.message).toContain("the expression ends early: a value is missing after '>='");
    e = compileError('q >= 3q');
    expectCaret(e, 5);
    expect(e.message).toContain("malformed number '3q'");
    expect(compileError('q >= 1e').message).toContain("malformed number '1e'");
    expect(compileError('q >= 0x10').message).toContain("malformed number '0x10'");
    e = compileError('q >= kv @');
    expectCaret(e, 8);
    expect(e.message).toContain("unexpected character '@'");
  });

  it('empty source', () => {
    for (const source of ['', '   ', '\n\t']) {
      const e = compileError(source);
      expect(e.column).toBe(0);
      expect(e.message).toContain('empty expression; a mask is e.g. q >= kv');
    }
    expect(compileError('', 'score').message).toContain('a score is e.g. score + (kv - q)');
  });

  it('too long', () => {
    const source = `q >= kv${' && q >= kv'.repeat(200)}`;
    expect(source.length).toBeGreaterThan(MAX_SOURCE_LENGTH);
    const e = compileError(source);
    expect(e.column).toBe(MAX_SOURCE_LENGTH);
    expect(e.message).toContain(`the expression is ${source.length} characters long; the limit is 2000`);
    // The caret line is cut around the column, not 2000 characters wide.
    const [, line, caret] = e.message.split('\n');
    expect(line.length).toBeLessThan(120);
    expect(line[caret.length - 1]).toBe(source[MAX_SOURCE_LENGTH]);
    // Exactly at the limit is fine.
    const ok = `${'('.repeat(10)}q >= kv${')'.repeat(10)}`.padEnd(MAX_SOURCE_LENGTH, ' ');
    expect(compileMask(ok)(0, 0, 1, 0)).toBe(true);
  });

  it('too deep', () => {
    const deep = (n: number) => `${'('.repeat(n)}q${')'.repeat(n)} >= kv`;
    expect(compileMask(deep(MAX_DEPTH))(0, 0, 1, 0)).toBe(true);
    const e = compileError(deep(MAX_DEPTH + 1));
    expect(e.column).toBe(MAX_DEPTH);
    expect(e.message).toContain('nests deeper than 100 levels');
    expect(compileError(`${'-'.repeat(101)}q < kv`).message).toContain('nests deeper than 100 levels');
    expect(compileError(`${'abs('.repeat(101)}q${')'.repeat(101)} < kv`).message).toContain('nests deeper');
    expect(compileError(`${'!'.repeat(101)}true`).message).toContain('nests deeper');
    // Long flat chains are not nesting.
    sameMask(`${Array.from({ length: 300 }, () => 'q').join(' + ')} >= kv`, (_b, _h, q, kv) => 300 * q >= kv);
  });

  it('multi-line sources show the offending line', () => {
    const e = compileError('q >= kv &&\n  foo > 1');
    expect(e.column).toBe(13);
    expect(e.message.split('\n').slice(-2)).toEqual(['    foo > 1', '    ^']);
  });

  it('bad options are TypeErrors', () => {
    expect(() => compileMask('q >= kv', { arrays: { q: [0] } })).toThrow(/array name 'q' is taken/);
    expect(() => compileMask('q >= kv', { arrays: { min: [0] } })).toThrow(/array name 'min' is taken/);
    expect(() => compileMask('q >= kv', { arrays: { 'a-b': [0] } })).toThrow(/not a valid name/);
    expect(() => compileMask('q >= kv', { arrays: { doc: 3 as unknown as number[] } })).toThrow(TypeError);
    expect(() => compileMask(42 as unknown as string)).toThrow(
      /compileMask: the expression must be a string/,
    );
  });
});

describe('runtime index errors', () => {
  const doc = new Int32Array([0, 0, 1, 1]);

  it('out of range names the array, index, length and (b, h, q, kv)', () => {
    const f = compileMask('q >= kv && doc[q] == doc[kv]', { arrays: { doc } });
    expect(f(0, 0, 3, 2)).toBe(true);
    let err: unknown;
    try {
      f(1, 2, 5, 0);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ModEvaluationError);
    const e = err as ModEvaluationError;
    expect(e.message).toContain('index 5 of array doc (length 4) is out of range at (b=1, h=2, q=5, kv=0)');
    expect([e.array, e.index, e.length, e.b, e.h, e.q, e.kv]).toEqual(['doc', 5, 4, 1, 2, 5, 0]);
    expect(e.column).toBe(11);
    expect(e.message.split('\n').slice(-2)).toEqual(['  q >= kv && doc[q] == doc[kv]', '             ^']);
    // Short-circuit: the guard keeps doc[q] from being read.
    expect(f(0, 0, 1, 5)).toBe(false);
  });

  it('negative and non-integer indices; score mods report b, h, q, kv (not the score)', () => {
    const f = compileScore('score + doc[q - kv] + doc[q / 2]', { arrays: { doc } });
    expect(f(1, 0, 0, 2, 1)).toBe(1);
    expect(() => f(1.5, 3, 1, 1, 2)).toThrow(
      'index -1 of array doc (length 4) is out of range at (b=3, h=1, q=1, kv=2)',
    );
    expect(() => f(1.5, 0, 0, 3, 0)).toThrow(
      'index 1.5 of array doc (length 4) is not an integer at (b=0, h=0, q=3, kv=0)',
    );
    expect(() => compileScore('doc[score]', { arrays: { doc } })(NaN, 0, 0, 0, 0)).toThrow('index NaN');
  });

  it('arrays are read live', () => {
    const ids = [0, 1, 2];
    const f = compileMask('ids[q] == ids[kv]', { arrays: { ids } });
    expect(f(0, 0, 0, 1)).toBe(false);
    ids[1] = 0;
    expect(f(0, 0, 0, 1)).toBe(true);
  });
});
