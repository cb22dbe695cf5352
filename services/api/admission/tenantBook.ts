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
// measurement plus this worker's own writes it has not seen. Releasing is slow and shared: only
// a measurement taken after the block, below 90% of the limit, lifts it (hysteresis), so a tenant
// at the edge does not flap. The overshoot is bounded by the fan-out across workers and cells.
//
// How the local delta and the measurement combine, so that no write is counted twice:
// - A write is held (counted, unstamped) from its admission until its call returns; then, if it
//   committed, it is stamped with this worker's clock *after* the commit was acknowledged.
// - The rollup (queen.kv_usage_rollup_v2, sql/functions/kv_usage.sql) counts the tables in slices, each in its own
//   transaction, and stamps computed_at with the start of the oldest of them, each never later than
//   the snapshot its count comes from. So a commit acknowledged before computed_at is in the counts.
// - Each read of kv_usage also reads the database's clock, which places computed_at on this
//   worker's clock from below (the read was sent before the database's clock was read): the
//   measurement's `seenBefore`. A write stamped before it is in the measurement and is retired;
//   a write stamped after it is kept, and retired by the first measurement that does see it.
// The one write that can be counted twice is one whose commit and acknowledgement straddle the
// measurement's instant (a clock cannot order those): at most the writes this worker had in
// flight at that instant, and only until the next measurement. Nothing is ever retired early.
import { performance } from 'node:perf_hooks';
import type { Pool } from 'pg';
import type { Logger } from '../../../shared/log';
import { MOVES_READ_ALL, QUOTA_READ_ALL, USAGE_READ_ALL } from '../../../shared/sql/system';

/** Short, because a grant an operator just wrote should not wait long; two small reads per second per worker. */
export const QUOTA_REFRESH_MS = 1000;
/** Release below this fraction of the limit, and only on a measurement newer than the block. */
export const RELEASE_FRACTION = 0.9;
/**
 * Bounds the stamped writes kept per tenant (a tenant the sweeper measures rarely, or a worker
 * writing faster than this per measurement). Past it, two neighbours merge (see `stamp`).
 */
export const MAX_DELTA_ENTRIES = 256;

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
  /** computed_at, on the database's clock (epoch ms). */
  computedMs: number;
  /**
   * This worker's clock (performance.now()) at or before computed_at: a commit acknowledged
   * before it is in this measurement.
   */
  seenBefore: number;
}

export type Dimension = 'rows' | 'bytes' | 'timers';
/** A tenant's part in a move between cells (queen.tenant_moves): every data call of it is refused while it has one. */
export type MoveRole = 'source' | 'target' | 'moved';
export type Grant = 'ok' | 'no_row' | 'not_granted' | 'disabled' | 'not_loaded';

export interface Delta {
  rows: number;
  bytes: number;
  timers: number;
}

interface DeltaEntry extends Delta {
  /** performance.now() once the commit was acknowledged (for a merged entry, its latest write's). */
  at: number;
}

interface TenantState {
  /** Committed writes no measurement has seen yet, oldest first. */
  entries: DeltaEntry[];
  /** Admitted writes whose call has not returned: counted, never retired. */
  held: Delta;
  /** Dimension -> performance.now() when it was blocked. */
  blocked: Map<Dimension, number>;
}

/** An admitted write, counted from admission; settle() once its call has returned. */
export interface Hold {
  /** committed: stamp it now; not: forget it (the statement failed, nothing was written). */
  settle(committed: boolean): void;
}

/** A hold with nothing to count: a zero delta, a tenant with no limits, a bundle of only pushes, acks and cancels. */
export const NO_HOLD: Hold = { settle: () => undefined };
const LIMIT_OF: Record<Dimension, keyof Quota> = { rows: 'maxRows', bytes: 'maxBytes', timers: 'maxTimers' };
const DIMENSIONS: readonly Dimension[] = ['rows', 'bytes', 'timers'];

/**
 * How fast the database's clock and this worker's may drift apart, at most: 1 ms a second, twice
 * the fastest slew NTP applies (500 ppm). Zero when both run on one host.
 */
export const CLOCK_DRIFT = 0.001;
const CLOCK_SAMPLES = 16;

