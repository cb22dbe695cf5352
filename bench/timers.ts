// npm run bench:timers — our timers against pg-boss 10 on the same PostgreSQL, in one run:
//   (a) scheduling rate: queen.timers_apply_v1 (one timer per call, the statement behind
//       POST /api/v1/timers until sealed timers; its v2 costs about 1.2x, bench/sealedTimers.ts) against boss.send(name, data, {startAfter}), the same number of
//       concurrent callers; and the batched forms (100 a call) of each;
//   (b) draining BENCH_DRAIN_N (20,000) timers that fall due at one instant: ours with 1, 2 and 4
//       sweeper processes (node dist/services/sweeper/main.js, its defaults, already idle), pg-boss
//       with each worker count x batchSize of BENCH_BOSS_WORKERS x BENCH_BOSS_BATCHES (workers
//       already polling, pollingIntervalSeconds 0.5, its minimum), the best one printed; measured
//       from the due instant until the last one is delivered (ours: in the log and the timer
//       deleted, one commit; pg-boss: state completed);
//   (c) fire lag at a steady 1,000 timers a second, and (d) at BENCH_HIGH_RATE (10,000) a second,
//       each due 1 s after it is scheduled: p50 and p99 of (seen by a consumer) - deliverAt. Ours:
//       one sweeper, a LISTEN on queen_log reading the new messages; pg-boss: its best drain
//       configuration, the moment its handler is called.
// The load average is printed at the start and the end: on a shared machine only the ratios of one
// run compare. Options (env): BENCH_SCHEDULE_N (10000), BENCH_DRAIN_N (20000), BENCH_RATE (1000),
// BENCH_HIGH_RATE (10000), BENCH_LAG_SECONDS (15), BENCH_HIGH_SECONDS (10), BENCH_CLIENTS (16),
// BENCH_BOSS_WORKERS (2,8,16), BENCH_BOSS_BATCHES (100,500,2000), BENCH_ONLY (a,b,c,d). DATABASE_URL
// to use your own server; otherwise an embedded PostgreSQL in a temporary folder (durability on).
import os from 'node:os';
import { Client, Pool } from 'pg';
import PgBoss from 'pg-boss';
import { spawnSweeper, SweeperProcess } from '../test/support/processes';
import { waitFor } from '../test/support/wait';
import { benchDatabase } from './lib/database';
import { loadAverage } from './lib/procs';
import { wholeEnv } from './lib/options';

const TENANT = '00000000-0000-0000-0000-000000000001';
const SCHEDULE_N = wholeEnv('BENCH_SCHEDULE_N', 10_000);
const DRAIN_N = wholeEnv('BENCH_DRAIN_N', 20_000);
const RATE = wholeEnv('BENCH_RATE', 1000);
const LAG_SECONDS = wholeEnv('BENCH_LAG_SECONDS', 15);
const HIGH_RATE = wholeEnv('BENCH_HIGH_RATE', 10_000);
const HIGH_SECONDS = wholeEnv('BENCH_HIGH_SECONDS', 10);
const envList = (name: string, fallback: string) => (process.env[name] ?? fallback).split(',').map((x) => Number(x));
const BOSS_WORKER_COUNTS = envList('BENCH_BOSS_WORKERS', '2,8,16');
const BOSS_BATCHES = envList('BENCH_BOSS_BATCHES', '100,500,2000');
const SWEEPER_COUNTS = [1, 2, 4];
const CLIENTS = wholeEnv('BENCH_CLIENTS', 16);
const ONLY = (process.env.BENCH_ONLY ?? 'a,b,c,d').split(',');
const FIRE_BATCH = process.env.BENCH_FIRE_BATCH ?? '';
const PAYLOAD = { order: 'A-1001', customer: 42, action: 'remind', note: 'x'.repeat(40) };

