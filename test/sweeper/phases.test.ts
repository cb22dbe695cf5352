// The sweeper's phases in-process: pruning (only expired rows, bounded batches, reads already
// correct before it ran), the usage rollup against a direct count, exclusive shard claims between
// two sweepers, and the shedding order under pressure.
import { DEFAULT_TENANT } from '../../shared/config';
import { call, kv } from '../support/http';
import { waitFor } from '../support/wait';
import { useApi } from '../support/api';
import { scheduleDirect, startTestSweeper } from '../support/sweeper';

const OTHER_TENANT = '00000000-0000-0000-0000-0000000000b2';

const api = useApi({}, { connections: 4, sweepers: true });

/** Writes keys through the product's own procedure at an instant an hour ago, so they are expired now. */
async function putAt(tenant: string, ns: string, count: number, ttlSeconds: number | null, hoursAgo: number): Promise<void> {
  for (let start = 0; start < count; start += 500) {
    const ops = [];
    for (let i = start; i < Math.min(count, start + 500); i++) {
      ops.push({ op: 'put', ns, key: `k${i}`, value: { i, pad: 'x'.repeat(i % 50) }, ...(ttlSeconds === null ? { forever: true } : { ttlSeconds }) });
    }
    await api.pool.query(`SELECT queen.kv_apply_at_v1($1::uuid, $2::jsonb, false, now() - make_interval(hours => $3))`, [
      tenant,
      JSON.stringify(ops),
      hoursAgo,
    ]);
  }
}

async function count(sql: string, values: unknown[] = []): Promise<number> {
  return (await api.pool.query(sql, values)).rows[0].n;
}

test('pruning deletes only expired rows, in bounded batches, and reads were already correct before it ran', async () => {
  await putAt(DEFAULT_TENANT, 'gone', 600, 60, 1); // expired 59 minutes ago
  await putAt(DEFAULT_TENANT, 'live', 200, 7200, 1); // expires in an hour
  await putAt(DEFAULT_TENANT, 'forever', 100, null, 1);

  // Before any sweeper: the expired rows are physically there and invisible.
  expect(await count(`SELECT count(*)::int AS n FROM queen.kv WHERE namespace = 'gone'`)).toBe(600);
  const read = await call(api.url, 'GET', '/api/v1/kv/gone/k5');
  expect(read.body).toMatchObject({ found: false });
  const many = await kv(api.url, [{ op: 'getPrefix', ns: 'gone', prefix: 'k' }, { op: 'getPrefix', ns: 'live', prefix: 'k' }]);
  expect(many.body.results[0].rows).toEqual([]);
  expect(many.body.results[1].rows.length).toBeGreaterThan(0);

  const batch = 3;
  const s = startTestSweeper(api.databaseUrl, { intervalMs: 20, batch, shardsPerPass: 8 });
  const passes: Array<{ shards: number[]; pruned: number }> = [];
  s.sweeper.on('pass', (p) => passes.push(p));
  const [first] = await s.cycles(1);
  // Bounded: at most `batch` rows per shard per pass, so one cycle cannot take all 600 (64 x 3 = 192).
  expect(first.pruned).toBeGreaterThan(0);
  expect(first.pruned).toBeLessThanOrEqual(64 * batch);
  expect(await count(`SELECT count(*)::int AS n FROM queen.kv WHERE namespace = 'gone'`)).toBeGreaterThan(0);
  await waitFor(async () => (await count(`SELECT count(*)::int AS n FROM queen.kv WHERE namespace = 'gone'`)) === 0, { what: "the expired rows of 'gone' pruned", timeoutMs: 30_000 });
  await s.cycles(1);
  expect(passes.every((p) => p.pruned <= p.shards.length * batch)).toBe(true);
  expect(await count(`SELECT count(*)::int AS n FROM queen.kv WHERE namespace = 'live'`)).toBe(200);
  expect(await count(`SELECT count(*)::int AS n FROM queen.kv WHERE namespace = 'forever'`)).toBe(100);
  expect((await s.metrics.kvPruned.get()).values[0].value).toBe(600);
  // The gauge is read at most once per interval, so a cycle that ends quickly can leave the
  // previous reading in place; it must settle at 0 once the rows are gone.
  await waitFor(async () => (await s.metrics.kvExpiredNotPruned.get()).values[0].value === 0, { what: 'queen_kv_expired_not_pruned back at 0', timeoutMs: 10_000 });
  await s.close();
});

