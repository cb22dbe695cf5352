// Rung 3: the soft occupancy quota. Blocking is immediate (last measurement plus this worker's
// writes); release waits for a measurement taken after the block and below 90% of the limit.
// The measurement is written here as the sweeper's usage rollup would write it.
import { DEFAULT_TENANT } from '../../shared/config';
import { grant, measure } from './helpers';
import { ackOf, pop, popRaw, push } from '../log/helpers';
import { call, kv } from '../support/http';
import { counter } from '../support/metrics';
import { useApi } from '../support/api';
import { sql } from '../support/database';

const api = useApi();

test('over max_rows a put is 403 kv_quota_exceeded while get and delete answer 200; the block lifts after deletes and a fresh measurement', async () => {
  await grant(api, DEFAULT_TENANT, { maxRows: 5 });
  for (let i = 0; i < 5; i++) {
    expect((await call(api.url, 'PUT', `/api/v1/kv/ops/k${i}`, { value: i, forever: true })).status).toBe(200);
  }
  const before = await counter(api.url, 'queen_kv_refusals_total', { code: 'kv_quota_exceeded' });

  // The sixth row is refused at once, with no measurement yet: the local delta blocks.
  const over = await call(api.url, 'PUT', '/api/v1/kv/ops/k5', { value: 5, forever: true });
  expect(over.status).toBe(403);
  expect(over.body.error).toBe('kv_quota_exceeded');
  expect(over.body.message).toMatch(/max_rows/);
  expect(over.headers.get('retry-after')).toBeNull();
  // Every row-adding op is a write the block covers, on every route.
  for (const op of ['put', 'putIfAbsent', 'incr']) {
    const res = await kv(api.url, [{ op, ns: 'ops', key: 'z', value: 1, forever: true }]);
    expect(res.status).toBe(403);
    expect(res.body.error).toBe('kv_quota_exceeded');
  }
  expect(await counter(api.url, 'queen_kv_refusals_total', { code: 'kv_quota_exceeded' })).toBe(before + 4);

  // Reads and deletes are never refused by rung 3: a tenant over quota must be able to get back under.
  expect((await call(api.url, 'GET', '/api/v1/kv/ops/k0')).status).toBe(200);
  const batchRead = await kv(api.url, [{ op: 'getMany', ns: 'ops', keys: ['k0', 'k1'] }, { op: 'getPrefix', ns: 'ops', prefix: 'k' }]);
  expect(batchRead.status).toBe(200);
  expect((await call(api.url, 'DELETE', '/api/v1/kv/ops/k0')).status).toBe(200);
  expect((await kv(api.url, [{ op: 'delete', ns: 'ops', key: 'k1' }, { op: 'delete', ns: 'ops', key: 'k2' }])).status).toBe(200);

  // Deletes alone do not release: the block waits for a measurement.
  expect((await call(api.url, 'PUT', '/api/v1/kv/ops/k5', { value: 5, forever: true })).status).toBe(403);

  // A fresh measurement at or above 90% of the limit keeps the block (hysteresis)...
  await grant(api, DEFAULT_TENANT, { maxRows: 10 });
  await measure(api, DEFAULT_TENANT, { rows: 9 });
  expect((await call(api.url, 'PUT', '/api/v1/kv/ops/k5', { value: 5, forever: true })).status).toBe(403);

  // ...one below 90% releases it.
  await measure(api, DEFAULT_TENANT, { rows: 2 });
  const after = await call(api.url, 'PUT', '/api/v1/kv/ops/k5', { value: 5, forever: true });
  expect(after.status).toBe(200);
  expect(after.body).toMatchObject({ applied: true });
});

test('max_bytes blocks the same way, and a null limit is no limit', async () => {
  await grant(api, DEFAULT_TENANT, { maxRows: null, maxBytes: 1000 });
  await measure(api, DEFAULT_TENANT, { rows: 3, bytes: 900 });
  const big = 'x'.repeat(200);
  const res = await kv(api.url, [{ op: 'put', ns: 'ops', key: 'big', value: big, forever: true }]);
  expect(res.status).toBe(403);
  expect(res.body.error).toBe('kv_quota_exceeded');
  expect(res.body.message).toMatch(/max_bytes/);
  // A small read still answers.
  expect((await kv(api.url, [{ op: 'get', ns: 'ops', key: 'big' }])).status).toBe(200);

  await grant(api, DEFAULT_TENANT, { maxRows: null, maxBytes: null });
  expect((await kv(api.url, [{ op: 'put', ns: 'ops', key: 'big', value: big, forever: true }])).status).toBe(200);
});

