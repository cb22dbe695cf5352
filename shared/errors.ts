// The error taxonomy: every refusal the product gives has a code, and the code decides the status.
// One table, one mapper. SQL raises with SQLSTATE class QK and a JSON detail naming the code; we
// key on SQLSTATEs and codes, never on message text.

export const SQLSTATE = {
  QUEEN_BAD_REQUEST: 'QK400',
  QUEEN_ACK_FAILED: 'QK412',
  // A push to an encrypted queue the API did not seal (queen.log_check_sealed_v1): the API seals and retries.
  QUEEN_SEALING_REQUIRED: 'QK428',
  INVALID_TEXT_REPRESENTATION: '22P02',
  NUMERIC_VALUE_OUT_OF_RANGE: '22003',
  STATEMENT_TOO_COMPLEX: '54001',
  PROGRAM_LIMIT_EXCEEDED: '54000',
  UNTRANSLATABLE_CHARACTER: '22P05',
  CHARACTER_NOT_IN_REPERTOIRE: '22021',
  QUERY_CANCELED: '57014',
  LOCK_NOT_AVAILABLE: '55P03',
  DEADLOCK_DETECTED: '40P01',
  SERIALIZATION_FAILURE: '40001',
  ADMIN_SHUTDOWN: '57P01',
  CRASH_SHUTDOWN: '57P02',
  CANNOT_CONNECT_NOW: '57P03',
  TOO_MANY_CONNECTIONS: '53300',
  READ_ONLY_SQL_TRANSACTION: '25006',
} as const;

