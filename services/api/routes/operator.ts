// The operator's reads and actions under /api/v1/system/ (docs/operator-routes.md): queues and
// their groups, a partition's messages, one message, timers, KV keys, tenants; requeue or discard
// dead letters, cancel or reschedule a timer, delete a key, move a group's cursor to now.
//
// Shapes at the boundary only; every rule is in sql/functions/operator.sql. The bearer of
// QUEEN_ADMIN_TOKEN only: without a token configured these routes answer 403 operator_disabled
// (they show every tenant's payloads). Under tenancy each names its tenant in ?tenant=. Every
// statement runs on the message pool, under its time limits. Each action writes one audit line
// (who, what, the outcome), never a value or a payload.
import { NextFunction, Request, Response, Router } from 'express';
import type { Pool } from 'pg';
import { DEFAULT_TENANT, type Config } from '../../../shared/config';
import { ApiError } from '../../../shared/errors';
import type { Logger } from '../../../shared/log';
import { isUuid } from '../../../shared/uuid';
import {
  OPERATOR_DEAD_LETTER, OPERATOR_DEAD_LETTERS, OPERATOR_KV_DELETE, OPERATOR_KV_KEY, OPERATOR_KV_KEYS, OPERATOR_MESSAGE,
  OPERATOR_MESSAGES, OPERATOR_PARTITIONS, OPERATOR_QUEUES, OPERATOR_SKIP, OPERATOR_TENANTS, OPERATOR_TIMER, OPERATOR_TIMERS,
} from '../../../shared/sql/operator';
import { sendJsonText } from '../edge/answer';
import { bodyText, parseObject, rawBody } from '../edge/body';
import { openAnswer } from '../seal/seal';
import { audit as auditLine } from '../edge/audit';
import { nameRule, refuseNul } from '../edge/fields';
import { requireAdmin } from './system';

export interface OperatorRouteDeps {
  config: Config;
  pool: Pool;
  log: Logger;
}

const NIL_TENANT = '00000000-0000-0000-0000-000000000000';

/** The rate limits the tenant list shows: the cell's configuration, the same for every tenant (per tenant and scope). */
export function rateLimitsOf(config: Config) {
  return {
    kvReadsPerSec: config.kvReadsPerSec, kvReadsBurst: config.kvReadsBurst, kvWritesPerSec: config.kvWritesPerSec,
    kvWritesBurst: config.kvWritesBurst, kvCellOpsPerSec: config.kvCellOpsPerSec,
  };
}

/** One query parameter, given at most once, as a plain value; undefined when absent or empty. */
export function param(req: Request, name: string): string | undefined {
  const v = (req.query as Record<string, unknown>)[name];
  if (v === undefined || v === '') return undefined;
  if (typeof v !== 'string') throw new ApiError('bad_request', `Give ${name} at most once, as a plain value.`);
  refuseNul(v, 'bad_request', `${name} may not contain U+0000.`);
  return v;
}

export function whole(text: string | undefined, code: string, what: string, digits = 9): number | null {
  if (text === undefined) return null;
  if (!new RegExp(`^\\d{1,${digits}}$`).test(text)) throw new ApiError(code, `${what} is a whole number.`);
  return Number(text);
}

/**
 * The tenant an operator call acts on. Under tenancy, ?tenant= names it (a UUID; not the nil UUID
 * nor the default tenant, which only a cell without tenancy has); without tenancy, the default
 * tenant, and a ?tenant= naming another is refused rather than ignored.
 */
export function operatorTenant(config: Config, req: Request): string {
  const given = param(req, 'tenant')?.trim().toLowerCase();
  if (!config.tenancyHeader) {
    if (given !== undefined && given !== DEFAULT_TENANT) {
      throw new ApiError('tenant_required', `This cell runs without tenancy: its one tenant is ${DEFAULT_TENANT}; leave tenant out.`);
    }
    return DEFAULT_TENANT;
  }
  if (given === undefined || !isUuid(given) || given === NIL_TENANT || given === DEFAULT_TENANT) {
    throw new ApiError('tenant_required', 'This cell runs with tenancy: name the tenant in ?tenant=<UUID>.');
  }
  return given;
}

