// The expect matrix (docs/kv.md): absent / 0 / N against an absent, a live and an expired row,
// for put and delete (a delete with expect 0 is refused). expect N never creates; a write that does
// not apply still answers the current value and version so the loser needs no second round trip.
import { startKv, KvHarness, expectError } from './harness';

let h: KvHarness;
beforeAll(async () => {
  h = await startKv();
});
afterAll(() => h?.close());

type State = 'absent' | 'live' | 'expired';
let seq = 0;

/** A fresh key in the given state; `version` is the number a caller would hold for it. */
async function keyIn(state: State): Promise<{ key: string; version: number }> {
  const key = `k${++seq}-${state}`;
  if (state === 'absent') return { key, version: 987654321 };
  if (state === 'live') {
    const res = await h.one({ op: 'put', ns: 'm', key, value: { was: 'live' }, ttlSeconds: 3600 });
    return { key, version: res.version };
  }
  const planted = await h.plant('m', key, { was: 'expired' });
  return { key, version: Number(planted.version) };
}

type Expect = 'none' | 'zero' | 'match' | 'other';
/** What a write answers: applied, the reason one that did not apply gives, or refused (400 kv_expect_invalid). */
type Verdict = 'applied' | 'exists' | 'version' | 'absent' | 'refused';

/** The matrix, each case once: the key's state, the expect sent, what a put answers, what a delete answers. */
const matrix: Array<[State, Expect, Verdict, Verdict]> = [
  ['absent', 'none', 'applied', 'absent'],
  ['live', 'none', 'applied', 'applied'],
  ['expired', 'none', 'applied', 'absent'], // the put creates anew
  ['absent', 'zero', 'applied', 'refused'], // a delete with expect 0 could only delete nothing
  ['live', 'zero', 'exists', 'refused'],
  ['expired', 'zero', 'applied', 'refused'],
  ['live', 'match', 'applied', 'applied'],
  ['live', 'other', 'version', 'version'],
  ['absent', 'match', 'absent', 'absent'], // expect N never creates
  ['expired', 'match', 'absent', 'absent'],
];
const EXPECT_NAME: Record<Expect, string> = { none: 'no expect', zero: 'expect 0', match: 'expect N, its version', other: 'expect N, another version' };
const cases = (verdict: 2 | 3) => matrix.map((row) => [`${EXPECT_NAME[row[1]]}, ${row[0]} row: ${row[verdict]}`, row[0], row[1], row[verdict]] as const);

/** The operation's `expect` field for the kind of expect and the version the caller holds. */
const expectField = (kind: Expect, version: number) =>
  ({ none: {}, zero: { expect: 0 }, match: { expect: version }, other: { expect: version + 1 } })[kind];

test.each(cases(2))('put — %s', async (_name, state, expectKind, verdict) => {
  const { key, version } = await keyIn(state);
  const before = await h.row('m', key);
  const res = await h.one({ op: 'put', ns: 'm', key, value: { now: 'new' }, ttlSeconds: 60, ...expectField(expectKind, version) });
  const after = await h.row('m', key);
  if (verdict === 'applied') {
    expect(res).toMatchObject({ index: 0, op: 'put', key, applied: true, found: true, value: { now: 'new' } });
    expect(res).not.toHaveProperty('reason');
    expect(after?.value).toEqual({ now: 'new' });
    expect(after?.version).toBe(String(res.version));
    if (before) expect(after?.version).not.toBe(before.version);
  } else {
    expect(res).toMatchObject({ applied: false, reason: verdict });
    // Nothing written: the row is exactly what it was, or still absent.
    expect(after).toEqual(before);
    if (state === 'live') {
      // The loser carries the current value and version.
      expect(res).toMatchObject({ found: true, value: { was: 'live' }, version });
    } else {
      expect(res).toMatchObject({ found: false, value: null, version: 0 });
    }
  }
});

