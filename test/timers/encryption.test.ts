// Timers into a queue with encryptionEnabled (docs/security.md#encryption-at-rest): the timer row
// holds only the sealed text, the fired message the same sealed text marked sealed, and the payload
// is opened only by the API (peek, list, pop). The stored bytes of both tables hold no plaintext.
import { DEFAULT_TENANT } from '../../shared/config';
import { testPool } from '../support/database';
import { configure, pop, push, transaction } from '../log/helpers';
import { call } from '../support/http';
import { useApi, withKeyedAndKeyless } from '../support/api';
import { sweep } from '../support/sweeper';

const KEY = 'a3f1c2d4e5b6a7980112233445566778899aabbccddeeff00112233445566778';
const SECRET = 'card-4111-1111-1111-1111';
const CEILING = 2000;

const api = useApi({ QUEEN_ENCRYPTION_KEY: KEY, QUEEN_TIMERS_MAX_PAYLOAD_BYTES: String(CEILING) }, { connections: 2, sweepers: true });

/** The timers table's rows for a queue, as PostgreSQL holds them. */
async function storedTimers(queue: string): Promise<Array<{ id: string; payload: string; sealed: boolean }>> {
  const { rows } = await api.pool.query(
    `SELECT t.timer_id::text AS id, t.payload::text AS payload, EXISTS (SELECT 1 FROM queen.sealed_timers s WHERE s.timer_id = t.timer_id) AS sealed
       FROM queen.log_timers t WHERE t.queue = $1 ORDER BY t.created_at, t.timer_id`, [queue]);
  return rows;
}

/** The messages of a queue, as PostgreSQL holds them, and whether each is marked sealed. */
async function storedMessages(queue: string): Promise<Array<{ txid: string; payload: string; sealed: boolean }>> {
  const { rows } = await api.pool.query(
    `SELECT m.transaction_id AS txid, m.payload::text AS payload,
            EXISTS (SELECT 1 FROM queen.sealed_messages s WHERE s.partition_id = m.partition_id AND s.seq = m.seq) AS sealed
       FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.name = $1 ORDER BY m.seq`, [queue]);
  return rows;
}