const out = (line = '') => process.stdout.write(`${line}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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

interface BossConfig {
  workers: number;
  batch: number;
}

/** Our drain with `sweepers` processes, idle before the timers fall due; answers timers a second. */
async function drainOurs(pool: Pool, url: string, sweepers: number): Promise<number> {
  const queue = `bench-drain-${sweepers}`;
  const env = { QUEEN_SWEEPER_INTERVAL_MS: '1000', ...(FIRE_BATCH ? { QUEEN_SWEEPER_FIRE_BATCH: FIRE_BATCH } : {}) };
  const procs = await Promise.all(Array.from({ length: sweepers }, () => spawnSweeper(url, env)));
  const dueAt = Date.now() + 2000 + DRAIN_N / 5; // room to schedule them all first
  for (let start = 0; start < DRAIN_N; start += 1000) {
    const ops = Array.from({ length: Math.min(1000, DRAIN_N - start) }, (_, i) => ({
      op: 'schedule',
      queue,
      partition: `p${(start + i) % 16}`,
      payload: PAYLOAD,
      deliverAt: new Date(dueAt).toISOString(),
    }));
    await pool.query({ ...SCHEDULE, values: [TENANT, JSON.stringify(ops)] });
  }
  if (Date.now() > dueAt) out(`    (ours, ${sweepers}: scheduling ended ${Date.now() - dueAt} ms after the due instant)`);
  await sleep(Math.max(0, dueAt - Date.now()));
  const drained = async () => !(await pool.query(`SELECT EXISTS (SELECT 1 FROM queen.log_timers WHERE queue = $1) AS x`, [queue])).rows[0].x;
  await waitFor(drained, { what: `every ${queue} timer fired`, timeoutMs: 300_000, everyMs: 10 });
  const seconds = (Date.now() - dueAt) / 1000;
  const delivered = (
    await pool.query(
      `SELECT count(*)::int AS n FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
         JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1`,
      [queue],
    )
  ).rows[0].n;
  if (delivered !== DRAIN_N) throw new Error(`${delivered} of ${DRAIN_N} timers reached the log`);
  await Promise.all(procs.map(stopSweeper));
  return DRAIN_N / seconds;
}

/** pg-boss's drain with `workers` x `batch`, workers polling before the jobs fall due; answers jobs a second. */
async function drainBoss(pool: Pool, boss: PgBoss, schema: string, c: BossConfig): Promise<number> {
  const queue = `bench-drain-w${c.workers}-b${c.batch}`;
  await boss.createQueue(queue);
  let handled = 0;
  for (let w = 0; w < c.workers; w++) {
    await boss.work(queue, { batchSize: c.batch, pollingIntervalSeconds: 0.5 }, async (jobs) => {
      handled += jobs.length;
    });
  }
  const dueAt = Date.now() + 2000 + DRAIN_N / 5;
  for (let start = 0; start < DRAIN_N; start += 1000) {
    await boss.insert(Array.from({ length: Math.min(1000, DRAIN_N - start) }, () => ({ name: queue, data: PAYLOAD, startAfter: new Date(dueAt) })));
  }
  if (Date.now() > dueAt) out(`    (pg-boss ${c.workers} x ${c.batch}: inserting ended ${Date.now() - dueAt} ms after the due instant)`);
  await sleep(Math.max(0, dueAt - Date.now()));
  await waitFor(async () => {
    if (handled < DRAIN_N) return false;
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${schema}.job WHERE name = $1 AND state = 'completed'`, [queue]);
    return rows[0].n >= DRAIN_N;
  }, { what: `${DRAIN_N} pg-boss jobs completed`, timeoutMs: 300_000, everyMs: 20 });
  const seconds = (Date.now() - dueAt) / 1000;
  await boss.offWork(queue);
  return DRAIN_N / seconds;
}

async function stopSweeper(p: SweeperProcess): Promise<void> {
  p.child.kill('SIGTERM');
  await p.exited;
}

