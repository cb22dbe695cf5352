// What meets a partition while retention removes it (sql/functions/retention.sql, queen.log_retain_v1):
// one connection holds a retention pass open, having removed an emptied partition but not yet
// committed; a push, a pop, a timer's fire and an operator's skip arrive meanwhile on others. Each
// must wait for the pass and then do its work on what is left: nothing lost, no 5xx. No sweeper
// runs here, so the pass under test is the only one.
import { Client } from 'pg';
import { ack, pop, push } from './helpers';
import { useApi } from '../support/api';
import { call } from '../support/http';
import { scheduleDirect } from '../support/sweeper';

const TENANT = '00000000-0000-0000-0000-000000000001';
const api = useApi({ QUEEN_ADMIN_TOKEN: 'race-admin-token-0123456789abcdef' });

async function partitionOf(queue: string): Promise<{ id: string; shard: number } | undefined> {
  const { rows } = await api.pool.query(
    `SELECT p.id, get_byte(uuid_send(p.id), 0) >> 2 AS shard FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.name = $1`, [queue]);
  return rows[0];
}

/** A queue whose one partition is consumed to its end by group g and aged past retention: the next pass removes it. */
async function emptied(queue: string): Promise<{ id: string; shard: number }> {
  await push(api.url, [{ queue, transactionId: `${queue}-1`, payload: 1 }]);
  for (const m of await pop(api.url, queue, { consumerGroup: 'g' })) expect((await ack(api.url, m)).status).toBe(200);
  await api.pool.query(
    `UPDATE queen.messages m SET created_at = now() - interval '2 hours' FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
      WHERE p.id = m.partition_id AND q.name = $1`, [queue]);
  return (await partitionOf(queue))!;
}

/** Opens a retention pass on the partition's shard and leaves it uncommitted; commit() ends it. */
async function openPass(shard: number): Promise<{ result: any; commit: () => Promise<void> }> {
  const c = new Client({ connectionString: api.databaseUrl });
  await c.connect();
  await c.query('BEGIN');
  const { rows } = await c.query('SELECT queen.log_retain_v1($1::smallint, 1000, 3600) AS r', [shard]);
  return { result: rows[0].r, commit: async () => { await c.query('COMMIT'); await c.end(); } };
}

/** Whether a backend is waiting on a lock right now (the call under test is queued behind the pass). */
async function someoneWaits(): Promise<boolean> {
  for (let i = 0; i < 250; i++) {
    const { rows } = await api.pool.query(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`);
    if (rows[0].n > 0) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

test('a push that meets the removal waits for it and lands in the partition made anew', async () => {
  const old = await emptied('race-push');
  const pass = await openPass(old.shard);
  expect(pass.result.partitions).toBeGreaterThanOrEqual(1);
  const pushed = push(api.url, [{ queue: 'race-push', transactionId: 'after', payload: 2 }]);
  const waits = await someoneWaits();
  await pass.commit();
  expect(waits).toBe(true);
  const res = await pushed;
  expect([res.status, res.body[0].status]).toEqual([201, 'queued']);
  const now = await partitionOf('race-push');
  expect(now?.id).toBe(res.body[0].partition_id);
  expect(now?.id).not.toBe(old.id);
  expect((await pop(api.url, 'race-push', { consumerGroup: 'g' })).map((m) => m.transactionId)).toEqual(['after']);
});

test('a pop making a new group row meets the removal, waits, and answers 204', async () => {
  const old = await emptied('race-pop');
  const pass = await openPass(old.shard);
  const popped = call(api.url, 'GET', '/api/v1/pop/queue/race-pop?consumerGroup=fresh');
  const waits = await someoneWaits();
  await pass.commit();
  expect(waits).toBe(true);
  expect((await popped).status).toBe(204);
  expect(await partitionOf('race-pop')).toBeUndefined();
});

test('a timer firing into the partition being removed waits and fires into the partition made anew', async () => {
  const old = await emptied('race-timer');
  const [timerId] = await scheduleDirect(api.pool, TENANT, 1, () => ({ queue: 'race-timer', payload: 't', delaySeconds: 0 }));
  const pass = await openPass(old.shard);
  const fire = new Client({ connectionString: api.databaseUrl });
  await fire.connect();
  try {
    const fired = fire.query('SELECT queen.timers_fire_v3(10, 0) AS r');
    const waits = await someoneWaits();
    await pass.commit();
    expect(waits).toBe(true);
    expect((await fired).rows[0].r.fired).toBe(1);
  } finally {
    await fire.end();
  }
  const now = await partitionOf('race-timer');
  expect(now?.id).not.toBe(old.id);
  expect((await pop(api.url, 'race-timer', { consumerGroup: 'g' })).map((m) => m.transactionId)).toEqual([`timer:${timerId}`]);
});

test("an operator's skip to now meets the removal, waits, and skips what is left", async () => {
  const old = await emptied('race-skip');
  const pass = await openPass(old.shard);
  const skipped = call(api.url, 'POST', '/api/v1/system/queues/race-skip/consumer-groups/late/skip', {},
    { authorization: 'Bearer race-admin-token-0123456789abcdef' });
  const waits = await someoneWaits();
  await pass.commit();
  expect(waits).toBe(true);
  const res = await skipped;
  expect(res.status).toBe(200);
  // No partition is left to move (its `skipped` was counted before the wait, from what was stored then).
  expect(res.body).toMatchObject({ partitions: 0 });
});
