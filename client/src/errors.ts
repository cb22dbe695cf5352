// What the client throws. A verdict (a lost race, an ack that could not apply) is a value, never one of
// these: it is the most frequent outcome of the product and must not land in a catch block whose
// reflex is to retry.

/**
 * The cell refused the call (a 4xx, or a 5xx the client did not or could no longer retry), or the
 * call did not reach it. `code` is the cell's closed code (`kv_expiry_not_specified`,
 * `log_invalid_queue`, `rate_limited`, ...): branch on it, never on `message`. `index` names the
 * operation of a batch the refusal is about, when the cell said.
 */
export class QueenError extends Error {
  override readonly name = 'QueenError';
  /** HTTP status; 0 when no answer came (network failure, timeout). */
  readonly status: number;
  readonly code: string;
  readonly index?: number;
  /** Seconds the cell asked to wait before trying again (429/503), when it said. */
  readonly retryAfterSeconds?: number;
  /** The answer's body as parsed, when there was one. */
  readonly body?: unknown;

  constructor(
    init: { status: number; code: string; message: string; index?: number; retryAfterSeconds?: number; body?: unknown },
    options?: { cause?: unknown },
  ) {
    super(init.message, options);
    this.status = init.status;
    this.code = init.code;
    if (init.index !== undefined) this.index = init.index;
    if (init.retryAfterSeconds !== undefined) this.retryAfterSeconds = init.retryAfterSeconds;
    if (init.body !== undefined) this.body = init.body;
  }
}

/**
 * An answer held a number a JavaScript number cannot hold exactly and that is not a whole number
 * (whole numbers come back as bigint). Thrown instead of rounding it.
 */
export class QueenPrecisionError extends Error {
  override readonly name = 'QueenPrecisionError';
}
