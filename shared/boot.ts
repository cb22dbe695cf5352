// What every process does before it serves: parse the config (a bad variable ends the boot with a
// line naming it), find the database (embedded when DATABASE_URL is unset), apply the schema.
import { Client, Pool } from 'pg';
import { Config, ConfigError, loadConfig } from './config';
import { applySchema } from './db';
import { isConnectionFailure, SQLSTATE } from './errors';
import { EmbeddedPostgres, startEmbeddedPostgres } from './embeddedPostgres';
import { createLogger, Logger } from './log';

export function loadConfigOrExit(processName: string): Config {
  try {
    return loadConfig(process.env);
  } catch (err) {
    const log = createLogger(processName, 'info');
    if (err instanceof ConfigError) {
      log.fatal({ variable: err.variable }, `config: ${err.message} The process will not start.`);
    } else {
      log.fatal({ err }, 'config: could not be read');
    }
    process.exit(1);
  }
}

/** Starts the embedded PostgreSQL when no DATABASE_URL is given, and fills it in. */
export async function ensureDatabase(config: Config, log: Logger): Promise<EmbeddedPostgres | undefined> {
  if (config.databaseUrl) return undefined;
  log.info({ dataDir: config.dataDir, port: config.embeddedPgPort }, 'no DATABASE_URL: starting the embedded PostgreSQL');
  const pg = await startEmbeddedPostgres({ dataDir: config.dataDir, port: config.embeddedPgPort, log });
  config.databaseUrl = pg.url;
  process.env.DATABASE_URL = pg.url;
  log.info({ dataDir: pg.dataDir, url: pg.url }, 'embedded PostgreSQL is up');
  return pg;
}

/** Refuses a configuration whose pools cannot all be open at once on this server. */
export async function checkConnectionBudget(config: Config, needed: number, log: Logger): Promise<void> {
  const pool = new Pool({ connectionString: config.databaseUrl, max: 1 });
  try {
    const { rows } = await pool.query(
      `SELECT current_setting('max_connections')::int AS max, current_setting('superuser_reserved_connections')::int AS reserved`,
    );
    const available = rows[0].max - rows[0].reserved;
    if (needed > available) {
      throw new ConfigError(
        'DB_POOL_SIZE',
        `the pools need ${needed} connections but the server allows ${available} (max_connections ${rows[0].max} less ${rows[0].reserved} reserved); ` +
          'lower DB_POOL_SIZE, QUEEN_KV_POOL_SIZE or QUEEN_WORKERS, or raise max_connections.',
      );
    }
    log.debug({ needed, available }, 'connection budget fits');
  } finally {
    await pool.end();
  }
}

export async function applySchemaLogged(config: Config, log: Logger): Promise<void> {
  await waitForDatabase(config, log);
  const started = Date.now();
  await applySchema(config.databaseUrl);
  log.info({ ms: Date.now() - started }, 'schema applied');
}

/** host:port/database of a connection string, never its user or password: for log lines. */
export function databaseTarget(url: string | undefined): string {
  try {
    const u = new URL(url ?? '');
    return `${u.hostname}:${u.port || '5432'}${u.pathname}`;
  } catch {
    return 'DATABASE_URL';
  }
}

/** A database that is not up yet, as opposed to one that refuses us for good (auth, unknown database). */
function notUpYet(err: unknown): boolean {
  const code = (err as { code?: string } | null)?.code;
  return (
    isConnectionFailure(err) ||
    code === SQLSTATE.CANNOT_CONNECT_NOW || // starting up, in recovery, shutting down
    code === SQLSTATE.TOO_MANY_CONNECTIONS ||
    /timeout expired|connection timeout/i.test((err as Error)?.message ?? '')
  );
}

const BOOT_RETRY_MS = 1000;

/**
 * Before the first statement of a boot: waits up to QUEEN_DB_BOOT_WAIT_MS for a database that is
 * not up yet (refused, starting up), with a line per attempt that says so, instead of exiting on the
 * first refused connection. A cell and its database started together (compose, one kubectl apply,
 * a PostgreSQL in crash recovery) no longer dies with "boot failed: connect ECONNREFUSED" and a
 * restart backoff. A refusal that waiting cannot fix (password, unknown database) ends the boot at once.
 */
export async function waitForDatabase(config: Config, log: Logger): Promise<void> {
  const target = databaseTarget(config.databaseUrl);
  const started = Date.now();
  for (let attempt = 1; ; attempt++) {
    const client = new Client({ connectionString: config.databaseUrl, connectionTimeoutMillis: 5000, application_name: 'queen-boot' });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.query('SELECT 1');
      if (attempt > 1) log.info({ database: target, attempts: attempt, waitedMs: Date.now() - started }, 'database reachable; booting');
      return;
    } catch (err) {
      if (!notUpYet(err)) throw err;
      const waited = Date.now() - started;
      const reason = (err as Error).message || String((err as { code?: string }).code);
      if (waited + BOOT_RETRY_MS > config.dbBootWaitMs) {
        throw new Error(
          `the database at ${target} could not be reached` +
            (config.dbBootWaitMs > 0 ? ` within QUEEN_DB_BOOT_WAIT_MS (${config.dbBootWaitMs} ms)` : '') +
            ` (${reason}); is PostgreSQL running, and is DATABASE_URL right?`,
        );
      }
      log.warn(
        { database: target, attempt, err: { message: reason, code: (err as { code?: string }).code }, retryInMs: BOOT_RETRY_MS, givesUpInMs: config.dbBootWaitMs - waited },
        'database not reachable yet; waiting for it before booting',
      );
      await new Promise((r) => setTimeout(r, BOOT_RETRY_MS));
    } finally {
      await client.end().catch(() => undefined);
    }
  }
}