export function path(req: Request, name: string, code: string, rule: string): string {
  const v = String((req.params as Record<string, string>)[name]);
  refuseNul(v, code, rule);
  return v;
}

/** A POST body: empty is {}, else a JSON object. */
function body(req: Request): Record<string, unknown> {
  const text = bodyText(req);
  return text.trim() === '' ? {} : parseObject(text);
}

function optionalName(b: Record<string, unknown>, field: string, code: string, rule: string): string | null {
  const v = b[field];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string') throw new ApiError(code, rule);
  refuseNul(v, code, rule);
  return v;
}

function onlyFields(b: Record<string, unknown>, allowed: string[]): void {
  const stray = Object.keys(b).filter((k) => !allowed.includes(k));
  if (stray.length > 0) {
    const named = stray.slice(0, 5).map((f) => (f.length > 64 ? `${f.slice(0, 64)}...` : f)).join(', ');
    throw new ApiError('bad_request', `The body has a field this action does not take: ${named}. Its fields are ${allowed.join(', ') || 'none'}.`);
  }
}

/** Without QUEEN_ADMIN_TOKEN there is no operator to answer: 403, before anything is read. */
function requireToken(config: Config) {
  return (_req: Request, _res: Response, next: NextFunction): void => {
    if (config.adminToken === undefined) {
      return next(new ApiError('operator_disabled', 'The operator routes answer only with QUEEN_ADMIN_TOKEN set on the cell, to its bearer.'));
    }
    next();
  };
}

export const QUEUE = nameRule('A queue name');
export const PARTITION = nameRule('A partition name');
export const GROUP = nameRule('A consumer group');
export const NAMESPACE = nameRule('A namespace');

