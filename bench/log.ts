// npm run bench:log — the log's hot path against the bare SQL that does the same durable work, in
// the same run, rounds alternated (each round rotates which side goes first, so a neighbour's burst
// lands on every side). Lanes (operations are messages: a 100-item push is 100):
//   push1     POST /api/v1/push, one item a call, one partition per client
//             bare: the partition's last_seq bumped and the message inserted, one statement
//   push100   the same with 100 items a call (bare: one statement for the 100)
//   pop       GET /api/v1/pop of a named partition, batch 10, each pop a fresh partition
//             bare: the keyset SELECT and the lease written to the group's row, one statement
//   ack       POST /api/v1/ack/batch of the 10 messages each pop of the round before leased
//             bare: the cursor moved past them and the lease cleared, one statement
//   pop+ack10 pop batch 10 and ack them, one partition per client behind a backlog
//             bare: a keyset SELECT and the cursor's UPDATE in one transaction (bench/lib/bareLog.ts)
//   bundle    pop batch 10, then per message POST /api/v1/transaction {ack + putIfAbsent marker},
//             one commit; against the two-commit pattern (POST /api/v1/kv marker, then POST /api/v1/ack)
// Per lane and side: messages/s, p50/p99 of one iteration (a request; a pop and its acks),
// PostgreSQL CPU µs per message (every process of the server this run started, /proc/<pid>/stat),
// API CPU µs per message (the cell's primary and worker), WAL bytes per message
// (pg_current_wal_insert_lsn), messages per CPU-second of the whole machine (/proc/stat), and with
// --wal (default on) where the WAL of the last round went: pg_walinspect's records over the lane's
// LSN range by resource manager, record type and relation (full-page images apart).
// A CHECKPOINT before every measured stretch: each pays the full-page images of the pages it first
// touches, the same for every side, instead of the first stretch after a checkpoint paying them all.
// Autovacuum is off on the run's own server (its passes would land in whatever stretch ran).
// Options: --duration=3 (seconds a side a round), --rounds=3 (rounded up to a whole turn of the sides' rotation: 4), --clients=16, --lanes=push1,pop,...
// (prefixes), --wal=false, --compare=<git ref> (a second cell whose database has that revision's
// sql/functions overlaid on this tree's schema: function bodies changed in place compare; a
// migration of this tree that the ref lacks is said and not undone, unless --before-sql=<file> holds
// the statements that undo it, run there after the overlay), --compare-build=<dir> (a second cell
// that runs another build's migrations and API: a worktree of another revision, built; for changes
// to the API and the SQL together, which --compare cannot overlay), --payload=<bytes> (each
// message's JSON payload about that long, an order's lines: default about 110 bytes), --profile (the run's server with
// pg_stat_statements, track = all and track_planning, and track_functions = all: after each lane,
// where the last round's PostgreSQL time went, statement by statement and function by function,
// per message; the instruments cost time of their own, so read its rates as bent), DATABASE_URL
// (an existing server; --profile then needs pg_stat_statements in its shared_preload_libraries).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Client, Pool } from 'pg';
import { DEFAULT_TENANT } from '../shared/config';
import { barePopAck } from './lib/bareLog';
import { BenchCell, startCell } from './lib/cell';
import { benchDatabase } from './lib/database';
import { closedLoop, HttpClient, rawClient, Task } from './lib/load';
import { median, positiveOption } from './lib/options';
import { loadAverage, machineBusyUs, stopChild, TreeCpu } from './lib/procs';
import { schemaOf } from './lib/procedure';

const argv = process.argv.slice(2);
const flag = (name: string) => argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const DURATION_S = positiveOption('duration', 'BENCH_DURATION_S', 3);
const ASKED_ROUNDS = positiveOption('rounds', 'BENCH_ROUNDS', 3);
const CLIENTS = positiveOption('clients', 'BENCH_CLIENTS', 16);
const LANES = (flag('lanes') ?? 'push1,push100,pop,ack,pop+ack10,bundle').split(',');
const WAL = flag('wal') !== 'false';
const COMPARE = flag('compare');
const COMPARE_BUILD = flag('compare-build');
if (COMPARE && COMPARE_BUILD) throw new Error('--compare and --compare-build each make the second cell: name one');
// Each round rotates the sides' order by one, so every side takes every place equally only over a
// whole number of turns of the rotation: the rounds asked for are rounded up to one (2 sides, or 4
// with --compare). With 3 rounds of 4 sides the cell compared against took the better places:
// comparing HEAD with itself gave push1 0.92x, where 4 rounds give 0.99x.
// Every lane has two sides (the cell and its bare SQL, or the bundle and the two commits).
const SIDES = (COMPARE || COMPARE_BUILD ? 2 : 1) * 2;
const ROUNDS = Math.ceil(ASKED_ROUNDS / SIDES) * SIDES;
const BEFORE_SQL = flag('before-sql');
const PROFILE = argv.includes('--profile') || flag('profile') === 'true';
/** The server settings --profile needs: a nested statement's plans and calls, and each function's own time. */
const PROFILE_SETTINGS = {
  shared_preload_libraries: 'pg_stat_statements',
  'pg_stat_statements.track': 'all',
  'pg_stat_statements.track_planning': 'on',
  track_functions: 'all',
};
const WARM_S = 1;
/** Partitions of 10 messages for the pop lane (each pop takes a fresh one; every group reads them all). */
const POP_PARTITIONS = positiveOption('pop-partitions', 'BENCH_POP_PARTITIONS', 12_000);
/**
 * Messages in each of the CLIENTS backlog partitions of pop+ack10 and the bundle (every group reads
 * from the start): 64,000 in all, at least 4,000 a partition, so one client's stretch does not run
 * dry (with --clients=1 and 4,000, the API side emptied its partition within 3 s and the bare one
 * within 0.3, and every pop after answered 204).
 */
