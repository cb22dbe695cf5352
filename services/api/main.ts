// The API process: a node:cluster primary that boots the database side once (embedded PostgreSQL
// when DATABASE_URL is unset, the schema, the connection budget), then forks QUEEN_WORKERS workers
// that share the port. In the all-in-one start (no DATABASE_URL) it also runs one sweeper process
// beside them, unless QUEEN_SWEEPER=false.
import cluster, { Worker } from 'node:cluster';
import { spawn, ChildProcess } from 'node:child_process';
import path from 'node:path';
import { applySchemaLogged, checkConnectionBudget, databaseTarget, ensureDatabase, loadConfigOrExit } from '../../shared/boot';
import { Config, directUrl, queryTimeoutMs } from '../../shared/config';
import { createLogger, Logger } from '../../shared/log';
import { installMetricsAggregation } from './clusterMetrics';
import { poolSizesPerWorker, startApiServer } from './server';
import { relaySwitchesInPrimary } from './switches/relay';
import { LEASE_SECONDS, LEASE_TTL_MS } from './rate/lease';
import { ownRateLimitsInPrimary } from './rate/owner';
import { RateStore } from './rate/store';
import { usage } from '../../shared/usage';
import { startTracing, stopTracing, tracingOffReason } from '../../shared/tracing';

function logKvTimersConfig(config: Config, log: Logger, rates: RateStore): void {
  const sizes = poolSizesPerWorker(config);
  log.info(
    {
      workers: config.workers,
      messagePoolPerWorker: sizes.message,
      kvPoolPerWorker: sizes.kv,
      kvAcquireTimeoutMs: config.kvAcquireTimeoutMs,
      kvStatementTimeoutMs: config.kvStatementTimeoutMs,
      grantMode: config.kvRequireGrant ? 'require-grant' : 'open',
      tenancy: config.tenancyHeader ? 'x-queen-tenant header (trusted proxy)' : `default tenant`,
      rateLimitsPerCell: {
        readsPerSec: config.kvReadsPerSec,
        readsBurst: config.kvReadsBurst,
        writesPerSec: config.kvWritesPerSec,
        writesBurst: config.kvWritesBurst,
        cellOpsPerSec: config.kvCellOpsPerSec,
      },
      // The topology this process sees: one bucket per tenant per cell, whatever it is.
      rateLimitsTopology: {
        workers: config.workers,
        processesSeen: rates.mode.processes,
        sharedStore: rates.mode.fallback ? 'unreachable: local share' : 'postgresql (queen.kv_rate_bucket)',
        leaseSeconds: LEASE_SECONDS,
        leaseTtlMs: LEASE_TTL_MS,
      },
      rateLimitsShare:
        `one bucket per tenant and scope for the whole cell: the ${config.workers} workers lease tokens from this primary, which leases them from ` +
        `the buckets all ${rates.mode.processes} process(es) seen share in PostgreSQL; a call needing more than a bucket's burst is 400 rate_limit_exceeds_burst; ` +
        `without PostgreSQL this process enforces 1/(processes seen) of every limit`,
      timersMaxHorizonSeconds: config.timersMaxHorizonSeconds,
      timersMaxPayloadBytes: config.timersMaxPayloadBytes,
      kvMaxBatch: config.kvMaxBatch,
      kvPrefixLimit: config.kvPrefixLimit,
      kvMaxReadBytes: config.kvMaxReadBytes,
      // Memory and time bounds (README, "Security and limits").
      maxBodyBytes: config.maxBodyBytes,
      maxInflightBodyBytesPerWorker: config.maxInflightBodyBytes,
      dbStatementTimeoutMs: config.dbStatementTimeoutMs,
      dbLockTimeoutMs: config.dbLockTimeoutMs,
      dbAcquireTimeoutMs: config.dbAcquireTimeoutMs,
      queryTimeoutMs: { message: queryTimeoutMs(config.dbStatementTimeoutMs), kv: queryTimeoutMs(config.kvStatementTimeoutMs) },
      healthTimeoutMs: config.healthTimeoutMs,
      readyToleranceMs: config.readyToleranceMs,
      // PgBouncer (docs/deploy.md): settings per connection (session) or per transaction, and where LISTEN goes.
      dbPooling: config.dbPooling,
      listenTarget: databaseTarget(directUrl(config)),
    },
    'config: kv_timers',
  );
  for (const name of config.retiredVariablesSet) {
    log.warn({ variable: name }, `${name} is set but does nothing: KV and timers are on every cell; pause them with POST /api/v1/system/kv-timers`);
  }
}

