// The admission of every KV and timer-schedule call, in one place, so each route applies it with
// one call and every route refuses in the same order. A refused call is told the outermost reason
// (the one the caller can act on):
//
//   1. the operator's kill switch     503 + Retry-After on a route, 403 inside /api/v1/transaction
//   2. the tenant's grant             403 feature_gated (no row under grant mode, or granted=false),
//                                     403 kv_disabled_for_tenant / timers_disabled_for_tenant (enabled=false)
//   3. the tenant's occupancy quota   403 kv_quota_exceeded / timers_quota_exceeded, writes only
//   4. the token buckets              429 rate_limited + Retry-After (per tenant, and the cell ceiling;
//                                     one bucket each per cell, see rate/limit.ts): the wait until this
//                                     call's tokens are all there; a call needing more than a burst
//                                     holds is 400 rate_limit_exceeds_burst instead
//   5. the dedicated pool             503 kv_unavailable + Retry-After: an acquire that waits past
//                                     QUEEN_KV_ACQUIRE_TIMEOUT_MS; and, once the pool is saturated
//                                     (it has timed someone out lately and its queue is as deep as
//                                     the pool), standalone KV writes are shed at once while the
//                                     wire's KV writes (on the message pool) carry on.
//
// Before all of it, preflight() answers from the raw request the calls a switch or a bucket
// certainly refuses, so a flood costs the HTTP parse and little else (a batch, whose cost is in
// its body, only when a switch refuses it).
//
// Nothing here runs a statement: the switches are an in-process object, grants and usage come from
// TenantBook's background copy, the buckets are arithmetic on tokens leased ahead (rate/lease.ts): a
// call awaits its primary only when its worker's lease is short, never a statement.
//
// How a route uses it:
//   KV route:        call = guards.preflight(req, res, route) (null: answered); tenant = guards.kvTenant(call);
//                    (parse the body); admitted = await guards.admitKv(call, ops); admitted.track(query on the KV pool)
//                    The switch, the tenant and the grant are each looked up once, in preflight.
//   the wire:        admitted = await guards.admitWire(req, { kv, timers }); admitted.track(the bundle)
//   timer schedule:  tenant = guards.timersCaller(req); the body; admitted = await guards.admitTimers(tenant, { schedules: 1 }); admitted.track(the statement)
//   timer reschedule tenant = guards.timersCaller(req); the body; admitted = await guards.admitTimers(tenant, { reschedules: 1 }); admitted.track(the statement)
//   cancel, peek, list: no guard at all (never blocked by a switch or a gate), tenantOf(config, req) only.
// What a call costs is counted in admission/callCost.ts; what an admitted call holds until its statement
// returns is admission/admitted.ts.
import cluster from 'node:cluster';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { Pool } from 'pg';
import type { Config } from '../../../shared/config';
import { ADMISSION_REFUSAL_CODES, ApiError, coerceError } from '../../../shared/errors';
import type { Logger } from '../../../shared/log';
import type { ApiMetrics } from '../../../shared/metrics';
import { Admitted } from './admitted';
import { KvCost, kvCost, timerCounts } from './callCost';
import { sendError } from '../edge/answer';
import { tenantOf } from '../edge/tenant';
import { Admission, RateDecision, RateLimiter } from '../rate/limit';
import { LeaseLimiter } from '../rate/lease';
import type { Switches } from '../switches/switches';
import { Delta, Grant, NO_HOLD, TenantBook } from './tenantBook';

export type Where = 'route' | 'wire';

/**
 * A KV route call past the switch: its tenant and grant as preflight found them, carried to the rest
 * of the admission so neither is looked up twice; or the refusal of its tenant header, thrown where
 * the call's own path (with its request line) reaches it.
 */
export type KvCall = { readonly tenant: string; readonly grant: Grant } | { readonly refusal: unknown };

