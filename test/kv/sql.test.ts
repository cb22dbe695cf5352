// SQL-level: the pure helpers kv_live_v1 / kv_ver_v1, kv_apply_at_v1 with a chosen `now` (expiry
// tested without sleeping), and the catalog: queen.kv exactly as sql/migrations/024_kv.sql creates it.
import { useDatabase } from '../support/database';

const db = useDatabase({ client: true });

const T = '2030-01-01T00:00:00Z';
const TENANT = '00000000-0000-0000-0000-000000000001';
const OTHER = '7d1c9f5e-2b7a-4c1e-9a55-0c3f4b2d6e01';

async function applyAt(nowIso: string, ops: unknown[], tenant = TENANT): Promise<any[]> {
  const { rows } = await db.client.query('SELECT queen.kv_apply_at_v1($1::uuid, $2::jsonb, false, $3::timestamptz) AS r', [tenant, JSON.stringify(ops), nowIso]);
  return rows[0].r;
}
const at = (seconds: number) => new Date(Date.parse(T) + seconds * 1000).toISOString();

describe('kv_live_v1 and kv_ver_v1', () => {
  test.each([
    ['forever (NULL expiry)', null, true],
    ['expiring later', '2030-01-01T00:00:01Z', true],
    ['expiring at this very instant (dead)', T, false],
    ['expired', '2029-12-31T23:59:59Z', false],
  ])('kv_live_v1: %s -> %p', async (_n, expires, live) => {
    const { rows } = await db.client.query('SELECT queen.kv_live_v1($1::timestamptz, $2::timestamptz) AS v', [expires, T]);
    expect(rows[0].v).toBe(live);
  });

  test.each([
    ['a live row', '42', '2030-01-02T00:00:00Z', '42'],
    ['a forever row (NULL expiry, not NULL answer)', '42', null, '42'],
    ['an expired row', '42', '2029-01-01T00:00:00Z', '0'],
    ['an absent row (NULL version, NULL expiry)', null, null, '0'],
    ['an absent row with an expiry', null, '2031-01-01T00:00:00Z', '0'],
  ])('kv_ver_v1 is total: %s -> %s', async (_n, version, expires, want) => {
    const { rows } = await db.client.query('SELECT queen.kv_ver_v1($1::bigint, $2::timestamptz, $3::timestamptz)::text AS v', [version, expires, T]);
    expect(rows[0].v).toBe(want);
  });

  test('both are pure: IMMUTABLE, not STRICT, `now` a parameter', async () => {
    const { rows } = await db.client.query(
      `SELECT p.proname, p.proisstrict, p.provolatile, pg_get_function_identity_arguments(p.oid) AS args
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'queen' AND p.proname IN ('kv_live_v1', 'kv_ver_v1') ORDER BY p.proname`,
    );
    expect(rows).toEqual([
      { proname: 'kv_live_v1', proisstrict: false, provolatile: 'i', args: 'timestamp with time zone, timestamp with time zone' },
      { proname: 'kv_ver_v1', proisstrict: false, provolatile: 'i', args: 'bigint, timestamp with time zone, timestamp with time zone' },
    ]);
  });

  test('no KV function is STRICT: a STRICT helper turns an absent row or a forever key into NULL, a row that silently vanishes', async () => {
    const { rows } = await db.client.query(
      `SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'queen' AND p.proname LIKE 'kv\\_%' AND p.proisstrict ORDER BY 1`,
    );
    expect(rows).toEqual([]);
    const all = await db.client.query(`SELECT count(*)::int AS n FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'queen' AND p.proname LIKE 'kv\\_%'`);
    expect(all.rows[0].n).toBeGreaterThan(10);
  });
});

