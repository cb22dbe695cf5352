import { startTestApi, TestApi, kv, call } from '../support/api';

let api: TestApi;
beforeAll(async () => {
  api = await startTestApi();
});
afterAll(() => api.close());

test('a putIfAbsent is answered and a get reads it back with its ETag', async () => {
  const put = await kv(api.url, [{ op: 'putIfAbsent', ns: 'orders', key: 'k1', value: { a: 1 }, ttlSeconds: 60 }]);
  expect(put.status).toBe(200);
  expect(put.body.results[0]).toMatchObject({ index: 0, op: 'putIfAbsent', applied: true, found: true, value: { a: 1 } });
  const get = await call(api.url, 'GET', '/api/v1/kv/orders/k1');
  expect(get.status).toBe(200);
  expect(get.body).toMatchObject({ found: true, value: { a: 1 }, version: put.body.results[0].version });
  expect(get.headers.get('etag')).toBe(`"${put.body.results[0].version}"`);
});
