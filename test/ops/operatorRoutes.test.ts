// The operator's reads and actions (/api/v1/system/..., docs/operator-routes.md) on a cell with
// tenancy: each read's shape, paging and bounds, the admin token, one tenant's rows only, each
// action seen by a client afterwards, and no value or payload in any log line.
import fs from 'node:fs';
import path from 'node:path';
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { parse } from 'yaml';
import { sql } from '../support/database';
import { useApi, withTestApi } from '../support/api';
import { call } from '../support/http';
import { sweep } from '../support/sweeper';

const A = 'aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa';
const B = 'bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb';
const C = 'cccccccc-cccc-4ccc-8ccc-cccccccccccc';
const TOKEN = 'operator-test-token-51c';
const KEY = '7f'.repeat(32);
/** Markers that are values or payloads: none may reach a log line, and B's never an answer for A. */
const SECRET_A = 'PAYLOAD-OF-A-3f9';
const SECRET_B = 'PAYLOAD-OF-B-77c';
const VALUE_A = 'VALUE-OF-A-118';

const rawLines: string[] = [];
/** The lines the API logged, parsed. */
const logged = (): Array<Record<string, any>> => rawLines.map((l) => JSON.parse(l));
const api = useApi({
  QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1', QUEEN_ADMIN_TOKEN: TOKEN, QUEEN_KV_REQUIRE_GRANT: '0', QUEEN_ENCRYPTION_KEY: KEY,
}, { lines: rawLines });

// Every 200 and refusal of an operator route is checked against docs/openapi.yaml as it arrives.
const doc = parse(fs.readFileSync(path.resolve(__dirname, '../../../docs/openapi.yaml'), 'utf8'));
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addSchema({ $id: 'https://queen-kv.invalid/openapi.json', components: doc.components } as any);
const deref = (node: any): any => (node?.$ref ? deref(node.$ref.slice(2).split('/').reduce((at: any, k: string) => at?.[k], doc)) : node);
const templates = Object.keys(doc.paths).filter((p) => p.startsWith('/api/v1/system/')).map((p) => ({
  p, re: new RegExp(`^${p.replace(/\{[^}]+\}/g, '[^/]+')}$`),
}));
const checked = new Set<string>();
function conforms(method: string, pathAndQuery: string, res: { status: number; body: any }): void {
  const bare = pathAndQuery.split('?')[0];
  const template = templates.find((t) => t.re.test(bare) && doc.paths[t.p][method.toLowerCase()]);
  expect([bare, template !== undefined]).toEqual([bare, true]);
  const response = deref(doc.paths[template!.p][method.toLowerCase()].responses[String(res.status)]);
  expect([method, template!.p, res.status, response !== undefined]).toEqual([method, template!.p, res.status, true]);
  const ref: string = response.content['application/json'].schema.$ref;
  const validate = ajv.getSchema(`https://queen-kv.invalid/openapi.json${ref}`)!;
  expect([method, bare, validate(res.body) ? [] : validate.errors]).toEqual([method, bare, []]);
  if (res.status >= 400) expect(response['x-error-codes']).toContain(res.body.error);
  checked.add(`${method} ${template!.p}`);
}

const admin = { authorization: `Bearer ${TOKEN}`, 'x-queen-operator': 'alice@oncall' };
const as = (tenant: string) => ({ 'x-queen-tenant': tenant });
const op = async (method: string, route: string, body?: unknown, tenant: string | null = A) => {
  const sep = route.includes('?') ? '&' : '?';
  const res = await call(api.url, method, tenant === null ? route : `${route}${sep}tenant=${tenant}`, body, admin);
  conforms(method, route, res);
  return res;
};
const push = (tenant: string, items: unknown[]) => call(api.url, 'POST', '/api/v1/push', { items }, as(tenant));
async function pop(tenant: string, queue: string, query = ''): Promise<any[]> {
  const res = await call(api.url, 'GET', `/api/v1/pop/queue/${queue}${query}`, undefined, as(tenant));
  if (res.status === 204) return [];
  expect(res.status).toBe(200);
  return res.body.messages;
}
const ackFailed = (tenant: string, m: any, group: string) =>
  call(api.url, 'POST', '/api/v1/ack', { transactionId: m.transactionId, partitionId: m.partitionId, status: 'failed', error: 'boom', leaseId: m.leaseId, consumerGroup: group }, as(tenant));
const configure = (tenant: string, queue: string, options: Record<string, unknown>) =>
  call(api.url, 'POST', '/api/v1/configure', { queue, options }, as(tenant));