/**
 * Places an instant of the database's clock on this worker's (performance.now()), never later than
 * it was. Each read of kv_usage is a sample: sent here at `sentAt`, it read the database's clock at
 * `dbMs` no earlier, so (database - here) was at most dbMs - sentAt at that moment, and differs at
 * another moment by at most CLOCK_DRIFT of the time between. The tightest bound among the recent
 * samples wins: one read is often queued behind other work (measured here under a write stream:
 * 0.2 to 22 ms between sending and the database's clock), the quickest of sixteen rarely is.
 * Assumes the database's clock does not step (NTP slews it).
 */
class ClockBridge {
  private readonly samples: { dbMs: number; offset: number }[] = [];

  sample(sentAt: number, dbMs: number): void {
    this.samples.push({ dbMs, offset: dbMs - sentAt });
    if (this.samples.length > CLOCK_SAMPLES) this.samples.shift();
  }

  /** A moment on this worker's clock at or before the database's `dbMs`; -Infinity before any sample. */
  before(dbMs: number): number {
    let offset = Infinity;
    for (const s of this.samples) offset = Math.min(offset, s.offset + CLOCK_DRIFT * Math.abs(s.dbMs - dbMs));
    return dbMs - offset;
  }
}

function num(text: string | null): number | null {
  return text === null ? null : Number(text);
}