test.each(cases(3))('delete — %s', async (_name, state, expectKind, verdict) => {
  const { key, version } = await keyIn(state);
  const before = await h.row('m', key);
  const op = { op: 'delete', ns: 'm', key, ...expectField(expectKind, version) };
  if (verdict === 'refused') {
    expectError(await h.batch([op]), 400, 'kv_expect_invalid', 0);
    expect(await h.row('m', key)).toEqual(before);
  } else if (verdict === 'applied') {
    expect(await h.one(op)).toMatchObject({ index: 0, op: 'delete', applied: true, found: false });
    expect(await h.row('m', key)).toBeNull();
  } else {
    const res = await h.one(op);
    expect(res).toMatchObject({ applied: false, reason: verdict });
    if (state === 'live') {
      expect(res).toMatchObject({ found: true, value: { was: 'live' }, version });
      expect((await h.row('m', key))?.version).toBe(String(version));
    } else {
      expect(res).toMatchObject({ found: false, value: null, version: 0 });
    }
  }
  // After any delete the key reads as absent or as it was; never as something new.
  const got = await h.one({ op: 'get', ns: 'm', key });
  expect(got.found).toBe(state === 'live' && verdict !== 'applied');
});

test('putIfAbsent is put with expect 0: the same answers, under its own op name', async () => {
  const first = await h.one({ op: 'putIfAbsent', ns: 'm', key: 'pia', value: 1, ttlSeconds: 60 });
  expect(first).toMatchObject({ op: 'putIfAbsent', applied: true });
  const second = await h.one({ op: 'putIfAbsent', ns: 'm', key: 'pia', value: 2, ttlSeconds: 60 });
  expect(second).toMatchObject({ op: 'putIfAbsent', applied: false, reason: 'exists', value: 1, version: first.version });
});

test('putIfAbsent and incr take no expect of their own: 400 kv_expect_invalid', async () => {
  expectError(await h.batch([{ op: 'putIfAbsent', ns: 'm', key: 'x1', value: 1, forever: true, expect: 0 }]), 400, 'kv_expect_invalid', 0);
  expectError(await h.batch([{ op: 'incr', ns: 'm', key: 'x2', forever: true, expect: 3 }]), 400, 'kv_expect_invalid', 0);
});

test.each([[null], ['5'], [-1], [1.5], [true], [{}]])('expect %p is 400 kv_expect_invalid and writes nothing', async (value) => {
  const { key } = await keyIn('live');
  const before = await h.row('m', key);
  expectError(await h.batch([{ op: 'put', ns: 'm', key, value: 'z', forever: true, expect: value }]), 400, 'kv_expect_invalid', 0);
  expect(await h.row('m', key)).toEqual(before);
});

test('a chain of fenced writes: each version fences the next, a stale one loses with the current value', async () => {
  const v1 = (await h.one({ op: 'put', ns: 'm', key: 'fence', value: 'a', forever: true })).version;
  const v2 = (await h.one({ op: 'put', ns: 'm', key: 'fence', value: 'b', forever: true, expect: v1 })).version;
  const stale = await h.one({ op: 'put', ns: 'm', key: 'fence', value: 'zombie', forever: true, expect: v1 });
  expect(stale).toMatchObject({ applied: false, reason: 'version', value: 'b', version: v2 });
  const v3 = await h.one({ op: 'put', ns: 'm', key: 'fence', value: 'c', forever: true, expect: v2 });
  expect(v3.applied).toBe(true);
  expect(new Set([v1, v2, v3.version]).size).toBe(3);
});