async function primary(): Promise<void> {
  const config = loadConfigOrExit('api');
  const log = createLogger('api', config.logLevel);
  const allInOne = !config.databaseUrl;
  // A dead embedded PostgreSQL that cannot be started again ends the cell with a line that says so
  // (until the drain below exists, at once).
  let lostDatabase = (err: Error): void => {
    log.fatal({ err: { message: err.message } }, `${err.message}; the process exits`);
    process.exit(1);
  };
  const embedded = await ensureDatabase(config, log, (err) => lostDatabase(err));
  await applySchemaLogged(config, log);
  const sizes = poolSizesPerWorker(config);
  // Per worker: its two pools plus its LISTEN clients (push wake-ups, switch announcements); plus
  // the primary's schema connection and one sweeper of the all-in-one start.
  // The primary's one connection to the shared rate buckets (rate/store.ts) opens after the schema's closed.
  // Behind a transaction pooler the pools connect to it, not to the server: its max_client_conn and
  // default_pool_size are the budget, which the server's max_connections says nothing about.
  if (config.dbPooling === 'session') await checkConnectionBudget(config, config.workers * (sizes.message + sizes.kv + 2) + 4, log);
  if (config.dbPooling === 'transaction' && config.databaseListenUrl === undefined) {
    log.warn('QUEEN_DB_POOLING=transaction without DATABASE_LISTEN_URL: LISTEN goes through DATABASE_URL; behind PgBouncer in transaction mode notifications are lost and switch flips and pushes are seen only by polling. Set DATABASE_LISTEN_URL to a direct connection');
  }
  const rates = new RateStore(config, log);
  await rates.start();
  logKvTimersConfig(config, log, rates);

  let sweeper: ChildProcess | undefined;
  if (allInOne && config.sweeper) {
    sweeper = spawn(process.execPath, [path.resolve(__dirname, '..', 'sweeper', 'main.js')], {
      env: { ...process.env, DATABASE_URL: config.databaseUrl },
      // The IPC channel is only a lifeline: it closes when this process dies, and the sweeper stops then.
      stdio: ['inherit', 'inherit', 'inherit', 'ipc'],
    });
    log.info({ sweeperPid: sweeper.pid }, 'all-in-one start: one sweeper runs beside the API');
  } else if (allInOne) {
    log.warn('QUEEN_SWEEPER=false: no sweeper runs here; expired keys are not pruned and timers do not fire until one does');
  }

  // Kill switches: a flip taken by one worker reaches its siblings through here (switches/relay.ts).
  relaySwitchesInPrimary();
  installMetricsAggregation(log);
  ownRateLimitsInPrimary(rates);
  let stopping = false;
  const restarts: number[] = [];
  // A worker's heap, bounded so its RSS stays under 100 MB under load (bench:kv at 64 clients, one
  // worker, 2026-12-01, every workload in one run: peak RSS with V8's defaults for the old generation
  // and an 8 MB semi-space 86-121 MB; with the old generation growing by at most half its live size
  // between full collections, 88-101 MB; with that and a 4 MB semi-space, 75-89 MB). Why: about 15 MB
  // is live after a full collection, and what requests hold while they wait for PostgreSQL survives
  // young collections and is promoted as soon-to-be garbage (50-60 KB a request for 100 puts); V8
  // lets the old generation grow up to 4x its live size before collecting it when the process is busy
  // (62 MB used, 75 MB committed for 15 MB live). With --heap-growing-percent=50 a full collection
  // comes every 1.5 s instead of every 7 s (8-34 ms each, mostly incremental), the 4 MB semi-space
  // doubles the young collections; HTTP CPU per operation for 100 puts a request stayed at 16-21 µs
  // in every setting. An operator's own flags win.
  const workerFlags = [
    ...(process.execArgv.some((a) => a.startsWith('--max-semi-space-size')) ? [] : ['--max-semi-space-size=4']),
    ...(process.execArgv.some((a) => a.startsWith('--heap-growing-percent')) ? [] : ['--heap-growing-percent=50']),
  ];
  // The workers run this file whatever started the primary (`npm start` loads it from scripts/start.js).
  cluster.setupPrimary({ exec: __filename, args: [], execArgv: [...process.execArgv, ...workerFlags] });
  const fork = (replacing?: number): Worker => {
    const worker = cluster.fork({ DATABASE_URL: config.databaseUrl });
    if (replacing !== undefined) {
      worker.once('listening', () => log.info({ workerPid: worker.process.pid, replaced: replacing }, 'replacement API worker listening'));
    }
    return worker;
  };
  for (let i = 0; i < config.workers; i++) fork();
  cluster.on('exit', (worker, code, signal) => {
    if (stopping) return;
    // Back off when workers die in a loop: a crash at boot must not become a fork storm. Deaths
    // older than a minute are forgiven, so one crash a day restarts at once.
    const now = Date.now();
    while (restarts.length && now - restarts[0] > 60_000) restarts.shift();
    restarts.push(now);
    const delay = restarts.length === 1 ? 0 : Math.min(30_000, 100 * 2 ** (restarts.length - 1));
    log.error({ workerPid: worker.process.pid, code, signal, restartInMs: delay, deathsLastMinute: restarts.length }, 'API worker died; replacing it');
    setTimeout(() => !stopping && fork(worker.process.pid), delay);
  });

  const shutdown = async (signal: string, exitCode = 0) => {
    if (stopping) return;
    stopping = true;
    // From here the embedded server's exit is the stop, not a death to repair.
    embedded?.stopping();
    log.info({ signal }, 'stopping: draining workers');
    const workers = Object.values(cluster.workers ?? {}).filter((w): w is Worker => !!w);
    // A worker closes what is still open at 80 % of the timeout (server.ts) and exits by 95 % on its
    // own; this is the backstop.
    const timer = setTimeout(() => {
      log.error({ timeoutMs: config.shutdownTimeoutMs }, 'workers did not drain in time; killing them');
      for (const w of workers) if (!w.isDead()) w.process.kill('SIGKILL');
      if (sweeper && sweeper.exitCode === null) sweeper.kill('SIGKILL');
    }, config.shutdownTimeoutMs);
    const exited = (child: { once(event: 'exit', fn: (code: number | null, signal: string | null) => void): unknown }) =>
      new Promise<void>((resolve) => child.once('exit', () => resolve()));
    // Every worker stops listening before any drains: the port is closed before a drain tells a
    // client to reconnect, so the client is refused, never queued on a closing port and reset.
    await Promise.all(workers.map((w) => (w.isDead() ? undefined : stopListening(w))));
    await Promise.all([
      ...workers.map((w) => {
        if (w.isDead()) return Promise.resolve();
        const done = exited(w.process);
        w.process.kill('SIGTERM');
        return done;
      }),
      (async () => {
        if (!sweeper || sweeper.exitCode !== null || sweeper.signalCode !== null) return;
        const done = exited(sweeper);
        sweeper.kill('SIGTERM');
        await done;
      })(),
    ]);
    clearTimeout(timer);
    await rates.stop();
    await embedded?.stop();
    log.info('stopped');
    process.exit(exitCode);
  };
  lostDatabase = (err) => {
    log.fatal({ err: { message: err.message } }, `${err.message}; stopping the cell`);
    void shutdown('embedded PostgreSQL lost', 1);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
}

const STOP_LISTENING = 'queen:stop-listening';
const LISTENER_CLOSED = 'queen:listener-closed';

/** Asks a worker to stop accepting connections; resolves when it has (or after a second, or when it dies). */
function stopListening(w: Worker): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      w.off('message', onMessage);
      w.off('exit', done);
      resolve();
    };
    const onMessage = (m: unknown) => (m === LISTENER_CLOSED ? done() : undefined);
    const timer = setTimeout(done, 1000);
    w.on('message', onMessage);
    w.once('exit', done);
    try {
      w.send(STOP_LISTENING);
    } catch {
      done();
    }
  });
}

