// queen.log_ack_fast_v1 settles an ack batch's common case (two or more acks, all `completed`, one
// group's row, one live lease, each message held by it and unsettled) in a handful of statements; every other
// batch goes through queen.log_ack_step_of_v1, ack by ack, the one definition of every refusal. This
// suite runs each batch below once with the shortcut off (SET LOCAL queen.log_ack_fast_path = off)
// and once on, from the same state, and holds the two to the same answers and the same group row.
// The cases sit on both sides of every edge of the shortcut's guard; the calls of the step
// (track_functions) say which way each went.
import { useDatabase } from '../support/database';

const TENANT = '00000000-0000-0000-0000-000000000001';
const OTHER = '00000000-0000-0000-0000-0000000000b2';

const db = useDatabase({ client: true });

beforeAll(async () => {
  const c = db.client;
  for (const [tenant, queue, partition, n] of [[TENANT, 'fq', 'p0', 30], [TENANT, 'fq', 'p1', 5], [OTHER, 'oq', 'p0', 5]] as const) {
    const { rows: [p] } = await c.query(`SELECT (queen.log_ensure_partition_v1($1, $2, $3)).p_id AS id`, [tenant, queue, partition]);
    await c.query(
      `INSERT INTO queen.messages (partition_id, seq, transaction_id, payload) SELECT $1, g, $2 || g, '{"n": 1}' FROM generate_series(1, $3::int) g`,
      [p.id, `${queue}-${partition}-t`, n],
    );
    await c.query(`UPDATE queen.partitions SET last_seq = $2 WHERE id = $1`, [p.id, n]);
  }
});

type Popped = { transactionId: string; partitionId: string; leaseId: string };
type Ack = { transactionId: string; partitionId: string; status: string; leaseId?: string | null };

async function pop(tenant: string, queue: string, partition: string, batch: number): Promise<Popped[]> {
  const { rows } = await db.client.query(`SELECT queen.log_pop_v2($1, $2, $3, 'g', $4) AS r`, [tenant, queue, partition, batch]);
  return rows[0].r;
}

async function ack(acks: Ack[]): Promise<unknown> {
  const { rows } = await db.client.query(`SELECT queen.log_ack_batch_body_v2($1, $2::jsonb) AS r`, [TENANT, JSON.stringify({ acknowledgments: acks, consumerGroup: 'g' })]);
  return rows[0].r;
}

const done = (m: Popped, leased = true): Ack => ({ transactionId: m.transactionId, partitionId: m.partitionId, status: 'completed', leaseId: leased ? m.leaseId : null });

/** A case: what happens before (pops, earlier acks), then the batch under test. */
type Case = [name: string, fast: boolean, batch: () => Promise<Ack[]>];

