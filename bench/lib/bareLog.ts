// The bare SQL a consumer of the log would write without the cell, the baseline the log's lanes
// are held to (bench:scale, bench:log): a keyset SELECT of the next batch past the group's cursor
// and the cursor's UPDATE, in one transaction. No lease, no counters, no fencing: the physical
// limit of "read ten messages, remember how far you got".
import type { Pool } from 'pg';

export const BARE_POP = {
  name: 'bare_pop',
  text: `SELECT seq, transaction_id, payload FROM queen.messages WHERE partition_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
};
export const BARE_CURSOR = {
  name: 'bare_cursor',
  text: `UPDATE queen.partition_consumers SET cursor_seq = $3, updated_at = now() WHERE partition_id = $1 AND consumer_group = $2`,
};

/** One batch: the messages past `cursor`, the cursor moved past them; answers how many and the new cursor. */
export async function barePopAck(pool: Pool, partitionId: string, group: string, cursor: number, batch = 10): Promise<{ n: number; top: number }> {
  const cl = await pool.connect();
  try {
    await cl.query('BEGIN');
    const { rows } = await cl.query({ ...BARE_POP, values: [partitionId, cursor, batch] });
    if (!rows.length) {
      await cl.query('COMMIT');
      return { n: 0, top: cursor };
    }
    const top = Number(rows[rows.length - 1].seq);
    await cl.query({ ...BARE_CURSOR, values: [partitionId, group, top] });
    await cl.query('COMMIT');
    return { n: rows.length, top };
  } finally {
    cl.release();
  }
}
