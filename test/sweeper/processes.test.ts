// Sweepers as real processes (node dist/services/sweeper/main.js): three at once over 20,000 due
// timers, one SIGKILLed mid-batch, several SIGKILLed again and again over a set-based drain of
// 20,000, SIGTERM, and the metrics endpoint from the first second.
import type { Pool } from 'pg';
import { DEFAULT_TENANT } from '../../shared/config';
import { createTestDatabase, testPool } from '../support/database';
import { scrape } from '../support/metrics';
import { spawnSweeper, SweeperProcess } from '../support/processes';
import { scheduleDirect, timerMessageCounts } from '../support/sweeper';
import { waitFor } from '../support/wait';

let db: { url: string; drop(): Promise<void> };
let pool: Pool;
const started: SweeperProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  pool = testPool(db.url, 4);
});
afterEach(async () => {
  // Every process a test started is ended here, by its PID, whatever the test's outcome.
  await Promise.all(
    started.splice(0).map(async (p) => {
      if (p.child.exitCode === null && p.child.signalCode === null) {
        p.child.kill('SIGKILL');
        await p.exited;
      }
    }),
  );
  await pool.query('DELETE FROM queen.log_timers');
});
afterAll(async () => {
  await pool.end();
  await db.drop();
});

async function spawn(env: Record<string, string> = {}): Promise<SweeperProcess> {
  const p = await spawnSweeper(db.url, env);
  started.push(p);
  return p;
}

async function pending(): Promise<number> {
  return (await pool.query('SELECT count(*)::int AS n FROM queen.log_timers')).rows[0].n;
}

/** `count` timers due now in `queue`, dealt round-robin over `partitions` partitions, each payload its index. */
function dueNow(queue: string, count: number, partitions: number): Promise<string[]> {
  return scheduleDirect(pool, DEFAULT_TENANT, count, (i) => ({ queue, partition: `p${i % partitions}`, payload: { i }, delaySeconds: 0 }));
}

function expectExactlyOnce(ids: string[], counts: Map<string, number>): void {
  const missing = ids.filter((id) => counts.get(id) === undefined).length;
  const doubled = ids.filter((id) => (counts.get(id) ?? 0) > 1).length;
  expect({ missing, doubled }).toEqual({ missing: 0, doubled: 0 });
}

test('the metrics families answer from the first second, before any work', async () => {
  const p = await spawn();
  const text = await scrape(p.metricsPort);
  for (const name of [
    'queen_kv_expired_not_pruned',
    'queen_kv_expiry_lag_seconds',
    'queen_kv_pruned_total',
    'queen_timers_due',
    'queen_timers_oldest_late_seconds',
    'queen_timers_fired_total',
    'queen_sweeper_cycles_total',
    'queen_sweeper_batch_size',
    'queen_sweeper_phase_suspended',
    'queen_sweeper_cycle_seconds',
    'queen_log_backlog_messages',
    'queen_log_backlog_max_group_messages',
    'queen_log_oldest_unconsumed_age_seconds',
    'queen_log_dead_letters',
  ]) {
    expect(text).toContain(`# TYPE ${name} `);
  }
  expect(text).toMatch(/queen_sweeper_phase_suspended\{phase="prune"\} 0/);
  expect(p.lines.some((l) => l.msg === 'config: sweeper' && l.intervalMs === 50)).toBe(true);
  p.child.kill('SIGTERM');
  expect(await p.exited).toEqual({ code: 0, signal: null });
});

test('three sweeper processes over 20,000 due timers: each delivered exactly once', async () => {
  const ids = await dueNow('three', 20_000, 16);
  // Booted at once: the schema apply is serialized by its advisory lock, so the later ones apply it
  // beside a sweeper that is already firing. That is the path that deadlocked before 030 created its
  // indexes only when missing.
  const procs = await Promise.all([spawn({ QUEEN_SWEEPER_BATCH: '200' }), spawn({ QUEEN_SWEEPER_BATCH: '200' }), spawn({ QUEEN_SWEEPER_BATCH: '200' })]);
  await waitFor(async () => (await pending()) === 0, { what: 'every timer fired (none pending)', timeoutMs: 120_000, everyMs: 200 });
  expectExactlyOnce(ids, await timerMessageCounts(pool));
  // The fence (transactionId) would hide a second fire in the log; the counters cannot hide one.
  await waitFor(async () => (await Promise.all(procs.map((p) => p.metric('queen_timers_fired_total')))).reduce((a, b) => a + b, 0) === 20_000, { what: 'queen_timers_fired_total summing to 20,000 over the sweepers', timeoutMs: 10_000 });
  // Leaderless: all three take shards. swept_by is the last sweeper of each shard, and on a quiet
  // machine the first one up can drain everything before the others boot, so this is awaited over
  // the idle cycles that follow rather than read once.
  const sweepers = async () =>
    (await pool.query(`SELECT count(DISTINCT swept_by)::int AS n FROM queen.sweeper_shards WHERE swept_by = ANY ($1)`, [procs.map((p) => p.id)])).rows[0].n;
  await waitFor(async () => (await sweepers()) === 3, { what: 'all three sweepers in swept_by', timeoutMs: 20_000, everyMs: 100 });
  for (const p of procs) p.child.kill('SIGTERM');
  for (const p of procs) expect(await p.exited).toEqual({ code: 0, signal: null });
});