test('GET /api/v1/system/cluster carries kvBytes and timerBytes at the top and the measurement per tenant', async () => {
  const other = '44444444-4444-4444-8444-444444444444';
  await measure(api, DEFAULT_TENANT, { rows: 3, bytes: 1200, timers: 2, timerBytes: 300 });
  await measure(api, other, { rows: 1, bytes: 12345678901, timers: 5, timerBytes: 700 });
  const res = await call(api.url, 'GET', '/api/v1/system/cluster');
  expect(res.status).toBe(200);
  expect(res.body.kvBytes).toBe(1200 + 12345678901);
  expect(res.body.timerBytes).toBe(1000);
  expect(res.body.tenants).toEqual([
    { tenantId: DEFAULT_TENANT, rows: 3, bytes: 1200, timers: 2, timerBytes: 300, computedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/) },
    { tenantId: other, rows: 1, bytes: 12345678901, timers: 5, timerBytes: 700, computedAt: expect.any(String) },
  ]);
});

test('over quota inside the transaction wire: reads and deletes still ride a bundle with an ack; a row-adding write refuses the whole bundle', async () => {
  await grant(api, DEFAULT_TENANT, { maxRows: 1 });
  await measure(api, DEFAULT_TENANT, { rows: 5 });
  await push(api.url, [{ queue: 'quota-wire', payload: 1 }, { queue: 'quota-wire', payload: 2 }]);
  const [m] = await pop(api.url, 'quota-wire');
  expect((await kv(api.url, [{ op: 'put', ns: 'ops', key: 'wire-new', value: 1, forever: true }])).status).toBe(403);

  // A write refused by the quota: 403, and the ack beside it did not happen.
  const refused = await call(api.url, 'POST', '/api/v1/transaction', {
    operations: [{ type: 'ack', ...ackOf(m) }],
    kv: [{ op: 'incr', ns: 'ops', key: 'wire-ctr', forever: true }],
  });
  expect([refused.status, refused.body.error]).toEqual([403, 'kv_quota_exceeded']);
  expect((await kv(api.url, [{ op: 'get', ns: 'ops', key: 'wire-ctr' }])).body.results[0].found).toBe(false);

  // Reads and a delete are never refused by the quota, in a bundle as on a route: the ack commits with them.
  const allowed = await call(api.url, 'POST', '/api/v1/transaction', {
    operations: [{ type: 'ack', ...ackOf(m) }],
    kv: [{ op: 'get', ns: 'ops', key: 'k3' }, { op: 'getMany', ns: 'ops', keys: ['k4'] }, { op: 'delete', ns: 'ops', key: 'k5' }],
  });
  expect(allowed.status).toBe(200);
  expect(allowed.body.ok).toBe(true);
  expect(allowed.body.results[0]).toMatchObject({ type: 'ack', ok: true });
  expect(allowed.body.results[3]).toMatchObject({ op: 'delete', applied: true });
  expect((await kv(api.url, [{ op: 'get', ns: 'ops', key: 'k5' }])).body.results[0].found).toBe(false);
  const [next] = await pop(api.url, 'quota-wire');
  expect(next.data).toBe(2);
  expect((await popRaw(api.url, 'quota-wire')).status).toBe(204);

  await grant(api, DEFAULT_TENANT, { maxRows: null });
  await measure(api, DEFAULT_TENANT, { rows: 0 });
});

test('no KV write path touches queen.kv_quota or queen.kv_usage (one is configuration, the other measurement)', async () => {
  await grant(api, DEFAULT_TENANT, {});
  await measure(api, DEFAULT_TENANT, { rows: 3, bytes: 100 });
  const snapshot = async () => [
    await sql(api.databaseUrl, 'SELECT xmin::text, * FROM queen.kv_quota ORDER BY tenant_id'),
    await sql(api.databaseUrl, 'SELECT xmin::text, * FROM queen.kv_usage ORDER BY tenant_id'),
  ];
  const before = await snapshot();
  const writes = [
    await call(api.url, 'PUT', '/api/v1/kv/untouched/a', { value: 'x'.repeat(1000), forever: true }),
    await kv(api.url, [
      { op: 'put', ns: 'untouched', key: 'b', value: 1, ttlSeconds: 60 },
      { op: 'putIfAbsent', ns: 'untouched', key: 'c', value: 1, forever: true },
      { op: 'incr', ns: 'untouched', key: 'd', forever: true },
    ]),
    await call(api.url, 'DELETE', '/api/v1/kv/untouched/a'),
    await call(api.url, 'POST', '/api/v1/transaction', { kv: [{ op: 'put', ns: 'untouched', key: 'e', value: 1, forever: true }, { op: 'delete', ns: 'untouched', key: 'b' }] }),
  ];
  expect(writes.map((r) => r.status)).toEqual([200, 200, 200, 200]);
  expect(await snapshot()).toEqual(before);
});