describe('kv_apply_at_v1 at a chosen instant', () => {
  test('a 10 s key is live at +9.999 s and gone at +10 s, without anything deleting it', async () => {
    await applyAt(T, [{ op: 'put', ns: 'clock', key: 'k', value: 'v', ttlSeconds: 10 }]);
    expect((await applyAt(at(9.999), [{ op: 'get', ns: 'clock', key: 'k' }]))[0].found).toBe(true);
    expect((await applyAt(at(10), [{ op: 'get', ns: 'clock', key: 'k' }]))[0].found).toBe(false);
    const { rows } = await db.client.query(`SELECT count(*)::int AS n FROM queen.kv WHERE namespace = 'clock'`);
    expect(rows[0].n).toBe(1);
  });

  test('at +10 s: getMany misses it, expect N is absent, delete is absent, putIfAbsent wins with a new lineage', async () => {
    const [born] = await applyAt(T, [{ op: 'put', ns: 'clock', key: 'm', value: 'old', ttlSeconds: 10 }]);
    const [many] = await applyAt(at(10), [{ op: 'getMany', ns: 'clock', keys: ['m', 'n'] }]);
    expect(many).toMatchObject({ rows: [], missing: ['m', 'n'] });
    const [fenced] = await applyAt(at(10), [{ op: 'put', ns: 'clock', key: 'm', value: 'x', forever: true, expect: born.version }]);
    expect(fenced).toMatchObject({ applied: false, reason: 'absent', found: false, version: 0 });
    const [fencedDelete] = await applyAt(at(10), [{ op: 'delete', ns: 'clock', key: 'm', expect: born.version }]);
    expect(fencedDelete).toMatchObject({ applied: false, reason: 'absent' });
    const [prefix] = await applyAt(at(10), [{ op: 'getPrefix', ns: 'clock', prefix: 'm' }]);
    expect(prefix.rows).toEqual([]);
    const [won] = await applyAt(at(11), [{ op: 'putIfAbsent', ns: 'clock', key: 'm', value: 'new', ttlSeconds: 10 }]);
    expect(won).toMatchObject({ applied: true, value: 'new', expiresAt: at(21).replace(/\.\d+Z$/, '.000Z') });
    const { rows } = await db.client.query(`SELECT created_at FROM queen.kv WHERE namespace = 'clock' AND key = 'm'`);
    expect(rows[0].created_at.toISOString()).toBe(at(11));
  });

  test('a fixed window: incr keeps its expiry while live, restarts from zero with a new window after', async () => {
    const [a] = await applyAt(T, [{ op: 'incr', ns: 'win', key: 'w', ttlSeconds: 60 }]);
    const [b] = await applyAt(at(30), [{ op: 'incr', ns: 'win', key: 'w', ttlSeconds: 60 }]);
    const [c2] = await applyAt(at(59.999), [{ op: 'incr', ns: 'win', key: 'w', ttlSeconds: 60 }]);
    expect([a.value, b.value, c2.value]).toEqual([1, 2, 3]);
    expect(new Set([a.expiresAt, b.expiresAt, c2.expiresAt]).size).toBe(1);
    const [d] = await applyAt(at(60), [{ op: 'incr', ns: 'win', key: 'w', ttlSeconds: 60 }]);
    expect(d).toMatchObject({ applied: true, value: 1, expiresAt: '2030-01-01T00:02:00.000Z' });
  });

  test('inside a transaction getPrefix is refused; get and getMany are allowed', async () => {
    const inTx = (ops: unknown[]) =>
      db.client.query('SELECT queen.kv_apply_at_v1($1::uuid, $2::jsonb, true, $3::timestamptz) AS r', [TENANT, JSON.stringify(ops), T]);
    const err = await inTx([{ op: 'getPrefix', ns: 'tx', prefix: 'a' }]).catch((e) => e);
    expect(err.code).toBe('QK400');
    expect(JSON.parse(err.detail)).toEqual({ code: 'kv_get_prefix_not_allowed_in_transaction', index: 0 });
    const ok = await inTx([{ op: 'get', ns: 'tx', key: 'a' }, { op: 'getMany', ns: 'tx', keys: ['b'] }]);
    expect(ok.rows[0].r).toHaveLength(2);
  });

  test('kv_apply_v1 (the clock) and kv_apply_at_v1 (a chosen instant) are the same rules', async () => {
    const { rows } = await db.client.query(
      `SELECT queen.kv_apply_v1($1::uuid, $2::jsonb) AS r`,
      [TENANT, JSON.stringify([{ op: 'put', ns: 'clk', key: 'k', value: 1, ttlSeconds: 60 }])],
    );
    const answer = rows[0].r[0];
    expect(answer.applied).toBe(true);
    expect(Math.abs(Date.parse(answer.updatedAt) - Date.now())).toBeLessThan(60_000);
    expect(Date.parse(answer.expiresAt) - Date.parse(answer.updatedAt)).toBe(60_000);
  });

  test('a tenant sees only its own rows: the tenant is part of the key', async () => {
    await applyAt(T, [{ op: 'put', ns: 'iso', key: 'k', value: 'default', forever: true }]);
    expect((await applyAt(T, [{ op: 'get', ns: 'iso', key: 'k' }], OTHER))[0].found).toBe(false);
    const [own] = await applyAt(T, [{ op: 'putIfAbsent', ns: 'iso', key: 'k', value: 'other', forever: true }], OTHER);
    expect(own.applied).toBe(true);
    expect((await applyAt(T, [{ op: 'get', ns: 'iso', key: 'k' }]))[0].value).toBe('default');
  });

  test('a refusal is SQLSTATE QK400 with DETAIL {code, index}; a lost required is no error but a verdict, its writes undone', async () => {
    await expect(applyAt(T, [{ op: 'get', ns: 'e', key: 'a' }, { op: 'put', ns: 'e', key: 'b', value: 1 }])).rejects.toMatchObject({
      code: 'QK400',
      detail: expect.stringMatching(/"code": ?"kv_expiry_not_specified".*"index": ?1|"index": ?1.*"code": ?"kv_expiry_not_specified"/),
    });
    await applyAt(T, [{ op: 'put', ns: 'e', key: 'w', value: { x: 1 }, forever: true }]);
    // Not raised: PostgreSQL logs a raised error with its DETAIL and HINT, and this one would carry
    // the winner's value. The call's own writes are undone all the same.
    const verdict = await applyAt(T, [
      { op: 'put', ns: 'e', key: 'beside', value: 1, forever: true },
      { op: 'putIfAbsent', ns: 'e', key: 'w', value: 2, forever: true, required: true },
    ]);
    expect(verdict).toMatchObject({ ok: false, success: false, reason: 'kv_precondition', failedIndex: 1, kvReason: 'exists', value: { x: 1 } });
    expect((await applyAt(T, [{ op: 'get', ns: 'e', key: 'beside' }]))[0].found).toBe(false);
  });
});

