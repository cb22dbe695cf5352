// An API worker in-process against a fresh database cloned from the template: what every HTTP
// suite starts from. `useApi` does it for a suite (with a pool on the same database); a test that
// starts its own calls `startTestApi` and `close()` in afterAll (it ends the pools and drops the
// database), or runs inside `withTestApi`, which closes it.
import { Writable } from 'node:stream';
import pino from 'pino';
import { loadConfig, Config } from '../../shared/config';
import { createLogger } from '../../shared/log';
import { startApiServer, ApiServer } from '../../services/api/server';
import { createTestDatabase, DatabaseSuite, SuiteOptions, useDatabase } from './database';
import { freePort } from '../../shared/embeddedPostgres';
import { spawnApi, Spawned, untilHealthy } from './processes';

export interface TestApi {
  url: string;
  databaseUrl: string;
  config: Config;
  server: ApiServer;
  close(): Promise<void>;
}

/**
 * Suites that are not about rate limits run with the buckets out of the way (the defaults would
 * turn a test's burst of a few hundred puts into 429s); the suites in test/ops set their own.
 */
export const UNLIMITED_RATES: Record<string, string> = {
  QUEEN_KV_READS_PER_SEC: '1000000',
  QUEEN_KV_READS_BURST: '1000000',
  QUEEN_KV_WRITES_PER_SEC: '1000000',
  QUEEN_KV_WRITES_BURST: '1000000',
  QUEEN_KV_CELL_OPS_PER_SEC: '1000000',
};

/** With `o.lines`, every line the API logs (debug included) is pushed onto it as written. */
export async function startTestApi(env: Record<string, string> = {}, o: { lines?: string[] } = {}): Promise<TestApi> {
  const db = await createTestDatabase();
  const config = loadConfig({ QUEEN_WORKERS: '1', DB_POOL_SIZE: '20', ...UNLIMITED_RATES, ...env, DATABASE_URL: db.url });
  const lines = o.lines;
  const log = lines
    ? pino({ level: 'debug' }, new Writable({
        write(chunk, _enc, done) {
          lines.push(...String(chunk).split('\n').filter(Boolean));
          done();
        },
      }))
    : createLogger('api-test', process.env.TEST_LOG_LEVEL ?? 'silent');
  const server = await startApiServer(config, log, { message: 10, kv: config.kvPoolSize }, 0);
  return {
    url: server.url,
    databaseUrl: db.url,
    config,
    server,
    async close() {
      await server.close();
      await db.drop();
    },
  };
}

/** `run` on an API of its own (startTestApi's `env`), closed whatever `run` did. */
export async function withTestApi<T>(env: Record<string, string>, run: (api: TestApi) => Promise<T>): Promise<T> {
  const api = await startTestApi(env);
  try {
    return await run(api);
  } finally {
    await api.close();
  }
}

/** A suite's API, and a pool (and with `client: true` one connection) on its database. */
export interface ApiSuite extends TestApi, Pick<DatabaseSuite, 'pool' | 'client'> {}

/**
 * For a suite file: an API started with `env` in beforeAll and a pool on its database (see
 * useDatabase for the options), both closed in afterAll. The fields answer once beforeAll has run.
 * `lines` is startTestApi's: every line the API logs is pushed onto it.
 */
export function useApi(env: Record<string, string> = {}, { lines, ...o }: SuiteOptions & { lines?: string[] } = {}): ApiSuite {
  let api: TestApi;
  const db = useDatabase({
    ...o,
    open: async () => {
      api = await startTestApi(env, { lines });
      return { url: api.databaseUrl, drop: () => api.close() };
    },
  });
  return {
    get url() {
      return api.url;
    },
    get databaseUrl() {
      return api.databaseUrl;
    },
    get config() {
      return api.config;
    },
    get server() {
      return api.server;
    },
    close: () => api.close(),
    get pool() {
      return db.pool;
    },
    get client() {
      return db.client;
    },
  };
}

/**
 * Two built API processes on one new database, one with `QUEEN_ENCRYPTION_KEY` `key` and one
 * without, each one worker at `LOG_LEVEL` debug with the rate limits out of the way: `run` gets
 * their base URLs and both processes (their output), then both stop and the database goes.
 */
export async function withKeyedAndKeyless(
  key: string,
  run: (o: { keyed: string; keyless: string; databaseUrl: string; processes: Spawned[] }) => Promise<void>,
): Promise<void> {
  const db = await createTestDatabase();
  const keyedPort = await freePort();
  const keylessPort = await freePort();
  const env = { ...UNLIMITED_RATES, DATABASE_URL: db.url, QUEEN_WORKERS: '1', DB_POOL_SIZE: '10', LOG_LEVEL: 'debug' };
  const keyed = spawnApi({ ...env, PORT: String(keyedPort), QUEEN_ENCRYPTION_KEY: key });
  const keyless = spawnApi({ ...env, PORT: String(keylessPort) });
  try {
    await untilHealthy(keyed, keyedPort);
    await untilHealthy(keyless, keylessPort);
    await run({ keyed: `http://127.0.0.1:${keyedPort}`, keyless: `http://127.0.0.1:${keylessPort}`, databaseUrl: db.url, processes: [keyed, keyless] });
  } finally {
    await Promise.all([keyed.stop(), keyless.stop()]);
    await db.drop();
  }
}