test('the usage rollup equals a direct count, per tenant, and overwrites', async () => {
  await putAt(OTHER_TENANT, 'usage', 50, 7200, 0);
  await putAt(OTHER_TENANT, 'usage-dead', 20, 60, 2); // expired: not the tenant's any more
  await scheduleDirect(api.pool, OTHER_TENANT, 30, (i) => ({ queue: 'usage', payload: { i }, delaySeconds: 3000 }));
  const s = startTestSweeper(api.databaseUrl, { intervalMs: 20, usageIntervalMs: 100 });
  const direct = async () =>
    (
      await api.pool.query(
        `SELECT
           (SELECT count(*) FROM queen.kv WHERE tenant_id = $1 AND (expires_at IS NULL OR expires_at > now()))::int AS rows,
           (SELECT coalesce(sum(octet_length(namespace) + octet_length(key) + pg_column_size(value)), 0)
              FROM queen.kv WHERE tenant_id = $1 AND (expires_at IS NULL OR expires_at > now()))::int AS bytes,
           (SELECT count(*) FROM queen.log_timers WHERE tenant_id = $1)::int AS timers,
           (SELECT coalesce(sum(pg_column_size(payload)), 0) FROM queen.log_timers WHERE tenant_id = $1)::int AS timer_bytes`,
        [OTHER_TENANT],
      )
    ).rows[0];
  const usage = async () =>
    (await api.pool.query(`SELECT rows::int, bytes::int, timers::int, timer_bytes::int, computed_at FROM queen.kv_usage WHERE tenant_id = $1`, [OTHER_TENANT])).rows[0];

  // The measurement that has counted all of it: computed_at after the writes (the rollup counts in
  // slices, and a publish before every slice was counted again speaks for an earlier instant).
  const written = (await api.pool.query(`SELECT clock_timestamp() AS t`)).rows[0].t as Date;
  await waitFor(async () => ((await usage())?.computed_at ?? 0) > written, { what: 'a measurement that counted the writes', timeoutMs: 10_000 });
  const first = await usage();
  expect({ ...first, computed_at: undefined }).toEqual({ ...(await direct()), computed_at: undefined });
  expect(first.rows).toBe(50);
  expect(first.timers).toBe(30);

  // Change the truth; the next rollup overwrites rather than adds. A measurement whose computed_at
  // is after the change has counted it (every slice was counted since).
  await api.pool.query(`SELECT queen.kv_apply_v1($1::uuid, $2::jsonb, false)`, [OTHER_TENANT, JSON.stringify([{ op: 'delete', ns: 'usage', key: 'k1' }])]);
  await api.pool.query(`DELETE FROM queen.log_timers WHERE tenant_id = $1 AND payload->>'i' IN ('1','2','3')`, [OTHER_TENANT]);
  const changed = (await api.pool.query(`SELECT clock_timestamp() AS t`)).rows[0].t as Date;
  await waitFor(async () => (await usage()).computed_at > changed, { what: 'a measurement that counted the change', timeoutMs: 10_000 });
  const second = await usage();
  expect({ ...second, computed_at: undefined }).toEqual({ ...(await direct()), computed_at: undefined });
  expect([second.rows, second.timers]).toEqual([49, 27]);
  await s.close();
  await api.pool.query(`DELETE FROM queen.log_timers WHERE tenant_id = $1`, [OTHER_TENANT]);
});

