// npm run bench:timers — our timers against pg-boss 10 on the same PostgreSQL, in one run:
//   (a) scheduling rate: queen.timers_apply_v1 (one timer per call, the statement behind
//       POST /api/v1/timers) against boss.send(name, data, {startAfter}), the same number of
//       concurrent callers; and the batched forms (100 a call) of each;
//   (b) draining 20,000 timers that fall due at one instant: one sweeper process
//       (node dist/services/sweeper/main.js, its defaults) against pg-boss workers that were
//       already polling (8 workers x batchSize 500, pollingIntervalSeconds 0.5, its minimum);
//       measured from the due instant until the last one is delivered (ours: in the log and
//       the timer deleted, one commit; pg-boss: state completed);
//   (c) fire lag at a steady 1,000 timers a second (each due 1 s after it is scheduled): p50 and
//       p99 of (seen by a consumer) - deliverAt. Ours: a LISTEN on queen_log, reading the new
//       messages; pg-boss: the moment its handler is called.
// Bounded: about two minutes. Options (env): BENCH_SCHEDULE_N (10000), BENCH_DRAIN_N (20000),
// BENCH_RATE (1000), BENCH_LAG_SECONDS (15), BENCH_CLIENTS (16). DATABASE_URL to use your own
// server; otherwise an embedded PostgreSQL in a temporary folder (durability on, as shipped).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Pool } from 'pg';
import PgBoss from 'pg-boss';
import { applySchema } from '../shared/db';
import { startEmbeddedPostgres, freePort, EmbeddedPostgres } from '../shared/embeddedPostgres';
import { spawnSweeper, SweeperProcess } from '../test/support/sweeper';

const TENANT = '00000000-0000-0000-0000-000000000001';
function envInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) throw new Error(`${name} must be a whole number, got ${JSON.stringify(raw)}`);
  return Number(raw);
}
const SCHEDULE_N = envInt('BENCH_SCHEDULE_N', 10_000);
const DRAIN_N = envInt('BENCH_DRAIN_N', 20_000);
const RATE = envInt('BENCH_RATE', 1000);
const LAG_SECONDS = envInt('BENCH_LAG_SECONDS', 15);
const CLIENTS = envInt('BENCH_CLIENTS', 16);
const ONLY = (process.env.BENCH_ONLY ?? 'a,b,c').split(',');
const SWEEPER_BATCH = process.env.BENCH_SWEEPER_BATCH ?? '';
const BOSS_WORKERS = 8;
const BOSS_BATCH = 500;
const PAYLOAD = { order: 'A-1001', customer: 42, action: 'remind', note: 'x'.repeat(40) };

const out = (line = '') => process.stdout.write(`${line}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(check: () => Promise<boolean>, timeoutMs: number, everyMs = 10): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not reached within ${timeoutMs} ms`);
    await sleep(everyMs);
  }
}

/** `clients` closed loops sharing `n` calls of `task`; answers calls a second. */
async function closedLoop(n: number, clients: number, task: (i: number) => Promise<unknown>): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (next < n) await task(next++);
    }),
  );
  return n / ((performance.now() - t0) / 1000);
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

const SCHEDULE = { name: 'bench_schedule', text: 'SELECT queen.timers_apply_v1($1::uuid, $2::jsonb)' };

