// The message log's gauges, read by the sweeper (sql/functions/log_gauges.sql): backlog summed over
// every consumer group, the worst single group, the oldest unfinished message's age and the dead
// letters, driven by real traffic through the API and read from the sweeper's /metrics.
import { createSweeperMetrics } from '../../shared/metrics';
import { startMetricsServer, MetricsServer } from '../../services/sweeper/metricsServer';
import { ack, configure, pop, push } from '../log/helpers';
import { call } from '../support/http';
import { metric } from '../support/metrics';
import { useApi } from '../support/api';
import { closeLeakedSweepers, startTestSweeper, TestSweeper } from '../support/sweeper';
import { waitFor } from '../support/wait';

let sweeper: TestSweeper;
let server: MetricsServer;
// Declared before useApi: jest runs after-hooks in the order they are declared, and the sweeper
// stops before its database goes.
afterAll(async () => {
  await server.close();
  await sweeper.close();
  expect(await closeLeakedSweepers()).toBe(0);
});
const api = useApi();
beforeAll(async () => {
  // Every cycle reads the log's gauges (a running sweeper reads them every 15 s).
  sweeper = startTestSweeper(api.databaseUrl, { logGaugesIntervalMs: 0 });
  server = await startMetricsServer(sweeper.metrics.register, 0);
});

const FAMILIES = [
  'queen_log_backlog_messages',
  'queen_log_backlog_max_group_messages',
  'queen_log_oldest_unconsumed_age_seconds',
  'queen_log_dead_letters',
] as const;

/** The four gauges as the sweeper's /metrics serves them after a reading that began after the caller's writes. */
async function gauges(): Promise<Record<(typeof FAMILIES)[number], number>> {
  await sweeper.sweeper.nextGauges();
  const out = {} as Record<(typeof FAMILIES)[number], number>;
  for (const name of FAMILIES) out[name] = await metric(server.port, name);
  return out;
}

test('backlog, worst group, oldest unfinished age and dead letters follow pushes, pops, acks and queue deletes', async () => {
  // An empty cell: every gauge is there and reads 0.
  expect(await gauges()).toEqual({
    queen_log_backlog_messages: 0,
    queen_log_backlog_max_group_messages: 0,
    queen_log_oldest_unconsumed_age_seconds: 0,
    queen_log_dead_letters: 0,
  });

  // Five on `orders`, two on `idle`; nobody has popped either: each counts once (queue mode).
  expect((await push(api.url, [1, 2, 3, 4, 5].map((n) => ({ queue: 'orders', payload: { n } })))).status).toBe(201);
  expect((await push(api.url, [1, 2].map((n) => ({ queue: 'idle', payload: { n } })))).status).toBe(201);
  let g = await gauges();
  expect(g.queen_log_backlog_messages).toBe(7);
  expect(g.queen_log_backlog_max_group_messages).toBe(5);
  expect(g.queen_log_oldest_unconsumed_age_seconds).toBeGreaterThanOrEqual(0);
  expect(g.queen_log_dead_letters).toBe(0);

  // Queue mode takes two from `orders`: one completed, one failed past retryLimit 0 (a dead letter).
  expect((await configure(api.url, 'orders', { retryLimit: 0 })).status).toBe(200);
  const [done, poisoned] = await pop(api.url, 'orders', { batch: 2 });
  expect((await ack(api.url, done)).status).toBe(200);
  expect((await ack(api.url, poisoned, 'failed')).body).toMatchObject({ ok: true, deadLetter: true });
  g = await gauges();
  expect([g.queen_log_backlog_messages, g.queen_log_backlog_max_group_messages, g.queen_log_dead_letters]).toEqual([3 + 2, 3, 1]);

  // A second group, `audit`, leases three of `orders` and acks only the third (finished ahead of its
  // cursor): it still owes four, leased ones included.
  const audit = await pop(api.url, 'orders', { batch: 3, consumerGroup: 'audit' });
  expect(audit).toHaveLength(3);
  expect((await ack(api.url, audit[2])).status).toBe(200);
  g = await gauges();
  expect([g.queen_log_backlog_messages, g.queen_log_backlog_max_group_messages]).toEqual([3 + 4 + 2, 4]);
  // The runbook's query names them (queen.log_backlog_v2, the same reading by queue and group).
  const named = await api.pool.query(`SELECT queue, consumer_group, backlog::int FROM queen.log_backlog_v2() ORDER BY queue, consumer_group`);
  expect(named.rows.map((r) => [r.queue, r.consumer_group, r.backlog])).toEqual([
    ['idle', '__QUEUE_MODE__', 2], ['orders', '__QUEUE_MODE__', 3], ['orders', 'audit', 4],
  ]);

  // The oldest unfinished message is the first of `idle`: made two hours old, the gauge says so.
  await api.pool.query(
    `UPDATE queen.messages m SET created_at = now() - interval '2 hours'
       FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
      WHERE p.id = m.partition_id AND q.name = 'idle' AND m.seq = 1`,
  );
  g = await gauges();
  expect(g.queen_log_oldest_unconsumed_age_seconds).toBeGreaterThanOrEqual(7200);

  // Deleting the queues takes their messages, cursors and dead letters with them.
  for (const queue of ['orders', 'idle']) expect((await call(api.url, 'DELETE', `/api/v1/resources/queues/${queue}`)).status).toBe(200);
  expect(await gauges()).toEqual({
    queen_log_backlog_messages: 0,
    queen_log_backlog_max_group_messages: 0,
    queen_log_oldest_unconsumed_age_seconds: 0,
    queen_log_dead_letters: 0,
  });
});

