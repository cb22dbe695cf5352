// Which way should a fire claim and move its rows? The fire step alone, in one run on one
// PostgreSQL: BENCH_N (20,000) due timers over 16 partitions drained by 1 and 2 connections, each call
// one transaction firing at most BENCH_BATCH (500), three ways:
//   by-shard + each:   the fire before 2026-12-01, the due timers of 8 shards a call (shard groups
//                      taken in turn), one queen.log_push_v1 call per timer;
//   global + each:     the cell's oldest due timers (FOR UPDATE SKIP LOCKED on (deliver_at,
//                      timer_id)), one queen.log_push_v1 call per timer;
//   global + append:   the same claim, each partition's timers moved by one queen.log_append_v1 call
//                      (queen.timers_fire_v1, shipped).
// It also prints, for one connection, how far the log's order strays from deliverAt order: the
// most older timers any message overtook (the messages of one commit count as arriving together). `npm run build && node dist/bench/fireChoices.js`.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Pool } from 'pg';
import { applySchema } from '../shared/db';
import { startEmbeddedPostgres, freePort } from '../shared/embeddedPostgres';
import { loadAverage } from './lib/procs';

const TENANT = '00000000-0000-0000-0000-000000000001';
const N = Number(process.env.BENCH_N ?? 20_000);
const BATCH = Number(process.env.BENCH_BATCH ?? 500);
const out = (line = '') => process.stdout.write(`${line}\n`);

const CHOICES: Record<string, string> = {
  'by-shard + each': 'SELECT queen.bench_fire_by_shard_v1($1::smallint[], $2::int) AS r',
  'global + each': 'SELECT queen.bench_fire_global_each_v1($2::int) AS r, $1::smallint[] AS unused',
  'global + append': 'SELECT queen.timers_fire_v1($2::int) AS r, $1::smallint[] AS unused',
};

// Both per-timer candidates lock the claimed timers' partitions the same way, in the order the
// shipped fire takes them (tenant, then queue and partition ascending).
const LOCK_PARTITIONS = `  FOR v_tenant IN SELECT DISTINCT c.tenant_id FROM unnest(v_claimed) AS c ORDER BY c.tenant_id LOOP
    PERFORM queen.log_lock_partitions_v1(v_tenant, (
      SELECT jsonb_agg(DISTINCT jsonb_build_object('queue', c.queue, 'partition', c.partition))
      FROM unnest(v_claimed) AS c WHERE c.tenant_id = v_tenant));
  END LOOP;`;

const FUNCTIONS = `CREATE OR REPLACE FUNCTION queen.bench_fire_by_shard_v1(p_shards SMALLINT[], p_limit INT) RETURNS JSONB
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_claimed queen.log_timers[];
  r queen.log_timers;
  v_tenant UUID;
  v_answer JSONB;
  v_fired INT := 0;
  v_duplicates INT := 0;
  v_late DOUBLE PRECISION := 0;
BEGIN
  -- Two steps. First the candidates: per shard an ordered scan of idx_log_timers_shard_due (a
  -- plain index scan marks the entries of fired, deleted timers dead as it passes them; a bitmap
  -- scan over all claimed shards does not, and re-read every dead entry of the backlog on every
  -- pass: measured 2026-11-29, the second 500-timer pass of a drain took twice the first), merged
  -- oldest first. Then the lock, by primary key, re-checking the floor on the row's latest version.
  SELECT array_agg(t ORDER BY t.deliver_at, t.timer_id) INTO v_claimed
  FROM (
    SELECT t.* FROM queen.log_timers t
    WHERE t.timer_id = ANY (ARRAY(
            SELECT c.timer_id
            FROM unnest(p_shards) AS g(s),
                 LATERAL (SELECT x.timer_id, x.deliver_at FROM queen.log_timers x
                          WHERE x.shard = g.s AND x.deliver_at <= now()
                          ORDER BY x.deliver_at, x.timer_id LIMIT p_limit) c
            ORDER BY c.deliver_at, c.timer_id
            LIMIT p_limit))
      AND t.deliver_at <= now()
    FOR UPDATE SKIP LOCKED) t;
  IF v_claimed IS NULL THEN
    RETURN jsonb_build_object('fired', 0, 'duplicates', 0, 'maxLateSeconds', 0);
  END IF;
  -- The lock order: timers (held above), then partitions in ascending (tenant, queue, partition)
  -- order, taken up front as queen.log_push_items_v1 does for its one tenant, so a pass and a
  -- transaction-wire bundle pushing to the same partitions can never wait on each other in a circle.
  -- Each timer fires into its own tenant's queue.
${LOCK_PARTITIONS}
  FOREACH r IN ARRAY v_claimed LOOP
    v_answer := queen.log_push_v1(r.tenant_id, r.queue, r.partition, r.payload, 'timer:' || r.timer_id::text);
    IF v_answer ->> 'status' = 'duplicate' THEN
      v_duplicates := v_duplicates + 1;
    END IF;
    v_fired := v_fired + 1;
  END LOOP;
  v_late := extract(epoch FROM clock_timestamp() - v_claimed[1].deliver_at)::double precision;
  DELETE FROM queen.log_timers WHERE timer_id = ANY (ARRAY(SELECT c.timer_id FROM unnest(v_claimed) AS c));
  RETURN jsonb_build_object('fired', v_fired, 'duplicates', v_duplicates, 'maxLateSeconds', v_late);
END $$;

CREATE OR REPLACE FUNCTION queen.bench_fire_global_each_v1(p_limit INT) RETURNS JSONB
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_claimed queen.log_timers[];
  r queen.log_timers;
  v_tenant UUID;
  v_n INT := 0;
BEGIN
  SELECT array_agg(c.t ORDER BY (c.t).deliver_at, (c.t).timer_id) INTO v_claimed FROM (
    SELECT t FROM queen.log_timers t WHERE t.deliver_at <= now()
    ORDER BY t.deliver_at, t.timer_id LIMIT p_limit FOR UPDATE SKIP LOCKED) c;
  IF v_claimed IS NULL THEN
    RETURN jsonb_build_object('fired', 0);
  END IF;
${LOCK_PARTITIONS}
  FOREACH r IN ARRAY v_claimed LOOP
    PERFORM queen.log_push_v1(r.tenant_id, r.queue, r.partition, r.payload, 'timer:' || r.timer_id::text);
    v_n := v_n + 1;
  END LOOP;
  DELETE FROM queen.log_timers WHERE timer_id = ANY (ARRAY(SELECT c.timer_id FROM unnest(v_claimed) AS c));
  RETURN jsonb_build_object('fired', v_n);
END $$;
`;

