// The KV surface: seven operations and `once`, one op builder shared by `queen.kv`, the transaction's
// `kv` array and `kvOn(pgClient)`, so the three can never disagree on a shape. Every rule (expiry,
// expect, limits, charset, the reason taxonomy) is the cell's: the builders only spell operations,
// and a bad one is refused by the cell with its code.
//
// Every write answers an object, and objects are truthy: `if (await queen.kv.delete(ns, key))` is
// always taken. Read `applied` (or `won`, for `once`).

import type {
  Expiry,
  KvBatchAnswer,
  KvGetManyResult,
  KvGetResult,
  KvOnceResult,
  KvPreconditionVerdict,
  KvPrefixPage,
  KvResult,
  KvWriteResult,
  Version,
} from './types';
import { QueenError } from './errors';

/** One KV operation as the cell takes it (`op` and `ns` on every one). */
export type KvOp = { op: string; ns: string } & Record<string, unknown>;

export interface PutOptions {
  /** Absent: unconditional. 0: must not exist. A version: must be that version (never creates). */
  expect?: Version;
  /** A lost precondition fails the whole call (or bundle): nothing commits. */
  required?: boolean;
}

export type WriteOptions = Expiry & PutOptions;

export interface IncrOptions {
  min?: number | bigint;
  max?: number | bigint;
  required?: boolean;
}

export interface OnceOptions {
  /** What the marker holds (default `true`); a loser is handed the winner's. */
  value?: unknown;
  /** Default true: a marker already there rolls the whole bundle back. `false` only reports it. */
  required?: boolean;
}

export interface PrefixOptions {
  /** Keys per page (the cell's default 100, clamped to its ceiling, never refused). */
  limit?: number;
  /** Start after this key (exclusive). */
  after?: string;
}

/** `expect` written but undefined is sent as null, so the cell refuses it: never a silent upsert. */
function withExpect(op: KvOp, opts: object): KvOp {
  if ('expect' in opts) op.expect = (opts as { expect?: unknown }).expect ?? null;
  return op;
}

function withFields(op: KvOp, opts: object, fields: string[]): KvOp {
  for (const f of fields) {
    const v = (opts as Record<string, unknown>)[f];
    if (v !== undefined) op[f] = v;
  }
  return op;
}

const EXPIRY = ['ttlSeconds', 'forever'];

/**
 * An operation as the caller wrote it (batch, a bundle's kv): copied, with an `expect` written but
 * undefined sent as null, which the cell refuses. JSON would drop it, turning a fenced write into an
 * unconditional one without a word.
 */
export function guardedOp(op: KvOp): KvOp {
  return 'expect' in op && op.expect === undefined ? { ...op, expect: null } : { ...op };
}

/** The operations as the cell spells them. */
export const kvOp = {
  get: (ns: string, key: string): KvOp => ({ op: 'get', ns, key }),
  getMany: (ns: string, keys: string[]): KvOp => ({ op: 'getMany', ns, keys }),
  getPrefix: (ns: string, prefix: string, opts: PrefixOptions = {}): KvOp => withFields({ op: 'getPrefix', ns, prefix }, opts, ['limit', 'after']),
  put: (ns: string, key: string, value: unknown, opts: WriteOptions): KvOp =>
    withFields(withExpect({ op: 'put', ns, key, value }, opts), opts, [...EXPIRY, 'required']),
  putIfAbsent: (ns: string, key: string, value: unknown, opts: Expiry & { required?: boolean }): KvOp =>
    withFields({ op: 'putIfAbsent', ns, key, value }, opts, [...EXPIRY, 'required']),
  delete: (ns: string, key: string, opts: PutOptions = {}): KvOp => withFields(withExpect({ op: 'delete', ns, key }, opts), opts, ['required']),
  incr: (ns: string, key: string, delta: number | bigint, opts: Expiry & IncrOptions): KvOp =>
    withFields({ op: 'incr', ns, key, delta }, opts, ['min', 'max', ...EXPIRY, 'required']),
  /** `once`: putIfAbsent under the name of the question it answers (is this done?), required by default. */
  once: (ns: string, key: string, opts: Expiry & OnceOptions): KvOp =>
    withFields({ op: 'putIfAbsent', ns, key, value: opts.value === undefined ? true : opts.value, required: opts.required !== false }, opts, EXPIRY),
};

type Obj = Record<string, unknown>;

/** The kv_precondition verdict, as the KV route and the transaction wire both answer it. */
export function preconditionOf(body: Obj): KvPreconditionVerdict {
  return {
    success: false,
    reason: 'kv_precondition',
    failedIndex: body.failedIndex as number,
    kvReason: body.kvReason as KvPreconditionVerdict['kvReason'],
    value: body.value === undefined ? null : body.value,
    version: body.version as Version,
  };
}

