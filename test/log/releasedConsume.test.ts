// The release before this one (0.1.0) calls queen.log_pop_many_v1, queen.log_ack_batch_body_v1 and
// queen.log_ack_batch_v1 while a rolling upgrade runs the two side by side; they answer and write as
// 0.1.0 did, whatever they share with their successors. What tells the generations apart: v1's pop
// answers no trace context or sealed mark, writes the group row's updated_at, knows no tenant move
// and leases under random (version 4) UUIDs, v2's under ids that name their partition (version 8);
// v1's `failed` ack sets no retry gate and v1's pop does not read one (with or without a delay),
// where v2 holds the group's partition back for the queue's retryDelay. Where retryDelay is 0 the two
// ack batches decide alike (v1 writes the row at each ack, v2 once).
import { DEFAULT_TENANT } from '../../shared/config';
import { useApi } from '../support/api';
import { ackOf, configure, Message, push } from './helpers';

const api = useApi();

async function seed(queue: string, partitions: number): Promise<void> {
  // A retryDelay no test outlives: v2's hold-back is certain for the whole test.
  await configure(api.url, queue, { retryLimit: 5, retryDelay: 600_000 });
  const items = Array.from({ length: partitions }, (_, p) => ({ queue, partition: `p${p}`, payload: p, transactionId: `${queue}-p${p}` }));
  expect((await push(api.url, items)).status).toBe(201);
}

async function popMany(version: 1 | 2, queue: string, group: string, partitions: number): Promise<Message[]> {
  const { rows } = await api.pool.query(`SELECT queen.log_pop_many_v${version}($1::uuid, $2, NULL, $3, 10, $4) AS m`, [DEFAULT_TENANT, queue, group, partitions]);
  return rows[0].m;
}

async function ackBody(version: 1 | 2, body: unknown): Promise<any[]> {
  const { rows } = await api.pool.query(`SELECT queen.log_ack_batch_body_v${version}($1::uuid, $2::jsonb) AS r`, [DEFAULT_TENANT, JSON.stringify(body)]);
  return rows[0].r;
}

/** The group's rows of the queue: each partition's lease id's UUID version, and whether a retry gate holds it. */
async function rows(queue: string, group: string): Promise<Array<{ partition: string; version: string | null; gated: boolean }>> {
  const { rows: found } = await api.pool.query(
    `SELECT p.name AS partition, substr(c.lease_id::text, 15, 1) AS version,
            EXISTS (SELECT 1 FROM queen.consumer_retry_at r WHERE r.partition_id = c.partition_id AND r.consumer_group = c.consumer_group) AS gated
       FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.tenant_id = $1 AND q.name = $2 AND c.consumer_group = $3 ORDER BY p.name`, [DEFAULT_TENANT, queue, group]);
  return found;
}

test('log_pop_many_v1 leases several partitions under one shared id, as 0.1.0 did; log_pop_many_v2 as v2 pops', async () => {
  await seed('rel-many', 2);
  const old = await popMany(1, 'rel-many', 'old', 2);
  expect(old.map((m) => m.partition).sort()).toEqual(['p0', 'p1']);
  expect(new Set(old.map((m) => m.leaseId)).size).toBe(1);
  expect(old.map((m) => 'traceparent' in m)).toEqual([false, false]);
  expect(await rows('rel-many', 'old')).toEqual([{ partition: 'p0', version: '4', gated: false }, { partition: 'p1', version: '4', gated: false }]);

  const current = await popMany(2, 'rel-many', 'new', 2);
  expect(new Set(current.map((m) => m.leaseId)).size).toBe(1);
  expect(current.map((m) => 'traceparent' in m)).toEqual([true, true]);
  expect(await rows('rel-many', 'new')).toEqual([{ partition: 'p0', version: '8', gated: false }, { partition: 'p1', version: '8', gated: false }]);
});

test('the body-level consumerGroup is every ack\'s in both log_ack_batch_body versions; only v2\'s failed ack gates the partition, and only v2\'s pop waits for it', async () => {
  await seed('rel-body', 2);
  const leased = await popMany(1, 'rel-body', 'g', 2);
  const [p0, p1] = ['p0', 'p1'].map((p) => leased.find((m) => m.partition === p)!);
  // The elements name another group: the body's replaces it.
  const elsewhere = (m: Message) => ({ ...ackOf(m, 'failed'), consumerGroup: 'elsewhere' });
  expect((await ackBody(1, { acknowledgments: [elsewhere(p0)], consumerGroup: 'g' })).map((a) => [a.ok, a.consumerGroup])).toEqual([[true, 'g']]);
  expect((await ackBody(2, { acknowledgments: [elsewhere(p1)], consumerGroup: 'g' })).map((a) => [a.ok, a.consumerGroup])).toEqual([[true, 'g']]);
  expect(await rows('rel-body', 'g')).toEqual([{ partition: 'p0', version: null, gated: false }, { partition: 'p1', version: null, gated: true }]);

  // v2 leases p0 (no gate) and leaves p1 to its retryDelay; v1 reads no gate and takes p1 at once.
  expect((await popMany(2, 'rel-body', 'g', 2)).map((m) => [m.partition, m.retryCount])).toEqual([['p0', 1]]);
  expect((await popMany(1, 'rel-body', 'g', 2)).map((m) => [m.partition, m.retryCount])).toEqual([['p1', 1]]);
});

