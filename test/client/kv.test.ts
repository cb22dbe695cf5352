// queen.kv against a real cell: the answers are the routes' answers, numbers are never narrowed
// (a counter past 2^53 is a bigint, exact), getPrefix walks its pages, and a write that does not
// apply is a value.
import { Client } from 'pg';
import { QueenError, QueenPrecisionError } from '@queen-kv/client';
import { startCell, useCell } from './helpers';
import { call, kv as rawKv } from '../support/http';

const cell = useCell();

test('answers are typed exactly as POST /api/v1/kv answers them', async () => {
  const { queen, api } = cell;
  await queen.kv.put('shape', 'k1', { a: [1, 'two', null] }, { ttlSeconds: 600 });
  const one = async (op: Record<string, unknown>) => (await rawKv(api.url, [op])).body;
  const get = await one({ op: 'get', ns: 'shape', key: 'k1' });
  expect(await queen.kv.get('shape', 'k1')).toEqual(get.results[0]);
  expect(await queen.kv.get('shape', 'nope')).toEqual((await one({ op: 'get', ns: 'shape', key: 'nope' })).results[0]);
  expect(await queen.kv.get('shape', 'nope')).toEqual({ index: 0, op: 'get', key: 'nope', found: false });
  const many = await one({ op: 'getMany', ns: 'shape', keys: ['nope', 'k1'] });
  expect(await queen.kv.getMany('shape', ['nope', 'k1'])).toEqual(many.results[0]);
  const ops = [
    { op: 'get', ns: 'shape', key: 'k1' },
    { op: 'getMany', ns: 'shape', keys: ['nope', 'k2'] },
  ];
  expect(await queen.kv.batch(ops)).toEqual({ success: true, results: (await rawKv(api.url, ops)).body.results });
});

test('writes answer applied, reason, and the current value and version, applied or not', async () => {
  const { queen } = cell;
  const first = await queen.kv.putIfAbsent('w', 'k', 'mine', { ttlSeconds: 60 });
  expect(first).toMatchObject({ op: 'putIfAbsent', key: 'k', applied: true, found: true, value: 'mine' });
  const second = await queen.kv.putIfAbsent('w', 'k', 'yours', { ttlSeconds: 60 });
  expect(second).toMatchObject({ applied: false, reason: 'exists', value: 'mine', version: first.version });
  const fenced = await queen.kv.put('w', 'k', 'stale', { ttlSeconds: 60, expect: 90101 });
  expect(fenced).toMatchObject({ applied: false, reason: 'version', value: 'mine' });
  const moved = await queen.kv.put('w', 'k', 'next', { ttlSeconds: 60, expect: first.version });
  expect(moved).toMatchObject({ applied: true, value: 'next' });
  const gone = await queen.kv.delete('w', 'nope');
  // An object is truthy: read `applied`.
  expect(gone).toMatchObject({ applied: false, reason: 'absent', found: false, version: 0 });
  const once = await queen.kv.once('w', 'marker', { ttlSeconds: 60 });
  expect(once).toMatchObject({ won: true, applied: true, value: true });
  expect(await queen.kv.once('w', 'marker', { ttlSeconds: 60, value: 'late' })).toMatchObject({ won: false, applied: false, reason: 'exists', value: true, precondition: true });
  // `expect` written but undefined is never a silent upsert: the cell refuses it.
  const undef = await queen.kv.put('w', 'k', 'x', { ttlSeconds: 60, expect: undefined }).catch((e: unknown) => e);
  expect(undef).toMatchObject({ status: 400, code: 'kv_expect_invalid' });
  const raw = await queen.kv.batch([{ op: 'delete', ns: 'w', key: 'k', expect: undefined }]).catch((e: unknown) => e);
  expect(raw).toMatchObject({ status: 400, code: 'kv_expect_invalid', index: 0 });
  const inBundle = await queen.transaction().kv({ op: 'delete', ns: 'w', key: 'k', expect: undefined }).commit().catch((e: unknown) => e);
  expect(inBundle).toMatchObject({ status: 400, code: 'kv_expect_invalid', index: 0 });
  expect(await queen.kv.get('w', 'k')).toMatchObject({ found: true, value: 'next' });
});

