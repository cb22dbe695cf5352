// Token buckets in the broker ("a defence that exists only in the proxy is not a defence of
// the product"). Per tenant one bucket for reads and one for writes, plus one cell ceiling over all
// KV operations, because N conforming tenants can add up to a non-conforming cell. One operation is
// one token: a batch of n operations costs n, all at once, so a call needing more than a bucket's
// burst can never be admitted and is refused as such (400 rate_limit_exceeds_burst), never with a
// 429 whose Retry-After no wait would honour.
//
// The limits are per cell. Each of the N cluster workers enforces 1/N of every rate and burst; the
// kernel spreads connections evenly enough across workers that the cell total holds, and the boot
// line says so. Evaluated before the pool: a refused call never waits for a connection.
import { performance } from 'node:perf_hooks';
import type { Config } from '../../shared/config';

export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(readonly ratePerSec: number, readonly burst: number, now = performance.now()) {
    this.tokens = burst;
    this.last = now;
  }

  private refill(now: number): void {
    if (now > this.last) {
      this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.ratePerSec);
      this.last = now;
    }
  }

  /**
   * Seconds until `n` tokens are in the bucket, if nothing else takes any meanwhile; 0 means now.
   * Only for n <= burst: a bucket never holds more than its burst, so a larger cost is never paid
   * (RateLimiter.admit refuses it first, as its own error, rather than with a wait that never ends).
   */
  waitSeconds(n: number, now = performance.now()): number {
    this.refill(now);
    return this.tokens >= n ? 0 : (n - this.tokens) / this.ratePerSec;
  }

  take(n: number, now = performance.now()): void {
    this.refill(now);
    this.tokens -= n;
  }

  isFull(now = performance.now()): boolean {
    this.refill(now);
    return this.tokens >= this.burst;
  }
}

export type RateScope = 'tenant_reads' | 'tenant_writes' | 'cell';

export interface RateDecision {
  /**
   * 0 when admitted; otherwise the whole seconds to put in Retry-After (at least 1): the wait
   * after which this same call is admitted, all of its tokens, if nothing else spends them first.
   */
  retryAfterSeconds: number;
  scope?: RateScope;
  /**
   * Set (with retryAfterSeconds 0) when the call needs more tokens than a bucket ever holds, so no
   * wait admits it: `tokens` the call's, `burst` this worker's share of that bucket's burst.
   */
  exceedsBurst?: { tokens: number; burst: number };
}

interface TenantBuckets {
  reads: TokenBucket;
  writes: TokenBucket;
}

/** The per-worker share of a per-cell limit; never below one token. */
export function workerShare(perCell: number, workers: number): number {
  return Math.max(1, perCell / workers);
}

export class RateLimiter {
  private readonly tenants = new Map<string, TenantBuckets>();
  private readonly cell: TokenBucket;
  private readonly share: {
    readsPerSec: number;
    readsBurst: number;
    writesPerSec: number;
    writesBurst: number;
    cellOpsPerSec: number;
  };
  private sweeps = 0;

  constructor(config: Config) {
    const w = config.workers;
    this.share = {
      readsPerSec: workerShare(config.kvReadsPerSec, w),
      readsBurst: workerShare(config.kvReadsBurst, w),
      writesPerSec: workerShare(config.kvWritesPerSec, w),
      writesBurst: workerShare(config.kvWritesBurst, w),
      cellOpsPerSec: workerShare(config.kvCellOpsPerSec, w),
    };
    // The ceiling's burst is one second of its rate: it is a ceiling, not an allowance.
    this.cell = new TokenBucket(this.share.cellOpsPerSec, this.share.cellOpsPerSec);
  }

  private bucketsOf(tenant: string): TenantBuckets {
    let b = this.tenants.get(tenant);
    if (!b) {
      if (++this.sweeps % 1024 === 0) this.forgetIdle();
      b = {
        reads: new TokenBucket(this.share.readsPerSec, this.share.readsBurst),
        writes: new TokenBucket(this.share.writesPerSec, this.share.writesBurst),
      };
      this.tenants.set(tenant, b);
    }
    return b;
  }

  /** A full bucket carries no state worth keeping: forgetting it bounds the map by active tenants. */
  private forgetIdle(): void {
    const now = performance.now();
    for (const [tenant, b] of this.tenants) if (b.reads.isFull(now) && b.writes.isFull(now)) this.tenants.delete(tenant);
  }

  /** This worker's share of each burst: the most tokens one call can ever be given. */
  bursts(): Record<RateScope, number> {
    return { tenant_reads: this.share.readsBurst, tenant_writes: this.share.writesBurst, cell: this.cell.burst };
  }

  /**
   * Whole seconds until a one-token call of a kind could pass (0: it might pass now), without
   * taking anything: a read needs one read token, a write one write token, both one token of the
   * cell. Only for calls whose cost is known to be one token (the path routes).
   */
  minimumWait(tenant: string, kind: 'read' | 'write'): RateDecision {
    const now = performance.now();
    const b = this.tenants.get(tenant);
    const cell = this.cell.waitSeconds(1, now);
    const tenantWait = b ? (kind === 'read' ? b.reads : b.writes).waitSeconds(1, now) : 0;
    const wait = Math.max(cell, tenantWait);
    if (wait <= 0) return { retryAfterSeconds: 0 };
    const scope = cell >= tenantWait ? 'cell' : kind === 'read' ? 'tenant_reads' : 'tenant_writes';
    return { retryAfterSeconds: Math.max(1, Math.ceil(wait)), scope };
  }

  /**
   * All-or-nothing: either every bucket involved pays, or none does and the caller is told how long
   * until all of them can (the longest of their waits, rounded up), or that none ever can.
   */
  admit(tenant: string, reads: number, writes: number): RateDecision {
    if (reads + writes === 0) return { retryAfterSeconds: 0 };
    const bursts = this.bursts();
    const costs: [number, RateScope][] = [
      [reads, 'tenant_reads'],
      [writes, 'tenant_writes'],
      [reads + writes, 'cell'],
    ];
    for (const [tokens, scope] of costs) {
      if (tokens > bursts[scope]) return { retryAfterSeconds: 0, scope, exceedsBurst: { tokens, burst: bursts[scope] } };
    }
    const now = performance.now();
    const b = this.bucketsOf(tenant);
    const waits: [number, RateScope][] = [
      [reads > 0 ? b.reads.waitSeconds(reads, now) : 0, 'tenant_reads'],
      [writes > 0 ? b.writes.waitSeconds(writes, now) : 0, 'tenant_writes'],
      [this.cell.waitSeconds(reads + writes, now), 'cell'],
    ];
    const worst = waits.reduce((a, c) => (c[0] > a[0] ? c : a));
    if (worst[0] > 0) return { retryAfterSeconds: Math.max(1, Math.ceil(worst[0])), scope: worst[1] };
    if (reads > 0) b.reads.take(reads, now);
    if (writes > 0) b.writes.take(writes, now);
    this.cell.take(reads + writes, now);
    return { retryAfterSeconds: 0 };
  }
}
