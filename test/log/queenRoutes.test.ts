// The routes and parameters Queen's clients call beyond push/pop/ack (docs/log-and-transactions.md):
// DELETE /api/v1/consumer-groups/:group, POST /api/v1/traces and its read, subscriptionFrom with an
// instant, the dead-letter read's from/to, and the server-side autoAck on pop.
import { DEFAULT_TENANT } from '../../shared/config';
import { ack, configure, pop, popRaw, push } from './helpers';
import { call } from '../support/http';
import { useApi } from '../support/api';

const api = useApi({}, { connections: 1 });

describe('DELETE /api/v1/consumer-groups/:group', () => {
  test('the group starts over on every queue; other groups keep their place', async () => {
    await push(api.url, [{ queue: 'cg-a', payload: 1, transactionId: 'a1' }, { queue: 'cg-b', payload: 2, transactionId: 'b1' }]);
    for (const q of ['cg-a', 'cg-b']) {
      for (const g of ['gone', 'kept']) {
        const [m] = await pop(api.url, q, { consumerGroup: g });
        await ack(api.url, m);
      }
    }
    const res = await call(api.url, 'DELETE', '/api/v1/consumer-groups/gone?deleteMetadata=true');
    expect([res.status, res.body.success, res.body.consumerGroup, res.body.deletedPartitions, res.body.metadataDeleted]).toEqual([200, true, 'gone', 2, true]);
    expect((await pop(api.url, 'cg-a', { consumerGroup: 'gone' })).map((m) => m.transactionId)).toEqual(['a1']);
    expect(await pop(api.url, 'cg-a', { consumerGroup: 'kept' })).toEqual([]);
    const again = await call(api.url, 'DELETE', '/api/v1/consumer-groups/never-seen?deleteMetadata=false');
    expect([again.status, again.body.deletedPartitions, again.body.metadataDeleted]).toEqual([200, 0, false]);
  });

  test('a group that is not a name is 400', async () => {
    const res = await call(api.url, 'DELETE', '/api/v1/consumer-groups/-bad');
    expect([res.status, res.body.error]).toEqual([400, 'log_invalid_consumer_group']);
  });
});

describe('POST /api/v1/traces', () => {
  test('stores an event against the message, read back in order; an unknown message stores nothing', async () => {
    await push(api.url, [{ queue: 'tr-a', payload: 1, transactionId: 't1' }]);
    const [m] = await pop(api.url, 'tr-a');
    const one = await call(api.url, 'POST', '/api/v1/traces', { transactionId: m.transactionId, partitionId: m.partitionId, data: { text: 'started' }, traceNames: 'order-1' });
    expect([one.status, one.body.success, one.body.traceId]).toEqual([201, true, 1]);
    await call(api.url, 'POST', '/api/v1/traces', { transactionId: m.transactionId, partitionId: m.partitionId, eventType: 'step', data: { text: 'done' }, traceNames: ['a', 'b'] });
    const read = await call(api.url, 'GET', `/api/v1/traces/${m.partitionId}/${m.transactionId}`);
    expect(read.body.traces.map((t: { eventType: string; data: unknown; traceNames: string[] }) => [t.eventType, t.data, t.traceNames]))
      .toEqual([['info', { text: 'started' }, ['order-1']], ['step', { text: 'done' }, ['a', 'b']]]);
    const unknown = await call(api.url, 'POST', '/api/v1/traces', { transactionId: 'nope', partitionId: m.partitionId, data: {} });
    expect([unknown.status, unknown.body.success, unknown.body.error]).toEqual([200, false, 'not_found']);
  });

  test('bounded: data past 16 KiB is 400, the 101st event of a message stores nothing', async () => {
    await push(api.url, [{ queue: 'tr-b', payload: 1, transactionId: 't1' }]);
    const [m] = await pop(api.url, 'tr-b');
    const big = await call(api.url, 'POST', '/api/v1/traces', { transactionId: m.transactionId, partitionId: m.partitionId, data: 'x'.repeat(17_000) });
    expect([big.status, big.body.error]).toEqual([400, 'log_invalid_trace']);
    await api.pool.query(
      `INSERT INTO queen.message_traces (partition_id, transaction_id, n, consumer_group, event_type, data)
       SELECT $1, $2, n, '__QUEUE_MODE__', 'info', '{}' FROM generate_series(1, 100) n`, [m.partitionId, m.transactionId]);
    const full = await call(api.url, 'POST', '/api/v1/traces', { transactionId: m.transactionId, partitionId: m.partitionId, data: {} });
    expect([full.status, full.body.error]).toEqual([200, 'trace_limit']);
  });

  test('a trace goes with its message', async () => {
    await push(api.url, [{ queue: 'tr-c', payload: 1, transactionId: 't1' }]);
    const [m] = await pop(api.url, 'tr-c');
    await call(api.url, 'POST', '/api/v1/traces', { transactionId: m.transactionId, partitionId: m.partitionId, data: {} });
    await call(api.url, 'DELETE', '/api/v1/resources/queues/tr-c');
    const { rows } = await api.pool.query(`SELECT count(*)::int AS n FROM queen.message_traces WHERE partition_id = $1`, [m.partitionId]);
    expect(rows[0].n).toBe(0);
  });
});

