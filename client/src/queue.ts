// `queen.queue('q')`: Queen's queue builder. Configure, push, pop, and the consume loop.
//
//   await queen.queue('orders').push([{ data: { id: 1 } }])
//   const messages = await queen.queue('orders').group('billing').batch(10).pop()
//   await queen.queue('orders').group('billing').concurrency(2).consume(async (m) => { ... }, { signal })
//
// The builder is mutable, as Queen's is: each setter changes it and returns it.

import { QueenError } from './errors';
import type { HttpClient } from './http';
import { sleep } from './http';
import { stringifyJson } from './json';
import { inConsumeSpan } from './tracing';
import type {
  AckBatchResult, AckContext, AckResult, AckStatus, ConfigureResult, DeadLetterPage, DeadLetterQuery, DeleteQueueResult, Message, PushItem, PushResult,
  QueueOptions, RenewResult,
} from './types';
import * as wire from './wire';

/** What a queue builder needs from its Queen. */
export interface QueenCore {
  http: HttpClient;
  mintId(): string;
  ack(message: Message | Message[], status?: AckStatus, context?: AckContext): Promise<AckResult | AckBatchResult>;
  renew(target: string | Message | Message[], options?: { seconds?: number }): Promise<RenewResult | RenewResult[]>;
  /** Runs a consume loop that close() stops (its signal aborts) and waits for. */
  tracked<R>(run: (closing: AbortSignal) => Promise<R>): Promise<R>;
}

/** The long poll's default bound (the cell's default too). */
const DEFAULT_POP_TIMEOUT_MS = 30_000;
/** Slack on the client's bound of a long poll, so the cell's answer (204) comes first. */
const LONG_POLL_SLACK_MS = 5_000;
/** How long an idle consumer that does not long-poll waits before asking again. */
const IDLE_POLL_MS = 100;
/** How long a consumer waits after a network failure before asking again. */
const NETWORK_PAUSE_MS = 1_000;

export interface ConsumeOptions {
  /** Stops the consumer: no new pop; the messages in hand are finished and acked; then it resolves. */
  signal?: AbortSignal;
  /**
   * Called after a handler threw (its message(s) then acked `failed`), and when an ack did not apply
   * (a QueenError with code `ack_failed`: the lease lapsed, say; the message comes back). Default: nothing.
   */
  onError?: (error: unknown, messages: Message | Message[]) => void;
}

export interface ConsumeSummary {
  /** Messages handed to the handler. */
  processed: number;
}

type Handler = (messageOrMessages: any) => unknown;

function isNetwork(err: unknown): boolean {
  return err instanceof QueenError && (err.code === 'network_error' || err.code === 'timeout');
}

/** What a builder's setters set, and its calls read when they run. */
interface Settings {
  partitionName?: string;
  groupName?: string;
  batchSize: number;
  waitFlag?: boolean;
  timeoutMs: number;
  workers: number;
  maxMessages?: number;
  oneByOne: boolean;
  acking: boolean;
  renewEveryMs?: number;
  options: QueueOptions;
  labels: { namespace?: string; task?: string };
}

export class QueueBuilder {
  private readonly settings: Settings = {
    batchSize: 1, timeoutMs: DEFAULT_POP_TIMEOUT_MS, workers: 1, oneByOne: false, acking: true, options: {}, labels: {},
  };

  constructor(
    private readonly queen: QueenCore,
    readonly name: string,
    /** Set by queen.match(): pop and consume take the matching queues, higher priority first. */
    private readonly match?: { namespace?: string; task?: string },
  ) {}

  /** The one way a setter changes the builder, so that each is a line: what it sets, from what. */
  private set(change: Partial<Settings>): this {
    Object.assign(this.settings, change);
    return this;
  }

  /** The partition pushes go to and pops take from (pushes default to "Default"; pops to any). */
  partition(name: string): this {
    return this.set({ partitionName: name });
  }

  /** The consumer group (default: queue mode, one shared group). Every group sees every message. */
  group(name: string): this {
    return this.set({ groupName: name });
  }

  /** Messages per pop (1 to 1000; default 1). */
  batch(size: number): this {
    return this.set({ batchSize: size });
  }

  /** Long-poll when nothing is there (pop's default: false; consume's: true). */
  wait(enabled: boolean): this {
    return this.set({ waitFlag: enabled });
  }

  /** The long poll's bound, in milliseconds (default 30000). */
  timeoutMillis(ms: number): this {
    return this.set({ timeoutMs: ms });
  }