/** Dead-letters `m` for `group` (the queue has retryLimit 0: one failure is enough). */
async function deadLetter(tenant: string, queue: string, group: string): Promise<any> {
  const [m] = await pop(tenant, queue, `?consumerGroup=${group}`);
  expect((await ackFailed(tenant, m, group)).body.deadLetter).toBe(true);
  return m;
}

type Route = [method: string, path: string];
/** Each route asked each way (`?tenant=` when not null, those headers) is refused with `status` and `code`; a failure names the route. */
async function refusedEverywhere(base: string, routes: Route[], asks: Array<{ tenant: string | null; headers: Record<string, string> }>, status: number, code: string): Promise<void> {
  for (const [method, path] of routes) {
    for (const { tenant, headers } of asks) {
      const res = await call(base, method, tenant === null ? path : `${path}?tenant=${tenant}`, undefined, headers);
      expect([method, path, res.status, res.body?.error]).toEqual([method, path, status, code]);
    }
  }
}

describe('refusals', () => {
  const READS = ['/api/v1/system/queues', '/api/v1/system/queues/q/partitions', '/api/v1/system/queues/q/partitions/Default/messages',
    `/api/v1/system/partitions/${A}/messages/t`, '/api/v1/system/timers', '/api/v1/system/kv/ns', '/api/v1/system/kv/ns/keys/k',
    '/api/v1/system/tenants'];
  const ACTIONS: Route[] = [
    ['POST', `/api/v1/system/partitions/${A}/messages/t/requeue`], ['POST', `/api/v1/system/partitions/${A}/messages/t/discard`],
    ['POST', '/api/v1/system/queues/q/dead-letters/requeue'], ['POST', '/api/v1/system/queues/q/dead-letters/discard'],
    ['POST', `/api/v1/system/timers/${A}/cancel`], ['POST', `/api/v1/system/timers/${A}/reschedule`],
    ['DELETE', '/api/v1/system/kv/ns/keys/k'], ['POST', '/api/v1/system/queues/q/consumer-groups/g/skip'],
  ];

  test('without the bearer of the token every route is 401 unauthorized JSON', async () => {
    const asks = ([{}, { authorization: 'Bearer wrong-token-of-same-len' }] as Array<Record<string, string>>).map((headers) => ({ tenant: A, headers }));
    await refusedEverywhere(api.url, [...READS.map((p): Route => ['GET', p]), ...ACTIONS], asks, 401, 'unauthorized');
  });

  test('under tenancy each route but the tenant list needs ?tenant=, a UUID of a tenant', async () => {
    const asks = [null, 'not-a-uuid', '00000000-0000-0000-0000-000000000000'].map((tenant) => ({ tenant, headers: admin }));
    await refusedEverywhere(api.url, [...READS.filter((p) => !p.endsWith('/tenants')).map((p): Route => ['GET', p]), ...ACTIONS], asks, 400, 'tenant_required');
  });

  test('bad input is a 4xx with its code, never a 500', async () => {
    const reads: Array<[number, string, string[]]> = [
      [400, 'operator_invalid_limit', ['/api/v1/system/queues?limit=0', '/api/v1/system/queues?limit=1001', '/api/v1/system/queues?limit=ten']],
      [400, 'bad_request', ['/api/v1/system/queues?limit=1&limit=2']],
      [404, 'operator_not_found', ['/api/v1/system/queues/nope/partitions', `/api/v1/system/partitions/${A}/messages/t`, '/api/v1/system/kv/ns/keys/none']],
      [400, 'log_invalid_queue', ['/api/v1/system/queues/-bad/partitions']],
      [400, 'operator_invalid_cursor', ['/api/v1/system/queues/nope/partitions/Default/messages?after=x', '/api/v1/system/tenants?after=x']],
      [400, 'log_invalid_partition_id', ['/api/v1/system/partitions/not-a-uuid/messages/t']],
      [400, 'operator_invalid_state', ['/api/v1/system/timers?state=soon']],
      [400, 'timers_invalid_cursor', ['/api/v1/system/timers?after=yesterday']],
      [400, 'kv_invalid_namespace', ['/api/v1/system/kv/.bad']],
      [400, 'kv_invalid_key', ['/api/v1/system/kv/ns/keys/%00']],
    ];
    const actions: Array<[string, unknown, number, string]> = [
      ['/api/v1/system/timers/not-a-uuid/cancel', undefined, 400, 'timers_invalid_timer_id'],
      [`/api/v1/system/timers/${A}/reschedule`, { delaySeconds: -1 }, 400, 'timers_invalid_delay'],
      [`/api/v1/system/timers/${A}/reschedule`, '[1]', 400, 'invalid_json'],
      ['/api/v1/system/queues/q/dead-letters/requeue', '{"colour":1}', 400, 'bad_request'],
      ['/api/v1/system/queues/q/dead-letters/requeue', '{broken', 400, 'invalid_json'],
      ['/api/v1/system/queues/q/consumer-groups/g/skip', { partition: 5 }, 400, 'log_invalid_partition'],
    ];
    const refused = async (method: string, path: string, body: unknown, status: number, code: string) => {
      const res = await op(method, path, body);
      expect([method, path, res.status, res.body?.error, typeof res.body?.message]).toEqual([method, path, status, code, 'string']);
    };
    for (const [status, code, paths] of reads) for (const path of paths) await refused('GET', path, undefined, status, code);
    for (const [path, body, status, code] of actions) await refused('POST', path, body, status, code);
  });
});

