// The transaction wire (docs/log-and-transactions.md): the idempotency marker and the ack in one commit, over HTTP against the real database.
import { ack, ackOf, configure, Message, once, pop, popRaw, push, takenOver, transaction } from './helpers';
import { call, kv } from '../support/http';
import { useApi } from '../support/api';
import { sample, scrape } from '../support/metrics';

const api = useApi();

async function marker(ns: string, key: string) {
  return (await call(api.url, 'GET', `/api/v1/kv/${ns}/${encodeURIComponent(key)}`)).body;
}

async function one(queue: string, payload: unknown = { order: 1 }, o: { transactionId?: string } = {}): Promise<Message> {
  await push(api.url, [{ queue, payload, ...o }]);
  const [m] = await pop(api.url, queue);
  return m;
}

describe('the once-marker scenario', () => {
  test('pop, then ack + once-marker in one bundle: both commit, and the message is not redelivered', async () => {
    const m = await one('charges', { order: 'o-1' });
    const res = await transaction(api.url, {
      operations: [{ type: 'ack', ...ackOf(m) }],
      kv: [once('charges', `charge:${m.transactionId}`, { chargeId: 'ch_1' })],
    });
    expect(res.status).toBe(200);
    expect(res.body.ok).toBe(true);
    expect(res.body.results).toHaveLength(2);
    expect(res.body.results[0]).toMatchObject({ index: 0, type: 'ack', ok: true, transactionId: m.transactionId, status: 'completed' });
    // One flat array: the kv answer sits after the operations, and its index says so.
    expect(res.body.results[1]).toMatchObject({ index: 1, op: 'putIfAbsent', applied: true, value: { chargeId: 'ch_1' } });
    expect(await marker('charges', `charge:${m.transactionId}`)).toMatchObject({ found: true, value: { chargeId: 'ch_1' } });
    expect((await popRaw(api.url, 'charges')).status).toBe(204);
    expect((await ack(api.url, m)).body.ackReason).toBe('already_acked');
  });

  test('redelivery of finished work: kv_precondition with the winner value, the ack rolled back, a plain ack takes it off', async () => {
    const m = await one('redelivered', { order: 'o-2' });
    const key = `charge:${m.transactionId}`;
    // The first attempt did the work and marked it, then crashed before acking.
    expect((await kv(api.url, [once('charges', key, { chargeId: 'ch_winner' })])).body.ok).toBe(true);

    const res = await transaction(api.url, {
      operations: [{ type: 'ack', ...ackOf(m) }],
      kv: [once('charges', key, { chargeId: 'ch_again' })],
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      ok: false, success: false, reason: 'kv_precondition', failedIndex: 1, kvReason: 'exists',
      value: { chargeId: 'ch_winner' }, version: expect.anything(),
    });
    expect(await marker('charges', key)).toMatchObject({ value: { chargeId: 'ch_winner' } });
    // The ack rolled back with the marker: the message is still on the group's cursor.
    const plain = await ack(api.url, m);
    expect(plain.body).toMatchObject({ ok: true, status: 'completed' });
    expect((await popRaw(api.url, 'redelivered')).status).toBe(204);
  });

  test('a handler that fails before the commit leaves no marker, so the retry is not blocked', async () => {
    await configure(api.url, 'retry-not-blocked', { retryDelay: 0 }); // redelivered at once: the test is not about the delay
    const m = await one('retry-not-blocked');
    const key = `charge:${m.transactionId}`;
    // The handler threw: no bundle was sent; the consumer nacks.
    expect((await ack(api.url, m, 'failed')).body.ok).toBe(true);
    expect(await marker('charges', key)).toMatchObject({ found: false });
    const [again] = await pop(api.url, 'retry-not-blocked');
    expect(again.transactionId).toBe(m.transactionId);
    expect(again.retryCount).toBe(1);
    const res = await transaction(api.url, { operations: [{ type: 'ack', ...ackOf(again) }], kv: [once('charges', key, 'done')] });
    expect(res.body.ok).toBe(true);
    expect(await marker('charges', key)).toMatchObject({ found: true, value: 'done' });
  });

  test('a bundle whose ack fails for another reason leaves no marker either', async () => {
    const m = await one('unknown-ack');
    const res = await transaction(api.url, {
      operations: [{ type: 'ack', ...ackOf(m), transactionId: 'not-a-message' }],
      kv: [once('charges', 'charge:unknown-ack', 1)],
    });
    expect(res.body).toEqual({ ok: false, success: false, error: expect.stringContaining('not_found'), reason: 'ack_failed', failedIndex: 0, ackReason: 'not_found' });
    expect(await marker('charges', 'charge:unknown-ack')).toMatchObject({ found: false });
  });
});

