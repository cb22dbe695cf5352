// Token buckets in the broker ("a defence that exists only in the proxy is not a defence of
// the product"). Per tenant one bucket for reads and one for writes, plus one cell ceiling over all
// KV operations, because N conforming tenants can add up to a non-conforming cell. One operation is
// one token: a batch of n operations costs n, all at once, so a call needing more than a bucket's
// burst can never be admitted and is refused as such (400 rate_limit_exceeds_burst), never with a
// 429 whose Retry-After no wait would honour.
//
// The limits are per cell, and so are the buckets: one per tenant and scope, whatever the number
// of workers and processes. This file is the bucket math; who holds the buckets is elsewhere:
//   rate/store.ts   the cell's buckets, in PostgreSQL, leased in chunks by each process's primary
//                  (with a local fallback at 1/processes when PostgreSQL cannot be reached);
//   rate/owner.ts   the primary: answers its workers' lease requests from the store;
//   rate/lease.ts   a cluster worker: spends leased tokens without awaiting anything, and asks for
//                  more only when a call needs more than its lease holds;
//   RateLimiter    below: a server started in-process (tests, tools) owns its buckets itself.
// Evaluated before the pool: a refused call never waits for a connection.
import { performance } from 'node:perf_hooks';
import type { Config } from '../../../shared/config';

/** A bucket's level `ms` after it held `level`: the one refill rule of the API's buckets (the cell's own is queen.kv_rate_lease_v1's). */
export function refilled(level: number, ms: number, ratePerSec: number, burst: number): number {
  return Math.min(burst, level + (ms / 1000) * ratePerSec);
}

export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(readonly ratePerSec: number, readonly burst: number, now = performance.now(), initial = burst) {
    this.tokens = Math.min(burst, initial);
    this.last = now;
  }

  private refill(now: number): void {
    if (now > this.last) {
      this.tokens = refilled(this.tokens, now - this.last, this.ratePerSec, this.burst);
      this.last = now;
    }
  }

  /**
   * Seconds until `n` tokens are in the bucket, if nothing else takes any meanwhile; 0 means now.
   * Only for n <= burst: a bucket never holds more than its burst, so a larger cost is never paid
   * (admission refuses it first, as its own error, rather than with a wait that never ends).
   */
  waitSeconds(n: number, now = performance.now()): number {
    this.refill(now);
    return this.tokens >= n ? 0 : (n - this.tokens) / this.ratePerSec;
  }

  take(n: number, now = performance.now()): void {
    this.refill(now);
    this.tokens -= n;
  }

  /** Tokens handed back (a lease nobody spent); never above the burst. */
  give(n: number, now = performance.now()): void {
    this.refill(now);
    this.tokens = Math.min(this.burst, this.tokens + n);
  }

  level(now = performance.now()): number {
    this.refill(now);
    return this.tokens;
  }

  isFull(now = performance.now()): boolean {
    this.refill(now);
    return this.tokens >= this.burst;
  }
}

export type RateScope = 'tenant_reads' | 'tenant_writes' | 'cell';
export const RATE_SCOPES: readonly RateScope[] = ['tenant_reads', 'tenant_writes', 'cell'];

export interface ScopeLimit {
  ratePerSec: number;
  burst: number;
}

/** The cell's limits, as configured. The ceiling's burst is one second of its rate: it is a ceiling, not an allowance. */
export function cellLimits(config: Config): Record<RateScope, ScopeLimit> {
  return {
    tenant_reads: { ratePerSec: config.kvReadsPerSec, burst: config.kvReadsBurst },
    tenant_writes: { ratePerSec: config.kvWritesPerSec, burst: config.kvWritesBurst },
    cell: { ratePerSec: config.kvCellOpsPerSec, burst: config.kvCellOpsPerSec },
  };
}

/** What a call costs in each scope it touches (a scope it does not touch is absent). */
export function callCosts(reads: number, writes: number): [RateScope, number][] {
  const costs: [RateScope, number][] = [];
  if (reads > 0) costs.push(['tenant_reads', reads]);
  if (writes > 0) costs.push(['tenant_writes', writes]);
  if (reads + writes > 0) costs.push(['cell', reads + writes]);
  return costs;
}

/** The cell bucket is one for all tenants: its key has no tenant. */
export function bucketTenant(scope: RateScope, tenant: string): string {
  return scope === 'cell' ? '' : tenant;
}

export interface RateDecision {
  /**
   * 0 when admitted; otherwise the whole seconds to put in Retry-After (at least 1): the wait
   * after which this same call is admitted, all of its tokens, if nothing else spends them first.
   */
  retryAfterSeconds: number;
  scope?: RateScope;
  /**
   * Set (with retryAfterSeconds 0) when the call needs more tokens than a bucket ever holds, so no
   * wait admits it: `tokens` the call's, `burst` that bucket's burst (the cell's).
   */
  exceedsBurst?: { tokens: number; burst: number };
  /** Set when no decision could be had in time (the primary did not answer): a 503 with Retry-After. */
  unavailable?: boolean;
}

