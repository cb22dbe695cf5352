// Reads: found is separate from value; getMany answers rows and an explicit missing; getPrefix is
// a keyset page in UTF-8 byte order (COLLATE "C"), with limit clamped to QUEEN_KV_PREFIX_LIMIT, a
// byte ceiling (QUEEN_KV_MAX_READ_BYTES) and truncated/nextAfter that tell the truth.
import { startKv, KvHarness, byteOrder, expectError } from './harness';

let h: KvHarness;
let small: KvHarness; // QUEEN_KV_PREFIX_LIMIT=10, QUEEN_KV_MAX_READ_BYTES at its floor (64 KiB)
beforeAll(async () => {
  [h, small] = await Promise.all([startKv(), startKv({ QUEEN_KV_PREFIX_LIMIT: '10', QUEEN_KV_MAX_READ_BYTES: '65536' })]);
});
afterAll(async () => {
  await Promise.all([h?.close(), small?.close()]);
});

/** Writes keys (value = the key) in batches the size the API accepts. */
async function fill(t: KvHarness, ns: string, keys: string[], value: (k: string) => unknown = (k) => k): Promise<void> {
  for (let i = 0; i < keys.length; i += 1000) {
    const res = await t.batch(keys.slice(i, i + 1000).map((key) => ({ op: 'put', ns, key, value: value(key), forever: true })));
    expect(res.status).toBe(200);
  }
}

const prefix = (t: KvHarness, ns: string, p: string, extra: Record<string, unknown> = {}) =>
  t.one({ op: 'getPrefix', ns, prefix: p, ...extra });

describe('get', () => {
  test('{found: true, value: null} is a different fact from {found: false}', async () => {
    const put = await h.one({ op: 'put', ns: 'r', key: 'nul', value: null, forever: true });
    expect(put).toMatchObject({ applied: true, found: true, value: null });
    const res = await h.batch([{ op: 'get', ns: 'r', key: 'nul' }, { op: 'get', ns: 'r', key: 'none' }]);
    const [present, absent] = res.body.results;
    expect(present).toEqual({
      index: 0, op: 'get', found: true, key: 'nul', value: null, version: put.version, expiresAt: null, updatedAt: put.updatedAt,
    });
    expect(absent).toEqual({ index: 1, op: 'get', key: 'none', found: false });
    expect(absent).not.toHaveProperty('value');
  });

  test('any JSON value round-trips: object, array, string, number, boolean, nested nulls', async () => {
    const values = [{ a: { b: [1, null, 'x'] } }, [], 'text with "quotes" and ünïcödé', -0.5, false, { n: null }];
    await h.batch(values.map((value, i) => ({ op: 'put', ns: 'r', key: `any${i}`, value, forever: true })));
    const res = await h.batch(values.map((_, i) => ({ op: 'get', ns: 'r', key: `any${i}` })));
    expect(res.body.results.map((r: any) => r.value)).toEqual(values);
  });

  test('an unknown namespace reads empty and is never an error', async () => {
    const res = await h.batch([
      { op: 'get', ns: 'never-written', key: 'k' },
      { op: 'getMany', ns: 'never-written', keys: ['a', 'b'] },
      { op: 'getPrefix', ns: 'never-written', prefix: 'x' },
    ]);
    expect(res.status).toBe(200);
    expect(res.body.results).toEqual([
      { index: 0, op: 'get', key: 'k', found: false },
      { index: 1, op: 'getMany', rows: [], missing: ['a', 'b'] },
      { index: 2, op: 'getPrefix', rows: [], truncated: false, nextAfter: null },
    ]);
  });

  test('namespaces are separate: the same key in another namespace is not seen', async () => {
    await h.one({ op: 'put', ns: 'ns-a', key: 'shared', value: 'a', forever: true });
    expect((await h.one({ op: 'get', ns: 'ns-b', key: 'shared' })).found).toBe(false);
    expect((await h.one({ op: 'getPrefix', ns: 'ns-b', prefix: 'sh' })).rows).toEqual([]);
  });
});

