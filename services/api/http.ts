// What every route shares: the JSON body reader, the error answer, the tenant.
import type { Request, Response, NextFunction, RequestHandler } from 'express';
import express from 'express';
import { isUtf8 } from 'node:buffer';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError, coerceError } from '../../shared/errors';
import { DEFAULT_TENANT, Config } from '../../shared/config';
import type { Logger } from '../../shared/log';

/** The raw body as text: numbers must reach PostgreSQL exactly as the client wrote them. */
export function rawBody(config: Config): RequestHandler {
  return express.text({ type: () => true, limit: config.maxBodyBytes, defaultCharset: 'utf-8', verify: refuseInvalidUtf8 });
}

/**
 * JSON text is UTF-8 (RFC 8259). A body read as UTF-8 that is not (Latin-1 bytes sent without a
 * charset, say) was decoded with U+FFFD in place of each bad byte and stored so: "café" became
 * "caf\uFFFD", silently, in values and in keys. It is refused instead (errorHandler: invalid_json).
 * A body that declares another charset is decoded from it, as before.
 */
function refuseInvalidUtf8(_req: unknown, _res: unknown, body: Buffer, encoding: string): void {
  if (/^utf-?8$/i.test(encoding) && !isUtf8(body)) {
    throw Object.assign(new Error('The request body is not valid UTF-8.'), { type: INVALID_UTF8 });
  }
}

const INVALID_UTF8 = 'entity.invalid_utf8';

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

export function bodyText(req: IncomingMessage & { body?: unknown }): string {
  return typeof req.body === 'string' ? req.body : '';
}

/**
 * JSON.parse for validation and routing only; the text itself is what travels on.
 * `storable: false` leaves refuseUnstorable to a caller that first gives a U+0000 in a key or
 * namespace its field's code (refuseNulKeys), and calls it after.
 */
export function parseJson(text: string, storable = true): unknown {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new ApiError('invalid_json', 'The request body is not valid JSON.');
  }
  if (storable) refuseUnstorable(text);
  return parsed;
}

/**
 * JSON that JavaScript parses and PostgreSQL's jsonb refuses: an escaped U+0000 (text cannot hold
 * it) or a lone surrogate escape (\uD800-\uDFFF without its pair). Refused here, before SQL:
 * PostgreSQL logs its refusal with a CONTEXT line quoting the body up to the escape ("JSON data,
 * line 1: ...\"value\":\"..."), a stored value or a payload in the server's log (2026-12-01). Only
 * a body holding `\u` is scanned; each match is one escape, so `\\u0000` (a backslash, then the
 * text u0000) is not one.
 */
export function refuseUnstorable(text: string): void {
  if (!text.includes('\\u')) return;
  const escape = /\\(?:u([0-9a-fA-F]{4})|[^u])/g;
  const lone = () => new ApiError('invalid_json', 'The request body holds a lone surrogate escape (\\uD800 to \\uDFFF without its pair), which PostgreSQL cannot store.');
  let highEnd = -1; // where a high surrogate escape ended, waiting for its low half right there
  for (let m = escape.exec(text); m; m = escape.exec(text)) {
    const code = m[1] === undefined ? -1 : parseInt(m[1], 16);
    const low = code >= 0xdc00 && code <= 0xdfff;
    if (highEnd >= 0 ? !(low && m.index === highEnd) : low) throw lone();
    if (code === 0) throw new ApiError('invalid_json', 'The request body holds U+0000 (\\u0000) in a string, which PostgreSQL text cannot store.');
    highEnd = code >= 0xd800 && code <= 0xdbff ? escape.lastIndex : -1;
  }
  if (highEnd >= 0) throw lone();
}

/**
 * PostgreSQL's text cannot hold U+0000: a path segment or query value carrying %00 failed the
 * parameter's bind ("invalid byte sequence for encoding UTF8: 0x00", 22021) and was answered 400
 * invalid_json, on a GET with no body. Such a value breaks the field's own rule, so it gets the
 * field's own code, before it reaches SQL.
 */
export function refuseNul(value: string | null | undefined, code: string, message: string): void {
  if (value != null && value.includes('\u0000')) throw new ApiError(code, message);
}

/** The name rule of namespaces, queues, partitions and groups, worded as queen.name_ok_v1's refusals word it. */
export const nameRule = (what: string) => `${what} is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.`;

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Never a tenant under tenancy: the nil UUID (no one), and the default tenant (the cell's own, tenancy off). */
const NIL_TENANT = '00000000-0000-0000-0000-000000000000';

/**
 * The tenant of a data request (the log, the transaction wire, KV, timers). Under tenancy every one
 * of them names it in x-queen-tenant, and everything it reaches is that tenant's alone; the default
 * tenant, which owns every row written with tenancy off, is reachable only with tenancy off.
 */
export function tenantOf(config: Config, req: IncomingMessage): string {
  if (!config.tenancyHeader) return DEFAULT_TENANT;
  const header = req.headers['x-queen-tenant'];
  if (typeof header !== 'string' || !UUID.test(header.trim())) {
    throw new ApiError('tenant_required', 'This cell takes the tenant from the x-queen-tenant header, a UUID.');
  }
  const tenant = header.trim().toLowerCase();
  if (tenant === NIL_TENANT || tenant === DEFAULT_TENANT) {
    throw new ApiError(
      'tenant_required',
      `x-queen-tenant ${tenant} is not a tenant: the nil UUID names no one, and ${DEFAULT_TENANT} is the cell's default tenant, reachable only with tenancy off.`,
    );
  }
  return tenant;
}

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

/** The one place a thrown thing becomes an answer. A 500 is a bug and is logged as one. */
export function errorHandler(log: Logger) {
  return (err: unknown, req: IncomingMessage & { route?: { path?: string } }, res: ServerResponse, _next?: NextFunction): void => {
    const e = err as { type?: string; status?: number; statusCode?: number; message?: string };
    if (e && e.type === 'entity.too.large') {
      return sendError(res, new ApiError('payload_too_large', 'The request body is larger than this cell accepts.'));
    }
    if (e && e.type === INVALID_UTF8) {
      return sendError(res, new ApiError('invalid_json', 'The request body is not valid UTF-8; JSON text is UTF-8 unless Content-Type names another charset.'));
    }
    const expressStatus = e?.status ?? e?.statusCode;
    if (expressStatus && expressStatus >= 400 && expressStatus < 500 && !(err instanceof ApiError)) {
      // Express and body-parser refusals (bad percent-encoding, unsupported charset, aborted body).
      return sendError(res, new ApiError('bad_request', e.message ?? 'Bad request.', { status: expressStatus === 404 ? 400 : expressStatus }));
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
