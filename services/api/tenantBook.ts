// What this worker knows about each tenant's grant, limits and occupancy, kept in-process so that
// no request pays a statement for it.
//
// This is NOT a value cache (values are never cached: a stale idempotency marker performs an effect twice). queen.kv_quota is configuration an
// operator writes by hand and queen.kv_usage is the sweeper's periodic measurement; both are read in
// full every QUOTA_REFRESH_MS in the background, on the message pool, and the write path only
// consults the copy. A grant or limit changed in the database is in force within one refresh.
//
// The occupancy quota is soft by construction (an exact counter would be a per-tenant row
// every write locks, in the outermost lock space). Blocking is immediate and local: the last
// measurement plus this worker's own writes since it was taken. Releasing is slow and shared: only
// a measurement taken after the block, below 90% of the limit, lifts it (hysteresis), so a tenant
// at the edge does not flap. The overshoot is bounded by the fan-out across workers and cells.
import type { Pool } from 'pg';
import type { Logger } from '../../shared/log';
import { QUOTA_READ_ALL, USAGE_READ_ALL } from '../../shared/sql/system';

/** Short, because a grant an operator just wrote should not wait long; two small reads per second per worker. */
export const QUOTA_REFRESH_MS = 1000;
/** Release below this fraction of the limit, and only on a measurement newer than the block. */
export const RELEASE_FRACTION = 0.9;
/** Bounds the delta log of a tenant the sweeper never measures; older entries merge (counting stays conservative). */
const MAX_DELTA_ENTRIES = 256;
const DELTA_COALESCE_MS = 100;

export interface Quota {
  granted: boolean;
  enabled: boolean;
  maxRows: number | null;
  maxBytes: number | null;
  maxTimers: number | null;
}

export interface Usage {
  rows: number;
  bytes: number;
  timers: number;
  computedMs: number;
}

export type Dimension = 'rows' | 'bytes' | 'timers';
export type Grant = 'ok' | 'no_row' | 'not_granted' | 'disabled' | 'not_loaded';

export interface Delta {
  rows: number;
  bytes: number;
  timers: number;
}

interface DeltaEntry extends Delta {
  at: number;
}

interface TenantState {
  entries: DeltaEntry[];
  /** Dimension -> the wall-clock instant (ms) it was blocked. */
  blocked: Map<Dimension, number>;
}

const LIMIT_OF: Record<Dimension, keyof Quota> = { rows: 'maxRows', bytes: 'maxBytes', timers: 'maxTimers' };

function num(text: string | null): number | null {
  return text === null ? null : Number(text);
}

