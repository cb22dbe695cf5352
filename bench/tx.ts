// npm run bench:tx: idempotent consumption, the one-commit bundle against the two-commit pattern.
//
//   (a) bundle      pop; effect; POST /transaction {ack + putIfAbsent marker (required)}: ONE commit
//   (b) two-commit  pop; effect; POST /kv putIfAbsent marker; POST /ack: TWO commits (the store on
//                   the side, marker first: what a careful user writes)
//   (b') two-commit pop; effect; POST /ack; POST /kv putIfAbsent marker (the other order)
//
// Part 1, throughput: N messages per pattern, C concurrent consumers, same run, same server,
// rounds alternated so neither pattern always runs on a warmer cache.
// Part 2, crashes: a consumer child process per pattern, killed with SIGKILL (by its PID) at random
// crash points after the effect and around the commits, respawned, until every message of the
// queue is finished; then counts, per pattern:
//   - marked done but redelivered: a delivery whose marker already existed (the marker write lost);
//   - acked but never marked: finished on the group's cursor, no marker;
//   - effects repeated: the effect ran twice for one message (outside PostgreSQL: no pattern can
//     prevent it, printed for context).
// The API runs in this process against a fresh embedded PostgreSQL with its durability defaults
// (fsync and synchronous_commit on: a commit costs what it costs in production).
//
// Knobs (environment): BENCH_TX_N (500), BENCH_TX_CONSUMERS (4), BENCH_TX_ROUNDS (3),
// BENCH_TX_CRASH_N (1000), BENCH_TX_KILL_P (0.03 per crash point), BENCH_TX_DATABASE_URL (use that
// server instead of an embedded one).
import { fork, ChildProcess } from 'node:child_process';
import os from 'node:os';
import type { Client } from 'pg';
// The server side (pg, express, the API) is loaded only in the parent: the consumer child is
// respawned after every kill, and its start-up time would otherwise dominate the crash run.

type Pattern = 'a' | 'b' | 'b2';
/** Crash mode: messages per pop, and the lease (seconds) a killed consumer's messages wait out. */
const CRASH_BATCH = 4;
const CRASH_LEASE = 2;
const LABEL: Record<Pattern, string> = {
  a: '(a) one-commit bundle',
  b: '(b) marker, then ack',
  b2: "(b') ack, then marker",
};

function envInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a number >= 0, got ${JSON.stringify(raw)}.`);
  return n;
}

// ---------------------------------------------------------------------------------------------
// The consumer: the same code in-process (throughput) and in the child (crashes). `gate` is where
// a crash may land; in-process it is a no-op.

interface Msg {
  transactionId: string;
  partitionId: string;
  consumerGroup: string;
  leaseId: string;
}

type Gate = (point: string, txid: string) => Promise<void>;
type Report = (event: string, txid: string) => void;

async function http(base: string, method: string, p: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(base + p, {
    method,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

function ackBody(m: Msg) {
  return { transactionId: m.transactionId, partitionId: m.partitionId, status: 'completed', consumerGroup: m.consumerGroup, leaseId: m.leaseId };
}

function marker(ns: string, m: Msg, required: boolean) {
  return { op: 'putIfAbsent', ns, key: `done:${m.transactionId}`, value: { chargeId: `ch_${m.transactionId}` }, ttlSeconds: 86400, required };
}

async function handle(base: string, pattern: Pattern, ns: string, m: Msg, gate: Gate, report: Report): Promise<void> {
  report('effect', m.transactionId); // the external effect (a charge): outside PostgreSQL
  await gate('after-effect', m.transactionId);
  if (pattern === 'a') {
    const res = await http(base, 'POST', '/api/v1/transaction', { operations: [{ type: 'ack', ...ackBody(m) }], kv: [marker(ns, m, true)] });
    if (res.body?.ok !== true) {
      if (res.body?.reason === 'kv_precondition') {
        report('marked-redelivered', m.transactionId);
        await http(base, 'POST', '/api/v1/ack', ackBody(m));
      } else report(`bundle:${res.body?.ackReason ?? res.status}`, m.transactionId);
    }
    await gate('after-commit', m.transactionId);
  } else if (pattern === 'b') {
    const put = await http(base, 'POST', '/api/v1/kv', { operations: [marker(ns, m, false)] });
    if (put.body?.results?.[0]?.applied === false) report('marked-redelivered', m.transactionId);
    await gate('between-commits', m.transactionId);
    const ack = await http(base, 'POST', '/api/v1/ack', ackBody(m));
    if (ack.body?.ok !== true) report(`ack:${ack.body?.ackReason ?? ack.status}`, m.transactionId);
    await gate('after-ack', m.transactionId);
  } else {
    const ack = await http(base, 'POST', '/api/v1/ack', ackBody(m));
    if (ack.body?.ok !== true) report(`ack:${ack.body?.ackReason ?? ack.status}`, m.transactionId);
    await gate('between-commits', m.transactionId);
    const put = await http(base, 'POST', '/api/v1/kv', { operations: [marker(ns, m, false)] });
    if (put.body?.results?.[0]?.applied === false) report('marked-redelivered', m.transactionId);
    await gate('after-marker', m.transactionId);
  }
}

async function pop(base: string, queue: string, batch: number, timeoutMs: number): Promise<Msg[]> {
  const res = await http(base, 'GET', `/api/v1/pop/queue/${queue}?batch=${batch}&wait=true&timeout=${timeoutMs}`);
  if (res.status === 204) return [];
  if (res.status !== 200) throw new Error(`pop answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body.messages;
}

// ---------------------------------------------------------------------------------------------
// Child mode: one consumer process. At each crash point it draws; on a hit it tells the parent
// where it stands and stops dead, and the parent kills it with SIGKILL by its PID. Nothing after
// that point runs: exactly a process that died there.

async function child(): Promise<void> {
  const [base, queue, pattern, ns, killP] = process.argv.slice(3);
  let stop = false;
  let start: () => void = () => undefined;
  const started = new Promise<void>((resolve) => (start = resolve));
  process.on('message', (msg: any) => {
    if (msg?.t === 'stop') stop = true;
    if (msg?.t === 'start') start();
  });
  const send = (m: unknown) => new Promise<void>((resolve) => process.send!(m, () => resolve()));
  const gate: Gate = async (point, txid) => {
    if (Math.random() >= Number(killP)) return;
    await send({ t: 'kill-me', point, txid });
    await new Promise(() => undefined);
  };
  const report: Report = (event, txid) => void process.send!({ t: 'event', event, txid });
  // A standby: loaded and its HTTP client warm before it is needed, so a kill costs no start-up.
  await http(base, 'GET', '/health');
  await send({ t: 'ready' });
  await started;
  while (!stop) {
    const batch = await pop(base, queue, CRASH_BATCH, 300);
    if (batch.length === 0) {
      await send({ t: 'idle' });
      continue;
    }
    for (const m of batch) await handle(base, pattern as Pattern, ns, m, gate, report);
  }
  process.disconnect();
}

// ---------------------------------------------------------------------------------------------
// Parent mode.

interface Setup {
  base: string;
  databaseUrl: string;
  close(): Promise<void>;
}

async function setup(): Promise<Setup> {
  const { loadConfig } = await import('../shared/config');
  const { createLogger } = await import('../shared/log');
  const { startApiServer } = await import('../services/api/server');
  const { benchDatabase } = await import('./lib/database');
  const db = await benchDatabase('tx', { serverUrl: process.env.BENCH_TX_DATABASE_URL, schema: true });
  const databaseUrl = db.url;
  const config = loadConfig({
    DATABASE_URL: databaseUrl,
    QUEEN_WORKERS: '1',
    DB_POOL_SIZE: '40',
    // The buckets would measure themselves, not the commit patterns: out of the way.
    QUEEN_KV_WRITES_PER_SEC: '1000000',
    QUEEN_KV_READS_PER_SEC: '1000000',
    QUEEN_KV_CELL_OPS_PER_SEC: '10000000',
    LOG_LEVEL: 'silent',
  });
  const server = await startApiServer(config, createLogger('bench-tx', 'silent'), { message: 20, kv: 16 }, 0);
  return {
    base: server.url,
    databaseUrl,
    async close() {
      await server.close();
      await db.stop();
    },
  };
}

