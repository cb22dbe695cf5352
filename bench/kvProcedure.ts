// The PostgreSQL side of the KV hot path alone: the statements the API sends (shared/sql/kv.ts)
// against the bare statement the sql lane of bench/kv.ts sends, one connection, sequential, so the
// difference is the procedure's cost per call (pg_stat_statements is not available on the embedded
// server). Also a server-side loop (no protocol at all) for the same pairs.
//   node dist/bench/kvProcedure.js            (embedded PostgreSQL, or DATABASE_URL)
//   --calls=3000 (BENCH_CALLS), --compare=<git ref> (the same calls against that revision's sql/
//   and that revision's statements from shared/sql/kv.ts, in a second database, alternating),
//   --only=get,put (statements whose name starts so)
import { KV_APPLY_BATCH, KV_APPLY_ONE } from '../shared/sql/kv';
import { Backend, backendUsPerCall, BLOCK, databaseAt, median, statementAt, withLanes } from './lib/procedure';

const CALLS = Number(process.argv.find((a) => a.startsWith('--calls='))?.slice(8) ?? process.env.BENCH_CALLS ?? 3000);
const TENANT = '00000000-0000-0000-0000-000000000001';
const VALUE = JSON.stringify({ name: 'bench', n: 12345, tags: ['a', 'b', 'c'], payload: 'x'.repeat(48) });
const KEYS = 100_000;
const rnd = (n: number) => Math.floor(Math.random() * n);
let fresh = 0;
const tenKeys = () => {
  const start = rnd(KEYS - 10);
  return Array.from({ length: 10 }, (_, i) => `k${start + i}`);
};
const tag = Date.now().toString(36);

type Q = { name: string; text: string; values: unknown[] };
/** The statements the API sends, of the working tree or (for --compare) of that revision. */
interface Statements {
  KV_APPLY_BATCH: { name: string; text: string };
  KV_APPLY_ONE: { name: string; text: string };
}
interface Pair {
  name: string;
  cell: (s: Statements) => Q;
  sql: () => Q;
}
const batch = (op: object) => (s: Statements): Q => ({ ...s.KV_APPLY_BATCH, values: [TENANT, JSON.stringify({ operations: [op] })] });
const PAIRS: Pair[] = [
  {
    name: 'get (path statement)',
    cell: (s) => ({ ...s.KV_APPLY_ONE, values: [TENANT, 'get', 'bench', `k${rnd(KEYS)}`, '{}'] }),
    sql: () => ({ name: 'p_get', text: `SELECT value, version FROM queen.kv WHERE tenant_id = $1 AND namespace = $2 AND key = $3 AND (expires_at IS NULL OR expires_at > now())`, values: [TENANT, 'bench', `k${rnd(KEYS)}`] }),
  },
  {
    name: 'get (batch statement)',
    cell: (s) => batch({ op: 'get', ns: 'bench', key: `k${rnd(KEYS)}` })(s),
    sql: () => ({ name: 'p_get', text: `SELECT value, version FROM queen.kv WHERE tenant_id = $1 AND namespace = $2 AND key = $3 AND (expires_at IS NULL OR expires_at > now())`, values: [TENANT, 'bench', `k${rnd(KEYS)}`] }),
  },
  {
    name: 'getMany 10',
    cell: (s) => batch({ op: 'getMany', ns: 'bench', keys: tenKeys() })(s),
    sql: () => ({ name: 'p_get_many', text: `SELECT key, value, version FROM queen.kv WHERE tenant_id = $1 AND namespace = $2 AND key = ANY($3::text[]) AND (expires_at IS NULL OR expires_at > now())`, values: [TENANT, 'bench', tenKeys()] }),
  },
  {
    name: 'put (path statement)',
    cell: (s) => ({ ...s.KV_APPLY_ONE, values: [TENANT, 'put', 'bench', `k${rnd(KEYS)}`, `{"value":${VALUE},"forever":true}`] }),
    sql: () => ({ name: 'p_put', text: `INSERT INTO queen.kv (tenant_id, namespace, key, value, version) VALUES ($1, $2, $3, $4::jsonb, nextval('queen.kv_version_seq')) ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version, expires_at = NULL, updated_at = now() RETURNING version`, values: [TENANT, 'bench', `k${rnd(KEYS)}`, VALUE] }),
  },
  {
    name: 'putIfAbsent fresh',
    cell: (s) => batch({ op: 'putIfAbsent', ns: 'bench', key: `p-${tag}-c${fresh++}`, value: JSON.parse(VALUE), forever: true })(s),
    sql: () => ({ name: 'p_pia', text: `INSERT INTO queen.kv (tenant_id, namespace, key, value, version) VALUES ($1, $2, $3, $4::jsonb, nextval('queen.kv_version_seq')) ON CONFLICT (tenant_id, namespace, key) DO NOTHING RETURNING version`, values: [TENANT, 'bench', `p-${tag}-s${fresh++}`, VALUE] }),
  },
  {
    name: 'incr hot',
    cell: (s) => batch({ op: 'incr', ns: 'bench', key: `hot-${rnd(100)}`, delta: 1, forever: true })(s),
    sql: () => ({ name: 'p_incr', text: `INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version) VALUES ($1, $2, $3, to_jsonb($4::numeric), nextval('queen.kv_version_seq')) ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET value = to_jsonb(k.value::numeric + $4::numeric), version = EXCLUDED.version, updated_at = now() RETURNING value, version`, values: [TENANT, 'bench', `hot-${rnd(100)}`, 1] }),
  },
  {
    name: '100 puts (per op)',
    cell: (s) => {
      const start = rnd(KEYS - 100);
      const keys = Array.from({ length: 100 }, (_, i) => `k${start + i}`);
      return { ...s.KV_APPLY_BATCH, values: [TENANT, `{"operations":[${keys.map((k) => `{"op":"put","ns":"bench","key":"${k}","value":${VALUE},"forever":true}`).join(',')}]}`] };
    },
    sql: () => ({ name: 'p_put', text: `INSERT INTO queen.kv (tenant_id, namespace, key, value, version) VALUES ($1, $2, $3, $4::jsonb, nextval('queen.kv_version_seq')) ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version, expires_at = NULL, updated_at = now() RETURNING version`, values: [TENANT, 'bench', `k${rnd(KEYS)}`, VALUE] }),
  },
];