const BACKLOG = positiveOption('backlog', 'BENCH_BACKLOG', Math.max(4_000, Math.ceil(64_000 / CLIENTS)));
const PAYLOAD_BYTES = flag('payload') !== undefined || process.env.BENCH_PAYLOAD ? positiveOption('payload', 'BENCH_PAYLOAD', 110) : undefined;
/** The messages' payload: small by default; with --payload, an order whose lines bring it to about that many bytes. */
const PAYLOAD = PAYLOAD_BYTES === undefined
  ? JSON.stringify({ name: 'bench', n: 12345, tags: ['a', 'b', 'c'], payload: 'x'.repeat(48) })
  : JSON.stringify({
    name: 'bench', n: 12345,
    lines: Array.from({ length: Math.max(1, Math.round((PAYLOAD_BYTES - 40) / 82)) }, (_, k) => ({ sku: `item-${k}`, qty: k + 1, price: 1.5 * (k + 1), note: 'a line of the order' })),
  });
const TENANT = DEFAULT_TENANT;
const out = (s = '') => process.stdout.write(`${s}\n`);

// ---------------------------------------------------------------- the bare statements
const BARE = {
  push1: {
    name: 'bare_push1',
    text: `WITH p AS (UPDATE queen.partitions SET last_seq = last_seq + 1 WHERE id = $1 RETURNING last_seq)
           INSERT INTO queen.messages (partition_id, seq, transaction_id, payload) SELECT $1, p.last_seq, gen_random_uuid()::text, $2::jsonb FROM p`,
  },
  push100: {
    name: 'bare_push100',
    text: `WITH i AS (SELECT e, k FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS t (e, k)),
                p AS (UPDATE queen.partitions SET last_seq = last_seq + (SELECT count(*) FROM i) WHERE id = $1 RETURNING last_seq)
           INSERT INTO queen.messages (partition_id, seq, transaction_id, payload)
           SELECT $1, p.last_seq - (SELECT count(*) FROM i) + i.k, gen_random_uuid()::text, i.e FROM p, i`,
  },
  pop: {
    name: 'bare_pop_lease',
    text: `WITH c AS (SELECT cursor_seq FROM queen.partition_consumers WHERE partition_id = $1 AND consumer_group = $2 AND lease_id IS NULL FOR UPDATE),
                m AS (SELECT m.seq, m.transaction_id, m.payload FROM queen.messages m, c WHERE m.partition_id = $1 AND m.seq > c.cursor_seq ORDER BY m.seq LIMIT 10),
                u AS (UPDATE queen.partition_consumers SET lease_id = gen_random_uuid(), lease_expires_at = now() + interval '300 seconds',
                             lease_seqs = (SELECT array_agg(seq ORDER BY seq) FROM m), last_leased_at = now(), deliveries = deliveries + (SELECT count(*) FROM m)
                       WHERE partition_id = $1 AND consumer_group = $2 AND EXISTS (SELECT 1 FROM m) RETURNING lease_id)
           SELECT (SELECT lease_id FROM u) AS lease_id, m.* FROM m ORDER BY m.seq`,
  },
  ack: {
    name: 'bare_ack_lease',
    text: `UPDATE queen.partition_consumers SET cursor_seq = $3, lease_id = NULL, lease_expires_at = NULL, lease_seqs = '{}',
                  completed = completed + $4, updated_at = now()
            WHERE partition_id = $1 AND consumer_group = $2 AND lease_id = $5`,
  },
};

// ---------------------------------------------------------------- sides and their data
interface Db {
  label: string;
  url: string;
  cell: BenchCell;
  admin: Pool;
  /** The bare push lane's partitions (p0.. of bl-push-sql), by client; the API pushes to bl-push's by name. */
  barePushIds: string[];
  /** The pop lane's partitions of 10 (names q0.. in queue bl-pop), and the backlog (b0.. in bl-backlog). */
  popIds: string[];
  backlogIds: string[];
}

