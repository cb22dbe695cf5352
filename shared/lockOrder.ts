// The lock order of the cell, in one place. A transaction that touches more than one lock space
// takes them in this order and no other, so two such transactions can never wait on each other in
// a circle:
//   1. kv          queen.kv rows, in ascending (namespace, key) COLLATE "C" order (kv_apply_v1)
//   2. timers      queen.log_timers rows (the timers surface and the sweeper's fire)
//   3. partitions  queen.partitions rows (push), then queen.partition_consumers rows (ack), each in
//                  ascending order (log_apply_v1)
// Within a space, the SQL procedure that owns it sorts its own rows. The sweeper's fire takes
// timers, then partitions (queen.log_push_v1), which is this order too.
import type { Pool, PoolClient } from 'pg';

export const LOCK_SPACES = ['kv', 'timers', 'partitions'] as const;
export type LockSpace = (typeof LOCK_SPACES)[number];

/** What a transaction does in one lock space; absent when it does not touch that space. */
export type LockStep<T> = (client: PoolClient) => Promise<T>;
export type LockSteps<T> = Partial<Record<LockSpace, LockStep<T>>>;

/**
 * Runs `steps` in one PostgreSQL transaction on a client of `pool`, in lock order whatever order the
 * caller wrote them in, and commits; any throw rolls everything back and is rethrown. Answers each
 * space's result by name.
 */
export async function inLockOrder<T>(pool: Pool, steps: LockSteps<T>): Promise<Partial<Record<LockSpace, T>>> {
  const client = await pool.connect();
  const results: Partial<Record<LockSpace, T>> = {};
  let broken = false;
  try {
    await client.query('BEGIN');
    for (const space of LOCK_SPACES) {
      const step = steps[space];
      if (step) results[space] = await step(client);
    }
    await client.query('COMMIT');
    return results;
  } catch (err) {
    try {
      await client.query('ROLLBACK');
    } catch {
      // The connection itself failed: do not hand it back to the pool.
      broken = true;
    }
    throw err;
  } finally {
    client.release(broken);
  }
}