// JSON has one number type: 12.0 is the number 12, and serializers that write floats (Python's
// json.dumps of a float, many typed clients) send versions that way. The validator accepts a whole
// number written with a fraction part; the operation must then run, not fail on the way to bigint.
test('expect written as a whole number with a fraction part (12.0, 0.0) is that number, on every route', async () => {
  const base = await h.one({ op: 'put', ns: 'm', key: 'dotzero', value: 'a', forever: true });
  const raw = (ops: string) => h.call('POST', '/api/v1/kv', `{"operations":[${ops}]}`);
  const stale = await raw(`{"op":"put","ns":"m","key":"dotzero","value":"x","forever":true,"expect":${base.version + 1}.0}`);
  expect(stale.status).toBe(200);
  expect(stale.body.results[0]).toMatchObject({ applied: false, reason: 'version', value: 'a', version: base.version });
  const fenced = await raw(`{"op":"put","ns":"m","key":"dotzero","value":"b","forever":true,"expect":${base.version}.0}`);
  expect(fenced.status).toBe(200);
  expect(fenced.body.results[0]).toMatchObject({ applied: true, value: 'b' });
  const zero = await raw('{"op":"put","ns":"m","key":"dotzero","value":"c","forever":true,"expect":0.0}');
  expect(zero.body.results[0]).toMatchObject({ applied: false, reason: 'exists', value: 'b' });
  const created = await raw('{"op":"put","ns":"m","key":"dotzero-new","value":"n","forever":true,"expect":0.0}');
  expect(created.body.results[0]).toMatchObject({ applied: true, value: 'n' });
  // The path routes and a delete take the same spelling.
  const v = fenced.body.results[0].version;
  const path = await h.call('PUT', '/api/v1/kv/m/dotzero', `{"value":"d","forever":true,"expect":${v}.0}`);
  expect(path.status).toBe(200);
  expect(path.body).toMatchObject({ applied: true, value: 'd' });
  const del = await h.call('DELETE', '/api/v1/kv/m/dotzero', `{"expect":${path.body.version}.0}`);
  expect(del.status).toBe(200);
  expect(del.body).toMatchObject({ applied: true });
  expect(await h.row('m', 'dotzero')).toBeNull();
});

// The version comes from a sequence, not version + 1 (sql/migrations/024_kv.sql), so that a key that
// expired, was pruned and was written again cannot re-issue a version a long-lived holder still carries.
test('a holder of an old lineage\'s version never fences the new lineage: after a delete, or an expiry and a prune, and re-creation', async () => {
  // Deleted and re-created.
  const old = await h.one({ op: 'put', ns: 'm', key: 'lineage-d', value: 'first', forever: true });
  await h.one({ op: 'delete', ns: 'm', key: 'lineage-d' });
  const reborn = await h.one({ op: 'putIfAbsent', ns: 'm', key: 'lineage-d', value: 'second', forever: true });
  expect(reborn.version).not.toBe(old.version);
  const zombie = await h.one({ op: 'put', ns: 'm', key: 'lineage-d', value: 'zombie', forever: true, expect: old.version });
  expect(zombie).toMatchObject({ applied: false, reason: 'version', value: 'second', version: reborn.version });
  const zombieDelete = await h.one({ op: 'delete', ns: 'm', key: 'lineage-d', expect: old.version });
  expect(zombieDelete).toMatchObject({ applied: false, reason: 'version' });

  // Expired, pruned by the sweeper's own statement, and written again.
  const planted = await h.plant('m', 'lineage-p', 'first');
  const { rows } = await h.db.query(`SELECT queen.kv_prune_v1($1, 1000) AS n`, [planted.shard]);
  expect(rows[0].n).toBeGreaterThanOrEqual(1);
  expect(await h.row('m', 'lineage-p')).toBeNull();
  const again = await h.one({ op: 'put', ns: 'm', key: 'lineage-p', value: 'second', ttlSeconds: 600 });
  expect(String(again.version)).not.toBe(planted.version);
  const stale = await h.one({ op: 'put', ns: 'm', key: 'lineage-p', value: 'zombie', forever: true, expect: Number(planted.version) });
  expect(stale).toMatchObject({ applied: false, reason: 'version', value: 'second', version: again.version });
  expect((await h.row('m', 'lineage-p'))?.value).toBe('second');
});
