// Pools and the boot-time schema apply. Each process owns two pools: the message pool (the log, the
// transaction wire) and the dedicated KV pool, which is also the KV path's semaphore: an acquire
// that waits past QUEEN_KV_ACQUIRE_TIMEOUT_MS becomes 503 kv_unavailable instead of stealing
// connections from the message path.
import fs from 'node:fs';
import path from 'node:path';
import { Pool, PoolConfig } from 'pg';
import { Config, kvSessionSettings } from './config';

export interface Pools {
  message: Pool;
  kv: Pool;
  end(): Promise<void>;
}

/** Server-side settings sent in the startup packet: no extra round trip, and they hold on every statement. */
function startupOptions(settings: Record<string, string>): string {
  return Object.entries(settings)
    .map(([k, v]) => `-c ${k}=${v}`)
    .join(' ');
}

export interface PoolSizes {
  message: number;
  kv: number;
}

export function createPools(config: Config, sizes: PoolSizes, applicationName: string): Pools {
  const base: PoolConfig = { connectionString: config.databaseUrl, application_name: applicationName };
  const message = new Pool({
    ...base,
    max: sizes.message,
    options: startupOptions(kvSessionSettings(config)),
  });
  const kv = new Pool({
    ...base,
    max: sizes.kv,
    connectionTimeoutMillis: config.kvAcquireTimeoutMs,
    options: startupOptions({
      ...kvSessionSettings(config),
      statement_timeout: String(config.kvStatementTimeoutMs),
    }),
  });
  // An idle client that loses its connection emits here; without a listener it would crash the process.
  message.on('error', () => undefined);
  kv.on('error', () => undefined);
  let ended: Promise<void> | undefined;
  return {
    message,
    kv,
    end() {
      ended ??= Promise.all([message.end(), kv.end()]).then(() => undefined);
      return ended;
    },
  };
}

export const SQL_DIR = path.resolve(__dirname, '..', '..', 'sql');
/** A fixed key: every process that boots takes the same advisory lock around the schema apply. */
const SCHEMA_LOCK_KEY = 0x51_4b_56; // "QKV"

export function schemaFiles(dir = SQL_DIR): string[] {
  return fs
    .readdirSync(dir)
    .filter((f) => /^\d+_.+\.sql$/.test(f))
    .sort()
    .map((f) => path.join(dir, f));
}

/**
 * Applies every sql/NNN_*.sql in file order, in one transaction under an advisory lock, so that
 * concurrent boots (cluster workers, several sweepers) never race, then announces it. Every file
 * is idempotent; booting twice changes nothing.
 */
export async function applySchema(connectionString: string | undefined): Promise<void> {
  // A connect timeout, so that a boot waiting for its database (shared/boot.ts) retries one that
  // does not answer at all as it retries one that refuses.
  const pool = new Pool({ connectionString, max: 1, application_name: 'queen-schema', connectionTimeoutMillis: 5000 });
  pool.on('error', () => undefined);
  const client = await pool.connect().catch(async (err: unknown) => {
    await pool.end();
    throw err;
  });
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1)', [SCHEMA_LOCK_KEY]);
    for (const file of schemaFiles()) {
      try {
        await client.query(fs.readFileSync(file, 'utf8'));
      } catch (err) {
        throw new Error(`schema file ${path.basename(file)} failed: ${(err as Error).message}`);
      }
    }
    await client.query("NOTIFY queen_schema, 'applied'");
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
    await pool.end();
  }
}
