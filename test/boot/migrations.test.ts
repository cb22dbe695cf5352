// The schema at boot (shared/migrations.ts): each migration of sql/migrations once, in order, under
// the advisory lock, and each changed file of sql/functions again; a changed applied statement or a
// database newer than the release refuses the boot with a line naming it, a corrected comment does
// not; a database of the release before versioning is adopted; and the upgrades from that release
// and from 0.1 run beside their traffic without failing any of it.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { Client } from 'pg';
import { checksumOf, definitions, migrate, migrations, pendingMigrations } from '../../shared/migrations';
import { KV_APPLY_ONE } from '../../shared/sql/kv';
import { LOG_PUSH } from '../../shared/sql/log';
import { dumpSchema } from '../support/schemaDump';
import { createTestDatabase, sql } from '../support/database';

/**
 * The last release before versioned migrations (commit 315b6f9): its schema files and two of its
 * statements, the schema and traffic a real upgrading cell has. Kept as a fixture, not read from git,
 * because a clone (a shallow one in CI) may not have that commit.
 */
const PREVIOUS: { files: string[]; statements: { kvOne: { name: string; text: string }; push: { name: string; text: string } } } = JSON.parse(
  zlib.gunzipSync(fs.readFileSync(path.resolve(__dirname, '..', '..', '..', 'test', 'fixtures', 'release-before-versioning.json.gz'))).toString(),
);
/**
 * Release 0.1 (commit 300eb87), the last whose numbered files held the functions: its files with the
 * checksums its boot recorded, and the statements its API sends.
 */
type Statement = { name: string; text: string };
const RELEASE_0_1: {
  files: { version: number; name: string; sql: string; checksum: string }[];
  statements: Record<'kvOne' | 'push' | 'pop' | 'ackOne' | 'timers', Statement>;
} = JSON.parse(zlib.gunzipSync(fs.readFileSync(path.resolve(__dirname, '..', '..', '..', 'test', 'fixtures', 'release-0.1.json.gz'))).toString());
const TENANT = '00000000-0000-0000-0000-000000000001';
const DIST = path.resolve(__dirname, '..', '..');

type Db = { url: string; drop(): Promise<void> };
const dbs: Db[] = [];
afterAll(() => Promise.all(dbs.map((d) => d.drop())));
async function database(empty = true): Promise<Db> {
  const d = await createTestDatabase({ empty });
  dbs.push(d);
  return d;
}
/** A fresh database with `apply` run on it in one transaction, the way an older release's boot ran its files. */
async function leftBy(apply: (c: Client) => Promise<void>): Promise<Db> {
  const d = await database();
  const c = new Client({ connectionString: d.url });
  await c.connect();
  try {
    await c.query('BEGIN');
    await apply(c);
    await c.query('COMMIT');
  } finally {
    await c.end();
  }
  return d;
}
/** A database as the release before versioning left it: its files applied the way its boot did. */
const previousRelease = () =>
  leftBy(async (c) => {
    for (const f of PREVIOUS.files) await c.query(f);
  });
/** A database as release 0.1 left it: its files applied and recorded the way its boot did. */
const release01 = () =>
  leftBy(async (c) => {
    await c.query(`CREATE SCHEMA IF NOT EXISTS queen;
      CREATE TABLE queen.schema_migrations (version INT PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`);
    for (const f of RELEASE_0_1.files) {
      await c.query(f.sql);
      await c.query('INSERT INTO queen.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)', [f.version, f.name, f.checksum]);
    }
  });
/** The release command, as a release phase runs it: its exit code and its last log line. */
function releaseCommand(url: string, extra: Record<string, string> = {}): Promise<{ code: number; last: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [path.join(DIST, 'services', 'migrate.js')], {
      env: { ...process.env, DATABASE_URL: url, QUEEN_DB_BOOT_WAIT_MS: '0', ...extra },
      timeout: 60_000,
    }, (err, stdout) => {
      const lines = stdout.trim().split('\n');
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, last: lines[lines.length - 1] ?? '' });
    });
  });
}

