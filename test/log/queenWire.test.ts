// Queen MQ's JavaScript client against the cell (docs/log-and-transactions.md, "Queen's client"):
// the request shapes that client sends, written here from its recorded requests, and the parts of
// each answer it reads. Our own flows, not the client's tests.
import { pop, push } from './helpers';
import { call } from '../support/http';
import { useApi } from '../support/api';

const api = useApi();

describe('ack batch', () => {
  test('the body-level consumerGroup applies to every acknowledgment (Queen client batch ack)', async () => {
    await push(api.url, [
      { queue: 'qw-batch-group', payload: { n: 1 }, transactionId: 'a' },
      { queue: 'qw-batch-group', payload: { n: 2 }, transactionId: 'b' },
    ]);
    const got = await pop(api.url, 'qw-batch-group', { consumerGroup: 'g', batch: 10 });
    expect(got.map((m) => m.transactionId)).toEqual(['a', 'b']);
    // Queen's client names the group once, beside the array, never inside the elements.
    const res = await call(api.url, 'POST', '/api/v1/ack/batch', {
      acknowledgments: got.map((m) => ({ transactionId: m.transactionId, partitionId: m.partitionId, status: 'completed', error: null, leaseId: m.leaseId })),
      consumerGroup: 'g',
    });
    expect(res.status).toBe(200);
    expect(res.body.error).toBeUndefined();
    expect(res.body.results.map((r: any) => [r.ok, r.consumerGroup])).toEqual([[true, 'g'], [true, 'g']]);
    // Acked for g: nothing comes back to g; queue mode still sees both.
    expect(await pop(api.url, 'qw-batch-group', { consumerGroup: 'g', batch: 10 })).toEqual([]);
    expect((await pop(api.url, 'qw-batch-group', { batch: 10 })).length).toBe(2);
  });
});

// The configure body Queen's client sends for queue(name).create(): its defaults overlaid with the caller's.
const QUEEN_DEFAULTS = {
  leaseTime: 300, retryLimit: 3, priority: 0, delayedProcessing: 0, windowBuffer: 0, maxSize: 0,
  retentionSeconds: 0, completedRetentionSeconds: 0, encryptionEnabled: false,
};

describe('configure', () => {
  test("Queen's create() body is accepted and answered configured, with the queue id and every option", async () => {
    const res = await call(api.url, 'POST', '/api/v1/configure', { queue: 'qw-conf', namespace: null, task: null, options: { ...QUEEN_DEFAULTS, leaseTime: 30, retryLimit: 1 } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ configured: true, queueId: expect.stringMatching(/^[0-9a-f-]{36}$/), queue: 'qw-conf', namespace: '', task: '' });
    expect(res.body.options).toMatchObject({ ...QUEEN_DEFAULTS, leaseTime: 30, retryLimit: 1, deadLetterQueue: true, dlqAfterMaxRetries: true });
    expect(res.body.error).toBeUndefined();
  });

  test.each([
    ['an unknown key', { colour: 'blue' }, 'options.colour'],
  ])('an option the cell does not implement is 400 unsupported naming it: %s', async (_name, options, named) => {
    const res = await call(api.url, 'POST', '/api/v1/configure', { queue: 'qw-conf-refused', options: { ...QUEEN_DEFAULTS, ...options } });
    expect([res.status, res.body.error]).toEqual([400, 'unsupported']);
    expect(res.body.message).toContain(named);
  });

  test('priority, retryDelay and a namespace are taken and answered (test/log/queueOptions.test.ts holds what they do)', async () => {
    const res = await call(api.url, 'POST', '/api/v1/configure', { queue: 'qw-conf-ns', namespace: 'billing', options: { ...QUEEN_DEFAULTS, priority: 5, retryDelay: 1000 } });
    expect([res.status, res.body.namespace, res.body.options.priority, res.body.options.retryDelay]).toEqual([200, 'billing', 5, 1000]);
  });
});