test('a cell without QUEEN_ADMIN_TOKEN answers the operator routes 403 operator_disabled', () =>
  withTestApi({}, async (open) => {
    const routes: Route[] = [['GET', '/api/v1/system/queues'], ['GET', '/api/v1/system/tenants'], ['DELETE', '/api/v1/system/kv/ns/keys/k']];
    await refusedEverywhere(open.url, routes, [{ tenant: null, headers: {} }], 403, 'operator_disabled');
    // The switches route stays as it was: open on a cell without a token.
    expect((await call(open.url, 'GET', '/api/v1/system/kv-timers')).status).toBe(200);
  }));

describe('reads, one tenant at a time', () => {
  beforeAll(async () => {
    for (const [tenant, secret] of [[A, SECRET_A], [B, SECRET_B]]) {
      await configure(tenant, 'orders', { retryLimit: 0, retryDelay: 0 });
      expect((await push(tenant, [
        ...['p1', 'p2', 'p3'].map((partition, i) => ({ queue: 'orders', partition, payload: { secret, i }, transactionId: `t-${i}` })),
        ...[3, 4, 5, 6].map((i) => ({ queue: 'orders', partition: 'p1', payload: { secret, i }, transactionId: `t-${i}` })),
      ])).status).toBe(201);
    }
    expect((await push(B, [{ queue: 'only-b', payload: SECRET_B }])).status).toBe(201);
  });

  test('queues: backlog per group, oldest unconsumed age, dead letters; paged by name; B\'s queue never listed for A', async () => {
    await deadLetter(A, 'orders', 'billing');
    const res = await op('GET', '/api/v1/system/queues');
    expect(res.status).toBe(200);
    expect(res.body.queues.map((q: any) => q.name)).toEqual(['orders']);
    const [orders] = res.body.queues;
    expect(orders).toMatchObject({ partitions: 3, deadLetters: 1, retryLimit: 0 });
    const billing = orders.groups.find((g: any) => g.consumerGroup === 'billing');
    // billing has popped and dead-lettered one message of one partition: 6 of 7 left.
    expect(billing).toMatchObject({ backlog: 6, deadLetters: 1 });
    expect(billing.oldestUnconsumedSeconds).toBeGreaterThanOrEqual(0);
    expect(res.text).not.toContain(SECRET_A);
    const bList = await op('GET', '/api/v1/system/queues?limit=1', undefined, B);
    expect([bList.body.queues.map((q: any) => q.name), bList.body.next]).toEqual([['only-b'], 'only-b']);
    const bNext = await op('GET', `/api/v1/system/queues?limit=1&after=${bList.body.next}`, undefined, B);
    expect([bNext.body.queues.map((q: any) => q.name), bNext.body.next]).toEqual([['orders'], 'orders']);
    const bEnd = await op('GET', '/api/v1/system/queues?limit=1&after=orders', undefined, B);
    expect([bEnd.body.queues, bEnd.body.next]).toEqual([[], null]);
    expect((await op('GET', '/api/v1/system/queues/only-b/partitions')).status).toBe(404);
  });

  test('partitions: each group\'s cursor, backlog and dead letters, keyset by name', async () => {
    const first = await op('GET', '/api/v1/system/queues/orders/partitions?limit=2');
    expect(first.status).toBe(200);
    expect(first.body.partitions.map((p: any) => p.name)).toEqual(['p1', 'p2']);
    expect(first.body.next).toBe('p2');
    const p1 = first.body.partitions[0];
    expect(p1.lastSeq).toBe(5);
    const rest = await op('GET', `/api/v1/system/queues/orders/partitions?limit=2&after=${first.body.next}`);
    expect([rest.body.partitions.map((p: any) => p.name), rest.body.next]).toEqual([['p3'], null]);
  });

  test('messages: newest or oldest first, keyset by seq, sizes and never payloads', async () => {
    const newest = await op('GET', '/api/v1/system/queues/orders/partitions/p1/messages?limit=2');
    expect(newest.status).toBe(200);
    expect(newest.body.messages.map((m: any) => m.seq)).toEqual([5, 4]);
    expect(newest.body.next).toBe('4');
    expect(newest.body.messages[0]).toMatchObject({ transactionId: 't-6', sealed: false });
    expect(newest.body.messages[0].bytes).toBeGreaterThan(0);
    expect(newest.text).not.toContain(SECRET_A);
    const older = await op('GET', `/api/v1/system/queues/orders/partitions/p1/messages?limit=2&after=${newest.body.next}`);
    expect(older.body.messages.map((m: any) => m.seq)).toEqual([3, 2]);
    const oldest = await op('GET', '/api/v1/system/queues/orders/partitions/p1/messages?order=oldest&limit=10');
    expect([oldest.body.messages.map((m: any) => m.seq), oldest.body.next]).toEqual([[1, 2, 3, 4, 5], null]);
    expect((await op('GET', '/api/v1/system/queues/orders/partitions/p1/messages?order=sideways')).body.error).toBe('operator_invalid_order');
    expect((await op('GET', '/api/v1/system/queues/orders/partitions/p9/messages')).status).toBe(404);
  });

  test('one message: its payload, and each group with its state and failures; another tenant\'s is 404', async () => {
    const page = await op('GET', '/api/v1/system/queues/orders/partitions/p1/messages?order=oldest&limit=1');
    const { partitionId } = page.body;
    const one = await op('GET', `/api/v1/system/partitions/${partitionId}/messages/t-0`);
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject({ transactionId: 't-0', queue: 'orders', partition: 'p1', seq: 1, data: { secret: SECRET_A, i: 0 }, sealed: false, dataOmitted: false });
    expect(one.body.groups).toEqual([expect.objectContaining({ consumerGroup: 'billing', state: 'deadLettered', failures: 1, errorMessage: 'boom' })]);
    expect((await op('GET', `/api/v1/system/partitions/${partitionId}/messages/t-0`, undefined, B)).status).toBe(404);
  });

  test('a sealed payload (an encrypted queue) is opened as pop opens it', async () => {
    await configure(A, 'vault', { encryptionEnabled: true });
    expect((await push(A, [{ queue: 'vault', payload: { secret: SECRET_A }, transactionId: 'v1' }])).status).toBe(201);
    const page = await op('GET', '/api/v1/system/queues/vault/partitions/Default/messages');
    expect(page.body.messages[0].sealed).toBe(true);
    const one = await op('GET', `/api/v1/system/partitions/${page.body.partitionId}/messages/v1`);
    expect(one.body).toMatchObject({ sealed: true, data: { secret: SECRET_A } });
    const stored = await sql(api.databaseUrl, `SELECT payload::text AS p FROM queen.messages WHERE transaction_id = 'v1'`);
    expect(stored[0].p).not.toContain(SECRET_A);
  });

  test('timers: due, late and pending, by deliverAt, keyset-paged; payload sizes only; B\'s never shown', async () => {
    const at = (secondsFromNow: number) => new Date(Date.now() + secondsFromNow * 1000).toISOString();
    for (const [s, q] of [[-600, 'orders'], [-5, 'orders'], [3600, 'orders'], [7200, 'other']] as Array<[number, string]>) {
      const r = await call(api.url, 'POST', '/api/v1/timers', { queue: q, payload: { secret: SECRET_A }, deliverAt: at(s) }, as(A));
      expect([r.status, typeof r.body.timerId]).toEqual([200, 'string']);
    }
    await call(api.url, 'POST', '/api/v1/timers', { queue: 'orders', payload: SECRET_B, deliverAt: at(-600) }, as(B));
    const all = await op('GET', '/api/v1/system/timers?queue=orders');
    expect(all.status).toBe(200);
    expect(all.body.timers.map((t: any) => [t.due, t.late])).toEqual([[true, true], [true, false], [false, false]]);
    expect(all.text).not.toContain(SECRET_A);
    expect(all.body.timers[0].bytes).toBeGreaterThan(0);
    expect((await op('GET', '/api/v1/system/timers?queue=orders&state=late')).body.timers).toHaveLength(1);
    expect((await op('GET', '/api/v1/system/timers?queue=orders&state=due')).body.timers).toHaveLength(2);
    expect((await op('GET', '/api/v1/system/timers?queue=orders&state=pending')).body.timers).toHaveLength(1);
    expect((await op('GET', '/api/v1/system/timers?queue=orders&state=late&lateSeconds=1')).body.timers).toHaveLength(2);
    const first = await op('GET', '/api/v1/system/timers?limit=3');
    expect(first.body.timers).toHaveLength(3);
    const second = await op('GET', `/api/v1/system/timers?limit=3&after=${encodeURIComponent(first.body.next)}`);
    expect([second.body.timers.map((t: any) => t.queue), second.body.next]).toEqual([['other'], null]);
    expect((await op('GET', '/api/v1/system/timers?queue=orders', undefined, B)).body.timers).toHaveLength(1);
  });

  test('KV: keys under a prefix with versions and expiry, keyset-paged, no values; a value only for one key', async () => {
    for (const key of ['user:1', 'user:2', 'user:3', 'other']) {
      expect((await call(api.url, 'PUT', `/api/v1/kv/sessions/${key}`, { value: { v: VALUE_A }, ttlSeconds: 3600 }, as(A))).status).toBe(200);
    }
    await call(api.url, 'PUT', '/api/v1/kv/sessions/user:9', { value: SECRET_B, forever: true }, as(B));
    const first = await op('GET', '/api/v1/system/kv/sessions?prefix=user:&limit=2');
    expect(first.status).toBe(200);
    expect(first.body.keys.map((k: any) => k.key)).toEqual(['user:1', 'user:2']);
    expect(first.body.keys[0]).toMatchObject({ version: expect.any(Number), expiresAt: expect.any(String) });
    expect(first.text).not.toContain(VALUE_A);
    const rest = await op('GET', `/api/v1/system/kv/sessions?prefix=user:&limit=2&after=${first.body.next}`);
    expect([rest.body.keys.map((k: any) => k.key), rest.body.next]).toEqual([['user:3'], null]);
    expect((await op('GET', '/api/v1/system/kv/sessions')).body.keys).toHaveLength(4);
    const one = await op('GET', '/api/v1/system/kv/sessions/keys/user%3A2');
    expect(one.body).toMatchObject({ key: 'user:2', value: { v: VALUE_A } });
    expect((await op('GET', '/api/v1/system/kv/sessions/keys/user%3A9')).status).toBe(404);
    expect((await op('GET', '/api/v1/system/kv/sessions?prefix=user:', undefined, B)).body.keys.map((k: any) => k.key)).toEqual(['user:9']);
  });

  test('tenants: grants, usage and queue counts, over quota said; the rate limits of the cell', async () => {
    // C has a grant and a measurement over it, and no queue.
    await sql(api.databaseUrl, `INSERT INTO queen.kv_quota (tenant_id, granted, enabled, max_rows) VALUES ($1, true, true, 10)`, [C]);
    await sql(api.databaseUrl, `INSERT INTO queen.kv_usage (tenant_id, rows, bytes) VALUES ($1, 12, 400)`, [C]);
    const res = await op('GET', '/api/v1/system/tenants', undefined, null);
    expect(res.status).toBe(200);
    expect(res.body.tenants.map((t: any) => t.tenantId)).toEqual([A, B, C]);
    expect(res.body.tenants[2]).toMatchObject({ grant: { granted: true, maxRows: 10 }, usage: { rows: 12 }, queues: 0, overQuota: true });
    expect(res.body.tenants[0]).toMatchObject({ grant: null, usage: null, queues: 2, overQuota: false });
    expect(res.body.rateLimits.kvReadsPerSec).toBe(1000000);
    const onlyB = await op('GET', `/api/v1/system/tenants?tenant=${B}`, undefined, null);
    expect(onlyB.body.tenants.map((t: any) => t.tenantId)).toEqual([B]);
    const paged = await op('GET', '/api/v1/system/tenants?limit=1', undefined, null);
    expect(paged.body.next).toBe(A);
    expect((await op('GET', `/api/v1/system/tenants?limit=1&after=${A}`, undefined, null)).body.tenants.map((t: any) => t.tenantId)).toEqual([B]);
    expect((await op('GET', `/api/v1/system/tenants?limit=5&after=${A}`, undefined, null)).body.next).toBe(null);
  });
});

