// The cell behind a real PgBouncer in transaction pooling mode (pool_mode=transaction, 3 server
// connections for every client of the cell): the built API and a sweeper booted with
// QUEEN_DB_POOLING=transaction through it, LISTEN on the direct DATABASE_LISTEN_URL. KV, the log,
// the transaction wire, timers and the kill switches answer as they do on a direct connection, and
// the limits the SQL reads from its settings hold (they would fall back to defaults if the settings
// were lost). The last two tests show what the default (session) mode does there: refused, or, with
// PgBouncer told to ignore its options, running without its limits and failing on named statements.
import { loadConfig } from '../../shared/config';
import { beginOf, createPools } from '../../shared/db';
import { freePort } from '../../shared/embeddedPostgres';
import { ackOf, configure, pop } from '../log/helpers';
import { Bouncer, PGBOUNCER, startPgbouncer } from './pgbouncer';
import { call } from '../support/http';
import { API_MAIN, LogLine, Spawned, spawnLogged, SWEEPER_MAIN, untilGone } from '../support/processes';
import { UNLIMITED_RATES } from '../support/api';
import { createTestDatabase, sql } from '../support/database';
import { waitFor } from '../support/wait';

const listening = (l: LogLine) => l.msg === 'API worker listening';

async function stopProcess(p: Spawned | undefined): Promise<void> {
  if (!p) return;
  const workers = new Set(p.lines.filter(listening).map((l) => l.pid as number));
  await p.stop();
  for (const pid of workers) await untilGone(pid, 5_000).catch(() => undefined);
}

/**
 * `call`, past a 429 rate_limited. A spawned cell on this loaded machine answers some calls 429 even
 * under limits of a million a second, direct as through PgBouncer (the rate leases' own issue, not
 * this suite's subject: seen in 2 of 3 direct runs of its first put). Bounded: 5 tries.
 */
async function req(base: string, method: string, path: string, body?: unknown) {
  for (let i = 0; ; i++) {
    const res = await call(base, method, path, body);
    if (res.status !== 429 || i >= 4) return res;
    await new Promise((r) => setTimeout(r, 1000)); // the Retry-After the 429 asked for
  }
}
const kv = (base: string, operations: unknown) => req(base, 'POST', '/api/v1/kv', { operations });
const push = (base: string, items: unknown[]) => req(base, 'POST', '/api/v1/push', { items });
const transaction = (base: string, body: unknown) => req(base, 'POST', '/api/v1/transaction', body);

const reason = 'pgbouncer is not installed here (Debian package `pgbouncer`; .ci/run installs it where apt-get works)';