async function schedule(body: string) {
  const res = await fetch(`${api.url}/api/v1/timers`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return { status: res.status, text: await res.text() };
}

test('a schedule into an encrypted queue: the timer row and the fired message hold only sealed text; peek, list and pop open it exactly', async () => {
  expect((await configure(api.url, 'tenc-a', { encryptionEnabled: true })).status).toBe(200);
  // Written as text: JavaScript's JSON would round the number before it left the test.
  const payload = `{"card": "${SECRET}", "amount": 12345678901234567890, "nested": [1, "two", null]}`;
  const scheduled = await schedule(`{"queue": "tenc-a", "payload": ${payload}, "delaySeconds": 0}`);
  expect(scheduled.status).toBe(200);
  expect(scheduled.text).not.toContain(SECRET);
  const { timerId } = JSON.parse(scheduled.text);
  const [row] = await storedTimers('tenc-a');
  expect(row.id).toBe(timerId);
  expect(row.sealed).toBe(true);
  expect(row.payload).toMatch(/^"qk1:[0-9a-f]{8}:/);
  expect(row.payload).not.toContain(SECRET);
  expect(row.payload).not.toContain('12345678901234567890');

  const peek = await call(api.url, 'GET', `/api/v1/timers/${timerId}`);
  expect(peek.text).toContain('"amount": 12345678901234567890');
  expect([peek.body.timer.payload.card, peek.body.timer.sealed]).toEqual([SECRET, true]);
  const list = await call(api.url, 'GET', '/api/v1/timers?queue=tenc-a');
  expect(list.body.timers.map((t: { payload: { card: string } }) => t.payload.card)).toEqual([SECRET]);

  await sweep(api.databaseUrl);
  expect(await storedTimers('tenc-a')).toEqual([]);
  expect((await api.pool.query(`SELECT count(*)::int AS n FROM queen.sealed_timers`)).rows[0].n).toBe(0);
  const [message] = await storedMessages('tenc-a');
  expect(message).toEqual({ txid: `timer:${timerId}`, payload: row.payload, sealed: true });
  const popped = await call(api.url, 'GET', '/api/v1/pop/queue/tenc-a?batch=1');
  expect(popped.text).toContain('"amount": 12345678901234567890');
  expect(popped.body.messages[0].data).toEqual({ card: SECRET, amount: 12345678901234567890, nested: [1, 'two', null] });
  expect(popped.body.messages[0].sealed).toBe(true);
  expect(popped.text).not.toContain(KEY);
});

test('the payload ceiling is the plaintext\'s: a payload just under it is sealed and stored though its sealed text is longer', async () => {
  await configure(api.url, 'tenc-big', { encryptionEnabled: true });
  const under = JSON.stringify('x'.repeat(CEILING - 2));
  expect(Buffer.byteLength(under)).toBe(CEILING);
  const ok = await schedule(`{"queue": "tenc-big", "payload": ${under}, "delaySeconds": 60}`);
  expect(ok.status).toBe(200);
  const [row] = await storedTimers('tenc-big');
  expect(Buffer.byteLength(row.payload)).toBeGreaterThan(CEILING);
  expect(row.payload).not.toContain('xxxxxxxx');
  const over = await schedule(`{"queue": "tenc-big", "payload": ${JSON.stringify('x'.repeat(CEILING - 1))}, "delaySeconds": 60}`);
  expect([over.status, JSON.parse(over.text).error]).toEqual([400, 'timers_payload_too_large']);
  // A refusal of the request itself comes before any seal, as for a clear queue.
  const bad = await schedule(`{"queue": "tenc-big", "payload": 1, "delaySeconds": -1}`);
  expect([bad.status, JSON.parse(bad.text).error]).toEqual([400, 'timers_invalid_delay']);
  expect(await storedTimers('tenc-big')).toHaveLength(1);
});

test('the transaction wire seals its schedules and its pushes to encrypted queues in one bundle; each pops opened', async () => {
  await configure(api.url, 'tenc-tx-t', { encryptionEnabled: true });
  await configure(api.url, 'tenc-tx-p', { encryptionEnabled: true });
  const res = await transaction(api.url, {
    operations: [{ type: 'push', items: [{ queue: 'tenc-tx-p', payload: { s: `${SECRET}-push` } }] }],
    timers: [
      { op: 'schedule', queue: 'tenc-tx-t', payload: { s: `${SECRET}-timer` }, delaySeconds: 0 },
      { op: 'schedule', queue: 'tenc-tx-clear', payload: { s: 'visible' }, delaySeconds: 0 },
    ],
  });
  expect(res.body.ok).toBe(true);
  const [sealedTimer] = await storedTimers('tenc-tx-t');
  expect([sealedTimer.sealed, sealedTimer.payload.includes(SECRET)]).toEqual([true, false]);
  expect(await storedTimers('tenc-tx-clear')).toMatchObject([{ payload: '{"s": "visible"}', sealed: false }]);
  expect((await storedMessages('tenc-tx-p'))[0].payload).not.toContain(SECRET);
  await sweep(api.databaseUrl);
  expect(await storedMessages('tenc-tx-t')).toMatchObject([{ payload: sealedTimer.payload, sealed: true }]);
  expect(await storedMessages('tenc-tx-clear')).toMatchObject([{ payload: '{"s": "visible"}', sealed: false }]);
  expect((await pop(api.url, 'tenc-tx-t')).map((m) => m.data)).toEqual([{ s: `${SECRET}-timer` }]);
  expect((await pop(api.url, 'tenc-tx-p')).map((m) => m.data)).toEqual([{ s: `${SECRET}-push` }]);
  expect((await pop(api.url, 'tenc-tx-clear')).map((m) => m.data)).toEqual([{ s: 'visible' }]);
});

test('a timerKey already taken stores and marks nothing new; a cancel takes the mark with the timer', async () => {
  await configure(api.url, 'tenc-key', { encryptionEnabled: true });
  const first = await call(api.url, 'POST', '/api/v1/timers', { queue: 'tenc-key', payload: SECRET, delaySeconds: 60, timerKey: 'k1' });
  const again = await call(api.url, 'POST', '/api/v1/timers', { queue: 'tenc-key', payload: 'other', delaySeconds: 60, timerKey: 'k1' });
  expect([first.body.created, again.body.created, again.body.timerId]).toEqual([true, false, first.body.timerId]);
  expect((await call(api.url, 'GET', `/api/v1/timers/${first.body.timerId}`)).body.timer.payload).toBe(SECRET);
  expect((await storedTimers('tenc-key')).map((t) => t.sealed)).toEqual([true]);
  expect((await call(api.url, 'DELETE', `/api/v1/timers/${first.body.timerId}`)).body.cancelled).toBe(true);
  expect((await api.pool.query(`SELECT count(*)::int AS n FROM queen.sealed_timers WHERE timer_id = $1`, [first.body.timerId])).rows[0].n).toBe(0);
});

// A fire that already happened (its message stored before: here one stored in clear under the
// timer's transactionId) stores nothing again and marks nothing: marking the earlier message sealed
// would make every pop of it try to open clear text. The fired timer's own seal mark still goes.
test('a sealed timer whose fire is a duplicate stores and marks nothing; its timer and mark go', async () => {
  const c = await api.pool.connect();
  try {
    await c.query('BEGIN');
    const { rows: [{ id }] } = await c.query(`SELECT gen_random_uuid()::text AS id`);
    await c.query(`SELECT queen.log_push_v1($1, 'tenc-dup', NULL, '"in clear"', $2)`, [DEFAULT_TENANT, `timer:${id}`]);
    await c.query(
      `INSERT INTO queen.log_timers (timer_id, tenant_id, queue, partition, payload, deliver_at)
       VALUES ($1, $2, 'tenc-dup', 'Default', '"qk1:00000000:looks-sealed"', now() - interval '1 second')`, [id, DEFAULT_TENANT]);
    await c.query(`INSERT INTO queen.sealed_timers (timer_id) VALUES ($1)`, [id]);
    const { rows: [{ fired }] } = await c.query(`SELECT queen.timers_fire_v3(1000, 0) AS fired`);
    await c.query('COMMIT');
    expect(fired.duplicates).toBeGreaterThanOrEqual(1);
    expect(await storedMessages('tenc-dup')).toEqual([{ txid: `timer:${id}`, payload: '"in clear"', sealed: false }]);
    expect(await storedTimers('tenc-dup')).toEqual([]);
    expect((await api.pool.query(`SELECT count(*)::int AS n FROM queen.sealed_timers WHERE timer_id = $1`, [id])).rows[0].n).toBe(0);
  } finally {
    await c.query('ROLLBACK').catch(() => undefined);
    c.release();
  }
});

test('a clear timer whose payload looks sealed is answered as it is; one scheduled before its queue turned encrypted fires in clear', async () => {
  const lookalike = `qk1:0000abcd:${Buffer.from('iv').toString('base64')}:${Buffer.from('tag').toString('base64')}:${Buffer.from('x').toString('base64')}`;
  const clear = await call(api.url, 'POST', '/api/v1/timers', { queue: 'tenc-late', payload: lookalike, delaySeconds: 0 });
  await configure(api.url, 'tenc-late', { encryptionEnabled: true });
  const sealed = await call(api.url, 'POST', '/api/v1/timers', { queue: 'tenc-late', payload: SECRET, delaySeconds: 0 });
  const list = await call(api.url, 'GET', '/api/v1/timers?queue=tenc-late');
  const byId = new Map(list.body.timers.map((t: { timerId: string }) => [t.timerId, t]));
  expect(byId.get(clear.body.timerId)).toMatchObject({ payload: lookalike });
  expect(byId.get(clear.body.timerId)).not.toHaveProperty('sealed');
  expect(byId.get(sealed.body.timerId)).toMatchObject({ payload: SECRET, sealed: true });
  await sweep(api.databaseUrl);
  const messages = await pop(api.url, 'tenc-late', { batch: 10 });
  expect(messages.map((m) => [m.data, (m as { sealed?: boolean }).sealed ?? false])).toEqual([[lookalike, false], [SECRET, true]]);
});

test('an API process without the key: a schedule into an encrypted queue is 403 as a push is, on the route and the wire; peek answers payload null', async () => {
  await withKeyedAndKeyless(KEY, async ({ keyed: a, keyless: b, databaseUrl, processes }) => {
    expect((await configure(a, 'tenc-proc', { encryptionEnabled: true })).status).toBe(200);
    const pushed = await push(b, [{ queue: 'tenc-proc', payload: SECRET }]);
    expect([pushed.status, pushed.body.error]).toEqual([403, 'log_encryption_unavailable']);
    const refused = await call(b, 'POST', '/api/v1/timers', { queue: 'tenc-proc', payload: SECRET, delaySeconds: 60 });
    expect([refused.status, refused.body.error]).toEqual([403, 'log_encryption_unavailable']);
    const wire = await transaction(b, { timers: [{ op: 'schedule', queue: 'tenc-proc', payload: SECRET, delaySeconds: 60 }] });
    expect([wire.status, wire.body.error]).toEqual([403, 'log_encryption_unavailable']);
    const ok = await call(a, 'POST', '/api/v1/timers', { queue: 'tenc-proc', payload: SECRET, delaySeconds: 60 });
    expect(ok.status).toBe(200);
    const peek = await call(b, 'GET', `/api/v1/timers/${ok.body.timerId}`);
    expect([peek.body.timer.payload, peek.body.timer.sealedUnreadable, peek.body.timer.sealed]).toEqual([null, true, true]);
    expect(peek.text).not.toContain('qk1:');
    expect((await call(a, 'GET', `/api/v1/timers/${ok.body.timerId}`)).body.timer.payload).toBe(SECRET);
    // Only the one schedule the keyed process sealed is stored.
    const pool = testPool(databaseUrl, 1);
    try {
      const { rows } = await pool.query(`SELECT payload::text AS p FROM queen.log_timers`);
      expect(rows.map((r) => r.p.includes(SECRET))).toEqual([false]);
    } finally {
      await pool.end();
    }
    for (const p of processes) {
      expect(p.output()).not.toContain(KEY);
      expect(p.output()).not.toContain(SECRET);
    }
  });
});

test("0.1.0's fire (timers_fire_v1, a sweeper of that release during a rolling upgrade) stores a sealed, traced timer's text unmarked and untraced, and leaves its mark", async () => {
  await configure(api.url, 'tenc-v1', { encryptionEnabled: true });
  const scheduled = await call(api.url, 'POST', '/api/v1/timers', { queue: 'tenc-v1', payload: SECRET, delaySeconds: 3600 });
  const timerId = scheduled.body.timerId as string;
  const [row] = await storedTimers('tenc-v1');
  expect(row.sealed).toBe(true);
  // Due and traced, and fired by v1, in one transaction: no sweeper of this release takes it first.
  const c = await api.pool.connect();
  try {
    await c.query('BEGIN');
    await c.query(`UPDATE queen.log_timers SET deliver_at = now() - interval '1 second',
                     trace_id = '0af76519-16cd-43dd-8448-eb211c80319c', span_id = '\\xb7ad6b7169203331'::bytea
                   WHERE timer_id = $1`, [timerId]);
    const fired = (await c.query('SELECT queen.timers_fire_v1(1000) AS r')).rows[0].r;
    await c.query('COMMIT');
    expect(fired.fired).toBeGreaterThanOrEqual(1);
    expect(Object.keys(fired).sort()).toEqual(['duplicates', 'fired', 'maxLateSeconds']);
  } finally {
    c.release();
  }
  expect(await storedMessages('tenc-v1')).toEqual([{ txid: `timer:${timerId}`, payload: row.payload, sealed: false }]);
  const traces = await api.pool.query(`SELECT m.trace_id, m.span_id FROM queen.messages m WHERE m.transaction_id = $1`, [`timer:${timerId}`]);
  expect(traces.rows).toEqual([{ trace_id: null, span_id: null }]);
  expect((await api.pool.query(`SELECT count(*)::int AS n FROM queen.sealed_timers WHERE timer_id = $1`, [timerId])).rows[0].n).toBe(1);
  await api.pool.query(`DELETE FROM queen.sealed_timers WHERE timer_id = $1`, [timerId]);
});
