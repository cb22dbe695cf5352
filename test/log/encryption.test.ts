// encryptionEnabled (docs/security.md#encryption-at-rest): a queue's payloads are stored sealed
// (AES-256-GCM, the key from QUEEN_ENCRYPTION_KEY), opened by pop, the dead-letter read and every
// pop path; pushed sealed by the push route and the transaction wire. The stored bytes hold no
// plaintext, and the key reaches no answer, metric or log line.
import { inspect } from 'node:util';
import { ack, configure, pop, push, transaction } from './helpers';
import { call } from '../support/http';
import { useApi } from '../support/api';
import { scrape } from '../support/metrics';
import { withKeyedAndKeyless } from '../support/api';
import { loadConfig } from '../../shared/config';
import { open, seal } from '../../services/api/seal/seal';

const KEY = 'a3f1c2d4e5b6a7980112233445566778899aabbccddeeff00112233445566778';
const OLD_KEY = '0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0';
const SECRET = 'card-4111-1111-1111-1111';

const api = useApi({ QUEEN_ENCRYPTION_KEY: KEY }, { connections: 1 });

/** The stored payloads of a queue, as PostgreSQL holds them. */
async function stored(queue: string): Promise<string[]> {
  const { rows } = await api.pool.query(
    `SELECT m.payload::text AS p FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.name = $1 ORDER BY m.seq`, [queue]);
  return rows.map((r) => r.p);
}

