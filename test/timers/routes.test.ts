// The timer routes' shapes and refusals: schedule, peek, list (keyset), cancel, reschedule,
// timerKey idempotency, the horizon and payload ceilings, and the billing counters.
import { call } from '../support/http';
import { useApi } from '../support/api';
import { counter, metric } from '../support/metrics';

const api = useApi({ QUEEN_TIMERS_MAX_HORIZON_SECONDS: '3600', QUEEN_TIMERS_MAX_PAYLOAD_BYTES: '200' });

const schedule = (body: unknown) => call(api.url, 'POST', '/api/v1/timers', body);

test('schedule answers the id and the instant; peek shows the timer, numbers exactly as sent', async () => {
  const res = await schedule(`{"queue":"orders","payload":{"n":12345678901234567890.5,"s":"x"},"deliverAt":"2099-01-01T00:00:00Z"}`);
  // 2099 is beyond the one-hour horizon of this suite: refused.
  expect(res.status).toBe(400);
  expect(res.body.error).toBe('timers_beyond_horizon');

  const ok = await schedule(`{"queue":"orders","partition":"p1","payload":{"n":12345678901234567890.5,"s":"x"},"delaySeconds":600}`);
  expect(ok.status).toBe(200);
  expect(ok.body).toEqual({ timerId: expect.stringMatching(/^[0-9a-f-]{36}$/), deliverAt: expect.any(String), created: true });
  const deliverAt = Date.parse(ok.body.deliverAt);
  expect(deliverAt).toBeGreaterThan(Date.now() + 590_000);
  expect(deliverAt).toBeLessThan(Date.now() + 610_000);

  const peek = await call(api.url, 'GET', `/api/v1/timers/${ok.body.timerId}`);
  expect(peek.status).toBe(200);
  expect(peek.body).toEqual({
    found: true,
    timer: {
      timerId: ok.body.timerId,
      queue: 'orders',
      partition: 'p1',
      deliverAt: ok.body.deliverAt,
      payload: { n: expect.any(Number), s: 'x' },
      createdAt: expect.any(String),
    },
  });
  expect(peek.text).toContain('12345678901234567890.5');

  const absent = await call(api.url, 'GET', '/api/v1/timers/00000000-0000-4000-8000-000000000000');
  expect(absent.body).toEqual({ found: false });
});

test('a deliverAt in the past is accepted as is (it fires at the next sweep); partition defaults to Default', async () => {
  const res = await schedule({ queue: 'orders', payload: 1, deliverAt: '2020-05-01T10:00:00.123+02:00' });
  expect(res.status).toBe(200);
  expect(res.body.deliverAt).toBe('2020-05-01T08:00:00.123Z');
  const peek = await call(api.url, 'GET', `/api/v1/timers/${res.body.timerId}`);
  expect(peek.body.timer.partition).toBe('Default');
});

test('the same timerKey answers the existing timer with created:false', async () => {
  const first = await schedule({ queue: 'orders', payload: { a: 1 }, delaySeconds: 60, timerKey: 'remind-42' });
  const second = await schedule({ queue: 'orders', payload: { a: 2 }, delaySeconds: 120, timerKey: 'remind-42' });
  expect(first.body.created).toBe(true);
  expect(second.body).toEqual({ timerId: first.body.timerId, deliverAt: first.body.deliverAt, created: false });
  const peek = await call(api.url, 'GET', `/api/v1/timers/${first.body.timerId}`);
  expect(peek.body.timer.payload).toEqual({ a: 1 });
  // Concurrent schedules with one key: exactly one timer.
  const racing = await Promise.all(
    Array.from({ length: 10 }, (_, i) => schedule({ queue: 'orders', payload: i, delaySeconds: 60, timerKey: 'race-1' })),
  );
  expect(new Set(racing.map((r) => r.body.timerId)).size).toBe(1);
  expect(racing.filter((r) => r.body.created).length).toBe(1);
  // Once cancelled, the key is free again.
  await call(api.url, 'DELETE', `/api/v1/timers/${first.body.timerId}`);
  const again = await schedule({ queue: 'orders', payload: { a: 3 }, delaySeconds: 60, timerKey: 'remind-42' });
  expect(again.body.created).toBe(true);
  expect(again.body.timerId).not.toBe(first.body.timerId);
});

