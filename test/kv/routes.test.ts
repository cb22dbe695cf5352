// The path routes (GET/PUT/DELETE /api/v1/kv/:ns/*key) and the curl examples a user types, exactly
// as docs/kv.md and the README write them. Status describes the call, never the business verdict.
import net from 'node:net';
import { startKv, KvHarness, expectError, secondsFromNow } from './harness';
import { request } from '../support/http';

let h: KvHarness;
beforeAll(async () => {
  h = await startKv();
});
afterAll(() => h?.close());

const json = { 'content-type': 'application/json' };

describe('the documented curl examples', () => {
  test('a batch that reserves an idempotency marker and reads two counters', async () => {
    const body = '{"operations":[{"op":"putIfAbsent","ns":"orders","key":"ord_8812","value":{"chargeId":"ch_8812"},"ttlSeconds":604800},{"op":"getMany","ns":"quota","keys":["acme:reads","acme:writes"]}]}';
    const res = await h.call('POST', '/api/v1/kv', body, json);
    expect(res.status).toBe(200);
    expect(res.body.ok).toBe(true);
    const [marker, counters] = res.body.results;
    expect(marker).toMatchObject({ index: 0, op: 'putIfAbsent', key: 'ord_8812', applied: true, found: true, value: { chargeId: 'ch_8812' } });
    expect(typeof marker.version).toBe('number');
    expect(secondsFromNow(marker.expiresAt)).toBeGreaterThan(604800 - 60);
    expect(counters).toEqual({ index: 1, op: 'getMany', rows: [], missing: ['acme:reads', 'acme:writes'] });
    // Sent again, it is a lost race: 200, applied false, the winner's value and version.
    const again = await h.call('POST', '/api/v1/kv', body, json);
    expect(again.status).toBe(200);
    expect(again.body.results[0]).toMatchObject({ applied: false, reason: 'exists', value: { chargeId: 'ch_8812' }, version: marker.version });
  });

  test('a conditional write through the path route, and an unconditional delete', async () => {
    const current = await h.one({ op: 'get', ns: 'orders', key: 'ord_8812' });
    expect(current.found).toBe(true);
    // expect: 90101 names a version this key does not have: 200, applied false, reason version.
    const put = await h.call('PUT', '/api/v1/kv/orders/ord_8812', '{"value":{"state":"shipped"},"ttlSeconds":604800,"expect":90101}', json);
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ ok: true, op: 'put', key: 'ord_8812', applied: false, reason: 'version', value: { chargeId: 'ch_8812' }, version: current.version });
    // With the version it holds, the same write applies.
    const fenced = await h.call('PUT', '/api/v1/kv/orders/ord_8812', { value: { state: 'shipped' }, ttlSeconds: 604800, expect: current.version });
    expect(fenced.body).toMatchObject({ ok: true, applied: true, value: { state: 'shipped' } });
    const del = await h.call('DELETE', '/api/v1/kv/orders/ord_8812');
    expect(del.status).toBe(200);
    expect(del.body).toMatchObject({ ok: true, op: 'delete', applied: true, found: false });
    const gone = await h.call('DELETE', '/api/v1/kv/orders/ord_8812');
    expect(gone.status).toBe(200);
    expect(gone.body).toMatchObject({ applied: false, reason: 'absent' });
  });

  test('a rate limiter in one call', async () => {
    const body = '{"operations":[{"op":"incr","ns":"quota","key":"acme:2026-08-17T14","delta":1,"max":1000,"ttlSeconds":3600}]}';
    const first = await h.call('POST', '/api/v1/kv', body, json);
    expect(first.status).toBe(200);
    expect(first.body.results[0]).toMatchObject({ index: 0, op: 'incr', applied: true, value: 1 });
    expect(secondsFromNow(first.body.results[0].expiresAt)).toBeGreaterThan(3590);
    const second = await h.call('POST', '/api/v1/kv', body, json);
    expect(second.body.results[0]).toMatchObject({ applied: true, value: 2, expiresAt: first.body.results[0].expiresAt });
  });
});

