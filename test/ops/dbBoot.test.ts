// A database that is not up yet when the cell boots (started together: compose, one kubectl apply,
// a PostgreSQL still in recovery). The API and the sweeper wait for it, saying so, and serve once it
// answers; past QUEEN_DB_BOOT_WAIT_MS they exit 1 with a line that says why. A PostgreSQL of this
// file's own, started late; every process is ended by its PID.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EmbeddedPostgres, freePort, startEmbeddedPostgres } from '../../shared/embeddedPostgres';
import { request } from '../support/http';
import { spawnApi, spawnLogged, Spawned, SWEEPER_MAIN, untilHealthy } from '../support/processes';

let root: string;
let pg: EmbeddedPostgres | undefined;
const spawned: Spawned[] = [];

beforeAll(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-late-db-'));
});
afterAll(async () => {
  await Promise.all(spawned.map((p) => p.stop()));
  await pg?.stop();
  fs.rmSync(root, { recursive: true, force: true });
});

const WAITING = 'database not reachable yet; waiting for it before booting';

test('the API and a sweeper started before their database wait for it, say so, and serve once it is up', async () => {
  const pgPort = await freePort();
  const url = `postgres://postgres@127.0.0.1:${pgPort}/postgres`;
  const port = await freePort();
  const api = spawnApi({ DATABASE_URL: url, PORT: String(port), QUEEN_WORKERS: '1', DB_POOL_SIZE: '10', QUEEN_DB_BOOT_WAIT_MS: '60000' });
  spawned.push(api);
  const sweeper = spawnLogged(process.execPath, [SWEEPER_MAIN], { DATABASE_URL: url, QUEEN_SWEEPER_METRICS_PORT: '0', QUEEN_DB_BOOT_WAIT_MS: '60000', LOG_LEVEL: 'info' }, { exitOn: 'exit' });
  spawned.push(sweeper);

  // Both are waiting, and say why (the database, where, what it answered), never the password.
  const waiting = await api.waitForLine((l) => l.msg === WAITING, 'the API waiting for its database', 15_000);
  await sweeper.waitForLine((l) => l.msg === WAITING, 'the sweeper waiting for its database', 15_000);
  expect(waiting).toMatchObject({ level: 40, database: `127.0.0.1:${pgPort}/postgres`, err: { code: 'ECONNREFUSED' } });
  expect(api.child.exitCode).toBeNull();
  expect(sweeper.child.exitCode).toBeNull();

  pg = await startEmbeddedPostgres({ dataDir: path.join(root, 'data'), port: pgPort, throwaway: true, settings: { fsync: 'off' } });
  await untilHealthy(api, port);
  const pushed = await request(port, 'POST', '/api/v1/push', { body: { items: [{ queue: 'late', payload: 1 }] } });
  expect(pushed.status).toBe(201);
  await sweeper.waitForLine((l) => l.msg === 'config: sweeper', 'config: sweeper', 15_000);
  expect(api.lines.some((l) => l.msg === 'database reachable; booting')).toBe(true);
});

test('past QUEEN_DB_BOOT_WAIT_MS the API exits 1 with a line naming the database and the variable', async () => {
  const nobody = await freePort();
  const api = spawnApi({ DATABASE_URL: `postgres://queen:secret@127.0.0.1:${nobody}/cell`, PORT: '0', QUEEN_WORKERS: '1', QUEEN_DB_BOOT_WAIT_MS: '1500' });
  spawned.push(api);
  expect(await api.exited).toEqual({ code: 1, signal: null });
  const fatal = api.lines.find((l) => l.level === 60);
  expect(fatal?.msg).toMatch(new RegExp(`the database at 127\\.0\\.0\\.1:${nobody}/cell could not be reached within QUEEN_DB_BOOT_WAIT_MS`));
  expect(fatal?.msg).toMatch(/ECONNREFUSED/);
  expect(api.output()).not.toContain('secret');
});
