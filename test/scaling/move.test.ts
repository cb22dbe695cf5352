// A tenant that moves between cells (services/move/move.ts, docs/scaling.md "Moving a tenant"):
// two cells, each on its own database, behind the shipped router (a real HAProxy), a producer and a
// consumer with once-marker bundles calling through the router the whole time. Afterwards every
// message pushed was consumed exactly once (the markers, the effect counter, the log's rows), the
// source holds nothing of the tenant, the other tenants were never refused, and the refusal window
// the clients saw is printed. A move stopped after each of its steps, as a crash would stop it, is
// finished by running it again. And every table of the schema is either moved or named as the
// cell's own, so a table added later cannot be forgotten by the move.
// The router suites need Debian's `haproxy`; without it they say they were not run and why.
import { Client } from 'pg';
import { MOVED_TABLES, CELL_TABLES } from '../../services/move/tables';
import { abortMove, moveTenant, MoveOptions, MoveResult, placementOf } from '../../services/move/move';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { TestApi } from '../support/api';
import { useDatabase } from '../support/database';
import { call, JsonResponse } from '../support/http';
import { HAPROXY_MISSING, Router, useRoutedCells } from '../support/router';

const reason = HAPROXY_MISSING;
if (reason) process.stderr.write(`test/scaling/move.test.ts: the move through the router not run: ${reason}\n`);

// The shipped placement.map places A on cell-a and B on cell-b; C is placed on cell-a by the test.
const A = '00000000-0000-4000-8000-00000000000a';
const B = '00000000-0000-4000-8000-00000000000b';
const C = 'cccccccc-cccc-4ccc-8ccc-cccccccccccc';
const D = 'dddddddd-dddd-4ddd-8ddd-dddddddddddd';

async function q<T = any>(url: string, text: string, values: unknown[] = []): Promise<T[]> {
  const c = new Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(text, values)).rows as T[];
  } finally {
    await c.end();
  }
}

/** The tenant's rows per moved table on a cell. */
async function rowsOf(url: string, tenant: string): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const { table, scope } of MOVED_TABLES) out[table] = Number((await q(url, `SELECT count(*) AS n FROM queen.${table} t WHERE ${scope}`, [tenant]))[0].n);
  return out;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('what a move carries', () => {
  const db = useDatabase();

  test('every table of the schema is either moved or named as the cell\'s own, never both', async () => {
    const tables = (await db.pool.query<{ t: string }>(`SELECT c.relname AS t FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'queen' AND c.relkind IN ('r', 'p') ORDER BY 1`)).rows.map((r) => r.t);
    const moved = MOVED_TABLES.map((m) => m.table);
    const cell = Object.keys(CELL_TABLES);
    expect(moved.filter((t) => cell.includes(t))).toEqual([]);
    expect(new Set(moved).size).toBe(moved.length);
    // A table in neither list is a table the move would forget (or one nobody decided about).
    expect(tables.filter((t) => !moved.includes(t) && !cell.includes(t))).toEqual([]);
    expect([...moved, ...cell].filter((t) => !tables.includes(t))).toEqual([]);
  });

  test('every table with a tenant_id, queue_id, partition_id or timer_id column is moved, but the rollup\'s own slices', async () => {
    const keyed = (await db.pool.query<{ t: string }>(
      `SELECT DISTINCT c.relname AS t FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'queen'
         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        WHERE c.relkind IN ('r', 'p') AND a.attname IN ('tenant_id', 'tenant', 'queue_id', 'partition_id', 'timer_id') ORDER BY 1`,
    )).rows.map((r) => r.t);
    const moved = MOVED_TABLES.map((m) => m.table);
    expect(keyed.filter((t) => !moved.includes(t))).toEqual(['kv_rate_bucket', 'kv_usage_part', 'kv_usage_recent', 'kv_usage_total', 'tenant_moves']);
  });
});