async function fill(base: string, queue: string, n: number, partitions: number, leaseTime: number): Promise<void> {
  await http(base, 'POST', '/api/v1/configure', { queue, options: { leaseTime, retryLimit: 1000 } });
  for (let i = 0; i < n; i += 500) {
    const items = [];
    for (let k = i; k < Math.min(n, i + 500); k++) items.push({ queue, partition: `p${k % partitions}`, payload: { order: k }, transactionId: `m${k}` });
    const res = await http(base, 'POST', '/api/v1/push', { items });
    if (res.status !== 201) throw new Error(`push answered ${res.status}`);
  }
}

async function throughput(base: string, pattern: Pattern, queue: string, n: number, consumers: number): Promise<number> {
  await fill(base, queue, n, 16, 60);
  let done = 0;
  const noGate: Gate = async () => undefined;
  const events: Record<string, number> = {};
  const report: Report = (e) => void (e !== 'effect' && (events[e] = (events[e] ?? 0) + 1));
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: consumers }, async () => {
      while (done < n) {
        const batch = await pop(base, queue, 10, 200);
        for (const m of batch) {
          await handle(base, pattern, `bench-${queue}`, m, noGate, report);
          done++;
        }
      }
    }),
  );
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  if (Object.keys(events).length > 0) throw new Error(`${pattern}: unexpected outcomes without crashes: ${JSON.stringify(events)}`);
  return seconds;
}

interface CrashResult {
  messages: number;
  kills: number;
  killsAt: Record<string, number>;
  effects: number;
  effectsRepeated: number;
  markedButRedelivered: number;
  ackedNeverMarked: number;
  markersMissingOrExtra: number;
  /** Commits refused because the lease had lapsed (a slow consumer: a zombie), by outcome. */
  other: Record<string, number>;
  seconds: number;
}

async function finished(db: Client, queue: string): Promise<number> {
  const { rows } = await db.query(
    `SELECT coalesce(sum(c.cursor_seq), 0)::int AS done FROM queen.partition_consumers c
       JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id
      WHERE q.name = $1 AND c.consumer_group = '__QUEUE_MODE__'`,
    [queue],
  );
  return rows[0].done;
}

