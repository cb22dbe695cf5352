// A real high-availability PostgreSQL for the suites, from Debian's packages: one etcd, a Patroni
// cluster of `nodes` PostgreSQL servers (synchronous_mode on: a commit is acknowledged once the
// synchronous standby has it) and an HAProxy in front that routes to whichever node Patroni's REST
// API answers `GET /primary` 200 for, the standard Patroni set-up. Everything on loopback ports
// under one temp folder, started here and ended by PID. PostgreSQL refuses to run as root: as root,
// Patroni (and so PostgreSQL) runs as the `postgres` user.
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { freePort } from '../../shared/embeddedPostgres';
import { waitFor } from '../support/wait';

function which(name: string, candidates: string[]): string | undefined {
  for (const c of candidates) if (fs.existsSync(c)) return c;
  try {
    return execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** The PostgreSQL binaries Patroni runs: the newest major under /usr/lib/postgresql (Debian's layout). */
function pgBinDir(): string | undefined {
  const root = '/usr/lib/postgresql';
  if (!fs.existsSync(root)) return undefined;
  const majors = fs.readdirSync(root).filter((d) => fs.existsSync(path.join(root, d, 'bin', 'postgres'))).sort((a, b) => Number(b) - Number(a));
  return majors.length > 0 ? path.join(root, majors[0], 'bin') : undefined;
}

const TOOLS = {
  // PATRONI_BIN names another binary (a path that does not exist: the suite's not-run path).
  patroni: process.env.PATRONI_BIN !== undefined ? (fs.existsSync(process.env.PATRONI_BIN) ? process.env.PATRONI_BIN : undefined) : which('patroni', ['/usr/bin/patroni']),
  etcd: which('etcd', ['/usr/bin/etcd']),
  haproxy: which('haproxy', ['/usr/sbin/haproxy']),
  pgBin: pgBinDir(),
};

/** Why the HA suites cannot run here (a missing package), or undefined when they can. */
export const MISSING: string | undefined = (() => {
  const missing = [
    !TOOLS.patroni && 'patroni',
    !TOOLS.etcd && 'etcd-server',
    !TOOLS.haproxy && 'haproxy',
    !TOOLS.pgBin && 'postgresql (Debian layout, /usr/lib/postgresql/N/bin)',
  ].filter(Boolean);
  return missing.length === 0 ? undefined : `not installed here: ${missing.join(', ')} (Debian packages; .ci/run installs them where apt-get works)`;
})();

interface Proc {
  child: ChildProcess;
  out(): string;
  exited: Promise<void>;
}

function start(command: string, args: string[], opts: { uid?: number; gid?: number; cwd?: string } = {}): Proc {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], uid: opts.uid, gid: opts.gid, cwd: opts.cwd, env: { PATH: process.env.PATH ?? '', LANG: 'C.UTF-8', HOME: opts.cwd ?? os.tmpdir() } });
  let out = '';
  const keep = (c: Buffer) => (out = (out + c.toString()).slice(-40_000));
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return { child, out: () => out, exited };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

/** The PIDs whose parent is `pid` (from /proc). */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) out.push(Number(d));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/** `pid` and every descendant of it. */
function tree(pid: number): number[] {
  const all = [pid];
  for (let i = 0; i < all.length; i++) all.push(...childrenOf(all[i]));
  return all;
}

export interface PatroniNode {
  name: string;
  pgPort: number;
  restPort: number;
  dataDir: string;
  /** Patroni's PID while it runs. */
  pid(): number | undefined;
  /** The postmaster's PID (postmaster.pid), while it runs. */
  postmasterPid(): number | undefined;
  /** A direct connection string to this node's PostgreSQL (not through HAProxy). */
  url(database?: string): string;
  output(): string;
}

