// kvOn(pgClient): the KV and the ack on the caller's own PostgreSQL transaction. The caller's rows,
// the marker and the ack commit together, or roll back together; the answers are the HTTP
// surface's, because the SQL is the same.
import { testPool } from '../support/database';
import { QueenError, type Message } from '@queen-kv/client';
import { kvOn } from '@queen-kv/client/pg';
import { useCell } from './helpers';

const cell = useCell({}, {}, { client: true });
beforeAll(async () => {
  await cell.api.client.query('CREATE TABLE charges (order_id text PRIMARY KEY, charge_id text NOT NULL)');
});

async function leased(queue: string): Promise<Message<{ orderId: string }>> {
  await cell.queen.queue(queue).push([{ data: { orderId: `${queue}-1` } }]);
  const [m] = await cell.queen.queue(queue).group('billing').pop<{ orderId: string }>();
  return m;
}

const chargeRows = async (orderId: string) => (await cell.api.client.query('SELECT charge_id FROM charges WHERE order_id = $1', [orderId])).rows;

test("commits with the caller's transaction: business row, marker and ack together", async () => {
  const message = await leased('pg-commit');
  const orderId = message.data.orderId as string;
  await cell.api.client.query('BEGIN');
  await cell.api.client.query('INSERT INTO charges (order_id, charge_id) VALUES ($1, $2)', [orderId, 'ch_1']);
  const marker = await kvOn(cell.api.client).once('charges', `charge:${orderId}`, { ttlSeconds: 86400, value: { chargeId: 'ch_1' } });
  expect(marker).toMatchObject({ won: true, applied: true, value: { chargeId: 'ch_1' } });
  const ack = await kvOn(cell.api.client).ack(message, 'completed');
  expect(ack).toMatchObject({ success: true, status: 'completed', consumerGroup: 'billing' });
  // Nothing is visible outside the transaction before it commits.
  expect(await cell.queen.kv.get('charges', `charge:${orderId}`)).toMatchObject({ found: false });
  await cell.api.client.query('COMMIT');

  expect(await chargeRows(orderId)).toEqual([{ charge_id: 'ch_1' }]);
  expect(await cell.queen.kv.get('charges', `charge:${orderId}`)).toMatchObject({ found: true, value: { chargeId: 'ch_1' } });
  expect(await cell.queen.queue('pg-commit').group('billing').pop()).toEqual([]);
});

test("rolls back with the caller's transaction: no row, no marker, the message still ours to ack", async () => {
  const message = await leased('pg-rollback');
  const orderId = message.data.orderId as string;
  await cell.api.client.query('BEGIN');
  await cell.api.client.query('INSERT INTO charges (order_id, charge_id) VALUES ($1, $2)', [orderId, 'ch_2']);
  expect(await kvOn(cell.api.client).once('charges', `charge:${orderId}`, { ttlSeconds: 86400 })).toMatchObject({ won: true });
  expect(await kvOn(cell.api.client).incr('counters', 'charges', 1, { forever: true })).toMatchObject({ applied: true, value: 1 });
  expect(await kvOn(cell.api.client).ack(message)).toMatchObject({ success: true });
  await cell.api.client.query('ROLLBACK');

  expect(await chargeRows(orderId)).toEqual([]);
  expect(await cell.queen.kv.get('charges', `charge:${orderId}`)).toMatchObject({ found: false });
  expect(await cell.queen.kv.get('counters', 'charges')).toMatchObject({ found: false });
  // The ack rolled back with it: the message is still leased to us, and a plain ack takes it.
  expect(await cell.queen.ack(message, 'completed')).toMatchObject({ success: true });
});

