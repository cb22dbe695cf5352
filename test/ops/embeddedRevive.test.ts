// The all-in-one start (`npm start`, no DATABASE_URL) whose embedded PostgreSQL dies under it
// (killed, crashed, OOM-killed): the death is logged with the server's last output, the server is
// started again on the same port and data folder, and the cell (API and its sweeper) serves again
// without a restart of its own. Nothing answered 200 before is lost. Every process is ended by PID.
import fs from 'node:fs';
import path from 'node:path';
import { Client } from 'pg';
import { freePort } from '../../shared/embeddedPostgres';
import { request } from '../support/http';
import { allInOneEnv, spawnApi, Spawned, untilHealthy, useDataRoot } from '../support/processes';

const data = useDataRoot('queen-revive-');
let api: Spawned | undefined;

let port: number;

test('an embedded PostgreSQL killed under the cell is logged, started again, and the cell serves again', async () => {
  port = await freePort();
  api = spawnApi({ ...(await allInOneEnv(data.root, port)), QUEEN_SWEEPER_INTERVAL_MS: '100' });
  data.started.push(api);
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

test('a backend busy in a statement when the server dies (it never waits, so never notices) does not hold the restart back: ended, and the first attempt starts', async () => {
  // Before: it kept the old shared memory attached, every start failed "pre-existing shared memory
  // block is still in use", and the back-off doubled (0.5, 1, 2, 4 s...) until the cell gave up.
  // The same port and data folder after every restart.
  const { dataDir, url } = api!.lines.find((l) => l.msg === 'embedded PostgreSQL is up')!;
  const busy = new Client({ connectionString: url });
  busy.on('error', () => undefined);
  await busy.connect();
  // A loop with no wait in it; its own limit (60 s) ends it should nothing else.
  await busy.query("SET statement_timeout = '60s'");
  const looping = busy.query('DO $$ BEGIN LOOP END LOOP; END $$').then(() => 'finished', (err: Error) => err.message);
  await new Promise((r) => setTimeout(r, 300));
  const mark = api!.lines.length;
  const postmaster = Number(fs.readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  process.kill(postmaster, 'SIGKILL');

  const again = await api!.waitForLine((l) => l.msg === 'embedded PostgreSQL is up again' && api!.lines.indexOf(l) >= mark, 'embedded PostgreSQL is up again', 15_000);
  expect(again.attempt).toBe(1);
  const since = api!.lines.slice(mark);
  expect(since.some((l) => String(l.msg).startsWith('embedded postgres: processes of a server that died still hold its shared memory'))).toBe(true);
  expect(since.filter((l) => l.msg === 'embedded PostgreSQL could not be started again')).toEqual([]);
  expect(await looping).not.toBe('finished');
  await busy.end().catch(() => undefined);
  await untilHealthy(api!, port);
  const put = await request(port, 'PUT', '/api/v1/kv/ns/after-busy', { body: { value: 1, forever: true } });
  expect(put.status).toBe(200);
});
