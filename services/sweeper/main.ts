// The sweeper process: a leaderless daemon, scaled on its own (Procfile `sweeper`, `kubectl scale
// deploy/sweeper`). Its metrics endpoint is up before anything else, so its own families (the
// prune's, the fire's, the log's and its cycles': createSweeperMetrics, none of the API's) answer
// from its first second. SIGTERM: stop claiming, let the pass in flight commit, exit 0.
import { Pool } from 'pg';
import { applySchemaLogged, loadConfigOrExit } from '../../shared/boot';
import { directUrl } from '../../shared/config';
import { createPool, traceStatements } from '../../shared/db';
import { startTracing, stopTracing, tracingOffReason } from '../../shared/tracing';
import { createLogger } from '../../shared/log';
import client from 'prom-client';
import { createSweeperMetrics, primeSweeperMetrics } from '../../shared/metrics';
import { startMetricsServer } from './metricsServer';
import { DEFAULT_SLOW_PASS_MS } from './pressure';
import { DEFAULT_SHARDS_PER_PASS, Sweeper } from './sweeper';

async function main(): Promise<void> {
  const config = loadConfigOrExit('sweeper');
  const log = createLogger('sweeper', config.logLevel);
  if (!config.databaseUrl) {
    log.fatal('DATABASE_URL is not set: a sweeper joins a cell that already has a database');
    process.exit(1);
  }
  const metrics = createSweeperMetrics();
  client.collectDefaultMetrics({ register: metrics.register });
  primeSweeperMetrics(metrics);
  const metricsServer = await startMetricsServer(metrics.register, config.sweeperMetricsPort);
  log.info({ port: metricsServer.port }, 'sweeper metrics listening');

  let sweeper: Sweeper | undefined;
  let pool: Pool | undefined;
  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'stopping: finishing the pass in flight');
    const deadline = setTimeout(() => {
      log.error({ timeoutMs: config.shutdownTimeoutMs }, 'the pass in flight did not finish in time; exiting (it rolls back)');
      process.exit(1);
    }, config.shutdownTimeoutMs);
    await sweeper?.stop();
    await pool?.end().catch(() => undefined);
    await stopTracing();
    await metricsServer.close();
    clearTimeout(deadline);
    log.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  // The all-in-one start spawns this process with an IPC channel: when that parent dies without
  // stopping it (SIGKILL, OOM), the channel closes and this sweeper stops too, instead of living on
  // as an orphan against whatever answers on the embedded port next.
  if (process.connected) {
    process.on('disconnect', () => {
      log.warn('the API process that started this sweeper is gone; stopping');
      void shutdown('parent gone');
    });
  }

  await applySchemaLogged(config, log);
  const tracing = startTracing('queen-kv-sweeper');
  // One connection for the passes, one for the rollup and gauges between them, one spare.
  pool = createPool(config, { connectionString: config.databaseUrl, max: 3, application_name: 'queen-sweeper' });
  traceStatements(pool, 'sweeper');
  pool.on('error', (err) => log.warn({ err: { message: err.message } }, 'idle sweeper connection lost'));
  sweeper = new Sweeper({
    pool,
    databaseUrl: directUrl(config),
    log,
    metrics,
    intervalMs: config.sweeperIntervalMs,
    batch: config.sweeperBatch,
    fireBatch: config.sweeperFireBatch,
    usageIntervalMs: config.sweeperUsageIntervalMs,
    retentionSeconds: config.logRetentionSeconds,
  });
  log.info(
    {
      sweeperId: sweeper.id,
      intervalMs: config.sweeperIntervalMs,
      batch: config.sweeperBatch,
      fireBatch: config.sweeperFireBatch,
      usageIntervalMs: config.sweeperUsageIntervalMs,
      logRetentionSeconds: config.logRetentionSeconds,
      shards: 64,
      shardsPerPass: DEFAULT_SHARDS_PER_PASS,
      slowPassMs: DEFAULT_SLOW_PASS_MS,
      metricsPort: metricsServer.port,
      phases: ['fire', 'prune', 'usage'],
      dbPooling: config.dbPooling,
      shedOrder: ['prune', 'usage'],
      tracing: tracing ? 'on' : `off (${tracingOffReason()})`,
    },
    'config: sweeper',
  );
  if (stopping) return;
  sweeper.start();
}

main().catch((err) => {
  createLogger('sweeper').fatal({ err: { message: err?.message } }, `boot failed: ${err?.message ?? err}`);
  process.exit(1);
});