/** How long a paused surface asks a client to stay away; a pause is an incident measured in minutes. */
export const PAUSED_RETRY_AFTER_SECONDS = 30;
/**
 * Standalone KV writes are shed when the pool is saturated: an acquire has already timed out within
 * max(1 s, 2 x QUEEN_KV_ACQUIRE_TIMEOUT_MS) (rung 2 is active: sustained pressure, not a burst) and at least this many
 * requests per pool connection are still waiting. A burst of fifty concurrent writes against an
 * idle cell queues briefly and is served; a database slowed down sheds the writes first.
 */
export const SHED_WAITING_PER_CONNECTION = 1;

/** A burst said as it is, without float noise. */
function formatTokens(n: number): string {
  return Number.isInteger(n) ? String(n) : n.toFixed(2).replace(/0+$/, '');
}

export interface GuardDeps {
  config: Config;
  kvPool: Pool;
  switches: Switches;
  book: TenantBook;
  metrics: ApiMetrics;
  log: Logger;
}

export class Guards {
  readonly limiter: Admission;
  private readonly shedAt: number;
  private readonly shedWindowMs: number;
  private lastAcquireTimeoutAt = -Infinity;

  constructor(private readonly deps: GuardDeps) {
    // A cluster worker leases from its primary (which shares the cell's buckets through PostgreSQL);
    // a server started in-process holds the buckets itself.
    deps.metrics.rateStoreFallback.set(0);
    deps.metrics.rateProcesses.set(1);
    this.limiter =
      cluster.isWorker && process.send
        ? new LeaseLimiter(
            deps.config,
            (mode) => {
              deps.metrics.rateStoreFallback.set(mode.fallback ? 1 : 0);
              deps.metrics.rateProcesses.set(mode.processes);
            },
            () => deps.metrics.rateLeaseAsks.inc(),
          )
        : new RateLimiter(deps.config);
    const poolMax = (deps.kvPool as unknown as { options: { max: number } }).options.max;
    this.shedAt = Math.max(1, poolMax * SHED_WAITING_PER_CONNECTION);
    this.shedWindowMs = Math.max(1000, 2 * deps.config.kvAcquireTimeoutMs);
    // Every refusal series exists from boot, so an alert on any of them can be written before the first one.
    for (const code of ADMISSION_REFUSAL_CODES) deps.metrics.kvRefusals.inc({ code }, 0);
  }

  /** The pool is past a burst: it has turned someone away lately and its queue is still as deep as the pool. */
  private saturated(): boolean {
    return this.deps.kvPool.waitingCount >= this.shedAt && performance.now() - this.lastAcquireTimeoutAt < this.shedWindowMs;
  }

  /**
   * The flood's cheap exit: a KV route call that is certainly refused by rung 1 or (a path route,
   * one token) rung 4 is answered here from the raw request (routes/kv.ts calls it once it knows the route), with no
   * body read, no request log line and no error handler. Under a flood of ten times the limits nearly every call ends here, and the CPU it
   * does not spend is the message path's. It only ever answers what the full path (kvTenant, admitKv) would answer:
   * whenever an inner rung could apply (no valid tenant, no grant, a quota on the tenant) it steps
   * aside and the full path decides. It never takes a token.
   */
  preflight(req: IncomingMessage, res: ServerResponse, call: 'batch' | 'get' | 'put' | 'delete'): KvCall | null {
    const { config, switches, book, metrics } = this.deps;
    const kind = call === 'batch' ? 'batch' : call === 'get' ? 'read' : 'write';
    if (!switches.kv) {
      return this.answerEarly(res, 'kv_disabled', 'KV is paused by the operator (POST /api/v1/system/kv-timers); stored keys are untouched.', PAUSED_RETRY_AFTER_SECONDS);
    }
    let tenant: string;
    try {
      tenant = tenantOf(config, req);
    } catch (refusal) {
      return { refusal };
    }
    const grant = book.grant(tenant);
    const full = { tenant, grant };
    if (grant !== 'ok' || (kind !== 'read' && book.hasKvLimits(tenant))) return full;
    // A batch's cost is in its body: only the full path, having counted its operations, can say how
    // long until all of them pass (answering the wait for one token sent a batch of 32 back too soon).
    if (kind === 'batch') return full;
    // A path route is one operation: one token, so this wait is the call's own.
    const decision = this.limiter.minimumWait(tenant, kind);
    if (decision.retryAfterSeconds === 0) return full;
    metrics.kvOps.inc({ op: call, outcome: 'refused' });
    return this.answerEarly(res, 'rate_limited', this.rateMessage(tenant, decision), decision.retryAfterSeconds);
  }