async function ids(admin: Pool, queue: string, names: string[]): Promise<string[]> {
  const { rows } = await admin.query(
    `SELECT n, p.id FROM unnest($3::text[]) WITH ORDINALITY AS t (n, k) JOIN queen.queues q ON q.tenant_id = $1 AND q.name = $2
       JOIN queen.partitions p ON p.queue_id = q.id AND p.name = t.n ORDER BY t.k`,
    [TENANT, queue, names],
  );
  return rows.map((r) => r.id as string);
}

/** Queues, partitions and messages loaded with plain SQL (never the API), then vacuumed: the steady state. */
async function load(admin: Pool): Promise<Omit<Db, 'label' | 'url' | 'cell' | 'admin'>> {
  const names = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
  for (const [queue, prefix] of [['bl-push', 'p'], ['bl-push-sql', 'p'], ['bl-pop', 'q'], ['bl-backlog', 'b']]) {
    await admin.query(`SELECT queen.log_ensure_partition_v1($1, $2, $3)`, [TENANT, queue, `${prefix}0`]);
  }
  for (const queue of ['bl-push', 'bl-push-sql']) {
    await admin.query(
      `INSERT INTO queen.partitions (queue_id, name) SELECT q.id, 'p' || g FROM queen.queues q, generate_series(1, $3::int - 1) g
        WHERE q.tenant_id = $1 AND q.name = $2 ON CONFLICT DO NOTHING`,
      [TENANT, queue, CLIENTS],
    );
  }
  const fill = async (queue: string, prefix: string, partitions: number, each: number) => {
    await admin.query(
      `INSERT INTO queen.partitions (queue_id, name, last_seq) SELECT q.id, $3 || g, $5 FROM queen.queues q, generate_series(0, $4::int - 1) g
        WHERE q.tenant_id = $1 AND q.name = $2 ON CONFLICT (queue_id, name) DO UPDATE SET last_seq = EXCLUDED.last_seq`,
      [TENANT, queue, prefix, partitions, each],
    );
    await admin.query(
      `INSERT INTO queen.messages (partition_id, seq, transaction_id, payload)
       SELECT p.id, s, gen_random_uuid()::text, $4::jsonb FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id, generate_series(1, $3::int) s
        WHERE q.tenant_id = $1 AND q.name = $2 ORDER BY p.id, s`,
      [TENANT, queue, each, PAYLOAD],
    );
  };
  await fill('bl-pop', 'q', POP_PARTITIONS, 10);
  await fill('bl-backlog', 'b', CLIENTS, BACKLOG);
  await admin.query('VACUUM ANALYZE queen.partitions, queen.messages, queen.partition_consumers');
  return {
    barePushIds: await ids(admin, 'bl-push-sql', names('p', CLIENTS)),
    popIds: await ids(admin, 'bl-pop', names('q', POP_PARTITIONS)),
    backlogIds: await ids(admin, 'bl-backlog', names('b', CLIENTS)),
  };
}

/** A consumer group's rows on these partitions, as a group that has read them before has them. */
async function group(db: Db, partitionIds: string[], name: string): Promise<string> {
  await db.admin.query(`INSERT INTO queen.partition_consumers (partition_id, consumer_group) SELECT unnest($1::uuid[]), $2 ON CONFLICT DO NOTHING`, [partitionIds, name]);
  return name;
}

async function onServer(url: string, statements: string[]): Promise<void> {
  const c = new Client({ connectionString: url });
  await c.connect();
  try {
    for (const st of statements) await c.query(st);
  } finally {
    await c.end();
  }
}

/** This revision's function bodies in place of the tree's (see the header). */
async function overlay(url: string, ref: string): Promise<void> {
  const files = schemaOf(ref);
  const at = files.indexOf('SET LOCAL check_function_bodies = off');
  const root = path.resolve(__dirname, '..', '..');
  const theirs = execFileSync('git', ['ls-tree', '--name-only', ref, 'sql/migrations/'], { cwd: root }).toString().trim().split('\n');
  const ours = execFileSync('git', ['ls-files', 'sql/migrations/'], { cwd: root }).toString().trim().split('\n');
  const extra = ours.filter((f) => f.endsWith('.sql') && !theirs.includes(f));
  if (extra.length && !BEFORE_SQL) out(`(--compare=${ref}: this tree's ${extra.join(', ')} stay applied in both databases)`);
  await onServer(url, ['BEGIN', ...files.slice(at), 'COMMIT']);
  if (BEFORE_SQL) {
    out(`(--compare=${ref}: ${extra.join(', ')} undone there by ${BEFORE_SQL})`);
    await onServer(url, [fs.readFileSync(BEFORE_SQL, 'utf8')]);
  }
}

// ---------------------------------------------------------------- one measured stretch
interface Stretch {
  ops: number;
  seconds: number;
  p50Us: number;
  p99Us: number;
  errors: number;
  firstError?: string;
  pgUs: number;
  apiUs: number;
  walBytes: number;
  machineUs: number;
  lsn: [string, string];
  /** --profile: where the stretch's PostgreSQL time went, as printed lines. */
  profile?: string[];
}

