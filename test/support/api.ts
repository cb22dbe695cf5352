// An API worker in-process against a fresh database cloned from the template: what every HTTP
// suite starts from. Call `close()` in afterAll; it ends the pools and drops the database.
import { loadConfig, Config } from '../../shared/config';
import { createLogger } from '../../shared/log';
import { startApiServer, ApiServer } from '../../services/api/server';
import { createTestDatabase } from './database';

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

export async function startTestApi(env: Record<string, string> = {}): Promise<TestApi> {
  const db = await createTestDatabase();
  const config = loadConfig({ QUEEN_WORKERS: '1', DB_POOL_SIZE: '20', ...UNLIMITED_RATES, ...env, DATABASE_URL: db.url });
  const log = createLogger('api-test', process.env.TEST_LOG_LEVEL ?? 'silent');
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

export interface JsonResponse<T = any> {
  status: number;
  headers: Headers;
  text: string;
  body: T;
}

/** fetch with a JSON (or raw text) body; the answer parsed, and its raw text kept for exactness checks. */
export async function call<T = any>(
  base: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<JsonResponse<T>> {
  const init: RequestInit = { method, headers: { 'content-type': 'application/json', ...headers } };
  if (body !== undefined) init.body = typeof body === 'string' ? body : JSON.stringify(body);
  const res = await fetch(base + path, init);
  const text = await res.text();
  let parsed: any;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  return { status: res.status, headers: res.headers, text, body: parsed };
}

/** POST /api/v1/kv with these operations. */
export function kv<T = any>(base: string, operations: unknown, headers?: Record<string, string>) {
  return call<T>(base, 'POST', '/api/v1/kv', { operations }, headers);
}
