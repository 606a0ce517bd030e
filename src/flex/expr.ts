// Mask and score mods typed as small expressions (`q >= kv && doc[q] == doc[kv]`, `30 * tanh(score / 30)`),
// compiled with no eval or new Function by a hand-written parser: a tiny, typed, sandboxed language (general
// JS-expression libraries either evaluate JS or are untyped). One decision to know: every node is typed
// number or true/false at compile time and becomes one closure, so only a bad array index fails at run time.

/** Which mod an expression is: a mask mod (true/false) or a score mod (a number; may read `score`). */
export type ModKind = 'mask' | 'score';

/** Options of compileMask / compileScore. */
export interface CompileOptions {
  /**
   * Named integer/float arrays the expression may index, e.g. { doc: Int32Array } for `doc[q] == doc[kv]`.
   * An index that is out of range or not an integer throws a ModEvaluationError naming the array, the index
   * and the length. The arrays are read live (not copied), so later writes to them are seen.
   */
  arrays?: Record<string, ArrayLike<number>>;
}

/** A compiled mask mod; `source` and `toString()` give the expression text. */
export interface CompiledMask {
  (b: number, h: number, qIdx: number, kvIdx: number): boolean;
  readonly source: string;
}

/** A compiled score mod; `source` and `toString()` give the expression text. */
export interface CompiledScore {
  (score: number, b: number, h: number, qIdx: number, kvIdx: number): number;
  readonly source: string;
}

/** Most characters an expression may have. */
export const MAX_SOURCE_LENGTH = 2000;
/** Deepest nesting of parentheses, brackets, calls, unary operators and ternaries. */
export const MAX_DEPTH = 100;

/**
 * A compile error: `message` is the problem and hint, then the source line with a caret under `column`
 * (0-based, in UTF-16 units of `source`); `detail` is the message without the caret lines.
 */
export class ModExpressionError extends SyntaxError {
  readonly column: number;
  readonly source: string;
  readonly detail: string;

  constructor(detail: string, source: string, column: number) {
    super(`${detail}\n${caretLines(source, column)}`);
    this.name = 'ModExpressionError';
    this.column = column;
    this.source = source;
    this.detail = detail;
  }
}

/**
 * An error while a compiled mod runs (an array index out of range or not an integer): names the array, the
 * index, the length and the (b, h, q, kv) values, then shows the source with a caret under the indexing.
 */
export class ModEvaluationError extends RangeError {
  readonly column: number;
  readonly source: string;
  readonly array: string;
  readonly index: number;
  readonly length: number;
  readonly b: number;
  readonly h: number;
  readonly q: number;
  readonly kv: number;

  constructor(
    source: string,
    column: number,
    array: string,
    index: number,
    length: number,
    at: [b: number, h: number, q: number, kv: number],
  ) {
    const why = Number.isInteger(index) ? 'is out of range' : 'is not an integer';
    const [b, h, q, kv] = at;
    super(
      `${array}[${index}]: index ${index} of array ${array} (length ${length}) ${why} at (b=${b}, h=${h}, q=${q}, kv=${kv})\n` +
        caretLines(source, column),
    );
    this.name = 'ModEvaluationError';
    this.column = column;
    this.source = source;
    this.array = array;
    this.index = index;
    this.length = length;
    this.b = b;
    this.h = h;
    this.q = q;
    this.kv = kv;
  }
}

/**
 * Compiles a mask mod expression, e.g. `q >= kv`, `q - kv < 4 && kv <= q`, `(q >= kv) & (doc[q] == doc[kv])`.
 * Throws ModExpressionError when the text is not a valid true/false expression.
 */
export function compileMask(source: string, options: CompileOptions = {}): CompiledMask {
  return brand(compile(source, 'mask', options), source) as CompiledMask;
}

/**
 * Compiles a score mod expression, e.g. `score + 0.5 * (kv - q)`, `30 * tanh(score / 30)`,
 * `q >= kv ? score : -inf`. Throws ModExpressionError when the text is not a valid numeric expression.
 */
export function compileScore(source: string, options: CompileOptions = {}): CompiledScore {
  return brand(compile(source, 'score', options), source) as CompiledScore;
}

