// Rung 5: the dedicated KV pool is the semaphore. With a pool of 4 held by slow statements (KV
// writes waiting on rows a separate client keeps locked), KV answers 503 kv_unavailable with
// Retry-After while the message pool still answers (POST /api/v1/push commits); standalone KV writes are shed at once when the
// pool's queue is as deep as the pool.
import { Client } from 'pg';
import { call, kv } from '../support/http';
import { counter, metric } from '../support/metrics';
import { startTestApi, useApi } from '../support/api';
import { waitFor } from '../support/wait';

// `client`: the locker, a session of its own on the cell's database.
const api = useApi({ QUEEN_KV_POOL_SIZE: '4', QUEEN_KV_ACQUIRE_TIMEOUT_MS: '300', QUEEN_KV_STATEMENT_TIMEOUT_MS: '20000' }, { client: true });

const kvPool = () => api.server.pools.kv;


test('a burst of writes deeper than the pool on a healthy cell queues and is served, not shed', async () => {
  const burst = await Promise.all(
    Array.from({ length: 12 }, (_, i) => call(api.url, 'PUT', `/api/v1/kv/burst/b${i}`, { value: i, forever: true })),
  );
  expect(burst.map((r) => r.status)).toEqual(Array(12).fill(200));
});

test('a pool of 4 held by slow statements: KV is 503 kv_unavailable with Retry-After, the message pool still answers', async () => {
  expect(api.server.pools.kv.options.max).toBe(4);
  const keys = ['h0', 'h1', 'h2', 'h3'];
  expect((await kv(api.url, keys.map((key) => ({ op: 'put', ns: 'pool', key, value: 0, forever: true })))).status).toBe(200);

  // Hold the four rows, then send one write per row: each takes a KV connection and waits on the lock.
  await api.client.query('BEGIN');
  await api.client.query(`SELECT 1 FROM queen.kv WHERE namespace = 'pool' FOR UPDATE`);
  const held = keys.map((key) => call(api.url, 'PUT', `/api/v1/kv/pool/${key}`, { value: 1, forever: true }));
  await waitFor(() => kvPool().totalCount - kvPool().idleCount === 4 && kvPool().waitingCount === 0, { what: 'four KV connections in use', timeoutMs: 5_000, everyMs: 10 });
  expect(await metric(api.url, 'queen_kv_pool_in_use')).toBe(4);

  const before = await counter(api.url, 'queen_kv_refusals_total', { code: 'kv_unavailable' });
  // A read needs a connection it cannot get within QUEEN_KV_ACQUIRE_TIMEOUT_MS.
  const read = await call(api.url, 'GET', '/api/v1/kv/pool/other');
  expect(read.status).toBe(503);
  expect(read.body.error).toBe('kv_unavailable');
  expect(read.headers.get('retry-after')).toBe('1');
  const batch = await kv(api.url, [{ op: 'get', ns: 'pool', key: 'other' }]);
  expect([batch.status, batch.body.error]).toEqual([503, 'kv_unavailable']);
  // The timer routes share the KV pool, and are answered in their own name: a timer's client is
  // told which surface to retry, not that the KV it never called is unavailable.
  const timers = await call(api.url, 'GET', '/api/v1/timers?queue=pool-timers');
  expect([timers.status, timers.body.error, timers.headers.get('retry-after')]).toEqual([503, 'timers_unavailable', '1']);
  const scheduled = await call(api.url, 'POST', '/api/v1/timers', { queue: 'pool-timers', payload: {}, delaySeconds: 60 });
  expect([scheduled.status, scheduled.body.error]).toEqual([503, 'timers_unavailable']);

  // The message pool is another pool: the cell still answers, and pushes still commit.
  const health = await call(api.url, 'GET', '/health');
  expect(health.status).toBe(200);
  for (let i = 0; i < 5; i++) {
    const pushed = await call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'pool-isolation', payload: { i } }] });
    expect(pushed.status).toBe(201);
  }
  expect(await counter(api.url, 'queen_kv_refusals_total', { code: 'kv_unavailable' })).toBe(before + 2);
  expect(await counter(api.url, 'queen_kv_refusals_total', { code: 'timers_unavailable' })).toBe(1);

  // Shedding: with four reads queued (a queue as deep as the pool), a standalone write is refused
  // at once, before any of the queued reads has been answered.
  const settled: boolean[] = [];
  const queued = [0, 1, 2, 3].map((i) =>
    call(api.url, 'GET', `/api/v1/kv/pool/q${i}`).then((r) => {
      settled[i] = true;
      return r;
    }),
  );
  await waitFor(() => kvPool().waitingCount >= 4, { what: 'four requests waiting for the pool', timeoutMs: 5_000, everyMs: 10 });
  expect(await metric(api.url, 'queen_kv_pool_waiting')).toBeGreaterThanOrEqual(4);
  const shed = await call(api.url, 'PUT', '/api/v1/kv/pool/new', { value: 1, forever: true });
  expect(shed.status).toBe(503);
  expect(shed.body.error).toBe('kv_unavailable');
  expect(shed.body.message).toMatch(/standalone KV writes are shed/);
  expect(shed.headers.get('retry-after')).toBe('1');
  expect(settled.filter(Boolean)).toHaveLength(0);
  // The shedding order: KV writes inside the transaction wire run on the message pool, so while the
  // held writes still occupy every KV connection and standalone writes are shed, they go on.
  const wire = await call(api.url, 'POST', '/api/v1/transaction', { operations: [], kv: [{ op: 'put', ns: 'pool', key: 'wire', value: 1, forever: true }] });
  expect([wire.status, wire.body.ok]).toEqual([200, true]);
  for (const r of await Promise.all(queued)) expect([r.status, r.body.error]).toEqual([503, 'kv_unavailable']);

  // Let go: the held writes complete, and the pool serves again.
  await api.client.query('ROLLBACK');
  for (const r of await Promise.all(held)) expect(r.status).toBe(200);
  const after = await call(api.url, 'GET', '/api/v1/kv/pool/h0');
  expect(after.status).toBe(200);
  expect(after.body).toMatchObject({ found: true, value: 1 });
  await waitFor(async () => (await metric(api.url, 'queen_kv_pool_in_use')) === 0, { what: 'the in-use gauge back at 0', timeoutMs: 5_000, everyMs: 10 });
  expect(await metric(api.url, 'queen_kv_pool_waiting')).toBe(0);
});

