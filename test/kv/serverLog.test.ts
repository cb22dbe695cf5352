// No KV value reaches a log: not PostgreSQL's (at its default log settings: ERROR and above logged,
// log_min_error_statement = error, so a raised error is logged with its DETAIL, HINT, CONTEXT and
// statement), not the cell's. A lost `required` used to be raised with the winner's value as its
// HINT, and PostgreSQL logged that line on every lost race. This suite runs the cell against a
// server of its own that writes its log to a file (logging_collector), reads that file back after
// each call, and looks for a marker string that only the stored values carry.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { Client } from 'pg';
import { loadConfig } from '../../shared/config';
import { applySchema } from '../../shared/db';
import { EmbeddedPostgres, freePort, startEmbeddedPostgres } from '../../shared/embeddedPostgres';
import { ApiServer, startApiServer } from '../../services/api/server';
import { UNLIMITED_RATES } from '../support/api';
import { call, kv } from '../support/http';
import { counter } from '../support/metrics';
import { waitFor } from '../support/wait';

const MARKER = 'kv-value-marker-5e1d';

let dir: string;
let pg: EmbeddedPostgres;
let db: Client;
let server: ApiServer;
/** Every line the cell logged, at every level. */
const cellLines: string[] = [];
let sentinels = 0;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-server-log-'));
  fs.chmodSync(dir, 0o755);
  pg = await startEmbeddedPostgres({
    dataDir: path.join(dir, 'data'),
    port: await freePort(),
    throwaway: true,
    // The log settings stay PostgreSQL's defaults; only where the log goes changes (a file in the
    // data folder, which pg_read_file can read).
    settings: { fsync: 'off', synchronous_commit: 'off', logging_collector: 'on', log_filename: 'server.log', log_rotation_size: '0', log_rotation_age: '0' },
  });
  await applySchema(pg.url);
  db = new Client({ connectionString: pg.url });
  await db.connect();
  const config = loadConfig({ QUEEN_WORKERS: '1', DB_POOL_SIZE: '20', ...UNLIMITED_RATES, DATABASE_URL: pg.url });
  const sink = new Writable({ write: (chunk, _enc, done) => (cellLines.push(String(chunk)), done()) });
  server = await startApiServer(config, pino({ level: 'trace' }, sink), { message: 10, kv: config.kvPoolSize }, 0);
});

