// The sweeper loop. Leaderless: any number run at once and meet only in PostgreSQL. A cycle is a
// series of passes, each one transaction that fires the cell's oldest due timers (a batch, FOR UPDATE
// SKIP LOCKED, so sweepers take disjoint batches) and, on pruning's cadence, claims up to
// `shardsPerPass` shards not yet swept in this cycle (least recently swept first, FOR UPDATE SKIP
// LOCKED), prunes their expired keys and marks them swept. The cycle ends when no shard is left to
// claim (this sweeper swept it, or another did or holds it now) and the fire batch was not full. Then
// the usage rollup's slices owed since the last run are started beside the loop (its own connection;
// the next passes do not wait for them), and the gauges likewise, on theirs; then sleep, unless a pass hit its batch ceiling (a
// backlog: go again at once) or an operator's switch flip is announced on queen_system_state.
//
// Test signals: `cycleDone()` resolves after the next complete cycle, `nextGauges()` after the next
// gauge reading, and the 'pass' and 'cycle' events carry what was done, so in-process tests await
// work instead of sleeping.
import { EventEmitter } from 'node:events';
import os from 'node:os';
import crypto from 'node:crypto';
import type { Pool } from 'pg';
import { ApiError, coerceError } from '../../shared/errors';
import { CHANNEL, Listener } from '../../shared/listener';
import type { Logger } from '../../shared/log';
import type { SweeperMetrics } from '../../shared/metrics';
import { PassResult, readGauges, readLogGauges, readLogRetentionGauges, report, rollupUsageSlice, runPass, ShedState } from './phases';
import { DEFAULT_SLOW_PASS_MS, Pressure } from './pressure';
import { activeTracer, FIRE_LINKS, inSpan, recordFireSpan } from '../../shared/tracing';

/** Shards per claim transaction: 8 of 64 lets up to eight sweepers work at once (by analogy, not measured). */
export const DEFAULT_SHARDS_PER_PASS = 8;
/** Fire-only passes (no shard to prune) a cycle runs at most before its gauges and rollup. */
export const FIRE_PASSES_PER_CYCLE = 8;
/** The gauges' queries scan indexes across all shards; once a second is fresh enough for an alert. */
const GAUGE_INTERVAL_MS = 1000;
/**
 * The message log's gauges (backlog, oldest unfinished message, dead letters) pass over every
 * (partition, group) row, so they are read on a slower cadence: Prometheus's scrape interval in
 * deploy/prometheus (15 s), faster than which no reading would be seen.
 */
export const LOG_GAUGE_INTERVAL_MS = 15_000;
/**
 * The shortest sleep when a timer is about to fall due: a timer due sooner than the interval fires
 * on time (within this) instead of an interval late, without spinning on the database: at most
 * 100 passes a second while timers keep falling due. bench:timers at 1,000 timers a second
 * (2026-12-01, same machine, alternating runs): p50 fire lag 20-22 ms with 25 here, 11 with 10.
 */
export const MIN_SLEEP_MS = 10;
/**
 * Heap pages a usage rollup slice counts (sql/functions/kv_usage.sql): one statement each, bounded whatever the size of
 * the cell. Measured with bench:scale (docs/operations.md, "The usage rollup").
 */
export const DEFAULT_USAGE_SLICE_PAGES = 4096;
/** The cell's default log retention when the caller names none (shared/config.ts has the reason). */
export const DEFAULT_LOG_RETENTION_SECONDS = 7 * 24 * 3600;
/**
 * The sweeper writes its shedding state for the console's overview (queen.sweeper_report_v1) when it
 * changes and at least this often (so a silent row means a sweeper gone), and the same call samples
 * the log's counters for the overview's throughput at most this often cell-wide.
 */
export const REPORT_INTERVAL_MS = 10_000;
/** After a failed pass (database down, restarting), wait before trying again. */
const FAULT_BACKOFF_MS = 1000;