  /** Parallel pop loops in consume (default 1). Within a group a partition is leased to one at a time. */
  concurrency(count: number): this {
    return this.set({ workers: Math.max(1, Math.floor(count)) });
  }

  /** consume stops after this many messages (it never pops more than that). */
  limit(count: number): this {
    return this.set({ maxMessages: count });
  }

  /** consume hands the handler one message at a time, whatever the batch. */
  each(): this {
    return this.set({ oneByOne: true });
  }

  /** consume acks `completed` after a handler that returned (default true); a throw is acked `failed` either way. */
  autoAck(enabled: boolean): this {
    return this.set({ acking: enabled });
  }

  /** consume renews the lease every `intervalMillis` while a handler runs. */
  renewLease(enabled: boolean, intervalMillis = 10_000): this {
    return this.set({ renewEveryMs: enabled ? intervalMillis : undefined });
  }

  /** Options for create(): leaseTime (seconds), retryLimit. */
  config(options: QueueOptions): this {
    return this.set({ options: { ...this.settings.options, ...options } });
  }

  /** For create(): the namespace and/or task a pop by them (queen.match) finds this queue under. */
  labelled(labels: { namespace?: string; task?: string }): this {
    return this.set({ labels: { ...this.settings.labels, ...labels } });
  }

  /** Creates the queue, or changes the options given (the others stay as they are). */
  async create(): Promise<ConfigureResult> {
    const body = stringifyJson(wire.configureBody(this.name, this.settings.options, this.settings.labels));
    return wire.configureAnswer((await this.queen.http.call('POST', wire.CONFIGURE_PATH, { body })).body);
  }

  /** Deletes the queue and everything in it (messages, cursors, leases, dead letters). */
  async delete(): Promise<DeleteQueueResult> {
    const answer = await this.queen.http.call('DELETE', `/api/v1/resources/queues/${encodeURIComponent(this.name)}`);
    return wire.deleteQueueAnswer(answer.body);
  }

  /** The queue's dead letters, newest first (of `query.group`, or of every group). */
  async dlq(query: DeadLetterQuery = {}): Promise<DeadLetterPage> {
    return wire.deadLettersAnswer((await this.queen.http.call('GET', wire.deadLettersPath(this.name, query))).body);
  }

  /**
   * Pushes the items in order; one result per item. Each item's transactionId is minted here when
   * absent, so a retried push (the cell said 429/503 with Retry-After) answers `duplicate` for what
   * the first attempt stored, never a second copy.
   */
  async push(items: PushItem | PushItem[]): Promise<PushResult[]> {
    const list = Array.isArray(items) ? items : [items];
    const wireItems = list.map((item) => wire.pushItem(this.name, this.settings.partitionName, item, () => this.queen.mintId()));
    const body = stringifyJson(wire.pushBody(wireItems));
    return wire.pushAnswer((await this.queen.http.call('POST', wire.PUSH_PATH, { body })).body);
  }

  /** Leases the next messages of one partition to this consumer of the group; [] when none. `T`: what `data` is. */
  pop<T = unknown>(): Promise<Message<T>[]> {
    return this.popOnce(this.settings.batchSize, this.settings.waitFlag ?? false) as Promise<Message<T>[]>;
  }

  private async popOnce(batch: number, wait: boolean, signal?: AbortSignal): Promise<Message[]> {
    const path = wire.popPath({ queue: this.name, partition: this.settings.partitionName, group: this.settings.groupName, batch, wait, timeoutMs: this.settings.timeoutMs, match: this.match });
    const answer = await this.queen.http.call('GET', path, { signal, timeoutMs: wait ? this.settings.timeoutMs + LONG_POLL_SLACK_MS : undefined });
    return wire.popAnswer(answer.status, answer.body);
  }

  /**
   * Pops and hands messages to `handler` until stopped (options.signal), until `limit` messages, or
   * until a call fails in a way retrying cannot fix (the promise then rejects with it). The handler
   * gets one message when `.each()` is set or the batch is 1, else the array. A handler that returns
   * is acked `completed` (unless `.autoAck(false)`: then it acks itself); one that throws is acked
   * `failed`, so the message comes back until the queue's retryLimit. Stopping is graceful: no new
   * pop (a waiting one is abandoned, and the cell leases nothing to a poll whose client left), the
   * messages in hand are finished and acked, then the promise resolves.
   */
  consume<T = unknown>(handler: (message: Message<T>) => unknown, options?: ConsumeOptions): Promise<ConsumeSummary>;
  consume<T = unknown>(handler: (messages: Message<T>[]) => unknown, options?: ConsumeOptions): Promise<ConsumeSummary>;
  consume(handler: Handler, options: ConsumeOptions = {}): Promise<ConsumeSummary> {
    // queen.close() stops it as its signal would, and waits for it.
    return this.queen.tracked((closing) => this.consumeUntil(handler, options, closing));
  }

