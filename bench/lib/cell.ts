// One cell for the benchmarks that run several behind the router (bench:router, bench:move): its
// own database on a shared embedded PostgreSQL, the schema applied, the built API (one worker)
// started on a free port and ready. Its output (pino's JSON lines: every refusal the benchmark
// provokes is a "request refused" warning) goes to a file of its own, named on stdout, so the
// benchmark's own table is not buried under it.
import { execFileSync, spawn, ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { applySchema } from '../../shared/db';
import { freePort, startEmbeddedPostgres } from '../../shared/embeddedPostgres';
import { HAPROXY_MISSING, Router, startRouter } from '../../test/support/router';
import { cellEnv, stopChild, waitReady } from './procs';

export interface BenchCell {
  /** `cell-a` for the database `cell_a`. */
  name: string;
  url: string;
  port: number;
  proc: ChildProcess;
  /** The file its stdout and stderr go to. */
  log: string;
}

/**
 * `build`: the directory of another build of the cell (a worktree of another revision, built with
 * `npm run build`) whose migrations and API this cell runs instead of this build's: a comparison of
 * changes to both the SQL and the API in one run. Default: this build.
 */
export async function startCell(serverUrl: string, database: string, env: Record<string, string>, build?: string): Promise<BenchCell> {
  const admin = new Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${database}`);
  } finally {
    await admin.end();
  }
  const url = serverUrl.replace(/\/[^/?]+(\?|$)/, `/${database}$1`);
  if (build) execFileSync(process.execPath, [path.join(build, 'dist', 'services', 'migrate.js')], { env: { ...process.env, DATABASE_URL: url, LOG_LEVEL: 'warn' }, stdio: 'inherit' });
  else await applySchema(url);
  const port = await freePort();
  const name = database.replace('_', '-');
  const log = path.join(os.tmpdir(), `queen-bench-${name}-${process.pid}.log`);
  const fd = fs.openSync(log, 'w');
  process.stdout.write(`${name}: its output goes to ${log}\n`);
  let proc: ChildProcess;
  try {
    // BENCH_CELL_NODE_ARGS: node flags for the cell, which its workers inherit (`--cpu-prof
    // --cpu-prof-dir=DIR`: where its CPU goes, read with dist/bench/profileSummary.js).
    const nodeArgs = (process.env.BENCH_CELL_NODE_ARGS ?? '').split(' ').filter(Boolean);
    const main = build ? path.join(build, 'dist', 'services', 'api', 'main.js') : path.resolve(__dirname, '..', '..', 'services', 'api', 'main.js');
    proc = spawn(process.execPath, [...nodeArgs, main], {
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

/**
 * `run` on two cells (`cell-a`, `cell-b`: tenancy on, the admin token `token`, grants not required,
 * `DB_POOL_SIZE` `poolSize`), each on its own database of one embedded PostgreSQL of their own,
 * behind the shipped router; then the router, the cells and the server are stopped and removed.
 * Without HAProxy, `bench` says it did not run and the process exits 2.
 */
export async function withRoutedCells(
  bench: string, token: string, poolSize: number, run: (cells: BenchCell[], router: Router) => Promise<void>,
): Promise<void> {
  if (HAPROXY_MISSING) {
    process.stdout.write(`${bench} not run: ${HAPROXY_MISSING}\n`);
    process.exit(2);
  }
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), `queen-${bench.replace(':', '-')}-`));
  fs.chmodSync(scratch, 0o755);
  const pg = await startEmbeddedPostgres({ dataDir: path.join(scratch, 'pg'), port: await freePort(), throwaway: true });
  const cells: BenchCell[] = [];
  let router: Router | undefined;
  try {
    const env = { DB_POOL_SIZE: String(poolSize), QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1', QUEEN_ADMIN_TOKEN: token, QUEEN_KV_REQUIRE_GRANT: '0' };
    for (const name of ['cell_a', 'cell_b']) cells.push(await startCell(pg.url, name, env));
    router = await startRouter(`127.0.0.1:${cells[0].port}`, `127.0.0.1:${cells[1].port}`);
    await run(cells, router);
  } finally {
    await router?.stop();
    for (const c of cells) await stopChild(c.proc);
    await pg.stop();
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}
