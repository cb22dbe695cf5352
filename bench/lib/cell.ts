// One cell for the benchmarks that run several behind the router (bench:router, bench:move): its
// own database on a shared embedded PostgreSQL, the schema applied, the built API (one worker)
// started on a free port and ready.
import { spawn, ChildProcess } from 'node:child_process';
import path from 'node:path';
import { Client } from 'pg';
import { applySchema } from '../../shared/db';
import { freePort } from '../../shared/embeddedPostgres';
import { cellEnv, waitReady } from './procs';

export interface BenchCell {
  /** `cell-a` for the database `cell_a`. */
  name: string;
  url: string;
  port: number;
  proc: ChildProcess;
}

export async function startCell(serverUrl: string, database: string, env: Record<string, string>): Promise<BenchCell> {
  const admin = new Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${database}`);
  } finally {
    await admin.end();
  }
  const url = serverUrl.replace(/\/[^/?]+(\?|$)/, `/${database}$1`);
  await applySchema(url);
  const port = await freePort();
  const proc = spawn(process.execPath, [path.resolve(__dirname, '..', '..', 'services', 'api', 'main.js')], {
    env: { ...cellEnv(url, port, 1), ...env },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  await waitReady(port, '/ready');
  return { name: database.replace('_', '-'), url, port, proc };
}