describe('the zombie', () => {
  test('a bundle whose lease expired writes nothing: not the marker, not its unconditional write, not its push', async () => {
    // Another consumer takes the message over once the zombie's lease lapses.
    const { zombie, heir } = await takenOver(api.url, 'zombie', 'z1');

    const res = await transaction(api.url, {
      operations: [
        { type: 'push', items: [{ queue: 'zombie-side-effects', payload: 'from the zombie', transactionId: 'side-1' }] },
        { type: 'ack', ...ackOf(zombie) },
      ],
      kv: [
        { op: 'put', ns: 'zombie', key: 'audit', value: 'zombie was here', forever: true },
        once('zombie', 'done:z1', 'zombie'),
      ],
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ok: false, success: false, error: expect.stringContaining('lease_expired'), reason: 'ack_failed', failedIndex: 1, ackReason: 'lease_expired' });
    expect(await marker('zombie', 'audit')).toMatchObject({ found: false });
    expect(await marker('zombie', 'done:z1')).toMatchObject({ found: false });
    expect((await popRaw(api.url, 'zombie-side-effects')).status).toBe(204);
    // The push rolled back too: the same transactionId is new to the partition.
    const repush = await push(api.url, [{ queue: 'zombie-side-effects', payload: 'x', transactionId: 'side-1' }]);
    expect(repush.body[0].status).toBe('queued');

    // The heir's bundle commits.
    const ok = await transaction(api.url, { operations: [{ type: 'ack', ...ackOf(heir) }], kv: [once('zombie', 'done:z1', 'heir')] });
    expect(ok.body.ok).toBe(true);
    expect(await marker('zombie', 'done:z1')).toMatchObject({ found: true, value: 'heir' });
  });
});

