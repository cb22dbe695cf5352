// A flip reaches every worker of a cluster (through the primary) within a second, and survives a
// restart when mirrored. The built API runs as an operator runs it, with two workers; each request
// goes on a new connection, so the kernel hands successive requests to different workers.
import { Client } from 'pg';
import { freePort } from '../../shared/embeddedPostgres';
import { createTestDatabase } from '../support/database';
import { request } from '../support/http';
import { spawnApi, Spawned, untilHealthy } from '../support/processes';
import { waitFor } from '../support/wait';

let db: { url: string; drop(): Promise<void> };
let port: number;
let api: Spawned | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  port = await freePort();
});
afterAll(async () => {
  await api?.stop();
  await db.drop();
});

const boot = async () => {
  api = spawnApi({ DATABASE_URL: db.url, PORT: String(port), QUEEN_WORKERS: '2', DB_POOL_SIZE: '20', QUEEN_KV_ENABLED: '1' });
  await untilHealthy(api, port);
};

/** GETs the switch state on fresh connections until every worker has answered `want` (or the deadline). */
async function untilBothWorkers(want: (state: any) => boolean, deadlineMs: number): Promise<Map<number, any>> {
  const seen = new Map<number, any>();
  const deadline = Date.now() + deadlineMs;
  while (Date.now() < deadline) {
    const res = await request(port, 'GET', '/api/v1/system/kv-timers');
    if (res.status === 200 && want(res.body)) seen.set(res.body.worker, res.body);
    if (seen.size >= 2) return seen;
  }
  return seen;
}

test('a flip reaches both workers within a second, and a mirrored flip survives a restart', async () => {
  await boot();
  const boot1 = api!.output();
  // The boot line an operator reads once, with the topology the rate limits see.
  expect(boot1).toMatch(/"msg":"config: kv_timers"/);
  expect(boot1).toMatch(/one bucket per tenant and scope for the whole cell: the 2 workers lease tokens from this primary/);
  expect(boot1).toMatch(/"rateLimitsTopology":\{"workers":2,"processesSeen":1,/);
  expect(boot1).toMatch(/QUEEN_KV_ENABLED is set but does nothing/);

  const before = await untilBothWorkers((s) => s.kv === true, 10_000);
  expect(before.size).toBe(2);

  // Hold queen.system_state so that the database cannot be the messenger (its NOTIFY follows the
  // write, which waits on this lock): a sibling that flips now heard it from the primary (IPC).
  const holder = new Client({ connectionString: db.url });
  await holder.connect();
  try {
    await holder.query('BEGIN');
    await holder.query('LOCK TABLE queen.system_state IN SHARE MODE');
    const flipping = request(port, 'POST', '/api/v1/system/kv-timers', { body: { kv: false, timersSchedule: false } });
    const after = await untilBothWorkers((s) => s.kv === false && s.timersSchedule === false, 1000);
    expect([...after.keys()].sort()).toEqual([...before.keys()].sort());
    const changes = () => api!.output().split('\n').filter((l) => l.includes('switches: kv/timers state changed'));
    await waitFor(() => changes().some((l) => l.includes('"source":"cluster"')), { what: "the sibling worker's state change (source cluster)", everyMs: 10 }).catch(() => undefined);
    expect(changes().some((l) => l.includes('"source":"operator"'))).toBe(true);
    expect(changes().some((l) => l.includes('"source":"cluster"'))).toBe(true);
    expect(changes().some((l) => l.includes('"source":"database"'))).toBe(false);

    // Let the write through: the answer says the row was written.
    await holder.query('COMMIT');
    const flipped = await flipping;
    expect(flipped.status).toBe(200);
    expect(flipped.body).toMatchObject({ kv: false, timersSchedule: false, timersFire: true, mirrored: true });
  } finally {
    await holder.end();
  }

  // The routes of both workers refuse: every fresh connection gets 503.
  for (let i = 0; i < 6; i++) {
    const res = await request(port, 'POST', '/api/v1/kv', { body: { operations: [{ op: 'get', ns: 'n', key: 'k' }] } });
    expect([res.status, res.body.error, res.headers.get('retry-after')]).toEqual([503, 'kv_disabled', '30']);
  }

  // Restart the whole cluster: the new workers read the mirrored rows at boot.
  await api!.stop();
  expect(api!.child.exitCode).toBe(0);
  await boot();
  const restarted = await untilBothWorkers(() => true, 10_000);
  expect(restarted.size).toBe(2);
  for (const state of restarted.values()) expect(state).toMatchObject({ kv: false, timersSchedule: false, timersFire: true, mirrored: true });
  const refused = await request(port, 'GET', '/api/v1/kv/n/k');
  expect([refused.status, refused.body.error]).toEqual([503, 'kv_disabled']);

  // And back on, everywhere, within a second.
  await request(port, 'POST', '/api/v1/system/kv-timers', { body: { kv: true, timersSchedule: true } });
  const on = await untilBothWorkers((s) => s.kv === true && s.timersSchedule === true, 1000);
  expect(on.size).toBe(2);
  const ok = await request(port, 'GET', '/api/v1/kv/n/k');
  expect([ok.status, ok.body.found]).toEqual([200, false]);
});