/** POST /api/v1/kv's answer (and the pg mode's, rendered the same way). */
export function kvAnswer(body: unknown): KvBatchAnswer {
  const b = (body ?? {}) as Obj;
  if (b.ok === true && Array.isArray(b.results)) return { success: true, results: b.results as KvResult[] };
  if (b.ok === false && b.reason === 'kv_precondition') return preconditionOf(b);
  throw new QueenError({ status: 200, code: 'unexpected_answer', message: 'The KV route answered a shape this client does not know.', body });
}

/** A once's result: `won` beside the putIfAbsent's answer. */
export function onceResult<T>(r: KvWriteResult<T>): KvOnceResult<T> {
  return { ...r, won: r.applied === true };
}

/** Applies a batch: over HTTP (queen.kv) or on the caller's PostgreSQL client (kvOn). */
export type ApplyKv = (ops: KvOp[]) => Promise<KvBatchAnswer>;

/** The seven operations, `once` and `batch` over an ApplyKv. */
export class Kv {
  constructor(private readonly apply: ApplyKv) {}

  /** The whole surface: the answers in order, or the verdict of a lost `required` (nothing applied). */
  batch(ops: KvOp[]): Promise<KvBatchAnswer> {
    return this.apply(ops.map(guardedOp));
  }

  /** `{found, key, value?, version?, expiresAt?, updatedAt?}`: `found` and `value: null` are two facts. */
  async get<T = unknown>(ns: string, key: string): Promise<KvGetResult<T>> {
    return (await this.read(kvOp.get(ns, key))) as KvGetResult<T>;
  }

  /** `{rows, missing}`: rows of the live keys in byte order, and the absent ones named. */
  async getMany<T = unknown>(ns: string, keys: string[]): Promise<KvGetManyResult<T>> {
    return (await this.read(kvOp.getMany(ns, keys))) as KvGetManyResult<T>;
  }

  /**
   * The keys under a prefix, a page at a time (`{rows, truncated, nextAfter}`), until the last.
   * Each page is its own snapshot: a key written behind the cursor meanwhile is not seen.
   */
  async *getPrefix<T = unknown>(ns: string, prefix: string, opts: PrefixOptions = {}): AsyncGenerator<KvPrefixPage<T>, void, undefined> {
    let after = opts.after;
    for (;;) {
      const page = (await this.read(kvOp.getPrefix(ns, prefix, { ...opts, after }))) as KvPrefixPage<T>;
      yield page;
      if (!page.truncated || page.nextAfter === null || page.nextAfter === undefined) return;
      after = page.nextAfter;
    }
  }

  put<T = unknown>(ns: string, key: string, value: T, opts: WriteOptions): Promise<KvWriteResult<T>> {
    return this.write(kvOp.put(ns, key, value, opts));
  }

  /** put with `expect: 0`: the loser is handed the winner's value and version. */
  putIfAbsent<T = unknown>(ns: string, key: string, value: T, opts: Expiry & { required?: boolean }): Promise<KvWriteResult<T>> {
    return this.write(kvOp.putIfAbsent(ns, key, value, opts));
  }

  delete(ns: string, key: string, opts: PutOptions = {}): Promise<KvWriteResult> {
    return this.write(kvOp.delete(ns, key, opts));
  }

  /**
   * Adds `delta` atomically. With `max` (or `min`), `applied` is the admission decision: a step past
   * it writes nothing and answers the current value. The expiry is create-only. A value past 2^53
   * comes back as a bigint.
   */
  incr(ns: string, key: string, delta: number | bigint, opts: Expiry & IncrOptions): Promise<KvWriteResult<number | bigint>> {
    return this.write(kvOp.incr(ns, key, delta, opts));
  }

  /** Writes the marker unless it is there: `won` says which. */
  async once<T = unknown>(ns: string, key: string, opts: Expiry & OnceOptions): Promise<KvOnceResult<T>> {
    return onceResult(await this.write<T>(kvOp.once(ns, key, opts)));
  }

  private async read(op: KvOp): Promise<KvResult> {
    const answer = await this.apply([op]);
    if (!answer.success) throw new QueenError({ status: 200, code: 'unexpected_answer', message: `A ${op.op} cannot lose a precondition, yet the cell said it did.`, body: answer });
    return answer.results[0];
  }

  /** One write's answer; a lost `required` arrives as the verdict, rendered as that answer. */
  private async write<T>(op: KvOp): Promise<KvWriteResult<T>> {
    const answer = await this.apply([op]);
    if (answer.success) return answer.results[0] as KvWriteResult<T>;
    return {
      index: 0,
      op: op.op as KvWriteResult['op'],
      key: op.key as string,
      applied: false,
      reason: answer.kvReason,
      found: answer.kvReason !== 'absent',
      value: answer.value as T | null,
      version: answer.version,
      precondition: true,
    };
  }
}
