// Order at scale: a backlog spread over every shard, built while the timersFire switch is off, drains
// oldest first across the whole cell when it comes back on. One sweeper: exact (deliverAt, timerId)
// order. Several: the bound docs/timers.md states, that a timer fires only when every older one has
// fired or is in a batch another sweeper claimed earlier, so at most (sweepers - 1) x batch older
// timers are still pending when any timer's message reaches the log. And the batch itself is
// set-based: one pass moves many timers, for several tenants and partitions, with the duplicate check.
import { Client } from 'pg';
import { DEFAULT_TENANT } from '../../shared/config';
import { useDatabase } from '../support/database';
import { scheduleDirect, startTestSweeper, timerMessageCounts } from '../support/sweeper';
import { waitFor } from '../support/wait';

const OTHER_TENANT = '7d1f3c2e-5b6a-4c8d-9e0f-112233445566';
const db = useDatabase({
  connections: 4,
  reset: ["DELETE FROM queen.system_state WHERE key = 'timers_fire_enabled'", 'DELETE FROM queen.log_timers'],
  sweepers: true,
});

async function pending(): Promise<number> {
  return (await db.pool.query('SELECT count(*)::int AS n FROM queen.log_timers')).rows[0].n;
}

async function pauseFire(): Promise<void> {
  await db.pool.query(`INSERT INTO queen.system_state (key, value) VALUES ('timers_fire_enabled', 'false')
                    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`);
}

async function resumeFire(): Promise<void> {
  await db.pool.query(`UPDATE queen.system_state SET value = 'true' WHERE key = 'timers_fire_enabled'`);
  await db.pool.query(`NOTIFY queen_system_state, 'timers_fire_enabled'`);
}

/**
 * `n` timers into one queue and partition (so the partition's seq is the order the log received
 * them in), deliverAt an hour or more ago plus rank seconds, scheduled in scrambled rank order; checks
 * that they cover all 64 shards. Answers the ids.
 */
async function backlog(queue: string, n: number): Promise<string[]> {
  const base = Date.now() - 3600_000 - n * 1000;
  const rank = (i: number) => (i * 7919) % n; // 7919 is prime and n is not a multiple of it
  const ids = await scheduleDirect(db.pool, DEFAULT_TENANT, n, (i) => ({
    queue,
    payload: { rank: rank(i) },
    deliverAt: new Date(base + rank(i) * 1000).toISOString(),
  }));
  const { rows } = await db.pool.query(`SELECT count(DISTINCT shard)::int AS n FROM queen.log_timers WHERE queue = $1`, [queue]);
  expect(rows[0].n).toBe(64);
  return ids;
}

/** The ranks in the order the log received them (seq order of the one partition). */
async function ranksInLogOrder(queue: string): Promise<number[]> {
  const { rows } = await db.pool.query(
    `SELECT (m.payload->>'rank')::int AS rank FROM queen.messages m
       JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.name = $1 AND q.tenant_id = $2 ORDER BY m.seq`,
    [queue, DEFAULT_TENANT],
  );
  return rows.map((r) => r.rank);
}

/** For each message, how many older timers (smaller rank) reached the log after it; the largest. */
function worstOvertaking(ranks: number[]): number {
  let worst = 0;
  for (let j = 0; j < ranks.length; j++) {
    let older = 0;
    for (let k = j + 1; k < ranks.length; k++) if (ranks[k] < ranks[j]) older++;
    worst = Math.max(worst, older);
  }
  return worst;
}

test('one sweeper, default shards per pass: a paused backlog over every shard drains in exact deliverAt order', async () => {
  await pauseFire();
  const n = 640;
  const ids = await backlog('oldest-one', n);
  // Batches of 10 (64 fire passes), 8 shards per pass (the default): before, each pass fired the
  // due timers of its 8 claimed shards, so the log received the backlog one shard group at a time.
  const s = startTestSweeper(db.url, { intervalMs: 20, batch: 10 });
  const paused = await s.cycles(2);
  expect(paused.every((r) => r.fired === 0 && r.fireEnabled === false)).toBe(true);
  expect(await pending()).toBe(n);
  await resumeFire();
  await waitFor(async () => (await pending()) === 0, { what: 'every timer fired (none pending)', timeoutMs: 60_000 });
  expect(await ranksInLogOrder('oldest-one')).toEqual(Array.from({ length: n }, (_, i) => i));
  const counts = await timerMessageCounts(db.pool);
  expect(ids.filter((id) => counts.get(id) !== 1)).toEqual([]);
  await s.close();
});