const cases: Case[] = [
  ['ten in order, their leaseId', true, async () => (await pop(TENANT, 'fq', 'p0', 10)).map((m) => done(m))],
  ['ten in order, no leaseId', true, async () => (await pop(TENANT, 'fq', 'p0', 10)).map((m) => done(m, false))],
  ['one alone (its step is cheaper)', false, async () => (await pop(TENANT, 'fq', 'p0', 10)).slice(3, 4).map((m) => done(m))],
  ['the last five of ten, out of order: ahead of the cursor, the lease kept', true, async () => (await pop(TENANT, 'fq', 'p0', 10)).slice(5).reverse().map((m) => done(m))],
  ['the first five after the last five: the cursor folds, the lease ends', true, async () => {
    const ms = await pop(TENANT, 'fq', 'p0', 10);
    await ack(ms.slice(5).map((m) => done(m)));
    return ms.slice(0, 5).map((m) => done(m));
  }],
  ['the rest after one failed: the lease ends with the failed one owed', true, async () => {
    const ms = await pop(TENANT, 'fq', 'p0', 10);
    await ack([{ ...done(ms[2]), status: 'failed' }]);
    return ms.filter((_, i) => i !== 2).map((m) => done(m));
  }],
  ['one of them failed', false, async () => (await pop(TENANT, 'fq', 'p0', 10)).map((m, i) => ({ ...done(m), status: i === 4 ? 'failed' : 'completed' }))],
  ['the same message twice', false, async () => { const ms = await pop(TENANT, 'fq', 'p0', 10); return [done(ms[0]), done(ms[1]), done(ms[0])]; }],
  ['another leaseId', false, async () => (await pop(TENANT, 'fq', 'p0', 10)).map((m) => ({ ...done(m), leaseId: m.partitionId.slice(0, 14) + '8000-8000-000000000000' }))],
  ['leaseIds that differ', false, async () => (await pop(TENANT, 'fq', 'p0', 10)).map((m, i) => done(m, i !== 0))],
  ['never popped', false, async () => {
    const ms = await pop(TENANT, 'fq', 'p0', 10);
    await ack(ms.map((m) => done(m)));
    const { rows } = await db.client.query(`SELECT id::text AS p FROM queen.partitions WHERE name = 'p0' AND queue_id = (SELECT id FROM queen.queues WHERE name = 'fq')`);
    return [11, 12].map((n) => ({ transactionId: `fq-p0-t${n}`, partitionId: rows[0].p, status: 'completed' }));
  }],
  ['one beyond the lease', false, async () => { const ms = await pop(TENANT, 'fq', 'p0', 10); return [...ms.map((m) => done(m)), { ...done(ms[0]), transactionId: 'fq-p0-t11' }]; }],
  ['an unknown transactionId', false, async () => { const ms = await pop(TENANT, 'fq', 'p0', 10); return [done(ms[0]), { ...done(ms[1]), transactionId: 'nope' }]; }],
  ['two partitions', false, async () => [...(await pop(TENANT, 'fq', 'p0', 3)), ...(await pop(TENANT, 'fq', 'p1', 3))].map((m) => done(m))],
  ['already acked', false, async () => { const ms = await pop(TENANT, 'fq', 'p0', 10); await ack(ms.slice(0, 5).map((m) => done(m))); return ms.slice(0, 5).map((m) => done(m)); }],
  ['an expired lease', false, async () => {
    const ms = await pop(TENANT, 'fq', 'p0', 10);
    await db.client.query(`UPDATE queen.partition_consumers SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE consumer_group = 'g'`);
    return ms.map((m) => done(m));
  }],
  ['another tenant\'s partition', false, async () => (await pop(OTHER, 'oq', 'p0', 5)).map((m) => done(m))],
];

/** The batch's answer, every group row as it left it (the lease as present or not), and which way it went; rolled back. */
async function run(fast: boolean, batch: () => Promise<Ack[]>) {
  const c = db.client;
  await c.query('BEGIN');
  try {
    await c.query(`SELECT set_config('queen.log_ack_fast_path', $1, true)`, [fast ? 'on' : 'off']);
    const acks = await batch();
    await c.query(`SET LOCAL track_functions = 'all'`);
    const before = Number((await c.query(`SELECT coalesce(pg_stat_get_xact_function_calls('queen.log_ack_step_of_v1'::regproc), 0) AS n`)).rows[0].n);
    const answer = await ack(acks);
    const steps = Number((await c.query(`SELECT coalesce(pg_stat_get_xact_function_calls('queen.log_ack_step_of_v1'::regproc), 0) AS n`)).rows[0].n) - before;
    const { rows } = await c.query(
      `SELECT p.name, c.cursor_seq, c.done_seqs, c.lease_id IS NOT NULL AS leased, c.lease_seqs, c.lease_failed, c.deliveries, c.completed, c.failures, c.dead_letters
         FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id ORDER BY p.name, p.id`,
    );
    return { answer, rows, steps };
  } finally {
    await c.query('ROLLBACK');
  }
}

test.each(cases)('%s: the same answer and row both ways (shortcut taken: %s)', async (_name, fast, batch) => {
  const general = await run(false, batch);
  const shortcut = await run(true, batch);
  expect({ answer: shortcut.answer, rows: shortcut.rows }).toEqual({ answer: general.answer, rows: general.rows });
  expect(general.steps).toBeGreaterThan(0);
  if (fast) expect(shortcut.steps).toBe(0);
  else expect(shortcut.steps).toBe(general.steps);
});
