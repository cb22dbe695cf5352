// The sweeper process: a leaderless daemon, scaled on its own (Procfile `sweeper`, `kubectl scale
// deploy/sweeper`). Until the sweeper issue lands it boots, logs its configuration and waits for
// SIGTERM; the phases (fire timers, prune expired keys, usage rollup) arrive with it.
import { applySchemaLogged, ensureDatabase, loadConfigOrExit } from '../../shared/boot';
import { createLogger } from '../../shared/log';

async function main(): Promise<void> {
  const config = loadConfigOrExit('sweeper');
  const log = createLogger('sweeper', config.logLevel);
  if (!config.databaseUrl) {
    log.fatal('DATABASE_URL is not set: a sweeper joins a cell that already has a database');
    process.exit(1);
  }
  await ensureDatabase(config, log);
  await applySchemaLogged(config, log);
  log.info(
    {
      intervalMs: config.sweeperIntervalMs,
      batch: config.sweeperBatch,
      usageIntervalMs: config.sweeperUsageIntervalMs,
      shards: 64,
      metricsPort: config.sweeperMetricsPort,
      phases: [],
    },
    'config: sweeper',
  );
  const keepAlive = setInterval(() => undefined, 1 << 30);
  process.on('SIGTERM', () => {
    clearInterval(keepAlive);
    log.info('SIGTERM: stopping');
    process.exit(0);
  });
}

main().catch((err) => {
  createLogger('sweeper').fatal({ err: { message: err?.message } }, `boot failed: ${err?.message ?? err}`);
  process.exit(1);
});
