// Group commit for pushes (services/api/push/coalescer.ts): one-item pushes to a partition that
// arrive while a push to it is in flight go together in one transaction, and each is still answered
// on its own, with its own refusals. Calls made in one tick are deterministic: the first is in
// flight before the others are made. Messages of one transaction share its xmin.
import type { Pool } from 'pg';
import { PushCoalescer } from '../../services/api/push/coalescer';
import { push } from './helpers';
import { useApi } from '../support/api';
import { createTestDatabase, testPool } from '../support/database';
import { metric } from '../support/metrics';
import { call } from '../support/http';

/** The tenant of a cell with tenancy off (shared/config.ts). */
const TENANT = '00000000-0000-0000-0000-000000000001';

let db: { url: string; drop(): Promise<void> };
let pool: Pool;
let coalescer: PushCoalescer;
beforeAll(async () => {
  db = await createTestDatabase();
  pool = testPool(db.url, 10);
  coalescer = new PushCoalescer(pool);
});
afterAll(async () => {
  await pool.end();
  await db.drop();
});

const body = (queue: string, extra: Record<string, unknown> = {}, partition?: string) => {
  const b = { items: [{ queue, ...(partition ? { partition } : {}), payload: { n: 1 }, ...extra }] };
  return [JSON.stringify(b), b] as const;
};
const pushAll = (bodies: (readonly [string, Record<string, unknown>])[]) =>
  bodies.map(([text, b]) => coalescer.push(TENANT, text, b).then((r) => JSON.parse(r)[0], (err) => ({ err: err.code ?? String(err) })));

async function rows(queue: string, on: Pool = pool): Promise<{ seq: number; tx: string; xmin: string; payload: any }[]> {
  const { rows } = await on.query(
    `SELECT m.seq::int, m.transaction_id AS tx, m.xmin::text AS xmin, m.payload FROM queen.messages m
       JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.name = $1 ORDER BY m.seq`,
    [queue],
  );
  return rows;
}

test('pushes made while one is in flight go in one transaction, each answered its own, in order', async () => {
  await Promise.all(pushAll([body('gather')]));
  const answers = await Promise.all(pushAll(Array.from({ length: 10 }, (_, i) => body('gather', { transactionId: `t${i}`, payload: { i } }))));
  expect(answers.map((a) => [a.transaction_id, a.status])).toEqual(Array.from({ length: 10 }, (_, i) => [`t${i}`, 'queued']));
  const stored = (await rows('gather')).slice(1);
  expect(stored.map((r) => [r.seq, r.tx, r.payload.i])).toEqual(Array.from({ length: 10 }, (_, i) => [i + 2, `t${i}`, i]));
  // The first went alone; the nine that came while it was in flight shared one commit.
  expect(new Set(stored.slice(1).map((r) => r.xmin)).size).toBe(1);
  expect(stored[1].xmin).not.toBe(stored[0].xmin);
});

test('a transactionId twice in one gathering is queued once and answered duplicate the second time', async () => {
  await Promise.all(pushAll([body('dupes')]));
  const answers = await Promise.all(pushAll([body('dupes'), body('dupes', { transactionId: 'same' }), body('dupes', { transactionId: 'same' })]));
  expect(answers.map((a) => a.status)).toEqual(['queued', 'queued', 'duplicate']);
  expect((await rows('dupes')).filter((r) => r.tx === 'same')).toHaveLength(1);
});

test('pushes to other partitions and multi-item pushes are not held back by a partition in flight', async () => {
  await Promise.all(pushAll([body('apart'), body('apart', {}, 'p2')]));
  const multi = { items: [{ queue: 'apart', payload: 1 }, { queue: 'apart', payload: 2 }] };
  const answers = await Promise.all([
    ...pushAll([body('apart'), body('apart', {}, 'p2'), body('apart')]),
    coalescer.push(TENANT, JSON.stringify(multi), multi).then((r) => JSON.parse(r)),
  ]);
  expect(answers.slice(0, 3).map((a) => [a.partition, a.status])).toEqual([['Default', 'queued'], ['p2', 'queued'], ['Default', 'queued']]);
  expect(answers[3].map((a: any) => a.status)).toEqual(['queued', 'queued']);
  const stored = await rows('apart');
  // Only the third push waited for the first: the p2 push and the multi-item push each went alone.
  const xmins = stored.map((r) => r.xmin);
  expect(new Set(xmins).size).toBe(xmins.length - 1);
});