async function worker(): Promise<void> {
  const config = loadConfigOrExit('api');
  const log = createLogger('api', config.logLevel);
  // Before the pools: their statement spans are wired as they are made (shared/db.ts).
  const tracing = startTracing('queen-kv-api');
  const server = await startApiServer(config, log, poolSizesPerWorker(config));
  log.info({ port: server.port, tracing: tracing ? 'on' : `off (${tracingOffReason()})` }, 'API worker listening');
  let stopping = false;
  const stop = async () => {
    // The primary's SIGTERM and a process-group SIGTERM (nf, a terminal) both arrive: drain once.
    if (stopping) return;
    stopping = true;
    log.info('worker draining: no new connections, finishing the requests in flight');
    // Past the deadline the primary SIGKILLs; exiting first keeps the exit ours and logged.
    setTimeout(() => {
      log.error('worker drain did not finish in time; exiting');
      process.exit(1);
    }, Math.floor(config.shutdownTimeoutMs * 0.95)).unref();
    await server.close();
    await stopTracing();
    log.info('worker drained');
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop());
  process.on('SIGINT', () => undefined); // the primary decides; a terminal's ^C reaches every process
  process.on('message', (m: unknown) => {
    if (m !== STOP_LISTENING) return;
    server.stopListening();
    // After the cluster's own close message on the same channel: the primary has taken this worker off the port.
    process.send?.(LISTENER_CLOSED);
  });
}

if (cluster.isPrimary && process.argv.slice(2).some((a) => a === '--help' || a === '-h')) {
  process.stdout.write(usage());
  process.exit(0);
}
const run = cluster.isPrimary ? primary : worker;
run().catch((err) => {
  createLogger('api').fatal({ err: { message: err?.message, name: err?.name } }, `boot failed: ${err?.message ?? err}`);
  process.exit(1);
});
