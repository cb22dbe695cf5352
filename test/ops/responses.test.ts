// queen_http_responses_total: every answer a route or a KV guard wrote, by surface, status and error
// code, so an outage, a bug or a flood shows on the dashboard and in the alerts (deploy/prometheus).
import { surfaceOf } from '../../services/api/edge/requestLog';
import { call } from '../support/http';
import { counter } from '../support/metrics';
import { useApi } from '../support/api';

// One read a second with a burst of one: the second GET is refused by the flood's cheap exit.
const api = useApi({ QUEEN_KV_READS_PER_SEC: '1', QUEEN_KV_READS_BURST: '1' });

const answered = (surface: string, status: number, code = '') =>
  counter(api.url, 'queen_http_responses_total', { surface, status: String(status), code });

test('successes, refusals and errors are each counted under their surface, status and code', async () => {
  expect((await call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'counted', payload: 1 }] })).status).toBe(201);
  expect((await call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'bad name!', payload: 1 }] })).status).toBe(400);
  expect((await call(api.url, 'GET', '/api/v1/kv/counted/k')).status).toBe(200);
  const limited = await call(api.url, 'GET', '/api/v1/kv/counted/k');
  expect([limited.status, limited.body.error]).toEqual([429, 'rate_limited']);
  expect((await call(api.url, 'PUT', '/api/v1/kv/counted/k', { value: 1 })).body.error).toBe('kv_expiry_not_specified');
  expect((await call(api.url, 'GET', '/api/v1/nothing-here')).status).toBe(404);

  expect(await answered('log', 201)).toBe(1);
  expect(await answered('log', 400, 'log_invalid_queue')).toBe(1);
  expect(await answered('kv', 200)).toBe(1);
  expect(await answered('kv', 429, 'rate_limited')).toBe(1);
  expect(await answered('kv', 400, 'kv_expiry_not_specified')).toBe(1);
  expect(await answered('log', 404, 'not_found')).toBe(1);
  // The six scrapes above are answers too, each counted once it has been sent (the last one may
  // still be on its way to the count when this scrape reads it).
  expect(await answered('probe', 200)).toBeGreaterThanOrEqual(5);
});

test('a paused KV route is a 503 kv_disabled in the count', async () => {
  const flip = (kv: boolean) => call(api.url, 'POST', '/api/v1/system/kv-timers', { kv });
  expect((await flip(false)).status).toBe(200);
  try {
    expect((await call(api.url, 'DELETE', '/api/v1/kv/counted/k')).status).toBe(503);
  } finally {
    expect((await flip(true)).status).toBe(200);
  }
  expect(await answered('kv', 503, 'kv_disabled')).toBe(1);
  expect(await answered('system', 200)).toBe(2);
});

test('the surface label is a closed set', () => {
  expect(
    ['/api/v1/kv', '/api/v1/kv/ns/k', '/api/v1/timers/x', '/api/v1/transaction', '/api/v1/system/cluster', '/api/v1/push', '/api/v1/kvx', '/health', '/metrics', '/', '/favicon.ico'].map(
      surfaceOf,
    ),
  ).toEqual(['kv', 'kv', 'timers', 'transaction', 'system', 'log', 'log', 'probe', 'probe', 'other', 'other']);
});