export function operatorRoutes({ config, pool, log }: OperatorRouteDeps): Router {
  const router = Router();
  const token = requireToken(config);
  const bearer = requireAdmin(config.adminToken);
  const guard = (req: Request, res: Response, next: NextFunction): void =>
    token(req, res, (err?: unknown) => (err ? next(err) : bearer(req, res, next)));
  const text = rawBody(config);
  const unreadable = (n: number) => log.warn({ messages: n }, 'sealed payloads no key of this process opens were answered as data: null (QUEEN_ENCRYPTION_KEY / _PREVIOUS)');
  const answer = async (res: Response, statement: { name: string; text: string }, values: unknown[]): Promise<string> => {
    const { rows } = await pool.query<{ body: string }>({ ...statement, values });
    return rows[0].body;
  };
  /** The audit line of an action: who, on which tenant, what, and its outcome; never a value. */
  const audit = (req: Request, tenant: string, action: string, target: Record<string, unknown>, outcome: unknown) => auditLine(log, req, action, { tenant, target, outcome });

  router.get('/api/v1/system/queues', guard, async (req, res) => {
    const tenant = operatorTenant(config, req);
    const after = param(req, 'after') ?? null;
    const limit = whole(param(req, 'limit'), 'operator_invalid_limit', 'limit');
    sendJsonText(res, 200, await answer(res, OPERATOR_QUEUES, [tenant, after, limit]));
  });

  router.get('/api/v1/system/queues/:queue/partitions', guard, async (req, res) => {
    const tenant = operatorTenant(config, req);
    const queue = path(req, 'queue', 'log_invalid_queue', QUEUE);
    const limit = whole(param(req, 'limit'), 'operator_invalid_limit', 'limit');
    sendJsonText(res, 200, await answer(res, OPERATOR_PARTITIONS, [tenant, queue, param(req, 'after') ?? null, limit]));
  });

  router.get('/api/v1/system/queues/:queue/partitions/:partition/messages', guard, async (req, res) => {
    const tenant = operatorTenant(config, req);
    const queue = path(req, 'queue', 'log_invalid_queue', QUEUE);
    const partition = path(req, 'partition', 'log_invalid_partition', PARTITION);
    const after = whole(param(req, 'after'), 'operator_invalid_cursor', 'after (the next of a previous page)', 18);
    const limit = whole(param(req, 'limit'), 'operator_invalid_limit', 'limit');
    sendJsonText(res, 200, await answer(res, OPERATOR_MESSAGES, [tenant, queue, partition, param(req, 'order') ?? null, after, limit]));
  });

  router.get('/api/v1/system/partitions/:partitionId/messages/:transactionId', guard, async (req, res) => {
    const tenant = operatorTenant(config, req);
    const partitionId = path(req, 'partitionId', 'log_invalid_partition_id', 'partitionId is a partition\'s UUID.');
    const transactionId = path(req, 'transactionId', 'log_transaction_id_required', 'transactionId may not contain U+0000.');
    // A sealed payload is opened here as a pop opens it (or answered data: null, sealedUnreadable).
    sendJsonText(res, 200, openAnswer(config.encryptionKeys, await answer(res, OPERATOR_MESSAGE, [tenant, partitionId, transactionId]), unreadable));
  });

  router.get('/api/v1/system/timers', guard, async (req, res) => {
    const tenant = operatorTenant(config, req);
    const queue = param(req, 'queue') ?? null;
    const late = whole(param(req, 'lateSeconds'), 'operator_invalid_state', 'lateSeconds');
    const limit = whole(param(req, 'limit'), 'operator_invalid_limit', 'limit');
    sendJsonText(res, 200, await answer(res, OPERATOR_TIMERS, [tenant, queue, param(req, 'state') ?? null, late, param(req, 'after') ?? null, limit]));
  });

  router.get('/api/v1/system/kv/:ns', guard, async (req, res) => {
    const tenant = operatorTenant(config, req);
    const ns = path(req, 'ns', 'kv_invalid_namespace', NAMESPACE);
    const limit = whole(param(req, 'limit'), 'operator_invalid_limit', 'limit');
    sendJsonText(res, 200, await answer(res, OPERATOR_KV_KEYS, [tenant, ns, param(req, 'prefix') ?? null, param(req, 'after') ?? null, limit]));
  });

  router.get('/api/v1/system/kv/:ns/keys/:key', guard, async (req, res) => {
    const tenant = operatorTenant(config, req);
    const ns = path(req, 'ns', 'kv_invalid_namespace', NAMESPACE);
    const key = path(req, 'key', 'kv_invalid_key', 'A key may not contain U+0000.');
    sendJsonText(res, 200, await answer(res, OPERATOR_KV_KEY, [tenant, ns, key]));
  });

  router.get('/api/v1/system/tenants', guard, async (req, res) => {
    // Across tenants: ?tenant= narrows the list to one, it is not required.
    const only = param(req, 'tenant')?.trim().toLowerCase() ?? null;
    if (only !== null && !isUuid(only)) throw new ApiError('tenant_required', 'tenant is a UUID.');
    const after = param(req, 'after')?.trim().toLowerCase() ?? null;
    if (after !== null && !isUuid(after)) throw new ApiError('operator_invalid_cursor', 'after is the next of a previous page, a tenant id.');
    const limit = whole(param(req, 'limit'), 'operator_invalid_limit', 'limit');
    const page = await answer(res, OPERATOR_TENANTS, [only, after, limit]);
    sendJsonText(res, 200, `${page.slice(0, -1)}, "rateLimits": ${JSON.stringify(rateLimitsOf(config))}, "requireGrant": ${config.kvRequireGrant}}`);
  });

  for (const action of ['requeue', 'discard'] as const) {
    router.post(`/api/v1/system/partitions/:partitionId/messages/:transactionId/${action}`, guard, text, async (req, res) => {
      const tenant = operatorTenant(config, req);
      const partitionId = path(req, 'partitionId', 'log_invalid_partition_id', 'partitionId is a partition\'s UUID.');
      const transactionId = path(req, 'transactionId', 'log_transaction_id_required', 'transactionId may not contain U+0000.');
      const b = body(req);
      onlyFields(b, ['consumerGroup']);
      const group = optionalName(b, 'consumerGroup', 'log_invalid_consumer_group', GROUP);
      const out = await answer(res, OPERATOR_DEAD_LETTER, [tenant, action, partitionId, transactionId, group]);
      audit(req, tenant, `dead_letter_${action}`, { partitionId, transactionId, consumerGroup: group }, JSON.parse(out).groups);
      sendJsonText(res, 200, out);
    });

    router.post(`/api/v1/system/queues/:queue/dead-letters/${action}`, guard, text, async (req, res) => {
      const tenant = operatorTenant(config, req);
      const queue = path(req, 'queue', 'log_invalid_queue', QUEUE);
      const b = body(req);
      onlyFields(b, ['consumerGroup', 'limit']);
      const group = optionalName(b, 'consumerGroup', 'log_invalid_consumer_group', GROUP);
      if (b.limit !== undefined && b.limit !== null && (typeof b.limit !== 'number' || !Number.isInteger(b.limit))) {
        throw new ApiError('operator_invalid_limit', 'limit is a whole number.');
      }
      const limit = typeof b.limit === 'number' ? Math.max(-1, Math.min(b.limit, 1_000_000)) : null;
      const out = await answer(res, OPERATOR_DEAD_LETTERS, [tenant, action, queue, group, limit]);
      const parsed = JSON.parse(out);
      audit(req, tenant, `dead_letters_${action}`, { queue, consumerGroup: group }, { done: parsed.requeued ?? parsed.discarded, cursorTooFar: parsed.cursorTooFar, remaining: parsed.remaining });
      sendJsonText(res, 200, out);
    });
  }

  for (const action of ['cancel', 'reschedule'] as const) {
    router.post(`/api/v1/system/timers/:timerId/${action}`, guard, text, async (req, res) => {
      const tenant = operatorTenant(config, req);
      const timerId = path(req, 'timerId', 'timers_invalid_timer_id', 'The timer id is a UUID.');
      const b = body(req);
      if (action === 'cancel') onlyFields(b, []);
      const out = await answer(res, OPERATOR_TIMER, [tenant, action, timerId, action === 'cancel' ? null : JSON.stringify(b)]);
      const parsed = JSON.parse(out);
      audit(req, tenant, `timer_${action}`, { timerId }, action === 'cancel'
        ? { cancelled: parsed.cancelled, reason: parsed.reason }
        : { rescheduled: parsed.rescheduled, deliverAt: parsed.deliverAt, reason: parsed.reason });
      sendJsonText(res, 200, out);
    });
  }

  router.delete('/api/v1/system/kv/:ns/keys/:key', guard, async (req, res) => {
    const tenant = operatorTenant(config, req);
    const ns = path(req, 'ns', 'kv_invalid_namespace', NAMESPACE);
    const key = path(req, 'key', 'kv_invalid_key', 'A key may not contain U+0000.');
    const out = await answer(res, OPERATOR_KV_DELETE, [tenant, ns, key]);
    audit(req, tenant, 'kv_delete', { namespace: ns, key }, { deleted: JSON.parse(out).deleted });
    sendJsonText(res, 200, out);
  });

  router.post('/api/v1/system/queues/:queue/consumer-groups/:group/skip', guard, text, async (req, res) => {
    const tenant = operatorTenant(config, req);
    const queue = path(req, 'queue', 'log_invalid_queue', QUEUE);
    const group = path(req, 'group', 'log_invalid_consumer_group', GROUP);
    const b = body(req);
    onlyFields(b, ['partition']);
    const partition = optionalName(b, 'partition', 'log_invalid_partition', PARTITION);
    const out = await answer(res, OPERATOR_SKIP, [tenant, queue, group, partition]);
    const parsed = JSON.parse(out);
    audit(req, tenant, 'consumer_group_skip', { queue, consumerGroup: group, partition }, { partitions: parsed.partitions, skipped: parsed.skipped });
    sendJsonText(res, 200, out);
  });

  return router;
}
