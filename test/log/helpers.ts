// What the log suites share: thin wrappers over the log's HTTP surface.
import { call, JsonResponse } from '../support/http';

export interface Message {
  transactionId: string;
  partitionId: string;
  queue: string;
  partition: string;
  data: any;
  id: string;
  leaseId: string;
  leaseExpiresAt: string;
  consumerGroup: string;
  createdAt: string;
  retryCount: number;
}

export function configure(base: string, queue: string, options: Record<string, unknown>) {
  return call(base, 'POST', '/api/v1/configure', { queue, options });
}

export function push(base: string, items: Array<Record<string, unknown>>, path = '/api/v1/push') {
  return call(base, 'POST', path, { items });
}

export interface PopOptions {
  partition?: string;
  batch?: number;
  consumerGroup?: string;
  wait?: boolean;
  timeout?: number;
}

export function popRaw(base: string, queue: string, o: PopOptions = {}): Promise<JsonResponse<{ messages: Message[] }>> {
  const q = new URLSearchParams();
  if (o.batch !== undefined) q.set('batch', String(o.batch));
  if (o.consumerGroup !== undefined) q.set('consumerGroup', o.consumerGroup);
  if (o.wait !== undefined) q.set('wait', String(o.wait));
  if (o.timeout !== undefined) q.set('timeout', String(o.timeout));
  const path = `/api/v1/pop/queue/${encodeURIComponent(queue)}${o.partition ? `/partition/${encodeURIComponent(o.partition)}` : ''}`;
  const qs = q.toString();
  return call(base, 'GET', qs ? `${path}?${qs}` : path);
}

/** The messages a pop leased; [] on 204. Any other status fails the test. */
export async function pop(base: string, queue: string, o: PopOptions = {}): Promise<Message[]> {
  const res = await popRaw(base, queue, o);
  if (res.status === 204) return [];
  if (res.status !== 200) throw new Error(`pop answered ${res.status}: ${res.text}`);
  return res.body.messages;
}

export function ackOf(m: Message, status: 'completed' | 'failed' = 'completed', withLease = true) {
  return {
    transactionId: m.transactionId,
    partitionId: m.partitionId,
    status,
    consumerGroup: m.consumerGroup,
    ...(withLease ? { leaseId: m.leaseId } : {}),
  };
}

export function ack(base: string, m: Message, status: 'completed' | 'failed' = 'completed', withLease = true) {
  return call(base, 'POST', '/api/v1/ack', ackOf(m, status, withLease));
}

export function transaction(base: string, body: Record<string, unknown>) {
  return call(base, 'POST', '/api/v1/transaction', body);
}

/** The client's `once`: putIfAbsent under the name of the question it answers, required. */
export function once(ns: string, key: string, value: unknown = true) {
  return { op: 'putIfAbsent', ns, key, value, ttlSeconds: 86400, required: true };
}

/**
 * A message whose first lease (1 s) lapsed and a second consumer took over: `zombie` is the first
 * lease's copy, `heir` the long poll's (another lease on the same message).
 */
export async function takenOver(base: string, queue: string, transactionId: string, payload: unknown = 'work'): Promise<{ zombie: Message; heir: Message }> {
  await configure(base, queue, { leaseTime: 1 });
  await push(base, [{ queue, payload, transactionId }]);
  const [zombie] = await pop(base, queue);
  const [heir] = await pop(base, queue, { wait: true, timeout: 10_000 });
  expect(heir.transactionId).toBe(transactionId);
  return { zombie, heir };
}
