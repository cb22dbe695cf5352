// The rungs on the transaction wire and the timer routes: a paused switch is 403 without
// Retry-After inside /api/v1/transaction and 503 with it on a route; timer cancel, peek and list
// are never blocked; timers have their own quota dimension and their own enabled=false answer.
import { DEFAULT_TENANT } from '../../shared/config';
import { grant } from './helpers';
import { call } from '../support/http';
import { useApi } from '../support/api';

const api = useApi();

const flip = (body: unknown) => call(api.url, 'POST', '/api/v1/system/kv-timers', body);
const tx = (body: unknown) => call(api.url, 'POST', '/api/v1/transaction', body);
const push = { type: 'push', items: [{ queue: 'ops-wire', payload: { n: 1 } }] };
const kvOp = { op: 'put', ns: 'w', key: 'k', value: 1, forever: true };
const schedule = () => call(api.url, 'POST', '/api/v1/timers', { queue: 'ops-timers', payload: { a: 1 }, delaySeconds: 3600 });

test('paused KV inside the wire is a permanent 403 kv_disabled, without Retry-After; a bundle without kv still commits', async () => {
  await flip({ kv: false });
  try {
    const res = await tx({ operations: [push], kv: [kvOp] });
    expect([res.status, res.body.error, res.headers.get('retry-after')]).toEqual([403, 'kv_disabled', null]);
    const pushOnly = await tx({ operations: [push] });
    expect(pushOnly.status).toBe(200);
    expect(pushOnly.body.ok).toBe(true);
    // And the plain push route is not on the KV switch at all.
    expect((await call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'ops-wire', payload: {} }] })).status).toBe(201);
  } finally {
    await flip({ kv: true });
  }
  const both = await tx({ operations: [push], kv: [kvOp] });
  expect([both.status, both.body.ok]).toEqual([200, true]);
});

test('paused schedule: 503 with Retry-After on schedule and reschedule, 403 in the wire; cancel, peek and list answer', async () => {
  const made = await schedule();
  expect(made.status).toBe(200);
  const id = made.body.timerId;
  const other = (await schedule()).body.timerId;

  await flip({ timersSchedule: false });
  try {
    const refused = [await schedule(), await call(api.url, 'POST', `/api/v1/timers/${id}/reschedule`, { delaySeconds: 60 })];
    for (const res of refused) expect([res.status, res.body.error, res.headers.get('retry-after')]).toEqual([503, 'timers_schedule_disabled', '30']);

    const inWire = await tx({ timers: [{ op: 'schedule', queue: 'ops-timers', payload: {}, delaySeconds: 60 }] });
    expect([inWire.status, inWire.body.error, inWire.headers.get('retry-after')]).toEqual([403, 'timers_schedule_disabled', null]);

    expect((await call(api.url, 'GET', `/api/v1/timers/${id}`)).body).toMatchObject({ found: true });
    expect((await call(api.url, 'GET', '/api/v1/timers?queue=ops-timers')).status).toBe(200);
    const cancel = await call(api.url, 'DELETE', `/api/v1/timers/${id}`);
    expect([cancel.status, cancel.body.cancelled]).toEqual([200, true]);
    const cancelInWire = await tx({ timers: [{ op: 'cancel', timerId: other }], kv: [kvOp] });
    expect([cancelInWire.status, cancelInWire.body.ok]).toEqual([200, true]);
  } finally {
    await flip({ timersSchedule: true });
  }
  expect((await schedule()).status).toBe(200);
});

test('max_timers blocks schedules (route and wire), not reschedules or cancels; enabled=false is its own answer', async () => {
  await grant(api, DEFAULT_TENANT, { maxTimers: 2 });
  const a = await schedule();
  expect(a.status).toBe(200);
  expect((await schedule()).status).toBe(200);
  const over = await schedule();
  expect([over.status, over.body.error, over.headers.get('retry-after')]).toEqual([403, 'timers_quota_exceeded', null]);
  const inWire = await tx({ timers: [{ op: 'schedule', queue: 'ops-timers', payload: {}, delaySeconds: 60 }] });
  expect([inWire.status, inWire.body.error]).toEqual([403, 'timers_quota_exceeded']);
  // A reschedule adds no timer, a cancel takes one away: neither is refused by the quota.
  expect((await call(api.url, 'POST', `/api/v1/timers/${a.body.timerId}/reschedule`, { delaySeconds: 120 })).status).toBe(200);
  expect((await call(api.url, 'DELETE', `/api/v1/timers/${a.body.timerId}`)).status).toBe(200);
  // The KV quota is another dimension.
  expect((await tx({ kv: [kvOp] })).status).toBe(200);

  await grant(api, DEFAULT_TENANT, { enabled: false });
  const disabled = await schedule();
  expect([disabled.status, disabled.body.error]).toEqual([403, 'timers_disabled_for_tenant']);
  const kvDisabled = await tx({ kv: [kvOp] });
  expect([kvDisabled.status, kvDisabled.body.error]).toEqual([403, 'kv_disabled_for_tenant']);
  expect((await call(api.url, 'GET', '/api/v1/timers?queue=ops-timers')).status).toBe(200);
  await grant(api, DEFAULT_TENANT, {});
});