test('applied twice: the first runs every file in order and records it; the second runs nothing', async () => {
  const d = await database();
  const first = await migrate(d.url);
  expect(first).toEqual({ applied: migrations().map((m) => m.version), defined: definitions().map((f) => f.name), adopted: false });
  const recorded = await sql(d.url, 'SELECT version, name, checksum, applied_at FROM queen.schema_migrations ORDER BY version');
  expect(recorded.map((r) => [r.version, r.name, r.checksum])).toEqual(migrations().map((m) => [m.version, m.name, m.checksum]));
  const defined = await sql(d.url, 'SELECT name, checksum, applied_at FROM queen.schema_definitions ORDER BY name');
  expect(defined.map((r) => [r.name, r.checksum])).toEqual(definitions().map((f) => [f.name, f.checksum]));
  const second = await migrate(d.url);
  expect(second).toEqual({ applied: [], defined: [], adopted: false });
  expect(await sql(d.url, 'SELECT version, name, checksum, applied_at FROM queen.schema_migrations ORDER BY version')).toEqual(recorded);
  expect(await sql(d.url, 'SELECT name, checksum, applied_at FROM queen.schema_definitions ORDER BY name')).toEqual(defined);
});

test('a file changed after it was applied refuses the boot, naming the file; nothing runs', async () => {
  const d = await database(false);
  const [victim] = migrations().filter((m) => m.name.includes('_kv.sql'));
  await sql(d.url, `UPDATE queen.schema_migrations SET checksum = 'edited' WHERE version = $1`, [victim.version]);
  await expect(migrate(d.url)).rejects.toThrow(new RegExp(`sql/migrations/${victim.name} changed after it was applied`));
  const { code, last } = await releaseCommand(d.url);
  expect(code).toBe(1);
  expect(last).toContain(`sql/migrations/${victim.name} changed after it was applied`);
});

test('the checksum is of the statements: a corrected comment keeps it, an edited statement or function body does not', () => {
  const [kv] = migrations().filter((m) => m.name.includes('_kv.sql'));
  expect(kv.sql).toContain('WITH (fillfactor = 70,');
  const recommented = kv.sql.replace(/^-- .*$/m, '-- a corrected sentence').replace(/\n\n/g, '\n\n\n');
  expect(recommented).not.toBe(kv.sql);
  expect(checksumOf(recommented)).toBe(kv.checksum);
  expect(checksumOf(kv.sql.replace('WITH (fillfactor = 70,', 'WITH (fillfactor = 71,'))).not.toBe(kv.checksum);
  // Inside a function's body a comment is part of what PostgreSQL stores: a change there applies again.
  const [ops] = definitions().filter((f) => f.name === 'kv_ops');
  const body = ops.sql.indexOf('$$');
  const inBody = ops.sql.slice(0, body + 2) + '\n  -- a note\n' + ops.sql.slice(body + 2);
  expect(checksumOf(inBody)).not.toBe(ops.checksum);
});

test('a changed file of sql/functions is applied again at the next boot, and only that file; a boot that does not migrate names it', async () => {
  const d = await database(false);
  // Two functions of two families made wrong by hand; only kv_ops's record says its file changed.
  await sql(d.url, `CREATE OR REPLACE FUNCTION queen.kv_live_v1(TIMESTAMPTZ, TIMESTAMPTZ) RETURNS BOOLEAN LANGUAGE sql IMMUTABLE AS $$ SELECT false $$`);
  await sql(d.url, `CREATE OR REPLACE FUNCTION queen.json_kind_v1(p JSONB) RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$ SELECT 'tampered' $$`);
  await sql(d.url, `UPDATE queen.schema_definitions SET checksum = 'an earlier file' WHERE name = 'kv_ops'`);
  expect(await pendingMigrations(d.url)).toEqual(['functions/kv_ops.sql']);
  expect(await migrate(d.url)).toEqual({ applied: [], defined: ['kv_ops'], adopted: false });
  const [live] = await sql(d.url, `SELECT queen.kv_live_v1(NULL, now()) AS live, queen.json_kind_v1('1') AS kind`);
  expect(live).toEqual({ live: true, kind: 'tampered' });
  expect(await pendingMigrations(d.url)).toEqual([]);
});