async function crashes(s: Setup, pattern: Pattern, n: number, killP: number): Promise<CrashResult> {
  const queue = `crash-${pattern}`;
  const ns = `crash-${pattern}`;
  // Short leases: a killed consumer's messages come back CRASH_LEASE seconds later; 16 partitions
  // keep the others flowing meanwhile.
  await fill(s.base, queue, n, 16, CRASH_LEASE);
  const { Client } = await import('pg');
  const db: Client = new Client({ connectionString: s.databaseUrl });
  await db.connect();
  const effects = new Map<string, number>();
  const redeliveredMarked = new Set<string>();
  const killsAt: Record<string, number> = {};
  const other: Record<string, number> = {};
  const children = new Set<ChildProcess>();
  let kills = 0;
  let complete = false;
  let current: ChildProcess | undefined;
  const started = Date.now();

  await new Promise<void>((resolve, reject) => {
    // One consumer works; a standby waits, loaded, to take over the moment the worker is killed.
    let standby: Promise<ChildProcess> = spawnStandby();
    function spawnStandby(): Promise<ChildProcess> {
      return new Promise((ready, failed) => {
        const c = fork(__filename, ['--child', s.base, queue, pattern, ns, String(killP)], {
          stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        });
        children.add(c);
        c.once('exit', () => children.delete(c));
        c.on('error', failed);
        c.on('message', (msg: any) => {
          if (msg.t === 'ready') return ready(c);
          if (c !== current) return;
          if (msg.t === 'event') {
            if (msg.event === 'effect') effects.set(msg.txid, (effects.get(msg.txid) ?? 0) + 1);
            else if (msg.event === 'marked-redelivered') redeliveredMarked.add(msg.txid);
            else other[msg.event] = (other[msg.event] ?? 0) + 1;
          } else if (msg.t === 'kill-me') {
            kills++;
            killsAt[msg.point] = (killsAt[msg.point] ?? 0) + 1;
            current = undefined;
            process.kill(c.pid!, 'SIGKILL');
            void promote();
          } else if (msg.t === 'idle' && !complete) {
            void finished(db, queue).then((done) => {
              if (done < n || complete) return;
              complete = true;
              c.once('exit', () => resolve());
              c.send({ t: 'stop' });
              void standby.then((sb) => sb.kill('SIGKILL'));
            });
          }
        });
      });
    }
    async function promote() {
      const next = await standby;
      standby = spawnStandby();
      current = next;
      next.send({ t: 'start' });
    }
    promote().catch(reject);
  });
  // Whatever this run started and is still alive (a standby), ended by its PID.
  for (const c of children) if (c.exitCode === null && c.signalCode === null) process.kill(c.pid!, 'SIGKILL');

  const { rows } = await db.query(
    `SELECT count(*) FILTER (WHERE k.key IS NULL)::int AS unmarked, count(*)::int AS total,
            (SELECT count(*)::int FROM queen.kv WHERE namespace = $2) AS markers
       FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
       LEFT JOIN queen.kv k ON k.namespace = $2 AND k.key = 'done:' || m.transaction_id
      WHERE q.name = $1`,
    [queue, ns],
  );
  await db.end();
  let repeated = 0;
  for (const c of effects.values()) repeated += c - 1;
  return {
    messages: rows[0].total,
    kills,
    killsAt,
    effects: [...effects.values()].reduce((a, b) => a + b, 0),
    effectsRepeated: repeated,
    markedButRedelivered: redeliveredMarked.size,
    ackedNeverMarked: rows[0].unmarked,
    markersMissingOrExtra: Math.abs(rows[0].markers - (rows[0].total - rows[0].unmarked)),
    other,
    seconds: (Date.now() - started) / 1000,
  };
}

function pad(s: string | number, w: number): string {
  return String(s).padStart(w);
}

