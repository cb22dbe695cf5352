// The time limits of the message pool, set per transaction. SET LOCAL inside BEGIN ... COMMIT holds
// for that transaction only, so it survives PgBouncer's transaction mode (a session SET, or a startup
// `options`, would not: the server connection is another client's at the next transaction). The
// values are whole milliseconds from shared/config.ts, built into the text once per pool.

/** One simple query, one round trip: the transaction begins with its limits set. */
export function beginWithLimits(limits: { statementTimeoutMs: number; lockTimeoutMs: number }): string {
  const ms = (n: number) => {
    if (!Number.isSafeInteger(n) || n < 1) throw new Error(`a time limit is a whole number of milliseconds, got ${n}`);
    return `'${n}ms'`;
  };
  return `BEGIN; SET LOCAL statement_timeout = ${ms(limits.statementTimeoutMs)}; SET LOCAL lock_timeout = ${ms(limits.lockTimeoutMs)}`;
}

export const COMMIT = 'COMMIT';
