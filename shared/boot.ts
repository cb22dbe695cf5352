// What every process does before it serves: parse the config (a bad variable ends the boot with a
// line naming it), find the database (embedded when DATABASE_URL is unset), apply the schema.
import { Pool } from 'pg';
import { Config, ConfigError, directUrl, loadConfig } from './config';
import { applySchema } from './db';
import { MigrateOptions, MigrationRefused, pendingMigrations } from './migrations';
import { isConnectionFailure, isConnectTimeout, SQLSTATE } from './errors';
import { EmbeddedPostgres, freePort, startEmbeddedPostgres } from './embeddedPostgres';
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

/** Attempts at starting the embedded PostgreSQL again after it died, before the process gives up (about 30 s of pauses). */
const EMBEDDED_RESTART_ATTEMPTS = 16;
/**
 * The pause before each further attempt, doubling up to 2 s: the first goes at once (the start
 * ends the dead server's orphaned processes first, embeddedPostgres.ts), so a pause only waits out
 * what that could not end. It was 0.5 s before the first and doubled to 10 s, and an attempt that
 * failed for a moment cost the whole next pause: 7.8-8.2 s to serve again where 1.1 s sufficed.
 */
export const reviveDelayMs = (attempt: number): number => (attempt <= 1 ? 0 : Math.min(2000, 250 * 2 ** (attempt - 2)));

export interface LookedAfterPostgres extends EmbeddedPostgres {
  /**
   * The cell is stopping: from now on the server's exit is the stop, not a death to repair (a
   * terminal's ^C used to reach it before the drain, and the log said it "exited unexpectedly").
   */
  stopping(): void;
}

/**
 * Starts the embedded PostgreSQL when no DATABASE_URL is given, and fills it in. The server is
 * looked after: one that dies under the cell (killed, crashed, OOM-killed) was never noticed, so the
 * all-in-one start answered 503 db_unavailable forever with no line saying why. Now its death is
 * logged with its last output and it is started again on the same port and data folder (the pools
 * and listeners reconnect on their own); `onGiveUp` runs when it cannot be brought back.
 */
export async function ensureDatabase(
  config: Config,
  log: Logger,
  onGiveUp: (err: Error) => void = () => undefined,
): Promise<LookedAfterPostgres | undefined> {
  if (config.databaseUrl) return undefined;
  // 0 (PORT=0, or PORT+7 past 65535): a free port, chosen once; a restart after a death reuses it.
  const port = config.embeddedPgPort || (await freePort());
  log.info({ dataDir: config.dataDir, port }, 'no DATABASE_URL: starting the embedded PostgreSQL');
  let stopping = false;
  let current: EmbeddedPostgres;
  const start = (): Promise<EmbeddedPostgres> =>
    startEmbeddedPostgres({ dataDir: config.dataDir, port, log, ownProcessGroup: true, onUnexpectedExit: (exit) => void revive(exit) });
  const revive = async (exit: { code: number | null; signal: NodeJS.Signals | null; output: string }) => {
    if (stopping) {
      log.info({ code: exit.code, signal: exit.signal }, 'embedded PostgreSQL stopped while the cell stops');
      return;
    }
    log.error(
      { code: exit.code, signal: exit.signal, output: exit.output.slice(-2000) },
      'embedded PostgreSQL exited unexpectedly; starting it again (calls answer 503 db_unavailable meanwhile)',
    );
    for (let attempt = 1; !stopping; attempt++) {
      const pause = reviveDelayMs(attempt);
      if (pause > 0) await new Promise((r) => setTimeout(r, pause));
      if (stopping) return;
      try {
        const next = await start();
        if (stopping) return void (await next.stop());
        current = next;
        log.info({ attempt }, 'embedded PostgreSQL is up again');
        return;
      } catch (err) {
        log.error({ attempt, err: { message: (err as Error).message } }, 'embedded PostgreSQL could not be started again');
        if (attempt >= EMBEDDED_RESTART_ATTEMPTS) {
          return onGiveUp(new Error(`the embedded PostgreSQL died and could not be started again: ${(err as Error).message}`));
        }
      }
    }
  };
  current = await start();
  config.databaseUrl = current.url;
  process.env.DATABASE_URL = current.url;
  log.info({ dataDir: current.dataDir, url: current.url }, 'embedded PostgreSQL is up');
  return {
    url: current.url,
    port: current.port,
    get dataDir() {
      return current.dataDir;
    },
    stopping() {
      stopping = true;
    },
    stop() {
      stopping = true;
      return current.stop();
    },
  };
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

/**
 * The schema at boot (docs/deploy.md): the pending migrations applied here (QUEEN_MIGRATE_ON_BOOT=1,
 * the default, and always for the release command), or, with 0, awaited from the release command
 * for up to QUEEN_DB_BOOT_WAIT_MS, then refused. A refusal (an applied file changed, a database
 * newer than this release) ends the boot at once with the line that names it.
 */
export async function applySchemaLogged(config: Config, log: Logger, apply = config.migrateOnBoot, options?: MigrateOptions): Promise<void> {
  const started = Date.now();
  if (apply) {
    let applied: number[] = [];
    let defined: string[] = [];
    let adopted = false;
    await whenReachable(config, log, async () => void ({ applied, defined, adopted } = await applySchema(directUrl(config), options)));
    if (adopted) log.info({ versions: applied }, 'schema: a database from before versioned migrations, adopted (its baseline re-applied once and recorded)');
    // One message whatever ran (log queries key on it); `applied` lists the versions and `defined` the
    // function files, none when up to date.
    log.info({ ms: Date.now() - started, applied, defined }, 'schema applied');
    return;
  }
  for (;;) {
    let pending: string[] = [];
    await whenReachable(config, log, async () => void (pending = await pendingMigrations(directUrl(config))));
    if (pending.length === 0) {
      log.info({ ms: Date.now() - started }, 'schema up to date');
      return;
    }
    const waited = Date.now() - started;
    if (waited + BOOT_RETRY_MS > config.dbBootWaitMs) {
      throw new MigrationRefused(
        `${pending.length} migration(s) pending (${pending.join(', ')}) and QUEEN_MIGRATE_ON_BOOT=0: ` +
          `run the release command (npm run migrate) first; waited ${waited} ms (QUEEN_DB_BOOT_WAIT_MS)`,
      );
    }
    log.warn({ pending, givesUpInMs: config.dbBootWaitMs - waited }, 'schema: migrations pending; waiting for the release command (npm run migrate) to apply them');
    await new Promise((r) => setTimeout(r, BOOT_RETRY_MS));
  }
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
    isConnectTimeout(err)
  );
}

const BOOT_RETRY_MS = 1000;

/**
 * The first statement of a boot (the schema apply, which is one transaction and safe to run again),
 * retried for up to QUEEN_DB_BOOT_WAIT_MS while the database is not up yet (refused, starting up),
 * with a line per attempt that says so, instead of exiting on the first refused connection. A cell
 * and its database started together (compose, one kubectl apply, a PostgreSQL in crash recovery) no
 * longer dies with "boot failed: connect ECONNREFUSED" and a restart backoff. A refusal that
 * waiting cannot fix (password, unknown database, a failing statement) ends the boot at once.
 */
async function whenReachable(config: Config, log: Logger, first: () => Promise<void>): Promise<void> {
  const target = databaseTarget(config.databaseUrl);
  const started = Date.now();
  for (let attempt = 1; ; attempt++) {
    try {
      await first();
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
    }
  }
}