async function main(): Promise<void> {
  const n = envInt('BENCH_TX_N', 500);
  const consumers = envInt('BENCH_TX_CONSUMERS', 4);
  const rounds = envInt('BENCH_TX_ROUNDS', 3);
  const crashN = envInt('BENCH_TX_CRASH_N', 1000);
  const killP = envInt('BENCH_TX_KILL_P', 0.03);
  const out = (line = '') => process.stdout.write(line + '\n');

  out(`bench:tx  ${new Date().toISOString()}  node ${process.version}  ${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? '?'})`);
  const s = await setup();
  try {
    out(`PostgreSQL: ${process.env.BENCH_TX_DATABASE_URL ? 'BENCH_TX_DATABASE_URL' : 'embedded, fresh data folder, fsync and synchronous_commit on'}; API in-process, one worker`);
    out();
    if (rounds > 0) out(`1. Throughput: ${n} messages per pattern per round, ${consumers} concurrent consumers, pop batch 10, 16 partitions, ${rounds} rounds after a warm-up`);
    const patterns: Pattern[] = ['a', 'b', 'b2'];
    const times: Record<Pattern, number[]> = { a: [], b: [], b2: [] };
    // A warm-up per pattern, not counted: plans cached, pools and the HTTP client's sockets open.
    if (rounds > 0) for (const p of patterns) await throughput(s.base, p, `warm-${p}`, 100, consumers);
    for (let r = 0; r < rounds; r++) {
      // Rotated each round, so every pattern runs first, second and third as often.
      const order = patterns.map((_, i) => patterns[(i + r) % patterns.length]);
      for (const p of order) times[p].push(await throughput(s.base, p, `tp-${p}-${r}`, n, consumers));
    }
    if (rounds > 0) {
      const rate = (p: Pattern) => (n * rounds) / times[p].reduce((a, b) => a + b, 0);
      out(`   ${'pattern'.padEnd(26)} ${pad('msg/s', 8)}   rounds (s)`);
      for (const p of patterns) out(`   ${LABEL[p].padEnd(26)} ${pad(rate(p).toFixed(0), 8)}   ${times[p].map((t) => t.toFixed(2)).join(', ')}`);
      const wins = (q: Pattern) => times.a.filter((t, i) => t < times[q][i]).length;
      out(`   ratio (a)/(b):  ${(rate('a') / rate('b')).toFixed(2)}x   (a)/(b'): ${(rate('a') / rate('b2')).toFixed(2)}x` +
        `   (a) faster than (b) in ${wins('b')} of ${rounds} rounds, than (b') in ${wins('b2')} of ${rounds}`);
      out();
    }

    out(`2. Crashes: ${crashN} messages per pattern, one consumer child process per pattern (pop batch ${CRASH_BATCH}, ${CRASH_LEASE} s lease), SIGKILL by PID at each crash point with p = ${killP}`);
    // The three run side by side (their own queues, namespaces and children): the counts do not
    // depend on speed, and the wall time is a third.
    const results: Partial<Record<Pattern, CrashResult>> = {};
    await Promise.all(patterns.map(async (p) => (results[p] = await crashes(s, p, crashN, killP))));
    out(`   ${'pattern'.padEnd(26)} ${pad('kills', 6)} ${pad('marked+redelivered', 19)} ${pad('acked,never marked', 19)} ${pad('effects repeated', 17)} ${pad('s', 6)}  kills at`);
    for (const p of patterns) {
      const r = results[p]!;
      out(
        `   ${LABEL[p].padEnd(26)} ${pad(r.kills, 6)} ${pad(r.markedButRedelivered, 19)} ${pad(r.ackedNeverMarked, 19)} ${pad(r.effectsRepeated, 17)} ${pad(r.seconds.toFixed(1), 6)}  ${JSON.stringify(r.killsAt)}`,
      );
      if (Object.keys(r.other).length > 0) out(`   ${''.padEnd(26)} lease lapsed under load (not a kill): ${JSON.stringify(r.other)}`);
      if (r.messages !== crashN || r.markersMissingOrExtra !== 0) out(`   !! ${p}: ${r.messages} messages, marker count off by ${r.markersMissingOrExtra}`);
    }
    const a = results.a!;
    const anomalies = (r: CrashResult) => r.markedButRedelivered + r.ackedNeverMarked;
    out(`   anomalies: (a) ${anomalies(a)}   (b) ${anomalies(results.b!)}   (b') ${anomalies(results.b2!)}`);
    out(`   "effects repeated" is the crash between the effect and any commit: outside PostgreSQL, no pattern prevents it.`);
    if (anomalies(a) !== 0) process.exitCode = 1;
  } finally {
    await s.close();
  }
}

if (process.argv[2] === '--child') {
  child().catch((err) => {
    // A standby still starting when the run ends finds the server gone; that is not a finding.
    if (process.env.BENCH_TX_DEBUG) process.stderr.write(`bench:tx consumer: ${(err as Error).stack}\n`);
    process.exit(1);
  });
} else {
  main().catch((err) => {
    process.stderr.write(`bench:tx failed: ${(err as Error).stack}\n`);
    process.exit(1);
  });
}
