// The operator's surface: the kill switches (GET/POST /api/v1/system/kv-timers) and the numbers an
// operator, or a proxy summing a storage quota, needs (GET /api/v1/system/cluster).
import { timingSafeEqual } from 'node:crypto';
import { NextFunction, Request, Response, Router } from 'express';
import type { Pool } from 'pg';
import type { Config } from '../../../shared/config';
import { ApiError } from '../../../shared/errors';
import { CLUSTER_USAGE } from '../../../shared/sql/system';
import { bodyText, isPlainObject, parseJson, rawBody } from '../edge/body';
import { sendJsonText } from '../edge/answer';
import { SWITCH_NAMES, SwitchState } from '../switches/state';
import type { Switches } from '../switches/switches';
import type { Logger } from '../../../shared/log';
import { audit } from '../edge/audit';

export interface SystemRouteDeps {
  config: Config;
  pool: Pool;
  switches: Switches;
  log: Logger;
}

/** Why an operator flips a switch, for the audit line: plain text, short. */
const REASON = /^[^\u0000-\u001f\u007f]{1,200}$/;

function parseFlip(text: string): { change: Partial<SwitchState>; reason?: string } {
  const body = parseJson(text.trim() === '' ? '{}' : text);
  if (!isPlainObject(body)) throw new ApiError('bad_request', 'The body must be a JSON object such as {"kv": false}.');
  const unknown = Object.keys(body).filter((k) => k !== 'reason' && !(SWITCH_NAMES as readonly string[]).includes(k));
  if (unknown.length > 0) {
    throw new ApiError('bad_request', `Unknown switch ${unknown.join(', ')}; the switches are kv, timersSchedule and timersFire (and a reason may say why).`);
  }
  const reason = body.reason;
  if (reason !== undefined && (typeof reason !== 'string' || !REASON.test(reason))) {
    throw new ApiError('bad_request', 'reason must be text of 1 to 200 characters without control characters.');
  }
  const change: Partial<SwitchState> = {};
  for (const name of SWITCH_NAMES) {
    const v = body[name];
    if (v === undefined) continue;
    if (typeof v !== 'boolean') throw new ApiError('bad_request', `${name} must be true or false; omit it to leave it as it is.`);
    change[name] = v;
  }
  return { change, reason: reason as string | undefined };
}

/** A given token against the expected one, in constant time (a length mismatch answers false at once). */
export function sameToken(expected: Buffer, given: Buffer): boolean {
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/**
 * With QUEEN_ADMIN_TOKEN set, the operator's surface answers only `Authorization: Bearer <token>`:
 * a kill switch pauses KV for every tenant, and /cluster lists every tenant's usage. Compared in
 * constant time; a wrong or missing token is 401 and changes nothing.
 */
export function requireAdmin(token: string | undefined) {
  const expected = token === undefined ? undefined : Buffer.from(token);
  return (req: Request, res: Response, next: NextFunction): void => {
    if (expected === undefined) return next();
    const header = req.headers.authorization ?? '';
    // The scheme is case-insensitive (RFC 9110, section 11.1); the token is not.
    const given = Buffer.from(/^bearer /i.test(header) ? header.slice(7) : '');
    if (sameToken(expected, given)) return next();
    res.setHeader('WWW-Authenticate', 'Bearer realm="queen-system"');
    next(new ApiError('unauthorized', 'The system routes need Authorization: Bearer <QUEEN_ADMIN_TOKEN>.'));
  };
}

export function systemRoutes({ config, pool, switches, log }: SystemRouteDeps): Router {
  const router = Router();
  router.use('/api/v1/system', requireAdmin(config.adminToken));

  // The state in force in this worker, and a fresh read of the rows the rest of the cell follows.
  router.get('/api/v1/system/kv-timers', async (_req, res) => {
    let mirror: SwitchState | null = null;
    try {
      mirror = await switches.readMirror();
    } catch {
      mirror = null;
    }
    const state = switches.snapshot();
    const mirrored = mirror !== null && SWITCH_NAMES.every((n) => mirror![n] === state[n]);
    res.json({ ...state, mirrored, mirror, worker: process.pid });
  });

  // An omitted field is left alone: pausing new timers must not also stop delivering promised ones.
  router.post('/api/v1/system/kv-timers', rawBody(config), async (req, res) => {
    const { change, reason } = parseFlip(bodyText(req));
    const { state, mirrored } = await switches.flip(change);
    audit(log, req, 'switch_flip', { target: change, outcome: { mirrored }, reason });
    res.json({ ...state, mirrored, worker: process.pid });
  });

  // kvBytes and timerBytes are top-level so a proxy can add them to the storage total it already
  // enforces; the numbers are the sweeper's last measurement (queen.kv_usage), not a live count.
  router.get('/api/v1/system/cluster', async (_req, res) => {
    const { rows } = await pool.query<{ kv_bytes: string; timer_bytes: string; tenants: string }>(CLUSTER_USAGE);
    const r = rows[0];
    sendJsonText(
      res,
      200,
      `{"kvBytes":${r.kv_bytes},"timerBytes":${r.timer_bytes},"tenants":${r.tenants},"switches":${JSON.stringify(switches.snapshot())}}`,
    );
  });

  return router;
}