  private async consumeUntil(handler: Handler, options: ConsumeOptions, closing: AbortSignal): Promise<ConsumeSummary> {
    const stop = new AbortController();
    const follow = () => stop.abort();
    if (options.signal?.aborted || closing.aborted) stop.abort();
    else {
      options.signal?.addEventListener('abort', follow, { once: true });
      closing.addEventListener('abort', follow, { once: true });
    }
    const wait = this.settings.waitFlag ?? true;
    const single = this.settings.oneByOne || this.settings.batchSize === 1;
    let processed = 0;
    // Messages popped, and asked for by a pop in flight: what the limit counts.
    let taken = 0;
    let reserved = 0;
    let failure: { error: unknown } | undefined;

    const fail = (error: unknown) => {
      failure ??= { error };
      stop.abort();
    };

    /** onError is the caller's code: if it throws, the consumer stops and rejects with that. */
    const report = (error: unknown, given: Message | Message[]) => {
      try {
        options.onError?.(error, given);
      } catch (err) {
        fail(err);
      }
    };

    const settle = async (messages: Message[], status: AckStatus) => {
      try {
        const answer = await this.queen.ack(messages.length === 1 ? messages[0] : messages, status, this.settings.groupName === undefined ? {} : { group: this.settings.groupName });
        const refused = ('results' in answer ? answer.results : [answer]).filter((r) => !r.success);
        if (refused.length > 0) {
          // Not a fault of the loop (the message comes back to whoever holds the lease), but worth knowing.
          const reasons = [...new Set(refused.map((r) => r.ackReason))].join(', ');
          report(
            new QueenError({ status: 200, code: 'ack_failed', message: `${refused.length} ack(s) did not apply: ${reasons}.`, body: refused }),
            messages.length === 1 ? messages[0] : messages,
          );
        }
      } catch (err) {
        // A network failure leaves the messages to their lease (they come back); anything else is a fault.
        if (!isNetwork(err)) fail(err);
      }
    };

    const handle = async (messages: Message[]) => {
      const renewal = this.settings.renewEveryMs === undefined ? undefined : setInterval(() => void this.queen.renew(messages).catch(() => undefined), this.settings.renewEveryMs);
      try {
        const given = single ? messages[0] : messages;
        try {
          // In a span continuing the message's trace, when the application has OpenTelemetry.
          await inConsumeSpan(this.queen.http.tracing, messages, () => handler(given));
        } catch (err) {
          await settle(messages, false);
          report(err, given);
          return;
        }
        if (this.settings.acking) await settle(messages, true);
      } finally {
        if (renewal) clearInterval(renewal);
      }
    };

    const worker = async () => {
      while (!stop.signal.aborted) {
        // Never ask for more than the limit leaves, counting what the other loops have asked for.
        let want = this.settings.batchSize;
        if (this.settings.maxMessages !== undefined) want = Math.min(want, this.settings.maxMessages - taken - reserved);
        if (want <= 0) return;
        reserved += want;
        let messages: Message[];
        try {
          messages = await this.popOnce(want, wait, stop.signal);
        } catch (err) {
          reserved -= want;
          if (stop.signal.aborted) return;
          if (isNetwork(err)) {
            await sleep(NETWORK_PAUSE_MS, stop.signal).catch(() => undefined);
            continue;
          }
          return fail(err);
        }
        reserved -= want;
        taken += messages.length;
        if (messages.length === 0) {
          if (!wait) await sleep(IDLE_POLL_MS, stop.signal).catch(() => undefined);
          continue;
        }
        // The whole batch in hand is handled, even once stopped: a message left leased would count a
        // failed delivery when its lease lapsed.
        if (single) {
          for (const m of messages) {
            processed++;
            await handle([m]);
          }
        } else {
          processed += messages.length;
          await handle(messages);
        }
      }
    };

    try {
      await Promise.all(Array.from({ length: this.settings.workers }, worker));
    } finally {
      options.signal?.removeEventListener('abort', follow);
      closing.removeEventListener('abort', follow);
    }
    if (failure) throw failure.error;
    return { processed };
  }
}
