// Pools and the boot-time schema migration. Each process owns two pools: the message pool (the log, the
// transaction wire) and the dedicated KV pool, which is also the KV path's semaphore: an acquire
// that waits past QUEEN_KV_ACQUIRE_TIMEOUT_MS becomes 503 kv_unavailable instead of stealing
// connections from the message path.
import { Pool, PoolClient, PoolConfig } from 'pg';
import { Config, kvSessionSettings, queryTimeoutMs } from './config';
import { answerTimeLimit, ApiError, isConnectionFailure, SQLSTATE } from './errors';
import { migrate, MigrateOptions, MigrateResult } from './migrations';
import { trace } from '@opentelemetry/api';
import { activeTracer, endStatementSpan, startStatementSpan } from './tracing';

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
  const message = createPool(
    config,
    { ...base, max: sizes.message, connectionTimeoutMillis: config.dbAcquireTimeoutMs, query_timeout: queryTimeoutMs(config.dbStatementTimeoutMs) },
    { ...kvSessionSettings(config), statement_timeout: String(config.dbStatementTimeoutMs), lock_timeout: String(config.dbLockTimeoutMs) },
  );
  answerTimeouts(message, config);
  const kv = createPool(
    config,
    { ...base, max: sizes.kv, connectionTimeoutMillis: config.kvAcquireTimeoutMs, query_timeout: queryTimeoutMs(config.kvStatementTimeoutMs) },
    { ...kvSessionSettings(config), statement_timeout: String(config.kvStatementTimeoutMs) },
  );
  // Last, so each call's bound covers the wrappers above (the per-transaction BEGIN and COMMIT too).
  // The KV pool keeps its own two limits, its acquire (1 s, the semaphore's) and its query timeout
  // (8.5 s): their sum is its routes' bound; wrapped like the message pool it shed bursts the
  // semaphore used to queue (test/ops/pool.test.ts), not understood yet.
  boundCalls(message, queryTimeoutMs(config.dbStatementTimeoutMs), 'QUEEN_DB_STATEMENT_TIMEOUT_MS');
  traceStatements(message, 'message');
  traceStatements(kv, 'kv');
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

// ---- QUEEN_DB_POOLING (PgBouncer, docs/deploy.md) ----------------------------------------------
// `session` (the default): a pool's settings go in the startup packet and its statements are named,
// so each is parsed once per connection and no statement pays for a setting. Behind a transaction
// pooler (PgBouncer pool_mode=transaction) neither holds: the server connection is another client's
// at the next transaction, so a startup setting (which PgBouncer refuses, or drops when told to
// ignore it) and a statement prepared on it are gone. `transaction`: no startup options; a pool with
// settings runs every `pool.query` as BEGIN; set_config(..., true) ...; <statement>; COMMIT,
// pipelined (one round trip, one transaction: the settings hold for that statement only, wherever
// PgBouncer sends it); every statement goes unnamed (PgBouncer 1.18 cannot route a named one). The
// wrapper costs about 50 us of API CPU a push, which is why it is not the default.

/** Per pool: the BEGIN that opens one of its transactions (with its settings under `transaction`). */
const begins = new WeakMap<Pool, string>();

/** The statement that opens a transaction on a client of `pool`: a checked-out client's BEGIN. */
export function beginOf(pool: Pool): string {
  return begins.get(pool) ?? 'BEGIN';
}

/** `BEGIN; SELECT set_config(k, v, true), ...`: one simple query, the settings local to the transaction. */
export function beginWithSettings(settings: Record<string, string>): string {
  const lit = (v: string) => `'${v.replace(/'/g, "''")}'`;
  const sets = Object.entries(settings).map(([k, v]) => `set_config(${lit(k)}, ${lit(v)}, true)`);
  return sets.length === 0 ? 'BEGIN' : `BEGIN; SELECT ${sets.join(', ')}`;
}

/**
 * A pool whose `settings` (statement_timeout, the queen.* limits the SQL reads) hold on every
 * statement, as QUEEN_DB_POOLING says: sent at connect (`session`), or per transaction
 * (`transaction`). Every pool of the cell but the schema's and LISTEN's comes from here.
 */