describe('actions, as a client then sees them', () => {
  test('a requeued dead letter pops again for its group (and only it); twice is a no-op; another tenant\'s is 404', async () => {
    await configure(A, 'jobs', { retryLimit: 0, retryDelay: 0 });
    await push(A, [1, 2, 3].map((i) => ({ queue: 'jobs', payload: { secret: SECRET_A, i }, transactionId: `j-${i}` })));
    const dead = await deadLetter(A, 'jobs', 'w');
    // The rest of the partition is consumed past it.
    for (const m of await pop(A, 'jobs', '?consumerGroup=w&batch=10')) {
      await call(api.url, 'POST', '/api/v1/ack', { transactionId: m.transactionId, partitionId: m.partitionId, status: 'completed', leaseId: m.leaseId, consumerGroup: 'w' }, as(A));
    }
    expect(await pop(A, 'jobs', '?consumerGroup=w')).toEqual([]);
    const path = `/api/v1/system/partitions/${dead.partitionId}/messages/${dead.transactionId}/requeue`;
    expect((await op('POST', path, {}, B)).status).toBe(404);
    const res = await op('POST', path, { consumerGroup: 'w' });
    expect(res.status).toBe(200);
    expect(res.body.groups).toEqual([{ consumerGroup: 'w', outcome: 'requeued' }]);
    expect((await op('POST', path, { consumerGroup: 'w' })).body.groups).toEqual([]);
    const again = await pop(A, 'jobs', '?consumerGroup=w&batch=10');
    expect(again.map((m) => m.transactionId)).toEqual([dead.transactionId]);
    expect(again[0].retryCount).toBe(0);
    expect((await call(api.url, 'GET', '/api/v1/dlq?queue=jobs', undefined, as(A))).body.messages).toEqual([]);
  });

  test('discard takes a dead letter off the list and leaves it consumed', async () => {
    await configure(A, 'disc', { retryLimit: 0, retryDelay: 0 });
    await push(A, [{ queue: 'disc', payload: SECRET_A, transactionId: 'd-1' }]);
    const dead = await deadLetter(A, 'disc', 'w');
    expect((await call(api.url, 'GET', '/api/v1/dlq?queue=disc', undefined, as(A))).body.messages).toHaveLength(1);
    const res = await op('POST', `/api/v1/system/partitions/${dead.partitionId}/messages/d-1/discard`);
    expect(res.body.groups).toEqual([{ consumerGroup: 'w', outcome: 'discarded' }]);
    expect((await call(api.url, 'GET', '/api/v1/dlq?queue=disc', undefined, as(A))).body.messages).toEqual([]);
    expect(await pop(A, 'disc', '?consumerGroup=w')).toEqual([]);
  });

  test('all of a queue\'s dead letters requeued, in bounded calls that say what remains', async () => {
    await configure(A, 'bulk', { retryLimit: 0, retryDelay: 0 });
    await push(A, ['x', 'y', 'z'].map((p) => ({ queue: 'bulk', partition: p, payload: SECRET_A, transactionId: `b-${p}` })));
    for (let i = 0; i < 3; i++) await deadLetter(A, 'bulk', 'w');
    const first = await op('POST', '/api/v1/system/queues/bulk/dead-letters/requeue', { consumerGroup: 'w', limit: 2 });
    expect(first.body).toMatchObject({ requeued: 2, remaining: 1, cursorTooFar: 0 });
    const second = await op('POST', '/api/v1/system/queues/bulk/dead-letters/requeue', { limit: 2 });
    expect(second.body).toMatchObject({ requeued: 1, remaining: 0 });
    const popped: string[] = [];
    for (let i = 0; i < 3; i++) popped.push(...(await pop(A, 'bulk', '?consumerGroup=w')).map((m) => m.transactionId));
    expect(popped.sort()).toEqual(['b-x', 'b-y', 'b-z']);
    const discard = await op('POST', '/api/v1/system/queues/bulk/dead-letters/discard', {});
    expect(discard.body).toMatchObject({ discarded: 0, remaining: 0 });
  });

  test('a cancelled timer never fires; a rescheduled one moves; another tenant\'s is absent to A', async () => {
    const past = new Date(Date.now() - 1000).toISOString();
    const mk = async (tenant: string, q: string) => (await call(api.url, 'POST', '/api/v1/timers', { queue: q, payload: SECRET_A, deliverAt: past }, as(tenant))).body.timerId;
    const cancelled = await mk(A, 'fired');
    const kept = await mk(A, 'fired');
    const moved = await mk(A, 'fired');
    const theirs = await mk(B, 'fired');
    expect((await op('POST', `/api/v1/system/timers/${theirs}/cancel`)).body).toMatchObject({ cancelled: false, reason: 'absent' });
    expect((await op('POST', `/api/v1/system/timers/${cancelled}/cancel`)).body).toMatchObject({ cancelled: true });
    expect((await op('POST', `/api/v1/system/timers/${cancelled}/cancel`)).body).toMatchObject({ cancelled: false, reason: 'absent' });
    const r = await op('POST', `/api/v1/system/timers/${moved}/reschedule`, { delaySeconds: 3600 });
    expect(r.body).toMatchObject({ rescheduled: true, deliverAt: expect.any(String) });
    await sweep(api.databaseUrl);
    const fired = await sql(api.databaseUrl, `SELECT transaction_id FROM queen.messages WHERE transaction_id LIKE 'timer:%'`);
    const ids = fired.map((row: any) => String(row.transaction_id).slice('timer:'.length));
    expect(ids).toEqual(expect.arrayContaining([kept, theirs]));
    expect(ids).not.toContain(cancelled);
    expect(ids).not.toContain(moved);
  });

  test('a deleted key is gone for the client; the delete is idempotent; another tenant\'s key is untouched', async () => {
    await call(api.url, 'PUT', '/api/v1/kv/del/k1', { value: VALUE_A, forever: true }, as(A));
    await call(api.url, 'PUT', '/api/v1/kv/del/k1', { value: SECRET_B, forever: true }, as(B));
    expect((await op('DELETE', '/api/v1/system/kv/del/keys/k1')).body).toEqual({ namespace: 'del', key: 'k1', deleted: true });
    expect((await op('DELETE', '/api/v1/system/kv/del/keys/k1')).body.deleted).toBe(false);
    expect((await call(api.url, 'GET', '/api/v1/kv/del/k1', undefined, as(A))).body.found).toBe(false);
    expect((await call(api.url, 'GET', '/api/v1/kv/del/k1', undefined, as(B))).body.value).toBe(SECRET_B);
  });

  test('a group moved to now skips its backlog and gets what is pushed after', async () => {
    await push(A, [1, 2, 3].map((i) => ({ queue: 'skip', payload: SECRET_A, transactionId: `s-${i}` })));
    const res = await op('POST', '/api/v1/system/queues/skip/consumer-groups/late/skip');
    expect(res.body).toMatchObject({ partitions: 1, skipped: 3 });
    expect(await pop(A, 'skip', '?consumerGroup=late')).toEqual([]);
    // Other groups still see everything.
    expect((await pop(A, 'skip', '?consumerGroup=other&batch=10')).length).toBe(3);
    await push(A, [{ queue: 'skip', payload: SECRET_A, transactionId: 's-4' }]);
    expect((await pop(A, 'skip', '?consumerGroup=late')).map((m) => m.transactionId)).toEqual(['s-4']);
    expect((await op('POST', '/api/v1/system/queues/skip/consumer-groups/late/skip')).body.skipped).toBe(1);
  });

  test('a requeue while the group holds a lease on the partition: the lease settles it, the next pop has it', async () => {
    await configure(A, 'leased', { retryLimit: 0, retryDelay: 0, leaseTime: 300 });
    await push(A, [1, 2, 3].map((i) => ({ queue: 'leased', payload: SECRET_A, transactionId: `l-${i}` })));
    const [first, second] = await pop(A, 'leased', '?consumerGroup=w&batch=2');
    // l-1 dead, l-2 still leased (unacked) under the same lease.
    expect((await ackFailed(A, first, 'w')).body.deadLetter).toBe(true);
    const res = await op('POST', `/api/v1/system/partitions/${first.partitionId}/messages/l-1/requeue`, {});
    expect(res.body.groups).toEqual([{ consumerGroup: 'w', outcome: 'requeued' }]);
    // The lease still holds l-2; completing it ends the lease, and l-1 comes back before l-3.
    const done = await call(api.url, 'POST', '/api/v1/ack', { transactionId: second.transactionId, partitionId: second.partitionId, status: 'completed', leaseId: second.leaseId, consumerGroup: 'w' }, as(A));
    expect(done.body.ok).toBe(true);
    expect((await pop(A, 'leased', '?consumerGroup=w&batch=10')).map((m) => m.transactionId)).toEqual(['l-1', 'l-3']);
  });

  test('a dead letter the group has gone more than 10 000 messages past is refused as cursor_too_far, and stays listed', async () => {
    await configure(A, 'far', { retryLimit: 0, retryDelay: 0 });
    await push(A, [{ queue: 'far', payload: SECRET_A, transactionId: 'f-0' }]);
    const dead = await deadLetter(A, 'far', 'w');
    for (let start = 1; start <= 10_001; start += 1000) {
      const items = [];
      for (let i = start; i < Math.min(start + 1000, 10_002); i++) items.push({ queue: 'far', payload: i, transactionId: `f-${i}` });
      expect((await push(A, items)).status).toBe(201);
    }
    // The group finishes all of them (the skip is the quick way to say so).
    await op('POST', '/api/v1/system/queues/far/consumer-groups/w/skip');
    const res = await op('POST', `/api/v1/system/partitions/${dead.partitionId}/messages/f-0/requeue`, { consumerGroup: 'w' });
    expect(res.body.groups).toEqual([{ consumerGroup: 'w', outcome: 'cursor_too_far' }]);
    expect((await op('POST', '/api/v1/system/queues/far/dead-letters/requeue', {})).body).toMatchObject({ requeued: 0, cursorTooFar: 1, remaining: 1 });
    expect(await pop(A, 'far', '?consumerGroup=w')).toEqual([]);
    expect((await call(api.url, 'GET', '/api/v1/dlq?queue=far', undefined, as(A))).body.messages).toHaveLength(1);
  });

  test('an ack under a lease the skip ended answers already_acked', async () => {
    await push(A, [{ queue: 'skip2', payload: SECRET_A, transactionId: 'k-1' }]);
    const [m] = await pop(A, 'skip2', '?consumerGroup=g');
    expect((await op('POST', '/api/v1/system/queues/skip2/consumer-groups/g/skip', { partition: 'Default' })).body).toMatchObject({ partitions: 1, skipped: 1 });
    const ack = await call(api.url, 'POST', '/api/v1/ack', { transactionId: m.transactionId, partitionId: m.partitionId, status: 'completed', leaseId: m.leaseId, consumerGroup: 'g' }, as(A));
    expect(ack.body).toMatchObject({ ok: false, ackReason: 'already_acked' });
    expect((await op('POST', '/api/v1/system/queues/skip2/consumer-groups/g/skip', { partition: 'nope' })).status).toBe(404);
  });
});

