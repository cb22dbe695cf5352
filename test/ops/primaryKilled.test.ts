// The all-in-one start (`npm start`, no DATABASE_URL) whose main process is SIGKILLed (an OOM kill,
// a supervisor's kill -9 after its grace period): its embedded PostgreSQL and its sweeper outlived it,
// and the next start refused ("port already in use") until someone hunted them down by hand. Now the
// sweeper stops with its parent, and the next start stops the orphaned server (fast shutdown) and
// boots on the same data. Every process is ended by its PID, whatever the outcome.
import fs from 'node:fs';
import path from 'node:path';
import { freePort } from '../../shared/embeddedPostgres';
import { request } from '../support/http';
import { alive, allInOneEnv, spawnApi, untilGone, untilHealthy, useDataRoot } from '../support/processes';

const data = useDataRoot('queen-orphans-', 'SIGKILL');
const { started: apis, strays } = data;

test('after the main process is SIGKILLed, its sweeper stops and the next start takes the data folder back', async () => {
  const port = await freePort();
  const env = await allInOneEnv(data.root, port);
  const first = spawnApi(env);
  apis.push(first);
  await untilHealthy(first, port);
  const kept = await request(port, 'POST', '/api/v1/push', { body: { items: [{ queue: 'kept', payload: 1, transactionId: 'kept-1' }] } });
  expect(kept.status).toBe(201);
  const up = first.lines.find((l) => l.msg === 'embedded PostgreSQL is up')!;
  const postmaster = Number(fs.readFileSync(path.join(up.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  const sweeperPid = Number(first.lines.find((l) => l.msg === 'all-in-one start: one sweeper runs beside the API')!.sweeperPid);
  const workerPid = Number(first.lines.find((l) => l.msg === 'API worker listening')!.pid);
  strays.push(postmaster, sweeperPid, workerPid);

  process.kill(first.child.pid!, 'SIGKILL');
  await first.exited;
  // The sweeper follows its parent (the worker leaves on its own, as node:cluster workers do).
  await Promise.all([untilGone(sweeperPid), untilGone(workerPid)]);

  const second = spawnApi(env);
  apis.push(second);
  await untilHealthy(second, port);
  expect(alive(postmaster)).toBe(false);
  expect(second.lines.some((l) => String(l.msg).includes('a server left running by a cell that died'))).toBe(true);
  const popped = await request(port, 'GET', '/api/v1/pop/queue/kept');
  expect([popped.status, popped.body.messages.map((m: { transactionId: string }) => m.transactionId)]).toEqual([200, ['kept-1']]);
});