const STATUS: Record<string, number> = {
  invalid_json: 400,
  kv_operations_required: 400,
  kv_batch_too_large: 400,
  kv_unknown_op: 400,
  kv_ns_required: 400,
  kv_key_required: 400,
  kv_invalid_ttl: 400,
  kv_invalid_delta: 400,
  kv_invalid_limit_bounds: 400,
  kv_expiry_not_specified: 400,
  kv_expect_invalid: 400,
  kv_duplicate_key: 400,
  kv_value_too_large: 400,
  kv_value_required: 400,
  kv_key_too_long: 400,
  kv_invalid_key: 400,
  kv_invalid_namespace: 400,
  kv_invalid_field: 400,
  kv_prefix_required: 400,
  kv_get_prefix_not_allowed_in_transaction: 400,
  kv_query_string_not_allowed: 400,
  kv_body_conflicts_with_path: 400,
  timers_operations_required: 400,
  timers_batch_too_large: 400,
  timers_unknown_op: 400,
  timers_queue_required: 400,
  timers_invalid_queue: 400,
  timers_invalid_partition: 400,
  timers_payload_required: 400,
  timers_payload_too_large: 400,
  timers_invalid_timer_key: 400,
  timers_invalid_timer_id: 400,
  timers_when_required: 400,
  timers_when_conflict: 400,
  timers_invalid_deliver_at: 400,
  timers_invalid_delay: 400,
  timers_beyond_horizon: 400,
  timers_invalid_limit: 400,
  timers_invalid_cursor: 400,
  timers_body_conflicts_with_path: 400,
  timers_invalid_field: 400,
  tenant_required: 400,
  // The message log (sql/functions/log_*.sql) and the transaction wire.
  log_queue_required: 400,
  log_invalid_queue: 400,
  log_invalid_partition: 400,
  log_invalid_transaction_id: 400,
  // `timer:` transactionIds are the sweeper's (a timer's fire); a client push with one is refused.
  log_reserved_transaction_id: 400,
  // Queen's traceId on a push item that is not UUID text (nor "", none).
  log_invalid_trace_id: 400,
  log_items_required: 400,
  log_invalid_item: 400,
  // A push item's field it does not take, or an item without payload (services/api/edge/fields.ts).
  log_invalid_field: 400,
  log_payload_required: 400,
  log_invalid_options: 400,
  log_invalid_lease_time: 400,
  log_invalid_retry_limit: 400,
  log_invalid_consumer_group: 400,
  log_invalid_batch: 400,
  log_invalid_partitions: 400,
  log_invalid_wait: 400,
  log_invalid_timeout: 400,
  log_invalid_ack: 400,
  log_acks_required: 400,
  log_transaction_id_required: 400,
  log_invalid_partition_id: 400,
  log_invalid_status: 400,
  log_invalid_lease_id: 400,
  log_batch_too_large: 400,
  log_invalid_timestamp: 400,
  log_invalid_trace: 400,
  // maxSize: consumers draining the queue make room, so waiting resolves it (Retry-After).
  log_queue_full: 429,
  // encryptionEnabled on a cell without QUEEN_ENCRYPTION_KEY: only an operator resolves it.
  log_encryption_unavailable: 403,
  tx_empty: 400,
  tx_invalid_operations: 400,
  tx_invalid_kv: 400,
  tx_invalid_timers: 400,
  tx_unknown_operation: 400,
  tx_batch_too_large: 400,
  tx_invalid_field: 400,
  // A Queen MQ option, parameter or value the cell does not implement (docs/log-and-transactions.md): named, never ignored.
  unsupported: 400,
  bad_request: 400,
  unauthorized: 401,
  expectation_failed: 417,
  feature_gated: 403,
  // Rung 1 is 503 on a route and 403 inside the transaction wire (IN_TRANSACTION below).
  kv_disabled: 503,
  timers_schedule_disabled: 503,
  // A tenant moving between cells (docs/scaling.md): paused for seconds, then served by its new cell.
  tenant_moving: 503,
  kv_disabled_for_tenant: 403,
  timers_disabled_for_tenant: 403,
  kv_quota_exceeded: 403,
  timers_quota_exceeded: 403,
  not_found: 404,
  // The operator routes (services/api/routes/operator.ts, sql/functions/operator.sql).
  operator_disabled: 403,
  operator_not_found: 404,
  operator_invalid_limit: 400,
  operator_invalid_cursor: 400,
  operator_invalid_order: 400,
  operator_invalid_state: 400,
  payload_too_large: 413,
  // Refused by node's HTTP parser or body-parser before any route (services/api/server.ts, edge/answer.ts).
  request_timeout: 408,
  headers_too_large: 431,
  unsupported_media_type: 415,
  rate_limited: 429,
  // A call needing more tokens than a bucket ever holds: no Retry-After would be true (rate/limit.ts).
  rate_limit_exceeds_burst: 400,
  internal: 500,
  kv_unavailable: 503,
  // The timer routes share the KV pool, but their time limits are answered in their own name.
  timers_unavailable: 503,
  // Too many calls of this worker writing one key at once (admission/keyWaiters.ts).
  kv_key_busy: 503,
  db_unavailable: 503,
  shutting_down: 503,
  // The message pool's time limits (shared/db.ts) and a worker's request-body budget (services/api/edge/bodyBudget.ts).
  lock_timeout: 503,
  statement_timeout: 503,
  server_busy: 503,
  metrics_unavailable: 503,
};

/**
 * An operator's pause inside the transaction wire is permanent for that bundle: a bundle retrying a
 * paused KV would spin on the hot path with messages in hand, so it is 403 there, 503 on a route.
 */
const IN_TRANSACTION: Record<string, number> = {
  kv_disabled: 403,
  timers_schedule_disabled: 403,
};

export class ApiError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly extra: { index?: number; retryAfterSeconds?: number; inTransaction?: boolean } = {},
  ) {
    super(message);
    this.name = 'ApiError';
  }

  /** Decided by the code alone (and, for the pauses, by whether the transaction wire asked). */
  get status(): number {
    return (this.extra.inTransaction ? IN_TRANSACTION[this.code] : undefined) ?? statusOf(this.code);
  }

  body(): Record<string, unknown> {
    const body: Record<string, unknown> = { error: this.code, message: this.message };
    if (this.extra.index !== undefined) body.index = this.extra.index;
    return body;
  }
}

/**
 * An ack inside the transaction wire that could not be applied (expired lease, unknown message...):
 * the whole bundle rolled back. A 200 with ok:false, like a lost precondition: it is a verdict on
 * the work, not a fault of the call.
 */
