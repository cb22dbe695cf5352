// A request that cannot finish (its row lock is never released) must not hold a shutdown hostage:
// past its share of QUEEN_SHUTDOWN_TIMEOUT_MS the worker cuts the connection, and the process
// still exits 0. LOG_LEVEL=warn here also shows the level is honoured: no request lines, the
// deadline warning present.
import { Client } from 'pg';
import { DEFAULT_TENANT } from '../../shared/config';
import { freePort } from '../../shared/embeddedPostgres';
import { createTestDatabase, untilWaitingOnLock } from '../support/database';
import { request } from '../support/http';
import { API_MAIN, spawnLogged, untilHealthy } from '../support/processes';

test('SIGTERM with a request stuck on a lock: the connection is cut at the deadline and the process exits 0', async () => {
  const db = await createTestDatabase();
  const holder = new Client({ connectionString: db.url });
  holder.on('error', () => undefined);
  const port = await freePort();
  const api = spawnLogged(process.execPath, [API_MAIN], {
    DATABASE_URL: db.url,
    PORT: String(port),
    QUEEN_WORKERS: '1',
    DB_POOL_SIZE: '4',
    LOG_LEVEL: 'warn',
    QUEEN_SHUTDOWN_TIMEOUT_MS: '2000',
    QUEEN_KV_STATEMENT_TIMEOUT_MS: '60000',
  });
  try {
    // At warn nothing is logged at boot, so readiness is the API answering.
    await untilHealthy(api, port, '/ready');
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query(`SELECT queen.kv_apply_v1($1::uuid, $2::jsonb, true)`, [
      DEFAULT_TENANT,
      JSON.stringify([{ op: 'put', ns: 'deploy', key: 'stuck', value: 1, ttlSeconds: 600 }]),
    ]);
    const stuck = request(port, 'PUT', '/api/v1/kv/deploy/stuck', { body: { value: 2, ttlSeconds: 600 } }).then(
      (r) => ({ status: r.status, error: undefined as string | undefined }),
      (e: NodeJS.ErrnoException) => ({ status: 0, error: e.code }),
    );
    await untilWaitingOnLock(db.url);
    process.kill(api.child.pid!, 'SIGTERM');
    const exit = await api.exited;
    expect(exit).toEqual({ code: 0, signal: null });
    expect(await stuck).toEqual({ status: 0, error: 'ECONNRESET' });
    expect(api.lines.some((l) => l.msg === 'drain deadline reached: closing the connections still open')).toBe(true);
    expect(api.lines.some((l) => l.msg === 'request completed' || l.msg === 'request aborted')).toBe(false);
    expect(api.lines.every((l) => l.level >= 40)).toBe(true);
  } finally {
    if (api.child.exitCode === null && api.child.signalCode === null) {
      api.child.kill('SIGKILL');
      await api.exited;
    }
    await holder.query('ROLLBACK').catch(() => undefined);
    await holder.end().catch(() => undefined);
    await db.drop();
  }
});
