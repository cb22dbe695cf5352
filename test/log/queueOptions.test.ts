// Queen's queue options the cell honours (docs/log-and-transactions.md): retryDelay (and the
// cell's retryDelayMax backoff) on every pop path, maxSize refused whole, priority with pops by
// namespace/task, and encryptionEnabled refused without a key (test/log/encryption.test.ts has the rest). Time is moved by ageing the stored
// retry instant rather than by sleeping, so no test depends on how fast the machine is.
import { ack, ackOf, configure, pop, popRaw, push, transaction } from './helpers';
import { call } from '../support/http';
import { useApi } from '../support/api';
import { Client } from 'pg';
import { DEFAULT_TENANT } from '../../shared/config';
import { untilWaitingOnLock } from '../support/database';

const api = useApi({}, { connections: 1 });

/** Moves the group's retry instants on the queue `ms` into the past, as if the delay had passed. */
async function ageRetry(queue: string, ms: number): Promise<number> {
  const { rowCount } = await api.pool.query(
    `UPDATE queen.consumer_retry_at r SET retry_at = r.retry_at - make_interval(secs => $2::numeric / 1000)
       FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
      WHERE p.id = r.partition_id AND q.name = $1`,
    [queue, ms],
  );
  return rowCount ?? 0;
}

describe('configure: the options of 0.2', () => {
  test('answers retryDelay, retryDelayMax, maxSize, priority, namespace, task; an omitted one keeps its value', async () => {
    const res = await call(api.url, 'POST', '/api/v1/configure', {
      queue: 'qo-conf', namespace: 'billing', task: 'charge', options: { retryDelay: 1000, retryDelayMax: 8000, maxSize: 1000, priority: 5 },
    });
    expect(res.status).toBe(200);
    expect([res.body.namespace, res.body.task]).toEqual(['billing', 'charge']);
    const o = res.body.options;
    expect([o.retryDelay, o.retryDelayMax, o.maxSize, o.priority, o.encryptionEnabled]).toEqual([1000, 8000, 1000, 5, false]);
    const later = await call(api.url, 'POST', '/api/v1/configure', { queue: 'qo-conf', namespace: null, options: { leaseTime: 30 } });
    expect([later.body.namespace, later.body.task, later.body.options.retryDelay, later.body.options.maxSize, later.body.options.priority, later.body.options.leaseTime])
      .toEqual(['billing', 'charge', 1000, 1000, 5, 30]);
  });

  test.each([
    [{ retryDelay: -1 }], [{ retryDelay: 1.5 }], [{ retryDelay: '1000' }], [{ retryDelay: 86400001 }],
    [{ maxSize: -1 }], [{ maxSize: 1e10 }], [{ priority: 1.5 }], [{ priority: 2000000 }], [{ encryptionEnabled: 'yes' }],
  ])('%p is 400 log_invalid_options', async (options) => {
    const res = await configure(api.url, 'qo-bad', options);
    expect([res.status, res.body.error]).toEqual([400, 'log_invalid_options']);
    expect(res.body.message).toContain(`options.${Object.keys(options)[0]}`);
  });

  // Two bad options: the one checked first is named, with its sentence (queen.log_option_bounds_v1
  // holds the bounds and sentences; the order is configure's).
  test('the options are checked in one order, each refused with its sentence', async () => {
    const order = ['windowBuffer', 'retryDelay', 'retryDelayMax', 'maxSize', 'priority', 'encryptionEnabled',
      'retentionSeconds', 'completedRetentionSeconds', 'maxWaitTimeSeconds', 'ttl', 'retentionEnabled'];
    const named: string[] = [];
    for (let i = 0; i + 1 < order.length; i++) {
      const res = await configure(api.url, 'qo-order', { [order[i + 1]]: 'x', [order[i]]: 'x' });
      expect([res.status, res.body.error]).toEqual([400, 'log_invalid_options']);
      named.push(res.body.message);
    }
    expect(named).toEqual([
      'options.windowBuffer is a whole number of seconds from 0 to 86400.',
      'options.retryDelay is a whole number of milliseconds from 0 to 86400000.',
      'options.retryDelayMax is a whole number of milliseconds from 0 to 86400000.',
      'options.maxSize is a whole number of messages from 0 (no cap) to 1000000000.',
      'options.priority is a whole number from -1000000 to 1000000.',
      'options.encryptionEnabled is true or false.',
      "options.retentionSeconds is a whole number of seconds from 0 (the cell's default retention) to 315360000.",
      'options.completedRetentionSeconds is a whole number of seconds from 0 (not set) to 315360000.',
      'options.maxWaitTimeSeconds is a whole number of seconds from 0 (not set) to 315360000.',
      'options.ttl is a whole number of seconds from 0 (not set) to 315360000.',
    ]);
  });

  test('encryptionEnabled: true on a cell without QUEEN_ENCRYPTION_KEY is 403 naming the variable; false is fine', async () => {
    const res = await configure(api.url, 'qo-enc', { encryptionEnabled: true });
    expect([res.status, res.body.error]).toEqual([403, 'log_encryption_unavailable']);
    expect(res.body.message).toContain('QUEEN_ENCRYPTION_KEY');
    expect((await configure(api.url, 'qo-enc', { encryptionEnabled: false })).status).toBe(200);
  });

  test('a namespace that is not a name is 400', async () => {
    const res = await call(api.url, 'POST', '/api/v1/configure', { queue: 'qo-ns-bad', namespace: 7 });
    expect([res.status, res.body.error]).toEqual([400, 'log_invalid_options']);
  });
});

