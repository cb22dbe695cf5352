// The message log's routes (docs/log-and-transactions.md): configure, push, pop (with long poll), ack, ack batch,
// lease extend. Shapes at the boundary; the rules are in sql/functions/log_*.sql. The log uses the
// message pool, never the dedicated KV pool.
import { Router, Request, Response } from 'express';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Pool } from 'pg';
import { ApiError, SQLSTATE, movingRefusal } from '../../../shared/errors';
import { directUrl, type Config } from '../../../shared/config';
import { since } from '../../../shared/db';
import type { Logger } from '../../../shared/log';
import type { LogRoute, ApiMetrics } from '../../../shared/metrics';
import {
  LOG_ACK_BATCH, LOG_ACK_ONE, LOG_CONFIGURE, LOG_DEAD_LETTERS, LOG_DELETE_CONSUMER_GROUP, LOG_DELETE_QUEUE, LOG_EXTEND_LEASE, LOG_POP,
  LOG_MESSAGE_TRACES, LOG_POP_AUTO_ACK, LOG_POP_MATCH, LOG_PUSH_SEALED, LOG_PUSH_TRACED, LOG_RECORD_TRACE, LOG_SEAL_TEXTS, LOG_SUBSCRIBE_FROM, LOG_SUBSCRIBE_NEW,
} from '../../../shared/sql/log';
import { answerWithBody, notFound, sendJsonText } from '../edge/answer';
import { bodyText, isPlainObject, parseJson, rawBody, parseObject } from '../edge/body';
import { nameRule, refusePushBody, refusePushItems, refuseNul } from '../edge/fields';
import { tenantOf } from '../edge/tenant';
import { timed } from '../edge/timed';
import { PushCoalescer } from '../push/coalescer';
import { PushSignal } from '../push/signal';
import { openAnswer, sealAll, sealingRequired } from '../seal/seal';
import { callerTrace } from '../../../shared/tracing';

export interface LogRouteDeps {
  config: Config;
  messagePool: Pool;
  log: Logger;
  metrics: ApiMetrics;
  /** The tenant's part in a move between cells (admission/tenantBook.ts): a waiting pop stops looking once it has one. */
  moveRole?: (tenant: string) => 'source' | 'target' | 'moved' | undefined;
}

/** A pop that may wait (wait=true): its time is mostly the wait, so it is counted apart (pop_wait). */
const popRoute = (req: Request): LogRoute => {
  const wait = (req.query as Record<string, unknown>).wait;
  return wait === 'true' || wait === '1' ? 'pop_wait' : 'pop';
};

export const POP_DEFAULTS = {
  batch: 1,
  maxBatch: 1000,
  /** A long poll's default bound, in milliseconds (Queen's default). */
  timeoutMs: 30_000,
  maxTimeoutMs: 120_000,
  /**
   * How often a waiting pop looks again without a notification: an expired lease or a `failed`
   * ack sends none. By analogy with the sweeper's cadence, not measured.
   */
  recheckMs: 500,
} as const;

export interface LogRoutes {
  router: Router;
  /** Ends the long polls in flight (they answer 204 at once) and the LISTEN connection. */
  close(): Promise<void>;
}

/**
 * A parameter given twice (or as a[b]=...) is refused with the code a bad value of it gets. The
 * code was built from the name (log_invalid_<name>), so deleteMetadata, autoAck, limit, from and
 * the others answered codes the table does not know: a 500 (the fuzzer, seed 28).
 */
const REPEATED_CODE: Record<string, string> = {
  queue: 'log_invalid_queue', partition: 'log_invalid_partition', consumerGroup: 'log_invalid_consumer_group',
  batch: 'log_invalid_batch', partitions: 'log_invalid_partitions', wait: 'log_invalid_wait', timeout: 'log_invalid_timeout',
  limit: 'log_invalid_batch', offset: 'log_invalid_batch', namespace: 'log_invalid_queue', task: 'log_invalid_queue',
  from: 'log_invalid_timestamp', to: 'log_invalid_timestamp', subscriptionFrom: 'log_invalid_timestamp',
};

