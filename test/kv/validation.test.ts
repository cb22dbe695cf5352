// Refusals at the boundary: every 400 code of the KV surface, its index, and the rule that a
// refused call writes nothing. Errors are JSON with a code and a sentence, never HTML or a stack.
import { startKv, KvHarness, expectError } from './harness';

let h: KvHarness;
let tight: KvHarness; // small body ceiling and batch size
beforeAll(async () => {
  [h, tight] = await Promise.all([startKv(), startKv({ QUEEN_MAX_BODY_BYTES: '2048', QUEEN_KV_MAX_BATCH: '5' })]);
});
afterAll(async () => {
  await Promise.all([h?.close(), tight?.close()]);
});

const put = (extra: Record<string, unknown> = {}) => ({ op: 'put', ns: 'v', key: 'k', value: 1, ttlSeconds: 60, ...extra });

describe('the body', () => {
  test('malformed JSON is 400 invalid_json with a JSON body', async () => {
    const res = await h.call('POST', '/api/v1/kv', '{"operations": [');
    expectError(res, 400, 'invalid_json');
  });

  test.each([
    ['missing', {}],
    ['empty', { operations: [] }],
    ['not an array', { operations: { op: 'get' } }],
    ['null', { operations: null }],
  ])('operations %s is 400 kv_operations_required, with no index (it is about the whole call)', async (_name, body) => {
    const res = await h.call('POST', '/api/v1/kv', body);
    expectError(res, 400, 'kv_operations_required');
    expect(res.body).not.toHaveProperty('index');
  });

  test('a JSON value PostgreSQL cannot hold (lone surrogate) is a 400, not a 500', async () => {
    const res = await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"put","ns":"v","key":"s","value":"\\ud800","forever":true}]}');
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_json');
  });

  test('a body that is not UTF-8 is 400 invalid_json, not stored with U+FFFD in place of its bytes', async () => {
    // "café" in Latin-1 without a charset: the é byte (0xE9) was decoded as U+FFFD and stored, in the
    // key and the value alike, on every body-reading route.
    const latin1 = (text: string) => Buffer.from(text, 'latin1');
    const send = (method: string, path: string, body: Buffer, contentType = 'application/json') =>
      fetch(h.url + path, { method, headers: { 'content-type': contentType }, body }).then(async (r) => ({ status: r.status, body: (await r.json()) as any }));
    for (const [method, path, body] of [
      ['POST', '/api/v1/kv', '{"operations":[{"op":"put","ns":"v","key":"caf\xe9","value":"caf\xe9","forever":true}]}'],
      ['PUT', '/api/v1/kv/v/cafe', '{"value":"caf\xe9","forever":true}'],
      ['POST', '/api/v1/transaction', '{"kv":[{"op":"put","ns":"v","key":"cafe","value":"caf\xe9","forever":true}]}'],
      ['POST', '/api/v1/push', '{"items":[{"queue":"latin","payload":"caf\xe9"}]}'],
      ['POST', '/api/v1/timers', '{"queue":"latin","payload":"caf\xe9","delaySeconds":60}'],
    ] as const) {
      const res = await send(method, path, latin1(body));
      expect({ path, status: res.status, error: res.body.error }).toEqual({ path, status: 400, error: 'invalid_json' });
    }
    expect(await h.count('v')).toBe(0);
    // Declared, Latin-1 is decoded from it; and UTF-8 is UTF-8.
    const declared = await send('PUT', '/api/v1/kv/v/cafe', latin1('{"value":"caf\xe9","forever":true}'), 'application/json; charset=latin1');
    expect([declared.status, declared.body.value]).toEqual([200, 'café']);
    const utf8 = await send('PUT', '/api/v1/kv/v/cafe', Buffer.from('{"value":"café ✓","forever":true}', 'utf8'));
    expect([utf8.status, utf8.body.value]).toEqual([200, 'café ✓']);
    // A charset the cell cannot decode is the media type's fault, and says so by its own code.
    for (const path of ['/api/v1/kv/v/cafe', '/api/v1/timers']) {
      const unknown = await send(path === '/api/v1/timers' ? 'POST' : 'PUT', path, Buffer.from('{}'), 'application/json; charset=x-unknown');
      expect({ path, status: unknown.status, error: unknown.body.error }).toEqual({ path, status: 415, error: 'unsupported_media_type' });
    }
  });

  test('a number beyond numeric range is a 400, not a 500', async () => {
    const res = await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"put","ns":"v","key":"big","value":1e999999,"forever":true}]}');
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await h.row('v', 'big')).toBeNull();
  });

  test('a value nested deeper than PostgreSQL parses is a 4xx JSON answer, never a 500', async () => {
    const depth = 100_000;
    const body = `{"operations":[{"op":"put","ns":"v","key":"deep","value":${'['.repeat(depth)}${']'.repeat(depth)},"forever":true}]}`;
    const res = await h.call('POST', '/api/v1/kv', body);
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(res.status).toBeLessThan(500);
    expect(typeof res.body.error).toBe('string');
    expect(await h.row('v', 'deep')).toBeNull();
  });

  test('a body over the ceiling is 413 payload_too_large with a JSON body', async () => {
    const res = await tight.batch([put({ value: 'x'.repeat(3000) })]);
    expectError(res, 413, 'payload_too_large');
    expect(await tight.row('v', 'k')).toBeNull();
  });

  test('a batch over QUEEN_KV_MAX_BATCH is 400 kv_batch_too_large; exactly the maximum is served', async () => {
    const ops = (n: number) => Array.from({ length: n }, (_, i) => ({ op: 'get', ns: 'v', key: `b${i}` }));
    expectError(await tight.batch(ops(6)), 400, 'kv_batch_too_large');
    const ok = await tight.batch(ops(5));
    expect(ok.status).toBe(200);
    expect(ok.body.results).toHaveLength(5);
  });

  test('getMany reads at most QUEEN_KV_MAX_BATCH keys', async () => {
    expectError(await tight.batch([{ op: 'getMany', ns: 'v', keys: ['1', '2', '3', '4', '5', '6'] }]), 400, 'kv_batch_too_large', 0);
    expect((await tight.batch([{ op: 'getMany', ns: 'v', keys: ['1', '2', '3', '4', '5'] }])).status).toBe(200);
  });

  test('the default QUEEN_KV_MAX_BATCH is 1000', async () => {
    const ops = Array.from({ length: 1001 }, (_, i) => ({ op: 'get', ns: 'v', key: `d${i}` }));
    expectError(await h.batch(ops), 400, 'kv_batch_too_large');
  });
});

