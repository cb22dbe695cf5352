// The release command (`npm run migrate`, the Procfile's `release:` line, the Kubernetes Job in
// deploy/k8s/migrate-job.yaml): applies the pending migrations to DATABASE_URL and exits, before the
// new `web` and `sweeper` processes start. It uses the boot's own mechanism (shared/migrations.ts:
// each pending sql/ file once, in order, under the schema advisory lock, waiting up to
// QUEEN_DB_BOOT_WAIT_MS for a database that is not up yet), so running it beside booting cells, or
// twice, is safe. `--reapply-baseline` runs the baseline's (idempotent) files again: once, after
// the last process of a release from before versioning has stopped (docs/deploy.md). Exit 0 when applied;
// exit 1 with one line naming the database (host:port/name, never the credentials) otherwise.
import { applySchemaLogged, databaseTarget, loadConfigOrExit } from '../shared/boot';
import { createLogger } from '../shared/log';

async function main(): Promise<void> {
  const config = loadConfigOrExit('migrate');
  // The last line is the verdict a release log shows: written before the exit, in order.
  const log = createLogger('migrate', config.logLevel, { sync: true });
  const exit = (code: number) => process.exit(code);
  if (!config.databaseUrl) {
    log.fatal('DATABASE_URL is not set: the release command applies the schema to the cell\'s PostgreSQL, so it needs its URL');
    return exit(1);
  }
  const database = databaseTarget(config.databaseUrl);
  try {
    await applySchemaLogged(config, log, true, { reapplyBaseline: process.argv.includes('--reapply-baseline') });
  } catch (err) {
    log.fatal({ database, err: { message: (err as Error)?.message } }, `migrate: the schema could not be applied to ${database}: ${(err as Error)?.message ?? err}`);
    return exit(1);
  }
  log.info({ database }, `migrate: the schema is applied to ${database}`);
  exit(0);
}

void main();
