// Another PostgreSQL session holds the row a call needs: every call answers within its time limit,
// 503 with Retry-After and the code of the limit that fired, nothing of it is written, and once the
// holder lets go the same call succeeds. Before, the KV route answered at its statement timeout but
// the same write through /api/v1/transaction waited as long as the holder did (34 s was seen), as
// did pushes and acks.
import { DEFAULT_TENANT } from '../../shared/config';
import { ackOf, pop, push, transaction } from '../log/helpers';
import { call, JsonResponse } from '../support/http';
import { useApi } from '../support/api';

// `client`: the holder, a session of its own on the cell's database.
const api = useApi({ QUEEN_DB_LOCK_TIMEOUT_MS: '300', QUEEN_DB_STATEMENT_TIMEOUT_MS: '5000', QUEEN_KV_STATEMENT_TIMEOUT_MS: '1000' }, { client: true });

/** Runs `hold` in a transaction of the holder, then `calls` while it holds, then rolls it back. */
async function whileHeld(hold: string, values: unknown[], calls: () => Promise<void>): Promise<void> {
  await api.client.query('BEGIN');
  try {
    await api.client.query(hold, values);
    await calls();
  } finally {
    await api.client.query('ROLLBACK');
  }
}

function expectRefused(res: JsonResponse, error: string): void {
  expect({ status: res.status, error: res.body?.error, retryAfter: res.headers.get('retry-after') }).toEqual({ status: 503, error, retryAfter: '1' });
}

const PUT = [{ op: 'put', ns: 'locks', key: 'k', value: 'holder', ttlSeconds: 600 }];

test('a KV row held elsewhere: the KV route answers 503 kv_unavailable, the same write in /api/v1/transaction 503 lock_timeout; after the holder lets go both succeed', async () => {
  await whileHeld(`SELECT queen.kv_apply_v1($1::uuid, $2::jsonb, true)`, [DEFAULT_TENANT, JSON.stringify(PUT)], async () => {
    expectRefused(await call(api.url, 'PUT', '/api/v1/kv/locks/k', { value: 'route', ttlSeconds: 600 }), 'kv_unavailable');
    const wire = await transaction(api.url, {
      kv: [{ op: 'put', ns: 'locks', key: 'k', value: 'wire', ttlSeconds: 600 }],
      operations: [{ type: 'push', items: [{ queue: 'locks-wire', payload: 'beside the put' }] }],
    });
    expectRefused(wire, 'lock_timeout');
  });
  // Rolled back: the push beside the refused put is not in the queue.
  expect(await pop(api.url, 'locks-wire')).toEqual([]);
  expect((await call(api.url, 'PUT', '/api/v1/kv/locks/k', { value: 'route', ttlSeconds: 600 })).status).toBe(200);
  const wire = await transaction(api.url, { kv: [{ op: 'put', ns: 'locks', key: 'k', value: 'wire', ttlSeconds: 600 }] });
  expect(wire.body.ok).toBe(true);
});

test('a partition held by another pushing transaction: a push answers 503 lock_timeout, then succeeds once it commits', async () => {
  expect((await push(api.url, [{ queue: 'locks-push', payload: 'first' }])).status).toBe(201);
  const items = JSON.stringify([{ queue: 'locks-push', payload: 'holder' }]);
  await whileHeld(`SELECT queen.log_push_request_v1($1::uuid, $2::jsonb)`, [DEFAULT_TENANT, items], async () => {
    expectRefused(await push(api.url, [{ queue: 'locks-push', payload: 'refused' }]), 'lock_timeout');
    expectRefused(await transaction(api.url, { operations: [{ type: 'push', items: [{ queue: 'locks-push', payload: 'refused' }] }] }), 'lock_timeout');
  });
  expect((await push(api.url, [{ queue: 'locks-push', payload: 'after' }])).status).toBe(201);
  expect((await pop(api.url, 'locks-push', { batch: 10 })).map((m) => m.data)).toEqual(['first', 'after']);
});

test('a lease held by another acking transaction: an ack answers 503 lock_timeout, then applies once that transaction rolls back', async () => {
  expect((await push(api.url, [{ queue: 'locks-ack', payload: 'm' }])).status).toBe(201);
  const [m] = await pop(api.url, 'locks-ack');
  await whileHeld(`SELECT queen.log_ack_batch_v1($1::uuid, jsonb_build_array($2::jsonb), false)`, [DEFAULT_TENANT, JSON.stringify(ackOf(m))], async () => {
    expectRefused(await call(api.url, 'POST', '/api/v1/ack', ackOf(m)), 'lock_timeout');
    expectRefused(await transaction(api.url, { operations: [{ type: 'ack', ...ackOf(m) }] }), 'lock_timeout');
  });
  const ack = await call(api.url, 'POST', '/api/v1/ack', ackOf(m));
  expect(ack.status).toBe(200);
  expect(ack.body.ok ?? ack.body.success).toBe(true);
});