describe('push', () => {
  test("201 with Queen's entries; a duplicate names the winner's message_id; no items is 201 []", async () => {
    const first = await call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'qw-push', partition: 'Default', payload: { n: 1 }, transactionId: 'k1' }] });
    expect(first.status).toBe(201);
    expect(first.body).toEqual([expect.objectContaining({ index: 0, transaction_id: 'k1', status: 'queued', message_id: expect.any(String), partition_id: expect.any(String), queueName: 'qw-push' })]);
    const again = await call(api.url, 'POST', '/api/v1/push', { items: [
      { queue: 'qw-push', partition: 'Default', payload: { n: 2 }, transactionId: 'k1' },
      { queue: 'qw-push', partition: 'Default', payload: { n: 3 }, transactionId: 'k2' },
      { queue: 'qw-push', partition: 'Default', payload: { n: 4 }, transactionId: 'k2' },
    ] });
    expect(again.body.map((r: any) => [r.index, r.status])).toEqual([[0, 'duplicate'], [1, 'queued'], [2, 'duplicate']]);
    expect(again.body[0].message_id).toBe(first.body[0].message_id);
    expect(again.body[2].message_id).toBe(again.body[1].message_id);
    const empty = await call(api.url, 'POST', '/api/v1/push', { items: [] });
    expect([empty.status, empty.body]).toEqual([201, []]);
  });

  test('eight concurrent pushes of one key: one queued, seven duplicates carrying its message_id', async () => {
    await call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'qw-race', payload: 0, transactionId: 'seed' }] });
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) =>
      call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'qw-race', partition: 'Default', payload: i, transactionId: 'same' }] })));
    const entries = answers.map((a) => a.body[0]);
    expect(entries.filter((e) => e.status === 'queued')).toHaveLength(1);
    const winner = entries.find((e) => e.status === 'queued').message_id;
    expect(entries.every((e) => e.message_id === winner)).toBe(true);
  });

  test("a traceId is stored and popped as Queen's wire has it (a UUID string), never dropped; a malformed one is refused", async () => {
    const res = await call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'qw-trace', payload: 1, traceId: '8f0c2a4e-5b7d-4c1e-9a3f-2d6b8e0f1a2c' }] });
    expect([res.status, res.body[0].trace_id]).toEqual([201, '8f0c2a4e-5b7d-4c1e-9a3f-2d6b8e0f1a2c']);
    const popped = await call(api.url, 'GET', '/api/v1/pop/queue/qw-trace?wait=false');
    expect([popped.status, popped.body.messages[0].traceId]).toEqual([200, '8f0c2a4e-5b7d-4c1e-9a3f-2d6b8e0f1a2c']);
    const bad = await call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'qw-trace', payload: 1, traceId: 7 }] });
    expect([bad.status, bad.body.error]).toEqual([400, 'log_invalid_trace_id']);
  });
});

