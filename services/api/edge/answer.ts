// Writing an answer: the JSON text, the 304, and the one error handler every refusal goes through.
import type { Request, Response, NextFunction } from 'express';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError, coerceError } from '../../../shared/errors';
import type { Logger } from '../../../shared/log';
import type { Config } from '../../../shared/config';
import { INVALID_UTF8, rawBody } from './body';
import { drainThenClose } from './drain';

/**
 * A JSON body PostgreSQL already rendered, written once with node's own writeHead/end: Express's
 * send() would parse the Content-Type back, look the charset up and re-set headers on every answer.
 */
export function sendJsonText(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

/**
 * A GET whose If-None-Match names the ETag it would get: 304, no body. The ETag saves bandwidth,
 * never the read: the database was asked either way.
 */
export function notModified(req: IncomingMessage, etag: string): boolean {
  const wanted = req.headers['if-none-match'];
  if (!wanted || /(?:^|,)\s*no-cache\s*(?:,|$)/.test(req.headers['cache-control'] ?? '')) return false;
  return wanted.trim() === '*' || wanted.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag);
}

/** The error code an answer carried, for the request line's metric (requestLog.ts). */
const ANSWERED_CODE = Symbol('queen.answeredCode');
type Coded = ServerResponse & { [ANSWERED_CODE]?: string };

export function answeredCode(res: ServerResponse): string {
  return (res as Coded)[ANSWERED_CODE] ?? '';
}

export function sendError(res: ServerResponse, err: ApiError): void {
  // Already answered (a body refused while it arrived, bodyBudget.ts): the first answer stands.
  if (res.headersSent) return;
  (res as Coded)[ANSWERED_CODE] = err.code;
  if (err.extra.retryAfterSeconds !== undefined) res.setHeader('Retry-After', String(err.extra.retryAfterSeconds));
  sendJsonText(res, err.status, JSON.stringify(err.body()));
}

/** The answer goes out with Connection: close; the rest of the body is read and dropped, bounded (drain.ts), then the socket closes. */
export function refuseAndClose(res: ServerResponse, err: ApiError): void {
  if (res.headersSent) return;
  res.shouldKeepAlive = false;
  drainThenClose(res);
  sendError(res, err);
}

/** The one place a thrown thing becomes an answer. A 500 is a bug and is logged as one. */
export function errorHandler(log: Logger) {
  return (err: unknown, req: IncomingMessage & { route?: { path?: string } }, res: ServerResponse, _next?: NextFunction): void => {
    const e = err as { type?: string; status?: number; statusCode?: number; message?: string };
    if (e && e.type === 'entity.too.large') {
      return refuseAndClose(res, new ApiError('payload_too_large', 'The request body is larger than this cell accepts.'));
    }
    if (e && e.type === INVALID_UTF8) {
      return sendError(res, new ApiError('invalid_json', 'The request body is not valid UTF-8; JSON text is UTF-8 unless Content-Type names another charset.'));
    }
    const expressStatus = e?.status ?? e?.statusCode;
    if (expressStatus && expressStatus >= 400 && expressStatus < 500 && !(err instanceof ApiError)) {
      // Express and body-parser refusals (bad percent-encoding, unsupported charset, aborted body).
      // body-parser's 415 (a charset or Content-Encoding it cannot decode) keeps its status by its own code.
      return sendError(res, new ApiError(expressStatus === 415 ? 'unsupported_media_type' : 'bad_request', e.message ?? 'Bad request.'));
    }
    const coerced = coerceError(err);
    if (coerced instanceof ApiError) return sendError(res, coerced);
    // Only the error's identity: a pg error's DETAIL and HINT can carry stored values, which never
    // belong in a log line.
    const { name, message, code, stack } = (err ?? {}) as { name?: string; message?: string; code?: string; stack?: string };
    log.error({ err: { name, message, code, stack }, method: req.method, route: req.route?.path }, 'unhandled error answered as 500');
    if (res.headersSent) return;
    sendError(res, new ApiError('internal', 'An internal error occurred; it has been logged.'));
  };
}

export function notFound(req: Request, res: Response): void {
  sendError(res, new ApiError('not_found', `No route for ${req.method} ${req.path}.`));
}

/**
 * For the routes answered before Express (routes/kv.ts says why): reads the body as rawBody does
 * (its limit and refusals), then runs `answer`; a synchronous throw, a rejection and a body that
 * could not be read all take the same way out, the one error handler.
 */
export function answerWithBody(config: Config, log: Logger) {
  const readBody = rawBody(config);
  const answerError = errorHandler(log);
  return (req: IncomingMessage, res: ServerResponse, answer: () => Promise<void>): void => {
    readBody(req as never, res as never, (err?: unknown) => {
      if (err) return answerError(err, req, res);
      Promise.resolve()
        .then(answer)
        .catch((e: unknown) => answerError(e, req, res));
    });
  };
}
