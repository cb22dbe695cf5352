// The batch as a whole: results aligned to the request with index and op on every element,
// whatever order the procedure ran them in; one instant for the whole batch.
import { startKv, KvHarness, expectError } from './harness';

let h: KvHarness;
beforeAll(async () => {
  h = await startKv();
});
afterAll(() => h?.close());

test('results[i] answers operations[i], each with its index and op', async () => {
  await h.one({ op: 'put', ns: 'b', key: 'p:1', value: 1, forever: true });
  const ops = [
    { op: 'put', ns: 'b', key: 'zzz', value: 'z', forever: true },
    { op: 'getPrefix', ns: 'b', prefix: 'p:' },
    { op: 'get', ns: 'a', key: 'aaa' },
    { op: 'incr', ns: 'b', key: 'mmm', ttlSeconds: 60 },
    { op: 'getMany', ns: 'b', keys: ['q', 'r'] },
    { op: 'delete', ns: 'B', key: 'x' },
    { op: 'putIfAbsent', ns: 'b', key: 'AAA', value: 'A', forever: true },
  ];
  const res = await h.batch(ops);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  expect(res.body.ok).toBe(true);
  expect(res.body.results).toHaveLength(ops.length);
  res.body.results.forEach((r: any, i: number) => {
    expect(r.index).toBe(i);
    expect(r.op).toBe(ops[i].op);
  });
  expect(res.body.results[0]).toMatchObject({ key: 'zzz', applied: true, value: 'z' });
  expect(res.body.results[1].rows.map((r: any) => r.key)).toEqual(['p:1']);
  expect(res.body.results[2]).toMatchObject({ key: 'aaa', found: false });
  expect(res.body.results[3]).toMatchObject({ key: 'mmm', value: 1 });
  expect(res.body.results[4]).toMatchObject({ rows: [], missing: ['q', 'r'] });
  expect(res.body.results[5]).toMatchObject({ key: 'x', applied: false, reason: 'absent' });
  expect(res.body.results[6]).toMatchObject({ key: 'AAA', applied: true });
});

test('the write answer carries applied, found, value, version, expiresAt, updatedAt, and reason only when not applied', async () => {
  const won = await h.one({ op: 'put', ns: 'b', key: 'shape', value: 1, ttlSeconds: 60 });
  expect(Object.keys(won).sort()).toEqual(['applied', 'expiresAt', 'found', 'index', 'key', 'op', 'updatedAt', 'value', 'version']);
  const lost = await h.one({ op: 'putIfAbsent', ns: 'b', key: 'shape', value: 2, ttlSeconds: 60 });
  expect(Object.keys(lost).sort()).toEqual(['applied', 'expiresAt', 'found', 'index', 'key', 'op', 'reason', 'updatedAt', 'value', 'version']);
  expect(won.expiresAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
});

test('one instant decides the whole batch: every write in it carries the same updatedAt', async () => {
  const ops = Array.from({ length: 50 }, (_, i) => ({ op: 'put', ns: 'b', key: `t${i}`, value: 'x'.repeat(2000), ttlSeconds: 60 }));
  const res = await h.batch(ops);
  const stamps = new Set(res.body.results.map((r: any) => r.updatedAt));
  const expiries = new Set(res.body.results.map((r: any) => r.expiresAt));
  expect(stamps.size).toBe(1);
  expect(expiries.size).toBe(1);
});

test('a write then a read of other keys in one batch; the next batch sees the write', async () => {
  const res = await h.batch([
    { op: 'put', ns: 'b', key: 'seen', value: 'v', forever: true },
    { op: 'get', ns: 'b', key: 'unrelated' },
  ]);
  expect(res.body.results[0].applied).toBe(true);
  expect((await h.one({ op: 'get', ns: 'b', key: 'seen' })).value).toBe('v');
});

test('a getPrefix touches the keys of its range: a batch that also writes one of them is 400 kv_duplicate_key', async () => {
  // The prefix reads run after the single-key operations, so a getPrefix at index 0 answered with
  // what a put at index 1 wrote: the intra-batch order "touch a key at most once" rules out.
  const overlap = await h.batch([
    { op: 'getPrefix', ns: 'pd', prefix: 'cart:' },
    { op: 'put', ns: 'pd', key: 'cart:1', value: 'added', forever: true },
  ]);
  expectError(overlap, 400, 'kv_duplicate_key', 1);
  expect(await h.row('pd', 'cart:1')).toBeNull();
  expectError(await h.batch([{ op: 'delete', ns: 'pd', key: 'cart:9' }, { op: 'getPrefix', ns: 'pd', prefix: 'cart' }]), 400, 'kv_duplicate_key', 1);
  // Reads beside it have no order between them: allowed.
  expect((await h.batch([{ op: 'getMany', ns: 'pd', keys: ['a', 'cart:9'] }, { op: 'getPrefix', ns: 'pd', prefix: 'cart' }])).status).toBe(200);
  // Outside the range (another namespace, another prefix, at or before `after`) is no overlap.
  const apart = await h.batch([
    { op: 'getPrefix', ns: 'pd', prefix: 'cart:', after: 'cart:5' },
    { op: 'put', ns: 'pd', key: 'cart:5', value: 1, forever: true },
    { op: 'put', ns: 'pd2', key: 'cart:1', value: 1, forever: true },
    { op: 'put', ns: 'pd', key: 'cart', value: 1, forever: true },
  ]);
  expect(apart.status).toBe(200);
  expect(apart.body.results[0]).toMatchObject({ rows: [], truncated: false });
});
