// A lease that expires counts toward retryLimit (queen.log_lapse_lease_v1, sql/functions/log_consume.sql):
// each message it held unacked takes one failed delivery when the next pop takes the partition over,
// and one past the limit is dead-lettered for the group exactly as a `failed` ack past it is, so a
// poison message that kills every consumer before it acks no longer blocks its partition forever.
// Real leases of 1 s over HTTP; a waiting pop is what notices the expiry, as a consumer's would.
import { ack, configure, Message, pop, popRaw, push } from './helpers';
import { call } from '../support/http';
import { elapse } from '../support/wait';
import { useApi } from '../support/api';

const api = useApi({}, { connections: 1 });

/** The next pop once the current lease lapses (the long poll looks again without a notification). */
async function popAfterExpiry(queue: string, o: { batch?: number; consumerGroup?: string } = {}): Promise<Message[]> {
  return pop(api.url, queue, { ...o, wait: true, timeout: 10_000 });
}

/** Sleeps until a lease has certainly lapsed, without popping (so nothing notices it yet): time passing is the test. */
async function outlive(m: Message): Promise<void> {
  const left = Date.parse(m.leaseExpiresAt) - Date.now();
  await elapse(Math.max(0, left) + 150);
}

/** The message's failure row for the group: {failures, dead}, or undefined when it never failed. */
async function failureOf(queue: string, txid: string, group = '__QUEUE_MODE__') {
  const { rows } = await api.pool.query(
    `SELECT f.failures, f.dead_lettered_at IS NOT NULL AS dead FROM queen.message_failures f
       JOIN queen.messages m ON m.partition_id = f.partition_id AND m.seq = f.seq
       JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.name = $1 AND m.transaction_id = $2 AND f.consumer_group = $3`,
    [queue, txid, group],
  );
  return rows[0] as { failures: number; dead: boolean } | undefined;
}

/** The group's operator counters summed over the queue's partitions. */
async function countersOf(queue: string, group = '__QUEUE_MODE__') {
  const { rows } = await api.pool.query(
    `SELECT sum(c.deliveries)::int AS deliveries, sum(c.completed)::int AS completed,
            sum(c.failures)::int AS failures, sum(c.dead_letters)::int AS "deadLetters"
       FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
       JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND c.consumer_group = $2`,
    [queue, group],
  );
  return rows[0];
}

async function poisonAndFine(queue: string, options: Record<string, unknown>) {
  await configure(api.url, queue, { leaseTime: 1, ...options });
  await push(api.url, [
    { queue, payload: 'poison', transactionId: 'poison' },
    { queue, payload: 'fine', transactionId: 'fine' },
  ]);
}

/** The poison message of a retryLimit-1 queue, popped and left to lapse once: the next pop's copy (retryCount 1). */
async function lapsedOnce(queue: string): Promise<Message> {
  await poisonAndFine(queue, { retryLimit: 1 });
  await pop(api.url, queue);
  const [again] = await popAfterExpiry(queue);
  expect(again).toMatchObject({ transactionId: 'poison', retryCount: 1 });
  return again;
}

