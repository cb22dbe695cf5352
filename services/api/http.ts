// What every route shares: the JSON body reader, the error answer, the tenant.
import type { Request, Response, NextFunction, RequestHandler } from 'express';
import express from 'express';
import { ApiError, coerceError, PreconditionFailed } from '../../shared/errors';
import { DEFAULT_TENANT, Config } from '../../shared/config';
import type { Logger } from '../../shared/log';

/** The raw body as text: numbers must reach PostgreSQL exactly as the client wrote them. */
export function rawBody(config: Config): RequestHandler {
  return express.text({ type: () => true, limit: config.maxBodyBytes, defaultCharset: 'utf-8' });
}

export function bodyText(req: Request): string {
  return typeof req.body === 'string' ? req.body : '';
}

/** JSON.parse for validation and routing only; the text itself is what travels on. */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError('invalid_json', 'The request body is not valid JSON.');
  }
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function tenantOf(config: Config, req: Request): string {
  if (!config.tenancyHeader) return DEFAULT_TENANT;
  const header = req.get('x-queen-tenant');
  if (!header || !UUID.test(header.trim())) {
    throw new ApiError('tenant_required', 'This cell takes the tenant from the x-queen-tenant header, a UUID.');
  }
  return header.trim().toLowerCase();
}

export function sendJsonText(res: Response, status: number, text: string): void {
  res.status(status).type('application/json').send(text);
}

export function sendError(res: Response, err: ApiError): void {
  if (err.extra.retryAfterSeconds !== undefined) res.set('Retry-After', String(err.extra.retryAfterSeconds));
  res.status(err.status).json(err.body());
}

/** The one place a thrown thing becomes an answer. A 500 is a bug and is logged as one. */
export function errorHandler(log: Logger) {
  return (err: unknown, req: Request, res: Response, _next: NextFunction): void => {
    const e = err as { type?: string; status?: number; statusCode?: number; message?: string };
    if (e && e.type === 'entity.too.large') {
      return sendError(res, new ApiError('payload_too_large', 'The request body is larger than this cell accepts.'));
    }
    const expressStatus = e?.status ?? e?.statusCode;
    if (expressStatus && expressStatus >= 400 && expressStatus < 500 && !(err instanceof ApiError)) {
      // Express and body-parser refusals (bad percent-encoding, unsupported charset, aborted body).
      return sendError(res, new ApiError('bad_request', e.message ?? 'Bad request.', { status: expressStatus === 404 ? 400 : expressStatus }));
    }
    const coerced = coerceError(err);
    if (coerced instanceof PreconditionFailed) return sendJsonText(res, 200, coerced.bodyText());
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