export class AckFailed extends Error {
  constructor(
    readonly failedIndex: number,
    readonly ackReason: string,
  ) {
    super('ack_failed');
    this.name = 'AckFailed';
  }

  bodyText(offset = 0): string {
    return JSON.stringify({
      ok: false,
      success: false,
      // The text Queen's client throws when a transaction did not commit.
      error: `ack_failed: operation ${this.failedIndex + offset}: ${this.ackReason}; nothing committed`,
      reason: 'ack_failed',
      failedIndex: this.failedIndex + offset,
      ackReason: this.ackReason,
    });
  }
}

interface PgError {
  code?: string;
  message?: string;
  detail?: string;
  hint?: string;
}

function isPgError(err: unknown): err is PgError {
  return typeof err === 'object' && err !== null && typeof (err as PgError).code === 'string';
}

/**
 * pg's own errors that carry no code, by their text: the only texts this module matches, kept here
 * so that nothing else in the product matches an error's message.
 */
export const PG_TEXT = {
  /** The pool's acquire timeout (connectionTimeoutMillis): no connection came free in time. */
  acquireTimeout: /timeout exceeded when trying to connect/i,
  /** A new connection that did not complete within connectionTimeoutMillis (the pool's text, the socket's). */
  connectTimeout: /^Connection terminated due to connection timeout$|^timeout expired$/,
  /** A connection lost, a client whose connection already failed, pg's client-side query_timeout. */
  connectionLost: /^Connection terminated( unexpectedly)?$|is not queryable$|^Query read timeout$/,
} as const;

/** A connection attempt that timed out, either way (the boot's retry reads it too). */
export function isConnectTimeout(err: unknown): boolean {
  const message = err instanceof Error ? err.message : '';
  return PG_TEXT.acquireTimeout.test(message) || PG_TEXT.connectTimeout.test(message);
}

/**
 * Which pool a statement ran on, and so whose time limit an answer names: the message pool's
 * limits are the cell's (lock_timeout, statement_timeout, db_unavailable for a pool with no free
 * connection); the KV pool is the KV's semaphore (kv_unavailable), and the timer routes, which
 * share it, answer timers_unavailable.
 */
export type Surface = 'log' | 'kv' | 'timers';

/** The message pool's settings, named in its answers (shared/db.ts). */
export interface TimeLimits {
  statementTimeoutMs?: number;
  lockTimeoutMs?: number;
  acquireTimeoutMs?: number;
}

const POOL_CODE: Record<Surface, string> = { log: 'db_unavailable', kv: 'kv_unavailable', timers: 'timers_unavailable' };
const TIMEOUT_CODE: Record<Surface, string> = { log: 'statement_timeout', kv: 'kv_unavailable', timers: 'timers_unavailable' };
const retry = { retryAfterSeconds: 1 };

/** A time limit that fired, as the answer that names it on `surface`; undefined for anything else. */
function timeLimitAnswer(err: unknown, surface: Surface, limits: TimeLimits): ApiError | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  const setting = (ms: number | undefined, name: string) => (ms === undefined ? '' : ` (${ms} ms, ${name})`);
  if (code === SQLSTATE.LOCK_NOT_AVAILABLE) {
    return new ApiError('lock_timeout', `A row this call needs stayed locked by another transaction past its lock limit${setting(limits.lockTimeoutMs, 'QUEEN_DB_LOCK_TIMEOUT_MS')}; nothing was written; retry shortly.`, retry);
  }
  if (code === SQLSTATE.QUERY_CANCELED) {
    return new ApiError(TIMEOUT_CODE[surface], `The statement ran past its time limit${setting(limits.statementTimeoutMs, 'QUEEN_DB_STATEMENT_TIMEOUT_MS')} and was rolled back; nothing was written; retry shortly.`, retry);
  }
  if (!(err instanceof Error)) return undefined;
  if (PG_TEXT.connectTimeout.test(err.message)) {
    // The pool had room, the server (or the proxy in front of it, with no primary behind it during
    // a failover) did not answer: the database, not the pool.
    return new ApiError('db_unavailable', 'A new database connection did not complete in time (the database is down, failing over or unreachable); retry shortly.', retry);
  }
  if (PG_TEXT.acquireTimeout.test(err.message)) {
    const pool = surface === 'log' ? 'No database connection' : surface === 'kv' ? 'No connection of the KV pool' : 'No connection of the pool the timers share with the KV';
    return new ApiError(POOL_CODE[surface], `${pool} came free in time${setting(limits.acquireTimeoutMs, 'QUEEN_DB_ACQUIRE_TIMEOUT_MS')}; retry shortly.`, retry);
  }
  return undefined;
}

