// Configuration is parsed once, here, and a malformed value stops the boot with a sentence that
// names the variable. Never `Number(process.env.X || d)`: a typo must not become a silent NaN.
import os from 'node:os';

export const DEFAULT_TENANT = '00000000-0000-0000-0000-000000000001';

export const DEFAULTS = {
  port: 6632,
  dbPoolSize: 160,
  kvAcquireTimeoutMs: 1000,
  kvStatementTimeoutMs: 5000,
  kvPrefixLimit: 1000,
  kvMaxReadBytes: 4 * 1024 * 1024,
  kvMaxBatch: 1000,
  // Memory and time bounds (README, "Security and limits"; the numbers behind them are there).
  // The body ceiling was 72 MiB (a full KV batch of 1000 values of 64 KiB): one such push took a
  // PostgreSQL backend to about 1.3 GB, and 16 of them at once a worker to 1.6 GB and the OOM killer.
  // 4 MiB: a push of that size took a PostgreSQL backend to about 95 MiB of private memory
  // (test/limits/memory.test.ts, 2026-12-01: the backend's memory is about 24 times the body).
  maxBodyBytes: 4 * 1024 * 1024,
  // Four bodies of the largest size at once per worker; a body costs the worker about 3 times its
  // size while it is parsed and sent on (the same test), so about 50 MiB above its baseline.
  maxInflightBodyBytes: 16 * 1024 * 1024,
  dbStatementTimeoutMs: 10_000,
  dbLockTimeoutMs: 5000,
  dbAcquireTimeoutMs: 5000,
  healthTimeoutMs: 2000,
  readyToleranceMs: 10_000,
  kvReadsPerSec: 200,
  kvReadsBurst: 400,
  kvWritesPerSec: 100,
  kvWritesBurst: 200,
  kvCellOpsPerSec: 5000,
  timersMaxHorizonSeconds: 365 * 24 * 3600,
  timersMaxPayloadBytes: 64 * 1024,
  sweeperIntervalMs: 1000,
  sweeperBatch: 500,
  sweeperFireBatch: 2000,
  sweeperUsageIntervalMs: 60_000,
  // The ports beside PORT follow it (portsFromPort): the sweeper's metrics on PORT+1, the embedded
  // PostgreSQL on PORT+7, so 6633 and 6639 beside the default 6632, and a second cell started with
  // another PORT collides with nothing of the first.
  sweeperMetricsPortOffset: 1,
  // The message log's retention for queues configured without one: 7 days (docs/operations.md,
  // "Sizing retention"). A week covers a weekend's outage of a consumer with days to spare; at
  // 1,000 messages a second of 1 KiB it is about 1.1 TB, which is what an operator sizes the disk for.
  logRetentionSeconds: 7 * 24 * 3600,
  shutdownTimeoutMs: 10_000,
  // How long a booting process waits for a database that is not up yet (refused, starting up).
  dbBootWaitMs: 30_000,
  embeddedPgPortOffset: 7,
} as const;

/**
 * The sweeper's metrics port and the embedded PostgreSQL's port when their own variables are unset:
 * PORT+1 and PORT+7. PORT=0 (any free port) makes both 0 too, and so does a sum past 65535: a port
 * chosen free at boot, which the boot log names.
 */
export function portsFromPort(port: number): { sweeperMetricsPort: number; embeddedPgPort: number } {
  const follow = (offset: number) => (port === 0 || port + offset > 65535 ? 0 : port + offset);
  return { sweeperMetricsPort: follow(DEFAULTS.sweeperMetricsPortOffset), embeddedPgPort: follow(DEFAULTS.embeddedPgPortOffset) };
}

