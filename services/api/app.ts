// What answers a request in one worker: the KV routes and the push straight from node's request
// (routes/kv.ts says why), everything else through Express 5. server.ts serves it; main.ts runs one per worker.
import express, { Express } from 'express';
import http, { IncomingMessage, ServerResponse } from 'node:http';
import type { Config } from '../../shared/config';
import type { Pools } from '../../shared/db';
import type { Logger } from '../../shared/log';
import type { ApiMetrics } from '../../shared/metrics';
import { errorHandler, notFound, sendError } from './edge/answer';
import { KV_BATCH, KV_PATH, KV_ROUTES, kvRoutes } from './routes/kv';
import { healthRoutes } from './routes/health';
import { openapiRoutes } from './routes/openapi';
import { systemRoutes } from './routes/system';
import { operatorRoutes } from './routes/operator';
import { consoleApp } from './console/console';
import type { Guards } from './admission/guards';
import type { Switches } from './switches/switches';
import type { TenantBook } from './admission/tenantBook';
import { requestLog } from './edge/requestLog';
import { activeTracer } from '../../shared/tracing';
import { traced } from './edge/requestSpan';
import { ApiError, movingRefusal } from '../../shared/errors';
import { logRoutes, PUSH_ROUTES, pushRoute } from './routes/log';
import { transactionRoutes } from './routes/transaction';
import { timerRoutes } from './routes/timers';

/** The operator machinery of one worker: switches, the grant/usage copy, the admission guards. */
export interface OpsHandles {
  switches: Switches;
  book: TenantBook;
  guards: Guards;
}

export interface AppDeps {
  config: Config;
  pools: Pools;
  log: Logger;
  metrics: ApiMetrics;
  isReady?: () => boolean;
  /** Switches, grants and the admission guards every KV and timer route applies (admission/guards.ts). */
  ops: OpsHandles;
  /** The text /metrics serves: the cluster's under node:cluster, this registry's otherwise. */
  metricsText?: () => Promise<string>;
  /** Hears each piece of every request body as it arrives (null: its end); false drops it (edge/bodyBudget.ts). */
  bodyChunk?: (req: IncomingMessage, chunk: Buffer | null) => boolean;
}

export interface App {
  handle(req: IncomingMessage, res: ServerResponse): void;
  /** The classes the HTTP server builds each request and response from (expressShaped below). */
  IncomingMessage: typeof IncomingMessage;
  ServerResponse: typeof ServerResponse;
  /** Called by the server's close before it waits for requests in flight: long polls answer now. */
  close(): Promise<void>;
  /** Every API route served, `{method, path}` in Express's syntax (docs/openapi.yaml is held to it); the console's HTML pages (docs/console.md) are not API routes. */
  routes(): Array<{ method: string; path: string }>;
}

export function createApp(deps: AppDeps): App {
  const { config, pools, log, metrics, ops } = deps;
  const logRequest = requestLog(log, metrics);
  const kv = kvRoutes({ config, kvPool: pools.kv, metrics, log, guards: ops.guards, logRequest });
  const push = pushRoute({ config, messagePool: pools.message, log, metrics, logRequest });
  // The web console (console/console.ts): its own pages, answered before the API's routes; absent without QUEEN_ADMIN_TOKEN.
  const consolePages = consoleApp({ config, pool: pools.message, switches: ops.switches, log });
  const app = express();
  app.disable('x-powered-by');
  // ETags are ours (the KV version on GET), never a hash of the body.
  app.set('etag', false);
  // Nor is any Express answer ever "not modified": res.send asked req.fresh, which holds for any GET
  // with `If-None-Match: *` (no ETag needed), so GET /health, /ready and /metrics answered 304 with
  // no body to a probe or a cache that sent it. The KV's 304 is its own (edge/answer.ts notModified).
  Object.defineProperty(app.request, 'fresh', { configurable: true, enumerable: true, get: () => false });
  // OPTIONS is no route's method, so it gets the 404 not_found any method a path does not take gets:
  // Express's routers answered it by themselves, 200 text/plain with the Allow list.
  app.use((req, res, next) => (req.method === 'OPTIONS' ? notFound(req, res) : next()));
  app.use(openapiRoutes());
  app.use(healthRoutes(pools.message, deps.isReady ?? (() => true), { timeoutMs: config.healthTimeoutMs, toleranceMs: config.readyToleranceMs }));
  app.use(systemRoutes({ config, pool: pools.message, switches: ops.switches, log }));
  app.use(operatorRoutes({ config, pool: pools.message, log }));
  app.use(timerRoutes({ config, pool: pools.kv, metrics, log, guards: ops.guards }));
  const logSurface = logRoutes({ config, messagePool: pools.message, log, metrics, moveRole: (tenant) => ops.book.moveRole(tenant) });
  app.use(logSurface.router);
  app.use(transactionRoutes({ config, messagePool: pools.message, metrics, guards: ops.guards }));
  const metricsText = deps.metricsText ?? (() => metrics.register.metrics());
  app.get(['/metrics', '/metrics/prometheus'], async (_req, res) => {
    let text: string;
    try {
      text = await metricsText();
    } catch (err) {
      // A partial sum would read as a counter reset; a failed scrape is the honest answer.
      throw new ApiError('metrics_unavailable', `The cluster's metrics could not be collected: ${(err as Error).message}.`, { retryAfterSeconds: 1 });
    }
    res.type(metrics.register.contentType).send(text);
  });

  app.use(notFound);
  app.use(errorHandler(log));
  // A tenant moving between cells (queen.tenant_moves, docs/scaling.md): every data call of it is
  // refused here, before any route reads its body or runs a statement, the one place every data route
  // passes (the KV and push routes are answered before Express). Operator routes are not a tenant's.
  const moving = (req: IncomingMessage, res: ServerResponse): boolean => {
    if (!config.tenancyHeader) return false;
    const header = req.headers['x-queen-tenant'];
    if (typeof header !== 'string') return false;
    const role = ops.book.moveRole(header.trim().toLowerCase());
    if (role === undefined || !req.url?.startsWith('/api/v1/') || req.url.startsWith('/api/v1/system/')) return false;
    logRequest(req, res);
    sendError(res, movingRefusal(role));
    return true;
  };
  const route = (req: IncomingMessage, res: ServerResponse): void => {
    if (moving(req, res)) return;
    if (kv(req, res) || push(req, res)) return;
    logRequest(req, res);
    if (consolePages(req, res)) return;
    app(req, res);
  };
  return {
    handle(req, res) {
      const tracer = activeTracer();
      if (tracer === undefined) return route(req, res);
      traced(tracer, req, res, route, directRouteTemplate);
    },
    close: () => logSurface.close(),
    routes: () => [...KV_ROUTES, ...PUSH_ROUTES, ...expressRoutes(app)],
    ...expressShaped(app, deps.bodyChunk),
  };
}