async function benchSchedule(pool: Pool, boss: PgBoss): Promise<Record<string, number>> {
  const inAnHour = () => new Date(Date.now() + 3600_000);
  const ours = await closedLoop(SCHEDULE_N, CLIENTS, () =>
    pool.query({ ...SCHEDULE, values: [TENANT, JSON.stringify([{ op: 'schedule', queue: 'bench-a', payload: PAYLOAD, delaySeconds: 3600 }])] }),
  );
  const theirs = await closedLoop(SCHEDULE_N, CLIENTS, () => boss.send('bench-a', PAYLOAD, { startAfter: inAnHour() }));
  const batch = 100;
  const oursBatch =
    batch *
    (await closedLoop(SCHEDULE_N / batch, CLIENTS, () =>
      pool.query({
        ...SCHEDULE,
        values: [TENANT, JSON.stringify(Array.from({ length: batch }, () => ({ op: 'schedule', queue: 'bench-a', payload: PAYLOAD, delaySeconds: 3600 })))],
      }),
    ));
  const theirsBatch =
    batch *
    (await closedLoop(SCHEDULE_N / batch, CLIENTS, () =>
      boss.insert(Array.from({ length: batch }, () => ({ name: 'bench-a', data: PAYLOAD, startAfter: inAnHour() }))),
    ));
  await pool.query(`DELETE FROM queen.log_timers WHERE queue = 'bench-a'`);
  return { ours, theirs, oursBatch, theirsBatch };
}