// ---------------------------------------------------------------------------------------------------------
// Closures. Every node is a function of the same five positional arguments: (b, h, q, kv, unused) for a
// mask and (score, b, h, q, kv) for a score; only the variable leaves know which position is which, so the
// root closure is the compiled mod itself, with no wrapper call.

type Fn<T> = (a0: number, a1: number, a2: number, a3: number, a4: number) => T;
type Type = 'number' | 'boolean';

interface NumNode {
  type: 'number';
  fn: Fn<number>;
  constant: boolean;
  start: number;
  end: number;
}

interface BoolNode {
  type: 'boolean';
  fn: Fn<boolean>;
  constant: boolean;
  start: number;
  end: number;
}

type Node = NumNode | BoolNode;

const { abs, ceil, exp, floor, log, max, min, round, sign, sqrt, tanh } = Math;
const isInteger = Number.isInteger;
const hasOwn = Object.hasOwn;

function numNode(fn: Fn<number>, constant: boolean, start: number, end: number): NumNode {
  if (constant) {
    const v = fn(0, 0, 0, 0, 0);
    fn = () => v;
  }
  return { type: 'number', fn, constant, start, end };
}

function boolNode(fn: Fn<boolean>, constant: boolean, start: number, end: number): BoolNode {
  if (constant) {
    const v = fn(0, 0, 0, 0, 0);
    fn = () => v;
  }
  return { type: 'boolean', fn, constant, start, end };
}

const VARIABLES: ReadonlyMap<string, 'b' | 'h' | 'q' | 'kv' | 'score'> = new Map([
  ['b', 'b'],
  ['h', 'h'],
  ['q', 'q'],
  ['q_idx', 'q'],
  ['kv', 'kv'],
  ['kv_idx', 'kv'],
  ['score', 'score'],
] as const);

/** The leaf closure reading variable v, by the argument order of the mod kind. */
function variable(v: 'b' | 'h' | 'q' | 'kv' | 'score', kind: ModKind): Fn<number> {
  if (kind === 'mask') {
    if (v === 'b') return (b) => b;
    if (v === 'h') return (_b, h) => h;
    if (v === 'q') return (_b, _h, q) => q;
    return (_b, _h, _q, kv) => kv;
  }
  if (v === 'score') return (s) => s;
  if (v === 'b') return (_s, b) => b;
  if (v === 'h') return (_s, _b, h) => h;
  if (v === 'q') return (_s, _b, _h, q) => q;
  return (_s, _b, _h, _q, kv) => kv;
}

const UNARY_FUNCTIONS: ReadonlyMap<string, (x: number) => number> = new Map([
  ['abs', abs],
  ['floor', floor],
  ['ceil', ceil],
  ['round', round],
  ['sqrt', sqrt],
  ['exp', exp],
  ['log', log],
  ['tanh', tanh],
  ['sign', sign],
]);

const FUNCTION_NAMES = [...UNARY_FUNCTIONS.keys(), 'min', 'max', 'clamp', 'where'];
const isFunction = (name: string) => FUNCTION_NAMES.includes(name);

const KEYWORDS = ['true', 'false', 'inf', 'Infinity', 'and', 'or', 'not'];

// Binary operators by precedence (JS order, tightest last). `&`/`|` are the boolean and/or (short-circuit
// like &&/||) for PyTorch-style `(q >= kv) & (doc[q] == doc[kv])`; there are no bitwise integer operators.
const BINARY: ReadonlyMap<string, number> = new Map([
  ['||', 1],
  ['or', 1],
  ['&&', 2],
  ['and', 2],
  ['|', 3],
  ['&', 4],
  ['==', 5],
  ['!=', 5],
  ['===', 5],
  ['!==', 5],
  ['<', 6],
  ['<=', 6],
  ['>', 6],
  ['>=', 6],
  ['+', 7],
  ['-', 7],
  ['*', 8],
  ['/', 8],
  ['%', 8],
]);
/** `not x` takes as operand everything that binds tighter than `&&` (Python's precedence for `not`). */
const NOT_OPERAND = 3;

// ---------------------------------------------------------------------------------------------------------
// Tokens.

interface Token {
  kind: 'num' | 'id' | 'op' | 'bad' | 'end';
  text: string;
  col: number;
  value: number;
  /** For 'bad' tokens: why. */
  why?: string;
}

