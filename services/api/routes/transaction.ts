// POST /api/v1/transaction: the reason the KV exists. `operations` (push, ack), `kv` and `timers`
// in ONE PostgreSQL transaction on the message pool, taken in the cell's lock order
// (shared/lockOrder.ts): KV first, then timers, then partitions and messages. The answer is one
// flat `results` array: the operations' answers, then the kv answers, then the timers' answers,
// and each result's index and a verdict's `failedIndex` count in that flat array. A 400's `index`
// counts within the array its code names (tx_* / log_*: operations, kv_*: kv, timers_*: timers):
// nothing ran, so there is no flat array to point into.
//
// Outcomes (all but the 400s are 200: a verdict on the work, not a fault of the call):
//  - everything applied: {"ok": true, "results": [...]};
//  - a `required` KV precondition lost: nothing commits, the kv_precondition verdict of docs/kv.md with the
//    winner's value and version, built by kv_apply_v1 (the steps after it never run);
//  - an ack that cannot apply (lease expired or taken over, unknown message, already acked, not
//    leased): nothing commits, not even an unconditional KV write beside it:
//    {"ok": false, "reason": "ack_failed", "failedIndex", "ackReason"};
//  - getPrefix inside: 400 kv_get_prefix_not_allowed_in_transaction (kv_apply_v1 refuses it).
import { Router, Request, Response } from 'express';
import type { Pool } from 'pg';
import { AckFailed, ApiError, answerTooLarge, coerceError } from '../../../shared/errors';
import { isKvOp } from '../../../shared/kvOps';
import type { Config } from '../../../shared/config';
import type { ApiMetrics } from '../../../shared/metrics';
import { LockSpace, lockOrderedStatement, NamedStatement } from '../../../shared/lockOrder';
import { TX_ARGS, TX_ARGS_TRACED, TX_EXPR, TX_SEAL_TEXTS } from '../../../shared/sql/log';
import { callerTrace } from '../../../shared/tracing';
import { sealAll, sealingRequired } from '../seal/seal';
import { TX_TIMERS_EXPR, TX_TIMERS_EXPR_TRACED, TX_TIMERS_SEAL_TEXTS } from '../../../shared/sql/timers';
import type { Guards } from '../admission/guards';
import { refuseNulKeys, refusePushItems, refusePushOperation } from '../edge/fields';
import { bodyText, isPlainObject, parseJson, rawBody, refuseUnstorable, parseObject } from '../edge/body';
import { sendJsonText } from '../edge/answer';
import { tenantOf } from '../edge/tenant';
import { timed } from '../edge/timed';

export interface TransactionRouteDeps {
  config: Config;
  messagePool: Pool;
  metrics: ApiMetrics;
  /**
   * The kv and timers arrays pass the switch, grant, quota and rate before the bundle starts
   * (admission/guards.ts); a paused switch is 403 here, never 503: a client retrying a bundle would spin with
   * messages in its hands. A bundle of only pushes, acks and timer cancels passes untouched.
   */
  guards: Guards;
}

/** The wire's KV operations count in queen_kv_ops_total like the KV routes' do. */
function countKv(metrics: ApiMetrics, kv: unknown[], outcome: string): void {
  for (const op of kv) {
    const name = isPlainObject(op) && isKvOp(op.op) ? op.op : 'unknown';
    metrics.kvOps.inc({ op: name, outcome });
  }
}

/** Timer promises (schedules that created, reschedules that moved) are billed; cancels counted apart. */
function countTimers(metrics: ApiMetrics, answersText: string): void {
  // Timer answers carry ids, instants and flags, never a caller's number: parsing them narrows nothing.
  const answers = JSON.parse(answersText) as Array<{ created?: boolean; rescheduled?: boolean; cancelled?: boolean }>;
  const promised = answers.filter((a) => a.created === true || a.rescheduled === true).length;
  const cancelled = answers.filter((a) => a.cancelled === true).length;
  if (promised > 0) metrics.timersScheduled.inc(promised);
  if (cancelled > 0) metrics.timersCancelled.inc(cancelled);
}