test('three sweepers: no timer reaches the log while more than (3 - 1) x batch older timers are pending', async () => {
  await pauseFire();
  const n = 1200;
  const batch = 20;
  const ids = await backlog('oldest-three', n);
  const sweepers = [1, 2, 3].map((k) => startTestSweeper(db.url, { intervalMs: 20, batch, id: `order-${k}` }));
  await Promise.all(sweepers.map((s) => s.cycles(1)));
  expect(await pending()).toBe(n);
  await resumeFire();
  await waitFor(async () => (await pending()) === 0, { what: 'every timer fired (none pending)', timeoutMs: 60_000 });
  const ranks = await ranksInLogOrder('oldest-three');
  expect(ranks.length).toBe(n);
  expect(worstOvertaking(ranks)).toBeLessThanOrEqual((sweepers.length - 1) * batch);
  const counts = await timerMessageCounts(db.pool);
  expect(ids.filter((id) => counts.get(id) !== 1)).toEqual([]);
  // All three fired (the claim is SKIP LOCKED: disjoint batches, none waiting for another's rows).
  const fired = await Promise.all(sweepers.map(async (s) => (await s.metrics.timersFired.get()).values[0]?.value ?? 0));
  expect(fired.reduce((a, b) => a + b, 0)).toBe(n);
  await Promise.all(sweepers.map((s) => s.close()));
});

test('one pass moves a batch for two tenants and many partitions: once each, seq in deliverAt order, one NOTIFY per queue, a fired id not stored twice', async () => {
  const base = Date.now() - 60_000;
  const make = (tenant: string) =>
    scheduleDirect(db.pool, tenant, 60, (i) => ({
      queue: `set-${i % 3}`,
      partition: `p${i % 4}`,
      payload: { i, tenant },
      deliverAt: new Date(base + ((i * 13) % 60) * 100).toISOString(),
    }));
  const mine = await make(DEFAULT_TENANT);
  const theirs = await make(OTHER_TENANT);
  // One timer's message is already in its partition (a fire that committed, its delete lost): the
  // batch's duplicate check must store nothing for it.
  const { rows: dupRow } = await db.pool.query(`SELECT queue, partition, payload FROM queen.log_timers WHERE timer_id = $1`, [mine[5]]);
  await db.pool.query(`SELECT queen.log_push_v1($1::uuid, $2, $3, $4::jsonb, $5)`, [
    DEFAULT_TENANT, dupRow[0].queue, dupRow[0].partition, JSON.stringify(dupRow[0].payload), `timer:${mine[5]}`,
  ]);
  const listener = new Client({ connectionString: db.url });
  await listener.connect();
  const heard: string[] = [];
  listener.on('notification', (m) => heard.push(String(m.payload)));
  await listener.query('LISTEN queen_log');
  const c = await db.pool.connect();
  try {
    await c.query('BEGIN');
    const { rows } = await c.query(`SELECT queen.timers_fire_v1(1000) AS r`);
    await c.query('COMMIT');
    expect(rows[0].r).toMatchObject({ fired: 120, duplicates: 1 });
  } finally {
    c.release();
  }
  await waitFor(async () => heard.length >= 6, { what: 'six notifications heard', timeoutMs: 10_000, everyMs: 20 });
  await new Promise((r) => setTimeout(r, 200)); // a seventh (a duplicate) would be here by now; what must not come has no signal
  expect(heard.sort()).toEqual(
    [DEFAULT_TENANT, OTHER_TENANT].flatMap((t) => [0, 1, 2].map((q) => `${t}/set-${q}`)).sort(),
  );
  await listener.end();
  expect(await pending()).toBe(0);
  const counts = await timerMessageCounts(db.pool);
  expect([...mine, ...theirs].filter((id) => counts.get(id) !== 1)).toEqual([]);
  // Each timer is in its own tenant's queue; per partition, seq is 1..n without a gap, in deliverAt order.
  const { rows } = await db.pool.query(
    `SELECT q.tenant_id, q.name AS queue, p.name AS partition, p.last_seq, m.seq, m.payload, m.transaction_id
       FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.name LIKE 'set-%' ORDER BY q.tenant_id, q.name, p.name, m.seq`,
  );
  expect(rows.length).toBe(120);
  const groups = new Map<string, typeof rows>();
  for (const r of rows) {
    expect(r.payload.tenant).toBe(r.tenant_id);
    const key = `${r.tenant_id}/${r.queue}/${r.partition}`;
    groups.set(key, [...(groups.get(key) ?? []), r]);
  }
  expect(groups.size).toBe(24);
  for (const list of groups.values()) {
    expect(list.map((r) => Number(r.seq))).toEqual(list.map((_, i) => i + 1));
    expect(Number(list[0].last_seq)).toBe(list.length);
    const due = list.map((r) => (r.payload.i * 13) % 60);
    // The pre-pushed duplicate went in first (seq 1), outside the batch's order.
    const batchDue = list[0].transaction_id === `timer:${mine[5]}` ? due.slice(1) : due;
    expect(batchDue).toEqual([...batchDue].sort((a, b) => a - b));
  }
});
