// The built API as it runs in production: `node dist/services/api/main.js`, two cluster workers, a
// real database. Worker death under load, cluster-wide /metrics, request logs, SIGTERM drain.
import http from 'node:http';
import { Client } from 'pg';
import { createApiMetrics } from '../../shared/metrics';
import { freePort } from '../../shared/embeddedPostgres';
import { DEFAULT_TENANT } from '../../shared/config';
import { runLoad } from './load';
import { createTestDatabase, untilWaitingOnLock } from '../support/database';
import { request } from '../support/http';
import { checkExposition, sample } from '../support/metrics';
import { alive, API_MAIN, LogLine, Spawned, spawnLogged, untilGone } from '../support/processes';

let db: { url: string; drop(): Promise<void> };
let api: Spawned;
let port: number;

// Each worker logs this itself (pid = the worker), replacements included.
const listening = (l: LogLine) => l.msg === 'API worker listening';
const kvGetLine = (pid: number) => (l: LogLine) =>
  l.pid === pid && l.msg === 'request completed' && l.req?.method === 'GET' && String(l.req?.path).startsWith('/api/v1/kv/') && l.res?.statusCode === 200;

/** Live worker pids: those that logged listening and have not been reported dead. */
function liveWorkers(): number[] {
  const dead = new Set(api.lines.filter((l) => l.msg === 'API worker died; replacing it').map((l) => l.workerPid));
  return [...new Set(api.lines.filter(listening).map((l) => l.pid as number))].filter((p) => !dead.has(p));
}

async function waitForWorkers(n: number): Promise<number[]> {
  await api.waitForLine(() => liveWorkers().length >= n, `${n} live workers`);
  return liveWorkers();
}