export interface Config {
  databaseUrl: string | undefined;
  port: number;
  workers: number;
  dbPoolSize: number;
  kvPoolSize: number;
  kvAcquireTimeoutMs: number;
  kvStatementTimeoutMs: number;
  kvPrefixLimit: number;
  kvMaxReadBytes: number;
  kvMaxBatch: number;
  maxBodyBytes: number;
  /** Per worker: the request bodies being read or held past this are refused 503 server_busy. */
  maxInflightBodyBytes: number;
  /** The message pool's limits: SET LOCAL per transaction, acquire wait, and the client-side backstop. */
  dbStatementTimeoutMs: number;
  dbLockTimeoutMs: number;
  dbAcquireTimeoutMs: number;
  healthTimeoutMs: number;
  /** /ready stays 200 while the database answered any statement this recently, its own probe slow or not. */
  readyToleranceMs: number;
  kvReadsPerSec: number;
  kvReadsBurst: number;
  kvWritesPerSec: number;
  kvWritesBurst: number;
  kvCellOpsPerSec: number;
  tenancyHeader: boolean;
  /** QUEEN_MIGRATE_ON_BOOT: web and sweeper apply pending migrations at boot (1), or wait for the release command (0). */
  migrateOnBoot: boolean;
  kvTrustedProxy: boolean;
  kvRequireGrant: boolean;
  timersMaxHorizonSeconds: number;
  timersMaxPayloadBytes: number;
  sweeper: boolean;
  sweeperIntervalMs: number;
  sweeperBatch: number;
  /** Due timers moved into the log per fire pass, cell-wide (the prune batch is per shard). */
  sweeperFireBatch: number;
  sweeperUsageIntervalMs: number;
  sweeperMetricsPort: number;
  /** QUEEN_LOG_RETENTION_SECONDS: the log's retention for queues without their own; 0 keeps them forever. */
  logRetentionSeconds: number;
  shutdownTimeoutMs: number;
  dbBootWaitMs: number;
  dataDir: string;
  /** 0: a free port chosen at boot (PORT=0), logged. */
  embeddedPgPort: number;
  logLevel: string;
  /** When set, every /api/v1/system/* route asks for `Authorization: Bearer <it>`. Never logged. */
  adminToken: string | undefined;
  /** Variables retired by the kill switches; set, they do nothing and the boot log says so. */
  retiredVariablesSet: string[];
  /**
   * QUEEN_ENCRYPTION_KEY (and QUEEN_ENCRYPTION_KEY_PREVIOUS, during a rotation): the AES-256-GCM keys
   * payloads of encrypted queues are sealed with (services/api/seal/). Unset: no queue may ask for
   * encryption. Held in private fields, so neither JSON nor util.inspect of the config shows them.
   */
  encryptionKeys: EncryptionKeys | undefined;
  // PgBouncer (docs/deploy.md): how the pools send their settings, and where LISTEN connects.
  /** `session`: settings sent at connect, named statements. `transaction`: per transaction, unnamed. */
  dbPooling: DbPooling;
  /** DATABASE_LISTEN_URL: a direct (not pooled) connection for LISTEN; unset, DATABASE_URL (directUrl()). */
  databaseListenUrl: string | undefined;
}

/** The encryption keys, out of reach of any serialisation of the config (private fields). */
export class EncryptionKeys {
  readonly #current: Buffer;
  readonly #previous: Buffer | undefined;
  constructor(current: Buffer, previous: Buffer | undefined) {
    this.#current = current;
    this.#previous = previous;
  }
  /** The key new payloads are sealed with. */
  current(): Buffer {
    return this.#current;
  }
  /** Every key a sealed payload may have been sealed with: the current, then the previous. */
  all(): Buffer[] {
    return this.#previous ? [this.#current, this.#previous] : [this.#current];
  }
  toJSON(): string {
    return '[encryption keys]';
  }
}

/** A 256-bit key as 64 hex digits; a malformed one stops the boot naming the variable, never echoing it. */
function encryptionKey(env: Env, name: string): Buffer | undefined {
  const raw = env[name]?.trim();
  if (!raw) return undefined;
  if (!/^[0-9a-fA-F]{64}$/.test(raw)) throw new ConfigError(name, 'must be 64 hex digits (a 256-bit key); the value is not shown.');
  return Buffer.from(raw, 'hex');
}