describe('routing', () => {
  test('an unknown route is 404 not_found with a JSON body', async () => {
    expectError(await h.call('GET', '/api/v1/nothing-here'), 404, 'not_found');
    expectError(await h.call('POST', '/nope', { a: 1 }), 404, 'not_found');
  });

  test('incr has no path route: POST on a key path is 404 and writes nothing', async () => {
    expectError(await h.call('POST', '/api/v1/kv/quota/acme', { delta: 1, ttlSeconds: 60 }), 404, 'not_found');
    expect(await h.row('quota', 'acme')).toBeNull();
  });
});

describe('each operation', () => {
  test('an unknown op is 400 kv_unknown_op with its index', async () => {
    expectError(await h.batch([{ op: 'get', ns: 'v', key: 'a' }, { op: 'merge', ns: 'v', key: 'b' }]), 400, 'kv_unknown_op', 1);
    expectError(await h.batch([{ ns: 'v', key: 'b' }]), 400, 'kv_unknown_op', 0);
    expectError(await h.batch(['get']), 400, 'kv_unknown_op', 0);
  });

  test.each([
    ['missing', undefined],
    ['null', null],
    ['empty', ''],
  ])('ns %s is 400 kv_ns_required', async (_name, ns) => {
    expectError(await h.batch([{ op: 'get', ns, key: 'a' }]), 400, 'kv_ns_required', 0);
  });

  test.each(['a', 'Z', '0', '_', 'orders', 'quota.v2:acme-1_x', 'A'.repeat(128)])('namespace %p is accepted', async (ns) => {
    const res = await h.batch([{ op: 'get', ns, key: 'a' }]);
    expect(res.status).toBe(200);
    expect(res.body.results[0].found).toBe(false);
  });

  test.each([['.a'], [':a'], ['-a'], ['a b'], ['a/b'], ['café'], ['a*'], ['a\n'], ['\na'], ['A'.repeat(129)], [5], [['a']]])(
    'namespace %p is 400 kv_invalid_namespace',
    async (ns) => {
      expectError(await h.batch([{ op: 'get', ns: 'v', key: 'x' }, { op: 'put', ns, key: 'a', value: 1, forever: true }]), 400, 'kv_invalid_namespace', 1);
    },
  );

  test('a key missing or empty is 400 kv_key_required; a non-string key is kv_invalid_key', async () => {
    expectError(await h.batch([{ op: 'get', ns: 'v' }]), 400, 'kv_key_required', 0);
    expectError(await h.batch([put({ key: '' })]), 400, 'kv_key_required', 0);
    expectError(await h.batch([{ op: 'getMany', ns: 'v', keys: [] }]), 400, 'kv_key_required', 0);
    expectError(await h.batch([put({ key: 17 })]), 400, 'kv_invalid_key', 0);
  });

  test('a key containing U+0000 is 400 kv_invalid_key', async () => {
    const res = await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"put","ns":"v","key":"a\\u0000b","value":1,"forever":true}]}');
    expectError(res, 400, 'kv_invalid_key', 0);
  });

  test('a namespace containing U+0000 is 400 kv_invalid_namespace, not invalid_json', async () => {
    const res = await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"get","ns":"v","key":"x"},{"op":"put","ns":"v\\u0000","key":"k","value":1,"forever":true}]}');
    expectError(res, 400, 'kv_invalid_namespace', 1);
  });

  test.each([
    ['512 ASCII bytes', 'k'.repeat(512), true],
    ['513 ASCII bytes', 'k'.repeat(513), false],
    ['256 two-byte characters (512 bytes)', 'é'.repeat(256), true],
    ['257 two-byte characters (514 bytes)', 'é'.repeat(257), false],
    ['170 three-byte characters and 2 ASCII (512 bytes)', '日'.repeat(170) + 'ab', true],
    ['171 three-byte characters (513 bytes)', '日'.repeat(171), false],
    ['128 four-byte characters (512 bytes)', '😀'.repeat(128), true],
    ['129 four-byte characters (516 bytes, 258 UTF-16 units)', '😀'.repeat(129), false],
  ])('a key of %s: accepted %p', async (_name, key, ok) => {
    const res = await h.batch([put({ ns: 'keys', key, value: key.length })]);
    if (ok) {
      expect(res.status).toBe(200);
      expect(res.body.results[0].applied).toBe(true);
      expect((await h.row('keys', key))?.key).toBe(key);
    } else {
      expectError(res, 400, 'kv_key_too_long', 0);
      expect(await h.row('keys', key)).toBeNull();
    }
  });

  test('a string value of 65,534 ASCII characters fits (65,536 bytes stored); 65,535 is 400 kv_value_too_large', async () => {
    const fits = await h.batch([put({ key: 'big', value: 'x'.repeat(65534) })]);
    expect(fits.status).toBe(200);
    expect(fits.body.results[0].applied).toBe(true);
    const stored = await h.db.query(`SELECT octet_length(value::text) AS n FROM queen.kv WHERE namespace = 'v' AND key = 'big'`);
    expect(stored.rows[0].n).toBe(65536);
    expectError(await h.batch([put({ key: 'big2', value: 'x'.repeat(65535) })]), 400, 'kv_value_too_large', 0);
    expect(await h.row('v', 'big2')).toBeNull();
  });

  test('the size limit counts stored bytes, so a multi-byte value hits it sooner', async () => {
    // 32,767 two-byte characters are 65,534 bytes of UTF-8, plus the quotes: 65,536.
    expect((await h.batch([put({ key: 'mb1', value: 'é'.repeat(32767) })])).status).toBe(200);
    expectError(await h.batch([put({ key: 'mb2', value: 'é'.repeat(32768) })]), 400, 'kv_value_too_large', 0);
  });

  test('put without value is a 400 (null must be written out)', async () => {
    expectError(await h.batch([{ op: 'put', ns: 'v', key: 'nv', forever: true }]), 400, 'kv_value_required', 0);
  });

  test.each(['put', 'putIfAbsent', 'incr'])('%s with neither ttlSeconds nor forever is 400 kv_expiry_not_specified', async (op) => {
    const base: Record<string, unknown> = { op, ns: 'v', key: `e-${op}` };
    if (op !== 'incr') base.value = 1;
    expectError(await h.batch([base]), 400, 'kv_expiry_not_specified', 0);
    expectError(await h.batch([{ ...base, forever: false }]), 400, 'kv_expiry_not_specified', 0);
    expectError(await h.batch([{ ...base, ttlSeconds: 60, forever: true }]), 400, 'kv_expiry_not_specified', 0);
    expect(await h.row('v', `e-${op}`)).toBeNull();
  });

  test.each([[0], [-5], [1.5], ['60'], [true]])('ttlSeconds %p is 400 kv_invalid_ttl', async (ttl) => {
    expectError(await h.batch([put({ ttlSeconds: ttl })]), 400, 'kv_invalid_ttl', 0);
  });

  test('incr: a non-number delta is kv_invalid_delta; min above max, or a non-number bound, is kv_invalid_limit_bounds', async () => {
    const incr = { op: 'incr', ns: 'v', key: 'c', ttlSeconds: 60 };
    expectError(await h.batch([{ ...incr, delta: '1' }]), 400, 'kv_invalid_delta', 0);
    expectError(await h.batch([{ ...incr, delta: null }]), 400, 'kv_invalid_delta', 0);
    expectError(await h.batch([{ ...incr, min: 10, max: 5 }]), 400, 'kv_invalid_limit_bounds', 0);
    expectError(await h.batch([{ ...incr, max: 'ten' }]), 400, 'kv_invalid_limit_bounds', 0);
    expect(await h.row('v', 'c')).toBeNull();
  });

  test('getPrefix without a prefix, or with an empty one, is 400 kv_prefix_required', async () => {
    expectError(await h.batch([{ op: 'getPrefix', ns: 'v' }]), 400, 'kv_prefix_required', 0);
    expectError(await h.batch([{ op: 'getPrefix', ns: 'v', prefix: '' }]), 400, 'kv_prefix_required', 0);
  });
});

