// Timers: a message promised now and delivered later. Answers are the cell's, as its routes give them.
//
// Races a caller can see: a cancel that answers `{cancelled: true}` means the timer never fires; one
// racing the fire waits for the fire's commit and answers `{cancelled: false, reason: "absent"}` (the
// message is in the log exactly once). A reschedule racing the fire answers the same way. Cancel,
// peek and list are never refused by a paused schedule switch.

import type { HttpClient } from './http';
import { stringifyJson } from './json';
import type {
  TimerCancelResult,
  TimerOp,
  TimerPage,
  TimerPeekResult,
  TimerRescheduleResult,
  TimerSchedule,
  TimerScheduleResult,
  TimerWhen,
} from './types';

type Obj = Record<string, unknown>;

function when(w: TimerWhen, out: Obj): Obj {
  if (w.deliverAt !== undefined) out.deliverAt = w.deliverAt instanceof Date ? w.deliverAt.toISOString() : w.deliverAt;
  if (w.delaySeconds !== undefined) out.delaySeconds = w.delaySeconds;
  return out;
}

/** A schedule as the cell takes it: `data` is sent as `payload`, a Date as ISO 8601. */
export function scheduleBody(s: TimerSchedule): Obj {
  const out: Obj = { queue: s.queue };
  if (s.partition !== undefined) out.partition = s.partition;
  if ('payload' in s) out.payload = s.payload;
  else if ('data' in s) out.payload = s.data;
  if (s.timerKey !== undefined) out.timerKey = s.timerKey;
  return when(s, out);
}

/** A timer operation for the transaction's `timers` array. */
export function timerOp(op: TimerOp): Obj {
  switch (op.op) {
    case 'schedule': {
      const { op: _op, ...schedule } = op;
      return { op: 'schedule', ...scheduleBody(schedule) };
    }
    case 'cancel':
      return { op: 'cancel', timerId: op.timerId };
    case 'reschedule':
      return when(op, { op: 'reschedule', timerId: op.timerId });
    default:
      // An unknown op goes as written: the cell refuses it with timers_unknown_op.
      return { ...(op as Obj) };
  }
}

export interface ListOptions {
  queue?: string;
  /** Timers per page (1 to 1000). */
  limit?: number;
  /** The `next` of a previous page. */
  after?: string;
}

export class Timers {
  constructor(private readonly http: HttpClient) {}

  /** `{timerId, deliverAt, created}`; the same timerKey again answers that timer, created: false. */
  async schedule<T = unknown>(s: TimerSchedule<T>): Promise<TimerScheduleResult> {
    return (await this.http.call('POST', '/api/v1/timers', { body: stringifyJson(scheduleBody(s)) })).body as TimerScheduleResult;
  }

  async peek<T = unknown>(timerId: string): Promise<TimerPeekResult<T>> {
    return (await this.http.call('GET', `/api/v1/timers/${encodeURIComponent(timerId)}`)).body as TimerPeekResult<T>;
  }

  /** Pending timers, oldest deliverAt first, a page at a time until the last. */
  async *list<T = unknown>(opts: ListOptions = {}): AsyncGenerator<TimerPage<T>, void, undefined> {
    let after = opts.after;
    for (;;) {
      const q = new URLSearchParams();
      if (opts.queue !== undefined) q.set('queue', opts.queue);
      if (opts.limit !== undefined) q.set('limit', String(opts.limit));
      if (after !== undefined) q.set('after', after);
      const qs = q.toString();
      const page = (await this.http.call('GET', `/api/v1/timers${qs ? `?${qs}` : ''}`)).body as TimerPage<T>;
      yield page;
      if (page.next === null || page.next === undefined) return;
      after = page.next;
    }
  }

  async cancel(timerId: string): Promise<TimerCancelResult> {
    return (await this.http.call('DELETE', `/api/v1/timers/${encodeURIComponent(timerId)}`)).body as TimerCancelResult;
  }

  async reschedule(timerId: string, w: TimerWhen): Promise<TimerRescheduleResult> {
    const path = `/api/v1/timers/${encodeURIComponent(timerId)}/reschedule`;
    return (await this.http.call('POST', path, { body: stringifyJson(when(w, {})) })).body as TimerRescheduleResult;
  }
}
