// npm run fuzz: every route of the API, driven with generated requests from a seeded PRNG, against a
// cell of its own (the built API, `node dist/services/api/main.js`, one worker, tenancy on, two
// tenants, an admin token) on a fresh embedded PostgreSQL (or DATABASE_URL's server).
//
//   npm run fuzz -- --count 100000 --seconds 600 --seed 1234 [--concurrency 8] [--replay N]
//
// Request i is generated from (seed, i) alone: the same seed gives the same requests (ids learned
// from earlier answers, a lease or a timer id, are what they were in that run; --replay N sends
// request N alone, with no ids learned, and prints it). A third are valid calls, a third
// near-valid (one field dropped, renamed, of the wrong type, a huge number, a deep or long value),
// a third hostile (broken JSON, bad UTF-8, odd content types and encodings, missing and garbled
// headers, absurd query strings, tenants that are not tenants, bodies past the cell's limit,
// HTTP/1.1 broken on purpose), each on a socket of its own making (raw bytes, so nothing normalises
// the request on the way).
//
// The verdict on each answer (docs/openapi.yaml, built as dist/openapi.json, is the contract: each
// operation's responses, and its x-unrouted for what no operation lists, an unknown route's 404 say):
//   undocumented_status  a status the route does not list (nor x-unrouted for that request)
//   undocumented_code    an error code its response does not list
//   server_error         a 5xx other than a documented 503 (a 500 is always one)
//   html_body            an HTML page; stack_trace: a stack trace in a body
//   non_json_error       an error whose body is not {"error", "message"}; non_json_body: a JSON
//                        route answered with another content type
//   no_answer            the connection closed or reset without an answer
//   hang                 no answer within the route's bound (docs/security.md) + 1 s
//   tenant_leak          an answer to one tenant carrying the other tenant's marker (every value,
//                        payload and transactionId a tenant writes carries its own), beyond what
//                        the request itself carried and the cell echoed (carries, below)
//   tenant_write         a lease, ack, trace or timer call with the other tenant's ids whose answer
//                        says one of those ids applied or was found (tookEffect, below)
//   tenant_bypass        a data route answered 2xx without a tenant, a system route without the token
//   worker_crash         the cell's log says a worker died; error_log: it logged an error
//                        (an unhandled 500); value_in_log: a marker reached its log
// Each finding prints the run's seed and the request that triggered it, never an answer's body (it may
// hold stored values). Exits 1 when there is a finding.
import { spawn, ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { freePort } from '../shared/embeddedPostgres';
import { benchDatabase } from './lib/database';

// ---------------------------------------------------------------------------------------------
// The PRNG: mulberry32, seeded per request from (seed, index).

export class Rng {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0;
  }
  next(): number {
    let t = (this.s = (this.s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.next() * xs.length)];
  }
  uuid(): string {
    const h = () => this.int(0, 0xffff).toString(16).padStart(4, '0');
    return `${h()}${h()}-${h()}-4${h().slice(1)}-${(8 + this.int(0, 3)).toString(16)}${h().slice(1)}-${h()}${h()}${h()}`;
  }
}

function requestSeed(seed: number, index: number): number {
  let h = (seed ^ Math.imul(index + 1, 0x9e3779b1)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0;
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35) >>> 0;
  return (h ^ (h >>> 16)) >>> 0;
}

// ---------------------------------------------------------------------------------------------
// The cell's tenants and names: both tenants use the same names, so isolation is what tells them apart.

export const TENANTS = { A: '6f1d3c2a-8b4e-4f6a-9c1d-2e3f4a5b6c7d', B: '9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d' } as const;
type TenantName = 'A' | 'B';
const QUEUES = ['fz-q1', 'fz-q2', 'fz-q3', 'fz.q4'];
const PARTITIONS = ['Default', 'p1', 'p2'];
const NAMESPACES = ['fz-ns1', 'fz_ns2', 'fz:ns3'];
const KEYS = ['k1', 'k2', 'k3', 'a/b', 'dir/', 'ü', 'k%2Fz'];
const GROUPS = ['g1', 'g2'];
const ADMIN_TOKEN = 'fuzz-admin-token-0123456789';

type Kind = 'valid' | 'near' | 'hostile';

export interface FuzzRequest {
  index: number;
  /** The route it aims at, as `METHOD /template` (or `other` for a route that does not exist). */
  route: string;
  kind: Kind;
  tenant: TenantName | 'none' | 'bad';
  method: string;
  target: string;
  headers: Array<[string, string]>;
  body?: Buffer;
  /** Bytes sent as they are, instead of the request line, headers and body built from the fields. */
  raw?: Buffer;
  /** HTTP broken on purpose: node's parser may refuse it (400 bad_request) or the socket end. */
  broken?: boolean;
  /**
   * The other tenant's ids the call uses (a message as `transactionId|partitionId`, a lease id, a
   * timer id): it must change (or find) nothing. Empty when it uses only its own.
   */
  crossIds: string[];
  boundMs: number;
}

/** What the run has learned from answers, per tenant: the ids valid calls need. */
interface Learned {
  messages: Array<{ transactionId: string; partitionId: string; leaseId: string | null; queue: string }>;
  timers: string[];
}

function ring<T>(xs: T[], x: T, max = 64): void {
  xs.push(x);
  if (xs.length > max) xs.shift();
}

// ---------------------------------------------------------------------------------------------
// Values: a tenant's values carry its marker; hostile values are the shapes parsers trip on.

function marker(tag: string, t: TenantName): string {
  return `fz${t}${tag}`;
}

function value(r: Rng, mark: string): unknown {
  switch (r.int(0, 7)) {
    case 0: return mark;
    case 1: return { m: mark, n: r.int(-1000, 1000) };
    case 2: return [mark, r.int(0, 9), null, true];
    case 3: return { m: mark, nested: { deep: [1, 2, { m: mark }] } };
    case 4: return { m: mark, big: 12345678901234567890123456789, f: 0.1 + 0.2 };
    case 5: return { m: mark, s: 'é漢字🙂'.repeat(r.int(1, 20)) };
    case 6: return { m: mark, pad: 'x'.repeat(r.int(0, 4000)) };
    default: return { m: mark, b: false, z: -0 };
  }
}

/** A value of the wrong type or an absurd size, for a field that wants something else. */
function wrong(r: Rng): unknown {
  return r.pick<() => unknown>([
    () => null, () => true, () => 0, () => -1, () => 1.5, () => 1e308, () => -1e308, () => 2 ** 53 + 1, () => 9223372036854775808,
    () => '', () => ' ', () => '12', () => 'x'.repeat(r.int(129, 20000)), () => [], () => [1, 2], () => ({}), () => ({ a: 1 }),
    () => '\u0000', () => 'a\u0000b', () => '../../etc/passwd', () => "'; DROP TABLE queen.messages; --", () => '%00', () => '🙂',
    () => '\ud800', () => 'NaN', () => 'Infinity', () => '1e999', () => '2026-13-45T99:99:99Z', () => nest(r.int(50, 300)),
  ])();
}

function nest(depth: number): unknown {
  let v: unknown = 1;
  for (let i = 0; i < depth; i++) v = i % 2 ? [v] : { a: v };
  return v;
}

function name(r: Rng, xs: readonly string[]): string {
  return r.pick(xs);
}

// ---------------------------------------------------------------------------------------------
// Generation: a route, then a body and a query for it, then maybe a mutation.

interface Ctx {
  r: Rng;
  t: TenantName;
  mark: string;
  own: Learned;
  other: Learned;
  tag: string;
}

interface Shape {
  route: string;
  method: string;
  path: string;
  query?: Record<string, string | string[]>;
  body?: unknown;
  crossIds?: string[];
  boundMs: number;
  /** Data routes need the tenant; system routes the token; probes neither. */
  auth: 'tenant' | 'admin' | 'none';
}

const MSG_BOUND = 16_000;
const KV_BOUND = 9_500;

function pickMessage(c: Ctx): { m: Learned['messages'][number] | undefined; cross: boolean } {
  const cross = c.r.chance(0.15) && c.other.messages.length > 0;
  const from = cross ? c.other.messages : c.own.messages;
  return { m: from.length > 0 ? c.r.pick(from) : undefined, cross };
}

function pickTimer(c: Ctx): { id: string; cross: boolean } {
  const cross = c.r.chance(0.15) && c.other.timers.length > 0;
  const from = cross ? c.other.timers : c.own.timers;
  return { id: from.length > 0 ? c.r.pick(from) : c.r.uuid(), cross };
}

