// The sweeper's statements, one function each. The rules are in SQL (sql/functions/sweeper.sql, kv_usage.sql): a pass claims,
// fires, prunes and marks in one transaction; here we only send it and read its answer.
import type { Pool } from 'pg';
import { KV_USAGE_ROLLUP, LOG_GAUGES, LOG_RETENTION_GAUGES, SWEEPER_GAUGES, SWEEPER_PASS, SWEEPER_REPORT } from '../../shared/sql/sweeper';

export interface PassResult {
  /** The cycle's start on the server's clock; passed back to every later pass of the cycle. */
  since: string;
  shards: number[];
  fireEnabled: boolean;
  fired: number;
  duplicates: number;
  maxLateSeconds: number;
  fireFull: boolean;
  pruned: number;
  pruneFull: boolean;
  fireSeconds: number;
  pruneSeconds: number;
  /** Messages the log's retention removed in the claimed shards; of them, some group had not finished; their payload bytes. */
  removed: number;
  removedUnfinished: number;
  removedBytes: number;
  /** The retention's batch ran out in a shard with more to remove (a backlog: go again at once). */
  retainFull: boolean;
  retainQueues: RetainedQueue[];
  /** Consumer-group rows the retention found stale and removed, and partitions it removed empty. */
  removedGroups: number;
  removedPartitions: number;
  /** Partitions every group of their queue had finished, now passed over by pops (sql/functions/log_consume.sql). */
  settledPartitions: number;
  retainSeconds: number;
  claimedAtUs: number;
  finishedAtUs: number;
  /** On the pass that ends a cycle (no shard claimed): ms until the cell's next future timer; null when none. */
  nextDueInMs: number | null;
  /** Asked for (PassArgs.links > 0): the fired timers that carry a schedule's trace context, and up to `links` distinct contexts. */
  traced: number;
  links: FireLink[];
}

/** A fired timer's trace context: the W3C ids of the request span that scheduled it. */
export interface FireLink {
  traceId: string;
  spanId: string;
}

export interface RetainedQueue {
  tenant: string;
  queue: string;
  removed: number;
  unfinished: number;
  bytes: number;
}

export interface PassArgs {
  since: string | null;
  worker: string;
  shardsPerPass: number;
  fireBatch: number;
  pruneBatch: number;
  prune: boolean;
  /** The cell's default log retention in seconds (QUEEN_LOG_RETENTION_SECONDS); 0: none. */
  retentionSeconds: number;
  /** Trace contexts of fired timers to answer (tracing on: the span's links); 0 or absent: none. */
  links?: number;
}

export async function runPass(pool: Pool, a: PassArgs): Promise<PassResult> {
  const { rows } = await pool.query({
    ...SWEEPER_PASS,
    values: [a.since, a.worker, a.shardsPerPass, a.fireBatch, a.pruneBatch, a.prune, a.retentionSeconds, a.links ?? 0],
  });
  const p = rows[0].pass;
  return {
    since: p.since,
    shards: p.shards,
    fireEnabled: p.fireEnabled,
    fired: p.fired ?? 0,
    duplicates: p.duplicates ?? 0,
    maxLateSeconds: p.maxLateSeconds ?? 0,
    fireFull: p.fireFull ?? false,
    pruned: p.pruned ?? 0,
    pruneFull: p.pruneFull ?? false,
    fireSeconds: p.fireSeconds ?? 0,
    pruneSeconds: p.pruneSeconds ?? 0,
    removed: p.removed ?? 0,
    removedUnfinished: p.removedUnfinished ?? 0,
    removedBytes: Number(p.removedBytes ?? 0),
    retainFull: p.retainFull ?? false,
    retainQueues: (p.retainQueues ?? []).map((q: RetainedQueue) => ({ ...q, bytes: Number(q.bytes) })),
    removedGroups: p.removedGroups ?? 0,
    removedPartitions: p.removedPartitions ?? 0,
    settledPartitions: p.settledPartitions ?? 0,
    retainSeconds: p.retainSeconds ?? 0,
    claimedAtUs: Number(p.claimedAtUs ?? 0),
    finishedAtUs: Number(p.finishedAtUs ?? 0),
    nextDueInMs: typeof p.nextDueInMs === 'number' ? p.nextDueInMs : null,
    traced: p.traced ?? 0,
    links: p.links ?? [],
  };
}

export interface Gauges {
  timersDue: number;
  timersOldestLateSeconds: number;
  kvExpiredNotPruned: number;
  kvExpiryLagSeconds: number;
}

/** One gauge statement's answer: a single row whose `gauges` column is the JSON object. */
async function gaugesOf<T>(pool: Pool, statement: { name: string; text: string }): Promise<T> {
  const { rows } = await pool.query(statement);
  return rows[0].gauges as T;
}

export const readGauges = (pool: Pool): Promise<Gauges> => gaugesOf<Gauges>(pool, SWEEPER_GAUGES);

/** What a sweeper reports of its shedding for the console (queen.sweeper_report_v1); null when it stops. */
export interface ShedState {
  /** The shedding ladder's rung: 0 calm, 1 pruning suspended, 2 pruning and the usage rollup suspended. */
  rung: number;
  suspended: string[];
  batch: number;
  baseBatch: number;
  sleepMs: number;
  baseSleepMs: number;
}

export async function report(pool: Pool, worker: string, state: ShedState | null, sampleSeconds: number): Promise<void> {
  await pool.query({ ...SWEEPER_REPORT, values: [worker, state === null ? null : JSON.stringify(state), sampleSeconds] });
}

export interface LogGauges {
  backlog: number;
  maxGroupBacklog: number;
  oldestUnconsumedSeconds: number;
  deadLetters: number;
}

export const readLogGauges = (pool: Pool): Promise<LogGauges> => gaugesOf<LogGauges>(pool, LOG_GAUGES);

/** What one call of the incremental usage rollup did (queen.kv_usage_rollup_v2). */
export interface UsageSlice {
  /** Another sweeper's call held the cell's rollup lock: nothing was done. */
  busy: boolean;
  /** A slice was due and counted. */
  counted: boolean;
  /** Slices in all (queen.kv's and queen.log_timers'). */
  slices: number;
  /** Slices not counted since their layout was built; nothing is published while any remain. */
  uncounted: number;
  published: boolean;
  /** queen.kv_usage rows written. */
  tenants: number;
}

/** Counts one slice of the usage rollup and publishes the sum into queen.kv_usage. */
export async function rollupUsageSlice(pool: Pool, pages: number, intervalMs: number): Promise<UsageSlice> {
  const { rows } = await pool.query({ ...KV_USAGE_ROLLUP, values: [pages, intervalMs] });
  const r = rows[0].slice;
  return {
    busy: r.busy === true,
    counted: r.counted === true,
    slices: Number(r.slices ?? 0),
    uncounted: Number(r.uncounted ?? 0),
    published: r.published === true,
    tenants: Number(r.tenants ?? 0),
  };
}

export interface LogRetentionGauges {
  oldestMessageSeconds: number;
  /** Bytes on disk (with indexes and TOAST) per log table. */
  tables: Record<string, number>;
}

export const readLogRetentionGauges = (pool: Pool): Promise<LogRetentionGauges> => gaugesOf<LogRetentionGauges>(pool, LOG_RETENTION_GAUGES);