test('a database newer than this release refuses the boot, naming the version', async () => {
  const d = await database(false);
  const newest = migrations()[migrations().length - 1].version;
  await sql(d.url, `INSERT INTO queen.schema_migrations (version, name, checksum) VALUES (999, '999_from_the_future.sql', 'x')`);
  await expect(migrate(d.url)).rejects.toThrow(`migration 999 (999_from_the_future.sql) applied, newer than this release knows (its newest is ${newest})`);
  const { code, last } = await releaseCommand(d.url);
  expect(code).toBe(1);
  expect(last).toContain('migration 999 (999_from_the_future.sql) applied, newer than this release knows');
});

test('a boot that does not migrate (QUEEN_MIGRATE_ON_BOOT=0) refuses pending migrations with a line naming them, and boots once the release command ran', async () => {
  const d = await database();
  const sweeper = (): Promise<{ code: number | null; out: string }> =>
    new Promise((resolve) => {
      const child = execFile(process.execPath, [path.join(DIST, 'services', 'sweeper', 'main.js')], {
        env: { ...process.env, DATABASE_URL: d.url, QUEEN_MIGRATE_ON_BOOT: '0', QUEEN_DB_BOOT_WAIT_MS: '0', QUEEN_SWEEPER_METRICS_PORT: '0' },
        timeout: 60_000,
      }, (err, stdout) => resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, out: stdout }));
      // Booted: it would run until told to stop.
      child.stdout?.on('data', (chunk: Buffer) => {
        if (/schema up to date/.test(chunk.toString())) child.kill('SIGTERM');
      });
    });
  const refused = await sweeper();
  expect(refused.code).toBe(1);
  expect(refused.out).toMatch(/migration\(s\) pending \(001_queen\.sql, .*\) and QUEEN_MIGRATE_ON_BOOT=0: run the release command/);
  expect((await releaseCommand(d.url)).code).toBe(0);
  const booted = await sweeper();
  expect(booted.out).toContain('schema up to date');
  expect(booted.code).toBe(0);
});

test('a database of the release before versioning is adopted: the baseline runs over it once, its rows stay, and it ends as a fresh one', async () => {
  const old = await previousRelease();
  await sql(old.url, `SELECT queen.log_push_v1($1::uuid, 'kept', NULL, '"payload"', 'tx-1')`, [TENANT]);
  await sql(old.url, `SELECT queen.kv_apply_v1($1::uuid, '[{"op":"put","ns":"n","key":"k","value":7,"forever":true}]')`, [TENANT]);
  const result = await migrate(old.url);
  expect(result.adopted).toBe(true);
  // The baseline over it, then every migration after the baseline as on any database.
  expect(result.applied).toEqual(migrations().map((m) => m.version));
  const fresh = await database();
  await migrate(fresh.url);
  expect(await dumpSchema(old.url)).toBe(await dumpSchema(fresh.url));
  const [kv] = await sql(old.url, `SELECT queen.kv_apply_v1($1::uuid, '[{"op":"get","ns":"n","key":"k"}]') -> 0 -> 'value' AS v`, [TENANT]);
  expect(kv.v).toBe(7);
  const [popped] = await sql(old.url, `SELECT queen.log_pop_v1($1::uuid, 'kept', NULL, '__QUEUE_MODE__', 10) -> 0 ->> 'transactionId' AS t`, [TENANT]);
  expect(popped.t).toBe('tx-1');
  expect(await migrate(old.url)).toEqual({ applied: [], defined: [], adopted: false });
});

/**
 * Four connections to `url`, each calling `round` (its connection, its index, the round's number,
 * the failures) in a loop while `during` runs and five rounds more at least; a call that throws is
 * a failure. Answers the failures.
 */
async function withTraffic(
  url: string,
  round: (c: Client, w: number, i: number, failures: string[]) => Promise<void>,
  during: (failures: string[]) => Promise<void>,
): Promise<string[]> {
  const clients = await Promise.all(Array.from({ length: 4 }, async () => {
    const c = new Client({ connectionString: url });
    await c.connect();
    return c;
  }));
  let stop = false;
  const failures: string[] = [];
  const traffic = clients.map(async (c, w) => {
    for (let i = 0; !stop || i < 5; i++) {
      try {
        await round(c, w, i, failures);
      } catch (err) {
        failures.push((err as Error).message);
      }
    }
  });
  try {
    await during(failures);
    stop = true;
    await Promise.all(traffic);
  } finally {
    stop = true;
    await Promise.all(clients.map((c) => c.end()));
  }
  return failures;
}