/** The group's row and its failure rows, without the instants. */
async function settled(queue: string) {
  const { rows: [row] } = await api.pool.query(
    `SELECT c.cursor_seq::int AS cursor, c.done_seqs::text AS done, c.lease_id IS NULL AS released, c.lease_seqs::text AS leased,
            c.lease_failed::text AS failed, c.deliveries::int, c.completed::int, c.failures::int, c.dead_letters::int,
            (SELECT json_agg(json_build_object('seq', f.seq, 'failures', f.failures, 'dead', f.dead_lettered_at IS NOT NULL) ORDER BY f.seq)
               FROM queen.message_failures f WHERE f.partition_id = c.partition_id AND f.consumer_group = c.consumer_group) AS failure_rows,
            (SELECT json_agg(t.error_message ORDER BY t.seq) FROM queen.message_failure_texts t
              WHERE t.partition_id = c.partition_id AND t.consumer_group = c.consumer_group) AS texts
       FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.tenant_id = $1 AND q.name = $2`, [DEFAULT_TENANT, queue]);
  return row;
}

test('log_ack_batch_v1 (one row write an ack) answers and leaves the rows as log_ack_batch_v2 where retryDelay is 0, a dead letter included; p_raise raises QK412', async () => {
  const answers: Record<number, any[]> = {};
  let sample: Message | undefined;
  for (const version of [1, 2] as const) {
    const queue = `rel-ack-v${version}`;
    await configure(api.url, queue, { retryLimit: 0, retryDelay: 0 });
    expect((await push(api.url, Array.from({ length: 5 }, (_, i) => ({ queue, payload: i, transactionId: `${queue}-${i}` })))).status).toBe(201);
    const m = await popMany(1, queue, '__QUEUE_MODE__', 1);
    expect(m).toHaveLength(5);
    const unknown = { ...ackOf(m[0]), transactionId: 'no-such-message' };
    sample = m[0];
    const acks = [ackOf(m[1]), ackOf(m[0]), ackOf(m[0]), { ...ackOf(m[2], 'failed'), error: 'boom' }, ackOf(m[3]), ackOf(m[4]), ackOf(m[2]), unknown];
    const { rows } = await api.pool.query(`SELECT queen.log_ack_batch_v${version}($1::uuid, $2::jsonb, false) AS r`, [DEFAULT_TENANT, JSON.stringify(acks)]);
    answers[version] = rows[0].r.map(({ partitionId, transactionId, ...rest }: any) => rest);
  }
  expect(answers[1].map((r) => r.ackReason ?? (r.deadLetter ? 'dead' : 'ok'))).toEqual(['ok', 'ok', 'already_acked', 'dead', 'ok', 'ok', 'already_acked', 'not_found']);
  expect(answers[1]).toEqual(answers[2]);
  expect(await settled('rel-ack-v1')).toEqual(await settled('rel-ack-v2'));
  expect(await settled('rel-ack-v1')).toMatchObject({ cursor: 5, released: true, completed: 4, failures: 1, dead_letters: 1, texts: ['boom'] });
  // v1's acks write the row's updated_at (after the lease's instant, which v1's pop wrote there); v2's leave it.
  const { rows: stamped } = await api.pool.query(
    `SELECT q.name, c.updated_at > c.last_leased_at AS later FROM queen.partition_consumers c
       JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name LIKE 'rel-ack-v%' ORDER BY 1`);
  expect(stamped).toEqual([{ name: 'rel-ack-v1', later: true }, { name: 'rel-ack-v2', later: false }]);

  const refused = await api.pool.query(`SELECT queen.log_ack_batch_v1($1::uuid, $2::jsonb, true)`, [DEFAULT_TENANT, JSON.stringify([ackOf(sample!), { ...ackOf(sample!), transactionId: 'no-such-message' }])])
    .then(() => null, (e) => e);
  expect([refused?.code, refused?.message, JSON.parse(refused?.detail ?? '{}')]).toEqual(['QK412', 'ack_failed', { failedIndex: 0, ackReason: 'already_acked' }]);
});