function arrayField(body: Record<string, unknown>, name: string, code: string, what: string): unknown[] {
  const v = body[name];
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new ApiError(code, `${name} must be an array of ${what}.`);
  return v;
}

/** `[a, b]` + `[c]` -> `[a, b, c]` on jsonb text, so no number is ever re-serialized by JavaScript. */
function concatArrays(texts: string[]): string {
  const inner = texts.map((t) => t.trim().slice(1, -1).trim()).filter((t) => t.length > 0);
  return `[${inner.join(',')}]`;
}

/**
 * One named statement per combination of spaces a bundle touches (and whether it carries trace
 * context: TX_ARGS_TRACED's $7, the pushes and schedules stamped), composed once.
 */
const statements = new Map<string, NamedStatement>();
function statementFor(spaces: Partial<Record<LockSpace, string>>, traced: boolean): NamedStatement {
  const key = `${Object.keys(spaces).sort().join(',')}${traced ? '+trace' : ''}`;
  let statement = statements.get(key);
  if (!statement) {
    statement = traced ? lockOrderedStatement('tx_wire_traced_v1', TX_ARGS_TRACED, spaces) : lockOrderedStatement('tx_wire_v2', TX_ARGS, spaces);
    statements.set(key, statement);
  }
  return statement;
}

/**
 * The bundle's own fields: its three arrays, and Queen's `requiredLeases` (which adds no check of its
 * own, docs/log-and-transactions.md). Anything else was ignored, so a misspelled `operations` (or a
 * garbled one) committed the bundle's kv and timers and dropped its pushes and acks without a word.
 */
const TX_FIELDS = new Set(['operations', 'kv', 'timers', 'requiredLeases']);

function refuseUnknownFields(body: Record<string, unknown>): void {
  const stray = Object.keys(body).filter((k) => !TX_FIELDS.has(k));
  if (stray.length === 0) return;
  const named = stray.slice(0, 5).map((k) => JSON.stringify(k.length > 64 ? `${k.slice(0, 64)}...` : k)).join(', ');
  throw new ApiError('tx_invalid_field', `The transaction has a field it does not take: ${named}; its fields are operations, kv, timers and requiredLeases.`);
}