describe('bundles', () => {
  test('push and ack and kv commit together; results are one flat array', async () => {
    const m = await one('pipeline-in');
    const res = await transaction(api.url, {
      operations: [
        { type: 'ack', ...ackOf(m) },
        { type: 'push', items: [{ queue: 'pipeline-out', payload: { from: m.transactionId } }, { queue: 'pipeline-out', partition: 'p2', payload: 2 }] },
      ],
      kv: [
        { op: 'incr', ns: 'stats', key: 'forwarded', delta: 2, forever: true },
        { op: 'get', ns: 'stats', key: 'never' },
      ],
    });
    expect(res.body.ok).toBe(true);
    expect(res.body.results.map((r: any) => r.index)).toEqual([0, 1, 2, 3]);
    expect(res.body.results[1]).toMatchObject({ type: 'push', items: [{ status: 'queued', partition: 'Default' }, { status: 'queued', partition: 'p2' }] });
    expect(res.body.results[2]).toMatchObject({ op: 'incr', applied: true, value: 2 });
    expect(res.body.results[3]).toMatchObject({ op: 'get', found: false });
    expect((await pop(api.url, 'pipeline-out', { partition: 'Default' })).map((x) => x.data)).toEqual([{ from: m.transactionId }]);
  });

  test('a bundle of 20,000 pushed items commits them all, each answered in its place', async () => {
    // log_apply_v1 once gathered the items into one jsonb with ||, copying it whole at every item
    // (20,000 items took 80 s, holding the partitions' locks all along); now about 2 s here. Speed
    // is for benchmarks; this holds the answer's shape and order at that size.
    const res = await transaction(api.url, {
      operations: Array.from({ length: 1000 }, (_, i) => ({ type: 'push', items: Array.from({ length: 20 }, (_, j) => ({ queue: 'wide-bundle', payload: i * 20 + j })) })),
    });
    expect(res.status).toBe(200);
    expect(res.body.results).toHaveLength(1000);
    expect(res.body.results.every((r: any) => r.items.length === 20 && r.items.every((x: any) => x.status === 'queued'))).toBe(true);
  }, 180_000);

  test('kv only and operations only are bundles too', async () => {
    const k = await transaction(api.url, { kv: [{ op: 'put', ns: 'solo', key: 'k', value: 1, ttlSeconds: 60 }] });
    expect(k.body).toMatchObject({ ok: true, results: [{ index: 0, applied: true }] });
    const p = await transaction(api.url, { operations: [{ type: 'push', items: [{ queue: 'solo', payload: 1 }] }] });
    expect(p.body).toMatchObject({ ok: true, results: [{ index: 0, type: 'push' }] });
  });

  test('a lost precondition rolls back the pushes beside it', async () => {
    await kv(api.url, [once('guard', 'taken')]);
    const res = await transaction(api.url, {
      operations: [{ type: 'push', items: [{ queue: 'guarded', payload: 1, transactionId: 'g1' }] }],
      kv: [{ op: 'put', ns: 'guard', key: 'free', value: 1, forever: true }, once('guard', 'taken')],
    });
    expect(res.body).toMatchObject({ ok: false, reason: 'kv_precondition', failedIndex: 2 });
    expect((await popRaw(api.url, 'guarded')).status).toBe(204);
    expect(await marker('guard', 'free')).toMatchObject({ found: false });
  });

  test('KV is the outermost lock space: a lost precondition is decided before a failing ack', async () => {
    await kv(api.url, [once('order', 'first')]);
    const res = await transaction(api.url, {
      operations: [{ type: 'ack', transactionId: 'nothing', partitionId: '00000000-0000-0000-0000-000000000000', status: 'completed' }],
      kv: [once('order', 'first')],
    });
    expect(res.body).toMatchObject({ ok: false, reason: 'kv_precondition', failedIndex: 1 });
  });

  test('a failed ack in a bundle counts toward retryLimit like a plain one', async () => {
    await configure(api.url, 'bundle-failed', { retryDelay: 0 }); // redelivered at once: the test is not about the delay
    const m = await one('bundle-failed');
    const res = await transaction(api.url, {
      operations: [{ type: 'ack', ...ackOf(m, 'failed') }],
      kv: [{ op: 'incr', ns: 'attempts', key: m.transactionId, forever: true }],
    });
    expect(res.body.results[0]).toMatchObject({ ok: true, status: 'failed', deadLetter: false });
    const [again] = await pop(api.url, 'bundle-failed');
    expect(again.retryCount).toBe(1);
  });
});

