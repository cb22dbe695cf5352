// Real processes for tests: the built API and sweeper spawned as an operator runs them (nothing
// inherited from the test's environment but PATH and HOME), their JSON log lines collected so a
// test awaits a line instead of sleeping, stopped by their PID.
import { spawn, ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../../shared/embeddedPostgres';
import { createTestDatabase } from './database';
import { request } from './http';
import { metric } from './metrics';
import { waitFor } from './wait';

export const REPO = path.resolve(__dirname, '..', '..', '..');
export const API_MAIN = path.join(REPO, 'dist', 'services', 'api', 'main.js');
export const SWEEPER_MAIN = path.join(REPO, 'dist', 'services', 'sweeper', 'main.js');
export const MIGRATE_MAIN = path.join(REPO, 'dist', 'services', 'migrate.js');
export const NF = path.join(REPO, 'node_modules', '.bin', 'nf');

export type LogLine = Record<string, any> & { msg?: string; pid?: number };
export type Exit = { code: number | null; signal: NodeJS.Signals | null };

export interface Spawned {
  child: ChildProcess;
  pid: number;
  /** Every JSON line the process wrote so far, in order (pino writes one object a line). */
  lines: LogLine[];
  /** Resolves with the first line (already seen or to come) that matches; rejects after `timeoutMs` or if the process exits first. */
  waitForLine(match: (line: LogLine) => boolean, what: string, timeoutMs?: number): Promise<LogLine>;
  exited: Promise<Exit>;
  /** The raw output, stdout and stderr as they came (the last 4 MB). */
  output(): string;
  /** SIGTERM, then SIGKILL if it is still there after 15 s; resolves once it exited. */
  stop(): Promise<void>;
}

export interface SpawnOptions {
  cwd?: string;
  /** The child leads a new process group (its PID is the group id), as a terminal job does. */
  group?: boolean;
  /**
   * When `exited` resolves: 'close' (default), once the pipes are drained too, so every line is
   * read before a test looks at them; 'exit' for a process whose children may outlive it holding
   * the pipes (an all-in-one start SIGKILLed leaves its PostgreSQL behind).
   */
  exitOn?: 'close' | 'exit';
}

/** Spawns `command` with `env` (and PATH) only. */
export function spawnLogged(command: string, args: string[], env: Record<string, string>, opts: SpawnOptions = {}): Spawned {
  const child = spawn(command, args, {
    cwd: opts.cwd ?? REPO,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: opts.group ?? false,
  });
  const lines: LogLine[] = [];
  const waiters: { match: (l: LogLine) => boolean; resolve(l: LogLine): void }[] = [];
  let raw = '';
  let pending = '';
  const onChunk = (chunk: Buffer) => {
    const text = chunk.toString();
    raw = (raw + text).slice(-4_000_000);
    pending += text;
    let nl: number;
    while ((nl = pending.indexOf('\n')) >= 0) {
      // nf colours its prefix and the line; the escapes are not part of the JSON.
      const rawLine = pending.slice(0, nl).replace(/\x1b\[[0-9;]*m/g, '');
      pending = pending.slice(nl + 1);
      // nf prefixes each line with "HH:MM:SS name.1 | "; the JSON starts at the first brace.
      const brace = rawLine.indexOf('{');
      if (brace < 0) continue;
      let line: LogLine;
      try {
        line = JSON.parse(rawLine.slice(brace));
      } catch {
        continue;
      }
      lines.push(line);
      for (let i = waiters.length - 1; i >= 0; i--) {
        if (waiters[i].match(line)) waiters.splice(i, 1)[0].resolve(line);
      }
    }
  };
  child.stdout!.on('data', onChunk);
  child.stderr!.on('data', onChunk);
  const exited = new Promise<Exit>((resolve) => child.once(opts.exitOn ?? 'close', (code, signal) => resolve({ code, signal })));
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    await exited;
    clearTimeout(timer);
  };
  return {
    child,
    pid: child.pid!,
    lines,
    exited,
    output: () => raw,
    stop,
    waitForLine(match, what, timeoutMs = 30_000) {
      const seen = lines.find(match);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const waiter = {
          match,
          resolve: (l: LogLine) => {
            clearTimeout(timer);
            resolve(l);
          },
        };
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(waiter), 1);
          reject(new Error(`no log line "${what}" within ${timeoutMs} ms; output:\n${raw.slice(-4000)}`));
        }, timeoutMs);
        waiters.push(waiter);
        exited.then(({ code, signal }) => {
          if (!waiters.includes(waiter)) return;
          waiters.splice(waiters.indexOf(waiter), 1);
          clearTimeout(timer);
          reject(new Error(`process exited (${code ?? signal}) before log line "${what}"; output:\n${raw.slice(-4000)}`));
        });
      });
    },
  };
}

/** The built API (`node dist/services/api/main.js`): PATH and HOME from the test, every QUEEN_* and DB_* variable the caller's. */
export function spawnApi(env: Record<string, string>): Spawned {
  return spawnLogged(process.execPath, [API_MAIN], { HOME: process.env.HOME ?? '', LOG_LEVEL: 'info', ...env }, { exitOn: 'exit' });
}

