// The all-in-one start (`npm start`, no DATABASE_URL) whose embedded PostgreSQL dies under it
// (killed, crashed, OOM-killed): the death is logged with the server's last output, the server is
// started again on the same port and data folder, and the cell (API and its sweeper) serves again
// without a restart of its own. Nothing answered 200 before is lost. Every process is ended by PID.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../../shared/embeddedPostgres';
import { request } from '../support/http';
import { allInOneEnv, spawnApi, Spawned, untilHealthy } from '../support/processes';

let root: string;
let api: Spawned | undefined;

beforeAll(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-revive-'));
  // Walkable by the postgres user when running as root, so the data stays here and goes with `root`.
  fs.chmodSync(root, 0o755);
});
afterAll(async () => {
  await api?.stop();
  fs.rmSync(root, { recursive: true, force: true });
});

test('an embedded PostgreSQL killed under the cell is logged, started again, and the cell serves again', async () => {
  const port = await freePort();
  api = spawnApi({ ...(await allInOneEnv(root, port)), QUEEN_SWEEPER_INTERVAL_MS: '100' });
  await untilHealthy(api, port);
  const before = await request(port, 'POST', '/api/v1/push', { body: { items: [{ queue: 'kept', payload: { before: true }, transactionId: 'before-1' }] } });
  expect(before.status).toBe(201);

  const up = api!.lines.find((l) => l.msg === 'embedded PostgreSQL is up')!;
  const postmaster = Number(fs.readFileSync(path.join(up.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  process.kill(postmaster, 'SIGKILL');

  await api.waitForLine((l) => l.msg === 'embedded PostgreSQL is up again', 'embedded PostgreSQL is up again', 15_000);
  const died = api!.lines.find((l) => String(l.msg).startsWith('embedded PostgreSQL exited unexpectedly'))!;
  expect(died).toMatchObject({ level: 50, signal: 'SIGKILL' });
  await untilHealthy(api, port);

  // What was acknowledged is there; the API writes again; the sweeper fires again.
  const popped = await request(port, 'GET', '/api/v1/pop/queue/kept');
  expect([popped.status, popped.body.messages.map((m: { transactionId: string }) => m.transactionId)]).toEqual([200, ['before-1']]);
  const timer = await request(port, 'POST', '/api/v1/timers', { body: { queue: 'after', payload: { fired: true }, delaySeconds: 0 } });
  expect(timer.status).toBe(200);
  const fired = await request(port, 'GET', '/api/v1/pop/queue/after?wait=true&timeout=15000', { timeoutMs: 60_000 });
  expect([fired.status, fired.body?.messages?.[0]?.transactionId]).toEqual([200, `timer:${timer.body.timerId}`]);
  expect(api.child.exitCode).toBeNull();
});