test('a sweeper SIGKILLed mid-batch: nothing lost, nothing doubled, its shards taken over within a cycle', async () => {
  const ids = await dueNow('killed', 8000, 4);
  const victim = await spawn({ QUEEN_SWEEPER_BATCH: '100' });
  // Mid-batch: it has committed some passes and is inside others.
  await waitFor(async () => (await pending()) < 7000, { what: 'the first 3,000 timers fired', timeoutMs: 60_000, everyMs: 10 });
  victim.child.kill('SIGKILL');
  expect((await victim.exited).signal).toBe('SIGKILL');
  const left = await pending();
  expect(left).toBeGreaterThan(0);

  const heir = await spawn({ QUEEN_SWEEPER_BATCH: '100', QUEEN_SWEEPER_INTERVAL_MS: '1000' });
  // Within one cycle the heir has claimed every shard, the victim's included (its claims died with
  // its connection). One cycle here is the heir's first 64 shards; its sleep is a second long.
  await waitFor(async () => {
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM queen.sweeper_shards WHERE swept_by = $1`, [heir.id]);
    return rows[0].n === 64;
  }, { what: 'the heir holding all 64 shards', timeoutMs: 5_000, everyMs: 20 });
  await waitFor(async () => (await pending()) === 0, { what: 'every timer fired (none pending)', timeoutMs: 60_000, everyMs: 100 });
  expectExactlyOnce(ids, await timerMessageCounts(pool));
  heir.child.kill('SIGTERM');
  expect(await heir.exited).toEqual({ code: 0, signal: null });
});

test('SIGTERM during a backlog finishes the pass in flight, commits, and exits 0; nothing is lost', async () => {
  const ids = await scheduleDirect(pool, DEFAULT_TENANT, 5000, (i) => ({ queue: 'term', payload: { i }, delaySeconds: 0 }));
  const p = await spawn({ QUEEN_SWEEPER_BATCH: '50' });
  await waitFor(async () => (await pending()) < 4900, { what: 'the first 100 timers fired', timeoutMs: 60_000, everyMs: 10 });
  p.child.kill('SIGTERM');
  expect(await p.exited).toEqual({ code: 0, signal: null });
  const firedByFirst = ids.length - (await pending());
  expect(firedByFirst).toBeGreaterThan(0);
  expect((await timerMessageCounts(pool)).size).toBeGreaterThanOrEqual(firedByFirst);
  const next = await spawn();
  await waitFor(async () => (await pending()) === 0, { what: 'every timer fired (none pending)', timeoutMs: 60_000, everyMs: 100 });
  expectExactlyOnce(ids, await timerMessageCounts(pool));
  next.child.kill('SIGTERM');
  expect(await next.exited).toEqual({ code: 0, signal: null });
});

test('sweeper processes SIGKILLed again and again while 20,000 timers drain set-based: each message exactly once, none before its deliverAt', async () => {
  const n = 20_000;
  // Due over five seconds from a little after the scheduling ends, so some fall due while the
  // sweepers are already firing and "none early" is a real floor, not a backlog of the past.
  const base = Date.now() + 4000;
  const ids = await scheduleDirect(pool, DEFAULT_TENANT, n, (i) => {
    const due = new Date(base + (i % 80) * 100).toISOString();
    return { queue: 'massacre', partition: `p${i % 8}`, payload: { i, due }, deliverAt: due };
  });
  const env = { QUEEN_SWEEPER_BATCH: '500', QUEEN_SWEEPER_INTERVAL_MS: '50' };
  const live = await Promise.all([spawn(env), spawn(env), spawn(env)]);
  const booting: Promise<unknown>[] = [];
  let kills = 0;
  let killedWhilePending = 0;
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (Date.now() > deadline) throw new Error(`${await pending()} timers left after 90 s`);
    await new Promise((r) => setTimeout(r, 100 + Math.floor(Math.random() * 200))); // a random moment to kill at is the test
    const left = await pending();
    if (left === 0) break;
    // One of the live sweepers, at a random moment: inside a batch or between two. Its replacement
    // boots meanwhile; at least one sweeper always runs.
    if (live.length < 2) continue;
    const victim = live.splice(Math.floor(Math.random() * live.length), 1)[0];
    victim.child.kill('SIGKILL');
    expect((await victim.exited).signal).toBe('SIGKILL');
    kills++;
    if (left < n) killedWhilePending++;
    booting.push(spawn(env).then((p) => live.push(p)));
  }
  await Promise.all(booting);
  expect(kills).toBeGreaterThanOrEqual(3);
  expect(killedWhilePending).toBeGreaterThanOrEqual(2);
  expectExactlyOnce(ids, await timerMessageCounts(pool));
  const early = await pool.query(
    `SELECT count(*)::int AS n FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
       JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.name = 'massacre' AND m.created_at < (m.payload->>'due')::timestamptz`,
  );
  expect(early.rows[0].n).toBe(0);
  const stored = await pool.query(
    `SELECT count(*)::int AS n FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
       JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'massacre'`,
  );
  expect(stored.rows[0].n).toBe(n);
  for (const p of live) p.child.kill('SIGTERM');
  for (const p of live) expect(await p.exited).toEqual({ code: 0, signal: null });
});
