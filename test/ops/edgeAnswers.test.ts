// Three answers the fuzzer found outside the documented ones: OPTIONS answered by Express itself
// (200 text/plain, the Allow list), a GET with `If-None-Match: *` answered 304 by Express (so
// /health looked like a cached answer), and a log query parameter given twice answered 500 (its
// code was made from the parameter's name, and most such codes are in no table).
import { useApi } from '../support/api';
import { call, request } from '../support/http';
import { push } from '../log/helpers';

const api = useApi();

test('OPTIONS on any path, served or not: 404 not_found in JSON, as every method a path does not take', async () => {
  for (const path of ['/health', '/ready', '/api/v1/push', '/api/v1/pop/queue/q', '/api/v1/kv/ns/k', '/api/v1/configure', '/api/v1/timers', '/metrics', '/nowhere']) {
    const res = await call(api.url, 'OPTIONS', path);
    expect({ path, status: res.status, type: res.headers.get('content-type') }).toEqual({ path, status: 404, type: 'application/json; charset=utf-8' });
    expect(res.body).toEqual({ error: 'not_found', message: `No route for OPTIONS ${path}.` });
    expect(res.headers.get('allow')).toBeNull();
  }
});

// Through node:http: fetch adds Cache-Control: no-cache to a conditional request, which hid the 304.
test('GET /health and /ready with If-None-Match: * answer 200 with their body, Cache-Control: no-store; no Express route answers 304', async () => {
  for (const path of ['/health', '/ready']) {
    const res = await request(api.url, 'GET', path, { headers: { 'if-none-match': '*' } });
    expect({ path, status: res.status, body: res.body }).toEqual({ path, status: 200, body: { ok: true } });
    expect(res.headers.get('cache-control')).toBe('no-store');
  }
  for (const path of ['/metrics', '/api/v1/openapi.json']) {
    const res = await request(api.url, 'GET', path, { headers: { 'if-none-match': '*' } });
    expect({ path, status: res.status }).toEqual({ path, status: 200 });
    expect(res.text.length).toBeGreaterThan(0);
  }
});

test('a log query parameter given twice: 400 with the code a bad value of it gets, never 500', async () => {
  await push(api.url, [{ queue: 'twice', payload: 1 }]);
  const cases: Array<[string, string]> = [
    ['DELETE /api/v1/consumer-groups/g?deleteMetadata=1&deleteMetadata=2', 'bad_request'],
    ['GET /api/v1/pop/queue/twice?autoAck=true&autoAck=false', 'bad_request'],
    ['GET /api/v1/pop/queue/twice?subscriptionMode=new&subscriptionMode=all', 'bad_request'],
    ['GET /api/v1/pop/queue/twice?subscriptionFrom=now&subscriptionFrom=now', 'log_invalid_timestamp'],
    ['GET /api/v1/pop/queue/twice?consumerGroup=a&consumerGroup=b', 'log_invalid_consumer_group'],
    ['GET /api/v1/pop/queue/twice?batch=1&batch=2', 'log_invalid_batch'],
    ['GET /api/v1/pop?namespace=a&namespace=b', 'log_invalid_queue'],
    ['GET /api/v1/pop?task=a&task=b', 'log_invalid_queue'],
    ['GET /api/v1/dlq?limit=1&limit=2', 'log_invalid_batch'],
    ['GET /api/v1/dlq?offset=1&offset=2', 'log_invalid_batch'],
    ['GET /api/v1/dlq?from=2026-01-01T00:00:00Z&from=2026-01-02T00:00:00Z', 'log_invalid_timestamp'],
    ['GET /api/v1/dlq?to=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z', 'log_invalid_timestamp'],
    ['GET /api/v1/dlq?queue=a&queue=b', 'log_invalid_queue'],
  ];
  for (const [line, code] of cases) {
    const [method, path] = line.split(' ');
    const res = await call(api.url, method, path);
    expect({ line, status: res.status, error: res.body?.error }).toEqual({ line, status: 400, error: code });
  }
});

test('an instant whose day is past its month (2026-02-30): 400 log_invalid_timestamp, not the 500 PostgreSQL\'s refusal gave', async () => {
  for (const path of ['/api/v1/pop/queue/twice?consumerGroup=g&subscriptionFrom=2026-02-30T00:00:00Z', '/api/v1/dlq?from=2026-02-30T00:00:00Z',
    '/api/v1/dlq?to=2025-02-29T00:00:00Z', '/api/v1/dlq?from=2026-04-31T12:00:00Z']) {
    const res = await call(api.url, 'GET', path);
    expect({ path, status: res.status, error: res.body?.error }).toEqual({ path, status: 400, error: 'log_invalid_timestamp' });
  }
  // A leap day is a day.
  expect((await call(api.url, 'GET', '/api/v1/dlq?from=2028-02-29T00:00:00Z')).status).toBe(200);
});
