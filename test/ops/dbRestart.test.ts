// PostgreSQL restarted (fast stop, started again on the same port and data folder) under a running
// API cluster and a running sweeper, neither of which is restarted. A PostgreSQL of this file's own:
// the shared test server is never stopped. Every process is ended by its PID in afterAll.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { DEFAULT_TENANT } from '../../shared/config';
import { applySchema } from '../../shared/db';
import { EmbeddedPostgres, freePort, startEmbeddedPostgres } from '../../shared/embeddedPostgres';
import { SWITCHES_WRITE } from '../../shared/sql/system';
import { request } from '../support/http';
import { spawnApi, Spawned, spawnSweeper, SweeperProcess, untilHealthy } from '../support/processes';
import { scheduleDirect } from '../support/sweeper';
import { waitFor } from '../support/wait';
import { parseExposition } from '../support/metrics';

let root: string;
let dataDir: string;
let pgPort: number;
let pg: EmbeddedPostgres;
let url: string;
let pool: Pool;
let port: number;
let api: Spawned | undefined;
let sweeper: SweeperProcess | undefined;

beforeAll(async () => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-restart-'));
  dataDir = path.join(root, 'data');
  pgPort = await freePort();
  pg = await startEmbeddedPostgres({ dataDir, port: pgPort, settings: { fsync: 'off' } });
  url = pg.url;
  await applySchema(url);
  pool = new Pool({ connectionString: url, max: 2 });
  // Its idle connections die with every restart below.
  pool.on('error', () => undefined);
  port = await freePort();
});

afterAll(async () => {
  if (sweeper && sweeper.child.exitCode === null && sweeper.child.signalCode === null) {
    sweeper.child.kill('SIGKILL');
    await sweeper.exited;
  }
  await api?.stop();
  await pool?.end();
  await pg?.stop();
  // As root the server may keep its data under the temp folder instead (embeddedPostgres.ts): that copy goes too.
  if (pg && path.resolve(pg.dataDir) !== path.resolve(dataDir)) fs.rmSync(path.dirname(pg.dataDir), { recursive: true, force: true });
  fs.rmSync(root, { recursive: true, force: true });
});

const stopPg = () => pg.stop();
async function startPg(): Promise<void> {
  pg = await startEmbeddedPostgres({ dataDir, port: pgPort, settings: { fsync: 'off' } });
}

/** The API's log lines from index `from` on (a mark is `api.lines.length` at that moment). */
const linesSince = (from: number) => api!.lines.slice(from);

/** Each call, twice (on fresh connections, so both workers answer): 503 db_unavailable, Retry-After 1. */
async function expectUnavailable(calls: [string, string, unknown?][]): Promise<void> {
  for (const [method, route, body] of calls) {
    for (let i = 0; i < 2; i++) {
      const res = await request(port, method, route, { body });
      expect({ route, status: res.status, error: res.body?.error, retryAfter: res.headers.get('retry-after') }).toEqual({
        route,
        status: 503,
        error: 'db_unavailable',
        retryAfter: '1',
      });
    }
  }
}

const bootApi = async () => {
  api = spawnApi({ DATABASE_URL: url, PORT: String(port), QUEEN_WORKERS: '2', DB_POOL_SIZE: '20' });
  await untilHealthy(api, port);
};

