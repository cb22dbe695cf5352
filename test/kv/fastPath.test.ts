// queen.kv_apply_fast_v1 (one operation alone) and queen.kv_fast_check_op_v1 (operations in a batch)
// are shortcuts for plainly valid operations; the general validation (kv_check_op_v1) stays the one
// definition of every rule. This suite holds the paths to the same answers: every operation below
// runs once with the shortcuts off
// (SET LOCAL queen.kv_fast_path = off) and once with it on, from the same state, and what a caller
// sees (the answer, or the refusal's SQLSTATE, code, index and message) must be identical. The
// operations sit on both sides of every edge of the shortcut's guard.
import { useDatabase } from '../support/database';
import { KV_APPLY_BATCH, KV_APPLY_ONE } from '../../shared/sql/kv';

const TENANT = '00000000-0000-0000-0000-000000000001';
const NOW = '2026-06-01T12:00:00.123456Z';

const db = useDatabase({ client: true });

beforeAll(async () => {
  // Drawn versions must never equal a fixture's (normalise tells them apart by value).
  await db.client.query(`SELECT setval('queen.kv_version_seq', 1000000)`);
  await db.client.query(
    `INSERT INTO queen.kv (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at) VALUES
       ($1, 'orders', 'live', '{"a": 1}', 101, NULL, '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z'),
       ($1, 'orders', 'ttl', '"x"', 102, '2026-06-01T12:00:10Z', '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z'),
       ($1, 'orders', 'expired', '7', 103, '2026-06-01T11:00:00Z', '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z'),
       ($1, 'orders', 'count', '10', 104, NULL, '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z'),
       ($1, 'orders', 'window', '2.5', 105, '2026-06-01T12:00:10Z', '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z')`,
    [TENANT],
  );
});

type Outcome = { answer: unknown } | { error: { code?: string; message: string; detail?: string } };

/** Versions of writes come from a sequence that a rollback does not rewind: compare their presence only. */
function normalise(answer: unknown): unknown {
  return JSON.parse(JSON.stringify(answer), (k, v) => (k === 'version' && typeof v === 'number' && ![0, 101, 102, 103, 104, 105].includes(v) ? 'drawn' : v));
}

/** `work` in a transaction with the KV fast path on or off, rolled back whatever happens. */
async function rolledBack<T>(fast: boolean, work: () => Promise<T>): Promise<T> {
  await db.client.query('BEGIN');
  try {
    await db.client.query(`SELECT set_config('queen.kv_fast_path', $1, true)`, [fast ? 'on' : 'off']);
    return await work();
  } finally {
    await db.client.query('ROLLBACK');
  }
}

/** What a statement answered (its column `r`), or the error PostgreSQL refused it with; rolled back. */
function outcome(fast: boolean, query: () => Promise<{ rows: { r: unknown }[] }>, settle = (o: Outcome) => o): Promise<Outcome> {
  return rolledBack(fast, async () => {
    try {
      const { rows } = await query();
      return settle({ answer: normalise(rows[0].r) });
    } catch (err) {
      const e = err as { code?: string; message: string; detail?: string };
      return { error: { code: e.code, message: e.message, detail: e.detail } };
    }
  });
}

function run(ops: unknown, fast: boolean): Promise<Outcome> {
  return outcome(fast, () => db.client.query('SELECT queen.kv_apply_at_v1($1, $2::jsonb, false, $3) AS r', [TENANT, JSON.stringify(ops), NOW]));
}