describe('push item fields: refused by name, never dropped', () => {
  // Before: each of these was 201 queued, the message stored with a null payload or in Default.
  const stray: Array<[string, Record<string, unknown>, string, string]> = [
    ['data instead of payload', { queue: 'qw-fields', data: { order: 1 } }, 'log_invalid_field', 'data'],
    ['no payload', { queue: 'qw-fields' }, 'log_payload_required', 'payload'],
    ['a misspelled partition', { queue: 'qw-fields', partiton: 'p1', payload: 1 }, 'log_invalid_field', 'partiton'],
    ['a misspelled transactionId', { queue: 'qw-fields', transactionID: 't1', payload: 1 }, 'log_invalid_field', 'transactionID'],
  ];
  test.each(stray)('push: %s is 400 %s naming the field; nothing stored', async (_name, item, code, field) => {
    const res = await call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'qw-fields', payload: 0 }, item] });
    expect([res.status, res.body.error, res.body.index]).toEqual([400, code, 1]);
    expect(res.body.message).toContain(field);
    expect((await call(api.url, 'GET', '/api/v1/pop/queue/qw-fields?wait=false')).status).toBe(204);
  });
  test.each(stray)('transaction wire: %s in a push operation is 400 %s, the operation\'s index; nothing stored', async (_name, item, code, field) => {
    const res = await call(api.url, 'POST', '/api/v1/transaction', {
      operations: [{ type: 'push', items: [{ queue: 'qw-fields', payload: 0 }] }, { type: 'push', items: [{ queue: 'qw-fields', payload: 0 }, item] }],
    });
    expect([res.status, res.body.error, res.body.index]).toEqual([400, code, 1]);
    expect(res.body.message).toContain(field);
    expect((await call(api.url, 'GET', '/api/v1/pop/queue/qw-fields?wait=false')).status).toBe(204);
  });

  test("the items Queen's client sends (queue, partition, payload, transactionId; traceId empty) are taken, a null payload too", async () => {
    const items = [
      { queue: 'qw-client', partition: 'Default', payload: { a: 1 }, transactionId: 'c1' },
      { queue: 'qw-client', partition: 'Default', payload: null, transactionId: 'c2', traceId: '' },
      { queue: 'qw-client', payload: 3, traceId: null },
    ];
    const res = await call(api.url, 'POST', '/api/v1/push', { items });
    expect([res.status, res.body.map((e: { status: string }) => e.status)]).toEqual([201, ['queued', 'queued', 'queued']]);
    const wire = await call(api.url, 'POST', '/api/v1/transaction', { operations: [{ type: 'push', items: [{ queue: 'qw-client', payload: 4 }] }] });
    expect([wire.status, wire.body.ok]).toEqual([200, true]);
    expect((await pop(api.url, 'qw-client', { batch: 10 })).map((m) => m.data)).toEqual([{ a: 1 }, null, 3, 4]);
  });

  // Before: the body's own stray keys (beside `items`, or a push operation's beside `type` and
  // `items`) were ignored and the items answered 201, a `partition` meant for every item among them.
  const strayBody: Array<[string, Record<string, unknown>, string]> = [
    ['a misspelled key beside items', { itemz: 1 }, 'itemz'],
    ['a partition meant for every item', { partition: 'p1' }, 'partition'],
    ['a queue meant for every item', { queue: 'qw-body-other' }, 'queue'],
  ];
  test.each(strayBody)('push body: %s is 400 log_invalid_field naming it; nothing stored', async (_name, extra, field) => {
    const res = await call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'qw-body', payload: 0 }], ...extra });
    expect([res.status, res.body.error, res.body.index]).toEqual([400, 'log_invalid_field', undefined]);
    expect(res.body.message).toContain(field);
    expect((await call(api.url, 'GET', '/api/v1/pop/queue/qw-body?wait=false')).status).toBe(204);
  });

  test('push body: a lone misspelled itemz is named, not answered log_items_required', async () => {
    const res = await call(api.url, 'POST', '/api/v1/push', { itemz: [{ queue: 'qw-body', payload: 0 }] });
    expect([res.status, res.body.error]).toEqual([400, 'log_invalid_field']);
    expect(res.body.message).toContain('itemz');
  });

  test("push body: Queen's documented bufferMs / bufferMax (its server reads neither) are 400 unsupported, naming them", async () => {
    const res = await call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'qw-body', payload: 0 }], bufferMs: 100, bufferMax: 100 });
    expect([res.status, res.body.error]).toEqual([400, 'unsupported']);
    expect(res.body.message).toContain('bufferMs and bufferMax');
    expect((await call(api.url, 'GET', '/api/v1/pop/queue/qw-body?wait=false')).status).toBe(204);
  });

  test.each(strayBody)('transaction wire: %s in a push operation is 400 log_invalid_field, the operation\'s index; nothing stored', async (_name, extra, field) => {
    const res = await call(api.url, 'POST', '/api/v1/transaction', {
      operations: [{ type: 'push', items: [{ queue: 'qw-body', payload: 0 }] }, { type: 'push', items: [{ queue: 'qw-body', payload: 0 }], ...extra }],
    });
    expect([res.status, res.body.error, res.body.index]).toEqual([400, 'log_invalid_field', 1]);
    expect(res.body.message).toContain(field);
    expect((await call(api.url, 'GET', '/api/v1/pop/queue/qw-body?wait=false')).status).toBe(204);
  });
});