function queryString(req: Request, name: string): string | undefined {
  const v = (req.query as Record<string, unknown>)[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') {
    throw new ApiError(REPEATED_CODE[name] ?? 'bad_request', `Give ${name} at most once, as a plain value.`);
  }
  return v;
}

function wholeNumber(text: string | undefined, fallback: number, min: number, max: number, code: string, what: string): number {
  if (text === undefined || text === '') return fallback;
  if (!/^\d{1,9}$/.test(text) || Number(text) < min || Number(text) > max) {
    throw new ApiError(code, `${what} is a whole number from ${min} to ${max}.`);
  }
  return Number(text);
}

/**
 * An instant as Queen's clients send one (subscriptionFrom, the dead-letter read's from/to): ISO 8601
 * with a date, a time and a zone (Z or an offset), as PostgreSQL's timestamptz reads it. Anything
 * else is refused rather than read as "from the beginning".
 */
function instant(text: string | undefined, name: string): string | null {
  if (text === undefined || text === '') return null;
  // Date.parse rolls a day past its month over (2026-02-30 is March 2nd); PostgreSQL refuses it
  // (22008), which answered 500: the day is checked against its month here.
  const [y, m, d] = text.slice(0, 10).split('-').map(Number);
  const day = new Date(Date.UTC(y, m - 1, d));
  if (!/^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)$/i.test(text) || Number.isNaN(Date.parse(text.replace(' ', 'T')))
      || day.getUTCMonth() !== m - 1 || day.getUTCDate() !== d) {
    throw new ApiError('log_invalid_timestamp', `${name} is an ISO 8601 instant with its zone, such as 2026-12-02T14:00:00Z.`);
  }
  return text;
}

interface PopChoices {
  /** A new group starts at the end (subscriptionMode new / new-only, subscriptionFrom now). */
  fromNow: boolean;
  /** A new group starts at this instant (subscriptionFrom=<ISO 8601>). */
  fromInstant: string | null;
  /** Queen's server-side autoAck: consumed at delivery. */
  autoAck: boolean;
}

/**
 * Queen's pop parameters: autoAck (true / 1: the messages are acked `completed` in the pop's own
 * statement), subscriptionMode, subscriptionFrom (now or an instant). A subscriptionMode the cell
 * does not implement is refused by name rather than ignored (an ignored one changes delivery).
 */
function popChoices(req: Request): PopChoices {
  const autoAckText = queryString(req, 'autoAck');
  if (autoAckText !== undefined && !['true', 'false', '1', '0', ''].includes(autoAckText)) {
    throw new ApiError('bad_request', 'autoAck is true or false.');
  }
  const mode = queryString(req, 'subscriptionMode');
  if (mode !== undefined && !['', 'all', 'from_beginning', 'new', 'new-only'].includes(mode)) {
    throw new ApiError('unsupported', 'subscriptionMode: all (from_beginning) or new (new-only); other modes are not implemented.');
  }
  const from = queryString(req, 'subscriptionFrom');
  return {
    fromNow: mode === 'new' || mode === 'new-only' || from === 'now',
    fromInstant: from === 'now' ? null : instant(from, 'subscriptionFrom'),
    autoAck: autoAckText === 'true' || autoAckText === '1',
  };
}

/** The body's text (what travels to PostgreSQL) and, for routing only, the object it parses to. */
function objectBody(req: IncomingMessage): { text: string; body: Record<string, unknown> } {
  const text = bodyText(req);
  const body = parseObject(text);
  return { text, body };
}