const big = 'x'.repeat(65536 - 2); // as jsonb text "xxx…" is exactly 65536 bytes
const cases: Array<[string, Record<string, unknown>]> = [
  ['get of a live key', { op: 'get', ns: 'orders', key: 'live' }],
  ['get of a key with a TTL', { op: 'get', ns: 'orders', key: 'ttl' }],
  ['get of an expired key', { op: 'get', ns: 'orders', key: 'expired' }],
  ['get of an absent key', { op: 'get', ns: 'orders', key: 'nope' }],
  ['get with an unknown field', { op: 'get', ns: 'orders', key: 'live', extra: 1 }],
  ['get with required', { op: 'get', ns: 'orders', key: 'live', required: true }],
  ['get with an empty key', { op: 'get', ns: 'orders', key: '' }],
  ['get with a null key', { op: 'get', ns: 'orders', key: null }],
  ['get with a numeric key', { op: 'get', ns: 'orders', key: 5 }],
  ['get with no key', { op: 'get', ns: 'orders' }],
  ['get with a key of 512 bytes', { op: 'get', ns: 'orders', key: 'é'.repeat(256) }],
  ['get with a key of 513 bytes', { op: 'get', ns: 'orders', key: 'k' + 'é'.repeat(256) }],
  ['get with a namespace of 128 characters', { op: 'get', ns: 'n'.repeat(128), key: 'k' }],
  ['get with a namespace of 129 characters', { op: 'get', ns: 'n'.repeat(129), key: 'k' }],
  ['get with a namespace starting with a dot', { op: 'get', ns: '.orders', key: 'k' }],
  ['get with a namespace of punctuation', { op: 'get', ns: 'a_b.c:d-e', key: 'k' }],
  ['get with an empty namespace', { op: 'get', ns: '', key: 'k' }],
  ['get with a numeric namespace', { op: 'get', ns: 7, key: 'k' }],
  ['get with namespace instead of ns', { op: 'get', namespace: 'orders', key: 'live' }],
  ['put forever over a live key', { op: 'put', ns: 'orders', key: 'live', value: { b: 2 }, forever: true }],
  ['put forever over an expired key', { op: 'put', ns: 'orders', key: 'expired', value: 1, forever: true }],
  ['put with a TTL on a fresh key', { op: 'put', ns: 'orders', key: 'fresh', value: [1, 2], ttlSeconds: 60 }],
  ['put with the longest TTL', { op: 'put', ns: 'orders', key: 'fresh', value: 1, ttlSeconds: 3155760000 }],
  ['put with a TTL past the longest', { op: 'put', ns: 'orders', key: 'fresh', value: 1, ttlSeconds: 3155760001 }],
  ['put with a TTL of 0', { op: 'put', ns: 'orders', key: 'fresh', value: 1, ttlSeconds: 0 }],
  ['put with a fractional TTL', { op: 'put', ns: 'orders', key: 'fresh', value: 1, ttlSeconds: 1.5 }],
  ['put with a TTL written 60.0', { op: 'put', ns: 'orders', key: 'fresh', value: 1, ttlSeconds: 60.0 }],
  ['put with a TTL as a string', { op: 'put', ns: 'orders', key: 'fresh', value: 1, ttlSeconds: '60' }],
  ['put with both expiries', { op: 'put', ns: 'orders', key: 'fresh', value: 1, ttlSeconds: 60, forever: true }],
  ['put with neither expiry', { op: 'put', ns: 'orders', key: 'fresh', value: 1 }],
  ['put with forever false', { op: 'put', ns: 'orders', key: 'fresh', value: 1, forever: false }],
  ['put with forever false and a TTL', { op: 'put', ns: 'orders', key: 'fresh', value: 1, forever: false, ttlSeconds: 5 }],
  ['put with forever null and a TTL', { op: 'put', ns: 'orders', key: 'fresh', value: 1, forever: null, ttlSeconds: 5 }],
  ['put with a null TTL and forever', { op: 'put', ns: 'orders', key: 'fresh', value: 1, ttlSeconds: null, forever: true }],
  ['put with forever as a string', { op: 'put', ns: 'orders', key: 'fresh', value: 1, forever: 'true' }],
  ['put of a null value', { op: 'put', ns: 'orders', key: 'fresh', value: null, forever: true }],
  ['put with no value', { op: 'put', ns: 'orders', key: 'fresh', forever: true }],
  ['put of the largest value', { op: 'put', ns: 'orders', key: 'fresh', value: big, forever: true }],
  ['put of a value one byte too large', { op: 'put', ns: 'orders', key: 'fresh', value: big + 'x', forever: true }],
  ['put with expect', { op: 'put', ns: 'orders', key: 'live', value: 1, forever: true, expect: 101 }],
  ['put with required', { op: 'put', ns: 'orders', key: 'live', value: 1, forever: true, required: true }],
  ['put with required false', { op: 'put', ns: 'orders', key: 'live', value: 1, forever: true, required: false }],
  ['put with required and a TTL of 0', { op: 'put', ns: 'orders', key: 'live', value: 1, ttlSeconds: 0, required: true }],
  ['put with an unknown field', { op: 'put', ns: 'orders', key: 'live', value: 1, forever: true, delta: 1 }],
  ['putIfAbsent on a fresh key', { op: 'putIfAbsent', ns: 'orders', key: 'fresh', value: 'v', forever: true }],
  ['putIfAbsent on a live key', { op: 'putIfAbsent', ns: 'orders', key: 'live', value: 'v', forever: true }],
  ['putIfAbsent on an expired key', { op: 'putIfAbsent', ns: 'orders', key: 'expired', value: 'v', ttlSeconds: 30 }],
  ['putIfAbsent with expect', { op: 'putIfAbsent', ns: 'orders', key: 'fresh', value: 'v', forever: true, expect: 0 }],
  ['putIfAbsent with required on a live key', { op: 'putIfAbsent', ns: 'orders', key: 'live', value: 'v', forever: true, required: true }],
  ['putIfAbsent with required on a fresh key', { op: 'putIfAbsent', ns: 'orders', key: 'fresh', value: 'v', forever: true, required: true }],
  ['putIfAbsent with required on an expired key', { op: 'putIfAbsent', ns: 'orders', key: 'expired', value: 'v', ttlSeconds: 30, required: true }],
  ['putIfAbsent with required false on a live key', { op: 'putIfAbsent', ns: 'orders', key: 'live', value: 'v', forever: true, required: false }],
  ['putIfAbsent with required as a string', { op: 'putIfAbsent', ns: 'orders', key: 'live', value: 'v', forever: true, required: 'yes' }],
  ['putIfAbsent with required null', { op: 'putIfAbsent', ns: 'orders', key: 'live', value: 'v', forever: true, required: null }],
  ['putIfAbsent with required and expect', { op: 'putIfAbsent', ns: 'orders', key: 'fresh', value: 'v', forever: true, expect: 0, required: true }],
  ['putIfAbsent with required and an unknown field', { op: 'putIfAbsent', ns: 'orders', key: 'live', value: 'v', forever: true, required: true, delta: 1 }],
  ['putIfAbsent with required and no expiry', { op: 'putIfAbsent', ns: 'orders', key: 'live', value: 'v', required: true }],
  ['putIfAbsent with a bad namespace', { op: 'putIfAbsent', ns: '-x', key: 'fresh', value: 'v', forever: true }],
  ['delete of a live key', { op: 'delete', ns: 'orders', key: 'live' }],
  ['delete of an expired key', { op: 'delete', ns: 'orders', key: 'expired' }],
  ['delete of an absent key', { op: 'delete', ns: 'orders', key: 'nope' }],
  ['delete with the right expect', { op: 'delete', ns: 'orders', key: 'live', expect: 101 }],
  ['delete with a wrong expect', { op: 'delete', ns: 'orders', key: 'live', expect: 7 }],
  ['delete with expect 0', { op: 'delete', ns: 'orders', key: 'live', expect: 0 }],
  ['delete with required', { op: 'delete', ns: 'orders', key: 'nope', required: true }],
  ['delete with a value', { op: 'delete', ns: 'orders', key: 'live', value: 1 }],
  ['delete with an empty key', { op: 'delete', ns: 'orders', key: '' }],
  ['delete with a bad namespace', { op: 'delete', ns: 'a b', key: 'live' }],
  ['incr of a live counter', { op: 'incr', ns: 'orders', key: 'count', forever: true }],
  ['incr of a live counter by a fraction', { op: 'incr', ns: 'orders', key: 'window', delta: -0.25, ttlSeconds: 60 }],
  ['incr of a live value that is not a number', { op: 'incr', ns: 'orders', key: 'live', delta: 1, forever: true }],
  ['incr of an expired counter', { op: 'incr', ns: 'orders', key: 'expired', delta: 3, ttlSeconds: 30 }],
  ['incr of an absent counter', { op: 'incr', ns: 'orders', key: 'fresh', delta: 1e3, forever: true }],
  ['incr within max', { op: 'incr', ns: 'orders', key: 'count', delta: 5, max: 15, forever: true }],
  ['incr crossing max', { op: 'incr', ns: 'orders', key: 'count', delta: 6, max: 15, forever: true }],
  ['incr crossing min', { op: 'incr', ns: 'orders', key: 'count', delta: -11, min: 0, forever: true }],
  ['incr of an absent counter crossing max', { op: 'incr', ns: 'orders', key: 'fresh', delta: 5, max: 3, forever: true }],
  ['incr of a live counter that creating would cross', { op: 'incr', ns: 'orders', key: 'count', delta: 1, min: 5, forever: true }],
  ['incr of a live value that is not a number, creating would cross', { op: 'incr', ns: 'orders', key: 'live', delta: 1, min: 5, forever: true }],
  ['incr of an expired counter that creating would cross', { op: 'incr', ns: 'orders', key: 'expired', delta: 1, min: 5, forever: true }],
  ['incr with null bounds', { op: 'incr', ns: 'orders', key: 'count', min: null, max: null, forever: true }],
  ['incr with min above max', { op: 'incr', ns: 'orders', key: 'count', min: 5, max: 1, forever: true }],
  ['incr with a string bound', { op: 'incr', ns: 'orders', key: 'count', max: '5', forever: true }],
  ['incr with a string delta', { op: 'incr', ns: 'orders', key: 'count', delta: '1', forever: true }],
  ['incr with a null delta', { op: 'incr', ns: 'orders', key: 'count', delta: null, forever: true }],
  ['incr with a value', { op: 'incr', ns: 'orders', key: 'count', value: 1, forever: true }],
  ['incr with expect', { op: 'incr', ns: 'orders', key: 'count', expect: 104, forever: true }],
  ['incr with required', { op: 'incr', ns: 'orders', key: 'count', required: true, forever: true }],
  ['incr crossing max with required', { op: 'incr', ns: 'orders', key: 'count', delta: 6, max: 15, forever: true, required: true }],
  ['incr of a live value that is not a number with required', { op: 'incr', ns: 'orders', key: 'live', delta: 1, forever: true, required: true }],
  ['incr of an expired counter that creating would cross with required', { op: 'incr', ns: 'orders', key: 'expired', delta: 1, min: 5, forever: true, required: true }],
  ['incr with required false', { op: 'incr', ns: 'orders', key: 'count', required: false, forever: true }],
  ['incr with neither expiry', { op: 'incr', ns: 'orders', key: 'count' }],
  ['incr with both expiries', { op: 'incr', ns: 'orders', key: 'count', forever: true, ttlSeconds: 5 }],
  ['incr with a fractional TTL', { op: 'incr', ns: 'orders', key: 'count', ttlSeconds: 0.5 }],
  ['getMany of live, expired and absent keys', { op: 'getMany', ns: 'orders', keys: ['ttl', 'nope', 'live', 'expired', 'B', 'é'] }],
  ['getMany of one key', { op: 'getMany', ns: 'orders', keys: ['live'] }],
  ['getMany of no keys', { op: 'getMany', ns: 'orders', keys: [] }],
  ['getMany with a key twice', { op: 'getMany', ns: 'orders', keys: ['live', 'ttl', 'live'] }],
  ['getMany with keys not an array', { op: 'getMany', ns: 'orders', keys: 'live' }],
  ['getMany with a numeric key', { op: 'getMany', ns: 'orders', keys: ['live', 5] }],
  ['getMany with an empty key', { op: 'getMany', ns: 'orders', keys: ['live', ''] }],
  ['getMany with a null key', { op: 'getMany', ns: 'orders', keys: [null] }],
  ['getMany with a key of 513 bytes', { op: 'getMany', ns: 'orders', keys: ['k' + 'é'.repeat(256)] }],
  ['getMany of more keys than a batch may hold', { op: 'getMany', ns: 'orders', keys: Array.from({ length: 1001 }, (_, i) => `k${i}`) }],
  ['getMany with a key field too', { op: 'getMany', ns: 'orders', key: 'live', keys: ['ttl'] }],
  ['getMany with a non-string key field', { op: 'getMany', ns: 'orders', key: 1, keys: ['ttl'] }],
  ['getMany with required', { op: 'getMany', ns: 'orders', keys: ['ttl'], required: false }],
  ['getMany with a bad namespace', { op: 'getMany', ns: ':x', keys: ['ttl'] }],
  ['getMany with no keys field', { op: 'getMany', ns: 'orders' }],
  ['an unknown op', { op: 'fetch', ns: 'orders', key: 'live' }],
  ['an op that is not a string', { op: 1, ns: 'orders', key: 'live' }],
];

