// Versioned, forward-only migrations (shared/migrations.ts): each sql/ file once, in order, under
// the advisory lock; a changed applied file or a database newer than the release refuses the boot
// with a line naming it; a database of the release before versioning is adopted; and the upgrade
// from that release runs beside its traffic without failing any of it.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { Client } from 'pg';
import { migrate, migrations } from '../../shared/migrations';
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
/** A database as the release before versioning left it: its files applied the way its boot did. */
async function previousRelease(): Promise<Db> {
  const d = await database();
  const c = new Client({ connectionString: d.url });
  await c.connect();
  try {
    await c.query('BEGIN');
    for (const f of PREVIOUS.files) await c.query(f);
    await c.query('COMMIT');
  } finally {
    await c.end();
  }
  return d;
}
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
  expect(first).toEqual({ applied: migrations().map((m) => m.version), adopted: false });
  const recorded = await sql(d.url, 'SELECT version, name, checksum, applied_at FROM queen.schema_migrations ORDER BY version');
  expect(recorded.map((r) => [r.version, r.name, r.checksum])).toEqual(migrations().map((m) => [m.version, m.name, m.checksum]));
  const second = await migrate(d.url);
  expect(second).toEqual({ applied: [], adopted: false });
  expect(await sql(d.url, 'SELECT version, name, checksum, applied_at FROM queen.schema_migrations ORDER BY version')).toEqual(recorded);
});

test('a file changed after it was applied refuses the boot, naming the file; nothing runs', async () => {
  const d = await database(false);
  const [victim] = migrations().filter((m) => m.name.includes('kv_checks'));
  await sql(d.url, `UPDATE queen.schema_migrations SET checksum = 'edited' WHERE version = $1`, [victim.version]);
  await expect(migrate(d.url)).rejects.toThrow(new RegExp(`sql/${victim.name} changed after it was applied`));
  const { code, last } = await releaseCommand(d.url);
  expect(code).toBe(1);
  expect(last).toContain(`sql/${victim.name} changed after it was applied`);
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
  expect(await migrate(old.url)).toEqual({ applied: [], adopted: false });
});

test('the upgrade from the release before versioning, beside its traffic: no call of that release fails', async () => {
  const old = await previousRelease();
  const kvOne = PREVIOUS.statements.kvOne;
  const push = PREVIOUS.statements.push;
  const clients = await Promise.all(Array.from({ length: 4 }, async () => {
    const c = new Client({ connectionString: old.url });
    await c.connect();
    return c;
  }));
  let stop = false;
  const failures: string[] = [];
  let calls = 0;
  const traffic = clients.map(async (c, w) => {
    for (let i = 0; !stop || i < 5; i++) {
      try {
        await c.query({ ...kvOne, values: [TENANT, 'put', 'up', `k${w}-${i % 20}`, `{"value":${i},"forever":true}`] });
        await c.query({ ...kvOne, values: [TENANT, 'get', 'up', `k${w}-${i % 20}`, '{}'] });
        await c.query({ ...push, values: [TENANT, JSON.stringify({ items: [{ queue: 'up', payload: i }] })] });
        calls += 3;
      } catch (err) {
        failures.push((err as Error).message);
      }
    }
  });
  try {
    // The new release's first boot, while the previous release's calls run on every connection.
    const result = await migrate(old.url);
    expect(result.adopted).toBe(true);
    stop = true;
    await Promise.all(traffic);
  } finally {
    stop = true;
    await Promise.all(clients.map((c) => c.end()));
  }
  expect(failures).toEqual([]);
  expect(calls).toBeGreaterThan(0);
});