/** The first bucket a call can never be paid from, if any. */
export function exceedsBurst(limits: Record<RateScope, ScopeLimit>, reads: number, writes: number): RateDecision | undefined {
  for (const [scope, tokens] of callCosts(reads, writes)) {
    if (tokens > limits[scope].burst) return { retryAfterSeconds: 0, scope, exceedsBurst: { tokens, burst: limits[scope].burst } };
  }
  return undefined;
}

export function wholeSeconds(wait: number): number {
  return Math.max(1, Math.ceil(wait));
}

/** What admission needs from whoever holds the buckets (RateLimiter in-process, LeaseLimiter in a worker). */
export interface Admission {
  /** The most tokens one call can ever be given, per scope. */
  bursts(): Record<RateScope, number>;
  /** Without taking anything: the whole seconds until a one-token call of this kind could pass (0: it might now). */
  minimumWait(tenant: string, kind: 'read' | 'write'): RateDecision;
  /** All-or-nothing. Synchronous whenever the tokens are at hand; a Promise only when they must be fetched. */
  admit(tenant: string, reads: number, writes: number): RateDecision | Promise<RateDecision>;
}

/** One lease request for one bucket: needs `need` tokens (0: only returning), would take up to `want`, hands back `give`. */
export interface LeaseAsk {
  scope: RateScope;
  need: number;
  want: number;
  give: number;
}

/** The answer: tokens granted, what the bucket holds after it, and the rate it refills at (the wait is (need - level) / rate). */
export interface LeaseGrant {
  granted: number;
  level: number;
  ratePerSec: number;
}

/**
 * A set of buckets that leases: the primary's fallback when the shared store is away (at `share`
 * of every rate), and the in-process limiter's own. The map is bounded by active tenants: a full
 * bucket carries no state and is forgotten on a sweep.
 */
export class CellBuckets {
  private readonly buckets = new Map<string, TokenBucket>();
  private created = 0;

  constructor(private readonly limits: Record<RateScope, ScopeLimit>, private readonly share = 1) {}

  bucket(tenant: string, scope: RateScope, create = true): TokenBucket | undefined {
    const key = `${scope}\u0000${bucketTenant(scope, tenant)}`;
    let b = this.buckets.get(key);
    if (!b && create) {
      if (++this.created % 1024 === 0) this.forgetFull();
      const { ratePerSec, burst } = this.limits[scope];
      // At a share below 1 the bucket keeps the whole burst (the largest call stays admissible) but
      // starts with only its share of it, and refills at its share of the rate.
      b = new TokenBucket(ratePerSec * this.share, burst, performance.now(), burst * this.share);
      this.buckets.set(key, b);
    }
    return b;
  }

  lease(tenant: string, ask: LeaseAsk): LeaseGrant {
    const b = this.bucket(tenant, ask.scope)!;
    const now = performance.now();
    if (ask.give > 0) b.give(ask.give, now);
    const level = b.level(now);
    const granted = ask.need > 0 && level >= ask.need ? Math.min(level, ask.want) : 0;
    if (granted > 0) b.take(granted, now);
    return { granted, level: level - granted, ratePerSec: b.ratePerSec };
  }

  private forgetFull(): void {
    const now = performance.now();
    for (const [key, b] of this.buckets) if (b.isFull(now)) this.buckets.delete(key);
  }
}

/** A server started in-process, outside a cluster: it holds the cell's buckets itself. Always synchronous. */
export class RateLimiter implements Admission {
  private readonly limits: Record<RateScope, ScopeLimit>;
  private readonly buckets: CellBuckets;

  constructor(config: Config) {
    this.limits = cellLimits(config);
    this.buckets = new CellBuckets(this.limits);
  }

  bursts(): Record<RateScope, number> {
    return { tenant_reads: this.limits.tenant_reads.burst, tenant_writes: this.limits.tenant_writes.burst, cell: this.limits.cell.burst };
  }

  minimumWait(tenant: string, kind: 'read' | 'write'): RateDecision {
    const now = performance.now();
    const scope: RateScope = kind === 'read' ? 'tenant_reads' : 'tenant_writes';
    const tenantWait = this.buckets.bucket(tenant, scope, false)?.waitSeconds(1, now) ?? 0;
    const cell = this.buckets.bucket('', 'cell')!.waitSeconds(1, now);
    const wait = Math.max(cell, tenantWait);
    if (wait <= 0) return { retryAfterSeconds: 0 };
    return { retryAfterSeconds: wholeSeconds(wait), scope: cell >= tenantWait ? 'cell' : scope };
  }

  admit(tenant: string, reads: number, writes: number): RateDecision {
    if (reads + writes === 0) return { retryAfterSeconds: 0 };
    const over = exceedsBurst(this.limits, reads, writes);
    if (over) return over;
    const now = performance.now();
    const costs = callCosts(reads, writes).map(([scope, n]) => ({ scope, n, b: this.buckets.bucket(tenant, scope)! }));
    let worst: { wait: number; scope?: RateScope } = { wait: 0 };
    for (const c of costs) {
      const wait = c.b.waitSeconds(c.n, now);
      if (wait > worst.wait) worst = { wait, scope: c.scope };
    }
    if (worst.wait > 0) return { retryAfterSeconds: wholeSeconds(worst.wait), scope: worst.scope };
    for (const c of costs) c.b.take(c.n, now);
    return { retryAfterSeconds: 0 };
  }
}
