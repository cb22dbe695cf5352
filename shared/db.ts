// Pools and the boot-time schema apply. Each process owns two pools: the message pool (the log, the
// transaction wire) and the dedicated KV pool, which is also the KV path's semaphore: an acquire
// that waits past QUEEN_KV_ACQUIRE_TIMEOUT_MS becomes 503 kv_unavailable instead of stealing
// connections from the message path.
import fs from 'node:fs';
import path from 'node:path';
import { Pool, PoolClient, PoolConfig } from 'pg';
import { Config, kvSessionSettings, queryTimeoutMs } from './config';
import { ApiError, isConnectionFailure, SQLSTATE } from './errors';

export interface Pools {
  message: Pool;
  kv: Pool;
  end(): Promise<void>;
}

/** Server-side settings sent in the startup packet: no extra round trip, and they hold on every statement. */
function startupOptions(settings: Record<string, string>): string {
  return Object.entries(settings)
    .map(([k, v]) => `-c ${k}=${v}`)
    .join(' ');
}

export interface PoolSizes {
  message: number;
  kv: number;
}

export function createPools(config: Config, sizes: PoolSizes, applicationName: string): Pools {
  const base: PoolConfig = { connectionString: config.databaseUrl, application_name: applicationName };
  const message = new Pool({
    ...base,
    max: sizes.message,
    connectionTimeoutMillis: config.dbAcquireTimeoutMs,
    query_timeout: queryTimeoutMs(config.dbStatementTimeoutMs),
    options: startupOptions({
      ...kvSessionSettings(config),
      statement_timeout: String(config.dbStatementTimeoutMs),
      lock_timeout: String(config.dbLockTimeoutMs),
    }),
  });
  answerTimeouts(message, config);
  const kv = new Pool({
    ...base,
    max: sizes.kv,
    connectionTimeoutMillis: config.kvAcquireTimeoutMs,
    query_timeout: queryTimeoutMs(config.kvStatementTimeoutMs),
    options: startupOptions({
      ...kvSessionSettings(config),
      statement_timeout: String(config.kvStatementTimeoutMs),
    }),
  });
  // An idle client that loses its connection emits on the pool; without a listener it would crash
  // the process. A checked-out client emits on itself: a connection the client-side query timeout
  // dropped (a frozen server) ends later, between queries, and that unhandled 'error' killed the
  // worker (test/limits/frozen.test.ts, 1 run in 4). The query that failed has already answered.
  for (const pool of [message, kv]) {
    pool.on('error', () => undefined);
    pool.on('connect', (client) => client.on('error', () => undefined));
  }
  let ended: Promise<void> | undefined;
  return {
    message,
    kv,
    end() {
      ended ??= Promise.all([message.end(), kv.end()]).then(() => undefined);
      return ended;
    },
  };
}

/**
 * The message pool's time limits are session settings sent at connect (statement_timeout,
 * lock_timeout), so every statement on it, `pool.query` or a checked-out client's, is bounded with
 * no statement of its own; the acquire waits at most QUEEN_DB_ACQUIRE_TIMEOUT_MS and each statement
 * also has the client-side query_timeout. A limit that fires answers 503 with Retry-After and a code
 * naming it (lock_timeout, statement_timeout, db_unavailable); the statement was rolled back.
 *
 * Before (2026-12-01), with none of these: PostgreSQL frozen for 20 s hung pushes, the wire and
 * /health for 20 s; a row lock held elsewhere kept /api/v1/transaction waiting 34 s. A later version
 * wrapped each `pool.query` in BEGIN; SET LOCAL ...; COMMIT, pipelined: the same bounds, but three
 * statements a call cost the push path about 50 us of API CPU a push (150 -> 200 us) and a third of
 * its throughput (bench:isolation, same hour, 2026-12-01).
 */
function answerTimeouts(pool: Pool, config: Config): void {
  const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
  const answered = (...args: unknown[]) =>
    query(...args).catch((err: unknown) => {
      throw timeoutAnswer(err, config);
    });
  (pool as unknown as { query: typeof answered }).query = answered;
}

/** A time limit that fired, as the answer that names it; anything else as it was. */
function timeoutAnswer(err: unknown, config: Config): unknown {
  const code = (err as { code?: unknown } | null)?.code;
  if (code === SQLSTATE.LOCK_NOT_AVAILABLE) {
    return new ApiError('lock_timeout', `A row this call needs stayed locked by another transaction past ${config.dbLockTimeoutMs} ms (QUEEN_DB_LOCK_TIMEOUT_MS); nothing was written; retry shortly.`, { retryAfterSeconds: 1 });
  }
  if (code === SQLSTATE.QUERY_CANCELED) {
    return new ApiError('statement_timeout', `The statement ran past ${config.dbStatementTimeoutMs} ms (QUEEN_DB_STATEMENT_TIMEOUT_MS) and was rolled back; nothing was written; retry shortly.`, { retryAfterSeconds: 1 });
  }
  if (err instanceof Error && /timeout exceeded when trying to connect|Connection terminated due to connection timeout/i.test(err.message)) {
    return new ApiError('db_unavailable', `No database connection came free within ${config.dbAcquireTimeoutMs} ms (QUEEN_DB_ACQUIRE_TIMEOUT_MS); retry shortly.`, { retryAfterSeconds: 1 });
  }
  return err;
}

export const SQL_DIR = path.resolve(__dirname, '..', '..', 'sql');
/** A fixed key: every process that boots takes the same advisory lock around the schema apply. */
const SCHEMA_LOCK_KEY = 0x51_4b_56; // "QKV"

export function schemaFiles(dir = SQL_DIR): string[] {
  return fs
    .readdirSync(dir)
    .filter((f) => /^\d+_.+\.sql$/.test(f))
    .sort()
    .map((f) => path.join(dir, f));
}

/**
 * Applies every sql/NNN_*.sql in file order, in one transaction under an advisory lock, so that
 * concurrent boots (cluster workers, several sweepers) never race, then announces it. Every file
 * is idempotent; booting twice changes nothing.
 */
export async function applySchema(connectionString: string | undefined): Promise<void> {
  // A connect timeout, so that a boot waiting for its database (shared/boot.ts) retries one that
  // does not answer at all as it retries one that refuses.
  const pool = new Pool({ connectionString, max: 1, application_name: 'queen-schema', connectionTimeoutMillis: 5000 });
  pool.on('error', () => undefined);
  const client = await pool.connect().catch(async (err: unknown) => {
    await pool.end();
    throw err;
  });
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1)', [SCHEMA_LOCK_KEY]);
    for (const file of schemaFiles()) {
      try {
        await client.query(fs.readFileSync(file, 'utf8'));
      } catch (err) {
        throw new Error(`schema file ${path.basename(file)} failed: ${(err as Error).message}`);
      }
    }
    await client.query("NOTIFY queen_schema, 'applied'");
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
    await pool.end();
  }
}
