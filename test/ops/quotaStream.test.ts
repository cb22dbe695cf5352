// The quota under a stream of writes, with the real usage rollup measuring while they land: the
// last measurement plus this worker's writes it has not seen, each write counted once. Before,
// writes under 100 ms apart merged into one entry whose stamp kept moving forward, no measurement
// ever retired it, and every row written since the stream began was counted twice: a tenant with
// max_rows 60 was blocked after about 37 rows.
import { grant } from './helpers';
import { call } from '../support/http';
import { startTestApi, TestApi } from '../support/api';
import { sql } from '../support/database';
import { startTestSweeper, TestSweeper } from '../support/sweeper';
import { elapse } from '../support/wait';

const LIMIT = 60;

let api: TestApi;
let sweeper: TestSweeper;
beforeAll(async () => {
  api = await startTestApi({ QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1', QUEEN_ADMIN_TOKEN: 'quota-stream-test-token' });
  // Wakes only when the test asks (a long interval), and every cycle measures usage.
  sweeper = startTestSweeper(api.databaseUrl, { intervalMs: 60_000, usageIntervalMs: 0 });
});
afterAll(async () => {
  await sweeper.close();
  await api.close();
});

/**
 * The sweeper measuring and the worker re-reading kv_usage, each on its own cadence (as in a
 * cell, where neither waits for the other), until the returned stop() is awaited.
 */
function measuring(rollupEveryMs: number, refreshEveryMs: number): () => Promise<void> {
  let stopped = false;
  const loop = async (step: () => Promise<unknown>, everyMs: number) => {
    while (!stopped) {
      await step();
      await elapse(everyMs); // a cadence, as a running cell has
    }
  };
  const loops = [loop(() => sweeper.cycles(1), rollupEveryMs), loop(() => api.server.ops.book.refresh(), refreshEveryMs)];
  return async () => {
    stopped = true;
    await Promise.all(loops);
  };
}

const as = (tenant: string) => ({ 'x-queen-tenant': tenant });
const putRow = (tenant: string, key: string) => call(api.url, 'PUT', `/api/v1/kv/stream/${key}`, { value: 1, forever: true }, as(tenant));

const scheduleTimer = (tenant: string, i: number) =>
  call(api.url, 'POST', '/api/v1/timers', { queue: 'stream', payload: { i }, delaySeconds: 3600 }, as(tenant));

/**
 * `writers` loops adding one row each call (or, with `timers`, scheduling one timer), `gapMs`
 * apart, each until its first refusal; then what is really there.
 */
async function streamUntilRefused(tenant: string, writers: number, gapMs: number, timers = false) {
  let admitted = 0;
  let next = 0;
  const refusals: { status: number; error: string }[] = [];
  const writer = async () => {
    while (next < 3 * LIMIT) {
      const i = next++;
      const res = timers ? await scheduleTimer(tenant, i) : await putRow(tenant, `k${i}`);
      if (res.status !== 200) {
        refusals.push({ status: res.status, error: res.body?.error });
        return;
      }
      admitted++;
      if (gapMs > 0) await elapse(gapMs); // the writers' pace
    }
  };
  await Promise.all(Array.from({ length: writers }, writer));
  const [{ n }] = await sql(api.databaseUrl, `SELECT count(*)::int AS n FROM ${timers ? 'queen.log_timers' : 'queen.kv'} WHERE tenant_id = $1`, [tenant]);
  return { admitted, refusals, rows: n as number };
}

/**
 * One writer against a 60-row quota granted to `tenant`, the sweeper measuring and the worker
 * re-reading on their cadences: the block lands within one write of 60, every admitted write stored.
 */
async function blockedWithinOneWrite(tenant: string, o: { rollupEveryMs: number; refreshEveryMs: number; gapMs: number }) {
  await grant(api, tenant, { maxRows: LIMIT });
  const stop = measuring(o.rollupEveryMs, o.refreshEveryMs);
  const run = await streamUntilRefused(tenant, 1, o.gapMs);
  await stop();
  expect(run.refusals).toEqual([{ status: 403, error: 'kv_quota_exceeded' }]);
  expect(run.rows).toBe(run.admitted);
  expect(run.admitted).toBeGreaterThanOrEqual(LIMIT - 1);
  expect(run.admitted).toBeLessThanOrEqual(LIMIT);
  return run;
}

test('one write at a time, slowly, against a 60-row quota: the block lands within one write of 60, and lifts only on a newer measurement below 90%', async () => {
  const tenant = '51515151-5151-4151-8151-515151515151';
  const run = await blockedWithinOneWrite(tenant, { rollupEveryMs: 150, refreshEveryMs: 70, gapMs: 15 });

  const book = api.server.ops.book;
  const blocked = async () => (await putRow(tenant, 'probe')).status === 403;
  // A measurement taken before the block does not lift it, however low.
  await sql(api.databaseUrl, `UPDATE queen.kv_usage SET rows = 0, computed_at = computed_at - interval '1 hour' WHERE tenant_id = $1`, [tenant]);
  await book.refresh();
  expect(await blocked()).toBe(true);

  // Down to exactly 90% of the limit: a newer measurement sees it, and the block holds.
  const keep = Math.ceil(0.9 * LIMIT);
  for (let i = keep; i < run.admitted; i++) expect((await call(api.url, 'DELETE', `/api/v1/kv/stream/k${i}`, undefined, as(tenant))).status).toBe(200);
  await sweeper.cycles(1);
  await book.refresh();
  expect(await blocked()).toBe(true);

  // One row below 90%: the next measurement lifts it.
  expect((await call(api.url, 'DELETE', `/api/v1/kv/stream/k${keep - 1}`, undefined, as(tenant))).status).toBe(200);
  await sweeper.cycles(1);
  await book.refresh();
  expect((await putRow(tenant, 'after')).status).toBe(200);
});

test('writes back to back, one at a time, while the sweeper measures: the block lands within one write of 60', async () => {
  await blockedWithinOneWrite('52525252-5252-4252-8252-525252525252', { rollupEveryMs: 20, refreshEveryMs: 30, gapMs: 0 });
});

// With writes in flight while the rollup starts, a commit and the measurement can fall inside one
// write's round trip, where no clock orders them: such a write is counted until the next
// measurement (conservative). So the block may land early by at most the writes in flight.
// (Twelve runs here: 58 once, 59 or 60 otherwise; the previous code admitted about 41.)
test('four concurrent writers while the sweeper measures: never past 60, and early by at most the four in flight', async () => {
  const tenant = '53535353-5353-4353-8353-535353535353';
  const writers = 4;
  await grant(api, tenant, { maxRows: LIMIT });
  const stop = measuring(20, 30);
  const run = await streamUntilRefused(tenant, writers, 0);
  await stop();
  expect(run.refusals).toEqual(Array(writers).fill({ status: 403, error: 'kv_quota_exceeded' }));
  expect(run.rows).toBe(run.admitted);
  expect(run.admitted).toBeLessThanOrEqual(LIMIT);
  expect(run.admitted).toBeGreaterThanOrEqual(LIMIT - writers);
});

test('timers scheduled back to back against max_timers 60: the same accounting, the block lands within one of 60', async () => {
  const tenant = '54545454-5454-4454-8454-545454545454';
  await grant(api, tenant, { maxTimers: LIMIT });
  const stop = measuring(20, 30);
  const run = await streamUntilRefused(tenant, 1, 0, true);
  await stop();
  expect(run.refusals).toEqual([{ status: 403, error: 'timers_quota_exceeded' }]);
  expect(run.rows).toBe(run.admitted);
  expect(run.admitted).toBeGreaterThanOrEqual(LIMIT - 1);
  expect(run.admitted).toBeLessThanOrEqual(LIMIT);
});