export interface SweeperOptions {
  pool: Pool;
  /** Connection string for the LISTEN client; omit to rely on the fresh read per cycle alone. */
  databaseUrl?: string;
  log: Logger;
  metrics: SweeperMetrics;
  intervalMs: number;
  /** Expired rows pruned per claimed shard per pass. */
  batch: number;
  /** Due timers fired per pass, cell-wide; the prune batch when omitted. */
  fireBatch?: number;
  /** A full refresh of the usage measurement takes about this long: slices are spread over it. */
  usageIntervalMs: number;
  /** Heap pages a usage slice counts when the layout is built; DEFAULT_USAGE_SLICE_PAGES unless a test asks. */
  usageSlicePages?: number;
  /** How often the log's gauges are read; LOG_GAUGE_INTERVAL_MS unless a test asks for every cycle (0). */
  logGaugesIntervalMs?: number;
  shardsPerPass?: number;
  /**
   * The log's retention for queues configured without one, in seconds (QUEEN_LOG_RETENTION_SECONDS);
   * 0 keeps them forever. Applied in the shards each pass claims, on pruning's cadence.
   */
  retentionSeconds?: number;
  slowPassMs?: number;
  id?: string;
}

export interface CycleReport {
  cycle: number;
  passes: PassResult[];
  fired: number;
  pruned: number;
  /** Messages the log's retention removed in this cycle. */
  removed: number;
  fireEnabled: boolean | undefined;
  usageTenants: number | undefined;
  /** Milliseconds until the cell's next future timer, from the pass that ended the cycle; null when none. */
  nextDueInMs: number | null;
  batch: number;
  sleepMs: number;
  suspended: { prune: boolean; usage: boolean };
  durationMs: number;
}

export class Sweeper extends EventEmitter {
  readonly id: string;
  readonly pressure: Pressure;
  private readonly shardsPerPass: number;
  private readonly retentionSeconds: number;
  private stopping = false;
  private loop: Promise<void> | undefined;
  private wakeSleep: (() => void) | undefined;
  /** A wake that came while a cycle ran: the next sleep is skipped, so no flip is lost. */
  private wakePending = false;
  /**
   * The fire batch shrinks and grows with the pressure's batch, in proportion. It is larger than the
   * prune batch by default because one fire pass is one transaction whatever its size, and the
   * per-pass cost dominated: 20,000 due timers drained at 9,425/s with 500 a pass and 23,753/s with
   * 2,000 (bench:timers, same machine and load, 2026-12-01).
   */
  private fireBatch(): number {
    const base = this.o.fireBatch ?? this.o.batch;
    return Math.max(1, Math.round((base * this.pressure.batch) / this.pressure.baseBatch));
  }

  /** Wakes the loop on a switch flip; absent without a databaseUrl (the fresh read per cycle alone). */
  private readonly listener: Listener | undefined;
  private cycles = 0;
  /** Cycles failed in a row with the database unavailable (0 while it answers). */
  private outageCycles = 0;
  private inCycle = false;
  private lastUsageAt = 0;
  /** Slices in the cell's layout, from the last answer: a slice is owed every usageIntervalMs / this. */
  private usageSlices = 1;
  /** The usage rollup in flight, on its own connection; firing does not wait for it. */
  private usageRun: Promise<void> | undefined;
  /** Tenants written by a rollup that finished since the last cycle report. */
  private usageFinished: number | undefined;
  private lastGaugesAt = 0;
  private lastLogGaugesAt = 0;
  /** The gauge reading in flight, on its own connection; firing does not wait for it either. */
  private gaugesRun: Promise<void> | undefined;
  private lastReportAt = -Infinity;
  /** The shedding state last written (JSON), so a change is written at the next gauge reading. */
  private reported = '';
  /** Gauge readings started and finished so far (nextGauges counts on them). */
  private gaugesStarted = 0;
  private gaugesFinished = 0;
  private lastPruneAt = -Infinity;
  private pruneBacklog = false;