/** The span name of a route answered before Express (the KV, push and console listeners above). */
function directRouteTemplate(path: string): string | undefined {
  if (path === KV_BATCH || PUSH_ROUTES.some((r) => r.path === path)) return path;
  if (path.startsWith(KV_PATH)) return `${KV_PATH}:ns/*key`;
  if (path === '/console' || path.startsWith('/console/')) return '/console/*';
  return undefined;
}

interface RouterLayer {
  route?: { path: string | string[]; methods: Record<string, boolean> };
  handle?: { stack?: RouterLayer[] };
}

/** The routes registered on the Express app, from its router stack (routers mounted at the root). */
function expressRoutes(app: Express): Array<{ method: string; path: string }> {
  const found: Array<{ method: string; path: string }> = [];
  const walk = (stack: RouterLayer[]) => {
    for (const layer of stack) {
      if (layer.route) {
        const paths = Array.isArray(layer.route.path) ? layer.route.path : [layer.route.path];
        for (const path of paths) {
          for (const [method, on] of Object.entries(layer.route.methods)) if (on) found.push({ method: method.toUpperCase(), path });
        }
      } else if (layer.handle?.stack) {
        walk(layer.handle.stack);
      }
    }
  };
  walk((app as unknown as { router: { stack: RouterLayer[] } }).router.stack);
  return found;
}

/**
 * Request and response classes born with Express's prototypes. Express's app.handle sets the
 * prototype of every request and response it routes (Object.setPrototypeOf); V8 answers by migrating
 * the object to a new map, after which property accesses in node's http code, in Express and in ours
 * miss their inline caches and optimized code is thrown away and rebuilt. A perf profile of the API
 * under push load was LookupIterator, LoadIC misses, MigrateToMap and TurboFan recompiling. When the
 * object already has that prototype, Express's set changes nothing.
 */
function expressShaped(
  app: Express,
  bodyChunk?: (req: IncomingMessage, chunk: Buffer | null) => boolean,
): { IncomingMessage: typeof IncomingMessage; ServerResponse: typeof ServerResponse } {
  class Request extends http.IncomingMessage {
    // Node's HTTP parser hands every piece of a body to push(), whoever reads it and however
    // (body-parser, a route that ignores it, node's own discard): the one place to count it.
    override push(chunk: Buffer | null, encoding?: BufferEncoding): boolean {
      if (bodyChunk !== undefined && !bodyChunk(this, chunk)) return false;
      return super.push(chunk, encoding);
    }
  }
  class Response extends http.ServerResponse {}
  // Express's per-app request and response objects become these classes' prototypes: the same
  // chain and the same own properties (`app`), set once at boot; Express then sets the prototype
  // each request and response already has.
  for (const [cls, proto] of [
    [Request, app.request],
    [Response, app.response],
  ] as const) {
    Object.setPrototypeOf(cls.prototype, Object.getPrototypeOf(proto));
    Object.defineProperties(cls.prototype, Object.getOwnPropertyDescriptors(proto));
  }
  app.request = Request.prototype as unknown as Express['request'];
  app.response = Response.prototype as unknown as Express['response'];
  return { IncomingMessage: Request, ServerResponse: Response as unknown as typeof ServerResponse };
}
