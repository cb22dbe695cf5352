// Four concurrent consumers in one group over 1,000 messages, each message consumed with a
// once-marker in the same bundle as its ack: every message acked once, every marker written once,
// none lost. Over HTTP against the real database.
import { Client } from 'pg';
import { ackOf, configure, Message, once, pop, popRaw, push, transaction } from './helpers';
import { call } from '../support/http';
import { useApi } from '../support/api';

const MESSAGES = 1000;
const PARTITIONS = 8;
const CONSUMERS = 4;

// Thousands of marker writes in seconds: useApi's buckets (UNLIMITED_RATES) are out of their way.
const api = useApi();

test('4 consumers, 1,000 messages, once-markers: every message acked once, every marker once, none lost', async () => {
  const queue = 'race';
  await configure(api.url, queue, { leaseTime: 60 });
  const items = Array.from({ length: MESSAGES }, (_, n) => ({
    queue, partition: `p${n % PARTITIONS}`, payload: { n }, transactionId: `m-${n}`,
  }));
  for (let i = 0; i < items.length; i += 250) {
    const res = await push(api.url, items.slice(i, i + 250));
    expect(res.body.every((r: any) => r.status === 'queued')).toBe(true);
  }

  const ackedBy = new Map<string, number[]>();
  const outcomes: Record<string, number> = {};
  const count = (k: string) => (outcomes[k] = (outcomes[k] ?? 0) + 1);
  let acked = 0;
  const deadline = Date.now() + 90_000;

  const consumer = async (id: number) => {
    while (acked < MESSAGES && Date.now() < deadline) {
      const batch: Message[] = await pop(api.url, queue, { batch: 10, wait: true, timeout: 500 });
      for (const m of batch) {
        const res = await transaction(api.url, {
          operations: [{ type: 'ack', ...ackOf(m) }],
          kv: [once('race', `done:${m.transactionId}`, { by: id })],
        });
        if (res.body.ok === true) {
          acked++;
          ackedBy.set(m.transactionId, [...(ackedBy.get(m.transactionId) ?? []), id]);
          count('ok');
        } else {
          count(res.body.reason ?? `status ${res.status}`);
        }
      }
    }
  };
  await Promise.all(Array.from({ length: CONSUMERS }, (_, id) => consumer(id)));

  // Every message acked exactly once, nothing else happened.
  expect(outcomes).toEqual({ ok: MESSAGES });
  expect(ackedBy.size).toBe(MESSAGES);
  expect([...ackedBy.values()].every((who) => who.length === 1)).toBe(true);
  // More than one consumer did the work.
  expect(new Set([...ackedBy.values()].map((who) => who[0])).size).toBeGreaterThan(1);
  expect((await popRaw(api.url, queue)).status).toBe(204);

  // Every marker exactly once, and each written by the consumer whose ack committed with it.
  const markers = new Map<string, number>();
  let after: string | undefined;
  for (;;) {
    const page = await call(api.url, 'POST', '/api/v1/kv', {
      operations: [{ op: 'getPrefix', ns: 'race', prefix: 'done:', limit: 1000, ...(after ? { after } : {}) }],
    });
    for (const row of page.body.results[0].rows) markers.set(row.key.slice('done:'.length), row.value.by);
    if (!page.body.results[0].truncated) break;
    after = page.body.results[0].nextAfter;
  }
  expect(markers.size).toBe(MESSAGES);
  for (const [txid, who] of ackedBy) expect(markers.get(txid)).toBe(who[0]);

  const db = new Client({ connectionString: api.databaseUrl });
  await db.connect();
  try {
    const { rows } = await db.query(
      `SELECT sum(completed)::int AS completed, sum(deliveries)::int AS deliveries, sum(cursor_seq)::int AS cursor
         FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
         JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND c.consumer_group = '__QUEUE_MODE__'`,
      [queue],
    );
    expect(rows[0]).toEqual({ completed: MESSAGES, deliveries: MESSAGES, cursor: MESSAGES });
  } finally {
    await db.end();
  }
});

test('with zombies (consumers that stall past a 1 s lease), every message is still marked once and acked once', async () => {
  const queue = 'zombies';
  const N = 200;
  await configure(api.url, queue, { leaseTime: 1 });
  await push(api.url, Array.from({ length: N }, (_, n) => ({ queue, partition: `p${n % 4}`, payload: { n }, transactionId: `z-${n}` })));

  const committed = new Map<string, number>();
  const outcomes: Record<string, number> = {};
  const count = (k: string) => (outcomes[k] = (outcomes[k] ?? 0) + 1);
  const deadline = Date.now() + 60_000;
  let stalls = 0;

  const consumer = async (id: number) => {
    while (committed.size < N && Date.now() < deadline) {
      const batch: Message[] = await pop(api.url, queue, { batch: 5, wait: true, timeout: 500 });
      for (const [i, m] of batch.entries()) {
        // Every 40th message (by payload), the first time it is seen, stalls past the lease.
        if (i === 0 && m.data.n % 40 === 0 && m.retryCount === 0 && stalls < 5 && !committed.has(m.transactionId)) {
          stalls++;
          await new Promise((resolve) => setTimeout(resolve, 1300)); // time passing is the test: past the 1 s lease
        }
        const res = await transaction(api.url, {
          operations: [{ type: 'ack', ...ackOf(m) }],
          kv: [once('zombies', `done:${m.transactionId}`, { by: id })],
        });
        if (res.body.ok === true) {
          expect(committed.has(m.transactionId)).toBe(false);
          committed.set(m.transactionId, id);
          count('ok');
        } else if (res.body.reason === 'kv_precondition') {
          // Finished by someone else: the documented answer is a plain ack, which may itself be late.
          count('kv_precondition');
          await call(api.url, 'POST', '/api/v1/ack', ackOf(m));
        } else {
          count(`${res.body.reason}:${res.body.ackReason}`);
        }
      }
    }
  };
  await Promise.all(Array.from({ length: CONSUMERS }, (_, id) => consumer(id)));

  expect(committed.size).toBe(N);
  expect(outcomes.ok).toBe(N);
  // The stalls did happen and were fenced: a zombie never committed.
  expect(stalls).toBeGreaterThan(0);
  expect((outcomes['ack_failed:lease_expired'] ?? 0) + (outcomes.kv_precondition ?? 0)).toBeGreaterThan(0);
  for (const [txid, who] of committed) {
    const got = await call(api.url, 'GET', `/api/v1/kv/zombies/done:${txid}`);
    expect(got.body).toMatchObject({ found: true, value: { by: who } });
  }
  expect((await popRaw(api.url, queue)).status).toBe(204);
});
