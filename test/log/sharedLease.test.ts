// Queen's multi-partition pop (docs/log-and-transactions.md): `partitions=N` leases up to N partitions
// of the queue to one consumer, `batch` messages in all, under one lease id that acks and lease
// extends accept for every partition it covers, and that fences exactly as a partition's own does.
import { ackOf, Message, push } from './helpers';
import { call } from '../support/http';
import { useApi } from '../support/api';

const api = useApi({}, { connections: 1 });

async function seed(queue: string, partitions: number, each: number): Promise<void> {
  const items = [];
  for (let p = 0; p < partitions; p++) for (let m = 0; m < each; m++) items.push({ queue, partition: `p${p}`, payload: { p, m }, transactionId: `p${p}-m${m}` });
  expect((await push(api.url, items)).status).toBe(201);
}

async function popMany(queue: string, query: string): Promise<{ status: number; body: any }> {
  return call(api.url, 'GET', `/api/v1/pop/queue/${queue}?wait=false&${query}`);
}

test('partitions=3 leases three partitions at once under one lease id, each partition in order', async () => {
  await seed('sl-basic', 3, 2);
  const res = await popMany('sl-basic', 'batch=100&partitions=3');
  expect(res.status).toBe(200);
  const messages: Message[] = res.body.messages;
  expect(messages).toHaveLength(6);
  expect(new Set(messages.map((m) => m.partitionId)).size).toBe(3);
  expect(new Set(messages.map((m) => m.leaseId))).toEqual(new Set([res.body.leaseId]));
  expect(res.body.partitionsClaimed).toBe(3);
  for (const p of ['p0', 'p1', 'p2']) {
    expect(messages.filter((m) => m.partition === p).map((m) => m.data.m)).toEqual([0, 1]);
  }
});

test('batch is the cap over all the partitions; without partitions a pop takes one', async () => {
  await seed('sl-cap', 5, 10);
  const capped = await popMany('sl-cap', 'batch=7&partitions=5');
  expect(capped.body.messages).toHaveLength(7);
  const one = await popMany('sl-cap', 'batch=100&consumerGroup=other');
  expect([one.body.messages.length, one.body.partitionsClaimed]).toEqual([10, 1]);
  // A named partition is one partition, whatever partitions says.
  const named = await call(api.url, 'GET', '/api/v1/pop/queue/sl-cap/partition/p4?wait=false&batch=100&partitions=5&consumerGroup=named');
  expect(new Set(named.body.messages.map((m: Message) => m.partition))).toEqual(new Set(['p4']));
});

test('acks naming the shared lease id settle every partition (single, batch and in the transaction wire); the queue drains', async () => {
  await seed('sl-ack', 3, 2);
  const res = await popMany('sl-ack', 'batch=100&partitions=3&consumerGroup=g');
  const messages: Message[] = res.body.messages;
  const [first, ...rest] = messages;
  const single = await call(api.url, 'POST', '/api/v1/ack', ackOf(first));
  expect(single.body.ok).toBe(true);
  const [viaWire, ...batched] = rest;
  const wire = await call(api.url, 'POST', '/api/v1/transaction', { operations: [{ type: 'ack', ...ackOf(viaWire) }] });
  expect(wire.body.ok).toBe(true);
  const batch = await call(api.url, 'POST', '/api/v1/ack/batch', { acknowledgments: batched.map((m) => ackOf(m)), consumerGroup: 'g' });
  expect(batch.body.results.map((r: any) => r.ok)).toEqual(batched.map(() => true));
  // Every lease was released by its acks: nothing is left for the group, and no lease lapses later.
  expect((await popMany('sl-ack', 'batch=100&partitions=3&consumerGroup=g')).status).toBe(204);
});

test('extending the shared lease id extends every partition it covers; an unknown id is lease_expired', async () => {
  await configureLease('sl-extend', 60);
  await seed('sl-extend', 3, 1);
  const res = await popMany('sl-extend', 'batch=100&partitions=3');
  const extended = await call(api.url, 'POST', `/api/v1/lease/${res.body.leaseId}/extend`, { seconds: 3600 });
  expect([extended.body.ok, extended.body.success]).toEqual([true, true]);
  const { rows } = await api.pool.query(
    `SELECT c.lease_expires_at > now() + interval '3000 seconds' AS long FROM queen.partition_consumers c
       JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.name = 'sl-extend' AND c.consumer_group = '__QUEUE_MODE__'`);
  expect(rows.map((r) => r.long)).toEqual([true, true, true]);
  const unknown = await call(api.url, 'POST', '/api/v1/lease/00000000-0000-4000-8000-00000000beef/extend');
  expect([unknown.body.ok, unknown.body.reason]).toEqual([false, 'lease_expired']);
});

test('the shared id fences like a partition lease: once a partition is taken over, an ack under the old shared id is lease_expired', async () => {
  await seed('sl-fence', 2, 1);
  const res = await popMany('sl-fence', 'batch=100&partitions=2');
  const [a, b] = res.body.messages as Message[];
  // Partition a's lease lapses (aged, not waited for) and another consumer takes it over.
  await api.pool.query(`UPDATE queen.partition_consumers SET lease_expires_at = now() - interval '1 second' WHERE partition_id = $1`, [a.partitionId]);
  const taken = await call(api.url, 'GET', `/api/v1/pop/queue/sl-fence/partition/${a.partition}?wait=false`);
  expect(taken.body.messages.map((m: Message) => m.transactionId)).toEqual([a.transactionId]);
  const zombie = await call(api.url, 'POST', '/api/v1/ack', ackOf(a));
  expect([zombie.body.ok, zombie.body.ackReason]).toEqual([false, 'lease_expired']);
  // The other partition's lease under the same shared id is untouched.
  expect((await call(api.url, 'POST', '/api/v1/ack', ackOf(b))).body.ok).toBe(true);
  expect((await call(api.url, 'POST', '/api/v1/ack', ackOf(taken.body.messages[0]))).body.ok).toBe(true);
});

test.each([['0'], ['1001'], ['two'], ['1.5']])('partitions=%s is 400 log_invalid_partitions', async (value) => {
  const res = await call(api.url, 'GET', `/api/v1/pop/queue/sl-bad?partitions=${value}`);
  expect([res.status, res.body.error]).toEqual([400, 'log_invalid_partitions']);
});

async function configureLease(queue: string, leaseTime: number): Promise<void> {
  expect((await call(api.url, 'POST', '/api/v1/configure', { queue, options: { leaseTime } })).status).toBe(200);
}
