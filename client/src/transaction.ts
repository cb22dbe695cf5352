// `queen.transaction()`: pushes, acks, KV operations and timer operations in ONE PostgreSQL commit.
//
//   const res = await queen.transaction()
//     .once('charges', `charge:${order.id}`, { ttlSeconds: 86400, required: true })
//     .ack(message)
//     .queue('receipts').push([{ data: { orderId: order.id } }])
//     .commit()
//
// `commit()` resolves to `{ success: true, results }` (one flat array: the pushes and acks in the
// order written, then the kv operations, then the timer operations), or to the verdict that rolled
// everything back: `{ success: false, reason: 'kv_precondition', failedIndex, kvReason, value,
// version }` (a `required` KV operation lost; `value` is the winner's) or `{ success: false, reason:
// 'ack_failed', failedIndex, ackReason }` (an ack could not apply: its lease expired or was taken
// over, the message is unknown or already acked). Those are values, never thrown: a redelivery that
// finds its work done is the expected case. A refusal of the call itself (a 4xx) throws a QueenError
// with the cell's `code`, `message` and `index`.
//
// A commit is retried only when the cell answers 429/503 with Retry-After, with the same bytes: the
// pushes carry the transactionIds minted when they were added, so a retry answers `duplicate` for
// them rather than storing them twice. Calling commit() again on the same builder sends the same
// bundle again, with the same ids.

import { stringifyJson } from './json';
import { guardedOp, kvOp, onceResult, type KvOp, type OnceOptions } from './kv';
import type { QueenCore } from './queue';
import { timerOp } from './timers';
import type { AckContext, AckStatus, Expiry, KvWriteResult, Message, PushItem, TimerOp, TransactionResult } from './types';
import * as wire from './wire';

type Obj = Record<string, unknown>;

export interface TransactionQueue {
  partition(name: string): TransactionQueue;
  /** Adds the items as one push operation and hands the transaction back. */
  push(items: PushItem | PushItem[]): TransactionBuilder;
}

export class TransactionBuilder {
  private readonly operations: Obj[] = [];
  private readonly kvOps: Obj[] = [];
  private readonly timerOps: Obj[] = [];
  /** Indexes (within kvOps) of the `once` operations, whose results get `won`. */
  private readonly onces = new Set<number>();
  private body?: string;

  constructor(private readonly queen: QueenCore) {}

  /**
   * Acks the message(s) in this commit (`completed` by default). The group: `context.group` (or
   * `consumerGroup`), else the one each message was popped for. The message's leaseId goes along:
   * an ack from a consumer whose lease lapsed fails, and takes the whole bundle with it.
   */
  ack(messages: Message | Message[], status: AckStatus = 'completed', context: AckContext = {}): this {
    const group = context.group ?? context.consumerGroup;
    for (const m of Array.isArray(messages) ? messages : [messages]) {
      this.operations.push(wire.txAckOp(m, wire.ackStatus(status), group));
    }
    return this.changed();
  }

  /** `.queue('out').push([...])`, optionally `.queue('out').partition('p').push([...])`. */
  queue(name: string): TransactionQueue {
    let partition: string | undefined;
    const sub: TransactionQueue = {
      partition: (p) => {
        partition = p;
        return sub;
      },
      push: (items) => {
        const list = Array.isArray(items) ? items : [items];
        this.operations.push(wire.txPushOp(list.map((item) => wire.pushItem(name, partition, item, () => this.queen.mintId()))));
        return this.changed();
      },
    };
    return sub;
  }

  /**
   * The idempotency marker: putIfAbsent of `value` (default true) at (ns, key), `required` unless
   * `required: false`. A marker already there rolls the whole bundle back and commit() answers the
   * kv_precondition verdict with the winner's value. In a committed bundle its result carries `won`.
   */
  once(ns: string, key: string, options: Expiry & OnceOptions): this {
    this.onces.add(this.kvOps.length);
    return this.kv(kvOp.once(ns, key, options));
  }

  /** Any KV operation (`{op, ns, ...}`, as POST /api/v1/kv takes it; getPrefix is refused in a bundle). */
  kv(op: KvOp): this {
    this.kvOps.push(guardedOp(op));
    return this.changed();
  }

  /** A timer operation: `{op: 'schedule', queue, payload, deliverAt | delaySeconds, timerKey?}`, `{op: 'cancel', timerId}`, `{op: 'reschedule', timerId, ...}`. */
  timer(op: TimerOp): this {
    this.timerOps.push(timerOp(op));
    return this.changed();
  }

  async commit(): Promise<TransactionResult> {
    this.body ??= stringifyJson(wire.transactionBody(this.operations, this.kvOps, this.timerOps));
    const answer = wire.transactionAnswer((await this.queen.http.call('POST', wire.TRANSACTION_PATH, { body: this.body })).body);
    if (!answer.success || this.onces.size === 0) return answer;
    const offset = this.operations.length;
    return {
      success: true,
      results: answer.results.map((r, i) => (this.onces.has(i - offset) ? onceResult(r as KvWriteResult) : r)),
    };
  }

  private changed(): this {
    this.body = undefined;
    return this;
  }
}