describe('GET', () => {
  test('found: the datum and ETag: "<version>"; absent: found false, 200, no ETag', async () => {
    const put = await h.one({ op: 'put', ns: 'g', key: 'k', value: { a: 1 }, forever: true });
    const res = await h.call('GET', '/api/v1/kv/g/k');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      ok: true, index: 0, op: 'get', found: true, key: 'k', value: { a: 1 }, version: put.version, expiresAt: null, updatedAt: put.updatedAt,
    });
    expect(res.headers.get('etag')).toBe(`"${put.version}"`);
    const absent = await h.call('GET', '/api/v1/kv/g/nope');
    expect(absent.status).toBe(200);
    expect(absent.body).toMatchObject({ found: false, key: 'nope' });
    expect(absent.headers.get('etag')).toBeNull();
  });

  test('If-None-Match with the current ETag is a 304 with no body; an older one, or no-cache, reads the datum', async () => {
    const first = await h.one({ op: 'put', ns: 'g', key: 'etag', value: 1, forever: true });
    const second = await h.one({ op: 'put', ns: 'g', key: 'etag', value: 2, forever: true });
    // Raw requests: through fetch (undici) the same call came back 200 with the body.
    const get = (headers: Record<string, string>) => request(h.url, 'GET', '/api/v1/kv/g/etag', { headers });
    const same = await get({ 'if-none-match': `"${second.version}"` });
    expect(same.status).toBe(304);
    expect(same.body).toBeUndefined();
    expect(same.headers.get('etag')).toBe(`"${second.version}"`);
    const listed = await get({ 'if-none-match': `"1", W/"${second.version}"` });
    expect(listed.status).toBe(304);
    const stale = await get({ 'if-none-match': `"${first.version}"` });
    expect(stale.status).toBe(200);
    expect(stale.body).toMatchObject({ found: true, value: 2 });
    const noCache = await get({ 'if-none-match': `"${second.version}"`, 'cache-control': 'no-cache' });
    expect(noCache.status).toBe(200);
    // An absent key has no ETag to match: If-None-Match: * does not turn "not found" into a 304.
    const absent = await request(h.url, 'GET', '/api/v1/kv/g/etag-absent', { headers: { 'if-none-match': '*' } });
    expect(absent.status).toBe(200);
    expect(absent.body).toMatchObject({ found: false });
  });

  test('a stored null is found, with an ETag', async () => {
    const put = await h.one({ op: 'put', ns: 'g', key: 'null', value: null, forever: true });
    const res = await h.call('GET', '/api/v1/kv/g/null');
    expect(res.body).toMatchObject({ found: true, value: null });
    expect(res.headers.get('etag')).toBe(`"${put.version}"`);
  });
});

