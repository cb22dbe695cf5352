// The cell's buckets, shared by every API process of the cell through PostgreSQL
// (queen.kv_rate_bucket, UNLOGGED; sql/migrations/026_kv_rate.sql, sql/functions/kv_rate.sql). The primary of each process sends its
// workers' lease requests here; they are batched: one statement at a time per process, carrying
// every request that arrived while the previous one ran (so the statement rate follows the lease
// rate, never the request rate). A heartbeat statement runs once a second and counts the
// processes of the cell.
//
// When a statement fails (PostgreSQL unreachable, or slower than STORE_TIMEOUT_MS) the process
// falls back to local buckets at 1/(the processes it last saw) of every rate, says so in a log line
// and in queen_kv_rate_store_fallback, and keeps probing once a second; the first statement that
// works ends the fallback. Never unlimited.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import type { Pool } from 'pg';
import { createPool } from '../../../shared/db';
import type { Config } from '../../../shared/config';
import type { Logger } from '../../../shared/log';
import { RATE_LEASE } from '../../../shared/sql/rate';
import { bucketTenant, CellBuckets, cellLimits, LeaseAsk, LeaseGrant, RateScope, ScopeLimit } from './limit';
import type { RateMode } from './lease';

/** A lease statement slower than this counts as the store being unreachable. */
export const STORE_TIMEOUT_MS = 500;
export const HEARTBEAT_MS = 1000;
/** The longest a lease ask waits on the store before the process falls back (half the workers' ASK_TIMEOUT_MS). */
export const STORE_WAIT_MS = 1000;
/** At most this many bucket requests in one statement; the rest go in the next. */
const MAX_BATCH = 500;

interface Queued {
  tenant: string;
  ask: LeaseAsk;
  resolve(grant: LeaseGrant): void;
}

