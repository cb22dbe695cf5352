// Pools and the boot-time schema migration. Each process owns two pools: the message pool (the log, the
// transaction wire) and the dedicated KV pool, which is also the KV path's semaphore: an acquire
// that waits past QUEEN_KV_ACQUIRE_TIMEOUT_MS becomes 503 kv_unavailable instead of stealing
// connections from the message path.
import { Pool, PoolClient, PoolConfig } from 'pg';
import { Config, kvSessionSettings, queryTimeoutMs } from './config';
import { ApiError, isConnectionFailure, SQLSTATE } from './errors';
import { beginWithLimits, COMMIT } from './sql/limits';
import { migrate, MigrateOptions, MigrateResult, migrations } from './migrations';

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
    // Queries queued on a client are written at once (limitEveryQuery below).
    pipeline: true,
    options: startupOptions(kvSessionSettings(config)),
  } as PoolConfig);
  limitEveryQuery(message, config);
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
 * Every `pool.query` on the message pool runs in its own transaction that begins with
 * statement_timeout and lock_timeout (shared/sql/limits.ts) and commits, on a connection acquired
 * within QUEEN_DB_ACQUIRE_TIMEOUT_MS; each statement also has the client-side query_timeout.
 * Before (2026-12-01), with none of these: PostgreSQL frozen for 20 s hung pushes, the wire and
 * /health for 20 s; a row lock held elsewhere kept /api/v1/transaction waiting 34 s, and 170 such
 * calls took every connection, so an unrelated push waited 27 s.
 *
 * BEGIN, the statement and COMMIT are pipelined: one round trip, as the bare statement was (a
 * first version that awaited each paid two more, and on a loaded machine each is a backend woken
 * and scheduled again: bench:isolation's pushes/s fell by half). A timeout answers 503 with
 * Retry-After and a code naming it (lock_timeout, statement_timeout, db_unavailable), after the
 * transaction rolled back.
 */
function limitEveryQuery(pool: Pool, config: Config): void {
  const begin = beginWithLimits({ statementTimeoutMs: config.dbStatementTimeoutMs, lockTimeoutMs: config.dbLockTimeoutMs });
  const acquire = pool.connect.bind(pool) as () => Promise<PoolClient>;
  const limited = async (...args: unknown[]) => {
    let client: PoolClient;
    try {
      client = await acquire();
    } catch (err) {
      throw timeoutAnswer(err, config);
    }
    // Pipelined (the pool's `pipeline`): the three go out in one write and come back in one read,
    // one round trip as before. A statement that fails aborts the transaction, and the COMMIT
    // behind it then ends it as a rollback; nothing of it is written.
    const settled = await Promise.allSettled([
      client.query(begin),
      (client.query as (...a: unknown[]) => Promise<unknown>)(...args),
      client.query(COMMIT),
    ]);
    const [began, ran, committed] = settled;
    const failure = [began, ran, committed].find((s): s is PromiseRejectedResult => s.status === 'rejected')?.reason;
    // A connection that failed, did not answer in time, or whose BEGIN or COMMIT failed is dropped,
    // never handed back: its backend rolls back when it notices.
    const broken = failure !== undefined && (isConnectionFailure(failure) || began.status === 'rejected' || committed.status === 'rejected');
    client.release(broken ? (failure as Error) : undefined);
    if (failure !== undefined) throw timeoutAnswer(failure, config);
    return (ran as PromiseFulfilledResult<unknown>).value;
  };
  (pool as unknown as { query: typeof limited }).query = limited;
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

/**
 * Brings the database's schema up to this release: the pending migrations of sql/, each once, in
 * order, under an advisory lock, so that concurrent boots (cluster workers, several sweepers, the
 * release command) never race; refuses a changed applied file or a database newer than this
 * release (shared/migrations.ts). Booting twice changes nothing.
 */
export async function applySchema(connectionString: string | undefined, options?: MigrateOptions): Promise<MigrateResult> {
  return migrate(connectionString, options);
}

/** The schema files in version order. */
export function schemaFiles(): string[] {
  return migrations().map((m) => m.file);
}