export function logRoutes({ config, messagePool, log, metrics, moveRole }: LogRouteDeps): LogRoutes {
  const router = Router();
  const body = rawBody(config);
  const signal = new PushSignal(directUrl(config), log);
  const unreadable = (n: number) => log.warn({ messages: n }, 'sealed payloads no key of this process opens were answered as data: null (QUEEN_ENCRYPTION_KEY / _PREVIOUS)');

  router.post('/api/v1/configure', body, async (req, res) => {
    const tenant = tenantOf(config, req);
    // encryptionEnabled: true needs this API's key (log_configure_v2 refuses it without, naming the variable).
    const { rows } = await messagePool.query({ ...LOG_CONFIGURE, values: [tenant, objectBody(req).text, config.encryptionKeys !== undefined] });
    sendJsonText(res, 200, rows[0].body);
  });

  const pop = timed(metrics, popRoute, async (req: Request, res: Response) => {
    const tenant = tenantOf(config, req);
    const params = req.params as Record<string, string>;
    const batch = wholeNumber(queryString(req, 'batch'), POP_DEFAULTS.batch, 1, POP_DEFAULTS.maxBatch, 'log_invalid_batch', 'batch');
    const waitText = queryString(req, 'wait');
    if (waitText !== undefined && !['true', 'false', '1', '0', ''].includes(waitText)) {
      throw new ApiError('log_invalid_wait', 'wait is true or false.');
    }
    const wait = waitText === 'true' || waitText === '1';
    const timeoutMs = wholeNumber(
      queryString(req, 'timeout'), POP_DEFAULTS.timeoutMs, 0, POP_DEFAULTS.maxTimeoutMs, 'log_invalid_timeout', 'timeout (milliseconds)',
    );
    const group = queryString(req, 'consumerGroup') || '__QUEUE_MODE__';
    // Queen's multi-partition pop: up to this many partitions under one lease id, `batch` messages in all.
    const partitions = wholeNumber(queryString(req, 'partitions'), 1, 1, POP_DEFAULTS.maxBatch, 'log_invalid_partitions', 'partitions');
    const choices = popChoices(req);
    // Without a queue in the path: Queen's pop by namespace and/or task, across the matching queues.
    const match = params.queue === undefined
      ? { namespace: queryString(req, 'namespace') || null, task: queryString(req, 'task') || null }
      : undefined;
    if (match) {
      if (match.namespace === null && match.task === null) throw new ApiError('log_invalid_queue', 'A pop names a queue (/api/v1/pop/queue/:queue), or a namespace and/or a task.');
      if (choices.fromNow || choices.fromInstant) throw new ApiError('unsupported', 'subscriptionMode and subscriptionFrom apply to a pop of one queue.');
      refuseNul(match.namespace, 'log_invalid_queue', nameRule('A namespace'));
      refuseNul(match.task, 'log_invalid_queue', nameRule('A task'));
    }
    refuseNul(params.queue, 'log_invalid_queue', nameRule('A queue name'));
    refuseNul(params.partition, 'log_invalid_partition', nameRule('A partition name'));
    refuseNul(group, 'log_invalid_consumer_group', nameRule('A consumer group'));
    const values = [tenant, params.queue, params.partition ?? null, group, batch];
    // A pop that does not wait is one call's bound in all (shared/db.ts), its statements together.
    const started = Date.now();
    const from = () => (wait ? Date.now() : started);
    if (choices.fromNow) await messagePool.query(since({ ...LOG_SUBSCRIBE_NEW, values: values.slice(0, 4) }, started));
    else if (choices.fromInstant) await messagePool.query(since({ ...LOG_SUBSCRIBE_FROM, values: [...values.slice(0, 4), choices.fromInstant] }, started));
    // An answer is capped at 256 MiB (PostgreSQL's cap on a jsonb array, which the pop keeps for its
    // text): a batch of large payloads (five pushes of 60 MB, or a thousand of 300 KB) failed the
    // pop with 54000 and a 500, on every retry, since the failed statement took no lease. Such a
    // batch is asked again at half the size (nothing was leased), down to one message; the consumer
    // gets what fits.
    const popOnce = async () => {
      for (let size = batch; ; size = Math.max(1, Math.floor(size / 2))) {
        try {
          if (match) return await messagePool.query(since({ ...LOG_POP_MATCH, values: [tenant, match.namespace, match.task, group, size, partitions, choices.autoAck] }, from()));
          return await messagePool.query(since({ ...(choices.autoAck ? LOG_POP_AUTO_ACK : LOG_POP), values: [values[0], values[1], values[2], values[3], size, partitions] }, from()));
        } catch (err) {
          if ((err as { code?: string }).code !== SQLSTATE.PROGRAM_LIMIT_EXCEEDED || size === 1) throw err;
        }
      }
    };

    let gone = false;
    res.on('close', () => {
      gone = !res.writableFinished;
    });
    const deadline = Date.now() + (wait ? timeoutMs : 0);
    for (;;) {
      // A client that went away while waiting (its own timeout shorter than ours) is not leased
      // anything: the messages would be held for the lease time by nobody, and the lapse counted
      // as a failed delivery. Without this, the push that woke the wait was leased to the gone request.
      if (gone) return void res.end();
      // A move of this tenant began while the pop waited: it leases nothing more here (the move copies
      // what this cell holds), and the client, told to retry, is sent to wherever the tenant now is.
      const role = moveRole?.(tenant);
      if (role !== undefined) throw movingRefusal(role);
      // Armed before looking, so a push that commits between the look and the wait still wakes us.
      // A pop by namespace/task waits on no one queue's notification: it looks again every recheck.
      const armed = wait ? await signal.arm(tenant, params.queue ?? '\u0000match') : undefined;
      try {
        const { rows } = await popOnce();
        // Sealed payloads (an encrypted queue) are opened here, the only place the key is.
        const messages: string = openAnswer(config.encryptionKeys, rows[0].messages, unreadable);
        if (messages !== '[]') {
          // Queen's answer: the partition and lease at the top, then the messages (each names its own).
          const top = {
            success: true, queue: rows[0].queue, partition: rows[0].partition, partitionId: rows[0].partition_id,
            leaseId: rows[0].lease_id, consumerGroup: group, partitionsClaimed: rows[0].partitions,
          };
          return sendJsonText(res, 200, `${JSON.stringify(top).slice(0, -1)},"messages":${messages}}`);
        }
        const remaining = deadline - Date.now();
        if (!armed || remaining <= 0 || signal.isClosed || gone) {
          res.status(204).end();
          return;
        }
        await armed.wait(Math.min(remaining, POP_DEFAULTS.recheckMs));
      } finally {
        armed?.cancel();
      }
    }
  });
  // Express answers HEAD with the GET handler, and a pop is not safe: a HEAD (a monitor, a link
  // checker, a proxy's probe) leased messages and threw them away; each lapse counted as a failed
  // delivery, so a few HEADs dead-lettered a message no consumer ever saw. A pop has no HEAD.
  router.head(['/api/v1/pop', '/api/v1/pop/queue/:queue', '/api/v1/pop/queue/:queue/partition/:partition'], notFound);
  router.get('/api/v1/pop', pop);
  router.get('/api/v1/pop/queue/:queue', pop);
  router.get('/api/v1/pop/queue/:queue/partition/:partition', pop);

  router.post('/api/v1/ack', body, timed(metrics, 'ack', async (req: Request, res: Response) => {
    const tenant = tenantOf(config, req);
    const { rows } = await messagePool.query({ ...LOG_ACK_ONE, values: [tenant, objectBody(req).text] });
    sendJsonText(res, 200, rows[0].body);
  }));

  router.post('/api/v1/ack/batch', body, timed(metrics, 'ack_batch', async (req: Request, res: Response) => {
    const tenant = tenantOf(config, req);
    const { rows } = await messagePool.query({ ...LOG_ACK_BATCH, values: [tenant, objectBody(req).text] });
    // ok is true only when every ack applied; each element says how its own ack went.
    sendJsonText(res, 200, `{"ok":${rows[0].ok === true},"results":${rows[0].results}}`);
  }));

  // Queen's queue delete: the queue and everything in it, for this tenant.
  router.delete('/api/v1/resources/queues/:queue', async (req, res) => {
    const tenant = tenantOf(config, req);
    const queue = (req.params as Record<string, string>).queue;
    refuseNul(queue, 'log_invalid_queue', nameRule('A queue name'));
    const { rows } = await messagePool.query({ ...LOG_DELETE_QUEUE, values: [tenant, queue] });
    sendJsonText(res, 200, rows[0].body);
  });

  // Queen's dead-letter read: ?queue, partition, consumerGroup, limit (1-1000, 100), offset.
  // HEAD is not served (docs/openapi.yaml): registered after the GET, as it was, Express answered
  // HEAD with the GET's handler (a 200 and a read) and this 404 never ran (found by npm run fuzz).
  router.head('/api/v1/dlq', notFound);
  router.get('/api/v1/dlq', async (req, res) => {
    const tenant = tenantOf(config, req);
    // Queen's from/to: when the message was set aside (failedAt), each bound included.
    const from = instant(queryString(req, 'from'), 'from');
    const to = instant(queryString(req, 'to'), 'to');
    const queue = queryString(req, 'queue') || null;
    const partition = queryString(req, 'partition') || null;
    const group = queryString(req, 'consumerGroup') || null;
    refuseNul(queue, 'log_invalid_queue', nameRule('A queue name'));
    refuseNul(partition, 'log_invalid_partition', nameRule('A partition name'));
    refuseNul(group, 'log_invalid_consumer_group', nameRule('A consumer group'));
    const limit = wholeNumber(queryString(req, 'limit'), 100, 1, 1000, 'log_invalid_batch', 'limit');
    const offset = wholeNumber(queryString(req, 'offset'), 0, 0, 1_000_000_000, 'log_invalid_batch', 'offset');
    const { rows } = await messagePool.query({ ...LOG_DEAD_LETTERS, values: [tenant, queue, partition, group, limit, offset, from, to] });
    sendJsonText(res, 200, openAnswer(config.encryptionKeys, rows[0].body, unreadable));
  });

  // Queen's traces (message.trace()): stored against the message, bounded per message, gone with it.
  router.post('/api/v1/traces', body, timed(metrics, 'trace', async (req: Request, res: Response) => {
    const tenant = tenantOf(config, req);
    const { rows } = await messagePool.query({ ...LOG_RECORD_TRACE, values: [tenant, objectBody(req).text] });
    sendJsonText(res, rows[0].body.includes('"ok": true') ? 201 : 200, rows[0].body);
  }));
  router.get('/api/v1/traces/:partitionId/:transactionId', timed(metrics, 'trace', async (req: Request, res: Response) => {
    const tenant = tenantOf(config, req);
    const { partitionId, transactionId } = req.params as Record<string, string>;
    refuseNul(partitionId, 'log_invalid_partition_id', 'partitionId is the UUID the pop answered.');
    refuseNul(transactionId, 'log_transaction_id_required', 'transactionId may not contain U+0000.');
    const { rows } = await messagePool.query({ ...LOG_MESSAGE_TRACES, values: [tenant, partitionId, transactionId] });
    sendJsonText(res, 200, rows[0].body);
  }));

  // Queen's consumer-group delete: the group's cursors, leases, failure counts and dead letters on
  // every queue of the tenant; ?deleteMetadata (default true) is echoed (the cell keeps no other record).
  router.delete('/api/v1/consumer-groups/:group', timed(metrics, 'consumer_group_delete', async (req: Request, res: Response) => {
    const tenant = tenantOf(config, req);
    const group = (req.params as Record<string, string>).group;
    refuseNul(group, 'log_invalid_consumer_group', nameRule('A consumer group'));
    const meta = queryString(req, 'deleteMetadata');
    if (meta !== undefined && !['true', 'false', '1', '0', ''].includes(meta)) throw new ApiError('bad_request', 'deleteMetadata is true or false.');
    const { rows } = await messagePool.query({ ...LOG_DELETE_CONSUMER_GROUP, values: [tenant, group, !(meta === 'false' || meta === '0')] });
    sendJsonText(res, 200, rows[0].body);
  }));

  router.post('/api/v1/lease/:leaseId/extend', body, async (req, res) => {
    const tenant = tenantOf(config, req);
    const text = bodyText(req);
    let seconds: number | null = null;
    if (text.trim() !== '') {
      const parsed = parseObject(text);
      if (parsed.seconds !== undefined && parsed.seconds !== null) {
        if (typeof parsed.seconds !== 'number' || !Number.isInteger(parsed.seconds) || parsed.seconds < 1 || parsed.seconds > 86400) {
          throw new ApiError('log_invalid_lease_time', 'seconds is a whole number from 1 to 86400.');
        }
        seconds = parsed.seconds;
      }
    }
    const leaseId = (req.params as Record<string, string>).leaseId;
    refuseNul(leaseId, 'log_invalid_lease_id', 'The lease id is the UUID the pop answered.');
    const { rows } = await messagePool.query({ ...LOG_EXTEND_LEASE, values: [tenant, leaseId, seconds] });
    sendJsonText(res, 200, rows[0].body);
  });

  return { router, close: () => signal.close() };
}

