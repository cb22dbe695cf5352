// queen.log_push_fast_v1 is a shortcut: one plainly valid item to an existing queue and partition
// (through queen.log_push_request_v1, the entry POST /api/v1/push calls), and each item of a
// request log_push_items_v1 has validated and locked; log_push_items_v1's checks and log_push_v1
// stay the one definition of every rule. This suite holds the paths to the same answers and the
// same rows: every push below runs once with the shortcut off (SET LOCAL queen.log_fast_path = off)
// and once with it on, from the same state, through the route's own statement, and what a caller
// sees (the answer's text, byte for byte, or the refusal's SQLSTATE, message and detail) and what
// is stored must be identical. Each case also says which path it must take with the shortcut on
// (counted with track_functions), so a guard that declined everything could not pass unnoticed.
// The pushes sit on both sides of every edge of the guard.
import { Client, Notification } from 'pg';
import { LOG_PUSH } from '../../shared/sql/log';
import { createTestDatabase } from '../support/database';

let db: { url: string; drop(): Promise<void> };
let client: Client;

const long = (n: number, c = 'q') => c.repeat(n);
/** The tenant of a cell with tenancy off (shared/config.ts). */
const TENANT = '00000000-0000-0000-0000-000000000001';

beforeAll(async () => {
  db = await createTestDatabase();
  client = new Client({ connectionString: db.url });
  await client.connect();
  await client.query(`SET track_functions = 'all'`);
  // Fixtures through the general path: queues and partitions as a first push creates them.
  const fixtures = [
    { queue: 'orders', payload: { n: 0 }, transactionId: 'dup-1' },
    { queue: 'orders', partition: 'p1', payload: { n: 1 } },
    { queue: long(128), payload: 1 },
    { queue: 'a_b.c:d-e', partition: long(128, 'p'), payload: 2 },
  ];
  await client.query(`SELECT queen.log_push_items_v1($1::uuid, $2::jsonb)`, [TENANT, JSON.stringify(fixtures)]);
});

afterAll(async () => {
  await client.end();
  await db.drop();
});

type Path = 'fast' | 'items, each fast' | 'general';
type Outcome = { answer: string; rows: unknown; path: Path } | { error: { code?: string; message: string; detail?: string } };

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** What the database holds, with partition ids and generated transactionIds named by position, not value. */
async function state(generated: Set<string>): Promise<unknown> {
  const { rows } = await client.query(
    `SELECT q.name AS queue, q.lease_time, q.retry_limit, p.name AS partition, p.last_seq,
            (SELECT coalesce(jsonb_agg(jsonb_build_array(m.seq, m.transaction_id, m.payload, m.created_at = now()) ORDER BY m.seq), '[]')
               FROM queen.messages m WHERE m.partition_id = p.id) AS messages
       FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id ORDER BY q.name COLLATE "C", p.name COLLATE "C"`,
  );
  return JSON.parse(JSON.stringify(rows), (_k, v) => (typeof v === 'string' && generated.has(v) ? 'generated' : v));
}

async function run(body: string, fast: boolean): Promise<Outcome> {
  await client.query('BEGIN');
  try {
    await client.query(`SELECT set_config('queen.log_fast_path', $1, true)`, [fast ? 'on' : 'off']);
    // Generated transactionIds and the ids of partitions created here differ between the runs.
    const fixed = new Set((await client.query(`SELECT id::text FROM queen.partitions`)).rows.map((r) => r.id));
    const generalCalls = `SELECT coalesce(pg_stat_get_xact_function_calls('queen.log_push_items_v1'::regproc), 0)::int AS items,
                                 coalesce(pg_stat_get_xact_function_calls('queen.log_push_v1'::regproc), 0)::int AS one`;
    const callsBefore = (await client.query(generalCalls)).rows[0];
    const { rows } = await client.query({ text: LOG_PUSH.text, values: [TENANT, body] });
    const answer = rows[0].results as string;
    const callsAfter = (await client.query(generalCalls)).rows[0];
    const generated = new Set<string>();
    const parsed = JSON.parse(answer);
    for (const a of parsed) {
      if (UUID.test(a.transaction_id) && !body.includes(a.transaction_id)) generated.add(a.transaction_id);
      // A message's id derives from its partition's: a partition created here makes it differ too.
      if (!fixed.has(a.partition_id)) generated.add(a.partition_id).add(a.message_id);
    }
    let text = answer;
    for (const g of generated) text = text.split(g).join('generated');
    return { answer: text, rows: await state(generated), path: callsAfter.items === callsBefore.items ? 'fast' : callsAfter.one === callsBefore.one ? 'items, each fast' : 'general' };
  } catch (err) {
    const e = err as { code?: string; message: string; detail?: string };
    return { error: { code: e.code, message: e.message, detail: e.detail } };
  } finally {
    await client.query('ROLLBACK');
  }
}

