// npm run bench:sealed-timers — what sealing timers (migration 054, timers_apply_v2, timers_fire_v3)
// costs the timers that are not sealed, and what a sealed one costs, the SQL alone, in one run on
// one PostgreSQL, the cases alternated over BENCH_ROUNDS (3) rounds, medians printed:
//   schedule: BENCH_SCHEDULE_N (2,000) one-timer calls on one connection: timers_apply_v1 (the
//             previous release's statement), timers_apply_v2 into a clear queue (its probe for an
//             encrypted queue; the tenant has one, elsewhere), and timers_apply_v2 into an
//             encrypted queue with the sealed text given (the API's second call; the refused first
//             call and the read of the payload are two more round trips, not counted here);
//   fire:     BENCH_FIRE_N (20,000) due timers over 16 partitions, at most BENCH_BATCH (2,000) a
//             transaction, one connection: timers_fire_v1 (the previous release's statement),
//             timers_fire_v3 of clear timers, and timers_fire_v3 of sealed timers (each message
//             marked, each sealed_timers row deleted).
// Each case's timers a second (wall clock) and the backend's CPU µs a timer (/proc/<backend>/schedstat:
// the figure to compare on a shared machine). Needs the server on this machine: the embedded
// PostgreSQL in a temporary folder, or DATABASE_URL to a local server.
import fs from 'node:fs';
import os from 'node:os';
import { Pool } from 'pg';
import { benchDatabase } from './lib/database';
import { loadAverage } from './lib/procs';
import { median, wholeEnv } from './lib/options';

const TENANT = '00000000-0000-0000-0000-000000000001';
const ROUNDS = wholeEnv('BENCH_ROUNDS', 3);
const SCHEDULE_N = wholeEnv('BENCH_SCHEDULE_N', 2000);
const FIRE_N = wholeEnv('BENCH_FIRE_N', 20_000);
const BATCH = wholeEnv('BENCH_BATCH', 2000);
const out = (line = '') => process.stdout.write(`${line}\n`);
/** Looks like the API's sealed text of a 100-byte payload (the SQL never opens it). */
const SEALED = `qk1:0a1b2c3d:${Buffer.alloc(12, 1).toString('base64')}:${Buffer.alloc(16, 2).toString('base64')}:${Buffer.alloc(100, 3).toString('base64')}`;
const PAYLOAD = { order: 'ord_8812', note: 'x'.repeat(80) };