describe('pop', () => {
  test("a message carries data and id under Queen's top-level fields; its id is the push's message_id", async () => {
    const pushed = await call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'qw-pop', partition: 'Default', payload: null, transactionId: 'p1' }] });
    const res = await call(api.url, 'GET', '/api/v1/pop/queue/qw-pop?batch=1&wait=false&timeout=30000');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      success: true, queue: 'qw-pop', partition: 'Default', partitionId: pushed.body[0].partition_id,
      leaseId: expect.any(String), consumerGroup: '__QUEUE_MODE__', partitionsClaimed: 1,
    });
    const [m] = res.body.messages;
    expect(m).toMatchObject({
      id: pushed.body[0].message_id, transactionId: 'p1', traceId: null, data: null, producerSub: null,
      partitionId: pushed.body[0].partition_id, partition: 'Default', leaseId: res.body.leaseId, consumerGroup: '__QUEUE_MODE__',
    });
    expect('payload' in m).toBe(false);
  });

  test.each([
    ['subscriptionMode=latest', 'subscriptionMode'],
  ])('%s is 400 unsupported naming it', async (param, named) => {
    const res = await call(api.url, 'GET', `/api/v1/pop/queue/qw-pop-refused?batch=1&wait=false&consumerGroup=g&${param}`);
    expect([res.status, res.body.error]).toEqual([400, 'unsupported']);
    expect(res.body.message).toContain(named);
  });

  test.each([['subscriptionMode=new'], ['subscriptionMode=new-only'], ['subscriptionFrom=now']])(
    '%s: a new group skips the history and gets what is pushed after; the first pop decides', async (param) => {
      const queue = `qw-new-${param.replace(/[^a-z]/gi, '')}`;
      await push(api.url, [1, 2, 3].map((n) => ({ queue, payload: n })));
      const first = await call(api.url, 'GET', `/api/v1/pop/queue/${queue}?batch=10&wait=false&consumerGroup=late&${param}`);
      expect(first.status).toBe(204);
      await push(api.url, [4, 5].map((n) => ({ queue, payload: n })));
      const later = await call(api.url, 'GET', `/api/v1/pop/queue/${queue}?batch=10&wait=false&consumerGroup=late&${param}`);
      expect(later.body.messages.map((m: any) => m.data)).toEqual([4, 5]);
      // A group without the mode reads everything; queue mode cannot ask for it.
      expect((await pop(api.url, queue, { consumerGroup: 'early', batch: 10 })).map((m) => m.data)).toEqual([1, 2, 3, 4, 5]);
      const queueMode = await call(api.url, 'GET', `/api/v1/pop/queue/${queue}?batch=10&wait=false&${param}`);
      expect([queueMode.status, queueMode.body.error]).toEqual([400, 'unsupported']);
    });

  test('the neutral values of those parameters pass', async () => {
    await push(api.url, [{ queue: 'qw-pop-neutral', payload: 1 }]);
    const res = await call(api.url, 'GET', '/api/v1/pop/queue/qw-pop-neutral?batch=1&wait=false&consumerGroup=g&subscriptionMode=from_beginning&autoAck=false&partitions=1');
    expect(res.status).toBe(200);
    expect(res.body.messages).toHaveLength(1);
  });
});

describe('ack', () => {
  test("a single ack answers success; a failed one success false with an error text (what Queen's client reads)", async () => {
    await push(api.url, [{ queue: 'qw-ack', payload: 1, transactionId: 'a1' }]);
    const [m] = await pop(api.url, 'qw-ack');
    const body = { transactionId: m.transactionId, partitionId: m.partitionId, status: 'completed', error: null, consumerGroup: null, leaseId: m.leaseId };
    const ok = await call(api.url, 'POST', '/api/v1/ack', body);
    expect([ok.status, ok.body.success, ok.body.error]).toEqual([200, true, undefined]);
    const again = await call(api.url, 'POST', '/api/v1/ack', body);
    expect([again.status, again.body.success, again.body.error]).toEqual([200, false, 'already_acked']);
  });
});

