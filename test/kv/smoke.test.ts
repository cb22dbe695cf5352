import { useApi } from '../support/api';
import { call, kv } from '../support/http';

const api = useApi();

test('a putIfAbsent is answered and a get reads it back with its ETag', async () => {
  const put = await kv(api.url, [{ op: 'putIfAbsent', ns: 'orders', key: 'k1', value: { a: 1 }, ttlSeconds: 60 }]);
  expect(put.status).toBe(200);
  expect(put.body.results[0]).toMatchObject({ index: 0, op: 'putIfAbsent', applied: true, found: true, value: { a: 1 } });
  const get = await call(api.url, 'GET', '/api/v1/kv/orders/k1');
  expect(get.status).toBe(200);
  expect(get.body).toMatchObject({ found: true, value: { a: 1 }, version: put.body.results[0].version });
  expect(get.headers.get('etag')).toBe(`"${put.body.results[0].version}"`);
});

// JSON `"\\u0000"` is a backslash followed by the text u0000, which PostgreSQL stores like any
// string; only a real U+0000 ("\u0000") cannot be stored. A substring check on the body's text
// once confused the two.
test('a value holding the text \\u0000 (an escaped backslash) is stored and read back', async () => {
  const body = '{"value":{"note":"\\\\u0000 is not NUL"},"ttlSeconds":60}';
  const put = await call(api.url, 'PUT', '/api/v1/kv/orders/escaped', body);
  expect(put.status).toBe(200);
  const get = await call(api.url, 'GET', '/api/v1/kv/orders/escaped');
  expect(get.body.value).toEqual({ note: '\\u0000 is not NUL' });
  const timer = await call(api.url, 'POST', '/api/v1/timers', '{"queue":"q","payload":{"note":"\\\\u0000"},"delaySeconds":60}');
  expect(timer.status).toBe(200);
});

test('a real U+0000 in a value is a 400 invalid_json, never a 500', async () => {
  const put = await call(api.url, 'PUT', '/api/v1/kv/orders/nul', '{"value":"a\\u0000b","ttlSeconds":60}');
  expect(put.status).toBe(400);
  expect(put.body.error).toBe('invalid_json');
  const timer = await call(api.url, 'POST', '/api/v1/timers', '{"queue":"q","payload":"a\\u0000b","delaySeconds":60}');
  expect(timer.status).toBe(400);
  expect(timer.body.error).toBe('invalid_json');
});
