// Retries only where the cell says so: 429 and 503 *with* Retry-After, bounded, with the same bytes.
// A retry after a 503 does not duplicate: an incr the cell cancelled (its KV statement ran past the
// statement timeout behind a lock this test holds) applies once when the lock is released, and a
// push or bundle whose first attempt was stored but answered 503 (through a proxy that drops the
// cell's answer) is stored once, because the retry carries the same transactionIds.
import { Client } from 'pg';
import { Queen, QueenError, type RetryInfo } from '@queen-kv/client';
import { faultProxy, startCell, useCell } from './helpers';
import { call } from '../support/http';

// A short KV statement timeout: a statement stuck behind a lock is cancelled and answered
// 503 kv_unavailable with Retry-After: 1 (nothing applied).
const cell = useCell({ QUEEN_KV_STATEMENT_TIMEOUT_MS: '300' });

test('a 503 with Retry-After is retried and the incr applies once', async () => {
  const { queen, api } = cell;
  await queen.kv.put('retry', 'counter', 41, { forever: true });
  const holder = new Client({ connectionString: api.databaseUrl });
  await holder.connect();
  try {
    await holder.query('BEGIN');
    await holder.query(`SELECT 1 FROM queen.kv WHERE namespace = 'retry' AND key = 'counter' FOR UPDATE`);
    const seen: RetryInfo[] = [];
    const client = new Queen({
      url: api.url,
      retry: {
        onRetry: (info) => {
          seen.push(info);
          // The cell said "not now": let the next attempt through.
          if (seen.length === 1) void holder.query('ROLLBACK');
        },
      },
    });
    const answer = await client.kv.incr('retry', 'counter', 1, { forever: true });
    expect(seen[0]).toMatchObject({ attempt: 1, status: 503, code: 'kv_unavailable', method: 'POST', path: '/api/v1/kv' });
    expect(seen[0].delayMs).toBeGreaterThanOrEqual(1000);
    expect(answer).toMatchObject({ applied: true, value: 42 });
    expect(await queen.kv.get('retry', 'counter')).toMatchObject({ value: 42 });
  } finally {
    await holder.end();
  }
});

test('a 429 with Retry-After is retried, and applies', async () => {
  // A write rate of one a second, burst 2, three writes at once: one of them finds the bucket empty
  // and waits, as the cell says (sent one after another, a slow machine refilled the bucket between them).
  const limited = await startCell({ QUEEN_KV_WRITES_PER_SEC: '1', QUEEN_KV_WRITES_BURST: '2' });
  try {
    const answers = await Promise.all(['a', 'b', 'c'].map((key) => limited.queen.kv.put('rate', key, key, { ttlSeconds: 60 })));
    expect(answers.map((a) => a.applied)).toEqual([true, true, true]);
    expect(limited.retries.length).toBeGreaterThanOrEqual(1);
    expect(limited.retries[0]).toMatchObject({ attempt: 1, status: 429, code: 'rate_limited' });
  } finally {
    await limited.api.close();
  }
});

test('a push stored but answered 503 is retried with the same transactionIds: stored once', async () => {
  const { api } = cell;
  const proxy = await faultProxy(api.url, (method, path) => method === 'POST' && path === '/api/v1/push');
  try {
    const seen: RetryInfo[] = [];
    const client = new Queen({ url: proxy.url, retry: { onRetry: (r) => void seen.push(r) } });
    const results = await client.queue('once-only').push([{ data: { n: 1 } }, { data: { n: 2 } }]);
    expect(seen).toHaveLength(1);
    expect(proxy.forwarded).toHaveLength(2);
    // The same bytes both times: the ids were minted once, before the first attempt.
    expect(proxy.forwarded[1].body).toBe(proxy.forwarded[0].body);
    // The retry found both items already stored.
    expect(results.map((r) => r.status)).toEqual(['duplicate', 'duplicate']);
    const popped = await cell.queen.queue('once-only').batch(10).pop();
    expect(popped.map((m) => m.data)).toEqual([{ n: 1 }, { n: 2 }]);
    expect(popped.map((m) => m.transactionId)).toEqual(results.map((r) => r.transactionId));
  } finally {
    await proxy.close();
  }
});

test("a bundle stored but answered 503 is retried with the same bytes: its pushes are stored once", async () => {
  const { api } = cell;
  const proxy = await faultProxy(api.url, (method, path) => method === 'POST' && path === '/api/v1/transaction');
  try {
    const client = new Queen({ url: proxy.url });
    const res = await client.transaction().queue('bundle-out').push([{ data: 'x' }, { data: 'y' }]).commit();
    expect(proxy.forwarded.map((f) => f.path)).toEqual(['/api/v1/transaction', '/api/v1/transaction']);
    expect(proxy.forwarded[1].body).toBe(proxy.forwarded[0].body);
    expect(res).toMatchObject({ success: true, results: [{ type: 'push', items: [{ status: 'duplicate' }, { status: 'duplicate' }] }] });
    const popped = await cell.queen.queue('bundle-out').batch(10).pop();
    expect(popped.map((m) => m.data)).toEqual(['x', 'y']);
  } finally {
    await proxy.close();
  }
});

test('never retried: a 4xx, a 200 verdict, a Retry-After past maxDelayMs, or with retry off', async () => {
  const { api } = cell;
  const seen: RetryInfo[] = [];
  const client = new Queen({ url: api.url, retry: { maxDelayMs: 1000, onRetry: (r) => void seen.push(r) } });

  const bad = await client.kv.batch([{ op: 'put', ns: 'n', key: 'k', value: 1 }]).catch((e: unknown) => e);
  expect(bad).toMatchObject({ status: 400, code: 'kv_expiry_not_specified', index: 0 });

  await client.kv.putIfAbsent('never', 'k', 'first', { ttlSeconds: 60 });
  const verdict = await client.kv.batch([{ op: 'putIfAbsent', ns: 'never', key: 'k', value: 'second', ttlSeconds: 60, required: true }]);
  expect(verdict).toMatchObject({ success: false, reason: 'kv_precondition', value: 'first' });

  // A paused KV answers 503 with Retry-After: 30, longer than this client waits: thrown at once.
  await call(api.url, 'POST', '/api/v1/system/kv-timers', { kv: false });
  try {
    const paused = await client.kv.get('never', 'k').catch((e: unknown) => e);
    expect(paused).toBeInstanceOf(QueenError);
    expect(paused).toMatchObject({ status: 503, code: 'kv_disabled', retryAfterSeconds: 30 });
    const off = new Queen({ url: api.url, retry: false });
    expect(await off.kv.get('never', 'k').catch((e: unknown) => e)).toMatchObject({ status: 503, code: 'kv_disabled' });
    // Inside a bundle the pause is permanent: 403, not retried.
    const inBundle = await client.transaction().kv({ op: 'get', ns: 'never', key: 'k' }).commit().catch((e: unknown) => e);
    expect(inBundle).toMatchObject({ status: 403, code: 'kv_disabled' });
  } finally {
    await call(api.url, 'POST', '/api/v1/system/kv-timers', { kv: true });
  }
  expect(seen).toEqual([]);
});

test('a call that gets no answer is not retried: a network failure is a QueenError with status 0', async () => {
  const client = new Queen({ url: 'http://127.0.0.1:1' });
  const err = await client.kv.get('n', 'k').catch((e: unknown) => e);
  expect(err).toMatchObject({ name: 'QueenError', status: 0, code: 'network_error' });
});
