// required: true turns a lost precondition into the failure of the whole call. The transaction
// really aborts (the DB is checked directly: nothing of the batch is left behind) and the answer
// is a 200 with ok:false, never an error status: a lost race is the product's most frequent outcome.
import { startKv, KvHarness } from './harness';

let h: KvHarness;
beforeAll(async () => {
  h = await startKv();
});
afterAll(() => h?.close());

const SHAPE = ['failedIndex', 'kvReason', 'ok', 'reason', 'success', 'value', 'version'];

test('a lost required putIfAbsent rolls back every write of the batch and answers the winner', async () => {
  const winner = await h.one({ op: 'put', ns: 'rq', key: 'marker', value: { chargeId: 'ch_1' }, ttlSeconds: 600 });
  const old = await h.one({ op: 'put', ns: 'rq', key: 'existing', value: 'before', forever: true });
  const res = await h.batch([
    { op: 'put', ns: 'rq', key: 'fresh', value: 1, forever: true },
    { op: 'put', ns: 'rq', key: 'existing', value: 'after', forever: true },
    { op: 'putIfAbsent', ns: 'rq', key: 'marker', value: { chargeId: 'ch_2' }, ttlSeconds: 600, required: true },
    { op: 'incr', ns: 'rq', key: 'counter', forever: true },
    { op: 'delete', ns: 'other', key: 'x' },
  ]);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  expect(Object.keys(res.body).sort()).toEqual(SHAPE);
  expect(res.body).toEqual({
    ok: false, success: false, reason: 'kv_precondition', failedIndex: 2, kvReason: 'exists', version: winner.version, value: { chargeId: 'ch_1' },
  });
  expect(await h.row('rq', 'fresh')).toBeNull();
  expect(await h.row('rq', 'counter')).toBeNull();
  const existing = await h.row('rq', 'existing');
  expect(existing?.value).toBe('before');
  expect(existing?.version).toBe(String(old.version));
  expect((await h.row('rq', 'marker'))?.version).toBe(String(winner.version));
});

test('a delete of a live row before the failing op is rolled back too', async () => {
  await h.one({ op: 'put', ns: 'rq', key: 'keepme', value: 'still here', forever: true });
  const res = await h.batch([
    { op: 'delete', ns: 'rq', key: 'keepme' },
    { op: 'put', ns: 'rq', key: 'nope', value: 1, forever: true, expect: 424242, required: true },
  ]);
  expect(res.body).toMatchObject({ ok: false, failedIndex: 1, kvReason: 'absent', version: 0, value: null });
  expect((await h.row('rq', 'keepme'))?.value).toBe('still here');
  expect(await h.row('rq', 'nope')).toBeNull();
});

test('failedIndex is the request position, whatever order the rows were locked in', async () => {
  await h.one({ op: 'put', ns: 'rq', key: 'a-first-in-lock-order', value: 1, forever: true });
  const res = await h.batch([
    { op: 'put', ns: 'rq', key: 'z-last', value: 1, forever: true },
    { op: 'put', ns: 'rq', key: 'm-middle', value: 1, forever: true },
    { op: 'putIfAbsent', ns: 'rq', key: 'a-first-in-lock-order', value: 2, forever: true, required: true },
  ]);
  expect(res.body).toMatchObject({ ok: false, failedIndex: 2, kvReason: 'exists', value: 1 });
  expect(await h.row('rq', 'z-last')).toBeNull();
});

test('with two lost requireds, the first in request order is reported', async () => {
  await h.one({ op: 'put', ns: 'rq', key: 'two-a', value: 'A', forever: true });
  await h.one({ op: 'put', ns: 'rq', key: 'two-b', value: 'B', forever: true });
  const res = await h.batch([
    { op: 'put', ns: 'rq', key: 'ok', value: 1, forever: true },
    { op: 'putIfAbsent', ns: 'rq', key: 'two-b', value: 2, forever: true, required: true },
    { op: 'putIfAbsent', ns: 'rq', key: 'two-a', value: 2, forever: true, required: true },
  ]);
  expect(res.body).toMatchObject({ ok: false, failedIndex: 1, kvReason: 'exists', value: 'B' });
});