describe('retryDelay', () => {
  test('a failed message is not delivered again before the delay, by queue, by partition, or waiting briefly; then it is', async () => {
    await configure(api.url, 'rd-basic', { retryDelay: 3_600_000 });
    await push(api.url, [{ queue: 'rd-basic', payload: 1, transactionId: 'r1' }]);
    const [m] = await pop(api.url, 'rd-basic');
    expect((await ack(api.url, m, 'failed')).body.ok).toBe(true);
    expect(await pop(api.url, 'rd-basic')).toEqual([]);
    expect(await pop(api.url, 'rd-basic', { partition: 'Default' })).toEqual([]);
    expect((await popRaw(api.url, 'rd-basic', { wait: true, timeout: 200 })).status).toBe(204);
    // Another group has its own delay: it never failed the message.
    expect((await pop(api.url, 'rd-basic', { consumerGroup: 'other' })).map((x) => x.transactionId)).toEqual(['r1']);
    expect(await ageRetry('rd-basic', 3_600_001)).toBe(1);
    const again = await pop(api.url, 'rd-basic');
    expect(again.map((x) => [x.transactionId, x.retryCount])).toEqual([['r1', 1]]);
  });

  test('the stored instant is the ack time plus the delay', async () => {
    await configure(api.url, 'rd-instant', { retryDelay: 60_000 });
    await push(api.url, [{ queue: 'rd-instant', payload: 1, transactionId: 'i1' }]);
    const [m] = await pop(api.url, 'rd-instant');
    const before = Date.now();
    await ack(api.url, m, 'failed');
    const { rows } = await api.pool.query(`SELECT extract(epoch FROM retry_at) * 1000 AS at FROM queen.consumer_retry_at WHERE partition_id = $1`, [m.partitionId]);
    expect(Number(rows[0].at)).toBeGreaterThanOrEqual(before + 60_000 - 1_000);
    expect(Number(rows[0].at)).toBeLessThanOrEqual(Date.now() + 60_000 + 1_000);
  });

  test('a waiting pop wakes when the delay ends, well before its own timeout', async () => {
    await configure(api.url, 'rd-wait', { retryDelay: 1000 });
    await push(api.url, [{ queue: 'rd-wait', payload: 1, transactionId: 'w1' }]);
    const [m] = await pop(api.url, 'rd-wait');
    await ack(api.url, m, 'failed');
    expect(await pop(api.url, 'rd-wait')).toEqual([]);
    // No notification comes when a delay ends; the wait's recheck finds it. 204 would mean the timeout.
    const res = await popRaw(api.url, 'rd-wait', { wait: true, timeout: 60_000 });
    expect([res.status, res.body.messages.map((x) => x.transactionId)]).toEqual([200, ['w1']]);
  });

  test('multi-partition pops skip a partition in its delay and take the others', async () => {
    await configure(api.url, 'rd-multi', { retryDelay: 3_600_000 });
    await push(api.url, [
      { queue: 'rd-multi', partition: 'a', payload: 1, transactionId: 'a1' },
      { queue: 'rd-multi', partition: 'b', payload: 2, transactionId: 'b1' },
    ]);
    const first = await call(api.url, 'GET', '/api/v1/pop/queue/rd-multi?batch=10&partitions=2');
    expect(first.body.messages).toHaveLength(2);
    const a = first.body.messages.find((x: { partition: string }) => x.partition === 'a');
    const b = first.body.messages.find((x: { partition: string }) => x.partition === 'b');
    await call(api.url, 'POST', '/api/v1/ack/batch', { acknowledgments: [ackOf(a, 'failed'), ackOf(b, 'completed')] });
    await push(api.url, [{ queue: 'rd-multi', partition: 'b', payload: 3, transactionId: 'b2' }]);
    const next = await call(api.url, 'GET', '/api/v1/pop/queue/rd-multi?batch=10&partitions=2');
    expect(next.body.messages.map((x: { transactionId: string }) => x.transactionId)).toEqual(['b2']);
  });

  test('a failed ack in the transaction wire starts the delay too', async () => {
    await configure(api.url, 'rd-tx', { retryDelay: 3_600_000 });
    await push(api.url, [{ queue: 'rd-tx', payload: 1, transactionId: 't1' }]);
    const [m] = await pop(api.url, 'rd-tx');
    const res = await transaction(api.url, { operations: [{ type: 'ack', ...ackOf(m, 'failed') }] });
    expect(res.body.ok).toBe(true);
    expect(await pop(api.url, 'rd-tx')).toEqual([]);
    await ageRetry('rd-tx', 3_600_001);
    expect((await pop(api.url, 'rd-tx')).map((x) => x.transactionId)).toEqual(['t1']);
  });

  test("no retryDelay set: Queen's default, 1000 ms; a queue created by a push and one configured without it wait it, and configure answers it", async () => {
    const res = await configure(api.url, 'rd-default', { retryLimit: 5 });
    expect(res.body.options.retryDelay).toBe(1000);
    for (const queue of ['rd-default', 'rd-default-pushed']) {
      await push(api.url, [{ queue, payload: 1, transactionId: 'd1' }]);
      const [m] = await pop(api.url, queue);
      const failedAt = Date.now();
      await ack(api.url, m, 'failed');
      // Not before the default delay (the ack's own time and this pop's are both inside it)...
      const early = await pop(api.url, queue);
      if (Date.now() - failedAt < 900) expect(early).toEqual([]);
      const { rows } = await api.pool.query(
        `SELECT extract(epoch FROM r.retry_at - f.last_failed_at) * 1000 AS ms FROM queen.consumer_retry_at r
           JOIN queen.message_failures f ON f.partition_id = r.partition_id AND f.consumer_group = r.consumer_group WHERE r.partition_id = $1`, [m.partitionId]);
      expect(Math.round(Number(rows[0].ms))).toBe(1000);
      // ...and after it.
      await new Promise((r) => setTimeout(r, Math.max(0, failedAt + 1100 - Date.now())));
      expect((await pop(api.url, queue)).map((x) => [x.transactionId, x.retryCount])).toEqual([['d1', 1]]);
    }
  });

  test('retryDelay 0 redelivers at once', async () => {
    await configure(api.url, 'rd-zero', { retryDelay: 0 });
    await push(api.url, [{ queue: 'rd-zero', payload: 1, transactionId: 'z1' }]);
    const [m] = await pop(api.url, 'rd-zero');
    await ack(api.url, m, 'failed');
    expect((await pop(api.url, 'rd-zero')).map((x) => x.transactionId)).toEqual(['z1']);
  });

  test('retryDelayMax: the delay doubles with each failure of the message, capped; without it, it stays', async () => {
    const { rows } = await api.pool.query(
      `SELECT array_agg(queen.log_retry_delay_ms_v1(1000, 8000, n) ORDER BY n) AS backoff,
              array_agg(queen.log_retry_delay_ms_v1(1000, 0, n) ORDER BY n) AS fixed FROM generate_series(1, 6) n`,
    );
    expect(rows[0].backoff.map(Number)).toEqual([1000, 2000, 4000, 8000, 8000, 8000]);
    expect(rows[0].fixed.map(Number)).toEqual([1000, 1000, 1000, 1000, 1000, 1000]);
  });
});

