// An expired row that is still physically there (the sweeper has not pruned it) is invisible to
// every operation: the truth is kv_live_v1, not the presence of the row. The rows are planted with
// SQL, expires_at in the past, because no API call can write one.
import { startKv, KvHarness, secondsFromNow } from './harness';

let h: KvHarness;
beforeAll(async () => {
  h = await startKv();
});
afterAll(() => h?.close());

const NS = 'exp';

describe('an expired row still in the table', () => {
  test('get answers found:false, through the batch route and the path route', async () => {
    await h.plant(NS, 'g', { old: true });
    const res = await h.one({ op: 'get', ns: NS, key: 'g' });
    expect(res).toEqual({ index: 0, op: 'get', key: 'g', found: false });
    const path = await h.call('GET', `/api/v1/kv/${NS}/g`);
    expect(path.status).toBe(200);
    expect(path.body.found).toBe(false);
    expect(path.body).not.toHaveProperty('value');
    expect(path.headers.get('etag')).toBeNull();
    expect(await h.row(NS, 'g')).not.toBeNull(); // still physically there
  });

  test('getMany lists it in missing, never in rows', async () => {
    await h.plant(NS, 'm1', 1);
    await h.one({ op: 'put', ns: NS, key: 'm2', value: 2, ttlSeconds: 600 });
    const res = await h.one({ op: 'getMany', ns: NS, keys: ['m1', 'm2', 'm3'] });
    expect(res.rows.map((r: any) => r.key)).toEqual(['m2']);
    expect(res.missing).toEqual(['m1', 'm3']);
  });

  test('getPrefix skips it', async () => {
    await h.plant(NS, 'p:1', 1);
    await h.one({ op: 'put', ns: NS, key: 'p:2', value: 2, forever: true });
    await h.plant(NS, 'p:3', 3);
    const res = await h.one({ op: 'getPrefix', ns: NS, prefix: 'p:' });
    expect(res.rows.map((r: any) => r.key)).toEqual(['p:2']);
    expect(res.truncated).toBe(false);
  });

  test('put with expect: <its version> answers absent and writes nothing', async () => {
    const planted = await h.plant(NS, 'x', 'old');
    const res = await h.one({ op: 'put', ns: NS, key: 'x', value: 'new', ttlSeconds: 60, expect: Number(planted.version) });
    expect(res).toMatchObject({ applied: false, reason: 'absent', found: false, value: null, version: 0 });
    const after = await h.row(NS, 'x');
    expect(after?.value).toBe('old');
    expect(after?.version).toBe(planted.version);
  });

  test('delete answers absent (nothing live was there to delete)', async () => {
    await h.plant(NS, 'd', 1);
    const res = await h.one({ op: 'delete', ns: NS, key: 'd' });
    expect(res).toMatchObject({ applied: false, reason: 'absent', found: false, version: 0 });
  });

  test('delete with expect: <its version> answers absent', async () => {
    const planted = await h.plant(NS, 'd2', 1);
    const res = await h.one({ op: 'delete', ns: NS, key: 'd2', expect: Number(planted.version) });
    expect(res).toMatchObject({ applied: false, reason: 'absent', found: false, version: 0 });
  });

  test('putIfAbsent wins against it, with a new version and created_at reset (a new lineage)', async () => {
    const planted = await h.plant(NS, 'once', { charge: 'old' }, { createdAt: '2001-01-01T00:00:00Z' });
    const res = await h.one({ op: 'putIfAbsent', ns: NS, key: 'once', value: { charge: 'new' }, ttlSeconds: 600 });
    expect(res).toMatchObject({ applied: true, found: true, value: { charge: 'new' } });
    expect(String(res.version)).not.toBe(planted.version);
    expect(secondsFromNow(res.expiresAt)).toBeGreaterThan(590);
    const row = await h.row(NS, 'once');
    expect(row!.created_at.getUTCFullYear()).toBeGreaterThan(2001);
    expect(Math.abs(row!.created_at.getTime() - Date.now())).toBeLessThan(60_000);
  });

  test('an unconditional put over it also starts a new lineage (created_at reset)', async () => {
    await h.plant(NS, 'up', 1, { createdAt: '2001-01-01T00:00:00Z' });
    await h.one({ op: 'put', ns: NS, key: 'up', value: 2, forever: true });
    expect((await h.row(NS, 'up'))!.created_at.getUTCFullYear()).toBeGreaterThan(2001);
  });

  test('incr restarts from zero and takes the new TTL', async () => {
    await h.plant(NS, 'ctr', 41);
    const res = await h.one({ op: 'incr', ns: NS, key: 'ctr', delta: 1, ttlSeconds: 3600 });
    expect(res).toMatchObject({ applied: true, value: 1, found: true });
    expect(secondsFromNow(res.expiresAt)).toBeGreaterThan(3590);
    expect(secondsFromNow(res.expiresAt)).toBeLessThanOrEqual(3600);
  });

  test('incr on an expired non-number counts it as zero rather than answering type', async () => {
    await h.plant(NS, 'obj', { not: 'a number' });
    const res = await h.one({ op: 'incr', ns: NS, key: 'obj', delta: 5, forever: true });
    expect(res).toMatchObject({ applied: true, value: 5, expiresAt: null });
  });
});