test('incr past 2^53 comes back as an exact bigint, and a bigint writes back exact', async () => {
  const { queen, api } = cell;
  const start = 9007199254740993n; // 2^53 + 1: no double holds it
  expect(await queen.kv.put('big', 'n', start, { forever: true })).toMatchObject({ applied: true, value: start });
  const stepped = await queen.kv.incr('big', 'n', 1, { forever: true });
  expect(stepped.value).toBe(9007199254740994n);
  const far = await queen.kv.incr('big', 'n', 12345678901234567890n, { forever: true });
  expect(far.value).toBe(9007199254740994n + 12345678901234567890n);
  expect((await queen.kv.get('big', 'n')).value).toBe(12354686100489308884n);
  // What PostgreSQL holds, as text.
  const db = new Client({ connectionString: api.databaseUrl });
  await db.connect();
  try {
    const { rows } = await db.query(`SELECT value::text AS v FROM queen.kv WHERE namespace = 'big' AND key = 'n'`);
    expect(rows[0].v).toBe('12354686100489308884');
  } finally {
    await db.end();
  }
  // Small numbers stay numbers; max is the admission decision.
  await queen.kv.incr('big', 'small', 5, { ttlSeconds: 60 });
  expect(await queen.kv.incr('big', 'small', 1, { ttlSeconds: 60, max: 5 })).toMatchObject({ applied: false, reason: 'limit', value: 5 });
});

test('a stored fraction no double can hold is refused loudly, never rounded', async () => {
  const { queen, api } = cell;
  // Written as text, so the digits reach PostgreSQL as written (JavaScript would round them first).
  const exact = await call(api.url, 'POST', '/api/v1/kv', '{"operations":[{"op":"put","ns":"dec","key":"pi","value":{"x":0.1000000000000000055511151231257827},"forever":true}]}');
  expect(exact.status).toBe(200);
  const err = await queen.kv.get('dec', 'pi').catch((e: unknown) => e);
  expect(err).toBeInstanceOf(QueenPrecisionError);
  expect((err as Error).message).toMatch(/0\.1000000000000000055511151231257827 at \$\.results\[0\]\.value\.x/);
});

test('getPrefix walks the pages in byte order until the last', async () => {
  const { queen } = cell;
  for (const key of ['p:e', 'p:a', 'p:c', 'p:b', 'p:d', 'q:z']) await queen.kv.put('pre', key, key, { ttlSeconds: 600 });
  const pages = [];
  for await (const page of queen.kv.getPrefix('pre', 'p:', { limit: 2 })) pages.push(page);
  expect(pages.map((p) => p.rows.map((r) => r.key))).toEqual([['p:a', 'p:b'], ['p:c', 'p:d'], ['p:e']]);
  expect(pages.map((p) => p.truncated)).toEqual([true, true, false]);
  expect(pages[0].nextAfter).toBe('p:b');
  const resumed = [];
  for await (const page of queen.kv.getPrefix('pre', 'p:', { after: 'p:c' })) resumed.push(...page.rows.map((r) => r.key));
  expect(resumed).toEqual(['p:d', 'p:e']);
});

test('a refusal is a QueenError carrying the code, the message and the index', async () => {
  const { queen } = cell;
  const err = await queen.kv
    .batch([
      { op: 'get', ns: 'ok', key: 'a' },
      { op: 'get', ns: '.bad', key: 'a' },
    ])
    .catch((e: unknown) => e);
  expect(err).toBeInstanceOf(QueenError);
  expect(err).toMatchObject({ status: 400, code: 'kv_invalid_namespace', index: 1 });
  expect((err as QueenError).message).toMatch(/namespace/i);
  expect(await queen.kv.getPrefix('ok', '').next().catch((e: unknown) => e)).toMatchObject({ code: 'kv_prefix_required' });
});

test('the tenant option sends x-queen-tenant: two tenants with one namespace and key never meet', async () => {
  const tenancy = await startCell({
    QUEEN_TENANCY_HEADER: '1',
    QUEEN_KV_TRUSTED_PROXY: '1',
    QUEEN_KV_REQUIRE_GRANT: '0',
    QUEEN_ADMIN_TOKEN: 'client-suite-token',
  });
  try {
    const { Queen } = await import('@queen-kv/client');
    const a = new Queen({ url: tenancy.api.url, tenant: '6a0b2c9e-1d3f-4e5a-8b7c-9d0e1f2a3b4c' });
    const b = new Queen({ url: tenancy.api.url, tenant: '7b1c3d0f-2e4a-4f6b-9c8d-0e1f2a3b4c5d' });
    await a.kv.put('shared', 'k', 'a', { ttlSeconds: 60 });
    expect(await b.kv.get('shared', 'k')).toMatchObject({ found: false });
    expect(await b.kv.putIfAbsent('shared', 'k', 'b', { ttlSeconds: 60 })).toMatchObject({ applied: true, value: 'b' });
    expect(await a.kv.get('shared', 'k')).toMatchObject({ found: true, value: 'a' });
    const anonymous = new Queen({ url: tenancy.api.url });
    expect(await anonymous.kv.get('shared', 'k').catch((e: unknown) => e)).toMatchObject({ status: 400, code: 'tenant_required' });
  } finally {
    await tenancy.api.close();
  }
});
