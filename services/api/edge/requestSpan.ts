// The server span of one request, when tracing is on (shared/tracing.ts, docs/tracing.md): named
// by the route's template, never its path (a path holds keys), ended with the answer's status and
// code. A request the sampler leaves out carries no context at all.
import { context, trace, Tracer } from '@opentelemetry/api';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { endRequestSpan, startRequestSpan } from '../../../shared/tracing';
import { isUuid } from '../../../shared/uuid';
import { REFUSAL_CODES } from '../admission/guards';
import { KV_BATCH, KV_PATH } from '../routes/kv';
import { PUSH_ROUTES } from '../routes/log';
import { answeredCode } from './answer';
import { pathOnly } from './requestLog';

/** A request's route as its span names it: a template, never the path (it holds keys) or a 404's text. */
function routeTemplate(req: IncomingMessage): string {
  const path = pathOnly(req.url);
  const matched = (req as { route?: { path: string | string[] } }).route?.path;
  if (typeof matched === 'string') return matched;
  if (Array.isArray(matched)) return matched.includes(path) ? path : matched[0];
  if (path === KV_BATCH || PUSH_ROUTES.some((r) => r.path === path)) return path;
  if (path.startsWith(KV_PATH)) return `${KV_PATH}:ns/*key`;
  if (path === '/console' || path.startsWith('/console/')) return '/console/*';
  return 'unmatched';
}

/** Runs `route` inside a server span, its request and response bound to it so body reads stay in it. */
export function traced(tracer: Tracer, req: IncomingMessage, res: ServerResponse, route: (req: IncomingMessage, res: ServerResponse) => void): void {
  const span = startRequestSpan(tracer, req.method, req.headers);
  // A request the sampler left out costs nothing more: no context to carry (binding the emitters
  // and entering the context are most of tracing's cost), and its statements make no spans.
  if (!span.isRecording()) return route(req, res);
  const ctx = trace.setSpan(context.active(), span);
  context.bind(ctx, req);
  context.bind(ctx, res);
  res.once('close', () => {
    const tenant = req.headers['x-queen-tenant'];
    const code = answeredCode(res) || undefined;
    endRequestSpan(span, {
      method: req.method,
      route: routeTemplate(req),
      status: res.statusCode,
      code,
      tenant: typeof tenant === 'string' && isUuid(tenant) ? tenant : undefined,
      admission: code !== undefined && (REFUSAL_CODES as readonly string[]).includes(code) ? code : undefined,
    });
  });
  context.with(ctx, () => route(req, res));
}