interface Lane extends Backend {
  statements: Statements;
}

async function block(lane: Lane, make: (s: Statements) => Q, calls: number): Promise<number> {
  return backendUsPerCall(lane, calls, () => lane.client.query(make(lane.statements)));
}

async function database(url: string, name: string, ref: string | undefined): Promise<Lane> {
  const backend = await databaseAt(url, name, ref, '-c queen.kv_max_batch=1000 -c queen.kv_prefix_limit=1000 -c queen.kv_max_read_bytes=4194304');
  const { client } = backend;
  await client.query(
    `INSERT INTO queen.kv (tenant_id, namespace, key, value, version) SELECT $1, 'bench', 'k' || g, $2::jsonb, nextval('queen.kv_version_seq') FROM generate_series(0, ${KEYS - 1}) g`,
    [TENANT, VALUE],
  );
  await client.query(`INSERT INTO queen.kv (tenant_id, namespace, key, value, version) SELECT $1, 'bench', 'hot-' || g, '0', nextval('queen.kv_version_seq') FROM generate_series(0, 99) g`, [TENANT]);
  await client.query('VACUUM ANALYZE queen.kv');
  const statements = ref ? { KV_APPLY_BATCH: statementAt(ref, 'kv.ts', 'KV_APPLY_BATCH'), KV_APPLY_ONE: statementAt(ref, 'kv.ts', 'KV_APPLY_ONE') } : { KV_APPLY_BATCH, KV_APPLY_ONE };
  return { ...backend, statements };
}

async function main(): Promise<void> {
  await withLanes('queen_bench_proc', CALLS, database, async ({ now, before, compare, selected, blocks }) => {
    process.stdout.write(
      `one connection per lane, sequential calls, ${blocks} alternating blocks of ${BLOCK}; median over blocks of the backend's CPU µs per call ` +
        '(/proc/<backend>/schedstat: commit waits and neighbours do not count)\n',
    );
    process.stdout.write(
      compare
        ? `| statement | cell @ ${compare} | cell @ working tree | change | bare SQL |\n|---|---:|---:|---:|---:|\n`
        : '| statement | cell statement | bare SQL | difference |\n|---|---:|---:|---:|\n',
    );
    for (const p of PAIRS) {
      if (!selected(p.name)) continue;
      const perBlock = p.name.startsWith('100') ? Math.ceil(BLOCK / 20) : BLOCK;
      const a: number[] = [];
      const b: number[] = [];
      const q: number[] = [];
      for (let i = 0; i < 20; i++) {
        await now.client.query(p.cell(now.statements));
        await now.client.query(p.sql());
        if (before) await before.client.query(p.cell(before.statements));
      }
      for (let i = 0; i < blocks; i++) {
        if (before) a.push(await block(before, p.cell, perBlock));
        b.push(await block(now, p.cell, perBlock));
        q.push(await block(now, () => p.sql(), BLOCK));
      }
      const [ma, mb, mq] = [median(a), median(b), median(q)];
      process.stdout.write(
        before
          ? `| ${p.name} | ${ma.toFixed(0)} | ${mb.toFixed(0)} | ${(((mb - ma) / ma) * 100).toFixed(0)}% | ${mq.toFixed(0)} |\n`
          : `| ${p.name} | ${mb.toFixed(0)} | ${mq.toFixed(0)} | ${(mb - mq).toFixed(0)} |\n`,
      );
    }
  });
}

main().catch((err) => {
  process.stderr.write(`${err?.stack ?? err}\n`);
  process.exit(1);
});