interface Run {
  /** Connections and clients opened outside the measured stretch. */
  setup?(): Promise<void>;
  task(client: number): Task;
  teardown?(): Promise<void>;
}

async function lsn(admin: Pool): Promise<string> {
  return (await admin.query(`SELECT pg_current_wal_insert_lsn()::text AS l`)).rows[0].l as string;
}

/**
 * The CPU that other processes took inside the stretches (every process below init but this run's
 * tree; the kernel's own threads, which write this run's WAL and carry its loopback traffic, are not
 * below init), against the cores' capacity over those stretches: what says whether the run had the
 * machine to itself. The load average cannot: on two cores the run's own clients and cells put it
 * above 1.5. A process that both starts and ends inside one stretch is missed.
 */
const elsewhere = { busyUs: 0, capacityUs: 0 };

async function stretch(db: Db, pgPid: number | undefined, run: Run, seconds: number): Promise<Stretch> {
  await db.admin.query('CHECKPOINT');
  await run.setup?.();
  try {
    const pg = new TreeCpu(() => (pgPid ? [pgPid] : []));
    const api = new TreeCpu(() => [db.cell.proc.pid!]);
    const own = new TreeCpu(() => [process.pid]);
    const everyone = new TreeCpu(() => [1]);
    const m0 = machineBusyUs();
    const l0 = await lsn(db.admin);
    if (PROFILE) await db.admin.query('SELECT pg_stat_statements_reset(), pg_stat_reset()');
    pg.start();
    api.start();
    own.start();
    everyone.start();
    const r = await closedLoop(CLIENTS, seconds * 1000, run.task);
    const pgUs = pg.stop();
    const apiUs = api.stop();
    const ownUs = own.stop();
    const everyoneUs = everyone.stop();
    const m1 = machineBusyUs();
    const machineUs = m1.busy - m0.busy;
    elsewhere.busyUs += Math.max(0, everyoneUs - ownUs);
    elsewhere.capacityUs += m1.total - m0.total;
    const l1 = await lsn(db.admin);
    const walBytes = Number((await db.admin.query(`SELECT pg_wal_lsn_diff($1, $2)::float8 AS b`, [l1, l0])).rows[0].b);
    const profile = PROFILE ? await profileOf(db, r.ops) : undefined;
    return { ...r, pgUs, apiUs, walBytes, machineUs, lsn: [l0, l1], profile };
  } finally {
    await run.teardown?.();
  }
}

// ---------------------------------------------------------------- the lanes
function httpClients(db: Db): { clients: HttpClient[]; setup(): Promise<void>; teardown(): Promise<void> } {
  const clients: HttpClient[] = [];
  return {
    clients,
    async setup() {
      for (let c = 0; c < CLIENTS; c++) clients[c] = rawClient('127.0.0.1', db.cell.port);
    },
    async teardown() {
      clients.forEach((c) => c.close());
    },
  };
}

function sqlClients(db: Db): { pool: () => Pool; setup(): Promise<void>; teardown(): Promise<void> } {
  let pool: Pool;
  return {
    pool: () => pool,
    async setup() {
      pool = new Pool({ connectionString: db.url, max: CLIENTS });
      await Promise.all(Array.from({ length: CLIENTS }, () => pool.connect())).then((cs) => cs.forEach((c) => c.release()));
    },
    teardown: () => pool.end(),
  };
}

async function expect200(a: Promise<{ status: number; body: string }>, what: string, ok = /./): Promise<string> {
  const r = await a;
  if ((r.status !== 200 && r.status !== 201) || !ok.test(r.body)) throw new Error(`${what}: HTTP ${r.status} ${r.body.slice(0, 200)}`);
  return r.body;
}

interface Popped {
  partitionId: string;
  leaseId: string;
  transactionIds: string[];
}

function popOf(body: string): Popped {
  const b = JSON.parse(body) as { leaseId: string; partitionId: string; messages: { transactionId: string }[] };
  return { partitionId: b.partitionId, leaseId: b.leaseId, transactionIds: b.messages.map((m) => m.transactionId) };
}

const pushBody = (partition: string, n: number) =>
  `{"items":[${Array.from({ length: n }, () => `{"queue":"bl-push","partition":"${partition}","payload":${PAYLOAD}}`).join(',')}]}`;
const ackBatch = (p: Popped, group: string) =>
  JSON.stringify({ consumerGroup: group, acknowledgments: p.transactionIds.map((t) => ({ transactionId: t, partitionId: p.partitionId, status: 'completed', leaseId: p.leaseId })) });
const popPath = (queue: string, partition: string, group: string) => `/api/v1/pop/queue/${queue}/partition/${partition}?batch=10&consumerGroup=${group}&wait=false`;

/**
 * A lane's sides: each makes a Run for (db, round tag). State a lane carries from one side's
 * stretch to the next (the pop lane's leases, for the ack lane) lives in `carry`, per side and round.
 */
