// The schema in two parts, by what can be corrected.
//
// Migrations (sql/migrations/NNN_name.sql): what the schema is made of, tables, indexes, sequences
// and their data moves, forward-only. Each runs once per database, in version order, and
// queen.schema_migrations records it (version, name, checksum, applied_at). A boot is refused, with
// a line naming the file or the version, when an applied file's statements changed (an applied
// migration is never edited: a change is a new file), when an applied version has no file here, or
// when the database has a version newer than this release knows (a downgrade, or an older release
// restarting after a newer one migrated). The checksum is of the statements alone: comments and
// the layout of whitespace outside quoted text are left out, so a comment can always be corrected.
//
// Definitions (sql/functions/<family>.sql): the functions, one file per family, each statement a
// CREATE OR REPLACE. They are applied after the migrations, all changed files in one transaction,
// whenever a file's checksum differs from the one queen.schema_definitions recorded for it (the way
// Flyway's repeatable migrations work). A changed rule is still a new `_vN` name beside the old one,
// which the release before runs during a rolling upgrade; a migration drops the old name one
// release later. A migration never calls a definition: on a fresh database none exists yet.
//
// The baseline: the migrations up to BASELINE_VERSION are the schema as it stood when versioning
// began. Before that every boot applied all of them, so each is idempotent and upgrades any earlier
// schema; a database that has queen tables but no schema_migrations (a cell of a release before
// versioning) is adopted: the baseline runs over it once, idempotently, and is recorded. Migrations
// after the baseline run once and need not be idempotent.
//
// Release 0.1 kept the functions inside its numbered files. Those files' checksums as 0.1 recorded
// them are in sql/migrations/released-0.1.0.sha256: a database that applied them has the schema
// their successors here describe (the split moved only function definitions, which sql/functions/
// applies again), so either checksum is accepted for those versions, and the records are left as
// they are, so that a 0.1 process still boots beside this release during its rollout. The versions
// whose whole text was functions have no file any more; they are accepted by that list alone.
//
// Whichever process gets here first applies what is pending, under an advisory lock every other
// process waits on; the others then find nothing to do.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Client, ClientBase, Pool } from 'pg';

export const SQL_DIR = path.resolve(__dirname, '..', '..', 'sql');
export const MIGRATIONS_DIR = path.join(SQL_DIR, 'migrations');
export const FUNCTIONS_DIR = path.join(SQL_DIR, 'functions');
/** The migration files' checksums as release 0.1 recorded them (see the header). */
const RELEASED_CHECKSUMS = 'released-0.1.0.sha256';
/** The last file of the baseline (see the header). Never changes once released. */
export const BASELINE_VERSION = 32;
/** A fixed key: every process that boots takes the same advisory lock around the migrations. */
const MIGRATION_LOCK_KEY = 0x51_4b_56; // "QKV"
/** A migration whose first line is this runs outside a transaction (CREATE INDEX CONCURRENTLY). */
const NO_TRANSACTION = '-- queen:no-transaction';

export interface Migration {
  version: number;
  name: string;
  file: string;
  sql: string;
  checksum: string;
}

export interface Applied {
  version: number;
  name: string;
  checksum: string;
}

/** One file of sql/functions/: its name without the extension is its key in queen.schema_definitions. */
export interface Definition {
  name: string;
  file: string;
  sql: string;
  checksum: string;
}

/** Why a boot refuses: a fact about the database and the code that no retry changes. */
export class MigrationRefused extends Error {}

/**
 * The statements of a file with its comments removed and each run of whitespace folded to one
 * space, outside quoted text ('...', "...", $tag$...$tag$), which is kept as it is: a comment inside
 * a function's body is part of what PostgreSQL stores, so it stays.
 */