function kvOp(c: Ctx): Record<string, unknown> {
  const { r } = c;
  const ns = name(r, NAMESPACES);
  const key = name(r, KEYS);
  const expiry = r.chance(0.5) ? { ttlSeconds: r.int(1, 3600) } : { forever: true };
  switch (r.int(0, 7)) {
    case 0: return { op: 'get', ns, key };
    case 1: return { op: 'getMany', ns, keys: [key, name(r, KEYS)] };
    case 2: return { op: 'getPrefix', ns, prefix: r.pick(['', 'k', 'a/', 'd']), limit: r.int(1, 50) };
    case 3: return { op: 'put', ns, key, value: value(r, c.mark), ...expiry, ...(r.chance(0.2) ? { expect: r.int(0, 5) } : {}) };
    case 4: return { op: 'putIfAbsent', ns, key, value: value(r, c.mark), ...expiry, ...(r.chance(0.2) ? { required: true } : {}) };
    case 5: return { op: 'delete', ns, key };
    case 6: return { op: 'incr', ns, key: `n-${key}`, delta: r.pick([1, -1, 5, 0.5]), ...expiry, ...(r.chance(0.3) ? { min: -10, max: 10 } : {}) };
    default: return { op: 'put', ns, key, value: value(r, c.mark), ...expiry };
  }
}

function pushItem(c: Ctx): Record<string, unknown> {
  const { r } = c;
  const item: Record<string, unknown> = { queue: name(r, QUEUES), payload: value(r, c.mark) };
  if (r.chance(0.6)) item.partition = name(r, PARTITIONS);
  if (r.chance(0.7)) item.transactionId = `${c.mark}-${r.int(0, 5000)}`;
  return item;
}

/** A message as the judge names it: `transactionId|partitionId`, lower case. */
function pairOf(transactionId: unknown, partitionId: unknown): string {
  return `${String(transactionId)}|${String(partitionId).toLowerCase()}`;
}

function ackOf(c: Ctx): { ack: Record<string, unknown>; crossIds: string[] } {
  const { r } = c;
  const { m, cross } = pickMessage(c);
  const ack: Record<string, unknown> = m
    ? { transactionId: m.transactionId, partitionId: m.partitionId, status: r.pick(['completed', 'completed', 'failed']) }
    : { transactionId: `${c.mark}-${r.int(0, 50)}`, partitionId: r.uuid(), status: 'completed' };
  if (m?.leaseId && r.chance(0.7)) ack.leaseId = m.leaseId;
  if (r.chance(0.2)) ack.consumerGroup = name(r, GROUPS);
  if (ack.status === 'failed' && r.chance(0.5)) ack.error = 'fuzz';
  return { ack, crossIds: cross && m ? [pairOf(m.transactionId, m.partitionId)] : [] };
}

function timerBody(c: Ctx): Record<string, unknown> {
  const { r } = c;
  const body: Record<string, unknown> = { queue: name(r, QUEUES), payload: value(r, c.mark) };
  if (r.chance(0.7)) body.delaySeconds = r.pick([0, 0.5, 1, 2, 30, 3600]);
  else body.deliverAt = new Date(Date.now() + r.int(0, 60_000)).toISOString();
  if (r.chance(0.3)) body.timerKey = `${c.mark}-tk${r.int(0, 30)}`;
  if (r.chance(0.3)) body.partition = name(r, PARTITIONS);
  return body;
}