type SideRun = (db: Db, tag: string) => Promise<Run>;
interface Lane {
  name: string;
  /** Side names, the baseline (bare, or the two-commit pattern) last. */
  sides: Record<string, SideRun>;
  baseline: string;
}

const carry = new Map<string, { api: Popped[]; bare: { pid: string; lease: string; top: number; n: number }[] }>();

/** A side's Run: the bare side's task over a pool of CLIENTS connections, the API side's over one HTTP client each. */
function runOf(db: Db, bare: boolean, sqlTask: (pool: Pool, c: number) => Promise<number>, httpTask: (http: HttpClient, c: number) => Promise<number>): Run {
  if (bare) {
    const s = sqlClients(db);
    return { ...s, task: (c) => () => sqlTask(s.pool(), c) };
  }
  const h = httpClients(db);
  return { ...h, task: (c) => () => httpTask(h.clients[c], c) };
}

function pushSide(n: number, bare: boolean): SideRun {
  const items = `[${Array.from({ length: n }, () => PAYLOAD).join(',')}]`;
  return async (db) =>
    runOf(
      db,
      bare,
      async (pool, c) => (await pool.query(n === 1 ? { ...BARE.push1, values: [db.barePushIds[c], PAYLOAD] } : { ...BARE.push100, values: [db.barePushIds[c], items] })).rowCount ?? 0,
      async (http, c) => (await expect200(http.request('POST', '/api/v1/push', pushBody(`p${c}`, n)), 'push'), n),
    );
}

/** Each pop takes the next partition of the pop lane's; the leases are kept for the ack lane of the same round. */
function popSide(bare: boolean): SideRun {
  return async (db, tag) => {
    const g = await group(db, db.popIds, `pop-${tag}`);
    const kept = { api: [] as Popped[], bare: [] as { pid: string; lease: string; top: number; n: number }[] };
    carry.set(`${db.label}/${tag}`, kept);
    let next = 0;
    return runOf(
      db,
      bare,
      async (pool) => {
        const i = next++;
        if (i >= db.popIds.length) return -1;
        const { rows } = await pool.query({ ...BARE.pop, values: [db.popIds[i], g] });
        if (!rows.length || !rows[0].lease_id) throw new Error(`bare pop of q${i}: nothing`);
        kept.bare.push({ pid: db.popIds[i], lease: rows[0].lease_id, top: Number(rows[rows.length - 1].seq), n: rows.length });
        return rows.length;
      },
      async (http) => {
        const i = next++;
        if (i >= db.popIds.length) return -1;
        const p = popOf(await expect200(http.request('GET', popPath('bl-pop', `q${i}`, g)), 'pop', /"messages"/));
        kept.api.push(p);
        return p.transactionIds.length;
      },
    );
  };
}