describe('maxSize', () => {
  test('a push that would pass it is refused whole (429 log_queue_full, Retry-After); consuming makes room', async () => {
    await configure(api.url, 'ms-basic', { maxSize: 3 });
    expect((await push(api.url, [1, 2].map((n) => ({ queue: 'ms-basic', payload: n, transactionId: `m${n}` })))).status).toBe(201);
    const over = await push(api.url, [3, 4].map((n) => ({ queue: 'ms-basic', payload: n, transactionId: `m${n}` })));
    expect([over.status, over.body.error, over.headers.get('retry-after')]).toEqual([429, 'log_queue_full', '1']);
    expect(over.body.message).toContain('ms-basic');
    // Nothing of the refused request was stored: a batch never half-lands.
    const got = await pop(api.url, 'ms-basic', { batch: 10 });
    expect(got.map((m) => m.transactionId)).toEqual(['m1', 'm2']);
    expect((await push(api.url, [{ queue: 'ms-basic', payload: 3, transactionId: 'm3' }])).status).toBe(201);
    expect((await push(api.url, [{ queue: 'ms-basic', payload: 4, transactionId: 'm4' }])).status).toBe(429);
    for (const m of got) await ack(api.url, m);
    expect((await push(api.url, [4, 5].map((n) => ({ queue: 'ms-basic', payload: n, transactionId: `m${n}` })))).status).toBe(201);
  });

  test('a duplicate stores nothing and so takes no room', async () => {
    await configure(api.url, 'ms-dup', { maxSize: 1 });
    expect((await push(api.url, [{ queue: 'ms-dup', payload: 1, transactionId: 'd1' }])).status).toBe(201);
    const dup = await push(api.url, [{ queue: 'ms-dup', payload: 1, transactionId: 'd1' }]);
    expect([dup.status, dup.body[0].status]).toEqual([201, 'duplicate']);
  });

  test('concurrent one-item pushes: exactly maxSize are stored, the rest are 429', async () => {
    await configure(api.url, 'ms-race', { maxSize: 3 });
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => push(api.url, [{ queue: 'ms-race', payload: i, transactionId: `c${i}` }])));
    expect(answers.filter((a) => a.status === 201)).toHaveLength(3);
    expect(answers.filter((a) => a.status === 429 && a.body.error === 'log_queue_full')).toHaveLength(5);
    expect(await pop(api.url, 'ms-race', { batch: 10 })).toHaveLength(3);
  });

  test('pushes to different partitions count in turn: the second waits for the first to commit, then is refused', async () => {
    await configure(api.url, 'ms-parts', { maxSize: 3 });
    const first = new Client({ connectionString: api.databaseUrl });
    const second = new Client({ connectionString: api.databaseUrl, application_name: 'ms-parts-second' });
    await Promise.all([first.connect(), second.connect()]);
    try {
      const items = (p: string) => JSON.stringify([1, 2].map((n) => ({ queue: 'ms-parts', partition: p, payload: n })));
      await first.query('BEGIN');
      await first.query(`SELECT queen.log_push_request_v2($1::uuid, $2::jsonb)`, [DEFAULT_TENANT, items('p1')]);
      // Another partition, so no partition lock is shared: only the queue's count lock orders them.
      const late = second.query(`SELECT queen.log_push_request_v2($1::uuid, $2::jsonb)`, [DEFAULT_TENANT, items('p2')]).then(() => 'stored', (e) => e.message as string);
      await untilWaitingOnLock(api.databaseUrl, 'ms-parts-second');
      await first.query('COMMIT');
      expect(await late).toContain('maxSize');
    } finally {
      await Promise.all([first.end(), second.end()]);
    }
    expect(await pop(api.url, 'ms-parts', { batch: 10 })).toHaveLength(2);
  });

  test('the transaction wire refuses the same way and rolls the whole bundle back, the KV included', async () => {
    await configure(api.url, 'ms-tx', { maxSize: 1 });
    const res = await transaction(api.url, {
      operations: [{ type: 'push', items: [{ queue: 'ms-tx', payload: 1 }, { queue: 'ms-tx', payload: 2 }] }],
      kv: [{ op: 'put', ns: 'ms-tx', key: 'marker', value: true, ttlSeconds: 60 }],
    });
    expect([res.status, res.body.error, res.headers.get('retry-after')]).toEqual([429, 'log_queue_full', '1']);
    expect(await pop(api.url, 'ms-tx', { batch: 10 })).toEqual([]);
    expect((await call(api.url, 'GET', '/api/v1/kv/ms-tx/marker')).body.found).toBe(false);
  });

  test('maxSize 0 is no cap', async () => {
    await configure(api.url, 'ms-zero', { maxSize: 0 });
    expect((await push(api.url, Array.from({ length: 20 }, (_, i) => ({ queue: 'ms-zero', payload: i })))).status).toBe(201);
  });
});

