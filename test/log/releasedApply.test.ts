// Release 0.1.0's transaction wire, configure and dead letters (queen.log_apply_v1,
// queen.log_configure_v1, queen.log_dead_letters_v1) run beside their 0.2 successors during a
// rolling upgrade, over one body each with them: these hold the 0.1.0 names to what 0.1.0 answered
// and refused, in its order, where 0.2 answers otherwise (no tenant-move gate, no queue option of 0.2,
// no trace context or sealed mark in a dead letter).
import { useDatabase } from '../support/database';

const TENANT = '00000000-0000-0000-0000-000000000001';
const MOVING = '00000000-0000-0000-0000-0000000000c3';

const db = useDatabase();

type Refusal = { raised: string; message: string; code?: string; index?: number | null };

/** The function's answer, or what it raised: the SQLSTATE, the message and the detail's fields. */
async function run(text: string, values: unknown[]): Promise<any> {
  try {
    const { rows } = await db.pool.query(`SELECT ${text} AS r`, values);
    return rows[0].r;
  } catch (e) {
    const err = e as { code: string; message: string; detail?: string };
    return { raised: err.code, message: err.message, ...(err.detail ? JSON.parse(err.detail) : {}) } satisfies Refusal;
  }
}

const configureV1 = (body: unknown, tenant = TENANT) => run(`queen.log_configure_v1($1, $2::jsonb)`, [tenant, JSON.stringify(body)]);
const configureV2 = (body: unknown, tenant = TENANT) => run(`queen.log_configure_v2($1, $2::jsonb, true)`, [tenant, JSON.stringify(body)]);
const applyV1 = (ops: unknown, tenant = TENANT) => run(`queen.log_apply_v1($1, $2::jsonb)`, [tenant, JSON.stringify(ops)]);
const applyV2 = (ops: unknown, tenant = TENANT) => run(`queen.log_apply_v2($1, $2::jsonb)`, [tenant, JSON.stringify(ops)]);
const pop = (queue: string): Promise<{ transactionId: string; partitionId: string; leaseId: string }[]> =>
  run(`queen.log_pop_v2($1, $2, NULL, 'g', 10)`, [TENANT, queue]);

beforeAll(async () => {
  await db.pool.query(`INSERT INTO queen.tenant_moves (tenant_id, role, peer, step) VALUES ($1, 'source', 'http://peer', 'paused')`, [MOVING]);
});

const neutralV1 = {
  priority: 0, delayedProcessing: 0, windowBuffer: 0, maxSize: 0, ttl: 0, retryDelay: 0, retentionSeconds: 0,
  completedRetentionSeconds: 0, maxWaitTimeSeconds: 0, retentionEnabled: false, encryptionEnabled: false,
  deadLetterQueue: true, dlqAfterMaxRetries: true,
};

