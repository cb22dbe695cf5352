// Configuration is parsed once and a malformed value stops the boot with a line naming it.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { ConfigError, deriveKvPoolSize, directUrl, loadConfig } from '../../shared/config';

const API_MAIN = path.resolve(__dirname, '..', '..', 'services', 'api', 'main.js');

test.each([
  ['PORT', 'abc'],
  ['DB_POOL_SIZE', '1.5'],
  ['QUEEN_KV_POOL_SIZE', '0'],
  ['QUEEN_KV_MAX_BATCH', '-3'],
  ['QUEEN_TENANCY_HEADER', 'maybe'],
  ['LOG_LEVEL', 'loud'],
  ['DATABASE_URL', 'mysql://nope'],
  ['QUEEN_MAX_INFLIGHT_BODY_BYTES', '1024x'],
  ['QUEEN_DB_STATEMENT_TIMEOUT_MS', '0'],
  ['QUEEN_DB_LOCK_TIMEOUT_MS', '5s'],
  ['QUEEN_DB_ACQUIRE_TIMEOUT_MS', '-5'],
  ['QUEEN_HEALTH_TIMEOUT_MS', '2.5'],
  ['QUEEN_DB_POOLING', 'statement'],
  ['DATABASE_LISTEN_URL', 'localhost:5432'],
  ['QUEEN_LOG_RETENTION_SECONDS', '-1'],
  ['QUEEN_LOG_RETENTION_SECONDS', '7d'],
])('%s=%s is refused with a sentence that names the variable', (name, value) => {
  let thrown: unknown;
  try {
    loadConfig({ [name]: value });
  } catch (err) {
    thrown = err;
  }
  expect(thrown).toBeInstanceOf(ConfigError);
  expect((thrown as ConfigError).variable).toBe(name);
  expect((thrown as Error).message).toContain(name);
});

test('QUEEN_DB_POOLING: session by default, transaction when asked; LISTEN goes to DATABASE_LISTEN_URL, else DATABASE_URL', () => {
  const direct = 'postgres://u@db:5432/queen';
  const pooled = 'postgres://u@pgbouncer:6432/queen';
  expect(loadConfig({ DATABASE_URL: direct })).toMatchObject({ dbPooling: 'session', databaseListenUrl: undefined });
  expect(directUrl(loadConfig({ DATABASE_URL: direct }))).toBe(direct);
  const behind = loadConfig({ DATABASE_URL: pooled, DATABASE_LISTEN_URL: direct, QUEEN_DB_POOLING: ' Transaction ' });
  expect(behind.dbPooling).toBe('transaction');
  expect(directUrl(behind)).toBe(direct);
});

test('QUEEN_LOG_RETENTION_SECONDS: 7 days by default; 0 (forever for queues without their own) when asked', () => {
  expect(loadConfig({}).logRetentionSeconds).toBe(604_800);
  expect(loadConfig({ QUEEN_LOG_RETENTION_SECONDS: '0' }).logRetentionSeconds).toBe(0);
  expect(loadConfig({ QUEEN_LOG_RETENTION_SECONDS: '90' }).logRetentionSeconds).toBe(90);
});

test('the KV pool derives from DB_POOL_SIZE as clamp(pool / 10, 4, 32)', () => {
  expect(deriveKvPoolSize(160)).toBe(16);
  expect(deriveKvPoolSize(10)).toBe(4);
  expect(deriveKvPoolSize(1000)).toBe(32);
  expect(loadConfig({}).kvPoolSize).toBe(16);
  expect(loadConfig({ DB_POOL_SIZE: '60' }).kvPoolSize).toBe(6);
});

test('the memory and time bounds: defaults, and an in-flight budget smaller than one body is refused', () => {
  const c = loadConfig({});
  expect([c.maxBodyBytes, c.maxInflightBodyBytes, c.dbStatementTimeoutMs, c.dbLockTimeoutMs, c.dbAcquireTimeoutMs, c.healthTimeoutMs]).toEqual([
    4 * 1024 * 1024, 16 * 1024 * 1024, 10_000, 5000, 5000, 2000,
  ]);
  // Raising the body limit alone raises the budget with it, so one such body still fits.
  expect(loadConfig({ QUEEN_MAX_BODY_BYTES: String(64 * 1024 * 1024) }).maxInflightBodyBytes).toBe(64 * 1024 * 1024);
  expect(() => loadConfig({ QUEEN_MAX_BODY_BYTES: '4096', QUEEN_MAX_INFLIGHT_BODY_BYTES: '2048' })).toThrow(/QUEEN_MAX_INFLIGHT_BODY_BYTES: cannot be less than QUEEN_MAX_BODY_BYTES/);
});