describe('subscriptionFrom with an instant', () => {
  test('a new group reads the messages stored at or after it, not those before', async () => {
    await push(api.url, [{ queue: 'sf-a', payload: 'old', transactionId: 'old' }]);
    await api.pool.query(`UPDATE queen.messages m SET created_at = now() - interval '1 hour' FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
                           WHERE p.id = m.partition_id AND q.name = 'sf-a'`);
    await push(api.url, [{ queue: 'sf-a', payload: 'new', transactionId: 'new' }]);
    const from = new Date(Date.now() - 10 * 60_000).toISOString();
    const res = await call(api.url, 'GET', `/api/v1/pop/queue/sf-a?consumerGroup=since&batch=10&subscriptionFrom=${encodeURIComponent(from)}`);
    expect(res.body.messages.map((m: { transactionId: string }) => m.transactionId)).toEqual(['new']);
    // Another group without it reads everything.
    expect((await pop(api.url, 'sf-a', { consumerGroup: 'all', batch: 10 })).map((m) => m.transactionId)).toEqual(['old', 'new']);
  });

  test.each(['yesterday', '2026-13-01T00:00:00Z', '2026-12-01'])('%p is 400 log_invalid_timestamp', async (value) => {
    const res = await call(api.url, 'GET', `/api/v1/pop/queue/sf-b?consumerGroup=g&subscriptionFrom=${encodeURIComponent(value)}`);
    expect([res.status, res.body.error]).toEqual([400, 'log_invalid_timestamp']);
  });
});

test.each([
  ['queen.log_subscribe_new_v1($1, $2, NULL, $3)', 'subscriptionMode new'],
  ['queen.log_subscribe_from_v1($1, $2, NULL, $3, now())', 'subscriptionFrom'],
])('%s refuses queue mode, naming its option', async (call_, option) => {
  await expect(api.pool.query(`SELECT ${call_}`, [DEFAULT_TENANT, 'sub-qm', '__QUEUE_MODE__'])).rejects.toMatchObject({
    message: `${option} applies to a named consumer group (consumerGroup), not to queue mode.`,
  });
});

describe('the dead-letter read: from and to', () => {
  test('bound the instant a message was set aside, each end included', async () => {
    await configure(api.url, 'dq-a', { retryLimit: 0 });
    await push(api.url, [{ queue: 'dq-a', payload: 1, transactionId: 'd1' }, { queue: 'dq-a', payload: 2, transactionId: 'd2' }]);
    for (const m of await pop(api.url, 'dq-a', { batch: 10 })) await ack(api.url, m, 'failed');
    await api.pool.query(`UPDATE queen.message_failures f SET dead_lettered_at = now() - interval '2 days' FROM queen.messages m
                           WHERE m.partition_id = f.partition_id AND m.seq = f.seq AND m.transaction_id = 'd1'`);
    const day = new Date(Date.now() - 86_400_000).toISOString();
    const recent = await call(api.url, 'GET', `/api/v1/dlq?queue=dq-a&from=${encodeURIComponent(day)}`);
    expect(recent.body.messages.map((m: { transactionId: string }) => m.transactionId)).toEqual(['d2']);
    expect(recent.body.total).toBe(1);
    const older = await call(api.url, 'GET', `/api/v1/dlq?queue=dq-a&to=${encodeURIComponent(day)}`);
    expect(older.body.messages.map((m: { transactionId: string }) => m.transactionId)).toEqual(['d1']);
    const bad = await call(api.url, 'GET', '/api/v1/dlq?queue=dq-a&from=soon');
    expect([bad.status, bad.body.error]).toEqual([400, 'log_invalid_timestamp']);
  });
});

describe('autoAck on pop', () => {
  test('the messages are consumed at delivery: leaseId "", nothing comes back, no ack needed', async () => {
    await configure(api.url, 'aa-a', { leaseTime: 1 });
    await push(api.url, [{ queue: 'aa-a', payload: 1, transactionId: 'x1' }, { queue: 'aa-a', payload: 2, transactionId: 'x2' }]);
    const res = await call(api.url, 'GET', '/api/v1/pop/queue/aa-a?batch=1&autoAck=true');
    expect([res.status, res.body.leaseId, res.body.messages[0].leaseId, res.body.messages[0].transactionId]).toEqual([200, '', '', 'x1']);
    expect((await pop(api.url, 'aa-a', { batch: 10 })).map((m) => m.transactionId)).toEqual(['x2']);
  });

  test('autoAck that is not a boolean is 400', async () => {
    const res = await popRaw(api.url, 'aa-b', {});
    expect(res.status).toBe(204);
    const bad = await call(api.url, 'GET', '/api/v1/pop/queue/aa-b?autoAck=maybe');
    expect([bad.status, bad.body.error]).toEqual([400, 'bad_request']);
  });
});
