// Queen MQ's JavaScript client against the cell (docs/log-and-transactions.md, "Queen's client"):
// the request shapes that client sends, written here from its recorded requests, and the parts of
// each answer it reads. Our own flows, not the client's tests.
import { startTestApi, TestApi, call } from '../support/api';
import { pop, push } from './helpers';

let api: TestApi;
beforeAll(async () => {
  api = await startTestApi();
});
afterAll(async () => {
  await api.close();
});

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