/** A valid call of one route. */
const ROUTES: Array<{ weight: number; make: (c: Ctx) => Shape }> = [
  { weight: 10, make: (c) => ({ route: 'POST /api/v1/kv', method: 'POST', path: '/api/v1/kv', auth: 'tenant', boundMs: KV_BOUND,
    body: { operations: Array.from({ length: c.r.int(1, 6) }, () => kvOp(c)) } }) },
  { weight: 6, make: (c) => ({ route: `GET /api/v1/kv/{ns}/{key}`, method: c.r.chance(0.1) ? 'HEAD' : 'GET', path: `/api/v1/kv/${name(c.r, NAMESPACES)}/${name(c.r, KEYS)}`, auth: 'tenant', boundMs: KV_BOUND }) },
  { weight: 6, make: (c) => ({ route: `PUT /api/v1/kv/{ns}/{key}`, method: 'PUT', path: `/api/v1/kv/${name(c.r, NAMESPACES)}/${name(c.r, KEYS)}`, auth: 'tenant', boundMs: KV_BOUND,
    body: { value: value(c.r, c.mark), ...(c.r.chance(0.5) ? { ttlSeconds: c.r.int(1, 600) } : { forever: true }) } }) },
  { weight: 3, make: (c) => ({ route: `DELETE /api/v1/kv/{ns}/{key}`, method: 'DELETE', path: `/api/v1/kv/${name(c.r, NAMESPACES)}/${name(c.r, KEYS)}`, auth: 'tenant', boundMs: KV_BOUND }) },
  { weight: 2, make: (c) => ({ route: 'POST /api/v1/configure', method: 'POST', path: '/api/v1/configure', auth: 'tenant', boundMs: MSG_BOUND,
    body: { queue: name(c.r, QUEUES), options: { leaseTime: c.r.int(1, 600), retryLimit: c.r.int(0, 5), ...(c.r.chance(0.2) ? { delayedProcessing: c.r.int(0, 2) } : {}) } } }) },
  { weight: 12, make: (c) => ({ route: 'POST /api/v1/push', method: 'POST', path: '/api/v1/push', auth: 'tenant', boundMs: MSG_BOUND,
    body: { items: Array.from({ length: c.r.int(1, 8) }, () => pushItem(c)) } }) },
  { weight: 10, make: (c) => {
    const { r } = c;
    const q: Record<string, string> = { batch: String(r.int(1, 20)) };
    const wait = r.chance(0.15);
    const timeout = r.int(0, 800);
    if (wait) Object.assign(q, { wait: 'true', timeout: String(timeout) });
    if (r.chance(0.3)) q.consumerGroup = name(r, GROUPS);
    if (r.chance(0.1)) q.autoAck = 'true';
    if (r.chance(0.05)) q.subscriptionMode = 'new';
    const bound = MSG_BOUND + (wait ? timeout : 0);
    const which = r.int(0, 9);
    if (which < 6) return { route: 'GET /api/v1/pop/queue/{queue}', method: 'GET', path: `/api/v1/pop/queue/${name(r, QUEUES)}`, query: q, auth: 'tenant', boundMs: bound };
    if (which < 9) return { route: 'GET /api/v1/pop/queue/{queue}/partition/{partition}', method: 'GET', path: `/api/v1/pop/queue/${name(r, QUEUES)}/partition/${name(r, PARTITIONS)}`, query: q, auth: 'tenant', boundMs: bound };
    delete q.subscriptionMode;
    return { route: 'GET /api/v1/pop', method: 'GET', path: '/api/v1/pop', query: { ...q, namespace: 'fz', ...(r.chance(0.5) ? { task: 't' } : {}) }, auth: 'tenant', boundMs: bound };
  } },
  { weight: 6, make: (c) => {
    const { ack, crossIds } = ackOf(c);
    return { route: 'POST /api/v1/ack', method: 'POST', path: '/api/v1/ack', auth: 'tenant', boundMs: MSG_BOUND, body: ack, crossIds };
  } },
  { weight: 3, make: (c) => {
    const acks = Array.from({ length: c.r.int(1, 4) }, () => ackOf(c));
    return { route: 'POST /api/v1/ack/batch', method: 'POST', path: '/api/v1/ack/batch', auth: 'tenant', boundMs: MSG_BOUND,
      body: { acknowledgments: acks.map((a) => a.ack) }, crossIds: acks.flatMap((a) => a.crossIds) };
  } },
  { weight: 3, make: (c) => {
    const { m, cross } = pickMessage(c);
    return { route: 'POST /api/v1/lease/{leaseId}/extend', method: 'POST', path: `/api/v1/lease/${m?.leaseId ?? c.r.uuid()}/extend`, auth: 'tenant', boundMs: MSG_BOUND,
      body: c.r.chance(0.7) ? { seconds: c.r.int(1, 600) } : undefined, crossIds: cross && m?.leaseId ? [m.leaseId.toLowerCase()] : [] };
  } },
  { weight: 1, make: (c) => ({ route: 'DELETE /api/v1/resources/queues/{queue}', method: 'DELETE', path: `/api/v1/resources/queues/${name(c.r, QUEUES)}`, auth: 'tenant', boundMs: MSG_BOUND }) },
  { weight: 2, make: (c) => ({ route: 'GET /api/v1/dlq', method: 'GET', path: '/api/v1/dlq', auth: 'tenant', boundMs: MSG_BOUND,
    query: { queue: name(c.r, QUEUES), limit: String(c.r.int(1, 100)), ...(c.r.chance(0.3) ? { from: '2026-01-01T00:00:00Z', to: new Date(Date.now() + 3600_000).toISOString() } : {}) } }) },
  { weight: 2, make: (c) => {
    const { m, cross } = pickMessage(c);
    return { route: 'POST /api/v1/traces', method: 'POST', path: '/api/v1/traces', auth: 'tenant', boundMs: MSG_BOUND, crossIds: cross && m ? [pairOf(m.transactionId, m.partitionId)] : [],
      body: { transactionId: m?.transactionId ?? `${c.mark}-1`, partitionId: m?.partitionId ?? c.r.uuid(), eventType: 'info', data: value(c.r, c.mark), ...(c.r.chance(0.3) ? { traceNames: ['fz'] } : {}) } };
  } },
  { weight: 2, make: (c) => {
    const { m, cross } = pickMessage(c);
    return { route: 'GET /api/v1/traces/{partitionId}/{transactionId}', method: 'GET', path: `/api/v1/traces/${m?.partitionId ?? c.r.uuid()}/${pct(m?.transactionId ?? 'x')}`, auth: 'tenant', boundMs: MSG_BOUND,
      crossIds: cross && m ? [pairOf(m.transactionId, m.partitionId)] : [] };
  } },
  { weight: 1, make: (c) => ({ route: 'DELETE /api/v1/consumer-groups/{group}', method: 'DELETE', path: `/api/v1/consumer-groups/${name(c.r, GROUPS)}`, auth: 'tenant', boundMs: MSG_BOUND,
    query: c.r.chance(0.5) ? { deleteMetadata: c.r.pick(['true', 'false']) } : undefined }) },
  { weight: 8, make: (c) => {
    const { r } = c;
    const body: Record<string, unknown> = {};
    const crossIds: string[] = [];
    if (r.chance(0.7)) {
      body.operations = Array.from({ length: r.int(1, 3) }, () => {
        if (r.chance(0.6)) return { type: 'push', items: Array.from({ length: r.int(1, 3) }, () => pushItem(c)) };
        const a = ackOf(c);
        crossIds.push(...a.crossIds);
        return { type: 'ack', ...a.ack };
      });
    }
    if (r.chance(0.6)) body.kv = Array.from({ length: r.int(1, 3) }, () => kvOp(c)).filter((o) => o.op !== 'getPrefix');
    if (r.chance(0.3)) body.timers = [{ op: 'schedule', ...timerBody(c) }];
    if (Object.keys(body).length === 0) body.kv = [{ op: 'get', ns: 'fz-ns1', key: 'k1' }];
    return { route: 'POST /api/v1/transaction', method: 'POST', path: '/api/v1/transaction', auth: 'tenant', boundMs: MSG_BOUND, body, crossIds };
  } },
  { weight: 5, make: (c) => ({ route: 'POST /api/v1/timers', method: 'POST', path: '/api/v1/timers', auth: 'tenant', boundMs: KV_BOUND, body: timerBody(c) }) },
  { weight: 2, make: (c) => ({ route: 'GET /api/v1/timers', method: 'GET', path: '/api/v1/timers', auth: 'tenant', boundMs: KV_BOUND,
    query: { ...(c.r.chance(0.5) ? { queue: name(c.r, QUEUES) } : {}), ...(c.r.chance(0.5) ? { limit: String(c.r.int(1, 100)) } : {}) } }) },
  { weight: 2, make: (c) => {
    const { id, cross } = pickTimer(c);
    const crossIds = cross ? [id.toLowerCase()] : [];
    return { route: 'GET /api/v1/timers/{id}', method: 'GET', path: `/api/v1/timers/${id}`, auth: 'tenant', boundMs: KV_BOUND, crossIds };
  } },
  { weight: 2, make: (c) => {
    const { id, cross } = pickTimer(c);
    const crossIds = cross ? [id.toLowerCase()] : [];
    return { route: 'DELETE /api/v1/timers/{id}', method: 'DELETE', path: `/api/v1/timers/${id}`, auth: 'tenant', boundMs: KV_BOUND, crossIds };
  } },
  { weight: 2, make: (c) => {
    const { id, cross } = pickTimer(c);
    const crossIds = cross ? [id.toLowerCase()] : [];
    return { route: 'POST /api/v1/timers/{id}/reschedule', method: 'POST', path: `/api/v1/timers/${id}/reschedule`, auth: 'tenant', boundMs: KV_BOUND, crossIds,
      body: c.r.chance(0.5) ? { delaySeconds: c.r.int(0, 600) } : { deliverAt: new Date(Date.now() + c.r.int(0, 600_000)).toISOString() } };
  } },
  { weight: 1, make: () => ({ route: 'GET /api/v1/system/kv-timers', method: 'GET', path: '/api/v1/system/kv-timers', auth: 'admin', boundMs: MSG_BOUND }) },
  // The switches are only ever turned on: a paused KV would turn the rest of the run into 503s.
  { weight: 1, make: (c) => ({ route: 'POST /api/v1/system/kv-timers', method: 'POST', path: '/api/v1/system/kv-timers', auth: 'admin', boundMs: MSG_BOUND,
    body: c.r.pick([{}, { kv: true }, { timersSchedule: true, timersFire: true }, { kv: true, timersSchedule: true, timersFire: true }]) }) },
  { weight: 1, make: () => ({ route: 'GET /api/v1/system/cluster', method: 'GET', path: '/api/v1/system/cluster', auth: 'admin', boundMs: MSG_BOUND }) },
  { weight: 0.3, make: () => ({ route: 'GET /api/v1/openapi.json', method: 'GET', path: '/api/v1/openapi.json', auth: 'none', boundMs: MSG_BOUND }) },
  { weight: 1, make: () => ({ route: 'GET /health', method: 'GET', path: '/health', auth: 'none', boundMs: 1000 }) },
  { weight: 1, make: () => ({ route: 'GET /ready', method: 'GET', path: '/ready', auth: 'none', boundMs: 2000 }) },
  { weight: 0.5, make: (c) => ({ route: 'GET /metrics', method: 'GET', path: c.r.pick(['/metrics', '/metrics/prometheus']), auth: 'none', boundMs: MSG_BOUND }) },
  { weight: 2, make: (c) => ({ route: 'other', method: c.r.pick(['GET', 'POST', 'PATCH', 'OPTIONS', 'PUT', 'DELETE', 'TRACE']),
    path: c.r.pick(['/', '/api', '/api/v1', '/api/v1/', '/api/v2/kv', '/api/v1/push/', '/api/v1/pushx', '/api/v1/kv/', '/api/v1/kv/ns', '/api/v1/kv/ns/',
      '/api/v1/timers/x/y', '/api/v1/system', '/favicon.ico', '/api/v1/pop/queue', '/api/v1/lease//extend', '/api/v1/traces/x', '/API/V1/KV']),
    auth: 'tenant', boundMs: MSG_BOUND }) },
];
const TOTAL_WEIGHT = ROUTES.reduce((s, x) => s + x.weight, 0);

function pickRoute(r: Rng): (c: Ctx) => Shape {
  let x = r.next() * TOTAL_WEIGHT;
  for (const route of ROUTES) {
    x -= route.weight;
    if (x < 0) return route.make;
  }
  return ROUTES[0].make;
}

/** One field of a JSON body, somewhere inside it, changed as a near-valid call would have it. */
function mutate(r: Rng, body: unknown): unknown {
  if (body === null || typeof body !== 'object') return r.chance(0.5) ? wrong(r) : { x: body };
  const copy = JSON.parse(JSON.stringify(body));
  // Walk to a random object inside.
  let at: any = copy;
  for (let d = 0; d < 4; d++) {
    const kids = Object.entries(at).filter(([, v]) => v !== null && typeof v === 'object');
    if (kids.length === 0 || r.chance(0.35)) break;
    at = r.pick(kids)[1];
  }
  const keys = Object.keys(at);
  const key = keys.length > 0 ? r.pick(keys) : 'x';
  switch (r.int(0, 6)) {
    case 0: delete at[key]; break;
    case 1: { const v = at[key]; delete at[key]; at[r.pick([`${key}s`, key.toUpperCase(), key.slice(1), `${key}_`, 'data', 'partiton', 'ttl', 'value '])] = v; break; }
    case 2: at[key] = wrong(r); break;
    case 3: at[r.pick(['extra', '__proto__', 'constructor', 'op', 'type', 'tenant', 'tenantId'])] = wrong(r); break;
    case 4: at[key] = r.pick([0, -1, 2 ** 31, 2 ** 63, 1e21, -1e21, 1.0000001, 86401, 100001]); break;
    case 5: if (Array.isArray(at)) { for (let i = r.int(1, 2000); i > 0; i--) at.push(at[0] ?? 1); } else at[key] = [at[key]]; break;
    default: at[key] = typeof at[key] === 'string' ? at[key] + r.pick(['\u0000', '\ud83d', ' ', '\n', '🙂', 'x'.repeat(600)]) : String(at[key]); break;
  }
  return copy;
}