export class TenantBook {
  private quotas = new Map<string, Quota>();
  private usage = new Map<string, Usage>();
  private readonly tenants = new Map<string, TenantState>();
  private loaded = false;
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | undefined;
  private queued: Promise<void> | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly requireGrant: boolean,
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {
    await this.refresh().catch((err) => this.log.warn({ err: String(err) }, 'quota: first read of kv_quota/kv_usage failed; retrying in the background'));
    this.timer = setInterval(() => {
      this.refresh().catch((err) => this.log.warn({ err: String(err) }, 'quota: refresh of kv_quota/kv_usage failed; keeping the last copy'));
    }, QUOTA_REFRESH_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /**
   * Reads both tables, in a read that starts after this call: a read already in flight may have
   * begun before the caller's change committed, so the caller waits for the one after it (callers
   * that arrive meanwhile share it). Tests await this instead of sleeping through a refresh period.
   */
  refresh(): Promise<void> {
    if (!this.inFlight) {
      this.inFlight = this.load().finally(() => (this.inFlight = undefined));
      return this.inFlight;
    }
    this.queued ??= this.inFlight
      .catch(() => undefined)
      .then(() => {
        this.queued = undefined;
        return this.refresh();
      });
    return this.queued;
  }

  private async load(): Promise<void> {
    const [q, u] = await Promise.all([
      this.pool.query<{ tenant: string; granted: boolean; enabled: boolean; max_rows: string | null; max_bytes: string | null; max_timers: string | null }>(QUOTA_READ_ALL),
      this.pool.query<{ tenant: string; rows: string; bytes: string; timers: string; computed_ms: number }>(USAGE_READ_ALL),
    ]);
    const quotas = new Map<string, Quota>();
    for (const r of q.rows) {
      quotas.set(r.tenant, { granted: r.granted, enabled: r.enabled, maxRows: num(r.max_rows), maxBytes: num(r.max_bytes), maxTimers: num(r.max_timers) });
    }
    const usage = new Map<string, Usage>();
    for (const r of u.rows) usage.set(r.tenant, { rows: Number(r.rows), bytes: Number(r.bytes), timers: Number(r.timers), computedMs: r.computed_ms });
    this.quotas = quotas;
    this.usage = usage;
    this.loaded = true;
    for (const [tenant, state] of this.tenants) this.settle(tenant, state);
  }

  /** After a read: forget the delta the measurement already includes, and release what it allows. */
  private settle(tenant: string, state: TenantState): void {
    const measured = this.usage.get(tenant);
    if (measured) state.entries = state.entries.filter((e) => e.at > measured.computedMs);
    const quota = this.quotas.get(tenant);
    for (const [dim, since] of state.blocked) {
      const limit = quota ? (quota[LIMIT_OF[dim]] as number | null) : null;
      if (limit === null) {
        state.blocked.delete(dim);
        continue;
      }
      if (measured && measured.computedMs > since && measured[dim] < RELEASE_FRACTION * limit) {
        state.blocked.delete(dim);
        this.log.info({ tenant, dimension: dim, measured: measured[dim], limit }, 'quota: block released by a fresh measurement');
      }
    }
    if (state.entries.length === 0 && state.blocked.size === 0) this.tenants.delete(tenant);
  }

  grant(tenant: string): Grant {
    const quota = this.quotas.get(tenant);
    if (!quota) {
      if (!this.requireGrant) return 'ok';
      return this.loaded ? 'no_row' : 'not_loaded';
    }
    if (!quota.granted) return 'not_granted';
    if (!quota.enabled) return 'disabled';
    return 'ok';
  }

  hasBytesLimit(tenant: string): boolean {
    return (this.quotas.get(tenant)?.maxBytes ?? null) !== null;
  }

  /** Whether a KV occupancy limit could refuse a write of this tenant (then only the full path may answer). */
  hasKvLimits(tenant: string): boolean {
    const quota = this.quotas.get(tenant);
    return !!quota && (quota.maxRows !== null || quota.maxBytes !== null);
  }

  /**
   * The first dimension this write would take over its limit (and which is now blocked), or null.
   * A blocked dimension stays blocked whatever the write; `dims` names those the surface answers for.
   */
  overQuota(tenant: string, add: Delta, dims: readonly Dimension[]): Dimension | null {
    const quota = this.quotas.get(tenant);
    if (!quota) return null;
    const state = this.tenants.get(tenant);
    for (const dim of dims) {
      const limit = quota[LIMIT_OF[dim]] as number | null;
      if (limit === null) continue;
      if (state?.blocked.has(dim)) return dim;
      const estimate = (this.usage.get(tenant)?.[dim] ?? 0) + this.pending(state, dim) + add[dim];
      if (estimate > limit) {
        this.stateOf(tenant).blocked.set(dim, Date.now());
        this.log.warn({ tenant, dimension: dim, estimate, limit }, 'quota: tenant blocked (writes refused until a measurement below 90%)');
        return dim;
      }
    }
    return null;
  }

  /** A committed write of this worker: counted until a measurement newer than it arrives. */
  record(tenant: string, add: Delta): void {
    if (add.rows === 0 && add.bytes === 0 && add.timers === 0) return;
    // A tenant with no limits needs no bookkeeping.
    const quota = this.quotas.get(tenant);
    if (!quota || (quota.maxRows === null && quota.maxBytes === null && quota.maxTimers === null)) return;
    const state = this.stateOf(tenant);
    const now = Date.now();
    const last = state.entries[state.entries.length - 1];
    if (last && now - last.at < DELTA_COALESCE_MS) {
      last.rows += add.rows;
      last.bytes += add.bytes;
      last.timers += add.timers;
      // Stamped with the latest write, so a measurement only drops it once it saw all of it.
      last.at = now;
      return;
    }
    state.entries.push({ at: now, ...add });
    if (state.entries.length > MAX_DELTA_ENTRIES) {
      const [a, b] = state.entries.splice(0, 2);
      state.entries.unshift({ at: b.at, rows: a.rows + b.rows, bytes: a.bytes + b.bytes, timers: a.timers + b.timers });
    }
  }

  private pending(state: TenantState | undefined, dim: Dimension): number {
    if (!state) return 0;
    let sum = 0;
    for (const e of state.entries) sum += e[dim];
    return sum;
  }

  private stateOf(tenant: string): TenantState {
    let s = this.tenants.get(tenant);
    if (!s) {
      s = { entries: [], blocked: new Map() };
      this.tenants.set(tenant, s);
    }
    return s;
  }
}