describe('the catch-all key', () => {
  test('/ in the path and %2F address the same key, which the batch route names with a literal slash', async () => {
    const put = await h.call('PUT', '/api/v1/kv/orders/order/9f1/items', { value: [1, 2], forever: true });
    expect(put.body).toMatchObject({ applied: true, key: 'order/9f1/items' });
    const encoded = await h.call('GET', '/api/v1/kv/orders/order%2F9f1%2Fitems');
    expect(encoded.body).toMatchObject({ found: true, key: 'order/9f1/items', value: [1, 2], version: put.body.version });
    const batch = await h.one({ op: 'get', ns: 'orders', key: 'order/9f1/items' });
    expect(batch.version).toBe(put.body.version);
    const del = await h.call('DELETE', '/api/v1/kv/orders/order%2F9f1/items');
    expect(del.body.applied).toBe(true);
    expect(await h.row('orders', 'order/9f1/items')).toBeNull();
  });

  test('percent-encoded UTF-8, spaces and reserved characters decode into the key', async () => {
    const res = await h.call('PUT', '/api/v1/kv/g/caf%C3%A9%20au%20lait%3Fx%23y', { value: 1, forever: true });
    expect(res.status).toBe(200);
    expect(res.body.key).toBe('café au lait?x#y');
    expect((await h.one({ op: 'get', ns: 'g', key: 'café au lait?x#y' })).found).toBe(true);
  });

  test('a namespace with no key is 400 kv_key_required', async () => {
    expectError(await h.call('GET', '/api/v1/kv/orders'), 400, 'kv_key_required');
    expectError(await h.call('GET', '/api/v1/kv/orders/'), 400, 'kv_key_required');
    expectError(await h.call('PUT', '/api/v1/kv/orders/', { value: 1, forever: true }), 400, 'kv_key_required');
    expectError(await h.call('DELETE', '/api/v1/kv/orders'), 400, 'kv_key_required');
  });

  test('the path is held to the same rules: namespace charset and key length', async () => {
    expectError(await h.call('GET', '/api/v1/kv/bad%20ns/k'), 400, 'kv_invalid_namespace');
    expectError(await h.call('GET', `/api/v1/kv/g/${'k'.repeat(513)}`), 400, 'kv_key_too_long');
    expectError(await h.call('GET', `/api/v1/kv/g/${'%C3%A9'.repeat(257)}`), 400, 'kv_key_too_long');
    expect((await h.call('GET', `/api/v1/kv/g/${'%C3%A9'.repeat(256)}`)).status).toBe(200);
  });
});