describe('the batch', () => {
  test('a key touched twice is 400 kv_duplicate_key at the second touch', async () => {
    expectError(await h.batch([put({ key: 'a' }), { op: 'get', ns: 'v', key: 'b' }, { op: 'get', ns: 'v', key: 'a' }]), 400, 'kv_duplicate_key', 2);
    expectError(await h.batch([{ op: 'getMany', ns: 'v', keys: ['x', 'y'] }, { op: 'delete', ns: 'v', key: 'y' }]), 400, 'kv_duplicate_key', 1);
    expectError(await h.batch([{ op: 'getMany', ns: 'v', keys: ['x', 'x'] }]), 400, 'kv_duplicate_key', 0);
    expect(await h.row('v', 'a')).toBeNull();
  });

  test('the same key in two namespaces is two keys, not a duplicate', async () => {
    const res = await h.batch([put({ ns: 'n1', key: 'same' }), put({ ns: 'n2', key: 'same' })]);
    expect(res.status).toBe(200);
    expect(res.body.results.map((r: any) => r.applied)).toEqual([true, true]);
  });

  test('the first bad operation decides the answer, and a refused batch writes nothing', async () => {
    const res = await h.batch([put({ key: 'w1' }), put({ key: 'w2', ttlSeconds: 0 }), { op: 'nope' }]);
    expectError(res, 400, 'kv_invalid_ttl', 1);
    expect(await h.row('v', 'w1')).toBeNull();
  });

  test('expect written with a fraction part (1.0, 0.0: what many encoders emit for a float) is the whole number it equals', async () => {
    // It passed the whole-number check and then failed the ::bigint cast: 400 invalid_json.
    const first = await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"put","ns":"v","key":"e1","value":1,"forever":true,"expect":0.0}]}');
    expect(first.status).toBe(200);
    expect(first.body.results[0]).toMatchObject({ applied: true });
    const version = first.body.results[0].version;
    const stale = await h.call('POST', '/api/v1/kv', `{"operations":[{"op":"put","ns":"v","key":"e1","value":2,"forever":true,"expect":${version + 1}.0}]}`);
    expect(stale.status).toBe(200);
    expect(stale.body.results[0]).toMatchObject({ applied: false, reason: 'version', value: 1 });
    const fenced = await h.call('PUT', '/api/v1/kv/v/e1', `{"value":3,"forever":true,"expect":${version}.00}`);
    expect(fenced.status).toBe(200);
    expect(fenced.body).toMatchObject({ applied: true, value: 3 });
    const gone = await h.call('DELETE', '/api/v1/kv/v/e1', `{"expect":${fenced.body.version}.0}`);
    expect(gone.status).toBe(200);
    expect(gone.body).toMatchObject({ applied: true });
    expectError(await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"put","ns":"v","key":"e1","value":1,"forever":true,"expect":1.5}]}'), 400, 'kv_expect_invalid', 0);
  });

  test('expect present but null is 400 kv_expect_invalid, never a downgrade to an upsert', async () => {
    expectError(await h.batch([put({ key: 'en', expect: null })]), 400, 'kv_expect_invalid', 0);
    expectError(await h.batch([{ op: 'delete', ns: 'v', key: 'en', expect: null }]), 400, 'kv_expect_invalid', 0);
    expect(await h.row('v', 'en')).toBeNull();
  });
});