/** Bytes that are not a clean JSON body. */
function hostileBody(r: Rng, text: string): Buffer {
  switch (r.int(0, 11)) {
    case 0: return Buffer.from(text.slice(0, r.int(0, Math.max(0, text.length - 1))));
    case 1: return Buffer.concat([Buffer.from(text.slice(0, 10)), Buffer.from([r.pick([0xff, 0xc0, 0xc3, 0xed, 0xf8]), 0x28, 0xaf]), Buffer.from(text.slice(10))]);
    case 2: return Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text)]);
    case 3: return Buffer.from('['.repeat(r.int(1000, 60000)) + ']'.repeat(r.int(0, 1000)));
    case 4: return Buffer.from(`{"a":${'{"a":'.repeat(r.int(100, 5000))}1${'}'.repeat(5001)}`);
    case 5: return Buffer.from(JSON.stringify({ items: [{ queue: 'fz-q1', payload: 'y'.repeat(r.int(300_000, 700_000)) }] }));
    case 6: return Buffer.from(r.pick(['', ' ', 'null', 'true', '1', '"x"', '[]', '{}', 'NaN', '{"a":1}{"b":2}', '{"a":1,}', "{'a':1}", '\u0000']));
    case 7: return Buffer.from(text.replace(/"/, '"\\u0000'));
    case 8: return Buffer.from(text.replace(/:/, ':1e99999999,"x":'));
    case 9: return Buffer.from(text.replace(/"([a-z]+)":/, '"$1":1,"$1":'));
    case 10: return Buffer.from(`{"s":"\\ud800x","t":"\\udc00","u":"\\uZZZZ"}`);
    default: return Buffer.from(text, 'utf16le');
  }
}

/** Percent-encoding that takes any string (a lone surrogate goes as the bytes UTF-8 gives it). */
function pct(x: unknown): string {
  const s = String(x);
  try {
    return encodeURIComponent(s);
  } catch {
    return [...Buffer.from(s, 'utf8')].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');
  }
}

function queryText(q: Record<string, string | string[]> | undefined): string {
  if (!q) return '';
  const parts: string[] = [];
  for (const [k, v] of Object.entries(q)) for (const x of Array.isArray(v) ? v : [v]) parts.push(`${pct(k)}=${pct(x)}`);
  return parts.length ? `?${parts.join('&')}` : '';
}

function hostileQuery(r: Rng): string {
  return r.pick<() => string>([
    () => '?batch=1&batch=2', () => '?batch[]=1', () => '?batch[a][b]=1', () => '?batch=-1', () => '?batch=99999999999999999999', () => '?batch=1e3',
    () => '?timeout=120001&wait=true', () => '?wait=maybe', () => '?%zz=1', () => '?=&&&=', () => `?${Array.from({ length: 1000 }, (_, i) => `p${i}=${i}`).join('&')}`,
    () => `?q=${'%F0%9F%99%82'.repeat(200)}`, () => '?consumerGroup=%00', () => '?consumerGroup[]=a', () => '?limit=0', () => '?limit=1001', () => '?limit=abc',
    () => '?from=yesterday', () => '?subscriptionMode=weird', () => '?subscriptionFrom=2026-02-30T00:00:00Z', () => '?after=%FF', () => '?deleteMetadata=maybe',
    () => '?autoAck=yes', () => '?queue=a&queue=b', () => `?x=${'a'.repeat(12000)}`, () => '?__proto__[x]=1', () => '?namespace=&task=',
  ])();
}

function hostilePath(r: Rng, p: string): string {
  return r.pick<() => string>([
    () => p.replace(/\/[^/]*$/, '/%00'), () => p.replace(/\/[^/]*$/, '/%ff%fe'), () => p.replace(/\/[^/]*$/, '/%zz'), () => `${p}/`, () => p.replace('/api', '//api'),
    () => p.replace(/\/[^/]*$/, `/${'x'.repeat(r.int(129, 9000))}`), () => p.replace(/\/[^/]*$/, '/..%2F..%2Fetc'), () => p.replace(/\/[^/]*$/, '/%2e%2e'),
    () => p.replace(/\/[^/]*$/, '/.hidden'), () => p.replace(/\/[^/]*$/, '/-x'), () => p.replace(/\/[^/]*$/, `/${encodeURIComponent('🙂é')}`), () => `${p};x=1`,
    () => p.replace(/\/[^/]*$/, '/00000000-0000-0000-0000-000000000000'), () => p.replace(/\/[^/]*$/, '/%20'),
  ])();
}

const HOSTILE_TENANTS = [
  '', ' ', 'not-a-uuid', '00000000-0000-0000-0000-000000000000', '00000000-0000-0000-0000-000000000001', `${TENANTS.A}x`, `{${TENANTS.A}}`,
  `${TENANTS.A}, ${TENANTS.B}`, TENANTS.A.replace(/-/g, ''), 'x'.repeat(8000), "'; --", '%00',
];