// Said on stderr too: jest shows neither a skipped suite's title (but in a verbose or JSON report) nor its console.
if (!PGBOUNCER) process.stderr.write(`test/deploy/pgbouncer.test.ts: not run: ${reason}\n`);
(PGBOUNCER ? describe : describe.skip)(PGBOUNCER ? 'behind PgBouncer, pool_mode=transaction' : `behind PgBouncer: not run, ${reason}`, () => {
  let db: { url: string; drop(): Promise<void> };
  let bouncer: Bouncer;
  let pooled: string;
  let api: Spawned;
  let sweeper: Spawned;
  let base: string;

  beforeAll(async () => {
    db = await createTestDatabase();
    bouncer = await startPgbouncer({ serverUrl: db.url, poolMode: 'transaction', poolSize: 3 });
    pooled = bouncer.through(db.url);
    const env = {
      DATABASE_URL: pooled,
      DATABASE_LISTEN_URL: db.url,
      QUEEN_DB_POOLING: 'transaction',
      LOG_LEVEL: 'info',
      // Non-default limits: the SQL reads them from the transaction's settings.
      QUEEN_KV_MAX_BATCH: '3',
      QUEEN_KV_PREFIX_LIMIT: '2',
      ...UNLIMITED_RATES,
    };
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    api = spawnLogged(process.execPath, [API_MAIN], { ...env, PORT: String(port), QUEEN_WORKERS: '1', DB_POOL_SIZE: '24' });
    sweeper = spawnLogged(process.execPath, [SWEEPER_MAIN], { ...env, QUEEN_SWEEPER_METRICS_PORT: '0', QUEEN_SWEEPER_INTERVAL_MS: '100' });
    await Promise.all([api.waitForLine(listening, 'API worker listening'), sweeper.waitForLine((l) => l.msg === 'config: sweeper', 'config: sweeper')]);
  });

  afterAll(async () => {
    // PgBouncer is stopped by its PID whatever happened to the cell's processes.
    try {
      await Promise.all([stopProcess(api), stopProcess(sweeper)]);
    } finally {
      await bouncer?.stop();
      await db?.drop();
    }
  });

  test('the API and the sweeper boot through it in transaction mode, LISTEN on the direct URL', async () => {
    const config = await api.waitForLine((l) => l.msg === 'config: kv_timers', 'config: kv_timers');
    expect(config).toMatchObject({ dbPooling: 'transaction', kvMaxBatch: 3, kvPrefixLimit: 2 });
    expect(config.listenTarget).toBe(`127.0.0.1:${new URL(db.url).port}${new URL(db.url).pathname}`);
    expect(config.rateLimitsTopology.sharedStore).toMatch(/^postgresql/);
    expect(sweeper.lines.find((l) => l.msg === 'config: sweeper')).toMatchObject({ dbPooling: 'transaction' });
    expect(api.lines.filter((l) => l.level >= 50)).toEqual([]);
  });

  test('KV: put, get, cas, incr, getPrefix and a batch', async () => {
    const put = await req(base, 'PUT', '/api/v1/kv/pgb/a', { value: { n: 1 }, forever: true });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ ok: true, applied: true });
    const get = await req(base, 'GET', '/api/v1/kv/pgb/a');
    expect(get.body).toMatchObject({ found: true, value: { n: 1 }, version: put.body.version });
    const lost = await req(base, 'PUT', '/api/v1/kv/pgb/a', { value: 'stale', forever: true, expect: Number(put.body.version) + 1 });
    expect(lost.body).toMatchObject({ applied: false, reason: 'version', value: { n: 1 } });
    const won = await req(base, 'PUT', '/api/v1/kv/pgb/a', { value: 'fresh', forever: true, expect: put.body.version });
    expect(won.body).toMatchObject({ applied: true, value: 'fresh' });
    const batch = await kv(base, [
      { op: 'incr', ns: 'pgb', key: 'n', delta: 5, forever: true },
      { op: 'put', ns: 'pgb', key: 'b', value: 2, ttlSeconds: 60 },
      { op: 'get', ns: 'pgb', key: 'a' },
    ]);
    expect(batch.status).toBe(200);
    expect(batch.body.results.map((r: any) => [r.op, r.applied ?? r.found, r.value])).toEqual([
      ['incr', true, 5],
      ['put', true, 2],
      ['get', true, 'fresh'],
    ]);
    const prefix = await kv(base, [{ op: 'getPrefix', ns: 'pgb', prefix: 'a', limit: 10 }]);
    expect(prefix.body.results[0].rows.map((r: any) => r.key)).toEqual(['a']);
  });

  test('the limits the SQL reads from its settings hold: QUEEN_KV_MAX_BATCH=3 and QUEEN_KV_PREFIX_LIMIT=2', async () => {
    // Were the settings lost (a startup option PgBouncer dropped), the SQL would fall back to its
    // defaults (1000 operations, 1000 rows) and both calls below would be answered in full.
    const four = [1, 2, 3, 4].map((i) => ({ op: 'get', ns: 'lim', key: `k${i}` }));
    const refused = await kv(base, four);
    expect(refused.status).toBe(400);
    expect(refused.body.error).toBe('kv_batch_too_large');
    await kv(base, [1, 2, 3].map((i) => ({ op: 'put', ns: 'lim', key: `p${i}`, value: i, forever: true })));
    const prefix = await kv(base, [{ op: 'getPrefix', ns: 'lim', prefix: 'p', limit: 100 }]);
    expect(prefix.body.results[0]).toMatchObject({ truncated: true });
    expect(prefix.body.results[0].rows.map((r: any) => r.key)).toEqual(['p1', 'p2']);
  });

  test('the log: push, pop, ack, and the transaction wire committing an ack and a KV write together', async () => {
    expect((await configure(base, 'pgb-q', { leaseTime: 30 })).status).toBeLessThan(300);
    expect((await push(base, [{ queue: 'pgb-q', payload: { order: 1 } }, { queue: 'pgb-q', payload: { order: 2 } }])).status).toBe(201);
    const [first, second] = await pop(base, 'pgb-q', { batch: 2 });
    expect([first.data, second.data]).toEqual([{ order: 1 }, { order: 2 }]);
    expect((await call(base, 'POST', '/api/v1/ack', ackOf(first))).body).toMatchObject({ ok: true, status: 'completed' });

    const wire = await transaction(base, {
      operations: [{ type: 'ack', ...ackOf(second) }],
      kv: [{ op: 'putIfAbsent', ns: 'pgb', key: `done:${second.transactionId}`, value: 'charged', ttlSeconds: 3600, required: true }],
    });
    expect(wire.body).toMatchObject({ ok: true });
    expect((await req(base, 'GET', `/api/v1/kv/pgb/done:${second.transactionId}`)).body).toMatchObject({ found: true, value: 'charged' });
    expect(await pop(base, 'pgb-q')).toEqual([]);

    // One transaction: a lost `required` rolls the ack back with it.
    expect((await push(base, [{ queue: 'pgb-q', payload: { order: 3 } }])).status).toBe(201);
    const [third] = await pop(base, 'pgb-q');
    const lost = await transaction(base, {
      operations: [{ type: 'ack', ...ackOf(third) }],
      kv: [{ op: 'putIfAbsent', ns: 'pgb', key: `done:${second.transactionId}`, value: 'again', ttlSeconds: 3600, required: true }],
    });
    expect(lost.body).toMatchObject({ ok: false, reason: 'kv_precondition' });
    expect((await call(base, 'POST', '/api/v1/ack', ackOf(third))).body).toMatchObject({ ok: true, status: 'completed' });
  });

  test('timers: scheduled through the API, fired by the sweeper, popped from the queue', async () => {
    const res = await req(base, 'POST', '/api/v1/timers', { queue: 'pgb-timers', payload: { fire: 1 }, delaySeconds: 0.2 });
    expect(res.status).toBe(200);
    let messages: Awaited<ReturnType<typeof pop>> = [];
    // A long-polling pop: woken by the push the fire makes (LISTEN queen_log on the direct URL).
    for (let i = 0; i < 20 && messages.length === 0; i++) messages = await pop(base, 'pgb-timers', { wait: true, timeout: 1000 });
    expect(messages.map((m) => [m.transactionId, m.data])).toEqual([[`timer:${res.body.timerId}`, { fire: 1 }]]);
  });

  test('switches: a pause written on another connection reaches the API through LISTEN on the direct URL', async () => {
    await sql(db.url, `INSERT INTO queen.system_state (key, value) VALUES ('kv_enabled', 'false') ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`);
    await sql(db.url, `NOTIFY queen_system_state, 'kv-timers'`);
    await waitFor(async () => (await req(base, 'GET', '/api/v1/kv/pgb/a')).status === 503, { what: 'KV paused (503) by the row the NOTIFY announced', everyMs: 10 });
    expect((await call(base, 'POST', '/api/v1/system/kv-timers', { kv: true })).status).toBe(200);
    expect((await req(base, 'GET', '/api/v1/kv/pgb/a')).status).toBe(200);
    // The LISTEN connections are the server's own backends, not PgBouncer's.
    const listens = await sql(db.url, `SELECT query FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN %' ORDER BY query`, [new URL(db.url).pathname.slice(1)]);
    expect(listens.map((r) => r.query)).toEqual(expect.arrayContaining(['LISTEN queen_log', 'LISTEN queen_system_state']));
  });

  test('clients really share the server connections: 40 calls at once over at most 3 of them', async () => {
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        i % 2 ? kv(base, [{ op: 'incr', ns: 'pgb', key: 'shared', delta: 1, forever: true }]) : push(base, [{ queue: 'pgb-shared', payload: i }]),
      ),
    );
    expect(answers.map((a) => a.status).filter((s) => s >= 300)).toEqual([]);
    const dbName = new URL(db.url).pathname.slice(1);
    const pools = (await bouncer.admin('SHOW POOLS')).filter((p) => p.database === dbName);
    const clients = pools.reduce((n, p) => n + Number(p.cl_active) + Number(p.cl_waiting), 0);
    const servers = (await bouncer.admin('SHOW SERVERS')).filter((s) => s.database === dbName);
    expect(servers.length).toBeLessThanOrEqual(3);
    expect(clients).toBeGreaterThan(servers.length);
    expect((await req(base, 'GET', '/api/v1/kv/pgb/shared')).body).toMatchObject({ value: 20 });
  });

  test('the pools in transaction mode: each statement bounded by its own settings, a checked-out client one transaction with them', async () => {
    const config = loadConfig({ DATABASE_URL: pooled, QUEEN_DB_POOLING: 'transaction', QUEEN_DB_STATEMENT_TIMEOUT_MS: '300', QUEEN_KV_MAX_BATCH: '7' });
    const pools = createPools(config, { message: 4, kv: 4 }, 'queen-pgbouncer-test');
    try {
      // statement_timeout set in the statement's own transaction: the sleep is cancelled and named.
      await expect(pools.message.query('SELECT pg_sleep(3)')).rejects.toMatchObject({ code: 'statement_timeout' });
      const { rows } = await pools.kv.query({ name: 'named_here', text: `SELECT current_setting('queen.kv_max_batch', true) AS batch, current_setting('statement_timeout') AS st` });
      expect(rows[0]).toEqual({ batch: '7', st: '5s' });
      // Several statements on a checked-out client: one transaction (one xid), its settings in force throughout.
      const client = await pools.message.connect();
      const seen: Record<string, any> = {};
      try {
        await client.query(beginOf(pools.message));
        seen.kv = (await client.query(`SELECT txid_current() AS x, current_setting('queen.kv_max_batch', true) AS batch`)).rows[0];
        seen.partitions = (await client.query(`SELECT txid_current() AS x, current_setting('lock_timeout') AS lt`)).rows[0];
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      expect(seen.kv!.x).toBe(seen.partitions!.x);
      expect([seen.kv!.batch, seen.partitions!.lt]).toEqual(['7', '5s']);
    } finally {
      await pools.end();
    }
  });

  // What goes wrong without QUEEN_DB_POOLING=transaction (the default, session), two ways.
  test('session mode: PgBouncer refuses the startup options, so no pooled statement runs', async () => {
    const port = await freePort();
    const session = spawnLogged(process.execPath, [API_MAIN], { DATABASE_URL: pooled, PORT: String(port), QUEEN_WORKERS: '1', DB_POOL_SIZE: '8', LOG_LEVEL: 'info', ...UNLIMITED_RATES });
    try {
      await session.waitForLine((l) => /unsupported startup parameter: options/.test(JSON.stringify(l)), 'PgBouncer refusing the startup options');
    } finally {
      await stopProcess(session);
    }
  });

  test('session mode, PgBouncer told to ignore them: the limits fall back to the defaults and named statements fail', async () => {
    const ignoring = await startPgbouncer({ serverUrl: db.url, poolMode: 'transaction', poolSize: 3, ignoreStartupParameters: 'extra_float_digits, options' });
    const port = await freePort();
    const session = spawnLogged(process.execPath, [API_MAIN], {
      DATABASE_URL: ignoring.through(db.url),
      DATABASE_LISTEN_URL: db.url,
      PORT: String(port),
      QUEEN_WORKERS: '1',
      DB_POOL_SIZE: '8',
      LOG_LEVEL: 'info',
      QUEEN_KV_MAX_BATCH: '3',
      ...UNLIMITED_RATES,
    });
    const sessionBase = `http://127.0.0.1:${port}`;
    try {
      await session.waitForLine(listening, 'API worker listening');
      // QUEEN_KV_MAX_BATCH=3 is lost with the options: four operations are answered (or fail), never refused 400.
      const four = await kv(sessionBase, [1, 2, 3, 4].map((i) => ({ op: 'get', ns: 'lim', key: `k${i}` })));
      expect(four.status === 400 ? four.body.error : 'not refused').toBe('not refused');
      // A statement prepared on one server connection, then sent to another (or prepared twice on one).
      const statuses: number[] = [];
      for (let round = 0; round < 5 && !statuses.includes(500); round++) {
        const answers = await Promise.all(Array.from({ length: 20 }, () => req(sessionBase, 'GET', '/api/v1/kv/pgb/a')));
        statuses.push(...answers.map((a) => a.status));
      }
      expect(statuses).toContain(500);
      await session.waitForLine((l) => /prepared statement/.test(JSON.stringify(l)), 'a prepared statement error');
    } finally {
      await stopProcess(session);
      await ignoring.stop();
    }
  });
});