describe('log_configure_v1', () => {
  test('a new queue: 0.1.0\'s answer, every option of 0.2 at its neutral value; an omitted option keeps its value', async () => {
    expect(await configureV1({ queue: 'r-conf', namespace: null, options: { retryDelay: 0, maxSize: 0.0 } })).toEqual({
      ok: true, configured: true, queueId: expect.any(String), queue: 'r-conf', namespace: '', task: '',
      options: { ...neutralV1, leaseTime: 300, retryLimit: 3 },
    });
    const set = await configureV1({ queue: 'r-conf', options: { leaseTime: 60, windowBuffer: 5 } });
    const kept = await configureV1({ queue: 'r-conf', options: { retryLimit: 7 } });
    expect(kept).toEqual({ ...set, options: { ...neutralV1, leaseTime: 60, retryLimit: 7, windowBuffer: 5 } });
    // What 0.2 stored for the queue is not 0.1.0's to answer.
    await configureV2({ queue: 'r-conf', namespace: 'billing', options: { retryDelay: 5000, retentionEnabled: false } });
    expect(await configureV1({ queue: 'r-conf' })).toEqual({ ...set, options: { ...neutralV1, leaseTime: 60, retryLimit: 7, windowBuffer: 5 } });
  });

  test.each<[string, unknown, string, string]>([
    ['a body that is not an object', [], 'invalid_json', 'The request body must be a JSON object.'],
    ['no queue', { options: { bogus: 1 } }, 'log_queue_required', 'queue is required (a string).'],
    ['a queue that is not a name', { queue: '.q', options: 5 }, 'log_invalid_queue', 'A queue name is'],
    ['options not an object', { queue: 'r-q', options: 5, namespace: 'x' }, 'log_invalid_options', 'options must be an object {leaseTime?, retryLimit?}.'],
    ['a namespace', { queue: 'r-q', namespace: 'billing', options: { bogus: 1 } }, 'unsupported', 'namespace: the cell has no queue namespaces (nor pop by them); leave it out or null.'],
    ['a task', { queue: 'r-q', task: 'charge' }, 'unsupported', 'task: the cell has no queue tasks'],
    ['an unknown option before a bad leaseTime', { queue: 'r-q', options: { leaseTime: 0, bogus: 1 } }, 'unsupported', 'options.bogus: the cell does not know this option.'],
    ['an option of 0.2 at another value', { queue: 'r-q', options: { retryDelay: 1000 } }, 'unsupported', 'options.retryDelay: the cell implements only 0'],
    ['a retention option', { queue: 'r-q', options: { retentionEnabled: true } }, 'unsupported', 'options.retentionEnabled: the cell implements only false'],
    ['leaseTime before retryLimit', { queue: 'r-q', options: { retryLimit: -1, leaseTime: 0 } }, 'log_invalid_lease_time', 'options.leaseTime'],
    ['retryLimit before delayedProcessing', { queue: 'r-q', options: { delayedProcessing: -1, retryLimit: 1.5 } }, 'log_invalid_retry_limit', 'options.retryLimit'],
    ['delayedProcessing before windowBuffer', { queue: 'r-q', options: { windowBuffer: -1, delayedProcessing: '5' } }, 'log_invalid_options', 'options.delayedProcessing'],
    ['windowBuffer', { queue: 'r-q', options: { windowBuffer: 86401 } }, 'log_invalid_options', 'options.windowBuffer'],
  ])('%s is refused as 0.1.0 refused it', async (_name, body, code, message) => {
    const r: Refusal = await configureV1(body);
    expect([r.raised, r.code, r.index]).toEqual(['QK400', code, null]);
    expect(r.message.startsWith(message)).toBe(true);
    expect((await db.pool.query(`SELECT 1 FROM queen.queues WHERE name = 'r-q'`)).rowCount).toBe(0);
  });

  test('a moving tenant is not refused (0.1.0 had no gate)', async () => {
    expect((await configureV1({ queue: 'r-move' }, MOVING)).queue).toBe('r-move');
    expect((await configureV2({ queue: 'r-move' }, MOVING)).code).toBe('tenant_moving');
  });
});

describe('log_apply_v1', () => {
  test('pushes to an encrypted queue unsealed and past maxSize, and acks, as 0.1.0 did', async () => {
    await configureV2({ queue: 'r-enc', options: { encryptionEnabled: true } });
    await configureV2({ queue: 'r-cap', options: { maxSize: 1 } });
    const ops = [
      { type: 'push', items: [{ queue: 'r-cap', payload: { n: 1 } }, { queue: 'r-cap', partition: 'p', payload: { n: 2 }, transactionId: 'r-cap-2' }] },
      { type: 'push', items: [{ queue: 'r-enc', payload: 'plain' }] },
    ];
    // 0.2 refuses the bundle whole: the encrypted queue's push was not sealed; the capped queue's two.
    expect(await applyV2(ops)).toMatchObject({ raised: 'QK428', message: 'sealing_required', queues: ['r-enc'] });
    expect(await applyV2([ops[0]])).toMatchObject({ raised: 'QK400', code: 'log_queue_full' });
    const out = await applyV1(ops);
    expect(out.map((o: any) => [o.index, o.type, o.items.length])).toEqual([[0, 'push', 2], [1, 'push', 1]]);
    expect(out[0].items[1]).toMatchObject({ transaction_id: 'r-cap-2', status: 'queued' });
    const { rows: stored } = await db.pool.query(
      `SELECT q.name, m.payload, EXISTS (SELECT 1 FROM queen.sealed_messages s WHERE s.partition_id = m.partition_id AND s.seq = m.seq) AS sealed
         FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
        WHERE q.name IN ('r-cap', 'r-enc') ORDER BY q.name, p.name`);
    expect(stored).toEqual([
      { name: 'r-cap', payload: { n: 1 }, sealed: false }, { name: 'r-cap', payload: { n: 2 }, sealed: false },
      { name: 'r-enc', payload: 'plain', sealed: false },
    ]);
    const [m] = await pop('r-enc');
    expect(await applyV1([{ type: 'ack', transactionId: m.transactionId, partitionId: m.partitionId, status: 'completed', consumerGroup: 'g' }])).toEqual([
      { index: 0, type: 'ack', ok: true, success: true, transactionId: m.transactionId, partitionId: m.partitionId, consumerGroup: 'g', status: 'completed', deadLetter: false },
    ]);
  });

  test.each<[string, unknown, string, number | null]>([
    ['operations not an array', { type: 'push' }, 'tx_invalid_operations', null],
    ['more than 1000', Array.from({ length: 1001 }, () => ({ type: 'x' })), 'tx_batch_too_large', null],
    ['an unknown type after a valid push', [{ type: 'push', items: [{ queue: 'r-x', payload: 1 }] }, { type: 'pop' }], 'tx_unknown_operation', 1],
    ['a push without items', [{ type: 'push', items: [] }], 'log_items_required', 0],
    ['an item that is not an object', [{ type: 'push', items: [{ queue: 'r-x', payload: 1 }, 5] }], 'log_invalid_item', 0],
    ['an item without a queue', [{ type: 'push', items: [{ payload: 1 }] }], 'log_queue_required', 0],
    ['a bad ack before a bad push', [{ type: 'ack', status: 'completed' }, { type: 'push' }], 'log_transaction_id_required', 0],
  ])('%s is refused as 0.1.0 refused it, before anything is written', async (_name, ops, code, index) => {
    const r: Refusal = await applyV1(ops);
    expect([r.raised, r.code, r.index]).toEqual(['QK400', code, index]);
    expect((await db.pool.query(`SELECT 1 FROM queen.queues WHERE name = 'r-x'`)).rowCount).toBe(0);
  });

  test('no operations answer none; a moving tenant is not refused (0.1.0 had no gate)', async () => {
    expect(await run(`queen.log_apply_v1($1, NULL)`, [TENANT])).toEqual([]);
    expect(await applyV1(null)).toEqual([]);
    expect(await applyV1([{ type: 'push', items: [{ queue: 'r-move', payload: 1 }] }], MOVING)).toHaveLength(1);
    expect((await applyV2([], MOVING)).code).toBe('tenant_moving');
  });
});

