// What every process does before it serves: parse the config (a bad variable ends the boot with a
// line naming it), find the database (embedded when DATABASE_URL is unset), apply the schema.
import { Pool } from 'pg';
import { Config, ConfigError, loadConfig } from './config';
import { applySchema } from './db';
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
  const started = Date.now();
  await applySchema(config.databaseUrl);
  log.info({ ms: Date.now() - started }, 'schema applied');
}
