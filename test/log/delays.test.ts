// Queen's queue options that hold delivery back (docs/log-and-transactions.md): delayedProcessing (a
// message is delivered once it is that many seconds old) and windowBuffer (a partition is leased once
// its newest message is that many seconds old). Time is moved by ageing the stored messages
// (created_at) rather than by sleeping, so no test depends on how fast the machine is.
import { configure, pop, popRaw, push } from './helpers';
import { call } from '../support/http';
import { useApi } from '../support/api';

const api = useApi({}, { connections: 1 });

/** Makes the named messages of a queue `seconds` older, as if they had been pushed that long ago. */
async function age(queue: string, transactionIds: string[], seconds: number): Promise<void> {
  const { rowCount } = await api.pool.query(
    `UPDATE queen.messages m SET created_at = m.created_at - make_interval(secs => $3)
       FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
      WHERE p.id = m.partition_id AND q.name = $1 AND m.transaction_id = ANY ($2::text[])`,
    [queue, transactionIds, seconds],
  );
  expect(rowCount).toBe(transactionIds.length);
}

/**
 * A queue configured to hold messages back for an hour, one message in each of partitions a and b,
 * only b's made older than that: a pop of the queue answers b's message alone. "a" sorts first, so
 * a pop that chose its partition without the hold-back check would take it, and answer nothing.
 */
async function expectAgedPartitionTaken(queue: string, options: Record<string, number>): Promise<void> {
  await configure(api.url, queue, options);
  await push(api.url, ['a', 'b'].map((partition) => ({ queue, partition, payload: partition, transactionId: `${queue}-${partition}` })));
  await age(queue, [`${queue}-b`], 3601);
  expect((await pop(api.url, queue, { batch: 10 })).map((m) => [m.partition, m.transactionId])).toEqual([['b', `${queue}-b`]]);
}

