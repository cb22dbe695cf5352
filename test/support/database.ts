// The test database, resolved once per run: TEST_DATABASE_URL if set, else testcontainers where a
// Docker engine answers, else embedded PostgreSQL (the path these machines take). The schema is
// built once into a template database; every test file gets its own database cloned from it
// (`useDatabase` does it for a suite, with a pool on it; `withTestDatabase` for one test).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Pool, PoolClient } from 'pg';
import { applySchema } from '../../shared/db';
import { startEmbeddedPostgres, freePort } from '../../shared/embeddedPostgres';
import { closeLeakedSweepers } from './sweeper';
import { waitFor } from './wait';

export interface TestServer {
  /** URL of a maintenance database on the server (used to create and drop databases). */
  adminUrl: string;
  kind: 'env' | 'testcontainers' | 'embedded';
  stop(): Promise<void>;
}

export const TEMPLATE_DB = 'queen_test_template';

export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

async function dockerAnswers(): Promise<boolean> {
  if (process.env.DOCKER_HOST) return true;
  if (!fs.existsSync('/var/run/docker.sock')) return false;
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}

export async function startTestServer(): Promise<TestServer> {
  if (process.env.TEST_DATABASE_URL) {
    return { adminUrl: process.env.TEST_DATABASE_URL, kind: 'env', stop: async () => undefined };
  }
  if (await dockerAnswers()) {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer('postgres:17-alpine')
      .withCommand(['postgres', '-c', 'max_connections=400'])
      .start();
    return { adminUrl: container.getConnectionUri(), kind: 'testcontainers', stop: async () => void (await container.stop()) };
  }
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-test-pg-'));
  // fsync off for the throwaway test cluster only: its data dies with the run.
  const pg = await startEmbeddedPostgres({
    dataDir: path.join(dataDir, 'data'),
    port: await freePort(),
    throwaway: true,
    settings: { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' },
  });
  return {
    adminUrl: pg.url,
    kind: 'embedded',
    stop: async () => {
      await pg.stop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

async function admin<T>(adminUrl: string, fn: (c: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: adminUrl });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

export async function buildTemplate(adminUrl: string): Promise<void> {
  await admin(adminUrl, async (c) => {
    await c.query(`DROP DATABASE IF EXISTS ${TEMPLATE_DB} WITH (FORCE)`);
    await c.query(`CREATE DATABASE ${TEMPLATE_DB}`);
  });
  await applySchema(withDatabase(adminUrl, TEMPLATE_DB));
}

export async function dropTemplate(adminUrl: string): Promise<void> {
  await admin(adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${TEMPLATE_DB} WITH (FORCE)`));
}

/**
 * A fresh database for one test file: cloned from the template (the schema applied), or empty, for
 * tests of the schema apply itself.
 */
export async function createTestDatabase(options: { empty?: boolean } = {}): Promise<{ url: string; drop(): Promise<void> }> {
  const adminUrl = process.env.QUEEN_TEST_ADMIN_URL;
  if (!adminUrl) throw new Error('QUEEN_TEST_ADMIN_URL is not set: run the suites through jest (globalSetup).');
  const name = `queen_test_${process.pid}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;
  await admin(adminUrl, (c) => c.query(options.empty ? `CREATE DATABASE ${name}` : `CREATE DATABASE ${name} TEMPLATE ${TEMPLATE_DB}`));
  return {
    url: withDatabase(adminUrl, name),
    drop: () => admin(adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined),
  };
}

/** `run` on a database of its own (createTestDatabase's options), dropped whatever `run` did. */
export async function withTestDatabase<T>(options: { empty?: boolean }, run: (db: { url: string }) => Promise<T>): Promise<T> {
  const db = await createTestDatabase(options);
  try {
    return await run(db);
  } finally {
    await db.drop();
  }
}

/**
 * A pool for a test. pg's pool.end() resolves before its connections have closed, so the drop's
 * WITH (FORCE) can still end one of them: an idle connection the server ends (that, or a test that
 * restarts or terminates backends) is not the test's failure, and unhandled it fails the whole file.
 */
export function testPool(url: string, max: number): Pool {
  const pool = new Pool({ connectionString: url, max });
  pool.on('error', () => undefined);
  return pool;
}

export interface SuiteOptions {
  /** Connections of the suite's pool (default 2). */
  connections?: number;
  /** Also check one connection out of the pool as `client`: a transaction spread over statements needs one. */
  client?: boolean;
  /** Statements run after each test (truncations, a switch row put back), so tests do not see each other's rows. */
  reset?: string[];
  /** After each test, a sweeper left running fails it (the suite starts in-process sweepers). */
  sweepers?: boolean;
}

export interface DatabaseSuite {
  url: string;
  pool: Pool;
  /** With `client: true`. */
  client: PoolClient;
}

/**
 * A suite's database: registers beforeAll (a fresh database, or what `open` starts on one, and a
 * pool on it), afterEach (`reset`, the sweeper check) and afterAll (pool ended, database dropped).
 * The fields are set once beforeAll has run.
 */
export function useDatabase(o: SuiteOptions & { open?: () => Promise<{ url: string; drop(): Promise<void> }> } = {}): DatabaseSuite {
  const suite = {} as DatabaseSuite;
  let drop: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    const db = await (o.open ?? createTestDatabase)();
    drop = db.drop;
    suite.url = db.url;
    suite.pool = testPool(db.url, o.connections ?? 2);
    if (o.client) suite.client = await suite.pool.connect();
  });
  if (o.reset || o.sweepers) {
    afterEach(async () => {
      for (const statement of o.reset ?? []) await suite.pool.query(statement);
      if (o.sweepers) expect(await closeLeakedSweepers()).toBe(0);
    });
  }
  afterAll(async () => {
    suite.client?.release();
    await suite.pool?.end();
    await drop?.();
  });
  return suite;
}

/** One statement on a connection of its own (an operator's write, a check of what a process left). */
export async function sql<T = any>(databaseUrl: string, text: string, values: unknown[] = []): Promise<T[]> {
  return admin(databaseUrl, async (c) => (await c.query(text, values)).rows as T[]);
}

/**
 * Resolves once a backend of `applicationName` waits on a lock: the way a test knows a request it
 * sent has reached the row another session holds. Ask from a session of its own: inside a
 * transaction, pg_stat_activity is a snapshot taken once.
 */
export async function untilWaitingOnLock(url: string, applicationName = 'queen-api'): Promise<void> {
  const watcher = new Client({ connectionString: url });
  watcher.on('error', () => undefined);
  await watcher.connect();
  try {
    const waiting = async () =>
      (await watcher.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, [applicationName])).rows[0].n > 0;
    await waitFor(waiting, { what: `a ${applicationName} backend waiting on a lock`, timeoutMs: 10_000, everyMs: 25 });
  } finally {
    await watcher.end();
  }
}