  constructor(private readonly o: SweeperOptions) {
    super();
    this.id = o.id ?? `${os.hostname()}:${process.pid}:${crypto.randomBytes(3).toString('hex')}`;
    this.shardsPerPass = o.shardsPerPass ?? DEFAULT_SHARDS_PER_PASS;
    this.retentionSeconds = o.retentionSeconds ?? DEFAULT_LOG_RETENTION_SECONDS;
    o.metrics.logRetentionDefault.set(this.retentionSeconds);
    this.pressure = new Pressure(o.batch, o.intervalMs, o.slowPassMs ?? DEFAULT_SLOW_PASS_MS);
    this.publishPressure();
    if (o.databaseUrl) {
      this.listener = new Listener({
        connectionString: o.databaseUrl,
        applicationName: 'queen-sweeper-listen',
        channels: [CHANNEL.systemState],
        name: 'sweeper',
        log: o.log,
        onNotification: () => this.wake(),
        // LISTEN for switch flips, so turning timersFire back on drains at once rather than after a
        // sleep. Back after a loss, a flip may have been missed: cycle now.
        onListening: (afterLoss) => {
          if (afterLoss) this.wake();
        },
      });
    }
  }

  start(): this {
    this.loop ??= this.run();
    return this;
  }

  /** Stops claiming; the pass in flight finishes and commits; resolves when the loop has ended. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.wakeSleep?.();
    await this.loop;
    await this.usageRun;
    await this.gaugesRun;
    // Its report goes with it: a stopped sweeper sheds nothing (one that dies leaves a row that falls silent).
    if (this.reported !== '') {
      await report(this.o.pool, this.id, null, REPORT_INTERVAL_MS / 1000).catch((err: unknown) => {
        this.o.log.warn({ err: { message: (err as Error).message } }, 'sweeper: its report row could not be removed; it falls silent');
      });
    }
    await this.listener?.close();
  }

  /**
   * Resolves once a gauge reading that starts after this call has been published: what a test
   * that wrote something reads next on the gauges, since the cycles no longer wait for them.
   */
  nextGauges(): Promise<void> {
    const want = this.gaugesStarted + 1;
    return new Promise((resolve) => {
      const check = () => {
        if (this.gaugesFinished < want) return;
        this.off('gauges', check);
        resolve();
      };
      this.on('gauges', check);
    });
  }

  /** Resolves when no usage rollup is in flight (a test that wants the measurement a cycle started). */
  async usageSettled(): Promise<void> {
    while (this.usageRun) await this.usageRun;
  }

  /** Ends the sleep now (a switch flip, a test that has just scheduled work). */
  wake(): void {
    // A flip announced mid-cycle may have come after the pass read the switch: one cycle more.
    if (this.wakeSleep) this.wakeSleep();
    else if (this.inCycle) this.wakePending = true;
  }

  /** True while a cycle runs; false while asleep. A test that wrote something awaits a cycle that starts later. */
  get busy(): boolean {
    return this.inCycle;
  }

  /** Resolves with the report of the next cycle that completes. */
  cycleDone(): Promise<CycleReport> {
    return new Promise((resolve) => this.once('cycle', resolve));
  }

  private async run(): Promise<void> {
    await this.listener?.start();
    while (!this.stopping) {
      let sleepMs = this.pressure.sleepMs;
      this.inCycle = true;
      try {
        const report = await inSpan('sweeper cycle', () => this.cycle(), (r) => ({ 'queen.fired': r.fired, 'queen.pruned': r.pruned, 'queen.removed': r.removed, 'queen.passes': r.passes.length }));
        const backlog = report.passes.some((p) => p.fireFull || p.pruneFull || p.retainFull);
        const nextDue = report.nextDueInMs;
        sleepMs = backlog
          ? 0
          : nextDue === null
            ? this.pressure.sleepMs
            : Math.min(this.pressure.sleepMs, Math.max(MIN_SLEEP_MS, Math.ceil(nextDue)));
        report.sleepMs = sleepMs;
        if (this.outageCycles > 0) {
          this.o.log.info({ failedCycles: this.outageCycles }, 'sweeper: the database is back; cycling again');
          this.outageCycles = 0;
        }
        this.emit('cycle', report);
      } catch (err) {
        // A background fault is reported, never allowed to end the process: the next cycle retries.
        // The database unreachable, restarting or read-only (a failover: the primary gone, a demoted
        // one behind the address) is the cell's state, not a bug: one warning per outage, and a line
        // when it is back. Every other failure is an error, each time. Before: a Patroni failover
        // logged "sweeper cycle failed" at error once a second for its 10 s.
        const e = { message: (err as Error).message, code: (err as { code?: string }).code };
        const coerced = coerceError(err);
        if (coerced instanceof ApiError && coerced.code === 'db_unavailable') {
          if (this.outageCycles++ === 0) this.o.log.warn({ err: e, retryInMs: FAULT_BACKOFF_MS }, 'sweeper: the database is unavailable; retrying');
        } else {
          this.o.log.error({ err: e }, 'sweeper cycle failed');
        }
        this.emit('fault', err);
        sleepMs = Math.max(sleepMs, FAULT_BACKOFF_MS);
      }
      this.inCycle = false;
      if (!this.stopping) await this.sleep(sleepMs);
    }
  }

