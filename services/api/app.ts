// The Express 5 app factory. Tests run it in-process; main.ts serves it under node:cluster.
import express, { Express } from 'express';
import type { Config } from '../../shared/config';
import type { Pools } from '../../shared/db';
import type { Logger } from '../../shared/log';
import type { Metrics } from '../../shared/metrics';
import { errorHandler, notFound } from './http';
import { kvRoutes } from './routes/kv';
import { healthRoutes } from './routes/health';
import { logRoutes } from './routes/log';
import { transactionRoutes } from './routes/transaction';

export interface AppDeps {
  config: Config;
  pools: Pools;
  log: Logger;
  metrics: Metrics;
  isReady?: () => boolean;
}

export function createApp(deps: AppDeps): Express {
  const { config, pools, log, metrics } = deps;
  const app = express();
  app.disable('x-powered-by');
  // ETags are ours (the KV version on GET), never a hash of the body.
  app.set('etag', false);

  app.use(healthRoutes(pools.message, deps.isReady ?? (() => true)));
  app.use(kvRoutes({ config, kvPool: pools.kv, metrics }));
  const logSurface = logRoutes({ config, messagePool: pools.message, log });
  app.use(logSurface.router);
  app.use(transactionRoutes({ config, messagePool: pools.message, metrics }));
  // Called by the server's close before it waits for requests in flight: long polls answer now.
  app.locals.close = () => logSurface.close();
  app.get(['/metrics', '/metrics/prometheus'], async (_req, res) => {
    res.type(metrics.register.contentType).send(await metrics.register.metrics());
  });

  app.use(notFound);
  app.use(errorHandler(log));
  return app;
}
