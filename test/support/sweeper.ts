// Sweepers for tests, in-process: a Sweeper with its own pool, awaited through its cycle signals (a
// sweeper as a real process is spawnSweeper in ./processes). And timers written straight through
// the product's procedure, and the fired messages counted, for the suites that drive sweepers.
import { Pool } from 'pg';
import { createLogger } from '../../shared/log';
import { createSweeperMetrics, primeSweeperMetrics, SweeperMetrics } from '../../shared/metrics';
import { CycleReport, Sweeper, SweeperOptions } from '../../services/sweeper/sweeper';

export interface TestSweeper {
  sweeper: Sweeper;
  metrics: SweeperMetrics;
  pool: Pool;
  /** Resolves after `n` more complete cycles, each started after this call (a cycle in flight is skipped). */
  cycles(n?: number): Promise<CycleReport[]>;
  close(): Promise<void>;
}

const live = new Set<TestSweeper>();

export function startTestSweeper(
  databaseUrl: string,
  options: Partial<Omit<SweeperOptions, 'pool' | 'log' | 'metrics'>> = {},
): TestSweeper {
  const pool = new Pool({ connectionString: databaseUrl, max: 3 });
  pool.on('error', () => undefined);
  const metrics = createSweeperMetrics();
  primeSweeperMetrics(metrics);
  const sweeper = new Sweeper({
    pool,
    databaseUrl,
    log: createLogger('sweeper-test', process.env.TEST_LOG_LEVEL ?? 'silent'),
    metrics,
    intervalMs: 20,
    batch: 500,
    usageIntervalMs: 60_000,
    ...options,
  });
  sweeper.start();
  const handle: TestSweeper = {
    sweeper,
    metrics,
    pool,
    async cycles(n = 1) {
      // The cycle in flight may have claimed before the caller's last write: skip it.
      const reports: CycleReport[] = [];
      if (sweeper.busy) await sweeper.cycleDone();
      for (let i = 0; i < n; i++) {
        sweeper.wake();
        reports.push(await sweeper.cycleDone());
        // The usage rollup a cycle started runs beside the loop; a test awaiting a cycle awaits it too.
        await sweeper.usageSettled();
      }
      return reports;
    },
    async close() {
      live.delete(handle);
      await sweeper.stop();
      await pool.end();
    },
  };
  live.add(handle);
  return handle;
}

/** A sweeper for `n` cycles, each begun after this call, then closed: what a test that needs "the sweeper ran" awaits. */
export async function sweep(databaseUrl: string, n = 1): Promise<CycleReport[]> {
  const s = startTestSweeper(databaseUrl);
  try {
    return await s.cycles(n);
  } finally {
    await s.close();
  }
}

/** For afterEach/afterAll: a sweeper left running is a leak and fails the suite. */
export async function closeLeakedSweepers(): Promise<number> {
  const leaked = [...live];
  await Promise.all(leaked.map((s) => s.close()));
  return leaked.length;
}

/** Schedules `count` timers straight through queen.timers_apply_v1, in batches; answers their ids. */
export async function scheduleDirect(
  pool: Pool,
  tenant: string,
  count: number,
  make: (i: number) => Record<string, unknown>,
): Promise<string[]> {
  const ids: string[] = [];
  for (let start = 0; start < count; start += 1000) {
    const ops = [];
    for (let i = start; i < Math.min(count, start + 1000); i++) ops.push({ op: 'schedule', ...make(i) });
    const { rows } = await pool.query('SELECT queen.timers_apply_v1($1::uuid, $2::jsonb) AS r', [tenant, JSON.stringify(ops)]);
    for (const r of rows[0].r) ids.push(r.timerId);
  }
  return ids;
}

/** transactionId -> number of messages carrying it, for every fired timer in the log. */
export async function timerMessageCounts(pool: Pool): Promise<Map<string, number>> {
  const { rows } = await pool.query(
    `SELECT transaction_id, count(*)::int AS n FROM queen.messages WHERE transaction_id LIKE 'timer:%' GROUP BY transaction_id`,
  );
  return new Map(rows.map((r) => [String(r.transaction_id).slice('timer:'.length), r.n]));
}