/** log_pop_v1 or _v2 of one queue for one group, batch 10: its answer, or what it raised (the SQLSTATE and message). */
async function popOne(version: 1 | 2, queue: string, group: string, tenant = DEFAULT_TENANT): Promise<any> {
  return api.pool.query(`SELECT queen.log_pop_v${version}($1::uuid, $2, NULL, $3, 10) AS m`, [tenant, queue, group])
    .then(({ rows }) => rows[0].m, (e) => ({ raised: e.code, message: e.message }));
}

test('log_pop_v1 answers 0.1.0\'s keys (no trace context, no sealed mark) and writes the row\'s updated_at; it and log_ack_batch_v1 are not refused for a moving tenant', async () => {
  await seed('rel-keys', 1);
  // The message as a traced push and an encrypting queue leave it: v2 answers both, v1 neither.
  await api.pool.query(
    `UPDATE queen.messages m SET trace_id = 'aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee', span_id = '\\x0102030405060708'
       FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = m.partition_id AND q.name = 'rel-keys'`);
  await api.pool.query(
    `INSERT INTO queen.sealed_messages (partition_id, seq) SELECT m.partition_id, m.seq FROM queen.messages m
       JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'rel-keys'`);
  const [old] = await popOne(1, 'rel-keys', 'old');
  expect(Object.keys(old).sort()).toEqual(['consumerGroup', 'createdAt', 'data', 'id', 'leaseExpiresAt', 'leaseId', 'partition', 'partitionId',
    'producerSub', 'queue', 'retryCount', 'traceId', 'transactionId']);
  expect([old.traceId, old.data]).toEqual([null, 0]);
  const [current] = await popOne(2, 'rel-keys', 'new');
  expect([current.traceId, current.sealed, typeof current.traceparent]).toEqual(['aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee', true, 'string']);

  // v1's lease writes updated_at (with the lease's instant); v2's leaves it as the row's insert set it.
  const { rows: written } = await api.pool.query(
    `SELECT c.consumer_group AS g, c.updated_at = c.last_leased_at AS stamped FROM queen.partition_consumers c
       JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'rel-keys' ORDER BY 1`);
  expect(written).toEqual([{ g: 'new', stamped: false }, { g: 'old', stamped: true }]);

  // A tenant moving away: v2 refuses its pop, 0.1.0 knew no moves.
  const moving = '00000000-0000-0000-0000-0000000000c4';
  await api.pool.query(`SELECT queen.log_push_v1($1::uuid, 'rel-moving', NULL, '1', 'rel-moving-1')`, [moving]);
  await api.pool.query(`INSERT INTO queen.tenant_moves (tenant_id, role, peer, step) VALUES ($1, 'source', 'http://peer', 'paused')`, [moving]);
  try {
    expect(await popOne(2, 'rel-moving', 'g', moving)).toEqual({ raised: 'QK400', message: 'tenant_moving' });
    const leased: Message[] = await popOne(1, 'rel-moving', 'g', moving);
    expect(leased.map((m) => m.transactionId)).toEqual(['rel-moving-1']);
    // Its ack likewise: v2's batch refuses the moving tenant, 0.1.0's applies it.
    const ackBatch = (version: 1 | 2) => api.pool.query(`SELECT queen.log_ack_batch_v${version}($1::uuid, $2::jsonb, false) AS r`, [moving, JSON.stringify([ackOf(leased[0])])])
      .then(({ rows }) => rows[0].r.map((a: any) => a.ok), (e) => ({ raised: e.code, message: e.message }));
    expect(await ackBatch(2)).toEqual({ raised: 'QK400', message: 'tenant_moving' });
    expect(await ackBatch(1)).toEqual([true]);
  } finally {
    await api.pool.query(`DELETE FROM queen.tenant_moves WHERE tenant_id = $1`, [moving]);
  }
});

test('under delayedProcessing too, only v2\'s pop waits for the retry gate a failed ack set', async () => {
  await configure(api.url, 'rel-delay', { retryLimit: 5, retryDelay: 600_000, delayedProcessing: 3600 });
  expect((await push(api.url, [{ queue: 'rel-delay', payload: 1, transactionId: 'rel-delay-1' }])).status).toBe(201);
  // An hour old, as if pushed then: due under the delay (time moved by the row, not by sleeping).
  await api.pool.query(
    `UPDATE queen.messages m SET created_at = m.created_at - interval '3601 seconds'
       FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = m.partition_id AND q.name = 'rel-delay'`);
  const [first] = await popOne(2, 'rel-delay', 'g');
  expect((await ackBody(2, { acknowledgments: [ackOf(first, 'failed')] })).map((a) => a.ok)).toEqual([true]);
  expect(await popOne(2, 'rel-delay', 'g')).toEqual([]);
  expect((await popOne(1, 'rel-delay', 'g')).map((m: Message) => [m.transactionId, m.retryCount])).toEqual([['rel-delay-1', 1]]);
});
