// Real processes for the deployment suites: the built API (and sweeper) spawned as an operator
// would run them, their JSON log lines collected so a test can await a line instead of sleeping,
// and plain HTTP calls on fresh connections (no keep-alive) so node:cluster spreads them over
// the workers.
import { spawn, spawnSync, ChildProcess } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';

export const REPO = path.resolve(__dirname, '..', '..', '..');
export const API_MAIN = path.join(REPO, 'dist', 'services', 'api', 'main.js');
export const SWEEPER_MAIN = path.join(REPO, 'dist', 'services', 'sweeper', 'main.js');
export const NF = path.join(REPO, 'node_modules', '.bin', 'nf');

export type LogLine = Record<string, any> & { msg?: string; pid?: number };

export interface Spawned {
  child: ChildProcess;
  lines: LogLine[];
  /** Resolves with the first line (already seen or to come) that matches; rejects after `timeoutMs` or if the process exits first. */
  waitForLine(match: (line: LogLine) => boolean, what: string, timeoutMs?: number): Promise<LogLine>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  output(): string;
}

/** `group`: the child leads a new process group (its PID is the group id), as a terminal job does. */
export function spawnLogged(command: string, args: string[], env: Record<string, string>, opts: { cwd?: string; group?: boolean } = {}): Spawned {
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
    raw = (raw + text).slice(-200_000);
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
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    // 'close', not 'exit': the log lines still in the pipe are read before a test looks at them.
    child.once('close', (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    lines,
    exited,
    output: () => raw,
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

export interface HttpAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
}

/** One request on its own connection, unless a keep-alive `agent` is given. */
export function request(port: number, method: string, urlPath: string, body?: string, headers: Record<string, string> = {}, agent: http.Agent | false = false): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, method, path: urlPath, agent, headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString() }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    // A connection the cluster primary handed to a worker that was just killed may never be answered.
    req.setTimeout(10_000, () => req.destroy(Object.assign(new Error('no answer within 10 s'), { code: 'ETIMEDOUT' })));
    req.end(body);
  });
}

/** The value of one sample in Prometheus text (first match), or undefined. */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const have: Record<string, string> = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) have[k] = v;
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[3]);
  }
  return undefined;
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

export const PROMTOOL = (() => {
  const r = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
  return r.status === 0 ? 'promtool' : undefined;
})();

export function promtool(args: string[], input?: string): { status: number | null; output: string } {
  if (!PROMTOOL) throw new Error('promtool is not installed');
  const r = spawnSync(PROMTOOL, args, { input, encoding: 'utf8', cwd: REPO });
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}
