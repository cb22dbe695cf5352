// Trace context that travels with a message (docs/tracing.md, "How context travels"): Queen's
// `traceId` on a push item is stored and answered by every pop, the dead-letter read and the
// operator's message read; a malformed one is 400 log_invalid_trace_id; a push with none, tracing
// off, stores NULL. A request's own span (tracing on: test/ops/tracing.test.ts spawns that) reaches
// SQL as {"traceId","spanId"}: here it is handed to the same statements directly, through every
// push path (alone, gathered, the transaction wire) and a timer's schedule and fire, and comes
// back as the pop's W3C traceparent.
import { Pool } from 'pg';
import { PushCoalescer } from '../../services/api/push/coalescer';
import { LOG_PUSH_TRACED, TX_ARGS_TRACED, TX_EXPR } from '../../shared/sql/log';
import { TIMERS_APPLY_ONE_TRACED, TX_TIMERS_EXPR_TRACED } from '../../shared/sql/timers';
import { lockOrderedStatement } from '../../shared/lockOrder';
import { ack, configure, pop, push, transaction } from './helpers';
import { call } from '../support/http';
import { useApi } from '../support/api';
import { sweep } from '../support/sweeper';

const ADMIN = 'trace-context-admin-7b';
const api = useApi({ QUEEN_ADMIN_TOKEN: ADMIN }, { connections: 4 });
/** The tenant of a cell with tenancy off (shared/config.ts). */
const TENANT = '00000000-0000-0000-0000-000000000001';
const TRACE = '4bf92f35-77b3-4da6-a3ce-929d0e0e4736';
/** A request's sampled span as the API hands it to SQL (shared/tracing.ts callerTrace). */
const SPAN = { traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331' };
const SPAN_TEXT = JSON.stringify(SPAN);
const SPAN_PARENT = `00-${SPAN.traceId}-${SPAN.spanId}-01`;
const SPAN_UUID = '0af76519-16cd-43dd-8448-eb211c80319c';

async function stored(queue: string): Promise<Array<{ tx: string; trace_id: string | null; span_id: string | null }>> {
  const { rows } = await api.pool.query(
    `SELECT m.transaction_id AS tx, m.trace_id::text, encode(m.span_id, 'hex') AS span_id FROM queen.messages m
       JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.name = $1 ORDER BY m.transaction_id`, [queue]);
  return rows;
}

test('a Queen traceId round-trips push -> pop on the fast path and the general one, and a push without one stores NULL', async () => {
  // One item (the fast path), then three to two partitions (the general path), one without a traceId.
  const one = await push(api.url, [{ queue: 'tc-a', payload: 1, transactionId: 'a1', traceId: TRACE }]);
  expect(one.status).toBe(201);
  expect(one.body[0]).toMatchObject({ status: 'queued', trace_id: TRACE });
  const other = '11111111-2222-4333-8444-555555555555';
  const many = await push(api.url, [
    { queue: 'tc-a', payload: 2, transactionId: 'a2', traceId: other.toUpperCase() },
    { queue: 'tc-a', payload: 3, transactionId: 'a3' },
    { queue: 'tc-a', partition: 'p2', payload: 4, transactionId: 'a4', traceId: '' },
  ]);
  expect(many.body.map((e: { trace_id: unknown }) => e.trace_id)).toEqual([other, null, null]);
  // A duplicate stores nothing: the message keeps its own trace.
  const dup = await push(api.url, [{ queue: 'tc-a', payload: 1, transactionId: 'a1', traceId: other }]);
  expect(dup.body[0]).toMatchObject({ status: 'duplicate', trace_id: null });
  expect(await stored('tc-a')).toEqual([
    { tx: 'a1', trace_id: TRACE, span_id: null },
    { tx: 'a2', trace_id: other, span_id: null },
    { tx: 'a3', trace_id: null, span_id: null },
    { tx: 'a4', trace_id: null, span_id: null },
  ]);
  const popped = [...(await pop(api.url, 'tc-a', { partition: 'Default', batch: 10 })), ...(await pop(api.url, 'tc-a', { partition: 'p2' }))];
  // Queen's wire: traceId a UUID or null; no span was known, so no traceparent.
  expect(popped.map((m: any) => [m.transactionId, m.traceId, m.traceparent])).toEqual([
    ['a1', TRACE, null], ['a2', other, null], ['a3', null, null], ['a4', null, null],
  ]);
});

test('a malformed traceId is 400 log_invalid_trace_id naming the item, on the push and in the transaction wire, and nothing is stored', async () => {
  for (const bad of ['not-a-uuid', 42, { id: TRACE }, `${TRACE}0`, '4bf92f3577b34da6a3ce929d0e0e4736']) {
    const res = await push(api.url, [{ queue: 'tc-bad', payload: 1 }, { queue: 'tc-bad', payload: 2, traceId: bad }]);
    expect([res.status, res.body.error, res.body.index]).toEqual([400, 'log_invalid_trace_id', 1]);
  }
  const wire = await transaction(api.url, { operations: [{ type: 'push', items: [{ queue: 'tc-bad', payload: 1 }] }, { type: 'push', items: [{ queue: 'tc-bad', payload: 1, traceId: 'x' }] }] });
  expect([wire.status, wire.body.error, wire.body.index]).toEqual([400, 'log_invalid_trace_id', 1]);
  // SQL holds the same rule for a caller that is not the API.
  await expect(api.pool.query({ ...LOG_PUSH_TRACED, values: [TENANT, JSON.stringify({ items: [{ queue: 'tc-bad', payload: 1, traceId: 'x' }] }), null, null] }))
    .rejects.toMatchObject({ code: 'QK400' });
  expect(await stored('tc-bad')).toEqual([]);
});

test('a request span stored by every push path comes back as traceparent: alone, gathered, the wire, and a timer through its fire', async () => {
  // Alone: the span, and an item whose own traceId wins (with no span: it is another trace).
  const alone = await api.pool.query({ ...LOG_PUSH_TRACED, values: [TENANT, JSON.stringify({ items: [
    { queue: 'tc-s', payload: 1, transactionId: 's1' }, { queue: 'tc-s', payload: 2, transactionId: 's2', traceId: TRACE },
    { queue: 'tc-s', payload: 3, transactionId: 's3', traceId: SPAN_UUID },
  ] }), null, SPAN_TEXT] });
  expect(JSON.parse(alone.rows[0].results).map((e: { trace_id: string }) => e.trace_id)).toEqual([SPAN_UUID, TRACE, SPAN_UUID]);
  // Gathered: three one-item pushes to one partition in one tick, one traced, one not, one with a traceId.
  await push(api.url, [{ queue: 'tc-g', payload: 0, transactionId: 'g0' }]);
  const coalescer = new PushCoalescer(api.pool);
  const b = (tx: string, extra: Record<string, unknown> = {}) => {
    const body = { items: [{ queue: 'tc-g', payload: tx, transactionId: tx, ...extra }] };
    return [JSON.stringify(body), body] as const;
  };
  const [g1, g2, g3] = [b('g1'), b('g2'), b('g3', { traceId: TRACE })];
  const gathered = await Promise.all([
    coalescer.push(TENANT, g1[0], g1[1], SPAN_TEXT), coalescer.push(TENANT, g2[0], g2[1], SPAN_TEXT),
    coalescer.push(TENANT, g3[0], g3[1], 'null'), coalescer.push(TENANT, ...b('g4')),
  ]);
  expect(gathered.map((r) => JSON.parse(r)[0].trace_id)).toEqual([SPAN_UUID, SPAN_UUID, TRACE, null]);
  expect((await stored('tc-g')).map((r) => [r.tx, r.trace_id, r.span_id])).toEqual([
    ['g0', null, null], ['g1', SPAN_UUID, SPAN.spanId], ['g2', SPAN_UUID, SPAN.spanId], ['g3', TRACE, null], ['g4', null, null],
  ]);
  // The wire: a push and a schedule in one bundle, with the bundle request's span.
  const statement = lockOrderedStatement('tx_wire_traced_v1', TX_ARGS_TRACED, { timers: TX_TIMERS_EXPR_TRACED, partitions: TX_EXPR.partitionsTraced });
  const body = { operations: [{ type: 'push', items: [{ queue: 'tc-w', payload: 1, transactionId: 'w1' }] }], timers: [{ op: 'schedule', queue: 'tc-w', payload: 't', delaySeconds: 0 }] };
  const wire = await api.pool.query({ ...statement, values: [TENANT, JSON.stringify(body), 1, 1, null, null, SPAN_TEXT] });
  expect(JSON.parse(wire.rows[0].partitions)[0].items[0].trace_id).toBe(SPAN_UUID);
  // The timers route's one operation, traced.
  await api.pool.query({ ...TIMERS_APPLY_ONE_TRACED, values: [TENANT, JSON.stringify({ op: 'schedule', queue: 'tc-w', payload: 'r', delaySeconds: 0 }), '{}', null, JSON.stringify({ ...SPAN, spanId: '00f067aa0ba902b7' })] });
  const timers = await api.pool.query(`SELECT trace_id::text, encode(span_id, 'hex') AS span FROM queen.log_timers WHERE queue = 'tc-w' ORDER BY span`);
  expect(timers.rows).toEqual([{ trace_id: SPAN_UUID, span: '00f067aa0ba902b7' }, { trace_id: SPAN_UUID, span: SPAN.spanId }]);
  await sweep(api.databaseUrl);
  const fired = await pop(api.url, 'tc-w', { batch: 10 });
  expect(fired.map((m: any) => [m.data, m.traceId, m.traceparent]).sort()).toEqual([
    [1, SPAN_UUID, SPAN_PARENT], ['r', SPAN_UUID, `00-${SPAN.traceId}-00f067aa0ba902b7-01`], ['t', SPAN_UUID, SPAN_PARENT],
  ].sort());
  // The dead-letter read and the operator's read show it too.
  await configure(api.url, 'tc-d', { retryLimit: 0, retryDelay: 0 });
  await api.pool.query({ ...LOG_PUSH_TRACED, values: [TENANT, JSON.stringify({ items: [{ queue: 'tc-d', payload: 1, transactionId: 'd1' }] }), null, SPAN_TEXT] });
  const [m] = await pop(api.url, 'tc-d');
  await ack(api.url, m, 'failed');
  const dlq = await call(api.url, 'GET', '/api/v1/dlq?queue=tc-d');
  expect(dlq.body.messages[0]).toMatchObject({ transactionId: 'd1', traceId: SPAN_UUID, traceparent: SPAN_PARENT });
  const read = await call(api.url, 'GET', `/api/v1/system/partitions/${m.partitionId}/messages/d1`, undefined, { authorization: `Bearer ${ADMIN}`, 'x-queen-operator': 'test' });
  expect([read.status, read.body.traceId, read.body.traceparent]).toEqual([200, SPAN_UUID, SPAN_PARENT]);
});