test('the upgrade from the release before versioning, beside its traffic: no call of that release fails', async () => {
  const old = await previousRelease();
  const kvOne = PREVIOUS.statements.kvOne;
  const push = PREVIOUS.statements.push;
  let calls = 0;
  const failures = await withTraffic(old.url, async (c, w, i) => {
    await c.query({ ...kvOne, values: [TENANT, 'put', 'up', `k${w}-${i % 20}`, `{"value":${i},"forever":true}`] });
    await c.query({ ...kvOne, values: [TENANT, 'get', 'up', `k${w}-${i % 20}`, '{}'] });
    await c.query({ ...push, values: [TENANT, JSON.stringify({ items: [{ queue: 'up', payload: i }] })] });
    calls += 3;
  }, async () => {
    // The new release's first boot, while the previous release's calls run on every connection.
    const result = await migrate(old.url);
    expect(result.adopted).toBe(true);
  });
  expect(failures).toEqual([]);
  expect(calls).toBeGreaterThan(0);
});

test('the upgrade from 0.1 beside both releases\' traffic: no call fails, 0.1\'s records stay, and the schema ends as a fresh one', async () => {
  const old = await release01();
  const s = RELEASE_0_1.statements;
  let upgraded = false;
  const calls = { old: 0, new: 0 };
  // Release 0.1's API on every connection, and once the new release has migrated, the new one's
  // statements beside it on the same database: a rolling upgrade's two halves.
  const failures = await withTraffic(old.url, async (c, w, i, failures) => {
    const key = `k${w}-${i % 20}`;
    await c.query({ ...s.kvOne, values: [TENANT, 'put', 'up', key, `{"value":${i},"forever":true}`] });
    await c.query({ ...s.kvOne, values: [TENANT, 'get', 'up', key, '{}'] });
    await c.query({ ...s.push, values: [TENANT, JSON.stringify({ items: [{ queue: 'up', payload: i, transactionId: `t${w}-${i}` }] })] });
    const popped = JSON.parse((await c.query({ ...s.pop, values: [TENANT, 'up', null, `g${w}`, 5, 1] })).rows[0].messages ?? '[]') as { transactionId: string; partitionId: string; leaseId: string }[];
    for (const m of popped) {
      const ack = JSON.parse((await c.query({ ...s.ackOne, values: [TENANT, JSON.stringify({ transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId, status: 'completed', consumerGroup: `g${w}` })] })).rows[0].body);
      if (ack.ok !== true) failures.push(`ack: ${JSON.stringify(ack)}`);
    }
    await c.query({ ...s.timers, values: [TENANT, JSON.stringify([{ op: 'schedule', queue: 'later', payload: i, delaySeconds: 3600 }])] });
    calls.old += 6;
    if (upgraded) {
      await c.query({ ...KV_APPLY_ONE, values: [TENANT, 'put', 'up', key, `{"value":${i},"forever":true}`] });
      await c.query({ ...LOG_PUSH, values: [TENANT, JSON.stringify({ items: [{ queue: 'up', payload: i }] })] });
      calls.new += 2;
    }
  }, async (failures) => {
    const result = await migrate(old.url);
    // Every migration after 0.1's (047 and the ones since), in order.
    const since = migrations().map((m) => m.version).filter((v) => v >= 47);
    expect(result).toEqual({ applied: since, defined: definitions().map((f) => f.name), adopted: false });
    upgraded = true;
    const until = calls.new + 40;
    while (calls.new < until && failures.length === 0) await new Promise((r) => setImmediate(r));
  });
  expect(failures).toEqual([]);
  expect(calls.old).toBeGreaterThan(0);
  expect(calls.new).toBeGreaterThan(0);
  // 0.1's records are left as they were (a 0.1 process still finds the checksums it knows).
  const records = await sql(old.url, 'SELECT version, name, checksum FROM queen.schema_migrations WHERE version < 47 ORDER BY version');
  expect(records).toEqual(RELEASE_0_1.files.map((f) => ({ version: f.version, name: f.name, checksum: f.checksum })));
  const fresh = await database();
  await migrate(fresh.url);
  expect(await dumpSchema(old.url)).toBe(await dumpSchema(fresh.url));
  expect(await migrate(old.url)).toEqual({ applied: [], defined: [], adopted: false });
});

