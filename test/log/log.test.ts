// The message log over HTTP (docs/log-and-transactions.md): push dedup, pop and its leases, consumer groups,
// acks and their failure cases, failed-ack redelivery up to retryLimit then dead letter, long poll,
// lease extend, and the shape refusals.
import { Client } from 'pg';
import { definitions, migrations } from '../../shared/migrations';
import { ack, ackOf, configure, pop, popRaw, push, takenOver } from './helpers';
import { call } from '../support/http';
import { elapse } from '../support/wait';
import { useApi } from '../support/api';

// The 256 MiB pop below builds and cancels a quarter-gigabyte answer: on this shared 2-core
// machine that passed the message pool's default 10 s statement limit, which is not its subject.
const api = useApi({ QUEEN_DB_STATEMENT_TIMEOUT_MS: '120000' }, { connections: 1 });

describe('push', () => {
  test('creates queue and partition on first use; a duplicate transactionId answers duplicate and stores nothing', async () => {
    const first = await push(api.url, [{ queue: 'dedup', payload: { n: 1 }, transactionId: 'order-1' }]);
    expect(first.status).toBe(201);
    expect(first.body).toEqual([
      {
        index: 0, transaction_id: 'order-1', status: 'queued', message_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
        partition_id: expect.any(String), trace_id: null, queueName: 'dedup', partition: 'Default',
      },
    ]);
    const again = await push(api.url, [
      { queue: 'dedup', payload: { n: 2 }, transactionId: 'order-1' },
      { queue: 'dedup', partition: 'other', payload: { n: 3 }, transactionId: 'order-1' },
    ]);
    expect(again.body.map((r: any) => [r.index, r.status])).toEqual([[0, 'duplicate'], [1, 'queued']]);
    expect(again.body[0].partition_id).toBe(first.body[0].partition_id);
    // A duplicate names the stored winner's message.
    expect(again.body[0].message_id).toBe(first.body[0].message_id);

    const messages = await pop(api.url, 'dedup', { partition: 'Default', batch: 10 });
    expect(messages.map((m) => m.data)).toEqual([{ n: 1 }]);
    const { rows } = await api.pool.query(
      `SELECT count(*)::int AS n FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
        JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'dedup'`,
    );
    expect(rows[0].n).toBe(2);
  });

  test('a duplicate inside one request is answered duplicate too; a push without transactionId gets one', async () => {
    const res = await push(api.url, [
      { queue: 'dedup2', payload: 1, transactionId: 'x' },
      { queue: 'dedup2', payload: 2, transactionId: 'x' },
      { queue: 'dedup2', payload: 3 },
    ]);
    expect(res.body.map((r: any) => r.status)).toEqual(['queued', 'duplicate', 'queued']);
    expect(res.body[1].message_id).toBe(res.body[0].message_id);
    expect(res.body[2].transaction_id).toMatch(/^[0-9a-f-]{36}$/);
  });

  test('payload numbers come back exactly as written', async () => {
    const text = '{"items":[{"queue":"exact","payload":{"big":12345678901234567890,"tiny":0.1000000000000000055511151231257827}}]}';
    expect((await call(api.url, 'POST', '/api/v1/push', text)).status).toBe(201);
    const res = await popRaw(api.url, 'exact');
    expect(res.text).toContain('"big": 12345678901234567890');
    expect(res.text).toContain('"tiny": 0.1000000000000000055511151231257827');
  });

  test('the push answers its exact path, a query string allowed; another spelling or method is 404; an empty body is 400', async () => {
    const res = await push(api.url, [{ queue: 'spellings', payload: { n: 1 } }], '/api/v1/push?source=test');
    expect([res.status, res.body?.[0]?.status]).toEqual([201, 'queued']);
    for (const [method, path] of [['POST', '/api/v1/push/'], ['POST', '/API/V1/Push'], ['POST', '/api/v1/pushes'], ['GET', '/api/v1/push']]) {
      const refused = await call(api.url, method, path, method === 'GET' ? undefined : { items: [{ queue: 'spellings', payload: { n: 2 } }] });
      expect([method, path, refused.status, refused.body.error]).toEqual([method, path, 404, 'not_found']);
    }
    const empty = await call(api.url, 'POST', '/api/v1/push', '');
    expect([empty.status, empty.body.error]).toEqual([400, 'invalid_json']);
    const messages = await pop(api.url, 'spellings', { batch: 10 });
    expect(messages.map((m) => m.data)).toEqual([{ n: 1 }]);
  });
});