export class ConfigError extends Error {
  constructor(readonly variable: string, sentence: string) {
    super(`${variable}: ${sentence}`);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

export const DB_POOLING = ['session', 'transaction'] as const;
export type DbPooling = (typeof DB_POOLING)[number];

/**
 * The direct (never pooled) connection: DATABASE_LISTEN_URL, else DATABASE_URL (read late: an embedded
 * start sets it after the parse). LISTEN and the migrations (a session advisory lock, CREATE INDEX
 * CONCURRENTLY) need one; behind PgBouncer's transaction pooling neither works through the pooler.
 */
export function directUrl(config: Config): string | undefined {
  return config.databaseListenUrl ?? config.databaseUrl;
}

function int(env: Env, name: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  if (!/^-?\d+$/.test(raw.trim())) {
    throw new ConfigError(name, `must be a whole number, got ${JSON.stringify(raw)}.`);
  }
  const value = Number(raw.trim());
  if (value < min) throw new ConfigError(name, `cannot be less than ${min}, got ${value}.`);
  if (value > max) throw new ConfigError(name, `cannot be more than ${max}, got ${value}.`);
  return value;
}

function bool(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const v = raw.trim().toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(v)) return true;
  if (['0', 'false', 'no', 'off'].includes(v)) return false;
  throw new ConfigError(name, `must be one of 1, 0, true, false, got ${JSON.stringify(raw)}.`);
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** The default derivation: clamp(DB_POOL_SIZE / 10, 4, 32); 16 on the default 160. */
export function deriveKvPoolSize(dbPoolSize: number): number {
  return Math.min(32, Math.max(4, Math.floor(dbPoolSize / 10)));
}

/**
 * QUEEN_WORKERS unset: WEB_CONCURRENCY, the worker count Heroku (its Node.js buildpack sizes it to
 * the dyno) and other Procfile platforms set, else one worker per CPU. QUEEN_WORKERS wins.
 */
function defaultWorkers(env: Env): number {
  const cpus = Math.max(1, os.availableParallelism());
  if (env.QUEEN_WORKERS !== undefined && env.QUEEN_WORKERS.trim() !== '') return cpus;
  return int(env, 'WEB_CONCURRENCY', cpus, 1, 256);
}

export function loadConfig(env: Env = process.env): Config {
  const databaseUrl = env.DATABASE_URL?.trim() || undefined;
  if (databaseUrl !== undefined && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    throw new ConfigError('DATABASE_URL', 'must start with postgres:// or postgresql://.');
  }
  const dbPoolSize = int(env, 'DB_POOL_SIZE', DEFAULTS.dbPoolSize, 2, 10_000);
  const tenancyHeader = bool(env, 'QUEEN_TENANCY_HEADER', false);
  const kvTrustedProxy = bool(env, 'QUEEN_KV_TRUSTED_PROXY', false);
  if (tenancyHeader && !kvTrustedProxy) {
    throw new ConfigError(
      'QUEEN_KV_TRUSTED_PROXY',
      'QUEEN_TENANCY_HEADER=1 takes the tenant from x-queen-tenant, which nothing here validates; ' +
        'set QUEEN_KV_TRUSTED_PROXY=1 to affirm that a proxy in front sets that header and strips the client\'s.',
    );
  }
  // Under tenancy every tenant reaches the API; /api/v1/system/* (the kill switches, every tenant's
  // usage) must answer the operator only, so a tenancy cell without the token does not boot.
  const adminToken = env.QUEEN_ADMIN_TOKEN?.trim() || undefined;
  if (tenancyHeader && adminToken === undefined) {
    throw new ConfigError(
      'QUEEN_ADMIN_TOKEN',
      'QUEEN_TENANCY_HEADER=1 lets every tenant reach this API, and without a token /api/v1/system/* (the kill switches, ' +
        'every tenant\'s usage) answers any of them; set QUEEN_ADMIN_TOKEN to a secret the operator alone holds.',
    );
  }
  const logLevel = (env.LOG_LEVEL ?? 'info').trim().toLowerCase();
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new ConfigError('LOG_LEVEL', `must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(env.LOG_LEVEL)}.`);
  }
  const kvReadsPerSec = int(env, 'QUEEN_KV_READS_PER_SEC', DEFAULTS.kvReadsPerSec, 1);
  const kvWritesPerSec = int(env, 'QUEEN_KV_WRITES_PER_SEC', DEFAULTS.kvWritesPerSec, 1);
  const kvReadsBurst = int(env, 'QUEEN_KV_READS_BURST', Math.max(DEFAULTS.kvReadsBurst, kvReadsPerSec * 2), 1);
  const kvWritesBurst = int(env, 'QUEEN_KV_WRITES_BURST', Math.max(DEFAULTS.kvWritesBurst, kvWritesPerSec * 2), 1);
  const maxBodyBytes = int(env, 'QUEEN_MAX_BODY_BYTES', DEFAULTS.maxBodyBytes, 1024, 1 << 30);
  const maxInflightBodyBytes = int(env, 'QUEEN_MAX_INFLIGHT_BODY_BYTES', Math.max(DEFAULTS.maxInflightBodyBytes, maxBodyBytes), 1024, 1 << 30);
  if (maxInflightBodyBytes < maxBodyBytes) {
    throw new ConfigError('QUEEN_MAX_INFLIGHT_BODY_BYTES', `cannot be less than QUEEN_MAX_BODY_BYTES (${maxBodyBytes}), got ${maxInflightBodyBytes}: no body could ever be admitted.`);
  }
  const retired = ['QUEEN_KV_ENABLED', 'QUEEN_TIMERS_ENABLED'].filter((name) => env[name] !== undefined);

  // PgBouncer: QUEEN_DB_POOLING and DATABASE_LISTEN_URL (docs/configuration.md, docs/deploy.md).
  const dbPooling = (env.QUEEN_DB_POOLING?.trim().toLowerCase() || 'session') as DbPooling;
  if (!DB_POOLING.includes(dbPooling)) {
    throw new ConfigError('QUEEN_DB_POOLING', `must be one of ${DB_POOLING.join(', ')}, got ${JSON.stringify(env.QUEEN_DB_POOLING)}.`);
  }
  const databaseListenUrl = env.DATABASE_LISTEN_URL?.trim() || undefined;
  if (databaseListenUrl !== undefined && !/^postgres(ql)?:\/\//.test(databaseListenUrl)) {
    throw new ConfigError('DATABASE_LISTEN_URL', 'must start with postgres:// or postgresql://.');
  }

  const port = int(env, 'PORT', DEFAULTS.port, 0, 65535);
  const derived = portsFromPort(port);

  return {
    dbPooling,
    databaseListenUrl,
    databaseUrl,
    port,
    workers: int(env, 'QUEEN_WORKERS', defaultWorkers(env), 1, 256),
    dbPoolSize,
    kvPoolSize: int(env, 'QUEEN_KV_POOL_SIZE', deriveKvPoolSize(dbPoolSize), 1, 1000),
    kvAcquireTimeoutMs: int(env, 'QUEEN_KV_ACQUIRE_TIMEOUT_MS', DEFAULTS.kvAcquireTimeoutMs, 1, 600_000),
    kvStatementTimeoutMs: int(env, 'QUEEN_KV_STATEMENT_TIMEOUT_MS', DEFAULTS.kvStatementTimeoutMs, 1, 3_600_000),
    kvPrefixLimit: int(env, 'QUEEN_KV_PREFIX_LIMIT', DEFAULTS.kvPrefixLimit, 1, 100_000),
    kvMaxReadBytes: int(env, 'QUEEN_KV_MAX_READ_BYTES', DEFAULTS.kvMaxReadBytes, 65_536, 1 << 30),
    kvMaxBatch: int(env, 'QUEEN_KV_MAX_BATCH', DEFAULTS.kvMaxBatch, 1, 100_000),
    maxBodyBytes,
    maxInflightBodyBytes,
    dbStatementTimeoutMs: int(env, 'QUEEN_DB_STATEMENT_TIMEOUT_MS', DEFAULTS.dbStatementTimeoutMs, 1, 3_600_000),
    dbLockTimeoutMs: int(env, 'QUEEN_DB_LOCK_TIMEOUT_MS', DEFAULTS.dbLockTimeoutMs, 1, 3_600_000),
    dbAcquireTimeoutMs: int(env, 'QUEEN_DB_ACQUIRE_TIMEOUT_MS', DEFAULTS.dbAcquireTimeoutMs, 1, 600_000),
    healthTimeoutMs: int(env, 'QUEEN_HEALTH_TIMEOUT_MS', DEFAULTS.healthTimeoutMs, 1, 600_000),
    readyToleranceMs: int(env, 'QUEEN_READY_TOLERANCE_MS', DEFAULTS.readyToleranceMs, 0, 600_000),
    kvReadsPerSec,
    kvReadsBurst,
    kvWritesPerSec,
    kvWritesBurst,
    kvCellOpsPerSec: int(env, 'QUEEN_KV_CELL_OPS_PER_SEC', DEFAULTS.kvCellOpsPerSec, 1),
    tenancyHeader,
    kvTrustedProxy,
    kvRequireGrant: bool(env, 'QUEEN_KV_REQUIRE_GRANT', tenancyHeader),
    timersMaxHorizonSeconds: int(env, 'QUEEN_TIMERS_MAX_HORIZON_SECONDS', DEFAULTS.timersMaxHorizonSeconds, 1),
    timersMaxPayloadBytes: int(env, 'QUEEN_TIMERS_MAX_PAYLOAD_BYTES', DEFAULTS.timersMaxPayloadBytes, 1),
    sweeper: bool(env, 'QUEEN_SWEEPER', true),
    sweeperIntervalMs: int(env, 'QUEEN_SWEEPER_INTERVAL_MS', DEFAULTS.sweeperIntervalMs, 10, 3_600_000),
    sweeperBatch: int(env, 'QUEEN_SWEEPER_BATCH', DEFAULTS.sweeperBatch, 1, 100_000),
    sweeperFireBatch: int(env, 'QUEEN_SWEEPER_FIRE_BATCH', DEFAULTS.sweeperFireBatch, 1, 100_000),
    sweeperUsageIntervalMs: int(env, 'QUEEN_SWEEPER_USAGE_INTERVAL_MS', DEFAULTS.sweeperUsageIntervalMs, 100, 86_400_000),
    sweeperMetricsPort: int(env, 'QUEEN_SWEEPER_METRICS_PORT', derived.sweeperMetricsPort, 0, 65535),
    logRetentionSeconds: int(env, 'QUEEN_LOG_RETENTION_SECONDS', DEFAULTS.logRetentionSeconds, 0, 315_360_000),
    shutdownTimeoutMs: int(env, 'QUEEN_SHUTDOWN_TIMEOUT_MS', DEFAULTS.shutdownTimeoutMs, 100, 600_000),
    dbBootWaitMs: int(env, 'QUEEN_DB_BOOT_WAIT_MS', DEFAULTS.dbBootWaitMs, 0, 3_600_000),
    migrateOnBoot: bool(env, 'QUEEN_MIGRATE_ON_BOOT', true),
    dataDir: env.QUEEN_DATA_DIR?.trim() || '.queen/pg',
    embeddedPgPort: int(env, 'QUEEN_EMBEDDED_PG_PORT', derived.embeddedPgPort, 0, 65535),
    logLevel,
    adminToken,
    retiredVariablesSet: retired,
    encryptionKeys: encryptionKeysOf(env),
  };
}

function encryptionKeysOf(env: Env): EncryptionKeys | undefined {
  const current = encryptionKey(env, 'QUEEN_ENCRYPTION_KEY');
  const previous = encryptionKey(env, 'QUEEN_ENCRYPTION_KEY_PREVIOUS');
  if (previous && !current) {
    throw new ConfigError('QUEEN_ENCRYPTION_KEY_PREVIOUS', 'is the key a rotation retires; set QUEEN_ENCRYPTION_KEY (the new key) beside it.');
  }
  return current ? new EncryptionKeys(current, previous) : undefined;
}

/**
 * The client-side backstop on every statement of both pools (pg's query_timeout): a server that
 * is frozen (SIGSTOP, a stalled disk, a partition) cannot fire its own statement_timeout. Past it the
 * connection is dropped, which ends the backend's transaction when it wakes.
 */
export function queryTimeoutMs(statementTimeoutMs: number): number {
  // Half again plus a second: a loaded server can take seconds to cancel a large statement and say
  // so (a 273 MB read under load); that is the server's own timeout, not a frozen server.
  return Math.round(statementTimeoutMs * 1.5) + 1000;
}

/** The SQL procedure reads its limits from these settings, so the rules stay in SQL, once. */
export function kvSessionSettings(config: Config): Record<string, string> {
  return {
    'queen.kv_prefix_limit': String(config.kvPrefixLimit),
    'queen.kv_max_read_bytes': String(config.kvMaxReadBytes),
    'queen.kv_max_batch': String(config.kvMaxBatch),
    'queen.timers_max_horizon_seconds': String(config.timersMaxHorizonSeconds),
    'queen.timers_max_payload_bytes': String(config.timersMaxPayloadBytes),
  };
}