test('cancel answers cancelled:true once, then absent; reschedule moves the instant or answers absent', async () => {
  const scheduledBefore = await metric(api.url, 'queen_timers_scheduled_total');
  const cancelledBefore = await metric(api.url, 'queen_timers_cancelled_total');
  const t = await schedule({ queue: 'orders', payload: {}, delaySeconds: 300 });
  const moved = await call(api.url, 'POST', `/api/v1/timers/${t.body.timerId}/reschedule`, { delaySeconds: 900 });
  expect(moved.status).toBe(200);
  expect(moved.body).toEqual({ timerId: t.body.timerId, rescheduled: true, deliverAt: expect.any(String) });
  expect(Date.parse(moved.body.deliverAt)).toBeGreaterThan(Date.parse(t.body.deliverAt) + 590_000);
  const peek = await call(api.url, 'GET', `/api/v1/timers/${t.body.timerId}`);
  expect(peek.body.timer.deliverAt).toBe(moved.body.deliverAt);

  const cancel = await call(api.url, 'DELETE', `/api/v1/timers/${t.body.timerId}`);
  expect(cancel.status).toBe(200);
  expect(cancel.body).toEqual({ timerId: t.body.timerId, cancelled: true });
  const again = await call(api.url, 'DELETE', `/api/v1/timers/${t.body.timerId}`);
  expect(again.body).toEqual({ timerId: t.body.timerId, cancelled: false, reason: 'absent' });
  const late = await call(api.url, 'POST', `/api/v1/timers/${t.body.timerId}/reschedule`, { deliverAt: '2020-01-01T00:00:00Z' });
  expect(late.body).toEqual({ timerId: t.body.timerId, rescheduled: false, reason: 'absent' });
  expect((await call(api.url, 'GET', `/api/v1/timers/${t.body.timerId}`)).body).toEqual({ found: false });

  // Billing: the schedule and the reschedule are promises; the cancel is counted apart.
  expect(await metric(api.url, 'queen_timers_scheduled_total')).toBe(scheduledBefore + 2);
  expect(await metric(api.url, 'queen_timers_cancelled_total')).toBe(cancelledBefore + 1);
});

test('list pages by (deliverAt, timerId) without gaps or repeats, filtered by queue', async () => {
  const ids: string[] = [];
  for (let i = 0; i < 7; i++) {
    // Two timers per instant, to exercise the timerId tie-break.
    const at = new Date(Math.floor(Date.now() / 1000) * 1000 + 1_000_000 + Math.floor(i / 2) * 1000).toISOString();
    const ok = await schedule({ queue: 'listing', payload: i, deliverAt: at });
    ids.push(ok.body.timerId);
  }
  await schedule({ queue: 'elsewhere', payload: 0, delaySeconds: 1000 });
  const seen: Array<{ timerId: string; deliverAt: string }> = [];
  let after: string | null = null;
  let pages = 0;
  do {
    const q: string = `/api/v1/timers?queue=listing&limit=3${after ? `&after=${encodeURIComponent(after)}` : ''}`;
    const page = await call(api.url, 'GET', q);
    expect(page.status).toBe(200);
    seen.push(...page.body.timers);
    after = page.body.next;
    pages++;
  } while (after && pages < 10);
  expect(seen.map((t) => t.timerId).sort()).toEqual([...ids].sort());
  const keys = seen.map((t) => `${t.deliverAt},${t.timerId}`);
  expect([...keys].sort()).toEqual(keys);
  expect(pages).toBe(3);
  expect(seen.every((t: any) => t.queue === 'listing')).toBe(true);
});

test('deliverAt takes the fraction digits encoders write (up to nanoseconds) and never rounds below the instant asked', async () => {
  // Java's Instant.toString and Go's RFC3339Nano write nine digits, .NET's "o" seven: all were 400
  // timers_invalid_deliver_at. And .123999 was stored (and answered) as .123, before the instant asked.
  for (const [sent, stored] of [
    ['2020-01-01T00:00:00.123456789Z', '2020-01-01T00:00:00.124Z'],
    ['2020-01-01T00:00:00.1234567+01:00', '2019-12-31T23:00:00.124Z'],
    ['2020-01-01T00:00:00.123999Z', '2020-01-01T00:00:00.124Z'],
    ['2020-01-01T00:00:00.123Z', '2020-01-01T00:00:00.123Z'],
    ['2020-01-01T00:00:00Z', '2020-01-01T00:00:00.000Z'],
  ]) {
    const res = await call(api.url, 'POST', '/api/v1/transaction', { timers: [{ op: 'schedule', queue: 'digits', payload: 1, deliverAt: sent }] });
    expect({ sent, status: res.status, deliverAt: res.body.results?.[0]?.deliverAt }).toEqual({ sent, status: 200, deliverAt: stored });
  }
  const tooMany = await schedule({ queue: 'digits', payload: 1, deliverAt: '2020-01-01T00:00:00.1234567890Z' });
  expect([tooMany.status, tooMany.body.error]).toEqual([400, 'timers_invalid_deliver_at']);
});

test('a tiny positive delaySeconds (1e-400, below double precision) means now, on every path', async () => {
  // numeric holds it; the cast to double precision underflowed (22003): a 400 invalid_json whose
  // message echoed the number's 400 digits.
  const before = Date.now();
  const one = await schedule('{"queue":"tiny","payload":1,"delaySeconds":1e-400}');
  expect(one.status).toBe(200);
  expect(one.body.created).toBe(true);
  expect(Math.abs(Date.parse(one.body.deliverAt) - before)).toBeLessThan(60_000);
  // The general path (a timerKey keeps the schedule off the shortcut) and a reschedule.
  const keyed = await schedule('{"queue":"tiny","payload":1,"delaySeconds":2e-324,"timerKey":"tiny-1"}');
  expect([keyed.status, keyed.body.created]).toEqual([200, true]);
  const moved = await call(api.url, 'POST', `/api/v1/timers/${keyed.body.timerId}/reschedule`, '{"delaySeconds":1e-16383}');
  expect([moved.status, moved.body.rescheduled]).toEqual([200, true]);
});