test('a lost required marker is the HTTP verdict, and PostgreSQL has aborted the transaction', async () => {
  await cell.queen.kv.putIfAbsent('charges', 'charge:dup', { chargeId: 'ch_winner' }, { ttlSeconds: 600 });
  await cell.api.client.query('BEGIN');
  await cell.api.client.query(`INSERT INTO charges (order_id, charge_id) VALUES ('dup', 'ch_loser')`);
  const verdict = await kvOn(cell.api.client).batch([
    { op: 'get', ns: 'charges', key: 'other' },
    { op: 'putIfAbsent', ns: 'charges', key: 'charge:dup', value: { chargeId: 'ch_loser' }, ttlSeconds: 600, required: true },
  ]);
  expect(verdict).toMatchObject({ success: false, reason: 'kv_precondition', failedIndex: 1, kvReason: 'exists', value: { chargeId: 'ch_winner' } });
  await expect(cell.api.client.query('SELECT 1')).rejects.toThrow(/current transaction is aborted/);
  await cell.api.client.query('ROLLBACK');
  expect(await chargeRows('dup')).toEqual([]);
  // The same answer the cell's POST /api/v1/kv gives for the same batch.
  const http = await cell.queen.kv.batch([
    { op: 'get', ns: 'charges', key: 'other' },
    { op: 'putIfAbsent', ns: 'charges', key: 'charge:dup', value: { chargeId: 'ch_loser' }, ttlSeconds: 600, required: true },
  ]);
  expect(verdict).toEqual(http);
});

test('an ack that cannot apply is a value, and aborts the transaction beside it', async () => {
  const message = await leased('pg-acked');
  expect(await cell.queen.ack(message)).toMatchObject({ success: true });
  await cell.api.client.query('BEGIN');
  await cell.api.client.query(`INSERT INTO charges (order_id, charge_id) VALUES ('acked', 'ch_3')`);
  expect(await kvOn(cell.api.client).ack(message)).toEqual({ success: false, reason: 'ack_failed', failedIndex: 0, ackReason: 'already_acked' });
  await expect(cell.api.client.query('SELECT 1')).rejects.toThrow(/current transaction is aborted/);
  await cell.api.client.query('ROLLBACK');
  expect(await chargeRows('acked')).toEqual([]);
});

test('the same rules and answers as the HTTP surface: numbers, refusals, reads', async () => {
  await cell.api.client.query('BEGIN');
  try {
    const kv = kvOn(cell.api.client);
    expect(await kv.put('pgnum', 'n', 9007199254740993n, { forever: true })).toMatchObject({ applied: true, value: 9007199254740993n });
    expect((await kv.incr('pgnum', 'n', 1, { forever: true })).value).toBe(9007199254740994n);
    const refused = await kv.put('pgnum', 'm', 1, {} as never).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(QueenError);
    expect(refused).toMatchObject({ status: 400, code: 'kv_expiry_not_specified', index: 0 });
  } finally {
    await cell.api.client.query('ROLLBACK');
  }
  await cell.queen.kv.put('pgread', 'a', { x: 1 }, { ttlSeconds: 600 });
  await cell.queen.kv.put('pgread', 'b', [true], { ttlSeconds: 600 });
  const kv = kvOn(cell.api.client);
  expect(await kv.get('pgread', 'a')).toEqual(await cell.queen.kv.get('pgread', 'a'));
  expect(await kv.getMany('pgread', ['b', 'zz'])).toEqual(await cell.queen.kv.getMany('pgread', ['b', 'zz']));
  const walk = async (it: AsyncIterable<unknown>) => {
    const out = [];
    for await (const page of it) out.push(page);
    return out;
  };
  expect(await walk(kv.getPrefix('pgread', '', { limit: 1 })).catch((e: unknown) => e)).toMatchObject({ code: 'kv_prefix_required' });
  expect(await walk(kv.getPrefix('pgread', '', { limit: 1 })).catch((e: unknown) => e)).toEqual(
    await walk(cell.queen.kv.getPrefix('pgread', '', { limit: 1 })).catch((e: unknown) => e),
  );
  expect(await walk(kv.getPrefix('pgread', 'a', { limit: 1 }))).toEqual(await walk(cell.queen.kv.getPrefix('pgread', 'a', { limit: 1 })));
});

test('a pool is refused: each of its queries may take another connection, never the transaction', async () => {
  const pool = testPool(cell.api.databaseUrl, 1);
  try {
    expect(() => kvOn(pool)).toThrow(/not the pool/);
    const held = await pool.connect();
    try {
      expect(await kvOn(held).get('pgread', 'a')).toMatchObject({ found: true });
    } finally {
      held.release();
    }
  } finally {
    await pool.end();
  }
});