describe('transaction', () => {
  test("Queen's bundle (pushes without transactionId, acks with consumerGroup, requiredLeases) commits and answers success", async () => {
    await push(api.url, [{ queue: 'qw-tx-in', payload: { n: 1 } }]);
    const [m] = await pop(api.url, 'qw-tx-in', { consumerGroup: 'G' });
    const res = await call(api.url, 'POST', '/api/v1/transaction', {
      operations: [
        { type: 'push', items: [{ queue: 'qw-tx-out', payload: { from: m.transactionId } }] },
        { type: 'ack', transactionId: m.transactionId, partitionId: m.partitionId, status: 'completed', consumerGroup: 'G' },
      ],
      requiredLeases: [m.leaseId],
    });
    expect([res.status, res.body.ok, res.body.success]).toEqual([200, true, true]);
    expect(await pop(api.url, 'qw-tx-in', { consumerGroup: 'G' })).toEqual([]);
    expect((await pop(api.url, 'qw-tx-out')).map((x) => x.data)).toEqual([{ from: m.transactionId }]);
  });

  test('a push operation with a traceId stores it, as the push route does', async () => {
    const res = await call(api.url, 'POST', '/api/v1/transaction', {
      operations: [{ type: 'push', items: [{ queue: 'qw-tx-trace', payload: 1, traceId: '8f0c2a4e-5b7d-4c1e-9a3f-2d6b8e0f1a2c' }] }],
    });
    expect([res.status, res.body.results[0].items[0].trace_id]).toEqual([200, '8f0c2a4e-5b7d-4c1e-9a3f-2d6b8e0f1a2c']);
    expect((await pop(api.url, 'qw-tx-trace')).map((m: any) => m.traceId)).toEqual(['8f0c2a4e-5b7d-4c1e-9a3f-2d6b8e0f1a2c']);
  });

  test('a bundle that does not commit answers success false and an error text', async () => {
    const res = await call(api.url, 'POST', '/api/v1/transaction', {
      operations: [
        { type: 'push', items: [{ queue: 'qw-tx-rolled', payload: 1 }] },
        { type: 'ack', transactionId: 'nobody', partitionId: '00000000-0000-4000-8000-000000000000', status: 'completed' },
      ],
    });
    expect([res.status, res.body.success, typeof res.body.error]).toEqual([200, false, 'string']);
    expect((await call(api.url, 'GET', '/api/v1/pop/queue/qw-tx-rolled?wait=false')).status).toBe(204);
  });
});

describe('queue delete and dead letters', () => {
  test('DELETE /api/v1/resources/queues/:queue answers deleted and removes the messages; existed says whether it was there', async () => {
    await push(api.url, [{ queue: 'qw-del', payload: 1 }]);
    const res = await call(api.url, 'DELETE', '/api/v1/resources/queues/qw-del');
    expect([res.status, res.body.deleted, res.body.existed]).toEqual([200, true, true]);
    expect((await call(api.url, 'GET', '/api/v1/pop/queue/qw-del?wait=false')).status).toBe(204);
    const again = await call(api.url, 'DELETE', '/api/v1/resources/queues/qw-del');
    expect([again.status, again.body.deleted, again.body.existed]).toEqual([200, true, false]);
  });

  test('GET /api/v1/dlq lists a message set aside after retryLimit, with its data, for its queue', async () => {
    await call(api.url, 'POST', '/api/v1/configure', { queue: 'qw-dlq', options: { ...QUEEN_DEFAULTS, retryLimit: 1, retryDelay: 0 } });
    await push(api.url, [{ queue: 'qw-dlq', payload: { message: 'poison' }, transactionId: 'd1' }]);
    for (let i = 0; i < 2; i++) {
      const [m] = await pop(api.url, 'qw-dlq');
      const failed = await call(api.url, 'POST', '/api/v1/ack', {
        transactionId: m.transactionId, partitionId: m.partitionId, status: 'failed', error: 'Test error', consumerGroup: null, leaseId: m.leaseId,
      });
      expect(failed.body.success).toBe(true);
    }
    expect(await pop(api.url, 'qw-dlq')).toEqual([]);
    const res = await call(api.url, 'GET', '/api/v1/dlq?queue=qw-dlq&limit=100&offset=0');
    expect(res.status).toBe(200);
    expect(res.body.messages).toEqual([expect.objectContaining({ transactionId: 'd1', queue: 'qw-dlq', consumerGroup: '__QUEUE_MODE__', data: { message: 'poison' }, retryCount: 2, errorMessage: 'Test error' })]);
    expect(res.body).toMatchObject({ total: 1, pagination: { limit: 100, offset: 0 } });
    expect((await call(api.url, 'GET', '/api/v1/dlq?queue=qw-push')).body.messages).toEqual([]);
    expect((await call(api.url, 'GET', '/api/v1/dlq?queue=qw-dlq&from=2026-01-01T00:00:00Z')).body.total).toBe(1);
  });
});
