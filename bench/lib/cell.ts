// One cell for the benchmarks that run several behind the router (bench:router, bench:move): its
// own database on a shared embedded PostgreSQL, the schema applied, the built API (one worker)
// started on a free port and ready. Its output (pino's JSON lines: every refusal the benchmark
// provokes is a "request refused" warning) goes to a file of its own, named on stdout, so the
// benchmark's own table is not buried under it.
import { spawn, ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
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
  /** The file its stdout and stderr go to. */
  log: string;
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
  const name = database.replace('_', '-');
  const log = path.join(os.tmpdir(), `queen-bench-${name}-${process.pid}.log`);
  const fd = fs.openSync(log, 'w');
  process.stdout.write(`${name}: its output goes to ${log}\n`);
  let proc: ChildProcess;
  try {
    proc = spawn(process.execPath, [path.resolve(__dirname, '..', '..', 'services', 'api', 'main.js')], {
      env: { ...cellEnv(url, port, 1), ...env },
      stdio: ['ignore', fd, fd],
    });
  } finally {
    // The child holds its own copy of the descriptor.
    fs.closeSync(fd);
  }
  await waitReady(port, '/ready');
  return { name, url, port, proc, log };
}
