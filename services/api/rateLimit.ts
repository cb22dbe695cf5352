// Token buckets in the broker ("a defence that exists only in the proxy is not a defence of
// the product"). Per tenant one bucket for reads and one for writes, plus one cell ceiling over all
// KV operations, because N conforming tenants can add up to a non-conforming cell. One operation is
// one token: a batch of n operations costs n.
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
   * Seconds until `n` tokens could be taken; 0 means now. A cost above the burst could never be
   * paid in one go, so it is admitted when the bucket is full and leaves the bucket in debt: the
   * long-run rate holds, and a full batch of QUEEN_KV_MAX_BATCH is not refused forever.
   */
  waitSeconds(n: number, now = performance.now()): number {
    this.refill(now);
    const need = Math.min(n, this.burst);
    return this.tokens >= need ? 0 : (need - this.tokens) / this.ratePerSec;
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

export interface RateDecision {
  /** 0 when admitted; otherwise the whole seconds to put in Retry-After (at least 1). */
  retryAfterSeconds: number;
  scope?: 'tenant_reads' | 'tenant_writes' | 'cell';
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

  /**
   * Whole seconds until the cheapest call of a kind could pass (0: it might pass now), without
   * taking anything: a read needs one read token, a write one write token, a batch of unknown
   * content one token of either kind; all of them one token of the cell.
   */
  minimumWait(tenant: string, kind: 'read' | 'write' | 'batch'): RateDecision {
    const now = performance.now();
    const b = this.tenants.get(tenant);
    const cell = this.cell.waitSeconds(1, now);
    const reads = b ? b.reads.waitSeconds(1, now) : 0;
    const writes = b ? b.writes.waitSeconds(1, now) : 0;
    const tenantWait = kind === 'read' ? reads : kind === 'write' ? writes : Math.min(reads, writes);
    const wait = Math.max(cell, tenantWait);
    if (wait <= 0) return { retryAfterSeconds: 0 };
    const scope = cell >= tenantWait ? 'cell' : kind === 'read' || (kind === 'batch' && reads <= writes) ? 'tenant_reads' : 'tenant_writes';
    return { retryAfterSeconds: Math.max(1, Math.ceil(wait)), scope };
  }

  /** All-or-nothing: either every bucket involved pays, or none does and the caller is told how long to wait. */
  admit(tenant: string, reads: number, writes: number): RateDecision {
    if (reads + writes === 0) return { retryAfterSeconds: 0 };
    const now = performance.now();
    const b = this.bucketsOf(tenant);
    const waits: [number, RateDecision['scope']][] = [
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
