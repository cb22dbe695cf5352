// A session plans a pop's statements once (their generic plans) at its first pop. In a new cell that
// first pop meets empty tables, and a plan made then read partition_consumers whole for each
// candidate partition, for as long as the session lived: 50 ms a pop of a queue of 1,000
// partitions (bench:pop-partitions), where the probes take 2. The statements of probes are planned
// with sequential scans off; this holds a session whose first pop met an empty cell to reading the
// group's rows by key once the cell has grown. A database of its own: the emptiness is the case.
import { useDatabase } from '../support/database';

const TENANT = '00000000-0000-0000-0000-000000000001';
const PARTITIONS = 1000;

const db = useDatabase({ client: true });

test('a session whose first pop met an empty cell probes the group rows by key once the cell has grown', async () => {
  const c = db.client;
  // A new cell, its tables known to be empty, and one message to pop: this session's first pop.
  await c.query('VACUUM ANALYZE queen.partitions, queen.partition_consumers, queen.messages, queen.consumer_retry_at, queen.message_failures, queen.sealed_messages');
  await c.query(`SELECT queen.log_push_request_v2($1, '[{"queue": "first", "payload": 1}]'::jsonb)`, [TENANT]);
  expect((await c.query(`SELECT (queen.log_pop_v3($1, 'first', NULL, 'g', 1)).messages::jsonb AS m`, [TENANT])).rows[0].m).toHaveLength(1);

  // The cell grows: a queue of 1,000 partitions with a message each, the group's row on each.
  await c.query(
    `SELECT queen.log_push_request_v2($1, (SELECT jsonb_agg(jsonb_build_object('queue', 'wide', 'partition', 'p' || g, 'payload', g))
                                            FROM generate_series(1, $2::int) g))`,
    [TENANT, PARTITIONS],
  );
  await c.query(
    `INSERT INTO queen.partition_consumers (partition_id, consumer_group)
     SELECT p.id, 'g' FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'wide'`,
  );
  // And another group's failure history and another queue's sealed payloads, 10,000 rows each.
  await c.query(
    `SELECT queen.log_push_request_v2($1, (SELECT jsonb_agg(jsonb_build_object('queue', 'history', 'payload', g)) FROM generate_series(1, 10000) g))`,
    [TENANT],
  );
  await c.query(
    `INSERT INTO queen.message_failures (partition_id, consumer_group, seq, failures)
     SELECT m.partition_id, 'other', m.seq, 1 FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
       JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'history'`,
  );
  await c.query(
    `INSERT INTO queen.sealed_messages (partition_id, seq)
     SELECT m.partition_id, m.seq FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
       JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'history'`,
  );

  // Five pops in one transaction, and what they read of partition_consumers.
  await c.query('BEGIN');
  try {
    for (let i = 0; i < 5; i++) {
      expect((await c.query(`SELECT (queen.log_pop_v3($1, 'wide', NULL, 'g', 1)).messages::jsonb AS m`, [TENANT])).rows[0].m).toHaveLength(1);
    }
    const { rows: [read] } = await c.query(
      `SELECT seq_tup_read::int AS scanned, idx_scan::int AS probes FROM pg_stat_xact_user_tables WHERE schemaname = 'queen' AND relname = 'partition_consumers'`,
    );
    // Each message's failures and sealed mark: probes too.
    const { rows: beside } = await c.query(
      `SELECT relname, seq_tup_read::int AS scanned FROM pg_stat_xact_user_tables WHERE schemaname = 'queen' AND relname IN ('message_failures', 'sealed_messages') ORDER BY relname`,
    );
    expect(beside.map((r) => [r.relname, r.scanned < 100])).toEqual([['message_failures', true], ['sealed_messages', true]]);
    // By key: one probe a candidate partition a pop. A plan that scans reads the whole table for
    // each candidate (5,005,002 rows here); the few the pops read otherwise are not its.
    expect(read.scanned).toBeLessThan(PARTITIONS);
    expect(read.probes).toBeGreaterThanOrEqual(5 * PARTITIONS);
  } finally {
    await c.query('ROLLBACK');
  }
});
