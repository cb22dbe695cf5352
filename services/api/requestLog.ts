// One pino-http line per request: id, method, path, status, time. Never the body, the query string
// or the headers: `?prefix=quota:acme:` in an access log is exactly the leak the KV path routes
// refuse query strings for (seeds/kv-routes.md), so the line carries the path up to the `?` only,
// on every route, including the ones that refuse the query string.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { pinoHttp } from 'pino-http';
import type { Logger } from '../../shared/log';

/** An incoming id is kept when it is short and plain; anything else is replaced, never echoed. */
const REQUEST_ID = /^[A-Za-z0-9._:@/+=-]{1,128}$/;

export function pathOnly(url: string | undefined): string {
  if (!url) return '';
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}

/** Probes and scrapes come every few seconds from the platform; they are debug, not traffic. */
const QUIET = new Set(['/health', '/ready', '/metrics', '/metrics/prometheus']);

export function requestLog(log: Logger) {
  return pinoHttp({
    logger: log,
    genReqId(req: IncomingMessage, res: ServerResponse) {
      const incoming = req.headers['x-request-id'];
      const id = typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID();
      res.setHeader('x-request-id', id);
      return id;
    },
    // Raw objects to our own pickers: the standard serializers copy every header and the full URL.
    wrapSerializers: false,
    serializers: {
      req: (req: IncomingMessage & { id?: unknown; originalUrl?: string }) => ({
        id: req.id,
        method: req.method,
        path: pathOnly(req.originalUrl ?? req.url),
      }),
      res: (res: ServerResponse) => ({ statusCode: res.statusCode }),
    },
    customLogLevel(req: IncomingMessage & { originalUrl?: string }, res: ServerResponse, err?: Error) {
      if (err || res.statusCode >= 500) return 'error';
      return QUIET.has(pathOnly(req.originalUrl ?? req.url)) ? 'debug' : 'info';
    },
  });
}