/** Request `index` of the run with this seed. */
export function generate(seed: number, index: number, learned: Record<TenantName, Learned>, tag: string): FuzzRequest {
  const r = new Rng(requestSeed(seed, index));
  const t: TenantName = r.chance(0.5) ? 'A' : 'B';
  const c: Ctx = { r, t, mark: marker(tag, t), own: learned[t], other: learned[t === 'A' ? 'B' : 'A'], tag };
  const shape = pickRoute(r)(c);
  const roll = r.next();
  const kind: Kind = roll < 0.34 ? 'valid' : roll < 0.67 ? 'near' : 'hostile';
  let tenant: FuzzRequest['tenant'] = t;
  let body: Buffer | undefined;
  let bodyValue = shape.body;
  let target = shape.path + queryText(shape.query);
  let method = shape.method;
  const headers: Array<[string, string]> = [];
  let contentType: string | undefined = 'application/json';
  let broken = false;
  let raw: Buffer | undefined;
  let chunked = false;
  let lengthHeader: 'right' | 'none' | 'short' = 'right';

  if (kind === 'near') {
    const what = r.int(0, 9);
    if (what < 6 && bodyValue !== undefined) bodyValue = mutate(r, bodyValue);
    else if (what < 8) target = shape.path + (shape.query ? queryText(mutate(r, shape.query) as Record<string, string>) : hostileQuery(r));
    else target = hostilePath(r, shape.path) + queryText(shape.query);
  }
  if (bodyValue !== undefined) body = Buffer.from(JSON.stringify(bodyValue));

  const headerExtras: Array<[string, string]> = [];
  if (kind === 'hostile') {
    switch (r.int(0, 13)) {
      case 0: body = hostileBody(r, body?.toString() ?? JSON.stringify({ a: 1 })); break;
      case 1: body = hostileBody(r, body?.toString() ?? '{}'); contentType = r.pick(['application/json; charset=latin1', 'application/json; charset=utf-16', 'application/json; charset=bogus']); break;
      case 2: contentType = r.pick([undefined, 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/xml', '*/*', '', 'application/json;;;', 'ÿ']); break;
      case 3: headerExtras.push(['Content-Encoding', r.pick(['gzip', 'deflate', 'br', 'x-bogus', 'identity', 'gzip, gzip'])]); break;
      case 4: tenant = 'bad'; break;
      case 5: tenant = 'none'; break;
      case 6: target = shape.path + hostileQuery(r); break;
      case 7: target = hostilePath(r, shape.path); break;
      case 8: chunked = true; break;
      case 9: headerExtras.push(r.pick<[string, string]>([['Expect', '100-continue'], ['Expect', 'x-fuzz'], ['X-Request-Id', 'x'.repeat(300)], ['If-None-Match', '*'],
        ['Accept', 'text/html'], ['Accept-Encoding', 'gzip'], ['Authorization', 'Bearer wrong'], ['Connection', 'close'], ['X-Forwarded-For', '::1'], ['Cookie', 'a=b']])); break;
      case 10: headerExtras.push(['X-Pad', 'x'.repeat(r.int(8000, 20000))]); break;
      case 11: method = r.pick(['get', 'HEAD', 'OPTIONS', 'PATCH', 'PUT', 'DELETE', 'POST', 'M-SEARCH']); broken = method === 'get'; break;
      case 12: lengthHeader = r.pick<'none' | 'short'>(['none', 'short']); broken = true; break;
      default: {
        broken = true;
        raw = Buffer.from(r.pick([
          `${method} ${target} HTTP/1.1\r\n\r\n`, // no Host
          `${method} ${target} HTTP/1.0\r\nHost: x\r\n\r\n`,
          `${method} http://evil${target} HTTP/1.1\r\nHost: x\r\n\r\n`,
          `${method} ${target} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef`,
          `${method} ${target} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n`,
          `${method} ${target} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n`,
          `${method} ${target} HTTP/9.9\r\nHost: x\r\n\r\n`,
          `${method}  ${target}  HTTP/1.1\r\nHost: x\r\n\r\n`,
          `${method} ${target} HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n`,
          `${method} ${target} HTTP/1.1\r\nHost: x\r\nX: \u00ff\u00fe\r\n\r\n`,
          `${method} /api/v1/\u00e9 HTTP/1.1\r\nHost: x\r\n\r\n`,
          `\r\n\r\n${method} ${target} HTTP/1.1\r\nHost: x\r\n\r\n`,
          `CONNECT 127.0.0.1:5432 HTTP/1.1\r\nHost: 127.0.0.1:5432\r\n\r\n`,
          `${method} ${target} HTTP/1.1\r\nHost: x\r\nx-queen-tenant: ${TENANTS.A}\r\nx-queen-tenant: ${TENANTS.B}\r\nContent-Length: 2\r\n\r\n{}`,
        ]), 'latin1');
      }
    }
  } else if (r.chance(0.02)) {
    tenant = r.chance(0.5) ? 'none' : 'bad';
  }

  headers.push(['Host', '127.0.0.1']);
  if (shape.auth === 'admin') {
    if (tenant === 'A' || tenant === 'B') headers.push(['Authorization', `Bearer ${ADMIN_TOKEN}`]);
    else if (tenant === 'bad') headers.push(['Authorization', r.pick(['Bearer', `Bearer ${ADMIN_TOKEN}x`, `Basic ${ADMIN_TOKEN}`, `bearer  ${ADMIN_TOKEN}`, 'Bearer ' + 'y'.repeat(5000)])]);
  }
  if (tenant === 'A' || tenant === 'B') headers.push(['x-queen-tenant', r.chance(0.1) ? TENANTS[tenant].toUpperCase() : TENANTS[tenant]]);
  else if (tenant === 'bad') headers.push(['x-queen-tenant', r.pick(HOSTILE_TENANTS)]);
  if (body !== undefined && contentType !== undefined) headers.push(['Content-Type', contentType]);
  if (body !== undefined) {
    if (chunked) headers.push(['Transfer-Encoding', 'chunked']);
    else if (lengthHeader === 'right') headers.push(['Content-Length', String(body.length)]);
    else if (lengthHeader === 'short') headers.push(['Content-Length', String(Math.max(0, body.length - r.int(1, 5)))]);
  }
  headers.push(...headerExtras);
  const waitMs = /[?&]wait=(true|1)/.test(target) ? Number(/[?&]timeout=(\d{1,6})(&|$)/.exec(target)?.[1] ?? 30_000) : 0;
  return {
    index, route: shape.route, kind, tenant, method, target, headers, body, raw, broken,
    crossIds: tenant === 'A' || tenant === 'B' ? shape.crossIds ?? [] : [],
    boundMs: shape.boundMs + Math.min(waitMs, 120_000),
  };
}

/** The bytes of a request (the chunked framing included). */
export function wire(q: FuzzRequest): Buffer {
  if (q.raw) return q.raw;
  const head = `${q.method} ${q.target} HTTP/1.1\r\n${q.headers.map(([k, v]) => `${k}: ${v}`).join('\r\n')}\r\n\r\n`;
  const parts: Buffer[] = [Buffer.from(head, "latin1")];
  if (q.body !== undefined) {
    if (q.headers.some(([k]) => k === 'Transfer-Encoding')) {
      for (let i = 0; i < q.body.length; i += 1000) {
        const piece = q.body.subarray(i, i + 1000);
        parts.push(Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n'));
      }
      parts.push(Buffer.from('0\r\n\r\n'));
    } else {
      parts.push(q.body);
    }
  }
  return Buffer.concat(parts);
}

/** The request as a finding prints it: line, headers, the first bytes of the body (its length), escaped. */
export function describe(q: FuzzRequest): string {
  const esc = (b: Buffer, max: number) => JSON.stringify(b.subarray(0, max).toString('latin1')) + (b.length > max ? `... (${b.length} bytes)` : '');
  if (q.raw) return `#${q.index} raw ${esc(q.raw, 400)}`;
  const headers = q.headers.map(([k, v]) => `${k}: ${v.length > 80 ? `${v.slice(0, 80)}... (${v.length})` : v}`).join(' | ');
  const target = q.target.length > 300 ? `${q.target.slice(0, 300)}... (${q.target.length})` : q.target;
  return `#${q.index} ${q.method} ${target} [${headers}]${q.body ? ` body ${esc(q.body, 400)}` : ''}`;
}

// ---------------------------------------------------------------------------------------------
// The wire: a raw socket per lane, an HTTP/1.1 response parser just big enough for the cell's answers.

export interface Answer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  ms: number;
}

export type Outcome = { answer: Answer } | { failure: 'no_answer' | 'hang'; detail: string; ms: number };

class Lane {
  private socket: net.Socket | undefined;
  constructor(private port: number) {}

  private connect(): Promise<net.Socket> {
    return new Promise((resolve, reject) => {
      const s = net.connect({ host: '127.0.0.1', port: this.port }, () => resolve(s));
      s.setNoDelay(true);
      s.once('error', reject);
    });
  }

  close(): void {
    this.socket?.destroy();
    this.socket = undefined;
  }

  async send(q: FuzzRequest, boundMs: number): Promise<Outcome> {
    const started = Date.now();
    let socket = this.socket;
    if (!socket || socket.destroyed || !socket.writable) {
      try {
        socket = this.socket = await this.connect();
      } catch (err) {
        return { failure: 'no_answer', detail: `connect: ${(err as Error).message}`, ms: Date.now() - started };
      }
    }
    const s = socket;
    const head = q.method.toUpperCase() === 'HEAD';
    return new Promise<Outcome>((resolve) => {
      let buf = Buffer.alloc(0);
      let done = false;
      const finish = (o: Outcome, keep: boolean) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        s.off('data', onData);
        s.off('close', onClose);
        s.off('error', onError);
        if (!keep) {
          s.destroy();
          if (this.socket === s) this.socket = undefined;
        }
        resolve(o);
      };
      const timer = setTimeout(() => finish({ failure: 'hang', detail: `no answer within ${boundMs} ms`, ms: Date.now() - started }, false), boundMs);
      const parse = (ended: boolean): void => {
        for (;;) {
          const end = buf.indexOf('\r\n\r\n');
          if (end < 0) return;
          const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
          const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0]);
          if (!m) return finish({ failure: 'no_answer', detail: `not an HTTP answer: ${JSON.stringify(lines[0].slice(0, 60))}`, ms: Date.now() - started }, false);
          const status = Number(m[1]);
          const headers: Record<string, string> = {};
          for (const l of lines.slice(1)) {
            const c = l.indexOf(':');
            if (c > 0) headers[l.slice(0, c).trim().toLowerCase()] = l.slice(c + 1).trim();
          }
          if (status === 100) {
            buf = buf.subarray(end + 4);
            continue;
          }
          const rest = buf.subarray(end + 4);
          const closeAfter = /close/i.test(headers.connection ?? '') || q.broken === true || q.raw !== undefined;
          const ms = Date.now() - started;
          if (head || status === 204 || status === 304) return finish({ answer: { status, headers, body: Buffer.alloc(0), ms } }, !closeAfter);
          if (headers['content-length'] !== undefined) {
            const n = Number(headers['content-length']);
            if (rest.length < n) return;
            return finish({ answer: { status, headers, body: rest.subarray(0, n), ms } }, !closeAfter && rest.length === n);
          }
          if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
            const chunks: Buffer[] = [];
            let at = 0;
            for (;;) {
              const nl = rest.indexOf('\r\n', at);
              if (nl < 0) return;
              const size = parseInt(rest.subarray(at, nl).toString('latin1'), 16);
              if (Number.isNaN(size)) return finish({ failure: 'no_answer', detail: 'bad chunked framing in the answer', ms }, false);
              if (size === 0) return finish({ answer: { status, headers, body: Buffer.concat(chunks), ms } }, false);
              if (rest.length < nl + 2 + size + 2) return;
              chunks.push(rest.subarray(nl + 2, nl + 2 + size));
              at = nl + 2 + size + 2;
            }
          }
          if (ended) return finish({ answer: { status, headers, body: rest, ms } }, false);
          return;
        }
      };
      const onData = (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        parse(false);
      };
      const onClose = () => {
        parse(true);
        finish({ failure: 'no_answer', detail: buf.length ? 'closed mid-answer' : 'closed with no answer', ms: Date.now() - started }, false);
      };
      const onError = (err: Error & { code?: string }) => {
        // EPIPE/ECONNRESET while a refusal is still on its way in: read what came, else no answer.
        parse(true);
        finish({ failure: 'no_answer', detail: `socket ${err.code ?? err.message}`, ms: Date.now() - started }, false);
      };
      s.on('data', onData);
      s.once('close', onClose);
      s.on('error', onError);
      const bytes = wire(q);
      s.write(bytes);
      // A body shorter than its Content-Length (on purpose): the client is done sending.
      if (q.headers.some(([k, v]) => k === 'Content-Length' && q.body !== undefined && Number(v) !== q.body.length)) s.end();
    });
  }
}

// ---------------------------------------------------------------------------------------------
// The verdict.

export type FindingClass =
  | 'undocumented_status' | 'undocumented_code' | 'server_error' | 'html_body' | 'stack_trace' | 'non_json_error' | 'non_json_body'
  | 'no_answer' | 'hang' | 'tenant_leak' | 'tenant_write' | 'tenant_bypass' | 'worker_crash' | 'error_log' | 'value_in_log';

export interface Finding {
  cls: FindingClass;
  detail: string;
  request?: string;
}

export interface Operation {
  template: string;
  method: string;
  match: RegExp;
  responses: Record<string, { codes: string[]; json: boolean }>;
}

/** An answer no operation lists (the document's x-unrouted): on every request, or on a path no operation takes, under a prefix. */
export interface Unrouted {
  status: number;
  codes: string[];
  on: 'every' | 'unrouted';
  prefix: string;
}

export interface Contract {
  ops: Operation[];
  unrouted: Unrouted[];
}

export function loadContract(file: string): Contract {
  const doc = JSON.parse(fs.readFileSync(file, 'utf8'));
  const deref = (node: any): any => {
    while (node && typeof node.$ref === 'string') node = node.$ref.slice(2).split('/').reduce((a: any, p: string) => a?.[p], doc);
    return node;
  };
  const ops: Operation[] = [];
  for (const [template, item] of Object.entries<any>(doc.paths)) {
    // {key} is the rest of the path (slashes included); other parameters are one segment.
    const pattern = template.replace(/[.]/g, '\\.').replace(/\{key\}/g, '.+').replace(/\{[^}]+\}/g, '[^/]+');
    for (const method of ['get', 'put', 'post', 'delete', 'head', 'patch', 'options']) {
      if (!item[method]) continue;
      const responses: Operation['responses'] = {};
      for (const [status, resp] of Object.entries<any>(item[method].responses)) {
        const r = deref(resp);
        responses[status] = { codes: r['x-error-codes'] ?? [], json: r.content?.['application/json'] !== undefined };
      }
      ops.push({ template, method: method.toUpperCase(), match: new RegExp(`^${pattern}$`), responses });
    }
  }
  return { ops, unrouted: doc['x-unrouted'] ?? [] };
}

