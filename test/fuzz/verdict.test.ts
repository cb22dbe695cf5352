// The fuzzer's judge on tenancy (bench/fuzz.ts, Verdict): an answer that only echoes the request
// (the other tenant's transactionId an ack was given, a path in a 404, a UTF-16 body) is no leak,
// while the other tenant's rows in it are one; a call with the other tenant's ids is a cross-tenant
// write only when the answer's element for one of those ids says it applied, not when the rest of a
// transaction or batch did. No cell and no database: the judge is a function of request and answer.
import path from 'node:path';
import { FindingClass, FuzzRequest, loadContract, Outcome, TENANTS, Verdict } from '../../bench/fuzz';

const TAG = 'vtest01';
const A = `fzA${TAG}`;
const B = `fzB${TAG}`;
const PID_B = '3adb054e-2c67-4fb4-ab40-9164d6cf9afb';
const PID_A = '81b5f93f-f6e1-4db5-a6fa-913d9ec55c4c';
const TIMER_B = '32cd801a-14fc-43cb-be74-4d139feb19c3';
const ops = loadContract(path.resolve(__dirname, '..', '..', 'openapi.json'));

function request(route: string, method: string, target: string, body: unknown, over: Partial<FuzzRequest> = {}): FuzzRequest {
  const bytes = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body));
  return {
    index: 1, route, kind: 'valid', tenant: 'A', method, target, body: bytes, crossIds: [], boundMs: 16_000,
    headers: [['Host', '127.0.0.1'], ['x-queen-tenant', TENANTS.A], ...(bytes ? [['Content-Type', 'application/json'], ['Content-Length', String(bytes.length)]] as Array<[string, string]> : [])],
    ...over,
  };
}

function answer(status: number, body: unknown): Outcome {
  return { answer: { status, headers: { 'content-type': 'application/json; charset=utf-8' }, body: Buffer.from(JSON.stringify(body)), ms: 5 } };
}

function judged(q: FuzzRequest, o: Outcome): FindingClass[] {
  const v = new Verdict(ops, TAG);
  v.judge(q, o);
  return [...v.byClass.keys()].filter((c) => c.startsWith('tenant_'));
}

const crossAck = { transactionId: `${B}-4544`, partitionId: PID_B, status: 'completed' };
const notFound = { ok: false, success: false, error: 'not_found', reason: 'ack_failed', ackReason: 'not_found', transactionId: `${B}-4544`, partitionId: PID_B, consumerGroup: null, status: 'completed' };

test('an ack of the other tenant\'s message: its not_found naming the transactionId it was given is no leak; its payload in the answer is one', () => {
  const q = request('POST /api/v1/ack', 'POST', '/api/v1/ack', crossAck, { crossIds: [`${B}-4544|${PID_B}`] });
  expect(judged(q, answer(200, notFound))).toEqual([]);
  expect(judged(q, answer(200, { ...notFound, payload: { m: B } }))).toEqual(['tenant_leak']);
  expect(judged(q, answer(200, { ok: true, success: true, transactionId: `${B}-4544`, partitionId: PID_B, status: 'completed' }))).toEqual(['tenant_write']);
});

test('the echo of a UTF-16 body, and of a path in a 404 to a call with no tenant, is no leak', () => {
  const text = JSON.stringify({ acknowledgments: [crossAck] });
  const q = request('POST /api/v1/ack/batch', 'POST', '/api/v1/ack/batch', Buffer.from(text, 'utf16le'), { crossIds: [`${B}-4544|${PID_B}`] });
  expect(judged(q, answer(200, { ok: false, results: [notFound] }))).toEqual([]);
  const path404 = `//api/v1/traces/798225df-3410-4947-959a-7530a3797e20/${B}-1082`;
  const none = request('GET /api/v1/traces/{partitionId}/{transactionId}', 'GET', path404, undefined, { tenant: 'bad' });
  expect(judged(none, answer(404, { error: 'not_found', message: `No route for GET ${path404}.` }))).toEqual([]);
  expect(judged(none, answer(404, { error: 'not_found', message: `No route for GET ${path404}.`, data: { m: A } }))).toEqual(['tenant_leak']);
});

test('a transaction whose cross ack the mutation dropped succeeds on the rest: no cross-tenant write; its cross ack applied: one', () => {
  const body = { 'operatio\u00ed(\u00afns': [{ type: 'ack', ...crossAck }], kv: [{ op: 'get', ns: 'fz-ns1', key: 'k1' }] };
  const q = request('POST /api/v1/transaction', 'POST', '/api/v1/transaction', body, { crossIds: [`${B}-4544|${PID_B}`] });
  expect(judged(q, answer(200, { ok: true, success: true, results: [{ index: 0, found: false }] }))).toEqual([]);
  const own = { ok: true, success: true, transactionId: `${A}-7`, partitionId: PID_A, status: 'completed' };
  expect(judged(q, answer(200, { ok: true, success: true, results: [own] }))).toEqual([]);
  expect(judged(q, answer(200, { ok: true, success: true, results: [own, { ok: true, success: true, transactionId: `${B}-4544`, partitionId: PID_B.toUpperCase() }] }))).toEqual(['tenant_write']);
});

test('a timer call with the other tenant\'s id: a write only when the answer says that id moved', () => {
  const q = request('POST /api/v1/timers/{id}/reschedule', 'POST', `/api/v1/timers/${TIMER_B}/reschedule`, { delaySeconds: 5 }, { crossIds: [TIMER_B] });
  expect(judged(q, answer(200, { index: 0, op: 'reschedule', timerId: TIMER_B, rescheduled: false, reason: 'absent' }))).toEqual([]);
  expect(judged(q, answer(200, { index: 0, op: 'reschedule', timerId: TIMER_B, rescheduled: true, deliverAt: '2026-12-03T12:00:00.000Z' }))).toEqual(['tenant_write']);
});
