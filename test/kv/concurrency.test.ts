// Races, through HTTP against a real pool: exactly one putIfAbsent winner whose value and version
// every loser carries; incr that loses no increment; overlapping batches in opposite request order
// that never deadlock (rows are taken in ascending (namespace, key) COLLATE "C" order).
import { startKv, KvHarness } from './harness';

let h: KvHarness;
beforeAll(async () => {
  h = await startKv({ QUEEN_KV_POOL_SIZE: '8' });
});
afterAll(() => h?.close());

test('20 concurrent putIfAbsent on one key: exactly one winner, every loser carries its value and version', async () => {
  const answers = await Promise.all(
    Array.from({ length: 20 }, (_, i) => h.batch([{ op: 'putIfAbsent', ns: 'race', key: 'once', value: { worker: i }, ttlSeconds: 600 }])),
  );
  expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
  const results = answers.map((a) => a.body.results[0]);
  const winners = results.filter((r) => r.applied);
  expect(winners).toHaveLength(1);
  const [winner] = winners;
  for (const loser of results.filter((r) => !r.applied)) {
    expect(loser).toMatchObject({ reason: 'exists', found: true, value: winner.value, version: winner.version, expiresAt: winner.expiresAt });
  }
  const row = await h.row('race', 'once');
  expect(row?.value).toEqual(winner.value);
  expect(row?.version).toBe(String(winner.version));
});

test('20 concurrent putIfAbsent on an expired row still in the table: exactly one winner', async () => {
  await h.plant('race', 'stale', { worker: 'dead' });
  const results = (
    await Promise.all(
      Array.from({ length: 20 }, (_, i) => h.batch([{ op: 'putIfAbsent', ns: 'race', key: 'stale', value: { worker: i }, ttlSeconds: 600 }])),
    )
  ).map((a) => a.body.results[0]);
  const winners = results.filter((r) => r.applied);
  expect(winners).toHaveLength(1);
  for (const r of results) expect(r).toMatchObject({ value: winners[0].value, version: winners[0].version });
});

test('20 concurrent fenced puts with the same expect: exactly one applies, the rest lose with reason version', async () => {
  const base = await h.one({ op: 'put', ns: 'race', key: 'cas', value: { gen: 0 }, forever: true });
  const results = (
    await Promise.all(
      Array.from({ length: 20 }, (_, i) => h.batch([{ op: 'put', ns: 'race', key: 'cas', value: { gen: i + 1 }, forever: true, expect: base.version }])),
    )
  ).map((a) => a.body.results[0]);
  const winners = results.filter((r) => r.applied);
  expect(winners).toHaveLength(1);
  for (const loser of results.filter((r) => !r.applied)) {
    expect(loser).toMatchObject({ reason: 'version', value: winners[0].value, version: winners[0].version });
  }
});

test('a delete racing a putIfAbsent on an expired row never leaves a half state', async () => {
  for (let round = 0; round < 10; round++) {
    const key = `dr${round}`;
    await h.plant('race', key, 'dead');
    const [put, del] = await Promise.all([
      h.batch([{ op: 'putIfAbsent', ns: 'race', key, value: 'alive', forever: true }]),
      h.batch([{ op: 'delete', ns: 'race', key }]),
    ]);
    expect(put.body.results[0].applied).toBe(true);
    const row = await h.row('race', key);
    // Either the delete came first (it found nothing live, the put then created) or second (it
    // deleted the live row the put created): the answer and the table agree either way.
    if (del.body.results[0].applied) expect(row).toBeNull();
    else expect(row?.value).toBe('alive');
  }
});

test('50 concurrent incr give exactly 50, each intermediate value handed out once', async () => {
  const answers = await Promise.all(
    Array.from({ length: 50 }, () => h.batch([{ op: 'incr', ns: 'race', key: 'ctr', delta: 1, ttlSeconds: 600 }])),
  );
  expect(answers.map((a) => a.status)).toEqual(Array(50).fill(200));
  const values = answers.map((a) => a.body.results[0].value).sort((a, b) => a - b);
  expect(values).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
  expect((await h.row('race', 'ctr'))?.value).toBe(50);
});

