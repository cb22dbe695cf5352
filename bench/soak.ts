// npm run bench:soak: a compressed month. Steady mixed traffic for SOAK_MINUTES on a cell whose log
// retention is a minute or two, so the log reaches its steady size within the first window and
// every later window shows whether the cost stays flat as the tables churn: bloat, autovacuum
// falling behind, an index that only grows, a plan that flips as a table grows.
//
// The traffic, paced (a fixed offered rate, so a window's figures compare with another's):
//   - producers push batches of 10 to `soak-a` (8 partitions);
//   - consumers pop batches of 10 from `soak-a` and ack them, one in SOAK_FAIL_EVERY `failed`
//     (retryLimit 1, so some become dead letters; retryDelay 0, see below);
//   - once-marker bundles: a consumer of `soak-b` pops one message and acks it in one transaction
//     with a `putIfAbsent` marker (required, 120 s TTL), the client's `once`; `soak-b`'s producer
//     moves to a new partition every SOAK_PER_PARTITION messages (a partition per order, as Queen's
//     users name them), so partitions come and go: retention must remove the emptied ones and their
//     consumer-group rows, or the partitions table grows for ever;
//   - timers scheduled 1-5 s ahead into `soak-t`, whose consumer pops and acks what they fire;
//   - KV writes with a 60 s TTL.
// Retention: the cell's default (QUEEN_LOG_RETENTION_SECONDS) is SOAK_RETENTION_SECONDS (90) for
// every queue; `soak-a` also has completedRetentionSeconds 60.
//
// It prints, per SOAK_WINDOW_MINUTES window: throughput (messages pushed and acked a second),
// p50/p99 of push, pop and the bundle, rows and bytes of queen.messages and of its indexes, its dead
// tuples, autovacuum runs on it, WAL bytes per pushed message, the rows of queen.partitions and
// queen.partition_consumers; and at the end the flat-cost verdict: from the second window on, rows
// (messages, partitions, group rows) and bytes within 20 % of the second window's, and the last
// window's throughput and p99s within 10 % of the second's.
//
// The API (one worker) and one sweeper run in this process, against a fresh embedded PostgreSQL
// with its durability defaults (fsync, synchronous_commit on), or DATABASE_URL's server when set.
// Bounded: it stops by itself after SOAK_MINUTES (every wait in it has a bound).
//
// Knobs: SOAK_MINUTES (25), SOAK_WINDOW_MINUTES (5), SOAK_PUSH_PER_SEC (200 messages),
// SOAK_BUNDLES_PER_SEC (20), SOAK_TIMERS_PER_SEC (10), SOAK_KV_PER_SEC (20),
// SOAK_RETENTION_SECONDS (90), SOAK_FAIL_EVERY (20), SOAK_PER_PARTITION (20).
import http from 'node:http';
import os from 'node:os';
import { Client } from 'pg';
import { loadConfig } from '../shared/config';
import { createLogger } from '../shared/log';
import { createSweeperMetrics, primeSweeperMetrics } from '../shared/metrics';
import { startApiServer } from '../services/api/server';
import { Sweeper } from '../services/sweeper/sweeper';
import { createPool } from '../shared/db';
import { benchDatabase } from './lib/database';
import { loadAverage, machineLine } from './lib/procs';
import { positiveEnvs } from './lib/options';

const {
  MINUTES, WINDOW_MINUTES, PUSH_PER_SEC, BUNDLES_PER_SEC, TIMERS_PER_SEC, KV_PER_SEC, RETENTION_SECONDS, FAIL_EVERY, PER_PARTITION,
} = positiveEnvs('SOAK_', {
  MINUTES: 25, WINDOW_MINUTES: 5, PUSH_PER_SEC: 200, BUNDLES_PER_SEC: 20, TIMERS_PER_SEC: 10, KV_PER_SEC: 20,
  RETENTION_SECONDS: 90, FAIL_EVERY: 20, PER_PARTITION: 20,
});
const PUSH_BATCH = 10;
const PARTITIONS = 8;

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
let port = 0;