test('every operator route was answered and held to docs/openapi.yaml', () => {
  const operatorRoutes = Object.entries(doc.paths as Record<string, any>)
    .filter(([p, item]) => p.startsWith('/api/v1/system/') && Object.values(item).some((o: any) => o?.tags?.includes('operator')))
    .flatMap(([p, item]) => Object.keys(item).map((m) => `${m.toUpperCase()} ${p}`));
  expect(operatorRoutes.length).toBe(16);
  expect(operatorRoutes.filter((r) => !checked.has(r))).toEqual([]);
});

test('a kill switch flipped with a reason: the audit line says who, what and why; a reason that is not plain short text is refused', async () => {
  const off = await call(api.url, 'POST', '/api/v1/system/kv-timers', { timersSchedule: false, reason: 'incident 42: schedules flood' }, admin);
  expect(off.status).toBe(200);
  expect(off.body.timersSchedule).toBe(false);
  const on = await call(api.url, 'POST', '/api/v1/system/kv-timers', { timersSchedule: true }, admin);
  expect(on.status).toBe(200);
  const flips = logged().filter((l) => l.msg === 'operator action' && l.audit.action === 'switch_flip').map((l) => l.audit);
  expect(flips).toEqual([
    expect.objectContaining({ operator: 'alice@oncall', target: { timersSchedule: false }, reason: 'incident 42: schedules flood', outcome: { mirrored: true } }),
    expect.objectContaining({ operator: 'alice@oncall', target: { timersSchedule: true } }),
  ]);
  for (const reason of ['', 'x'.repeat(201), 'two\nlines', 42]) {
    const bad = await call(api.url, 'POST', '/api/v1/system/kv-timers', { kv: false, reason }, admin);
    expect({ reason, status: bad.status, error: bad.body.error }).toEqual({ reason, status: 400, error: 'bad_request' });
  }
  expect((await call(api.url, 'GET', '/api/v1/system/kv-timers', undefined, admin)).body.kv).toBe(true);
});

test('the log: one audit line per action (who, what), and no value or payload in any line', () => {
  const audits = logged().filter((l) => l.msg === 'operator action').map((l) => l.audit);
  expect(audits.map((a) => a.action)).toEqual(expect.arrayContaining([
    'dead_letter_requeue', 'dead_letter_discard', 'dead_letters_requeue', 'dead_letters_discard', 'timer_cancel', 'timer_reschedule',
    'kv_delete', 'consumer_group_skip',
  ]));
  expect(audits.every((a) => a.operator === 'alice@oncall' && (typeof a.tenant === 'string' || a.action === 'switch_flip'))).toBe(true);
  expect(audits.find((a) => a.action === 'kv_delete')).toMatchObject({ tenant: A, target: { namespace: 'del', key: 'k1' }, outcome: { deleted: true } });
  expect(rawLines.length).toBeGreaterThan(50);
  for (const marker of [SECRET_A, SECRET_B, VALUE_A, TOKEN]) expect(rawLines.filter((l) => l.includes(marker))).toEqual([]);
});