describe('odd paths', () => {
  test('a malformed percent-encoding is a 4xx JSON answer, never a 500', async () => {
    const res = await request(h.url, 'GET', '/api/v1/kv/g/%E0%A4%A');
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(res.status).toBeLessThan(500);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(typeof res.body.error).toBe('string');
    const bad = await request(h.url, 'PUT', '/api/v1/kv/g/%FF', { body: '{"value":1,"forever":true}' });
    expect(bad.status).toBeGreaterThanOrEqual(400);
    expect(bad.status).toBeLessThan(500);
    expect(typeof bad.body.error).toBe('string');
  });

  test('a malformed percent-encoding in the namespace is 400 bad_request', async () => {
    expectError(await request(h.url, 'GET', '/api/v1/kv/%E0%A4%A/k'), 400, 'bad_request');
  });

  test('paths match case-sensitively, and a method a path does not take is 404 not_found JSON', async () => {
    await h.one({ op: 'put', ns: 'g', key: 'case', value: 1, forever: true });
    expectError(await h.call('GET', '/API/V1/KV/g/case'), 404, 'not_found');
    expectError(await h.call('POST', '/api/v1/kv/g/case', { value: 2, forever: true }), 404, 'not_found');
    expectError(await h.call('PATCH', '/api/v1/kv/g/case', { value: 2, forever: true }), 404, 'not_found');
    expectError(await h.call('GET', '/api/v1/kv'), 404, 'not_found');
    expectError(await h.call('GET', '/api/v1/kv//case'), 404, 'not_found');
    expectError(await h.call('GET', '/api/v1/kvx/g/case'), 404, 'not_found');
    expect((await h.row('g', 'case'))?.value).toBe(1);
  });

  test('HEAD on a key answers the GET headers with no body', async () => {
    const put = await h.one({ op: 'put', ns: 'g', key: 'head', value: { a: 1 }, forever: true });
    const res = await request(h.url, 'HEAD', '/api/v1/kv/g/head');
    expect(res.status).toBe(200);
    expect(res.text).toBe('');
    expect(res.headers.get('etag')).toBe(`"${put.version}"`);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  });

  test('POST /api/v1/kv/ (a trailing slash) is the batch route', async () => {
    const res = await h.call('POST', '/api/v1/kv/', { operations: [{ op: 'get', ns: 'g', key: 'head' }] });
    expect(res.status).toBe(200);
    expect(res.body.results[0]).toMatchObject({ op: 'get', found: true });
  });

  test('%00 in a path key is 400 kv_invalid_key', async () => {
    expectError(await h.call('PUT', '/api/v1/kv/g/a%00b', { value: 1, forever: true }), 400, 'kv_invalid_key');
    expectError(await h.call('GET', '/api/v1/kv/g/a%00b'), 400, 'kv_invalid_key');
  });

  test('%00 in a path namespace is 400 kv_invalid_namespace (it was invalid_json, from the failed bind)', async () => {
    expectError(await h.call('GET', '/api/v1/kv/g%00/k'), 400, 'kv_invalid_namespace');
    expectError(await h.call('PUT', '/api/v1/kv/g%00/k', { value: 1, forever: true }), 400, 'kv_invalid_namespace');
    expectError(await h.call('DELETE', '/api/v1/kv/%00/k'), 400, 'kv_invalid_namespace');
  });

  test('a URL past node\'s header limit is 431 with a JSON body, not an empty one', async () => {
    const res = await request(h.url, 'GET', `/api/v1/kv/g/${'k'.repeat(20_000)}`);
    expectError(res, 431, 'headers_too_large');
    // The server still answers on a new connection.
    expect((await h.call('GET', '/api/v1/kv/g/head')).status).toBe(200);
  });

  /** Bytes written on a fresh socket, and everything the server sent until it closed the connection. */
  function rawExchange(bytes: string): Promise<string> {
    const { port } = new URL(h.url);
    return new Promise<string>((resolve, reject) => {
      const socket = net.connect(Number(port), '127.0.0.1', () => socket.write(Buffer.from(bytes, 'latin1')));
      let text = '';
      socket.on('data', (d) => (text += d.toString('utf8')));
      socket.on('end', () => resolve(text));
      socket.on('error', reject);
    });
  }

  /** The one answer of a raw exchange: its status line must be `status`, its body JSON with this code. */
  function expectRawError(answer: string, status: number, code: string): { error: string; message: string } {
    expect(answer).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
    expect(answer).toMatch(/\r\nContent-Type: application\/json/i);
    const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));
    expect(body).toMatchObject({ error: code, message: expect.any(String) });
    return body;
  }

  test('a request node cannot parse (a raw non-ASCII byte in the path) is 400 with a JSON body', async () => {
    expectRawError(await rawExchange('GET /api/v1/kv/g/\xe9 HTTP/1.1\r\nHost: x\r\n\r\n'), 400, 'bad_request');
  });

  test('an HTTP/1.1 request without Host is 400 bad_request with a JSON body (node alone sends an empty one)', async () => {
    const raw = await rawExchange('GET /api/v1/kv/g/head HTTP/1.1\r\n\r\n');
    expect(expectRawError(raw, 400, 'bad_request').message).toMatch(/Host/);
    // HTTP/1.0 has no Host requirement: the same read is answered.
    expect(await rawExchange('GET /api/v1/kv/g/head HTTP/1.0\r\n\r\n')).toMatch(/^HTTP\/1\.1 200 /);
  });

  test('a request line in absolute form is served as its path (RFC 9112, section 3.2.2): the KV routes, push, Express\'s routes and the probes alike', async () => {
    const put = '{"value":{"abs":1},"forever":true}';
    const wrote = await rawExchange(`PUT http://cell.example/api/v1/kv/g/absolute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${put.length}\r\nConnection: close\r\n\r\n${put}`);
    expect(wrote).toMatch(/^HTTP\/1\.1 200 /);
    const read = await rawExchange('GET http://cell.example/api/v1/kv/g/absolute HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect(read).toMatch(/^HTTP\/1\.1 200 /);
    expect(JSON.parse(read.slice(read.indexOf('\r\n\r\n') + 4))).toMatchObject({ value: { abs: 1 } });
    expect(await rawExchange('HEAD HTTP://cell.example/api/v1/kv/g/absolute HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')).toMatch(/^HTTP\/1\.1 200 /);
    const push = '{"items":[{"queue":"absolute","payload":1}]}';
    expect(await rawExchange(`POST http://cell.example/api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${push.length}\r\nConnection: close\r\n\r\n${push}`)).toMatch(/^HTTP\/1\.1 201 /);
    expect(await rawExchange('GET http://cell.example/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')).toMatch(/^HTTP\/1\.1 200 /);
    expect(await rawExchange('GET http://cell.example?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')).toMatch(/^HTTP\/1\.1 404 /);
  });

  test('an Expect other than 100-continue is 417 expectation_failed JSON, and the write does not happen', async () => {
    const body = '{"value":1,"forever":true}';
    const head = `PUT /api/v1/kv/g/expect-header HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n`;
    expectRawError(await rawExchange(`${head}Expect: 200-ok\r\n\r\n${body}`), 417, 'expectation_failed');
    expect(await h.row('g', 'expect-header')).toBeNull();
    // 100-continue is still honoured: the interim 100, then the write's answer.
    const raw = await rawExchange(`${head}Expect: 100-continue\r\nConnection: close\r\n\r\n${body}`);
    expect(raw).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
    expect((await h.row('g', 'expect-header'))?.value).toBe(1);
  });

  test('CONNECT is 400 bad_request JSON (node alone closes the socket without a word)', async () => {
    const body = expectRawError(await rawExchange('CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n'), 400, 'bad_request');
    expect(body.message).toMatch(/CONNECT/);
  });

  test('a trailing slash is part of the key: a/ and a are two keys', async () => {
    await h.call('PUT', '/api/v1/kv/g/slash', { value: 'plain', forever: true });
    const res = await h.call('PUT', '/api/v1/kv/g/slash/', { value: 'trailing', forever: true });
    expect(res.status).toBe(200);
    expect(res.body.key).toBe('slash/');
    expect((await h.row('g', 'slash'))?.value).toBe('plain');
    expect((await h.row('g', 'slash/'))?.value).toBe('trailing');
  });

  test('a PUT body over the ceiling is 413 payload_too_large JSON', async () => {
    const tight = await startKv({ QUEEN_MAX_BODY_BYTES: '1024' });
    try {
      expectError(await tight.call('PUT', '/api/v1/kv/g/big', { value: 'x'.repeat(2000), forever: true }), 413, 'payload_too_large');
      expect(await tight.row('g', 'big')).toBeNull();
    } finally {
      await tight.close();
    }
  });
});

