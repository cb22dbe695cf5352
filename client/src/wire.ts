// The translation between the client's shapes (Queen's JavaScript client: `data` on a message,
// `success` on an answer) and the cell's log wire: push, pop, ack, ack batch, lease renew, configure
// and the transaction answer. It is the only module that knows how those routes spell things, so a
// change of the log's wire changes this file and nothing else.
//
// The cell's log wire speaks Queen MQ's: push answers 201 with an array of `{index, transaction_id,
// status, message_id, partition_id, queueName, partition}`; a popped message carries `data` (and
// `id`); an empty pop is 204; an ack answers `{ok, success, ackReason?, error?}`; the transaction
// answers `{ok, success, results}` or a verdict with `ok: false`. The readers below also accept the
// cell's earlier spellings (`{ok, results}` around the push entries, camelCase ids, `payload`), so
// this client reads a cell of either release.
//
// KV and timer shapes are the cell's own and are not translated (kv.ts, timers.ts).

import type {
  AckReason,
  AckResult,
  ConfigureResult,
  DeadLetterPage,
  DeadLetterQuery,
  DeleteGroupResult,
  DeleteQueueResult,
  Message,
  PushItem,
  PushResult,
  QueueOptions,
  RenewResult,
  TransactionResult,
  TransactionResultEntry,
} from './types';
import { QueenError } from './errors';

const QUEUE_MODE = '__QUEUE_MODE__';

type Obj = Record<string, unknown>;