interface Answer {
  status: number;
  body: any;
}

/** One JSON call with a 30 s bound. */
function call(method: string, path: string, body?: unknown): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const req = http.request(
      { host: '127.0.0.1', port, method, path, agent, timeout: 30_000,
        headers: data ? { 'content-type': 'application/json', 'content-length': data.length } : {} },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : undefined });
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer within 30 s`)));
    req.on('error', reject);
    if (data) req.end(data);
    else req.end();
  });
}

/** Latencies (ms) and counts of one window. */
class Window {
  lat: Record<string, number[]> = { push: [], pop: [], bundle: [] };
  pushed = 0;
  acked = 0;
  failedAcks = 0;
  bundles = 0;
  timers = 0;
  kv = 0;
  errors = 0;
  firstError: string | undefined;
}
let win = new Window();

function note(kind: string, t0: bigint): void {
  win.lat[kind]?.push(Number(process.hrtime.bigint() - t0) / 1e6);
}
function fault(err: unknown): void {
  win.errors++;
  win.firstError ??= String((err as Error)?.message ?? err);
}

/** Runs `task` `perSec` times a second until `until`, with at most `inflight` at once (a slow cell is not buried). */
async function paced(perSec: number, until: number, inflight: number, task: (i: number) => Promise<void>): Promise<void> {
  const gap = 1000 / perSec;
  let next = Date.now();
  let i = 0;
  const running = new Set<Promise<void>>();
  while (Date.now() < until) {
    const wait = next - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    next += gap;
    if (running.size >= inflight) {
      await Promise.race(running);
      continue;
    }
    const p = task(i++).catch(fault).finally(() => running.delete(p));
    running.add(p);
  }
  await Promise.all(running);
}

/**
 * A consumer loop: pops (no long poll, so a pop's time is the cell's, not the wait for a message;
 * 50 ms pause after an empty one) and hands the messages to `handle`, until `until`.
 */
async function consume(queue: string, batch: number, until: number, handle: (ms: any[]) => Promise<void>, timed = true): Promise<void> {
  while (Date.now() < until) {
    try {
      const t0 = process.hrtime.bigint();
      const res = await call('GET', `/api/v1/pop/queue/${queue}?batch=${batch}`);
      if (timed) note('pop', t0);
      if (res.status === 200) await handle(res.body.messages);
      else if (res.status === 204) await new Promise((r) => setTimeout(r, 50));
      else throw new Error(`pop ${queue}: ${res.status} ${JSON.stringify(res.body)}`);
    } catch (err) {
      fault(err);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};

interface Row {
  window: number;
  pushedPerSec: number;
  ackedPerSec: number;
  push50: number;
  push99: number;
  pop50: number;
  pop99: number;
  bundle50: number;
  bundle99: number;
  rows: number;
  tableMb: number;
  indexMb: number;
  deadTuples: number;
  autovacuums: number;
  walPerMsg: number;
  partitions: number;
  groupRows: number;
  errors: number;
}

async function tableState(c: Client) {
  const { rows } = await c.query(`
    SELECT (SELECT count(*) FROM queen.messages)::bigint AS rows,
           pg_table_size('queen.messages') AS table_bytes, pg_indexes_size('queen.messages') AS index_bytes,
           s.n_dead_tup AS dead, s.autovacuum_count AS autovacuums, pg_current_wal_lsn()::text AS lsn,
           pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS wal,
           (SELECT count(*) FROM queen.partitions)::bigint AS partitions,
           (SELECT count(*) FROM queen.partition_consumers)::bigint AS group_rows
      FROM pg_stat_user_tables s WHERE s.relid = 'queen.messages'::regclass`);
  const r = rows[0];
  return { rows: Number(r.rows), tableBytes: Number(r.table_bytes), indexBytes: Number(r.index_bytes),
           dead: Number(r.dead), autovacuums: Number(r.autovacuums), wal: Number(r.wal),
           partitions: Number(r.partitions), groupRows: Number(r.group_rows) };
}

async function main(): Promise<void> {
  const db = await benchDatabase('soak', { schema: true });
  const out = (s: string) => process.stdout.write(`${s}\n`);
  const config = loadConfig({
    DATABASE_URL: db.url, QUEEN_WORKERS: '1', DB_POOL_SIZE: '40', QUEEN_SWEEPER: 'false', LOG_LEVEL: 'warn',
    QUEEN_KV_READS_PER_SEC: '1000000000', QUEEN_KV_READS_BURST: '1000000000', QUEEN_KV_WRITES_PER_SEC: '1000000000',
    QUEEN_KV_WRITES_BURST: '1000000000', QUEEN_KV_CELL_OPS_PER_SEC: '1000000000',
    QUEEN_LOG_RETENTION_SECONDS: String(RETENTION_SECONDS),
  });
  const log = createLogger('soak', 'warn');
  const server = await startApiServer(config, log, { message: 24, kv: 8 }, 0);
  port = Number(new URL(server.url).port);
  const sweeperPool = createPool(config, { connectionString: db.url, max: 3, application_name: 'queen-sweeper' });
  sweeperPool.on('error', () => undefined);
  const metrics = createSweeperMetrics();
  primeSweeperMetrics(metrics);
  const sweeper = new Sweeper({
    pool: sweeperPool, databaseUrl: db.url, log, metrics,
    intervalMs: config.sweeperIntervalMs, batch: config.sweeperBatch, fireBatch: config.sweeperFireBatch,
    usageIntervalMs: config.sweeperUsageIntervalMs, retentionSeconds: config.logRetentionSeconds,
  }).start();
  const c = new Client({ connectionString: db.url });
  await c.connect();
  const pgVersion = (await c.query('SHOW server_version')).rows[0].server_version;

  out(`# bench:soak — ${new Date().toISOString()}, ${machineLine(`PostgreSQL ${pgVersion}${db.embedded ? ' (embedded, durability on)' : ''}`)}`);
  out(`# ${MINUTES} min in ${WINDOW_MINUTES}-min windows; offered: ${PUSH_PER_SEC} msg/s pushed (batches of ${PUSH_BATCH}, ${PARTITIONS} partitions), ` +
    `${BUNDLES_PER_SEC} bundles/s, ${TIMERS_PER_SEC} timers/s, ${KV_PER_SEC} KV writes/s; retention ${RETENTION_SECONDS} s (cell default), ` +
    `completedRetentionSeconds 60 on soak-a; 1 ack in ${FAIL_EVERY} failed (retryLimit 1); soak-b a new partition every ${PER_PARTITION} messages`);

  for (const [queue, options] of [
    // retryDelay 0: at Queen's default of 1000 ms a failed message holds its partition for the group
    // for a second, and 1 ack in 20 failing over 8 partitions keeps them held most of the time; the
    // consumers would fall behind, and what this measures is the tables under steady churn.
    ['soak-a', { retryLimit: 1, completedRetentionSeconds: 60, leaseTime: 30, retryDelay: 0 }],
    ['soak-b', { leaseTime: 30 }],
    ['soak-t', { leaseTime: 30 }],
  ] as const) {
    const res = await call('POST', '/api/v1/configure', { queue, options });
    if (res.status !== 200) throw new Error(`configure ${queue}: ${res.status} ${JSON.stringify(res.body)}`);
  }

  const started = Date.now();
  const until = started + MINUTES * 60_000;
  let seq = 0;
  let ackCount = 0;
  const ackAll = async (ms: any[]) => {
    const acks = ms.map((m) => {
      const failed = ++ackCount % FAIL_EVERY === 0;
      return { transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId,
               status: failed ? 'failed' : 'completed', consumerGroup: m.consumerGroup };
    });
    const res = await call('POST', '/api/v1/ack/batch', { acknowledgments: acks });
    if (res.status !== 200) throw new Error(`ack: ${res.status} ${JSON.stringify(res.body)}`);
    win.acked += acks.filter((a) => a.status === 'completed').length;
    win.failedAcks += acks.filter((a) => a.status === 'failed').length;
  };

  const loads = [
    paced(PUSH_PER_SEC / PUSH_BATCH, until, 16, async (i) => {
      const items = Array.from({ length: PUSH_BATCH }, () => ({
        queue: 'soak-a', partition: `p${i % PARTITIONS}`, transactionId: `a-${++seq}`, payload: { n: seq, pad: 'x'.repeat(200) },
      }));
      const t0 = process.hrtime.bigint();
      const res = await call('POST', '/api/v1/push', { items });
      note('push', t0);
      if (res.status !== 201 && res.status !== 200) throw new Error(`push: ${res.status} ${JSON.stringify(res.body)}`);
      win.pushed += PUSH_BATCH;
    }),
    paced(BUNDLES_PER_SEC, until, 8, async (i) => {
      const partition = `order-${Math.floor(i / PER_PARTITION)}`;
      const res = await call('POST', '/api/v1/push', { items: [{ queue: 'soak-b', partition, transactionId: `b-${++seq}`, payload: { n: seq } }] });
      if (res.status !== 201 && res.status !== 200) throw new Error(`push soak-b: ${res.status}`);
      win.pushed += 1;
    }),
    paced(TIMERS_PER_SEC, until, 8, async () => {
      const res = await call('POST', '/api/v1/timers', { queue: 'soak-t', payload: { n: ++seq }, delaySeconds: 1 + (seq % 5) });
      if (res.status !== 201 && res.status !== 200) throw new Error(`timer: ${res.status} ${JSON.stringify(res.body)}`);
      win.timers++;
    }),
    paced(KV_PER_SEC, until, 8, async (i) => {
      const res = await call('POST', '/api/v1/kv', { operations: [{ op: 'put', ns: 'soak', key: `k${i % 5000}`, value: { i }, ttlSeconds: 60 }] });
      if (res.status !== 200) throw new Error(`kv: ${res.status} ${JSON.stringify(res.body)}`);
      win.kv++;
    }),
    // Consumers of soak-a: enough of them to keep up (each pop of 10 then an ack batch).
    ...Array.from({ length: 4 }, () => consume('soak-a', 10, until, ackAll)),
    consume('soak-t', 10, until, ackAll, false),
    // The bundle consumers: pop one, ack it with its marker in one commit.
    ...Array.from({ length: 2 }, () => consume('soak-b', 1, until, async (ms) => {
      for (const m of ms) {
        const t0 = process.hrtime.bigint();
        const res = await call('POST', '/api/v1/transaction', {
          operations: [{ type: 'ack', transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId, status: 'completed' }],
          kv: [{ op: 'putIfAbsent', ns: 'soak-once', key: m.transactionId, value: true, ttlSeconds: 120, required: true }],
        });
        note('bundle', t0);
        if (res.status !== 200 || res.body.ok !== true) throw new Error(`bundle: ${res.status} ${JSON.stringify(res.body)}`);
        win.bundles++;
        win.acked++;
      }
    }, false)),
  ];

  const rows: Row[] = [];
  let before = await tableState(c);
  const header = '| window | pushed/s | acked/s | push p50/p99 ms | pop p50/p99 ms | bundle p50/p99 ms | messages rows | table MB | index MB | dead tuples | autovacuums | WAL B/msg | partitions | group rows | errors |';
  out('');
  out(header);
  out('|' + header.split('|').slice(1, -1).map(() => ' --- ').join('|') + '|');
  const windows = Math.max(1, Math.round(MINUTES / WINDOW_MINUTES));
  const windowing = (async () => {
    for (let w = 1; w <= windows; w++) {
      const end = Math.min(until, started + w * WINDOW_MINUTES * 60_000);
      const wait = end - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const cur = win;
      win = new Window();
      const now = await tableState(c);
      const secs = WINDOW_MINUTES * 60;
      const row: Row = {
        window: w,
        pushedPerSec: cur.pushed / secs,
        ackedPerSec: cur.acked / secs,
        push50: pct(cur.lat.push, 0.5), push99: pct(cur.lat.push, 0.99),
        pop50: pct(cur.lat.pop, 0.5), pop99: pct(cur.lat.pop, 0.99),
        bundle50: pct(cur.lat.bundle, 0.5), bundle99: pct(cur.lat.bundle, 0.99),
        rows: now.rows, tableMb: now.tableBytes / 2 ** 20, indexMb: now.indexBytes / 2 ** 20,
        deadTuples: now.dead, autovacuums: now.autovacuums - before.autovacuums,
        walPerMsg: cur.pushed ? (now.wal - before.wal) / cur.pushed : NaN,
        partitions: now.partitions, groupRows: now.groupRows,
        errors: cur.errors,
      };
      before = now;
      rows.push(row);
      const f = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : '-');
      out(`| ${w} | ${f(row.pushedPerSec)} | ${f(row.ackedPerSec)} | ${f(row.push50)} / ${f(row.push99)} | ${f(row.pop50)} / ${f(row.pop99)} | ` +
        `${f(row.bundle50)} / ${f(row.bundle99)} | ${row.rows} | ${f(row.tableMb, 2)} | ${f(row.indexMb, 2)} | ${row.deadTuples} | ${row.autovacuums} | ` +
        `${f(row.walPerMsg, 0)} | ${row.partitions} | ${row.groupRows} | ${row.errors}${cur.firstError ? ` (${cur.firstError.slice(0, 80)})` : ''} |`);
    }
  })();
  await Promise.all([...loads, windowing]);

  // The verdict: flat from the second window on.
  out('');
  if (rows.length >= 3) {
    const ref = rows[1];
    const last = rows[rows.length - 1];
    const within = (x: number, r: number, tol: number) => Math.abs(x - r) <= tol * r;
    const later = rows.slice(1);
    const checks: [string, boolean][] = [
      [`rows within 20 % of window 2's ${ref.rows}: ${later.map((r) => r.rows).join(', ')}`, later.every((r) => within(r.rows, ref.rows, 0.2))],
      [`partitions within 20 % of window 2's ${ref.partitions}: ${later.map((r) => r.partitions).join(', ')}`, later.every((r) => within(r.partitions, ref.partitions, 0.2))],
      [`group rows within 20 % of window 2's ${ref.groupRows}: ${later.map((r) => r.groupRows).join(', ')}`, later.every((r) => within(r.groupRows, ref.groupRows, 0.2))],
      [`table+index MB within 20 % of window 2's ${(ref.tableMb + ref.indexMb).toFixed(2)}: ${later.map((r) => (r.tableMb + r.indexMb).toFixed(2)).join(', ')}`,
        later.every((r) => within(r.tableMb + r.indexMb, ref.tableMb + ref.indexMb, 0.2))],
      [`last window's pushed/s within 10 % of window 2's (${last.pushedPerSec.toFixed(1)} vs ${ref.pushedPerSec.toFixed(1)})`, within(last.pushedPerSec, ref.pushedPerSec, 0.1)],
      [`last window's acked/s within 10 % of window 2's (${last.ackedPerSec.toFixed(1)} vs ${ref.ackedPerSec.toFixed(1)})`, within(last.ackedPerSec, ref.ackedPerSec, 0.1)],
      ...(['push99', 'pop99', 'bundle99'] as const).map((k): [string, boolean] =>
        [`last window's ${k} within 10 % of window 2's (${last[k].toFixed(1)} vs ${ref[k].toFixed(1)} ms), or below it`, last[k] <= ref[k] * 1.1]),
    ];
    for (const [text, ok] of checks) out(`- ${ok ? 'flat' : 'NOT FLAT'}: ${text}`);
  } else {
    out('- fewer than 3 windows: no flat-cost verdict (SOAK_MINUTES / SOAK_WINDOW_MINUTES >= 3)');
  }
  out(`- load average at the end: ${loadAverage()} (${os.availableParallelism()} cores)`);

  await sweeper.stop();
  await sweeperPool.end();
  await c.end();
  await server.close();
  agent.destroy();
  await db.stop();
}

main().catch((err) => {
  process.stderr.write(`bench:soak failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});
