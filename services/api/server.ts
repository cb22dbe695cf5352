// One API worker: pools, app, HTTP server, and a close that drains. Used by main.ts for each
// cluster worker and by the tests in-process.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Config } from '../../shared/config';
import { createPools, Pools, PoolSizes } from '../../shared/db';
import type { Logger } from '../../shared/log';
import { createMetrics, Metrics, primeMetrics } from '../../shared/metrics';
import { createApp } from './app';

export interface ApiServer {
  url: string;
  port: number;
  pools: Pools;
  metrics: Metrics;
  close(): Promise<void>;
}

export async function startApiServer(config: Config, log: Logger, sizes: PoolSizes, port = config.port): Promise<ApiServer> {
  const pools = createPools(config, sizes, 'queen-api');
  const metrics = createMetrics();
  primeMetrics(metrics);
  let ready = true;
  const app = createApp({ config, pools, log, metrics, isReady: () => ready });
  const server = http.createServer(app);
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, resolve);
  });
  const bound = (server.address() as AddressInfo).port;
  let closing: Promise<void> | undefined;
  return {
    url: `http://127.0.0.1:${bound}`,
    port: bound,
    pools,
    metrics,
    close() {
      closing ??= (async () => {
        ready = false;
        await (app.locals.close as (() => Promise<void>) | undefined)?.();
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeIdleConnections();
        });
        await pools.end();
      })();
      return closing;
    },
  };
}

/**
 * How the process's connection budget is split among its workers: DB_POOL_SIZE and
 * QUEEN_KV_POOL_SIZE are budgets of the whole API process (a cell), not of each worker.
 */
export function poolSizesPerWorker(config: Config): PoolSizes {
  return {
    message: Math.max(2, Math.floor(config.dbPoolSize / config.workers)),
    kv: Math.max(1, Math.ceil(config.kvPoolSize / config.workers)),
  };
}