test('30 concurrent incr against max 10: exactly 10 admitted, the counter never passes 10', async () => {
  const results = (
    await Promise.all(
      Array.from({ length: 30 }, () => h.batch([{ op: 'incr', ns: 'race', key: 'gate', max: 10, ttlSeconds: 600 }])),
    )
  ).map((a) => a.body.results[0]);
  expect(results.filter((r) => r.applied)).toHaveLength(10);
  for (const r of results.filter((x) => !x.applied)) expect(r).toMatchObject({ reason: 'limit', value: 10 });
  expect((await h.row('race', 'gate'))?.value).toBe(10);
});

test('30 concurrent decrements with min 0 on a budget of 10: exactly 10 admitted, the budget never goes below 0', async () => {
  // Creating this counter from zero would cross min, so every call takes incr's update-only shape.
  await h.one({ op: 'put', ns: 'race', key: 'budget', value: 10, ttlSeconds: 600 });
  const results = (
    await Promise.all(
      Array.from({ length: 30 }, () => h.batch([{ op: 'incr', ns: 'race', key: 'budget', delta: -1, min: 0, ttlSeconds: 600 }])),
    )
  ).map((a) => a.body.results[0]);
  expect(results.filter((r) => r.applied)).toHaveLength(10);
  expect(results.filter((r) => r.applied).map((r) => r.value).sort((a, b) => a - b)).toEqual(Array.from({ length: 10 }, (_, i) => i));
  for (const r of results.filter((x) => !x.applied)) expect(r).toMatchObject({ reason: 'limit', value: 0 });
  expect((await h.row('race', 'budget'))?.value).toBe(0);
});

test('20 concurrent decrements with min 0 on an absent budget: none admitted, nothing created', async () => {
  const results = (
    await Promise.all(Array.from({ length: 20 }, () => h.batch([{ op: 'incr', ns: 'race', key: 'no-budget', delta: -1, min: 0, forever: true }])))
  ).map((a) => a.body.results[0]);
  for (const r of results) expect(r).toMatchObject({ applied: false, reason: 'limit', found: false, version: 0 });
  expect(await h.row('race', 'no-budget')).toBeNull();
});

test('200 pairs of concurrent batches on the same two keys in opposite request order never deadlock', async () => {
  // Both keys in both batches; the second key of one is the first of the other. Namespaces differ
  // too, so the order is on (namespace, key), and the byte order of 'B' < 'a' is the one that counts.
  const ab = [
    { op: 'incr', ns: 'dl', key: 'a', forever: true },
    { op: 'put', ns: 'dl', key: 'B', value: 'from-ab', forever: true },
    { op: 'incr', ns: 'DL', key: 'z', forever: true },
  ];
  const ba = [
    { op: 'incr', ns: 'DL', key: 'z', forever: true },
    { op: 'put', ns: 'dl', key: 'B', value: 'from-ba', forever: true },
    { op: 'incr', ns: 'dl', key: 'a', forever: true },
  ];
  const statuses: number[] = [];
  const failures: string[] = [];
  // Bounded waves so the 2 shared cores are not flooded with 400 sockets at once.
  for (let wave = 0; wave < 10; wave++) {
    const calls = [];
    for (let i = 0; i < 20; i++) calls.push(h.batch(ab), h.batch(ba));
    for (const res of await Promise.all(calls)) {
      statuses.push(res.status);
      if (res.status !== 200) failures.push(res.text);
    }
  }
  expect(failures).toEqual([]);
  expect(statuses).toHaveLength(400);
  expect((await h.row('dl', 'a'))?.value).toBe(400);
  expect((await h.row('DL', 'z'))?.value).toBe(400);
  const deadlocks = await h.db.query(`SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`);
  expect(Number(deadlocks.rows[0].deadlocks)).toBe(0);
});

test('versions are unique across every write, concurrent or not', async () => {
  const answers = await Promise.all(
    Array.from({ length: 40 }, (_, i) =>
      h.batch([
        { op: 'put', ns: 'ver', key: `k${i % 5}`, value: i, forever: true },
        { op: 'incr', ns: 'ver', key: `c${i}`, forever: true },
        { op: 'put', ns: 'ver2', key: `k${i}`, value: i, ttlSeconds: 60 },
      ]),
    ),
  );
  const versions = answers.flatMap((a) => a.body.results.map((r: any) => String(r.version)));
  expect(versions).toHaveLength(120);
  expect(new Set(versions).size).toBe(120);
  expect(versions).not.toContain('0');
});