const NUMBER = /(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?/y;
const IDENT = /[A-Za-z_][A-Za-z0-9_]*/y;
const IDENT_CHAR = /[A-Za-z0-9_.]/;
const OPS3 = ['===', '!=='];
const OPS2 = ['==', '!=', '<=', '>=', '&&', '||'];
const OPS1 = '+-*/%<>!~&|?:()[],';

function lex(source: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  const n = source.length;
  while (i < n) {
    const c = source[i];
    if (c === ' ' || c === '\t' || c === '\n' || c === '\r') {
      i++;
      continue;
    }
    NUMBER.lastIndex = i;
    const num = NUMBER.exec(source);
    if (num) {
      let end = i + num[0].length;
      if (end < n && IDENT_CHAR.test(source[end])) {
        while (end < n && IDENT_CHAR.test(source[end])) end++;
        const text = source.slice(i, end);
        tokens.push({ kind: 'bad', text, col: i, value: 0, why: `malformed number '${text}'` });
      } else {
        tokens.push({ kind: 'num', text: num[0], col: i, value: Number(num[0]) });
      }
      i = end;
      continue;
    }
    IDENT.lastIndex = i;
    const id = IDENT.exec(source);
    if (id) {
      tokens.push({ kind: 'id', text: id[0], col: i, value: 0 });
      i += id[0].length;
      continue;
    }
    const three = source.slice(i, i + 3);
    const two = source.slice(i, i + 2);
    if (OPS3.includes(three)) {
      tokens.push({ kind: 'op', text: three, col: i, value: 0 });
      i += 3;
    } else if (OPS2.includes(two)) {
      tokens.push({ kind: 'op', text: two, col: i, value: 0 });
      i += 2;
    } else if (two === '**') {
      tokens.push({
        kind: 'bad',
        text: two,
        col: i,
        value: 0,
        why: 'there is no ** operator; write exp(y * log(x))',
      });
      i += 2;
    } else if (OPS1.includes(c)) {
      tokens.push({ kind: 'op', text: c, col: i, value: 0 });
      i++;
    } else {
      const ch = String.fromCodePoint(source.codePointAt(i)!);
      let why = `unexpected character '${ch}'`;
      if (c === '=') why += '; compare with ==';
      else if (c === ';') why += '; a mod is one expression, with no statements';
      else if (c === '.')
        why += '; there are no properties or methods, only b, h, q, kv, functions and arrays';
      else if (c === '"' || c === "'" || c === '`') why += '; there are no strings';
      tokens.push({ kind: 'bad', text: ch, col: i, value: 0, why });
      i += ch.length;
    }
  }
  tokens.push({ kind: 'end', text: '', col: n, value: 0 });
  return tokens;
}

// ---------------------------------------------------------------------------------------------------------
// Parser: precedence climbing over the tokens, building (and type-checking) the closures as it goes.

const typeName = (t: Type) => (t === 'number' ? 'a number' : 'true/false');

class Parser {
  private readonly tokens: Token[];
  private pos = 0;
  private depth = 0;

  constructor(
    private readonly source: string,
    private readonly kind: ModKind,
    private readonly arrays: Record<string, ArrayLike<number>>,
  ) {
    this.tokens = lex(source);
  }

  /** The whole expression, checked to be of the mod's type. */
  parseAll(): Node {
    if (this.peek().kind === 'end') {
      throw this.error(
        `empty expression; ${this.kind === 'mask' ? 'a mask is e.g. q >= kv' : 'a score is e.g. score + (kv - q)'}`,
        0,
      );
    }
    const node = this.parseExpression();
    const t = this.peek();
    if (t.kind !== 'end') {
      if (t.kind === 'bad') throw this.error(t.why!, t.col);
      if (t.text === ')') throw this.error("unexpected ')': there is no '(' to close", t.col);
      throw this.error(`unexpected '${t.text}' after a complete expression (a missing operator?)`, t.col);
    }
    if (this.kind === 'mask' && node.type !== 'boolean') {
      throw this.error(
        `a mask expression must be true/false, e.g. q >= kv; ${this.quote(node)} is a number`,
        node.start,
      );
    }
    if (this.kind === 'score' && node.type !== 'number') {
      throw this.error(
        `a score expression must be a number, e.g. score + (kv - q); ${this.quote(node)} is true/false ` +
          '(to block keys write e.g. q >= kv ? score : -inf)',
        node.start,
      );
    }
    return node;
  }

  private peek(): Token {
    return this.tokens[this.pos];
  }

  private next(): Token {
    return this.tokens[this.pos++];
  }

  private isOp(text: string): boolean {
    const t = this.peek();
    return t.kind === 'op' && t.text === text;
  }

  private error(detail: string, column: number): ModExpressionError {
    return new ModExpressionError(detail, this.source, column);
  }

  /** The source text of a node, shortened, in quotes. */
  private quote(node: Node): string {
    const text = this.source.slice(node.start, node.end).replace(/\s+/g, ' ');
    return `'${text.length > 40 ? `${text.slice(0, 39)}…` : text}'`;
  }

  /** `(x ? 1 : 0)` for a true/false node x: the hint for using it as a number. */
  private asNumber(node: Node): string {
    const text = this.source.slice(node.start, node.end);
    return text.startsWith('(') && text.endsWith(')')
      ? `(${text.slice(1, -1)} ? 1 : 0)`
      : `(${text} ? 1 : 0)`;
  }

  private enter(at: Token): void {
    if (++this.depth > MAX_DEPTH) {
      throw this.error(
        `the expression nests deeper than ${MAX_DEPTH} levels (parentheses, calls, indexing, unary operators, ` +
          'ternaries); simplify it',
        at.col,
      );
    }
  }

  private leave(): void {
    this.depth--;
  }

  /** Expects the closing `text` of the `open` token (a parenthesis, bracket or call). */
  private close(text: string, open: Token, what: string): Token {
    const t = this.peek();
    if (t.kind === 'op' && t.text === text) return this.next();
    if (t.kind === 'end') throw this.error(`missing '${text}': this ${what} is never closed`, open.col);
    if (t.kind === 'bad') throw this.error(t.why!, t.col);
    throw this.error(
      `expected '${text}' to close the ${what} at column ${open.col}, found '${t.text}' (a missing operator?)`,
      t.col,
    );
  }

  /** expression := or ('?' expression ':' expression)? */
  private parseExpression(): Node {
    const cond = this.parseBinary(1);
    if (!this.isOp('?')) return cond;
    const question = this.next();
    if (cond.type !== 'boolean') {
      throw this.error(
        `the condition of ?: must be true/false, but ${this.quote(cond)} is a number; compare it, e.g. x != 0`,
        cond.start,
      );
    }
    this.enter(question);
    const yes = this.parseExpression();
    if (!this.isOp(':')) {
      const t = this.peek();
      if (t.kind === 'bad') throw this.error(t.why!, t.col);
      throw this.error(
        `expected ':' of the ?: at column ${question.col}, found ${t.kind === 'end' ? 'the end' : `'${t.text}'`}`,
        t.col,
      );
    }
    this.next();
    const no = this.parseExpression();
    this.leave();
    return this.choose(cond, yes, no, '?:');
  }

  /** Both branches of a ternary or where(): same type; the closure picks one. */
  private choose(cond: BoolNode, yes: Node, no: Node, what: string): Node {
    const start = cond.start;
    const end = no.end;
    const c = cond.fn;
    if (yes.type === 'number' && no.type === 'number') {
      const y = yes.fn;
      const n = no.fn;
      const constant = cond.constant && yes.constant && no.constant;
      return numNode(
        (a0, a1, a2, a3, a4) => (c(a0, a1, a2, a3, a4) ? y(a0, a1, a2, a3, a4) : n(a0, a1, a2, a3, a4)),
        constant,
        start,
        end,
      );
    }
    if (yes.type === 'boolean' && no.type === 'boolean') {
      const y = yes.fn;
      const n = no.fn;
      const constant = cond.constant && yes.constant && no.constant;
      return boolNode(
        (a0, a1, a2, a3, a4) => (c(a0, a1, a2, a3, a4) ? y(a0, a1, a2, a3, a4) : n(a0, a1, a2, a3, a4)),
        constant,
        start,
        end,
      );
    }
    throw this.error(
      `the branches of ${what} must have the same type, but ${this.quote(yes)} is ${typeName(yes.type)} and ` +
        `${this.quote(no)} is ${typeName(no.type)}`,
      no.start,
    );
  }

  /** Binary operators of precedence ≥ minPrec, left-associative. */
  private parseBinary(minPrec: number): Node {
    let left = this.parseOperand(minPrec);
    for (;;) {
      const t = this.peek();
      const prec = t.kind === 'op' || t.kind === 'id' ? BINARY.get(t.text) : undefined;
      if (prec === undefined || prec < minPrec) return left;
      this.next();
      const right = this.parseBinary(prec + 1);
      left = this.binary(t, left, right);
    }
  }

  /** `not x` (where allowed), else a unary expression. */
  private parseOperand(minPrec: number): Node {
    const t = this.peek();
    if (t.kind !== 'id' || t.text !== 'not') return this.parseUnary();
    if (minPrec > NOT_OPERAND) {
      throw this.error(
        "put 'not …' in parentheses here (it binds looser than comparisons), or use '!'",
        t.col,
      );
    }
    this.next();
    this.enter(t);
    const operand = this.parseBinary(NOT_OPERAND);
    this.leave();
    return this.negate(t, operand);
  }

  private negate(op: Token, operand: Node): Node {
    if (operand.type !== 'boolean') {
      const hint =
        op.text === 'not'
          ? 'compare it, e.g. x != 0'
          : `it binds tighter than comparisons: write ${op.text}(a < b)`;
      throw this.error(
        `'${op.text}' needs true/false, but ${this.quote(operand)} is a number; ${hint}`,
        operand.start,
      );
    }
    const f = operand.fn;
    return boolNode((a0, a1, a2, a3, a4) => !f(a0, a1, a2, a3, a4), operand.constant, op.col, operand.end);
  }

  /** unary := ('-' | '+' | '!' | '~') unary | postfix */
  private parseUnary(): Node {
    const t = this.peek();
    if (t.kind !== 'op' || !(t.text === '-' || t.text === '+' || t.text === '!' || t.text === '~')) {
      return this.parsePrimary();
    }
    this.next();
    this.enter(t);
    const operand = this.parseUnary();
    this.leave();
    if (t.text === '!' || t.text === '~') return this.negate(t, operand);
    if (operand.type !== 'number') {
      throw this.error(
        `unary '${t.text}' needs a number, but ${this.quote(operand)} is true/false`,
        operand.start,
      );
    }
    if (t.text === '+') return { ...operand, start: t.col };
    const f = operand.fn;
    return numNode((a0, a1, a2, a3, a4) => -f(a0, a1, a2, a3, a4), operand.constant, t.col, operand.end);
  }

  /** primary := number | true | false | inf | variable | '(' expression ')' | name '(' args ')' | name '[' expression ']' */
  private parsePrimary(): Node {
    const t = this.next();
    const end = t.col + t.text.length;
    switch (t.kind) {
      case 'num': {
        const v = t.value;
        return numNode(() => v, true, t.col, end);
      }
      case 'bad':
        throw this.error(t.why!, t.col);
      case 'end': {
        const prev = this.tokens[this.pos - 2];
        const after = prev ? ` after '${prev.text}'` : '';
        throw this.error(`the expression ends early: a value is missing${after}`, t.col);
      }
      case 'op': {
        if (t.text === '(') {
          this.enter(t);
          const inner = this.parseExpression();
          const close = this.close(')', t, "'('");
          this.leave();
          return { ...inner, start: t.col, end: close.col + 1 };
        }
        throw this.error(`expected a value, found '${t.text}'`, t.col);
      }
      case 'id':
        return this.parseName(t);
    }
  }

  private parseName(t: Token): Node {
    const name = t.text;
    const end = t.col + name.length;
    if (name === 'true' || name === 'false') {
      const v = name === 'true';
      return boolNode(() => v, true, t.col, end);
    }
    if (name === 'inf' || name === 'Infinity') return numNode(() => Infinity, true, t.col, end);
    if (name === 'and' || name === 'or' || name === 'not') {
      throw this.error(
        name === 'not'
          ? "put 'not …' in parentheses here (it binds looser than comparisons), or use '!'"
          : `expected a value before '${name}'`,
        t.col,
      );
    }
    const v = VARIABLES.get(name);
    if (v !== undefined) {
      if (v === 'score' && this.kind === 'mask') {
        throw this.error(
          "'score' is only available in score expressions (compileScore); a mask sees b, h, q, kv",
          t.col,
        );
      }
      return numNode(variable(v, this.kind), false, t.col, end);
    }
    if (isFunction(name)) {
      if (!this.isOp('(')) throw this.error(`${name} is a function; call it, e.g. ${name}(…)`, t.col);
      return this.parseCall(t);
    }
    if (hasOwn(this.arrays, name)) {
      if (!this.isOp('[')) throw this.error(`${name} is an array; index it, e.g. ${name}[q]`, t.col);
      return this.parseIndex(t);
    }
    const what = this.isOp('(') ? 'function' : this.isOp('[') ? 'array' : 'name';
    throw this.error(`unknown ${what} '${name}'; ${this.allowed()}`, t.col);
  }

  private allowed(): string {
    const vars =
      this.kind === 'score' ? 'score, b, h, q (q_idx), kv (kv_idx)' : 'b, h, q (q_idx), kv (kv_idx)';
    const arrays = Object.keys(this.arrays);
    return (
      `allowed: variables ${vars}; functions ${FUNCTION_NAMES.join(', ')}; ` +
      (arrays.length ? `arrays ${arrays.join(', ')}` : 'no arrays (pass them in options.arrays)')
    );
  }

  private parseIndex(name: Token): Node {
    const open = this.next();
    this.enter(open);
    const index = this.parseExpression();
    const close = this.close(']', open, `'[' of ${name.text}`);
    this.leave();
    if (index.type !== 'number') {
      throw this.error(
        `the index of ${name.text} must be a number, but ${this.quote(index)} is true/false`,
        index.start,
      );
    }
    const arr = this.arrays[name.text];
    const i = index.fn;
    const source = this.source;
    const kind = this.kind;
    const col = name.col;
    const array = name.text;
    const fail = (k: number, a0: number, a1: number, a2: number, a3: number, a4: number): never => {
      const at: [number, number, number, number] = kind === 'mask' ? [a0, a1, a2, a3] : [a1, a2, a3, a4];
      throw new ModEvaluationError(source, col, array, k, arr.length, at);
    };
    return numNode(
      (a0, a1, a2, a3, a4) => {
        const k = i(a0, a1, a2, a3, a4);
        return k >= 0 && k < arr.length && isInteger(k) ? arr[k] : fail(k, a0, a1, a2, a3, a4);
      },
      false,
      name.col,
      close.col + 1,
    );
  }

  private parseCall(name: Token): Node {
    const open = this.next();
    this.enter(open);
    const args: Node[] = [];
    if (!this.isOp(')')) {
      for (;;) {
        args.push(this.parseExpression());
        if (!this.isOp(',')) break;
        this.next();
      }
    }
    const close = this.close(')', open, `call of ${name.text}`);
    this.leave();
    return this.call(name, args, close.col + 1);
  }

  private call(name: Token, args: Node[], end: number): Node {
    const fname = name.text;
    const start = name.col;
    const arity = (ok: boolean, want: string) => {
      if (!ok) throw this.error(`${fname} takes ${want}, got ${args.length}`, start);
    };
    const constant = args.every((a) => a.constant);
    if (fname === 'where') {
      arity(args.length === 3, '3 arguments (cond, a, b)');
      const cond = args[0];
      if (cond.type !== 'boolean') {
        throw this.error(
          `the condition of where must be true/false, but ${this.quote(cond)} is a number`,
          cond.start,
        );
      }
      return { ...this.choose(cond, args[1], args[2], 'where'), start, end };
    }
    for (const a of args) {
      if (a.type !== 'number') {
        throw this.error(`${fname} needs numbers, but ${this.quote(a)} is true/false`, a.start);
      }
    }
    const fns = args.map((a) => a.fn as Fn<number>);
    const unary = UNARY_FUNCTIONS.get(fname);
    if (unary) {
      arity(args.length === 1, '1 argument');
      const x = fns[0];
      return numNode((a0, a1, a2, a3, a4) => unary(x(a0, a1, a2, a3, a4)), constant, start, end);
    }
    if (fname === 'clamp') {
      arity(args.length === 3, '3 arguments (x, lo, hi)');
      const [x, lo, hi] = fns;
      return numNode(
        (a0, a1, a2, a3, a4) =>
          min(max(x(a0, a1, a2, a3, a4), lo(a0, a1, a2, a3, a4)), hi(a0, a1, a2, a3, a4)),
        constant,
        start,
        end,
      );
    }
    // min / max
    arity(args.length >= 2, 'at least 2 arguments');
    const f = fname === 'min' ? min : max;
    if (fns.length === 2) {
      const [x, y] = fns;
      return numNode(
        (a0, a1, a2, a3, a4) => f(x(a0, a1, a2, a3, a4), y(a0, a1, a2, a3, a4)),
        constant,
        start,
        end,
      );
    }
    return numNode(
      (a0, a1, a2, a3, a4) => {
        let r = fns[0](a0, a1, a2, a3, a4);
        for (let k = 1; k < fns.length; k++) r = f(r, fns[k](a0, a1, a2, a3, a4));
        return r;
      },
      constant,
      start,
      end,
    );
  }

  /** A binary operator node, type-checked. */
  private binary(op: Token, l: Node, r: Node): Node {
    const o = op.text;
    const constant = l.constant && r.constant;
    const start = l.start;
    const end = r.end;
    const prec = BINARY.get(o)!;
    if (prec <= 4) {
      // || or && and | &
      for (const side of [l, r]) {
        if (side.type !== 'boolean') {
          const extra =
            o === '&' || o === '|' ? ` ('${o}' is the boolean ${o === '&' ? 'and' : 'or'} here)` : '';
          throw this.error(
            `'${o}' needs true/false on both sides${extra}, but ${this.quote(side)} is a number; compare it, e.g. x != 0`,
            side.start,
          );
        }
      }
      const x = l.fn as Fn<boolean>;
      const y = r.fn as Fn<boolean>;
      if (prec === 1 || prec === 3) {
        return boolNode(
          (a0, a1, a2, a3, a4) => x(a0, a1, a2, a3, a4) || y(a0, a1, a2, a3, a4),
          constant,
          start,
          end,
        );
      }
      return boolNode(
        (a0, a1, a2, a3, a4) => x(a0, a1, a2, a3, a4) && y(a0, a1, a2, a3, a4),
        constant,
        start,
        end,
      );
    }
    if (prec === 5) {
      // == != === !==
      if (l.type !== r.type) {
        throw this.error(
          `'${o}' compares two numbers or two true/false values, but ${this.quote(l)} is ${typeName(l.type)} ` +
            `and ${this.quote(r)} is ${typeName(r.type)}`,
          r.start,
        );
      }
      const x = l.fn as Fn<number | boolean>;
      const y = r.fn as Fn<number | boolean>;
      if (o === '==' || o === '===') {
        return boolNode(
          (a0, a1, a2, a3, a4) => x(a0, a1, a2, a3, a4) === y(a0, a1, a2, a3, a4),
          constant,
          start,
          end,
        );
      }
      return boolNode(
        (a0, a1, a2, a3, a4) => x(a0, a1, a2, a3, a4) !== y(a0, a1, a2, a3, a4),
        constant,
        start,
        end,
      );
    }
    for (const side of [l, r]) {
      if (side.type !== 'number') {
        const hint =
          prec === 6
            ? ' (comparisons do not chain: write a < b && b < c)'
            : `; to use it as a number write ${this.asNumber(side)}`;
        throw this.error(`'${o}' needs numbers, but ${this.quote(side)} is true/false${hint}`, side.start);
      }
    }
    const x = l.fn as Fn<number>;
    const y = r.fn as Fn<number>;
    switch (o) {
      case '<':
        return boolNode(
          (a0, a1, a2, a3, a4) => x(a0, a1, a2, a3, a4) < y(a0, a1, a2, a3, a4),
          constant,
          start,
          end,
        );
      case '<=':
        return boolNode(
          (a0, a1, a2, a3, a4) => x(a0, a1, a2, a3, a4) <= y(a0, a1, a2, a3, a4),
          constant,
          start,
          end,
        );
      case '>':
        return boolNode(
          (a0, a1, a2, a3, a4) => x(a0, a1, a2, a3, a4) > y(a0, a1, a2, a3, a4),
          constant,
          start,
          end,
        );
      case '>=':
        return boolNode(
          (a0, a1, a2, a3, a4) => x(a0, a1, a2, a3, a4) >= y(a0, a1, a2, a3, a4),
          constant,
          start,
          end,
        );
      case '+':
        return numNode(
          (a0, a1, a2, a3, a4) => x(a0, a1, a2, a3, a4) + y(a0, a1, a2, a3, a4),
          constant,
          start,
          end,
        );
      case '-':
        return numNode(
          (a0, a1, a2, a3, a4) => x(a0, a1, a2, a3, a4) - y(a0, a1, a2, a3, a4),
          constant,
          start,
          end,
        );
      case '*':
        return numNode(
          (a0, a1, a2, a3, a4) => x(a0, a1, a2, a3, a4) * y(a0, a1, a2, a3, a4),
          constant,
          start,
          end,
        );
      case '/':
        return numNode(
          (a0, a1, a2, a3, a4) => x(a0, a1, a2, a3, a4) / y(a0, a1, a2, a3, a4),
          constant,
          start,
          end,
        );
      default:
        return numNode(
          (a0, a1, a2, a3, a4) => x(a0, a1, a2, a3, a4) % y(a0, a1, a2, a3, a4),
          constant,
          start,
          end,
        );
    }
  }
}

// ---------------------------------------------------------------------------------------------------------

function compile(source: string, kind: ModKind, options: CompileOptions): Fn<number | boolean> {
  const fnName = kind === 'mask' ? 'compileMask' : 'compileScore';
  if (typeof source !== 'string')
    throw new TypeError(`${fnName}: the expression must be a string, got ${typeof source}`);
  const arrays = options.arrays ?? {};
  for (const name of Object.keys(arrays)) {
    const a = arrays[name];
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
      throw new TypeError(`${fnName}: array name '${name}' is not a valid name (letters, digits, _)`);
    }
    if (VARIABLES.has(name) || isFunction(name) || KEYWORDS.includes(name)) {
      throw new TypeError(`${fnName}: array name '${name}' is taken by a variable, function or keyword`);
    }
    if (a === null || typeof a !== 'object' || typeof a.length !== 'number') {
      throw new TypeError(`${fnName}: array '${name}' must be an array or typed array`);
    }
  }
  if (source.length > MAX_SOURCE_LENGTH) {
    throw new ModExpressionError(
      `the expression is ${source.length} characters long; the limit is ${MAX_SOURCE_LENGTH}`,
      source,
      MAX_SOURCE_LENGTH,
    );
  }
  return new Parser(source, kind, arrays).parseAll().fn;
}