export function createPool(config: Config, poolConfig: PoolConfig, settings: Record<string, string> = {}): Pool {
  if (config.dbPooling === 'session') {
    return new Pool(Object.keys(settings).length === 0 ? poolConfig : { ...poolConfig, options: startupOptions(settings) });
  }
  const wrapped = Object.keys(settings).length > 0;
  // Pipelined: BEGIN, the statement and COMMIT go out in one write and come back in one read.
  const pool = new Pool({ ...poolConfig, ...(wrapped ? { pipeline: true } : {}) } as PoolConfig);
  pool.on('connect', (client) => unnamed(client));
  if (wrapped) perTransaction(pool, beginWithSettings(settings));
  return pool;
}

/** This client's statements go unnamed: parsed at each call, routable by a transaction pooler. */
function unnamed(client: PoolClient): void {
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  (client as unknown as { query: typeof query }).query = (first: unknown, ...rest: unknown[]) => {
    const named = typeof first === 'object' && first !== null && typeof (first as { submit?: unknown }).submit !== 'function' && (first as { name?: unknown }).name !== undefined;
    return query(named ? { ...(first as object), name: undefined } : first, ...rest);
  };
}

/**
 * Every `pool.query` in its own transaction that begins with the pool's settings. A statement that
 * fails aborts the transaction and the COMMIT behind it ends it as a rollback; nothing is written.
 * A connection that failed, that found the server read-only, or whose BEGIN or COMMIT failed, is dropped, never handed back.
 */
function perTransaction(pool: Pool, begin: string): void {
  begins.set(pool, begin);
  const acquire = pool.connect.bind(pool) as () => Promise<PoolClient>;
  const inTransaction = async (...args: unknown[]) => {
    const client = await acquire();
    const [began, ran, committed] = await Promise.allSettled([
      client.query(begin),
      (client.query as (...a: unknown[]) => Promise<unknown>)(...args),
      client.query('COMMIT'),
    ]);
    const failure = [began, ran, committed].find((s): s is PromiseRejectedResult => s.status === 'rejected')?.reason;
    // A read-only server (a demoted primary behind the address) too: the next connection may reach the new primary.
    const readOnly = (failure as { code?: unknown } | undefined)?.code === SQLSTATE.READ_ONLY_SQL_TRANSACTION;
    const broken = failure !== undefined && (isConnectionFailure(failure) || readOnly || began.status === 'rejected' || committed.status === 'rejected');
    client.release(broken ? (failure as Error) : undefined);
    if (failure !== undefined) throw failure;
    return (ran as PromiseFulfilledResult<unknown>).value;
  };
  (pool as unknown as { query: typeof inTransaction }).query = inTransaction;
}

/**
 * The message pool's time limits are session settings sent at connect (statement_timeout,
 * lock_timeout; per transaction under QUEEN_DB_POOLING=transaction), so every statement on it,
 * `pool.query` or a checked-out client's, is bounded with no statement of its own; the acquire waits at most QUEEN_DB_ACQUIRE_TIMEOUT_MS and each statement
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
  const limits = { statementTimeoutMs: config.dbStatementTimeoutMs, lockTimeoutMs: config.dbLockTimeoutMs, acquireTimeoutMs: config.dbAcquireTimeoutMs };
  const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
  const answered = (...args: unknown[]) =>
    query(...args).catch((err: unknown) => {
      throw answerTimeLimit(err, 'log', limits);
    });
  (pool as unknown as { query: typeof answered }).query = answered;
}

/**
 * A query config may say when its call began waiting (`since`, ms since the epoch): a push that
 * waited in the worker for a gathering in flight (push/coalescer.ts) is bounded from its arrival,
 * not from its own statement.
 */
export interface Since {
  since?: number;
}

/** A named statement's config with the time its call began waiting (see Since). */
export function since<T extends object>(config: T, at: number): T {
  return { ...config, since: at } as T;
}

