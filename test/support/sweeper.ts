// Sweepers for tests: in-process (a Sweeper with its own pool, awaited through its cycle signals)
// and as real processes (node dist/services/sweeper/main.js), for the properties that are about
// processes: several at once, SIGKILL, SIGTERM.
import { spawn, ChildProcess } from 'node:child_process';
import path from 'node:path';
import { Pool } from 'pg';
import { createLogger } from '../../shared/log';
import { createMetrics, Metrics, primeMetrics } from '../../shared/metrics';
import { CycleReport, Sweeper, SweeperOptions } from '../../services/sweeper/sweeper';

export interface TestSweeper {
  sweeper: Sweeper;
  metrics: Metrics;
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
  const metrics = createMetrics();
  primeMetrics(metrics);
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

/** For afterEach/afterAll: a sweeper left running is a leak and fails the suite. */
export async function closeLeakedSweepers(): Promise<number> {
  const leaked = [...live];
  await Promise.all(leaked.map((s) => s.close()));
  return leaked.length;
}

export interface SweeperProcess {
  child: ChildProcess;
  pid: number;
  /** The Sweeper's id (`swept_by` in queen.sweeper_shards), from its config line. */
  id: string;
  metricsPort: number;
  lines: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  metric(name: string): Promise<number>;
}

const MAIN = path.resolve(__dirname, '..', '..', 'services', 'sweeper', 'main.js');

/** Spawns a sweeper process and resolves once it has printed its `config: sweeper` line. */
export function spawnSweeper(databaseUrl: string, env: Record<string, string> = {}): Promise<SweeperProcess> {
  const child = spawn(process.execPath, [MAIN], {
    env: {
      PATH: process.env.PATH ?? '',
      DATABASE_URL: databaseUrl,
      QUEEN_SWEEPER_METRICS_PORT: '0',
      QUEEN_SWEEPER_INTERVAL_MS: '50',
      LOG_LEVEL: 'info',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return new Promise((resolve, reject) => {
    let buffer = '';
    let metricsPort: number | undefined;
    const timer = setTimeout(() => reject(new Error(`sweeper did not boot in time:\n${lines.join('\n')}`)), 30_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        lines.push(line);
        let parsed: Record<string, unknown>;
        try {
          parsed = JSON.parse(line);
        } catch {
          continue;
        }
        if (parsed.msg === 'sweeper metrics listening') metricsPort = Number(parsed.port);
        if (parsed.msg === 'config: sweeper') {
          clearTimeout(timer);
          const port = metricsPort ?? Number(parsed.metricsPort);
          resolve({
            child,
            pid: child.pid!,
            id: String(parsed.sweeperId),
            metricsPort: port,
            lines,
            exited,
            metric: (name) => scrape(port, name),
          });
        }
      }
    });
    child.stderr!.on('data', (chunk: Buffer) => lines.push(chunk.toString()));
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`sweeper exited during boot (code ${code}, signal ${signal}):\n${lines.join('\n')}`));
    });
  });
}

/** The value of one unlabelled series on a metrics endpoint. */
export async function scrape(port: number, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  if (!line) throw new Error(`${name} is not on the metrics endpoint`);
  return Number(line.slice(name.length + 1));
}

/** Polls `check` until it answers true (a database condition a process brings about), bounded. */
export async function until(check: () => Promise<boolean>, timeoutMs = 60_000, everyMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`condition not reached within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
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