const item = (fields: Record<string, unknown>) => JSON.stringify({ items: [fields] });
// [name, request body text, the path taken with the shortcut on: 'fast' (log_push_request_v1 alone),
// 'items, each fast' (log_push_items_v1 validating and creating, the fast path storing each item),
// 'general' (log_push_v1 storing), 'refused' (the general path, refusing)]
const cases: Array<[string, string, Path | 'refused']> = [
  ['a plain item to an existing queue', item({ queue: 'orders', payload: { a: 1 } }), 'fast'],
  ['to an existing named partition', item({ queue: 'orders', partition: 'p1', payload: [1, 2] }), 'fast'],
  ['partition "Default" spelled out', item({ queue: 'orders', partition: 'Default', payload: 1 }), 'fast'],
  ['partition null', item({ queue: 'orders', partition: null, payload: 1 }), 'fast'],
  ['a new transactionId', item({ queue: 'orders', payload: 1, transactionId: 'tx-new' }), 'fast'],
  ['a duplicate transactionId', item({ queue: 'orders', payload: 1, transactionId: 'dup-1' }), 'fast'],
  ['a transactionId in another partition', item({ queue: 'orders', partition: 'p1', payload: 1, transactionId: 'dup-1' }), 'fast'],
  ['transactionId null', item({ queue: 'orders', payload: 1, transactionId: null }), 'fast'],
  ['a transactionId of 256 bytes', item({ queue: 'orders', payload: 1, transactionId: 'é'.repeat(128) }), 'fast'],
  ['a transactionId of 257 bytes', item({ queue: 'orders', payload: 1, transactionId: 'x' + 'é'.repeat(128) }), 'refused'],
  ['an empty transactionId', item({ queue: 'orders', payload: 1, transactionId: '' }), 'refused'],
  ['a numeric transactionId', item({ queue: 'orders', payload: 1, transactionId: 5 }), 'refused'],
  ['a transactionId with the sweeper\'s prefix timer:', item({ queue: 'orders', payload: 1, transactionId: 'timer:6f1c2a3b-0000-4000-8000-000000000001' }), 'refused'],
  ['a transactionId with timer: inside, not as a prefix', item({ queue: 'orders', payload: 1, transactionId: 'my-timer:1' }), 'fast'],
  ['a transactionId that looks generated', item({ queue: 'orders', payload: 1, transactionId: '6f1c2a3b-0000-4000-8000-000000000001' }), 'fast'],
  ['no payload', item({ queue: 'orders' }), 'fast'],
  ['a null payload', item({ queue: 'orders', payload: null }), 'fast'],
  ['a payload with numbers that must not narrow', '{"items":[{"queue":"orders","payload":{"big":12345678901234567890123,"f":1.50,"e":1e400}}]}', 'fast'],
  ['an unknown field in the item', item({ queue: 'orders', payload: 1, extra: true }), 'fast'],
  ['an unknown field in the body', '{"items":[{"queue":"orders","payload":1}],"other":1}', 'fast'],
  ['a queue of 128 characters', item({ queue: long(128), payload: 1 }), 'fast'],
  ['a partition of 128 characters, punctuation', item({ queue: 'a_b.c:d-e', partition: long(128, 'p'), payload: 1 }), 'fast'],
  ['a new queue', item({ queue: 'fresh', payload: 1 }), 'items, each fast'],
  ['a new partition of an existing queue', item({ queue: 'orders', partition: 'p9', payload: 1 }), 'items, each fast'],
  ['a queue of 129 characters', item({ queue: long(129), payload: 1 }), 'refused'],
  ['a queue starting with a dot', item({ queue: '.orders', payload: 1 }), 'refused'],
  ['a queue with a trailing newline', item({ queue: 'orders\n', payload: 1 }), 'refused'],
  ['a queue with a space', item({ queue: 'or ders', payload: 1 }), 'refused'],
  ['an empty queue', item({ queue: '', payload: 1 }), 'refused'],
  ['a numeric queue', item({ queue: 7, payload: 1 }), 'refused'],
  ['a null queue', item({ queue: null, payload: 1 }), 'refused'],
  ['no queue', item({ payload: 1 }), 'refused'],
  ['a partition of 129 characters', item({ queue: 'orders', partition: long(129, 'p'), payload: 1 }), 'refused'],
  ['a partition starting with a dash', item({ queue: 'orders', partition: '-p', payload: 1 }), 'refused'],
  ['an empty partition', item({ queue: 'orders', partition: '', payload: 1 }), 'refused'],
  ['a numeric partition', item({ queue: 'orders', partition: 1, payload: 1 }), 'refused'],
  ['an item that is not an object', '{"items":["orders"]}', 'refused'],
  ['an item that is null', '{"items":[null]}', 'refused'],
  ['no items', '{"items":[]}', 'refused'],
  ['items that are not an array', '{"items":{"queue":"orders","payload":1}}', 'refused'],
  ['items missing', '{}', 'refused'],
  ['a body that is an array', '[{"queue":"orders","payload":1}]', 'refused'],
  ['two items', JSON.stringify({ items: [{ queue: 'orders', payload: 1 }, { queue: 'orders', partition: 'p1', payload: 2 }] }), 'items, each fast'],
  ['three items, a new queue among them, partition null and absent', JSON.stringify({ items: [{ queue: 'orders', payload: 1, partition: null }, { queue: 'fresh', payload: 2, transactionId: 'dup-1' }, { queue: 'orders', payload: 3, transactionId: 'dup-1' }] }), 'items, each fast'],
  ['two items, the second refused', JSON.stringify({ items: [{ queue: 'orders', payload: 1 }, { queue: '', payload: 2 }] }), 'refused'],
  ['two items with one transactionId', JSON.stringify({ items: [{ queue: 'orders', payload: 1, transactionId: 't' }, { queue: 'orders', payload: 2, transactionId: 't' }] }), 'items, each fast'],
  [
    'a run of two, another partition, then the first again with the run\'s transactionId',
    JSON.stringify({ items: [{ queue: 'orders', payload: 1 }, { queue: 'orders', payload: 2, transactionId: 'r' }, { queue: 'orders', partition: 'p1', payload: 3 }, { queue: 'orders', payload: 4, transactionId: 'r' }] }),
    'items, each fast',
  ],
];