export function statementsOf(sql: string): string {
  let out = '';
  let space = false;
  for (let i = 0; i < sql.length; ) {
    const c = sql[i];
    const next = sql[i + 1];
    let end = -1;
    if (c === '-' && next === '-') {
      const nl = sql.indexOf('\n', i);
      i = nl < 0 ? sql.length : nl + 1;
      space = true;
      continue;
    }
    if (c === '/' && next === '*') {
      const close = sql.indexOf('*/', i + 2);
      i = close < 0 ? sql.length : close + 2;
      space = true;
      continue;
    }
    if (/\s/.test(c)) {
      i++;
      space = true;
      continue;
    }
    if (c === "'" || c === '"') {
      end = i + 1;
      for (;;) {
        const q = sql.indexOf(c, end);
        if (q < 0) { end = sql.length; break; }
        if (sql[q + 1] === c) { end = q + 2; continue; }
        end = q + 1;
        break;
      }
    } else if (c === '$') {
      const tag = /^\$[A-Za-z_]\w*\$|^\$\$/.exec(sql.slice(i, i + 64));
      if (tag) {
        const close = sql.indexOf(tag[0], i + tag[0].length);
        end = close < 0 ? sql.length : close + tag[0].length;
      }
    }
    if (end < 0) end = i + 1;
    if (space && out.length > 0) out += ' ';
    space = false;
    out += sql.slice(i, end).replace(/\r\n/g, '\n');
    i = end;
  }
  return out;
}

/** The checksum of a file's statements (statementsOf): a comment's edit leaves it as it was. */
export function checksumOf(sql: string): string {
  return crypto.createHash('sha256').update(statementsOf(sql)).digest('hex');
}

export function migrations(dir = MIGRATIONS_DIR): Migration[] {
  const found = fs
    .readdirSync(dir)
    .map((f) => /^(\d+)_(.+)\.sql$/.exec(f))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => {
      const file = path.join(dir, m[0]);
      const sql = fs.readFileSync(file, 'utf8');
      return { version: Number(m[1]), name: m[0], file, sql, checksum: checksumOf(sql) };
    })
    .sort((a, b) => a.version - b.version);
  for (let i = 1; i < found.length; i++) {
    if (found[i].version === found[i - 1].version) {
      throw new MigrationRefused(`two migrations share version ${found[i].version}: ${found[i - 1].name} and ${found[i].name}`);
    }
  }
  return found;
}

/** The files of sql/functions/, in name order. */
export function definitions(dir = FUNCTIONS_DIR): Definition[] {
  return fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.sql'))
    .sort()
    .map((f) => {
      const file = path.join(dir, f);
      const sql = fs.readFileSync(file, 'utf8');
      return { name: f.replace(/\.sql$/, ''), file, sql, checksum: checksumOf(sql) };
    });
}

/** The checksums release 0.1 recorded, by version (see the header). */
export function releasedChecksums(dir = MIGRATIONS_DIR): Map<number, Applied> {
  const released = new Map<number, Applied>();
  for (const line of fs.readFileSync(path.join(dir, RELEASED_CHECKSUMS), 'utf8').split('\n')) {
    const m = /^([0-9a-f]{64}) {2}((\d+)_.+\.sql)$/.exec(line.trim());
    if (m) released.set(Number(m[3]), { version: Number(m[3]), name: m[2], checksum: m[1] });
  }
  return released;
}

/** What this database has applied; undefined when it has no record at all (fresh, or from before versioning). */
export async function appliedOf(c: ClientBase): Promise<Applied[] | undefined> {
  const { rows } = await c.query(`SELECT to_regclass('queen.schema_migrations') IS NOT NULL AS versioned`);
  if (!rows[0].versioned) return undefined;
  const applied = await c.query('SELECT version, name, checksum FROM queen.schema_migrations ORDER BY version');
  return applied.rows as Applied[];
}

/** The definitions this database has applied, by name, with their checksums (none before this release). */
export async function definedOf(c: ClientBase): Promise<Map<string, string>> {
  const { rows } = await c.query(`SELECT to_regclass('queen.schema_definitions') IS NOT NULL AS present`);
  if (!rows[0].present) return new Map();
  const defined = await c.query('SELECT name, checksum FROM queen.schema_definitions');
  return new Map(defined.rows.map((r: { name: string; checksum: string }) => [r.name, r.checksum]));
}

/** The definitions whose file differs from what the database applied (all of them on a new database). */
export function changedDefinitions(known: Definition[], defined: Map<string, string>): Definition[] {
  return known.filter((d) => defined.get(d.name) !== d.checksum);
}