afterAll(async () => {
  await server?.close();
  await db?.end();
  await pg?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

/**
 * The server's log as it stands after everything before this call: a WARNING of our own is
 * written and the file is read until it shows, so every line logged before it is there too.
 */
async function serverLog(): Promise<string> {
  const sentinel = `sentinel-${++sentinels}-${Date.now()}`;
  await db.query(`DO $$ BEGIN RAISE WARNING '${sentinel}'; END $$`);
  let text = '';
  const shown = async () => (text = (await db.query(`SELECT pg_read_file(pg_current_logfile()) AS text`)).rows[0].text).includes(sentinel);
  await waitFor(shown, { what: 'the sentinel WARNING in the server log', timeoutMs: 10_000, everyMs: 25 });
  return text;
}

function expectNoMarker(where: string, text: string): void {
  const at = text.indexOf(MARKER);
  // The surrounding text, so a failure shows which line carried it.
  expect({ where, line: at < 0 ? null : text.slice(Math.max(0, at - 300), at + 100) }).toEqual({ where, line: null });
}

/** Where both logs stand now; `clean()` then checks what each logged since. */
async function watchLogs(): Promise<{ clean(): Promise<void> }> {
  const from = (await serverLog()).length;
  const cellFrom = cellLines.length;
  return {
    async clean() {
      expectNoMarker('postgres', (await serverLog()).slice(from));
      expectNoMarker('cell', cellLines.slice(cellFrom).join(''));
    },
  };
}

const WINNER = { secret: MARKER, n: 1 };

test('a lost required on POST /api/v1/kv: the answer carries the value, no log does', async () => {
  const logs = await watchLogs();
  const first = await kv(server.url, [{ op: 'put', ns: 'hyg', key: 'batch', value: WINNER, forever: true }]);
  expect(first.body.ok).toBe(true);
  const res = await kv(server.url, [
    { op: 'put', ns: 'hyg', key: 'beside', value: 1, forever: true },
    { op: 'putIfAbsent', ns: 'hyg', key: 'batch', value: { secret: 'loser' }, forever: true, required: true },
  ]);
  expect(res.status).toBe(200);
  expect(res.body).toEqual({
    ok: false, success: false, reason: 'kv_precondition', failedIndex: 1, kvReason: 'exists',
    version: first.body.results[0].version, value: WINNER,
  });
  // Rolled back: the put beside it left nothing.
  expect((await db.query(`SELECT count(*)::int AS n FROM queen.kv WHERE namespace = 'hyg' AND key = 'beside'`)).rows[0].n).toBe(0);
  await logs.clean();
});

test('a lost required on a path route (PUT /api/v1/kv/:ns/:key): the answer carries the value, no log does', async () => {
  const logs = await watchLogs();
  const first = await call(server.url, 'PUT', '/api/v1/kv/hyg/path', { value: WINNER, forever: true });
  expect(first.status).toBe(200);
  const res = await call(server.url, 'PUT', '/api/v1/kv/hyg/path', { value: 'loser', forever: true, expect: 1, required: true });
  expect(res.status).toBe(200);
  expect(res.body).toEqual({
    ok: false, success: false, reason: 'kv_precondition', failedIndex: 0, kvReason: 'version', version: first.body.version, value: WINNER,
  });
  await logs.clean();
});

test('a lost required on the transaction wire: the answer carries the value, the push beside it is rolled back, no log does', async () => {
  const logs = await watchLogs();
  const first = await kv(server.url, [{ op: 'put', ns: 'hyg', key: 'wire', value: WINNER, forever: true }]);
  const res = await call(server.url, 'POST', '/api/v1/transaction', {
    operations: [{ type: 'push', items: [{ queue: 'hyg-q', payload: { n: 1 }, transactionId: 'hyg-1' }] }],
    kv: [
      { op: 'put', ns: 'hyg', key: 'wire-beside', value: 2, forever: true },
      { op: 'putIfAbsent', ns: 'hyg', key: 'wire', value: 'loser', forever: true, required: true },
    ],
  });
  expect(res.status).toBe(200);
  expect(res.body).toEqual({
    ok: false, success: false, error: expect.stringContaining('kv_precondition'), reason: 'kv_precondition', failedIndex: 2, kvReason: 'exists',
    version: first.body.results[0].version, value: WINNER,
  });
  expect((await db.query(`SELECT count(*)::int AS n FROM queen.kv WHERE namespace = 'hyg' AND key = 'wire-beside'`)).rows[0].n).toBe(0);
  expect((await db.query(`SELECT count(*)::int AS n FROM queen.messages`)).rows[0].n).toBe(0);
  await logs.clean();
});

// A refusal names the field and what kind of JSON it got, never the JSON itself: PostgreSQL logs
// every refusal's message, and a field the client filled by mistake may hold a value.
test.each([
  ['a key that is not a string', { op: 'get', ns: 'hyg', key: { secret: MARKER } }, 'kv_invalid_key'],
  ['a delta that is not a number', { op: 'incr', ns: 'hyg', key: 'c', delta: MARKER, forever: true }, 'kv_invalid_delta'],
  ['an op that is not a name', { op: MARKER, ns: 'hyg', key: 'k' }, 'kv_unknown_op'],
  ['a namespace that is not a name', { op: 'get', ns: MARKER + '!', key: 'k' }, 'kv_invalid_namespace'],
  ['a ttl that is not a number', { op: 'put', ns: 'hyg', key: 'k', value: 1, ttlSeconds: MARKER }, 'kv_invalid_ttl'],
  ['an expect that is not a version', { op: 'put', ns: 'hyg', key: 'k', value: 1, forever: true, expect: MARKER }, 'kv_expect_invalid'],
])('a refusal for %s quotes nothing the client sent', async (_name, op, code) => {
  const logs = await watchLogs();
  const res = await kv(server.url, [op]);
  expect([res.status, res.body.error]).toEqual([400, code]);
  expectNoMarker('answer', res.text);
  await logs.clean();
});

// JavaScript parses an escaped U+0000 and a lone surrogate; PostgreSQL's jsonb refuses them and
// logs the refusal with a CONTEXT line quoting the body up to the escape. Refused before SQL.
const NUL = `"${MARKER}\\u0000"`;
const LONE = `"${MARKER}\\ud800"`;
test.each([
  ['POST /api/v1/kv, U+0000 in a value', 'POST', '/api/v1/kv', `{"operations":[{"op":"put","ns":"hyg","key":"nul","value":${NUL},"forever":true}]}`],
  ['POST /api/v1/kv, a lone surrogate in a value', 'POST', '/api/v1/kv', `{"operations":[{"op":"put","ns":"hyg","key":"sur","value":${LONE},"forever":true}]}`],
  ['PUT /api/v1/kv/:ns/:key, U+0000 in the value', 'PUT', '/api/v1/kv/hyg/nul', `{"value":${NUL},"forever":true}`],
  ['POST /api/v1/push, a lone surrogate in a payload', 'POST', '/api/v1/push', `{"items":[{"queue":"hyg-q","payload":${LONE}}]}`],
  ['POST /api/v1/push, U+0000 in a payload', 'POST', '/api/v1/push', `{"items":[{"queue":"hyg-q","payload":${NUL}}]}`],
  ['POST /api/v1/transaction, U+0000 in a kv value', 'POST', '/api/v1/transaction', `{"kv":[{"op":"put","ns":"hyg","key":"nul","value":${NUL},"forever":true}]}`],
  ['POST /api/v1/timers, a lone surrogate in a payload', 'POST', '/api/v1/timers', `{"queue":"hyg-q","payload":${LONE},"delaySeconds":60}`],
])('%s: 400 invalid_json, and no log quotes the body', async (_name, method, route, body) => {
  const logs = await watchLogs();
  const res = await call(server.url, method, route, body);
  expect([res.status, res.body?.error]).toEqual([400, 'invalid_json']);
  expectNoMarker('answer', res.text);
  await logs.clean();
});

test('a lost required still counts as outcome="precondition" on each route (it is no longer an error to count from)', async () => {
  const count = (op: string) => counter(server.url, 'queen_kv_ops_total', { op, outcome: 'precondition' });
  await kv(server.url, [{ op: 'put', ns: 'hyg', key: 'metric', value: 1, forever: true }]);
  const before = { putIfAbsent: await count('putIfAbsent'), put: await count('put') };
  await kv(server.url, [{ op: 'putIfAbsent', ns: 'hyg', key: 'metric', value: 2, forever: true, required: true }]);
  await call(server.url, 'PUT', '/api/v1/kv/hyg/metric', { value: 2, forever: true, expect: 1, required: true });
  await call(server.url, 'POST', '/api/v1/transaction', { kv: [{ op: 'putIfAbsent', ns: 'hyg', key: 'metric', value: 2, forever: true, required: true }] });
  expect({ putIfAbsent: await count('putIfAbsent'), put: await count('put') }).toEqual({ putIfAbsent: before.putIfAbsent + 2, put: before.put + 1 });
});