describe('the KV rules are the same on the wire', () => {
  // The rules live in SQL once, so they apply identically to the HTTP routes and the transaction
  // wire. Each refusal is a 400 and the ack beside it is not
  // taken: the message is still the consumer's to ack.
  const refusals: Array<[string, Record<string, unknown>[], string]> = [
    ['a put with neither expiry', [{ op: 'put', ns: 'wire-rules', key: 'e', value: 1 }], 'kv_expiry_not_specified'],
    ['an incr with both expiries', [{ op: 'incr', ns: 'wire-rules', key: 'e', ttlSeconds: 60, forever: true }], 'kv_expiry_not_specified'],
    ['expect present but null', [{ op: 'put', ns: 'wire-rules', key: 'e', value: 1, forever: true, expect: null }], 'kv_expect_invalid'],
    ['a key touched twice', [{ op: 'put', ns: 'wire-rules', key: 'd', value: 1, forever: true }, { op: 'get', ns: 'wire-rules', key: 'd' }], 'kv_duplicate_key'],
    ['a value over 64 KiB', [{ op: 'put', ns: 'wire-rules', key: 'big', value: 'x'.repeat(65535), forever: true }], 'kv_value_too_large'],
    ['a bad namespace', [{ op: 'get', ns: '.hidden', key: 'k' }], 'kv_invalid_namespace'],
    ['a misspelled required (requried)', [{ op: 'putIfAbsent', ns: 'wire-rules', key: 'd', value: 1, forever: true, requried: true }], 'kv_invalid_field'],
  ];
  test.each(refusals)('%s: 400, nothing commits, the ack included', async (_name, kvOps, code) => {
    const m = await one(`wire-rules-${code}`);
    const res = await transaction(api.url, { operations: [{ type: 'ack', ...ackOf(m) }], kv: kvOps });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error: code, message: expect.any(String) });
    expect(typeof res.body.index).toBe('number');
    expect(await marker('wire-rules', 'd')).toMatchObject({ found: false });
    expect((await ack(api.url, m)).body).toMatchObject({ ok: true, status: 'completed' });
  });

  test('required is opt-in: a lost precondition without it is a per-element verdict, and the ack commits', async () => {
    await kv(api.url, [once('charges', 'charge:soft')]);
    const m = await one('soft-verdict');
    const res = await transaction(api.url, {
      operations: [{ type: 'ack', ...ackOf(m) }],
      kv: [
        { op: 'putIfAbsent', ns: 'charges', key: 'charge:soft', value: 'again', ttlSeconds: 600 },
        { op: 'put', ns: 'charges', key: 'soft:audit', value: 'written', forever: true },
      ],
    });
    expect(res.status).toBe(200);
    expect(res.body.ok).toBe(true);
    expect(res.body.results[0]).toMatchObject({ type: 'ack', ok: true });
    expect(res.body.results[1]).toMatchObject({ index: 1, applied: false, reason: 'exists', value: true });
    expect(res.body.results[2]).toMatchObject({ index: 2, applied: true });
    expect(await marker('charges', 'soft:audit')).toMatchObject({ found: true, value: 'written' });
    expect((await popRaw(api.url, 'soft-verdict')).status).toBe(204);
  });
});

describe('metrics', () => {
  test('the wire counts its KV operations in queen_kv_ops_total, by outcome', async () => {
    const before = await scrape(api.url);
    const read = (text: string, outcome: string) => sample(text, 'queen_kv_ops_total', { op: 'incr', outcome }) ?? 0;
    const m = await one('metered');
    await transaction(api.url, { operations: [{ type: 'ack', ...ackOf(m), transactionId: 'absent' }], kv: [{ op: 'incr', ns: 'm', key: 'k', forever: true }] });
    await transaction(api.url, { operations: [{ type: 'ack', ...ackOf(m) }], kv: [{ op: 'incr', ns: 'm', key: 'k', forever: true }] });
    const after = await scrape(api.url);
    expect(read(after, 'rolled_back') - read(before, 'rolled_back')).toBe(1);
    expect(read(after, 'ok') - read(before, 'ok')).toBe(1);
  });
});

