// JSON that never narrows a number. The cell hands the request's numbers to PostgreSQL as written and
// returns the jsonb PostgreSQL produced, so `12345678901234567890` comes back as written; JSON.parse
// would turn it into 12345678901234567000 without a word, and an `incr` counter past 2^53 would be
// silently wrong. So:
//  - parse: an integer a double cannot hold exactly comes back as a `bigint`; a fraction a double
//    cannot hold (0.1000000000000000055511151231257827) is refused with a QueenPrecisionError
//    naming where it is, never rounded. Every other number is a plain `number`.
//  - stringify: a `bigint` is written as its digits, so a value read as a bigint writes back exact.
// The common answer has no such number: it is checked with one regular-expression pass and handed to
// JSON.parse; only an answer that holds one takes the slower parser below.

import { QueenPrecisionError } from './errors';

/** A string literal (skipped) or a number literal: the tokens the fast check looks at. */
const TOKENS = /"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g;

/** The digits and power of ten a decimal literal denotes, without leading or trailing zeros. */
function decimal(text: string): { negative: boolean; digits: string; exponent: number } {
  let s = text;
  const negative = s.startsWith('-');
  if (negative) s = s.slice(1);
  let exponent = 0;
  const e = s.search(/[eE]/);
  if (e >= 0) {
    exponent = Number(s.slice(e + 1));
    s = s.slice(0, e);
  }
  const dot = s.indexOf('.');
  if (dot >= 0) {
    exponent -= s.length - dot - 1;
    s = s.slice(0, dot) + s.slice(dot + 1);
  }
  s = s.replace(/^0+/, '');
  const trailing = s.length - s.replace(/0+$/, '').length;
  s = s.slice(0, s.length - trailing);
  exponent += trailing;
  if (s === '') return { negative: false, digits: '0', exponent: 0 };
  return { negative, digits: s, exponent };
}

function sameDecimal(a: string, b: string): boolean {
  const x = decimal(a);
  const y = decimal(b);
  return x.negative === y.negative && x.digits === y.digits && x.exponent === y.exponent;
}

/** The value a number literal should become: a number when a double holds it as written. */
function numberOf(text: string, where: () => string): number | bigint {
  const n = Number(text);
  if (/^-?\d+$/.test(text)) return Number.isSafeInteger(n) ? n : BigInt(text);
  if (Number.isFinite(n) && sameDecimal(text, String(n))) return n;
  // Not representable as a double. A whole number (written with a fraction part or an exponent,
  // as numeric arithmetic can render it: 12345678901234567891.0) is still exact as a bigint.
  const d = decimal(text);
  if (d.exponent >= 0 && d.exponent <= 100_000) {
    return BigInt((d.negative ? '-' : '') + d.digits + '0'.repeat(d.exponent));
  }
  throw new QueenPrecisionError(
    `The number ${text.length > 64 ? `${text.slice(0, 64)}...` : text} at ${where()} cannot be held by a JavaScript number ` +
      'without rounding, and it is not a whole number (which would come back as a bigint). It was not rounded: ' +
      'read it through a client that keeps decimals, or store it as a string.',
  );
}

function exactAsNumber(text: string): boolean {
  const n = Number(text);
  if (/^-?\d+$/.test(text)) return Number.isSafeInteger(n);
  return Number.isFinite(n) && sameDecimal(text, String(n));
}

/** JSON.parse, except that no number is narrowed (see the top of this file). */
export function parseJson(text: string): unknown {
  let plain = true;
  TOKENS.lastIndex = 0;
  for (let m = TOKENS.exec(text); m !== null; m = TOKENS.exec(text)) {
    if (m[0][0] !== '"' && !exactAsNumber(m[0])) {
      plain = false;
      break;
    }
  }
  return plain ? JSON.parse(text) : new LosslessParser(text).document();
}

/** A small recursive-descent JSON parser for the answers that hold a number a double cannot. */
class LosslessParser {
  private at = 0;
  private readonly path: Array<string | number> = [];

  constructor(private readonly text: string) {}