describe('refusals of the path routes', () => {
  test.each([
    ['GET', '/api/v1/kv/g/k?prefix=quota:acme:'],
    ['GET', '/api/v1/kv/g/k?'],
    ['PUT', '/api/v1/kv/g/q?x=1'],
    ['DELETE', '/api/v1/kv/g/k?expect=1'],
  ])('%s %s: any query string is 400 kv_query_string_not_allowed', async (method, path) => {
    await h.one({ op: 'put', ns: 'g', key: 'k', value: 'keep', forever: true });
    const body = method === 'PUT' ? '{"value":1,"forever":true}' : undefined;
    expectError(await request(h.url, method, path, { body }), 400, 'kv_query_string_not_allowed');
    expect((await h.row('g', 'k'))?.value).toBe('keep');
    expect(await h.row('g', 'q')).toBeNull();
  });

  test.each(['op', 'ns', 'namespace', 'key'])('a body carrying %s is 400 kv_body_conflicts_with_path', async (field) => {
    const body = { value: 1, forever: true, [field]: field === 'op' ? 'put' : 'other' };
    expectError(await h.call('PUT', '/api/v1/kv/g/conflict', body), 400, 'kv_body_conflicts_with_path');
    expectError(await h.call('DELETE', '/api/v1/kv/g/conflict', { [field]: 'x' }), 400, 'kv_body_conflicts_with_path');
    expect(await h.row('g', 'conflict')).toBeNull();
    expect(await h.row('other', 'conflict')).toBeNull();
  });

  test.each(['op', 'ns', 'namespace', 'key'])('a GET whose body carries %s is refused too: the path names the key, nothing overrides it', async (field) => {
    await h.one({ op: 'put', ns: 'g', key: 'gbody', value: 'path key', forever: true });
    await h.one({ op: 'put', ns: 'other', key: 'x', value: 'body key', forever: true });
    const body = JSON.stringify({ [field]: field === 'op' ? 'delete' : field === 'key' ? 'x' : 'other' });
    // Content-Length by hand: node frames no body on a GET by default.
    const res = await request(h.url, 'GET', '/api/v1/kv/g/gbody', { body, headers: { 'content-length': String(Buffer.byteLength(body)) } });
    expectError(res, 400, 'kv_body_conflicts_with_path');
    expect((await h.row('g', 'gbody'))?.value).toBe('path key');
  });

  test('PUT needs a JSON object body with an expiry', async () => {
    expectError(await h.call('PUT', '/api/v1/kv/g/p1', ''), 400, 'invalid_json');
    expectError(await h.call('PUT', '/api/v1/kv/g/p1', '{"value":'), 400, 'invalid_json');
    expectError(await h.call('PUT', '/api/v1/kv/g/p1', '[1]'), 400, 'invalid_json');
    expectError(await h.call('PUT', '/api/v1/kv/g/p1', { value: 1 }), 400, 'kv_expiry_not_specified');
    expectError(await h.call('PUT', '/api/v1/kv/g/p1', { value: 1, forever: true, expect: null }), 400, 'kv_expect_invalid');
    expect(await h.row('g', 'p1')).toBeNull();
  });

  test('If-Match is not honoured: the precondition has one spelling, expect in the body', async () => {
    const put = await h.one({ op: 'put', ns: 'g', key: 'im', value: 1, forever: true });
    const res = await h.call('PUT', '/api/v1/kv/g/im', { value: 2, forever: true }, { 'if-match': `"${put.version + 12345}"` });
    expect(res.status).toBe(200);
    expect(res.body.applied).toBe(true);
    expect((await h.row('g', 'im'))?.value).toBe(2);
  });

  test('DELETE takes an optional body with expect', async () => {
    const put = await h.one({ op: 'put', ns: 'g', key: 'de', value: 1, forever: true });
    const stale = await h.call('DELETE', '/api/v1/kv/g/de', { expect: put.version + 1 });
    expect(stale.body).toMatchObject({ applied: false, reason: 'version', value: 1, version: put.version });
    const ok = await h.call('DELETE', '/api/v1/kv/g/de', { expect: put.version });
    expect(ok.body.applied).toBe(true);
  });

  test('a lost required on a path route is the 200 kv_precondition answer', async () => {
    const put = await h.one({ op: 'put', ns: 'g', key: 'rq', value: { by: 'winner' }, forever: true });
    const res = await h.call('PUT', '/api/v1/kv/g/rq', { value: { by: 'loser' }, forever: true, expect: 0, required: true });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      ok: false, success: false, reason: 'kv_precondition', failedIndex: 0, kvReason: 'exists', version: put.version, value: { by: 'winner' },
    });
  });
});

// Nothing is ever added as a literal segment under /api/v1/kv/:ns/: it would make every key named
// after it unaddressable.
describe('no literal segment under /api/v1/kv/:ns/', () => {
  test.each(['incr', 'getPrefix', 'prefix', 'batch', 'keys', 'kv', '_', 'api', 'v1'])('a key named %p is an ordinary key on every path route', async (key) => {
    const put = await h.call('PUT', `/api/v1/kv/literal/${key}`, { value: { key }, forever: true });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ applied: true, key });
    const get = await h.call('GET', `/api/v1/kv/literal/${key}`);
    expect(get.body).toMatchObject({ found: true, key, value: { key }, version: put.body.version });
    expect((await h.one({ op: 'get', ns: 'literal', key })).version).toBe(put.body.version);
    const del = await h.call('DELETE', `/api/v1/kv/literal/${key}`);
    expect(del.body).toMatchObject({ applied: true, key });
    expect(await h.row('literal', key)).toBeNull();
  });
});