/** Gives a compiled root closure its read-only `source` and a `toString()` returning it. */
function brand<F extends Fn<number | boolean>>(fn: F, source: string): F {
  // Every compile builds fresh closures, so the root is never shared; wrap anyway if it already is branded.
  const f: F = hasOwn(fn, 'source')
    ? (((a0: number, a1: number, a2: number, a3: number, a4: number) => fn(a0, a1, a2, a3, a4)) as F)
    : fn;
  Object.defineProperty(f, 'source', { value: source, enumerable: true });
  Object.defineProperty(f, 'toString', { value: () => source });
  return f;
}

/** The source line holding `column`, then a caret under it (long lines are cut around the column). */
function caretLines(source: string, column: number): string {
  const lineStart = column > 0 ? source.lastIndexOf('\n', column - 1) + 1 : 0;
  let lineEnd = source.indexOf('\n', column);
  if (lineEnd < 0) lineEnd = source.length;
  let line = source.slice(lineStart, lineEnd).replace(/[\t\r\v\f]/g, ' ');
  let col = column - lineStart;
  const WIDTH = 100;
  if (line.length > WIDTH) {
    const from = Math.max(0, Math.min(col - WIDTH / 2, line.length - WIDTH));
    const to = from + WIDTH;
    line = `${from > 0 ? '…' : ''}${line.slice(from, to)}${to < line.length ? '…' : ''}`;
    col = col - from + (from > 0 ? 1 : 0);
  }
  return `  ${line}\n  ${' '.repeat(col)}^`;
}