/** The answers of x-unrouted a request may get with this status: `every` ones always, `unrouted` ones when no operation takes it. */
function unroutedFor(contract: Contract, status: number, path: string, routed: boolean): { codes: string[]; json: boolean } | undefined {
  const lower = path.toLowerCase();
  const under = (prefix: string) => {
    const p = prefix.toLowerCase();
    return p.endsWith('/') ? lower.startsWith(p) : lower === p || lower.startsWith(`${p}/`);
  };
  const hits = contract.unrouted.filter((u) => u.status === status && (u.on === 'every' || !routed) && under(u.prefix));
  return hits.length > 0 ? { codes: hits.flatMap((u) => u.codes), json: true } : undefined;
}

/**
 * The method and target a raw request's line names (its leading empty lines skipped, as node's
 * parser does), the target in absolute form (`http://evil/ready`) taken as its path, as RFC 9112
 * (section 3.2.2) has a server do; undefined when the line is not one.
 */
function rawLine(raw: Buffer): { method: string; target: string } | undefined {
  // Node's parser takes runs of spaces between the parts, so the judge does.
  const m = /^(?:\r\n)*([A-Za-z-]+) +(\S+) +HTTP\/1\.[01]\r\n/.exec(raw.toString('latin1'));
  if (!m) return undefined;
  const absolute = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*(.*)$/i.exec(m[2]);
  return { method: m[1], target: absolute ? absolute[1] || '/' : m[2] };
}

/** The documented operation a request lands on: its path (up to the ?) and method; HEAD on a GET route is the GET. */
function operationOf(ops: Operation[], method: string, target: string): Operation | undefined {
  const q = target.indexOf('?');
  const p0 = q < 0 ? target : target.slice(0, q);
  // A trailing slash is Express's (non-strict routing), except on the KV paths (part of the key;
  // `/api/v1/kv/` alone is the batch, routes/kv.ts) and push (answered before Express, exactly).
  const p = p0 === '/api/v1/kv/' || (p0.length > 1 && p0.endsWith('/') && !p0.startsWith('/api/v1/kv') && !p0.startsWith('/api/v1/push')) ? p0.slice(0, -1) : p0;
  const m = method === 'HEAD' ? ['HEAD', 'GET'] : [method];
  for (const wanted of m) {
    const op = ops.find((o) => o.method === wanted && o.match.test(p));
    if (op) return op;
  }
  return undefined;
}

const STACK = /\n\s+at [^\n]+:\d+:\d+|\bat (?:async )?[\w.<>]+ \((?:node:|\/)[^)]*:\d+:\d+\)/;
const HTML = /<\s*(!doctype|html|head|body|pre|title)\b/i;

export class Verdict {
  readonly findings: Finding[] = [];
  readonly byClass = new Map<FindingClass, number>();
  readonly statuses = new Map<string, Map<string, number>>();
  constructor(private contract: Contract, private tag: string, private keep = 200) {}

  add(cls: FindingClass, detail: string, q?: FuzzRequest): void {
    this.byClass.set(cls, (this.byClass.get(cls) ?? 0) + 1);
    // The undocumented statuses and codes, by far the most, keep the first `keep`; every other class
    // keeps its own first `keep` besides, so a long run's few 5xx are never crowded out.
    const mild = cls === 'undocumented_status' || cls === 'undocumented_code';
    const kept = mild ? this.keptMild++ : this.keptSevere++;
    if (kept < this.keep) this.findings.push({ cls, detail, request: q ? describe(q) : undefined });
  }
  private keptMild = 0;
  private keptSevere = 0;

  judge(q: FuzzRequest, o: Outcome): void {
    const row = this.statuses.get(q.route) ?? new Map<string, number>();
    this.statuses.set(q.route, row);
    if ('failure' in o) {
      row.set(o.failure, (row.get(o.failure) ?? 0) + 1);
      // A body cut short of its Content-Length, then the write side closed: node drops the request, as it should.
      if (o.failure === 'no_answer' && q.headers.some(([k, v]) => k === 'Content-Length' && q.body !== undefined && Number(v) !== q.body.length)) return;
      this.add(o.failure, `${o.detail} (${o.ms} ms, bound ${q.boundMs} ms)`, q);
      return;
    }
    const a = o.answer;
    row.set(String(a.status), (row.get(String(a.status)) ?? 0) + 1);
    const text = a.body.toString('utf8');
    const type = a.headers['content-type'] ?? '';
    let parsed: any;
    let isJson = false;
    if (/^application\/json/i.test(type)) {
      try {
        parsed = JSON.parse(text);
        isJson = true;
      } catch {
        isJson = false;
      }
    }
    if (HTML.test(text)) this.add('html_body', `${a.status}: an HTML body`, q);
    if (STACK.test(text)) this.add('stack_trace', `${a.status}: a stack trace in the body`, q);
    const code: string | undefined = a.status >= 400 && isJson && parsed && typeof parsed.error === 'string' ? parsed.error : undefined;
    if (a.status >= 400 && q.method.toUpperCase() !== 'HEAD' && (!isJson || typeof parsed?.error !== 'string' || typeof parsed?.message !== 'string')) {
      this.add('non_json_error', `${a.status} with ${type || 'no content type'}, not {"error","message"}`, q);
    }
    // A raw request is judged by the line it sends (a request in absolute form is its path's).
    const line = q.raw ? rawLine(q.raw) : { method: q.method, target: q.target };
    const op = line ? operationOf(this.contract.ops, line.method.toUpperCase(), line.target) : undefined;
    const path = (line?.target ?? '/').split('?')[0];
    const listed = op?.responses[String(a.status)] ?? unroutedFor(this.contract, a.status, path, op !== undefined);
    // HTTP broken on purpose: refused before any route (bad_request, or a limit), in JSON.
    const brokenOk = q.broken && [400, 413, 417, 431].includes(a.status);
    const notFoundOk = (!op || q.raw) && a.status === 404 && code === 'not_found';
    if (!listed && !brokenOk && !notFoundOk) {
      this.add(a.status >= 500 ? 'server_error' : 'undocumented_status', `${a.status} ${code ?? ''} is not listed for ${op ? `${op.method} ${op.template}` : 'an unknown route'}`, q);
    } else if (listed && code !== undefined && !listed.codes.includes(code) && !brokenOk) {
      this.add(a.status >= 500 ? 'server_error' : 'undocumented_code', `${a.status} ${code} is not listed for ${op ? `${op.method} ${op.template}` : 'any route'} (${listed.codes.join(', ')})`, q);
    } else if (a.status >= 500 && a.status !== 503) {
      this.add('server_error', `${a.status} ${code ?? ''}`, q);
    }
    if (a.status < 300 && a.body.length > 0 && listed?.json && !isJson) this.add('non_json_body', `${a.status} with ${type || 'no content type'} on a JSON route`, q);
    // Tenancy: one tenant's answer never carries the other's marker; no tenant, no data.
    if (q.tenant === 'A' || q.tenant === 'B') {
      const other = marker(this.tag, q.tenant === 'A' ? 'B' : 'A');
      if (carries(text, other, q)) this.add('tenant_leak', `${a.status}: tenant ${q.tenant}'s answer carries tenant ${q.tenant === 'A' ? 'B' : 'A'}'s marker`, q);
      if (q.crossIds.length > 0 && a.status < 300 && tookEffect(q, parsed)) this.add('tenant_write', `${a.status}: a call with the other tenant's ids took effect`, q);
    } else {
      if (carries(text, marker(this.tag, 'A'), q) || carries(text, marker(this.tag, 'B'), q)) this.add('tenant_leak', `${a.status}: an answer without a tenant carries a tenant's marker`, q);
      const open = /^(GET \/health|GET \/ready|GET \/metrics|GET \/api\/v1\/openapi\.json|other)$/.test(q.route);
      if (!open && a.status < 300 && !q.raw) this.add('tenant_bypass', `${a.status} to a call with ${q.tenant === 'none' ? 'no' : 'a garbled'} ${q.route.includes('/system/') ? 'admin token' : 'tenant'}`, q);
    }
  }
}