test('before a sweeper has read them, the families are declared but carry no sample (never a 0 it did not measure)', async () => {
  const text = await createSweeperMetrics().register.metrics();
  for (const name of FAMILIES) {
    expect(text).toContain(`# TYPE ${name} gauge`);
    expect(text).not.toMatch(new RegExp(`^${name} `, 'm'));
  }
});

test('a reading that fails leaves the cycle whole: timers still fire, the last figures stay', async () => {
  const before = await gauges();
  // This test's own database: the reading now fails as a statement on a sick database would.
  await api.pool.query(`CREATE OR REPLACE FUNCTION queen.log_gauges_v2() RETURNS JSONB LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'gauges unavailable'; END $$`);
  const faults: unknown[] = [];
  sweeper.sweeper.on('fault', (err) => faults.push(err));
  await api.pool.query(`SELECT queen.timers_apply_v1('00000000-0000-0000-0000-000000000001'::uuid, $1::jsonb)`, [
    JSON.stringify([{ op: 'schedule', queue: 'after-fault', payload: 1, delaySeconds: 0 }]),
  ]);
  await sweeper.cycles(1);
  const fired = await api.pool.query(
    `SELECT count(*)::int AS n FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
       JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'after-fault'`,
  );
  expect(fired.rows[0].n).toBe(1);
  expect(faults).toEqual([]);
  expect(await gauges()).toEqual(before);
});

test('a slow reading holds up no timer: firing goes on while the log gauges are still being read', async () => {
  // The reading blocks on a lock this test holds, as a pass over 40,000 partitions takes seconds.
  const original = (await api.pool.query(`SELECT pg_get_functiondef('queen.log_gauges_v2'::regproc) AS def`)).rows[0].def as string;
  const holder = await api.pool.connect();
  try {
    await holder.query('SELECT pg_advisory_lock(4242)');
    await api.pool.query(`CREATE OR REPLACE FUNCTION queen.log_gauges_v2() RETURNS JSONB LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_advisory_lock_shared(4242); PERFORM pg_advisory_unlock_shared(4242);
      RETURN jsonb_build_object('backlog', 0, 'maxGroupBacklog', 0, 'oldestUnconsumedSeconds', 0, 'deadLetters', 0); END $$`);
    const reading = sweeper.sweeper.nextGauges();
    await waitFor(async () => (await api.pool.query(`SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted`)).rowCount === 1, {
      what: 'the gauge reading waiting on the lock',
    });
    await api.pool.query(`SELECT queen.timers_apply_v1('00000000-0000-0000-0000-000000000001'::uuid, $1::jsonb)`, [
      JSON.stringify([{ op: 'schedule', queue: 'beside-a-slow-reading', payload: 1, delaySeconds: 0 }]),
    ]);
    // Before, the cycle awaited the reading and nothing fired until the lock was let go.
    await waitFor(async () => {
      const { rows } = await api.pool.query(
        `SELECT count(*)::int AS n FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
           JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'beside-a-slow-reading'`,
      );
      return rows[0].n === 1;
    }, { what: 'the timer fired while the reading is held' });
    await holder.query('SELECT pg_advisory_unlock(4242)');
    await reading;
  } finally {
    await holder.query('SELECT pg_advisory_unlock_all()');
    holder.release();
    await api.pool.query(original);
  }
});