test('tenancy without a trusted proxy is refused', () => {
  expect(() => loadConfig({ QUEEN_TENANCY_HEADER: '1', QUEEN_ADMIN_TOKEN: 't' })).toThrow(/QUEEN_KV_TRUSTED_PROXY/);
  const ok = loadConfig({ QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1', QUEEN_ADMIN_TOKEN: 't' });
  expect(ok.kvRequireGrant).toBe(true);
  expect(loadConfig({}).kvRequireGrant).toBe(false);
});

test('tenancy without QUEEN_ADMIN_TOKEN is refused, naming it; a blank token is no token', () => {
  const tenancy = { QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1' };
  expect(() => loadConfig(tenancy)).toThrow(/^QUEEN_ADMIN_TOKEN: /);
  expect(() => loadConfig({ ...tenancy, QUEEN_ADMIN_TOKEN: '  ' })).toThrow(/^QUEEN_ADMIN_TOKEN: /);
  expect(loadConfig({ ...tenancy, QUEEN_ADMIN_TOKEN: 'op' }).adminToken).toBe('op');
  // Tenancy off: the token stays optional.
  expect(loadConfig({}).adminToken).toBeUndefined();
});

test('the API process refuses to boot on a malformed variable, exits 1 and says which', () => {
  const run = spawnSync(process.execPath, [API_MAIN], {
    env: { ...process.env, QUEEN_KV_STATEMENT_TIMEOUT_MS: 'soon', DATABASE_URL: 'postgres://127.0.0.1:1/none' },
    encoding: 'utf8',
    timeout: 20_000,
  });
  expect(run.status).toBe(1);
  const line = JSON.parse(run.stdout.trim().split('\n').pop()!);
  expect(line.level).toBe(60);
  expect(line.variable).toBe('QUEEN_KV_STATEMENT_TIMEOUT_MS');
  expect(line.msg).toMatch(/QUEEN_KV_STATEMENT_TIMEOUT_MS: must be a whole number/);
});

test('WEB_CONCURRENCY (Heroku) is the worker count when QUEEN_WORKERS is unset; QUEEN_WORKERS wins; a bad one is named', () => {
  expect(loadConfig({ WEB_CONCURRENCY: '3' }).workers).toBe(3);
  expect(loadConfig({ WEB_CONCURRENCY: ' 5 ' }).workers).toBe(5);
  expect(loadConfig({ WEB_CONCURRENCY: '3', QUEEN_WORKERS: '2' }).workers).toBe(2);
  // Unused, it cannot stop the boot.
  expect(loadConfig({ WEB_CONCURRENCY: 'lots', QUEEN_WORKERS: '2' }).workers).toBe(2);
  expect(loadConfig({ WEB_CONCURRENCY: '' }).workers).toBe(loadConfig({}).workers);
  for (const bad of ['lots', '0', '1.5']) {
    expect(() => loadConfig({ WEB_CONCURRENCY: bad })).toThrow(ConfigError);
    expect(() => loadConfig({ WEB_CONCURRENCY: bad })).toThrow(/WEB_CONCURRENCY/);
  }
});

test('the sweeper metrics port and the embedded PostgreSQL port follow PORT (PORT+1, PORT+7) unless set; PORT=0 makes them free ports', () => {
  expect(loadConfig({})).toMatchObject({ port: 6632, sweeperMetricsPort: 6633, embeddedPgPort: 6639 });
  expect(loadConfig({ PORT: '7000' })).toMatchObject({ port: 7000, sweeperMetricsPort: 7001, embeddedPgPort: 7007 });
  expect(loadConfig({ PORT: '7000', QUEEN_SWEEPER_METRICS_PORT: '9100', QUEEN_EMBEDDED_PG_PORT: '5433' })).toMatchObject({
    sweeperMetricsPort: 9100,
    embeddedPgPort: 5433,
  });
  expect(loadConfig({ PORT: '0' })).toMatchObject({ port: 0, sweeperMetricsPort: 0, embeddedPgPort: 0 });
  expect(loadConfig({ PORT: '65530' })).toMatchObject({ sweeperMetricsPort: 65531, embeddedPgPort: 0 });
});
