// A failover under load, for test/ha/ (the verdict asserted) and `npm run chaos:failover` (the
// verdict printed): the built API and a sweeper on the HA cluster through HAProxy, writers that put
// KV keys, push messages with transactionIds and schedule timers 1 s ahead with timerKeys (each
// retried on any refusal until acknowledged,
// as a client that follows Retry-After does), a consumer that pops those pushes and settles each with
// a once-marker bundle (POST /api/v1/transaction: a KV putIfAbsent marker and the message's ack in
// one commit), a second tenant flooding KV reads at several times its rate limit, a fault while they
// run, and then the count of what was acknowledged against what the new primary holds, and of what the
// flood was admitted against the bound docs/limits.md states for a failover.
import { Client } from 'pg';
import { applySchema } from '../../shared/db';
import { freePort } from '../../shared/embeddedPostgres';
import { UNLIMITED_RATES } from '../support/api';
import { API_MAIN, LogLine, spawnLogged, Spawned, SWEEPER_MAIN } from '../support/processes';
import { waitFor } from '../support/wait';
import type { HaCluster } from './cluster';

export const DATABASE = 'queen';
/** One call's bound: an answer later than this counts as a hang. */
export const CALL_BOUND_MS = 10_000;
/** The cell runs with tenancy: the load is one tenant, the flood another. */
export const TENANT = '7a1e0c4e-5b1d-4c36-9f0e-3a6b8f1d2c01';
export const FLOOD_TENANT = '7a1e0c4e-5b1d-4c36-9f0e-3a6b8f1d2c02';
export const TENANT_HEADERS = { 'content-type': 'application/json', 'x-queen-tenant': TENANT };
/** Every tenant's KV read limit (a second of it is the burst); the load reads nothing, the flood only reads. */
export const FLOOD_READS_PER_SEC = 50;
/** Loops of the flooding tenant: enough to offer over its rate on a loaded 2-core machine (two offered 35 a second there). */
const FLOODERS = 4;

export interface Cell {
  base: string;
  api: Spawned;
  sweeper: Spawned;
  stop(): Promise<void>;
}

const listening = (l: LogLine) => l.msg === 'API worker listening';

/** The schema on the cluster (through HAProxy), then the API (one worker) and one sweeper on it. */
export async function startCell(cluster: HaCluster, env: Record<string, string> = {}): Promise<Cell> {
  const admin = new Client({ connectionString: cluster.url() });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${DATABASE}`);
  } finally {
    await admin.end();
  }
  await applySchema(cluster.url(DATABASE));
  const common = {
    DATABASE_URL: cluster.url(DATABASE),
    DATABASE_LISTEN_URL: cluster.url(DATABASE),
    LOG_LEVEL: 'info',
    ...UNLIMITED_RATES,
    QUEEN_TENANCY_HEADER: '1',
    QUEEN_KV_TRUSTED_PROXY: '1',
    QUEEN_ADMIN_TOKEN: 'ha-admin-token',
    QUEEN_KV_REQUIRE_GRANT: '0',
    QUEEN_KV_READS_PER_SEC: String(FLOOD_READS_PER_SEC),
    QUEEN_KV_READS_BURST: String(FLOOD_READS_PER_SEC),
    ...env,
  };
  const port = await freePort();
  const api = spawnLogged(process.execPath, [API_MAIN], { ...common, PORT: String(port), QUEEN_WORKERS: '1', DB_POOL_SIZE: '20' }, { exitOn: 'exit' });
  const sweeper = spawnLogged(process.execPath, [SWEEPER_MAIN], { ...common, QUEEN_SWEEPER_METRICS_PORT: '0', QUEEN_SWEEPER_INTERVAL_MS: '100' }, { exitOn: 'exit' });
  await Promise.all([api.waitForLine(listening, 'API worker listening'), sweeper.waitForLine((l) => l.msg === 'config: sweeper', 'config: sweeper')]);
  return {
    base: `http://127.0.0.1:${port}`,
    api,
    sweeper,
    async stop() {
      await Promise.all([api.stop(), sweeper.stop()]);
    },
  };
}