/** The refusals (see the header), checked before anything runs; answers the migrations still to apply. */
export function pendingOf(known: Migration[], applied: Applied[], released = releasedChecksums()): Migration[] {
  const byVersion = new Map(known.map((m) => [m.version, m]));
  const newest = Math.max(0, ...known.map((m) => m.version), ...released.keys());
  for (const a of applied) {
    if (a.version > newest) {
      throw new MigrationRefused(
        `the database has migration ${a.version} (${a.name}) applied, newer than this release knows (its newest is ${newest}): ` +
          'a release older than the database refuses to boot; deploy the release that applied it, or a newer one',
      );
    }
    const m = byVersion.get(a.version);
    const asReleased = released.get(a.version)?.checksum === a.checksum;
    if (!m && !asReleased) {
      throw new MigrationRefused(`the database has migration ${a.version} (${a.name}) applied, but sql/migrations/ has no file of that version`);
    }
    if (m && m.checksum !== a.checksum && !asReleased) {
      throw new MigrationRefused(
        `sql/migrations/${m.name} changed after it was applied (checksum ${a.checksum.slice(0, 12)} applied, ${m.checksum.slice(0, 12)} now): ` +
          'an applied migration\'s statements are never edited; put the change in a new numbered file',
      );
    }
  }
  const done = new Set(applied.map((a) => a.version));
  return known.filter((m) => !done.has(m.version));
}

export interface MigrateResult {
  /** The versions this call applied, in order (none when the database was up to date). */
  applied: number[];
  /** The files of sql/functions/ this call applied (changed since the last boot, or all on a new database). */
  defined: string[];
  /** True when the database had queen tables but no record: a cell from before versioning, adopted. */
  adopted: boolean;
}

export interface MigrateOptions {
  /** Runs the baseline's files and every definition again (idempotent) though recorded: see docs/deploy.md. */
  reapplyBaseline?: boolean;
}

async function hasQueenTables(c: ClientBase): Promise<boolean> {
  const { rows } = await c.query(`SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'queen'`);
  return rows[0].n > 0;
}

async function record(c: ClientBase, m: Migration): Promise<void> {
  await c.query(
    `INSERT INTO queen.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)
     ON CONFLICT (version) DO UPDATE SET name = EXCLUDED.name, checksum = EXCLUDED.checksum, applied_at = now()`,
    [m.version, m.name, m.checksum],
  );
}

async function run(c: ClientBase, label: string, sql: string): Promise<void> {
  try {
    await c.query(sql);
  } catch (err) {
    throw new Error(`schema file ${label} failed: ${(err as Error).message}`);
  }
}

/**
 * The changed definitions in one transaction: a process of this release that boots beside the
 * apply sees either every function as it was or every function as it is now. A file removed from
 * sql/functions/ loses its record; its functions stay until a migration drops them.
 */
async function define(c: ClientBase, changed: Definition[], known: Definition[]): Promise<void> {
  await inTransaction(c, async () => {
    await c.query(`CREATE TABLE IF NOT EXISTS queen.schema_definitions (
      name       TEXT PRIMARY KEY,
      checksum   TEXT NOT NULL,
      applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
    )`);
    // Twice: first with check_function_bodies off, so that a LANGUAGE sql body may name a function
    // of a file applied after its own (the order of files is alphabetical, not by dependency); then
    // with it on, so that every body is checked against the finished set before the commit.
    await c.query('SET LOCAL check_function_bodies = off');
    for (const d of changed) await run(c, `functions/${d.name}.sql`, d.sql);
    await c.query('SET LOCAL check_function_bodies = on');
    for (const d of changed) {
      await run(c, `functions/${d.name}.sql`, d.sql);
      await c.query(
        `INSERT INTO queen.schema_definitions (name, checksum) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()`,
        [d.name, d.checksum],
      );
    }
    await c.query('DELETE FROM queen.schema_definitions WHERE name <> ALL ($1::text[])', [known.map((d) => d.name)]);
  });
}

/**
 * Applies what is pending, under the advisory lock (a session lock: a migration marked
 * `-- queen:no-transaction` runs outside a transaction). The baseline's pending files run in one
 * transaction with the creation of queen.schema_migrations; each later file in its own, with its
 * record; then the changed definitions in one. Announces a change with NOTIFY queen_schema.
 */
