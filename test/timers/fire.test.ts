// Firing, as a caller sees it: never before deliverAt, exactly once, at the next cycle when due;
// the timersFire switch; the cancel-against-fire race with two sweepers running.
import { DEFAULT_TENANT } from '../../shared/config';
import { call } from '../support/http';
import { waitFor } from '../support/wait';
import { useApi } from '../support/api';
import { scheduleDirect, startTestSweeper, timerMessageCounts } from '../support/sweeper';

const api = useApi({}, { reset: ["DELETE FROM queen.system_state WHERE key = 'timers_fire_enabled'"], connections: 4, sweepers: true });

async function pending(): Promise<number> {
  return (await api.pool.query('SELECT count(*)::int AS n FROM queen.log_timers')).rows[0].n;
}

test('a timer never fires before deliverAt, then fires exactly once', async () => {
  const res = await call(api.url, 'POST', '/api/v1/timers', { queue: 'floor', payload: { hello: 1 }, delaySeconds: 2 });
  const { timerId, deliverAt } = res.body;
  const s = startTestSweeper(api.databaseUrl, { intervalMs: 20 });
  let fired = false;
  let cyclesBefore = 0;
  // Every cycle that ends before deliverAt (by the database's clock) must have left it unfired.
  while (!fired) {
    await s.cycles(1);
    const { rows } = await api.pool.query(
      `SELECT now() < $1::timestamptz AS early,
              (SELECT count(*)::int FROM queen.messages WHERE transaction_id = $2) AS n`,
      [deliverAt, `timer:${timerId}`],
    );
    if (rows[0].early) {
      expect(rows[0].n).toBe(0);
      cyclesBefore++;
    } else {
      fired = rows[0].n === 1;
    }
  }
  // At least one cycle looked before deliverAt (how many depends on the machine's load).
  expect(cyclesBefore).toBeGreaterThan(0);
  const msg = await api.pool.query(`SELECT created_at, payload FROM queen.messages WHERE transaction_id = $1`, [`timer:${timerId}`]);
  expect(msg.rows[0].payload).toEqual({ hello: 1 });
  expect(msg.rows[0].created_at.getTime()).toBeGreaterThanOrEqual(Date.parse(deliverAt));
  await s.cycles(3);
  expect((await timerMessageCounts(api.pool)).get(timerId)).toBe(1);
  expect((await call(api.url, 'GET', `/api/v1/timers/${timerId}`)).body).toEqual({ found: false });
  expect((await call(api.url, 'DELETE', `/api/v1/timers/${timerId}`)).body).toMatchObject({ cancelled: false, reason: 'absent' });
  await s.close();
});

test('a past deliverAt fires at the next cycle, into its queue and partition', async () => {
  const s = startTestSweeper(api.databaseUrl, { intervalMs: 5000 });
  await s.cycles(1); // the sweeper is now asleep for five seconds
  const res = await call(api.url, 'POST', '/api/v1/timers', { queue: 'past', partition: 'p-7', payload: [1, 2], deliverAt: '2021-06-01T00:00:00Z' });
  const [report] = await s.cycles(1); // woken: this cycle started after the schedule
  expect(report.fired).toBe(1);
  const { rows } = await api.pool.query(
    `SELECT q.name AS queue, p.name AS partition, m.payload FROM queen.messages m
       JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
      WHERE m.transaction_id = $1`,
    [`timer:${res.body.timerId}`],
  );
  expect(rows).toEqual([{ queue: 'past', partition: 'p-7', payload: [1, 2] }]);
  expect(Number(await s.metrics.timersFired.get().then((m) => m.values[0].value))).toBe(1);
  await s.close();
});

test('timersFire off: nothing fires and nothing is lost; on again: the backlog drains oldest first', async () => {
  await api.pool.query(`INSERT INTO queen.system_state (key, value) VALUES ('timers_fire_enabled', 'false')
                    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`);
  const base = Date.UTC(2024, 0, 1);
  // Scheduled in scrambled order, so the order of deliverAt is not the order of insertion.
  const order = Array.from({ length: 40 }, (_, i) => (i * 17) % 40);
  const ids = await scheduleDirect(api.pool, DEFAULT_TENANT, 40, (i) => ({
    queue: 'drain',
    payload: { rank: order[i] },
    deliverAt: new Date(base + order[i] * 1000).toISOString(),
  }));
  // One pass covers all 64 shards and fires 5 a pass: each pass takes the 5 oldest of the cell.
  const s = startTestSweeper(api.databaseUrl, { intervalMs: 20, batch: 5, shardsPerPass: 64 });
  const reports = await s.cycles(5);
  expect(reports.every((r) => r.fired === 0 && r.fireEnabled === false)).toBe(true);
  expect(await pending()).toBe(40);
  const early = await timerMessageCounts(api.pool);
  expect(ids.some((id) => early.has(id))).toBe(false);
  expect((await s.metrics.switchState.get()).values.find((v) => v.labels.switch === 'timersFire')?.value).toBe(0);
  // The two gauges an operator watches while the switch is off (read beside the cycles).
  await s.sweeper.nextGauges();
  expect((await s.metrics.timersDue.get()).values[0].value).toBe(40);
  expect((await s.metrics.timersOldestLate.get()).values[0].value).toBeGreaterThan(60 * 60 * 24 * 300);

  await api.pool.query(`UPDATE queen.system_state SET value = 'true' WHERE key = 'timers_fire_enabled'`);
  await api.pool.query(`NOTIFY queen_system_state, 'timers_fire_enabled'`);
  await waitFor(async () => (await pending()) === 0, { what: 'every timer fired (none pending)', timeoutMs: 20_000 });
  const { rows } = await api.pool.query(
    `SELECT m.payload->>'rank' AS rank, m.transaction_id FROM queen.messages m
       JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.name = 'drain' ORDER BY m.seq`,
  );
  expect(rows.map((r) => Number(r.rank))).toEqual(Array.from({ length: 40 }, (_, i) => i));
  const counts = await timerMessageCounts(api.pool);
  expect(ids.every((id) => counts.get(id) === 1)).toBe(true);
  await s.close();
});