describe('log_dead_letters_v1', () => {
  test('an entry without the trace context or the sealed mark of 0.2; the whole time range', async () => {
    await configureV2({ queue: 'r-dlq', options: { retryLimit: 0 } });
    await applyV1([{ type: 'push', items: [{ queue: 'r-dlq', payload: { n: 1 }, transactionId: 'r-dead' }] }]);
    await db.pool.query(
      `UPDATE queen.messages m SET trace_id = '0af76519-16cd-43dd-8448-eb211c80319c', span_id = '\\xb7ad6b7169203331'
        FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE m.partition_id = p.id AND q.name = 'r-dlq'`);
    const [m] = await pop('r-dlq');
    await db.pool.query(`INSERT INTO queen.sealed_messages (partition_id, seq) SELECT m.partition_id, m.seq FROM queen.messages m WHERE m.transaction_id = 'r-dead'`);
    await applyV1([{ type: 'ack', transactionId: m.transactionId, partitionId: m.partitionId, status: 'failed', consumerGroup: 'g', error: 'boom' }]);
    const v1 = await run(`queen.log_dead_letters_v1($1, 'r-dlq', NULL, NULL, 10, 0)`, [TENANT]);
    expect(v1).toEqual({
      total: 1, pagination: { limit: 10, offset: 0 },
      messages: [{
        id: expect.any(String), transactionId: 'r-dead', partitionId: m.partitionId, queue: 'r-dlq', partition: 'Default', consumerGroup: 'g',
        errorMessage: 'boom', retryCount: 1, data: { n: 1 }, producerSub: null, createdAt: expect.any(String), failedAt: expect.any(String),
      }],
    });
    const v2 = await run(`queen.log_dead_letters_v2($1, 'r-dlq', NULL, NULL, 10, 0, NULL, NULL)`, [TENANT]);
    expect(v2).toEqual({
      ...v1, messages: [{ ...v1.messages[0], traceId: '0af76519-16cd-43dd-8448-eb211c80319c', traceparent: expect.stringMatching(/^00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0[01]$/), sealed: true }],
    });
    expect(await run(`queen.log_dead_letters_v1($1, NULL, NULL, 'other', 10, 0)`, [TENANT])).toEqual({ total: 0, pagination: { limit: 10, offset: 0 }, messages: [] });
  });

  test('a bad queue before a bad group; a moving tenant is not refused (0.1.0 had no gate)', async () => {
    expect(await run(`queen.log_dead_letters_v1($1, '.q', NULL, '.g', 10, 0)`, [TENANT])).toMatchObject({ raised: 'QK400', code: 'log_invalid_queue' });
    expect(await run(`queen.log_dead_letters_v1($1, NULL, NULL, '.g', 10, 0)`, [TENANT])).toMatchObject({ raised: 'QK400', code: 'log_invalid_consumer_group' });
    expect((await run(`queen.log_dead_letters_v1($1, NULL, NULL, NULL, 10, 0)`, [MOVING])).total).toBe(0);
    expect((await run(`queen.log_dead_letters_v2($1, NULL, NULL, NULL, 10, 0, NULL, NULL)`, [MOVING])).code).toBe('tenant_moving');
  });
});
