// The message log's retention (sql/functions/retention.sql, docs/log-and-transactions.md "Retention"):
// each queue option, the cell default, what retention does to consumers, timers and the once-marker
// bundle. Age is made, not waited for: a test moves its messages' created_at into the past, then
// awaits sweeper cycles (the sweeper's own signal), so no test depends on the clock running.
import { ack, configure, once, pop, push, transaction } from './helpers';
import { call } from '../support/http';
import { useRetentionSuite } from './retentionSuite';
import type { PassResult } from '../../services/sweeper/phases';
import { scheduleDirect, startTestSweeper } from '../support/sweeper';

const TENANT = '00000000-0000-0000-0000-000000000001';
const suite = useRetentionSuite();
const { api, age } = suite;

async function stored(queue: string): Promise<string[]> {
  const { rows } = await api.pool.query(
    `SELECT m.transaction_id FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
       JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 ORDER BY p.name, m.seq`,
    [queue],
  );
  return rows.map((r) => r.transaction_id);
}

/** Two complete cycles begun after the caller's writes: every shard is claimed and swept at least once. */
async function sweepAll(): Promise<number> {
  const reports = await suite.sweeper.cycles(2);
  return reports.reduce((n, r) => n + r.removed, 0);
}

const items = (queue: string, ids: string[], partition?: string) =>
  ids.map((transactionId) => ({ queue, transactionId, payload: { id: transactionId }, ...(partition ? { partition } : {}) }));

test('configure accepts the retention options, echoes them, refuses bad values, and keeps omitted ones', async () => {
  // What Queen's client test `configureQueue` sends among its options.
  const res = await configure(api.url, 'cfg', {
    retentionSeconds: 0, completedRetentionSeconds: 1, retentionEnabled: false, maxWaitTimeSeconds: 10, ttl: 36,
  });
  expect(res.status).toBe(200);
  expect(res.body.options).toMatchObject({
    retentionSeconds: 0, completedRetentionSeconds: 1, retentionEnabled: false, maxWaitTimeSeconds: 10, ttl: 36,
  });
  // Omitted options keep their value.
  const again = await configure(api.url, 'cfg', { leaseTime: 30 });
  expect(again.body.options).toMatchObject({ completedRetentionSeconds: 1, retentionEnabled: false, maxWaitTimeSeconds: 10, ttl: 36 });
  // A queue never configured with them: retention on (the cell default), nothing of its own.
  const plain = await configure(api.url, 'cfg-plain', {});
  expect(plain.body.options).toMatchObject({ retentionSeconds: 0, completedRetentionSeconds: 0, retentionEnabled: true, maxWaitTimeSeconds: 0, ttl: 0 });
  for (const [key, value] of [['retentionSeconds', -1], ['ttl', 1.5], ['maxWaitTimeSeconds', '10'], ['completedRetentionSeconds', 315360001], ['retentionEnabled', 'no']] as const) {
    const bad = await configure(api.url, 'cfg', { [key]: value });
    expect([bad.status, bad.body.error]).toEqual([400, 'log_invalid_options']);
    expect(bad.body.message).toContain(`options.${key}`);
  }
});

test('the cell default removes old messages of a queue without its own retention, consumed or not; younger ones stay', async () => {
  await push(api.url, items('dflt', ['d1', 'd2', 'd3']));
  await age('dflt', 7200, [1, 2]);
  await sweepAll();
  expect(await stored('dflt')).toEqual(['d3']);
  // The consumer was never there: its first pop starts at what is retained.
  const got = await pop(api.url, 'dflt', { batch: 10 });
  expect(got.map((m) => m.transactionId)).toEqual(['d3']);
});

test('retentionEnabled false keeps messages forever; ttl still removes them', async () => {
  await configure(api.url, 'forever', { retentionEnabled: false });
  await push(api.url, items('forever', ['f1']));
  await age('forever', 10 * 365 * 86400);
  await sweepAll();
  expect(await stored('forever')).toEqual(['f1']);

  await configure(api.url, 'forever', { ttl: 60 });
  await sweepAll();
  expect(await stored('forever')).toEqual([]);
});