test('a statement past QUEEN_KV_STATEMENT_TIMEOUT_MS is cancelled server-side and answered 503 kv_unavailable', async () => {
  const short = await startTestApi({ QUEEN_KV_STATEMENT_TIMEOUT_MS: '200' });
  const holder = new Client({ connectionString: short.databaseUrl });
  await holder.connect();
  try {
    expect((await call(short.url, 'PUT', '/api/v1/kv/slow/k', { value: 0, forever: true })).status).toBe(200);
    await holder.query('BEGIN');
    await holder.query(`SELECT 1 FROM queen.kv WHERE namespace = 'slow' FOR UPDATE`);
    const res = await call(short.url, 'PUT', '/api/v1/kv/slow/k', { value: 1, forever: true });
    expect(res.status).toBe(503);
    expect(res.body.error).toBe('kv_unavailable');
    expect(res.headers.get('retry-after')).toBe('1');
    await holder.query('ROLLBACK');
  } finally {
    await holder.end();
    await short.close();
  }
});

test('one key locked from outside, many writes waiting on it: unrelated writes beside them are all served; the hot key\'s extra callers wait their turn, then 503 kv_key_busy', async () => {
  expect((await call(api.url, 'PUT', '/api/v1/kv/hot/k', { value: 0, forever: true })).status).toBe(200);
  await api.client.query('BEGIN');
  await api.client.query(`SELECT 1 FROM queen.kv WHERE namespace = 'hot' AND key = 'k' FOR UPDATE`);
  let hot: Promise<{ status: number; body: { error?: string } }>[] = [];
  try {
    // Eight writers of the locked key on a pool of 4: before, they took every connection.
    hot = Array.from({ length: 8 }, (_, i) => call(api.url, 'PUT', '/api/v1/kv/hot/k', { value: i + 1, forever: true }));
    await waitFor(() => kvPool().totalCount - kvPool().idleCount >= 1, { what: 'a KV connection waiting on the locked row', timeoutMs: 5_000, everyMs: 10 });
    const others = await Promise.all(Array.from({ length: 6 }, (_, i) => call(api.url, 'PUT', `/api/v1/kv/cold/c${i}`, { value: i, forever: true })));
    expect(others.map((r) => [r.status, r.body.error])).toEqual(Array(6).fill([200, undefined]));
    // The hot key's callers past its share waited their turn with no connection, then were refused.
    const refused = await Promise.all(hot.slice(1));
    expect(refused.some((r) => r.status === 503 && r.body.error === 'kv_key_busy')).toBe(true);
  } finally {
    await api.client.query('ROLLBACK');
  }
  expect((await hot[0]).status).toBe(200);
});
