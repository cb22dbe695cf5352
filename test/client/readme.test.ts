// The examples of client/README.md, run as written against a real cell (so they cannot rot), and
// the root README's KV, transaction and timer examples written through the client.
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import ts from 'typescript';
import { Queen, QueenError, type Message } from '@queen-kv/client';
import { kvOn } from '@queen-kv/client/pg';
import { useCell } from './helpers';

const cell = useCell();

const ROOT = path.resolve(__dirname, '..', '..', '..');

/** The ```ts blocks of client/README.md, in order. */
function readmeBlocks(): string[] {
  const text = fs.readFileSync(path.join(ROOT, 'client', 'README.md'), 'utf8');
  return [...text.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
}

/** The examples are TypeScript (a type argument, an annotation): their types are stripped, then they run as one async function. */
function compile(source: string, params: string[]): (...a: unknown[]) => Promise<void> {
  const js = ts.transpile(`(async (${params.join(', ')}) => {\n${source}\n})`, { target: ts.ScriptTarget.ES2022 });
  return new Function(`return ${js}`)();
}

test('every example of client/README.md runs as written and does what it says', async () => {
  const { api } = cell;
  const blocks = readmeBlocks();
  expect(blocks.length).toBeGreaterThanOrEqual(8);
  const db = new pg.Client({ connectionString: api.databaseUrl });
  await db.connect();
  await db.query('CREATE TABLE ledger (order_id text PRIMARY KEY, amount int NOT NULL)');
  const logged: unknown[][] = [];
  const emails: unknown[] = [];
  const charged: unknown[] = [];
  try {
    // Imports are provided; the first block (which makes `queen`) runs in the function's scope, every
    // other in a block of its own, so their names do not collide.
    const source = blocks
      .map((b) => b.split('\n').filter((l) => !l.startsWith('import ')).join('\n'))
      .map((b, i) => (i === 0 ? b : `{\n${b}\n}`))
      .join('\n')
      .replaceAll('http://localhost:6632', api.url)
      .replaceAll('process.env.DATABASE_URL', JSON.stringify(api.databaseUrl));
    const run = compile(source, ['Queen', 'QueenError', 'kvOn', 'pg', 'sendEmail', 'chargeCard', 'log']);
    await run(
      Queen,
      QueenError,
      kvOn,
      pg,
      async (m: unknown) => void emails.push(m),
      async (o: unknown) => void charged.push(o),
      (...args: unknown[]) => void logged.push(args),
    );

    const queen = cell.queen;
    // Queues: ord_8812 acked in billing (ord_9001 came later, in the bundle example).
    expect((await queen.queue('orders').group('billing').batch(10).pop()).map((m) => m.data)).toEqual([{ id: 'ord_9001' }]);
    // Consume: the email sent and acked.
    expect(emails).toEqual([{ to: 'ada@example.com' }]);
    expect(await queen.queue('emails').group('mailer').pop()).toEqual([]);
    // The once-marker: charged once, marker written, the message acked for the group.
    expect(charged).toEqual([{ id: 'ord_8812', amount: 1200 }]);
    expect(await queen.kv.get('charges', 'charge:ord_8812')).toMatchObject({ found: true, value: true });
    // The bundle: counter, shipment, reminder timer.
    expect(await queen.kv.get('stats', 'orders:shipped')).toMatchObject({ value: 1 });
    expect((await queen.queue('shipments').pop()).map((m) => m.data)).toEqual([{ orderId: 'ord_8812' }]);
    const reminders = [];
    for await (const page of queen.timers.list({ queue: 'reminders' })) reminders.push(...page.timers);
    expect(reminders).toEqual([expect.objectContaining({ timerKey: 'review:ord_8812', payload: { orderId: 'ord_8812' } })]);
    // KV: the fenced write moved it; the limiter admitted one.
    expect(await queen.kv.get('orders', 'ord_8812')).toMatchObject({ value: { state: 'shipped' } });
    expect(await queen.kv.get('quota', 'acme:2026-08-17T14')).toMatchObject({ value: 1 });
    // Timers: cancelled at the end.
    expect(logged).toContainEqual([1, 'pending']);
    // pg: the row, the marker and the ack committed together.
    expect((await db.query('SELECT order_id, amount FROM ledger')).rows).toEqual([{ order_id: 'ord_8812', amount: 1200 }]);
    expect(await queen.kv.get('ledger', 'order:ord_8812')).toMatchObject({ found: true });
    expect(await queen.queue('orders').group('ledger').pop()).toEqual([
      expect.objectContaining({ data: { id: 'ord_9001' } }),
    ]);
    // Errors: the refusal's status, code and index.
    expect(logged).toContainEqual([400, 'kv_expiry_not_specified', 0]);
    expect(logged.filter((l) => l[0] === 'not acked:' || l[0] === 'over the limit' || l[0] === 'retrying')).toEqual([]);
  } finally {
    await db.end();
  }
});

test("the root README's KV examples, through the client", async () => {
  const { queen } = cell;
  // Reserve an idempotency marker and read two counters in one batch.
  const reserve = await queen.kv.batch([
    { op: 'putIfAbsent', ns: 'orders2', key: 'ord_8812', value: { chargeId: 'ch_8812' }, ttlSeconds: 604800 },
    { op: 'getMany', ns: 'quota2', keys: ['acme:reads', 'acme:writes'] },
  ]);
  expect(reserve).toMatchObject({
    success: true,
    results: [{ op: 'putIfAbsent', applied: true }, { op: 'getMany', rows: [], missing: ['acme:reads', 'acme:writes'] }],
  });
  // A conditional write (a version that is not the current one: nothing written), and a delete.
  const fenced = await queen.kv.put('orders2', 'ord_8812', { state: 'shipped' }, { ttlSeconds: 604800, expect: 90101 });
  expect(fenced).toMatchObject({ applied: false, reason: 'version', value: { chargeId: 'ch_8812' } });
  expect(await queen.kv.delete('orders2', 'ord_8812')).toMatchObject({ applied: true, found: false });
  // A rate limiter in one call: applied is the admission decision.
  const admitted = await queen.kv.incr('quota2', 'acme:2026-08-17T14', 1, { max: 1000, ttlSeconds: 3600 });
  expect(admitted).toMatchObject({ applied: true, value: 1 });
});

test("the root README's transaction example and timer flow, through the client", async () => {
  const { queen } = cell;
  await queen.queue('readme-tx').push([{ data: { orderId: 'ord_8812' } }]);
  const [message]: Message[] = await queen.queue('readme-tx').pop();
  const bundle = () =>
    queen.transaction()
      .ack(message, 'completed')
      .kv({ op: 'putIfAbsent', ns: 'charges2', key: 'charge:ord_8812', value: { chargeId: 'ch_8812' }, ttlSeconds: 86400, required: true });
  expect(await bundle().commit()).toMatchObject({ success: true });
  // Redelivery of finished work: the verdict, nothing committed.
  expect(await bundle().commit()).toMatchObject({ success: false, reason: 'kv_precondition', failedIndex: 1, kvReason: 'exists', value: { chargeId: 'ch_8812' } });

  const first = await queen.timers.schedule({ queue: 'orders', payload: { remind: 'ord_8812' }, delaySeconds: 3600, timerKey: 'remind-ord_8812' });
  expect(first).toEqual({ timerId: expect.any(String), deliverAt: expect.any(String), created: true });
  expect(await queen.timers.schedule({ queue: 'orders', payload: { remind: 'ord_8812' }, delaySeconds: 3600, timerKey: 'remind-ord_8812' })).toEqual({ ...first, created: false });
  expect(await queen.timers.peek(first.timerId)).toMatchObject({ found: true, timer: { timerId: first.timerId, queue: 'orders' } });
  expect(await queen.timers.reschedule(first.timerId, { delaySeconds: 60 })).toMatchObject({ rescheduled: true });
  expect(await queen.timers.cancel(first.timerId)).toMatchObject({ cancelled: true });
  expect(await queen.timers.cancel(first.timerId)).toMatchObject({ cancelled: false, reason: 'absent' });
});
