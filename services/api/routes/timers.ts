// The timer routes: schedule, peek, list (keyset), cancel, reschedule. Shapes at the boundary only;
// the rules (when, horizon, payload ceiling, timerKey idempotency, lock order) are in
// queen.timers_apply_v1 and its neighbours (sql/functions/timers.sql).
//
// Race outcomes a caller can see (each is a test in test/timers/):
//  * DELETE against a sweeper's fire: {cancelled: true} means it never fires; a cancel that arrives
//    while the fire holds the timer waits for the fire's commit and answers {cancelled: false,
//    reason: "absent"}, and the message is in the log exactly once.
//  * reschedule against a fire: {rescheduled: true} (the new deliverAt holds) or
//    {rescheduled: false, reason: "absent"} (it already fired).
//  * two schedules with one timerKey: one {created: true}, the other the same timerId, {created: false}.
//
// A schedule into a queue with encryptionEnabled (docs/security.md#encryption-at-rest): PostgreSQL
// refuses it unsealed (QK428) before writing anything; the payload is read back as jsonb text,
// sealed here and the schedule sent again, so the timer holds only the sealed text. Peek and list
// open sealed timers here, the only place the key is.
import { Router, Request, Response, NextFunction } from 'express';
import type { Pool } from 'pg';
import { ApiError, coerceError } from '../../../shared/errors';
import type { Logger } from '../../../shared/log';
import { isUuid } from '../../../shared/uuid';
import type { Config } from '../../../shared/config';
import type { ApiMetrics } from '../../../shared/metrics';
import { TIMERS_APPLY_ONE, TIMERS_APPLY_ONE_TRACED, TIMERS_LIST, TIMERS_PEEK, TIMERS_SEAL_ONE } from '../../../shared/sql/timers';
import { callerTrace } from '../../../shared/tracing';
import { openTimers, sealAll, sealingRequired } from '../seal/seal';
import type { Guards } from '../admission/guards';
import { bodyText, isPlainObject, parseJson, rawBody , parseObject } from '../edge/body';
import { nameRule, refuseNul } from '../edge/fields';
import { sendJsonText } from '../edge/answer';
import { tenantOf } from '../edge/tenant';

export interface TimerRouteDeps {
  config: Config;
  pool: Pool;
  metrics: ApiMetrics;
  log: Logger;
  /** Schedule and reschedule pass the switch, grant, quota and rate (admission/guards.ts); cancel, peek and list never do. */
  guards: Guards;
}

function timerIdOf(req: Request): string {
  const id = String((req.params as Record<string, string>).id);
  if (!isUuid(id)) throw new ApiError('timers_invalid_timer_id', 'The path must name a timer id (a UUID).');
  return id.toLowerCase();
}

/** The body as text, checked to be a JSON object; its text is what travels on to PostgreSQL. */
function objectBody(req: Request): string {
  const text = bodyText(req);
  if (text.trim() === '') throw new ApiError('invalid_json', 'This route needs a JSON object body.');
  parseObject(text);
  return text;
}

/** A reschedule's body: only the new time; anything else in it conflicts with the path's timer. */
function rescheduleBody(req: Request): string {
  const text = objectBody(req);
  const stray = Object.keys(parseJson(text) as Record<string, unknown>).filter((k) => k !== 'deliverAt' && k !== 'delaySeconds');
  if (stray.length > 0) {
    throw new ApiError('timers_body_conflicts_with_path', `A reschedule takes only deliverAt or delaySeconds; remove ${stray.join(', ')} from the body.`);
  }
  return text;
}