test('two sweepers never work the same shard at once, and both get work', async () => {
  await scheduleDirect(api.pool, DEFAULT_TENANT, 3000, (i) => ({ queue: 'shards', partition: `p${i % 8}`, payload: { i }, delaySeconds: 0 }));
  const a = startTestSweeper(api.databaseUrl, { intervalMs: 5, batch: 20, shardsPerPass: 4, id: 'sweeper-a' });
  const b = startTestSweeper(api.databaseUrl, { intervalMs: 5, batch: 20, shardsPerPass: 4, id: 'sweeper-b' });
  type Span = { who: string; shard: number; from: number; to: number };
  const spans: Span[] = [];
  for (const [who, s] of [['a', a], ['b', b]] as const) {
    s.sweeper.on('pass', (p) => {
      for (const shard of p.shards) spans.push({ who, shard, from: p.claimedAtUs, to: p.finishedAtUs });
    });
  }
  await waitFor(async () => (await count(`SELECT count(*)::int AS n FROM queen.log_timers WHERE queue = 'shards'`)) === 0, { what: "every 'shards' timer fired", timeoutMs: 60_000 });
  await Promise.all([a.close(), b.close()]);
  // The server's clock, read inside each claim: no two passes over one shard overlap in time.
  const byShard = new Map<number, Span[]>();
  for (const sp of spans) byShard.set(sp.shard, [...(byShard.get(sp.shard) ?? []), sp]);
  let overlaps = 0;
  for (const list of byShard.values()) {
    list.sort((x, y) => x.from - y.from);
    for (let i = 1; i < list.length; i++) if (list[i].from < list[i - 1].to) overlaps++;
  }
  expect(overlaps).toBe(0);
  expect(byShard.size).toBe(64);
  expect(spans.some((s) => s.who === 'a')).toBe(true);
  expect(spans.some((s) => s.who === 'b')).toBe(true);
  const swept = await api.pool.query(`SELECT DISTINCT swept_by FROM queen.sweeper_shards`);
  expect(swept.rows.map((r) => r.swept_by).sort()).toEqual(expect.arrayContaining(['sweeper-a', 'sweeper-b']));
});

test('under pressure the batch shrinks and the sleep lengthens; pruning is shed first, the rollup second, firing never', async () => {
  // Cycles only when woken (a long interval): one that started on its own while a test step awaited
  // the usage rollup would halve the batch once more than the step expects.
  const s = startTestSweeper(api.databaseUrl, { intervalMs: 1000, batch: 400, usageIntervalMs: 100 });
  await s.cycles(1);
  s.sweeper.pressure.slowPassMs = -1; // every pass now counts as slow
  const [one] = await s.cycles(1);
  expect(one.suspended).toEqual({ prune: true, usage: false });
  expect(one.batch).toBe(200);
  const [two] = await s.cycles(1);
  expect(two.suspended).toEqual({ prune: true, usage: true });
  expect(two.batch).toBe(100);
  expect(s.sweeper.pressure.sleepMs).toBeGreaterThan(1000);
  const gauge = async (phase: string) => (await s.metrics.sweeperPhaseSuspended.get()).values.find((v) => v.labels.phase === phase)?.value;
  expect([await gauge('prune'), await gauge('usage'), await gauge('fire')]).toEqual([1, 1, 0]);
  expect((await s.metrics.sweeperBatchSize.get()).values[0].value).toBe(100);

  // Still firing: a due timer is delivered by the very next cycle, and nothing was pruned meanwhile.
  await putAt(DEFAULT_TENANT, 'pressed', 10, 60, 1);
  const [id] = await scheduleDirect(api.pool, DEFAULT_TENANT, 1, () => ({ queue: 'pressed', payload: 1, delaySeconds: 0 }));
  // No usage statement runs while the rollup is suspended (one started before the suspension has
  // settled: cycles() awaits it).
  const usageStatements = async () =>
    (await s.metrics.sweeperCycleSeconds.get()).values.find((v) => v.metricName === 'queen_sweeper_cycle_seconds_count' && v.labels.phase === 'usage')?.value ?? 0;
  const usageBefore = await usageStatements();
  const [three] = await s.cycles(1);
  expect(three.fired).toBe(1);
  expect(three.pruned).toBe(0);
  expect(await usageStatements()).toBe(usageBefore);
  expect(await count(`SELECT count(*)::int AS n FROM queen.messages WHERE transaction_id = $1`, [`timer:${id}`])).toBe(1);
  expect(await count(`SELECT count(*)::int AS n FROM queen.kv WHERE namespace = 'pressed'`)).toBe(10);

  // Relief: fast cycles step back down, the rollup first and pruning last.
  s.sweeper.pressure.slowPassMs = 60_000;
  let report = three;
  for (let i = 0; i < 15 && (report.suspended.prune || report.batch < 400); i++) [report] = await s.cycles(1);
  expect(report.suspended).toEqual({ prune: false, usage: false });
  expect(report.batch).toBe(400);
  await waitFor(async () => (await count(`SELECT count(*)::int AS n FROM queen.kv WHERE namespace = 'pressed'`)) === 0, { what: "the expired rows of 'pressed' pruned", timeoutMs: 10_000 });
  await s.close();
});

