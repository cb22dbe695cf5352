// Rung 1: the operator's kill switches on the KV routes, the GET/POST surface, the mirror row.
import { Client } from 'pg';
import { SWITCHES_WRITE } from '../../shared/sql/system';
import { put } from './helpers';
import { call, kv } from '../support/http';
import { counter, metric } from '../support/metrics';
import { useApi } from '../support/api';
import { sql } from '../support/database';
import { waitFor } from '../support/wait';

const api = useApi();

const flip = (body: unknown) => call(api.url, 'POST', '/api/v1/system/kv-timers', body);

test('a fresh cell has every switch on and no rows: absent means on', async () => {
  const res = await call(api.url, 'GET', '/api/v1/system/kv-timers');
  expect(res.status).toBe(200);
  expect(res.body).toMatchObject({ kv: true, timersSchedule: true, timersFire: true, mirrored: true });
  expect(await sql(api.databaseUrl, 'SELECT * FROM queen.system_state')).toEqual([]);
});

test('pausing KV answers 503 kv_disabled with Retry-After on every KV route, and resuming restores them', async () => {
  expect((await kv(api.url, [put('a', 1)])).status).toBe(200);
  const before = await counter(api.url, 'queen_kv_refusals_total', { code: 'kv_disabled' });

  const paused = await flip({ kv: false });
  expect(paused.status).toBe(200);
  expect(paused.body).toMatchObject({ kv: false, timersSchedule: true, timersFire: true, mirrored: true });

  const answers = [
    await kv(api.url, [put('a', 2)]),
    await kv(api.url, [{ op: 'get', ns: 'ops', key: 'a' }]),
    await call(api.url, 'GET', '/api/v1/kv/ops/a'),
    await call(api.url, 'PUT', '/api/v1/kv/ops/a', { value: 3, forever: true }),
    await call(api.url, 'DELETE', '/api/v1/kv/ops/a'),
  ];
  for (const res of answers) {
    expect(res.status).toBe(503);
    expect(res.body.error).toBe('kv_disabled');
    expect(typeof res.body.message).toBe('string');
    expect(res.headers.get('retry-after')).toBe('30');
  }
  expect(await counter(api.url, 'queen_kv_refusals_total', { code: 'kv_disabled' })).toBe(before + 5);
  expect(await metric(api.url, 'queen_kv_timers_switch', { switch: 'kv' })).toBe(0);

  // The mirror row is written, and the GET reads it fresh.
  expect(await sql(api.databaseUrl, `SELECT value FROM queen.system_state WHERE key = 'kv_enabled'`)).toEqual([{ value: false }]);
  const state = await call(api.url, 'GET', '/api/v1/system/kv-timers');
  expect(state.body).toMatchObject({ kv: false, mirrored: true, mirror: { kv: false, timersSchedule: true, timersFire: true } });

  const resumed = await flip({ kv: true });
  expect(resumed.body).toMatchObject({ kv: true, mirrored: true });
  // Nothing stored was affected by the pause.
  const get = await call(api.url, 'GET', '/api/v1/kv/ops/a');
  expect(get.status).toBe(200);
  expect(get.body).toMatchObject({ found: true, value: 1 });
});

test('an omitted field is left alone, and each switch is independent', async () => {
  await flip({ timersSchedule: false });
  let state = await call(api.url, 'GET', '/api/v1/system/kv-timers');
  expect(state.body).toMatchObject({ kv: true, timersSchedule: false, timersFire: true });
  // KV is not on the schedule switch.
  expect((await kv(api.url, [put('b')])).status).toBe(200);

  await flip({ timersFire: false });
  await flip({});
  state = await call(api.url, 'GET', '/api/v1/system/kv-timers');
  expect(state.body).toMatchObject({ kv: true, timersSchedule: false, timersFire: false, mirrored: true });
  const rows = await sql(api.databaseUrl, 'SELECT key, value FROM queen.system_state ORDER BY key');
  expect(rows).toEqual([
    { key: 'kv_enabled', value: true },
    { key: 'timers_fire_enabled', value: false },
    { key: 'timers_schedule_enabled', value: false },
  ]);

  await flip({ timersSchedule: true, timersFire: true });
  state = await call(api.url, 'GET', '/api/v1/system/kv-timers');
  expect(state.body).toMatchObject({ kv: true, timersSchedule: true, timersFire: true });
});

test('a row written by another cell reaches this worker through NOTIFY', async () => {
  await sql(
    api.databaseUrl,
    `INSERT INTO queen.system_state (key, value) VALUES ('kv_enabled', 'false')
     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`,
  );
  await sql(api.databaseUrl, `NOTIFY queen_system_state, 'kv-timers'`);
  await waitFor(async () => (await kv(api.url, [put('c')])).status === 503, { what: 'KV paused (503) by the row the NOTIFY announced', everyMs: 10 });
  await flip({ kv: true });
  expect((await kv(api.url, [put('c')])).status).toBe(200);
});