  private answerEarly(res: ServerResponse, code: string, message: string, retryAfterSeconds: number): null {
    const refusal = new ApiError(code, message, { retryAfterSeconds });
    this.deps.metrics.kvRefusals.inc({ code });
    // No request line for these (the flood's cheap exit), but the answer is counted like any other.
    this.deps.metrics.httpResponses.inc({ surface: 'kv', status: String(refusal.status), code });
    sendError(res, refusal);
    return null;
  }


  /** A KV call's tenant, or the refusal of its tenant header (before its body is parsed: a stranger's body is not read). */
  kvTenant(call: KvCall): string {
    if ('refusal' in call) throw call.refusal;
    return call.tenant;
  }

  /**
   * The rest of a KV route call's admission, once its operations are parsed: grant, quota, rate and
   * the pool. Throws the refusal; a Promise only when the worker had to ask its primary for tokens.
   */
  admitKv(call: KvCall, ops: unknown): Admitted | Promise<Admitted> {
    const { config, book } = this.deps;
    if ('refusal' in call) throw call.refusal;
    const { tenant, grant } = call;
    const cost = kvCost(ops, config.kvMaxBatch, book.hasBytesLimit(tenant));
    this.refuseGrant(tenant, grant, 'kv');
    this.checkKvQuota(tenant, cost);
    const rated = this.checkRate(tenant, cost.reads, cost.writes);
    return rated ? rated.then(() => this.admitOnKvPool(tenant, cost)) : this.admitOnKvPool(tenant, cost);
  }

  private admitOnKvPool(tenant: string, cost: KvCost): Admitted {
    if (cost.writes > 0 && this.saturated()) {
      this.refuse(
        new ApiError(
          'kv_unavailable',
          'The KV connection pool is saturated, so standalone KV writes are shed; KV writes inside /api/v1/transaction continue. Retry shortly.',
          { retryAfterSeconds: 1 },
        ),
      );
    }
    return this.admission(tenant, true, cost.delta);
  }

  /**
   * A timer route's schedule or reschedule, once its body's shape is checked (a malformed call takes
   * no token). Cancel, peek and list must not call this: nothing may block them. Throws the refusal;
   * a Promise only when the worker had to ask its primary for tokens.
   */
  /** The first step of a timer schedule or reschedule, before its body is read: the switch, then the caller. */
  timersCaller(req: IncomingMessage): string {
    this.refuseIf(!this.deps.switches.timersSchedule, 'timers_schedule_disabled', 'New timers are paused by the operator; pending timers still fire and cancels still work.', 'route');
    return tenantOf(this.deps.config, req);
  }

  /** The rest of a timer call's admission, once its body is checked (so a malformed call takes no token): grant, quota, rate. */
  admitTimers(tenant: string, call: { schedules: number } | { reschedules: number }): Admitted | Promise<Admitted> {
    const schedules = 'schedules' in call ? call.schedules : 0;
    const reschedules = 'reschedules' in call ? call.reschedules : 0;
    this.checkGrant(tenant, 'timers');
    this.checkTimersQuota(tenant, schedules);
    // A schedule is a write of state: it is paid from the tenant's write bucket like a KV write.
    const rated = this.checkRate(tenant, 0, schedules + reschedules);
    // The timer routes run on the KV pool (routes/timers.ts), so their acquire timeouts count as its saturation.
    const admit = () => this.admission(tenant, true, { rows: 0, bytes: 0, timers: schedules });
    return rated ? rated.then(admit) : admit();
  }