test('the prune never deletes a row a writer is reviving, nor another tenant\'s live row under the same name', async () => {
  // Tenant A's key expired an hour ago; tenant B holds the same namespace and key, live; B also has
  // an expired key in the same namespace, which is the prune's to take.
  await putAt(DEFAULT_TENANT, 'revive', 1, 60, 2);
  await putAt(OTHER_TENANT, 'revive', 2, 60, 2);
  await api.pool.query(
    `SELECT queen.kv_apply_v1($1::uuid, '[{"op":"put","ns":"revive","key":"k0","value":"B live","forever":true}]'::jsonb)`,
    [OTHER_TENANT],
  );
  const shardOf = async (key: string) => (await api.pool.query(`SELECT (hashtextextended($1, 0) & 63)::smallint AS s`, [key])).rows[0].s;
  expect(await shardOf('k0')).not.toBe(await shardOf('k1')); // two shards, so each prune below is about one key

  // A writer revives A's expired k0 (putIfAbsent wins against it) and has not committed yet.
  const writer = await api.pool.connect();
  try {
    await writer.query('BEGIN');
    const won = await writer.query(
      `SELECT queen.kv_apply_v1($1::uuid, '[{"op":"putIfAbsent","ns":"revive","key":"k0","value":"A again","forever":true}]'::jsonb) AS r`,
      [DEFAULT_TENANT],
    );
    expect(won.rows[0].r[0]).toMatchObject({ applied: true });
    // The prune of that shard, meanwhile: the row being rewritten is skipped, B's live row is not expired.
    const pruned = (await api.pool.query('SELECT queen.kv_prune_v1($1, 1000) AS n', [await shardOf('k0')])).rows[0].n;
    expect(pruned).toBe(0);
    await writer.query('COMMIT');
  } finally {
    writer.release();
  }
  // The prune after the commit finds nothing to take there either: the revived row is live now.
  expect((await api.pool.query('SELECT queen.kv_prune_v1($1, 1000) AS n', [await shardOf('k0')])).rows[0].n).toBe(0);
  // B's expired k1 is taken.
  expect((await api.pool.query('SELECT queen.kv_prune_v1($1, 1000) AS n', [await shardOf('k1')])).rows[0].n).toBe(1);

  const rows = await api.pool.query(`SELECT tenant_id::text AS tenant, key, value FROM queen.kv WHERE namespace = 'revive' ORDER BY tenant_id, key`);
  expect(rows.rows).toEqual([
    { tenant: DEFAULT_TENANT, key: 'k0', value: 'A again' },
    { tenant: OTHER_TENANT, key: 'k0', value: 'B live' },
  ]);
  expect((await call(api.url, 'GET', '/api/v1/kv/revive/k0')).body).toMatchObject({ found: true, value: 'A again' });
});

