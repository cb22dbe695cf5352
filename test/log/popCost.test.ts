// A pop's cost must not grow with its partition's log. The pop reads its batch's messages by
// (partition, seq); a plan that found them through the partition's transactionId index instead,
// filtering every message the partition holds, made each pop of a deep partition read its whole
// history (4,000 index entries for a batch of 10 in bench:log's bundle lane). PostgreSQL picks
// that plan once a session's cached generic plan takes over, when most partitions are small (its
// estimate for "one partition" is then a handful of rows): the state of a cell with many quiet
// partitions and one busy one. The suite counts what each pop reads through the log's indexes, in
// its own transaction (pg_stat_get_xact_tuples_returned), over enough pops for the generic plan.
import { useDatabase } from '../support/database';

const TENANT = '00000000-0000-0000-0000-000000000001';
const DEEP = 3000;
const BATCH = 10;

const db = useDatabase({ client: true });

beforeAll(async () => {
  const c = db.client;
  await c.query(`SELECT queen.log_ensure_partition_v1($1, 'deep', 'p0')`, [TENANT]);
  await c.query(`SELECT queen.log_ensure_partition_v1($1, 'wide', 'w0')`, [TENANT]);
  await c.query(
    `INSERT INTO queen.partitions (queue_id, name, last_seq) SELECT q.id, 'w' || g, 1 FROM queen.queues q, generate_series(1, 2999) g
      WHERE q.tenant_id = $1 AND q.name = 'wide'`,
    [TENANT],
  );
  await c.query(`UPDATE queen.partitions p SET last_seq = $2 FROM queen.queues q WHERE q.id = p.queue_id AND q.tenant_id = $1 AND q.name = 'deep'`, [TENANT, DEEP]);
  await c.query(
    `INSERT INTO queen.messages (partition_id, seq, transaction_id, payload)
     SELECT p.id, s, gen_random_uuid()::text, '{"n": 1}' FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id,
            generate_series(1, CASE WHEN q.name = 'deep' THEN $2::int ELSE 1 END) s
      WHERE q.tenant_id = $1`,
    [TENANT, DEEP],
  );
  await c.query('ANALYZE queen.partitions, queen.messages, queen.partition_consumers');
});

/** Index entries of queen.messages one pop read (the counters hold what is not yet reported, so a difference), and the messages it answered. */
async function popReads(group: string): Promise<{ read: number; messages: number }> {
  const c = db.client;
  const counted = async () => (await c.query(
    `SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid))::int AS read FROM pg_index i WHERE i.indrelid = 'queen.messages'::regclass`,
  )).rows[0].read as number;
  await c.query('BEGIN');
  try {
    const before = await counted();
    const { rows } = await c.query(`SELECT jsonb_array_length(queen.log_pop_v2($1, 'deep', 'p0', $2, $3)) AS n`, [TENANT, group, BATCH]);
    return { read: (await counted()) - before, messages: rows[0].n };
  } finally {
    await c.query('COMMIT');
  }
}

it('reads about its batch from a deep partition, however many pops its session has planned', async () => {
  const reads: number[] = [];
  // A new group each time reads from the partition's start: the same batch, the same work.
  for (let i = 0; i < 12; i++) {
    const { read, messages } = await popReads(`g${i}`);
    expect(messages).toBe(BATCH);
    reads.push(read);
  }
  // The batch's entries, looked up twice (its seqs, then its rows), with room for a page's worth;
  // the partition holds 300 times the batch.
  expect(reads.filter((r) => r > BATCH * 5)).toEqual([]);
});

// Queen's `partitions`: one pop leasing several partitions reads its queue's candidates once, not
// once a partition (each a read of every ready partition: 10 partitions of the 3,000 of 'wide' read
// 30,000 entries of the ready index).
it('leases several partitions from one read of the queue\'s ready partitions', async () => {
  const c = db.client;
  const wide = 3000;
  const readyRead = async () => (await c.query(
    `SELECT pg_stat_get_xact_tuples_returned('queen.idx_partitions_ready'::regclass)::int AS read`,
  )).rows[0].read as number;
  await c.query('BEGIN');
  try {
    const before = await readyRead();
    const { rows } = await c.query(`SELECT queen.log_pop_many_v2($1, 'wide', NULL, 'many', 10, 10) AS m`, [TENANT]);
    const read = (await readyRead()) - before;
    const messages = rows[0].m as { partitionId: string; leaseId: string }[];
    expect(messages).toHaveLength(10);
    expect(new Set(messages.map((m) => m.partitionId)).size).toBe(10);
    expect(new Set(messages.map((m) => m.leaseId)).size).toBe(1);
    expect(read).toBeGreaterThanOrEqual(wide);
    expect(read).toBeLessThan(2 * wide);
  } finally {
    await c.query('COMMIT');
  }
});
