// node dist/bench/storage.js — the two storage settings bench:scale leaves open, measured on an
// embedded PostgreSQL of its own (durability on):
//   fillfactor   copies of queen.kv (same columns, generated shard, primary key and partial expiry
//                index) at fillfactor 70, 90 and 100, loaded with --keys rows, then for each, in
//                alternating order over --rounds rounds: incr on 100 hot keys and put on keys drawn
//                from all of them, --duration s each with --clients connections, the statements of
//                bench:kv's sql lane. Reports ops/s, the HOT share of updates (pg_stat_user_tables)
//                and the table's size before and after, autovacuum on with its defaults.
//   autovacuum   queen.kv under a steady stream of keys that expire a second after they are written
//                (--rate a second, the sql lane's upsert with an expiry) while a real sweeper process
//                prunes them, for --seconds: autovacuum runs, dead tuples, WAL, and the CPU of the
//                autovacuum workers against the whole server's.
// Options: --only=fillfactor|autovacuum, --keys=100000, --duration=10, --rounds=2, --clients=16,
// --rate=1000, --seconds=120.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { applySchema } from '../shared/db';
import { freePort, startEmbeddedPostgres } from '../shared/embeddedPostgres';
import { closedLoop } from './lib/load';
import { childrenOf, cpuUs, machineLine, TreeCpu } from './lib/procs';
import { spawnSweeper } from '../test/support/processes';