  document(): unknown {
    const value = this.value();
    this.space();
    if (this.at !== this.text.length) this.fail('end of the document');
    return value;
  }

  private where = (): string =>
    '$' + this.path.map((p) => (typeof p === 'number' ? `[${p}]` : /^[A-Za-z_$][\w$]*$/.test(p) ? `.${p}` : `[${JSON.stringify(p)}]`)).join('');

  private fail(expected: string): never {
    throw new SyntaxError(`Unexpected JSON at position ${this.at}: expected ${expected}.`);
  }

  private space(): void {
    while (this.at < this.text.length && ' \t\n\r'.includes(this.text[this.at])) this.at++;
  }

  private value(): unknown {
    this.space();
    const c = this.text[this.at];
    if (c === '{') return this.object();
    if (c === '[') return this.array();
    if (c === '"') return this.string();
    for (const [word, v] of [['true', true], ['false', false], ['null', null]] as const) {
      if (this.text.startsWith(word, this.at)) {
        this.at += word.length;
        return v;
      }
    }
    const m = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/.exec(this.text.slice(this.at, this.at + 100_000));
    if (!m) this.fail('a value');
    this.at += m[0].length;
    return numberOf(m[0], this.where);
  }

  private string(): string {
    const m = /^"(?:[^"\\\u0000-\u001f]|\\.)*"/.exec(this.text.slice(this.at));
    if (!m) this.fail('a string');
    this.at += m[0].length;
    return JSON.parse(m[0]) as string;
  }

  private array(): unknown[] {
    this.at++;
    const out: unknown[] = [];
    this.space();
    if (this.text[this.at] === ']') {
      this.at++;
      return out;
    }
    for (;;) {
      this.path.push(out.length);
      out.push(this.value());
      this.path.pop();
      this.space();
      const c = this.text[this.at++];
      if (c === ']') return out;
      if (c !== ',') this.fail(', or ]');
    }
  }

  private object(): Record<string, unknown> {
    this.at++;
    const out: Record<string, unknown> = {};
    this.space();
    if (this.text[this.at] === '}') {
      this.at++;
      return out;
    }
    for (;;) {
      this.space();
      if (this.text[this.at] !== '"') this.fail('a key');
      const key = this.string();
      this.space();
      if (this.text[this.at++] !== ':') this.fail(':');
      this.path.push(key);
      // Defined as an own property even for "__proto__", as JSON.parse does.
      Object.defineProperty(out, key, { value: this.value(), enumerable: true, writable: true, configurable: true });
      this.path.pop();
      this.space();
      const c = this.text[this.at++];
      if (c === '}') return out;
      if (c !== ',') this.fail(', or }');
    }
  }
}

/**
 * JSON.stringify, except that a bigint is written as its digits (JSON.stringify throws on one).
 * Everything else follows JSON.stringify: toJSON, undefined and functions dropped from objects and
 * written as null in arrays, non-finite numbers as null.
 */
export function stringifyJson(value: unknown): string {
  const out = write(value, '');
  return out === undefined ? 'null' : out;
}

function write(value: unknown, key: string): string | undefined {
  if (value !== null && typeof value === 'object' && typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    value = (value as { toJSON: (k: string) => unknown }).toJSON(key);
  }
  switch (typeof value) {
    case 'bigint':
      return value.toString();
    case 'undefined':
    case 'function':
    case 'symbol':
      return undefined;
    case 'object': {
      if (value === null) return 'null';
      if (Array.isArray(value)) return `[${value.map((v, i) => write(v, String(i)) ?? 'null').join(',')}]`;
      if (value instanceof Number || value instanceof String || value instanceof Boolean) return JSON.stringify(value);
      const parts: string[] = [];
      for (const k of Object.keys(value)) {
        const v = write((value as Record<string, unknown>)[k], k);
        if (v !== undefined) parts.push(`${JSON.stringify(k)}:${v}`);
      }
      return `{${parts.join(',')}}`;
    }
    default:
      return JSON.stringify(value);
  }
}