test.each([
  ['put expect N against another version', 'version'],
  ['delete of an absent key', 'absent'],
  ['incr over max', 'limit'],
  ['incr on a live string', 'type'],
])('required %s: kvReason %s, with the current value and version', async (name, kvReason) => {
  const key = `case-${kvReason}`;
  let current: any = null;
  let op: Record<string, unknown>;
  if (kvReason === 'version') {
    current = await h.one({ op: 'put', ns: 'rq', key, value: { v: 1 }, forever: true });
    op = { op: 'put', ns: 'rq', key, value: { v: 2 }, forever: true, expect: current.version + 1, required: true };
  } else if (kvReason === 'absent') {
    op = { op: 'delete', ns: 'rq', key, required: true };
  } else if (kvReason === 'limit') {
    current = await h.one({ op: 'incr', ns: 'rq', key, delta: 10, forever: true });
    op = { op: 'incr', ns: 'rq', key, delta: 1, max: 10, forever: true, required: true };
  } else {
    current = await h.one({ op: 'put', ns: 'rq', key, value: 'ten', forever: true });
    op = { op: 'incr', ns: 'rq', key, forever: true, required: true };
  }
  const res = await h.batch([{ op: 'put', ns: 'rq', key: `${key}-side`, value: name, forever: true }, op]);
  expect(res.status).toBe(200);
  expect(res.body).toEqual({
    ok: false, success: false, reason: 'kv_precondition', failedIndex: 1, kvReason,
    version: current ? current.version : 0, value: current ? current.value : null,
  });
  expect(await h.row('rq', `${key}-side`)).toBeNull();
});

test('a required that holds answers the ordinary result and commits', async () => {
  const res = await h.batch([
    { op: 'putIfAbsent', ns: 'rq', key: 'won', value: 1, forever: true, required: true },
    { op: 'incr', ns: 'rq', key: 'won-ctr', forever: true, required: true },
  ]);
  expect(res.status).toBe(200);
  expect(res.body.ok).toBe(true);
  expect(res.body.results.map((r: any) => r.applied)).toEqual([true, true]);
  expect((await h.row('rq', 'won'))?.value).toBe(1);
  expect((await h.row('rq', 'won-ctr'))?.value).toBe(1);
});

test('without required, a lost precondition is a per-element verdict and the rest commits', async () => {
  await h.one({ op: 'put', ns: 'rq', key: 'soft', value: 'first', forever: true });
  const res = await h.batch([
    { op: 'putIfAbsent', ns: 'rq', key: 'soft', value: 'second', forever: true },
    { op: 'put', ns: 'rq', key: 'soft-side', value: 'written', forever: true },
  ]);
  expect(res.body.ok).toBe(true);
  expect(res.body.results[0]).toMatchObject({ applied: false, reason: 'exists', value: 'first' });
  expect((await h.row('rq', 'soft-side'))?.value).toBe('written');
});

test('the winner value in a kv_precondition answer keeps its numbers exact', async () => {
  await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"put","ns":"rq","key":"exact","value":{"n":12345678901234567890,"f":0.1000000000000000055511151231257827},"forever":true}]}');
  const res = await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"putIfAbsent","ns":"rq","key":"exact","value":1,"forever":true,"required":true}]}');
  expect(res.status).toBe(200);
  expect(res.text).toMatch(/"n": ?12345678901234567890[,}]/);
  expect(res.text).toMatch(/"f": ?0\.1000000000000000055511151231257827[,}]/);
});

test('a winner value of the maximum size comes back whole in the kv_precondition answer', async () => {
  const big = 'é'.repeat(1000) + 'x'.repeat(63532); // 65,532 bytes of UTF-8 + quotes = 65,534
  await h.one({ op: 'put', ns: 'rq', key: 'bigwinner', value: big, forever: true });
  const res = await h.batch([{ op: 'putIfAbsent', ns: 'rq', key: 'bigwinner', value: 1, forever: true, required: true }]);
  expect(res.status).toBe(200);
  expect(res.body.kvReason).toBe('exists');
  expect(res.body.value).toBe(big);
});

test('a version beyond 2^53 comes back exactly in the kv_precondition answer', async () => {
  // Versions are opaque tokens from a bigint sequence; a restart beyond double precision must not
  // make the loser's version differ from the one the winner was told.
  await h.db.query('ALTER SEQUENCE queen.kv_version_seq RESTART WITH 9007199254740993');
  try {
    const won = await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"putIfAbsent","ns":"rq","key":"bigver","value":1,"forever":true}]}');
    const version = /"version": ?(\d+)/.exec(won.text)![1];
    expect(version.length).toBeGreaterThanOrEqual(16);
    expect((await h.row('rq', 'bigver'))!.version).toBe(version);
    const lost = await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"putIfAbsent","ns":"rq","key":"bigver","value":2,"forever":true,"required":true}]}');
    expect(lost.status).toBe(200);
    expect(lost.text).toMatch(new RegExp(`"version": ?${version}[,}]`));
    const get = await h.call('GET', '/api/v1/kv/rq/bigver');
    expect(get.headers.get('etag')).toBe(`"${version}"`);
  } finally {
    await h.db.query('ALTER SEQUENCE queen.kv_version_seq RESTART WITH 1000000');
  }
});

test('required is a boolean, and reads take none', async () => {
  expect((await h.batch([{ op: 'put', ns: 'rq', key: 'rb', value: 1, forever: true, required: 'yes' }])).status).toBe(400);
  expect((await h.batch([{ op: 'get', ns: 'rq', key: 'rb', required: true }])).status).toBe(400);
  expect(await h.row('rq', 'rb')).toBeNull();
});