describe('no cache', () => {
  test('a read always sees the table as it is now: a value changed behind the API is read back at once', async () => {
    await h.one({ op: 'put', ns: 'r', key: 'fresh', value: 'v1', forever: true });
    expect((await h.call('GET', '/api/v1/kv/r/fresh')).body.value).toBe('v1');
    await h.db.query(`UPDATE queen.kv SET value = '"v2"' WHERE namespace = 'r' AND key = 'fresh'`);
    expect((await h.call('GET', '/api/v1/kv/r/fresh')).body.value).toBe('v2');
    expect((await h.one({ op: 'getMany', ns: 'r', keys: ['fresh'] })).rows[0].value).toBe('v2');
    await h.db.query(`DELETE FROM queen.kv WHERE namespace = 'r' AND key = 'fresh'`);
    expect((await h.call('GET', '/api/v1/kv/r/fresh')).body.found).toBe(false);
  });
});

describe('getMany', () => {
  test('rows in byte order of key, an explicit missing list, and a null value is a row, not a miss', async () => {
    await fill(h, 'gm', ['b', 'a', 'Z'], (k) => (k === 'a' ? null : { k }));
    const res = await h.one({ op: 'getMany', ns: 'gm', keys: ['b', 'x', 'a', 'Z', 'é'] });
    expect(res.rows.map((r: any) => r.key)).toEqual(['Z', 'a', 'b']);
    expect(res.rows.find((r: any) => r.key === 'a').value).toBeNull();
    expect(res.missing.sort()).toEqual(['x', 'é'].sort());
    for (const row of res.rows) expect(Object.keys(row).sort()).toEqual(['expiresAt', 'key', 'updatedAt', 'value', 'version']);
  });
});

describe('an answer too large to build', () => {
  // Its own cell with roomy statement limits: building 273 MB takes a loaded 2-core machine past the
  // default 5 s and 10 s, and the point here is the 400, not the clock.
  let h: KvHarness;
  beforeAll(async () => {
    h = await startKv({ QUEEN_KV_STATEMENT_TIMEOUT_MS: '120000', QUEEN_DB_STATEMENT_TIMEOUT_MS: '120000' });
  });
  afterAll(() => h?.close());

  test('reads whose answer passes PostgreSQL\'s 256 MiB jsonb array cap are 400 kv_batch_too_large, not a 500', async () => {
    // 4,200 values of 65,000 bytes planted in SQL (nothing that size through HTTP), read back by
    // five getMany of 840 keys: 273 MB in one answer, "total size of jsonb array elements exceeds
    // the maximum", answered 500, on the route and inside the transaction wire alike.
    await h.db.query(
      `INSERT INTO queen.kv (tenant_id, namespace, key, value, version, created_at, updated_at)
       SELECT '00000000-0000-0000-0000-000000000001', 'huge', 'k' || g, to_jsonb(repeat('x', 65000)), nextval('queen.kv_version_seq'), now(), now()
         FROM generate_series(0, 4199) g`,
    );
    const ops = Array.from({ length: 5 }, (_, o) => ({ op: 'getMany', ns: 'huge', keys: Array.from({ length: 840 }, (_, i) => `k${o * 840 + i}`) }));
    expectError(await h.batch(ops), 400, 'kv_batch_too_large');
    expectError(await h.call('POST', '/api/v1/transaction', { kv: ops }), 400, 'kv_batch_too_large');
    // What fits is still read.
    const fits = await h.one({ op: 'getMany', ns: 'huge', keys: ['k0', 'k4199'] });
    expect(fits.rows.map((r: any) => r.value.length)).toEqual([65000, 65000]);
  }, 120_000);
});