test('retentionSeconds overrides the default, both ways', async () => {
  await configure(api.url, 'short', { retentionSeconds: 60 });
  await configure(api.url, 'long', { retentionSeconds: 86400 });
  await push(api.url, items('short', ['s1', 's2']));
  await push(api.url, items('long', ['l1']));
  await age('short', 120, [1]);
  await age('long', 7200);
  await sweepAll();
  expect(await stored('short')).toEqual(['s2']);
  expect(await stored('long')).toEqual(['l1']);
});

test('completedRetentionSeconds removes what every group finished, never an unconsumed message', async () => {
  await configure(api.url, 'done', { completedRetentionSeconds: 60 });
  await push(api.url, items('done', ['c1', 'c2', 'c3', 'c4']));
  // Group a finishes c1..c3, group b only c1..c2; c4 nobody has consumed.
  const a = await pop(api.url, 'done', { batch: 3, consumerGroup: 'a' });
  for (const m of a) expect((await ack(api.url, m)).status).toBe(200);
  const b = await pop(api.url, 'done', { batch: 2, consumerGroup: 'b' });
  for (const m of b) expect((await ack(api.url, m)).status).toBe(200);
  await age('done', 120);
  await sweepAll();
  // Older than 60 s, all four; finished by both groups, only c1 and c2.
  expect(await stored('done')).toEqual(['c3', 'c4']);
  const next = await pop(api.url, 'done', { batch: 10, consumerGroup: 'b' });
  expect(next.map((m) => m.transactionId)).toEqual(['c3', 'c4']);
});

test('maxWaitTimeSeconds removes messages left unconsumed, and the cursor moves past them', async () => {
  await configure(api.url, 'wait', { maxWaitTimeSeconds: 60 });
  await push(api.url, items('wait', ['w1', 'w2', 'w3']));
  // The group consumes w1 (finished, kept: only unfinished messages wait).
  const [w1] = await pop(api.url, 'wait', { consumerGroup: 'g' });
  expect((await ack(api.url, w1)).status).toBe(200);
  await age('wait', 120, [1, 2]);
  await sweepAll();
  // w2 waited unconsumed past 60 s: it goes, and w1, older, with it (removal is a partition's
  // oldest messages); w3 is young. The group resumes at w3.
  expect(await stored('wait')).toEqual(['w3']);
  const got = await pop(api.url, 'wait', { consumerGroup: 'g', batch: 10 });
  expect(got.map((m) => m.transactionId)).toEqual(['w3']);
});

test('a message in a live lease stays until the lease ends; its ack succeeds; then it goes', async () => {
  await configure(api.url, 'leased', { retentionSeconds: 60 });
  await push(api.url, items('leased', ['k1', 'k2', 'k3']));
  const [k1, k2] = await pop(api.url, 'leased', { batch: 2 });
  await age('leased', 120);
  await sweepAll();
  // Nothing before the lease's first message can go (k1 is it): all three stay.
  expect(await stored('leased')).toEqual(['k1', 'k2', 'k3']);
  expect((await ack(api.url, k1)).body).toMatchObject({ ok: true });
  expect((await ack(api.url, k2)).body).toMatchObject({ ok: true });
  await sweepAll();
  expect(await stored('leased')).toEqual([]);
  // The group's cursor moved past k3, which it never saw: nothing is left to pop, and nothing breaks.
  expect(await pop(api.url, 'leased')).toEqual([]);
  await push(api.url, items('leased', ['k4']));
  expect((await pop(api.url, 'leased')).map((m) => m.transactionId)).toEqual(['k4']);
});