describe('the push fast path answers exactly as the general path', () => {
  test.each(cases)('%s', async (_name, body, expected) => {
    const general = await run(body, false);
    const fast = await run(body, true);
    if ('error' in general) {
      expect(expected).toBe('refused');
      expect(general.error.code).toBe('QK400');
      expect(fast).toEqual(general);
      return;
    }
    expect(general.path).toBe('general');
    expect(fast).toEqual({ ...general, path: expected });
  });
});

describe('the push fast path, committed', () => {
  test('stores in seq order, wakes listeners, and a repeated transactionId stores nothing', async () => {
    const notified: Notification[] = [];
    const onNotification = (n: Notification) => notified.push(n);
    client.on('notification', onNotification);
    await client.query('LISTEN queen_log');
    try {
      const push = async (fields: Record<string, unknown>) => JSON.parse((await client.query({ ...LOG_PUSH, values: [TENANT, item(fields)] })).rows[0].results);
      const before = Number((await client.query(`SELECT p.last_seq FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'orders' AND p.name = 'Default'`)).rows[0].last_seq);
      const first = await push({ queue: 'orders', payload: 'a', transactionId: 'committed-1' });
      const second = await push({ queue: 'orders', payload: 'b' });
      const again = await push({ queue: 'orders', payload: 'c', transactionId: 'committed-1' });
      expect(first).toEqual([expect.objectContaining({ transaction_id: 'committed-1', queueName: 'orders', partition: 'Default', status: 'queued' })]);
      expect(second).toEqual([expect.objectContaining({ transaction_id: expect.stringMatching(UUID), status: 'queued' })]);
      expect(again).toEqual([{ ...first[0], status: 'duplicate' }]);
      const { rows } = await client.query(
        `SELECT m.seq::int, m.transaction_id, m.payload FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
          JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'orders' AND p.name = 'Default' AND m.seq > $1 ORDER BY m.seq`,
        [before],
      );
      expect(rows).toEqual([
        { seq: before + 1, transaction_id: 'committed-1', payload: 'a' },
        { seq: before + 2, transaction_id: second[0].transaction_id, payload: 'b' },
      ]);
      // Notifications are delivered at commit; a round trip after the pushes has them all in hand.
      await client.query('SELECT 1');
      expect(notified.map((n) => [n.channel, n.payload])).toEqual([
        ['queen_log', `${TENANT}/orders`],
        ['queen_log', `${TENANT}/orders`],
      ]);
    } finally {
      await client.query('UNLISTEN queen_log');
      client.off('notification', onNotification);
    }
  });
});
