// `timer:` transactionIds are the sweeper's: a timer fires as 'timer:' || timerId, and the
// transactionId is the fire's fence against a duplicate. A client push that took one first made the
// fire a silent duplicate and the timer's payload was never delivered; now every client push with
// that prefix is refused (400 log_reserved_transaction_id), whichever way it comes.
import { pop, push } from './helpers';
import { call } from '../support/http';
import { useApi } from '../support/api';
import { sweep } from '../support/sweeper';

const api = useApi({}, { sweepers: true });

const TIMER_ID = 'timer:6f1c2a3b-0000-4000-8000-000000000001';

test('a client push with a timer: transactionId is 400 on the push route (one item, several, existing queue or new) and in the transaction wire', async () => {
  await push(api.url, [{ queue: 'reserved', payload: 0 }]);
  const refusals = [
    // One item to an existing partition: the push fast path's shape.
    await push(api.url, [{ queue: 'reserved', payload: 1, transactionId: TIMER_ID }]),
    // To a queue not created yet, and as the second item of a request.
    await push(api.url, [{ queue: 'reserved-new', payload: 1, transactionId: 'timer:x' }]),
    await push(api.url, [{ queue: 'reserved', payload: 1 }, { queue: 'reserved', payload: 2, transactionId: 'timer:' }]),
    await call(api.url, 'POST', '/api/v1/transaction', { operations: [{ type: 'push', items: [{ queue: 'reserved', payload: 1, transactionId: TIMER_ID }] }] }),
  ];
  for (const res of refusals) {
    expect([res.status, res.body.error]).toEqual([400, 'log_reserved_transaction_id']);
    expect(res.body.message).toMatch(/timer:/);
  }
  expect(refusals[2].body.index).toBe(1);
  // Concurrent one-item pushes (gathered into one statement): the reserved one is refused alone.
  const gathered = await Promise.all([
    push(api.url, [{ queue: 'reserved', payload: 'a', transactionId: 'g1' }]),
    push(api.url, [{ queue: 'reserved', payload: 'b', transactionId: TIMER_ID }]),
    push(api.url, [{ queue: 'reserved', payload: 'c', transactionId: 'g2' }]),
  ]);
  expect(gathered.map((r) => r.body.error ?? r.body[0].status)).toEqual(['queued', 'log_reserved_transaction_id', 'queued']);
  // Nothing stored under it, nothing created for it; `timer:` anywhere but the start is an ordinary id.
  const popped = await pop(api.url, 'reserved', { batch: 100 });
  expect(popped.map((m) => m.data)).toEqual([0, 'a', 'c']);
  expect((await pop(api.url, 'reserved-new')).length).toBe(0);
  expect((await push(api.url, [{ queue: 'reserved', payload: 1, transactionId: 'my-timer:1' }])).body[0].status).toBe('queued');
});

test('a push cannot swallow a timer: the fire into that queue delivers the timer\'s payload', async () => {
  const scheduled = await call(api.url, 'POST', '/api/v1/timers', { queue: 'swallow', payload: { from: 'timer' }, delaySeconds: 0 });
  const timerTx = `timer:${scheduled.body.timerId}`;
  const squat = await push(api.url, [{ queue: 'swallow', payload: { from: 'client' }, transactionId: timerTx }]);
  expect(squat.status).toBe(400);
  await sweep(api.databaseUrl, 2);
  const messages = await pop(api.url, 'swallow', { batch: 10 });
  expect(messages.map((m) => [m.transactionId, m.data])).toEqual([[timerTx, { from: 'timer' }]]);
});