describe('an expired lease is a failed delivery', () => {
  test('retryLimit 1: popped and never acked twice, the message is dead-lettered and the next pop gets the following one', async () => {
    const queue = 'lapse-1';
    await poisonAndFine(queue, { retryLimit: 1 });
    const [first] = await pop(api.url, queue);
    expect(first).toMatchObject({ transactionId: 'poison', retryCount: 0 });
    const [second] = await popAfterExpiry(queue);
    expect(second).toMatchObject({ transactionId: 'poison', retryCount: 1 });
    expect(await failureOf(queue, 'poison')).toEqual({ failures: 1, dead: false });

    const [next] = await popAfterExpiry(queue);
    expect(next.transactionId).toBe('fine');
    expect(await failureOf(queue, 'poison')).toEqual({ failures: 2, dead: true });
    // The consumer that held it last comes back too late: the group is past the message.
    expect((await ack(api.url, second)).body).toMatchObject({ ok: false, ackReason: 'already_acked' });
    expect((await ack(api.url, next)).body).toMatchObject({ ok: true, status: 'completed' });
    expect((await popRaw(api.url, queue)).status).toBe(204);
    expect(await countersOf(queue)).toEqual({ deliveries: 3, completed: 1, failures: 2, deadLetters: 1 });
  });

  test('retryLimit 2: delivered three times, then set aside', async () => {
    const queue = 'lapse-2';
    await poisonAndFine(queue, { retryLimit: 2 });
    const seen: Array<[string, number]> = [];
    let [m] = await pop(api.url, queue);
    seen.push([m.transactionId, m.retryCount]);
    for (let i = 0; i < 3; i++) {
      [m] = await popAfterExpiry(queue);
      seen.push([m.transactionId, m.retryCount]);
    }
    expect(seen).toEqual([['poison', 0], ['poison', 1], ['poison', 2], ['fine', 0]]);
    expect(await failureOf(queue, 'poison')).toEqual({ failures: 3, dead: true });
    expect(await countersOf(queue)).toMatchObject({ failures: 3, deadLetters: 1 });
  });

  test('retryLimit 0: the first expiry sets it aside, and the pop that noticed moves on to another partition', async () => {
    const queue = 'lapse-0';
    await configure(api.url, queue, { leaseTime: 1, retryLimit: 0 });
    await push(api.url, [
      { queue, partition: 'a', payload: 'poison', transactionId: 'poison' },
      { queue, partition: 'b', payload: 'b1', transactionId: 'b1' },
    ]);
    const [poison] = await pop(api.url, queue);
    expect(poison).toMatchObject({ transactionId: 'poison', partition: 'a' });
    const [b1] = await pop(api.url, queue);
    expect(b1.transactionId).toBe('b1');
    expect((await ack(api.url, b1)).body.ok).toBe(true);
    await push(api.url, [{ queue, partition: 'b', payload: 'b2', transactionId: 'b2' }]);
    await outlive(poison);
    // Partition a was leased longest ago, so it is the one this pop takes over; its only message is
    // dead-lettered there, and the same pop answers with b's message rather than nothing.
    const got = await pop(api.url, queue);
    expect(got.map((m) => m.transactionId)).toEqual(['b2']);
    expect(await failureOf(queue, 'poison')).toEqual({ failures: 1, dead: true });
    expect((await ack(api.url, got[0])).body.ok).toBe(true);
    expect((await popRaw(api.url, queue)).status).toBe(204);
  });

  test('an expired lease whose message a fresh pop then completes is not dead-lettered', async () => {
    const queue = 'lapse-completed';
    const again = await lapsedOnce(queue);
    expect((await ack(api.url, again)).body).toMatchObject({ ok: true, status: 'completed', deadLetter: false });
    expect(await failureOf(queue, 'poison')).toEqual({ failures: 1, dead: false });
    const [next] = await pop(api.url, queue);
    expect(next).toMatchObject({ transactionId: 'fine', retryCount: 0 });
    expect((await ack(api.url, next)).body.ok).toBe(true);
    expect(await countersOf(queue)).toEqual({ deliveries: 3, completed: 2, failures: 1, deadLetters: 0 });
  });

  test('only the messages the lease held unacked count: completed ones do not', async () => {
    const queue = 'lapse-partial';
    await configure(api.url, queue, { leaseTime: 1, retryLimit: 0 });
    await push(api.url, ['m1', 'm2', 'm3'].map((t) => ({ queue, payload: t, transactionId: t })));
    const batch = await pop(api.url, queue, { batch: 2 });
    expect(batch.map((m) => m.transactionId)).toEqual(['m1', 'm2']);
    expect((await ack(api.url, batch[0])).body.ok).toBe(true);
    // m2 is held unacked past the lease: with retryLimit 0 it is set aside, m1 is untouched.
    const got = await popAfterExpiry(queue, { batch: 10 });
    expect(got.map((m) => m.transactionId)).toEqual(['m3']);
    expect(await failureOf(queue, 'm1')).toBeUndefined();
    expect(await failureOf(queue, 'm2')).toEqual({ failures: 1, dead: true });
  });
});