describe('refusals', () => {
  test('getPrefix inside is 400 kv_get_prefix_not_allowed_in_transaction, and nothing commits', async () => {
    const m = await one('prefix-refused');
    const res = await transaction(api.url, {
      operations: [{ type: 'ack', ...ackOf(m) }],
      kv: [{ op: 'getPrefix', ns: 'charges', prefix: 'charge:' }],
    });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('kv_get_prefix_not_allowed_in_transaction');
    expect((await ack(api.url, m)).body.ok).toBe(true);
  });

  const cases: Array<[string, unknown, string]> = [
    ['invalid JSON', '{"operations": [', 'invalid_json'],
    ['not an object', '[]', 'invalid_json'],
    ['empty bundle', {}, 'tx_empty'],
    ['empty arrays', { operations: [], kv: [] }, 'tx_empty'],
    ['operations not an array', { operations: {} }, 'tx_invalid_operations'],
    ['kv not an array', { kv: 'put' }, 'tx_invalid_kv'],
    ['timers not an array', { timers: 1 }, 'tx_invalid_timers'],
    // A misspelled operations beside kv: refused, not the kv committed and the acks dropped.
    ['a field the bundle does not take', { operation: [{ type: 'push', items: [{ queue: 'q', payload: 1 }] }], kv: [{ op: 'get', ns: 'n', key: 'k' }] }, 'tx_invalid_field'],
    ['__proto__ as a field', '{"kv":[{"op":"get","ns":"n","key":"k"}],"__proto__":{"operations":[]}}', 'tx_invalid_field'],
    ['unknown operation type', { operations: [{ type: 'pop' }] }, 'tx_unknown_operation'],
    ['operation not an object', { operations: [7] }, 'tx_unknown_operation'],
    ['push without items', { operations: [{ type: 'push' }] }, 'log_items_required'],
    ['push with a bad item', { operations: [{ type: 'push', items: [{ queue: 'a b', payload: 1 }] }] }, 'log_invalid_queue'],
    ['ack without partitionId', { operations: [{ type: 'ack', transactionId: 't', status: 'completed' }] }, 'log_invalid_partition_id'],
    ['ack with a bad status', { operations: [{ type: 'ack', transactionId: 't', partitionId: '00000000-0000-0000-0000-000000000000', status: 'ok' }] }, 'log_invalid_status'],
    ['kv op refused by kv_apply_v1', { kv: [{ op: 'frob', ns: 'n', key: 'k', value: 1 }] }, 'kv_unknown_op'],
  ];
  test.each(cases)('%s', async (_name, body, code) => {
    const res = await call(api.url, 'POST', '/api/v1/transaction', body);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error: code, message: expect.any(String) });
  });

  test('a NUL in a kv key or namespace gets the KV route\'s code, not invalid_json', async () => {
    const key = await call(api.url, 'POST', '/api/v1/transaction', '{"kv":[{"op":"get","ns":"n","key":"k"},{"op":"get","ns":"n","key":"a\\u0000b"}]}');
    expect([key.status, key.body.error, key.body.index]).toEqual([400, 'kv_invalid_key', 1]);
    const ns = await call(api.url, 'POST', '/api/v1/transaction', '{"kv":[{"op":"get","ns":"n\\u0000","key":"k"}]}');
    expect([ns.status, ns.body.error, ns.body.index]).toEqual([400, 'kv_invalid_namespace', 0]);
  });

  test('the index of a refused operation is named, within the array its code names', async () => {
    const res = await transaction(api.url, { operations: [{ type: 'push', items: [{ queue: 'ok', payload: 1 }] }, { type: 'nope' }] });
    expect(res.body).toMatchObject({ error: 'tx_unknown_operation', index: 1 });
    // Nothing ran, so there is no flat results array to point into: a kv or timers refusal counts
    // within its own array, however many operations come before it (README, the transaction wire).
    const two = [{ type: 'push', items: [{ queue: 'ok', payload: 1 }] }, { type: 'push', items: [{ queue: 'ok', payload: 2 }] }];
    const kvBad = await transaction(api.url, { operations: two, kv: [{ op: 'get', ns: 'n', key: 'k' }, { op: 'get', ns: '-bad', key: 'k' }] });
    expect([kvBad.status, kvBad.body.error, kvBad.body.index]).toEqual([400, 'kv_invalid_namespace', 1]);
    const timerBad = await transaction(api.url, { operations: two, kv: [{ op: 'get', ns: 'n', key: 'k' }], timers: [{ op: 'snooze', timerId: 'x' }] });
    expect([timerBad.status, timerBad.body.error.startsWith('timers_'), timerBad.body.index]).toEqual([400, true, 0]);
  });
});