test('while PostgreSQL is down every route answers 503 db_unavailable (never 500); after it is back, every acknowledged push is there and long polls wake', async () => {
  await bootApi();
  const acked: string[] = [];
  for (let i = 0; i < 20; i++) {
    const res = await request(port, 'POST', '/api/v1/push', { body: { items: [{ queue: 'kept', payload: { i }, transactionId: `kept-${i}` }] } });
    expect(res.status).toBe(201);
    acked.push(`kept-${i}`);
  }
  // A long poll waiting when the database goes away.
  const waiting = request(port, 'GET', '/api/v1/pop/queue/idle?wait=true&timeout=30000', { timeoutMs: 60_000 });
  const mark = api!.lines.length;

  await stopPg();
  const calls: [string, string, unknown?][] = [
    ['POST', '/api/v1/push', { items: [{ queue: 'kept', payload: 1 }] }],
    ['GET', '/api/v1/pop/queue/kept'],
    ['GET', '/api/v1/pop/queue/kept?wait=true&timeout=1000'],
    ['POST', '/api/v1/ack', { transactionId: 'kept-0', partitionId: '00000000-0000-0000-0000-000000000000', status: 'completed' }],
    ['POST', '/api/v1/configure', { queue: 'kept', options: { leaseTime: 30 } }],
    ['GET', '/api/v1/kv/ns/k'],
    ['PUT', '/api/v1/kv/ns/k', { value: 1, forever: true }],
    ['POST', '/api/v1/kv', { operations: [{ op: 'incr', ns: 'ns', key: 'c', forever: true }] }],
    ['POST', '/api/v1/timers', { queue: 't', payload: 1, delaySeconds: 5 }],
    ['GET', '/api/v1/timers/00000000-0000-0000-0000-000000000000'],
    ['POST', '/api/v1/transaction', { operations: [{ type: 'push', items: [{ queue: 'kept', payload: 2 }] }] }],
    ['GET', '/api/v1/system/cluster'],
    ['GET', '/ready'],
  ];
  await expectUnavailable(calls);
  // Liveness reads no database: the process serves while the database is away.
  expect((await request(port, 'GET', '/health')).status).toBe(200);
  // What QueenDatabaseUnavailable (deploy/prometheus/alerts.yml) reads: every refusal, counted by
  // code across both workers, and served while the database is away.
  const scraped = await request(port, 'GET', '/metrics');
  const refusals = parseExposition(scraped.text)
    .get('queen_http_responses_total')!
    .samples.filter((s) => s.labels.code === 'db_unavailable')
    .reduce((n, s) => n + s.value, 0);
  expect(refusals).toBeGreaterThanOrEqual(2 * calls.length);
  const lp = await waiting;
  expect([lp.status, lp.body?.error]).toEqual([503, 'db_unavailable']);
  // A database outage is not a bug of ours: nothing was answered or logged as one. Each refusal's
  // request line is a warning, never the error line of a 5xx bug.
  expect(linesSince(mark).filter((l) => l.msg === 'unhandled error answered as 500')).toEqual([]);
  expect(linesSince(mark).filter((l) => l.req && l.level >= 50)).toEqual([]);
  const refusedLine = linesSince(mark).find((l) => l.msg === 'request refused' && l.req?.path === '/api/v1/kv/ns/k');
  expect(refusedLine).toMatchObject({ level: 40, req: { method: 'GET' }, res: { statusCode: 503 } });
  expect(api!.child.exitCode).toBeNull();

  await startPg();
  await untilHealthy(api!, port);
  // Every push answered 200 before the restart is there.
  const popped = await request(port, 'GET', '/api/v1/pop/queue/kept?batch=100');
  expect(popped.status).toBe(200);
  expect(popped.body.messages.map((m: { transactionId: string }) => m.transactionId).sort()).toEqual([...acked].sort());
  // Writes work again, and a long poll is woken by a push (on either worker).
  for (let i = 0; i < 4; i++) {
    const poll = request(port, 'GET', `/api/v1/pop/queue/wake-${i}?wait=true&timeout=15000`, { timeoutMs: 60_000 });
    const pushed = await request(port, 'POST', '/api/v1/push', { body: { items: [{ queue: `wake-${i}`, payload: { i } }] } });
    expect(pushed.status).toBe(201);
    const got = await poll;
    expect([got.status, got.body?.messages?.[0]?.data]).toEqual([200, { i }]);
  }
});

test('a pause flipped while PostgreSQL is down (mirrored: false) stays in force once it is back, and in a replaced worker', async () => {
  if (!api) await bootApi();
  const mark = api!.lines.length;
  await stopPg();
  const flip = await request(port, 'POST', '/api/v1/system/kv-timers', { body: { kv: false } });
  expect([flip.status, flip.body.kv, flip.body.mirrored]).toEqual([200, false, false]);
  await startPg();
  // Both workers' switch listeners are back and have re-read the rows (which still say on).
  await waitFor(() => linesSince(mark).filter((l) => String(l.msg).startsWith('switches: listening on queen_system_state again')).length >= 2, {
    what: "both workers' switch listeners back",
  });
  const kvAnswers = async () => {
    for (let i = 0; i < 6; i++) {
      const res = await request(port, 'GET', '/api/v1/kv/ns/k');
      expect([res.status, res.body.error]).toEqual([503, 'kv_disabled']);
    }
  };
  await kvAnswers();
  // The operator can see that the cell and the rows disagree.
  const seen = await request(port, 'GET', '/api/v1/system/kv-timers');
  expect(seen.body).toMatchObject({ kv: false, mirrored: false, mirror: { kv: true } });

  // A worker replaced after the flip holds it too.
  const workers = [...new Set(linesSince(0).filter((l) => l.msg === 'API worker listening').map((l) => l.pid as number))];
  const victim = workers[0];
  const killedAt = api!.lines.length;
  process.kill(victim, 'SIGKILL');
  await waitFor(() => linesSince(killedAt).some((l) => l.msg === 'replacement API worker listening' && l.replaced === victim), {
    what: 'the replacement worker listening',
  });
  await kvAnswers();

  // Flipped again with the database up: written, and the pin is gone.
  const back = await request(port, 'POST', '/api/v1/system/kv-timers', { body: { kv: true } });
  expect([back.status, back.body.kv, back.body.mirrored]).toEqual([200, true, true]);
  for (let i = 0; i < 4; i++) expect((await request(port, 'GET', '/api/v1/kv/ns/k')).status).toBe(200);

  // Another cell's flip, announced through the database, still reaches both workers after the restart.
  await pool.query({ ...SWITCHES_WRITE, values: [JSON.stringify({ kv_enabled: false }), 'other-cell-1'] });
  await waitFor(async () => {
    const seen = await Promise.all([0, 1, 2, 3, 4, 5].map(() => request(port, 'GET', '/api/v1/kv/ns/k')));
    return seen.every((r) => r.status === 503);
  }, { what: "the other cell's pause on both workers" });
  await pool.query({ ...SWITCHES_WRITE, values: [JSON.stringify({ kv_enabled: true }), 'other-cell-2'] });
  await waitFor(async () => {
    const seen = await Promise.all([0, 1, 2, 3, 4, 5].map(() => request(port, 'GET', '/api/v1/kv/ns/k')));
    return seen.every((r) => r.status === 200);
  }, { what: "the other cell's resume on both workers" });
});