/** Nanoseconds a backend has run on a CPU (the server is local): commit waits and neighbours do not count. */
function cpuNs(pid: number): number {
  return Number(fs.readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
}
interface Figure { rate: number; cpuUs: number }


async function schedule(pool: Pool, name: string, text: string, queue: string, sealed: boolean): Promise<Figure> {
  const c = await pool.connect();
  try {
    const pid = (await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
    const c0 = cpuNs(pid);
    const statement = { name, text };
    const op = JSON.stringify([{ op: 'schedule', queue, payload: PAYLOAD, delaySeconds: 3600 }]);
    const t0 = performance.now();
    for (let i = 0; i < SCHEDULE_N; i++) {
      await c.query({ ...statement, values: sealed ? [TENANT, op, JSON.stringify([SEALED])] : [TENANT, op] });
    }
    return { rate: SCHEDULE_N / ((performance.now() - t0) / 1000), cpuUs: (cpuNs(pid) - c0) / 1000 / SCHEDULE_N };
  } finally {
    c.release();
  }
}

/** FIRE_N due timers over 16 partitions of `queue`; sealed ones marked as timers_apply_v2 marks them. */
async function fill(pool: Pool, queue: string, sealed: boolean): Promise<void> {
  await pool.query(
    `WITH t AS (
       INSERT INTO queen.log_timers (tenant_id, queue, partition, payload, deliver_at)
       SELECT $1::uuid, $2, 'p' || (g % 16), $4::jsonb, now() - interval '1 hour' + g * interval '1 microsecond'
         FROM generate_series(1, $3::int) g RETURNING timer_id)
     ${sealed ? 'INSERT INTO queen.sealed_timers (timer_id) SELECT timer_id FROM t' : 'SELECT count(*) FROM t'}`,
    [TENANT, queue, FIRE_N, JSON.stringify(sealed ? SEALED : PAYLOAD)],
  );
  await pool.query('VACUUM ANALYZE queen.log_timers');
}

/** Fires every due timer in batches of BATCH through `call`, a fire function called with $1 the batch. */
async function drain(pool: Pool, call: string): Promise<Figure> {
  const c = await pool.connect();
  try {
    const pid = (await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
    const c0 = cpuNs(pid);
    const t0 = performance.now();
    let fired = 0;
    while (fired < FIRE_N) {
      const { rows } = await c.query(`SELECT queen.${call} AS r`, [BATCH]);
      const n = Number(rows[0].r.fired);
      if (n === 0) throw new Error(`${call} fired ${fired} of ${FIRE_N}`);
      fired += n;
    }
    return { rate: FIRE_N / ((performance.now() - t0) / 1000), cpuUs: (cpuNs(pid) - c0) / 1000 / FIRE_N };
  } finally {
    c.release();
  }
}

async function main(): Promise<void> {
  const db = await benchDatabase('sealed_timers', { schema: true });
  const pool = new Pool({ connectionString: db.url, max: 2 });
  try {
    await pool.query(`SELECT queen.log_configure_v2($1::uuid, '{"queue": "enc", "options": {"encryptionEnabled": true}}'::jsonb, true)`, [TENANT]);
    out(`# bench/sealedTimers — ${new Date().toISOString()}, ${os.availableParallelism()} cores, load average ${loadAverage()}`);
    out(`# schedule: ${SCHEDULE_N} one-timer calls, 1 connection; fire: ${FIRE_N} due timers over 16 partitions, batch ${BATCH}, 1 connection; ${ROUNDS} rounds, medians`);
    const cases: Array<[string, () => Promise<Figure>]> = [
      ['schedule  timers_apply_v1, clear queue', () => schedule(pool, 'bench_apply_v1', 'SELECT queen.timers_apply_v1($1::uuid, $2::jsonb)', 'clear', false)],
      ['schedule  timers_apply_v2, clear queue', () => schedule(pool, 'bench_apply_v2', 'SELECT queen.timers_apply_v2($1::uuid, $2::jsonb)', 'clear', false)],
      ['schedule  timers_apply_v2, encrypted queue, sealed', () => schedule(pool, 'bench_apply_v2_sealed', 'SELECT queen.timers_apply_v2($1::uuid, $2::jsonb, $3::jsonb)', 'enc', true)],
      ['fire      timers_fire_v1', async () => { await fill(pool, 'fire', false); return drain(pool, 'timers_fire_v1($1::int)'); }],
      ['fire      timers_fire_v3', async () => { await fill(pool, 'fire', false); return drain(pool, 'timers_fire_v3($1::int, 0)'); }],
      ['fire      timers_fire_v3, sealed timers', async () => { await fill(pool, 'fire', true); return drain(pool, 'timers_fire_v3($1::int, 0)'); }],
    ];
    const rates = new Map<string, Figure[]>(cases.map(([name]) => [name, []]));
    for (let r = 0; r < ROUNDS; r++) {
      for (const [name, run] of cases) rates.get(name)!.push(await run());
      await pool.query('DELETE FROM queen.log_timers');
    }
    out(`${'case'.padEnd(52)} ${'timers/s'.padStart(9)} ${'backend CPU µs a timer'.padStart(24)}`);
    for (const [name, xs] of rates) {
      const cpu = xs.map((x) => x.cpuUs);
      out(`${name.padEnd(52)} ${median(xs.map((x) => x.rate)).toFixed(0).padStart(9)} ${median(cpu).toFixed(1).padStart(24)}   (${cpu.map((x) => x.toFixed(1)).join(', ')})`);
    }
    out(`load average at the end ${loadAverage()}`);
  } finally {
    await pool.end();
    await db.stop();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`sealedTimers failed: ${err?.stack ?? err}\n`);
    process.exit(1);
  },
);