describe('the fast check answers exactly as the general validation', () => {
  test.each(cases)('%s, alone', async (_name, op) => {
    const slow = await run([op], false);
    const fast = await run([op], true);
    expect(fast).toEqual(slow);
  });

  test.each(cases)('%s, inside a batch after a valid get', async (_name, op) => {
    const ops = [{ op: 'get', ns: 'other', key: 'first' }, op];
    expect(await run(ops, true)).toEqual(await run(ops, false));
  });

  test('a batch with a refused operation late in it refuses it with its index on both paths', async () => {
    const ops = [
      { op: 'put', ns: 'orders', key: 'a', value: 1, forever: true },
      { op: 'get', ns: 'orders', key: 'live' },
      { op: 'put', ns: 'orders', key: 'b', value: 1, ttlSeconds: 0 },
    ];
    const slow = await run(ops, false);
    expect(slow).toMatchObject({ error: { code: 'QK400' } });
    expect(JSON.parse((slow as { error: { detail: string } }).error.detail)).toEqual({ code: 'kv_invalid_ttl', index: 2 });
    expect(await run(ops, true)).toEqual(slow);
  });

  test('a batch of unconditional puts (one set-based upsert) answers as one statement per put does', async () => {
    const ops = [
      { op: 'put', ns: 'orders', key: 'zeta', value: { z: 1 }, ttlSeconds: 30 },
      { op: 'put', ns: 'orders', key: 'live', value: [1], forever: true },
      { op: 'put', ns: 'orders', key: 'expired', value: 'again', forever: true },
      { op: 'put', ns: 'audit', key: 'é', value: null, ttlSeconds: 5 },
      { op: 'put', ns: 'orders', key: 'ttl', value: 2, forever: true, required: false },
      { op: 'put', ns: 'orders', key: 'B', value: 3, forever: true },
    ];
    const slow = await run(ops, false);
    expect(slow).toHaveProperty('answer');
    expect((slow as { answer: unknown[] }).answer).toHaveLength(6);
    expect(await run(ops, true)).toEqual(slow);
  });

  test('the rows a batch of puts leaves behind are the ones one statement per put leaves', async () => {
    const ops = [
      { op: 'put', ns: 'orders', key: 'live', value: 9, ttlSeconds: 60 },
      { op: 'put', ns: 'orders', key: 'expired', value: 8, forever: true },
      { op: 'put', ns: 'orders', key: 'new', value: 7, forever: true },
    ];
    const rowsAfter = (fast: boolean) =>
      rolledBack(fast, async () => {
        await db.client.query('SELECT queen.kv_apply_at_v1($1, $2::jsonb, false, $3)', [TENANT, JSON.stringify(ops), NOW]);
        const { rows } = await db.client.query(
          `SELECT namespace, key, value, expires_at, created_at, updated_at FROM queen.kv WHERE tenant_id = $1 ORDER BY namespace, key`,
          [TENANT],
        );
        return rows;
      });
    const slow = await rowsAfter(false);
    expect(slow.find((r) => r.key === 'expired')?.created_at.toISOString()).toBe('2026-06-01T12:00:00.123Z');
    expect(slow.find((r) => r.key === 'live')?.created_at.toISOString()).toBe('2026-01-01T00:00:00.000Z');
    expect(await rowsAfter(true)).toEqual(slow);
  });

  test('a batch touching one key twice is refused the same on both paths', async () => {
    const ops = [
      { op: 'get', ns: 'orders', key: 'live' },
      { op: 'put', ns: 'orders', key: 'live', value: 1, forever: true },
    ];
    const slow = await run(ops, false);
    expect(slow).toMatchObject({ error: { code: 'QK400' } });
    expect(await run(ops, true)).toEqual(slow);
  });

  test('the answer of an incr over a non-number says so, with the value that refused', async () => {
    expect(await run([{ op: 'incr', ns: 'orders', key: 'live', forever: true }], true)).toEqual({
      answer: [
        {
          index: 0, op: 'incr', key: 'live', applied: false, reason: 'type', found: true, value: { a: 1 },
          version: 101, expiresAt: null, updatedAt: '2026-01-02T00:00:00.000Z',
        },
      ],
    });
  });

  test('a lone once-marker (putIfAbsent with required) skips the general validation, won or lost', async () => {
    // Calls made in this transaction, counted by PostgreSQL itself (track_functions, superuser-set).
    const generalCalls = (op: object) =>
      rolledBack(true, async () => {
        await db.client.query(`SET LOCAL track_functions = 'all'`);
        const { rows: [r] } = await db.client.query('SELECT queen.kv_apply_at_v1($1, $2::jsonb, false, $3) AS r', [TENANT, JSON.stringify([op]), NOW]);
        const { rows: [calls] } = await db.client.query(
          `SELECT coalesce(pg_stat_get_xact_function_calls('queen.kv_check_op_v1'::regproc), 0)
                + coalesce(pg_stat_get_xact_function_calls('queen.kv_run_v1'::regproc), 0) AS n`,
        );
        return { answer: r.r, general: Number(calls.n) };
      });
    const won = await generalCalls({ op: 'putIfAbsent', ns: 'orders', key: 'fresh', value: 1, forever: true, required: true });
    expect(won).toMatchObject({ answer: [{ applied: true }], general: 0 });
    const lost = await generalCalls({ op: 'putIfAbsent', ns: 'orders', key: 'live', value: 1, forever: true, required: true });
    expect(lost).toMatchObject({ answer: { ok: false, reason: 'kv_precondition', failedIndex: 0, version: 101 }, general: 0 });
    // A delete with required still goes the general way (see kv_apply_at_v1).
    expect(await generalCalls({ op: 'delete', ns: 'orders', key: 'live', required: true })).toMatchObject({ general: 2 });
  });

  test('a plainly valid get answers with the stored row', async () => {
    const fast = await run([{ op: 'get', ns: 'orders', key: 'live' }], true);
    expect(fast).toEqual({
      answer: [{ index: 0, op: 'get', found: true, key: 'live', value: { a: 1 }, version: 101, expiresAt: null, updatedAt: '2026-01-02T00:00:00.000Z' }],
    });
  });
});