/** Schedules `rate` timers a second for `seconds`, each due 1 s later, in slices of 10 ms. */
async function steady(rate: number, seconds: number, schedule: (dueAt: number, count: number) => Promise<unknown>): Promise<number> {
  const sliceMs = 10;
  const perSlice = rate / (1000 / sliceMs);
  const t0 = Date.now();
  let sent = 0;
  const inflight: Promise<unknown>[] = [];
  while (Date.now() - t0 < seconds * 1000) {
    const target = Math.floor(((Date.now() - t0) / 1000) * rate);
    const count = Math.min(Math.max(0, target - sent), perSlice * 10);
    if (count > 0) {
      inflight.push(schedule(Date.now() + 1000, count));
      sent += count;
    }
    await sleep(sliceMs);
  }
  await Promise.all(inflight);
  lastScheduleRate = sent / ((Date.now() - t0) / 1000);
  return sent;
}
/** The rate the last steady() really scheduled at (its calls all answered): below the target, the schedulers were the bound. */
let lastScheduleRate = 0;

async function benchLag(
  pool: Pool,
  boss: PgBoss,
  url: string,
  rate: number,
  seconds: number,
  bossConfig: BossConfig,
): Promise<{ ours: number[]; theirs: number[]; oursScheduled: number; theirsScheduled: number }> {
  const queue = `bench-lag-${rate}`;
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
      // Past each partition's last seen seq through its (partition_id, seq) key: a scan of the
      // queue's whole log at every notification competed with the sweeper for the cores and
      // grew with the run.
      `SELECT m.partition_id, m.seq, (m.payload->>'due')::bigint AS due
         FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
         LEFT JOIN unnest($1::uuid[], $2::bigint[]) AS l(pid, seq) ON l.pid = p.id
         JOIN LATERAL (SELECT m.partition_id, m.seq, m.payload FROM queen.messages m
                        WHERE m.partition_id = p.id AND m.seq > coalesce(l.seq, 0)) m ON true
        WHERE q.name = $3`,
      [[...lastSeq.keys()], [...lastSeq.values()], queue],
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
  const sent = await steady(rate, seconds, (dueAt, count) =>
    pool.query({
      ...SCHEDULE,
      values: [
        TENANT,
        JSON.stringify(
          Array.from({ length: count }, (_, i) => ({
            op: 'schedule',
            queue,
            partition: `p${i % 4}`,
            payload: { due: dueAt },
            deliverAt: new Date(dueAt).toISOString(),
          })),
        ),
      ],
    }),
  );
  const oursScheduled = lastScheduleRate;
  await waitFor(() => ours.length >= sent, { what: 'every timer of ours seen by the consumer', timeoutMs: 120_000, everyMs: 50 });
  await listener.end();
  await stopSweeper(sweeper);

  const theirs: number[] = [];
  await boss.createQueue(queue);
  for (let w = 0; w < bossConfig.workers; w++) {
    await boss.work<{ due: number }>(queue, { batchSize: bossConfig.batch, pollingIntervalSeconds: 0.5 }, async (jobs) => {
      const seen = Date.now();
      for (const j of jobs) theirs.push(seen - j.data.due);
    });
  }
  const bossSent = await steady(rate, seconds, (dueAt, count) =>
    boss.insert(Array.from({ length: count }, () => ({ name: queue, data: { due: dueAt }, startAfter: new Date(dueAt) }))),
  );
  const theirsScheduled = lastScheduleRate;
  await waitFor(() => theirs.length >= bossSent, { what: 'every pg-boss job handled', timeoutMs: 120_000, everyMs: 50 });
  await boss.offWork(queue);
  return { ours: ours.sort((a, b) => a - b), theirs: theirs.sort((a, b) => a - b), oursScheduled, theirsScheduled };
}

