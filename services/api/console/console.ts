// The web console at /console (docs/console.md): the operator reads and actions of
// docs/operator-routes.md as HTML pages, for a person on call with a browser. Served only with
// QUEEN_ADMIN_TOKEN set (without it /console is not there: 404, as any unknown path). Each page
// runs the same statement as its operator route (shared/sql/operator.ts) with the same parameter
// rules (routes/operator.ts); each action is a POST form with a CSRF token and writes the same
// audit line. It is its own small Express app, answered before the API's (app.ts), so the API's
// route list and its OpenAPI document stay the API's.
import express, { NextFunction, Request, Response } from 'express';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Pool } from 'pg';
import type { Config } from '../../../shared/config';
import { ApiError, coerceError } from '../../../shared/errors';
import type { Logger } from '../../../shared/log';
import { isUuid } from '../../../shared/uuid';
import {
  OPERATOR_DEAD_LETTER, OPERATOR_DEAD_LETTERS, OPERATOR_KV_DELETE, OPERATOR_SKIP, OPERATOR_KV_KEY, OPERATOR_KV_KEYS, OPERATOR_MESSAGE, OPERATOR_MESSAGES, OPERATOR_PARTITIONS,
  CONSOLE_LOGIN, OPERATOR_OVERVIEW, OPERATOR_QUEUES, OPERATOR_TENANTS, OPERATOR_TIMER, OPERATOR_TIMERS,
} from '../../../shared/sql/operator';
import { LOG_DEAD_LETTERS } from '../../../shared/sql/log';
import { CLUSTER_USAGE } from '../../../shared/sql/system';
import { openAnswer } from '../seal/seal';
import { audit, OPERATOR_NAME } from '../edge/audit';
import { GROUP, NAMESPACE, PARTITION, QUEUE, operatorTenant, param, path, rateLimitsOf, whole } from '../routes/operator';
import type { Switches } from '../switches/switches';
import { page, Safe, send, securityHeaders, query } from './html';
import * as pages from './pages';
import { Sessions, setCookie } from './session';
import { CSS } from './style';

export interface ConsoleDeps {
  config: Config;
  pool: Pool;
  switches: Switches;
  log: Logger;
}

/** What an action's redirect may announce: fixed words, never text from the request. */
const NOTICES: Record<string, string> = {
  requeued: 'Requeued: the group gets the message again.',
  discarded: 'Discarded: the message left the dead-letter list.',
  cursor_too_far: 'Not requeued: the group has finished too many messages of that partition since (discard it or push it again).',
  nothing: 'Nothing to do: it was no longer there.',
  cancelled: 'Timer cancelled.',
  skipped: 'The group\'s cursor moved to now: it gets what is pushed from here on.',
  deleted: 'Key deleted.',
  bulk: 'Done for the oldest dead letters (up to 100); the count below is what is left.',
};

const PAGE_LIMIT = 100;

/** Wrong tokens a peer address may try in a window before the login page refuses it for the rest of the window. */
export const LOGIN_FAILURES = 10;
const LOGIN_WINDOW_MS = 60_000;

/**
 * A form without its session's CSRF token: 403 csrf_refused. The console's own refusal (a page,
 * never an API answer), so it is not among the API's codes (shared/errors.ts, docs/errors.md).
 */
class CsrfRefused extends ApiError {
  constructor() {
    super('csrf_refused', 'This form lacks its CSRF token or carries another session\'s: reload the page and try again.');
  }

  override get status(): number {
    return 403;
  }
}

/** A console request: its session and CSRF token once `signedIn` has passed. */
interface Signed extends Request {
  csrf?: string;
  /** Who signed this session in: the name every action's audit line carries. */
  operator?: string;
}

