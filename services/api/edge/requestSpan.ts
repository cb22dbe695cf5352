// The server span of one request, when tracing is on (shared/tracing.ts, docs/tracing.md): named
// by the route's template, never its path (a path holds keys), ended with the answer's status and
// code. A request the sampler leaves out carries no context at all.
import { context, trace, Tracer } from '@opentelemetry/api';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ADMISSION_REFUSAL_CODES } from '../../../shared/errors';
import { endRequestSpan, startRequestSpan } from '../../../shared/tracing';
import { isUuid } from '../../../shared/uuid';
import { answeredCode } from './answer';
import { pathOnly } from './requestLog';

/** The template of a route answered before Express, from its path; undefined for any other path. */
export type DirectRouteTemplate = (path: string) => string | undefined;

/** A request's route as its span names it: a template, never the path (it holds keys) or a 404's text. */
function routeTemplate(req: IncomingMessage, direct: DirectRouteTemplate): string {
  const path = pathOnly(req.url);
  const matched = (req as { route?: { path: string | string[] } }).route?.path;
  if (typeof matched === 'string') return matched;
  if (Array.isArray(matched)) return matched.includes(path) ? path : matched[0];
  return direct(path) ?? 'unmatched';
}

/** Runs `route` inside a server span, its request and response bound to it so body reads stay in it. */
export function traced(
  tracer: Tracer,
  req: IncomingMessage,
  res: ServerResponse,
  route: (req: IncomingMessage, res: ServerResponse) => void,
  direct: DirectRouteTemplate,
): void {
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
      route: routeTemplate(req, direct),
      status: res.statusCode,
      code,
      tenant: typeof tenant === 'string' && isUuid(tenant) ? tenant : undefined,
      admission: code !== undefined && (ADMISSION_REFUSAL_CODES as readonly string[]).includes(code) ? code : undefined,
    });
  });
  context.with(ctx, () => route(req, res));
}
