// `kvOn(pgClient)`: the KV on a PostgreSQL client the caller already holds inside BEGIN, so the
// caller's own rows, the idempotency marker and the ack commit (or roll back) in the caller's
// transaction. It calls the cell's own procedures (queen.kv_apply_v1, queen.log_ack_batch_v2), the
// ones every KV route and the transaction wire call, so the rules and the answers are the same.
//
//   await client.query('BEGIN')
//   await client.query('INSERT INTO charges (order_id, charge_id) VALUES ($1, $2)', [orderId, chargeId])
//   const marker = await kvOn(client).once('charges', `charge:${orderId}`, { ttlSeconds: 86400, value: { chargeId } })
//   if (marker.won) {
//     const ack = await kvOn(client).ack(message, 'completed')
//     if (ack.success) await client.query('COMMIT')
//   }
//   ...otherwise ROLLBACK
//
// What differs from the HTTP surface is what is not SQL: the cell's admission (kill switch, grants,
// quota, rate limits, the KV pool) is not in front of your connection, and the statement timeout is
// yours. Two PostgreSQL facts to keep in mind:
//  - A lost `required` precondition and an ack that cannot apply RAISE inside PostgreSQL: that is
//    what rolls everything back. The client answers them as values (the kv_precondition verdict,
//    `{success: false, reason: 'ack_failed'}`), and your transaction is then aborted: the next
//    statement must be ROLLBACK.
//  - Take KV operations before acks, as the cell does (its lock order: KV, then timers, then
//    partitions), or a transaction of yours and a bundle of the cell's can deadlock.
//
// `pg` is a peer dependency and is never imported here: any client with pg's `query({name, text,
// values})` works.

import { QueenError } from './errors';
import { parseJson, stringifyJson } from './json';
import { Kv, kvAnswer, type KvOp } from './kv';
import type { AckContext, AckFailedVerdict, AckResult, AckStatus, KvBatchAnswer, Message } from './types';
import * as wire from './wire';

/** What kvOn needs of a client: pg's Client or PoolClient have it. */
export interface PgQueryable {
  query(config: { name?: string; text: string; values?: unknown[] }): Promise<{ rows: Array<Record<string, unknown>> }>;
}

export interface KvOnOptions {
  /** The tenant the keys belong to (default: the cell's default tenant, as with tenancy off). */
  tenant?: string;
}

export const DEFAULT_TENANT = '00000000-0000-0000-0000-000000000001';

/** Named statements: parsed and planned once per connection. */
const KV_APPLY = {
  name: 'queen_client_kv_apply_v1',
  text: 'SELECT queen.kv_apply_v1($1::uuid, $2::jsonb, false)::text AS results',
};

const ACK = {
  name: 'queen_client_ack_v3',
  text: 'SELECT (queen.log_ack_batch_v2($1::uuid, jsonb_build_array($2::jsonb), true) -> 0)::text AS result',
};

/**
 * A lost `required` comes back from the procedure as a verdict, not an error (so PostgreSQL never
 * logs the winner's value). The cell's bundle then runs nothing after it; on your transaction this
 * statement does the same, by aborting it: nothing beside the marker can commit. It carries no value.
 */
const ABORT_ON_PRECONDITION = `DO $$ BEGIN RAISE EXCEPTION 'kv_precondition: a required KV precondition was lost; the transaction is rolled back' USING ERRCODE = 'QK409'; END $$`;

interface PgError {
  code?: string;
  message?: string;
  detail?: string;
  hint?: string;
}

function detailOf(err: PgError): Record<string, unknown> {
  try {
    const parsed = parseJson(err.detail ?? '{}');
    return typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/** The cell's SQLSTATEs: QK400 a refusal (the HTTP surface's 400), QK412 a failed ack. */
function refusal(err: PgError): QueenError {
  const d = detailOf(err);
  return new QueenError(
    { status: 400, code: typeof d.code === 'string' ? d.code : 'bad_request', message: err.message ?? 'refused', index: typeof d.index === 'number' ? d.index : undefined },
    { cause: err },
  );
}

export interface PgKv extends Kv {
  /**
   * Acks the message in your transaction (`completed` by default; the group: context.group, else
   * the message's). A failure is `{success: false, reason: 'ack_failed', ackReason}` and aborts your
   * transaction, as inside the cell's bundle: nothing beside the ack may commit.
   */
  ack(message: Message, status?: AckStatus, context?: AckContext): Promise<AckResult | AckFailedVerdict>;
}

export function kvOn(client: PgQueryable, options: KvOnOptions = {}): PgKv {
  // A pg Pool has query() too, but each call may take another connection: never your transaction.
  const c = client as unknown as { totalCount?: unknown; release?: unknown };
  if (typeof c.totalCount === 'number' && typeof c.release !== 'function') {
    throw new TypeError('kvOn needs the client your transaction runs on (await pool.connect(), then BEGIN), not the pool: each pool.query may take another connection.');
  }
  const tenant = options.tenant ?? DEFAULT_TENANT;
  const apply = async (ops: KvOp[]): Promise<KvBatchAnswer> => {
    try {
      const { rows } = await client.query({ ...KV_APPLY, values: [tenant, stringifyJson(ops)] });
      const answer = parseJson(rows[0].results as string);
      if (Array.isArray(answer)) return kvAnswer({ ok: true, results: answer });
      await client.query({ text: ABORT_ON_PRECONDITION }).catch(() => undefined);
      return kvAnswer(answer);
    } catch (caught) {
      const err = caught as PgError;
      if (err.code === 'QK400') throw refusal(err);
      throw caught;
    }
  };
  const kv = new Kv(apply) as PgKv;
  kv.ack = async (message, status = 'completed', context = {}) => {
    const ack = wire.ackOne(message, wire.ackStatus(status), context.group ?? context.consumerGroup);
    try {
      const { rows } = await client.query({ ...ACK, values: [tenant, stringifyJson(ack)] });
      return wire.ackAnswer(parseJson(rows[0].result as string));
    } catch (caught) {
      const err = caught as PgError;
      if (err.code === 'QK400') throw refusal(err);
      if (err.code === 'QK412') {
        const d = detailOf(err);
        return { success: false, reason: 'ack_failed', failedIndex: 0, ackReason: String(d.ackReason) };
      }
      throw caught;
    }
  };
  return kv;
}