export function transactionRoutes({ config, messagePool, metrics, guards }: TransactionRouteDeps): Router {
  const router = Router();

  router.post('/api/v1/transaction', rawBody(config), timed(metrics, 'transaction', async (req: Request, res: Response) => {
    const tenant = tenantOf(config, req);
    const text = bodyText(req);
    const body = parseObject(text, false);
    refuseUnknownFields(body);
    const operations = arrayField(body, 'operations', 'tx_invalid_operations', '{type: "push" | "ack", ...}');
    const kv = arrayField(body, 'kv', 'tx_invalid_kv', 'KV operations');
    const timers = arrayField(body, 'timers', 'tx_invalid_timers', 'timer operations');
    // A push operation's items keep the push route's field rules (edge/fields.ts), named by the operation's index.
    let traceIds = false;
    operations.forEach((op, i) => {
      if (!isPlainObject(op) || op.type !== 'push') return;
      refusePushOperation(op, i);
      if (Array.isArray(op.items) && refusePushItems(op.items, i)) traceIds = true;
    });
    if (operations.length + kv.length + timers.length === 0) {
      throw new ApiError('tx_empty', 'A transaction carries at least one of operations, kv, timers (non-empty arrays).');
    }
    // Trace context for the pushes and schedules (docs/tracing.md): the request's sampled span, or
    // a push item's traceId alone ('null': no span). Neither: the statements it always had.
    const span = operations.length + timers.length > 0 ? callerTrace() : undefined;
    const trace = span ?? (traceIds ? 'null' : undefined);
    const traced = trace !== undefined;
    const spaces: Partial<Record<LockSpace, string>> = {};
    if (kv.length > 0) spaces.kv = TX_EXPR.kv;
    // queen.timers_apply_v1 holds the timer rules; its answers follow the kv ones in the flat array.
    if (timers.length > 0) spaces.timers = traced ? TX_TIMERS_EXPR_TRACED : TX_TIMERS_EXPR;
    if (operations.length > 0) spaces.partitions = traced ? TX_EXPR.partitionsTraced : TX_EXPR.partitions;
    const statement = statementFor(spaces, traced);

    // The bundle as one statement, answered here; a 200 ok:false (a lost precondition, a failed ack) is an answer, not a throw.
    const answer = async (): Promise<void> => {
      // A NUL in a kv key or namespace: the KV route's code (kv_invalid_key / kv_invalid_namespace),
      // not the invalid_json the jsonb cast would give; after the guards, so a paused KV still
      // answers its 403 first (the outermost reason), as it did.
      refuseNulKeys(text, kv);
      refuseUnstorable(text);
      try {
        // One statement, one round trip, one commit: the spaces in lock order (shared/lockOrder.ts).
        const run = (sealed: string | null, timersSealed: string | null) => messagePool.query({
          ...statement,
          values: traced
            ? [tenant, text, operations.length, operations.length + kv.length, sealed, timersSealed, trace]
            : [tenant, text, operations.length, operations.length + kv.length, sealed, timersSealed],
        });
        // A push or a timer schedule to an encrypted queue: nothing ran (QK428 comes before any
        // write); the payloads of the push items and schedules to the queues named so far are
        // sealed here and the bundle goes again, whole. The timers' space refuses before the
        // partitions' (lock order), so a bundle with both to different encrypted queues can take
        // two refusals; a third (a queue turned encrypted meanwhile) is a 503 to retry.
        const encrypted = new Set<string>();
        let rows;
        for (let attempt = 0; ; attempt++) {
          try {
            if (encrypted.size === 0) {
              ({ rows } = await run(null, null));
            } else {
              const queues = [...encrypted];
              // Each array's payloads to those queues, sealed; NULL (its ordinary path) where it has none.
              const sealedOf = async (statement: { name: string; text: string }, n: number): Promise<string | null> => {
                if (n === 0) return null;
                const texts: Array<string | null> = (await messagePool.query({ ...statement, values: [text, queues] })).rows[0].texts;
                return texts.some((t) => t !== null) ? sealAll(config.encryptionKeys!, texts) : null;
              };
              ({ rows } = await run(await sealedOf(TX_SEAL_TEXTS, operations.length), await sealedOf(TX_TIMERS_SEAL_TEXTS, timers.length)));
            }
            break;
          } catch (err) {
            const queues = sealingRequired(err, config.encryptionKeys);
            if (!queues) throw err;
            if (attempt >= 2) throw new ApiError('db_unavailable', 'A queue of this transaction changed its encryption while it was sent; retry.', { retryAfterSeconds: 1 });
            for (const q of queues) encrypted.add(q);
          }
        }
        const done = rows[0] as Partial<Record<LockSpace, string>>;
        // An object where the kv answers' array would be: a lost `required`, its failedIndex already
        // counted in the flat array; nothing of the bundle was written.
        if (done.kv?.startsWith('{')) {
          countKv(metrics, kv, 'precondition');
          // Queen's client throws the answer's `error` text when `success` is false: say which.
          return sendJsonText(res, 200, `{"error":"kv_precondition: a required KV operation lost; nothing committed",${done.kv.slice(1)}`);
        }
        countKv(metrics, kv, 'ok');
        if (done.timers) countTimers(metrics, done.timers);
        sendJsonText(res, 200, `{"ok":true,"success":true,"results":${concatArrays([done.partitions ?? '[]', done.kv ?? '[]', done.timers ?? '[]'])}}`);
      } catch (caught) {
        // Only the kv array's reads can make an answer that large (pushes and timers answer ids).
        const err = kv.length > 0 ? answerTooLarge(caught) : caught;
        const verdict = coerceError(err);
        // Rolled back by the ack beside them: the KV operations did not happen.
        if (verdict instanceof AckFailed) {
          countKv(metrics, kv, 'rolled_back');
          return sendJsonText(res, 200, verdict.bodyText());
        }
        countKv(metrics, kv, verdict instanceof ApiError && verdict.status < 500 ? 'refused' : 'error');
        throw err;
      }
    };
    const admitted = await guards.admitWire(req, { kv, timers });
    await admitted.track(answer());
  }));

  return router;
}