async function fill(pool: Pool, queue: string): Promise<void> {
  const base = Date.now() - 3600_000;
  for (let start = 0; start < N; start += 1000) {
    const ops = Array.from({ length: Math.min(1000, N - start) }, (_, j) => {
      const i = start + j;
      const rank = (i * 7919) % N;
      return { op: 'schedule', queue, partition: `p${i % 16}`, payload: { rank }, deliverAt: new Date(base + rank).toISOString() };
    });
    await pool.query('SELECT queen.timers_apply_v1($1::uuid, $2::jsonb)', [TENANT, JSON.stringify(ops)]);
  }
  await pool.query('VACUUM ANALYZE queen.log_timers');
}

async function drain(pool: Pool, text: string, connections: number): Promise<number> {
  let group = 0;
  let idleGroups = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: connections }, async () => {
      for (;;) {
        const g = group++ % 8;
        const shards = Array.from({ length: 8 }, (_, k) => g * 8 + k);
        const { rows } = await pool.query(text, [shards, BATCH]);
        const fired = Number(rows[0].r.fired);
        if (fired > 0) idleGroups = 0;
        else if (!text.includes('by_shard') || ++idleGroups >= 8) {
          if ((await pool.query('SELECT EXISTS (SELECT 1 FROM queen.log_timers) AS x')).rows[0].x) continue;
          return;
        }
      }
    }),
  );
  return N / ((performance.now() - t0) / 1000);
}

function worstOvertaking(ranks: number[]): number {
  // For each message, how many smaller ranks come after it; the largest. O(n log n) with a Fenwick tree.
  const tree = new Int32Array(ranks.length + 1);
  let worst = 0;
  for (let j = ranks.length - 1; j >= 0; j--) {
    let older = 0;
    for (let i = ranks[j]; i > 0; i -= i & -i) older += tree[i];
    worst = Math.max(worst, older);
    for (let i = ranks[j] + 1; i <= ranks.length; i += i & -i) tree[i]++;
  }
  return worst;
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-bench-fire-'));
  const pg = await startEmbeddedPostgres({ dataDir: path.join(dir, 'pg'), port: await freePort(), throwaway: true });
  try {
    const admin = new Client({ connectionString: pg.url });
    await admin.connect();
    await admin.query('CREATE DATABASE bench_fire');
    await admin.end();
    const u = new URL(pg.url);
    u.pathname = '/bench_fire';
    await applySchema(u.toString());
    const pool = new Pool({ connectionString: u.toString(), max: 4 });
    pool.on('error', () => undefined);
    await pool.query(FUNCTIONS);
    out(`# bench/fireChoices — ${new Date().toISOString()}, ${os.availableParallelism()} cores, load average ${loadAverage()}`);
    out(`# ${N} due timers over 16 partitions (one queue), at most ${BATCH} a transaction`);
    let k = 0;
    for (const [name, text] of Object.entries(CHOICES)) {
      for (const connections of [1, 2]) {
        const queue = `choice-${k++}`;
        await fill(pool, queue);
        const rate = await drain(pool, text, connections);
        let order = '';
        if (connections === 1) {
          const { rows } = await pool.query(
            `SELECT (m.payload->>'rank')::int AS rank FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
               JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 ORDER BY m.created_at, 1`,
            [queue],
          );
          if (rows.length !== N) throw new Error(`${rows.length} of ${N} fired`);
          order = `   oldest first: at most ${worstOvertaking(rows.map((r) => r.rank))} older timers overtaken`;
        }
        out(`${name.padEnd(16)} ${connections} connection${connections > 1 ? 's' : ' '}  ${rate.toFixed(0).padStart(6)} timers/s${order}`);
      }
    }
    out(`load average at the end ${loadAverage()}`);
    await pool.end();
  } catch (err) {
    process.stderr.write(`fireChoices failed: ${(err as Error)?.stack ?? err}\n`);
    process.exitCode = 1;
  } finally {
    await pg.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`fireChoices failed: ${err?.stack ?? err}\n`);
    process.exit(1);
  },
);
