// The once-marker bundle through the client: Queen MQ's KV documentation example as written
// (queenmq.com/use/kv, "The one thing a store on the side cannot do"), a redelivery of work
// already done (the second commit is kv_precondition with the winner's value, nothing in it
// commits, then a plain ack takes the message off), the zombie whose lease lapsed, and the typed
// refusals of a bundle the cell will not run.
import { QueenError, type Message, type TimerOpResult, type TransactionResult } from '@queen-kv/client';
import { useCell } from './helpers';
import { elapse } from '../support/wait';

const cell = useCell();

test("the documented once example runs as written: the marker and the ack commit together", async () => {
  const { queen } = cell;
  const order = { id: 'ord_8812' };
  await queen.queue('orders').push([{ data: order }]);
  const [message] = await queen.queue('orders').group('billing').pop();
  expect(message.data).toEqual(order);
  let charges = 0;
  const chargeCard = async (_o: typeof order) => void charges++;

  // As Queen MQ's KV documentation writes it, with `queen` the client.
  const tx = queen.transaction()
    .once('charges', `charge:${order.id}`, { ttlSeconds: 86400, required: true })
    .ack(message);

  await chargeCard(order);
  const res = await tx.commit();

  if (!res.success && res.reason === 'kv_precondition') {
    await queen.ack(message, 'completed', { group: message.consumerGroup });
  }

  expect(charges).toBe(1);
  expect(res.success).toBe(true);
  const results = (res as Extract<TransactionResult, { success: true }>).results;
  expect(results[0]).toMatchObject({ type: 'ack', index: 0, success: true, status: 'completed', consumerGroup: 'billing' });
  expect(results[1]).toMatchObject({ op: 'putIfAbsent', index: 1, key: 'charge:ord_8812', applied: true, won: true, value: true });
  expect(await queen.kv.get('charges', 'charge:ord_8812')).toMatchObject({ found: true, value: true });
  // The ack committed: the group's cursor is past the message.
  expect(await queen.queue('orders').group('billing').pop()).toEqual([]);
});

test('a redelivery of finished work: kv_precondition with the winner\'s value, nothing commits, then a plain ack', async () => {
  const { queen } = cell;
  // The same order arrives twice (an upstream producer retried under a new transactionId).
  await queen.queue('payments').push([{ data: { orderId: 'ord_1' } }, { data: { orderId: 'ord_1' } }]);
  const handle = async (message: Message<{ orderId: string }>) => {
    const chargeId = `ch_${message.transactionId.slice(0, 8)}`;
    const res = await queen.transaction()
      .ack(message)
      .once('charges', `charge:${message.data.orderId}`, { ttlSeconds: 86400, required: true, value: { chargeId } })
      .queue('receipts').push([{ data: { orderId: message.data.orderId, chargeId } }])
      .commit();
    if (!res.success && res.reason === 'kv_precondition') {
      const ack = await queen.ack(message, 'completed', { group: message.consumerGroup });
      return { res, ack, chargeId };
    }
    return { res, chargeId };
  };

  const [first] = await queen.queue('payments').group('g').pop<{ orderId: string }>();
  const won = await handle(first);
  expect(won.res.success).toBe(true);

  const [second] = await queen.queue('payments').group('g').pop<{ orderId: string }>();
  expect(second.transactionId).not.toBe(first.transactionId);
  const lost = await handle(second);
  // Flat index: the ack is operations[0], the push operations[1], the marker kv[0] = 2.
  expect(lost.res).toEqual({
    success: false,
    reason: 'kv_precondition',
    failedIndex: 2,
    kvReason: 'exists',
    value: { chargeId: won.chargeId },
    version: expect.anything(),
  });
  // Nothing of the losing bundle committed: one receipt, the first one; its ack rolled back too,
  // so the plain ack was the one that took the message off.
  expect(lost.ack).toMatchObject({ success: true, status: 'completed', consumerGroup: 'g' });
  const receipts = await queen.queue('receipts').batch(10).pop();
  expect(receipts.map((m) => m.data)).toEqual([{ orderId: 'ord_1', chargeId: won.chargeId }]);
  expect(await queen.queue('payments').group('g').pop()).toEqual([]);
  // A verdict is a value: nothing was retried.
  expect(cell.retries).toEqual([]);
});