test('a body PostgreSQL refuses as data fails alone; the others of its gathering are queued', async () => {
  await Promise.all(pushAll([body('poison')]));
  const nul = '{"items":[{"queue":"poison","payload":"a\\u0000b"}]}';
  const huge = '{"items":[{"queue":"poison","payload":1e999999}]}';
  const deep = `{"items":[{"queue":"poison","payload":${'['.repeat(50_000)}${']'.repeat(50_000)}}]}`;
  const answers = await Promise.all([
    ...pushAll([body('poison', { transactionId: 'before' })]),
    // The gathering's statement fails on the first of them in text order (here the 54: a program limit).
    coalescer.push(TENANT, deep, { items: [{ queue: 'poison', payload: 0 }] }).catch((err) => ({ err: err.code })),
    coalescer.push(TENANT, nul, JSON.parse(nul)).catch((err) => ({ err: err.code })),
    coalescer.push(TENANT, huge, { items: [{ queue: 'poison', payload: 0 }] }).catch((err) => ({ err: err.code })),
    ...pushAll([body('poison', { transactionId: 'after' })]),
  ]);
  expect(answers.map((a: any) => a.err ?? a.status)).toEqual(['queued', '54001', '22P05', '22003', 'queued']);
  expect((await rows('poison')).map((r) => r.tx).slice(1).sort()).toEqual(['after', 'before']);
});

test('a gathering for a partition that does not exist yet falls back to the general path, which creates it', async () => {
  const answers = await Promise.all(pushAll([body('fresh-queue'), body('fresh-queue'), body('fresh-queue', { transactionId: '' })]));
  expect(answers.map((a) => a.err ?? a.status)).toEqual(['queued', 'queued', 'QK400']);
  expect(await rows('fresh-queue')).toHaveLength(2);
});

test('in a gathering, a body the fast path declines is answered alone by the general path; the rest share one commit', async () => {
  await Promise.all(pushAll([body('declined')]));
  const answers = await Promise.all(
    pushAll([
      body('declined'),
      body('declined', { transactionId: 'one' }),
      body('declined', { transactionId: '' }),
      body('declined', { transactionId: 'x'.repeat(300) }),
      body('declined', { transactionId: 'two' }),
    ]),
  );
  expect(answers.map((a) => a.err ?? a.status)).toEqual(['queued', 'queued', 'QK400', 'QK400', 'queued']);
  const stored = (await rows('declined')).slice(2);
  expect(stored.map((r) => [r.seq, r.tx])).toEqual([[3, 'one'], [4, 'two']]);
  expect(stored[0].xmin).toBe(stored[1].xmin);
});

test('log_push_coalesced_v1 takes only the first body\'s partition: a body for another answers NULL and stores nothing', async () => {
  await Promise.all(pushAll([body('mixed'), body('mixed', {}, 'other')]));
  const bodies = [body('mixed', { transactionId: 'a' }), body('mixed', { transactionId: 'b' }, 'other'), body('mixed', { transactionId: 'c' })];
  const { rows: answers } = await pool.query('SELECT queen.log_push_coalesced_v1($1::uuid, $2::jsonb) AS r', [TENANT, `[${bodies.map(([t]) => t).join(',')}]`]);
  expect(answers.map((a) => a.r && JSON.parse(a.r)[0].transaction_id)).toEqual(['a', null, 'c']);
  expect((await rows('mixed')).map((r) => r.tx).filter((tx) => tx.length === 1)).toEqual(['a', 'c']);
});

describe('over HTTP', () => {
  const api = useApi();

  test('60 concurrent pushes to one partition: every one answered queued, seqs contiguous, a malformed one refused alone', async () => {
    await push(api.url, [{ queue: 'http-gather', payload: 0 }]);
    // A number past numeric's range: PostgreSQL refuses it as data (a U+0000 is refused before the
    // gathering, edge/body.ts refuseUnstorable).
    const bad = call(api.url, 'POST', '/api/v1/push', '{"items":[{"queue":"http-gather","payload":1e999999}]}');
    const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => push(api.url, [{ queue: 'http-gather', payload: { i }, transactionId: `h${i}` }])));
    expect(answers.map((a) => [a.status, a.body[0].status])).toEqual(Array(60).fill([201, 'queued']));
    const refused = await bad;
    expect([refused.status, refused.body.error]).toEqual([400, 'invalid_json']);
    const stored = await rows('http-gather', api.server.pools.message);
    expect(stored.map((r) => r.seq)).toEqual(Array.from({ length: 61 }, (_, i) => i + 1));
    expect(stored.slice(1).map((r) => r.tx).sort()).toEqual(Array.from({ length: 60 }, (_, i) => `h${i}`).sort());
    // The operator's view: every push counted once in a statement, and fewer statements than pushes.
    expect(await metric(api.url, 'queen_log_push_gathering_size_sum')).toBe(62);
    expect(await metric(api.url, 'queen_log_push_gathering_size_count')).toBeLessThan(62);
  });
});
