// The sweeper's answer to a slow database: shrink the batch, lengthen the sleep, and shed phases in
// the fixed order of the shedding ladder (docs/operations.md): pruning first (its cost is disk alone, reads stay
// correct), the usage rollup second (quotas go stale: precision, not delivery). Firing is never
// shed: under pressure the visible result is a rising fire lag, never a delivery that stopped.
//
// "Slow" is judged per pass (one claim transaction), not per cycle: a long cycle full of useful
// passes is a backlog being drained, and throttling it would only make the backlog older.

/** A pass holding its shard claims longer than this means the database is struggling (by analogy, not measured). */
export const DEFAULT_SLOW_PASS_MS = 1000;
/** Cycles in a row without a slow pass before one step of relief. */
const RELIEF_AFTER_FAST_CYCLES = 3;
const MIN_BATCH = 10;
/** The sleep never stretches beyond this many base intervals. */
const MAX_SLEEP_FACTOR = 16;

export type SheddablePhase = 'prune' | 'usage';

export class Pressure {
  batch: number;
  sleepMs: number;
  /** 0 calm, 1 pruning suspended, 2 pruning and the usage rollup suspended. */
  level = 0;
  private fastCycles = 0;

  constructor(
    readonly baseBatch: number,
    readonly baseIntervalMs: number,
    public slowPassMs = DEFAULT_SLOW_PASS_MS,
  ) {
    this.batch = baseBatch;
    this.sleepMs = baseIntervalMs;
  }

  suspended(phase: SheddablePhase): boolean {
    return phase === 'prune' ? this.level >= 1 : this.level >= 2;
  }

  /** Feed the slowest pass of a finished cycle. */
  observe(slowestPassMs: number): void {
    if (slowestPassMs > this.slowPassMs) {
      this.fastCycles = 0;
      this.batch = Math.max(Math.min(MIN_BATCH, this.baseBatch), Math.floor(this.batch / 2));
      this.sleepMs = Math.min(this.baseIntervalMs * MAX_SLEEP_FACTOR, this.sleepMs * 2);
      this.level = Math.min(2, this.level + 1);
      return;
    }
    if (++this.fastCycles < RELIEF_AFTER_FAST_CYCLES) return;
    this.fastCycles = 0;
    this.batch = Math.min(this.baseBatch, this.batch * 2);
    this.sleepMs = Math.max(this.baseIntervalMs, Math.floor(this.sleepMs / 2));
    this.level = Math.max(0, this.level - 1);
  }
}