/**
 * One bound per call, the pool's wait and the statement together: `boundMs` (the client-side query
 * timeout, 1.5 x the statement timeout + 1 s) from `since`, or from the call. Without it they added
 * up: with PostgreSQL frozen for 20 s, a push that queued behind a gathering in flight waited for
 * that statement's 16 s, then for a connection, then for its own statement, and was answered 503
 * at 21.3 s, after the freeze had ended. Now the statement's client-side limit is what is left of
 * the bound when the connection comes (a live server still fires its own statement_timeout first:
 * 5 s of pool wait + 10 s < 16 s), a call whose bound has passed before it starts is not sent, and
 * the answer is `503 db_unavailable` at the bound whatever the pool is doing; the call behind it
 * ends by its own limits, its connection dropped.
 */
const answeredAt = new WeakMap<Pool, number>();

/**
 * When the database last answered a statement of this pool (a result or its own error: either way
 * it is up), in ms since the epoch; 0 before the first. Readiness reads it (routes/health.ts).
 */
export function lastAnswer(pool: Pool): number {
  return answeredAt.get(pool) ?? 0;
}

function boundCalls(pool: Pool, boundMs: number, variable: string): void {
  const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
  const late = () =>
    new ApiError('db_unavailable', `The call did not complete within ${boundMs} ms (1.5 x ${variable} + 1 s, the pool's wait included); it may or may not have been applied; retry shortly.`, { retryAfterSeconds: 1 });
  const bounded = (first: unknown, ...rest: unknown[]): Promise<unknown> => {
    const isConfig = typeof first === 'object' && first !== null && typeof (first as { submit?: unknown }).submit !== 'function';
    const since = isConfig ? (first as Since).since : undefined;
    const deadline = (since ?? Date.now()) + boundMs;
    if (deadline - Date.now() <= 0) return Promise.reject(late());
    let config = first;
    if (isConfig) {
      // Read when the connection has come (pg reads query_timeout as it sends): what is left then.
      const plain: Record<string, unknown> = { ...(first as Record<string, unknown>) };
      delete plain.since;
      config = Object.defineProperty(plain, 'query_timeout', { enumerable: true, get: () => Math.max(1, deadline - Date.now()) });
    }
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(late()), deadline - Date.now());
    });
    const sent = query(config, ...rest).then(
      (result) => {
        answeredAt.set(pool, Date.now());
        return result;
      },
      (err: unknown) => {
        // A SQLSTATE of the server's own (not a connection class): the server answered.
        const code = (err as { code?: unknown } | null)?.code;
        const fromServer = typeof code === 'string' && (/^[0-9A-Z]{5}$/.test(code) ? !code.startsWith('08') : code === 'lock_timeout' || code === 'statement_timeout');
        if (fromServer) answeredAt.set(pool, Date.now());
        throw err;
      },
    );
    return Promise.race([sent, bound]).finally(() => clearTimeout(timer));
  };
  (pool as unknown as { query: typeof bounded }).query = bounded;
}

/**
 * With tracing on (shared/tracing.ts), one span per `pool.query`, the pool's wait included, named
 * by the statement's prepared name. Outermost, so a span's time is the caller's. Off, the pool is
 * left as it is.
 */
export function traceStatements(pool: Pool, label: string): void {
  const tracer = activeTracer();
  if (tracer === undefined) return;
  const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
  const traced = (first: unknown, ...rest: unknown[]): Promise<unknown> => {
    // Only inside a traced request or sweeper cycle: a statement of a request the sampler left
    // out (or of no request) would otherwise start a trace of its own.
    if (!trace.getActiveSpan()?.isRecording()) return query(first, ...rest);
    const name = typeof first === 'object' && first !== null ? (first as { name?: unknown }).name : undefined;
    const span = startStatementSpan(tracer, label, typeof name === 'string' ? name : 'statement');
    return query(first, ...rest).then(
      (result) => {
        endStatementSpan(span);
        return result;
      },
      (err: unknown) => {
        endStatementSpan(span, err);
        throw err;
      },
    );
  };
  (pool as unknown as { query: typeof traced }).query = traced;
}

/**
 * Brings the database's schema up to this release: the pending migrations of sql/migrations/, each once, in
 * order, under an advisory lock, so that concurrent boots (cluster workers, several sweepers, the
 * release command) never race; refuses a changed applied file or a database newer than this
 * release (shared/migrations.ts). Booting twice changes nothing.
 */
export async function applySchema(connectionString: string | undefined, options?: MigrateOptions): Promise<MigrateResult> {
  return migrate(connectionString, options);
}