describe('delayedProcessing', () => {
  test('configure takes it, answers it, and keeps it when a later configure omits it', async () => {
    const res = await configure(api.url, 'dl-conf', { delayedProcessing: 2 });
    expect([res.status, res.body.configured, res.body.options.delayedProcessing, res.body.options.windowBuffer]).toEqual([200, true, 2, 0]);
    const later = await configure(api.url, 'dl-conf', { leaseTime: 30 });
    expect([later.body.options.delayedProcessing, later.body.options.leaseTime]).toEqual([2, 30]);
  });

  test.each([[-1], [1.5], ['2'], [86401], [null]])('delayedProcessing %p is 400 log_invalid_options', async (value) => {
    const res = await configure(api.url, 'dl-bad', { delayedProcessing: value });
    expect([res.status, res.body.error]).toEqual([400, 'log_invalid_options']);
    expect(res.body.message).toContain('options.delayedProcessing');
  });

  test('a message is not delivered before it is that old, by queue or by partition, waiting or not; then it is', async () => {
    await configure(api.url, 'dl-basic', { delayedProcessing: 3600 });
    await push(api.url, [{ queue: 'dl-basic', payload: { n: 1 }, transactionId: 'd1' }]);
    expect(await pop(api.url, 'dl-basic')).toEqual([]);
    expect(await pop(api.url, 'dl-basic', { partition: 'Default' })).toEqual([]);
    expect(await pop(api.url, 'dl-basic', { consumerGroup: 'g' })).toEqual([]);
    expect((await popRaw(api.url, 'dl-basic', { wait: true, timeout: 200 })).status).toBe(204);
    await age('dl-basic', ['d1'], 3601);
    const got = await pop(api.url, 'dl-basic');
    expect(got.map((m) => [m.transactionId, m.data])).toEqual([['d1', { n: 1 }]]);
  });

  test('the delay is read when popping: lowering it releases the messages already waiting (as on Queen)', async () => {
    await configure(api.url, 'dl-lower', { delayedProcessing: 3600 });
    await push(api.url, [{ queue: 'dl-lower', payload: 1, transactionId: 'w1' }]);
    expect(await pop(api.url, 'dl-lower')).toEqual([]);
    await configure(api.url, 'dl-lower', { delayedProcessing: 0 });
    expect((await pop(api.url, 'dl-lower')).map((m) => m.transactionId)).toEqual(['w1']);
  });

  test('order holds: a message not yet due holds back the later ones, even ones already that old', async () => {
    await configure(api.url, 'dl-order', { delayedProcessing: 3600 });
    await push(api.url, ['o1', 'o2', 'o3'].map((t) => ({ queue: 'dl-order', payload: t, transactionId: t })));
    await age('dl-order', ['o1', 'o3'], 3601);
    expect((await pop(api.url, 'dl-order', { batch: 10 })).map((m) => m.transactionId)).toEqual(['o1']);
  });

  test('a pop of the queue takes a partition whose next message is due over one whose is not', async () => {
    await expectAgedPartitionTaken('dl-parts', { delayedProcessing: 3600 });
  });

  test('a pop waiting on the queue gets the message once it is due, not before (the server clock says so)', async () => {
    const conf = await configure(api.url, 'dl-wait', { delayedProcessing: 1, leaseTime: 60 });
    expect([conf.status, conf.body.options.delayedProcessing]).toEqual([200, 1]);
    await push(api.url, [{ queue: 'dl-wait', payload: 1, transactionId: 'x1' }]);
    const res = await popRaw(api.url, 'dl-wait', { wait: true, timeout: 20000 });
    expect(res.status).toBe(200);
    const [m] = res.body.messages;
    // Leased at leaseExpiresAt - leaseTime, by the database's clock, as createdAt is.
    const leasedAt = Date.parse(m.leaseExpiresAt) - 60_000;
    expect(leasedAt - Date.parse(m.createdAt)).toBeGreaterThanOrEqual(1000);
  });

  test('a deleted queue takes its delay with it', async () => {
    const conf = await configure(api.url, 'dl-gone', { delayedProcessing: 3600, windowBuffer: 60 });
    expect([conf.status, conf.body.options.delayedProcessing, conf.body.options.windowBuffer]).toEqual([200, 3600, 60]);
    await call(api.url, 'DELETE', '/api/v1/resources/queues/dl-gone');
    const res = await configure(api.url, 'dl-gone', {});
    expect([res.body.options.delayedProcessing, res.body.options.windowBuffer]).toEqual([0, 0]);
  });
});

describe('windowBuffer', () => {
  test('a partition is not leased until its newest message is that old; then all of it is', async () => {
    const res = await configure(api.url, 'wb-basic', { windowBuffer: 3600 });
    expect([res.status, res.body.options.windowBuffer, res.body.options.delayedProcessing]).toEqual([200, 3600, 0]);
    await push(api.url, ['b1', 'b2'].map((t) => ({ queue: 'wb-basic', payload: t, transactionId: t })));
    await age('wb-basic', ['b1'], 3601);
    // b1 is old, but the partition is not quiet: b2 is new.
    expect(await pop(api.url, 'wb-basic', { batch: 10 })).toEqual([]);
    expect(await pop(api.url, 'wb-basic', { batch: 10, partition: 'Default' })).toEqual([]);
    await age('wb-basic', ['b2'], 3601);
    expect((await pop(api.url, 'wb-basic', { batch: 10 })).map((m) => m.transactionId)).toEqual(['b1', 'b2']);
  });

  test('a quiet partition is leased while a busy one of the same queue waits', async () => {
    await expectAgedPartitionTaken('wb-parts', { windowBuffer: 3600 });
  });

  test.each([[-1], [2.5], [true]])('windowBuffer %p is 400 log_invalid_options', async (value) => {
    const res = await configure(api.url, 'wb-bad', { windowBuffer: value });
    expect([res.status, res.body.error]).toEqual([400, 'log_invalid_options']);
  });
});