test('each flip holds from the moment it is answered, however quickly the operator flips back', async () => {
  // A flip's own announcement (NOTIFY) reaches the listener later than the answer; an older one
  // arriving after a newer flip must not undo it, not even for a moment.
  const seen: string[] = [];
  for (let i = 0; i < 60; i++) {
    await flip({ kv: false });
    seen.push(`off ${(await kv(api.url, [put('f')])).status}`);
    await flip({ kv: true });
    seen.push(`on ${(await kv(api.url, [put('f')])).status}`);
  }
  expect(seen.filter((s) => s !== 'off 503' && s !== 'on 200')).toEqual([]);
});

test('an announcement committed before a flip does not undo it, even when it arrives after', async () => {
  // Hold the rows so that the flip's own write (and its announcement) waits; announce an older
  // state meanwhile, as a flip committed just before this one would.
  const holder = new Client({ connectionString: api.databaseUrl });
  await holder.connect();
  try {
    await holder.query('BEGIN');
    await holder.query('LOCK TABLE queen.system_state IN SHARE MODE');
    const flipping = flip({ kv: false });
    let status = 200;
    for (let i = 0; i < 200 && status !== 503; i++) status = (await kv(api.url, [put('g')])).status;
    expect(status).toBe(503);
    await sql(api.databaseUrl, `SELECT pg_notify('queen_system_state', '{"token":"elsewhere:1","rows":{"kv_enabled":true}}')`);
    // An ignored announcement leaves no trace to await: time for it to arrive and be ignored.
    await new Promise((r) => setTimeout(r, 200));
    expect((await kv(api.url, [put('g')])).status).toBe(503);
    await holder.query('COMMIT');
    expect((await flipping).body).toMatchObject({ kv: false, mirrored: true });
  } finally {
    await holder.end();
  }
  await new Promise((r) => setTimeout(r, 200)); // as above: the flip's own, older announcement arrives and is ignored
  expect((await kv(api.url, [put('g')])).status).toBe(503);
  // An announcement from elsewhere after this flip's own is newer, and wins.
  await sql(api.databaseUrl, `SELECT pg_notify('queen_system_state', '{"token":"elsewhere:2","rows":{"kv_enabled":true}}')`);
  await waitFor(async () => (await kv(api.url, [put('g')])).status === 200, { what: 'KV back on (200) after the newer announcement', everyMs: 10 });
});

test('a flip whose announcement this worker missed gives way to the database once its time is up', async () => {
  // The switch listener is cut, so this worker never hears the flip's own announcement; a later
  // flip from another cell must still take effect here (once the unannounced flip's wait is over),
  // not be hidden behind it for good.
  await sql(api.databaseUrl, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'queen-api-switches' AND datname = current_database()`);
  expect((await flip({ kv: false })).body).toMatchObject({ kv: false, mirrored: true });
  const listening = async () =>
    (await sql(api.databaseUrl, `SELECT 1 FROM pg_stat_activity WHERE application_name = 'queen-api-switches' AND datname = current_database() AND state = 'idle'`)).length > 0;
  await waitFor(listening, { what: 'the switch listener connected again', everyMs: 20 });
  // Another cell turns KV back on, as its API would: the row and its announcement.
  await sql(api.databaseUrl, SWITCHES_WRITE.text, [JSON.stringify({ kv_enabled: true }), 'other-cell:1']);
  await waitFor(async () => (await kv(api.url, [put('h')])).status === 200, { what: "KV back on (200) by the other cell's write", timeoutMs: 40_000, everyMs: 100 });
});

test('a malformed flip is a 400 with a sentence, and changes nothing', async () => {
  for (const body of [{ kv: 'no' }, { kvEnabled: false }, [false], 'nope']) {
    const res = await flip(body);
    expect(res.status).toBe(400);
    expect(res.body.error).toMatch(/^(bad_request|invalid_json)$/);
  }
  const state = await call(api.url, 'GET', '/api/v1/system/kv-timers');
  expect(state.body).toMatchObject({ kv: true, timersSchedule: true, timersFire: true });
});

test('when the mirror cannot be written the flip is still in force here and mirrored is false', async () => {
  // Revoke the row's table from under the API: the write fails, the in-process flip stands.
  await sql(api.databaseUrl, `ALTER TABLE queen.system_state RENAME TO system_state_gone`);
  try {
    const res = await flip({ kv: false });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ kv: false, mirrored: false });
    expect((await kv(api.url, [put('d')])).status).toBe(503);
  } finally {
    await sql(api.databaseUrl, `ALTER TABLE queen.system_state_gone RENAME TO system_state`);
  }
  const back = await flip({ kv: true });
  expect(back.body).toMatchObject({ kv: true, mirrored: true });
});