export interface Refusal {
  status: number;
  code: string | undefined;
  retryAfter: string | null;
  at: number;
  path?: string;
}

export interface Verdict {
  fault: string;
  putsAcknowledged: number;
  pushesAcknowledged: number;
  putsLost: number;
  pushesLost: number;
  pushesDoubled: number;
  /** Timers scheduled (acknowledged, 1 s ahead), and of those: never fired, fired twice, fired before their deliverAt. */
  timersAcknowledged: number;
  timersLost: number;
  timersDoubled: number;
  timersEarly: number;
  /** Once-marker bundles the consumer had answered ok (or kv_precondition exists: an earlier attempt's answer was lost). */
  bundlesAcknowledged: number;
  /** Messages of the run whose ack committed without its marker, or whose marker committed without its ack, or an acknowledged bundle with neither. */
  onceAnomalies: number;
  refusals: number;
  /** Refusals by status and code, "503 db_unavailable": n. */
  refusalCodes: Record<string, number>;
  /** Refusals that were not a 503 with Retry-After. */
  badRefusals: Refusal[];
  /** Calls with no answer within CALL_BOUND_MS, and calls the API's socket failed. */
  hangs: number;
  socketErrors: number;
  /** From the fault until the first acknowledged call that began after the last refusal. */
  servingAgainMs: number | undefined;
  /** Refusals with a code other than the database's or the KV pool's for the call's surface. */
  refusalsMisnamed: Refusal[];
  /** The node the verdict read its counts from (Patroni's primary at the time), for a run that loses writes. */
  readFrom: { node: string; port: number; inRecovery: boolean; timeline: number };
  /** The API's and the sweeper's processes are the ones started before the fault. */
  processesKept: boolean;
  /** Listeners (switches, log wake-ups, the sweeper's) that lost their LISTEN connection in the fault; each must say 'LISTEN restored' after. */
  listenersLost: string[];
  listenersNotRestored: string[];
  /** The API's and the sweeper's log lines at level error or above. */
  errorLines: LogLine[];
  flood: Flood;
}

/** The rate-limited tenant's reads: what it was admitted against what docs/limits.md allows it. */
export interface Flood {
  offered: number;
  /** Reads answered (200 or 404), and the most the limits allow over the flood's seconds. */
  admitted: number;
  bound: number;
  seconds: number;
  /** 429 rate_limited answers, and those after the cell served the load again (the limit holds on the new primary). */
  limited: number;
  limitedAfter: number;
  /** Answers that were neither admitted, nor a 429 rate_limited, nor a 503, each with Retry-After. */
  badAnswers: Refusal[];
  hangs: number;
}

/** The KV pool's refusal a call on `path` names (docs/errors.md), or undefined off that pool. */
function poolRefusalFor(path: string | undefined): string | undefined {
  if (/^\/api\/v1\/timers/.test(path ?? '')) return 'timers_unavailable';
  if (/^\/api\/v1\/(kv\/|transaction$)/.test(path ?? '')) return 'kv_unavailable';
  return undefined;
}

type Op = { kind: 'put'; key: string; value: unknown } | { kind: 'push'; txid: string; payload: unknown } | { kind: 'timer'; timerKey: string; payload: unknown };