  private async cycle(): Promise<CycleReport> {
    const { metrics } = this.o;
    const started = performance.now();
    const passes: PassResult[] = [];
    let since: string | null = null;
    let fireEnabled: boolean | undefined;
    let nextDueInMs: number | null = null;
    let slowest = 0;
    let firePasses = 0;
    // Pruning keeps the interval's cadence: a cycle woken early for a timer falling due fires only,
    // unless the last prune left a backlog (its batch ceiling was hit).
    const pruneNow =
      !this.pressure.suspended('prune') && (this.pruneBacklog || started - this.lastPruneAt >= this.o.intervalMs);
    if (pruneNow) {
      this.lastPruneAt = started;
      this.pruneBacklog = false;
    }
    // Each pass is one statement, so one transaction: stopping between passes is the "finish the
    // batch, commit" of SIGTERM.
    // Tracing on: each pass asks for its fired timers' trace contexts, and one that fired is a span
    // linked to them (shared/tracing.ts). Off: nothing asked, no OpenTelemetry call.
    const tracer = activeTracer();
    while (!this.stopping) {
      const t0 = performance.now();
      const startMs = tracer ? Date.now() : 0;
      const pass = await runPass(this.o.pool, {
        since,
        worker: this.id,
        shardsPerPass: this.shardsPerPass,
        fireBatch: this.fireBatch(),
        pruneBatch: this.pressure.batch,
        prune: pruneNow,
        retentionSeconds: this.retentionSeconds,
        links: tracer ? FIRE_LINKS : 0,
      });
      const ms = performance.now() - t0;
      if (tracer && pass.fired > 0) {
        recordFireSpan(tracer, { startMs, endMs: Date.now(), fired: pass.fired, duplicates: pass.duplicates, traced: pass.traced, links: pass.links });
      }
      since = pass.since;
      fireEnabled = pass.fireEnabled;
      // Firing is cell-wide (the oldest due timers, whatever their shard); shards are claimed only
      // for pruning. The cycle ends on a pass that claimed no shard and did not fill its fire batch,
      // or after FIRE_PASSES_PER_CYCLE such passes that did (a backlog: the gauges and the rollup
      // still get their turn, then the next cycle starts at once).
      const claimed = pass.shards.length > 0;
      if (!claimed) firePasses++;
      const last = !claimed && (!pass.fireFull || firePasses >= FIRE_PASSES_PER_CYCLE);
      if (last) nextDueInMs = pass.nextDueInMs;
      if (claimed || pass.fired > 0) {
        slowest = Math.max(slowest, ms);
        passes.push(pass);
        if (pass.pruneFull || pass.retainFull) this.pruneBacklog = true;
        if (pass.fired > 0) metrics.timersFired.inc(pass.fired);
        if (pass.pruned > 0) metrics.kvPruned.inc(pass.pruned);
        if (pass.removed > 0) {
          metrics.logRetentionRemovedUnfinished.inc(pass.removedUnfinished);
          for (const q of pass.retainQueues) {
            metrics.logRetentionRemoved.inc({ tenant: q.tenant, queue: q.queue }, q.removed);
            metrics.logRetentionRemovedBytes.inc({ tenant: q.tenant, queue: q.queue }, q.bytes);
          }
        }
        if (pass.removedGroups > 0) metrics.logRetentionRemovedGroups.inc(pass.removedGroups);
        if (pass.removedPartitions > 0) metrics.logRetentionRemovedPartitions.inc(pass.removedPartitions);
        if (pass.settledPartitions > 0) metrics.logSettledPartitions.inc(pass.settledPartitions);
        if (claimed) metrics.sweeperCycleSeconds.observe({ phase: 'retain' }, pass.retainSeconds);
        metrics.sweeperCycleSeconds.observe({ phase: 'fire' }, pass.fireSeconds);
        metrics.sweeperCycleSeconds.observe({ phase: 'prune' }, pass.pruneSeconds);
        this.emit('pass', pass);
      }
      if (last) break;
    }
    if (fireEnabled !== undefined) metrics.switchState.set({ switch: 'timersFire' }, fireEnabled ? 1 : 0);

    // The usage rollup counts one bounded slice of the tables per statement (sql/functions/kv_usage.sql), and a full
    // refresh, every slice once, is spread over QUEEN_SWEEPER_USAGE_INTERVAL_MS: one slice is owed
    // every interval / slices. A run counts what is owed since the last one, back to back, on its own
    // pool connection beside the firing (a pass never waits for it), one run at a time.
    const now = Date.now();
    const step = this.o.usageIntervalMs / this.usageSlices;
    if (!this.stopping && !this.usageRun && !this.pressure.suspended('usage') && now - this.lastUsageAt >= step) {
      const owed = step > 0 ? Math.min(this.usageSlices, Math.floor((now - this.lastUsageAt) / step)) : this.usageSlices;
      this.lastUsageAt = now;
      this.usageRun = this.runUsage(owed)
        .then(
          (tenants) => {
            if (tenants !== undefined) this.usageFinished = tenants;
          },
          (err: unknown) => {
            this.o.log.error({ err: { message: (err as Error).message, code: (err as { code?: string }).code } }, 'sweeper usage rollup failed');
            this.emit('fault', err);
          },
        )
        .finally(() => {
          this.usageRun = undefined;
        });
    }
    const usageTenants = this.usageFinished;
    this.usageFinished = undefined;
    if (!this.stopping && !this.gaugesRun) this.gaugesRun = this.readGaugesBeside(now);

    this.pressure.observe(slowest);
    this.publishPressure();
    const durationMs = performance.now() - started;
    metrics.sweeperCycles.inc();
    metrics.sweeperCycleSeconds.observe({ phase: 'cycle' }, durationMs / 1000);
    return {
      cycle: ++this.cycles,
      passes,
      fired: passes.reduce((n, p) => n + p.fired, 0),
      pruned: passes.reduce((n, p) => n + p.pruned, 0),
      removed: passes.reduce((n, p) => n + p.removed, 0),
      fireEnabled,
      usageTenants,
      nextDueInMs,
      batch: this.pressure.batch,
      sleepMs: this.pressure.sleepMs,
      suspended: { prune: this.pressure.suspended('prune'), usage: this.pressure.suspended('usage') },
      durationMs,
    };
  }

