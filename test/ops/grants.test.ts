// Rung 2 and tenancy: the tenant comes from x-queen-tenant, a grant row decides who may use the
// surface, and two tenants with the same namespace and key never see each other.
import { randomUUID } from 'node:crypto';
import { grant } from './helpers';
import { call, kv } from '../support/http';
import { counter } from '../support/metrics';
import { useApi } from '../support/api';
import { sql } from '../support/database';

const api = useApi({ QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1', QUEEN_ADMIN_TOKEN: 'grants-test-token' });

const as = (tenant: string) => ({ 'x-queen-tenant': tenant });

test('grant mode derives from tenancy', () => {
  expect(api.config.kvRequireGrant).toBe(true);
});

test('a missing or malformed tenant header is 400 tenant_required', async () => {
  for (const headers of [{}, as('not-a-uuid'), as(''), as(`${randomUUID()},${randomUUID()}`)]) {
    const res = await kv(api.url, [{ op: 'get', ns: 'n', key: 'k' }], headers);
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('tenant_required');
  }
});

test('no kv_quota row is 403 feature_gated, on every KV route, without Retry-After', async () => {
  const t = randomUUID();
  const before = await counter(api.url, 'queen_kv_refusals_total', { code: 'feature_gated' });
  const answers = [
    await kv(api.url, [{ op: 'get', ns: 'n', key: 'k' }], as(t)),
    await call(api.url, 'GET', '/api/v1/kv/n/k', undefined, as(t)),
    await call(api.url, 'PUT', '/api/v1/kv/n/k', { value: 1, forever: true }, as(t)),
    await call(api.url, 'DELETE', '/api/v1/kv/n/k', undefined, as(t)),
  ];
  for (const res of answers) {
    expect(res.status).toBe(403);
    expect(res.body.error).toBe('feature_gated');
    expect(res.body.message).toMatch(/kv_quota/);
    expect(res.headers.get('retry-after')).toBeNull();
  }
  expect(await counter(api.url, 'queen_kv_refusals_total', { code: 'feature_gated' })).toBe(before + 4);
});

test('granted: false and enabled: false are different answers', async () => {
  const notGranted = randomUUID();
  const disabled = randomUUID();
  await grant(api, notGranted, { granted: false });
  await grant(api, disabled, { enabled: false });

  const a = await kv(api.url, [{ op: 'get', ns: 'n', key: 'k' }], as(notGranted));
  expect(a.status).toBe(403);
  expect(a.body.error).toBe('feature_gated');
  expect(a.body.message).toMatch(/not granted/);

  const b = await kv(api.url, [{ op: 'get', ns: 'n', key: 'k' }], as(disabled));
  expect(b.status).toBe(403);
  expect(b.body.error).toBe('kv_disabled_for_tenant');
  expect(b.body.message).toMatch(/disabled it for this tenant/);
  expect(b.headers.get('retry-after')).toBeNull();

  // Granting is a row change, in force on the next refresh, no restart.
  await grant(api, notGranted, { granted: true });
  expect((await kv(api.url, [{ op: 'get', ns: 'n', key: 'k' }], as(notGranted))).status).toBe(200);
});

test('two tenants with the same namespace and key each see only their own value, whatever the request shape', async () => {
  const a = randomUUID();
  const b = randomUUID();
  await grant(api, a);
  await grant(api, b);

  expect((await call(api.url, 'PUT', '/api/v1/kv/shared/doc/1', { value: 'A', forever: true }, as(a))).status).toBe(200);
  expect((await kv(api.url, [{ op: 'put', ns: 'shared', key: 'doc/1', value: 'B', forever: true }], as(b))).status).toBe(200);

  // Path route, batch get, getMany, getPrefix: each tenant reads its own.
  for (const [t, mine] of [[a, 'A'], [b, 'B']] as const) {
    const path = await call(api.url, 'GET', '/api/v1/kv/shared/doc%2F1', undefined, as(t));
    expect(path.body).toMatchObject({ found: true, value: mine });
    // One key per batch at most once, so each read shape goes in its own call.
    const shapes = [
      { op: 'get', ns: 'shared', key: 'doc/1' },
      { op: 'getMany', ns: 'shared', keys: ['doc/1', 'doc/2'] },
      { op: 'getPrefix', ns: 'shared', prefix: 'doc' },
    ];
    const [one, many, prefix] = await Promise.all(shapes.map((op) => kv(api.url, [op], as(t))));
    for (const r of [one, many, prefix]) expect(r.status).toBe(200);
    expect(one.body.results[0]).toMatchObject({ found: true, value: mine });
    expect(many.body.results[0].rows).toEqual([expect.objectContaining({ key: 'doc/1', value: mine })]);
    expect(prefix.body.results[0].rows).toEqual([expect.objectContaining({ key: 'doc/1', value: mine })]);
  }

  // A tenant named in the body or the query string is never honoured: it is refused or ignored,
  // and either way B's value is untouched.
  const smuggled = [
    await kv(api.url, [{ op: 'put', ns: 'shared', key: 'doc/1', value: 'X', forever: true, tenant: b, tenantId: b, tenant_id: b }], as(a)),
    await call(api.url, 'POST', '/api/v1/kv', { tenant: b, tenantId: b, operations: [{ op: 'put', ns: 'shared', key: 'doc/1', value: 'X', forever: true }] }, as(a)),
    await call(api.url, 'PUT', '/api/v1/kv/shared/doc/1', { value: 'X', forever: true, tenant: b, tenantId: b }, as(a)),
    await call(api.url, 'GET', `/api/v1/kv/shared/doc/1?tenant=${b}`, undefined, as(a)),
    await call(api.url, 'DELETE', '/api/v1/kv/shared/doc/1', { tenant_id: b }, as(a)),
  ];
  for (const res of smuggled) expect([200, 400]).toContain(res.status);
  const bNow = await call(api.url, 'GET', '/api/v1/kv/shared/doc/1', undefined, as(b));
  expect(bNow.body).toMatchObject({ found: true, value: 'B' });

  // A delete under A's identity removes only A's row.
  await call(api.url, 'DELETE', '/api/v1/kv/shared/doc/1', undefined, as(a));
  expect((await call(api.url, 'GET', '/api/v1/kv/shared/doc/1', undefined, as(b))).body).toMatchObject({ found: true, value: 'B' });
  const rows = await sql(api.databaseUrl, `SELECT tenant_id::text AS tenant, value FROM queen.kv WHERE namespace = 'shared'`);
  expect(rows).toEqual([{ tenant: b, value: 'B' }]);

  // The header is the identity, case-insensitively spelled: the same tenant in upper case is the same tenant.
  const upper = await call(api.url, 'GET', '/api/v1/kv/shared/doc/1', undefined, as(b.toUpperCase()));
  expect(upper.body).toMatchObject({ found: true, value: 'B' });
});

test('the transaction wire keeps tenants apart too: a marker, a read, a delete and a lost race see only the caller', async () => {
  const a = randomUUID();
  const b = randomUUID();
  await grant(api, a);
  await grant(api, b);
  const tx = (tenant: string, kvOps: unknown[]) => call(api.url, 'POST', '/api/v1/transaction', { kv: kvOps }, as(tenant));
  const marker = { op: 'putIfAbsent', ns: 'charges', key: 'charge:1', ttlSeconds: 600, required: true };

  const first = await tx(a, [{ ...marker, value: { chargeId: 'A' } }]);
  expect(first.body).toMatchObject({ ok: true, results: [{ applied: true }] });

  // B's marker under the same name is B's own: it wins, and never hears A's value.
  const other = await tx(b, [{ ...marker, value: { chargeId: 'B' } }, { op: 'get', ns: 'charges', key: 'charge:2' }]);
  expect(other.status).toBe(200);
  expect(other.body).toMatchObject({ ok: true, results: [{ applied: true, value: { chargeId: 'B' } }, { found: false }] });
  // A's redelivery loses to A's own marker, and the value it is handed is A's.
  const again = await tx(a, [{ ...marker, value: { chargeId: 'A2' } }]);
  expect(again.body).toMatchObject({ ok: false, reason: 'kv_precondition', kvReason: 'exists', value: { chargeId: 'A' } });

  // Reads inside a bundle, and a delete, touch only the caller's row.
  const reads = await tx(b, [{ op: 'get', ns: 'charges', key: 'charge:1' }, { op: 'getMany', ns: 'charges', keys: ['charge:3'] }]);
  expect(reads.body.results[0]).toMatchObject({ found: true, value: { chargeId: 'B' } });
  const del = await tx(b, [{ op: 'delete', ns: 'charges', key: 'charge:1' }]);
  expect(del.body.results[0]).toMatchObject({ applied: true });
  expect((await call(api.url, 'GET', '/api/v1/kv/charges/charge:1', undefined, as(a))).body).toMatchObject({ found: true, value: { chargeId: 'A' } });
  expect((await call(api.url, 'GET', '/api/v1/kv/charges/charge:1', undefined, as(b))).body).toMatchObject({ found: false });
  const rows = await sql(api.databaseUrl, `SELECT tenant_id::text AS tenant, value FROM queen.kv WHERE namespace = 'charges'`);
  expect(rows).toEqual([{ tenant: a, value: { chargeId: 'A' } }]);
});

test('timers are the tenant\'s own: another tenant cannot peek, list, cancel or reschedule them, on the routes or the wire', async () => {
  const a = randomUUID();
  const b = randomUUID();
  await grant(api, a);
  await grant(api, b);
  const made = await call(api.url, 'POST', '/api/v1/timers', { queue: 'tenant-timers', payload: { owner: 'A' }, delaySeconds: 3600, timerKey: 'reminder' }, as(a));
  expect(made.body).toMatchObject({ created: true });
  const id = made.body.timerId;

  expect((await call(api.url, 'GET', `/api/v1/timers/${id}`, undefined, as(b))).body).toEqual({ found: false });
  expect((await call(api.url, 'GET', '/api/v1/timers?queue=tenant-timers', undefined, as(b))).body.timers).toEqual([]);
  expect((await call(api.url, 'POST', `/api/v1/timers/${id}/reschedule`, { delaySeconds: 5 }, as(b))).body).toMatchObject({ rescheduled: false, reason: 'absent' });
  expect((await call(api.url, 'DELETE', `/api/v1/timers/${id}`, undefined, as(b))).body).toMatchObject({ cancelled: false, reason: 'absent' });
  const wire = await call(api.url, 'POST', '/api/v1/transaction', {
    timers: [{ op: 'reschedule', timerId: id, delaySeconds: 5 }, { op: 'cancel', timerId: id }],
  }, as(b));
  expect(wire.status).toBe(200);
  expect(wire.body.results).toMatchObject([{ rescheduled: false, reason: 'absent' }, { cancelled: false, reason: 'absent' }]);
  // The same timerKey is B's own key: a new timer, not A's answered back.
  const mine = await call(api.url, 'POST', '/api/v1/timers', { queue: 'tenant-timers', payload: { owner: 'B' }, delaySeconds: 3600, timerKey: 'reminder' }, as(b));
  expect(mine.body).toMatchObject({ created: true });
  expect(mine.body.timerId).not.toBe(id);

  // A's timer is untouched: same instant, same payload, and only A lists it.
  const peek = await call(api.url, 'GET', `/api/v1/timers/${id}`, undefined, as(a));
  expect(peek.body).toMatchObject({ found: true, timer: { timerId: id, deliverAt: made.body.deliverAt, payload: { owner: 'A' } } });
  const listA = await call(api.url, 'GET', '/api/v1/timers?queue=tenant-timers', undefined, as(a));
  expect(listA.body.timers.map((t: any) => t.timerId)).toEqual([id]);
});

test('no gate blocks a timer cancel, peek or list: a tenant whose grant is withdrawn can still stop what it promised', async () => {
  const t = randomUUID();
  await grant(api, t);
  const ids = [];
  for (let i = 0; i < 2; i++) {
    const made = await call(api.url, 'POST', '/api/v1/timers', { queue: 'gated-timers', payload: { i }, delaySeconds: 3600 }, as(t));
    expect(made.status).toBe(200);
    ids.push(made.body.timerId);
  }
  for (const row of [{ granted: false }, { enabled: false }]) {
    await grant(api, t, row);
    // New promises are refused...
    expect((await call(api.url, 'POST', '/api/v1/timers', { queue: 'gated-timers', payload: {}, delaySeconds: 60 }, as(t))).status).toBe(403);
    // ...and what was promised can still be looked at.
    expect((await call(api.url, 'GET', `/api/v1/timers/${ids[0]}`, undefined, as(t))).body).toMatchObject({ found: true });
    const list = await call(api.url, 'GET', '/api/v1/timers?queue=gated-timers', undefined, as(t));
    expect(list.status).toBe(200);
    expect(list.body.timers.length).toBeGreaterThan(0);
  }
  // With no grant row at all (the tenant removed), both cancel spellings answer.
  await sql(api.databaseUrl, 'DELETE FROM queen.kv_quota WHERE tenant_id = $1', [t]);
  await api.server.ops.book.refresh();
  expect((await kv(api.url, [{ op: 'get', ns: 'n', key: 'k' }], as(t))).body.error).toBe('feature_gated');
  const cancel = await call(api.url, 'DELETE', `/api/v1/timers/${ids[0]}`, undefined, as(t));
  expect([cancel.status, cancel.body.cancelled]).toEqual([200, true]);
  const wire = await call(api.url, 'POST', '/api/v1/transaction', { timers: [{ op: 'cancel', timerId: ids[1] }] }, as(t));
  expect(wire.status).toBe(200);
  expect(wire.body.results[0]).toMatchObject({ cancelled: true });
  expect((await call(api.url, 'GET', `/api/v1/timers/${ids[1]}`, undefined, as(t))).body).toEqual({ found: false });
});