async function scrape(path = '/metrics'): Promise<string> {
  const r = await request(port, 'GET', path);
  expect(r.status).toBe(200);
  expect(r.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return r.text;
}

/** KV GETs answered 200, counted from the workers' own request lines: the truth /metrics must sum to. */
function servedGets(pids: number[]): number {
  return pids.reduce((n, pid) => n + api.lines.filter(kvGetLine(pid)).length, 0);
}

beforeAll(async () => {
  db = await createTestDatabase();
  port = await freePort();
  api = spawnLogged(process.execPath, [API_MAIN], {
    DATABASE_URL: db.url,
    PORT: String(port),
    QUEEN_WORKERS: '2',
    DB_POOL_SIZE: '16',
    LOG_LEVEL: 'info',
    QUEEN_SHUTDOWN_TIMEOUT_MS: '15000',
    // The blocked request of the SIGTERM test waits on a row lock longer than the default 5 s.
    QUEEN_KV_STATEMENT_TIMEOUT_MS: '60000',
    // The load here is about processes, not the per-tenant buckets.
    QUEEN_KV_READS_PER_SEC: '100000',
    QUEEN_KV_READS_BURST: '100000',
    QUEEN_KV_WRITES_PER_SEC: '100000',
    QUEEN_KV_WRITES_BURST: '100000',
    QUEEN_KV_CELL_OPS_PER_SEC: '1000000',
  });
  await waitForWorkers(2);
});

afterAll(async () => {
  if (api.child.exitCode === null && api.child.signalCode === null) {
    api.child.kill('SIGKILL');
    await api.exited;
  }
  // Workers of a SIGKILLed primary notice the lost IPC channel and exit; wait for them by PID.
  for (const pid of new Set(api.lines.filter(listening).map((l) => l.pid as number))) {
    await untilGone(pid, 5_000).catch(() => undefined);
  }
  await db.drop();
});

test('the boot log states the per-worker pool sizes from the process budget', async () => {
  const line = await api.waitForLine((l) => l.msg === 'config: kv_timers', 'config: kv_timers');
  // DB_POOL_SIZE 16 and QUEEN_KV_POOL_SIZE clamp(16/10, 4, 32) = 4 are budgets of the process, split over 2 workers.
  expect(line).toMatchObject({ workers: 2, messagePoolPerWorker: 8, kvPoolPerWorker: 2 });
});

test('two workers answer; /metrics on any worker is the sum over both, and parses as Prometheus text', async () => {
  const workers = await waitForWorkers(2);
  const results = await runLoad({
    count: 60,
    concurrency: 4,
    call: (i) => request(port, 'GET', `/api/v1/kv/deploy/absent-${i}`, { headers: { 'x-request-id': `sum-${i}` } }),
  });
  for (const r of results) {
    expect(r.error).toBeUndefined();
    expect(r.ok!.status).toBe(200);
    expect(r.ok!.headers.get('x-request-id')).toBe(`sum-${r.index}`);
  }
  await api.waitForLine(() => servedGets(workers) === 60, 'request lines of the 60 GETs');
  // Both workers took some: otherwise the sum below proves nothing about aggregation.
  for (const pid of workers) expect(api.lines.filter(kvGetLine(pid)).length).toBeGreaterThan(0);

  const expected = new Set(createApiMetrics().register.getMetricsAsArray().map((m) => m.name));
  // Several scrapes on fresh connections land on both workers; each must see the cluster's total.
  for (let i = 0; i < 6; i++) {
    const text = await scrape(i % 2 ? '/metrics/prometheus' : '/metrics');
    expect(sample(text, 'queen_kv_ops_total', { op: 'get', outcome: 'ok' })).toBe(60);
    const families = checkExposition(text);
    for (const name of expected) expect(families.has(name)).toBe(true);
    // prom-client's default process metrics, aggregated too.
    expect(families.has('process_cpu_user_seconds_total')).toBe(true);
    expect(families.has('nodejs_heap_size_used_bytes')).toBe(true);
    // The switch gauges are a view of shared state: min over workers, never 2.
    expect(sample(text, 'queen_kv_timers_switch', { switch: 'kv' })).toBe(1);
  }
});

test('request lines carry an id (the incoming x-request-id when plain) and never a query string or a body', async () => {
  const secretValue = 'do-not-log-this-value-7f3a';
  const put = await request(port, 'PUT', '/api/v1/kv/deploy/logged', { body: { value: secretValue, ttlSeconds: 60 }, headers: { 'x-request-id': 'trace-put-1' } });
  expect(put.status).toBe(200);
  const refused = await request(port, 'GET', '/api/v1/kv/deploy/logged?prefix=quota:acme:', { headers: { 'x-request-id': 'trace-query-1' } });
  expect(refused.status).toBe(400);
  const odd = await request(port, 'GET', '/api/v1/kv/deploy/logged', { headers: { 'x-request-id': 'has spaces and "quotes"' } });
  expect(odd.status).toBe(200);
  const generated = odd.headers.get('x-request-id')!;
  expect(generated).toMatch(/^[0-9a-f-]{36}$/);

  const putLine = await api.waitForLine((l) => l.req?.id === 'trace-put-1', 'the PUT line');
  expect(putLine).toMatchObject({ level: 30, msg: 'request completed', req: { method: 'PUT', path: '/api/v1/kv/deploy/logged' }, res: { statusCode: 200 } });
  expect(typeof putLine.responseTime).toBe('number');
  const queryLine = await api.waitForLine((l) => l.req?.id === 'trace-query-1', 'the refused GET line');
  expect(queryLine.req).toEqual({ id: 'trace-query-1', method: 'GET', path: '/api/v1/kv/deploy/logged' });
  await api.waitForLine((l) => l.req?.id === generated, 'the line with the generated id');

  expect(api.output()).not.toContain('quota:acme');
  expect(api.output()).not.toContain(secretValue);
  expect(api.output()).not.toContain('has spaces');
});

test('SIGKILL of one worker under load: it is replaced, the other keeps answering, /metrics still sums the live workers', async () => {
  const [victim, survivor] = await waitForWorkers(2);
  let started = 0;
  let boundary = Infinity; // index of the first request started after the primary reported the death
  let killed = false;
  const died = api.waitForLine((l) => l.msg === 'API worker died; replacing it' && l.workerPid === victim, 'the death of the killed worker');
  died.then(() => (boundary = started));

  const results = await runLoad({
    count: 400,
    concurrency: 4,
    call: (i) => {
      started = i + 1;
      // Scrapes ride along: one collecting while the victim dies must still be answered.
      if (i % 10 === 5) return request(port, 'GET', '/metrics');
      return i % 2
        ? request(port, 'GET', '/health')
        : request(port, 'GET', `/api/v1/kv/deploy/load-${i}`, { headers: { 'x-request-id': `kill-${i}` } });
    },
    onDone: (_o, completed) => {
      if (completed === 60 && !killed) {
        killed = true;
        process.kill(victim, 'SIGKILL');
      }
    },
  });
  const death = await died;
  expect(death).toMatchObject({ level: 50, signal: 'SIGKILL' });
  expect(boundary).toBeLessThan(400);
  const replacement = await api.waitForLine((l) => l.msg === 'replacement API worker listening' && l.replaced === victim, 'the replacement worker');
  expect(alive(victim)).toBe(false);
  expect(alive(survivor)).toBe(true);

  // A scrape is answered by a live worker or cut with its connection; never a failed collection.
  for (const r of results.filter((x) => x.index % 10 === 5 && x.ok)) expect(r.ok!.status).toBe(200);
  // Requests in flight on the killed worker may be cut; every one started after the death is answered.
  const after = results.filter((r) => r.index >= boundary);
  expect(after.length).toBeGreaterThan(0);
  // Answered, never cut, and never refused: the limits are 100,000/s.
  for (const r of after) {
    expect(r.error).toBeUndefined();
    expect(r.ok!.status).toBe(200);
  }
  // And the survivor was answering all along.
  expect(api.lines.filter((l) => kvGetLine(survivor)(l) && String(l.req.id).startsWith('kill-')).length).toBeGreaterThan(0);

  // Fresh connections reach the replacement too.
  const more = await runLoad({ count: 20, concurrency: 2, call: (i) => request(port, 'GET', `/api/v1/kv/deploy/after-${i}`, { headers: { 'x-request-id': `after-${i}` } }) });
  for (const r of more) expect(r.ok?.status).toBe(200);
  const live = [survivor, replacement.workerPid as number];
  expect(liveWorkers().sort()).toEqual([...live].sort());
  // Workers write to one pipe independently: await the own line of every KV request the live workers
  // answered after the death (a worker's lines arrive in its order, so its earlier ones are in by then).
  // Before the death, an answer may have come from the victim, killed before it could log it.
  const answeredIds = [
    ...results.filter((r) => r.index >= boundary && r.index % 2 === 0).map((r) => `kill-${r.index}`),
    ...more.map((r) => `after-${r.index}`),
  ];
  await api.waitForLine(() => {
    const seen = new Set(api.lines.map((l) => l.req?.id));
    return answeredIds.every((id) => seen.has(id));
  }, 'the line of every answered KV request');
  expect(api.lines.filter(kvGetLine(replacement.workerPid as number)).length).toBeGreaterThan(0);

  // The killed worker's counts died with it; the cluster's text is exactly the live workers' sum.
  const expected = servedGets(live);
  for (let i = 0; i < 4; i++) {
    const text = await scrape();
    expect(sample(text, 'queen_kv_ops_total', { op: 'get', outcome: 'ok' })).toBe(expected);
    checkExposition(text);
  }
});

test('SIGTERM under load: the request in flight completes, new connections stop, the process exits 0', async () => {
  // A row lock held by this test keeps one KV write in flight inside a worker, observably.
  const holder = new Client({ connectionString: db.url });
  holder.on('error', () => undefined);
  await holder.connect();
  await holder.query('BEGIN');
  await holder.query(`SELECT queen.kv_apply_v1($1::uuid, $2::jsonb, true)`, [
    DEFAULT_TENANT,
    JSON.stringify([{ op: 'put', ns: 'deploy', key: 'held', value: 'holder', ttlSeconds: 600 }]),
  ]);
  // On a keep-alive connection: answered mid-drain, it is closed then, not at the deadline.
  const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const inFlight = request(port, 'PUT', '/api/v1/kv/deploy/held', { body: { value: 'in-flight', ttlSeconds: 600 }, headers: { 'x-request-id': 'held-1' }, agent: keepAlive });
  await untilWaitingOnLock(db.url);

  let stop = false;
  const load = runLoad({
    count: 3000,
    concurrency: 4,
    call: (i) => request(port, 'GET', i % 2 ? '/health' : `/api/v1/kv/deploy/term-${i}`, { headers: { 'x-request-id': `term-${i}` } }),
    stopWhen: () => stop,
  });
  const primaryPid = api.child.pid!;
  await api.waitForLine((l) => l.req?.id === 'term-20', 'load under way');
  process.kill(primaryPid, 'SIGTERM');
  await api.waitForLine((l) => l.msg === 'stopping: draining workers', 'the primary draining');
  const workers = liveWorkers();
  await api.waitForLine(() => api.lines.filter((l) => l.msg === 'worker draining: no new connections, finishing the requests in flight').length >= workers.length, 'every worker draining');

  await holder.query('ROLLBACK');
  await holder.end();
  const answer = await inFlight;
  expect(answer.status).toBe(200);
  expect(JSON.parse(answer.text)).toMatchObject({ ok: true, applied: true });

  const exit = await api.exited;
  stop = true;
  const outcomes = await load;
  expect(exit).toEqual({ code: 0, signal: null });
  for (const pid of workers) expect(alive(pid)).toBe(false);
  expect(api.lines.filter((l) => l.msg === 'worker drained').length).toBe(workers.length);
  expect(api.lines.some((l) => l.msg === 'stopped')).toBe(true);
  expect(api.lines.some((l) => l.msg === 'request aborted')).toBe(false);
  expect(api.lines.some((l) => l.msg === 'drain deadline reached: closing the connections still open')).toBe(false);
  // Answered during the drain: with Connection: close, so the client never reuses a socket the drain closes.
  expect(answer.headers.get('connection')).toBe('close');
  keepAlive.destroy();

  // A request a worker began was answered in full; what failed never reached a worker.
  const handled = new Set(api.lines.filter((l) => l.msg === 'request completed').map((l) => l.req?.id));
  const answered = outcomes.filter((o) => o.ok);
  expect(answered.length).toBeGreaterThan(20);
  for (const o of answered) expect(o.ok!.status).toBe(200);
  for (const o of outcomes.filter((x) => x.error && x.index % 2 === 0)) {
    expect(handled.has(`term-${o.index}`)).toBe(false);
  }
  for (const o of outcomes.filter((x) => x.error)) expect(['ECONNREFUSED', 'ECONNRESET']).toContain(o.error);
});
