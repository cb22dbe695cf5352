// The README's five-minute tour, run as written: its curl lines parsed from the README (the two
// placeholders filled from the pop's answer), against a real cell, so the front door cannot rot.
import { Curl, curlsIn } from '../support/markdown';
import { useApi } from '../support/api';
import { call } from '../support/http';

const api = useApi();

test('the README tour answers as the README says', async () => {
  const curls = curlsIn('README.md', '## A five-minute tour');
  expect(curls.map((c) => `${c.method} ${c.path.split('?')[0]}`)).toEqual([
    'PUT /api/v1/kv/orders/ord_8812',
    'GET /api/v1/kv/orders/ord_8812',
    'PUT /api/v1/kv/orders/ord_8812',
    'POST /api/v1/kv',
    'POST /api/v1/push',
    'GET /api/v1/pop/queue/charges',
    'POST /api/v1/transaction',
    'POST /api/v1/timers',
  ]);
  const send = (c: Curl, body = c.body) => call(api.url, c.method, c.path, body === undefined ? undefined : body);
  const [put, get, fenced, incr, push, pop, transaction, timer] = curls;

  expect((await send(put)).body).toMatchObject({ applied: true });
  const read = await send(get);
  expect(read.body).toMatchObject({ found: true, value: { state: 'paid' } });
  expect(read.headers.get('etag')).toBe(`"${read.body.version}"`);
  expect((await send(fenced)).body).toMatchObject({ applied: false, reason: 'exists', value: { state: 'paid' } });
  expect((await send(incr)).body).toMatchObject({ ok: true, results: [{ applied: true, value: 1 }] });

  expect((await send(push)).status).toBeLessThan(300);
  const popped = await send(pop);
  const message = popped.body.messages[0];
  expect(message).toMatchObject({ transactionId: 'ord_8812' });
  const filled = transaction.body!.replace('"partitionId":"<from the pop>"', `"partitionId":"${message.partitionId}"`).replace('"leaseId":"<from the pop>"', `"leaseId":"${message.leaseId}"`);
  const committed = await send(transaction, filled);
  expect(committed.body).toMatchObject({ ok: true });

  const scheduled = await send(timer);
  expect(scheduled.body).toMatchObject({ created: true });
});