describe('pop and leases', () => {
  test('204 when nothing is there, for an unknown queue too', async () => {
    expect((await popRaw(api.url, 'never-pushed')).status).toBe(204);
    await push(api.url, [{ queue: 'empty-after', payload: 1 }]);
    const [m] = await pop(api.url, 'empty-after');
    expect((await ack(api.url, m)).body.ok).toBe(true);
    expect((await popRaw(api.url, 'empty-after')).status).toBe(204);
  });

  test('a pop answers the documented fields, in push order, up to batch', async () => {
    await push(api.url, [1, 2, 3].map((n) => ({ queue: 'fields', partition: 'p1', payload: { n }, transactionId: `f${n}` })));
    const messages = await pop(api.url, 'fields', { batch: 2 });
    expect(messages).toHaveLength(2);
    expect(messages[0]).toMatchObject({
      transactionId: 'f1', queue: 'fields', partition: 'p1', data: { n: 1 },
      consumerGroup: '__QUEUE_MODE__', retryCount: 0,
    });
    for (const k of ['partitionId', 'leaseId', 'createdAt']) expect(typeof (messages[0] as any)[k]).toBe('string');
    expect(messages[1].transactionId).toBe('f2');
    expect(messages[1].leaseId).toBe(messages[0].leaseId);
  });

  test('within a group a partition is leased to one consumer at a time; other partitions stay available', async () => {
    await push(api.url, [
      { queue: 'one-at-a-time', partition: 'a', payload: 'a1' },
      { queue: 'one-at-a-time', partition: 'a', payload: 'a2' },
      { queue: 'one-at-a-time', partition: 'b', payload: 'b1' },
    ]);
    const first = await pop(api.url, 'one-at-a-time');
    const second = await pop(api.url, 'one-at-a-time');
    expect(first).toHaveLength(1);
    expect(second).toHaveLength(1);
    expect(new Set([first[0].partition, second[0].partition])).toEqual(new Set(['a', 'b']));
    // Partition a still has a2, but its lease is held: nothing for a third consumer.
    expect(await pop(api.url, 'one-at-a-time')).toEqual([]);
    expect(await pop(api.url, 'one-at-a-time', { partition: 'a' })).toEqual([]);
    const a = first[0].partition === 'a' ? first[0] : second[0];
    expect((await ack(api.url, a)).body.ok).toBe(true);
    // Every leased message settled: the partition is back at once, with the next message.
    expect((await pop(api.url, 'one-at-a-time', { partition: 'a' })).map((m) => m.data)).toEqual(['a2']);
  });

  test('consumer groups each see every message', async () => {
    await push(api.url, [1, 2, 3].map((n) => ({ queue: 'groups', payload: n })));
    const g1 = await pop(api.url, 'groups', { consumerGroup: 'billing', batch: 10 });
    const g2 = await pop(api.url, 'groups', { consumerGroup: 'audit', batch: 10 });
    const queueMode = await pop(api.url, 'groups', { batch: 10 });
    for (const got of [g1, g2, queueMode]) expect(got.map((m) => m.data)).toEqual([1, 2, 3]);
    expect(g1[0].consumerGroup).toBe('billing');
    // Acking in one group changes nothing for another.
    for (const m of g1) expect((await ack(api.url, m)).body.ok).toBe(true);
    expect((await call(api.url, 'POST', '/api/v1/ack', ackOf(g2[0]))).body.ok).toBe(true);
  });

  test('an expired lease makes the messages available again, and the old lease can no longer ack', async () => {
    // A second consumer long-polls; it gets the message once the first lease lapses.
    const { zombie: first, heir: second } = await takenOver(api.url, 'expiry', 'e1', 'x');
    expect(second.leaseId).not.toBe(first.leaseId);
    const zombie = await ack(api.url, first);
    expect(zombie.status).toBe(200);
    expect(zombie.body).toMatchObject({ ok: false, reason: 'ack_failed', ackReason: 'lease_expired' });
    expect((await ack(api.url, second)).body).toMatchObject({ ok: true, status: 'completed' });
    expect((await ack(api.url, second)).body).toMatchObject({ ok: false, ackReason: 'already_acked' });
  });

  test('an ack after the lease expired fails even when nobody popped again, with or without the leaseId', async () => {
    await configure(api.url, 'lapsed', { leaseTime: 1 });
    await push(api.url, [{ queue: 'lapsed', payload: 1 }]);
    const [m] = await pop(api.url, 'lapsed');
    await elapse(1200); // time passing is the test: the 1 s lease lapses
    expect((await ack(api.url, m)).body.ackReason).toBe('lease_expired');
    expect((await ack(api.url, m, 'completed', false)).body.ackReason).toBe('lease_expired');
    // It was not acked: it comes back.
    expect((await pop(api.url, 'lapsed')).map((x) => x.transactionId)).toEqual([m.transactionId]);
  });

  test('lease extend keeps a lease alive past its first expiry; an unknown lease is refused', async () => {
    await configure(api.url, 'extend', { leaseTime: 1 });
    await push(api.url, [{ queue: 'extend', payload: 1 }]);
    const [m] = await pop(api.url, 'extend');
    const ext = await call(api.url, 'POST', `/api/v1/lease/${m.leaseId}/extend`, { seconds: 30 });
    expect(ext.status).toBe(200);
    expect(ext.body).toMatchObject({ ok: true, leaseId: m.leaseId });
    expect(Date.parse(ext.body.leaseExpiresAt)).toBeGreaterThan(Date.now() + 20_000);
    await elapse(1200); // time passing is the test: past the first 1 s expiry
    expect(await pop(api.url, 'extend')).toEqual([]);
    expect((await ack(api.url, m)).body.ok).toBe(true);
    const gone = await call(api.url, 'POST', `/api/v1/lease/${m.leaseId}/extend`);
    expect(gone.body).toMatchObject({ ok: false, reason: 'lease_expired' });
  });

  test('a batch whose payloads pass PostgreSQL\'s 256 MiB jsonb array cap answers the messages that fit, not a 500', async () => {
    // A message of 2 MiB, then one of 255 MiB planted beside it in SQL (nothing that size through
    // HTTP, nor through the push functions, which copy it several times): a pop of batch 2 failed
    // with 54000 "total size of jsonb array elements exceeds the maximum" and answered 500, on
    // every try, since the failed statement took no lease.
    expect((await push(api.url, [{ queue: 'huge', transactionId: 'small', payload: 'x'.repeat(2 * 1024 * 1024) }])).status).toBe(201);
    const db = new Client({ connectionString: api.databaseUrl });
    await db.connect();
    try {
      await db.query(`INSERT INTO queen.messages (partition_id, seq, transaction_id, payload)
                      SELECT p.id, p.last_seq + 1, 'huge', to_jsonb(repeat('x', 255 * 1024 * 1024))
                        FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'huge'`);
      await db.query(`UPDATE queen.partitions p SET last_seq = last_seq + 1 FROM queen.queues q WHERE q.id = p.queue_id AND q.name = 'huge'`);
    } finally {
      await db.end();
    }
    const res = await popRaw(api.url, 'huge', { batch: 2 });
    expect(res.status).toBe(200);
    expect(res.body.messages.map((m: any) => [m.transactionId, m.data.length])).toEqual([['small', 2 * 1024 * 1024]]);
  });

  test('HEAD on a pop route leases nothing (404, as for any method a path does not take)', async () => {
    // Express ran the GET handler for HEAD: each HEAD leased the message and discarded it, and with
    // retryLimit 1 two lapsed HEAD leases dead-lettered it before any consumer saw it.
    await configure(api.url, 'headless', { leaseTime: 1, retryLimit: 1 });
    await push(api.url, [{ queue: 'headless', payload: 'keep me' }]);
    for (const path of ['/api/v1/pop/queue/headless', '/api/v1/pop/queue/headless/partition/Default']) {
      const res = await fetch(api.url + path, { method: 'HEAD' });
      expect(res.status).toBe(404);
    }
    expect((await pop(api.url, 'headless')).map((m) => m.data)).toEqual(['keep me']);
  });

  test('a long poll whose client went away leases nothing: the next push goes to a live consumer', async () => {
    // The abandoned poll (a client timeout shorter than the server's) kept waiting, was woken by the
    // push and leased the message to nobody: the live consumer got 204 for the whole lease time.
    await configure(api.url, 'abandoned', { leaseTime: 60 });
    const abort = new AbortController();
    const abandoned = fetch(`${api.url}/api/v1/pop/queue/abandoned?wait=true&timeout=20000`, { signal: abort.signal }).catch(() => 'aborted');
    // No signal says a poll is waiting, nor that the server saw its client leave (PushSignal counts
    // no waiters outside itself): these pauses give each step its time.
    await elapse(200);
    abort.abort();
    expect(await abandoned).toBe('aborted');
    await elapse(50);
    await push(api.url, [{ queue: 'abandoned', payload: 'for the living' }]);
    await elapse(300);
    expect((await pop(api.url, 'abandoned')).map((m) => m.data)).toEqual(['for the living']);
  });

  test('long poll wakes when a message arrives, and answers 204 at its timeout', async () => {
    const waiting = popRaw(api.url, 'longpoll', { wait: true, timeout: 20_000 });
    await elapse(300); // no signal says the poll is waiting (see the test above)
    await push(api.url, [{ queue: 'longpoll', payload: 'hello' }]);
    const res = await waiting;
    expect(res.status).toBe(200);
    expect(res.body.messages.map((m: any) => m.data)).toEqual(['hello']);

    const idle = await popRaw(api.url, 'longpoll-idle', { wait: true, timeout: 300 });
    expect(idle.status).toBe(204);
  });
});

