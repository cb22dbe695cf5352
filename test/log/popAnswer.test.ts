// The pop of one partition answers its messages as JSON text that PostgreSQL writes itself (each
// payload once, as stored), not as a jsonb array rendered afterwards: the text must be exactly what
// jsonb would have written (key order and spacing included: the API opens sealed payloads by
// reading that text, and clients have always seen it), for every kind of payload, a failed
// message's count, a sealed mark and trace context; its top names the first message's partition,
// lease and queue; the pop of several partitions writes its shared lease into that text; and the
// jsonb answers of 0.1.0's pop and of the pops other statements call keep their shape.
import { useDatabase } from '../support/database';

const TENANT = '00000000-0000-0000-0000-000000000001';

const db = useDatabase({ client: true });

// Payloads as stored: every JSON kind, text that needs escaping, unicode, numbers jsonb keeps as
// written, a key order jsonb changes, a payload-less message (NULL), and a sealed-looking string.
const payloads = [
  '{"b": 1, "a": [1, 2.50, -1.0, 1e3], "c": {"nested": [true, false, null]}}',
  '"quote \\" backslash \\\\ newline \\n tab \\t unicode é ☃ \\u0001"',
  '12345678901234567890.123',
  'null',
  '[]',
  '{}',
  '"sealed:v1:AAAA"',
  null,
];

let partitionId = '';

beforeAll(async () => {
  const c = db.client;
  const { rows: [p] } = await c.query(`SELECT (queen.log_ensure_partition_v1($1, 'answers', 'p0')).p_id AS id`, [TENANT]);
  partitionId = p.id;
  for (const [i, payload] of payloads.entries()) {
    await c.query(
      `INSERT INTO queen.messages (partition_id, seq, transaction_id, payload, trace_id, span_id)
       VALUES ($1, $2::bigint, $3, $4::jsonb, CASE WHEN $2::bigint = 2 THEN '4bf92f35-77b3-4da6-a3ce-929d0e0e4736'::uuid END,
               CASE WHEN $2::bigint = 2 THEN '\\x00f067aa0ba902b7'::bytea END)`,
      [p.id, i + 1, `t-${i}`, payload],
    );
  }
  await c.query(`UPDATE queen.partitions SET last_seq = $2 WHERE id = $1`, [p.id, payloads.length]);
  await c.query(`INSERT INTO queen.sealed_messages (partition_id, seq) VALUES ($1, 7)`, [p.id]);
  // Two failed deliveries of the third message for group g (its retryCount), none for others.
  await c.query(`INSERT INTO queen.message_failures (partition_id, consumer_group, seq, failures) VALUES ($1, 'g', 3, 2)`, [p.id]);
});

