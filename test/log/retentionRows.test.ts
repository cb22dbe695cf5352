// Retention's rule for the rows that are not messages (docs/log-and-transactions.md "Retention"): a
// consumer group's row in a partition goes when it owes nothing and has been idle past the queue's
// retention, and a partition goes when it holds no message and no group row. Age is made, not
// waited for, as in retention.test.ts.
import { ack, configure, pop, push } from './helpers';
import { useRetentionSuite } from './retentionSuite';

const suite = useRetentionSuite();
const { api, age } = suite;

/** Moves a group's last use of the queue's partitions `seconds` into the past (its row's last lease and creation). */
async function idle(queue: string, group: string, seconds: number): Promise<void> {
  await api.pool.query(
    `UPDATE queen.partition_consumers c
        SET last_leased_at = c.last_leased_at - make_interval(secs => $3), created_at = c.created_at - make_interval(secs => $3)
       FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
      WHERE p.id = c.partition_id AND q.name = $1 AND c.consumer_group = $2`,
    [queue, group, seconds],
  );
}

async function partitions(queue: string): Promise<string[]> {
  const { rows } = await api.pool.query(
    `SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 ORDER BY p.name`, [queue]);
  return rows.map((r) => r.id);
}

async function groups(queue: string): Promise<string[]> {
  const { rows } = await api.pool.query(
    `SELECT c.consumer_group FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
       JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 ORDER BY 1`, [queue]);
  return rows.map((r) => r.consumer_group);
}

async function sweepAll(): Promise<void> {
  await suite.sweeper.cycles(2);
}

const items = (queue: string, ids: string[]) => ids.map((transactionId) => ({ queue, transactionId, payload: { id: transactionId } }));

async function consumeAll(queue: string, group: string): Promise<string[]> {
  const got = await pop(api.url, queue, { consumerGroup: group, batch: 10 });
  for (const m of got) expect((await ack(api.url, m)).status).toBe(200);
  return got.map((m) => m.transactionId);
}

test('a partition emptied by retention goes with its caught-up groups; a push makes it anew and a group reads it from its start', async () => {
  await push(api.url, items('empty', ['e1', 'e2']));
  expect(await consumeAll('empty', 'g')).toEqual(['e1', 'e2']);
  const [before] = await partitions('empty');
  const metric = async (name: string) => (await suite.sweeper.metrics.register.getSingleMetric(name)!.get()).values[0]?.value ?? 0;
  const counted = async () => [await metric('queen_log_retention_removed_group_rows_total'), await metric('queen_log_retention_removed_partitions_total')];
  const [groupsBefore, partitionsBefore] = await counted();
  const totals = async () => (await api.pool.query('SELECT queen.log_totals_v1() AS t')).rows[0].t;
  const totalsBefore = await totals();
  await age('empty', 7200);
  await sweepAll();
  expect(await partitions('empty')).toEqual([]);
  expect(await groups('empty')).toEqual([]);
  // Counted by the sweeper (this file's other queues may add to the counters, never take away).
  const [groupsAfter, partitionsAfter] = await counted();
  expect(groupsAfter - groupsBefore).toBeGreaterThanOrEqual(1);
  expect(partitionsAfter - partitionsBefore).toBeGreaterThanOrEqual(1);
  // The cell's counters (the console's throughput) keep what the removed rows had counted.
  const totalsAfter = await totals();
  expect(totalsAfter.pushed).toBeGreaterThanOrEqual(totalsBefore.pushed);
  expect(totalsAfter.completed).toBeGreaterThanOrEqual(totalsBefore.completed);

  const again = await push(api.url, items('empty', ['e3']));
  expect([again.status, again.body[0].status]).toEqual([201, 'queued']);
  const [after] = await partitions('empty');
  expect(after).toBeDefined();
  expect(after).not.toBe(before);
  expect(again.body[0].partition_id).toBe(after);
  // The old group reads the new partition from its beginning, as any new partition.
  expect(await consumeAll('empty', 'g')).toEqual(['e3']);
});

test('a group row stays while it owes something: a live lease, a retry delay, messages it finished that are retained', async () => {
  // A live lease on a message past its retention: the message, the row and the partition stay.
  await configure(api.url, 'owe-lease', { retentionSeconds: 60, leaseTime: 300 });
  await push(api.url, items('owe-lease', ['l1']));
  const [l1] = await pop(api.url, 'owe-lease', { consumerGroup: 'g' });
  await age('owe-lease', 120);
  await idle('owe-lease', 'g', 7200);
  await sweepAll();
  expect(await groups('owe-lease')).toEqual(['g']);
  expect((await partitions('owe-lease')).length).toBe(1);
  // Its ack ends the lease; the next passes take the message, the row and the partition.
  expect((await ack(api.url, l1)).body).toMatchObject({ ok: true });
  await sweepAll();
  expect(await groups('owe-lease')).toEqual([]);
  expect(await partitions('owe-lease')).toEqual([]);

  // A failed ack's retry delay still running: the row stays (with it, the wait), though its message went.
  await configure(api.url, 'owe-retry', { retentionSeconds: 60, retryDelay: 600_000, retryLimit: 5 });
  await push(api.url, items('owe-retry', ['r1']));
  const [r1] = await pop(api.url, 'owe-retry', { consumerGroup: 'g' });
  expect((await ack(api.url, r1, 'failed')).body).toMatchObject({ ok: true });
  await age('owe-retry', 120);
  await sweepAll();
  expect(await groups('owe-retry')).toEqual(['g']);
  expect((await partitions('owe-retry')).length).toBe(1);
  // Once the delay is over, it goes.
  await api.pool.query(`UPDATE queen.consumer_retry_at SET retry_at = now() - interval '1 second'`);
  await sweepAll();
  expect(await groups('owe-retry')).toEqual([]);
  expect(await partitions('owe-retry')).toEqual([]);
});

test('in a partition still holding messages, a group row goes only when idle past the retention and behind every retained message', async () => {
  await configure(api.url, 'idle', { retentionSeconds: 60 });
  await push(api.url, items('idle', ['i1', 'i2']));
  expect(await consumeAll('idle', 'behind')).toEqual(['i1', 'i2']);
  await push(api.url, items('idle', ['i3']));
  // 'ahead' has finished i3, which is retained: its row holds that, however idle.
  expect(await consumeAll('idle', 'ahead')).toEqual(['i1', 'i2', 'i3']);
  await age('idle', 120, [1, 2]);

  // Both idle only just now: i1 and i2 go, both rows stay.
  await sweepAll();
  expect(await groups('idle')).toEqual(['ahead', 'behind']);

  await idle('idle', 'behind', 120);
  await idle('idle', 'ahead', 120);
  await sweepAll();
  expect(await groups('idle')).toEqual(['ahead']);
  expect((await partitions('idle')).length).toBe(1);
  // The removed group comes back and reads what it would have read: the first retained message on.
  expect(await consumeAll('idle', 'behind')).toEqual(['i3']);
  expect(await consumeAll('idle', 'ahead')).toEqual([]);
});

test('a queue that keeps its messages forever keeps its rows too', async () => {
  await configure(api.url, 'keep', { retentionEnabled: false });
  await push(api.url, items('keep', ['k1']));
  expect(await consumeAll('keep', 'g')).toEqual(['k1']);
  await age('keep', 10 * 86400);
  await idle('keep', 'g', 10 * 86400);
  await sweepAll();
  expect(await groups('keep')).toEqual(['g']);
  expect((await partitions('keep')).length).toBe(1);
});
