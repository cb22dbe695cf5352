// A pop plans its batch read once a session. Planned afresh at every pop it cost about 500 µs of
// PostgreSQL (pg_stat_statements with track_planning over bench:log's pop+ack lane, 16 partitions of
// 6,250 messages), more than the read itself: a LIMIT of a parameter makes the generic plan look
// dearer than any custom one, so PostgreSQL never switched to it by itself. The read now runs its
// generic plan, which must still find each message's failures and sealed mark by key (a generic
// plan of joins hashed the group's whole failure history). auto_explain (a superuser's LOAD) shows
// each nested statement's plan as a notice; a generic plan names its parameters ($n) where a
// custom one has their values. A database of its own: a few deep partitions, the shape in which
// custom plans win.
import { useDatabase } from '../support/database';

const TENANT = '00000000-0000-0000-0000-000000000001';
const PARTITIONS = 4;
const DEPTH = 2000;
const BATCH = 10;

const db = useDatabase({ client: true });

beforeAll(async () => {
  const c = db.client;
  for (let p = 0; p < PARTITIONS; p++) await c.query(`SELECT queen.log_ensure_partition_v1($1, 'plan', $2)`, [TENANT, `p${p}`]);
  await c.query(
    `INSERT INTO queen.messages (partition_id, seq, transaction_id, payload)
     SELECT p.id, s, gen_random_uuid()::text, '{"n": 1}' FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id, generate_series(1, $2::int) s
      WHERE q.tenant_id = $1 AND q.name = 'plan'`,
    [TENANT, DEPTH],
  );
  await c.query(`UPDATE queen.partitions SET last_seq = $1`, [DEPTH]);
  // Another group's failure history and another queue's sealed payloads: tables of some size, as in
  // a cell that has run a while (empty ones are scanned whatever the plan).
  await c.query(`INSERT INTO queen.message_failures (partition_id, consumer_group, seq, failures) SELECT partition_id, 'other', seq, 1 FROM queen.messages`);
  await c.query(`SELECT queen.log_ensure_partition_v1($1, 'plan-sealed', 'p0')`, [TENANT]);
  await c.query(
    `INSERT INTO queen.messages (partition_id, seq, transaction_id, payload)
     SELECT p.id, s, gen_random_uuid()::text, '"sealed"' FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id, generate_series(1, $2::int) s
      WHERE q.tenant_id = $1 AND q.name = 'plan-sealed'`,
    [TENANT, DEPTH * PARTITIONS],
  );
  await c.query(
    `INSERT INTO queen.sealed_messages (partition_id, seq)
     SELECT m.partition_id, m.seq FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.tenant_id = $1 AND q.name = 'plan-sealed'`,
    [TENANT],
  );
  await c.query('ANALYZE queen.partitions, queen.messages, queen.partition_consumers, queen.message_failures, queen.sealed_messages');
});

it('runs its batch read under the generic plan from the first pop, each message probed by key', async () => {
  const c = db.client;
  const plans: string[] = [];
  const onNotice = (n: { message?: string }) => {
    if (n.message && /messages_pkey/.test(n.message) && /message_failures/.test(n.message)) plans.push(n.message);
  };
  c.on('notice', onNotice);
  try {
    await c.query(`LOAD 'auto_explain'`);
    await c.query(`SET auto_explain.log_min_duration = 0`);
    await c.query(`SET auto_explain.log_nested_statements = on`);
    await c.query(`SET auto_explain.log_level = notice`);
    for (let i = 0; i < 8; i++) {
      const { rows } = await c.query(`SELECT jsonb_array_length(queen.log_pop_v2($1, 'plan', $2, $3, $4)) AS n`, [TENANT, `p${i % PARTITIONS}`, `g${i}`, BATCH]);
      expect(rows[0].n).toBe(BATCH);
    }
  } finally {
    await c.query(`SET auto_explain.log_min_duration = -1`);
    c.off('notice', onNotice);
  }
  expect(plans).toHaveLength(8);
  expect(plans.map((p) => /Index Cond: \(\(partition_id = \$\d+\) AND \(seq > \$\d+\)\)/.test(p))).toEqual(plans.map(() => true));
  expect(plans.map((p) => [/message_failures_pkey/.test(p), /sealed_messages_pkey/.test(p)])).toEqual(plans.map(() => [true, true]));
});