/** The message pool's time limits answered where they fire, with the settings they name (shared/db.ts). */
export function answerTimeLimit(err: unknown, surface: Surface, limits: TimeLimits): unknown {
  return timeLimitAnswer(err, surface, limits) ?? err;
}

/**
 * The answer to a data call of a tenant in a move between cells: from the API's copy of
 * queen.tenant_moves before a body is read, from the database's own (queen.tenant_moving_v1) when
 * that copy was stale, and to a long-poll pop that was waiting when the move began.
 */
export function movingRefusal(role: 'source' | 'target' | 'moved'): ApiError {
  const message =
    role === 'moved'
      ? 'This tenant has moved to another cell; the router sends its calls there. Nothing was read or written here; retry.'
      : 'This tenant is moving to another cell; its calls are refused for the few seconds the move takes. Nothing was read or written; retry.';
  return new ApiError('tenant_moving', message, { retryAfterSeconds: 1 });
}

/**
 * Turns whatever a database call threw into the product's answer: an ApiError with a code from the
 * table above, an AckFailed, or the original error (a bug, answered as 500 and logged). The one
 * translator of pg's errors; `surface` names whose time limits fired (KV unless told).
 */
export function coerceError(err: unknown, surface: Surface = 'kv'): unknown {
  if (err instanceof ApiError || err instanceof AckFailed) return err;
  const limit = timeLimitAnswer(err, surface, {});
  if (limit) return limit;
  if (isConnectionFailure(err)) {
    // The database is down, restarting or unreachable: the cell, not the call. Every route answered
    // these as 500 internal ("connect ECONNREFUSED", "Connection terminated unexpectedly") for the
    // whole of a PostgreSQL restart, and logged each one as a bug.
    return new ApiError(
      'db_unavailable',
      'The database cannot be reached right now (down or restarting); retry shortly. A write whose connection was lost may or may not have been applied.',
      { retryAfterSeconds: 1 },
    );
  }
  if (!isPgError(err)) return err;
  switch (err.code) {
    case SQLSTATE.QUEEN_BAD_REQUEST: {
      const detail = parseDetail(err.detail);
      const code = typeof detail.code === 'string' ? detail.code : 'bad_request';
      if (code === 'tenant_moving') return movingRefusal(detail.role === 'moved' ? 'moved' : 'source');
      const index = typeof detail.index === 'number' ? detail.index : undefined;
      // A 429 the SQL raised (log_queue_full) comes back with Retry-After like every 429.
      return new ApiError(code, err.message ?? code, STATUS[code] === 429 ? { index, retryAfterSeconds: 1 } : { index });
    }
    case SQLSTATE.QUEEN_ACK_FAILED: {
      // DETAIL carries the failing operation's index and the reason (see queen.log_ack_one_v1).
      const detail = parseDetail(err.detail);
      return new AckFailed(Number(detail.failedIndex), String(detail.ackReason));
    }
    case SQLSTATE.INVALID_TEXT_REPRESENTATION:
    case SQLSTATE.UNTRANSLATABLE_CHARACTER:
    case SQLSTATE.CHARACTER_NOT_IN_REPERTOIRE:
    // A JSON number beyond numeric's range (1e999999) fails the $n::jsonb cast: the client's input.
    case SQLSTATE.NUMERIC_VALUE_OUT_OF_RANGE:
    // JSON nested deeper than PostgreSQL's stack allows ("stack depth limit exceeded") in the cast.
    case SQLSTATE.STATEMENT_TOO_COMPLEX:
      return new ApiError('invalid_json', `The request cannot be stored by PostgreSQL: ${err.message}.`);
    case SQLSTATE.ADMIN_SHUTDOWN:
    case SQLSTATE.CRASH_SHUTDOWN:
    case SQLSTATE.CANNOT_CONNECT_NOW:
    case SQLSTATE.TOO_MANY_CONNECTIONS:
      return new ApiError('db_unavailable', 'The database is not accepting work right now; retry shortly.', {
        retryAfterSeconds: 1,
      });
    case SQLSTATE.READ_ONLY_SQL_TRANSACTION:
      // A primary demoted in a failover, a standby behind the address, or default_transaction_read_only
      // set for maintenance: every write (and every pop, which leases) was a 500 internal, logged as a bug.
      return new ApiError('db_unavailable', 'The database is read-only right now (a failover or maintenance); retry shortly.', {
        retryAfterSeconds: 1,
      });
    default:
      // Class 53, insufficient resources (disk full, out of memory, too many connections): the
      // server's state, not the call's. Nothing was written.
      if (typeof err.code === 'string' && err.code.startsWith('53')) {
        return new ApiError('db_unavailable', `The database is out of resources right now (${err.message}); retry shortly.`, {
          retryAfterSeconds: 1,
        });
      }
      return err;
  }
}

