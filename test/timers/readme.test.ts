// The timer flow of docs/timers.md, run as written (its curl lines, with the placeholders filled in), so the
// documentation cannot drift from the API: schedule with a timerKey, the same key again, peek,
// list, reschedule, cancel.
import { curlsIn } from '../support/markdown';
import { call } from '../support/http';
import { useApi } from '../support/api';

const api = useApi();

test('the timer flow of docs/timers.md answers as the page says', async () => {
  const curls = curlsIn('docs/timers.md', '# Timers and the sweeper');
  expect(curls.map((c) => c.method)).toEqual(['POST', 'GET', 'GET', 'POST', 'DELETE']);
  const [schedule, peek, list, reschedule, cancel] = curls;

  const first = await call(api.url, schedule.method, schedule.path, schedule.body);
  expect(first.body).toEqual({ timerId: expect.any(String), deliverAt: expect.any(String), created: true });
  const again = await call(api.url, schedule.method, schedule.path, schedule.body);
  expect(again.body).toEqual({ ...first.body, created: false });

  const id = first.body.timerId as string;
  const fill = (p: string) => p.replace('<timerId>', id);
  expect((await call(api.url, peek.method, fill(peek.path))).body).toMatchObject({ found: true, timer: { timerId: id, queue: 'orders' } });
  const listed = await call(api.url, list.method, fill(list.path));
  expect(listed.body).toEqual({ timers: [expect.objectContaining({ timerId: id })], next: null });
  expect((await call(api.url, reschedule.method, fill(reschedule.path), reschedule.body)).body).toMatchObject({ rescheduled: true });
  expect((await call(api.url, cancel.method, fill(cancel.path))).body).toMatchObject({ cancelled: true });
  expect((await call(api.url, cancel.method, fill(cancel.path))).body).toMatchObject({ cancelled: false, reason: 'absent' });
});
