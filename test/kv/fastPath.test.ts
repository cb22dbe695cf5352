// queen.kv_fast_check_op_v1 is a shortcut for plainly valid get/put/putIfAbsent operations; the
// general validation (kv_check_op_v1) stays the one definition of every rule. This suite holds the
// two paths to the same answers: every operation below runs once with the shortcut off
// (SET LOCAL queen.kv_fast_path = off) and once with it on, from the same state, and what a caller
// sees (the answer, or the refusal's SQLSTATE, code, index and message) must be identical. The
// operations sit on both sides of every edge of the shortcut's guard.
import { Client } from 'pg';
import { createTestDatabase } from '../support/database';

const TENANT = '00000000-0000-0000-0000-000000000001';
const NOW = '2026-06-01T12:00:00.123456Z';

let db: { url: string; drop(): Promise<void> };
let client: Client;

beforeAll(async () => {
  db = await createTestDatabase();
  client = new Client({ connectionString: db.url });
  await client.connect();
  await client.query(
    `INSERT INTO queen.kv (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at) VALUES
       ($1, 'orders', 'live', '{"a": 1}', 101, NULL, '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z'),
       ($1, 'orders', 'ttl', '"x"', 102, '2026-06-01T12:00:10Z', '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z'),
       ($1, 'orders', 'expired', '7', 103, '2026-06-01T11:00:00Z', '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z')`,
    [TENANT],
  );
});

afterAll(async () => {
  await client.end();
  await db.drop();
});

type Outcome = { answer: unknown } | { error: { code?: string; message: string; detail?: string } };

/** Versions of writes come from a sequence that a rollback does not rewind: compare their presence only. */
function normalise(answer: unknown): unknown {
  return JSON.parse(JSON.stringify(answer), (k, v) => (k === 'version' && typeof v === 'number' && ![0, 101, 102, 103].includes(v) ? 'drawn' : v));
}

async function run(ops: unknown, fast: boolean): Promise<Outcome> {
  await client.query('BEGIN');
  try {
    await client.query(`SELECT set_config('queen.kv_fast_path', $1, true)`, [fast ? 'on' : 'off']);
    const { rows } = await client.query('SELECT queen.kv_apply_at_v1($1, $2::jsonb, false, $3) AS r', [TENANT, JSON.stringify(ops), NOW]);
    return { answer: normalise(rows[0].r) };
  } catch (err) {
    const e = err as { code?: string; message: string; detail?: string };
    return { error: { code: e.code, message: e.message, detail: e.detail } };
  } finally {
    await client.query('ROLLBACK');
  }
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
  ['put with an unknown field', { op: 'put', ns: 'orders', key: 'live', value: 1, forever: true, delta: 1 }],
  ['putIfAbsent on a fresh key', { op: 'putIfAbsent', ns: 'orders', key: 'fresh', value: 'v', forever: true }],
  ['putIfAbsent on a live key', { op: 'putIfAbsent', ns: 'orders', key: 'live', value: 'v', forever: true }],
  ['putIfAbsent on an expired key', { op: 'putIfAbsent', ns: 'orders', key: 'expired', value: 'v', ttlSeconds: 30 }],
  ['putIfAbsent with expect', { op: 'putIfAbsent', ns: 'orders', key: 'fresh', value: 'v', forever: true, expect: 0 }],
  ['putIfAbsent with required on a live key', { op: 'putIfAbsent', ns: 'orders', key: 'live', value: 'v', forever: true, required: true }],
  ['putIfAbsent with a bad namespace', { op: 'putIfAbsent', ns: '-x', key: 'fresh', value: 'v', forever: true }],
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
    const rowsAfter = async (fast: boolean) => {
      await client.query('BEGIN');
      try {
        await client.query(`SELECT set_config('queen.kv_fast_path', $1, true)`, [fast ? 'on' : 'off']);
        await client.query('SELECT queen.kv_apply_at_v1($1, $2::jsonb, false, $3)', [TENANT, JSON.stringify(ops), NOW]);
        const { rows } = await client.query(
          `SELECT namespace, key, value, expires_at, created_at, updated_at FROM queen.kv WHERE tenant_id = $1 ORDER BY namespace, key`,
          [TENANT],
        );
        return rows;
      } finally {
        await client.query('ROLLBACK');
      }
    };
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

  test('a plainly valid get answers with the stored row', async () => {
    const fast = await run([{ op: 'get', ns: 'orders', key: 'live' }], true);
    expect(fast).toEqual({
      answer: [{ index: 0, op: 'get', found: true, key: 'live', value: { a: 1 }, version: 101, expiresAt: null, updatedAt: '2026-01-02T00:00:00.000Z' }],
    });
  });
});