  /**
   * POST /api/v1/transaction: the `kv` and `timers` arrays of one bundle, admitted together before
   * the bundle starts. A bundle of only pushes and acks, or only timer cancels, passes untouched.
   * A paused switch is a permanent 403 here, never 503: a client retrying a bundle would spin on
   * the hot path with messages in its hands.
   */
  admitWire(req: IncomingMessage, bundle: { kv: unknown[]; timers: unknown[] }): Admitted | Promise<Admitted> {
    const { config, switches, book } = this.deps;
    const { schedules, reschedules } = timerCounts(bundle.timers);
    const hasKv = bundle.kv.length > 0;
    const hasSchedules = schedules + reschedules > 0;
    if (!hasKv && !hasSchedules) return new Admitted(tenantOf(config, req), NO_HOLD, () => undefined);
    this.refuseIf(hasKv && !switches.kv, 'kv_disabled', 'KV is paused by the operator; a bundle carrying a kv array is refused until it is resumed.', 'wire');
    this.refuseIf(hasSchedules && !switches.timersSchedule, 'timers_schedule_disabled', 'New timers are paused by the operator; a bundle scheduling timers is refused until it is resumed.', 'wire');
    const tenant = tenantOf(config, req);
    const cost = kvCost(bundle.kv, config.kvMaxBatch, book.hasBytesLimit(tenant));
    if (hasKv) this.checkGrant(tenant, 'kv');
    if (hasSchedules) this.checkGrant(tenant, 'timers');
    this.checkKvQuota(tenant, cost);
    this.checkTimersQuota(tenant, schedules);
    const rated = this.checkRate(tenant, cost.reads, cost.writes + schedules + reschedules);
    // The bundle runs on the message pool: its acquire timeouts say nothing of the KV pool's saturation.
    const admit = () => this.admission(tenant, false, { ...cost.delta, timers: schedules });
    return rated ? rated.then(admit) : admit();
  }

  /** An admitted call's occupancy delta, held from now (see Admitted). */
  private admission(tenant: string, onKvPool: boolean, delta: Delta): Admitted {
    return new Admitted(tenant, this.deps.book.hold(tenant, delta), onKvPool ? this.failedOnKvPool : this.failedElsewhere);
  }

  // A statement that failed: a pool acquire timeout is counted as a refusal and, on the KV pool, as
  // its saturation. Made once, not per call: the hot path allocates no closure for it.
  private readonly failedOnKvPool = (err: unknown): void => this.failed(err, true);
  private readonly failedElsewhere = (err: unknown): void => this.failed(err, false);

  private failed(err: unknown, onKvPool: boolean): void {
    const coerced = coerceError(err);
    if (coerced instanceof ApiError && (coerced.code === 'kv_unavailable' || coerced.code === 'timers_unavailable')) {
      this.deps.metrics.kvRefusals.inc({ code: coerced.code });
      if (onKvPool) this.lastAcquireTimeoutAt = performance.now();
    }
  }

  private refuse(err: ApiError): never {
    this.deps.metrics.kvRefusals.inc({ code: err.code });
    throw err;
  }

  private refuseIf(paused: boolean, code: string, message: string, where: Where): void {
    if (!paused) return;
    this.refuse(
      where === 'route'
        ? new ApiError(code, message, { retryAfterSeconds: PAUSED_RETRY_AFTER_SECONDS })
        : new ApiError(code, message, { inTransaction: true }),
    );
  }

  private checkGrant(tenant: string, surface: 'kv' | 'timers'): void {
    this.refuseGrant(tenant, this.deps.book.grant(tenant), surface);
  }