test('a database that turns read-only (a failover, maintenance) is 503 db_unavailable on writes and pops, never 500', async () => {
  if (!api) await bootApi();
  const mark = api!.lines.length;
  await pool.query('ALTER SYSTEM SET default_transaction_read_only = on');
  await pool.query('SELECT pg_reload_conf()');
  try {
    // The reload reaches every session; a new session is read-only at once.
    await waitFor(async () => (await request(port, 'POST', '/api/v1/push', { body: { items: [{ queue: 'ro', payload: 0 }] } })).status !== 201, { what: 'a push refused by the read-only database' });
    const calls: [string, string, unknown?][] = [
      ['POST', '/api/v1/push', { items: [{ queue: 'ro', payload: 1 }] }],
      ['GET', '/api/v1/pop/queue/kept'],
      ['PUT', '/api/v1/kv/ns/ro', { value: 1, forever: true }],
      ['POST', '/api/v1/timers', { queue: 't', payload: 1, delaySeconds: 5 }],
      ['POST', '/api/v1/transaction', { operations: [{ type: 'push', items: [{ queue: 'ro', payload: 2 }] }] }],
    ];
    await expectUnavailable(calls);
    // Reads still answer.
    expect((await request(port, 'GET', '/api/v1/kv/ns/ro')).status).toBe(200);
    expect(linesSince(mark).filter((l) => l.msg === 'unhandled error answered as 500')).toEqual([]);
  } finally {
    await pool.query('ALTER SYSTEM RESET default_transaction_read_only');
    await pool.query('SELECT pg_reload_conf()');
  }
  await waitFor(async () => (await request(port, 'POST', '/api/v1/push', { body: { items: [{ queue: 'ro', payload: 3 }] } })).status === 201, { what: 'a push accepted once the database is writable again' });
});

test('a sweeper that lived through a restart still wakes on a switch flip (its LISTEN reconnects)', async () => {
  await api?.stop();
  api = undefined;
  await pool.query({ ...SWITCHES_WRITE, values: [JSON.stringify({ timers_fire_enabled: false }), 'test-off'] });
  const [timerId] = await scheduleDirect(pool, DEFAULT_TENANT, 1, () => ({ queue: 'late', payload: { late: true }, delaySeconds: 0 }));
  // An interval far longer than the test: only a notification can make this sweeper look again.
  sweeper = await spawnSweeper(url, { QUEEN_SWEEPER_INTERVAL_MS: '3600000' });
  await waitFor(async () => (await sweeper!.metric('queen_sweeper_cycles_total')) >= 1, { what: "the sweeper's first cycle" });

  await stopPg();
  await startPg();
  // Flipped back on right after the restart: announced, possibly before the sweeper listens again.
  await pool.query({ ...SWITCHES_WRITE, values: [JSON.stringify({ timers_fire_enabled: true }), 'test-on'] });
  await waitFor(async () => {
    const { rows } = await pool.query('SELECT count(*)::int AS n FROM queen.messages WHERE transaction_id = $1', [`timer:${timerId}`]);
    return rows[0].n === 1;
  }, { what: "the timer's message, fired once the switch is back on" });
  expect(sweeper.child.exitCode).toBeNull();
});
