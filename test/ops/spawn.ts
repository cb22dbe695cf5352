// The built API as an operator runs it: `node dist/services/api/main.js` in its own process, with
// the environment given and nothing inherited that could change its configuration.
import { ChildProcess, spawn } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { freePort } from '../../shared/embeddedPostgres';

export const MAIN = path.resolve(__dirname, '..', '..', 'services', 'api', 'main.js');

export interface Spawned {
  child: ChildProcess;
  output(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stop(): Promise<void>;
}

/** PATH and HOME only from the test's environment; every QUEEN_* and DB_* variable is the caller's. */
export function spawnApi(env: Record<string, string>): Spawned {
  const child = spawn(process.execPath, [MAIN], {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    output: () => out,
    exited,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
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

/** The JSON log lines of a process's output (pino writes one object a line; anything else is skipped). */
export function jsonLines(text: string): Record<string, any>[] {
  return text.split('\n').flatMap((l) => {
    try {
      return [JSON.parse(l)];
    } catch {
      return [];
    }
  });
}

export interface FreshAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: any;
}

/**
 * One request on a new TCP connection (no keep-alive agent), so that under node:cluster the
 * kernel-balanced accept hands successive requests to different workers.
 */
export function fresh(port: number, method: string, pathname: string, body?: unknown): Promise<FreshAnswer> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path: pathname,
        agent: false,
        headers: { connection: 'close', 'content-type': 'application/json', ...(payload ? { 'content-length': Buffer.byteLength(payload) } : {}) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (text += d));
        res.on('end', () => {
          let parsed: unknown;
          try {
            parsed = text ? JSON.parse(text) : undefined;
          } catch {
            parsed = text;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: parsed });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** Polls GET /health until the cluster answers (or the process died, or 30 s passed). */
export async function untilHealthy(api: Spawned, port: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (api.child.exitCode !== null) throw new Error(`the API exited during boot:\n${api.output()}`);
    try {
      if ((await fresh(port, 'GET', '/health')).status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`the API did not become healthy in 30 s:\n${api.output()}`);
}