const PUSH = '/api/v1/push';
/** The route pushRoute answers (app.ts `routes()`). */
export const PUSH_ROUTES: ReadonlyArray<{ method: string; path: string }> = [{ method: 'POST', path: PUSH }];

/**
 * POST /api/v1/push as a request listener, answered before Express like the KV routes (routes/kv.ts
 * says why): the message path is the one the cell exists for. True when it took the request. Only
 * the exact path is taken, a query string allowed; Express has no push route, so any other
 * spelling is 404 there, as for the KV paths.
 */
export function pushRoute({ config, messagePool, log, metrics, logRequest }: LogRouteDeps & {
  logRequest: (req: IncomingMessage, res: ServerResponse) => void;
}): (req: IncomingMessage, res: ServerResponse) => boolean {
  const withBody = answerWithBody(config, log);
  const coalescer = new PushCoalescer(messagePool, (pushes) => metrics.logPushGathering.observe(pushes));
  const push = timed(metrics, 'push', async (req: IncomingMessage, res: ServerResponse) => {
    const tenant = tenantOf(config, req);
    const { text, body } = objectBody(req);
    refusePushBody(body);
    // Queen's wire: 201 with one entry per item; no items is 201 [] (nothing to do, nothing wrong).
    let traceIds = false;
    if (Array.isArray(body.items)) {
      if (body.items.length === 0) return sendJsonText(res, 201, '[]');
      traceIds = refusePushItems(body.items);
    }
    // Trace context to store (docs/tracing.md): the request's sampled span, or an item's traceId
    // (then 'null': no span). Neither: undefined, and the push goes as it always did.
    const span = callerTrace();
    const trace = span ?? (traceIds ? 'null' : undefined);
    let results: string;
    try {
      results = await coalescer.push(tenant, text, body, trace);
    } catch (err) {
      // An encrypted queue among the items: PostgreSQL names it and stored nothing; its items'
      // payloads (as jsonb renders them) are sealed here and the push goes again, alone.
      const queues = sealingRequired(err, config.encryptionKeys);
      if (!queues) throw err;
      const { rows } = await messagePool.query({ ...LOG_SEAL_TEXTS, values: [text, queues] });
      const sealed = sealAll(config.encryptionKeys!, rows[0].texts);
      try {
        results = trace === undefined
          ? (await messagePool.query({ ...LOG_PUSH_SEALED, values: [tenant, text, sealed] })).rows[0].results
          : (await messagePool.query({ ...LOG_PUSH_TRACED, values: [tenant, text, sealed, trace] })).rows[0].results;
      } catch (again) {
        // Another queue of the request became encrypted in between: rare; the client retries.
        if (sealingRequired(again, config.encryptionKeys)) throw new ApiError('db_unavailable', 'A queue of this push changed its encryption while it was sent; retry.', { retryAfterSeconds: 1 });
        throw again;
      }
    }
    sendJsonText(res, 201, results);
  });
  return (req, res) => {
    const url = req.url ?? '';
    if (req.method !== 'POST' || !url.startsWith(PUSH) || (url.length > PUSH.length && url[PUSH.length] !== '?')) return false;
    logRequest(req, res);
    withBody(req, res, () => push(req, res));
    return true;
  };
}
