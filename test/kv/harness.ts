// What the KV suites share: an in-process API on its own database, a direct SQL client on that
// same database (to plant rows the API could never write, like an expired row the sweeper has not
// pruned yet, and to check what a call left behind), and small helpers over POST /api/v1/kv.
import { Client } from 'pg';
import { startTestApi, TestApi } from '../support/api';
import { call, JsonResponse, kv } from '../support/http';

// The per-tenant token buckets (docs/operations.md) would turn the load-shaped tests here into 429s;
// startTestApi opens them wide (UNLIMITED_RATES). The acquire timeout is long because 2 shared
// cores under a concurrent test can queue a request for more than a second.
const WIDE_OPEN: Record<string, string> = {
  QUEEN_KV_ACQUIRE_TIMEOUT_MS: '30000',
  QUEEN_KV_STATEMENT_TIMEOUT_MS: '30000',
};

export interface KvHarness {
  api: TestApi;
  url: string;
  db: Client;
  /** POST /api/v1/kv */
  batch<T = any>(operations: unknown): Promise<JsonResponse<T>>;
  /** POST /api/v1/kv with one operation; the result element. Fails the test on a non-200. */
  one<T = any>(operation: Record<string, unknown>): Promise<T>;
  call: (method: string, path: string, body?: unknown, headers?: Record<string, string>) => Promise<JsonResponse>;
  /** The physical row, whatever its expiry (null when there is none). */
  row(ns: string, key: string): Promise<KvRow | null>;
  /** Plants a row directly, bypassing every rule: `expiresAt` may lie in the past. */
  plant(ns: string, key: string, value: unknown, opts?: { expiresAt?: string | null; createdAt?: string }): Promise<KvRow>;
  count(ns?: string): Promise<number>;
  close(): Promise<void>;
}

export interface KvRow {
  namespace: string;
  key: string;
  value: unknown;
  value_text: string;
  version: string;
  expires_at: Date | null;
  created_at: Date;
  updated_at: Date;
  shard: number;
}

export async function startKv(env: Record<string, string> = {}): Promise<KvHarness> {
  const api = await startTestApi({ ...WIDE_OPEN, ...env });
  const db = new Client({ connectionString: api.databaseUrl });
  await db.connect();
  const h: KvHarness = {
    api,
    url: api.url,
    db,
    batch: (operations) => kv(api.url, operations),
    async one(operation) {
      const res = await kv(api.url, [operation]);
      if (res.status !== 200 || !res.body?.ok) throw new Error(`expected 200 ok, got ${res.status}: ${res.text}`);
      return res.body.results[0];
    },
    call: (method, path, body, headers) => call(api.url, method, path, body, headers),
    async row(ns, key) {
      const { rows } = await db.query(
        `SELECT namespace, key, value, value::text AS value_text, version::text AS version, expires_at, created_at, updated_at, shard
           FROM queen.kv WHERE tenant_id = '00000000-0000-0000-0000-000000000001' AND namespace = $1 AND key = $2`,
        [ns, key],
      );
      return rows[0] ?? null;
    },
    async plant(ns, key, value, opts = {}) {
      // Default: expired an hour ago, born two hours ago.
      await db.query(
        `INSERT INTO queen.kv (namespace, key, value, version, expires_at, created_at, updated_at)
         VALUES ($1, $2, $3::jsonb, nextval('queen.kv_version_seq'),
                 CASE WHEN $4 THEN now() - interval '1 hour' ELSE $5::timestamptz END,
                 coalesce($6::timestamptz, now() - interval '2 hours'), coalesce($6::timestamptz, now() - interval '2 hours'))`,
        [ns, key, JSON.stringify(value), opts.expiresAt === undefined, opts.expiresAt ?? null, opts.createdAt ?? null],
      );
      return (await h.row(ns, key))!;
    },
    async count(ns) {
      const { rows } = ns === undefined
        ? await db.query('SELECT count(*)::int AS n FROM queen.kv')
        : await db.query('SELECT count(*)::int AS n FROM queen.kv WHERE namespace = $1', [ns]);
      return rows[0].n;
    },
    async close() {
      await db.end();
      await api.close();
    },
  };
  return h;
}

/** Seconds between an ISO instant on the wire and now (positive: in the future). */
export function secondsFromNow(iso: string): number {
  return (Date.parse(iso) - Date.now()) / 1000;
}

/** JavaScript's default sort is UTF-16 order; the store promises UTF-8 byte order. */
export function byteOrder(keys: string[]): string[] {
  return [...keys].sort((a, b) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8')));
}

/** An error answer as docs/errors.md has it: JSON, a code, a sentence, never a stack trace. */
export function expectError(res: JsonResponse, status: number, code: string, index?: number): void {
  expect({ status: res.status, error: res.body?.error }).toEqual({ status, error: code });
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  expect(typeof res.body.message).toBe('string');
  expect(res.body.message.length).toBeGreaterThan(0);
  expect(res.text).not.toMatch(/<html|\bat .*\.js:\d+/i);
  if (index !== undefined) expect(res.body.index).toBe(index);
}
