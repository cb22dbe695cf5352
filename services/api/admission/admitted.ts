// What follows an admission (admission/guards.ts): the call's occupancy delta is held by the quota from the
// moment it is admitted until its statement returns, then stamped as committed or forgotten. Its own
// module because it is the one piece of the admission a route holds on to after the verdict.
import { AckFailed, ApiError, coerceError, isConnectionFailure } from '../../../shared/errors';
import type { Hold } from './tenantBook';

/**
 * Whether a call that threw may still have written: a lost connection (the commit may have
 * happened and its acknowledgement been lost), a database that went away, or an error we cannot
 * read. A refusal or an error PostgreSQL reported for the statement means it rolled back. The
 * quota counts the maybes (conservative: until the next measurement), never the refusals.
 */
export function mayHaveCommitted(err: unknown): boolean {
  if (isConnectionFailure(err)) return true;
  const verdict = coerceError(err);
  if (verdict instanceof ApiError) return verdict.code === 'db_unavailable';
  if (verdict instanceof AckFailed) return false;
  return typeof (err as { code?: unknown } | null)?.code !== 'string';
}

/**
 * An admitted call. Its occupancy delta is held (counted by the quota) from admission, before the
 * statement is sent, so concurrent calls of this worker see each other; once the statement returns
 * it is stamped as committed (admission/tenantBook.ts), or forgotten when the statement certainly failed. A wire
 * bundle answered 200 ok:false (a lost precondition, a failed ack) rolled back but returns as done:
 * it is counted until the next measurement, which can only block early, never late.
 */
export class Admitted {
  constructor(
    readonly tenant: string,
    private readonly held: Hold,
    /** A statement that failed: a pool acquire timeout counts as refused and as the pool's saturation. */
    private readonly failed: (err: unknown) => void,
  ) {}

  /** The admitted statement's outcome, passed through; the error as thrown (the route's accounting and the one error handler read it). */
  track<T>(statement: Promise<T>): Promise<T> {
    return statement.then(
      (result) => {
        this.held.settle(true);
        return result;
      },
      (err: unknown) => {
        this.held.settle(mayHaveCommitted(err));
        this.failed(err);
        throw err;
      },
    );
  }
}