test('a transactionId deduplicates only while its message is retained', async () => {
  await configure(api.url, 'dedup', { retentionSeconds: 60 });
  await push(api.url, items('dedup', ['x1']));
  const dup = await push(api.url, items('dedup', ['x1']));
  expect(dup.body[0].status).toBe('duplicate');
  await age('dedup', 120);
  await sweepAll();
  const again = await push(api.url, items('dedup', ['x1']));
  expect(again.body[0].status).toBe('queued');
});

test('dead letters and failure rows go with their message', async () => {
  await configure(api.url, 'dlq', { retryLimit: 0, retentionSeconds: 60 });
  await push(api.url, items('dlq', ['p1']));
  const [p1] = await pop(api.url, 'dlq');
  expect((await call(api.url, 'POST', '/api/v1/ack', { transactionId: p1.transactionId, partitionId: p1.partitionId, leaseId: p1.leaseId, status: 'failed', error: 'boom' })).body)
    .toMatchObject({ ok: true, deadLetter: true });
  await age('dlq', 120);
  await sweepAll();
  const { rows } = await api.pool.query(`SELECT (SELECT count(*) FROM queen.message_failures)::int AS f, (SELECT count(*) FROM queen.message_failure_texts)::int AS t`);
  expect(rows[0]).toEqual({ f: 0, t: 0 });
});

test('timers fire exactly once around a retention pass that removes their fired messages', async () => {
  await configure(api.url, 'tq', { retentionSeconds: 60 });
  const due = new Date(Date.now() - 1000).toISOString();
  const ids = await scheduleDirect(api.pool, TENANT, 5, (i) => ({ queue: 'tq', deliverAt: due, payload: { i } }));
  // A timer far ahead stays scheduled whatever retention removes.
  const [later] = await scheduleDirect(api.pool, TENANT, 1, () => ({ queue: 'tq', deliverAt: new Date(Date.now() + 3_600_000).toISOString(), payload: {} }));
  await suite.sweeper.cycles(1);
  expect((await stored('tq')).sort()).toEqual(ids.map((id) => `timer:${id}`).sort());
  await age('tq', 120);
  await sweepAll();
  expect(await stored('tq')).toEqual([]);
  // The fired timers are gone from the schedule: nothing fires again after their messages went.
  await sweepAll();
  expect(await stored('tq')).toEqual([]);
  const { rows } = await api.pool.query(`SELECT timer_id::text FROM queen.log_timers`);
  expect(rows.map((r) => r.timer_id)).toEqual([later]);
});

test('the once-marker bundle stays exactly-once after retention removed the message it consumed', async () => {
  await configure(api.url, 'bq', { retentionSeconds: 60 });
  await push(api.url, items('bq', ['b1']));
  const [m] = await pop(api.url, 'bq');
  const bundle = () => transaction(api.url, {
    operations: [{ type: 'ack', transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId, status: 'completed' }],
    kv: [once('done', `bq:${m.transactionId}`)],
  });
  expect((await bundle()).status).toBe(200);
  await age('bq', 120);
  await sweepAll();
  expect(await stored('bq')).toEqual([]);
  // The same bundle again (a retry after a lost answer): the marker refuses it, the message being
  // gone changes nothing.
  const retry = await bundle();
  expect(retry.body.ok).toBe(false);
  const marker = await call(api.url, 'POST', '/api/v1/kv', { operations: [{ op: 'get', ns: 'done', key: `bq:${m.transactionId}` }] });
  expect(marker.body.results[0]).toMatchObject({ found: true, value: true });
  // And a message pushed again with the removed transactionId is a new message the bundle never saw.
  await push(api.url, items('bq', ['b1']));
  const [fresh] = await pop(api.url, 'bq');
  expect(fresh.transactionId).toBe('b1');
  expect(fresh.id).not.toBe(m.id);
});