  private refuseGrant(tenant: string, grant: Grant, surface: 'kv' | 'timers'): void {
    switch (grant) {
      case 'ok':
        return;
      case 'no_row':
        return this.refuse(new ApiError('feature_gated', `This cell requires a grant and tenant ${tenant} has no row in queen.kv_quota.`));
      case 'not_granted':
        return this.refuse(new ApiError('feature_gated', `Tenant ${tenant} is not granted KV and timers (queen.kv_quota.granted is false).`));
      case 'disabled':
        return this.refuse(
          new ApiError(
            `${surface}_disabled_for_tenant`,
            `Tenant ${tenant} is granted ${surface === 'kv' ? 'KV' : 'timers'} but an operator has disabled it for this tenant (queen.kv_quota.enabled is false).`,
          ),
        );
      case 'not_loaded':
        return this.refuse(new ApiError('kv_unavailable', 'The grants have not been read from the database yet; retry shortly.', { retryAfterSeconds: 1 }));
    }
  }

  private checkKvQuota(tenant: string, cost: KvCost): void {
    if (cost.delta.rows === 0) return;
    const dim = this.deps.book.overQuota(tenant, cost.delta, ['rows', 'bytes']);
    if (dim) {
      this.refuse(
        new ApiError(
          'kv_quota_exceeded',
          `Tenant ${tenant} is over its KV ${dim === 'rows' ? 'max_rows' : 'max_bytes'}; reads and deletes still work, and writes resume once a measurement shows it below 90% of the limit.`,
        ),
      );
    }
  }

  private checkTimersQuota(tenant: string, schedules: number): void {
    if (schedules === 0) return;
    if (this.deps.book.overQuota(tenant, { rows: 0, bytes: 0, timers: schedules }, ['timers'])) {
      this.refuse(
        new ApiError(
          'timers_quota_exceeded',
          `Tenant ${tenant} is over its max_timers; cancels still work, and schedules resume once a measurement shows it below 90% of the limit.`,
        ),
      );
    }
  }

  /** Throws the refusal; a Promise only when the worker had to ask its primary for tokens. */
  private checkRate(tenant: string, reads: number, writes: number): void | Promise<void> {
    const decision = this.limiter.admit(tenant, reads, writes);
    if (decision instanceof Promise) return decision.then((d) => this.rateVerdict(tenant, d));
    this.rateVerdict(tenant, decision);
  }

  private rateVerdict(tenant: string, decision: RateDecision): void {
    if (decision.unavailable) {
      this.refuse(new ApiError('kv_unavailable', 'The rate limiter did not get an answer from its primary in time; retry shortly.', { retryAfterSeconds: decision.retryAfterSeconds }));
    }
    if (decision.exceedsBurst) {
      const { tokens, burst } = decision.exceedsBurst;
      const [unit, bucket, variable] =
        decision.scope === 'tenant_reads'
          ? ['read', `tenant ${tenant}'s read bucket`, 'QUEEN_KV_READS_BURST']
          : decision.scope === 'tenant_writes'
            ? ['write', `tenant ${tenant}'s write bucket`, 'QUEEN_KV_WRITES_BURST']
            : ['KV', "this cell's KV ceiling", 'QUEEN_KV_CELL_OPS_PER_SEC'];
      this.refuse(
        new ApiError(
          'rate_limit_exceeds_burst',
          `This call needs ${tokens} ${unit} tokens at once (one per operation) and ${bucket} never holds more than ${formatTokens(burst)} (${variable}), one bucket for the whole cell. ` +
            `No wait admits it: split it into calls of at most ${Math.floor(burst)} ${unit} operations.`,
        ),
      );
    }
    if (decision.retryAfterSeconds > 0) {
      this.refuse(new ApiError('rate_limited', this.rateMessage(tenant, decision), { retryAfterSeconds: decision.retryAfterSeconds }));
    }
  }

  private rateMessage(tenant: string, decision: RateDecision): string {
    const what = decision.scope === 'cell' ? "this cell's KV ceiling" : `tenant ${tenant}'s ${decision.scope === 'tenant_reads' ? 'read' : 'write'} rate`;
    return `Over ${what}; retry after ${decision.retryAfterSeconds}s.`;
  }
}