describe('failed acks and expiries add up, and each lease counts once', () => {
  test('a failed ack, then an expiry: dead-lettered at retryLimit 1', async () => {
    const queue = 'mixed-fail-first';
    await poisonAndFine(queue, { retryLimit: 1, retryDelay: 0 });
    const [m] = await pop(api.url, queue);
    expect((await ack(api.url, m, 'failed')).body).toMatchObject({ ok: true, deadLetter: false });
    const [again] = await pop(api.url, queue);
    expect(again).toMatchObject({ transactionId: 'poison', retryCount: 1 });
    const [next] = await popAfterExpiry(queue);
    expect(next.transactionId).toBe('fine');
    expect(await failureOf(queue, 'poison')).toEqual({ failures: 2, dead: true });
  });

  test('an expiry, then a failed ack: the ack is the one past the limit and says so', async () => {
    const queue = 'mixed-expiry-first';
    const again = await lapsedOnce(queue);
    expect((await ack(api.url, again, 'failed')).body).toMatchObject({ ok: true, status: 'failed', deadLetter: true });
    const [next] = await pop(api.url, queue);
    expect(next.transactionId).toBe('fine');
    expect(await countersOf(queue)).toMatchObject({ failures: 2, deadLetters: 1 });
  });

  test('a message acked failed under a lease that then expires is counted once, not twice', async () => {
    const queue = 'mixed-same-lease';
    await configure(api.url, queue, { leaseTime: 1, retryLimit: 1 });
    await push(api.url, ['a', 'b'].map((t) => ({ queue, payload: t, transactionId: t })));
    const batch = await pop(api.url, queue, { batch: 2 });
    // a fails; b is still unsettled, so the lease lives on until it expires.
    expect((await ack(api.url, batch[0], 'failed')).body).toMatchObject({ ok: true, deadLetter: false });
    const again = await popAfterExpiry(queue, { batch: 2 });
    expect(again.map((m) => [m.transactionId, m.retryCount])).toEqual([['a', 1], ['b', 1]]);
    expect(await failureOf(queue, 'a')).toEqual({ failures: 1, dead: false });
    expect(await failureOf(queue, 'b')).toEqual({ failures: 1, dead: false });
    for (const m of again) expect((await ack(api.url, m)).body.ok).toBe(true);
    expect(await countersOf(queue)).toEqual({ deliveries: 4, completed: 2, failures: 2, deadLetters: 0 });
  });

  test('pops racing for one expired lease: one takes it over, and it is counted once', async () => {
    const queue = 'lapse-race';
    await configure(api.url, queue, { leaseTime: 1, retryLimit: 5 });
    await push(api.url, [{ queue, payload: 'x', transactionId: 'x' }]);
    const [m] = await pop(api.url, queue);
    await outlive(m);
    const answers = await Promise.all(Array.from({ length: 8 }, () => pop(api.url, queue)));
    const got = answers.flat();
    expect(got.map((x) => [x.transactionId, x.retryCount])).toEqual([['x', 1]]);
    expect(await failureOf(queue, 'x')).toEqual({ failures: 1, dead: false });
    // The lapsed lease is gone: its holder can neither ack nor extend it.
    expect((await ack(api.url, m)).body.ackReason).toBe('lease_expired');
    expect((await call(api.url, 'POST', `/api/v1/lease/${m.leaseId}/extend`)).body).toMatchObject({ ok: false });
    expect((await ack(api.url, got[0])).body.ok).toBe(true);
  });
});

describe('consumer groups', () => {
  test("one group's expiries and dead letter leave another group's deliveries alone", async () => {
    const queue = 'lapse-groups';
    await poisonAndFine(queue, { retryLimit: 1 });
    const [g1] = await pop(api.url, queue, { consumerGroup: 'crashy' });
    expect(g1.retryCount).toBe(0);
    await popAfterExpiry(queue, { consumerGroup: 'crashy' });
    const [g1next] = await popAfterExpiry(queue, { consumerGroup: 'crashy' });
    expect(g1next.transactionId).toBe('fine');
    expect(await failureOf(queue, 'poison', 'crashy')).toEqual({ failures: 2, dead: true });

    // Another group sees the poison message fresh, and completes it.
    const [g2] = await pop(api.url, queue, { consumerGroup: 'steady' });
    expect(g2).toMatchObject({ transactionId: 'poison', retryCount: 0, consumerGroup: 'steady' });
    expect(await failureOf(queue, 'poison', 'steady')).toBeUndefined();
    expect((await ack(api.url, g2)).body).toMatchObject({ ok: true, deadLetter: false });
    expect(await countersOf(queue, 'steady')).toEqual({ deliveries: 1, completed: 1, failures: 0, deadLetters: 0 });
    expect(await countersOf(queue, 'crashy')).toMatchObject({ failures: 2, deadLetters: 1 });
  });

  test('a group whose lease is still live is not counted when another group notices its own expiry', async () => {
    const queue = 'lapse-groups-live';
    await configure(api.url, queue, { leaseTime: 1, retryLimit: 0 });
    await push(api.url, [{ queue, payload: 'x', transactionId: 'x' }]);
    const [mine] = await pop(api.url, queue, { consumerGroup: 'lapsing' });
    const [theirs] = await pop(api.url, queue, { consumerGroup: 'alive' });
    const ext = await call(api.url, 'POST', `/api/v1/lease/${theirs.leaseId}/extend`, { seconds: 60 });
    expect(ext.body.ok).toBe(true);
    await outlive(mine);
    expect(await pop(api.url, queue, { consumerGroup: 'lapsing' })).toEqual([]);
    expect(await failureOf(queue, 'x', 'lapsing')).toEqual({ failures: 1, dead: true });
    expect(await failureOf(queue, 'x', 'alive')).toBeUndefined();
    expect((await ack(api.url, theirs)).body).toMatchObject({ ok: true, status: 'completed' });
  });
});