describe('ack', () => {
  test('the failure cases: not_found, not_leased, already_acked', async () => {
    await push(api.url, [1, 2].map((n) => ({ queue: 'ackcases', payload: n, transactionId: `a${n}` })));
    const [m1] = await pop(api.url, 'ackcases');
    const unknown = await call(api.url, 'POST', '/api/v1/ack', { ...ackOf(m1), transactionId: 'nope' });
    expect(unknown.body).toMatchObject({ ok: false, reason: 'ack_failed', ackReason: 'not_found' });
    const notPopped = await call(api.url, 'POST', '/api/v1/ack', { ...ackOf(m1), transactionId: 'a2' });
    expect(notPopped.body.ackReason).toBe('not_leased');
    const otherGroup = await call(api.url, 'POST', '/api/v1/ack', { ...ackOf(m1, 'completed', false), consumerGroup: 'stranger' });
    expect(otherGroup.body.ackReason).toBe('not_leased');
    expect((await ack(api.url, m1)).body.ok).toBe(true);
    expect((await ack(api.url, m1)).body.ackReason).toBe('already_acked');
  });

  test('acks overtaking each other within a batch still move the cursor past every message', async () => {
    await push(api.url, [1, 2, 3].map((n) => ({ queue: 'overtake', payload: n })));
    const ms = await pop(api.url, 'overtake', { batch: 3 });
    const res = await call(api.url, 'POST', '/api/v1/ack/batch', { acknowledgments: [ackOf(ms[2]), ackOf(ms[1]), ackOf(ms[0])] });
    expect(res.status).toBe(200);
    expect(res.body.ok).toBe(true);
    expect(res.body.results.map((r: any) => r.ok)).toEqual([true, true, true]);
    expect((await popRaw(api.url, 'overtake')).status).toBe(204);
  });

  test('ack/batch answers each ack on its own', async () => {
    await push(api.url, [{ queue: 'mixed', payload: 1 }]);
    const [m] = await pop(api.url, 'mixed');
    const res = await call(api.url, 'POST', '/api/v1/ack/batch', {
      acknowledgments: [ackOf(m), { ...ackOf(m), transactionId: 'missing' }],
    });
    expect(res.body.ok).toBe(false);
    expect(res.body.results[0]).toMatchObject({ ok: true });
    expect(res.body.results[1]).toMatchObject({ ok: false, ackReason: 'not_found' });
  });

  test('failed redelivers until retryLimit, then the message is dead-lettered and not delivered again', async () => {
    await configure(api.url, 'retry', { retryLimit: 2, retryDelay: 0 });
    await push(api.url, [
      { queue: 'retry', payload: 'poison', transactionId: 'p' },
      { queue: 'retry', payload: 'fine', transactionId: 'f' },
    ]);
    for (let attempt = 0; attempt < 3; attempt++) {
      const [m] = await pop(api.url, 'retry');
      expect(m.transactionId).toBe('p');
      expect(m.retryCount).toBe(attempt);
      const res = await ack(api.url, m, 'failed');
      expect(res.body).toMatchObject({ ok: true, status: 'failed', deadLetter: attempt === 2 });
    }
    const [next] = await pop(api.url, 'retry', { batch: 10 });
    expect(next.transactionId).toBe('f');
    expect((await ack(api.url, next)).body.ok).toBe(true);
    expect((await popRaw(api.url, 'retry')).status).toBe(204);
    const { rows } = await api.pool.query(
      `SELECT f.failures, f.dead_lettered_at IS NOT NULL AS dead FROM queen.message_failures f
         JOIN queen.messages m ON m.partition_id = f.partition_id AND m.seq = f.seq WHERE m.transaction_id = 'p'`,
    );
    expect(rows).toEqual([{ failures: 3, dead: true }]);
    // The dead letter is per group: another group still gets it.
    expect((await pop(api.url, 'retry', { consumerGroup: 'other' })).map((m) => m.transactionId)).toEqual(['p']);
  });

  test('retryLimit 0 dead-letters on the first failure', async () => {
    await configure(api.url, 'retry0', { retryLimit: 0 });
    await push(api.url, [{ queue: 'retry0', payload: 1 }]);
    const [m] = await pop(api.url, 'retry0');
    expect((await ack(api.url, m, 'failed')).body.deadLetter).toBe(true);
    expect((await popRaw(api.url, 'retry0')).status).toBe(204);
  });
});