/** Node's socket errors on the way to the database (the server is down, restarting or unreachable). */
const SOCKET_ERRNOS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN']);

/**
 * A failure of the connection rather than of the statement: a refused or reset socket, pg's own
 * "Connection terminated unexpectedly" (no code) and its "not queryable" for a client whose
 * connection already failed, and SQLSTATE class 08 (connection exception).
 */
export function isConnectionFailure(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  const { code, message } = err as { code?: unknown; message?: unknown };
  if (typeof code === 'string' && (SOCKET_ERRNOS.has(code) || /^08[0-9A-Z]{3}$/.test(code))) return true;
  // "Query read timeout": pg's client-side query_timeout, the database did not answer at all (frozen).
  return typeof message === 'string' && PG_TEXT.connectionLost.test(message);
}

/**
 * The version straight from DETAIL's text: JSON.parse would narrow a bigint above 2^53 to a
 * double, and the loser must be handed the same token the winner was.
 */
function parseDetail(detail: string | undefined): Record<string, unknown> {
  if (!detail) return {};
  try {
    const parsed = JSON.parse(detail);
    return typeof parsed === 'object' && parsed !== null ? parsed : {};
  } catch {
    return {};
  }
}

/**
 * A KV call's answer is one jsonb array, and PostgreSQL refuses one whose elements pass 256 MiB
 * (54000 "total size of jsonb array elements exceeds the maximum"): five getMany of 840 keys of
 * 64 KB each were a 500. It is the size of what the call asked for, so it is the caller's to
 * shrink: 400 kv_batch_too_large. Anything else is returned as it is.
 */
export function answerTooLarge(err: unknown): unknown {
  if ((err as { code?: string } | null)?.code !== SQLSTATE.PROGRAM_LIMIT_EXCEEDED) return err;
  return new ApiError(
    'kv_batch_too_large',
    "The answer to this call would pass PostgreSQL's 256 MiB limit on one JSON array; read fewer keys, or smaller values, per call.",
  );
}

export function statusOf(code: string): number {
  return STATUS[code] ?? 500;
}

/** The codes admission refuses a call with (services/api/admission): a refusal series each, and a span's `admission` attribute. */
export const ADMISSION_REFUSAL_CODES = [
  'kv_disabled',
  'timers_schedule_disabled',
  'feature_gated',
  'kv_disabled_for_tenant',
  'timers_disabled_for_tenant',
  'kv_quota_exceeded',
  'timers_quota_exceeded',
  'rate_limited',
  'rate_limit_exceeds_burst',
  'kv_unavailable',
] as const;

/** Every code and its status: what docs/errors.md must list (test/docs/docs.test.ts holds them together). */
export function errorCodes(): ReadonlyArray<readonly [string, number]> {
  return Object.entries(STATUS);
}