test('configure answers encryptionEnabled; the stored bytes hold no plaintext; pop opens them exactly (big numbers too)', async () => {
  const res = await configure(api.url, 'enc-a', { encryptionEnabled: true });
  expect([res.status, res.body.options.encryptionEnabled]).toEqual([200, true]);
  // Written as text: JavaScript's JSON would round the number before it left the test.
  const body = `{"items": [{"queue": "enc-a", "transactionId": "e1", "payload": {"card": "${SECRET}", "amount": 12345678901234567890, "nested": [1, "two", null]}}]}`;
  const answer = await fetch(`${api.url}/api/v1/push`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  const pushed = { status: answer.status, text: await answer.text() };
  expect([pushed.status, JSON.parse(pushed.text)[0].status]).toEqual([201, 'queued']);
  // Exact: the number kept all its digits through the seal (jsonb's text, not JavaScript's).
  expect(pushed.text).not.toContain(SECRET);
  const raw = await stored('enc-a');
  expect(raw).toHaveLength(1);
  expect(raw[0]).not.toContain(SECRET);
  expect(raw[0]).not.toContain('12345678901234567890');
  expect(raw[0]).toMatch(/^"qk1:[0-9a-f]{8}:/);
  const { rows } = await api.pool.query(`SELECT count(*)::int AS n FROM queen.sealed_messages`);
  expect(rows[0].n).toBe(1);
  const popped = await call(api.url, 'GET', '/api/v1/pop/queue/enc-a?batch=1');
  expect(popped.text).toContain('"amount": 12345678901234567890');
  expect(popped.body.messages[0].data.card).toBe(SECRET);
  expect(popped.body.messages[0].sealed).toBe(true);
  expect(popped.text).not.toContain(KEY);
});

test('a queue without encryption in the same request stays in clear; both pop right', async () => {
  await configure(api.url, 'enc-b', { encryptionEnabled: true });
  const res = await push(api.url, [
    { queue: 'enc-b', payload: { s: SECRET }, transactionId: 'b1' },
    { queue: 'enc-clear', payload: { s: 'visible' }, transactionId: 'c1' },
    { queue: 'enc-b', payload: 'second', transactionId: 'b2' },
  ]);
  expect(res.body.map((r: { status: string }) => r.status)).toEqual(['queued', 'queued', 'queued']);
  expect((await stored('enc-b')).some((p) => p.includes(SECRET) || p.includes('second'))).toBe(false);
  expect(await stored('enc-clear')).toEqual(['{"s": "visible"}']);
  expect((await pop(api.url, 'enc-b', { batch: 10 })).map((m) => m.data)).toEqual([{ s: SECRET }, 'second']);
  expect((await pop(api.url, 'enc-clear')).map((m) => m.data)).toEqual([{ s: 'visible' }]);
});

test("a payload that mimics a sealed message (another message's sealed text and a sealed mark) is answered as its client wrote it, never opened", async () => {
  await configure(api.url, 'enc-src', { encryptionEnabled: true });
  await push(api.url, [{ queue: 'enc-src', payload: { s: SECRET }, transactionId: 'src1' }]);
  const sealedText = JSON.parse((await stored('enc-src'))[0]) as string;
  // In a clear queue, beside a real sealed message in the same pop (so the answer holds a mark).
  const forged = { data: sealedText, sealed: true, queue: 'enc-forged' };
  await configure(api.url, 'enc-forged', { encryptionEnabled: false });
  await push(api.url, [{ queue: 'enc-forged', payload: forged, transactionId: 'f1' }]);
  const popped = await call(api.url, 'GET', '/api/v1/pop/queue/enc-forged?batch=10');
  expect(popped.body.messages[0].data).toEqual(forged);
  expect(popped.text).not.toContain(SECRET);
  // A timer's payload alike.
  const t = await call(api.url, 'POST', '/api/v1/timers', { queue: 'enc-forged', payload: { sealed: true, payload: sealedText }, delaySeconds: 3600 });
  expect(t.status).toBe(200);
  const peek = await call(api.url, 'GET', `/api/v1/timers/${t.body.timerId}`);
  expect(peek.text).toContain(sealedText);
  expect(peek.text).not.toContain(SECRET);
});

test('the transaction wire seals its pushes; the dead-letter read and a pop by partition open them', async () => {
  await configure(api.url, 'enc-tx', { encryptionEnabled: true, retryLimit: 0 });
  const res = await transaction(api.url, { operations: [{ type: 'push', items: [{ queue: 'enc-tx', partition: 'p1', payload: { s: SECRET } }] }] });
  expect(res.body.ok).toBe(true);
  expect((await stored('enc-tx'))[0]).not.toContain(SECRET);
  const [m] = await pop(api.url, 'enc-tx', { partition: 'p1' });
  expect(m.data).toEqual({ s: SECRET });
  await ack(api.url, m, 'failed');
  const dlq = await call(api.url, 'GET', '/api/v1/dlq?queue=enc-tx');
  expect(dlq.body.messages.map((d: { data: unknown }) => d.data)).toEqual([{ s: SECRET }]);
});

test('concurrent one-item pushes to an encrypted queue are all sealed', async () => {
  await configure(api.url, 'enc-race', { encryptionEnabled: true });
  await Promise.all(Array.from({ length: 6 }, (_, i) => push(api.url, [{ queue: 'enc-race', payload: `${SECRET}-${i}` }])));
  const raw = await stored('enc-race');
  expect(raw).toHaveLength(6);
  expect(raw.some((p) => p.includes(SECRET))).toBe(false);
  expect((await pop(api.url, 'enc-race', { batch: 10 })).map((m) => m.data).sort()).toEqual(Array.from({ length: 6 }, (_, i) => `${SECRET}-${i}`));
});

test('the key is in no answer or metric, nor in JSON or inspect of the config', async () => {
  const metrics = await scrape(api.url);
  expect(metrics).not.toContain(KEY);
  const config = loadConfig({ QUEEN_ENCRYPTION_KEY: KEY, QUEEN_ENCRYPTION_KEY_PREVIOUS: OLD_KEY });
  for (const text of [JSON.stringify(config), inspect(config, { depth: 10, showHidden: true })]) {
    expect(text).not.toContain(KEY);
    expect(text).not.toContain(Buffer.from(KEY, 'hex').toString('base64'));
  }
  expect(() => loadConfig({ QUEEN_ENCRYPTION_KEY: 'short' })).toThrow(/QUEEN_ENCRYPTION_KEY: must be 64 hex digits/);
  expect(() => loadConfig({ QUEEN_ENCRYPTION_KEY: 'short-secret' })).not.toThrow(/short-secret/);
  expect(() => loadConfig({ QUEEN_ENCRYPTION_KEY_PREVIOUS: OLD_KEY })).toThrow(/QUEEN_ENCRYPTION_KEY_PREVIOUS/);
});

test('rotation: a payload sealed under the previous key opens with it beside the new one; with neither, data is null and marked', () => {
  const old = loadConfig({ QUEEN_ENCRYPTION_KEY: OLD_KEY }).encryptionKeys!;
  const rotated = loadConfig({ QUEEN_ENCRYPTION_KEY: KEY, QUEEN_ENCRYPTION_KEY_PREVIOUS: OLD_KEY }).encryptionKeys!;
  const onlyNew = loadConfig({ QUEEN_ENCRYPTION_KEY: KEY }).encryptionKeys!;
  const sealed = seal(old, '{"s": 1}');
  expect(open(rotated, sealed)).toBe('{"s": 1}');
  expect(open(onlyNew, sealed)).toBeUndefined();
  // Altered ciphertext fails the tag.
  const parts = sealed.split(':');
  parts[4] = Buffer.from('tampered').toString('base64');
  expect(open(old, parts.join(':'))).toBeUndefined();
});

test('an API process without the key: configure refuses naming the variable, a push to an encrypted queue is 403, a pop answers data null', async () => {
  await withKeyedAndKeyless(KEY, async ({ keyed: a, keyless: b, processes }) => {
    const refused = await configure(b, 'enc-proc', { encryptionEnabled: true });
    expect([refused.status, refused.body.error]).toEqual([403, 'log_encryption_unavailable']);
    expect(refused.body.message).toContain('QUEEN_ENCRYPTION_KEY');
    expect((await configure(a, 'enc-proc', { encryptionEnabled: true })).status).toBe(200);
    const pushed = await push(b, [{ queue: 'enc-proc', payload: SECRET }]);
    expect([pushed.status, pushed.body.error]).toEqual([403, 'log_encryption_unavailable']);
    expect((await push(a, [{ queue: 'enc-proc', payload: SECRET }])).status).toBe(201);
    const res = await call(b, 'GET', '/api/v1/pop/queue/enc-proc');
    expect([res.body.messages[0].data, res.body.messages[0].sealedUnreadable]).toEqual([null, true]);
    // Every log line either process wrote (debug included): neither the key nor the payload.
    for (const p of processes) {
      expect(p.output()).not.toContain(KEY);
      expect(p.output()).not.toContain(SECRET);
    }
  });
});