describe('getPrefix', () => {
  const KEYS = [
    'p:a', 'p:B', 'p:b', 'p:A', 'p:Z', 'p:z', 'p:0', 'p:_', 'p:~', 'p:é', 'p:ä', 'p:日本', 'p:\uFFFD', 'p:😀', 'p:', 'p:ab', 'p:a b',
  ];

  test('returns UTF-8 byte order (COLLATE "C"), not a locale order and not UTF-16 order', async () => {
    await fill(h, 'bo', [...KEYS, 'p', 'o:z', 'q:a', 'P:a']);
    const res = await prefix(h, 'bo', 'p:');
    const got = res.rows.map((r: any) => r.key);
    expect(got).toEqual(byteOrder(KEYS));
    // Spot checks of what byte order means: uppercase before lowercase, ASCII before everything
    // else, and the 4-byte emoji after U+FFFD (UTF-16 order would put it before).
    expect(got.indexOf('p:Z')).toBeLessThan(got.indexOf('p:a'));
    expect(got.indexOf('p:~')).toBeLessThan(got.indexOf('p:ä'));
    expect(got.indexOf('p:\uFFFD')).toBeLessThan(got.indexOf('p:😀'));
    expect(res.truncated).toBe(false);
    expect(res.nextAfter).toBeNull();
  });

  test('a prefix is a prefix: no sibling, no case-folding, and LIKE wildcards are literal', async () => {
    await fill(h, 'px', ['ab', 'abc', 'ab~', 'abé', 'a', 'ac', 'aB', 'Ab', 'a_c', 'a%c', 'axc']);
    expect((await prefix(h, 'px', 'ab')).rows.map((r: any) => r.key)).toEqual(['ab', 'abc', 'ab~', 'abé']);
    expect((await prefix(h, 'px', 'a_')).rows.map((r: any) => r.key)).toEqual(['a_c']);
    expect((await prefix(h, 'px', 'a%')).rows.map((r: any) => r.key)).toEqual(['a%c']);
  });

  test('a non-ASCII prefix, and one ending in U+10FFFF (no successor character), scan exactly their keys', async () => {
    const top = '\u{10FFFF}';
    await fill(h, 'nx', ['é', 'éa', 'é\u{10FFFF}', 'ê', 'e', `z${top}`, `z${top}${top}`, `z${top}a`, 'z', '{']);
    expect((await prefix(h, 'nx', 'é')).rows.map((r: any) => r.key)).toEqual(['é', 'éa', 'é\u{10FFFF}']);
    expect((await prefix(h, 'nx', `z${top}`)).rows.map((r: any) => r.key)).toEqual(byteOrder([`z${top}`, `z${top}${top}`, `z${top}a`]));
  });

  test('limit defaults to 100', async () => {
    const keys = Array.from({ length: 150 }, (_, i) => `d:${String(i).padStart(3, '0')}`);
    await fill(h, 'lim', keys);
    const res = await prefix(h, 'lim', 'd:');
    expect(res.rows).toHaveLength(100);
    expect(res.truncated).toBe(true);
    expect(res.nextAfter).toBe('d:099');
  });

  test('limit is clamped to QUEEN_KV_PREFIX_LIMIT, never refused', async () => {
    const keys = Array.from({ length: 25 }, (_, i) => `c:${String(i).padStart(2, '0')}`);
    await fill(small, 'clamp', keys);
    for (const limit of [11, 1000, 1e12]) {
      const res = await small.batch([{ op: 'getPrefix', ns: 'clamp', prefix: 'c:', limit }]);
      expect(res.status).toBe(200);
      expect(res.body.results[0].rows).toHaveLength(10);
      expect(res.body.results[0]).toMatchObject({ truncated: true, nextAfter: 'c:09' });
    }
    const fewer = await prefix(small, 'clamp', 'c:', { limit: 3 });
    expect(fewer.rows.map((r: any) => r.key)).toEqual(['c:00', 'c:01', 'c:02']);
    expect(fewer).toMatchObject({ truncated: true, nextAfter: 'c:02' });
    for (const limit of [0, -5]) {
      const res = await small.batch([{ op: 'getPrefix', ns: 'clamp', prefix: 'c:', limit }]);
      expect(res.status).toBe(200);
      expect(res.body.results[0].rows.length).toBeLessThanOrEqual(10);
    }
  });

  test('a page that holds exactly the rest is not truncated', async () => {
    await fill(small, 'exact', Array.from({ length: 10 }, (_, i) => `e${i}`));
    const res = await prefix(small, 'exact', 'e', { limit: 10 });
    expect(res.rows).toHaveLength(10);
    expect(res).toMatchObject({ truncated: false, nextAfter: null });
  });

  test('the byte ceiling stops a page early with truncated: true, and paging on reaches every key', async () => {
    // 10 values of 20,000 bytes: 3 fit under 64 KiB, the 4th would not.
    const keys = Array.from({ length: 10 }, (_, i) => `big${i}`);
    await fill(small, 'bytes', keys, (k) => k.repeat(5000).slice(0, 19998));
    const first = await prefix(small, 'bytes', 'big', { limit: 10 });
    expect(first.rows.length).toBeGreaterThan(0);
    expect(first.rows.length).toBeLessThan(10);
    expect(first.truncated).toBe(true);
    expect(first.nextAfter).toBe(first.rows[first.rows.length - 1].key);
    const bytes = first.rows.reduce((n: number, r: any) => n + Buffer.byteLength(JSON.stringify(r.value)), 0);
    expect(bytes).toBeLessThanOrEqual(65536);
    const seen = first.rows.map((r: any) => r.key);
    let after = first.nextAfter;
    for (let guard = 0; after && guard < 20; guard++) {
      const page = await prefix(small, 'bytes', 'big', { limit: 10, after });
      seen.push(...page.rows.map((r: any) => r.key));
      after = page.truncated ? page.nextAfter : null;
    }
    expect(seen).toEqual(keys);
  });

  test('the default byte ceiling is 4 MiB: 100 values of 64 KiB come back 63 to a page, under the 100-key limit', async () => {
    // Each row counts 65,536 bytes of stored value plus a 4-byte key: 63 rows are 4,129,020 bytes,
    // a 64th would make 4,194,560, past 4,194,304.
    const keys = Array.from({ length: 100 }, (_, i) => `m${String(i).padStart(3, '0')}`);
    for (let i = 0; i < keys.length; i += 10) {
      const res = await h.batch(keys.slice(i, i + 10).map((key) => ({ op: 'put', ns: 'mib', key, value: 'x'.repeat(65534), forever: true })));
      expect(res.status).toBe(200);
    }
    const first = await prefix(h, 'mib', 'm');
    expect(first.rows).toHaveLength(63);
    expect(first).toMatchObject({ truncated: true, nextAfter: 'm062' });
    const second = await prefix(h, 'mib', 'm', { after: first.nextAfter });
    expect(second.rows.map((r: any) => r.key)).toEqual(keys.slice(63));
    expect(second).toMatchObject({ truncated: false, nextAfter: null });
  });

  test('a single value larger than what is left of the ceiling still makes progress, one row per page', async () => {
    // 65,536 bytes of value plus the key is above the 64 KiB ceiling on its own.
    await fill(small, 'huge', ['h:1', 'h:2'], () => 'x'.repeat(65534));
    const first = await prefix(small, 'huge', 'h:');
    expect(first.rows.map((r: any) => r.key)).toEqual(['h:1']);
    expect(first).toMatchObject({ truncated: true, nextAfter: 'h:1' });
    const second = await prefix(small, 'huge', 'h:', { after: 'h:1' });
    expect(second.rows.map((r: any) => r.key)).toEqual(['h:2']);
    expect(second).toMatchObject({ truncated: false, nextAfter: null });
  });

  test('the byte ceiling applies to the whole call, not to each getPrefix of the batch', async () => {
    // Two prefixes of 3 values of 20,000 bytes each: 120 KB in all, against a 64 KiB ceiling.
    const keys = ['x:0', 'x:1', 'x:2', 'y:0', 'y:1', 'y:2'];
    await fill(small, 'call', keys, (k) => k.repeat(7000).slice(0, 19998));
    const res = await small.batch([
      { op: 'getPrefix', ns: 'call', prefix: 'x:' },
      { op: 'getPrefix', ns: 'call', prefix: 'y:' },
    ]);
    expect(res.status).toBe(200);
    const [x, y] = res.body.results;
    const bytes = [...x.rows, ...y.rows].reduce((n: number, r: any) => n + Buffer.byteLength(JSON.stringify(r.value)) + Buffer.byteLength(r.key), 0);
    expect(bytes).toBeLessThanOrEqual(65536);
    expect(x.truncated || y.truncated).toBe(true);
    // A page cut short always says where to resume, even one that got no rows at all.
    for (const page of [x, y]) if (page.truncated) expect(typeof page.nextAfter).toBe('string');
    // Whatever was cut short resumes from its nextAfter and nothing is lost.
    const seen: string[] = [];
    for (const [p, page0] of [['x:', x], ['y:', y]] as const) {
      let page: any = page0;
      seen.push(...page.rows.map((r: any) => r.key));
      for (let guard = 0; page.truncated && guard < 10; guard++) {
        page = await prefix(small, 'call', p, page.nextAfter === null ? {} : { after: page.nextAfter });
        seen.push(...page.rows.map((r: any) => r.key));
      }
    }
    expect(seen).toEqual(keys);
  });

  test('paging through 2,500 keys with after/nextAfter misses none and repeats none; expired rows never appear', async () => {
    const keys = Array.from({ length: 2500 }, (_, i) => `page:${String((i * 7919) % 2500).padStart(4, '0')}:${i % 3 ? 'x' : 'é'}`);
    await fill(h, 'paging', keys);
    for (let i = 0; i < 50; i++) await h.plant('paging', `page:${String(i * 50).padStart(4, '0')}:dead`, 'expired');
    const seen: string[] = [];
    let after: string | null = null;
    let pages = 0;
    do {
      const page: any = await prefix(h, 'paging', 'page:', { limit: 300, ...(after === null ? {} : { after }) });
      seen.push(...page.rows.map((r: any) => r.key));
      after = page.truncated ? page.nextAfter : null;
      if (page.truncated) expect(page.nextAfter).toBe(page.rows[page.rows.length - 1].key);
      pages++;
    } while (after !== null && pages < 50);
    expect(pages).toBe(9);
    expect(seen).toHaveLength(2500);
    expect(new Set(seen).size).toBe(2500);
    expect(seen).toEqual(byteOrder(keys));
    // The default QUEEN_KV_PREFIX_LIMIT is 1000: a larger limit is clamped to it.
    const clamped = await prefix(h, 'paging', 'page:', { limit: 5000 });
    expect(clamped.rows).toHaveLength(1000);
    expect(clamped).toMatchObject({ truncated: true, nextAfter: byteOrder(keys)[999] });
  });

  test('each page is its own snapshot: with after, a key written behind the cursor is not seen, one ahead of it is', async () => {
    await fill(h, 'snap', ['s:b', 's:d', 's:f']);
    const first = await prefix(h, 'snap', 's:', { limit: 2 });
    expect(first.rows.map((r: any) => r.key)).toEqual(['s:b', 's:d']);
    expect(first).toMatchObject({ truncated: true, nextAfter: 's:d' });
    await fill(h, 'snap', ['s:a', 's:c', 's:e']);
    const second = await prefix(h, 'snap', 's:', { limit: 2, after: first.nextAfter });
    expect(second.rows.map((r: any) => r.key)).toEqual(['s:e', 's:f']);
  });

  test('after is exclusive, and a cursor past the last key gives an empty, untruncated page', async () => {
    await fill(h, 'aft', ['k1', 'k2', 'k3']);
    expect((await prefix(h, 'aft', 'k', { after: 'k1' })).rows.map((r: any) => r.key)).toEqual(['k2', 'k3']);
    expect((await prefix(h, 'aft', 'k', { after: 'k15' })).rows.map((r: any) => r.key)).toEqual(['k2', 'k3']);
    expect(await prefix(h, 'aft', 'k', { after: 'k3' })).toMatchObject({ rows: [], truncated: false, nextAfter: null });
  });
});
