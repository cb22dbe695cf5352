// queen.sweeper_pass_v1 is 0.1.0's pass, which that release's sweepers call during a rolling
// upgrade (docs/deploy.md). It shares its body with queen.sweeper_pass_v4 (sql/functions/sweeper.sql),
// so these hold it to what 0.1.0 did: its answer's keys and no others, its fire (no seal mark, no
// trace context), no message removed whatever a queue's retention says, its shard claims held until
// commit, and an empty pass committed without waiting for the WAL flush.
import { DEFAULT_TENANT } from '../../shared/config';
import { useDatabase } from '../support/database';

const db = useDatabase({ client: true });

const V1_KEYS = [
  'claimedAtUs', 'duplicates', 'finishedAtUs', 'fireEnabled', 'fireFull', 'fireSeconds', 'fired',
  'maxLateSeconds', 'nextDueInMs', 'pruneFull', 'pruneSeconds', 'pruned', 'shards', 'since',
];
const V4_KEYS = [
  ...V1_KEYS, 'removed', 'removedBytes', 'removedGroups', 'removedPartitions', 'removedUnfinished', 'settledPartitions',
  'retainFull', 'retainQueues', 'retainSeconds',
].sort();

/** One pass in a transaction of its own on the suite's client, and the synchronous_commit it left (the server's is off: set on first). */
async function pass(call: string): Promise<{ r: Record<string, any>; commit: string }> {
  await db.client.query('BEGIN');
  try {
    await db.client.query('SET LOCAL synchronous_commit = on');
    const { rows } = await db.client.query(`SELECT ${call} AS r`);
    const commit = (await db.client.query('SHOW synchronous_commit')).rows[0].synchronous_commit;
    await db.client.query('COMMIT');
    return { r: rows[0].r, commit };
  } catch (e) {
    await db.client.query('ROLLBACK');
    throw e;
  }
}

async function count(text: string, values: unknown[] = []): Promise<number> {
  return (await db.pool.query(`SELECT count(*)::int AS n FROM ${text}`, values)).rows[0].n;
}

test('an empty pass answers 0.1.0 keys alone and does not wait for the WAL flush; v4 adds its own', async () => {
  const v1 = await pass(`queen.sweeper_pass_v1(NULL, 'v1', 64, 100, 100, true)`);
  expect(Object.keys(v1.r).sort()).toEqual(V1_KEYS);
  expect(v1.r).toMatchObject({ fired: 0, duplicates: 0, pruned: 0, fireFull: false, pruneFull: false, fireEnabled: true, nextDueInMs: null });
  expect(v1.r.shards).toHaveLength(64);
  expect(v1.commit).toBe('off');
  await db.pool.query('UPDATE queen.sweeper_shards SET last_swept_at = NULL');
  const v4 = await pass(`queen.sweeper_pass_v4(NULL, 'v4', 64, 100, 100, true, 0, 0)`);
  expect(Object.keys(v4.r).sort()).toEqual(V4_KEYS);
  expect(v4.commit).toBe('off');
});

test("v1 holds its shard claims until commit: another pass meanwhile skips them", async () => {
  await db.pool.query('UPDATE queen.sweeper_shards SET last_swept_at = NULL');
  await db.client.query('BEGIN');
  try {
    const held = (await db.client.query(`SELECT queen.sweeper_pass_v1(NULL, 'a', 8, 100, 100, true) AS r`)).rows[0].r.shards as number[];
    expect(held).toHaveLength(8);
    const other = (await db.pool.query(`SELECT queen.sweeper_pass_v1(NULL, 'b', 64, 100, 100, true) AS r`)).rows[0].r.shards as number[];
    expect(other).toHaveLength(56);
    expect(other.filter((s) => held.includes(s))).toEqual([]);
  } finally {
    await db.client.query('COMMIT');
  }
});

test('v1 fires as 0.1.0 did and prunes, removes no message past its retention, and keeps the synchronous commit', async () => {
  await db.pool.query('UPDATE queen.sweeper_shards SET last_swept_at = NULL');
  await db.pool.query(`SELECT queen.log_configure_v2($1::uuid, '{"queue": "v1-kept", "options": {"retentionSeconds": 60}}', false)`, [DEFAULT_TENANT]);
  await db.pool.query(`SELECT queen.log_push_v1($1::uuid, 'v1-kept', NULL, '{"old": true}', NULL)`, [DEFAULT_TENANT]);
  await db.pool.query(`UPDATE queen.messages m SET created_at = m.created_at - interval '2 hours'
                         FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
                        WHERE p.id = m.partition_id AND q.name = 'v1-kept'`);
  const scheduled = await db.pool.query(`SELECT queen.timers_apply_v1($1::uuid, '[{"op": "schedule", "queue": "v1-fired", "payload": 1, "delaySeconds": 3600}]') AS r`, [DEFAULT_TENANT]);
  const timerId = scheduled.rows[0].r[0].timerId as string;
  await db.pool.query(`UPDATE queen.log_timers SET deliver_at = now() - interval '1 second',
                         trace_id = '0af76519-16cd-43dd-8448-eb211c80319c', span_id = '\\xb7ad6b7169203331'::bytea
                       WHERE timer_id = $1`, [timerId]);
  await db.pool.query(`SELECT queen.kv_apply_at_v1($1::uuid, '[{"op": "put", "ns": "v1", "key": "gone", "value": 1, "ttlSeconds": 60}]', false, now() - interval '1 hour')`, [DEFAULT_TENANT]);

  const v1 = await pass(`queen.sweeper_pass_v1(NULL, 'v1', 64, 100, 100, true)`);
  expect(Object.keys(v1.r).sort()).toEqual(V1_KEYS);
  expect(v1.r).toMatchObject({ fired: 1, duplicates: 0, pruned: 1, fireFull: false, pruneFull: false });
  expect(v1.commit).toBe('on');
  const fired = await db.pool.query(`SELECT m.trace_id, m.span_id, EXISTS (SELECT 1 FROM queen.sealed_messages s WHERE s.partition_id = m.partition_id AND s.seq = m.seq) AS sealed
                                       FROM queen.messages m WHERE m.transaction_id = $1`, [`timer:${timerId}`]);
  expect(fired.rows).toEqual([{ trace_id: null, span_id: null, sealed: false }]);
  const kept = `queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'v1-kept'`;
  expect(await count(kept)).toBe(1);

  // The same shards swept by v4 remove it: what v1 left was v1's rule, not a message kept anyway.
  await db.pool.query('UPDATE queen.sweeper_shards SET last_swept_at = NULL');
  const v4 = await pass(`queen.sweeper_pass_v4(NULL, 'v4', 64, 100, 100, true, 0, 0)`);
  expect(v4.r).toMatchObject({ fired: 0, pruned: 0, removed: 1 });
  expect(v4.commit).toBe('on');
  expect(await count(kept)).toBe(0);
});