function isObject(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** An answer of a shape the client does not know: a cell of another version, or something in between. */
function unexpected(route: string, body: unknown): QueenError {
  const text = JSON.stringify(body, (_k, v) => (typeof v === 'bigint' ? v.toString() : v));
  return new QueenError({
    status: 200,
    code: 'unexpected_answer',
    message: `${route} answered a shape this client does not know: ${text === undefined ? 'no body' : text.slice(0, 200)}.`,
    body,
  });
}

// ------------------------------------------------------------------------------------------- push

export const PUSH_PATH = '/api/v1/push';

/** One wire item. `transactionId` is always set: minted here when the caller gave none. */
export function pushItem(queue: string, partition: string | undefined, item: PushItem, mint: () => string): Obj {
  const source = item as Obj;
  const payload = 'data' in source ? source.data : 'payload' in source ? source.payload : source;
  const out: Obj = { queue, payload, transactionId: typeof source.transactionId === 'string' ? source.transactionId : mint() };
  if (partition !== undefined) out.partition = partition;
  // Queen's traceId goes with an item written as { data } or { payload } (a whole-object item is its own payload).
  if (('data' in source || 'payload' in source) && typeof source.traceId === 'string' && source.traceId !== '') out.traceId = source.traceId;
  return out;
}

export function pushBody(items: Obj[]): unknown {
  return { items };
}

function pushResult(r: unknown): PushResult {
  if (!isObject(r)) throw unexpected('push', r);
  const out: PushResult = {
    transactionId: (r.transaction_id ?? r.transactionId) as string,
    partitionId: (r.partition_id ?? r.partitionId) as string,
    queue: (r.queueName ?? r.queue) as string,
    partition: r.partition as string,
    status: r.status as PushResult['status'],
  };
  if (typeof r.message_id === 'string') out.messageId = r.message_id;
  return out;
}

export function pushAnswer(body: unknown): PushResult[] {
  const results = Array.isArray(body) ? body : isObject(body) && Array.isArray(body.results) ? body.results : undefined;
  if (!results) throw unexpected('push', body);
  return results.map(pushResult);
}

// -------------------------------------------------------------------------------------------- pop

export interface PopRequest {
  queue: string;
  partition?: string;
  group?: string;
  batch: number;
  wait: boolean;
  timeoutMs: number;
  /** A pop across the queues of a namespace and/or task (higher priority first): `queue` is then ignored. */
  match?: { namespace?: string; task?: string };
}

export function popPath(r: PopRequest): string {
  const q = new URLSearchParams({ batch: String(r.batch), wait: String(r.wait) });
  if (r.wait) q.set('timeout', String(r.timeoutMs));
  if (r.group !== undefined) q.set('consumerGroup', r.group);
  if (r.match) {
    if (r.match.namespace !== undefined) q.set('namespace', r.match.namespace);
    if (r.match.task !== undefined) q.set('task', r.match.task);
    return `/api/v1/pop?${q}`;
  }
  const partition = r.partition !== undefined ? `/partition/${encodeURIComponent(r.partition)}` : '';
  return `/api/v1/pop/queue/${encodeURIComponent(r.queue)}${partition}?${q}`;
}

function message(m: unknown): Message {
  if (!isObject(m)) throw unexpected('pop', m);
  const { payload, ...rest } = m;
  return { ...rest, data: 'data' in m ? m.data : payload } as Message;
}

/** The messages a pop leased; [] when none (204, or an empty list). */
export function popAnswer(status: number, body: unknown): Message[] {
  if (status === 204 || body === undefined) return [];
  if (!isObject(body) || !Array.isArray(body.messages)) throw unexpected('pop', body);
  return body.messages.filter((m) => m != null).map(message);
}

// -------------------------------------------------------------------------------------------- ack

export const ACK_PATH = '/api/v1/ack';
export const ACK_BATCH_PATH = '/api/v1/ack/batch';

/** What an ack needs from a message: its ids, and its lease (the fence against a zombie). */
export interface AckTarget {
  transactionId: string;
  partitionId: string;
  leaseId?: string;
  consumerGroup?: string;
}

export function ackStatus(status: boolean | string): 'completed' | 'failed' {
  if (status === true || status === 'completed') return 'completed';
  if (status === false || status === 'failed') return 'failed';
  // The cell decides the rule; an unknown status is sent as is and refused there (log_invalid_status).
  return status as 'completed';
}

/** One wire ack. The group: the one given, else the one the message was popped for. */
export function ackOne(m: AckTarget, status: 'completed' | 'failed', group: string | undefined): Obj {
  if (!m || typeof m.transactionId !== 'string' || typeof m.partitionId !== 'string') {
    throw new TypeError('An ack needs the message as popped: its transactionId and partitionId.');
  }
  const out: Obj = {
    transactionId: m.transactionId,
    partitionId: m.partitionId,
    status,
    consumerGroup: group ?? m.consumerGroup ?? QUEUE_MODE,
  };
  if (typeof m.leaseId === 'string' && m.leaseId !== '') out.leaseId = m.leaseId;
  return out;
}

export function ackBatchBody(acks: Obj[]): unknown {
  // Each element names its group (the cell today); Queen's batch ack takes one group for the whole
  // body, so it is also sent there when the elements agree.
  const groups = new Set(acks.map((a) => a.consumerGroup));
  return groups.size === 1 ? { acknowledgments: acks, consumerGroup: [...groups][0] } : { acknowledgments: acks };
}

function ackResult(r: unknown): AckResult {
  if (!isObject(r)) throw unexpected('ack', r);
  const success = r.ok === true || r.success === true;
  const out: AckResult = {
    success,
    transactionId: r.transactionId as string,
    partitionId: r.partitionId as string,
    consumerGroup: r.consumerGroup as string,
    status: r.status as AckResult['status'],
  };
  if (!success) out.ackReason = (r.ackReason ?? r.error ?? 'unknown') as AckReason;
  if (typeof r.deadLetter === 'boolean') out.deadLetter = r.deadLetter;
  else if (typeof r.dlq === 'boolean') out.deadLetter = r.dlq;
  return out;
}

export function ackAnswer(body: unknown): AckResult {
  return ackResult(Array.isArray(body) ? body[0] : body);
}

export function ackBatchAnswer(body: unknown): AckResult[] {
  const results = Array.isArray(body) ? body : isObject(body) && Array.isArray(body.results) ? body.results : undefined;
  if (!results) throw unexpected('ack batch', body);
  return results.map(ackResult);
}

// ----------------------------------------------------------------------------------------- renew

export function renewPath(leaseId: string): string {
  return `/api/v1/lease/${encodeURIComponent(leaseId)}/extend`;
}

export function renewBody(seconds: number | undefined): unknown {
  return seconds === undefined ? {} : { seconds };
}

export function renewAnswer(leaseId: string, body: unknown): RenewResult {
  const r = Array.isArray(body) ? body[0] : body;
  if (!isObject(r)) throw unexpected('lease renew', body);
  const success = r.ok === true || r.success === true;
  const out: RenewResult = { leaseId, success };
  const expiresAt = r.leaseExpiresAt ?? r.expiresAt;
  if (success && typeof expiresAt === 'string') out.expiresAt = expiresAt;
  if (!success) out.reason = String(r.reason ?? r.error ?? 'unknown');
  return out;
}

// ------------------------------------------------------------------------------------- configure

export const CONFIGURE_PATH = '/api/v1/configure';

/** Only the options the caller set: the cell keeps the others as they are. */
export function deleteQueueAnswer(body: unknown): DeleteQueueResult {
  if (!isObject(body) || body.deleted !== true) throw unexpected('queue delete', body);
  return { queue: body.queue as string, existed: body.existed === true };
}

export function deadLettersPath(queue: string, q: DeadLetterQuery): string {
  const params = new URLSearchParams({ queue });
  if (q.group !== undefined) params.set('consumerGroup', q.group);
  if (q.partition !== undefined) params.set('partition', q.partition);
  if (q.limit !== undefined) params.set('limit', String(q.limit));
  if (q.offset !== undefined) params.set('offset', String(q.offset));
  const instant = (v: Date | string) => (v instanceof Date ? v.toISOString() : v);
  if (q.from !== undefined) params.set('from', instant(q.from));
  if (q.to !== undefined) params.set('to', instant(q.to));
  return `/api/v1/dlq?${params.toString()}`;
}

export function deadLettersAnswer(body: unknown): DeadLetterPage {
  if (!isObject(body) || !Array.isArray(body.messages)) throw unexpected('dead-letter read', body);
  return { messages: body.messages as DeadLetterPage['messages'], total: Number(body.total) };
}

export function deleteGroupAnswer(body: unknown): DeleteGroupResult {
  if (!isObject(body) || body.success !== true) throw unexpected('consumer-group delete', body);
  return { consumerGroup: body.consumerGroup as string, deletedPartitions: Number(body.deletedPartitions) };
}

export function configureBody(queue: string, options: QueueOptions, labels: { namespace?: string; task?: string } = {}): unknown {
  return { queue, ...labels, options };
}

export function configureAnswer(body: unknown): ConfigureResult {
  if (!isObject(body) || !isObject(body.options)) throw unexpected('configure', body);
  return { queue: body.queue as string, options: body.options as ConfigureResult['options'] };
}

// ----------------------------------------------------------------------------------- transaction

export const TRANSACTION_PATH = '/api/v1/transaction';

export function txAckOp(m: AckTarget, status: 'completed' | 'failed', group: string | undefined): Obj {
  return { type: 'ack', ...ackOne(m, status, group) };
}

export function txPushOp(items: Obj[]): Obj {
  return { type: 'push', items };
}

/** The bundle: each array only when it has something in it. */
export function transactionBody(operations: Obj[], kv: Obj[], timers: Obj[]): unknown {
  const body: Obj = {};
  if (operations.length > 0) body.operations = operations;
  if (kv.length > 0) body.kv = kv;
  if (timers.length > 0) body.timers = timers;
  return body;
}

function txEntry(e: unknown): TransactionResultEntry {
  if (!isObject(e)) throw unexpected('transaction', e);
  if (e.type === 'push' && Array.isArray(e.items)) return { type: 'push', index: e.index as number, items: e.items.map(pushResult) };
  if (e.type === 'ack') {
    const { type, index, ...rest } = e;
    return { type: 'ack', index: index as number, ...ackResult(rest) } as TransactionResultEntry;
  }
  return e as TransactionResultEntry;
}

/** The bundle's answer: committed with its flat results, or the verdict that rolled it back. */
export function transactionAnswer(body: unknown): TransactionResult {
  if (!isObject(body)) throw unexpected('transaction', body);
  const ok = body.ok === true || body.success === true;
  if (ok && Array.isArray(body.results)) return { success: true, results: body.results.map(txEntry) };
  if (body.reason === 'kv_precondition') {
    return {
      success: false,
      reason: 'kv_precondition',
      failedIndex: body.failedIndex as number,
      kvReason: body.kvReason as never,
      value: (body.value ?? null) as unknown,
      version: body.version as number,
    };
  }
  if (body.reason === 'ack_failed') {
    return { success: false, reason: 'ack_failed', failedIndex: body.failedIndex as number, ackReason: body.ackReason as AckReason };
  }
  throw unexpected('transaction', body);
}