export class TenantBook {
  private quotas = new Map<string, Quota>();
  private usage = new Map<string, Usage>();
  private moves = new Map<string, MoveRole>();
  private readonly tenants = new Map<string, TenantState>();
  private readonly clock = new ClockBridge();
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
    // Taken before the read is sent, so at or before the instant the database reads its clock (read_ms).
    const sentAt = performance.now();
    const [q, u, m] = await Promise.all([
      this.pool.query<{ tenant: string; granted: boolean; enabled: boolean; max_rows: string | null; max_bytes: string | null; max_timers: string | null }>(QUOTA_READ_ALL),
      this.pool.query<{ tenant: string; rows: string; bytes: string; timers: string; computed_ms: number; read_ms: number }>(USAGE_READ_ALL),
      this.pool.query<{ tenant: string; role: MoveRole }>(MOVES_READ_ALL),
    ]);
    const moves = new Map<string, MoveRole>();
    for (const r of m.rows) moves.set(r.tenant, r.role);
    const quotas = new Map<string, Quota>();
    for (const r of q.rows) {
      quotas.set(r.tenant, { granted: r.granted, enabled: r.enabled, maxRows: num(r.max_rows), maxBytes: num(r.max_bytes), maxTimers: num(r.max_timers) });
    }
    if (u.rows.length > 0) this.clock.sample(sentAt, u.rows[0].read_ms);
    const usage = new Map<string, Usage>();
    for (const r of u.rows) {
      usage.set(r.tenant, {
        rows: Number(r.rows),
        bytes: Number(r.bytes),
        timers: Number(r.timers),
        computedMs: r.computed_ms,
        seenBefore: this.clock.before(r.computed_ms),
      });
    }
    this.quotas = quotas;
    this.usage = usage;
    this.moves = moves;
    this.loaded = true;
    for (const [tenant, state] of this.tenants) this.settle(tenant, state);
  }

  /** After a read: retire the writes the measurement includes, and release what it allows. */
  private settle(tenant: string, state: TenantState): void {
    const measured = this.usage.get(tenant);
    if (measured) {
      // Oldest first, so the retired writes are a prefix.
      let seen = 0;
      while (seen < state.entries.length && state.entries[seen].at < measured.seenBefore) seen++;
      if (seen > 0) state.entries.splice(0, seen);
    }
    const quota = this.quotas.get(tenant);
    for (const [dim, since] of state.blocked) {
      const limit = quota ? (quota[LIMIT_OF[dim]] as number | null) : null;
      if (limit === null) {
        state.blocked.delete(dim);
        continue;
      }
      if (measured && measured.seenBefore > since && measured[dim] < RELEASE_FRACTION * limit) {
        state.blocked.delete(dim);
        this.log.info({ tenant, dimension: dim, measured: measured[dim], limit }, 'quota: block released by a fresh measurement');
      }
    }
    this.forgetIfIdle(tenant, state);
  }

  /**
   * The tenant's part in a move between cells, or undefined (served as usual). Read where a data call's
   * tenant is first known (app.ts), and again by a long-poll pop before each look. A move waits out
   * QUOTA_REFRESH_MS and the transactions begun before it (services/move/move.ts). This copy is the
   * quick refusal, before a body is read; it can be stale, so the SQL a call reaches refuses the
   * tenant again in the call's own transaction (queen.tenant_moving_v1).
   */
  moveRole(tenant: string): MoveRole | undefined {
    return this.moves.size === 0 ? undefined : this.moves.get(tenant);
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
   * The estimate: the last measurement, plus this worker's committed writes it has not seen, plus
   * the writes admitted here and still running.
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
        this.stateOf(tenant).blocked.set(dim, performance.now());
        this.log.warn({ tenant, dimension: dim, estimate, limit }, 'quota: tenant blocked (writes refused until a measurement below 90%)');
        return dim;
      }
    }
    return null;
  }

  /**
   * Counts an admitted write from now, before it runs: concurrent calls of this worker then see
   * each other, and a block lands on the write that would cross the limit rather than up to the
   * number of calls in flight later. Call it right after overQuota, with no await in between.
   */
  hold(tenant: string, add: Delta): Hold {
    if (add.rows === 0 && add.bytes === 0 && add.timers === 0) return NO_HOLD;
    // A tenant with no limits needs no bookkeeping.
    const quota = this.quotas.get(tenant);
    if (!quota || (quota.maxRows === null && quota.maxBytes === null && quota.maxTimers === null)) return NO_HOLD;
    const state = this.stateOf(tenant);
    for (const dim of DIMENSIONS) state.held[dim] += add[dim];
    let settled = false;
    return {
      settle: (committed: boolean) => {
        if (settled) return;
        settled = true;
        for (const dim of DIMENSIONS) state.held[dim] -= add[dim];
        if (committed) this.stamp(state, add);
        // The state stays in the map while anything is held (forgetIfIdle), so it is still the tenant's.
        this.forgetIfIdle(tenant, state);
      },
    };
  }

  /** A committed write, stamped after its acknowledgement: counted until a measurement that saw it. */
  private stamp(state: TenantState, add: Delta): void {
    state.entries.push({ at: performance.now(), ...add });
    if (state.entries.length <= MAX_DELTA_ENTRIES) return;
    // The bound forces a merge. Merge the two neighbours closest in time, under the later stamp:
    // conservative (the pair is retired only by a measurement that saw both, so the earlier one may
    // be counted twice until then, never dropped early), and the stamps stay spread evenly over the
    // time since the last measurement, so at most about 1/MAX_DELTA_ENTRIES of that time's writes
    // are counted twice, and only until the next measurement. Never a stamp that keeps moving: the
    // merged stamp is one write's, and later writes never join it.
    const e = state.entries;
    let best = 0;
    for (let i = 1; i < e.length - 1; i++) if (e[i + 1].at - e[i].at < e[best + 1].at - e[best].at) best = i;
    const [a, b] = [e[best], e[best + 1]];
    e.splice(best, 2, { at: b.at, rows: a.rows + b.rows, bytes: a.bytes + b.bytes, timers: a.timers + b.timers });
  }

  private pending(state: TenantState | undefined, dim: Dimension): number {
    if (!state) return 0;
    let sum = state.held[dim];
    for (const e of state.entries) sum += e[dim];
    return sum;
  }

  private forgetIfIdle(tenant: string, state: TenantState): void {
    const holding = state.held.rows !== 0 || state.held.bytes !== 0 || state.held.timers !== 0;
    if (state.entries.length === 0 && state.blocked.size === 0 && !holding) this.tenants.delete(tenant);
  }

  private stateOf(tenant: string): TenantState {
    let s = this.tenants.get(tenant);
    if (!s) {
      s = { entries: [], held: { rows: 0, bytes: 0, timers: 0 }, blocked: new Map() };
      this.tenants.set(tenant, s);
    }
    return s;
  }
}
