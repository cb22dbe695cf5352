// The database a benchmark runs on: a fresh one on the server DATABASE_URL (or the variable the
// benchmark names) points at, else on an embedded PostgreSQL of its own in a temporary folder.
// `stop` drops it, and stops and removes the embedded server.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { applySchema } from '../../shared/db';
import { freePort, startEmbeddedPostgres } from '../../shared/embeddedPostgres';

export interface BenchDatabase {
  url: string;
  /** The server is this run's own (no URL was given). */
  embedded: boolean;
  /** The embedded server's postmaster, for CPU accounting. */
  postmasterPid?: number;
  stop(): Promise<void>;
}

async function onServer(url: string, statement: string): Promise<void> {
  const c = new Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(statement);
  } finally {
    await c.end();
  }
}

/** `settings`: extra server settings, for the embedded server only (DATABASE_URL's is as it is). */
export async function benchDatabase(prefix: string, o: { serverUrl?: string; schema?: boolean; settings?: Record<string, string> } = {}): Promise<BenchDatabase> {
  let serverUrl = 'serverUrl' in o ? o.serverUrl : process.env.DATABASE_URL;
  const dir = serverUrl ? undefined : fs.mkdtempSync(path.join(os.tmpdir(), `queen-bench-${prefix}-`));
  const embedded = dir ? await startEmbeddedPostgres({ dataDir: path.join(dir, 'data'), port: await freePort(), throwaway: true, settings: o.settings }) : undefined;
  serverUrl = embedded?.url ?? serverUrl!;
  const name = `queen_bench_${prefix}_${Date.now().toString(36)}`;
  await onServer(serverUrl, `CREATE DATABASE ${name}`);
  const u = new URL(serverUrl);
  u.pathname = `/${name}`;
  const url = u.toString();
  if (o.schema) await applySchema(url);
  const pidFile = embedded ? path.join(embedded.dataDir, 'postmaster.pid') : undefined;
  return {
    url,
    embedded: embedded !== undefined,
    postmasterPid: pidFile && fs.existsSync(pidFile) ? Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]) : undefined,
    async stop() {
      await onServer(serverUrl!, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => undefined);
      await embedded?.stop();
      if (dir) fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
