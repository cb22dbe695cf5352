// A database that is not up yet when the cell boots (started together: compose, one kubectl apply,
// a PostgreSQL still in recovery). The API and the sweeper wait for it, saying so, and serve once it
// answers; past QUEEN_DB_BOOT_WAIT_MS they exit 1 with a line that says why. A PostgreSQL of this
// file's own, started late; every process is ended by its PID.
import { ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EmbeddedPostgres, freePort, startEmbeddedPostgres } from '../../shared/embeddedPostgres';
import { until } from '../support/sweeper';
import { fresh, jsonLines, spawnApi, Spawned, untilHealthy } from './spawn';

const SWEEPER_MAIN = path.resolve(__dirname, '..', '..', 'services', 'sweeper', 'main.js');

let root: string;
let pg: EmbeddedPostgres | undefined;
const apis: Spawned[] = [];
const children: ChildProcess[] = [];

beforeAll(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-late-db-'));
});
afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await Promise.all(apis.map((a) => a.stop()));
  await pg?.stop();
  fs.rmSync(root, { recursive: true, force: true });
});

const WAITING = 'database not reachable yet; waiting for it before booting';

test('the API and a sweeper started before their database wait for it, say so, and serve once it is up', async () => {
  const pgPort = await freePort();
  const url = `postgres://postgres@127.0.0.1:${pgPort}/postgres`;
  const port = await freePort();
  const api = spawnApi({ DATABASE_URL: url, PORT: String(port), QUEEN_WORKERS: '1', DB_POOL_SIZE: '10', QUEEN_DB_BOOT_WAIT_MS: '60000' });
  apis.push(api);
  const sweeper = spawn(process.execPath, [SWEEPER_MAIN], {
    env: { PATH: process.env.PATH ?? '', DATABASE_URL: url, QUEEN_SWEEPER_METRICS_PORT: '0', QUEEN_DB_BOOT_WAIT_MS: '60000', LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(sweeper);
  let sweeperOut = '';
  sweeper.stdout!.on('data', (d) => (sweeperOut += d));
  sweeper.stderr!.on('data', (d) => (sweeperOut += d));

  // Both are waiting, and say why (the database, where, what it answered), never the password.
  await until(async () => jsonLines(api.output()).some((l) => l.msg === WAITING), 15_000);
  await until(async () => jsonLines(sweeperOut).some((l) => l.msg === WAITING), 15_000);
  const waiting = jsonLines(api.output()).find((l) => l.msg === WAITING)!;
  expect(waiting).toMatchObject({ level: 40, database: `127.0.0.1:${pgPort}/postgres`, err: { code: 'ECONNREFUSED' } });
  expect(api.child.exitCode).toBeNull();
  expect(sweeper.exitCode).toBeNull();

  pg = await startEmbeddedPostgres({ dataDir: path.join(root, 'data'), port: pgPort, throwaway: true, settings: { fsync: 'off' } });
  await untilHealthy(api, port);
  const pushed = await fresh(port, 'POST', '/api/v1/push', { items: [{ queue: 'late', payload: 1 }] });
  expect(pushed.status).toBe(201);
  await until(async () => jsonLines(sweeperOut).some((l) => l.msg === 'config: sweeper'), 15_000);
  expect(jsonLines(api.output()).some((l) => l.msg === 'database reachable; booting')).toBe(true);
});

test('past QUEEN_DB_BOOT_WAIT_MS the API exits 1 with a line naming the database and the variable', async () => {
  const nobody = await freePort();
  const api = spawnApi({ DATABASE_URL: `postgres://queen:secret@127.0.0.1:${nobody}/cell`, PORT: '0', QUEEN_WORKERS: '1', QUEEN_DB_BOOT_WAIT_MS: '1500' });
  apis.push(api);
  expect(await api.exited).toEqual({ code: 1, signal: null });
  const fatal = jsonLines(api.output()).find((l) => l.level === 60);
  expect(fatal?.msg).toMatch(new RegExp(`the database at 127\\.0\\.0\\.1:${nobody}/cell could not be reached within QUEEN_DB_BOOT_WAIT_MS`));
  expect(fatal?.msg).toMatch(/ECONNREFUSED/);
  expect(api.output()).not.toContain('secret');
});
