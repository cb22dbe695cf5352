// What a pop and its acks write to the group's row (queen.partition_consumers). An ack batch keeps
// each group's row in memory from one ack to the next and writes it once (queen.log_ack_batch_v2
// over queen.log_ack_step_of_v1): the same answers and the same rows as the acks sent one call each,
// with one row version for the batch instead of one per ack. A pop's lease id names its partition
// (queen.log_lease_id_v1), so no index holds lease_id and both writes are HOT updates
// (sql/migrations/058_lease_lookup.sql); a lease extend still finds every lease.
import { Client } from 'pg';
import { DEFAULT_TENANT } from '../../shared/config';
import { useApi } from '../support/api';
import { sql } from '../support/database';
import { call } from '../support/http';
import { ack, ackOf, configure, Message, pop, push } from './helpers';

const api = useApi();

/** Runs `work` in a transaction and answers how many updates of queen.partition_consumers it made, and how many were HOT. */
async function updates(work: (c: Client) => Promise<void>): Promise<{ n: number; hot: number }> {
  const c = new Client({ connectionString: api.databaseUrl });
  await c.connect();
  try {
    await c.query('BEGIN');
    await work(c);
    const { rows } = await c.query(`SELECT n_tup_upd::int AS n, n_tup_hot_upd::int AS hot FROM pg_stat_xact_user_tables WHERE relid = 'queen.partition_consumers'::regclass`);
    await c.query('COMMIT');
    return rows[0];
  } finally {
    await c.end();
  }
}

async function leased(queue: string, n: number): Promise<Message[]> {
  await configure(api.url, queue, { retryLimit: 3 });
  await push(api.url, Array.from({ length: n }, (_, i) => ({ queue, payload: i, transactionId: `${queue}-${i}` })));
  const got = await pop(api.url, queue, { batch: n });
  expect(got).toHaveLength(n);
  return got;
}

/** Every ack and refusal a lease can meet, in one order: out of order, twice, failed, after the lease ended, unknown. */
function script(m: Message[]) {
  const unknown = { ...ackOf(m[0]), transactionId: 'no-such-message' };
  return [ackOf(m[1]), ackOf(m[0]), ackOf(m[0]), { ...ackOf(m[2], 'failed'), error: 'boom' }, ackOf(m[3]), ackOf(m[4]), ackOf(m[2]), unknown];
}

/** The group's row and its failure rows, without the instants. */
async function state(queue: string) {
  const [row] = await sql(api.databaseUrl, `
    SELECT c.cursor_seq::int AS cursor, c.done_seqs::text AS done, c.lease_id IS NULL AS released, c.lease_seqs::text AS leased,
           c.lease_failed::text AS failed, c.deliveries::int, c.completed::int, c.failures::int, c.dead_letters::int,
           (SELECT json_agg(json_build_object('seq', f.seq, 'failures', f.failures, 'dead', f.dead_lettered_at IS NOT NULL) ORDER BY f.seq)
              FROM queen.message_failures f WHERE f.partition_id = c.partition_id AND f.consumer_group = c.consumer_group) AS failures_rows,
           EXISTS (SELECT 1 FROM queen.consumer_retry_at r WHERE r.partition_id = c.partition_id AND r.consumer_group = c.consumer_group) AS retry_gate
      FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id
     WHERE q.tenant_id = $1 AND q.name = $2`, [DEFAULT_TENANT, queue]);
  return row;
}

const strip = (answers: any[]) => answers.map(({ partitionId, transactionId, ...rest }) => rest);

test('a batch answers and leaves the rows as the same acks one call each', async () => {
  const one = await leased('ack-rows-one', 5);
  const alone = [];
  for (const a of script(one)) alone.push((await call(api.url, 'POST', '/api/v1/ack', a)).body);
  const many = await leased('ack-rows-batch', 5);
  const batch = await call(api.url, 'POST', '/api/v1/ack/batch', { acknowledgments: script(many) });
  expect(batch.status).toBe(200);
  expect(strip(batch.body.results)).toEqual(strip(alone));
  expect(batch.body.results.map((r: any) => r.ackReason ?? 'ok')).toEqual(['ok', 'ok', 'already_acked', 'ok', 'ok', 'ok', 'lease_expired', 'not_found']);
  expect(await state('ack-rows-batch')).toEqual(await state('ack-rows-one'));
});