describe('the catalog', () => {
  test('queen.kv has exactly the columns of its migration, both names COLLATE "C", shard generated', async () => {
    const { rows } = await db.client.query(
      `SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS notnull,
              coalesce(co.collname, '') AS collation, a.attgenerated AS generated,
              pg_get_expr(d.adbin, d.adrelid) AS expr
         FROM pg_attribute a
         LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
         LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE a.attrelid = 'queen.kv'::regclass AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum`,
    );
    expect(rows.map((r) => [r.name, r.type, r.notnull, r.collation, r.generated])).toEqual([
      ['tenant_id', 'uuid', true, '', ''],
      ['namespace', 'text', true, 'C', ''],
      ['key', 'text', true, 'C', ''],
      ['value', 'jsonb', true, '', ''],
      ['version', 'bigint', true, '', ''],
      ['expires_at', 'timestamp with time zone', false, '', ''],
      ['shard', 'smallint', true, '', 's'],
      ['created_at', 'timestamp with time zone', true, '', ''],
      ['updated_at', 'timestamp with time zone', true, '', ''],
    ]);
    const expr = Object.fromEntries(rows.map((r) => [r.name, r.expr]));
    expect(expr.tenant_id).toContain('00000000-0000-0000-0000-000000000001');
    expect(expr.shard).toMatch(/hashtextextended\(key, \(?0\)?(::bigint)?\) & \(?63\)?/);
  });

  test('exactly two indexes: kv_pkey on (tenant_id, namespace, key) and the partial idx_kv_shard_expires', async () => {
    const { rows } = await db.client.query(
      `SELECT indexrelid::regclass::text AS name, pg_get_indexdef(indexrelid) AS def
         FROM pg_index WHERE indrelid = 'queen.kv'::regclass ORDER BY 1`,
    );
    expect(rows.map((r) => r.name)).toEqual(['queen.idx_kv_shard_expires', 'queen.kv_pkey']);
    expect(rows[0].def).toMatch(/USING btree \(shard, expires_at\) WHERE \(expires_at IS NOT NULL\)$/);
    expect(rows[1].def).toMatch(/UNIQUE INDEX kv_pkey ON queen\.kv USING btree \(tenant_id, namespace, key\)$/);
  });

  test('storage: fillfactor = 70 and vacuum_truncate = off', async () => {
    const { rows } = await db.client.query(`SELECT reloptions FROM pg_class WHERE oid = 'queen.kv'::regclass`);
    const opts = Object.fromEntries((rows[0].reloptions as string[]).map((o) => o.split('=')));
    expect(opts.fillfactor).toBe('70');
    expect(['off', 'false']).toContain(String(opts.vacuum_truncate).toLowerCase());
    expect(Object.keys(opts).sort()).toEqual(['fillfactor', 'vacuum_truncate']);
  });

  test('the version sequence is a bigint with CACHE 1000', async () => {
    const { rows } = await db.client.query(`SELECT data_type::text, cache_size::int FROM pg_sequences WHERE schemaname = 'queen' AND sequencename = 'kv_version_seq'`);
    expect(rows).toEqual([{ data_type: 'bigint', cache_size: 1000 }]);
  });

  test('shard is hashtextextended(key, 0) & 63 and an update cannot move a row', async () => {
    await applyAt(T, [{ op: 'put', ns: 'sh', key: 'some-key', value: 1, forever: true }]);
    const { rows } = await db.client.query(
      `SELECT shard, (hashtextextended('some-key', 0) & 63)::smallint AS want FROM queen.kv WHERE namespace = 'sh' AND key = 'some-key'`,
    );
    expect(rows[0].shard).toBe(rows[0].want);
    await expect(db.client.query(`UPDATE queen.kv SET shard = 1 WHERE namespace = 'sh'`)).rejects.toMatchObject({ code: '428C9' });
  });
});