// The path routes' entry (queen.kv_apply_one_v1, what GET/PUT/DELETE /api/v1/kv/:ns/*key call) against
// the one-operation batch those routes sent before it, general path only. It reads the clock, so
// timestamps that are not the fixtures' own are compared as "recent".
describe('the path routes\' entry answers as the one-operation batch', () => {
  const FIXED = new Set(['2026-01-02T00:00:00.000Z', '2026-06-01T12:00:10.000Z', '2026-06-01T11:00:00.000Z', null]);
  const settle = (o: Outcome): Outcome =>
    JSON.parse(JSON.stringify(o), (k, v) => ((k === 'updatedAt' || k === 'expiresAt') && !FIXED.has(v) ? 'recent' : v));

  function path(op: string, ns: string, key: string, body: object, viaEntry: boolean): Promise<Outcome> {
    const values = [TENANT, op, ns, key, JSON.stringify(body)];
    return outcome(
      viaEntry,
      () =>
        viaEntry
          ? db.client.query('SELECT queen.kv_apply_one_v1($1, $2, $3, $4, $5::jsonb) AS r', values)
          : db.client.query(
              // The one answer, or the verdict of a lost `required` (an object where the array would be).
              `SELECT ('[]'::jsonb || queen.kv_apply_v1($1, jsonb_build_array(jsonb_build_object('op', $2::text, 'ns', $3::text, 'key', $4::text) || $5::jsonb), false)) -> 0 AS r`,
              values,
            ),
      settle,
    );
  }


  const routes: Array<[string, string, string, string, object]> = [
    ['get of a live key', 'get', 'orders', 'live', {}],
    ['get of an absent key', 'get', 'orders', 'nope', {}],
    ['get with a bad namespace', 'get', '.orders', 'live', {}],
    ['get of a key of 513 bytes', 'get', 'orders', 'k' + 'é'.repeat(256), {}],
    ['put forever', 'put', 'orders', 'live', { value: { b: 2 }, forever: true }],
    ['put with a TTL', 'put', 'orders', 'fresh', { value: 'v', ttlSeconds: 60 }],
    ['put with expect', 'put', 'orders', 'live', { value: 1, forever: true, expect: 101 }],
    ['put with a wrong expect, required', 'put', 'orders', 'live', { value: 1, forever: true, expect: 5, required: true }],
    ['put with neither expiry', 'put', 'orders', 'live', { value: 1 }],
    ['put with no value', 'put', 'orders', 'live', { forever: true }],
    ['put with a body naming the namespace', 'put', 'orders', 'live', { value: 1, forever: true, namespace: 'x' }],
    ['delete of a live key', 'delete', 'orders', 'live', {}],
    ['delete of an absent key', 'delete', 'orders', 'nope', {}],
    ['delete with expect', 'delete', 'orders', 'live', { expect: 101 }],
    ['delete with an empty key', 'delete', 'orders', '', {}],
  ];

  test.each(routes)('%s', async (_name, op, ns, key, body) => {
    const general = await path(op, ns, key, body, false);
    expect(await path(op, ns, key, body, true)).toEqual(general);
  });

  test('the fast entry answers a plain put with the row it wrote', async () => {
    expect(await path('put', 'orders', 'fresh', { value: [1], forever: true }, true)).toEqual({
      answer: { index: 0, op: 'put', key: 'fresh', applied: true, found: true, value: [1], version: 'drawn', expiresAt: null, updatedAt: 'recent' },
    });
  });
});