describe('pop by namespace and task, by priority', () => {
  test('pops the matching queues, higher priority first, then oldest first; answers the queue it took', async () => {
    const conf = (queue: string, priority: number, task = 'send') =>
      call(api.url, 'POST', '/api/v1/configure', { queue, namespace: 'mail', task, options: { priority } });
    await conf('ns-low', 1);
    await conf('ns-high', 9);
    await conf('ns-other-task', 50, 'bounce');
    await push(api.url, [{ queue: 'ns-low', payload: 'l', transactionId: 'l1' }]);
    await push(api.url, [{ queue: 'ns-high', payload: 'h', transactionId: 'h1' }]);
    await push(api.url, [{ queue: 'ns-other-task', payload: 'o', transactionId: 'o1' }]);
    const first = await call(api.url, 'GET', '/api/v1/pop?namespace=mail&task=send&batch=5');
    expect([first.status, first.body.queue, first.body.messages.map((m: { transactionId: string }) => m.transactionId)]).toEqual([200, 'ns-high', ['h1']]);
    const second = await call(api.url, 'GET', '/api/v1/pop?namespace=mail&task=send&batch=5');
    expect([second.body.queue, second.body.messages[0].transactionId]).toEqual(['ns-low', 'l1']);
    // The same lease and ack as a queue pop.
    expect((await ack(api.url, second.body.messages[0])).body.ok).toBe(true);
    expect((await call(api.url, 'GET', '/api/v1/pop?namespace=mail&task=send')).status).toBe(204);
    const any = await call(api.url, 'GET', '/api/v1/pop?namespace=mail');
    expect(any.body.messages[0].transactionId).toBe('o1');
  });

  test('a pop with neither a queue, a namespace nor a task is 400', async () => {
    const res = await call(api.url, 'GET', '/api/v1/pop');
    expect([res.status, res.body.error]).toEqual([400, 'log_invalid_queue']);
  });
});