test('timersSchedule off: new timers are refused, and the ones already promised still fire', async () => {
  const promised = await call(api.url, 'POST', '/api/v1/timers', { queue: 'schedule-paused', payload: { p: 1 }, deliverAt: '2022-01-01T00:00:00Z' });
  expect(promised.status).toBe(200);
  const paused = await call(api.url, 'POST', '/api/v1/system/kv-timers', { timersSchedule: false });
  expect(paused.body).toMatchObject({ timersSchedule: false, timersFire: true });
  try {
    expect((await call(api.url, 'POST', '/api/v1/timers', { queue: 'schedule-paused', payload: { p: 2 }, delaySeconds: 1 })).status).toBe(503);
    const s = startTestSweeper(api.databaseUrl, { intervalMs: 20 });
    try {
      await waitFor(async () => (await timerMessageCounts(api.pool)).get(promised.body.timerId) === 1, { what: "the promised timer's one message", timeoutMs: 20_000 });
      const reports = await s.cycles(1);
      expect(reports[0].fireEnabled).toBe(true);
    } finally {
      await s.close();
    }
    expect((await timerMessageCounts(api.pool)).get(promised.body.timerId)).toBe(1);
  } finally {
    await call(api.url, 'POST', '/api/v1/system/kv-timers', { timersSchedule: true });
  }
});

test('1,000 timers due now, each cancelled while two sweepers run: cancelled and never delivered, or delivered once', async () => {
  const ids = await scheduleDirect(api.pool, DEFAULT_TENANT, 1000, (i) => ({
    queue: 'race',
    partition: `p${i % 4}`,
    payload: { i },
    delaySeconds: 0,
  }));
  // Small batches, so the firing is spread over many passes and the cancels land among them.
  const a = startTestSweeper(api.databaseUrl, { intervalMs: 10, batch: 10, shardsPerPass: 4 });
  const b = startTestSweeper(api.databaseUrl, { intervalMs: 10, batch: 10, shardsPerPass: 4 });
  const answers = new Map<string, { cancelled: boolean; reason?: string }>();
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < ids.length) {
        const id = ids[next++];
        const res = await call(api.url, 'DELETE', `/api/v1/timers/${id}`);
        expect(res.status).toBe(200);
        answers.set(id, res.body);
      }
    }),
  );
  await waitFor(async () => (await pending()) === 0, { what: 'every timer fired (none pending)', timeoutMs: 30_000 });
  await Promise.all([a.cycles(1), b.cycles(1)]);
  const counts = await timerMessageCounts(api.pool);
  let cancelled = 0;
  for (const id of ids) {
    const answer = answers.get(id)!;
    if (answer.cancelled) {
      cancelled++;
      expect(counts.get(id) ?? 0).toBe(0);
    } else {
      expect(answer.reason).toBe('absent');
      expect(counts.get(id)).toBe(1);
    }
  }
  const fired = (await a.metrics.timersFired.get()).values[0].value + (await b.metrics.timersFired.get()).values[0].value;
  expect(fired).toBe(ids.length - cancelled);
  await Promise.all([a.close(), b.close()]);
});

test('a timer due before the next interval shortens the sleep to its deliverAt', async () => {
  const s = startTestSweeper(api.databaseUrl, { intervalMs: 10_000 });
  await s.cycles(1);
  const res = await call(api.url, 'POST', '/api/v1/timers', { queue: 'soon', payload: 1, delaySeconds: 0.8 });
  const [report] = await s.cycles(1);
  expect(report.fired).toBe(0);
  expect(report.sleepMs).toBeLessThanOrEqual(800);
  expect(report.sleepMs).toBeGreaterThanOrEqual(25);
  // The next cycle is the one after that sleep, not one 10 s later; it fires the timer.
  const next = await s.sweeper.cycleDone();
  expect(next.fired).toBe(1);
  expect((await timerMessageCounts(api.pool)).get(res.body.timerId)).toBe(1);
  await s.close();
});

test('the fire batch is its own setting: a pass fires up to fireBatch timers, whatever the prune batch', async () => {
  const due = new Date(Date.now() - 60_000).toISOString();
  const ids = await scheduleDirect(api.pool, DEFAULT_TENANT, 30, (i) => ({ queue: 'fire-batch', payload: { i }, deliverAt: due }));
  const s = startTestSweeper(api.databaseUrl, { intervalMs: 20, batch: 3, fireBatch: 10, shardsPerPass: 64 });
  const fired: number[] = [];
  s.sweeper.on('pass', (p: { fired: number }) => p.fired > 0 && fired.push(p.fired));
  await waitFor(async () => fired.reduce((a, b) => a + b, 0) >= 30, { what: '30 timers fired', timeoutMs: 20_000 });
  await s.close();
  // Three passes of ten, not ten passes of three.
  expect(fired).toEqual([10, 10, 10]);
  const counts = await timerMessageCounts(api.pool);
  expect(ids.every((id) => counts.get(id) === 1)).toBe(true);
});