/**
 * The environment of an all-in-one start (`npm start`: no DATABASE_URL, so its own embedded
 * PostgreSQL and one sweeper) on `port`, with its data under `root` and free ports for the rest.
 */
export async function allInOneEnv(root: string, port: number): Promise<Record<string, string>> {
  return {
    PORT: String(port),
    QUEEN_WORKERS: '1',
    DB_POOL_SIZE: '10',
    QUEEN_DATA_DIR: path.join(root, 'pg'),
    QUEEN_EMBEDDED_PG_PORT: String(await freePort()),
    QUEEN_SWEEPER_METRICS_PORT: '0',
  };
}

/** Resolves once GET `path` (readiness: the worker serves and the database answers) answers 200 (fails if the process exits first, or after 30 s). */
export async function untilHealthy(api: Spawned, port: number, path = '/ready'): Promise<void> {
  await waitFor(
    async () => {
      if (api.child.exitCode !== null) throw new Error(`the API exited during boot:\n${api.output()}`);
      return request(port, 'GET', path).then((r) => r.status === 200, () => false);
    },
    { what: `the API on port ${port} to answer ${path} 200`, timeoutMs: 30_000, everyMs: 50 },
  ).catch((err: Error) => {
    throw new Error(`${err.message}; output:\n${api.output().slice(-4000)}`);
  });
}

export interface SweeperProcess extends Spawned {
  /** The Sweeper's id (`swept_by` in queen.sweeper_shards), from its config line. */
  id: string;
  metricsPort: number;
  /** One unlabelled series on its metrics endpoint. */
  metric(name: string): Promise<number>;
}

/** Spawns a sweeper process (`node dist/services/sweeper/main.js`) and resolves once it printed its `config: sweeper` line. */
export async function spawnSweeper(databaseUrl: string, env: Record<string, string> = {}): Promise<SweeperProcess> {
  const p = spawnLogged(
    process.execPath,
    [SWEEPER_MAIN],
    { DATABASE_URL: databaseUrl, QUEEN_SWEEPER_METRICS_PORT: '0', QUEEN_SWEEPER_INTERVAL_MS: '50', LOG_LEVEL: 'info', ...env },
    { exitOn: 'exit' },
  );
  const config = await p.waitForLine((l) => l.msg === 'config: sweeper', 'config: sweeper');
  const metricsPort = Number(p.lines.find((l) => l.msg === 'sweeper metrics listening')?.port ?? config.metricsPort);
  return Object.assign(p, { id: String(config.sweeperId), metricsPort, metric: (name: string) => metric(metricsPort, name) });
}

/** `node dist/services/migrate.js` with `env`, run to its end (SIGKILLed past 60 s): its exit code, its JSON lines, its output. */
export async function runMigrate(env: Record<string, string>): Promise<{ code: number | null; lines: LogLine[]; output: string }> {
  const p = spawnLogged(process.execPath, [MIGRATE_MAIN], { LOG_LEVEL: 'info', ...env });
  const timer = setTimeout(() => p.child.kill('SIGKILL'), 60_000);
  const { code } = await p.exited;
  clearTimeout(timer);
  return { code, lines: p.lines, output: p.output() };
}

/** Whether a PID is alive (signal 0). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Resolves once the process `pid` is gone (bounded). */
export function untilGone(pid: number, timeoutMs = 15_000): Promise<void> {
  return waitFor(() => !alive(pid), { what: `process ${pid} to exit`, timeoutMs, everyMs: 50 });
}

/**
 * A test file's database for the processes it spawns: created before its tests and dropped after
 * them; what a test pushes onto `started` is stopped after that test.
 */
export function useSpawnedDatabase(): { readonly url: string; started: Spawned[] } {
  let db: { url: string; drop(): Promise<void> };
  const started: Spawned[] = [];
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterEach(async () => {
    await Promise.all(started.splice(0).map((p) => p.stop()));
  });
  afterAll(() => db.drop());
  return {
    get url() {
      return db.url;
    },
    started,
  };
}

/**
 * A test file's folder for all-in-one starts (their embedded PostgreSQL's data goes under `root`),
 * made before its tests. After them: what was pushed onto `started` is stopped; each PID on
 * `strays` still alive (what a failed test left behind) gets `straySignal` and, if it is not gone
 * within untilGone's bound, SIGKILL; then the folder is removed.
 */
export function useDataRoot(prefix: string, straySignal: NodeJS.Signals = 'SIGTERM'): { readonly root: string; started: Spawned[]; strays: number[] } {
  let root: string;
  const started: Spawned[] = [];
  const strays: number[] = [];
  beforeAll(() => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
    // Walkable by the postgres user when running as root, so the data stays here and goes with `root`.
    fs.chmodSync(root, 0o755);
  });
  afterAll(async () => {
    for (const p of started) await p.stop();
    for (const pid of strays) if (alive(pid)) process.kill(pid, straySignal);
    for (const pid of strays) await untilGone(pid).catch(() => alive(pid) && process.kill(pid, 'SIGKILL'));
    fs.rmSync(root, { recursive: true, force: true });
  });
  return {
    get root() {
      return root;
    },
    started,
    strays,
  };
}