async function benchDrain(pool: Pool, boss: PgBoss, schema: string, url: string): Promise<{ ours: number; theirs: number }> {
  // Ours: the sweeper is up and idle; the timers all fall due 3 s from now.
  const sweeper = await spawnSweeper(url, { QUEEN_SWEEPER_INTERVAL_MS: '1000', ...(SWEEPER_BATCH ? { QUEEN_SWEEPER_BATCH: SWEEPER_BATCH } : {}) });
  const dueAt = Date.now() + 3000 + DRAIN_N / 5; // room to schedule them all first
  for (let start = 0; start < DRAIN_N; start += 1000) {
    const ops = Array.from({ length: Math.min(1000, DRAIN_N - start) }, (_, i) => ({
      op: 'schedule',
      queue: 'bench-drain',
      partition: `p${(start + i) % 16}`,
      payload: PAYLOAD,
      deliverAt: new Date(dueAt).toISOString(),
    }));
    await pool.query({ ...SCHEDULE, values: [TENANT, JSON.stringify(ops)] });
  }
  await sleep(Math.max(0, dueAt - Date.now()));
  await until(async () => (await pool.query(`SELECT count(*)::int AS n FROM queen.log_timers WHERE queue = 'bench-drain'`)).rows[0].n === 0, 300_000);
  const oursSeconds = (Date.now() - dueAt) / 1000;
  const delivered = (await pool.query(`SELECT count(*)::int AS n FROM queen.messages WHERE transaction_id LIKE 'timer:%'`)).rows[0].n;
  if (delivered < DRAIN_N) throw new Error(`only ${delivered} of ${DRAIN_N} timers reached the log`);
  await stopSweeper(sweeper);

  // pg-boss: workers already polling; the jobs all start after one instant.
  await boss.createQueue('bench-drain');
  let handled = 0;
  for (let w = 0; w < BOSS_WORKERS; w++) {
    await boss.work('bench-drain', { batchSize: BOSS_BATCH, pollingIntervalSeconds: 0.5 }, async (jobs) => {
      handled += jobs.length;
    });
  }
  const bossDueAt = Date.now() + 3000 + DRAIN_N / 5;
  for (let start = 0; start < DRAIN_N; start += 1000) {
    await boss.insert(
      Array.from({ length: Math.min(1000, DRAIN_N - start) }, () => ({ name: 'bench-drain', data: PAYLOAD, startAfter: new Date(bossDueAt) })),
    );
  }
  await sleep(Math.max(0, bossDueAt - Date.now()));
  await until(async () => {
    if (handled < DRAIN_N) return false;
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${schema}.job WHERE name = 'bench-drain' AND state = 'completed'`);
    return rows[0].n >= DRAIN_N;
  }, 300_000);
  const theirsSeconds = (Date.now() - bossDueAt) / 1000;
  await boss.offWork('bench-drain');
  return { ours: DRAIN_N / oursSeconds, theirs: DRAIN_N / theirsSeconds };
}

async function stopSweeper(p: SweeperProcess): Promise<void> {
  p.child.kill('SIGTERM');
  await p.exited;
}

/** Schedules RATE timers a second for LAG_SECONDS, each due 1 s later, in slices of 10 ms. */
async function steady(schedule: (dueAt: number, count: number) => Promise<unknown>): Promise<number> {
  const sliceMs = 10;
  const perSlice = RATE / (1000 / sliceMs);
  const t0 = Date.now();
  let sent = 0;
  const inflight: Promise<unknown>[] = [];
  while (Date.now() - t0 < LAG_SECONDS * 1000) {
    const target = Math.floor(((Date.now() - t0) / 1000) * RATE);
    const count = Math.min(Math.max(0, target - sent), perSlice * 10);
    if (count > 0) {
      inflight.push(schedule(Date.now() + 1000, count));
      sent += count;
    }
    await sleep(sliceMs);
  }
  await Promise.all(inflight);
  return sent;
}

async function benchLag(pool: Pool, boss: PgBoss, url: string): Promise<{ ours: number[]; theirs: number[] }> {
  // Ours: one sweeper with its defaults (1 s interval; it sleeps no longer than the next due timer).
  const sweeper = await spawnSweeper(url, { QUEEN_SWEEPER_INTERVAL_MS: '1000' });
  const ours: number[] = [];
  const listener = new Client({ connectionString: url });
  await listener.connect();
  const lastSeq = new Map<string, number>();
  let reading: Promise<void> | undefined;
  let again = false;
  const read = async () => {
    const seen = Date.now();
    const { rows } = await listener.query(
      `SELECT m.partition_id, m.seq, (m.payload->>'due')::bigint AS due FROM queen.messages m
         JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
         LEFT JOIN unnest($1::uuid[], $2::bigint[]) AS l(pid, seq) ON l.pid = m.partition_id
        WHERE q.name = 'bench-lag' AND m.seq > coalesce(l.seq, 0)`,
      [[...lastSeq.keys()], [...lastSeq.values()]],
    );
    for (const r of rows) {
      ours.push(seen - Number(r.due));
      lastSeq.set(r.partition_id, Math.max(lastSeq.get(r.partition_id) ?? 0, Number(r.seq)));
    }
  };
  const kick = () => {
    if (reading) {
      again = true;
      return;
    }
    reading = read().finally(() => {
      reading = undefined;
      if (again) {
        again = false;
        kick();
      }
    });
  };
  listener.on('notification', kick);
  await listener.query('LISTEN queen_log');
  const sent = await steady((dueAt, count) =>
    pool.query({
      ...SCHEDULE,
      values: [
        TENANT,
        JSON.stringify(
          Array.from({ length: count }, (_, i) => ({
            op: 'schedule',
            queue: 'bench-lag',
            partition: `p${i % 4}`,
            payload: { due: dueAt },
            deliverAt: new Date(dueAt).toISOString(),
          })),
        ),
      ],
    }),
  );
  await until(async () => ours.length >= sent, 60_000, 50);
  await listener.end();
  await stopSweeper(sweeper);

  const theirs: number[] = [];
  await boss.createQueue('bench-lag');
  for (let w = 0; w < BOSS_WORKERS; w++) {
    await boss.work<{ due: number }>('bench-lag', { batchSize: BOSS_BATCH, pollingIntervalSeconds: 0.5 }, async (jobs) => {
      const seen = Date.now();
      for (const j of jobs) theirs.push(seen - j.data.due);
    });
  }
  const bossSent = await steady((dueAt, count) =>
    boss.insert(Array.from({ length: count }, () => ({ name: 'bench-lag', data: { due: dueAt }, startAfter: new Date(dueAt) }))),
  );
  await until(async () => theirs.length >= bossSent, 60_000, 50);
  await boss.offWork('bench-lag');
  return { ours: ours.sort((a, b) => a - b), theirs: theirs.sort((a, b) => a - b) };
}

async function main(): Promise<void> {
  let url = process.env.DATABASE_URL;
  let embedded: EmbeddedPostgres | undefined;
  let dataDir: string | undefined;
  if (!url) {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-bench-timers-'));
    embedded = await startEmbeddedPostgres({ dataDir: path.join(dataDir, 'pg'), port: await freePort(), throwaway: true });
    url = embedded.url;
  }
  const admin = new Client({ connectionString: url });
  await admin.connect();
  const dbName = `bench_timers_${Date.now().toString(36)}`;
  await admin.query(`CREATE DATABASE ${dbName}`);
  await admin.end();
  const u = new URL(url);
  u.pathname = `/${dbName}`;
  const dbUrl = u.toString();
  await applySchema(dbUrl);
  const pool = new Pool({ connectionString: dbUrl, max: CLIENTS });
  const schema = 'pgboss_bench';
  const boss = new PgBoss({ connectionString: dbUrl, schema, max: CLIENTS, supervise: false, schedule: false });
  boss.on('error', (err) => out(`pg-boss error: ${err.message}`));
  await boss.start();
  await boss.createQueue('bench-a');
  const started = Date.now();
  try {
    out(`# bench:timers — ${new Date().toISOString()}, ${os.availableParallelism()} cores, PostgreSQL ${embedded ? 'embedded' : 'DATABASE_URL'}, pg-boss 10`);
    out();
    if (ONLY.includes('a')) {
      const a = await benchSchedule(pool, boss);
      out(`(a) scheduling, ${SCHEDULE_N} timers, ${CLIENTS} concurrent callers`);
      out(`    one per call   ours ${a.ours.toFixed(0)}/s   pg-boss send ${a.theirs.toFixed(0)}/s   ratio ${(a.ours / a.theirs).toFixed(2)}x`);
      out(`    100 per call   ours ${a.oursBatch.toFixed(0)}/s   pg-boss insert ${a.theirsBatch.toFixed(0)}/s   ratio ${(a.oursBatch / a.theirsBatch).toFixed(2)}x`);
    }
    if (ONLY.includes('b')) {
      const b = await benchDrain(pool, boss, schema, dbUrl);
      out(`(b) draining ${DRAIN_N} due timers`);
      out(`    ours (1 sweeper process, batch ${SWEEPER_BATCH || 'default'}) ${b.ours.toFixed(0)}/s   pg-boss (${BOSS_WORKERS} workers x ${BOSS_BATCH}) ${b.theirs.toFixed(0)}/s   ratio ${(b.ours / b.theirs).toFixed(2)}x`);
    }
    if (!ONLY.includes('c')) return;
    const c = await benchLag(pool, boss, dbUrl);
    out(`(c) fire lag at ${RATE} timers/s for ${LAG_SECONDS} s (ms after deliverAt, as a consumer sees it)`);
    out(
      `    ours     p50 ${quantile(c.ours, 0.5)}  p99 ${quantile(c.ours, 0.99)}  max ${c.ours[c.ours.length - 1]}  (n=${c.ours.length})`,
    );
    out(
      `    pg-boss  p50 ${quantile(c.theirs, 0.5)}  p99 ${quantile(c.theirs, 0.99)}  max ${c.theirs[c.theirs.length - 1]}  (n=${c.theirs.length})`,
    );
    out(`    p99 ratio (pg-boss / ours) ${(quantile(c.theirs, 0.99) / Math.max(1, quantile(c.ours, 0.99))).toFixed(2)}x`);
    out(`total ${((Date.now() - started) / 1000).toFixed(0)} s`);
  } finally {
    await boss.stop({ graceful: false, wait: true }).catch(() => undefined);
    await pool.end();
    const cleanup = new Client({ connectionString: url });
    await cleanup.connect();
    await cleanup.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch(() => undefined);
    await cleanup.end();
    await embedded?.stop();
    if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`bench:timers failed: ${err?.stack ?? err}\n`);
    process.exit(1);
  },
);
