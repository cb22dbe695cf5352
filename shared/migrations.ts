// Versioned, forward-only migrations. Every sql/NNN_name.sql is a migration whose version is NNN; it
// runs once per database, in version order, and queen.schema_migrations records it (version, name,
// checksum, applied_at). Whichever process gets here first applies what is pending, under an
// advisory lock every other process waits on; the others then find nothing to do.
//
// The baseline: the files up to BASELINE_VERSION are the schema as it stood when versioning began.
// Before that every boot applied all of them, so each is idempotent and upgrades any earlier
// schema; a database that has queen tables but no schema_migrations (a cell of a release before
// versioning) is adopted: the baseline runs over it once, idempotently (bringing it to the
// baseline's function bodies, which its own release's files do not have), and is recorded. Files
// after the baseline run once and need not be idempotent.
//
// A boot is refused, with a line naming the file or the version, when an applied file's checksum
// changed (an applied migration is never edited: a change is a new file), when an applied version
// has no file here, or when the database has a version newer than this release knows (a downgrade,
// or an older release restarting after a newer one migrated).
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Client, ClientBase, Pool } from 'pg';

export const SQL_DIR = path.resolve(__dirname, '..', '..', 'sql');
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

/** Why a boot refuses: a fact about the database and the code that no retry changes. */
export class MigrationRefused extends Error {}

/** The checksum of a file's text, line endings folded so that a checkout on Windows agrees. */
export function checksumOf(sql: string): string {
  return crypto.createHash('sha256').update(sql.replace(/\r\n/g, '\n')).digest('hex');
}

export function migrations(dir = SQL_DIR): Migration[] {
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

/** What this database has applied; undefined when it has no record at all (fresh, or from before versioning). */
export async function appliedOf(c: ClientBase): Promise<Applied[] | undefined> {
  const { rows } = await c.query(`SELECT to_regclass('queen.schema_migrations') IS NOT NULL AS versioned`);
  if (!rows[0].versioned) return undefined;
  const applied = await c.query('SELECT version, name, checksum FROM queen.schema_migrations ORDER BY version');
  return applied.rows as Applied[];
}

/** The refusals (see the header), checked before anything runs; answers the migrations still to apply. */
export function pendingOf(known: Migration[], applied: Applied[]): Migration[] {
  const byVersion = new Map(known.map((m) => [m.version, m]));
  const newest = known.length ? known[known.length - 1].version : 0;
  for (const a of applied) {
    if (a.version > newest) {
      throw new MigrationRefused(
        `the database has migration ${a.version} (${a.name}) applied, newer than this release knows (its newest is ${newest}): ` +
          'a release older than the database refuses to boot; deploy the release that applied it, or a newer one',
      );
    }
    const m = byVersion.get(a.version);
    if (!m) {
      throw new MigrationRefused(`the database has migration ${a.version} (${a.name}) applied, but sql/ has no file of that version`);
    }
    if (m.checksum !== a.checksum) {
      throw new MigrationRefused(
        `sql/${m.name} changed after it was applied (checksum ${a.checksum.slice(0, 12)} applied, ${m.checksum.slice(0, 12)} now): ` +
          'an applied migration is never edited; put the change in a new numbered file',
      );
    }
  }
  const done = new Set(applied.map((a) => a.version));
  return known.filter((m) => !done.has(m.version));
}

export interface MigrateResult {
  /** The versions this call applied, in order (none when the database was up to date). */
  applied: number[];
  /** True when the database had queen tables but no record: a cell from before versioning, adopted. */
  adopted: boolean;
}

export interface MigrateOptions {
  /** Runs the baseline's files again (idempotent) though recorded: see docs/deploy.md. */
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

async function run(c: ClientBase, m: Migration): Promise<void> {
  try {
    await c.query(m.sql);
  } catch (err) {
    throw new Error(`schema file ${m.name} failed: ${(err as Error).message}`);
  }
}

/**
 * Applies what is pending, under the advisory lock (a session lock: a migration marked
 * `-- queen:no-transaction` runs outside a transaction). The baseline's pending files run in one
 * transaction with the creation of queen.schema_migrations; each later file in its own, with its
 * record. Announces a change with NOTIFY queen_schema.
 */
export async function migrate(connectionString: string | undefined, options: MigrateOptions = {}): Promise<MigrateResult> {
  const known = migrations();
  // A connect timeout, so that a boot waiting for its database (shared/boot.ts) retries one that
  // does not answer at all as it retries one that refuses.
  const pool = new Pool({ connectionString, max: 1, application_name: 'queen-schema', connectionTimeoutMillis: 5000 });
  pool.on('error', () => undefined);
  const c = await pool.connect().catch(async (err: unknown) => {
    await pool.end();
    throw err;
  });
  const result: MigrateResult = { applied: [], adopted: false };
  try {
    // Nothing pending (every boot but a release's first): done, without the lock. The refusals hold
    // all the same (pendingOf). And a session lock taken through a transaction pooler (PgBouncer) by
    // a misconfigured boot would stay on the server connection after this client left, and hang
    // every later boot: migrations belong on the direct connection (DATABASE_LISTEN_URL).
    const before = await appliedOf(c);
    if (before !== undefined && !options.reapplyBaseline && pendingOf(known, before).length === 0) return result;
    await c.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    const applied = await appliedOf(c);
    result.adopted = applied === undefined && (await hasQueenTables(c));
    const pending = pendingOf(known, applied ?? []);
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
          await run(c, m);
          await record(c, m);
        }
      });
      result.applied.push(...baseline.map((m) => m.version));
    }
    for (const m of later) {
      if (m.sql.startsWith(NO_TRANSACTION)) {
        await run(c, m);
        await record(c, m);
      } else {
        await inTransaction(c, async () => {
          await run(c, m);
          await record(c, m);
        });
      }
      result.applied.push(m.version);
    }
    if (result.applied.length > 0) await c.query("NOTIFY queen_schema, 'applied'");
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

/** What a boot that does not apply migrations sees: the pending ones (after the same refusals), without the lock. */
export async function pendingMigrations(connectionString: string | undefined): Promise<Migration[]> {
  const c = new Client({ connectionString, application_name: 'queen-schema', connectionTimeoutMillis: 5000 });
  c.on('error', () => undefined);
  await c.connect();
  try {
    return pendingOf(migrations(), (await appliedOf(c)) ?? []);
  } finally {
    await c.end();
  }
}