// kv_apply_v1 tries the fast path in SQL that is inlined into the caller's statement. Its
// arguments are folded while planning when the statement's parameters are constants (a named
// statement's first executions), so an operations value of any shape must still reach the general
// path's refusal, on custom and on generic plans alike; and what it answers must be the general
// path's answer.
describe('the entry point kv_apply_v1 answers as the general path', () => {
  const settle = (o: Outcome): Outcome =>
    JSON.parse(JSON.stringify(o), (k, v) =>
      (k === 'updatedAt' || k === 'expiresAt') && typeof v === 'string' && !v.startsWith('2026-0') ? 'recent' : v,
    );
  const BATCH = `SELECT queen.kv_apply_v1($1::uuid, $2::jsonb -> 'operations', false) AS r`;

  /** `name`: a statement of its own per case, so every case meets the custom plans of a fresh one. */
  function entry(body: unknown, fast: boolean, name: string): Promise<Outcome> {
    return outcome(fast, () => db.client.query({ name, text: BATCH, values: [TENANT, JSON.stringify(body)] }), settle);
  }


  const bodies: Array<[string, unknown]> = [
    ['operations an object', { operations: { op: 'get', ns: 'orders', key: 'live' } }],
    ['operations a string', { operations: 'get' }],
    ['operations a number', { operations: 5 }],
    ['operations missing', {}],
    ['operations empty', { operations: [] }],
    ['an operation that is a string', { operations: ['key'] }],
    ['an operation that is a number', { operations: [5] }],
    ['an operation that is null', { operations: [null] }],
    ['an operation that is an array', { operations: [[{ op: 'get', ns: 'orders', key: 'live' }]] }],
    ['a get', { operations: [{ op: 'get', ns: 'orders', key: 'live' }] }],
    ['a get with a numeric key', { operations: [{ op: 'get', ns: 'orders', key: 1 }] }],
    ['a put', { operations: [{ op: 'put', ns: 'orders', key: 'live', value: 2, forever: true }] }],
    ['an incr', { operations: [{ op: 'incr', ns: 'orders', key: 'count', delta: 2, ttlSeconds: 5 }] }],
    ['a getMany', { operations: [{ op: 'getMany', ns: 'orders', keys: ['live', 'nope'] }] }],
    ['a delete with expect', { operations: [{ op: 'delete', ns: 'orders', key: 'live', expect: 101, required: true }] }],
    ['two operations', { operations: [{ op: 'get', ns: 'orders', key: 'live' }, { op: 'get', ns: 'orders', key: 'ttl' }] }],
  ];

  test.each(bodies.map(([name, body], i) => [name, body, i] as const))('%s', async (_name, body, i) => {
    const general = await entry(body, false, `fast_path_test_general_${i}`);
    // Seven times: the first executions of a named statement are planned with its parameters as constants.
    for (let n = 0; n < 7; n++) expect(await entry(body, true, `fast_path_test_entry_${i}`)).toEqual(general);
  });
});