export interface HaCluster {
  nodes: PatroniNode[];
  /** The connection string through HAProxy: always the primary. */
  url(database?: string): string;
  /** The node Patroni's REST API calls the primary now (GET /primary 200), if any. */
  primary(): Promise<PatroniNode | undefined>;
  /** Resolves with the primary once one node answers /primary 200 and it is not `not` (bounded). */
  untilPrimary(not?: PatroniNode, timeoutMs?: number): Promise<PatroniNode>;
  /** The machine is gone: SIGKILL to the node's Patroni, its postmaster and every backend. */
  kill(node: PatroniNode): void;
  /** The machine freezes: SIGSTOP to the same processes (SIGCONT with `thaw`). */
  freeze(node: PatroniNode): void;
  thaw(node: PatroniNode): void;
  /** The member Patroni lists as the synchronous standby now, if any. */
  syncStandby(): Promise<PatroniNode | undefined>;
  /** Patroni's `synchronous_mode` on or off (REST API PATCH /config), resolved once the primary's synchronous_standby_names says so (bounded). */
  setSynchronousMode(on: boolean): Promise<void>;
  /** A planned switchover to `candidate` (Patroni's REST API, POST /switchover). */
  switchover(leader: PatroniNode, candidate: PatroniNode): Promise<void>;
  output(): string;
  stop(): Promise<void>;
}

export interface HaOptions {
  nodes?: number;
  /** Seconds the leader key lives in etcd without a refresh: how long a lost primary goes unnoticed. */
  ttl?: number;
}

