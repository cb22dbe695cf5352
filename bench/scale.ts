// npm run bench:scale — how each operation's cost grows with the data. On its own embedded
// PostgreSQL (durability on), the cell is loaded with plain INSERT ... SELECT batches (never the API)
// to each size in turn (10^5, 10^6, 10^7 keys; pending timers and backlog messages min(size, 10^6)),
// and at each size, through the API and as direct SQL in the same run:
//   get, put, putIfAbsent, incr, getPrefix page   closed loops of --clients for --duration seconds;
//   prune                                           an expired backlog of size/10 rows drained by the
//                                                   sweeper's own statement and by a bare DELETE;
//   fire                                            20,000 due timers beside the pending backlog,
//                                                   drained the same two ways; then the fire lag of a
//                                                   real sweeper process at a steady 500 timers/s;
//   pop + ack                                       batches of 10 behind the message backlog, one
//                                                   partition per client; and every client in a group
//                                                   of its own on one deep partition (min(size, 10^6)
//                                                   messages): a pop's cost must not grow with it;
// plus table and index bytes, B-tree depths, WAL bytes per operation (pg_current_wal_insert_lsn) and
// the usage rollup's duration: the full count in one statement and the incremental one (v2, a refresh
// from a fresh layout, then a steady refresh, each slice one statement, at each --slice-pages).
// Prints cost against size and API÷SQL at each size; raw figures go to bench/results/scale.json.
// Resumable: sizes already in the json are loaded (the data is needed for the next size) but not
// measured again, unless --fresh.
// Options (flag or env): --quick (10^5 and 10^6), --sizes=10000,100000 (BENCH_SIZES), --fresh,
// --duration=3 (BENCH_DURATION_S), --clients=16 (BENCH_CLIENTS), --out=bench/results/scale.json,
// --slice-pages=4096 (BENCH_SLICE_PAGES, a list: the incremental rollup at each; the first is also
// measured beside --tenants=10000 made-up tenants, BENCH_TENANTS), --only=rollup
// (BENCH_ONLY: load keys and timers, measure the rollups alone; default --out
// bench/results/scale-rollup.json).
import { ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { applySchema } from '../shared/db';
import { EmbeddedPostgres, freePort, startEmbeddedPostgres } from '../shared/embeddedPostgres';
import { SWEEPER_PASS, KV_USAGE_ROLLUP } from '../shared/sql/sweeper';
import { DEFAULT_USAGE_SLICE_PAGES } from '../services/sweeper/sweeper';
import { barePopAck } from './lib/bareLog';
import { closedLoop, HttpClient, PointResult, rawClient, Task } from './lib/load';
import { cellEnv, childrenOf, machineLine, stopChild, TreeCpu, waitReady } from './lib/procs';
import { spawnSweeper } from '../test/support/processes';
import { waitFor } from '../test/support/wait';

// ---------------------------------------------------------------- options
const argv = process.argv.slice(2);
function opt(name: string, envName: string, fallback: string): string {
  const flag = argv.find((a) => a === `--${name}` || a.startsWith(`--${name}=`));
  if (flag) return flag.includes('=') ? flag.slice(flag.indexOf('=') + 1) : 'true';
  return process.env[envName]?.trim() || fallback;
}
const QUICK = opt('quick', 'BENCH_QUICK', 'false') === 'true';
const FRESH = opt('fresh', 'BENCH_FRESH', 'false') === 'true';
const SIZES = opt('sizes', 'BENCH_SIZES', QUICK ? '100000,1000000' : '100000,1000000,10000000')
  .split(',')
  .map((s) => Number(s))
  .sort((a, b) => a - b);
if (SIZES.some((n) => !Number.isInteger(n) || n < 1000)) throw new Error('--sizes are whole numbers of at least 1000');
const DURATION_S = Number(opt('duration', 'BENCH_DURATION_S', QUICK ? '2' : '3'));
const CLIENTS = Number(opt('clients', 'BENCH_CLIENTS', '16'));
const ONLY_ROLLUP = opt('only', 'BENCH_ONLY', '') === 'rollup';
const OUT = opt('out', 'BENCH_OUT', path.join('bench', 'results', ONLY_ROLLUP ? 'scale-rollup.json' : 'scale.json'));
const SLICE_PAGES = opt('slice-pages', 'BENCH_SLICE_PAGES', String(DEFAULT_USAGE_SLICE_PAGES))
  .split(',')
  .map((x) => Number(x));
if (SLICE_PAGES.some((x) => !Number.isInteger(x) || x < 1)) throw new Error('--slice-pages are whole numbers of at least 1');
const MANY_TENANTS = Number(opt('tenants', 'BENCH_TENANTS', '10000'));
const TENANT = '00000000-0000-0000-0000-000000000001';
const NS = 'bench';
const VALUE = JSON.stringify({ name: 'bench', n: 12345, tags: ['a', 'b', 'c'], payload: 'x'.repeat(48) });
const COUNTERS = 10_000;
const FIRE_DUE = 20_000;
const LAG_RATE = 500;
const LAG_SECONDS = 5;
const WARM_S = 1;
const QUEUE = 'scale-q';
const PARTITIONS = 16;
const CAP = 1_000_000; // timers and messages stop growing here
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (s: string) => process.stdout.write(`${new Date().toISOString().slice(11, 19)} ${s}\n`);

/**
 * Seconds a size costs on the 2-core machine of bench/README.md (the --quick run of 2026-12-01, load
 * average 10-12 from other work): keys load at about 50,000 rows a second, timers and messages (more
 * indexes) at about 25,000, VACUUM ANALYZE and a checkpoint after each load; the prune backlog
 * (size/10) loaded and drained twice, about 15,000 rows a second in all; the fixed points (fifteen lanes of --duration seconds with a checkpoint
 * each, the fire drains, the lag window, three rollups at about 1 s per million keys).
 */
function expectedSeconds(n: number, loadedBefore: number): number {
  const capped = (x: number) => Math.min(x, CAP);
  const load = (n - loadedBefore) / 50_000 + (3 * (capped(n) - capped(loadedBefore))) / 25_000 + n / 150_000;
  // --only=rollup: keys and timers (no messages); the full count three times, the v2 refreshes twice per slice size.
  if (ONLY_ROLLUP) return load - (2 * (capped(n) - capped(loadedBefore))) / 25_000 + ((3 + 2 * SLICE_PAGES.length) * 2 * n) / 1_000_000;
  return load + (2 * n) / 10 / 15_000 + 15 * (DURATION_S + 3.5) + 10 * WARM_S + 15 + LAG_SECONDS + 10 + (4 * n) / 1_000_000;
}

// ---------------------------------------------------------------- statements of the sql lane
/** The whole cell counted in one statement (the usage rollup before the incremental one; its upsert left out), measured beside the incremental one. */
const FULL_USAGE_COUNT = {
  name: 'full_usage_count',
  text: `SELECT tenant_id, sum(r)::bigint AS rows, sum(b)::bigint AS bytes, sum(t)::bigint AS timers, sum(tb)::bigint AS timer_bytes
           FROM (SELECT k.tenant_id, count(*) AS r, sum(octet_length(k.namespace) + octet_length(k.key) + pg_column_size(k.value)) AS b, 0 AS t, 0 AS tb
                   FROM queen.kv k WHERE queen.kv_live_v1(k.expires_at, now()) GROUP BY k.tenant_id
                 UNION ALL
                 SELECT t.tenant_id, 0, 0, count(*), sum(pg_column_size(t.payload)) FROM queen.log_timers t GROUP BY t.tenant_id) x
          GROUP BY tenant_id`,
};
const SQL = {
  get: `SELECT value, version FROM queen.kv WHERE tenant_id = $1 AND namespace = $2 AND key = $3 AND (expires_at IS NULL OR expires_at > now())`,
  put: `INSERT INTO queen.kv (tenant_id, namespace, key, value, version) VALUES ($1, $2, $3, $4::jsonb, nextval('queen.kv_version_seq'))
        ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version, expires_at = NULL, updated_at = now()
        RETURNING version`,
  putIfAbsent: `INSERT INTO queen.kv (tenant_id, namespace, key, value, version) VALUES ($1, $2, $3, $4::jsonb, nextval('queen.kv_version_seq'))
        ON CONFLICT (tenant_id, namespace, key) DO NOTHING RETURNING version`,
  incr: `INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version) VALUES ($1, $2, $3, to_jsonb($4::numeric), nextval('queen.kv_version_seq'))
        ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET value = to_jsonb(k.value::numeric + $4::numeric), version = EXCLUDED.version, updated_at = now()
        RETURNING value, version`,
  prefix: `SELECT key, value, version FROM queen.kv WHERE tenant_id = $1 AND namespace = $2 AND key > $3 AND key < 'l'
            AND (expires_at IS NULL OR expires_at > now()) ORDER BY key LIMIT 101`,
  prune: `DELETE FROM queen.kv WHERE ctid IN (SELECT ctid FROM queen.kv WHERE expires_at IS NOT NULL AND expires_at < now() LIMIT 4000)`,
  fire: `WITH c AS (
           DELETE FROM queen.log_timers WHERE timer_id IN (
             SELECT timer_id FROM queen.log_timers WHERE deliver_at <= now() ORDER BY deliver_at, timer_id LIMIT 500 FOR UPDATE SKIP LOCKED)
           RETURNING timer_id, payload)
         INSERT INTO queen.messages (partition_id, seq, transaction_id, payload)
         SELECT $1, nextval('bench_fire_seq'), 'timer:' || timer_id, payload FROM c`,
};

// ---------------------------------------------------------------- processes
async function startCell(databaseUrl: string): Promise<{ port: number; proc: ChildProcess }> {
  const port = await freePort();
  const proc = spawn(process.execPath, [path.resolve(__dirname, '..', 'services', 'api', 'main.js')], {
    env: cellEnv(databaseUrl, port, 1),
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  await waitReady(port, '/ready');
  return { port, proc };
}

// ---------------------------------------------------------------- figures
interface Lane {
  opsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  walBytesPerOp: number;
  pgCpuUsPerOp: number;
  /** Pages PostgreSQL had to bring into shared_buffers (from the OS), and found there, per operation. */
  blksReadPerOp?: number;
  blksHitPerOp?: number;
  apiCpuUsPerOp?: number;
  errors: number;
}
interface SizeFigures {
  size: number;
  timers: number;
  messages: number;
  date: string;
  loadSeconds: number;
  ops: Record<string, { api: Lane; sql: Lane }>;
  prune: { backlog: number; api: Lane; sql: Lane };
  fire: { due: number; pendingBeside: number; api: Lane; sql: Lane };
  lag: { rate: number; seconds: number; p50Ms: number; p99Ms: number; maxMs: number };
  rollupMs: number[];
  /** The incremental design's unit: the rollup's count over 10,000 heap pages of queen.kv. */
  rollupSliceMs?: number[];
  /** The incremental rollup (v2), per slice size: slices in all, each refresh's total and its slices' p50 / max. */
  sliceRefresh?: {
    pages: number;
    slices: number;
    firstMs: number;
    firstSliceP50Ms: number;
    firstSliceMaxMs: number;
    steadyMs: number;
    steadySliceP50Ms: number;
    steadySliceMaxMs: number;
  }[];
  /** One v2 call with made-up tenants each holding a part in every slice: the publish's cost. */
  manyTenants?: { tenants: number; parts: number; callMs: number[] };
  kvPages?: number;
  bytes: Record<string, { table: number; indexes: number }>;
  depth: Record<string, number>;
  autovacuum: { table: string; vacuums: number; analyzes: number; deadTuples: number }[];
}
interface Results {
  machine: string;
  settings: string;
  sizes: Record<string, SizeFigures>;
}

interface Ctx {
  url: string;
  admin: Pool;
  cellPort: number;
  cell: ChildProcess;
  pgPid?: number;
  firePartition: string;
  partitions: string[];
  /** One partition of QUEUE as deep as the whole backlog. */
  deepPartition: string;
}

async function walAt(admin: Pool): Promise<number> {
  return (await admin.query(`SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8 AS b`)).rows[0].b as number;
}

/** What a lane runs: set-up (connections) and tear-down outside the measured stretch. */
interface Point {
  setup?(): Promise<void>;
  run(): Promise<PointResult>;
  teardown?(): Promise<void>;
}

/**
 * A measured stretch: WAL, PostgreSQL CPU and API CPU around `run`, after a CHECKPOINT (so each lane
 * pays the full-page images of the pages it first touches, the same for both lanes of an operation,
 * instead of the first lane after a checkpoint paying them all).
 */
async function measured(ctx: Ctx, point: Point | (() => Promise<PointResult>)): Promise<Lane> {
  const p: Point = typeof point === 'function' ? { run: point } : point;
  await ctx.admin.query('CHECKPOINT');
  const blks = async () => {
    // Backends publish their counters when they end or within a second of going idle.
    await sleep(1100);
    const { rows } = await ctx.admin.query(`SELECT blks_read::float8 AS r, blks_hit::float8 AS h FROM pg_stat_database WHERE datname = current_database()`);
    return { r: rows[0].r as number, h: rows[0].h as number };
  };
  const b0 = await blks();
  let lane: Lane | undefined;
  await p.setup?.();
  try {
    const pg = new TreeCpu(() => (ctx.pgPid ? [ctx.pgPid] : []));
    const api = new TreeCpu(() => [ctx.cell.pid!]);
    const w0 = await walAt(ctx.admin);
    pg.start();
    api.start();
    const r = await p.run();
    const pgUs = pg.stop();
    const apiUs = api.stop();
    const w1 = await walAt(ctx.admin);
    const per = (x: number) => (r.ops > 0 ? x / r.ops : NaN);
    lane = {
      opsPerSec: r.ops / r.seconds,
      p50Ms: r.p50Us / 1000,
      p99Ms: r.p99Us / 1000,
      walBytesPerOp: per(w1 - w0),
      pgCpuUsPerOp: per(pgUs),
      apiCpuUsPerOp: per(apiUs),
      errors: r.errors,
    };
    (lane as { ops?: number }).ops = r.ops;
  } finally {
    await p.teardown?.();
  }
  const b1 = await blks();
  const ops = (lane as { ops?: number }).ops ?? 0;
  delete (lane as { ops?: number }).ops;
  return { ...lane, blksReadPerOp: ops > 0 ? (b1.r - b0.r) / ops : NaN, blksHitPerOp: ops > 0 ? (b1.h - b0.h) / ops : NaN };
}

function httpLoop(ctx: Ctx, gen: (c: number) => { method: string; path: string; body?: string; ops?: number }, check: RegExp, seconds: number): Point {
  let clients: HttpClient[] = [];
  return {
    async setup() {
      clients = Array.from({ length: CLIENTS }, () => rawClient('127.0.0.1', ctx.cellPort));
    },
    run: () =>
      closedLoop(CLIENTS, seconds * 1000, (c) => async () => {
        const r = gen(c);
        const a = await clients[c].request(r.method, r.path, r.body);
        if (a.status !== 200 || !check.test(a.body)) throw new Error(`HTTP ${a.status}: ${a.body.slice(0, 200)}`);
        return r.ops ?? 1;
      }),
    async teardown() {
      clients.forEach((c) => c.close());
    },
  };
}

/** One connection per client, opened before the stretch (a backend born inside it would be counted from its birth, one that ended inside it not at all). */
function sqlLoop(ctx: Ctx, task: (pool: Pool, c: number) => Task, seconds: number): Point {
  let pool: Pool;
  return {
    async setup() {
      pool = new Pool({ connectionString: ctx.url, max: CLIENTS });
      await Promise.all(Array.from({ length: CLIENTS }, () => pool.connect())).then((cs) => cs.forEach((c) => c.release()));
    },
    run: () => closedLoop(CLIENTS, seconds * 1000, (c) => task(pool, c)),
    teardown: () => pool.end(),
  };
}

async function once(p: Point): Promise<void> {
  await p.setup?.();
  try {
    await p.run();
  } finally {
    await p.teardown?.();
  }
}

// ---------------------------------------------------------------- loading (never the API)
async function loadKeys(admin: Pool, from: number, to: number): Promise<void> {
  for (let lo = from; lo < to; lo += 500_000) {
    const hi = Math.min(to, lo + 500_000);
    await admin.query(
      `INSERT INTO queen.kv (tenant_id, namespace, key, value, version)
       SELECT $1, $2, 'k' || g, $3::jsonb, nextval('queen.kv_version_seq') FROM generate_series($4::bigint, $5::bigint - 1) g`,
      [TENANT, NS, VALUE, lo, hi],
    );
  }
}

async function loadTimers(admin: Pool, n: number): Promise<void> {
  for (let lo = 0; lo < n; lo += 250_000) {
    const count = Math.min(n - lo, 250_000);
    // Pending for a day and more, spread over a week: never due during the run.
    await admin.query(
      `INSERT INTO queen.log_timers (tenant_id, queue, partition, payload, deliver_at)
       SELECT $1, 'scale-timers', 'p' || (g % 16), jsonb_build_object('n', g), date_trunc('milliseconds', now() + interval '1 day' + g * interval '1 ms')
       FROM generate_series(1, $2::int) g`,
      [TENANT, count],
    );
  }
}

async function loadMessages(admin: Pool, partitions: string[], from: number, to: number): Promise<void> {
  for (let lo = from; lo < to; lo += 500_000) {
    const hi = Math.min(to, lo + 500_000);
    await admin.query(
      `INSERT INTO queen.messages (partition_id, seq, transaction_id, payload)
       SELECT ($1::uuid[])[1 + g % ${PARTITIONS}], g / ${PARTITIONS} + 1, 'm' || g, '{"order": "A-1001", "n": 42}'::jsonb
       FROM generate_series($2::bigint, $3::bigint - 1) g`,
      [partitions, lo, hi],
    );
  }
  await admin.query(
    `UPDATE queen.partitions p SET last_seq = s.top FROM (SELECT partition_id, max(seq) AS top FROM queen.messages WHERE partition_id = ANY ($1::uuid[]) GROUP BY 1) s
     WHERE p.id = s.partition_id`,
    [partitions],
  );
}

/** The deep partition's messages from..to (seqs from + 1 .. to). */
async function loadDeep(admin: Pool, partition: string, from: number, to: number): Promise<void> {
  for (let lo = from; lo < to; lo += 500_000) {
    await admin.query(
      `INSERT INTO queen.messages (partition_id, seq, transaction_id, payload)
       SELECT $1, g, 'd' || g, '{"order": "A-1001", "n": 42}'::jsonb FROM generate_series($2::bigint + 1, $3::bigint) g`,
      [partition, lo, Math.min(to, lo + 500_000)],
    );
  }
  await admin.query(`UPDATE queen.partitions SET last_seq = $2 WHERE id = $1`, [partition, to]);
}

// ---------------------------------------------------------------- one size
/** The usage rollups at the size loaded: the full count three times, a 10,000-page count, the incremental one (v2). */
async function measureRollups(ctx: Ctx): Promise<Pick<SizeFigures, 'rollupMs' | 'rollupSliceMs' | 'sliceRefresh' | 'manyTenants' | 'kvPages'>> {
  // The usage rollup, the sweeper's statement, three times (the first reads cold pages).
  const rollupMs: number[] = [];
  for (let i = 0; i < 3; i++) {
    const s = performance.now();
    await ctx.admin.query(FULL_USAGE_COUNT);
    rollupMs.push(performance.now() - s);
  }
  log(`  rollup       ${rollupMs.map((x) => x.toFixed(0)).join(' / ')} ms`);
  // The incremental design's unit (docs/operations.md): the same count over one slice of 10,000 heap
  // pages (a TID range scan), from the middle of the table, three times.
  const pages = (await ctx.admin.query(`SELECT (pg_relation_size('queen.kv') / current_setting('block_size')::int)::int AS n`)).rows[0].n as number;
  const from = Math.max(0, Math.floor(pages / 2) - 5000);
  const sliceMs: number[] = [];
  for (let i = 0; i < 3; i++) {
    const s0 = performance.now();
    await ctx.admin.query(
      `SELECT k.tenant_id, count(*), sum(octet_length(k.namespace) + octet_length(k.key) + pg_column_size(k.value))
         FROM queen.kv k WHERE k.ctid >= format('(%s,0)', $1::int)::tid AND k.ctid < format('(%s,0)', $1::int + 10000)::tid
          AND queen.kv_live_v1(k.expires_at, now()) GROUP BY k.tenant_id`,
      [from],
    );
    sliceMs.push(performance.now() - s0);
  }
  log(`  rollup slice ${sliceMs.map((x) => x.toFixed(0)).join(' / ')} ms for 10,000 of ${pages} pages`);

  // The incremental rollup, as the sweeper runs it: from a fresh layout every slice counted
  // back to back (a sweeper's first run, or after a table was rewritten), then a steady refresh: each
  // slice counted again, oldest first (interval 0: every slice is due). One statement a slice.
  const sliceRefresh: NonNullable<SizeFigures['sliceRefresh']> = [];
  for (const p of SLICE_PAGES) {
    await ctx.admin.query('DELETE FROM queen.kv_usage_part');
    await ctx.admin.query('DELETE FROM queen.kv_usage_slice');
    await ctx.admin.query('DELETE FROM queen.kv_usage_layout');
    const refresh = async (steady: boolean) => {
      const each: number[] = [];
      const t0 = performance.now();
      let slices = 1;
      for (let i = 0; ; i++) {
        const s0 = performance.now();
        const r = (await ctx.admin.query({ ...KV_USAGE_ROLLUP, values: [p, 0] })).rows[0].slice as { counted: boolean; slices: number; published: boolean };
        each.push(performance.now() - s0);
        slices = r.slices;
        if (!r.counted) throw new Error('the incremental rollup counted nothing');
        if (r.published && (!steady || i + 1 >= slices)) break;
      }
      const total = performance.now() - t0;
      each.sort((a, b) => a - b);
      return { slices, total, p50: each[Math.floor(each.length / 2)], max: each[each.length - 1] };
    };
    const first = await refresh(false);
    const steady = await refresh(true);
    sliceRefresh.push({
      pages: p,
      slices: steady.slices,
      firstMs: first.total,
      firstSliceP50Ms: first.p50,
      firstSliceMaxMs: first.max,
      steadyMs: steady.total,
      steadySliceP50Ms: steady.p50,
      steadySliceMaxMs: steady.max,
    });
    log(`  rollup v2    ${p} pages a slice, ${steady.slices} slices: first refresh ${first.total.toFixed(0)} ms (slice p50 ${first.p50.toFixed(0)} max ${first.max.toFixed(0)}), steady ${steady.total.toFixed(0)} ms (slice p50 ${steady.p50.toFixed(0)} max ${steady.max.toFixed(0)})`);
  }

  // Many tenants: MANY_TENANTS made-up tenants with a part in every slice (every tenant everywhere),
  // then three calls, each counting a slice and publishing (every tenant's numbers change in each,
  // as the recounted slice drops its made-up parts: a kv_usage row written per tenant per call, the
  // worst case of the publish).
  const partsBefore = Number((await ctx.admin.query(`SELECT count(*) AS n FROM queen.kv_usage_part`)).rows[0].n);
  // Parts and their totals together (only the rollup writes them: the two must agree).
  await ctx.admin.query(
    `INSERT INTO queen.kv_usage_part (rel, slice, tenant_id, rows, bytes)
     SELECT s.rel, s.slice, ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 1, 100
       FROM queen.kv_usage_slice s, generate_series(1, $1::int) g`,
    [MANY_TENANTS],
  );
  await ctx.admin.query(
    `INSERT INTO queen.kv_usage_total (tenant_id, rows, bytes, timers, timer_bytes)
     SELECT p.tenant_id, coalesce(sum(p.rows) FILTER (WHERE p.rel = 'kv'), 0), coalesce(sum(p.bytes) FILTER (WHERE p.rel = 'kv'), 0),
            coalesce(sum(p.rows) FILTER (WHERE p.rel = 'timers'), 0), coalesce(sum(p.bytes) FILTER (WHERE p.rel = 'timers'), 0)
       FROM queen.kv_usage_part p WHERE p.tenant_id::text LIKE '00000000-0000-4000-8000-%' GROUP BY p.tenant_id`,
  );
  const parts = Number((await ctx.admin.query(`SELECT count(*) AS n FROM queen.kv_usage_part`)).rows[0].n);
  const manyMs: number[] = [];
  for (let i = 0; i < 3; i++) {
    const s0 = performance.now();
    await ctx.admin.query({ ...KV_USAGE_ROLLUP, values: [SLICE_PAGES[0], 0] });
    manyMs.push(performance.now() - s0);
  }
  await ctx.admin.query(`DELETE FROM queen.kv_usage_part WHERE tenant_id::text LIKE '00000000-0000-4000-8000-%'`);
  await ctx.admin.query(`DELETE FROM queen.kv_usage_total WHERE tenant_id::text LIKE '00000000-0000-4000-8000-%'`);
  await ctx.admin.query(`DELETE FROM queen.kv_usage WHERE tenant_id::text LIKE '00000000-0000-4000-8000-%'`);
  const manyTenants = { tenants: MANY_TENANTS, parts: parts - partsBefore, callMs: manyMs };
  log(`  rollup v2    ${MANY_TENANTS} more tenants, ${parts - partsBefore} more parts: a call ${manyMs.map((x) => x.toFixed(0)).join(' / ')} ms`);

  return { rollupMs, rollupSliceMs: sliceMs, sliceRefresh, manyTenants, kvPages: pages };
}

async function measureSize(ctx: Ctx, n: number): Promise<Omit<SizeFigures, 'loadSeconds' | 'timers' | 'messages'>> {
  const rnd = (k: number) => Math.floor(Math.random() * k);
  const key = () => `k${rnd(n)}`;
  let fresh = 0;
  const runId = Date.now().toString(36);
  const ops: SizeFigures['ops'] = {};
  const T = DURATION_S;
  const both = async (name: string, api: Point | (() => Promise<PointResult>), sql: Point, warm?: [Point, Point]) => {
    // Each lane warmed first, unmeasured (a worker that just started answers its first second or two
    // at a fraction of its speed: JIT, plans, pool connections).
    for (const w of warm ?? []) await once(w);
    const a = await measured(ctx, api);
    const s = await measured(ctx, sql);
    ops[name] = { api: a, sql: s };
    log(`  ${name.padEnd(12)} api ${Math.round(a.opsPerSec)}/s p50 ${a.p50Ms.toFixed(2)} ms  sql ${Math.round(s.opsPerSec)}/s p50 ${s.p50Ms.toFixed(2)} ms  api÷sql ${(a.opsPerSec / s.opsPerSec).toFixed(2)}  pg µs/op ${a.pgCpuUsPerOp.toFixed(0)} / ${s.pgCpuUsPerOp.toFixed(0)}  reads/op ${(a.blksReadPerOp ?? NaN).toFixed(2)} / ${(s.blksReadPerOp ?? NaN).toFixed(2)}  api µs/op ${(a.apiCpuUsPerOp ?? NaN).toFixed(0)}`);
  };
  const named = (name: string, text: string, values: unknown[]) => ({ name, text, values });

  const kvLanes: Record<string, [(t: number) => Point, (t: number) => Point]> = {
    get: [
      (t) => httpLoop(ctx, () => ({ method: 'GET', path: `/api/v1/kv/${NS}/${key()}` }), /"found":\s?true/, t),
      (t) => sqlLoop(ctx, (pool) => async () => ((await pool.query(named('s_get', SQL.get, [TENANT, NS, key()]))).rowCount === 1 ? 1 : 0), t),
    ],
    put: [
      (t) => httpLoop(ctx, () => ({ method: 'PUT', path: `/api/v1/kv/${NS}/${key()}`, body: `{"value":${VALUE},"forever":true}` }), /"applied":\s?true/, t),
      (t) => sqlLoop(ctx, (pool) => async () => ((await pool.query(named('s_put', SQL.put, [TENANT, NS, key(), VALUE]))).rowCount === 1 ? 1 : 0), t),
    ],
    putIfAbsent: [
      (t) => httpLoop(ctx, () => ({ method: 'POST', path: '/api/v1/kv', body: `{"operations":[{"op":"putIfAbsent","ns":"${NS}","key":"f-${runId}-a-${fresh++}","value":${VALUE},"forever":true}]}` }), /"applied":\s?true/, t),
      (t) => sqlLoop(ctx, (pool) => async () => ((await pool.query(named('s_pia', SQL.putIfAbsent, [TENANT, NS, `f-${runId}-s-${fresh++}`, VALUE]))).rowCount === 1 ? 1 : 0), t),
    ],
    incr: [
      (t) => httpLoop(ctx, () => ({ method: 'POST', path: '/api/v1/kv', body: `{"operations":[{"op":"incr","ns":"ctr","key":"c${rnd(COUNTERS)}","delta":1,"forever":true}]}` }), /"applied":\s?true/, t),
      (t) => sqlLoop(ctx, (pool) => async () => ((await pool.query(named('s_incr', SQL.incr, [TENANT, 'ctr', `c${rnd(COUNTERS)}`, 1]))).rowCount === 1 ? 1 : 0), t),
    ],
    // A page of 100 from a random place under the prefix "k" (every loaded key).
    getPrefix100: [
      (t) => httpLoop(ctx, () => ({ method: 'POST', path: '/api/v1/kv', body: `{"operations":[{"op":"getPrefix","ns":"${NS}","prefix":"k","limit":100,"after":"${key()}"}]}` }), /"rows":\s?\[\{/, t),
      (t) => sqlLoop(ctx, (pool) => async () => ((await pool.query(named('s_prefix', SQL.prefix, [TENANT, NS, key()]))).rowCount! > 0 ? 1 : 0), t),
    ],
  };
  for (const [name, [api, sql]] of Object.entries(kvLanes)) await both(name, api(T), sql(T), [api(WARM_S), sql(WARM_S)]);

  // Pop + ack, batches of 10, behind the backlog: operations are messages. Lane one: one partition
  // per client, one group. Lane two: the deep partition, each client a group of its own (every
  // group sees every message, so each walks the partition from its start).
  const popAckLane = async (name: string, partitionOf: (c: number) => [string, string], groupOf: (side: 'api' | 'sql', c: number) => string) => {
    const bareRows = Array.from({ length: CLIENTS }, (_, c) => [partitionOf(c)[1], groupOf('sql', c)]);
    await ctx.admin.query(
      `INSERT INTO queen.partition_consumers (partition_id, consumer_group) SELECT * FROM unnest($1::uuid[], $2::text[]) ON CONFLICT DO NOTHING`,
      [bareRows.map((r) => r[0]), bareRows.map((r) => r[1])],
    );
    const clients: HttpClient[] = [];
    const popAck = (seconds: number) => async (): Promise<PointResult> => {
      for (let c = 0; c < CLIENTS; c++) clients[c] = rawClient('127.0.0.1', ctx.cellPort);
      try {
        return await closedLoop(CLIENTS, seconds * 1000, (c) => async () => {
          const [p] = partitionOf(c);
          const group = groupOf('api', c);
          const pop = await clients[c].request('GET', `/api/v1/pop/queue/${QUEUE}/partition/${p}?batch=10&consumerGroup=${group}&wait=false`);
          if (pop.status === 204) return 0;
          if (pop.status !== 200) throw new Error(`pop ${pop.status}: ${pop.body.slice(0, 200)}`);
          const body = JSON.parse(pop.body) as { leaseId: string; partitionId: string; messages: { transactionId: string }[] };
          const acks = body.messages.map((m) => ({ transactionId: m.transactionId, partitionId: body.partitionId, status: 'completed', leaseId: body.leaseId }));
          const ack = await clients[c].request('POST', '/api/v1/ack/batch', JSON.stringify({ acknowledgments: acks, consumerGroup: group }));
          if (ack.status !== 200 || !ack.body.startsWith('{"ok":true')) throw new Error(`ack ${ack.status}: ${ack.body.slice(0, 200)}`);
          return acks.length;
        });
      } finally {
        clients.forEach((c) => c.close());
      }
    };
    const cursors = new Map<number, number>();
    const bare = (seconds: number) => sqlLoop(ctx, (pool, c) => async () => {
      const { n, top } = await barePopAck(pool, partitionOf(c)[1], groupOf('sql', c), cursors.get(c) ?? 0);
      cursors.set(c, top);
      return n;
    }, seconds);
    // Warmed like the KV lanes: the message pool's connections open on the first pop.
    await both(name, popAck(T), bare(T), [{ run: popAck(WARM_S) }, bare(WARM_S)]);
  };
  await popAckLane('pop+ack10', (c) => [`p${c % PARTITIONS}`, ctx.partitions[c % PARTITIONS]], (side) => `g-${side}-${runId}`);
  await popAckLane('pop+ack10 deep', () => ['deep', ctx.deepPartition], (side, c) => `gd-${side}-${runId}-${c}`);

  // Prune: size/10 expired keys (at least 10,000), drained by a bare DELETE, then a fresh backlog
  // drained by the sweeper's own pass statement (prune only, the default batch 500, 8 shards a pass).
  const backlog = Math.max(10_000, Math.floor(n / 10));
  const loadExpired = async (tag: string) => {
    for (let lo = 0; lo < backlog; lo += 500_000) {
      await ctx.admin.query(
        `INSERT INTO queen.kv (tenant_id, namespace, key, value, version, expires_at)
         SELECT $1, 'exp', $2 || g, $3::jsonb, nextval('queen.kv_version_seq'), now() - interval '1 hour' FROM generate_series($4::int, $5::int - 1) g`,
        [TENANT, `${tag}-`, VALUE, lo, Math.min(backlog, lo + 500_000)],
      );
    }
  };
  const drain = (emptyEnough: number, step: (cl: import('pg').PoolClient, i: number) => Promise<number>) => async (): Promise<PointResult> => {
    const cl = await ctx.admin.connect();
    const lat: number[] = [];
    let ops = 0;
    let emptyRun = 0;
    const t0 = performance.now();
    try {
      for (let i = 0; emptyRun < emptyEnough; i++) {
        const s = performance.now();
        const k = await step(cl, i);
        lat.push((performance.now() - s) * 1000);
        ops += k;
        emptyRun = k === 0 ? emptyRun + 1 : 0;
      }
    } finally {
      cl.release();
    }
    lat.sort((a, b) => a - b);
    return { ops, requests: lat.length, errors: 0, seconds: (performance.now() - t0) / 1000, p50Us: lat[Math.floor(lat.length / 2)], p99Us: lat[Math.floor(lat.length * 0.99)] };
  };
  await loadExpired(`s${runId}`);
  const pruneSql = await measured(ctx, drain(1, async (cl) => (await cl.query(named('s_prune', SQL.prune, []))).rowCount ?? 0));
  await loadExpired(`a${runId}`);
  const prunePass = async (cl: import('pg').PoolClient) =>
    ((await cl.query({ ...SWEEPER_PASS, values: [null, 'bench-scale', 8, 0, 500, true, 0, 0] })).rows[0].pass as { pruned: number }).pruned;
  // The pass answers 0 when its 8 shards had nothing: 8 empty passes in a row cover all 64 shards.
  const pruneApi = await measured(ctx, drain(8, async (cl) => prunePass(cl)));
  const left = (await ctx.admin.query(`SELECT count(*)::int AS n FROM queen.kv WHERE tenant_id = $1 AND namespace = 'exp'`, [TENANT])).rows[0].n as number;
  if (left > 0) throw new Error(`prune left ${left} expired rows`);
  log(`  prune        pass ${Math.round(pruneApi.opsPerSec)} rows/s  sql ${Math.round(pruneSql.opsPerSec)} rows/s over ${backlog} expired (pass÷sql ${(pruneApi.opsPerSec / pruneSql.opsPerSec).toFixed(2)})`);

  // Fire: FIRE_DUE timers due now beside the pending backlog; the bare statement, then the pass.
  const loadDue = async () => {
    await ctx.admin.query(
      `INSERT INTO queen.log_timers (tenant_id, queue, partition, payload, deliver_at)
       SELECT $1, 'scale-fire', 'p' || (g % 16), jsonb_build_object('n', g), date_trunc('milliseconds', now() - interval '1 second')
       FROM generate_series(1, $2::int) g`,
      [TENANT, FIRE_DUE],
    );
  };
  await loadDue();
  const fireSql = await measured(ctx, drain(1, async (cl) => (await cl.query(named('s_fire', SQL.fire, [ctx.firePartition]))).rowCount ?? 0));
  await loadDue();
  const fireApi = await measured(ctx, drain(1, async (cl) =>
    ((await cl.query({ ...SWEEPER_PASS, values: [null, 'bench-scale', 0, 500, 500, false, 0, 0] })).rows[0].pass as { fired: number }).fired));
  log(`  fire         pass ${Math.round(fireApi.opsPerSec)}/s  sql ${Math.round(fireSql.opsPerSec)}/s over ${FIRE_DUE} due (pass÷sql ${(fireApi.opsPerSec / fireSql.opsPerSec).toFixed(2)})`);

  // Fire lag: a real sweeper process, timers scheduled (inserted) at LAG_RATE a second, each due 1 s
  // later; lag = the fired message's created_at (the fire's transaction) - deliverAt.
  // The rollup every LAG_SECONDS/2: at least one lands inside the window, so the max shows its stall.
  const sweeper = await spawnSweeper(ctx.url, { QUEEN_SWEEPER_INTERVAL_MS: '1000', QUEEN_SWEEPER_USAGE_INTERVAL_MS: String((LAG_SECONDS * 1000) / 2) });
  let lag: SizeFigures['lag'];
  try {
    // A sweeper runs the usage rollup in its first cycle and then every QUEEN_SWEEPER_USAGE_INTERVAL_MS,
    // inline: no timer fires while it runs. The window starts after that first rollup; p50 is the lag
    // between rollups, the max the stall of the rollup that ran inside the window.
    const spawned = new Date();
    for (let i = 0; ; i++) {
      const { rows } = await ctx.admin.query(`SELECT EXISTS (SELECT 1 FROM queen.kv_usage WHERE computed_at >= $1) AS done`, [spawned]);
      if (rows[0].done) break;
      if (i > 1200) throw new Error('the sweeper did not finish its first usage rollup within 120 s');
      await sleep(100);
    }
    const lagQueue = `scale-lag-${runId}`;
    const t0 = Date.now();
    let sent = 0;
    while (Date.now() - t0 < LAG_SECONDS * 1000) {
      const target = Math.floor(((Date.now() - t0) / 1000) * LAG_RATE);
      if (target > sent) {
        await ctx.admin.query(
          `INSERT INTO queen.log_timers (tenant_id, queue, partition, payload, deliver_at)
           SELECT $1, $2, 'p0', jsonb_build_object('at', d), d FROM (SELECT date_trunc('milliseconds', clock_timestamp() + interval '1 second') AS d) x, generate_series(1, $3::int)`,
          [TENANT, lagQueue, target - sent],
        );
        sent = target;
      }
      await sleep(10);
    }
    const fired = async () => (await ctx.admin.query(`SELECT count(*)::int AS n FROM queen.log_timers WHERE queue = $1`, [lagQueue])).rows[0].n === 0;
    await waitFor(fired, { what: 'every lag timer fired by the sweeper', timeoutMs: 60_000, everyMs: 100 });
    const { rows } = await ctx.admin.query(
      `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY l) AS p50, percentile_cont(0.99) WITHIN GROUP (ORDER BY l) AS p99, max(l) AS mx
         FROM (SELECT extract(epoch FROM m.created_at - (m.payload ->> 'at')::timestamptz) * 1000 AS l
                 FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues qq ON qq.id = p.queue_id
                WHERE qq.name = $1) x`,
      [lagQueue],
    );
    lag = { rate: LAG_RATE, seconds: LAG_SECONDS, p50Ms: Number(rows[0].p50), p99Ms: Number(rows[0].p99), maxMs: Number(rows[0].mx) };
  } finally {
    sweeper.child.kill('SIGTERM');
    await sweeper.exited;
  }
  log(`  fire lag     ${LAG_RATE}/s beside ${Math.min(n, CAP)} pending: p50 ${lag.p50Ms.toFixed(0)} ms p99 ${lag.p99Ms.toFixed(0)} ms max ${lag.maxMs.toFixed(0)} ms`);

  const rollups = await measureRollups(ctx);

  const bytes: SizeFigures['bytes'] = {};
  for (const t of ['kv', 'log_timers', 'messages', 'partition_consumers']) {
    const { rows } = await ctx.admin.query(`SELECT pg_table_size($1::regclass)::float8 AS t, pg_indexes_size($1::regclass)::float8 AS i`, [`queen.${t}`]);
    bytes[t] = { table: rows[0].t, indexes: rows[0].i };
  }
  const depth: Record<string, number> = {};
  for (const i of ['kv_pkey', 'idx_log_timers_due', 'messages_pkey']) {
    try {
      depth[i] = (await ctx.admin.query(`SELECT level FROM bt_metap($1)`, [`queen.${i}`])).rows[0].level as number;
    } catch {
      depth[i] = NaN;
    }
  }
  const av = await ctx.admin.query(
    `SELECT relname AS table, autovacuum_count::int AS vacuums, autoanalyze_count::int AS analyzes, n_dead_tup::float8 AS "deadTuples"
       FROM pg_stat_user_tables WHERE schemaname = 'queen' AND relname IN ('kv', 'log_timers', 'messages') ORDER BY relname`,
  );
  return {
    size: n,
    date: new Date().toISOString(),
    ops,
    prune: { backlog, api: pruneApi, sql: pruneSql },
    fire: { due: FIRE_DUE, pendingBeside: Math.min(n, CAP), api: fireApi, sql: fireSql },
    lag,
    ...rollups,
    bytes,
    depth,
    autovacuum: av.rows,
  };
}

// ---------------------------------------------------------------- report
const fmt = (x: number, d = 0) => (Number.isFinite(x) ? x.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d }) : '–');
const mb = (b: number) => fmt(b / 2 ** 20);
const sizeLabel = (n: number) => (Number.isInteger(Math.log10(n)) ? `10^${Math.log10(n)}` : fmt(n));

export function report(results: Results): string {
  const sizes = Object.values(results.sizes).sort((a, b) => a.size - b.size);
  const head = `| operation | ${sizes.map((s) => sizeLabel(s.size)).join(' | ')} |`;
  const rule = `|---|${sizes.map(() => '---:').join('|')}|`;
  const lines: string[] = [];
  const row = (label: string, f: (s: SizeFigures) => string) => lines.push(`| ${label} | ${sizes.map(f).join(' | ')} |`);
  lines.push('Throughput, API / direct SQL (ops/s), and API÷SQL:', '', head, rule);
  const opNames = Object.keys(sizes[0]?.ops ?? {});
  for (const o of opNames) {
    row(o, (s) => {
      const x = s.ops[o];
      return x ? `${fmt(x.api.opsPerSec)} / ${fmt(x.sql.opsPerSec)} (${fmt(x.api.opsPerSec / x.sql.opsPerSec, 2)})` : '';
    });
  }
  row('prune, expired rows/s (pass / bare DELETE)', (s) => `${fmt(s.prune.api.opsPerSec)} / ${fmt(s.prune.sql.opsPerSec)} (${fmt(s.prune.api.opsPerSec / s.prune.sql.opsPerSec, 2)})`);
  row('fire, timers/s (pass / bare DELETE+INSERT)', (s) => `${fmt(s.fire.api.opsPerSec)} / ${fmt(s.fire.sql.opsPerSec)} (${fmt(s.fire.api.opsPerSec / s.fire.sql.opsPerSec, 2)})`);
  lines.push('', 'Latency p50 / p99 (ms), API:', '', head, rule);
  for (const o of opNames) row(o, (s) => (s.ops[o] ? `${fmt(s.ops[o].api.p50Ms, 2)} / ${fmt(s.ops[o].api.p99Ms, 2)}` : ''));
  row('fire lag at 500 timers/s, real sweeper, a usage rollup inside the window (p50 / p99 / max)', (s) => `${fmt(s.lag.p50Ms)} / ${fmt(s.lag.p99Ms)} / ${fmt(s.lag.maxMs)}`);
  lines.push('', 'PostgreSQL CPU µs per operation, API / SQL, and WAL bytes per operation, API / SQL:', '', head, rule);
  for (const o of opNames) {
    row(o, (s) => (s.ops[o] ? `${fmt(s.ops[o].api.pgCpuUsPerOp)} / ${fmt(s.ops[o].sql.pgCpuUsPerOp)} µs; ${fmt(s.ops[o].api.walBytesPerOp)} / ${fmt(s.ops[o].sql.walBytesPerOp)} B` : ''));
  }
  lines.push('', 'Pages read into shared_buffers (from the OS) / found there, per operation, API / SQL:', '', head, rule);
  const pg2 = (x?: number) => fmt(x ?? NaN, 2);
  for (const o of opNames) {
    row(o, (s) => (s.ops[o] ? `${pg2(s.ops[o].api.blksReadPerOp)} / ${pg2(s.ops[o].api.blksHitPerOp)}; ${pg2(s.ops[o].sql.blksReadPerOp)} / ${pg2(s.ops[o].sql.blksHitPerOp)}` : ''));
  }
  lines.push('', 'API process CPU µs per operation (the HTTP worker and its primary):', '', head, rule);
  for (const o of opNames) row(o, (s) => (s.ops[o] ? fmt(s.ops[o].api.apiCpuUsPerOp ?? NaN) : ''));
  lines.push('', 'PostgreSQL CPU µs and WAL bytes per row, sweeper pass / bare SQL:', '', head, rule);
  row('prune (per row)', (s) => `${fmt(s.prune.api.pgCpuUsPerOp)} / ${fmt(s.prune.sql.pgCpuUsPerOp)} µs; ${fmt(s.prune.api.walBytesPerOp)} / ${fmt(s.prune.sql.walBytesPerOp)} B`);
  row('fire (per timer)', (s) => `${fmt(s.fire.api.pgCpuUsPerOp)} / ${fmt(s.fire.sql.pgCpuUsPerOp)} µs; ${fmt(s.fire.api.walBytesPerOp)} / ${fmt(s.fire.sql.walBytesPerOp)} B`);
  lines.push('', 'Size:', '', head, rule);
  row('rows: keys / pending timers / messages', (s) => `${fmt(s.size)} / ${fmt(s.timers)} / ${fmt(s.messages)}`);
  for (const t of ['kv', 'log_timers', 'messages']) row(`${t}: table / indexes (MB)`, (s) => (s.bytes[t] ? `${mb(s.bytes[t].table)} / ${mb(s.bytes[t].indexes)}` : ''));
  row('B-tree levels below the root: kv_pkey / idx_log_timers_due / messages_pkey', (s) => `${s.depth.kv_pkey} / ${s.depth.idx_log_timers_due} / ${s.depth.messages_pkey}`);
  row('usage rollup (ms, 3 runs)', (s) => s.rollupMs.map((x) => fmt(x)).join(' / '));
  row('the rollup\'s count over 10,000 heap pages of queen.kv (ms, 3 runs; pages in the table)', (s) =>
    s.rollupSliceMs ? `${s.rollupSliceMs.map((x) => fmt(x)).join(' / ')} (${fmt(s.kvPages ?? NaN)})` : '–');
  rollupRows(sizes, row);
  row('load (s)', (s) => fmt(s.loadSeconds));
  return lines.join('\n');
}

/** The incremental rollup's rows (one per slice size measured). */
function rollupRows(sizes: SizeFigures[], row: (label: string, f: (s: SizeFigures) => string) => void): void {
  // Every slice size any size measured, smallest first.
  const measuredPages = [...new Set(sizes.flatMap((s) => (s.sliceRefresh ?? []).map((x) => x.pages)))].sort((a, b) => a - b);
  for (const p of measuredPages) {
    const at = (s: SizeFigures) => s.sliceRefresh?.find((x) => x.pages === p);
    row(`incremental rollup (v2), ${fmt(p)} pages a slice: slices; refresh from a fresh layout; steady refresh (ms)`, (s) => {
      const x = at(s);
      return x ? `${fmt(x.slices)}; ${fmt(x.firstMs)}; ${fmt(x.steadyMs)}` : '–';
    });
    row(`incremental rollup (v2), ${fmt(p)} pages a slice: one slice, steady, p50 / max (ms)`, (s) => {
      const x = at(s);
      return x ? `${fmt(x.steadySliceP50Ms)} / ${fmt(x.steadySliceMaxMs)}` : '–';
    });
  }
  row('incremental rollup (v2): one call beside N more tenants, each with a part in every slice (N; parts; ms, 3 calls)', (s) =>
    s.manyTenants ? `${fmt(s.manyTenants.tenants)}; ${fmt(s.manyTenants.parts)}; ${s.manyTenants.callMs.map((x) => fmt(x)).join(' / ')}` : '–');
}

/** --only=rollup: the rollup rows alone. */
export function reportRollup(results: Results): string {
  const sizes = Object.values(results.sizes).sort((a, b) => a.size - b.size);
  const lines = [`| figure | ${sizes.map((s) => sizeLabel(s.size)).join(' | ')} |`, `|---|${sizes.map(() => '---:').join('|')}|`];
  const row = (label: string, f: (s: SizeFigures) => string) => lines.push(`| ${label} | ${sizes.map(f).join(' | ')} |`);
  row('rows: keys / pending timers', (s) => `${fmt(s.size)} / ${fmt(s.timers)}`);
  row('kv heap pages', (s) => fmt(s.kvPages ?? NaN));
  row('full count, ms, 3 runs', (s) => s.rollupMs.map((x) => fmt(x)).join(' / '));
  rollupRows(sizes, row);
  return lines.join('\n');
}

// ---------------------------------------------------------------- main
async function main(): Promise<void> {
  let results: Results = { machine: '', settings: '', sizes: {} };
  if (!FRESH && fs.existsSync(OUT)) results = JSON.parse(fs.readFileSync(OUT, 'utf8')) as Results;
  const todo = SIZES.filter((n) => !results.sizes[String(n)]);
  if (!todo.length) {
    log(`every size asked for is in ${OUT} already (--fresh measures again):`);
    process.stdout.write(`\n${ONLY_ROLLUP ? reportRollup(results) : report(results)}\n`);
    return;
  }
  const top = Math.max(...todo);
  const needed = SIZES.filter((n) => n <= top);
  let est = 0;
  let prev = 0;
  for (const n of needed) {
    est += todo.includes(n) ? expectedSeconds(n, prev) : expectedSeconds(n, prev) - expectedSeconds(n, n) + n / 150_000;
    prev = n;
  }
  log(`sizes ${needed.map(sizeLabel).join(', ')} (measuring ${todo.map(sizeLabel).join(', ')}); expected runtime on a quiet 2-core machine: about ${Math.ceil(est / 60)} min`);

  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-bench-scale-'));
  fs.chmodSync(scratch, 0o755);
  let embedded: EmbeddedPostgres | undefined;
  let cell: ChildProcess | undefined;
  let admin: Pool | undefined;
  const cleanup = async () => {
    await admin?.end().catch(() => undefined);
    if (cell) await stopChild(cell);
    await embedded?.stop();
    fs.rmSync(scratch, { recursive: true, force: true });
  };
  process.once('SIGINT', () => void cleanup().then(() => process.exit(130)));
  try {
    // Durability on (fsync, synchronous_commit: the defaults). max_wal_size is raised so the load
    // does not checkpoint every few seconds; autovacuum keeps its defaults.
    embedded = await startEmbeddedPostgres({
      dataDir: path.join(scratch, 'pg'),
      port: await freePort(),
      throwaway: true,
      settings: { max_wal_size: '4GB' },
    });
    const url = embedded.url;
    await applySchema(url);
    admin = new Pool({ connectionString: url, max: 2 });
    await admin.query('CREATE EXTENSION IF NOT EXISTS pageinspect').catch(() => log('(pageinspect is not available: no B-tree depths)'));
    await admin.query('CREATE SEQUENCE IF NOT EXISTS bench_fire_seq START 1000000000');
    const pgVersion = (await admin.query('SHOW server_version')).rows[0].server_version as string;
    results.machine = machineLine(`PostgreSQL ${pgVersion}`);
    results.settings = (await admin.query(
      `SELECT string_agg(name || '=' || current_setting(name), ', ' ORDER BY name) AS s FROM pg_settings
        WHERE name IN ('shared_buffers','synchronous_commit','fsync','max_wal_size','autovacuum','work_mem')`,
    )).rows[0].s as string;
    const pgPid = Number(fs.readFileSync(path.join(embedded.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);

    // The queues and partitions of the backlog and of the bare fire.
    const parts: string[] = [];
    for (let p = 0; p < PARTITIONS; p++) {
      const { rows } = await admin.query(`SELECT (queen.log_ensure_partition_v1($1, $2, $3)).p_id AS id`, [TENANT, QUEUE, `p${p}`]);
      parts.push(rows[0].id);
    }
    const deepPartition = (await admin.query(`SELECT (queen.log_ensure_partition_v1($1, $2, 'deep')).p_id AS id`, [TENANT, QUEUE])).rows[0].id as string;
    const firePartition = (await admin.query(`SELECT (queen.log_ensure_partition_v1($1, 'scale-bare-fire', 'p0')).p_id AS id`, [TENANT])).rows[0].id as string;
    await admin.query(
      `INSERT INTO queen.kv (tenant_id, namespace, key, value, version) SELECT $1, 'ctr', 'c' || g, '0', nextval('queen.kv_version_seq') FROM generate_series(0, $2::int - 1) g`,
      [TENANT, COUNTERS],
    );

    const c = await startCell(url);
    cell = c.proc;
    const ctx: Ctx = { url, admin, cellPort: c.port, cell: c.proc, pgPid, firePartition, partitions: parts, deepPartition };
    log(`embedded PostgreSQL ${pgVersion} (pid ${pgPid}); cell on port ${c.port}, 1 API worker (pid ${childrenOf(c.proc.pid!).join(', ')})`);

    let keys = 0;
    let timers = 0;
    let messages = 0;
    for (const n of needed) {
      const t0 = performance.now();
      log(`loading to ${fmt(n)} keys, ${fmt(Math.min(n, CAP))} pending timers${ONLY_ROLLUP ? '' : `, ${fmt(Math.min(n, CAP))} messages`}`);
      await loadKeys(admin, keys, n);
      keys = n;
      await loadTimers(admin, Math.min(n, CAP) - timers);
      timers = Math.min(n, CAP);
      if (!ONLY_ROLLUP) {
        await loadMessages(admin, parts, messages, Math.min(n, CAP));
        await loadDeep(admin, deepPartition, messages, Math.min(n, CAP));
        messages = Math.min(n, CAP);
      }
      // What a table this size looks like after autovacuum caught up: hint bits set, visibility map.
      await admin.query('VACUUM ANALYZE queen.kv, queen.log_timers, queen.messages');
      await admin.query('CHECKPOINT');
      const loadSeconds = (performance.now() - t0) / 1000;
      log(`loaded in ${fmt(loadSeconds)} s`);
      if (!todo.includes(n)) continue;
      const figures = ONLY_ROLLUP
        ? ({ size: n, date: new Date().toISOString(), ...(await measureRollups(ctx)) } as Omit<SizeFigures, 'loadSeconds' | 'timers' | 'messages'>)
        : await measureSize(ctx, n);
      results.sizes[String(n)] = { ...figures, timers, messages, loadSeconds };
      fs.mkdirSync(path.dirname(OUT), { recursive: true });
      fs.writeFileSync(OUT, JSON.stringify(results, null, 1));
      log(`${sizeLabel(n)} written to ${OUT}`);
    }
    process.stdout.write(`\nmachine: ${results.machine}\nsettings: ${results.settings}\n\n${ONLY_ROLLUP ? reportRollup(results) : report(results)}\n`);
  } finally {
    await cleanup();
  }
}

if (require.main === module) {
  main().catch((err) => {
    process.stderr.write(`bench:scale failed: ${err?.stack ?? err}\n`);
    process.exit(1);
  });
}
