// Liveness and readiness apart (services/api/routes/health.ts). A busy database, here the message
// pool's every connection waiting on a partition row another session holds, is not a database
// down: /ready stays 200 (the pool's answers of the last QUEEN_READY_TOLERANCE_MS count) and
// /health, which reads no database, stays 200 whatever the database does. Before, both ran
// SELECT 1 through the starved pool and answered 503 db_unavailable.
import { call } from '../support/http';
import { useApi } from '../support/api';
import { waitFor } from '../support/wait';

// `client`: the locker, a session of its own on the cell's database.
const api = useApi({ QUEEN_DB_LOCK_TIMEOUT_MS: '4000', QUEEN_DB_ACQUIRE_TIMEOUT_MS: '4000', QUEEN_HEALTH_TIMEOUT_MS: '300' }, { client: true });
const pool = () => api.server.pools.message;

test('every message-pool connection waiting on a locked row: /health and /ready stay 200; the pushes are answered', async () => {
  // Two items a push, so none is gathered with another (push/coalescer.ts): each takes a connection.
  const push = (i: number) => call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'ready-busy', payload: i }, { queue: 'ready-busy', payload: -i }] });
  expect((await push(0)).status).toBe(201);
  const size = pool().options.max;
  await api.client.query('BEGIN');
  await api.client.query(`SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'ready-busy' FOR UPDATE OF p`);
  let held: Promise<{ status: number }>[] = [];
  try {
    held = Array.from({ length: size + 2 }, (_, i) => push(i + 1));
    await waitFor(() => pool().totalCount - pool().idleCount === size && pool().waitingCount > 0, { what: 'every message-pool connection in use, calls queued', timeoutMs: 5_000, everyMs: 10 });
    const [live, ready] = await Promise.all([call(api.url, 'GET', '/health'), call(api.url, 'GET', '/ready')]);
    expect([live.status, live.body]).toEqual([200, { ok: true }]);
    expect([ready.status, ready.body]).toEqual([200, { ok: true }]);
  } finally {
    await api.client.query('ROLLBACK');
  }
  // Released before lock_timeout: every push commits.
  expect((await Promise.all(held)).map((r) => r.status)).toEqual(Array(held.length).fill(201));
});

test('a refused connection is not tolerated: /ready is 503 at once when the database refuses, /health stays 200', async () => {
  // A pool on a port nothing listens on stands for a database that is gone (the suite's database stays up).
  const { Pool } = await import('pg');
  const { healthRoutes } = await import('../../services/api/routes/health');
  const express = (await import('express')).default;
  const gone = new Pool({ connectionString: 'postgres://nobody@127.0.0.1:1/none', connectionTimeoutMillis: 1000 });
  gone.on('error', () => undefined);
  const app = express().use(healthRoutes(gone, () => true, { timeoutMs: 2000, toleranceMs: 600_000 }));
  const server = app.listen(0);
  try {
    await new Promise((r) => server.once('listening', r));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    const ready = await call(url, 'GET', '/ready');
    expect([ready.status, ready.body.error]).toEqual([503, 'db_unavailable']);
    expect((await call(url, 'GET', '/health')).status).toBe(200);
  } finally {
    server.close();
    await gone.end();
  }
});