export function consoleApp({ config, pool, switches, log }: ConsoleDeps): ((req: IncomingMessage, res: ServerResponse) => boolean) {
  const token = config.adminToken;
  if (token === undefined) return () => false;
  const sessions = new Sessions(token);
  const tenancy = config.tenancyHeader;
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  const form = express.urlencoded({ extended: false, limit: '16kb', parameterLimit: 20 });

  const read = async (statement: { name: string; text: string }, values: unknown[]): Promise<any> => {
    const { rows } = await pool.query<{ body: string }>({ ...statement, values });
    return JSON.parse(rows[0].body);
  };
  /** The tenant of a page: under tenancy null when none is named (the picker), else as the operator routes decide it. */
  const tenantOf = (req: Request, required: boolean): string | null => {
    if (tenancy && !required && param(req, 'tenant') === undefined) return null;
    return operatorTenant(config, req);
  };
  const ctxOf = (req: Signed, tenant: string | null): pages.Ctx => ({ tenant: tenancy ? tenant : null, csrf: req.csrf! });
  const render = (req: Signed, res: Response, status: number, title: string, tenant: string | null, body: Safe) => {
    const done = param(req, 'done');
    send(res, status, page({ title, tenant: tenancy ? tenant : null, tenancy, csrf: req.csrf, operator: req.operator, notice: done ? NOTICES[done] ?? null : null }, body));
  };

  /** GET without a session: to the login page. POST without one: 401. A POST without its CSRF token: 403. */
  const signedIn = (req: Signed, res: Response, next: NextFunction): void => {
    const session = sessions.session(req);
    if (session === null) {
      if (req.method === 'GET') {
        securityHeaders(res);
        res.redirect(303, '/console/login');
        return;
      }
      return next(new ApiError('unauthorized', 'Sign in on /console/login first.'));
    }
    req.csrf = sessions.csrf(session);
    req.operator = sessions.operator(session);
    if (req.method === 'POST' && !sessions.csrfMatches(session, (req.body as Record<string, unknown> | undefined)?.csrf)) {
      return next(new CsrfRefused());
    }
    next();
  };
  /** A form field: a string or absent. */
  const field = (req: Request, name: string): string | null => {
    const v = (req.body as Record<string, unknown> | undefined)?.[name];
    if (v === undefined || v === '') return null;
    if (typeof v !== 'string') throw new ApiError('bad_request', `Give ${name} once.`);
    return v;
  };

  app.get('/console/console.css', (_req, res) => {
    securityHeaders(res);
    res.setHeader('Cache-Control', 'no-cache');
    res.type('text/css').send(CSS);
  });

  app.get('/console/login', (req, res) => {
    send(res, 200, page({ title: 'Sign in', tenant: null, tenancy }, pages.login(null)));
  });
  // Guessing the token is bounded per cell: past LOGIN_FAILURES wrong ones in a minute from one
  // address, on any worker of the cell, that address is refused (429, Retry-After) until the minute
  // is over, right token or not (queen.console_login_v1 counts them in the cell's rate buckets).
  app.post('/console/login', form, async (req, res) => {
    const peer = (req.socket.remoteAddress ?? '').slice(0, 64);
    const given = (req.body as Record<string, unknown> | undefined)?.token;
    const right = typeof given === 'string' && sessions.tokenMatches(given);
    const seen = await read(CONSOLE_LOGIN, [peer, !right, LOGIN_FAILURES, LOGIN_WINDOW_MS / 1000]);
    if (seen.refused) {
      throw new ApiError('rate_limited', 'Too many wrong tokens from this address: wait a minute and try again.', { retryAfterSeconds: seen.retryAfterSeconds });
    }
    if (!right) {
      send(res, 401, page({ title: 'Sign in', tenant: null, tenancy }, pages.login('That is not this cell\'s admin token.')));
      return;
    }
    const operator = (req.body as Record<string, unknown> | undefined)?.operator;
    if (typeof operator !== 'string' || !OPERATOR_NAME.test(operator)) {
      send(res, 400, page({ title: 'Sign in', tenant: null, tenancy }, pages.login('Give your name as the audit log should show it: 1 to 64 of A-Z a-z 0-9 . _ @ : + -.')));
      return;
    }
    securityHeaders(res);
    res.setHeader('Set-Cookie', setCookie(sessions.issue(operator), req.secure));
    res.redirect(303, '/console');
  });
  app.post('/console/logout', form, signedIn, (req, res) => {
    securityHeaders(res);
    res.setHeader('Set-Cookie', setCookie(null, req.secure));
    res.redirect(303, '/console/login');
  });

  app.get('/console', signedIn, async (req: Signed, res) => {
    const tenant = tenantOf(req, false);
    // The page's reads at once, each on its own pool connection: the cell's state, the sweeper's
    // usage measurement, and the tenant's queues (or, under tenancy with none chosen, the picker's tenants).
    const [cell, usage, queues, known] = await Promise.all([
      read(OPERATOR_OVERVIEW, [null]),
      pool.query<{ kv_bytes: string; timer_bytes: string; tenants: string }>(CLUSTER_USAGE).then(({ rows: [u] }) => ({ kvBytes: u.kv_bytes, timerBytes: u.timer_bytes, tenants: JSON.parse(u.tenants) })),
      tenant === null ? null : read(OPERATOR_QUEUES, [tenant, param(req, 'after') ?? null, null]),
      tenancy && tenant === null ? read(OPERATOR_TENANTS, [null, null, 50]) : null,
    ]);
    const picker = known === null ? null : pages.tenantPicker(known.tenants);
    render(req, res, 200, 'Overview', tenant, pages.overview(ctxOf(req, tenant), switches.snapshot(), cell, tenancy, usage, queues, picker));
  });

  app.get('/console/queues/:queue', signedIn, async (req: Signed, res) => {
    const tenant = tenantOf(req, true);
    const queue = path(req, 'queue', 'log_invalid_queue', QUEUE);
    const a = await read(OPERATOR_PARTITIONS, [tenant, queue, param(req, 'after') ?? null, PAGE_LIMIT]);
    render(req, res, 200, `Queue ${queue}`, tenant, pages.partitions(ctxOf(req, tenant), a));
  });

  app.get('/console/queues/:queue/partitions/:partition', signedIn, async (req: Signed, res) => {
    const tenant = tenantOf(req, true);
    const queue = path(req, 'queue', 'log_invalid_queue', QUEUE);
    const partition = path(req, 'partition', 'log_invalid_partition', PARTITION);
    const after = whole(param(req, 'after'), 'operator_invalid_cursor', 'after (the next of a previous page)', 18);
    const a = await read(OPERATOR_MESSAGES, [tenant, queue, partition, param(req, 'order') ?? null, after, PAGE_LIMIT]);
    render(req, res, 200, `Partition ${partition} of ${queue}`, tenant, pages.messages(ctxOf(req, tenant), a));
  });

  app.get('/console/messages/:partitionId/:transactionId', signedIn, async (req: Signed, res) => {
    const tenant = tenantOf(req, true);
    const partitionId = path(req, 'partitionId', 'log_invalid_partition_id', 'partitionId is a partition\'s UUID.');
    const transactionId = path(req, 'transactionId', 'log_transaction_id_required', 'transactionId may not contain U+0000.');
    const { rows } = await pool.query<{ body: string }>({ ...OPERATOR_MESSAGE, values: [tenant, partitionId, transactionId] });
    const m = JSON.parse(openAnswer(config.encryptionKeys, rows[0].body, (n) => log.warn({ messages: n }, 'sealed payloads no key of this process opens were shown as unreadable (QUEEN_ENCRYPTION_KEY / _PREVIOUS)')));
    render(req, res, 200, `Message ${transactionId}`, tenant, pages.message(ctxOf(req, tenant), m));
  });

  app.get('/console/queues/:queue/dead-letters', signedIn, async (req: Signed, res) => {
    const tenant = tenantOf(req, true);
    const queue = path(req, 'queue', 'log_invalid_queue', QUEUE);
    const group = param(req, 'consumerGroup') ?? null;
    const offset = whole(param(req, 'offset'), 'operator_invalid_cursor', 'offset') ?? 0;
    // Queen's dead-letter read (GET /api/v1/dlq): the list with its failures; the payloads it
    // carries are not shown here (the message page shows one).
    const a = await read(LOG_DEAD_LETTERS, [tenant, queue, null, group, PAGE_LIMIT, Math.min(offset, 1_000_000_000), null, null]);
    render(req, res, 200, `Dead letters of ${queue}`, tenant, pages.deadLetters(ctxOf(req, tenant), queue, group, a, offset, PAGE_LIMIT));
  });

  for (const action of ['requeue', 'discard'] as const) {
    app.post(`/console/messages/:partitionId/:transactionId/${action}`, form, signedIn, async (req: Signed, res) => {
      const tenant = operatorTenant(config, req);
      const partitionId = path(req, 'partitionId', 'log_invalid_partition_id', 'partitionId is a partition\'s UUID.');
      const transactionId = path(req, 'transactionId', 'log_transaction_id_required', 'transactionId may not contain U+0000.');
      const group = field(req, 'consumerGroup');
      if (group !== null && group.includes('\u0000')) throw new ApiError('log_invalid_consumer_group', GROUP);
      const out = await read(OPERATOR_DEAD_LETTER, [tenant, action, partitionId, transactionId, group]);
      audit(log, req, `dead_letter_${action}`, { tenant, target: { partitionId, transactionId, consumerGroup: group, via: 'console' }, outcome: out.groups, operator: req.operator });
      const outcomes: string[] = out.groups.map((g: { outcome: string }) => g.outcome);
      const word = action === 'requeue' ? 'requeued' : 'discarded';
      const done = outcomes.includes(word) ? word : outcomes.includes('cursor_too_far') ? 'cursor_too_far' : 'nothing';
      const t = tenancy ? tenant : null;
      securityHeaders(res);
      res.redirect(303, field(req, 'back') === 'dead-letters'
        ? `/console/queues/${encodeURIComponent(out.queue)}/dead-letters${query({ tenant: t, done })}`
        : `/console/messages/${encodeURIComponent(partitionId)}/${encodeURIComponent(transactionId)}${query({ tenant: t, done })}`);
    });
  }

  // All of a queue's dead letters (of one group, or every group), up to 100 a press, oldest first.
  for (const action of ['requeue', 'discard'] as const) {
    app.post(`/console/queues/:queue/dead-letters/${action}`, form, signedIn, async (req: Signed, res) => {
      const tenant = operatorTenant(config, req);
      const queue = path(req, 'queue', 'log_invalid_queue', QUEUE);
      const group = field(req, 'consumerGroup');
      if (group !== null && group.includes('\u0000')) throw new ApiError('log_invalid_consumer_group', GROUP);
      const out = await read(OPERATOR_DEAD_LETTERS, [tenant, action, queue, group, PAGE_LIMIT]);
      audit(log, req, `dead_letters_${action}`, { tenant, target: { queue, consumerGroup: group, via: 'console' }, outcome: { done: out.requeued ?? out.discarded, cursorTooFar: out.cursorTooFar, remaining: out.remaining }, operator: req.operator });
      securityHeaders(res);
      res.redirect(303, `/console/queues/${encodeURIComponent(queue)}/dead-letters${query({ tenant: tenancy ? tenant : null, consumerGroup: group, done: (out.requeued ?? out.discarded) > 0 ? 'bulk' : 'nothing' })}`);
    });
  }

  app.post('/console/queues/:queue/groups/:group/skip', form, signedIn, async (req: Signed, res) => {
    const tenant = operatorTenant(config, req);
    const queue = path(req, 'queue', 'log_invalid_queue', QUEUE);
    const group = path(req, 'group', 'log_invalid_consumer_group', GROUP);
    const out = await read(OPERATOR_SKIP, [tenant, queue, group, null]);
    audit(log, req, 'consumer_group_skip', { tenant, target: { queue, consumerGroup: group, partition: null, via: 'console' }, outcome: { partitions: out.partitions, skipped: out.skipped }, operator: req.operator });
    securityHeaders(res);
    res.redirect(303, `/console/queues/${encodeURIComponent(queue)}${query({ tenant: tenancy ? tenant : null, done: 'skipped' })}`);
  });

  app.post('/console/kv/:ns/keys/:key/delete', form, signedIn, async (req: Signed, res) => {
    const tenant = operatorTenant(config, req);
    const ns = path(req, 'ns', 'kv_invalid_namespace', NAMESPACE);
    const key = path(req, 'key', 'kv_invalid_key', 'A key may not contain U+0000.');
    const out = await read(OPERATOR_KV_DELETE, [tenant, ns, key]);
    audit(log, req, 'kv_delete', { tenant, target: { namespace: ns, key, via: 'console' }, outcome: { deleted: out.deleted }, operator: req.operator });
    securityHeaders(res);
    res.redirect(303, `/console/kv/${encodeURIComponent(ns)}${query({ tenant: tenancy ? tenant : null, done: out.deleted ? 'deleted' : 'nothing' })}`);
  });

  app.get('/console/timers', signedIn, async (req: Signed, res) => {
    const tenant = tenantOf(req, true);
    const queue = param(req, 'queue') ?? null;
    const state = param(req, 'state') ?? 'all';
    const a = await read(OPERATOR_TIMERS, [tenant, queue, state, null, param(req, 'after') ?? null, PAGE_LIMIT]);
    render(req, res, 200, 'Timers', tenant, pages.timers(ctxOf(req, tenant), state, queue, a));
  });

  app.post('/console/timers/:timerId/cancel', form, signedIn, async (req: Signed, res) => {
    const tenant = operatorTenant(config, req);
    const timerId = path(req, 'timerId', 'timers_invalid_timer_id', 'The timer id is a UUID.');
    const out = await read(OPERATOR_TIMER, [tenant, 'cancel', timerId, null]);
    audit(log, req, 'timer_cancel', { tenant, target: { timerId, via: 'console' }, outcome: { cancelled: out.cancelled, reason: out.reason }, operator: req.operator });
    const state = field(req, 'state');
    securityHeaders(res);
    res.redirect(303, `/console/timers${query({ tenant: tenancy ? tenant : null, state: state !== null && /^(all|due|late|pending)$/.test(state) ? state : null, done: out.cancelled ? 'cancelled' : 'nothing' })}`);
  });

  app.get('/console/kv', signedIn, async (req: Signed, res) => {
    const tenant = tenantOf(req, true);
    const ns = param(req, 'ns');
    if (ns !== undefined) {
      securityHeaders(res);
      res.redirect(303, `/console/kv/${encodeURIComponent(ns)}${query({ tenant: tenancy ? tenant : null, prefix: param(req, 'prefix') })}`);
      return;
    }
    render(req, res, 200, 'KV', tenant, pages.kvForm(ctxOf(req, tenant), null, null));
  });

  app.get('/console/kv/:ns', signedIn, async (req: Signed, res) => {
    const tenant = tenantOf(req, true);
    const ns = path(req, 'ns', 'kv_invalid_namespace', NAMESPACE);
    const a = await read(OPERATOR_KV_KEYS, [tenant, ns, param(req, 'prefix') ?? null, param(req, 'after') ?? null, PAGE_LIMIT]);
    render(req, res, 200, `KV namespace ${ns}`, tenant, pages.kvKeys(ctxOf(req, tenant), a));
  });

  app.get('/console/kv/:ns/keys/:key', signedIn, async (req: Signed, res) => {
    const tenant = tenantOf(req, true);
    const ns = path(req, 'ns', 'kv_invalid_namespace', NAMESPACE);
    const key = path(req, 'key', 'kv_invalid_key', 'A key may not contain U+0000.');
    const k = await read(OPERATOR_KV_KEY, [tenant, ns, key]);
    render(req, res, 200, `Key ${key}`, tenant, pages.kvKey(ctxOf(req, tenant), k));
  });

  app.get('/console/tenants', signedIn, async (req: Signed, res) => {
    const tenant = tenancy ? (param(req, 'tenant')?.trim().toLowerCase() ?? null) : null;
    if (tenant !== null && !isUuid(tenant)) throw new ApiError('tenant_required', 'tenant is a UUID.');
    const after = param(req, 'after')?.trim().toLowerCase() ?? null;
    if (after !== null && !isUuid(after)) throw new ApiError('operator_invalid_cursor', 'after is the next of a previous page, a tenant id.');
    const a = await read(OPERATOR_TENANTS, [null, after, PAGE_LIMIT]);
    render(req, res, 200, 'Tenants', tenant, pages.tenants(ctxOf(req, tenant), tenancy, { ...a, rateLimits: rateLimitsOf(config), requireGrant: config.kvRequireGrant }));
  });

  // Anything else under /console: a 404 page.
  app.use((req: Signed, _res: Response, next: NextFunction) => next(new ApiError('not_found', `No console page at ${req.path}.`)));

  // The cell's rule, as HTML: a refusal is its 4xx page, a bug is a 500 logged by its identity only.
  app.use((err: unknown, req: Signed, res: Response, _next: NextFunction) => {
    const e = err as { status?: number; statusCode?: number; message?: string; type?: string };
    let refusal: ApiError | null = null;
    const expressStatus = e?.status ?? e?.statusCode;
    if (!(err instanceof ApiError) && expressStatus && expressStatus >= 400 && expressStatus < 500) {
      refusal = new ApiError(e.type === 'entity.too.large' ? 'payload_too_large' : 'bad_request', e.type === 'entity.too.large' ? 'The form is larger than the console takes.' : 'The request could not be read.');
    } else {
      const coerced = coerceError(err);
      if (coerced instanceof ApiError) refusal = coerced;
    }
    if (refusal === null) {
      const { name, message, code, stack } = (err ?? {}) as { name?: string; message?: string; code?: string; stack?: string };
      log.error({ err: { name, message, code, stack }, method: req.method, route: req.route?.path }, 'unhandled console error answered as 500');
      refusal = new ApiError('internal', 'An internal error occurred; it has been logged.');
    }
    if (res.headersSent) return;
    if (refusal.extra.retryAfterSeconds !== undefined) res.setHeader('Retry-After', String(refusal.extra.retryAfterSeconds));
    const t = tenancy ? (typeof req.query?.tenant === 'string' && isUuid(req.query.tenant) ? req.query.tenant : null) : null;
    send(res, refusal.status, page({ title: 'Refused', tenant: t, tenancy, csrf: req.csrf, operator: req.operator }, pages.failure(refusal.status, refusal.code, refusal.message, `/console${query({ tenant: t })}`)));
  });

  return (req, res) => {
    const url = req.url ?? '';
    if (url !== '/console' && !url.startsWith('/console/') && !url.startsWith('/console?')) return false;
    app(req as Request, res as Response);
    return true;
  };
}
