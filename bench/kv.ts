// npm run bench:kv — the KV hot path against the physical limit and against the code a user would
// write, in one run on one PostgreSQL. Lanes, in turn for every point:
//   cell   our HTTP API (node dist/services/api/main.js, all workers), rate limits raised out of the way;
//   sql    the same operation as one SQL statement through pg from this process (named statements,
//          one connection per client): the physical limit;
//   naive  bench/kvNaive.ts, Express 5 + pg doing the same statement: what a user would write.
// Workloads: get (path route), get (batch route), getMany of 10, put, putIfAbsent on fresh keys,
// incr on 100 hot keys, a batch of 100 puts per request (operations counted, not requests).
// Every point is a closed loop of N clients for D seconds; R rounds, medians. CPU per operation of
// the load client, of the HTTP process(es) and of PostgreSQL comes from /proc, so each figure says
// what limited it. Options (flag or env): --duration=10 (BENCH_DURATION_S), --rounds=3
// (BENCH_ROUNDS), --warmup=1 (BENCH_WARMUP_S), --clients=16,64 (BENCH_CLIENTS), --workloads=...
// (BENCH_WORKLOADS), --lanes=cell,sql,naive, --client=raw|agent|autocannon (BENCH_CLIENT),
// --workers=N (QUEEN_WORKERS, default half the cores), --quick (1 s points, 1 round), --out=bench/results/kv.md,
// --client-check (which HTTP client costs the least CPU), --cpu-prof=DIR (profiles of the API).
import { spawn, fork, ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { applySchema } from '../shared/db';
import { startEmbeddedPostgres, freePort, EmbeddedPostgres } from '../shared/embeddedPostgres';
import { agentClient, closedLoop, HttpClient, PointResult, rawClient, Task } from './lib/load';
import { cellEnv, childrenOf, machineBusyUs, machineLine, rssMb, stopChild, TreeCpu, waitReady } from './lib/procs';

// ---------------------------------------------------------------- options
const argv = process.argv.slice(2);
function opt(name: string, envName: string, fallback: string): string {
  const flag = argv.find((a) => a === `--${name}` || a.startsWith(`--${name}=`));
  if (flag) return flag.includes('=') ? flag.slice(flag.indexOf('=') + 1) : 'true';
  return process.env[envName]?.trim() || fallback;
}
function num(name: string, envName: string, fallback: number): number {
  const raw = opt(name, envName, String(fallback));
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new Error(`--${name} / ${envName} must be a number, got ${JSON.stringify(raw)}`);
  return n;
}
const quick = opt('quick', 'BENCH_QUICK', 'false') === 'true';
const DURATION_S = num('duration', 'BENCH_DURATION_S', quick ? 1 : 10);
const ROUNDS = num('rounds', 'BENCH_ROUNDS', quick ? 1 : 3);
const WARMUP_S = num('warmup', 'BENCH_WARMUP_S', quick ? 0.3 : 1);
const CLIENTS = opt('clients', 'BENCH_CLIENTS', '16,64').split(',').map(Number);
// Half the cores by default: PostgreSQL and the load client run on the same machine. Measured
// 2026-11-29 on 2 cores, get on the path route at 16/64 clients: API CPU per operation 251/192 us
// with one worker against 640/325 us with two (two workers and the backends preempt each other
// and each event-loop turn serves fewer sockets). Override with --workers or QUEEN_WORKERS.
const WORKERS = num('workers', 'QUEEN_WORKERS', Math.max(1, Math.floor(os.availableParallelism() / 2)));
const CLIENT_KIND = opt('client', 'BENCH_CLIENT', 'raw') as 'raw' | 'agent' | 'autocannon';
const LANES = opt('lanes', 'BENCH_LANES', 'cell,sql,naive').split(',') as Lane[];
const OUT = opt('out', 'BENCH_OUT', path.join('bench', 'results', 'kv.md'));
const CPU_PROF = opt('cpu-prof', 'BENCH_CPU_PROF', '');
const PRELOAD = num('keys', 'BENCH_KEYS', 100_000);
const NS = 'bench';
const TENANT = '00000000-0000-0000-0000-000000000001';
const VALUE = JSON.stringify({ name: 'bench', n: 12345, tags: ['a', 'b', 'c'], payload: 'x'.repeat(48) });

type Lane = 'cell' | 'sql' | 'naive';

// ---------------------------------------------------------------- statements of the sql lane
const SQL = {
  get: {
    name: 'bench_get',
    text: `SELECT value, version FROM queen.kv
            WHERE tenant_id = $1 AND namespace = $2 AND key = $3 AND (expires_at IS NULL OR expires_at > now())`,
  },
  getMany: {
    name: 'bench_get_many',
    text: `SELECT key, value, version FROM queen.kv
            WHERE tenant_id = $1 AND namespace = $2 AND key = ANY($3::text[]) AND (expires_at IS NULL OR expires_at > now())`,
  },
  put: {
    name: 'bench_put',
    text: `INSERT INTO queen.kv (tenant_id, namespace, key, value, version)
           VALUES ($1, $2, $3, $4::jsonb, nextval('queen.kv_version_seq'))
           ON CONFLICT (tenant_id, namespace, key) DO UPDATE
             SET value = EXCLUDED.value, version = EXCLUDED.version, expires_at = NULL, updated_at = now()
           RETURNING version`,
  },
  putIfAbsent: {
    name: 'bench_put_if_absent',
    text: `INSERT INTO queen.kv (tenant_id, namespace, key, value, version)
           VALUES ($1, $2, $3, $4::jsonb, nextval('queen.kv_version_seq'))
           ON CONFLICT (tenant_id, namespace, key) DO NOTHING
           RETURNING version`,
  },
  incr: {
    name: 'bench_incr',
    text: `INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version)
           VALUES ($1, $2, $3, to_jsonb($4::numeric), nextval('queen.kv_version_seq'))
           ON CONFLICT (tenant_id, namespace, key) DO UPDATE
             SET value = to_jsonb(k.value::numeric + $4::numeric), version = EXCLUDED.version, updated_at = now()
           RETURNING value, version`,
  },
};

// ---------------------------------------------------------------- workloads
const rnd = (n: number) => Math.floor(Math.random() * n);
const key = () => `k${rnd(PRELOAD)}`;
let freshSeq = 0;
const runId = Date.now().toString(36);
const freshKey = (lane: string) => `f-${runId}-${lane}-${freshSeq++}`;
const hotKey = () => `hot-${rnd(100)}`;
function distinctKeys(n: number): string[] {
  const set = new Set<string>();
  while (set.size < n) set.add(key());
  // Byte order, so the naive multi-row upsert takes its row locks in one order and cannot deadlock.
  return [...set].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}
const ops = (list: unknown[]) => `{"operations":${JSON.stringify(list)}}`;

interface Req {
  method: string;
  path: string;
  body?: string;
}
interface Workload {
  name: string;
  label: string;
  opsPerRequest: number;
  cell(): Req;
  naive(): Req;
  sql(pool: Pool): Task;
  /** What a correct answer contains (checked once per lane before the run). */
  expect: RegExp;
}

const WORKLOADS: Workload[] = [
  {
    name: 'get-path',
    label: 'get (path route)',
    opsPerRequest: 1,
    cell: () => ({ method: 'GET', path: `/api/v1/kv/${NS}/${key()}` }),
    naive: () => ({ method: 'GET', path: `/kv/${NS}/${key()}` }),
    sql: (pool) => async () => ((await pool.query({ ...SQL.get, values: [TENANT, NS, key()] })).rowCount === 1 ? 1 : 0),
    expect: /"found":\s?true/,
  },
  {
    name: 'get-batch',
    label: 'get (batch route)',
    opsPerRequest: 1,
    cell: () => ({ method: 'POST', path: '/api/v1/kv', body: ops([{ op: 'get', ns: NS, key: key() }]) }),
    naive: () => ({ method: 'POST', path: '/get', body: JSON.stringify({ ns: NS, key: key() }) }),
    sql: (pool) => async () => ((await pool.query({ ...SQL.get, values: [TENANT, NS, key()] })).rowCount === 1 ? 1 : 0),
    expect: /"found":\s?true/,
  },
  {
    name: 'getMany10',
    label: 'getMany of 10',
    opsPerRequest: 1,
    cell: () => ({ method: 'POST', path: '/api/v1/kv', body: ops([{ op: 'getMany', ns: NS, keys: distinctKeys(10) }]) }),
    naive: () => ({ method: 'POST', path: '/getMany', body: JSON.stringify({ ns: NS, keys: distinctKeys(10) }) }),
    sql: (pool) => async () => ((await pool.query({ ...SQL.getMany, values: [TENANT, NS, distinctKeys(10)] })).rowCount === 10 ? 1 : 0),
    expect: /"rows":\s?\[\{/,
  },
  {
    name: 'put',
    label: 'put (path route)',
    opsPerRequest: 1,
    cell: () => ({ method: 'PUT', path: `/api/v1/kv/${NS}/${key()}`, body: `{"value":${VALUE},"forever":true}` }),
    naive: () => ({ method: 'PUT', path: `/kv/${NS}/${key()}`, body: `{"value":${VALUE}}` }),
    sql: (pool) => async () => ((await pool.query({ ...SQL.put, values: [TENANT, NS, key(), VALUE] })).rowCount === 1 ? 1 : 0),
    expect: /"applied":\s?true/,
  },
  {
    name: 'putIfAbsent',
    label: 'putIfAbsent, fresh keys',
    opsPerRequest: 1,
    cell: () => ({ method: 'POST', path: '/api/v1/kv', body: `{"operations":[{"op":"putIfAbsent","ns":"${NS}","key":"${freshKey('c')}","value":${VALUE},"forever":true}]}` }),
    naive: () => ({ method: 'POST', path: '/putIfAbsent', body: `{"ns":"${NS}","key":"${freshKey('n')}","value":${VALUE}}` }),
    sql: (pool) => async () => ((await pool.query({ ...SQL.putIfAbsent, values: [TENANT, NS, freshKey('s'), VALUE] })).rowCount === 1 ? 1 : 0),
    expect: /"applied":\s?true/,
  },
  {
    name: 'incr',
    label: 'incr, 100 hot keys',
    opsPerRequest: 1,
    cell: () => ({ method: 'POST', path: '/api/v1/kv', body: `{"operations":[{"op":"incr","ns":"${NS}","key":"${hotKey()}","delta":1,"forever":true}]}` }),
    naive: () => ({ method: 'POST', path: '/incr', body: `{"ns":"${NS}","key":"${hotKey()}","delta":1}` }),
    sql: (pool) => async () => ((await pool.query({ ...SQL.incr, values: [TENANT, NS, hotKey(), 1] })).rowCount === 1 ? 1 : 0),
    expect: /"applied":\s?true/,
  },
  {
    name: 'put-batch100',
    label: '100 puts per request',
    opsPerRequest: 100,
    cell: () => ({
      method: 'POST',
      path: '/api/v1/kv',
      body: `{"operations":[${distinctKeys(100).map((k) => `{"op":"put","ns":"${NS}","key":"${k}","value":${VALUE},"forever":true}`).join(',')}]}`,
    }),
    naive: () => ({ method: 'POST', path: '/putBatch', body: `{"ns":"${NS}","items":[${distinctKeys(100).map((k) => `{"key":"${k}","value":${VALUE}}`).join(',')}]}` }),
    // The physical limit this is held against: one single-row upsert statement per operation.
    sql: (pool) => async () => ((await pool.query({ ...SQL.put, values: [TENANT, NS, key(), VALUE] })).rowCount === 1 ? 1 : 0),
    expect: /"applied":\s?(true|100)/,
  },
];

// ---------------------------------------------------------------- processes
interface Cell {
  url: string;
  host: string;
  port: number;
  proc: ChildProcess;
}

async function startCell(databaseUrl: string): Promise<Cell> {
  const port = await freePort();
  const main = path.resolve(__dirname, '..', 'services', 'api', 'main.js');
  const execArgv = CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(CPU_PROF)}`] : [];
  // Node flags for the cell alone, which its workers inherit (--trace-gc, --heapsnapshot-signal=SIGUSR2,
  // --max-semi-space-size=N ...): where its memory goes.
  execArgv.push(...(process.env.BENCH_CELL_NODE_ARGS ?? '').split(' ').filter(Boolean));
  const proc = spawn(process.execPath, [...execArgv, main], {
    env: cellEnv(databaseUrl, port, WORKERS),
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  await waitReady(port, '/ready');
  // Every worker answers: ask until the primary reports them all forked and each has served.
  for (let i = 0; i < 20 && childrenOf(proc.pid!).length < WORKERS; i++) await new Promise((r) => setTimeout(r, 200));
  return { url: `http://127.0.0.1:${port}`, host: '127.0.0.1', port, proc };
}

async function startNaive(databaseUrl: string): Promise<{ port: number; proc: ChildProcess }> {
  const proc = fork(path.resolve(__dirname, 'kvNaive.js'), [], {
    env: { ...process.env, DATABASE_URL: databaseUrl, PORT: '0' },
    execArgv: CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(CPU_PROF, 'naive')}`] : [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    proc.once('message', (m: { port: number }) => resolve(m.port));
    proc.once('exit', (code) => reject(new Error(`the naive server exited during start (${code})`)));
  });
  return { port, proc };
}

function postmasterPid(dataDir: string | undefined): number | undefined {
  if (!dataDir) return undefined;
  try {
    return Number(fs.readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------- one point
interface LaneResult extends PointResult {
  opsPerSec: number;
  cpuClientUs: number;
  cpuAppUs: number;
  cpuPgUs: number;
  cpuOtherUs: number;
  rssMaxMb: number[];
  walBytesPerOp: number;
}

async function walLsn(ctx: Ctx): Promise<number> {
  const { rows } = await ctx.admin!.query(`SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8 AS b`);
  return rows[0].b as number;
}

function makeHttp(host: string, port: number): HttpClient {
  return CLIENT_KIND === 'agent' ? agentClient(host, port) : rawClient(host, port);
}

function httpTask(client: HttpClient, gen: () => Req, opsPerRequest: number): Task {
  return async () => {
    const r = gen();
    const a = await client.request(r.method, r.path, r.body);
    if (a.status !== 200) throw new Error(`HTTP ${a.status}: ${a.body.slice(0, 300)}`);
    return opsPerRequest;
  };
}

async function autocannonPoint(port: number, gen: () => Req, clients: number, seconds: number, opsPerRequest: number): Promise<PointResult> {
  // eslint-disable-next-line @typescript-eslint/no-var-requires
  const autocannon = require('autocannon');
  const result = await autocannon({
    url: `http://127.0.0.1:${port}`,
    connections: clients,
    duration: seconds,
    requests: [
      {
        setupRequest: (req: Record<string, unknown>) => {
          const r = gen();
          return { ...req, method: r.method, path: r.path, body: r.body, headers: r.body ? { 'content-type': 'application/json' } : {} };
        },
      },
    ],
  });
  const ok = result['2xx'] as number;
  return {
    ops: ok * opsPerRequest,
    requests: result.requests.total,
    errors: result.non2xx + result.errors,
    seconds: result.duration,
    p50Us: result.latency.p50 * 1000,
    p99Us: result.latency.p99 * 1000,
  };
}

interface Ctx {
  cell?: Cell;
  naive?: { port: number; proc: ChildProcess };
  pgPid?: number;
  databaseUrl: string;
  admin?: Pool;
}

async function runLane(ctx: Ctx, lane: Lane, w: Workload, clients: number, seconds: number, measure: boolean): Promise<LaneResult> {
  const appRoots = lane === 'cell' ? [ctx.cell!.proc.pid!] : lane === 'naive' ? [ctx.naive!.proc.pid!] : [];
  const appCpu = new TreeCpu(() => appRoots);
  const pgCpu = new TreeCpu(() => (ctx.pgPid ? [ctx.pgPid] : []));
  let pool: Pool | undefined;
  let httpClients: HttpClient[] = [];
  let makeTask: (c: number) => Task;
  if (lane === 'sql') {
    pool = new Pool({ connectionString: ctx.databaseUrl, max: clients });
    pool.on('error', () => undefined);
    // Open every connection before the clock starts.
    await Promise.all(Array.from({ length: clients }, () => pool!.connect())).then((cs) => cs.forEach((c) => c.release()));
    makeTask = () => w.sql(pool!);
  } else {
    const port = lane === 'cell' ? ctx.cell!.port : ctx.naive!.port;
    httpClients = Array.from({ length: clients }, () => makeHttp('127.0.0.1', port));
    const gen = lane === 'cell' ? w.cell : w.naive;
    makeTask = (c) => httpTask(httpClients[c], gen, w.opsPerRequest);
  }
  const rssMax: number[] = [];
  const workerPids = lane === 'cell' ? childrenOf(ctx.cell!.proc.pid!) : lane === 'naive' ? [ctx.naive!.proc.pid!] : [];
  const sampler = setInterval(() => workerPids.forEach((pid, i) => (rssMax[i] = Math.max(rssMax[i] ?? 0, rssMb(pid) ?? 0))), 250);
  try {
    const walBefore = await walLsn(ctx);
    const selfBefore = process.cpuUsage();
    const machineBefore = machineBusyUs();
    appCpu.start();
    pgCpu.start();
    let r: PointResult;
    if (CLIENT_KIND === 'autocannon' && lane !== 'sql') {
      const port = lane === 'cell' ? ctx.cell!.port : ctx.naive!.port;
      r = await autocannonPoint(port, lane === 'cell' ? w.cell : w.naive, clients, seconds, w.opsPerRequest);
    } else {
      r = await closedLoop(clients, seconds * 1000, makeTask);
    }
    const app = appCpu.stop();
    const pg = pgCpu.stop();
    const walAfter = await walLsn(ctx);
    const self = process.cpuUsage(selfBefore);
    const client = self.user + self.system;
    const machine = machineBusyUs();
    const other = Math.max(0, machine.busy - machineBefore.busy - app - pg - client);
    const perOp = (us: number) => (r.ops > 0 ? us / r.ops : NaN);
    if (measure && r.errors > 0) process.stderr.write(`  ${lane} ${w.name} c=${clients}: ${r.errors} errors, first: ${r.firstError}\n`);
    return {
      ...r,
      opsPerSec: r.ops / r.seconds,
      cpuClientUs: perOp(client),
      cpuAppUs: perOp(app),
      cpuPgUs: perOp(pg),
      cpuOtherUs: other / r.seconds / 1e6, // cores busy with other things during the point
      rssMaxMb: rssMax,
      walBytesPerOp: r.ops > 0 ? (walAfter - walBefore) / r.ops : NaN,
    };
  } finally {
    clearInterval(sampler);
    httpClients.forEach((c) => c.close());
    await pool?.end();
  }
}

async function sanity(ctx: Ctx): Promise<void> {
  for (const w of WORKLOADS) {
    for (const lane of LANES) {
      if (lane === 'sql') {
        const pool = new Pool({ connectionString: ctx.databaseUrl, max: 1 });
        const n = await w.sql(pool)();
        await pool.end();
        if (n !== 1) throw new Error(`sanity: the sql lane of ${w.name} did not do its operation`);
        continue;
      }
      const port = lane === 'cell' ? ctx.cell!.port : ctx.naive!.port;
      const client = rawClient('127.0.0.1', port);
      const r = (lane === 'cell' ? w.cell : w.naive)();
      const a = await client.request(r.method, r.path, r.body);
      client.close();
      if (a.status !== 200 || !w.expect.test(a.body)) {
        throw new Error(`sanity: ${lane} ${w.name} answered ${a.status} ${a.body.slice(0, 400)}`);
      }
    }
  }
}

// ---------------------------------------------------------------- report
const median = (xs: number[]) => {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (!s.length) return NaN;
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const fmt = (x: number, digits = 0) => (Number.isFinite(x) ? x.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : '–');

function table(results: Map<string, LaneResult[]>): string {
  const lines = [
    '| workload | clients | lane | ops/s | p50 ms | p99 ms | cell÷sql | cell÷naive | CPU µs/op: client | http | postgres | cell÷sql by CPU | cell÷naive by CPU | WAL B/op | other cores busy | errors |',
    '|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const w of WORKLOADS) for (const c of CLIENTS) {
    const med = (lane: Lane, f: (r: LaneResult) => number) => median((results.get(`${w.name}|${c}|${lane}`) ?? []).map(f));
    for (const lane of LANES) {
      const rs = results.get(`${w.name}|${c}|${lane}`) ?? [];
      if (!rs.length) continue;
      const opsS = med(lane, (r) => r.opsPerSec);
      const ratio = (other: Lane) => (lane === 'cell' && LANES.includes(other) ? fmt(opsS / med(other, (r) => r.opsPerSec), 2) : '');
      // Operations per CPU-second of the whole lane (client + HTTP + PostgreSQL): what the ratio
      // would be if each lane had the machine to itself, which neighbours on 2 cores never allow.
      const total = (l: Lane) => med(l, (r) => r.cpuClientUs + (Number.isFinite(r.cpuAppUs) ? r.cpuAppUs : 0) + r.cpuPgUs);
      const cpuRatio = (other: Lane) => (lane === 'cell' && LANES.includes(other) ? fmt(total(other) / total('cell'), 2) : '');
      lines.push(
        `| ${w.label} | ${c} | ${lane} | ${fmt(opsS)} | ${fmt(med(lane, (r) => r.p50Us) / 1000, 2)} | ${fmt(med(lane, (r) => r.p99Us) / 1000, 2)} | ` +
          `${ratio('sql')} | ${ratio('naive')} | ${fmt(med(lane, (r) => r.cpuClientUs), 1)} | ${lane === 'sql' ? '' : fmt(med(lane, (r) => r.cpuAppUs), 1)} | ` +
          `${fmt(med(lane, (r) => r.cpuPgUs), 1)} | ${cpuRatio('sql')} | ${cpuRatio('naive')} | ${fmt(med(lane, (r) => r.walBytesPerOp))} | ${fmt(med(lane, (r) => r.cpuOtherUs), 2)} | ${rs.reduce((a, r) => a + r.errors, 0)} |`,
      );
    }
  }
  return lines.join('\n');
}

function rssTable(results: Map<string, LaneResult[]>): string {
  const lines = ['| workload | clients | max RSS per API worker (MB) | naive process (MB) |', '|---|---:|---|---:|'];
  for (const w of WORKLOADS) for (const c of CLIENTS) {
    const cell = results.get(`${w.name}|${c}|cell`) ?? [];
    const naive = results.get(`${w.name}|${c}|naive`) ?? [];
    if (!cell.length) continue;
    const per: number[] = [];
    for (const r of cell) r.rssMaxMb.forEach((v, i) => (per[i] = Math.max(per[i] ?? 0, v)));
    const nv = Math.max(0, ...naive.flatMap((r) => r.rssMaxMb));
    lines.push(`| ${w.label} | ${c} | ${per.map((v) => fmt(v)).join(' / ')} | ${nv ? fmt(nv) : '–'} |`);
  }
  return lines.join('\n');
}

// ---------------------------------------------------------------- client check
async function clientCheck(): Promise<void> {
  // A bare node:http "hello" in a child process: the server costs the same whichever client asks.
  const server = spawn(process.execPath, ['-e', `
    const http = require('node:http');
    const s = http.createServer((req, res) => { res.setHeader('content-type', 'application/json'); res.end('{"ok":true}'); });
    s.keepAliveTimeout = 65000;
    s.listen(0, '127.0.0.1', () => process.send(s.address().port));`], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const port = await new Promise<number>((r) => server.once('message', (p) => r(p as number)));
  const gen = (): Req => ({ method: 'GET', path: '/hello' });
  const seconds = Math.max(2, DURATION_S);
  process.stdout.write(`client check: ${seconds} s a point, bare node:http hello server in a child process\n`);
  process.stdout.write('| client | clients | requests/s | client CPU µs/request | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|---:|\n');
  for (const kind of ['raw', 'agent', 'autocannon'] as const) for (const c of CLIENTS) {
    const before = process.cpuUsage();
    let r: PointResult;
    if (kind === 'autocannon') r = await autocannonPoint(port, gen, c, seconds, 1);
    else {
      const clients = Array.from({ length: c }, () => (kind === 'raw' ? rawClient('127.0.0.1', port) : agentClient('127.0.0.1', port)));
      r = await closedLoop(c, seconds * 1000, (i) => httpTask(clients[i], gen, 1));
      clients.forEach((x) => x.close());
    }
    const cpu = process.cpuUsage(before);
    process.stdout.write(`| ${kind} | ${c} | ${fmt(r.requests / r.seconds)} | ${fmt((cpu.user + cpu.system) / r.requests, 1)} | ${fmt(r.p50Us / 1000, 2)} | ${fmt(r.p99Us / 1000, 2)} |\n`);
  }
  server.kill('SIGTERM');
}

// ---------------------------------------------------------------- main
async function main(): Promise<void> {
  if (opt('client-check', 'BENCH_CLIENT_CHECK', 'false') === 'true') return clientCheck();
  const only = opt('workloads', 'BENCH_WORKLOADS', '');
  if (only) {
    const wanted = new Set(only.split(','));
    for (let i = WORKLOADS.length - 1; i >= 0; i--) if (!wanted.has(WORKLOADS[i].name)) WORKLOADS.splice(i, 1);
    if (!WORKLOADS.length) throw new Error(`--workloads names none of the workloads`);
  }
  let embedded: EmbeddedPostgres | undefined;
  let scratch: string | undefined;
  let databaseUrl = process.env.DATABASE_URL;
  const log = (s: string) => process.stdout.write(`${new Date().toISOString().slice(11, 19)} ${s}\n`);
  if (!databaseUrl) {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-bench-kv-'));
    scratch = dataDir;
    // Walkable, so that as root the postgres user reaches the data folder where we put it.
    fs.chmodSync(dataDir, 0o755);
    log(`starting embedded PostgreSQL in ${dataDir}`);
    embedded = await startEmbeddedPostgres({ dataDir: path.join(dataDir, 'pg'), port: await freePort(), throwaway: true });
    databaseUrl = embedded.url;
  }
  const ctx: Ctx = { databaseUrl };
  const cleanup = async () => {
    await ctx.admin?.end().catch(() => undefined);
    if (ctx.cell) await stopChild(ctx.cell.proc);
    if (ctx.naive) await stopChild(ctx.naive.proc);
    await embedded?.stop();
    if (embedded) fs.rmSync(path.dirname(embedded.dataDir), { recursive: true, force: true });
    if (scratch) fs.rmSync(scratch, { recursive: true, force: true });
  };
  process.once('SIGINT', () => void cleanup().then(() => process.exit(130)));
  try {
    await applySchema(databaseUrl);
    const admin = new Pool({ connectionString: databaseUrl, max: 1 });
    ctx.admin = admin;
    const pgVersion = (await admin.query('SHOW server_version')).rows[0].server_version as string;
    let dataDirectory: string | undefined = embedded?.dataDir;
    if (!dataDirectory) dataDirectory = await admin.query('SHOW data_directory').then((r) => r.rows[0].data_directory, () => undefined);
    ctx.pgPid = postmasterPid(dataDirectory);
    log(`preloading ${PRELOAD} keys into namespace ${NS}`);
    await admin.query(`DELETE FROM queen.kv WHERE tenant_id = $1 AND namespace = $2`, [TENANT, NS]);
    await admin.query(
      `INSERT INTO queen.kv (tenant_id, namespace, key, value, version)
       SELECT $1, $2, 'k' || g, $3::jsonb, nextval('queen.kv_version_seq') FROM generate_series(0, $4 - 1) g`,
      [TENANT, NS, VALUE, PRELOAD],
    );
    await admin.query(
      `INSERT INTO queen.kv (tenant_id, namespace, key, value, version)
       SELECT $1, $2, 'hot-' || g, '0', nextval('queen.kv_version_seq') FROM generate_series(0, 99) g`,
      [TENANT, NS],
    );
    await admin.query('VACUUM ANALYZE queen.kv');
    const settings = (await admin.query(
      `SELECT string_agg(name || '=' || current_setting(name), ', ' ORDER BY name) AS s FROM pg_settings
        WHERE name IN ('shared_buffers','synchronous_commit','fsync','wal_buffers','max_connections','jit','commit_delay','wal_level','max_wal_size','checkpoint_timeout','huge_pages','work_mem')`,
    )).rows[0].s as string;

    if (LANES.includes('cell')) {
      ctx.cell = await startCell(databaseUrl);
      log(`cell up at ${ctx.cell.url}: ${WORKERS} workers (pids ${childrenOf(ctx.cell.proc.pid!).join(', ')})`);
    }
    if (LANES.includes('naive')) {
      ctx.naive = await startNaive(databaseUrl);
      log(`naive Express 5 + pg handler up on port ${ctx.naive.port}`);
    }
    await sanity(ctx);
    const idleRss = ctx.cell ? childrenOf(ctx.cell.proc.pid!).map((p) => rssMb(p) ?? 0) : [];

    const results = new Map<string, LaneResult[]>();
    const started = Date.now();
    for (let round = 0; round < ROUNDS; round++) {
      for (const w of WORKLOADS) for (const c of CLIENTS) {
        // Rotate the lane order every round so no lane always runs right after another's writes.
        const order = LANES.map((_, i) => LANES[(i + round) % LANES.length]);
        for (const lane of order) {
          if (WARMUP_S > 0) await runLane(ctx, lane, w, c, WARMUP_S, false);
          const r = await runLane(ctx, lane, w, c, DURATION_S, true);
          const k = `${w.name}|${c}|${lane}`;
          results.set(k, [...(results.get(k) ?? []), r]);
          log(
            `round ${round + 1}/${ROUNDS} ${w.name.padEnd(12)} c=${String(c).padEnd(3)} ${lane.padEnd(5)} ${fmt(r.opsPerSec).padStart(8)} ops/s  ` +
              `p50 ${fmt(r.p50Us / 1000, 2)} ms  p99 ${fmt(r.p99Us / 1000, 2)} ms  cpu/op client ${fmt(r.cpuClientUs, 0)} http ${fmt(r.cpuAppUs, 0)} pg ${fmt(r.cpuPgUs, 0)} µs  other ${fmt(r.cpuOtherUs, 2)}` +
              (r.rssMaxMb.length ? `  peak RSS ${r.rssMaxMb.map((v) => fmt(v)).join(' / ')} MB` : ''),
          );
        }
      }
    }
    const elapsed = Math.round((Date.now() - started) / 1000);
    const command = `node dist/bench/kv.js ${argv.join(' ')}`.trim();
    const report = [
      `# KV hot path: cell vs direct SQL vs a naive Express handler`,
      '',
      `- command: \`${command}\` (${ROUNDS} round(s), ${DURATION_S} s a point after ${WARMUP_S} s warm-up, medians; ${elapsed} s of load)`,
      `- machine: ${machineLine(`PostgreSQL ${pgVersion}`)}`,
      `- date: ${new Date().toISOString()}; cell: ${WORKERS} workers; HTTP client: ${CLIENT_KIND}; PostgreSQL: ${embedded ? 'embedded (shared/embeddedPostgres.ts defaults)' : 'DATABASE_URL'}`,
      `- PostgreSQL settings: ${settings}`,
      `- lanes: cell = our API; sql = one SQL statement per operation through pg, named, one connection per client; naive = Express 5 + pg (default pool of 10, unnamed statements). 100-put batch: cell and naive send 100 puts a request, sql runs 100 single-row upserts.`,
      `- CPU µs/op: CPU time of the load client (this process), of the HTTP process tree (API primary + workers, or the naive process) and of the PostgreSQL server tree, divided by operations done; "by CPU" ratios compare operations per CPU-second of each whole lane (client + HTTP + PostgreSQL), which neighbours on the machine cannot skew the way they skew ops/s; "other cores busy" is the machine's busy cores not accounted to those (other work on the machine).`,
      '',
      table(results),
      '',
      `API worker RSS at idle after boot: ${idleRss.map((v) => `${fmt(v)} MB`).join(' / ')}; under load (max sampled every 250 ms):`,
      '',
      rssTable(results),
      '',
    ].join('\n');
    process.stdout.write(`\n${report}`);
    fs.mkdirSync(path.dirname(OUT), { recursive: true });
    fs.writeFileSync(OUT, report);
    fs.writeFileSync(OUT.replace(/\.md$/, '') + '.json', JSON.stringify({ command, workers: WORKERS, client: CLIENT_KIND, results: Object.fromEntries(results) }, null, 1));
    log(`written to ${OUT}`);
  } finally {
    await cleanup();
  }
}

main().catch((err) => {
  process.stderr.write(`bench:kv failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});