test('the text is jsonb\'s own rendering of the messages, and the top names the first one\'s partition, lease and queue', async () => {
  const { rows: [r] } = await db.client.query(
    `SELECT (r).messages, (r).messages::jsonb::text AS rendered, (r).partition, (r).partition_id::text AS partition_id,
            (r).lease_id::text AS lease_id, (r).queue
       FROM (SELECT queen.log_pop_v3($1, 'answers', NULL, 'g', 100) AS r OFFSET 0) s`,
    [TENANT],
  );
  expect(r.messages).toBe(r.rendered);
  const messages = JSON.parse(r.messages);
  expect(messages.map((m: { data: unknown }) => m.data)).toEqual(payloads.map((p) => (p === null ? null : JSON.parse(p))));
  expect(messages.map((m: { retryCount: number }) => m.retryCount)).toEqual([0, 0, 2, 0, 0, 0, 0, 0]);
  expect(messages.map((m: { sealed?: boolean }) => m.sealed ?? false)).toEqual([false, false, false, false, false, false, true, false]);
  expect(messages[1].traceparent).toBe('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
  expect(Object.keys(messages[0])).toEqual([
    'id', 'data', 'queue', 'leaseId', 'traceId', 'createdAt', 'partition', 'retryCount', 'partitionId', 'producerSub',
    'traceparent', 'consumerGroup', 'transactionId', 'leaseExpiresAt',
  ]);
  expect([r.partition, r.partition_id, r.lease_id, r.queue]).toEqual([messages[0].partition, partitionId, messages[0].leaseId, 'answers']);
});

test('nothing to lease answers "[]" and no top', async () => {
  const { rows: [r] } = await db.client.query(`SELECT (queen.log_pop_v3($1, 'answers', NULL, 'g', 10)).*`, [TENANT]);
  expect(r).toEqual({ messages: '[]', partition: null, partition_id: null, lease_id: null, queue: null, leases: [], partition_ids: [] });
  const { rows: [none] } = await db.client.query(`SELECT (queen.log_pop_v3($1, 'no-such-queue', NULL, 'g', 10)).*`, [TENANT]);
  expect(none.messages).toBe('[]');
});

test('0.1.0\'s pop and the pop of several partitions answer jsonb arrays of the same messages', async () => {
  const { rows: [v1] } = await db.client.query(`SELECT queen.log_pop_v1($1, 'answers', NULL, 'h', 3) AS r`, [TENANT]);
  expect(v1.r.map((m: { transactionId: string }) => m.transactionId)).toEqual(['t-0', 't-1', 't-2']);
  expect(Object.keys(v1.r[0])).not.toContain('traceparent');
  // Two partitions leased by one pop: the arrays of both, joined.
  const c = db.client;
  const { rows: [q] } = await c.query(`SELECT (queen.log_ensure_partition_v1($1, 'answers', 'p1')).p_id AS id`, [TENANT]);
  await c.query(`INSERT INTO queen.messages (partition_id, seq, transaction_id, payload) VALUES ($1, 1, 'u-0', '{"x": 1}')`, [q.id]);
  await c.query(`UPDATE queen.partitions SET last_seq = 1 WHERE id = $1`, [q.id]);
  const { rows: [many] } = await c.query(`SELECT queen.log_pop_many_v2($1, 'answers', NULL, 'k', 100, 2) AS r`, [TENANT]);
  expect(many.r.map((m: { transactionId: string }) => m.transactionId).sort()).toEqual([...payloads.map((_, i) => `t-${i}`), 'u-0'].sort());
});

test('the pop of several partitions answers text too, every message naming the shared lease each partition\'s lease is recorded under', async () => {
  const c = db.client;
  const { rows: [r] } = await c.query(
    `SELECT (r).messages, (r).messages::jsonb::text AS rendered, (r).lease_id::text AS lease_id, (r).partition_id::text AS partition_id,
            (r).leases::text[] AS leases, (r).partition_ids::text[] AS partition_ids
       FROM (SELECT queen.log_pop_many_v3($1, 'answers', NULL, 'm', 100, 2) AS r OFFSET 0) s`,
    [TENANT],
  );
  expect(r.messages).toBe(r.rendered);
  const messages = JSON.parse(r.messages) as Array<{ leaseId: string; partitionId: string }>;
  expect(messages).toHaveLength(payloads.length + 1);
  expect(new Set(messages.map((m) => m.leaseId))).toEqual(new Set([r.lease_id]));
  expect(r.partition_ids).toHaveLength(2);
  expect(r.partition_id).toBe(messages[0].partitionId);
  expect(new Set(messages.map((m) => m.partitionId))).toEqual(new Set(r.partition_ids));
  const { rows: shared } = await c.query(
    `SELECT partition_id::text, shared_id::text, lease_id::text FROM queen.shared_leases WHERE consumer_group = 'm' ORDER BY partition_id`,
  );
  expect(shared.map((s) => s.shared_id)).toEqual([r.lease_id, r.lease_id]);
  expect(shared.map((s) => [s.partition_id, s.lease_id]).sort()).toEqual(r.partition_ids.map((p: string, i: number) => [p, r.leases[i]]).sort());
});
