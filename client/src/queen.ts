// `new Queen({ url })`: the entry point, named and shaped as Queen MQ's JavaScript client is, plus
// what that client lacks (the KV, timers, the once-marker in the same commit as the ack).

import { randomUUID } from 'node:crypto';
import { HttpClient, type HttpOptions } from './http';
import { stringifyJson } from './json';
import { Kv, kvAnswer } from './kv';
import { QueueBuilder, type QueenCore } from './queue';
import { Timers } from './timers';
import { TransactionBuilder } from './transaction';
import type { AckBatchResult, AckContext, AckResult, AckStatus, DeleteGroupResult, Message, RenewResult } from './types';
import * as wire from './wire';

/**
 * `{ url }`, or Queen MQ's client's spellings, accepted as the same things: `urls` (a list; more
 * than one are taken in turn, a call each), `timeoutMillis` (= `timeoutMs`), `retryAttempts`
 * (= `retry.attempts`). `new Queen('http://...')` and `new Queen(['http://...'])` work too.
 */
export interface QueenOptions extends Omit<HttpOptions, 'url'> {
  url?: string;
  urls?: string[];
  timeoutMillis?: number;
  retryAttempts?: number;
}

function httpOf(options: QueenOptions | string | string[]): HttpClient {
  if (typeof options === 'string') return new HttpClient({ url: options });
  if (Array.isArray(options)) return new HttpClient({ url: options[0] }, options);
  const { url, urls, timeoutMillis, retryAttempts, ...rest } = options;
  const list = urls ?? (url === undefined ? [] : [url]);
  const retry = rest.retry === false || retryAttempts === undefined ? rest.retry : { ...rest.retry, attempts: rest.retry?.attempts ?? retryAttempts };
  return new HttpClient({ ...rest, url: list[0], timeoutMs: rest.timeoutMs ?? timeoutMillis, retry }, list);
}

export class Queen implements QueenCore {
  /** @internal */
  readonly http: HttpClient;
  /** The KV: get, getMany, getPrefix, put, putIfAbsent, delete, incr, once, batch. */
  readonly kv: Kv;
  /** Timers: schedule, peek, list, cancel, reschedule. */
  readonly timers: Timers;

  private readonly closing = new AbortController();
  private readonly running = new Set<Promise<unknown>>();

  constructor(options: QueenOptions | string | string[]) {
    this.http = httpOf(options);
    this.kv = new Kv(async (ops) => kvAnswer((await this.http.call('POST', '/api/v1/kv', { body: stringifyJson({ operations: ops }) })).body));
    this.timers = new Timers(this.http);
  }

  /**
   * Stops every consume loop of this client (as its signal would: no new pop, the messages in hand
   * finished and acked), waits for them, then refuses every later call (QueenError `closed`).
   * Nothing else is held open: a Queen that is never closed keeps no process alive.
   */
  async close(): Promise<void> {
    this.closing.abort();
    await Promise.allSettled([...this.running]);
    this.http.close();
  }

  /** @internal */
  tracked<R>(run: (closing: AbortSignal) => Promise<R>): Promise<R> {
    const p = run(this.closing.signal);
    this.running.add(p);
    const forget = () => void this.running.delete(p);
    p.then(forget, forget);
    return p;
  }

  /** @internal A fresh transactionId for a push item that has none. */
  mintId(): string {
    return randomUUID();
  }

  queue(name: string): QueueBuilder {
    return new QueueBuilder(this, name);
  }

  /**
   * Pop and consume across the queues configured with this namespace and/or task (`.group()`,
   * `.batch()`, `.wait()`, `consume()` as on a queue), higher priority first, then the oldest
   * waiting message; each message names its `queue`. Not for pushes: push to a queue.
   */
  match(query: { namespace?: string; task?: string }): QueueBuilder {
    return new QueueBuilder(this, '', query);
  }

  transaction(): TransactionBuilder {
    return new TransactionBuilder(this);
  }

  /** Deletes a consumer group's cursors, leases, failure counts and dead letters on every queue: it starts over. */
  async deleteConsumerGroup(group: string): Promise<DeleteGroupResult> {
    const answer = await this.http.call('DELETE', `/api/v1/consumer-groups/${encodeURIComponent(group)}?deleteMetadata=true`);
    return wire.deleteGroupAnswer(answer.body);
  }

  /**
   * Acks one message (`AckResult`) or several in one call (`AckBatchResult`, each applied or not on
   * its own). `true` / `'completed'` moves the group's cursor past it; `false` / `'failed'` asks for
   * a redelivery until the queue's retryLimit. The group: `context.group`, else the one the message
   * was popped for. An ack that does not apply is a value (`success: false`, `ackReason`), not a throw.
   */
  ack(message: Message, status?: AckStatus, context?: AckContext): Promise<AckResult>;
  ack(messages: Message[], status?: AckStatus, context?: AckContext): Promise<AckBatchResult>;
  ack(message: Message | Message[], status?: AckStatus, context?: AckContext): Promise<AckResult | AckBatchResult>;
  async ack(target: Message | Message[], status: AckStatus = true, context: AckContext = {}): Promise<AckResult | AckBatchResult> {
    const group = context.group ?? context.consumerGroup;
    const s = wire.ackStatus(status);
    if (!Array.isArray(target)) {
      const body = stringifyJson(wire.ackOne(target, s, group));
      return wire.ackAnswer((await this.http.call('POST', wire.ACK_PATH, { body })).body);
    }
    if (target.length === 0) return { success: true, results: [] };
    const body = stringifyJson(wire.ackBatchBody(target.map((m) => wire.ackOne(m, s, group))));
    const results = wire.ackBatchAnswer((await this.http.call('POST', wire.ACK_BATCH_PATH, { body })).body);
    return { success: results.every((r) => r.success), results };
  }

  /**
   * Extends a live lease (by a leaseId, or the lease of the message(s) given): to `seconds` from
   * now, else the queue's lease time. A lease that lapsed is never revived (`success: false`).
   */
  renew(target: string | Message, options?: { seconds?: number }): Promise<RenewResult>;
  renew(target: Message[], options?: { seconds?: number }): Promise<RenewResult[]>;
  renew(target: string | Message | Message[], options?: { seconds?: number }): Promise<RenewResult | RenewResult[]>;
  async renew(target: string | Message | Message[], options: { seconds?: number } = {}): Promise<RenewResult | RenewResult[]> {
    const one = async (leaseId: string) => {
      const body = stringifyJson(wire.renewBody(options.seconds));
      return wire.renewAnswer(leaseId, (await this.http.call('POST', wire.renewPath(leaseId), { body })).body);
    };
    if (typeof target === 'string') return one(target);
    if (!Array.isArray(target)) return one(target.leaseId);
    return Promise.all([...new Set(target.map((m) => m.leaseId))].map(one));
  }
}
