// The expect matrix (docs/kv.md): absent / 0 / N against an absent, a live and an expired row,
// for put and delete. expect N never creates; a write that does not apply still answers the
// current value and version so the loser needs no second round trip.
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

const putCases: Array<[string, State, 'none' | 'zero' | 'match' | 'other', string | null]> = [
  ['no expect, absent row: creates', 'absent', 'none', null],
  ['no expect, live row: replaces', 'live', 'none', null],
  ['no expect, expired row: creates anew', 'expired', 'none', null],
  ['expect 0, absent row: creates', 'absent', 'zero', null],
  ['expect 0, live row: exists', 'live', 'zero', 'exists'],
  ['expect 0, expired row: wins', 'expired', 'zero', null],
  ['expect N, live row with version N: replaces', 'live', 'match', null],
  ['expect N, live row with another version: version', 'live', 'other', 'version'],
  ['expect N, absent row: absent, creates nothing', 'absent', 'match', 'absent'],
  ['expect N, expired row with version N: absent', 'expired', 'match', 'absent'],
];

test.each(putCases)('put — %s', async (_name, state, expectKind, reason) => {
  const { key, version } = await keyIn(state);
  const before = await h.row('m', key);
  const op: Record<string, unknown> = { op: 'put', ns: 'm', key, value: { now: 'new' }, ttlSeconds: 60 };
  if (expectKind === 'zero') op.expect = 0;
  if (expectKind === 'match') op.expect = version;
  if (expectKind === 'other') op.expect = version + 1;
  const res = await h.one(op);
  const after = await h.row('m', key);
  if (reason === null) {
    expect(res).toMatchObject({ index: 0, op: 'put', key, applied: true, found: true, value: { now: 'new' } });
    expect(res).not.toHaveProperty('reason');
    expect(after?.value).toEqual({ now: 'new' });
    expect(after?.version).toBe(String(res.version));
    if (before) expect(after?.version).not.toBe(before.version);
  } else {
    expect(res).toMatchObject({ applied: false, reason });
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

const deleteCases: Array<[string, State, 'none' | 'match' | 'other', string | null]> = [
  ['no expect, absent row: absent', 'absent', 'none', 'absent'],
  ['no expect, live row: deleted', 'live', 'none', null],
  ['no expect, expired row: absent', 'expired', 'none', 'absent'],
  ['expect N, live row with version N: deleted', 'live', 'match', null],
  ['expect N, live row with another version: version', 'live', 'other', 'version'],
  ['expect N, absent row: absent', 'absent', 'match', 'absent'],
  ['expect N, expired row with version N: absent', 'expired', 'match', 'absent'],
];

test.each(deleteCases)('delete — %s', async (_name, state, expectKind, reason) => {
  const { key, version } = await keyIn(state);
  const op: Record<string, unknown> = { op: 'delete', ns: 'm', key };
  if (expectKind === 'match') op.expect = version;
  if (expectKind === 'other') op.expect = version + 1;
  const res = await h.one(op);
  if (reason === null) {
    expect(res).toMatchObject({ index: 0, op: 'delete', applied: true, found: false });
    expect(await h.row('m', key)).toBeNull();
  } else {
    expect(res).toMatchObject({ applied: false, reason });
    if (state === 'live') {
      expect(res).toMatchObject({ found: true, value: { was: 'live' }, version });
      expect((await h.row('m', key))?.version).toBe(String(version));
    } else {
      expect(res).toMatchObject({ found: false, value: null, version: 0 });
    }
  }
  // After any delete the key reads as absent or as it was; never as something new.
  const got = await h.one({ op: 'get', ns: 'm', key });
  expect(got.found).toBe(reason === 'version');
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

// kv-internals.md: the version comes from a sequence, not version + 1, so that "a key that expired,
// was pruned and was written again" cannot re-issue a version a long-lived holder still carries.
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
