// A pop that names no partition reads only the queue's ready partitions: the sweeper settles a
// partition every group the queue knows has finished (queen.log_settle_ready_v1), and pops stop
// reading it (sql/migrations/061_ready_partitions.sql). Settling must never hide a message: every
// way a message reaches a settled partition (each push path, a fired timer), and every way a group
// comes to have something there again (a group new to the queue, a subscription from the past, a
// requeued dead letter, a deleted group popping again), is popped here after a real sweeper settled
// the partition. Each test first checks the settling happened, so none can pass without it.
import { Client } from 'pg';
import { DEFAULT_TENANT } from '../../shared/config';
import { LOG_PUSH_SEALED } from '../../shared/sql/log';
import { useApi } from '../support/api';
import { call } from '../support/http';
import { scheduleDirect, startTestSweeper, sweep } from '../support/sweeper';
import { ack, configure, Message, pop, push } from './helpers';

const TOKEN = 'ready-partitions-token';
const api = useApi({ QUEEN_ADMIN_TOKEN: TOKEN });
const admin = { authorization: `Bearer ${TOKEN}`, 'x-queen-operator': 'ready@test' };

/** The queue's partitions that pops read, by name. */
async function readyOf(queue: string): Promise<string[]> {
  const { rows } = await api.pool.query(
    `SELECT p.name FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.tenant_id = $1 AND q.name = $2 AND p.ready ORDER BY p.name`, [DEFAULT_TENANT, queue]);
  return rows.map((r) => r.name);
}

/** Pops (batches of 10) and acks until the group (queue mode without one) has nothing left; answers the transactionIds popped, in order. */
async function drain(queue: string, group?: string): Promise<string[]> {
  const seen: string[] = [];
  const next = () => pop(api.url, queue, { consumerGroup: group, batch: 10 });
  for (let got = await next(); got.length > 0; got = await next()) {
    for (const m of got) {
      seen.push(m.transactionId);
      expect((await ack(api.url, m)).status).toBe(200);
    }
  }
  return seen;
}

/**
 * `queue` with one message in each of the partitions a, b, c, drained by `group` and settled by a
 * sweeper; answers how many partitions that sweeper counted as settled (its metric).
 */
async function settled(queue: string, group = 'g'): Promise<number> {
  await push(api.url, ['a', 'b', 'c'].map((p) => ({ queue, partition: p, transactionId: `${queue}-${p}0`, payload: p })));
  expect((await drain(queue, group)).sort()).toEqual([`${queue}-a0`, `${queue}-b0`, `${queue}-c0`]);
  const s = startTestSweeper(api.databaseUrl);
  try {
    await s.cycles(2);
    expect(await readyOf(queue)).toEqual([]);
    return (await s.metrics.register.getSingleMetric('queen_log_settled_partitions_total')!.get()).values[0]?.value ?? 0;
  } finally {
    await s.close();
  }
}

test('a partition every group finished is settled, and a push through the API brings it back', async () => {
  expect(await settled('back')).toBeGreaterThanOrEqual(3);
  expect((await push(api.url, [{ queue: 'back', partition: 'b', transactionId: 'back-b1', payload: 1 }])).status).toBe(201);
  expect(await readyOf('back')).toEqual(['b']);
  expect(await drain('back', 'g')).toEqual(['back-b1']);
});

test('a partition a group has not finished is not settled', async () => {
  await push(api.url, ['a', 'b'].map((p) => ({ queue: 'half', partition: p, transactionId: `half-${p}`, payload: p })));
  const [m] = await pop(api.url, 'half', { consumerGroup: 'g', partition: 'a' });
  await ack(api.url, m);
  await sweep(api.databaseUrl, 2);
  expect(await readyOf('half')).toEqual(['b']);
  expect(await drain('half', 'g')).toEqual(['half-b']);
});

test('the general push path and a fired timer make a settled partition ready too', async () => {
  await settled('paths');
  // The API sends its pushes with the fast path on; off, the general path stores the message.
  const c = new Client({ connectionString: api.databaseUrl });
  await c.connect();
  try {
    await c.query('SET queen.log_fast_path = off');
    const items = [{ queue: 'paths', partition: 'c', transactionId: 'paths-c1', payload: 1 }];
    const { rows } = await c.query({ ...LOG_PUSH_SEALED, values: [DEFAULT_TENANT, JSON.stringify({ items }), null] });
    expect(JSON.stringify(rows[0])).toContain('queued');
  } finally {
    await c.end();
  }
  expect(await readyOf('paths')).toEqual(['c']);
  expect(await drain('paths', 'g')).toEqual(['paths-c1']);
  await sweep(api.databaseUrl, 2);
  expect(await readyOf('paths')).toEqual([]);
  // A timer fires into a settled partition.
  const [first] = await scheduleDirect(api.pool, DEFAULT_TENANT, 1, () => ({ queue: 'paths', partition: 'a', deliverAt: new Date().toISOString(), payload: 't' }));
  await sweep(api.databaseUrl, 1);
  expect(await drain('paths', 'g')).toEqual([`timer:${first}`]);
});

test('a group new to the queue reads every settled partition from its first message', async () => {
  await settled('late');
  expect((await drain('late', 'newcomer')).sort()).toEqual(['late-a0', 'late-b0', 'late-c0']);
  // Queue mode is a group like any other.
  expect((await drain('late')).sort()).toEqual(['late-a0', 'late-b0', 'late-c0']);
});

test('a group subscribed from the past reads a settled partition from there', async () => {
  await settled('past');
  const res = await call(api.url, 'GET', `/api/v1/pop/queue/past?consumerGroup=replay&subscriptionFrom=${encodeURIComponent('2000-01-01T00:00:00Z')}&batch=10`);
  expect(res.status).toBe(200);
  const first: Message[] = res.body.messages;
  for (const m of first) await ack(api.url, m);
  expect([...first.map((m) => m.transactionId), ...(await drain('past', 'replay'))].sort()).toEqual(['past-a0', 'past-b0', 'past-c0']);
});

test('a deleted group pops its queue again from the start, settled partitions included', async () => {
  await settled('gone', 'worker');
  expect((await call(api.url, 'DELETE', '/api/v1/consumer-groups/worker')).status).toBe(200);
  expect((await drain('gone', 'worker')).sort()).toEqual(['gone-a0', 'gone-b0', 'gone-c0']);
});

test('a requeued dead letter pops again from a settled partition', async () => {
  await configure(api.url, 'dead', { retryLimit: 0, retryDelay: 0 });
  await push(api.url, [{ queue: 'dead', partition: 'a', transactionId: 'dead-a0', payload: 0 }]);
  const [m] = await pop(api.url, 'dead', { consumerGroup: 'w' });
  const failed = await ack(api.url, m, 'failed');
  expect(failed.body.deadLetter).toBe(true);
  await sweep(api.databaseUrl, 2);
  expect(await readyOf('dead')).toEqual([]);
  const path = `/api/v1/system/partitions/${m.partitionId}/messages/${m.transactionId}/requeue`;
  const res = await call(api.url, 'POST', path, { consumerGroup: 'w' }, admin);
  expect([res.status, res.body.groups]).toEqual([200, [{ consumerGroup: 'w', outcome: 'requeued' }]]);
  expect(await drain('dead', 'w')).toEqual(['dead-a0']);
});