async function main(): Promise<void> {
  const db = await benchDatabase('timers', { schema: true });
  const dbUrl = db.url;
  const pool = new Pool({ connectionString: dbUrl, max: CLIENTS });
  const schema = 'pgboss_bench';
  const boss = new PgBoss({ connectionString: dbUrl, schema, max: Math.max(CLIENTS, ...BOSS_WORKER_COUNTS) + 4, supervise: false, schedule: false });
  boss.on('error', (err) => out(`pg-boss error: ${err.message}`));
  await boss.start();
  await boss.createQueue('bench-a');
  const started = Date.now();
  try {
    out(`# bench:timers — ${new Date().toISOString()}, ${os.availableParallelism()} cores, PostgreSQL ${db.embedded ? 'embedded' : 'DATABASE_URL'}, pg-boss 10`);
    out(`load average at the start ${loadAverage()}`);
    out();
    if (ONLY.includes('a')) {
      const a = await benchSchedule(pool, boss);
      out(`(a) scheduling, ${SCHEDULE_N} timers, ${CLIENTS} concurrent callers`);
      out(`    one per call   ours ${a.ours.toFixed(0)}/s   pg-boss send ${a.theirs.toFixed(0)}/s   ratio ${(a.ours / a.theirs).toFixed(2)}x`);
      out(`    100 per call   ours ${a.oursBatch.toFixed(0)}/s   pg-boss insert ${a.theirsBatch.toFixed(0)}/s   ratio ${(a.oursBatch / a.theirsBatch).toFixed(2)}x`);
    }
    let best: BossConfig = { workers: 8, batch: 500 };
    if (ONLY.includes('b')) {
      out(`(b) draining ${DRAIN_N} due timers`);
      const ours: number[] = [];
      for (const n of SWEEPER_COUNTS) {
        ours.push(await drainOurs(pool, dbUrl, n));
        out(`    ours, ${n} sweeper process${n > 1 ? 'es' : ''} (fire batch ${FIRE_BATCH || 'default'})   ${ours[ours.length - 1].toFixed(0)}/s`);
      }
      let bestRate = 0;
      for (const workers of BOSS_WORKER_COUNTS) {
        for (const batch of BOSS_BATCHES) {
          const r = await drainBoss(pool, boss, schema, { workers, batch });
          out(`    pg-boss ${workers} workers x ${batch}   ${r.toFixed(0)}/s`);
          if (r > bestRate) [bestRate, best] = [r, { workers, batch }];
        }
      }
      out(`    best pg-boss: ${best.workers} workers x ${best.batch}, ${bestRate.toFixed(0)}/s`);
      out(`    ratio against it: 1 sweeper ${(ours[0] / bestRate).toFixed(2)}x, 2 sweepers ${(ours[1] / bestRate).toFixed(2)}x, 4 sweepers ${(ours[2] / bestRate).toFixed(2)}x`);
    }
    const lag = async (label: string, rate: number, seconds: number) => {
      const c = await benchLag(pool, boss, dbUrl, rate, seconds, best);
      out(`${label} fire lag at ${rate} timers/s for ${seconds} s (ms after deliverAt, as a consumer sees it; pg-boss ${best.workers} x ${best.batch})`);
      out(`    ours     p50 ${quantile(c.ours, 0.5)}  p99 ${quantile(c.ours, 0.99)}  max ${c.ours[c.ours.length - 1]}  (n=${c.ours.length}, scheduled at ${c.oursScheduled.toFixed(0)}/s)`);
      out(`    pg-boss  p50 ${quantile(c.theirs, 0.5)}  p99 ${quantile(c.theirs, 0.99)}  max ${c.theirs[c.theirs.length - 1]}  (n=${c.theirs.length}, scheduled at ${c.theirsScheduled.toFixed(0)}/s)`);
      out(`    p99 ratio (pg-boss / ours) ${(quantile(c.theirs, 0.99) / Math.max(1, quantile(c.ours, 0.99))).toFixed(2)}x`);
    };
    if (ONLY.includes('c')) await lag('(c)', RATE, LAG_SECONDS);
    if (ONLY.includes('d')) await lag('(d)', HIGH_RATE, HIGH_SECONDS);
    out(`load average at the end ${loadAverage()}`);
    out(`total ${((Date.now() - started) / 1000).toFixed(0)} s`);
  } finally {
    await boss.stop({ graceful: false, wait: true }).catch(() => undefined);
    await pool.end();
    await db.stop();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`bench:timers failed: ${err?.stack ?? err}\n`);
    process.exit(1);
  },
);
