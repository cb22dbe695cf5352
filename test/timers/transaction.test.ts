// Timers riding the transaction wire: scheduled, cancelled and rescheduled in the same commit as a
// push and a KV write, answered after them in the flat results array, and rolled back with them.
import { call } from '../support/http';
import { useApi } from '../support/api';
import { metric } from '../support/metrics';

const api = useApi();

const tx = (body: unknown) => call(api.url, 'POST', '/api/v1/transaction', body);

test('push, kv and timers commit together; timer answers come last in the flat array', async () => {
  const existing = await call(api.url, 'POST', '/api/v1/timers', { queue: 'wire', payload: 0, delaySeconds: 600 });
  const moving = await call(api.url, 'POST', '/api/v1/timers', { queue: 'wire', payload: 0, delaySeconds: 600 });
  const scheduledBefore = await metric(api.url, 'queen_timers_scheduled_total');
  const cancelledBefore = await metric(api.url, 'queen_timers_cancelled_total');
  const res = await tx({
    operations: [{ type: 'push', items: [{ queue: 'wire', payload: { order: 1 } }] }],
    kv: [{ op: 'put', ns: 'wire', key: 'order-1', value: { state: 'reminded' }, forever: true }],
    timers: [
      { op: 'schedule', queue: 'wire', payload: { remind: 1 }, delaySeconds: 3600, timerKey: 'order-1-reminder' },
      { op: 'cancel', timerId: existing.body.timerId },
      { op: 'reschedule', timerId: moving.body.timerId, delaySeconds: 60 },
    ],
  });
  expect(res.status).toBe(200);
  expect(res.body.ok).toBe(true);
  expect(res.body.results.length).toBe(5);
  expect(res.body.results[2]).toMatchObject({ index: 2, op: 'schedule', created: true, timerId: expect.any(String) });
  expect(res.body.results[3]).toEqual({ index: 3, op: 'cancel', timerId: existing.body.timerId, cancelled: true });
  expect(res.body.results[4]).toMatchObject({ index: 4, op: 'reschedule', timerId: moving.body.timerId, rescheduled: true });
  const peek = await call(api.url, 'GET', `/api/v1/timers/${res.body.results[2].timerId}`);
  expect(peek.body.timer.payload).toEqual({ remind: 1 });
  expect((await call(api.url, 'GET', `/api/v1/timers/${existing.body.timerId}`)).body).toEqual({ found: false });
  // Billed like the routes: the schedule and the reschedule are promises; the cancel is counted apart.
  expect(await metric(api.url, 'queen_timers_scheduled_total')).toBe(scheduledBefore + 2);
  expect(await metric(api.url, 'queen_timers_cancelled_total')).toBe(cancelledBefore + 1);

  // The same key again in another bundle: the existing timer, created:false.
  const again = await tx({ timers: [{ op: 'schedule', queue: 'wire', payload: 2, delaySeconds: 10, timerKey: 'order-1-reminder' }] });
  expect(again.body.results[0]).toMatchObject({ index: 0, created: false, timerId: res.body.results[2].timerId });
});

test('a lost KV precondition rolls the timers back with everything else', async () => {
  const before = (await api.pool.query('SELECT count(*)::int AS n FROM queen.log_timers')).rows[0].n;
  const res = await tx({
    kv: [{ op: 'put', ns: 'wire', key: 'guarded', value: 1, forever: true, expect: 12345, required: true }],
    timers: [{ op: 'schedule', queue: 'wire', payload: { never: true }, delaySeconds: 5 }],
  });
  expect(res.status).toBe(200);
  expect(res.body).toMatchObject({ ok: false, reason: 'kv_precondition', failedIndex: 0 });
  expect((await api.pool.query('SELECT count(*)::int AS n FROM queen.log_timers')).rows[0].n).toBe(before);
});

test('a bad timer operation is a 400 naming its code, and nothing beside it commits', async () => {
  const res = await tx({
    operations: [{ type: 'push', items: [{ queue: 'wire-bad', payload: 1 }] }],
    timers: [{ op: 'schedule', queue: 'wire', payload: 1, delaySeconds: 999999999 }],
  });
  expect(res.status).toBe(400);
  expect(res.body.error).toBe('timers_beyond_horizon');
  const pushed = await api.pool.query(`SELECT count(*)::int AS n FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
                                   JOIN queen.messages m ON m.partition_id = p.id WHERE q.name = 'wire-bad'`);
  expect(pushed.rows[0].n).toBe(0);
  const unknown = await tx({ timers: [{ op: 'snooze', timerId: 'x' }] });
  expect([unknown.status, unknown.body.error]).toEqual([400, 'timers_unknown_op']);
  // A field the op does not take (a cancel carrying a delay it would silently not apply).
  const stray = await tx({ timers: [{ op: 'cancel', timerId: '00000000-0000-4000-8000-000000000000', delaySeconds: 60 }] });
  expect([stray.status, stray.body.error, stray.body.index]).toEqual([400, 'timers_invalid_field', 0]);
});