test('with the KV switched off the keys stay, and expired ones are still pruned: the sweeper is not on that switch', async () => {
  await putAt(DEFAULT_TENANT, 'paused-gone', 40, 60, 2);
  await putAt(DEFAULT_TENANT, 'paused-live', 10, null, 0);
  const paused = await call(api.url, 'POST', '/api/v1/system/kv-timers', { kv: false });
  expect(paused.body).toMatchObject({ kv: false });
  try {
    expect((await call(api.url, 'GET', '/api/v1/kv/paused-live/k1')).status).toBe(503);
    const s = startTestSweeper(api.databaseUrl, { intervalMs: 20 });
    try {
      await waitFor(async () => (await count(`SELECT count(*)::int AS n FROM queen.kv WHERE namespace = 'paused-gone'`)) === 0, { what: "the expired rows of 'paused-gone' pruned", timeoutMs: 30_000 });
    } finally {
      await s.close();
    }
    expect(await count(`SELECT count(*)::int AS n FROM queen.kv WHERE namespace = 'paused-live'`)).toBe(10);
  } finally {
    await call(api.url, 'POST', '/api/v1/system/kv-timers', { kv: true });
  }
  expect((await call(api.url, 'GET', '/api/v1/kv/paused-live/k1')).body).toMatchObject({ found: true });
});

test('a usage rollup that takes long holds up no timer: firing goes on while it runs', async () => {
  // The rollup cannot finish while this transaction holds queen.kv_usage: a stand-in for a rollup over
  // millions of keys (about a second a million, bench:scale). The sweeper used to await it inside its
  // cycle, and no timer fired until it ended.
  const holder = await api.pool.connect();
  await holder.query('BEGIN');
  await holder.query('LOCK TABLE queen.kv_usage IN EXCLUSIVE MODE');
  const s = startTestSweeper(api.databaseUrl, { intervalMs: 20, usageIntervalMs: 0 });
  try {
    const blocked = `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%kv_usage_rollup_v2%'`;
    await waitFor(async () => (await count(blocked)) > 0, { what: 'the rollup blocked on the held lock', timeoutMs: 10_000 });
    const [id] = await scheduleDirect(api.pool, DEFAULT_TENANT, 1, () => ({ queue: 'beside-rollup', payload: 1, delaySeconds: 0 }));
    s.sweeper.wake();
    await waitFor(async () => (await count(`SELECT count(*)::int AS n FROM queen.messages WHERE transaction_id = $1`, [`timer:${id}`])) === 1, { what: 'the timer fired beside the blocked rollup', timeoutMs: 10_000 });
    expect(await count(blocked)).toBe(1);
  } finally {
    await holder.query('ROLLBACK');
    holder.release();
  }
  await s.close();
});

test('a wake that comes while a cycle runs is not lost: the next cycle starts at once, not after the interval', async () => {
  // An hour's interval: only a wake can start another cycle within this test.
  const s = startTestSweeper(api.databaseUrl, { intervalMs: 3_600_000 });
  try {
    await s.cycles(1);
    await scheduleDirect(api.pool, DEFAULT_TENANT, 1, () => ({ queue: 'woken-mid-cycle', payload: 1, delaySeconds: 0 }));
    // A switch flip announced while the cycle that fires this timer is still running (its pass
    // event is emitted mid-cycle). Before, that wake found no sleep to end and was dropped, and the
    // sweeper slept the hour.
    s.sweeper.once('pass', () => s.sweeper.wake());
    let cycles = 0;
    s.sweeper.on('cycle', () => cycles++);
    s.sweeper.wake();
    await waitFor(() => cycles >= 2, { what: 'a second cycle after the wake that came mid-cycle', timeoutMs: 10_000 });
  } finally {
    await s.close();
  }
});