(reason ? describe.skip : describe)(reason ? `a tenant move through the router: not run, ${reason}` : 'a tenant move through the router (HAProxy)', () => {
  const cells = useRoutedCells('move-test');
  // The cells and the router, once started.
  let cellA: TestApi;
  let cellB: TestApi;
  let r: Router;
  beforeAll(async () => {
    ({ a: cellA, b: cellB, router: r } = cells);
    await r.runtime(`add map ${r.map} ${C} cell-a`);
    expect(await placementOf(r.socket, r.map, C)).toBe('cell-a');
  });

  const as = (tenant: string) => ({ 'x-queen-tenant': tenant });
  const options = (tenant: string, from: TestApi, fromCell: string, to: TestApi, toCell: string, extra: Partial<MoveOptions> = {}): MoveOptions => ({
    tenant,
    from: { databaseUrl: from.databaseUrl, cell: fromCell },
    to: { databaseUrl: to.databaseUrl, cell: toCell },
    routers: [r.socket],
    map: r.map,
    ...extra,
  });

  /** Every row kind the move carries, for `tenant`, on its cell through the router; the rest by SQL on `cell`. */
  async function stock(tenant: string, cell: TestApi): Promise<void> {
    const h = as(tenant);
    const kv = await call(r.url, 'POST', '/api/v1/kv', { operations: Array.from({ length: 50 }, (_, i) => ({ op: 'put', ns: 'stock', key: `k${i}`, value: { i }, ttlSeconds: 3600 })) }, h);
    expect(kv.status).toBe(200);
    expect((await call(r.url, 'POST', '/api/v1/configure', { queue: 'side', options: { retryLimit: 0, delayedProcessing: 0, retryDelay: 1000 } }, h)).status).toBe(200);
    expect((await call(r.url, 'POST', '/api/v1/push', { items: [{ queue: 'side', transactionId: 's-1', payload: 1 }, { queue: 'side', transactionId: 's-2', payload: 2 }] }, h)).status).toBe(201);
    // A failed delivery past retryLimit 0: a dead letter, its failure row and text.
    const popped = await call(r.url, 'GET', '/api/v1/pop/queue/side?batch=1', undefined, h);
    expect(popped.status).toBe(200);
    const m = popped.body.messages[0];
    const nack = await call(r.url, 'POST', '/api/v1/ack', { transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId, status: 'failed', error: 'boom' }, h);
    expect(nack.status).toBe(200);
    expect((await call(r.url, 'POST', '/api/v1/timers', { queue: 'side', payload: { later: true }, delaySeconds: 3600, timerKey: 'later' }, h)).status).toBe(200);
    // What the API makes only with keys, encryption, sweepers or traces configured: by SQL, shaped as the cell writes it.
    const [pid] = await q<{ id: string }>(cell.databaseUrl, `SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1 AND q.name = 'side'`, [tenant]);
    const [timer] = await q<{ timer_id: string }>(cell.databaseUrl, `SELECT timer_id FROM queen.log_timers WHERE tenant_id = $1`, [tenant]);
    await q(cell.databaseUrl, `INSERT INTO queen.kv_quota (tenant_id, granted, enabled) VALUES ($1, true, true)`, [tenant]);
    await q(cell.databaseUrl, `INSERT INTO queen.kv_usage (tenant_id, rows, bytes) VALUES ($1, 50, 5000)`, [tenant]);
    await q(cell.databaseUrl, `INSERT INTO queen.sealed_timers (timer_id) VALUES ($1)`, [timer.timer_id]);
    await q(cell.databaseUrl, `INSERT INTO queen.sealed_messages (partition_id, seq) SELECT partition_id, seq FROM queen.messages WHERE partition_id = $1 AND transaction_id = 's-2'`, [pid.id]);
    await q(cell.databaseUrl, `INSERT INTO queen.message_traces (partition_id, transaction_id, n, consumer_group, event_type, data) VALUES ($1, 's-1', 1, '__QUEUE_MODE__', 'step', '{"t":1}')`, [pid.id]);
    await q(cell.databaseUrl, `INSERT INTO queen.queue_delays (queue_id, delayed_processing) SELECT id, 0 FROM queen.queues WHERE tenant_id = $1 AND name = 'side' ON CONFLICT DO NOTHING`, [tenant]);
    await q(cell.databaseUrl, `INSERT INTO queen.queue_retention (queue_id, retention_seconds) SELECT id, 86400 FROM queen.queues WHERE tenant_id = $1 AND name = 'side' ON CONFLICT DO NOTHING`, [tenant]);
    await q(cell.databaseUrl, `INSERT INTO queen.consumer_retry_at (partition_id, consumer_group, retry_at) VALUES ($1, '__QUEUE_MODE__', now() + interval '1 hour') ON CONFLICT DO NOTHING`, [pid.id]);
    await q(cell.databaseUrl, `INSERT INTO queen.shared_leases (partition_id, consumer_group, shared_id, lease_id) VALUES ($1, '__QUEUE_MODE__', gen_random_uuid(), gen_random_uuid()) ON CONFLICT DO NOTHING`, [pid.id]);
    const rows = await rowsOf(cell.databaseUrl, tenant);
    // The move is tested on every table it carries: a table stocked with nothing would pass unread.
    expect(Object.entries(rows).filter(([, n]) => n === 0)).toEqual([]);
  }

  test('a tenant moves with a producer and a consumer running through the router: nothing lost, nothing doubled, and the refusal window measured', async () => {
    await stock(A, cellA);
    const before = await rowsOf(cellA.databaseUrl, A);
    const h = as(A);
    let stop = false;
    const refusals: number[] = [];
    const unexpected: string[] = [];
    /** One call, retried on the move's refusal (and the router's own 503 while a cell is checked) until it is answered. */
    const steady = async (method: string, path: string, body?: unknown, tenant = A): Promise<JsonResponse> => {
      for (;;) {
        const res = await call(r.url, method, path, body, as(tenant));
        if (res.status !== 503) return res;
        if (res.body?.error !== 'tenant_moving') unexpected.push(`${method} ${path}: 503 ${res.text}`);
        if (res.headers.get('retry-after') !== '1') unexpected.push(`${method} ${path}: 503 without Retry-After: 1`);
        if (tenant !== A) unexpected.push(`${tenant} was refused: ${res.text}`);
        refusals.push(Date.now());
        // Sooner than Retry-After asks, so the window is measured to 20 ms.
        await sleep(20);
      }
    };
    let produced = 0;
    const producer = (async () => {
      for (let i = 0; !stop; i++) {
        const res = await steady('POST', '/api/v1/push', { items: [{ queue: 'orders', partition: `p${i % 4}`, transactionId: `m-${i}`, payload: { i } }] });
        if (res.status !== 201) unexpected.push(`push m-${i}: ${res.status} ${res.text}`);
        produced = i + 1;
        await sleep(5);
      }
    })();
    let consumed = 0;
    let redelivered = 0;
    const consumer = (async () => {
      while (!stop || consumed < produced) {
        const popped = await steady('GET', '/api/v1/pop/queue/orders?batch=10&wait=true&timeout=200');
        if (popped.status === 204) continue;
        if (popped.status !== 200) {
          unexpected.push(`pop: ${popped.status} ${popped.text}`);
          continue;
        }
        for (const m of popped.body.messages as Array<{ transactionId: string; partitionId: string; leaseId: string }>) {
          const ack = { type: 'ack', transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId, status: 'completed' };
          const bundle = await steady('POST', '/api/v1/transaction', {
            operations: [ack],
            kv: [
              { op: 'putIfAbsent', ns: 'done', key: m.transactionId, value: true, ttlSeconds: 86400, required: true },
              { op: 'incr', ns: 'effects', key: 'count', delta: 1, forever: true },
            ],
          });
          if (bundle.status !== 200) unexpected.push(`bundle ${m.transactionId}: ${bundle.status} ${bundle.text}`);
          else if (bundle.body.ok) consumed++;
          else if (bundle.body.reason === 'kv_precondition') {
            // Done before: take it off with a plain ack, the effect not performed again.
            redelivered++;
            const plain = await steady('POST', '/api/v1/ack', { transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId, status: 'completed' });
            if (plain.status !== 200) unexpected.push(`ack ${m.transactionId}: ${plain.status} ${plain.text}`);
          } else unexpected.push(`bundle ${m.transactionId}: ${bundle.text}`);
        }
      }
    })();
    // Another tenant on each cell keeps writing through the move: never refused.
    let others = 0;
    const neighbours = (async () => {
      for (let i = 0; !stop; i++) {
        for (const t of [B, C]) {
          const res = await steady('PUT', `/api/v1/kv/n/${i}`, { value: i, ttlSeconds: 600 }, t);
          if (res.status !== 200) unexpected.push(`${t} put: ${res.status} ${res.text}`);
          others++;
        }
        await sleep(10);
      }
    })();

    await sleep(800);
    const startedAt = Date.now();
    let result: MoveResult;
    try {
      result = await moveTenant(options(A, cellA, 'cell-a', cellB, 'cell-b'));
    } finally {
      setTimeout(() => (stop = true), 800);
    }
    const movedIn = Date.now() - startedAt;
    // Bounded: the consumer drains what was produced, then all three stop.
    await Promise.race([Promise.all([producer, consumer, neighbours]), sleep(30_000).then(() => unexpected.push('the clients did not finish within 30 s'))]);

    expect(unexpected).toEqual([]);
    expect(await placementOf(r.socket, r.map, A)).toBe('cell-b');
    expect(result.copies).toBe(1);
    // Every table the move carries was verified with rows in it.
    expect(result.tables.map((t) => t.table)).toEqual(MOVED_TABLES.map((m) => m.table));
    expect(result.tables.filter((t) => t.rows === 0)).toEqual([]);
    for (const t of result.tables) expect(t.rows).toBeGreaterThanOrEqual(before[t.table]);

    // Nothing of the tenant is left on its old cell, and the router sends it to the new one.
    expect(Object.entries(await rowsOf(cellA.databaseUrl, A)).filter(([, n]) => n > 0)).toEqual([]);
    const [{ role }] = await q(cellA.databaseUrl, 'SELECT role FROM queen.tenant_moves WHERE tenant_id = $1', [A]);
    expect(role).toBe('moved');
    expect(await q(cellB.databaseUrl, 'SELECT * FROM queen.tenant_moves WHERE tenant_id = $1', [A])).toEqual([]);

    // Nothing lost, nothing doubled: each message pushed is in the log once, marked done once, its effect counted once.
    const [log] = await q(cellB.databaseUrl, `SELECT count(*)::int AS n, count(DISTINCT m.transaction_id)::int AS d FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1 AND q.name = 'orders'`, [A]);
    const [marks] = await q(cellB.databaseUrl, `SELECT count(*)::int AS n FROM queen.kv WHERE tenant_id = $1 AND namespace = 'done'`, [A]);
    const [effects] = await q(cellB.databaseUrl, `SELECT value::int AS n FROM queen.kv WHERE tenant_id = $1 AND namespace = 'effects' AND key = 'count'`, [A]);
    expect(produced).toBeGreaterThan(20);
    expect(log).toEqual({ n: produced, d: produced });
    expect(marks.n).toBe(produced);
    expect(effects.n).toBe(produced);
    expect(consumed).toBe(produced);
    // The stocked keys came along, readable through the router from the new cell.
    const got = await call(r.url, 'GET', '/api/v1/kv/stock/k7', undefined, h);
    expect(got.status).toBe(200);
    expect(got.body.value).toEqual({ i: 7 });
    expect(others).toBeGreaterThan(20);

    // The clients were refused, and for how long.
    expect(refusals.length).toBeGreaterThan(0);
    const windowMs = Math.max(...refusals) - Math.min(...refusals);
    process.stdout.write(
      `tenant move through the router: ${produced} messages produced and consumed once each (${redelivered} redelivered and refused by their marker), ` +
        `refusal window ${windowMs} ms (${refusals.length} refused calls), the move ${movedIn} ms: ${JSON.stringify(result.steps)}\n`,
    );
    expect(windowMs).toBeLessThan(10_000);
  }, 90_000);

  test.each(['precopy', 'pause', 'copy', 'flip', 'resume'] as const)('a move stopped after its %s step, as a crash would stop it, is finished by running it again', async (step) => {
    // B, from cell-b to cell-a, with rows of every kind; then back, so each case starts the same way.
    const tenant = B;
    await q(cellA.databaseUrl, 'DELETE FROM queen.tenant_moves WHERE tenant_id = $1', [tenant]);
    if (!(await rowsOf(cellB.databaseUrl, tenant)).sealed_timers) await stock(tenant, cellB);
    const before = await rowsOf(cellB.databaseUrl, tenant);
    await expect(moveTenant(options(tenant, cellB, 'cell-b', cellA, 'cell-a', { stopAfter: step }))).rejects.toThrow(`stopped after ${step}`);
    // Stopped: exactly one cell is the tenant's, by the router, and it holds all the rows.
    const placed = await placementOf(r.socket, r.map, tenant);
    expect(placed).toBe(step === 'precopy' || step === 'pause' || step === 'copy' ? 'cell-b' : 'cell-a');
    expect(await rowsOf((placed === 'cell-a' ? cellA : cellB).databaseUrl, tenant)).toEqual(before);
    // Paused until the move is finished, but before the pause and after the resume.
    const res = await call(r.url, 'GET', '/api/v1/kv/stock/k1', undefined, as(tenant));
    if (step === 'precopy') {
      expect(res.status).toBe(200);
    } else if (step !== 'resume') {
      await sleep(1200); // every worker has read the pause
      const paused = await call(r.url, 'GET', '/api/v1/kv/stock/k1', undefined, as(tenant));
      expect([paused.status, paused.body.error, paused.headers.get('retry-after')]).toEqual([503, 'tenant_moving', '1']);
    } else {
      expect(res.status === 200 || res.body.error === 'tenant_moving').toBe(true);
    }
    const result = await moveTenant(options(tenant, cellB, 'cell-b', cellA, 'cell-a'));
    expect(result.startedAt).toBe({ precopy: 'pause', pause: 'paused', copy: 'paused', flip: 'flip', resume: 'remove' }[step]);
    expect(await placementOf(r.socket, r.map, tenant)).toBe('cell-a');
    expect(await rowsOf(cellA.databaseUrl, tenant)).toEqual(before);
    expect(Object.values(await rowsOf(cellB.databaseUrl, tenant)).every((n) => n === 0)).toBe(true);
    await sleep(1200);
    const served = await call(r.url, 'GET', '/api/v1/kv/stock/k1', undefined, as(tenant));
    expect([served.status, served.body.value]).toEqual([200, { i: 1 }]);
    // And back home, for the next case (a move onto a cell it once left).
    await moveTenant(options(tenant, cellA, 'cell-a', cellB, 'cell-b'));
    expect(await rowsOf(cellB.databaseUrl, tenant)).toEqual(before);
    await sleep(1200);
  }, 60_000);

  test('a move given up before its flip (--abort) leaves the tenant served by its source, and the target with nothing of it; past the flip it is refused', async () => {
    const tenant = B;
    if (!(await rowsOf(cellB.databaseUrl, tenant)).sealed_timers) await stock(tenant, cellB);
    const before = await rowsOf(cellB.databaseUrl, tenant);
    await expect(moveTenant(options(tenant, cellB, 'cell-b', cellA, 'cell-a', { stopAfter: 'copy' }))).rejects.toThrow('stopped after copy');
    expect(Object.values(await rowsOf(cellA.databaseUrl, tenant)).some((n) => n > 0)).toBe(true);
    await abortMove(options(tenant, cellB, 'cell-b', cellA, 'cell-a'));
    expect(await placementOf(r.socket, r.map, tenant)).toBe('cell-b');
    expect(Object.values(await rowsOf(cellA.databaseUrl, tenant)).every((n) => n === 0)).toBe(true);
    expect(await rowsOf(cellB.databaseUrl, tenant)).toEqual(before);
    expect(await q(cellB.databaseUrl, 'SELECT * FROM queen.tenant_moves WHERE tenant_id = $1', [tenant])).toEqual([]);
    await sleep(1200);
    const served = await call(r.url, 'GET', '/api/v1/kv/stock/k1', undefined, as(tenant));
    expect([served.status, served.body.value]).toEqual([200, { i: 1 }]);
    // Past the flip there is no going back but forward.
    await expect(moveTenant(options(tenant, cellB, 'cell-b', cellA, 'cell-a', { stopAfter: 'flip' }))).rejects.toThrow('stopped after flip');
    await expect(abortMove(options(tenant, cellB, 'cell-b', cellA, 'cell-a'))).rejects.toThrow('past its flip');
    await moveTenant(options(tenant, cellB, 'cell-b', cellA, 'cell-a'));
    await moveTenant(options(tenant, cellA, 'cell-a', cellB, 'cell-b'));
    expect(await rowsOf(cellB.databaseUrl, tenant)).toEqual(before);
  }, 60_000);

  test('a tenant whose table is larger than the move\'s whole memory moves: the rows travel a chunk at a time', async () => {
    // 128 MB of KV values (512 rows of 256 KB), moved by a process allowed 64 MB of heap: a table
    // read as one value would need twice that in one string.
    await r.runtime(`add map ${r.map} ${D} cell-a`);
    await q(cellA.databaseUrl, `INSERT INTO queen.kv (tenant_id, namespace, key, value, version)
      SELECT $1, 'big', 'k' || g, to_jsonb(repeat(md5(g::text), 8192)), nextval('queen.kv_version_seq') FROM generate_series(1, 512) g`, [D]);
    const main = path.resolve(__dirname, '..', '..', 'services', 'move', 'main.js');
    const args = [D, '--from-db', cellA.databaseUrl, '--from-cell', 'cell-a', '--to-db', cellB.databaseUrl, '--to-cell', 'cell-b', '--router', r.socket, '--map', r.map];
    const done = spawnSync(process.execPath, ['--max-old-space-size=64', main, ...args], { encoding: 'utf8', timeout: 120_000 });
    expect([done.status, done.stderr.split('\n').filter((l) => /heap|error/i.test(l))]).toEqual([0, []]);
    expect(JSON.parse(done.stdout)).toMatchObject({ tenant: D, servedBy: 'cell-b', copies: 1 });
    const [moved] = await q(cellB.databaseUrl, `SELECT count(*)::int AS n, sum(length(value #>> '{}'))::bigint AS bytes FROM queen.kv WHERE tenant_id = $1`, [D]);
    expect([moved.n, Number(moved.bytes)]).toEqual([512, 512 * 256 * 1024]);
    expect((await rowsOf(cellA.databaseUrl, D)).kv).toBe(0);
  }, 180_000);

  test('npm run tenant:move: a move from the command line prints its JSON line and exits 0; a wrong command line exits 2', () => {
    const main = path.resolve(__dirname, '..', '..', 'services', 'move', 'main.js');
    const wrong = spawnSync(process.execPath, [main, 'not-a-uuid'], { encoding: 'utf8', timeout: 20_000 });
    expect([wrong.status, wrong.stderr]).toEqual([2, expect.stringContaining('the tenant is a UUID')]);
    const args = [C, '--from-db', cellA.databaseUrl, '--from-cell', 'cell-a', '--to-db', cellB.databaseUrl, '--to-cell', 'cell-b', '--router', r.socket, '--map', r.map];
    const done = spawnSync(process.execPath, [main, ...args], { encoding: 'utf8', timeout: 60_000 });
    expect(done.status).toBe(0);
    expect(JSON.parse(done.stdout)).toMatchObject({ tenant: C, servedBy: 'cell-b', startedAt: 'pause', copies: 1 });
    // Run again, it finds the move done.
    expect(JSON.parse(spawnSync(process.execPath, [main, ...args], { encoding: 'utf8', timeout: 60_000 }).stdout)).toMatchObject({ startedAt: 'done' });
  }, 90_000);
});