// The SQL entry points are inlined into the routes' statements (planned once per connection). A
// function that is not inlined runs as a call of its own, planned at every call, and
// track_functions counts it: a sub-SELECT in the body (the tenant-move gate's first form) did
// that to every KV request without changing an answer.
test('the routes\' statements inline the entry points: kv_apply_v1 and kv_apply_one_v1 are never called', async () => {
  const calls = await rolledBack(true, async () => {
    await db.client.query(`SET LOCAL track_functions = 'all'`);
    const batch = await db.client.query({ ...KV_APPLY_BATCH, values: [TENANT, JSON.stringify({ operations: [{ op: 'get', ns: 'orders', key: 'live' }] })] });
    expect(JSON.parse(batch.rows[0].results)).toMatchObject([{ found: true, version: 101 }]);
    const one = await db.client.query({ ...KV_APPLY_ONE, values: [TENANT, 'get', 'orders', 'live', '{}'] });
    expect(one.rows[0]).toMatchObject({ ok: true, version: '101' });
    const { rows: [r] } = await db.client.query(
      `SELECT coalesce(pg_stat_get_xact_function_calls('queen.kv_apply_v1'::regproc), 0) AS batch,
              coalesce(pg_stat_get_xact_function_calls('queen.kv_apply_one_v1'::regproc), 0) AS one,
              coalesce(pg_stat_get_xact_function_calls('queen.tenant_gate_v1'::regproc), 0) AS gate`,
    );
    return r;
  });
  // The gate ran once per statement: the check is there, only its form changed.
  expect(calls).toEqual({ batch: '0', one: '0', gate: '2' });
});