const argv = process.argv.slice(2);
const opt = (name: string, fallback: string) => {
  const a = argv.find((x) => x.startsWith(`--${name}=`));
  return a ? a.slice(name.length + 3) : fallback;
};
const ONLY = opt('only', 'fillfactor,autovacuum').split(',');
const KEYS = Number(opt('keys', '100000'));
const DURATION_S = Number(opt('duration', '10'));
const ROUNDS = Number(opt('rounds', '2'));
const CLIENTS = Number(opt('clients', '16'));
const RATE = Number(opt('rate', '1000'));
const SECONDS = Number(opt('seconds', '120'));
const TENANT = '00000000-0000-0000-0000-000000000001';
const VALUE = JSON.stringify({ name: 'bench', n: 12345, tags: ['a', 'b', 'c'], payload: 'x'.repeat(48) });
const FILLFACTORS = [70, 90, 100];
const log = (s: string) => process.stdout.write(`${new Date().toISOString().slice(11, 19)} ${s}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const fmt = (x: number, d = 0) => (Number.isFinite(x) ? x.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d }) : '–');

const put = (t: string) => `INSERT INTO ${t} (tenant_id, namespace, key, value, version) VALUES ($1, 'bench', $2, $3::jsonb, nextval('queen.kv_version_seq'))
  ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version, expires_at = NULL, updated_at = now()`;
const incr = (t: string) => `INSERT INTO ${t} AS k (tenant_id, namespace, key, value, version) VALUES ($1, 'ctr', $2, '1', nextval('queen.kv_version_seq'))
  ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET value = to_jsonb(k.value::numeric + 1), version = EXCLUDED.version, updated_at = now()`;

async function stats(admin: Pool, table: string): Promise<{ upd: number; hot: number; bytes: number; dead: number; autovacuums: number }> {
  const { rows } = await admin.query(
    `SELECT n_tup_upd::float8 AS upd, n_tup_hot_upd::float8 AS hot, pg_table_size(relid)::float8 AS bytes, n_dead_tup::float8 AS dead, autovacuum_count::int AS autovacuums
       FROM pg_stat_user_tables WHERE relid = $1::regclass`,
    [table],
  );
  return rows[0];
}

async function fillfactor(url: string, admin: Pool): Promise<string> {
  await admin.query('CREATE SCHEMA IF NOT EXISTS bench_ff');
  for (const ff of FILLFACTORS) {
    const t = `bench_ff.kv_${ff}`;
    await admin.query(`DROP TABLE IF EXISTS ${t}`);
    await admin.query(`CREATE TABLE ${t} (LIKE queen.kv INCLUDING ALL) WITH (fillfactor = ${ff}, vacuum_truncate = off)`);
    await admin.query(
      `INSERT INTO ${t} (tenant_id, namespace, key, value, version) SELECT $1, 'bench', 'k' || g, $2::jsonb, nextval('queen.kv_version_seq') FROM generate_series(0, $3::int - 1) g`,
      [TENANT, VALUE, KEYS],
    );
    await admin.query(`INSERT INTO ${t} (tenant_id, namespace, key, value, version) SELECT $1, 'ctr', 'hot-' || g, '0', nextval('queen.kv_version_seq') FROM generate_series(0, 99) g`, [TENANT]);
    await admin.query(`VACUUM ANALYZE ${t}`);
  }
  const start = new Map<number, Awaited<ReturnType<typeof stats>>>();
  for (const ff of FILLFACTORS) start.set(ff, await stats(admin, `bench_ff.kv_${ff}`));
  const ops = new Map<string, number[]>();
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 ? [...FILLFACTORS].reverse() : FILLFACTORS;
    for (const workload of ['incr', 'put'] as const) {
      for (const ff of order) {
        const t = `bench_ff.kv_${ff}`;
        const pool = new Pool({ connectionString: url, max: CLIENTS });
        await Promise.all(Array.from({ length: CLIENTS }, () => pool.connect())).then((cs) => cs.forEach((c) => c.release()));
        const text = workload === 'incr' ? incr(t) : put(t);
        const name = `s_${workload}_${ff}`;
        const r = await closedLoop(CLIENTS, DURATION_S * 1000, () => async () => {
          const key = workload === 'incr' ? `hot-${Math.floor(Math.random() * 100)}` : `k${Math.floor(Math.random() * KEYS)}`;
          await pool.query({ name, text, values: workload === 'incr' ? [TENANT, key] : [TENANT, key, VALUE] });
          return 1;
        });
        await pool.end();
        const k = `${workload}|${ff}`;
        ops.set(k, [...(ops.get(k) ?? []), r.ops / r.seconds]);
        log(`fillfactor ${ff} round ${round + 1} ${workload}: ${fmt(r.ops / r.seconds)} ops/s`);
      }
    }
  }
  await sleep(1500); // backends that ended flush their statistics on exit
  const lines = [
    `| fillfactor | incr, 100 hot keys (ops/s, per round) | put over ${fmt(KEYS)} keys (ops/s, per round) | updates | HOT share | table MB before → after | dead tuples after | autovacuum runs |`,
    '|---:|---|---|---:|---:|---|---:|---:|',
  ];
  for (const ff of FILLFACTORS) {
    const a = start.get(ff)!;
    const b = await stats(admin, `bench_ff.kv_${ff}`);
    const upd = b.upd - a.upd;
    lines.push(
      `| ${ff} | ${(ops.get(`incr|${ff}`) ?? []).map((x) => fmt(x)).join(' / ')} | ${(ops.get(`put|${ff}`) ?? []).map((x) => fmt(x)).join(' / ')} | ${fmt(upd)} | ${fmt((100 * (b.hot - a.hot)) / upd, 1)} % | ${fmt(a.bytes / 2 ** 20, 1)} → ${fmt(b.bytes / 2 ** 20, 1)} | ${fmt(b.dead)} | ${b.autovacuums - a.autovacuums} |`,
    );
  }
  return lines.join('\n');
}

/** CPU of autovacuum workers (children of the postmaster whose title says so), sampled. */
function autovacuumSampler(pgPid: number): { stop(): number } {
  const seen = new Map<number, { first: number; last: number }>();
  const tick = () => {
    for (const pid of childrenOf(pgPid)) {
      let title = '';
      try {
        title = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      } catch {
        continue;
      }
      if (!title.includes('autovacuum worker')) continue;
      const us = cpuUs(pid);
      if (us === undefined) continue;
      const s = seen.get(pid);
      if (s) s.last = us;
      else seen.set(pid, { first: 0, last: us }); // a worker born during the run: all its CPU counts
    }
  };
  const timer = setInterval(tick, 100);
  return {
    stop() {
      clearInterval(timer);
      tick();
      let total = 0;
      for (const s of seen.values()) total += s.last - s.first;
      return total;
    },
  };
}

async function autovacuum(url: string, admin: Pool, pgPid: number): Promise<string> {
  const sweeper = await spawnSweeper(url, { QUEEN_SWEEPER_INTERVAL_MS: '1000' });
  try {
    const before = await stats(admin, 'queen.kv');
    const wal0 = (await admin.query(`SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8 AS b`)).rows[0].b as number;
    const pg = new TreeCpu(() => [pgPid]);
    pg.start();
    const av = autovacuumSampler(pgPid);
    const pool = new Pool({ connectionString: url, max: 4 });
    const text = `INSERT INTO queen.kv (tenant_id, namespace, key, value, version, expires_at)
      SELECT $1, 'expiring', 'e' || g, $2::jsonb, nextval('queen.kv_version_seq'), now() + interval '1 second' FROM generate_series($3::bigint, $4::bigint - 1) g`;
    const t0 = Date.now();
    let sent = 0;
    let peakDead = 0;
    let lastStat = 0;
    while (Date.now() - t0 < SECONDS * 1000) {
      const target = Math.floor(((Date.now() - t0) / 1000) * RATE);
      if (target > sent) {
        await pool.query({ name: 'expiring', text, values: [TENANT, VALUE, sent, target] });
        sent = target;
      }
      if (Date.now() - lastStat > 1000) {
        lastStat = Date.now();
        peakDead = Math.max(peakDead, (await stats(admin, 'queen.kv')).dead);
      }
      await sleep(20);
    }
    await pool.end();
    const pgUs = pg.stop();
    const avUs = av.stop();
    const wal1 = (await admin.query(`SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8 AS b`)).rows[0].b as number;
    await sleep(1500);
    const after = await stats(admin, 'queen.kv');
    const pruned = Number((await sweeper.metric('queen_kv_pruned_total').catch(() => NaN)));
    return [
      `| seconds | keys written (expire after 1 s) | pruned by the sweeper | autovacuum runs on queen.kv | dead tuples, peak / end | WAL per key written | autovacuum CPU / all PostgreSQL CPU | table MB before → after |`,
      '|---:|---:|---:|---:|---|---:|---:|---|',
      `| ${SECONDS} | ${fmt(sent)} (${fmt(RATE)}/s) | ${fmt(pruned)} | ${after.autovacuums - before.autovacuums} | ${fmt(peakDead)} / ${fmt(after.dead)} | ${fmt((wal1 - wal0) / sent)} B | ${fmt(avUs / 1e6, 2)} s / ${fmt(pgUs / 1e6, 2)} s (${fmt((100 * avUs) / pgUs, 1)} %) | ${fmt(before.bytes / 2 ** 20, 1)} → ${fmt(after.bytes / 2 ** 20, 1)} |`,
    ].join('\n');
  } finally {
    sweeper.child.kill('SIGTERM');
    await sweeper.exited;
  }
}

async function main(): Promise<void> {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-bench-storage-'));
  fs.chmodSync(scratch, 0o755);
  const pg = await startEmbeddedPostgres({ dataDir: path.join(scratch, 'pg'), port: await freePort(), throwaway: true });
  const admin = new Pool({ connectionString: pg.url, max: 2 });
  try {
    await applySchema(pg.url);
    const version = (await admin.query('SHOW server_version')).rows[0].server_version as string;
    const pgPid = Number(fs.readFileSync(path.join(pg.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    const out: string[] = [`machine: ${machineLine(`PostgreSQL ${version}`)}; ${new Date().toISOString()}; command: node dist/bench/storage.js ${argv.join(' ')}`.trim()];
    if (ONLY.includes('fillfactor')) out.push('', await fillfactor(pg.url, admin));
    if (ONLY.includes('autovacuum')) out.push('', await autovacuum(pg.url, admin, pgPid));
    process.stdout.write(`\n${out.join('\n')}\n`);
  } finally {
    await admin.end();
    await pg.stop();
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

main().catch((err) => {
  process.stderr.write(`bench storage failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});