describe('boot beside a running cell', () => {
  test('a schema apply left open does not stall push, pop or ack', async () => {
    await push(api.url, [{ queue: 'reboot', payload: 1 }]);
    const booting = new Client({ connectionString: api.databaseUrl });
    await booting.connect();
    try {
      await booting.query('BEGIN');
      for (const m of [...migrations(), ...definitions()]) await booting.query(m.sql);
      // The apply's transaction is open and holds whatever it took; the log must not wait on it.
      const traffic = (async () => {
        await push(api.url, [{ queue: 'reboot', payload: 2 }]);
        const ms = await pop(api.url, 'reboot', { batch: 10 });
        for (const m of ms) expect((await ack(api.url, m)).body.ok).toBe(true);
        return ms.length;
      })();
      const stalled = new Promise<string>((resolve) => setTimeout(() => resolve('stalled'), 5000).unref());
      expect(await Promise.race([traffic, stalled])).toBe(2);
    } finally {
      await booting.query('ROLLBACK');
      await booting.end();
    }
  });
});

describe('configure', () => {
  test('answers the options; an omitted option keeps its value', async () => {
    const a = await configure(api.url, 'conf', { leaseTime: 7, retryLimit: 5 });
    expect(a.status).toBe(200);
    expect(a.body).toMatchObject({ ok: true, configured: true, queue: 'conf', options: { leaseTime: 7, retryLimit: 5 } });
    const b = await configure(api.url, 'conf', { retryLimit: 1 });
    expect(b.body.options).toMatchObject({ leaseTime: 7, retryLimit: 1 });
    const fresh = await call(api.url, 'POST', '/api/v1/configure', { queue: 'conf-default' });
    expect(fresh.body.options).toMatchObject({ leaseTime: 300, retryLimit: 3 });
  });

  test('a whole number written with a fraction part (30.0, what many encoders emit for a float) is that number', async () => {
    // It passed the whole-number check and then failed the ::int cast: 400 invalid_json.
    const res = await call(api.url, 'POST', '/api/v1/configure', '{"queue":"conf-float","options":{"leaseTime":30.0,"retryLimit":2.00}}');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ ok: true, queue: 'conf-float', options: { leaseTime: 30, retryLimit: 2 } });
    const half = await call(api.url, 'POST', '/api/v1/configure', '{"queue":"conf-float","options":{"leaseTime":30.5}}');
    expect([half.status, half.body.error]).toEqual([400, 'log_invalid_lease_time']);
  });
});