describe('fields an operation does not take', () => {
  test.each([['expct'], ['Expect'], ['expected'], ['ifVersion']])(
    'a put whose fence is misspelled (%s) is 400 kv_invalid_field, never an unconditional write',
    async (typo) => {
      await h.batch([put({ key: 'fenced', value: 'first' })]);
      const res = await h.batch([{ op: 'get', ns: 'v', key: 'x' }, put({ key: 'fenced', value: 'second', [typo]: 99 })]);
      expectError(res, 400, 'kv_invalid_field', 1);
      expect(res.body.message).toContain(typo);
      expect(res.body.message).toMatch(/Its fields are op, ns, key, value, ttlSeconds, forever, expect, required\./);
      expect((await h.row('v', 'fenced'))?.value).toBe('first');
    },
  );

  test('a misspelled required on a delete is refused: nothing is deleted', async () => {
    await h.batch([put({ key: 'kept' })]);
    expectError(await h.batch([{ op: 'delete', ns: 'v', key: 'kept', requierd: true }]), 400, 'kv_invalid_field', 0);
    expect(await h.row('v', 'kept')).not.toBeNull();
  });

  test.each([
    [{ op: 'get', ns: 'v', key: 'k', ttlSeconds: 60 }, 'ttlSeconds'],
    [{ op: 'getMany', ns: 'v', keys: ['k'], limit: 5 }, 'limit'],
    [{ op: 'getPrefix', ns: 'v', prefix: 'k', key: 'k' }, 'key'],
    [{ op: 'delete', ns: 'v', key: 'k', value: 1 }, 'value'],
    [{ op: 'incr', ns: 'v', key: 'c', forever: true, step: 2 }, 'step'],
    [{ op: 'putIfAbsent', ns: 'v', key: 'n', value: 1, forever: true, ttl: 60 }, 'ttl'],
  ])('%j: a field another op takes, or none does, is 400 kv_invalid_field naming it', async (op, field) => {
    const res = await h.batch([op]);
    expectError(res, 400, 'kv_invalid_field', 0);
    expect(res.body.message).toContain(`does not take: ${field}.`);
  });

  test('the path routes refuse the same way: a PUT body with a misspelled fence writes nothing', async () => {
    const res = await h.call('PUT', '/api/v1/kv/v/path-fenced', { value: 1, forever: true, expct: 3 });
    expectError(res, 400, 'kv_invalid_field');
    expect(await h.row('v', 'path-fenced')).toBeNull();
    expectError(await h.call('DELETE', '/api/v1/kv/v/path-fenced', { Expect: 3 }), 400, 'kv_invalid_field');
  });

  test('the fields that keep their own, more specific refusal still get it', async () => {
    expectError(await h.batch([{ op: 'get', ns: 'v', key: 'k', required: true }]), 400, 'kv_invalid_field', 0);
    expectError(await h.batch([{ op: 'putIfAbsent', ns: 'v', key: 'k', value: 1, forever: true, expect: 0 }]), 400, 'kv_expect_invalid', 0);
    expectError(await h.batch([{ op: 'incr', ns: 'v', key: 'k', forever: true, expect: 1 }]), 400, 'kv_expect_invalid', 0);
    expectError(await h.batch([{ op: 'incr', ns: 'v', key: 'k', forever: true, value: 1 }]), 400, 'kv_invalid_field', 0);
  });
});