test('ten acks of one lease write the group row once, a HOT update', async () => {
  const m = await leased('ack-rows-once', 10);
  const written = await updates(async (c) => {
    const { rows } = await c.query(`SELECT queen.log_ack_batch_body_v2($1, $2::jsonb) AS r`, [DEFAULT_TENANT, JSON.stringify({ acknowledgments: m.map((x) => ackOf(x)) })]);
    expect(rows[0].r.every((r: any) => r.ok === true)).toBe(true);
  });
  expect(written).toEqual({ n: 1, hot: 1 });
  expect(await state('ack-rows-once')).toMatchObject({ cursor: 10, released: true, completed: 10 });
  // Released: the next pop of the group finds nothing left, and an ack again is already_acked.
  expect(await pop(api.url, 'ack-rows-once')).toEqual([]);
  expect((await ack(api.url, m[9])).body).toMatchObject({ ok: false, ackReason: 'already_acked' });
});

test('a pop writes its lease as a HOT update, under a lease id that names the partition', async () => {
  await push(api.url, [{ queue: 'lease-hot', payload: 1 }, { queue: 'lease-hot', payload: 2 }]);
  // The group's row exists (a group that read the partition before): the pop's one write is the lease.
  const [first] = await pop(api.url, 'lease-hot', { batch: 1 });
  expect((await ack(api.url, first)).body.ok).toBe(true);
  let leased: any[] = [];
  const written = await updates(async (c) => {
    leased = (await c.query(`SELECT queen.log_pop_v2($1, 'lease-hot', NULL, NULL, 1) AS m`, [DEFAULT_TENANT])).rows[0].m;
  });
  expect(leased).toHaveLength(1);
  expect(written).toEqual({ n: 1, hot: 1 });
  const [m] = leased;
  expect(m.leaseId.slice(14, 15)).toBe('8');
  expect(m.leaseId.replace(/-/g, '').slice(0, 12)).toBe(m.partitionId.replace(/-/g, '').slice(0, 12));
  const extended = await call(api.url, 'POST', `/api/v1/lease/${m.leaseId}/extend`, { seconds: 600 });
  expect(extended.body).toMatchObject({ ok: true, leaseId: m.leaseId });
});

test('a lease id of another shape (a pop from before 058) is still found by an extend, v2 and v1', async () => {
  await push(api.url, [{ queue: 'lease-old', payload: 1 }]);
  const [m] = await pop(api.url, 'lease-old');
  const old = '0b7c8d2e-1f3a-4b5c-9d6e-7f8091a2b3c4';
  await sql(api.databaseUrl, `UPDATE queen.partition_consumers SET lease_id = $1 WHERE partition_id = $2`, [old, m.partitionId]);
  expect((await call(api.url, 'POST', `/api/v1/lease/${old}/extend`, { seconds: 600 })).body).toMatchObject({ ok: true, leaseId: old });
  const [v1] = await sql(api.databaseUrl, `SELECT queen.log_extend_lease_v1($1, $2, 60) AS r`, [DEFAULT_TENANT, old]);
  expect(v1.r).toMatchObject({ ok: true, leaseId: old });
  // The pop's own id no longer names a lease: refused as an expired one, by both.
  expect((await call(api.url, 'POST', `/api/v1/lease/${m.leaseId}/extend`, {})).body).toMatchObject({ ok: false, reason: 'lease_expired' });
  expect((await call(api.url, 'POST', '/api/v1/ack', { ...ackOf(m), leaseId: old })).body).toMatchObject({ ok: true });
});

test('a pop and its acks leave the row\'s tail (updated_at) as it was, so their HOT updates log only what changed', async () => {
  const queue = 'lease-tail';
  await push(api.url, [1, 2, 3].map((payload) => ({ queue, payload })));
  const tail = async () => (await sql(api.databaseUrl, `
    SELECT c.updated_at::text AS at FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
      JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1 AND q.name = $2`, [DEFAULT_TENANT, queue]))[0].at;
  const [first] = await pop(api.url, queue, { batch: 1 });
  const before = await tail();
  expect((await ack(api.url, first)).body.ok).toBe(true);
  const rest = await pop(api.url, queue, { batch: 2 });
  expect(rest).toHaveLength(2);
  const batch = await call(api.url, 'POST', '/api/v1/ack/batch', { acknowledgments: rest.map((m) => ackOf(m)) });
  expect(batch.body.results.map((r: any) => r.ok)).toEqual([true, true]);
  expect(await state(queue)).toMatchObject({ cursor: 3, released: true, deliveries: 3, completed: 3 });
  expect(await tail()).toBe(before);
});