test('refusals are 400s with their own codes', async () => {
  const refusals = (code: string) => counter(api.url, 'queen_kv_refusals_total', { code });
  const horizonBefore = await refusals('timers_beyond_horizon');
  const payloadBefore = await refusals('timers_payload_too_large');
  const cases: Array<[unknown, string]> = [
    [{ queue: 'q', payload: 1 }, 'timers_when_required'],
    [{ queue: 'q', payload: 1, delaySeconds: 1, deliverAt: '2020-01-01T00:00:00Z' }, 'timers_when_conflict'],
    [{ queue: 'q', payload: 1, deliverAt: 'tomorrow' }, 'timers_invalid_deliver_at'],
    [{ queue: 'q', payload: 1, deliverAt: '2020-01-01T00:00:00' }, 'timers_invalid_deliver_at'],
    [{ queue: 'q', payload: 1, deliverAt: '2020-02-31T00:00:00Z' }, 'timers_invalid_deliver_at'],
    [{ queue: 'q', payload: 1, delaySeconds: -1 }, 'timers_invalid_delay'],
    [{ queue: 'q', payload: 1, delaySeconds: '5' }, 'timers_invalid_delay'],
    [{ queue: 'q', payload: 1, delaySeconds: 3601 }, 'timers_beyond_horizon'],
    // Too large for an interval: refused as beyond the horizon, not an overflow.
    [{ queue: 'q', payload: 1, delaySeconds: 1e300 }, 'timers_beyond_horizon'],
    [{ payload: 1, delaySeconds: 1 }, 'timers_queue_required'],
    [{ queue: 'no spaces', payload: 1, delaySeconds: 1 }, 'timers_invalid_queue'],
    [{ queue: 'q', partition: 7, payload: 1, delaySeconds: 1 }, 'timers_invalid_partition'],
    [{ queue: 'q', delaySeconds: 1 }, 'timers_payload_required'],
    [{ queue: 'q', payload: 'x'.repeat(300), delaySeconds: 1 }, 'timers_payload_too_large'],
    [{ queue: 'q', payload: 1, delaySeconds: 1, timerKey: '' }, 'timers_invalid_timer_key'],
    // A misspelled timerKey would make every retry a new timer: refused, never ignored.
    [{ queue: 'q', payload: 1, delaySeconds: 1, timer_key: 'order-1' }, 'timers_invalid_field'],
    [{ queue: 'q', payload: 1, delaySeconds: 1, timerkey: 'order-1' }, 'timers_invalid_field'],
    [{ queue: 'q', payload: 1, deliverAt: '2020-01-01T00:00:00Z', delay: 5 }, 'timers_invalid_field'],
    ['[1,2]', 'invalid_json'],
    ['{"queue":', 'invalid_json'],
  ];
  for (const [body, code] of cases) {
    const res = await schedule(body);
    expect({ body, status: res.status, error: res.body?.error }).toEqual({ body, status: 400, error: code });
    expect(typeof res.body.message).toBe('string');
  }
  const AN_ID = '00000000-0000-4000-8000-000000000000';
  const routeRefusals: Array<[string, string, unknown, string]> = [
    ['DELETE', '/api/v1/timers/not-a-uuid', undefined, 'timers_invalid_timer_id'],
    ['GET', '/api/v1/timers/123', undefined, 'timers_invalid_timer_id'],
    ['GET', '/api/v1/timers?limit=0', undefined, 'timers_invalid_limit'],
    ['GET', '/api/v1/timers?limit=ten', undefined, 'timers_invalid_limit'],
    ['GET', '/api/v1/timers?after=yesterday', undefined, 'timers_invalid_cursor'],
    // %00 cannot be bound as PostgreSQL text: these were 400 invalid_json on a GET with no body.
    ['GET', '/api/v1/timers?after=%00', undefined, 'timers_invalid_cursor'],
    ['GET', '/api/v1/timers?queue=q%00', undefined, 'timers_invalid_queue'],
    // Like any name a schedule would refuse (it answered an empty page, as if no timer were pending).
    ['GET', '/api/v1/timers?queue=no%20spaces', undefined, 'timers_invalid_queue'],
    ['POST', `/api/v1/timers/${AN_ID}/reschedule`, { queue: 'x', delaySeconds: 1 }, 'timers_body_conflicts_with_path'],
    ['POST', `/api/v1/timers/${AN_ID}/reschedule`, {}, 'timers_when_required'],
  ];
  for (const [method, path, body, code] of routeRefusals) {
    const res = await call(api.url, method, path, body);
    expect([method, path, res.status, res.body?.error]).toEqual([method, path, 400, code]);
  }
  // The operator's ceilings are counted as refusals by a limit.
  expect(await refusals('timers_beyond_horizon')).toBe(horizonBefore + 2);
  expect(await refusals('timers_payload_too_large')).toBe(payloadBefore + 1);
});