  /**
   * The gauges that are due, read beside the firing on a connection of their own, one reading at a
   * time. Awaited inside the cycle they held up every timer due meanwhile: the log's pass over every
   * (partition, group) row takes 1.5-2.5 s at 40,000 partitions (sql/functions/log_gauges.sql).
   * Undefined when none is due.
   */
  private readGaugesBeside(now: number): Promise<void> | undefined {
    const timers = now - this.lastGaugesAt >= Math.min(GAUGE_INTERVAL_MS, this.o.intervalMs);
    const log = now - this.lastLogGaugesAt >= (this.o.logGaugesIntervalMs ?? LOG_GAUGE_INTERVAL_MS);
    const state = this.shedState();
    const shed = JSON.stringify(state);
    const reportNow = shed !== this.reported || now - this.lastReportAt >= REPORT_INTERVAL_MS;
    if (!timers && !log && !reportNow) return undefined;
    const { metrics } = this.o;
    this.gaugesStarted++;
    const read = async () => {
      if (reportNow) {
        this.lastReportAt = now;
        try {
          await report(this.o.pool, this.id, state, REPORT_INTERVAL_MS / 1000);
          this.reported = shed;
        } catch (err) {
          this.o.log.warn({ err: { message: (err as Error).message, code: (err as { code?: string }).code } }, 'sweeper: its report for the console could not be written; trying again next interval');
        }
      }
      if (timers) {
        this.lastGaugesAt = now;
        try {
          const g = await readGauges(this.o.pool);
          metrics.timersDue.set(Number(g.timersDue));
          metrics.timersOldestLate.set(Math.max(0, Number(g.timersOldestLateSeconds)));
          metrics.kvExpiredNotPruned.set(Number(g.kvExpiredNotPruned));
          metrics.kvExpiryLag.set(Math.max(0, Number(g.kvExpiryLagSeconds)));
        } catch (err) {
          // The database gone for a moment (a failover, a restart) is the cell's state, as in a cycle: a warning.
          const outage = (coerceError(err) as { code?: string } | undefined)?.code === 'db_unavailable';
          this.o.log[outage ? 'warn' : 'error']({ err: { message: (err as Error).message, code: (err as { code?: string }).code } }, 'sweeper: the timer and KV gauges could not be read; trying again next interval');
          this.emit('fault', err);
        }
      }
      if (log) {
        // A reading that fails waits for the next interval: the fire and prune are what the sweeper is for.
        this.lastLogGaugesAt = now;
        try {
          const g = await readLogGauges(this.o.pool);
          metrics.logBacklog.set(Number(g.backlog));
          metrics.logBacklogMaxGroup.set(Number(g.maxGroupBacklog));
          metrics.logOldestUnconsumed.set(Math.max(0, Number(g.oldestUnconsumedSeconds)));
          metrics.logDeadLetters.set(Number(g.deadLetters));
          const r = await readLogRetentionGauges(this.o.pool);
          metrics.logOldestMessage.set(Math.max(0, Number(r.oldestMessageSeconds)));
          for (const [table, bytes] of Object.entries(r.tables)) metrics.logTableBytes.set({ table }, Number(bytes));
        } catch (err) {
          this.o.log.warn({ err: { message: (err as Error).message, code: (err as { code?: string }).code } }, 'sweeper: the log gauges could not be read; trying again next interval');
        }
      }
    };
    return read().finally(() => {
      this.gaugesRun = undefined;
      this.gaugesFinished++;
      this.emit('gauges');
    });
  }