test('a database a build between 0.1 and 059 migrated: the sweeper names no release calls go, and the schema ends as a fresh one', async () => {
  const d = await database(false);
  // What such a build left: the three functions with their signatures (a DROP does not read the
  // body; these are the last bodies the two wrappers had), and no record of 059 or later.
  await sql(d.url, `CREATE FUNCTION queen.timers_fire_v2(p_limit INT) RETURNS JSONB
    LANGUAGE sql AS $$ SELECT queen.timers_fire_v3(p_limit, 0) $$`);
  for (const v of [2, 3]) {
    await sql(d.url, `CREATE FUNCTION queen.sweeper_pass_v${v}(
      p_since TIMESTAMPTZ, p_worker TEXT, p_shard_count INT, p_fire_limit INT, p_prune_limit INT, p_prune BOOLEAN,
      p_retention_default INT) RETURNS JSONB
      LANGUAGE sql AS $$ SELECT queen.sweeper_pass_v4(p_since, p_worker, p_shard_count, p_fire_limit, p_prune_limit, p_prune, p_retention_default, 0) $$`);
  }
  await sql(d.url, 'DELETE FROM queen.schema_migrations WHERE version >= 59');
  const result = await migrate(d.url);
  expect(result.applied).toEqual(migrations().map((m) => m.version).filter((v) => v >= 59));
  const [left] = await sql(d.url, `SELECT to_regprocedure('queen.timers_fire_v2(int)') AS fire_v2,
    to_regprocedure('queen.sweeper_pass_v2(timestamptz, text, int, int, int, boolean, int)') AS pass_v2,
    to_regprocedure('queen.sweeper_pass_v3(timestamptz, text, int, int, int, boolean, int)') AS pass_v3`);
  expect(left).toEqual({ fire_v2: null, pass_v2: null, pass_v3: null });
  const fresh = await database();
  await migrate(fresh.url);
  expect(await dumpSchema(d.url)).toBe(await dumpSchema(fresh.url));
});

test('a database a build between 059 and 060 migrated: the helpers no release calls go, and the schema ends as a fresh one', async () => {
  const d = await database(false);
  // What such a build left: the two helpers with their signatures (a DROP does not read the body),
  // and no record of 060 or later.
  await sql(d.url, `CREATE FUNCTION queen.log_ack_step_v1(p_tenant UUID, a JSONB, p_index INT, p_raise BOOLEAN, p_pc queen.partition_consumers,
    OUT o_answer JSONB, OUT o_pc queen.partition_consumers, OUT o_applied BOOLEAN)
    LANGUAGE sql AS $$ SELECT NULL::jsonb, p_pc, false $$`);
  await sql(d.url, `CREATE FUNCTION queen.operator_check_name_v1(p_name TEXT, p_code TEXT, p_what TEXT) RETURNS VOID
    LANGUAGE sql AS $$ SELECT queen.check_name_v1(p_name, p_code, p_what) $$`);
  await sql(d.url, 'DELETE FROM queen.schema_migrations WHERE version >= 60');
  const result = await migrate(d.url);
  expect(result.applied).toEqual(migrations().map((m) => m.version).filter((v) => v >= 60));
  const [left] = await sql(d.url, `SELECT to_regprocedure('queen.log_ack_step_v1(uuid, jsonb, int, boolean, queen.partition_consumers)') AS step,
    to_regprocedure('queen.operator_check_name_v1(text, text, text)') AS check_name`);
  expect(left).toEqual({ step: null, check_name: null });
  const fresh = await database();
  await migrate(fresh.url);
  expect(await dumpSchema(d.url)).toBe(await dumpSchema(fresh.url));
});