function queryString(req: Request, name: string): string | undefined {
  const v = (req.query as Record<string, unknown>)[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw new ApiError('bad_request', `The query parameter ${name} may be given once.`);
  return v;
}

/** The two ceilings an operator sets (horizon, payload) are refusals by a limit: counted, by code. */
const LIMIT_CODES = new Set(['timers_beyond_horizon', 'timers_payload_too_large']);

export function timerRoutes({ config, pool, metrics, log, guards }: TimerRouteDeps): Router {
  const router = Router();
  const body = rawBody(config);
  const unreadable = (n: number) => log.warn({ timers: n }, 'sealed timer payloads no key of this process opens were answered as payload: null (QUEEN_ENCRYPTION_KEY / _PREVIOUS)');
  /** $1 tenant, $2 the body's text, $3 the route's fields; sealed after a QK428 (a schedule into an encrypted queue). */
  const send = async (values: unknown[]) => {
    // A traced request's schedule stores its span on the timer (docs/tracing.md); else as always.
    const trace = callerTrace();
    const one = (sealed: string | null) => pool.query(trace === undefined
      ? { ...TIMERS_APPLY_ONE, values: [...values, sealed] }
      : { ...TIMERS_APPLY_ONE_TRACED, values: [...values, sealed, trace] });
    try {
      return (await one(null)).rows[0];
    } catch (err) {
      const queues = sealingRequired(err, config.encryptionKeys);
      if (!queues) throw err;
      const texts = (await pool.query({ ...TIMERS_SEAL_ONE, values: [values[1], values[2], queues] })).rows[0].texts;
      try {
        return (await one(sealAll(config.encryptionKeys!, texts))).rows[0];
      } catch (again) {
        // Not expected (the sealed text covers the queue just named); said as a retry, never a 500.
        if (sealingRequired(again, config.encryptionKeys)) throw new ApiError('db_unavailable', 'The queue of this timer changed its encryption while it was sent; retry.', { retryAfterSeconds: 1 });
        throw again;
      }
    }
  };
  const apply = async (values: unknown[]) => {
    try {
      return await send(values);
    } catch (err) {
      const verdict = coerceError(err, 'timers');
      if (verdict instanceof ApiError && LIMIT_CODES.has(verdict.code)) metrics.kvRefusals.inc({ code: verdict.code });
      throw verdict;
    }
  };

  // The switch and the caller first (a stranger's body is not read), then the body's shape, then
  // the rest of the admission: a malformed call never takes a rate token.
  router.post('/api/v1/timers', body, async (req, res) => {
    const tenant = guards.timersCaller(req);
    const text = objectBody(req);
    const admitted = await guards.admitTimers(tenant, { schedules: 1 });
    const row = await admitted.track(apply([admitted.tenant, text, '{"op":"schedule"}']));
    if (row.created) metrics.timersScheduled.inc();
    sendJsonText(res, 200, row.body);
  });

  router.get('/api/v1/timers', async (req, res) => {
    const tenant = tenantOf(config, req);
    const limitText = queryString(req, 'limit');
    if (limitText !== undefined && !/^\d{1,6}$/.test(limitText)) {
      throw new ApiError('timers_invalid_limit', 'limit must be a whole number from 1 to 1000.');
    }
    const queue = queryString(req, 'queue');
    const after = queryString(req, 'after');
    refuseNul(queue, 'timers_invalid_queue', nameRule('A queue name'));
    refuseNul(after, 'timers_invalid_cursor', 'after must be the next value of a previous page.');
    const { rows } = await pool.query({
      ...TIMERS_LIST,
      values: [tenant, queue || null, after || null, limitText === undefined ? null : Number(limitText)],
    });
    sendJsonText(res, 200, openTimers(config.encryptionKeys, rows[0].body, unreadable));
  });

  router.get('/api/v1/timers/:id', async (req, res) => {
    const tenant = tenantOf(config, req);
    const { rows } = await pool.query({ ...TIMERS_PEEK, values: [tenant, timerIdOf(req)] });
    sendJsonText(res, 200, openTimers(config.encryptionKeys, rows[0].body, unreadable));
  });

  router.delete('/api/v1/timers/:id', async (req, res) => {
    const tenant = tenantOf(config, req);
    const id = timerIdOf(req);
    const row = await apply([tenant, '{}', JSON.stringify({ op: 'cancel', timerId: id })]);
    if (row.cancelled) metrics.timersCancelled.inc();
    sendJsonText(res, 200, row.body);
  });

  router.post('/api/v1/timers/:id/reschedule', body, async (req, res) => {
    const tenant = guards.timersCaller(req);
    const id = timerIdOf(req);
    const text = rescheduleBody(req);
    const admitted = await guards.admitTimers(tenant, { reschedules: 1 });
    const row = await admitted.track(apply([admitted.tenant, text, JSON.stringify({ op: 'reschedule', timerId: id })]));
    if (row.rescheduled) metrics.timersScheduled.inc();
    sendJsonText(res, 200, row.body);
  });

  // The KV pool's time limits, fired on a timer route, are answered as the timers' own.
  router.use((err: unknown, _req: Request, _res: Response, next: NextFunction) => next(coerceError(err, 'timers')));
  return router;
}