/** The request as the cell may have read it: its bytes as UTF-8, Latin-1 and UTF-16 (a charset it names), its target percent-decoded. */
function sentTexts(q: FuzzRequest): string[] {
  const bytes = wire(q);
  const texts = [bytes.toString('utf8'), bytes.toString('latin1'), bytes.toString('utf16le'), bytes.subarray(1).toString('utf16le')];
  try {
    texts.push(decodeURIComponent(q.target));
  } catch {
    // Percent-encoding broken on purpose: the cell refuses it before it echoes anything.
  }
  return texts;
}

/**
 * Whether an answer carries `mark` (a tenant's marker) other than as an echo of the request itself.
 * A call with the other tenant's ids names them (an ack's transactionId is `<marker>-<n>`) and the
 * cell answers with what it was given (an ack's not_found result names its transactionId; a 404
 * names the path; a body in UTF-16 is echoed in UTF-8): each whole token of the marker the request
 * carries (`fzB...-4544`, `fzB...-tk3`) is taken out of the answer first, so what is left is the
 * other tenant's rows (every payload and value carries the bare marker, which no request of the
 * tenant carries, so those are never taken out). The earlier rule, "the request's bytes hold the
 * marker, so never a leak", hid any leak from the calls most likely to cause one (those carrying
 * the other's ids), and still cried wolf on a UTF-16 body and on a percent-encoded path.
 */
function carries(text: string, mark: string, q: FuzzRequest): boolean {
  if (!text.includes(mark)) return false;
  const tokens = new Set<string>();
  const token = new RegExp(`${mark}[\\w-]*`, 'g');
  for (const t of sentTexts(q)) for (const m of t.matchAll(token)) tokens.add(m[0]);
  let left = text;
  for (const t of [...tokens].sort((x, y) => y.length - x.length)) left = left.replace(new RegExp(`${t}(?![\\w-])`, 'g'), '');
  return left.includes(mark);
}

/**
 * Whether a call with the other tenant's ids (q.crossIds) changed or found one of them: judged on
 * the answer's own element for that id, never on the call's overall success. A transaction or a
 * batch answers ok for the work of the caller's own ids beside them, and a near-valid or hostile
 * call may lose the other tenant's part on the way (a renamed or garbled `operations`, `null`,
 * `[]`, a mangled path) and then succeed on the rest: judging `ok` cried wolf on every one of those
 * (5-6 a 100k run, all POST /api/v1/transaction whose acks the mutation had dropped).
 */
function tookEffect(q: FuzzRequest, body: any): boolean {
  if (!body || typeof body !== 'object') return false;
  const ids = new Set(q.crossIds);
  const applied = (x: any) => x !== null && typeof x === 'object' && (x.success === true || x.ok === true) && ids.has(pairOf(x.transactionId, x.partitionId));
  switch (q.route) {
    case 'POST /api/v1/ack': return applied(body);
    case 'POST /api/v1/ack/batch':
    case 'POST /api/v1/transaction': return Array.isArray(body.results) && body.results.some(applied);
    case 'POST /api/v1/lease/{leaseId}/extend': return body.success === true && ids.has(String(body.leaseId).toLowerCase());
    // The answer names no message: the pair is the one the cell read (the body, in any charset it takes).
    case 'POST /api/v1/traces': return body.success === true && [...ids].some((p) => {
      const [tx, pid] = p.split('|');
      return sentTexts(q).some((t) => t.includes(tx) && t.toLowerCase().includes(pid));
    });
    case 'GET /api/v1/traces/{partitionId}/{transactionId}': return Array.isArray(body.traces) && body.traces.some((t: any) => ids.has(pairOf(t?.transactionId, t?.partitionId)));
    case 'GET /api/v1/timers/{id}': return body.found === true && ids.has(String(body.timer?.timerId).toLowerCase());
    case 'DELETE /api/v1/timers/{id}': return body.cancelled === true && ids.has(String(body.timerId).toLowerCase());
    case 'POST /api/v1/timers/{id}/reschedule': return body.rescheduled === true && ids.has(String(body.timerId).toLowerCase());
    default: return false;
  }
}

/** What a 2xx answer teaches the run: the ids later calls use. */
function learn(q: FuzzRequest, a: Answer, learned: Record<TenantName, Learned>): void {
  if ((q.tenant !== 'A' && q.tenant !== 'B') || q.crossIds.length > 0) return;
  if (a.status !== 200 || a.body.length === 0 || a.body.length > 2_000_000) return;
  const own = learned[q.tenant];
  let body: any;
  try {
    body = JSON.parse(a.body.toString('utf8'));
  } catch {
    return;
  }
  if (Array.isArray(body?.messages)) {
    for (const m of body.messages.slice(0, 8)) {
      if (typeof m?.transactionId === 'string' && typeof m?.partitionId === 'string') {
        ring(own.messages, { transactionId: m.transactionId, partitionId: m.partitionId, leaseId: typeof m.leaseId === 'string' ? m.leaseId : null, queue: String(m.queue ?? '') });
      }
    }
  }
  const timerIds = (x: any) => { if (typeof x?.timerId === 'string') ring(own.timers, x.timerId); };
  timerIds(body);
  if (Array.isArray(body?.results)) body.results.forEach(timerIds);
}

// ---------------------------------------------------------------------------------------------
// The cell: the built API as an operator runs it, its log read for deaths, errors and markers.

export interface Cell {
  port: number;
  stop(): Promise<void>;
  /** Log lines of note so far (a death, an error, a marker), each counted once. */
  drainLog(): Array<{ cls: FindingClass; detail: string }>;
}

const ROOT = path.resolve(__dirname, '..', '..');