test('a group behind a partition whose head was removed is moved to its first retained message (delayedProcessing pops)', async () => {
  await configure(api.url, 'delayq', { retentionSeconds: 60, delayedProcessing: 1 });
  await push(api.url, items('delayq', ['y1', 'y2', 'y3']));
  await age('delayq', 120, [1, 2]);
  await age('delayq', 5, [3]);
  await sweepAll();
  expect(await stored('delayq')).toEqual(['y3']);
  // A group first seen now starts at cursor 0, before the removed head; the next pass moves it.
  expect(await pop(api.url, 'delayq', { consumerGroup: 'late' })).toEqual([]);
  await sweepAll();
  expect((await pop(api.url, 'delayq', { consumerGroup: 'late' })).map((m) => m.transactionId)).toEqual(['y3']);
});

test('the pass removes at most its batch per shard and reports a backlog, then finishes it', async () => {
  const small = startTestSweeper(api.databaseUrl, { retentionSeconds: 60, batch: 10 });
  try {
    await push(api.url, items('bulk', Array.from({ length: 35 }, (_, i) => `n${i}`)));
    await age('bulk', 120);
    // (Another sweeper may sweep the shard in one of these cycles: a cycle skips shards swept since
    // it began. Only this one's default reaches 'bulk'.)
    const passes: PassResult[] = [];
    small.sweeper.on('pass', (p: PassResult) => passes.push(p));
    for (let i = 0; i < 20 && (await stored('bulk')).length > 0; i++) await small.cycles(1);
    expect(await stored('bulk')).toEqual([]);
    const bulk = passes.map((p) => p.retainQueues.find((q) => q.queue === 'bulk')?.removed ?? 0).filter((n) => n > 0);
    expect(bulk.reduce((n, x) => n + x, 0)).toBe(35);
    expect(Math.max(...bulk)).toBeLessThanOrEqual(10);
    expect(passes.some((p) => p.retainFull)).toBe(true);
  } finally {
    await small.close();
  }
});

test('two sweepers share a removal backlog while pushes, pops and acks of young messages go on untouched', async () => {
  const a = startTestSweeper(api.databaseUrl, { retentionSeconds: 60, batch: 20, id: 'ret-a' });
  const b = startTestSweeper(api.databaseUrl, { retentionSeconds: 60, batch: 20, id: 'ret-b' });
  const faults: unknown[] = [];
  let removed = 0;
  for (const s of [a, b]) {
    s.sweeper.on('fault', (err) => faults.push(err));
    s.sweeper.on('pass', (p: PassResult) => (removed += p.retainQueues.filter((q) => q.queue === 'shared').reduce((n, q) => n + q.removed, 0)));
  }
  try {
    const partitions = Array.from({ length: 12 }, (_, i) => `p${i}`);
    for (const p of partitions) await push(api.url, items('shared', Array.from({ length: 50 }, (_, i) => `old-${p}-${i}`), p));
    await age('shared', 120);
    // Young traffic on the same partitions meanwhile: every push stored, every ack ok.
    const acked: string[] = [];
    for (let round = 0; round < 10; round++) {
      const p = partitions[round % partitions.length];
      const res = await push(api.url, items('shared', [`young-${round}`], p));
      expect(res.body[0].status).toBe('queued');
      // The group reads from the partition's first retained message: old ones too, leased, so
      // protected from removal until acked; every ack succeeds.
      for (const m of await pop(api.url, 'shared', { consumerGroup: 'fresh', partition: p, batch: 100 })) {
        const ack1 = await ack(api.url, m);
        expect(ack1.body).toMatchObject({ ok: true });
        acked.push(m.transactionId);
      }
    }
    for (let i = 0; i < 40 && (await stored('shared')).some((t) => t.startsWith('old-')); i++) await Promise.all([a.cycles(1), b.cycles(1)]);
    const left = await stored('shared');
    expect(left.filter((t) => t.startsWith('old-'))).toEqual([]);
    expect(left.filter((t) => t.startsWith('young-')).sort()).toEqual(Array.from({ length: 10 }, (_, i) => `young-${i}`).sort());
    expect(removed).toBe(600);
    expect(faults).toEqual([]);
    expect(acked.filter((t) => t.startsWith('young-')).length).toBeGreaterThan(0);
  } finally {
    await a.close();
    await b.close();
  }
});