test('a zombie whose lease lapsed loses to the redelivery: verdicts, never throws', async () => {
  const { queen } = cell;
  await queen.queue('slow').config({ leaseTime: 1 }).create();
  await queen.queue('slow').push([{ data: { orderId: 'ord_2' } }]);
  const [zombie] = await queen.queue('slow').pop();
  await elapse(1200); // time passing is the test: the 1 s lease lapses
  const [redelivered] = await queen.queue('slow').pop();
  expect(redelivered.transactionId).toBe(zombie.transactionId);
  expect(redelivered.retryCount).toBe(1);

  const winner = await queen.transaction().once('charges', 'charge:ord_2', { ttlSeconds: 60, value: 'live' }).ack(redelivered).commit();
  expect(winner.success).toBe(true);

  // The zombie's bundle: the marker is evaluated first (the cell's lock order) and lost.
  const late = await queen.transaction().ack(zombie).once('charges', 'charge:ord_2', { ttlSeconds: 60, value: 'zombie' }).commit();
  expect(late).toMatchObject({ success: false, reason: 'kv_precondition', failedIndex: 1, kvReason: 'exists', value: 'live' });
  // Its plain ack is refused as a value: the live consumer already moved the cursor.
  expect(await queen.ack(zombie, 'completed')).toMatchObject({ success: false, ackReason: 'already_acked' });
  // Without a marker, the fence is the ack: its failure rolls back the write beside it.
  const fenced = await queen.transaction().kv({ op: 'put', ns: 'state', key: 'ord_2', value: 'zombie', ttlSeconds: 60 }).ack(zombie).commit();
  expect(fenced).toEqual({ success: false, reason: 'ack_failed', failedIndex: 0, ackReason: 'already_acked' });
  expect(await queen.kv.get('state', 'ord_2')).toMatchObject({ found: false });
});

test('a bundle the cell refuses throws a QueenError with its code, message and index', async () => {
  const { queen } = cell;
  const refused = await queen.transaction()
    .kv({ op: 'get', ns: 'n', key: 'a' })
    .kv({ op: 'getPrefix', ns: 'n', prefix: 'a' })
    .commit()
    .catch((e: unknown) => e);
  expect(refused).toBeInstanceOf(QueenError);
  expect(refused).toMatchObject({ status: 400, code: 'kv_get_prefix_not_allowed_in_transaction', index: 1 });
  expect((refused as QueenError).message).toMatch(/getPrefix/);

  const noExpiry = await queen.transaction().kv({ op: 'put', ns: 'n', key: 'a', value: 1 }).commit().catch((e: unknown) => e);
  expect(noExpiry).toMatchObject({ name: 'QueenError', status: 400, code: 'kv_expiry_not_specified', index: 0 });
  const empty = await queen.transaction().commit().catch((e: unknown) => e);
  expect(empty).toMatchObject({ status: 400, code: 'tx_empty' });
  expect(cell.retries).toEqual([]);
});

test('timers ride the bundle: a schedule commits with the ack and is cancelled in another', async () => {
  const { queen } = cell;
  await queen.queue('reminders-src').push([{ data: 1 }]);
  const [m] = await queen.queue('reminders-src').pop();
  const res = await queen.transaction()
    .ack(m)
    .timer({ op: 'schedule', queue: 'reminders', data: { remind: 'ord_3' }, delaySeconds: 3600, timerKey: 'remind-ord_3' })
    .commit();
  if (!res.success) throw new Error(JSON.stringify(res));
  const timer = res.results[1] as TimerOpResult;
  expect(timer).toMatchObject({ op: 'schedule', index: 1, created: true });
  expect(await queen.timers.peek(timer.timerId)).toMatchObject({ found: true, timer: { queue: 'reminders', payload: { remind: 'ord_3' } } });
  const cancel = await queen.transaction().timer({ op: 'cancel', timerId: timer.timerId }).commit();
  expect(cancel).toMatchObject({ success: true, results: [{ op: 'cancel', cancelled: true }] });
});