describe('refusals are 4xx JSON with a code', () => {
  const cases: Array<[string, string, string, unknown, string]> = [
    ['push: invalid JSON', 'POST', '/api/v1/push', '{"items": [', 'invalid_json'],
    ['push: body not an object', 'POST', '/api/v1/push', '[1]', 'invalid_json'],
    ['push: no items', 'POST', '/api/v1/push', {}, 'log_items_required'],
    ['push: item not an object', 'POST', '/api/v1/push', { items: [1] }, 'log_invalid_item'],
    ['push: no queue', 'POST', '/api/v1/push', { items: [{ payload: 1 }] }, 'log_queue_required'],
    ['push: bad queue name', 'POST', '/api/v1/push', { items: [{ queue: 'a b', payload: 1 }] }, 'log_invalid_queue'],
    ['push: bad partition', 'POST', '/api/v1/push', { items: [{ queue: 'q', partition: 5, payload: 1 }] }, 'log_invalid_partition'],
    ['push: empty transactionId', 'POST', '/api/v1/push', { items: [{ queue: 'q', transactionId: '', payload: 1 }] }, 'log_invalid_transaction_id'],
    ['configure: no queue', 'POST', '/api/v1/configure', { options: {} }, 'log_queue_required'],
    ['configure: leaseTime 0', 'POST', '/api/v1/configure', { queue: 'q', options: { leaseTime: 0 } }, 'log_invalid_lease_time'],
    ['configure: leaseTime text', 'POST', '/api/v1/configure', { queue: 'q', options: { leaseTime: '5' } }, 'log_invalid_lease_time'],
    ['configure: retryLimit -1', 'POST', '/api/v1/configure', { queue: 'q', options: { retryLimit: -1 } }, 'log_invalid_retry_limit'],
    ['configure: options not an object', 'POST', '/api/v1/configure', { queue: 'q', options: [] }, 'log_invalid_options'],
    ['pop: batch 0', 'GET', '/api/v1/pop/queue/q?batch=0', undefined, 'log_invalid_batch'],
    ['pop: batch text', 'GET', '/api/v1/pop/queue/q?batch=ten', undefined, 'log_invalid_batch'],
    ['pop: wait maybe', 'GET', '/api/v1/pop/queue/q?wait=maybe', undefined, 'log_invalid_wait'],
    ['pop: timeout text', 'GET', '/api/v1/pop/queue/q?timeout=soon', undefined, 'log_invalid_timeout'],
    ['pop: bad group', 'GET', '/api/v1/pop/queue/q?consumerGroup=a%20b', undefined, 'log_invalid_consumer_group'],
    ['pop: bad queue', 'GET', '/api/v1/pop/queue/.q', undefined, 'log_invalid_queue'],
    ['ack: no transactionId', 'POST', '/api/v1/ack', { partitionId: '00000000-0000-0000-0000-000000000000', status: 'completed' }, 'log_transaction_id_required'],
    ['ack: bad partitionId', 'POST', '/api/v1/ack', { transactionId: 't', partitionId: 'p', status: 'completed' }, 'log_invalid_partition_id'],
    ['ack: bad status', 'POST', '/api/v1/ack', { transactionId: 't', partitionId: '00000000-0000-0000-0000-000000000000', status: 'done' }, 'log_invalid_status'],
    ['ack: bad leaseId', 'POST', '/api/v1/ack', { transactionId: 't', partitionId: '00000000-0000-0000-0000-000000000000', status: 'failed', leaseId: 'x' }, 'log_invalid_lease_id'],
    ['ack batch: no acknowledgments', 'POST', '/api/v1/ack/batch', {}, 'log_acks_required'],
    ['ack batch: element not an object', 'POST', '/api/v1/ack/batch', { acknowledgments: [1] }, 'log_invalid_ack'],
    ['extend: bad lease id', 'POST', '/api/v1/lease/not-a-uuid/extend', undefined, 'log_invalid_lease_id'],
    ['extend: bad seconds', 'POST', '/api/v1/lease/00000000-0000-0000-0000-000000000000/extend', { seconds: 0 }, 'log_invalid_lease_time'],
    // %00 cannot be bound as PostgreSQL text: these were 400 invalid_json, on requests with no body.
    ['pop: %00 in the queue', 'GET', '/api/v1/pop/queue/q%00', undefined, 'log_invalid_queue'],
    ['pop: %00 in the partition', 'GET', '/api/v1/pop/queue/q/partition/%00', undefined, 'log_invalid_partition'],
    ['pop: %00 in the group', 'GET', '/api/v1/pop/queue/q?consumerGroup=g%00', undefined, 'log_invalid_consumer_group'],
    ['extend: %00 in the lease id', 'POST', '/api/v1/lease/%00/extend', undefined, 'log_invalid_lease_id'],
  ];
  test.each(cases)('%s', async (_name, method, path, body, code) => {
    const res = await call(api.url, method, path, body);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error: code, message: expect.any(String) });
  });
});