test('the sweeper counts removals per queue and reads the oldest message and the log tables', async () => {
  const s = startTestSweeper(api.databaseUrl, { retentionSeconds: 60, logGaugesIntervalMs: 0 });
  try {
    await push(api.url, items('counted', ['m1', 'm2', 'm3']));
    await age('counted', 120, [1, 2]);
    await age('counted', 30, [3]);
    for (let i = 0; i < 5 && (await stored('counted')).length > 1; i++) await s.cycles(1);
    expect(await stored('counted')).toEqual(['m3']);
    const values = async (name: string) => (await s.metrics.register.getSingleMetric(name)!.get()).values;
    const removed = (await values('queen_log_retention_removed_messages_total')).filter((v) => v.labels.queue === 'counted');
    expect(removed.map((v) => [v.labels, v.value])).toEqual([[{ tenant: TENANT, queue: 'counted' }, 2]]);
    const bytes = (await values('queen_log_retention_removed_bytes_total')).find((v) => v.labels.queue === 'counted');
    expect(bytes?.value).toBeGreaterThan(0);
    // Nobody consumed them: both were unfinished.
    expect((await values('queen_log_retention_removed_unfinished_total'))[0].value).toBeGreaterThanOrEqual(2);
    expect((await values('queen_log_retention_default_seconds'))[0].value).toBe(60);
    await s.sweeper.nextGauges();
    const oldest = (await values('queen_log_oldest_message_age_seconds'))[0].value;
    expect(oldest).toBeGreaterThanOrEqual(30);
    const tables = await values('queen_log_table_bytes');
    expect(tables.map((v) => v.labels.table).sort()).toEqual(['message_failure_texts', 'message_failures', 'messages', 'partition_consumers', 'partitions']);
    expect(tables.every((v) => v.value > 0)).toBe(true);
  } finally {
    await s.close();
  }
});

test('a lease that expired protects nothing: its messages go, and the next pop settles the lease on what is left', async () => {
  await configure(api.url, 'lapsed', { retentionSeconds: 60, leaseTime: 1, retryLimit: 0 });
  await push(api.url, items('lapsed', ['e1', 'e2', 'e3']));
  const held = await pop(api.url, 'lapsed', { batch: 2 });
  expect(held.map((m) => m.transactionId)).toEqual(['e1', 'e2']);
  // The lease ends (its expiry moved into the past: no waiting), then e1 and e2 age past retention.
  await api.pool.query(`UPDATE queen.partition_consumers SET lease_expires_at = now() - interval '1 second' WHERE lease_id IS NOT NULL`);
  await age('lapsed', 120, [1, 2]);
  await sweepAll();
  expect(await stored('lapsed')).toEqual(['e3']);
  // The late ack of a removed message: not_found, nothing else changes.
  expect((await ack(api.url, held[0])).body).toMatchObject({ ok: false, ackReason: 'not_found' });
  // The next pop: e3, and the lapsed lease counted no failure for messages no longer stored.
  expect((await pop(api.url, 'lapsed')).map((m) => m.transactionId)).toEqual(['e3']);
  const { rows } = await api.pool.query(`SELECT count(*)::int AS n FROM queen.message_failures`);
  expect(rows[0].n).toBe(0);
});

test('the backlog gauge counts from the first retained message: removed messages of a queue nobody popped are owed by nobody', async () => {
  await configure(api.url, 'unread', { retentionSeconds: 60 });
  await push(api.url, items('unread', ['u1', 'u2', 'u3']));
  await age('unread', 120, [1, 2]);
  await sweepAll();
  expect(await stored('unread')).toEqual(['u3']);
  const { rows } = await api.pool.query(`SELECT consumer_group, backlog::int FROM queen.log_backlog_v2() WHERE queue = 'unread'`);
  expect(rows).toEqual([{ consumer_group: '__QUEUE_MODE__', backlog: 1 }]);
});