/** Acks what the pop lane's side leased in the same round (its tag), ten a call. */
function ackSide(bare: boolean): SideRun {
  return async (db, tag) => {
    const kept = carry.get(`${db.label}/${tag}`);
    if (!kept) throw new Error(`the ack lane runs after the pop lane (${tag})`);
    let next = 0;
    return runOf(
      db,
      bare,
      async (pool) => {
        const l = kept.bare[next++];
        if (!l) return -1;
        const r = await pool.query({ ...BARE.ack, values: [l.pid, `pop-${tag}`, l.top, l.n, l.lease] });
        return r.rowCount === 1 ? l.n : 0;
      },
      async (http) => {
        const p = kept.api[next++];
        if (!p) return -1;
        await expect200(http.request('POST', '/api/v1/ack/batch', ackBatch(p, `pop-${tag}`)), 'ack', /^\{"ok":true/);
        return p.transactionIds.length;
      },
    );
  };
}

function popAckSide(bare: boolean): SideRun {
  return async (db, tag) => {
    const g = await group(db, db.backlogIds, `pa-${tag}`);
    const cursors = new Map<number, number>();
    return runOf(
      db,
      bare,
      async (pool, c) => {
        const { n, top } = await barePopAck(pool, db.backlogIds[c], g, cursors.get(c) ?? 0);
        cursors.set(c, top);
        return n > 0 ? n : -1;
      },
      async (http, c) => {
        const r = await http.request('GET', popPath('bl-backlog', `b${c}`, g));
        if (r.status === 204) return -1;
        const p = popOf(await expect200(Promise.resolve(r), 'pop', /"messages"/));
        await expect200(http.request('POST', '/api/v1/ack/batch', ackBatch(p, g)), 'ack', /^\{"ok":true/);
        return p.transactionIds.length;
      },
    );
  };
}

/** pop batch 10, then each message finished with its once-marker: one bundle, or the marker and the ack apart. */
function bundleSide(bundle: boolean): SideRun {
  return async (db, tag) => {
    const g = await group(db, db.backlogIds, `${bundle ? 'tx' : 'two'}-${tag}`);
    const h = httpClients(db);
    return {
      ...h,
      task: (c) => async () => {
        const http = h.clients[c];
        const r = await http.request('GET', popPath('bl-backlog', `b${c}`, g));
        if (r.status === 204) return -1;
        const p = popOf(await expect200(Promise.resolve(r), 'pop', /"messages"/));
        for (const t of p.transactionIds) {
          const ack = { transactionId: t, partitionId: p.partitionId, status: 'completed', consumerGroup: g, leaseId: p.leaseId };
          const marker = { op: 'putIfAbsent', ns: `once-${g}`, key: `done:${t}`, value: { chargeId: `ch_${t}` }, ttlSeconds: 86400 };
          if (bundle) {
            await expect200(http.request('POST', '/api/v1/transaction', JSON.stringify({ operations: [{ type: 'ack', ...ack }], kv: [{ ...marker, required: true }] })), 'bundle', /"ok":\s?true/);
          } else {
            await expect200(http.request('POST', '/api/v1/kv', JSON.stringify({ operations: [marker] })), 'marker', /"applied":\s?true/);
            await expect200(http.request('POST', '/api/v1/ack', JSON.stringify(ack)), 'ack', /"ok":\s?true/);
          }
        }
        return p.transactionIds.length;
      },
    };
  };
}

const ALL_LANES: Lane[] = [
  { name: 'push1', sides: { api: pushSide(1, false), bare: pushSide(1, true) }, baseline: 'bare' },
  { name: 'push100', sides: { api: pushSide(100, false), bare: pushSide(100, true) }, baseline: 'bare' },
  { name: 'pop', sides: { api: popSide(false), bare: popSide(true) }, baseline: 'bare' },
  { name: 'ack', sides: { api: ackSide(false), bare: ackSide(true) }, baseline: 'bare' },
  { name: 'pop+ack10', sides: { api: popAckSide(false), bare: popAckSide(true) }, baseline: 'bare' },
  { name: 'bundle', sides: { bundle: bundleSide(true), 'two-commit': bundleSide(false) }, baseline: 'two-commit' },
];

// ---------------------------------------------------------------- where the WAL went
/** pg_walinspect over a stretch's LSN range: records by resource manager, type and relation, per message. */
async function walBreakdown(db: Db, s: Stretch): Promise<string[]> {
  // Records are readable once flushed (the last commit's flush, or the WAL writer's within 200 ms).
  for (let i = 0; i < 50; i++) {
    const { rows } = await db.admin.query(`SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn AS ok`, [s.lsn[1]]);
    if (rows[0].ok) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const { rows } = await db.admin.query(
    `SELECT w.resource_manager || '/' || split_part(w.record_type, ' ', 1) AS kind,
            coalesce((SELECT CASE WHEN b IS NULL THEN '-' WHEN b[2]::oid = (SELECT oid FROM pg_database WHERE datname = current_database())
                                  THEN coalesce(pg_filenode_relation(0, b[3]::oid)::text, pg_filenode_relation(b[1]::oid, b[3]::oid)::text, 'filenode ' || b[3])
                                  ELSE 'another database' END
                        FROM regexp_match(w.block_ref, 'rel (\\d+)/(\\d+)/(\\d+)') b), '-') AS rel,
            count(*)::float8 AS n, sum(w.record_length)::float8 AS bytes, sum(w.fpi_length)::float8 AS fpi
       FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn) w
      GROUP BY 1, 2 ORDER BY sum(w.record_length) DESC`,
    [s.lsn[0], s.lsn[1]],
  );
  const per = (x: number) => (s.ops > 0 ? x / s.ops : NaN);
  const total = (f: (r: { bytes: number; fpi: number }) => number) => per(rows.reduce((a, r) => a + f(r), 0));
  const head = `      every record: ${total((r) => r.bytes).toFixed(0)} B a msg, of which full-page images ${total((r) => r.fpi).toFixed(0)} B; the largest:`;
  return [head, ...rows.slice(0, 12).map(
    (r) => `      ${String(r.kind).padEnd(24)} ${String(r.rel).replace(/^queen\./, '').padEnd(42)} ${per(r.n).toFixed(3).padStart(7)} a msg ${per(r.bytes).toFixed(1).padStart(7)} B${r.fpi > 0 ? ` (full-page images ${per(r.fpi).toFixed(1)} B)` : ''}`,
  )];
}

// ---------------------------------------------------------------- where the PostgreSQL time went
/**
 * --profile: the stretch's statements (nested ones included), per message, and functions, per call. A statement
 * whose plans equal its calls is planned at every call; a LANGUAGE sql function listed among the
 * functions was not inlined (it is parsed and planned at every call too).
 */
async function profileOf(db: Db, ops: number): Promise<string[]> {
  const per = (x: number) => (ops > 0 ? x / ops : NaN);
  const statements = await db.admin.query(
    `SELECT calls::float8, plans::float8, (total_exec_time * 1000)::float8 AS exec_us, (total_plan_time * 1000)::float8 AS plan_us,
            left(regexp_replace(query, '\\s+', ' ', 'g'), 100) AS query
       FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND query !~* '^(CHECKPOINT|SELECT pg_stat|SELECT pg_current_wal|SELECT pg_wal_lsn_diff)'
      ORDER BY total_exec_time + total_plan_time DESC LIMIT 12`,
  );
  const functions = await db.admin.query(
    `SELECT schemaname || '.' || funcname AS name, calls::float8, (self_time * 1000)::float8 AS self_us, (total_time * 1000)::float8 AS total_us
       FROM pg_stat_user_functions WHERE calls > 0 ORDER BY self_time DESC LIMIT 12`,
  );
  const us = (x: number) => per(x).toFixed(1).padStart(8);
  return [
    `      statements (nested included), the largest: ${'calls'.padStart(7)} ${'exec µs'.padStart(8)} ${'plan µs'.padStart(8)}  a msg; plans/calls`,
    ...statements.rows.map((r) => `        ${per(r.calls).toFixed(2).padStart(47)} ${us(r.exec_us)} ${us(r.plan_us)}  ${(r.plans / Math.max(1, r.calls)).toFixed(2)}  ${r.query}`),
    // A backend reports its function counters at most once a second, so those of the last second
    // may be missing: a function's time is said per call, which holds for those reported.
    `      functions, by their own time, per call: ${'calls'.padStart(10)} ${'self µs'.padStart(8)} ${'total µs'.padStart(8)}`,
    ...functions.rows.map((r) => `        ${String(r.name).padEnd(40)} ${String(r.calls).padStart(9)} ${(r.self_us / r.calls).toFixed(1).padStart(8)} ${(r.total_us / r.calls).toFixed(1).padStart(8)}`),
  ];
}

// ---------------------------------------------------------------- main
async function main(): Promise<void> {
  const lanes = ALL_LANES.filter((l) => LANES.some((p) => l.name.startsWith(p)));
  // The ack lane acks what the pop lane leased in the same round.
  if (lanes.some((l) => l.name === 'ack') && !lanes.some((l) => l.name === 'pop')) lanes.unshift(ALL_LANES.find((l) => l.name === 'pop')!);
  const loadStart = loadAverage();
  out(`bench:log  ${new Date().toISOString()}  load average at start ${loadStart}`);
  const server = await benchDatabase('log', PROFILE ? { settings: PROFILE_SETTINGS } : {});
  const serverUrl = server.url.replace(/\/[^/?]+(\?|$)/, '/postgres$1');
  // The run's own server: no autovacuum, whose passes over either database would land in whichever
  // stretch was running (the tables are vacuumed once, after the load).
  if (server.embedded) await onServer(serverUrl, [`ALTER SYSTEM SET autovacuum = off`, `SELECT pg_reload_conf()`]);
  const dbs: Db[] = [];
  try {
    const second: [string, string | undefined][] = COMPARE ? [[`@${COMPARE}`, COMPARE]]
      : COMPARE_BUILD ? [[`@${path.basename(path.resolve(COMPARE_BUILD))}`, undefined]] : [];
    for (const [label, ref] of [['now', undefined], ...second] as [string, string | undefined][]) {
      const name = `bench_log_${label === 'now' ? 'now' : 'before'}_${Date.now().toString(36)}`;
      const cell = await startCell(serverUrl, name, {}, label === 'now' ? undefined : COMPARE_BUILD && path.resolve(COMPARE_BUILD));
      const url = serverUrl.replace(/\/[^/?]+(\?|$)/, `/${name}$1`);
      if (ref) await overlay(url, ref);
      const admin = new Pool({ connectionString: url, max: 2 });
      if (WAL) await admin.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
      if (PROFILE) {
        await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements').catch((err) => {
          throw new Error(`--profile needs pg_stat_statements in the server's shared_preload_libraries (${err.message})`);
        });
      }
      dbs.push({ label, url, cell, admin, ...(await load(admin)) });
    }
    const pgVersion = (await dbs[0].admin.query('SHOW server_version')).rows[0].server_version;
    out(`PostgreSQL ${pgVersion} (${server.embedded ? 'embedded, this run\'s own, fsync and synchronous_commit on' : 'DATABASE_URL: its CPU is not counted'}); ` +
      `one API worker per cell; ${CLIENTS} clients; ${ROUNDS} rounds of ${DURATION_S} s a side, order rotated; a CHECKPOINT before each stretch; ` +
      `payloads of ${Buffer.byteLength(PAYLOAD)} bytes of JSON`);
    out(`cells: ${dbs.map((d) => `${d.label} (pid ${d.cell.proc.pid}, port ${d.cell.port})`).join(', ')}\n`);

    for (const lane of lanes) {
      // Every (cell, side): the bare side runs on each cell's database too.
      const sides = dbs.flatMap((db) => Object.entries(lane.sides).map(([side, make]) => ({ key: `${side}${db.label === 'now' ? '' : ` ${db.label}`}`, side, db, make })));
      const got = new Map<string, Stretch[]>(sides.map((s) => [s.key, []]));
      const breakdown = new Map<string, string[]>();
      const profiles = new Map<string, string[]>();
      if (lane.name !== 'ack') for (const s of sides) await stretch(s.db, server.postmasterPid, await s.make(s.db, `${s.side}-warm-${lane.name}`), WARM_S);
      for (let r = 0; r < ROUNDS; r++) {
        const order = sides.map((_, i) => sides[(i + r) % sides.length]);
        for (const s of order) {
          const x = await stretch(s.db, server.postmasterPid, await s.make(s.db, `${s.side}-r${r}`), DURATION_S);
          got.get(s.key)!.push(x);
          // Read before the next stretch's CHECKPOINT recycles the segments.
          if (WAL && r === ROUNDS - 1) breakdown.set(s.key, await walBreakdown(s.db, x));
          if (x.profile && r === ROUNDS - 1) profiles.set(s.key, x.profile);
        }
      }
      out(`${lane.name}`);
      out(`  ${'side'.padEnd(22)} ${'msg/s'.padStart(8)} ${'p50 ms'.padStart(7)} ${'p99 ms'.padStart(7)} ${'pg µs/msg'.padStart(10)} ${'api µs/msg'.padStart(11)} ${'WAL B/msg'.padStart(10)} ${'msg/CPU-s'.padStart(10)}  errors`);
      const rate = new Map<string, number>();
      const wal = new Map<string, number>();
      for (const s of sides) {
        const xs = got.get(s.key)!;
        const sum = (f: (x: Stretch) => number) => xs.reduce((a, x) => a + f(x), 0);
        const ops = sum((x) => x.ops);
        rate.set(s.key, ops / sum((x) => x.seconds));
        wal.set(s.key, sum((x) => x.walBytes) / ops);
        const api = s.side === 'bare' ? '–' : (sum((x) => x.apiUs) / ops).toFixed(0);
        const errs = sum((x) => x.errors);
        out(
          `  ${s.key.padEnd(22)} ${rate.get(s.key)!.toFixed(0).padStart(8)} ${(median(xs.map((x) => x.p50Us)) / 1000).toFixed(2).padStart(7)} ${(median(xs.map((x) => x.p99Us)) / 1000).toFixed(2).padStart(7)}` +
            ` ${(sum((x) => x.pgUs) / ops).toFixed(0).padStart(10)} ${api.padStart(11)} ${wal.get(s.key)!.toFixed(0).padStart(10)} ${(ops / (sum((x) => x.machineUs) / 1e6)).toFixed(0).padStart(10)}  ${errs}${errs ? ` (${xs.find((x) => x.firstError)?.firstError})` : ''}`,
        );
      }
      for (const db of dbs) {
        const suffix = db.label === 'now' ? '' : ` ${db.label}`;
        const base = `${lane.baseline}${suffix}`;
        for (const side of Object.keys(lane.sides).filter((x) => x !== lane.baseline)) {
          const k = `${side}${suffix}`;
          out(`  ${k} / ${base}: ${(rate.get(k)! / rate.get(base)!).toFixed(2)}x the rate, ${(wal.get(k)! / wal.get(base)!).toFixed(1)}x the WAL`);
        }
      }
      if (dbs.length > 1) {
        for (const side of Object.keys(lane.sides).filter((x) => x !== lane.baseline)) {
          const k = `${side} ${dbs[1].label}`;
          out(`  ${side} / ${k}: ${(rate.get(side)! / rate.get(k)!).toFixed(2)}x the rate, ${(wal.get(side)! / wal.get(k)!).toFixed(2)}x the WAL`);
        }
      }
      if (WAL) {
        for (const s of sides) {
          out(`    WAL of ${s.key}, last round, by record type and relation, per message:`);
          for (const line of breakdown.get(s.key) ?? []) out(line);
        }
      }
      for (const [key, lines] of profiles) {
        out(`    PostgreSQL time of ${key}, last round, per message (--profile):`);
        for (const line of lines) out(line);
      }
      out();
    }
  } finally {
    for (const db of dbs) {
      await db.admin.end();
      await stopChild(db.cell.proc);
    }
    await server.stop();
  }
  const loadEnd = loadAverage();
  const share = elsewhere.capacityUs > 0 ? elsewhere.busyUs / elsewhere.capacityUs : 0;
  // Quiet: nothing else was running when it started (1-minute load at most 1.5), and during the
  // stretches at most a tenth of the cores went to anything but this run's processes.
  const quiet = Number(loadStart.split(' ')[0]) <= 1.5 && share <= 0.1;
  out(`load average at start ${loadStart}, at end ${loadEnd} (the run's own load included); the cores' time inside the stretches that other processes took: ${(share * 100).toFixed(1)} %`);
  out(quiet ? 'quiet: load at most 1.5 at the start, at most 10 % of the cores elsewhere' : 'NOT QUIET (load above 1.5 at the start, or more than 10 % of the cores elsewhere): the ratios compare, the absolute figures do not');
}

main().catch((err) => {
  process.stderr.write(`bench:log failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});