  /**
   * Counts up to `owed` slices, one statement each; more while the layout has slices never counted
   * (the first refresh, or after a rewrite of a table: nothing is published until every slice has been
   * counted, so it is done without pause). Stops early when nothing is due, or when another sweeper's
   * call holds the rollup (it is doing the work). Answers the kv_usage rows the last publish wrote.
   */
  private async runUsage(owed: number): Promise<number | undefined> {
    let tenants: number | undefined;
    for (let i = 0; !this.stopping; i++) {
      const t0 = performance.now();
      const r = await rollupUsageSlice(this.o.pool, this.o.usageSlicePages ?? DEFAULT_USAGE_SLICE_PAGES, this.o.usageIntervalMs);
      this.o.metrics.sweeperCycleSeconds.observe({ phase: 'usage' }, (performance.now() - t0) / 1000);
      if (r.busy) break;
      this.usageSlices = Math.max(1, r.slices);
      if (r.published) tenants = r.tenants;
      if (!r.counted) break;
      if (r.uncounted === 0 && i + 1 >= owed) break;
    }
    return tenants;
  }

  /** The shedding ladder as this sweeper stands on it, for its report. */
  private shedState(): ShedState {
    const p = this.pressure;
    return {
      rung: p.level,
      suspended: (['prune', 'usage'] as const).filter((phase) => p.suspended(phase)),
      batch: p.batch,
      baseBatch: p.baseBatch,
      sleepMs: p.sleepMs,
      baseSleepMs: p.baseIntervalMs,
    };
  }

  private publishPressure(): void {
    const { metrics } = this.o;
    metrics.sweeperBatchSize.set(this.pressure.batch);
    metrics.sweeperPhaseSuspended.set({ phase: 'prune' }, this.pressure.suspended('prune') ? 1 : 0);
    metrics.sweeperPhaseSuspended.set({ phase: 'usage' }, this.pressure.suspended('usage') ? 1 : 0);
    metrics.sweeperPhaseSuspended.set({ phase: 'fire' }, 0);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wakeSleep = undefined;
        resolve();
      };
      if (this.wakePending) {
        this.wakePending = false;
        return resolve();
      }
      const timer = setTimeout(done, ms);
      this.wakeSleep = done;
    });
  }
}