export async function migrate(connectionString: string | undefined, options: MigrateOptions = {}): Promise<MigrateResult> {
  const known = migrations();
  const released = releasedChecksums();
  const functions = definitions();
  // A connect timeout, so that a boot waiting for its database (shared/boot.ts) retries one that
  // does not answer at all as it retries one that refuses.
  const pool = new Pool({ connectionString, max: 1, application_name: 'queen-schema', connectionTimeoutMillis: 5000 });
  pool.on('error', () => undefined);
  const c = await pool.connect().catch(async (err: unknown) => {
    await pool.end();
    throw err;
  });
  const result: MigrateResult = { applied: [], defined: [], adopted: false };
  try {
    // Nothing pending (every boot but a release's first): done, without the lock. The refusals hold
    // all the same (pendingOf). And a session lock taken through a transaction pooler (PgBouncer) by
    // a misconfigured boot would stay on the server connection after this client left, and hang
    // every later boot: migrations belong on the direct connection (DATABASE_LISTEN_URL).
    const before = await appliedOf(c);
    if (
      before !== undefined && !options.reapplyBaseline &&
      pendingOf(known, before, released).length === 0 && changedDefinitions(functions, await definedOf(c)).length === 0
    ) return result;
    await c.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    const applied = await appliedOf(c);
    result.adopted = applied === undefined && (await hasQueenTables(c));
    const pending = pendingOf(known, applied ?? [], released);
    const baseline = known.filter((m) => m.version <= BASELINE_VERSION && (options.reapplyBaseline || pending.includes(m)));
    const later = pending.filter((m) => m.version > BASELINE_VERSION);
    if (baseline.length > 0 || applied === undefined) {
      await inTransaction(c, async () => {
        await c.query('CREATE SCHEMA IF NOT EXISTS queen');
        await c.query(`CREATE TABLE IF NOT EXISTS queen.schema_migrations (
          version    INT PRIMARY KEY,
          name       TEXT NOT NULL,
          checksum   TEXT NOT NULL,
          applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )`);
        for (const m of baseline) {
          await run(c, m.name, m.sql);
          // A baseline file applied as 0.1 released it keeps that record (see the header).
          if (!options.reapplyBaseline || !applied?.some((a) => a.version === m.version)) await record(c, m);
        }
      });
      result.applied.push(...baseline.map((m) => m.version));
    }
    for (const m of later) {
      if (m.sql.startsWith(NO_TRANSACTION)) {
        await run(c, m.name, m.sql);
        await record(c, m);
      } else {
        await inTransaction(c, async () => {
          await run(c, m.name, m.sql);
          await record(c, m);
        });
      }
      result.applied.push(m.version);
    }
    const changed = options.reapplyBaseline ? functions : changedDefinitions(functions, await definedOf(c));
    if (changed.length > 0) {
      await define(c, changed, functions);
      result.defined = changed.map((d) => d.name);
    }
    if (result.applied.length > 0 || result.defined.length > 0) await c.query("NOTIFY queen_schema, 'applied'");
    return result;
  } finally {
    // Ending the connection ends the session lock with it, whatever happened above.
    c.release(true);
    await pool.end();
  }
}

async function inTransaction(c: ClientBase, body: () => Promise<void>): Promise<void> {
  await c.query('BEGIN');
  try {
    await body();
    await c.query('COMMIT');
  } catch (err) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

/**
 * What a boot that does not apply migrations sees, after the same refusals and without the lock:
 * the names of the pending migrations and of the changed definitions (as functions/<name>.sql).
 */
export async function pendingMigrations(connectionString: string | undefined): Promise<string[]> {
  const c = new Client({ connectionString, application_name: 'queen-schema', connectionTimeoutMillis: 5000 });
  c.on('error', () => undefined);
  await c.connect();
  try {
    const pending = pendingOf(migrations(), (await appliedOf(c)) ?? []).map((m) => m.name);
    return [...pending, ...changedDefinitions(definitions(), await definedOf(c)).map((d) => `functions/${d.name}.sql`)];
  } finally {
    await c.end();
  }
}