export class RateStore {
  readonly process = `${os.hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  private readonly limits: Record<RateScope, ScopeLimit>;
  private readonly pool: Pool;
  private queue: Queued[] = [];
  private running = false;
  private local: CellBuckets | undefined;
  private processes = 1;
  private lastStatement = 0;
  private timer: NodeJS.Timeout | undefined;
  private modeListeners: ((mode: RateMode) => void)[] = [];

  constructor(config: Config, private readonly log: Logger) {
    this.limits = cellLimits(config);
    this.pool = createPool(
      config,
      { connectionString: config.databaseUrl, max: 1, application_name: 'queen-rate', connectionTimeoutMillis: STORE_TIMEOUT_MS * 2, query_timeout: STORE_TIMEOUT_MS * 2 },
      { statement_timeout: String(STORE_TIMEOUT_MS) },
    );
    // An idle connection that breaks is reported here; the next statement finds out and falls back.
    this.pool.on('error', () => undefined);
  }

  get mode(): RateMode {
    return { fallback: this.local !== undefined, processes: this.processes };
  }

  onMode(listener: (mode: RateMode) => void): void {
    this.modeListeners.push(listener);
  }

  /** The first heartbeat (so the boot line can say how many processes share the buckets), then one a second. */
  async start(): Promise<void> {
    await this.run([]);
    this.timer = setInterval(() => {
      if (this.running || Date.now() - this.lastStatement < HEARTBEAT_MS) return;
      void this.flush(true);
    }, HEARTBEAT_MS / 2);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.pool.end().catch(() => undefined);
  }

  /**
   * Grants for one worker's requests, in their order. Asks with need 0 only hand tokens back.
   * Answered within STORE_WAIT_MS whatever the store does: an ask still unanswered then (queued
   * behind a statement that waits on a connection to a primary that is not there yet, in a
   * failover) starts the fallback and is answered from it, well inside the worker's own bound on
   * the primary (ASK_TIMEOUT_MS), so the store's trouble is a local share, not a 503.
   */
  lease(tenant: string, asks: LeaseAsk[]): Promise<LeaseGrant[]> {
    if (this.local) return Promise.resolve(this.leaseLocally(tenant, asks));
    const queued: Queued[] = [];
    const grants = Promise.all(
      asks.map(
        (ask) =>
          new Promise<LeaseGrant>((resolve) => {
            const q = { tenant, ask, resolve };
            queued.push(q);
            this.queue.push(q);
          }),
      ),
    );
    void this.flush(false);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<LeaseGrant[]>((resolve) => {
      timer = setTimeout(() => {
        // Taken out of the queue so they are not paid twice; an answer already on its way is dropped
        // (tokens the shared buckets gave and nobody spends: an under-admission, never an excess).
        this.queue = this.queue.filter((q) => !queued.includes(q));
        this.fallBack(new Error(`a lease statement was not answered within ${STORE_WAIT_MS} ms`));
        resolve(this.leaseLocally(tenant, asks));
      }, STORE_WAIT_MS);
    });
    return Promise.race([grants, late]).finally(() => clearTimeout(timer));
  }

  private leaseLocally(tenant: string, asks: LeaseAsk[]): LeaseGrant[] {
    const local = this.local!;
    return asks.map((a) => local.lease(tenant, a));
  }

  private async flush(heartbeat: boolean): Promise<void> {
    if (this.running) return;
    if (!heartbeat && this.queue.length === 0) return;
    this.running = true;
    try {
      if (heartbeat && this.queue.length === 0) await this.run([]);
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, MAX_BATCH);
        // Fallen back meanwhile: what is left is answered locally, not sent to wait out another timeout.
        const answers = this.local ? batch.map((q) => this.local!.lease(q.tenant, q.ask)) : await this.run(batch);
        batch.forEach((q, i) => q.resolve(answers[i]));
      }
    } finally {
      this.running = false;
    }
  }

  /** One statement; on failure the batch is answered from the local fallback, which it starts. */
  private async run(batch: Queued[]): Promise<LeaseGrant[]> {
    const asks = batch.map((q) => {
      const { ratePerSec, burst } = this.limits[q.ask.scope];
      return { t: bucketTenant(q.ask.scope, q.tenant), s: q.ask.scope, need: q.ask.need, want: q.ask.want, give: q.ask.give, rate: ratePerSec, burst };
    });
    try {
      const { rows } = await this.pool.query({ ...RATE_LEASE, values: [this.process, JSON.stringify(asks)] });
      this.lastStatement = Date.now();
      const answer = JSON.parse(rows[0].r) as { grants: { i: number; granted: number; level: number }[]; processes: number };
      const grants: LeaseGrant[] = [];
      for (const g of answer.grants) grants[g.i] = { granted: g.granted, level: g.level, ratePerSec: this.limits[batch[g.i].ask.scope].ratePerSec };
      const processes = Math.max(1, answer.processes);
      const changed = this.local !== undefined || processes !== this.processes;
      if (this.local) {
        this.log.info({ processes }, 'rate limits: the shared buckets in PostgreSQL are back; this process no longer enforces a local share');
        this.local = undefined;
      }
      this.processes = processes;
      if (changed) this.announce();
      return grants;
    } catch (err) {
      this.lastStatement = Date.now();
      this.fallBack(err as Error);
      return batch.map((q) => this.local!.lease(q.tenant, q.ask));
    }
  }

  /** Starts the local fallback (once; the next statement that works ends it). */
  private fallBack(err: Error): void {
    if (this.local) return;
    this.local = new CellBuckets(this.limits, 1 / this.processes);
    this.log.warn(
      { err: { message: err.message }, processes: this.processes, share: 1 / this.processes },
      `rate limits: the shared buckets in PostgreSQL are unreachable; this process enforces 1/${this.processes} of every limit (the processes it last saw) until they are back`,
    );
    this.announce();
  }

  private announce(): void {
    for (const l of this.modeListeners) l(this.mode);
  }
}