export async function startCell(databaseUrl: string, tag: string, workers = 1): Promise<Cell> {
  const port = await freePort();
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '',
    DATABASE_URL: databaseUrl,
    PORT: String(port),
    QUEEN_SWEEPER_METRICS_PORT: '0',
    QUEEN_WORKERS: String(workers),
    QUEEN_TENANCY_HEADER: '1',
    QUEEN_KV_TRUSTED_PROXY: '1',
    QUEEN_ADMIN_TOKEN: ADMIN_TOKEN,
    QUEEN_KV_REQUIRE_GRANT: '0',
    QUEEN_KV_READS_PER_SEC: '1000000',
    QUEEN_KV_READS_BURST: '1000000',
    QUEEN_KV_WRITES_PER_SEC: '1000000',
    QUEEN_KV_WRITES_BURST: '1000000',
    QUEEN_KV_CELL_OPS_PER_SEC: '1000000',
    // A small ceiling, so a body past it costs a few hundred kilobytes, not megabytes.
    QUEEN_MAX_BODY_BYTES: '262144',
    DB_POOL_SIZE: '16',
    LOG_LEVEL: 'warn',
  };
  const child: ChildProcess = spawn(process.execPath, [path.join(ROOT, 'dist', 'services', 'api', 'main.js')], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const notes: Array<{ cls: FindingClass; detail: string }> = [];
  const counted = new Map<string, number>();
  let pending = '';
  let listening: () => void;
  const ready = new Promise<void>((resolve) => (listening = resolve));
  let exited: { code: number | null } | undefined;
  const onText = (chunk: Buffer) => {
    pending += chunk.toString();
    let nl: number;
    while ((nl = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      if (line.includes(`fzA${tag}`) || line.includes(`fzB${tag}`)) note('value_in_log', 'a tenant marker (a value or payload) in the cell\'s log');
      let l: any;
      try {
        l = JSON.parse(line);
      } catch {
        if (line.trim()) note('error_log', `a line that is not JSON: ${JSON.stringify(line.slice(0, 120))}`);
        continue;
      }
      if (l.msg === 'API worker listening') listening();
      if (l.msg === 'API worker died; replacing it') note('worker_crash', `worker ${l.workerPid} died (code ${l.code}, signal ${l.signal})`);
      else if (l.level >= 50 && l.msg !== 'request errored') note('error_log', `${l.msg}${l.err?.message ? `: ${String(l.err.message).slice(0, 160)}` : ''}`);
    }
  };
  const note = (cls: FindingClass, detail: string) => {
    const n = (counted.get(detail) ?? 0) + 1;
    counted.set(detail, n);
    notes.push({ cls, detail: n > 1 ? `${detail} (again)` : detail });
  };
  child.stdout!.on('data', onText);
  child.stderr!.on('data', onText);
  child.once('exit', (code) => {
    exited = { code };
    listening();
  });
  const bound = setTimeout(() => listening(), 60_000);
  await ready;
  clearTimeout(bound);
  if (exited) throw new Error(`the cell exited at boot (code ${exited.code})`);
  return {
    port,
    drainLog: () => notes.splice(0),
    async stop() {
      if (exited) return;
      const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGTERM');
      const kill = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await gone;
      clearTimeout(kill);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// The run.

export interface FuzzOptions {
  seed: number;
  count: number;
  seconds: number;
  concurrency?: number;
  /** A server to make the database on (else DATABASE_URL, else an embedded PostgreSQL of its own). */
  databaseUrl?: string;
  /** Progress lines every this many requests (0: none). */
  progressEvery?: number;
  print?: (line: string) => void;
}

export interface FuzzReport {
  seed: number;
  requests: number;
  seconds: number;
  byKind: Record<Kind, number>;
  byClass: Map<FindingClass, number>;
  findings: Finding[];
  statuses: Map<string, Map<string, number>>;
}

export async function runFuzz(o: FuzzOptions, onCell?: (cell: Cell) => Promise<void> | void, databaseUrl?: string): Promise<FuzzReport> {
  const print = o.print ?? ((l: string) => console.log(l));
  const tag = o.seed.toString(36).padStart(7, '0').slice(-7);
  const ops = loadContract(path.join(ROOT, 'dist', 'openapi.json'));
  const given = databaseUrl ?? o.databaseUrl;
  const db = given ? { url: given, stop: async () => undefined } : await benchDatabase('fuzz', { schema: true });
  const cell = await startCell(db.url, tag);
  const verdict = new Verdict(ops, tag);
  const learned: Record<TenantName, Learned> = { A: { messages: [], timers: [] }, B: { messages: [], timers: [] } };
  const byKind: Record<Kind, number> = { valid: 0, near: 0, hostile: 0 };
  const started = Date.now();
  const until = started + o.seconds * 1000;
  let next = 0;
  let sent = 0;
  try {
    if (onCell) await onCell(cell);
    const lanes = Array.from({ length: o.concurrency ?? 8 }, () => new Lane(cell.port));
    await Promise.all(lanes.map(async (lane) => {
      while (next < o.count && Date.now() < until) {
        const q = generate(o.seed, next++, learned, tag);
        byKind[q.kind]++;
        const outcome = await lane.send(q, q.boundMs + 1000);
        sent++;
        verdict.judge(q, outcome);
        if ('answer' in outcome) learn(q, outcome.answer, learned);
        for (const n of cell.drainLog()) verdict.add(n.cls, n.detail, q);
        if (o.progressEvery && sent % o.progressEvery === 0) {
          const s = (Date.now() - started) / 1000;
          const f = [...verdict.byClass.values()].reduce((x, y) => x + y, 0);
          print(`fuzz: ${sent} requests, ${s.toFixed(0)} s, ${(sent / s).toFixed(0)} req/s, ${f} findings`);
        }
      }
      lane.close();
    }));
    // A worker that dies on the last request is logged a moment later.
    await new Promise((r) => setTimeout(r, 500));
    for (const n of cell.drainLog()) verdict.add(n.cls, n.detail);
  } finally {
    await cell.stop();
    await db.stop();
  }
  return { seed: o.seed, requests: sent, seconds: (Date.now() - started) / 1000, byKind, byClass: verdict.byClass, findings: verdict.findings, statuses: verdict.statuses };
}

export function summary(r: FuzzReport): string {
  const out: string[] = [];
  const total = [...r.byClass.values()].reduce((x, y) => x + y, 0);
  out.push(`fuzz: seed ${r.seed}: ${r.requests} requests in ${r.seconds.toFixed(1)} s (${(r.requests / Math.max(r.seconds, 0.001)).toFixed(0)} req/s); ` +
    `${r.byKind.valid} valid, ${r.byKind.near} near-valid, ${r.byKind.hostile} hostile; ${total} findings`);
  out.push('');
  out.push('| route | requests | answers by status |');
  out.push('| --- | ---: | --- |');
  for (const [route, row] of [...r.statuses].sort(([a], [b]) => a.localeCompare(b))) {
    const n = [...row.values()].reduce((x, y) => x + y, 0);
    out.push(`| ${route} | ${n} | ${[...row].sort(([a], [b]) => a.localeCompare(b)).map(([s, c]) => `${s}: ${c}`).join(', ')} |`);
  }
  out.push('');
  out.push('| finding | count |');
  out.push('| --- | ---: |');
  const classes: FindingClass[] = ['undocumented_status', 'undocumented_code', 'server_error', 'html_body', 'stack_trace', 'non_json_error', 'non_json_body',
    'no_answer', 'hang', 'tenant_leak', 'tenant_write', 'tenant_bypass', 'worker_crash', 'error_log', 'value_in_log'];
  for (const c of classes) out.push(`| ${c} | ${r.byClass.get(c) ?? 0} |`);
  if (r.findings.length > 0) {
    out.push('');
    out.push(`findings (${r.findings.length}: the first 200 undocumented statuses and codes, the first 200 of the others; replay one with --seed ${r.seed} --replay <#>):`);
    for (const f of r.findings) out.push(`  ${f.cls}: ${f.detail}${f.request ? `\n    ${f.request}` : ''}`);
  }
  return out.join('\n');
}

function arg(argv: string[], flag: string): string | undefined {
  const i = argv.indexOf(flag);
  return i >= 0 ? argv[i + 1] : undefined;
}

function num(argv: string[], flag: string, fallback: number): number {
  const v = arg(argv, flag);
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${flag} takes a whole number, got ${JSON.stringify(v)}`);
  return n;
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const seed = num(argv, '--seed', Math.floor(Math.random() * 2 ** 31));
  const replay = arg(argv, '--replay');
  console.log(`fuzz: seed ${seed} (replay this run with --seed ${seed})`);
  if (replay !== undefined) {
    const index = Number(replay);
    const tag = seed.toString(36).padStart(7, '0').slice(-7);
    const q = generate(seed, index, { A: { messages: [], timers: [] }, B: { messages: [], timers: [] } }, tag);
    console.log(`fuzz: request ${describe(q)}`);
    const report = await runFuzz({ seed, count: 0, seconds: 60, concurrency: 1 }, async (cell) => {
      const lane = new Lane(cell.port);
      const o = await lane.send(q, q.boundMs + 1000);
      lane.close();
      console.log('answer' in o ? `fuzz: answered ${o.answer.status} ${o.answer.headers['content-type'] ?? ''} in ${o.answer.ms} ms` : `fuzz: ${o.failure}: ${o.detail}`);
      const v = new Verdict(loadContract(path.join(ROOT, 'dist', 'openapi.json')), tag);
      v.judge(q, o);
      for (const f of v.findings) console.log(`fuzz: ${f.cls}: ${f.detail}`);
      process.exitCode = v.findings.length > 0 ? 1 : 0;
    });
    void report;
    return;
  }
  const count = num(argv, '--count', 10_000);
  const seconds = num(argv, '--seconds', 600);
  const concurrency = num(argv, '--concurrency', 8);
  const report = await runFuzz({ seed, count, seconds, concurrency, progressEvery: num(argv, '--progress', 50_000) });
  console.log(summary(report));
  process.exitCode = [...report.byClass.values()].some((n) => n > 0) ? 1 : 0;
}

if (require.main === module) {
  main().catch((err) => {
    console.error(err);
    process.exit(2);
  });
}
