// One line per request: id, method, path, status, time. Never the body, the query string or the
// headers: `?prefix=quota:acme:` in an access log is exactly the leak the KV path routes refuse query
// strings for, so the line carries the path up to the `?` only, on every route,
// including the ones that refuse the query string.
//
// Built on pino directly rather than pino-http: pino-http makes two child loggers per request (their
// bindings serialised up front) whether or not the line is ever written. bench:kv measured that at
// about a tenth of the API's CPU on a KV get; here nothing is built unless the level is on.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../../../shared/log';
import type { ApiMetrics } from '../../../shared/metrics';
import { answeredCode } from './answer';

/** An incoming id is kept when it is short and plain; anything else is replaced, never echoed. */
const REQUEST_ID = /^[A-Za-z0-9._:@/+=-]{1,128}$/;

export function pathOnly(url: string | undefined): string {
  if (!url) return '';
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}

/** Probes and scrapes come every few seconds from the platform; they are debug, not traffic. */
const QUIET = new Set(['/health', '/ready', '/metrics', '/metrics/prometheus']);

const SURFACES = ['kv', 'timers', 'transaction', 'system'];

/** The part of the API a path belongs to, the `surface` label of queen_http_responses_total: a closed set. */
export function surfaceOf(path: string): string {
  if (QUIET.has(path)) return 'probe';
  if (!path.startsWith('/api/v1/')) return 'other';
  const slash = path.indexOf('/', 8);
  const first = path.slice(8, slash < 0 ? undefined : slash);
  return SURFACES.includes(first) ? first : 'log';
}

export function requestLog(log: Logger, metrics: ApiMetrics) {
  return (req: IncomingMessage, res: ServerResponse): void => {
    const incoming = req.headers['x-request-id'];
    const id = typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID();
    res.setHeader('x-request-id', id);
    const url = req.url;
    const started = Date.now();
    // 'close' comes once per response: after it is sent, or when the client went away first.
    res.once('close', () => {
      const path = pathOnly(url);
      metrics.httpResponses.inc({ surface: surfaceOf(path), status: String(res.statusCode), code: answeredCode(res) });
      // A 503 is one of the documented refusals (a pause, the KV pool or the database unavailable,
      // a drain), each with Retry-After: worth a warning, not the error line of a bug, which would
      // page whoever alerts on errors once per call for as long as an operator's pause lasts.
      const refused = res.statusCode === 503;
      const failed = res.statusCode >= 500 && !refused;
      const level = failed ? 'error' : refused ? 'warn' : QUIET.has(path) ? 'debug' : 'info';
      if (!log.isLevelEnabled(level)) return;
      const line = { req: { id, method: req.method, path }, res: { statusCode: res.statusCode }, responseTime: Date.now() - started };
      const completed = !req.readableAborted && res.writableFinished;
      log[level](line, failed ? 'request errored' : refused ? 'request refused' : completed ? 'request completed' : 'request aborted');
    });
  };
}
