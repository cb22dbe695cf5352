// Tenancy covers the message log too (QUEEN_TENANCY_HEADER=1): every data route needs the tenant,
// and two tenants using the same queue names and transactionIds share nothing: not a message, a
// lease, a queue's options, a duplicate verdict, nor a timer's fired message. Another tenant's
// partitionId or leaseId is answered exactly as an unknown one. Rows written with tenancy off are
// the default tenant's, which only a cell with tenancy off reaches.
import { DEFAULT_TENANT, loadConfig } from '../../shared/config';
import { createLogger } from '../../shared/log';
import { startApiServer } from '../../services/api/server';
import type { Message } from './helpers';
import { call } from '../support/http';
import { UNLIMITED_RATES, useApi } from '../support/api';
import { sweep } from '../support/sweeper';

const A = 'aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa';
const B = 'bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb';
const NIL = '00000000-0000-0000-0000-000000000000';
const TENANCY = { QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1', QUEEN_ADMIN_TOKEN: 'tenancy-test', QUEEN_KV_REQUIRE_GRANT: '0' };

const api = useApi(TENANCY, { sweepers: true });

const as = (tenant: string) => ({ 'x-queen-tenant': tenant });
const pushAs = (tenant: string, items: unknown[]) => call(api.url, 'POST', '/api/v1/push', { items }, as(tenant));
const txAs = (tenant: string, body: unknown) => call(api.url, 'POST', '/api/v1/transaction', body, as(tenant));
async function popAs(tenant: string, queue: string, query = ''): Promise<Message[]> {
  const res = await call(api.url, 'GET', `/api/v1/pop/queue/${queue}${query}`, undefined, as(tenant));
  if (res.status === 204) return [];
  expect(res.status).toBe(200);
  return res.body.messages;
}
const ack = (m: Message, status = 'completed') => ({ transactionId: m.transactionId, partitionId: m.partitionId, status, leaseId: m.leaseId });

/** Every data route, with a body that would be valid: none may answer without a tenant. */
const DATA_ROUTES: Array<[string, string, unknown?]> = [
  ['POST', '/api/v1/configure', { queue: 'q', options: { leaseTime: 30 } }],
  ['POST', '/api/v1/push', { items: [{ queue: 'q', payload: 1 }] }],
  ['POST', '/api/v1/push', { items: [{ queue: 'q', payload: 1 }, { queue: 'r', payload: 2 }] }],
  ['GET', '/api/v1/pop/queue/q'],
  ['GET', '/api/v1/pop/queue/q/partition/Default?wait=true&timeout=100'],
  ['POST', '/api/v1/ack', { transactionId: 't', partitionId: A, status: 'completed' }],
  ['POST', '/api/v1/ack/batch', { acknowledgments: [{ transactionId: 't', partitionId: A, status: 'completed' }] }],
  ['POST', `/api/v1/lease/${A}/extend`, { seconds: 10 }],
  ['GET', '/api/v1/pop?namespace=n'],
  ['DELETE', '/api/v1/consumer-groups/g'],
  ['POST', '/api/v1/traces', { transactionId: 't', partitionId: A, data: {} }],
  ['GET', `/api/v1/traces/${A}/t`],
  ['GET', '/api/v1/dlq?from=2026-01-01T00:00:00Z'],
  ['POST', '/api/v1/transaction', { operations: [{ type: 'push', items: [{ queue: 'q', payload: 1 }] }] }],
  ['POST', '/api/v1/transaction', { operations: [{ type: 'ack', transactionId: 't', partitionId: A, status: 'completed' }] }],
  ['POST', '/api/v1/transaction', { kv: [{ op: 'get', ns: 'n', key: 'k' }] }],
  ['POST', '/api/v1/transaction', { timers: [{ op: 'cancel', timerId: A }] }],
  ['POST', '/api/v1/kv', { operations: [{ op: 'get', ns: 'n', key: 'k' }] }],
  ['GET', '/api/v1/kv/n/k'],
  ['PUT', '/api/v1/kv/n/k', { value: 1, forever: true }],
  ['DELETE', '/api/v1/kv/n/k'],
  ['POST', '/api/v1/timers', { queue: 'q', payload: 1, delaySeconds: 60 }],
  ['GET', '/api/v1/timers'],
  ['GET', `/api/v1/timers/${A}`],
  ['DELETE', `/api/v1/timers/${A}`],
  ['POST', `/api/v1/timers/${A}/reschedule`, { delaySeconds: 60 }],
];

describe('every data route needs a tenant', () => {
  test.each([
    ['no header', {}],
    ['not a UUID', { 'x-queen-tenant': 'tenant-a' }],
    ['the nil UUID', as(NIL)],
    ['the default tenant, which only tenancy off reaches', as(DEFAULT_TENANT)],
  ])('%s: 400 tenant_required on every one, and nothing is stored', async (_name, headers) => {
    for (const [method, path, body] of DATA_ROUTES) {
      const res = await call(api.url, method, path, body, headers as Record<string, string>);
      expect([method, path, res.status, res.body?.error]).toEqual([method, path, 400, 'tenant_required']);
    }
    const { rows } = await api.pool.query(`SELECT (SELECT count(*) FROM queen.queues)::int AS queues, (SELECT count(*) FROM queen.kv)::int AS kv,
                                            (SELECT count(*) FROM queen.log_timers)::int AS timers`);
    expect(rows[0]).toEqual({ queues: 0, kv: 0, timers: 0 });
  });

  test('the refusal says why for the nil UUID and the default tenant', async () => {
    for (const tenant of [NIL, DEFAULT_TENANT]) {
      const res = await call(api.url, 'GET', '/api/v1/pop/queue/q', undefined, as(tenant));
      expect(res.body.message).toMatch(/not a tenant/);
    }
  });
});

describe('two tenants, the same queue names and transactionIds: nothing crosses', () => {
  test('push: each its own queue; a transactionId is a duplicate only within its tenant (fast path, general path, gathered)', async () => {
    // First pushes create each tenant's queue (the general path); the next take the fast path.
    for (const tenant of [A, B]) {
      const first = await pushAs(tenant, [{ queue: 'shared', payload: tenant, transactionId: 'same-1' }]);
      expect([first.status, first.body[0].status]).toEqual([201, 'queued']);
    }
    for (const tenant of [A, B]) {
      const fast = await pushAs(tenant, [{ queue: 'shared', payload: tenant, transactionId: 'same-2' }]);
      expect(fast.body[0].status).toBe('queued');
      const again = await pushAs(tenant, [{ queue: 'shared', payload: 'again', transactionId: 'same-1' }]);
      expect(again.body[0].status).toBe('duplicate');
      const two = await pushAs(tenant, [{ queue: 'shared', payload: tenant, transactionId: 'same-3' }, { queue: 'shared', payload: 'x', transactionId: 'same-2' }]);
      expect(two.body.map((r: { status: string }) => r.status)).toEqual(['queued', 'duplicate']);
    }
    // Concurrent one-item pushes (gathered per partition) of both tenants to the same names.
    const gathered = await Promise.all(
      Array.from({ length: 20 }, (_, i) => pushAs(i % 2 ? B : A, [{ queue: 'shared', payload: i % 2 ? B : A, transactionId: `g${i >> 1}` }])),
    );
    expect(gathered.map((r) => r.body[0].status)).toEqual(Array(20).fill('queued'));
    const { rows } = await api.pool.query(
      `SELECT q.tenant_id::text AS tenant, count(*)::int AS n, count(*) FILTER (WHERE m.payload #>> '{}' = q.tenant_id::text)::int AS own
         FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id JOIN queen.messages m ON m.partition_id = p.id
        WHERE q.name = 'shared' GROUP BY 1 ORDER BY 1`,
    );
    expect(rows).toEqual([
      { tenant: A, n: 13, own: 13 },
      { tenant: B, n: 13, own: 13 },
    ]);
  });

  test('pop, ack, ack batch, lease extend: another tenant\'s partitionId and leaseId are unknown ones', async () => {
    await pushAs(A, [{ queue: 'work', payload: 'a1', transactionId: 't1' }, { queue: 'work', payload: 'a2', transactionId: 't2' }]);
    await pushAs(B, [{ queue: 'work', payload: 'b1', transactionId: 't1' }]);
    const [a1] = await popAs(A, 'work');
    expect([a1.data, a1.transactionId]).toEqual(['a1', 't1']);
    // B sees only its own message, never A's, in any consumer group or by partition.
    const bs = await popAs(B, 'work', '?batch=10');
    expect(bs.map((m) => m.data)).toEqual(['b1']);
    expect(await popAs(B, 'work', '?batch=10&consumerGroup=other')).toEqual([expect.objectContaining({ data: 'b1' })]);
    expect(await popAs(B, 'work/partition/Default', '?consumerGroup=third')).toEqual([expect.objectContaining({ data: 'b1' })]);

    // B acks A's message naming A's partition and lease: answered as a partition that does not exist.
    const unknown = { ...ack(a1), partitionId: '0f0f0f0f-0f0f-4f0f-8f0f-0f0f0f0f0f0f' };
    const acked = await call(api.url, 'POST', '/api/v1/ack', ack(a1), as(B));
    const ackedUnknown = await call(api.url, 'POST', '/api/v1/ack', unknown, as(B));
    expect(acked.body).toEqual({ ...ackedUnknown.body, partitionId: a1.partitionId });
    expect(acked.body).toMatchObject({ ok: false, ackReason: 'not_found' });
    const batch = await call(api.url, 'POST', '/api/v1/ack/batch', { acknowledgments: [ack(a1, 'failed'), unknown] }, as(B));
    expect(batch.body.results.map((r: { ackReason: string }) => r.ackReason)).toEqual(['not_found', 'not_found']);
    // Nor extends A's lease: the same answer as a lease that never was.
    const extended = await call(api.url, 'POST', `/api/v1/lease/${a1.leaseId}/extend`, { seconds: 3600 }, as(B));
    const extendedUnknown = await call(api.url, 'POST', `/api/v1/lease/${unknown.partitionId}/extend`, { seconds: 3600 }, as(B));
    expect(extended.body).toEqual({ ...extendedUnknown.body, leaseId: a1.leaseId });
    expect(extended.body).toMatchObject({ ok: false, reason: 'lease_expired' });

    // A's state is untouched: its lease still holds (nothing acked, nothing failed) and A settles it.
    const leased = await api.pool.query(
      `SELECT c.lease_id::text, queen.ts_v1(c.lease_expires_at) = $2 AS same_expiry, c.failures::int, c.completed::int
         FROM queen.partition_consumers c WHERE c.partition_id = $1 AND c.consumer_group = '__QUEUE_MODE__'`,
      [a1.partitionId, a1.leaseExpiresAt],
    );
    expect(leased.rows).toEqual([{ lease_id: a1.leaseId, same_expiry: true, failures: 0, completed: 0 }]);
    expect((await call(api.url, 'POST', `/api/v1/lease/${a1.leaseId}/extend`, { seconds: 60 }, as(A))).body.ok).toBe(true);
    expect((await call(api.url, 'POST', '/api/v1/ack', ack(a1), as(A))).body).toMatchObject({ ok: true });
    expect((await popAs(A, 'work')).map((m) => m.data)).toEqual(['a2']);
    // And B's own ack of its own t1 works.
    expect((await call(api.url, 'POST', '/api/v1/ack', ack(bs[0]), as(B))).body).toMatchObject({ ok: true });
  });

  test('configure: each tenant its own options for the same queue name', async () => {
    const a = await call(api.url, 'POST', '/api/v1/configure', { queue: 'conf', options: { leaseTime: 120, retryLimit: 7 } }, as(A));
    const b = await call(api.url, 'POST', '/api/v1/configure', { queue: 'conf', options: { leaseTime: 5 } }, as(B));
    expect(a.body.options).toMatchObject({ leaseTime: 120, retryLimit: 7 });
    expect(b.body.options).toMatchObject({ leaseTime: 5, retryLimit: 3 });
    const again = await call(api.url, 'POST', '/api/v1/configure', { queue: 'conf', options: {} }, as(A));
    expect(again.body.options).toMatchObject({ leaseTime: 120, retryLimit: 7 });
    const { rows } = await api.pool.query(`SELECT tenant_id::text AS t, lease_time, retry_limit FROM queen.queues WHERE name = 'conf' ORDER BY 1`);
    expect(rows).toEqual([
      { t: A, lease_time: 120, retry_limit: 7 },
      { t: B, lease_time: 5, retry_limit: 3 },
    ]);
  });

  test('dead letters are per tenant: B\'s failures never count against A\'s message', async () => {
    await call(api.url, 'POST', '/api/v1/configure', { queue: 'dlq', options: { retryLimit: 0 } }, as(B));
    await pushAs(A, [{ queue: 'dlq', payload: 'a', transactionId: 'd1' }]);
    await pushAs(B, [{ queue: 'dlq', payload: 'b', transactionId: 'd1' }]);
    const [b] = await popAs(B, 'dlq');
    expect((await call(api.url, 'POST', '/api/v1/ack', ack(b, 'failed'), as(B))).body).toMatchObject({ ok: true, deadLetter: true });
    const [a] = await popAs(A, 'dlq');
    expect([a.data, a.retryCount]).toEqual(['a', 0]);
  });

  test('transaction: pushes dedupe per tenant; an ack of another tenant\'s message rolls the bundle back as an unknown one; kv and timers stay apart', async () => {
    const pushOp = (payload: string) => ({ operations: [{ type: 'push', items: [{ queue: 'txq', payload, transactionId: 'tx-same' }] }] });
    expect((await txAs(A, pushOp('a'))).body.results[0].items[0].status).toBe('queued');
    expect((await txAs(B, pushOp('b'))).body.results[0].items[0].status).toBe('queued');
    expect((await txAs(A, pushOp('a2'))).body.results[0].items[0].status).toBe('duplicate');
    const [a] = await popAs(A, 'txq');
    expect(a.data).toBe('a');
    // B acks A's message in a bundle beside a push: not_found, and B's push does not commit.
    const crossed = await txAs(B, {
      operations: [
        { type: 'push', items: [{ queue: 'txq', payload: 'b-beside', transactionId: 'beside' }] },
        { type: 'ack', ...ack(a), consumerGroup: '__QUEUE_MODE__' },
      ],
    });
    expect(crossed.body).toMatchObject({ ok: false, reason: 'ack_failed', failedIndex: 1, ackReason: 'not_found' });
    const [b] = await popAs(B, 'txq');
    expect(b.data).toBe('b');
    expect(await popAs(B, 'txq', '?consumerGroup=audit&batch=10')).toEqual([expect.objectContaining({ data: 'b' })]);
    // Each acks its own inside a bundle.
    expect((await txAs(A, { operations: [{ type: 'ack', ...ack(a) }] })).body.ok).toBe(true);
    expect((await txAs(B, { operations: [{ type: 'ack', ...ack(b) }] })).body.ok).toBe(true);
    // The wire's kv and timers arrays: a key and a timer of one tenant are absent for the other.
    const put = await txAs(A, { kv: [{ op: 'put', ns: 'wire', key: 'k', value: 'a', forever: true }], timers: [{ op: 'schedule', queue: 'later', payload: 1, delaySeconds: 3600 }] });
    expect(put.body.ok).toBe(true);
    const timerId = put.body.results[1].timerId;
    const probe = await txAs(B, { kv: [{ op: 'get', ns: 'wire', key: 'k' }], timers: [{ op: 'cancel', timerId }] });
    expect(probe.body.results.map((r: { found?: boolean; cancelled?: boolean; reason?: string }) => [r.found, r.cancelled, r.reason])).toEqual([
      [false, undefined, undefined],
      [undefined, false, 'absent'],
    ]);
    const own = await txAs(A, { kv: [{ op: 'get', ns: 'wire', key: 'k' }], timers: [{ op: 'cancel', timerId }] });
    expect(own.body.results.map((r: { value?: unknown; cancelled?: boolean }) => [r.value, r.cancelled])).toEqual([
      ['a', undefined],
      [undefined, true],
    ]);
  });

  test('a timer fires into its own tenant\'s queue: the other tenant, with a queue of that name, never sees it', async () => {
    await pushAs(B, [{ queue: 'timed', payload: 'b-own' }]);
    const timer = await call(api.url, 'POST', '/api/v1/timers', { queue: 'timed', payload: 'from-a-timer', delaySeconds: 0 }, as(A));
    expect(timer.status).toBe(200);
    await sweep(api.databaseUrl, 2);
    expect((await popAs(B, 'timed', '?batch=10')).map((m) => m.data)).toEqual(['b-own']);
    const [fired] = await popAs(A, 'timed', '?batch=10');
    expect([fired.data, fired.transactionId]).toEqual(['from-a-timer', `timer:${timer.body.timerId}`]);
    // B pushing that transactionId is refused (the prefix is the sweeper's), never a duplicate verdict.
    const probe = await pushAs(B, [{ queue: 'timed', payload: 1, transactionId: `timer:${timer.body.timerId}` }]);
    expect([probe.status, probe.body.error]).toEqual([400, 'log_reserved_transaction_id']);
  });

  test('a long poll is answered with its own tenant\'s push, never with another tenant\'s queue of the same name', async () => {
    await pushAs(A, [{ queue: 'wake', payload: 'seed' }]);
    await popAs(A, 'wake');
    const waiting = call(api.url, 'GET', '/api/v1/pop/queue/wake?wait=true&timeout=30000&consumerGroup=w', undefined, as(B));
    await pushAs(A, [{ queue: 'wake', payload: 'a-only' }]);
    await pushAs(B, [{ queue: 'wake', payload: 'b-wakes' }]);
    const res = await waiting;
    expect(res.body.messages.map((m: Message) => m.data)).toEqual(['b-wakes']);
  });
});

describe('rows written with tenancy off', () => {
  test('are the default tenant\'s: a tenancy cell on the same database never reaches them, and they stay readable with tenancy off', async () => {
    const log = createLogger('api-test', 'silent');
    const off = await startApiServer(loadConfig({ QUEEN_WORKERS: '1', DB_POOL_SIZE: '10', ...UNLIMITED_RATES, DATABASE_URL: api.databaseUrl }), log, { message: 3, kv: 2 }, 0);
    try {
      const pushed = await call(off.url, 'POST', '/api/v1/push', { items: [{ queue: 'legacy', payload: 'before', transactionId: 'old-1' }] });
      expect(pushed.body[0].status).toBe('queued');
      const { rows } = await api.pool.query(`SELECT tenant_id::text AS t FROM queen.queues WHERE name = 'legacy'`);
      expect(rows).toEqual([{ t: DEFAULT_TENANT }]);
      // The tenancy cell: tenant A has no such message and may use the same transactionId.
      expect(await popAs(A, 'legacy')).toEqual([]);
      expect((await pushAs(A, [{ queue: 'legacy', payload: 'a', transactionId: 'old-1' }])).body[0].status).toBe('queued');
      // With tenancy off the old message is there, as it was.
      const popped = await call(off.url, 'GET', '/api/v1/pop/queue/legacy');
      expect(popped.body.messages.map((m: Message) => [m.data, m.transactionId])).toEqual([['before', 'old-1']]);
      expect((await call(off.url, 'POST', '/api/v1/ack', ack(popped.body.messages[0]))).body.ok).toBe(true);
    } finally {
      await off.close();
    }
  });
});

test("the 0.2 routes reach only the tenant's own: a consumer-group delete, a trace, a pop by namespace", async () => {
  for (const t of [A, B]) {
    await call(api.url, 'POST', '/api/v1/configure', { queue: 'tq-ns', namespace: 'shared-ns', options: {} }, as(t));
    await pushAs(t, [{ queue: 'tq-ns', payload: t, transactionId: 'same' }]);
  }
  const [mine] = await popAs(A, 'tq-ns', '?consumerGroup=g');
  await call(api.url, 'POST', '/api/v1/ack', { ...ack(mine), consumerGroup: 'g' }, as(A));
  const [theirs] = await popAs(B, 'tq-ns', '?consumerGroup=g');
  await call(api.url, 'POST', '/api/v1/ack', { ...ack(theirs), consumerGroup: 'g' }, as(B));
  // B's delete of group g leaves A's cursor alone.
  const del = await call(api.url, 'DELETE', '/api/v1/consumer-groups/g', undefined, as(B));
  expect(del.body.deletedPartitions).toBe(1);
  expect(await popAs(A, 'tq-ns', '?consumerGroup=g')).toEqual([]);
  expect((await popAs(B, 'tq-ns', '?consumerGroup=g')).map((m) => m.data)).toEqual([B]);
  // A trace against A's message from B is an unknown message; A's read shows none of B's.
  const foreign = await call(api.url, 'POST', '/api/v1/traces', { transactionId: mine.transactionId, partitionId: mine.partitionId, data: {} }, as(B));
  expect(foreign.body.error).toBe('not_found');
  expect((await call(api.url, 'GET', `/api/v1/traces/${mine.partitionId}/${mine.transactionId}`, undefined, as(A))).body.traces).toEqual([]);
  // A pop by namespace takes only the tenant's own queue.
  const byNs = await call(api.url, 'GET', '/api/v1/pop?namespace=shared-ns&consumerGroup=h', undefined, as(A));
  expect(byNs.body.messages.map((m: Message) => m.data)).toEqual([A]);
});