async function rest(port: number, method: string, p: string, body?: unknown, timeoutMs = 1000): Promise<{ status: number; text: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${p}`, {
    method,
    body: body === undefined ? undefined : JSON.stringify(body),
    headers: body === undefined ? undefined : { 'content-type': 'application/json' },
    signal: AbortSignal.timeout(timeoutMs),
  });
  return { status: res.status, text: await res.text() };
}

export async function startHaCluster(o: HaOptions = {}): Promise<HaCluster> {
  if (MISSING) throw new Error(MISSING);
  const count = o.nodes ?? 3;
  const ttl = o.ttl ?? 10;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-ha-'));
  fs.chmodSync(dir, 0o755);
  const asRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const ids = asRoot ? { uid: Number(execFileSync('id', ['-u', 'postgres']).toString().trim()), gid: Number(execFileSync('id', ['-g', 'postgres']).toString().trim()) } : {};
  if (asRoot) fs.chownSync(dir, ids.uid!, ids.gid!);

  const procs: Proc[] = [];
  const [etcdClient, etcdPeer, haPort] = [await freePort(), await freePort(), await freePort()];
  const etcd = start(TOOLS.etcd!, [
    '--name', 'queen-ha', '--data-dir', path.join(dir, 'etcd'),
    '--listen-client-urls', `http://127.0.0.1:${etcdClient}`, '--advertise-client-urls', `http://127.0.0.1:${etcdClient}`,
    '--listen-peer-urls', `http://127.0.0.1:${etcdPeer}`, '--initial-advertise-peer-urls', `http://127.0.0.1:${etcdPeer}`,
    '--initial-cluster', `queen-ha=http://127.0.0.1:${etcdPeer}`, '--log-level', 'warn',
  ], { ...ids, cwd: dir });
  procs.push(etcd);

  const nodes: (PatroniNode & { proc?: Proc; config: string })[] = [];
  for (let i = 1; i <= count; i++) {
    const name = `n${i}`;
    const pgPort = await freePort();
    const restPort = await freePort();
    const dataDir = path.join(dir, name);
    const config = path.join(dir, `${name}.yml`);
    // YAML is a superset of JSON: the configuration is written as JSON.
    fs.writeFileSync(
      config,
      JSON.stringify({
        scope: 'queen-ha',
        name,
        log: { level: 'WARNING' },
        restapi: { listen: `127.0.0.1:${restPort}`, connect_address: `127.0.0.1:${restPort}` },
        etcd3: { hosts: `127.0.0.1:${etcdClient}` },
        bootstrap: {
          dcs: {
            ttl,
            loop_wait: 1,
            retry_timeout: 3,
            maximum_lag_on_failover: 16 * 1024 * 1024,
            synchronous_mode: true,
            postgresql: {
              use_pg_rewind: true,
              use_slots: true,
              parameters: {
                max_connections: 200,
                shared_buffers: '32MB',
                wal_log_hints: 'on',
                max_wal_senders: 10,
                max_replication_slots: 10,
                // The OS never crashes under these tests (only processes die): the page cache keeps
                // what fsync would have forced, and the shared disk is spared.
                fsync: 'off',
                full_page_writes: 'off',
              },
            },
          },
          initdb: [{ encoding: 'UTF8' }, { locale: 'C' }],
        },
        postgresql: {
          listen: `127.0.0.1:${pgPort}`,
          connect_address: `127.0.0.1:${pgPort}`,
          data_dir: dataDir,
          bin_dir: TOOLS.pgBin,
          pgpass: path.join(dir, `${name}.pgpass`),
          authentication: { superuser: { username: 'postgres' }, replication: { username: 'postgres' } },
          pg_hba: ['local all all trust', 'host all all 127.0.0.1/32 trust', 'host replication all 127.0.0.1/32 trust'],
          parameters: { unix_socket_directories: dir },
        },
      }),
      { mode: 0o644 },
    );
    const node = {
      name,
      pgPort,
      restPort,
      dataDir,
      config,
      proc: undefined as Proc | undefined,
      pid() {
        const p = node.proc?.child;
        return p && p.exitCode === null && p.signalCode === null ? p.pid : undefined;
      },
      postmasterPid() {
        try {
          const pid = Number(fs.readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
          return pid > 0 && alive(pid) ? pid : undefined;
        } catch {
          return undefined;
        }
      },
      url: (database = 'postgres') => `postgres://postgres@127.0.0.1:${pgPort}/${database}`,
      output: () => node.proc?.out() ?? '',
    };
    nodes.push(node);
  }

  const haproxyCfg = path.join(dir, 'haproxy.cfg');
  fs.writeFileSync(
    haproxyCfg,
    [
      'global',
      '  maxconn 2000',
      'defaults',
      '  mode tcp',
      '  timeout connect 2s',
      '  timeout client 1h',
      '  timeout server 1h',
      '  timeout check 1s',
      'listen primary',
      `  bind 127.0.0.1:${haPort}`,
      '  option httpchk GET /primary',
      '  http-check expect status 200',
      // A node that stops answering /primary 200 is out after two checks, and its sessions are cut:
      // no connection stays on a server that is no longer the primary.
      '  default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions',
      ...nodes.map((n) => `  server ${n.name} 127.0.0.1:${n.pgPort} maxconn 500 check port ${n.restPort}`),
      '',
    ].join('\n'),
  );
  const haproxy = start(TOOLS.haproxy!, ['-db', '-f', haproxyCfg]);
  procs.push(haproxy);

  const output = () =>
    [`--- etcd\n${etcd.out().slice(-3000)}`, `--- haproxy\n${haproxy.out().slice(-3000)}`, ...nodes.map((n) => `--- ${n.name}\n${n.output().slice(-6000)}`)].join('\n');

  const primary = async () => {
    for (const n of nodes) {
      const r = await rest(n.restPort, 'GET', '/primary').catch(() => undefined);
      if (r?.status === 200) return n;
    }
    return undefined;
  };
  const untilPrimary = async (not?: PatroniNode, timeoutMs = 60_000) => {
    let found: PatroniNode | undefined;
    await waitFor(async () => {
      found = await primary();
      return found !== undefined && found !== not;
    }, { what: `a Patroni primary${not ? ` other than ${not.name}` : ''}`, timeoutMs, everyMs: 200 });
    return found!;
  };
  const untilServing = (url: string, timeoutMs: number) =>
    waitFor(async () => {
      const c = new Client({ connectionString: url, connectionTimeoutMillis: 1000 });
      c.on('error', () => undefined);
      try {
        await c.connect();
        const { rows } = await c.query('SELECT pg_is_in_recovery() AS r');
        return rows[0].r === false;
      } catch {
        return false;
      } finally {
        await c.end().catch(() => undefined);
      }
    }, { what: `a primary through HAProxy (${url})`, timeoutMs, everyMs: 200 });

  const pidsOf = (n: PatroniNode) => {
    const pids = [n.pid(), n.postmasterPid()].filter((p): p is number => p !== undefined);
    return [...new Set(pids.flatMap(tree))];
  };
  const stopNode = async (n: (typeof nodes)[number]) => {
    const pids = pidsOf(n);
    for (const p of pids) signal(p, 'SIGCONT');
    const pid = n.pid();
    if (pid) {
      signal(pid, 'SIGTERM');
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([n.proc!.exited, new Promise((r) => (timer = setTimeout(r, 10_000)))]);
      clearTimeout(timer);
    }
    for (const p of [...pids, ...pidsOf(n)]) signal(p, 'SIGKILL');
  };
  const stop = async () => {
    await Promise.all(nodes.map(stopNode));
    for (const p of procs) {
      if (p.child.exitCode === null && p.child.signalCode === null) {
        p.child.kill('SIGTERM');
        const t = setTimeout(() => p.child.kill('SIGKILL'), 5000);
        await p.exited;
        clearTimeout(t);
      }
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };

  try {
    await waitFor(() => rest(etcdClient, 'GET', '/health').then((r) => r.status === 200, () => false), { what: 'etcd to answer /health', timeoutMs: 15_000, everyMs: 100 });
    // The first node bootstraps (initdb); the others clone it once it is the primary.
    const launch = (n: (typeof nodes)[number]) => (n.proc = start(TOOLS.patroni!, [n.config], { ...ids, cwd: dir }));
    launch(nodes[0]);
    await untilPrimary(undefined, 60_000);
    for (const n of nodes.slice(1)) launch(n);
    // Every replica streaming, and one of them the synchronous standby.
    await waitFor(async () => {
      const r = await rest(nodes[0].restPort, 'GET', '/cluster').catch(() => undefined);
      if (r?.status !== 200) return false;
      const members = JSON.parse(r.text).members as { role: string; state: string }[];
      return members.length === count && members.every((m) => m.state === 'running' || m.state === 'streaming') && members.some((m) => m.role === 'sync_standby');
    }, { what: 'every Patroni replica streaming, one of them synchronous', timeoutMs: 90_000, everyMs: 250 });
    await untilServing(`postgres://postgres@127.0.0.1:${haPort}/postgres`, 15_000);
  } catch (err) {
    const text = output();
    await stop();
    throw new Error(`the HA cluster did not start: ${(err as Error).message}\n${text}`);
  }

  return {
    nodes,
    url: (database = 'postgres') => `postgres://postgres@127.0.0.1:${haPort}/${database}`,
    primary,
    untilPrimary,
    kill(n) {
      for (const p of pidsOf(n)) signal(p, 'SIGKILL');
    },
    freeze(n) {
      for (const p of pidsOf(n)) signal(p, 'SIGSTOP');
    },
    thaw(n) {
      for (const p of pidsOf(n)) signal(p, 'SIGCONT');
    },
    async syncStandby() {
      for (const n of nodes) {
        const r = await rest(n.restPort, 'GET', '/cluster').catch(() => undefined);
        if (r?.status !== 200) continue;
        const sync = (JSON.parse(r.text).members as { name: string; role: string }[]).find((m) => m.role === 'sync_standby');
        return nodes.find((x) => x.name === sync?.name);
      }
      return undefined;
    },
    async setSynchronousMode(on) {
      const leader = await untilPrimary();
      const r = await rest(leader.restPort, 'PATCH', '/config', { synchronous_mode: on }, 10_000);
      if (r.status !== 200) throw new Error(`PATCH /config refused: ${r.status} ${r.text}`);
      await waitFor(async () => {
        const c = new Client({ connectionString: leader.url(), connectionTimeoutMillis: 1000 });
        c.on('error', () => undefined);
        try {
          await c.connect();
          const { rows } = await c.query(`SELECT current_setting('synchronous_standby_names') AS s`);
          return (rows[0].s !== '') === on;
        } catch {
          return false;
        } finally {
          await c.end().catch(() => undefined);
        }
      }, { what: `synchronous_mode ${on ? 'on' : 'off'} on the primary`, timeoutMs: 30_000, everyMs: 200 });
    },
    async switchover(leader, candidate) {
      const r = await rest(leader.restPort, 'POST', '/switchover', { leader: leader.name, candidate: candidate.name }, 30_000);
      if (r.status !== 200) throw new Error(`switchover refused: ${r.status} ${r.text}`);
    },
    output,
    stop,
  };
}