/** Load on `cell` while `fault()` runs; resolves once `acksAfter` calls begun after the fault were acknowledged. */
export async function failoverUnderLoad(cluster: HaCluster, cell: Cell, name: string, fault: () => Promise<void>, o: { writers?: number; acksBefore?: number; acksAfter?: number; run?: string } = {}): Promise<Verdict> {
  const writers = o.writers ?? 4;
  const run = o.run ?? name;
  const puts = new Map<string, unknown>();
  const pushes = new Set<string>();
  const timers = new Map<string, string>();
  const refusals: Refusal[] = [];
  /** A refusal as the verdict counts it: its status, its code (when the body is JSON) and its Retry-After. */
  const refused = (res: Response, text: string): void => {
    let code: string | undefined;
    try {
      code = JSON.parse(text).error;
    } catch {
      code = undefined;
    }
    refusals.push({ status: res.status, code, retryAfter: res.headers.get('retry-after'), at: Date.now(), path: new URL(res.url).pathname });
  };
  const acks: { began: number; at: number }[] = [];
  let hangs = 0;
  let socketErrors = 0;
  let stopping = false;
  let faultAt = Infinity;

  const attempt = async (op: Op): Promise<boolean> => {
    // A timer's retry carries the same timerKey: the same timer, never a second one.
    const body =
      op.kind === 'put'
        ? { value: op.value, forever: true }
        : op.kind === 'push'
          ? { items: [{ queue: `ha-${run}`, payload: op.payload, transactionId: op.txid }] }
          : { queue: `ha-${run}-timers`, payload: op.payload, delaySeconds: 1, timerKey: op.timerKey };
    const path = op.kind === 'put' ? `/api/v1/kv/ha-${run}/${op.key}` : op.kind === 'push' ? '/api/v1/push' : '/api/v1/timers';
    let res: Response;
    try {
      res = await fetch(cell.base + path, { method: op.kind === 'put' ? 'PUT' : 'POST', headers: TENANT_HEADERS, body: JSON.stringify(body), signal: AbortSignal.timeout(CALL_BOUND_MS) });
    } catch (err) {
      if ((err as Error).name === 'TimeoutError') hangs++;
      else socketErrors++;
      return false;
    }
    const text = await res.text();
    if (res.status === 200 || res.status === 201) {
      const parsed = JSON.parse(text);
      if (op.kind === 'put' && parsed.applied !== true) throw new Error(`a put answered ${text}`);
      if (op.kind === 'push' && !['queued', 'duplicate'].includes(parsed[0]?.status)) throw new Error(`a push answered ${text}`);
      if (op.kind === 'timer') {
        if (typeof parsed.timerId !== 'string') throw new Error(`a schedule answered ${text}`);
        timers.set(parsed.timerId, parsed.deliverAt);
      }
      return true;
    }
    refused(res, text);
    return false;
  };

  const writer = async (w: number) => {
    for (let i = 0; !stopping; i++) {
      const op: Op =
        i % 3 === 0 ? { kind: 'put', key: `w${w}-${i}`, value: `${w}-${i}` } : i % 3 === 1 ? { kind: 'push', txid: `t-${w}-${i}`, payload: { w, i } } : { kind: 'timer', timerKey: `k-${w}-${i}`, payload: { w, i } };
      const began = Date.now();
      const giveUp = began + 60_000;
      for (;;) {
        if (await attempt(op)) break;
        if (Date.now() > giveUp) throw new Error(`writer ${w}: call ${i} not acknowledged within 60 s`);
        // The Retry-After of every refusal here is 1 s; a quarter of it keeps the window measured finely.
        await new Promise((r) => setTimeout(r, 250));
      }
      if (op.kind === 'put') puts.set(op.key, op.value);
      else if (op.kind === 'push') pushes.add(op.txid);
      acks.push({ began, at: Date.now() });
    }
  };

  const apiPid = cell.api.pid;
  const sweeperPid = cell.sweeper.pid;
  // The consumer: pop one message of the pushes' queue for its group, then the marker and the ack in
  // one bundle, the bundle retried on any refusal (or lost answer) until it answers.
  const group = 'ha-once';
  const onceNs = `ha-${run}-once`;
  const bundles = new Set<string>();
  const call = async (method: string, path: string, body?: unknown): Promise<{ status: number; body: any } | undefined> => {
    let res: Response;
    try {
      res = await fetch(cell.base + path, { method, headers: TENANT_HEADERS, body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.timeout(CALL_BOUND_MS) });
    } catch (err) {
      if ((err as Error).name === 'TimeoutError') hangs++;
      else socketErrors++;
      return undefined;
    }
    const text = await res.text();
    if (res.status === 200 || res.status === 201 || res.status === 204) return { status: res.status, body: text ? JSON.parse(text) : undefined };
    refused(res, text);
    return undefined;
  };
  const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const consumer = async () => {
    while (!stopping) {
      const popped = await call('GET', `/api/v1/pop/queue/ha-${run}?batch=1&consumerGroup=${group}&wait=false`);
      if (!popped || popped.status === 204) {
        await pause(popped ? 50 : 250);
        continue;
      }
      const m = popped.body.messages[0];
      const bundle = {
        operations: [{ type: 'ack', transactionId: m.transactionId, partitionId: m.partitionId, status: 'completed', consumerGroup: group, leaseId: m.leaseId }],
        kv: [{ op: 'putIfAbsent', ns: onceNs, key: `once:${m.transactionId}`, value: { w: 'consumer' }, ttlSeconds: 86400, required: true }],
      };
      const giveUp = Date.now() + 60_000;
      for (;;) {
        const res = await call('POST', '/api/v1/transaction', bundle);
        if (res) {
          if (res.body.ok === true || (res.body.reason === 'kv_precondition' && res.body.kvReason === 'exists')) bundles.add(m.transactionId);
          else if (res.body.reason !== 'ack_failed') throw new Error(`a bundle answered ${JSON.stringify(res.body)}`);
          // ack_failed (the lease lapsed meanwhile): nothing committed; the message comes back later.
          break;
        }
        if (Date.now() > giveUp) throw new Error('the consumer: a bundle not answered within 60 s');
        await pause(250);
      }
    }
  };

  // The flood: another tenant's KV reads, four at a time with no regard for Retry-After (a misbehaving
  // client, several times its limit), through the fault and after it.
  const flood = { offered: 0, admitted: 0, limited: [] as number[], badAnswers: [] as Refusal[], hangs: 0, began: Date.now(), ended: Date.now() };
  const flooder = async () => {
    while (!stopping) {
      flood.offered++;
      try {
        const res = await fetch(`${cell.base}/api/v1/kv/ha-${run}-flood/k`, { headers: { 'x-queen-tenant': FLOOD_TENANT }, signal: AbortSignal.timeout(CALL_BOUND_MS) });
        const text = await res.text();
        const code = res.headers.get('content-type')?.includes('json') ? JSON.parse(text).error : undefined;
        const retryAfter = res.headers.get('retry-after');
        if (res.status === 200 || res.status === 404) flood.admitted++;
        else if (res.status === 429 && code === 'rate_limited' && retryAfter) flood.limited.push(Date.now());
        else if (res.status !== 503 || !retryAfter) flood.badAnswers.push({ status: res.status, code, retryAfter, at: Date.now() });
      } catch (err) {
        if ((err as Error).name === 'TimeoutError') flood.hangs++;
        else flood.badAnswers.push({ status: 0, code: (err as Error).message, retryAfter: null, at: Date.now() });
      }
      await pause(5);
    }
    flood.ended = Date.now();
  };
  const lastLoadRefusal = () => (refusals.length > 0 ? refusals[refusals.length - 1].at : faultAt);
  let lastRefusal = faultAt;

  const running = Promise.all([...Array.from({ length: writers }, (_, w) => writer(w)), consumer(), ...Array.from({ length: FLOODERS }, flooder)]);
  let failure: unknown;
  running.catch((err) => (failure = err));
  const ok = () => {
    if (failure) throw failure;
  };
  try {
    await waitFor(() => (ok(), acks.length >= (o.acksBefore ?? 40)), { what: 'acknowledged writes before the fault', timeoutMs: 30_000 });
    faultAt = Date.now();
    await fault();
    await waitFor(() => (ok(), acks.filter((a) => a.began > faultAt && (refusals.length === 0 || a.began > refusals[refusals.length - 1].at)).length >= (o.acksAfter ?? 40)), {
      what: `acknowledged writes after the fault (${name})`,
      timeoutMs: 90_000,
      everyMs: 100,
    });
    // The flood's limit binds again on the new primary, whose buckets started empty, and the load is
    // still served after the last refusal (a late one, as the old primary rejoins, moves that mark).
    // Bounded: the verdict counts what did not happen.
    await waitFor(() => (ok(), flood.limited.some((t) => t > lastLoadRefusal()) && acks.some((a) => a.began > lastLoadRefusal())), {
      what: 'the flood refused and the load served after the last refusal',
      timeoutMs: 15_000,
      everyMs: 100,
    }).catch(() => undefined);
    // The window ends here: calls still in flight when the load stops are not part of it.
    lastRefusal = lastLoadRefusal();
  } finally {
    stopping = true;
    await running.catch(() => undefined);
  }
  ok();

  // Each LISTEN connection the fault cut is back (on the new primary, through the same address).
  const lost: { who: string; line: LogLine; lines: LogLine[] }[] = [];
  for (const [who, p] of [['api', cell.api], ['sweeper', cell.sweeper]] as const) {
    for (const line of p.lines.filter((l) => l.time >= faultAt && /LISTEN connection lost/.test(l.msg ?? ''))) lost.push({ who: `${who}:${line.listener}`, line, lines: p.lines });
  }
  const restored = (x: (typeof lost)[number]) => x.lines.some((l) => l.time >= x.line.time && l.listener === x.line.listener && l.pid === x.line.pid && /LISTEN restored/.test(l.msg ?? ''));
  await waitFor(() => lost.every(restored), { what: 'every LISTEN connection the fault cut restored', timeoutMs: 20_000 }).catch(() => undefined);

  // The verdict reads the node Patroni calls the primary, straight (not through HAProxy, which
  // may still hold a thawed old primary for a check or two), and says which node and timeline it read.
  const readNode = await cluster.untilPrimary();
  const db = new Client({ connectionString: readNode.url(DATABASE) });
  await db.connect();
  const readFrom = (
    await db.query(`SELECT inet_server_port() AS port, pg_is_in_recovery() AS "inRecovery", (SELECT timeline_id FROM pg_control_checkpoint()) AS timeline`)
  ).rows[0] as { port: number; inRecovery: boolean; timeline: number };
  let kv: { key: string; value: unknown }[];
  let logged: { transaction_id: string; n: number }[];
  let fired: { transaction_id: string; n: number; early: number }[];
  let settled: { transaction_id: string; acked: boolean; marked: boolean }[];
  try {
    // Every acknowledged timer falls due 1 s after it was scheduled: wait (bounded) until none is left.
    await waitFor(async () => (await db.query(`SELECT count(*)::int AS n FROM queen.log_timers WHERE queue = $1`, [`ha-${run}-timers`])).rows[0].n === 0, {
      what: 'every timer of the run fired',
      timeoutMs: 30_000,
      everyMs: 200,
    }).catch(() => undefined);
    fired = (
      await db.query(
        `SELECT m.transaction_id, count(*)::int AS n, count(*) FILTER (WHERE m.created_at < (t.deliver_at)::timestamptz)::int AS early
           FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
           JOIN jsonb_to_recordset($2::jsonb) AS t(id text, deliver_at text) ON m.transaction_id = 'timer:' || t.id
          WHERE q.name = $1 GROUP BY 1`,
        [`ha-${run}-timers`, JSON.stringify([...timers].map(([id, at]) => ({ id, deliver_at: at })))],
      )
    ).rows;
    kv = (await db.query(`SELECT key, value FROM queen.kv WHERE namespace = $1`, [`ha-${run}`])).rows;
    logged = (
      await db.query(
        `SELECT m.transaction_id, count(*)::int AS n FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 GROUP BY 1`,
        [`ha-${run}`],
      )
    ).rows;
    // Per message of the run: finished for the consumer's group (at or behind its cursor, or among the
    // finished seqs ahead of it), and its marker stored.
    settled = (
      await db.query(
        `SELECT m.transaction_id,
                coalesce(m.seq <= pc.cursor_seq OR m.seq = ANY (pc.done_seqs), false) AS acked,
                EXISTS (SELECT 1 FROM queen.kv k WHERE k.namespace = $3 AND k.key = 'once:' || m.transaction_id) AS marked
           FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
           LEFT JOIN queen.partition_consumers pc ON pc.partition_id = m.partition_id AND pc.consumer_group = $2
          WHERE q.name = $1`,
        [`ha-${run}`, group, onceNs],
      )
    ).rows;
  } finally {
    await db.end();
  }
  const settledBy = new Map(settled.map((r) => [r.transaction_id, r]));
  const firedBy = new Map(fired.map((r) => [r.transaction_id, r]));
  const stored = new Map(kv.map((r) => [r.key, JSON.stringify(r.value)]));
  const inLog = new Map(logged.map((r) => [r.transaction_id, r.n]));
  const floodSeconds = Math.ceil((flood.ended - flood.began) / 1000);
  const back = acks.filter((a) => a.began >= Math.max(faultAt, lastRefusal)).sort((a, b) => a.at - b.at)[0];
  const refusalCodes: Record<string, number> = {};
  for (const r of refusals) refusalCodes[`${r.status} ${r.code}`] = (refusalCodes[`${r.status} ${r.code}`] ?? 0) + 1;
  return {
    fault: name,
    readFrom: { node: readNode.name, ...readFrom },
    putsAcknowledged: puts.size,
    pushesAcknowledged: pushes.size,
    putsLost: [...puts].filter(([k, v]) => stored.get(k) !== JSON.stringify(v)).length,
    pushesLost: [...pushes].filter((t) => !inLog.has(t)).length,
    pushesDoubled: [...inLog.values()].filter((n) => n > 1).length,
    timersAcknowledged: timers.size,
    timersLost: [...timers.keys()].filter((id) => !firedBy.has(`timer:${id}`)).length,
    timersDoubled: fired.filter((r) => r.n > 1).length,
    timersEarly: fired.filter((r) => r.early > 0).length,
    bundlesAcknowledged: bundles.size,
    onceAnomalies: settled.filter((r) => r.acked !== r.marked).length + [...bundles].filter((t) => !settledBy.get(t)?.acked && !settledBy.get(t)?.marked).length,
    refusals: refusals.length,
    refusalCodes,
    badRefusals: refusals.filter((r) => r.status !== 503 || !r.retryAfter),
    // The database's state is db_unavailable; a call on the KV's dedicated pool may find its
    // acquire timeout first, named for its surface (docs/errors.md): kv_unavailable on the KV and
    // the transaction wire, timers_unavailable on the timer routes. Anything else is named here.
    refusalsMisnamed: refusals.filter((r) => r.code !== 'db_unavailable' && r.code !== poolRefusalFor(r.path)),
    hangs,
    socketErrors,
    servingAgainMs: back ? back.at - faultAt : undefined,
    listenersLost: [...new Set(lost.map((x) => x.who))],
    listenersNotRestored: [...new Set(lost.filter((x) => !restored(x)).map((x) => x.who))],
    // A worker node:cluster replaced would say 'API worker listening' a second time.
    processesKept: cell.api.child.exitCode === null && cell.sweeper.child.exitCode === null && cell.api.pid === apiPid && cell.sweeper.pid === sweeperPid && cell.api.lines.filter(listening).length === 1,
    errorLines: [...cell.api.lines, ...cell.sweeper.lines].filter((l) => l.level >= 50 && l.time >= faultAt - 60_000),
    flood: {
      offered: flood.offered,
      admitted: flood.admitted,
      // docs/limits.md: the burst and the rate over the window, the leases' excess (at most a second of
      // the rate), one more burst for the bucket a promoted standby creates full, and the fallback's
      // burst (one process) for the time the database was away.
      bound: FLOOD_READS_PER_SEC * floodSeconds + FLOOD_READS_PER_SEC + 3 * FLOOD_READS_PER_SEC,
      seconds: floodSeconds,
      limited: flood.limited.length,
      limitedAfter: flood.limited.filter((t) => t > lastRefusal).length,
      badAnswers: flood.badAnswers,
      hangs: flood.hangs,
    },
  };
}