describe('lineage (created_at)', () => {
  test('a put or incr on a live row keeps created_at; only a new lineage resets it', async () => {
    await h.plant(NS, 'lin', 1, { expiresAt: '2999-01-01T00:00:00Z', createdAt: '2001-01-01T00:00:00Z' });
    await h.one({ op: 'put', ns: NS, key: 'lin', value: 2, ttlSeconds: 600 });
    expect((await h.row(NS, 'lin'))!.created_at.toISOString()).toBe('2001-01-01T00:00:00.000Z');
    await h.one({ op: 'incr', ns: NS, key: 'lin', ttlSeconds: 600 });
    expect((await h.row(NS, 'lin'))!.created_at.toISOString()).toBe('2001-01-01T00:00:00.000Z');
  });

  test('incr on an expired counter starts a new lineage', async () => {
    await h.plant(NS, 'lin2', 7, { createdAt: '2001-01-01T00:00:00Z' });
    await h.one({ op: 'incr', ns: NS, key: 'lin2', ttlSeconds: 600 });
    expect((await h.row(NS, 'lin2'))!.created_at.getUTCFullYear()).toBeGreaterThan(2001);
  });
});

describe('a write never inherits an expiry, except incr on a live row', () => {
  test('a live counter keeps the expiry it was born with (create-only TTL)', async () => {
    const born = await h.one({ op: 'incr', ns: NS, key: 'win', ttlSeconds: 3600 });
    const again = await h.one({ op: 'incr', ns: NS, key: 'win', ttlSeconds: 60 });
    expect(again.value).toBe(2);
    expect(again.expiresAt).toBe(born.expiresAt);
    const forever = await h.one({ op: 'incr', ns: NS, key: 'win', forever: true });
    expect(forever.value).toBe(3);
    expect(forever.expiresAt).toBe(born.expiresAt);
  });

  test('a live forever counter stays forever when incremented with a TTL', async () => {
    await h.one({ op: 'incr', ns: NS, key: 'forever-ctr', forever: true });
    const res = await h.one({ op: 'incr', ns: NS, key: 'forever-ctr', ttlSeconds: 5 });
    expect(res).toMatchObject({ value: 2, expiresAt: null });
    expect((await h.row(NS, 'forever-ctr'))!.expires_at).toBeNull();
  });

  test('put over a TTL row with forever: the row becomes forever', async () => {
    await h.one({ op: 'put', ns: NS, key: 'inh1', value: 1, ttlSeconds: 60 });
    const res = await h.one({ op: 'put', ns: NS, key: 'inh1', value: 2, forever: true });
    expect(res.expiresAt).toBeNull();
    expect((await h.row(NS, 'inh1'))!.expires_at).toBeNull();
  });

  test('put over a forever row with a TTL: the row takes the TTL', async () => {
    await h.one({ op: 'put', ns: NS, key: 'inh2', value: 1, forever: true });
    const res = await h.one({ op: 'put', ns: NS, key: 'inh2', value: 2, ttlSeconds: 30 });
    expect(secondsFromNow(res.expiresAt)).toBeGreaterThan(20);
    expect(secondsFromNow(res.expiresAt)).toBeLessThanOrEqual(30);
  });

  test('put over a long TTL with a short one: the short one wins (nothing extends, nothing is kept)', async () => {
    await h.one({ op: 'put', ns: NS, key: 'inh3', value: 1, ttlSeconds: 86400 });
    const res = await h.one({ op: 'put', ns: NS, key: 'inh3', value: 2, ttlSeconds: 30 });
    expect(secondsFromNow(res.expiresAt)).toBeLessThanOrEqual(30);
  });

  test('put with expect: <version> replaces the expiry too', async () => {
    const first = await h.one({ op: 'put', ns: NS, key: 'inh4', value: 1, forever: true });
    const res = await h.one({ op: 'put', ns: NS, key: 'inh4', value: 2, ttlSeconds: 30, expect: first.version });
    expect(res.applied).toBe(true);
    expect(secondsFromNow(res.expiresAt)).toBeLessThanOrEqual(30);
  });

  test('ttlSeconds sets expiresAt to the call instant plus the TTL; the row stays readable until then', async () => {
    const res = await h.one({ op: 'put', ns: NS, key: 'ttl', value: 'v', ttlSeconds: 120 });
    expect(Date.parse(res.expiresAt) - Date.parse(res.updatedAt)).toBe(120_000);
    const got = await h.one({ op: 'get', ns: NS, key: 'ttl' });
    expect(got).toMatchObject({ found: true, value: 'v', expiresAt: res.expiresAt, version: res.version });
  });

  test('a row whose expiry passes becomes invisible without anything deleting it', async () => {
    await h.one({ op: 'put', ns: NS, key: 'short', value: 's', ttlSeconds: 1 });
    expect((await h.one({ op: 'get', ns: NS, key: 'short' })).found).toBe(true);
    // Move the row's expiry into the past rather than sleeping through it.
    await h.db.query(`UPDATE queen.kv SET expires_at = now() - interval '1 second' WHERE namespace = $1 AND key = 'short'`, [NS]);
    expect((await h.one({ op: 'get', ns: NS, key: 'short' })).found).toBe(false);
    expect((await h.one({ op: 'putIfAbsent', ns: NS, key: 'short', value: 't', ttlSeconds: 60 })).applied).toBe(true);
  });
});
