// A worker's memory for request bodies, bounded whatever clients send. Before (2026-12-01): 16
// concurrent pushes of about 70 MB each (under the 72 MiB body limit of the time) took one worker to
// 1.6 GB of RSS and the kernel killed it; a Content-Length past the limit was refused only after the
// whole body had been read and thrown away, so the client sat with no answer while it sent it.
//
// Two limits, both decided before a byte of the body is buffered where the sizes are announced:
//  - one body past QUEEN_MAX_BODY_BYTES: 413 payload_too_large;
//  - the bodies this worker is reading or holding (admitted, not yet answered) past
//    QUEEN_MAX_INFLIGHT_BODY_BYTES: 503 server_busy with Retry-After.
// A Content-Length is reserved whole when the request arrives and refused at once if it does not
// fit; the connection closes after the answer and the body is never read. A chunked body is counted
// as its bytes arrive (push, below) and refused the moment it passes either limit; what it sent
// after that is dropped unread. A compressed body (Content-Encoding) reserves the full body limit up
// front, since what it inflates to is only known while reading it. A reservation is released when
// the answer is finished or the connection is gone.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Config } from '../../../shared/config';
import { ApiError } from '../../../shared/errors';
import { refuseAndClose } from './answer';

interface Held {
  res: ServerResponse;
  bytes: number;
  /** A chunked body still being counted as it arrives. */
  growing: boolean;
  /** Refused while it arrived: every later chunk (and its end) is dropped. */
  refused: boolean;
}

/**
 * A request's reservation rides on the request itself. Not a WeakMap: with every request a key,
 * its ephemerons made each young collection walk them, and the worker's GC time under a push load
 * grew 2.3x (bench:isolation, push alone, CPU profile, 2026-12-02).
 */
const HELD = Symbol('bodyBudget.held');
type Budgeted = IncomingMessage & { [HELD]?: Held };

export class BodyBudget {
  private held = 0;

  constructor(private readonly limits: Pick<Config, 'maxBodyBytes' | 'maxInflightBodyBytes'>) {}

  /** Bytes of bodies admitted and not yet answered, in this worker. */
  get bytes(): number {
    return this.held;
  }

  /** Called as a request arrives: true when it was refused here (answered, the connection closing). */
  refuse(req: IncomingMessage, res: ServerResponse): boolean {
    const length = req.headers['content-length'];
    const chunked = length === undefined && req.headers['transfer-encoding'] !== undefined;
    if (length === undefined && !chunked) return false;
    const encoding = req.headers['content-encoding'];
    const compressed = encoding !== undefined && encoding.trim().toLowerCase() !== 'identity';
    // Node's parser has already refused a Content-Length that is not a plain number.
    const announced = length === undefined ? 0 : Number(length);
    if (announced > this.limits.maxBodyBytes) return this.tooLarge(res), true;
    const bytes = compressed ? this.limits.maxBodyBytes : announced;
    if (bytes === 0 && !chunked) return false;
    if (this.held + bytes > this.limits.maxInflightBodyBytes) return this.busy(res), true;
    this.held += bytes;
    const held: Held = { res, bytes, growing: chunked && !compressed, refused: false };
    (req as Budgeted)[HELD] = held;
    res.once('close', () => {
      this.held -= held.bytes;
      held.bytes = 0;
    });
    return false;
  }

  /** Each piece of a body as node's parser hands it over (null: the end): false drops it. */
  chunk(req: IncomingMessage, chunk: Buffer | null): boolean {
    const held = (req as Budgeted)[HELD];
    if (held === undefined) return true;
    if (held.refused) return false;
    if (chunk === null || !held.growing) return true;
    held.bytes += chunk.length;
    this.held += chunk.length;
    if (held.bytes > this.limits.maxBodyBytes) this.tooLarge(held.res);
    else if (this.held > this.limits.maxInflightBodyBytes) this.busy(held.res);
    else return true;
    held.refused = true;
    // The bytes it sent are not kept: the reservation is only what is buffered.
    this.held -= held.bytes;
    held.bytes = 0;
    return false;
  }

  private tooLarge(res: ServerResponse): void {
    refuseAndClose(res, new ApiError('payload_too_large', `The request body is larger than this cell accepts (${this.limits.maxBodyBytes} bytes, QUEEN_MAX_BODY_BYTES).`));
  }

  private busy(res: ServerResponse): void {
    refuseAndClose(
      res,
      new ApiError('server_busy', 'This worker is holding as many request bodies as it may (QUEEN_MAX_INFLIGHT_BODY_BYTES); retry shortly.', {
        retryAfterSeconds: 1,
      }),
    );
  }
}
