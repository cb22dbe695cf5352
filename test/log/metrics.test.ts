// The message path's latency histograms (queen_log_request_duration_seconds, shared/metrics.ts):
// every route has its series from boot, as the KV histogram does, so a panel or a rule on them
// reads 0 rather than nothing after a restart; and each of push, pop, a long poll, ack, ack batch
// and the transaction wire lands in its own route, refusals included.
import { ack, ackOf, pop, push, transaction } from './helpers';
import { call } from '../support/http';
import { useApi } from '../support/api';
import { parseExposition, scrape } from '../support/metrics';

const api = useApi();

/** `family`_count by route, from the /metrics text. */
function countsByRoute(text: string, family: string): Record<string, number> {
  const counts = parseExposition(text).get(family)!.samples.filter((s) => s.name === `${family}_count`);
  return Object.fromEntries(counts.map((s) => [s.labels.route, s.value]));
}

test('from boot, before any request: every route of the log and KV latency histograms has its series at 0', async () => {
  const text = await scrape(api.url);
  expect(countsByRoute(text, 'queen_log_request_duration_seconds')).toEqual({
    push: 0, pop: 0, pop_wait: 0, ack: 0, ack_batch: 0, transaction: 0, consumer_group_delete: 0, trace: 0,
  });
  expect(countsByRoute(text, 'queen_kv_op_duration_seconds')).toEqual({ batch: 0, get: 0, put: 0, delete: 0 });
  // Buckets too: histogram_quantile over rate(..._bucket) has something to read.
  expect(text).toMatch(/^queen_log_request_duration_seconds_bucket\{le="\+Inf",route="push"\} 0$/m);
  expect(text).toMatch(/^queen_kv_op_duration_seconds_bucket\{le="\+Inf",route="get"\} 0$/m);
});

test('push, pop, a long poll, ack, ack batch and the transaction wire each count in their own route, refusals included', async () => {
  const before = countsByRoute(await scrape(api.url), 'queen_log_request_duration_seconds');

  expect((await push(api.url, [1, 2, 3].map((n) => ({ queue: 'latency', payload: { n } })))).status).toBe(201);
  // A refused push is a push answered: its time counts too.
  expect((await call(api.url, 'POST', '/api/v1/push', { items: 'not an array' })).status).toBe(400);
  const [first] = await pop(api.url, 'latency');
  expect((await ack(api.url, first)).status).toBe(200);
  // Messages are there, so the long poll answers at once; it is still a pop that could wait.
  const rest = await pop(api.url, 'latency', { wait: true, timeout: 1000, batch: 10 });
  expect(rest).toHaveLength(2);
  const batch = await call(api.url, 'POST', '/api/v1/ack/batch', { acknowledgments: rest.map((m) => ackOf(m)) });
  expect(batch.body.ok).toBe(true);
  expect((await transaction(api.url, { operations: [{ type: 'push', items: [{ queue: 'latency', payload: 4 }] }] })).status).toBe(200);
  expect((await call(api.url, 'DELETE', '/api/v1/consumer-groups/latency-group')).status).toBe(200);
  expect((await call(api.url, 'POST', '/api/v1/traces', { transactionId: first.transactionId, partitionId: first.partitionId, data: {} })).status).toBe(201);

  const after = countsByRoute(await scrape(api.url), 'queen_log_request_duration_seconds');
  const moved = Object.fromEntries(Object.keys(after).map((route) => [route, after[route] - (before[route] ?? 0)]));
  expect(moved).toEqual({ push: 2, pop: 1, pop_wait: 1, ack: 1, ack_batch: 1, transaction: 1, consumer_group_delete: 1, trace: 1 });
});
