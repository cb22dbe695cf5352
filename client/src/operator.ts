// `new Operator({ url, token })`: the operator's routes of a cell (`/api/v1/system/...`), for a
// console, a script or the `queen-kv` CLI. Reads answer one page each (`next` goes back as
// `after`); actions are idempotent. With tenancy on, name the tenant once (`tenant`): every call
// then looks at that tenant alone. The answers are the cell's JSON, as docs/operator-routes.md
// states them.
import { HttpClient, type HttpOptions } from './http';
import { stringifyJson } from './json';

export interface OperatorOptions extends Omit<HttpOptions, 'url' | 'bearerToken' | 'tenant'> {
  url: string;
  /** QUEEN_ADMIN_TOKEN of the cell. */
  token?: string;
  /** The tenant every call looks at, on a cell with tenancy on. */
  tenant?: string;
  /** Who is acting, for the cell's audit line (`x-queen-operator`). */
  operator?: string;
}

export interface PageOptions {
  limit?: number;
  after?: string | number;
}

/** An answer of the cell, as JSON. */
export type OperatorAnswer = Record<string, any>;

type Query = Record<string, string | number | boolean | undefined>;

export class Operator {
  /** @internal */
  readonly http: HttpClient;
  private readonly tenant?: string;

  constructor(options: OperatorOptions) {
    const { token, tenant, operator, ...rest } = options;
    this.http = new HttpClient({ ...rest, bearerToken: token, headers: { ...rest.headers, ...(operator ? { 'x-queen-operator': operator } : {}) } });
    this.tenant = tenant;
  }

  private path(path: string, query: Query = {}): string {
    const q = new URLSearchParams();
    if (this.tenant !== undefined) q.set('tenant', this.tenant);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) q.set(k, String(v));
    const s = q.toString();
    return s ? `${path}?${s}` : path;
  }

  private async get(path: string, query?: Query): Promise<OperatorAnswer> {
    return (await this.http.call('GET', this.path(path, query))).body as OperatorAnswer;
  }

  private async send(method: string, path: string, body?: unknown): Promise<OperatorAnswer> {
    return (await this.http.call(method, this.path(path), body === undefined ? {} : { body: stringifyJson(body) })).body as OperatorAnswer;
  }

  // ---- the cell ------------------------------------------------------------------------------
  /** Readiness: resolves when the cell serves and its database answers, throws otherwise. */
  async ready(): Promise<OperatorAnswer> {
    return (await this.http.call('GET', '/ready')).body as OperatorAnswer;
  }
  cluster(): Promise<OperatorAnswer> {
    return this.get('/api/v1/system/cluster');
  }
  switches(): Promise<OperatorAnswer> {
    return this.get('/api/v1/system/kv-timers');
  }
  /** Flips kill switches (`{ kv: false }` pauses the KV); an omitted switch is left as it is. `reason` goes in the cell's audit line. */
  setSwitches(change: { kv?: boolean; timersSchedule?: boolean; timersFire?: boolean }, reason?: string): Promise<OperatorAnswer> {
    return this.send('POST', '/api/v1/system/kv-timers', reason === undefined ? change : { ...change, reason });
  }
  tenants(o: PageOptions = {}): Promise<OperatorAnswer> {
    return this.get('/api/v1/system/tenants', { ...o });
  }

  // ---- queues and messages -------------------------------------------------------------------
  queues(o: PageOptions = {}): Promise<OperatorAnswer> {
    return this.get('/api/v1/system/queues', { ...o });
  }
  partitions(queue: string, o: PageOptions = {}): Promise<OperatorAnswer> {
    return this.get(`/api/v1/system/queues/${encodeURIComponent(queue)}/partitions`, { ...o });
  }
  messages(queue: string, partition: string, o: PageOptions & { order?: 'newest' | 'oldest' } = {}): Promise<OperatorAnswer> {
    return this.get(`/api/v1/system/queues/${encodeURIComponent(queue)}/partitions/${encodeURIComponent(partition)}/messages`, { ...o });
  }
  message(partitionId: string, transactionId: string): Promise<OperatorAnswer> {
    return this.get(`/api/v1/system/partitions/${encodeURIComponent(partitionId)}/messages/${encodeURIComponent(transactionId)}`);
  }

  // ---- dead letters ----------------------------------------------------------------------------
  requeue(partitionId: string, transactionId: string, consumerGroup?: string): Promise<OperatorAnswer> {
    return this.deadLetter('requeue', partitionId, transactionId, consumerGroup);
  }
  discard(partitionId: string, transactionId: string, consumerGroup?: string): Promise<OperatorAnswer> {
    return this.deadLetter('discard', partitionId, transactionId, consumerGroup);
  }
  /** Up to `limit` of a queue's dead letters, oldest first; call again until `remaining` is 0. */
  requeueAll(queue: string, o: { consumerGroup?: string; limit?: number } = {}): Promise<OperatorAnswer> {
    return this.send('POST', `/api/v1/system/queues/${encodeURIComponent(queue)}/dead-letters/requeue`, o);
  }
  discardAll(queue: string, o: { consumerGroup?: string; limit?: number } = {}): Promise<OperatorAnswer> {
    return this.send('POST', `/api/v1/system/queues/${encodeURIComponent(queue)}/dead-letters/discard`, o);
  }
  private deadLetter(action: 'requeue' | 'discard', partitionId: string, transactionId: string, consumerGroup?: string): Promise<OperatorAnswer> {
    return this.send('POST', `/api/v1/system/partitions/${encodeURIComponent(partitionId)}/messages/${encodeURIComponent(transactionId)}/${action}`, consumerGroup ? { consumerGroup } : {});
  }
  /** Moves a consumer group's cursor to now on every partition of the queue (or one). */
  skip(queue: string, group: string, partition?: string): Promise<OperatorAnswer> {
    return this.send('POST', `/api/v1/system/queues/${encodeURIComponent(queue)}/consumer-groups/${encodeURIComponent(group)}/skip`, partition ? { partition } : {});
  }

  // ---- timers ---------------------------------------------------------------------------------
  timers(o: PageOptions & { queue?: string; state?: 'all' | 'due' | 'late' | 'pending'; lateSeconds?: number } = {}): Promise<OperatorAnswer> {
    return this.get('/api/v1/system/timers', { ...o });
  }
  cancelTimer(timerId: string): Promise<OperatorAnswer> {
    return this.send('POST', `/api/v1/system/timers/${encodeURIComponent(timerId)}/cancel`);
  }
  rescheduleTimer(timerId: string, when: { deliverAt: string } | { delaySeconds: number }): Promise<OperatorAnswer> {
    return this.send('POST', `/api/v1/system/timers/${encodeURIComponent(timerId)}/reschedule`, when);
  }

  // ---- KV ---------------------------------------------------------------------------------------
  keys(ns: string, o: PageOptions & { prefix?: string } = {}): Promise<OperatorAnswer> {
    return this.get(`/api/v1/system/kv/${encodeURIComponent(ns)}`, { ...o });
  }
  key(ns: string, key: string): Promise<OperatorAnswer> {
    return this.get(`/api/v1/system/kv/${encodeURIComponent(ns)}/keys/${encodeURIComponent(key)}`);
  }
  deleteKey(ns: string, key: string): Promise<OperatorAnswer> {
    return this.send('DELETE', `/api/v1/system/kv/${encodeURIComponent(ns)}/keys/${encodeURIComponent(key)}`);
  }

  close(): void {
    this.http.close();
  }
}
