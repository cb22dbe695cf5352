// The sweeper's statements, one function each. The rules are in SQL (sql/031): a pass claims,
// fires, prunes and marks in one transaction; here we only send it and read its answer.
import type { Pool } from 'pg';
import { KV_USAGE_ROLLUP, LOG_GAUGES, SWEEPER_GAUGES, SWEEPER_PASS } from '../../shared/sql/sweeper';

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
  claimedAtUs: number;
  finishedAtUs: number;
  /** On the pass that ends a cycle (no shard claimed): ms until the cell's next future timer; null when none. */
  nextDueInMs: number | null;
}

export interface PassArgs {
  since: string | null;
  worker: string;
  shardsPerPass: number;
  fireBatch: number;
  pruneBatch: number;
  prune: boolean;
}

export async function runPass(pool: Pool, a: PassArgs): Promise<PassResult> {
  const { rows } = await pool.query({
    ...SWEEPER_PASS,
    values: [a.since, a.worker, a.shardsPerPass, a.fireBatch, a.pruneBatch, a.prune],
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
    claimedAtUs: Number(p.claimedAtUs ?? 0),
    finishedAtUs: Number(p.finishedAtUs ?? 0),
    nextDueInMs: typeof p.nextDueInMs === 'number' ? p.nextDueInMs : null,
  };
}

export interface Gauges {
  timersDue: number;
  timersOldestLateSeconds: number;
  kvExpiredNotPruned: number;
  kvExpiryLagSeconds: number;
}

export async function readGauges(pool: Pool): Promise<Gauges> {
  const { rows } = await pool.query(SWEEPER_GAUGES);
  return rows[0].gauges as Gauges;
}

export interface LogGauges {
  backlog: number;
  maxGroupBacklog: number;
  oldestUnconsumedSeconds: number;
  deadLetters: number;
}

export async function readLogGauges(pool: Pool): Promise<LogGauges> {
  const { rows } = await pool.query(LOG_GAUGES);
  return rows[0].gauges as LogGauges;
}

/** Overwrites queen.kv_usage per tenant; answers how many tenants were written. */
export async function rollupUsage(pool: Pool): Promise<number> {
  const { rows } = await pool.query(KV_USAGE_ROLLUP);
  return Number(rows[0].tenants);
}
