// A real PgBouncer (Debian's `pgbouncer` package) in front of the test PostgreSQL, for the suites
// that run the cell behind a transaction pooler. Started on a free port, in the foreground, so its
// PID is the child's and the suite stops it by that PID.
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { freePort } from '../../shared/embeddedPostgres';
import { waitFor } from '../support/wait';

/** The binary: PGBOUNCER_BIN, else where the package put it or on PATH; undefined when it is not installed. */
export const PGBOUNCER: string | undefined = (() => {
  const asked = process.env.PGBOUNCER_BIN;
  if (asked !== undefined) return fs.existsSync(asked) ? asked : undefined;
  if (fs.existsSync('/usr/sbin/pgbouncer')) return '/usr/sbin/pgbouncer';
  try {
    return execFileSync('sh', ['-c', 'command -v pgbouncer'], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
})();

export interface Bouncer {
  port: number;
  pid: number;
  /** `url` (a direct connection string) with its host and port turned to PgBouncer's. */
  through(url: string): string;
  /** A statement on PgBouncer's admin console (SHOW POOLS, SHOW SERVERS, ...). */
  admin(sql: string): Promise<Record<string, unknown>[]>;
  output(): string;
  stop(): Promise<void>;
}

export interface BouncerOptions {
  /** The server PgBouncer forwards to (every database of it, by the client's database name). */
  serverUrl: string;
  poolMode?: 'transaction' | 'session';
  /** Server connections per database and user: small, so the cell's clients really share them. */
  poolSize?: number;
  /** PgBouncer refuses any startup parameter not listed here (its default: none but these). */
  ignoreStartupParameters?: string;
}

export async function startPgbouncer(o: BouncerOptions): Promise<Bouncer> {
  if (!PGBOUNCER) throw new Error('pgbouncer is not installed');
  const server = new URL(o.serverUrl);
  const user = decodeURIComponent(server.username);
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-pgbouncer-'));
  // PgBouncer refuses to run as root: as root it runs as `postgres` (-u), which must read these.
  fs.chmodSync(dir, 0o755);
  fs.writeFileSync(path.join(dir, 'userlist.txt'), `"${user}" ""\n`, { mode: 0o644 });
  fs.writeFileSync(
    path.join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `* = host=${server.hostname} port=${server.port || 5432}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${path.join(dir, 'userlist.txt')}`,
      `admin_users = ${user}`,
      `pool_mode = ${o.poolMode ?? 'transaction'}`,
      `default_pool_size = ${o.poolSize ?? 3}`,
      'max_client_conn = 500',
      `ignore_startup_parameters = ${o.ignoreStartupParameters ?? 'extra_float_digits'}`,
      'pidfile =',
      'logfile =',
      'log_connections = 0',
      'log_disconnections = 0',
      '',
    ].join('\n'),
    { mode: 0o644 },
  );
  const asRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const args = [...(asRoot ? ['-u', 'postgres'] : []), path.join(dir, 'pgbouncer.ini')];
  const child: ChildProcess = spawn(PGBOUNCER, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (c) => (out = (out + c).slice(-20_000)));
  child.stderr!.on('data', (c) => (out = (out + c).slice(-20_000)));
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));

  const through = (url: string) => {
    const u = new URL(url);
    u.hostname = '127.0.0.1';
    u.port = String(port);
    return u.toString();
  };
  const admin = async (sql: string) => {
    const c = new Client({ host: '127.0.0.1', port, user, database: 'pgbouncer' });
    await c.connect();
    try {
      return (await c.query(sql)).rows;
    } finally {
      await c.end();
    }
  };
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const killed = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(killed);
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  // Up when its admin console answers (bounded: 10 s).
  const answers = () => admin('SHOW VERSION').then(() => true, () => false);
  const gone = () => {
    if (child.exitCode !== null) throw new Error('pgbouncer exited');
    return false;
  };
  await waitFor(async () => gone() || (await answers()), { what: "pgbouncer's admin console", timeoutMs: 10_000, everyMs: 100 }).catch(async (err: Error) => {
    await stop();
    throw new Error(`pgbouncer did not start: ${err.message}; output:\n${out}`);
  });
  return { port, pid: child.pid!, through, admin, output: () => out, stop };
}
