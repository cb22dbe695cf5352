// Process accounting from /proc (Linux): CPU time and RSS of a process tree, so each lane can say
// where its cores went (load client, HTTP process, PostgreSQL) instead of guessing.
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import http from 'node:http';

const TICK_US = 1e6 / 100; // USER_HZ is 100 on every Linux we run on

/** The children of every thread of pid (a child belongs to the thread that forked it). */
export function childrenOf(pid: number): number[] {
  try {
    return fs
      .readdirSync(`/proc/${pid}/task`)
      .flatMap((tid) => fs.readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim().split(/\s+/))
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

export function treeOf(pid: number): number[] {
  const out = [pid];
  for (let i = 0; i < out.length; i++) out.push(...childrenOf(out[i]));
  return out;
}

/** utime + stime of one process in microseconds; undefined when it is gone. */
export function cpuUs(pid: number): number | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_US;
  } catch {
    return undefined;
  }
}

export function rssMb(pid: number): number | undefined {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** CPU of a set of process trees between start() and stop(), in microseconds. */
export class TreeCpu {
  private before = new Map<number, number>();
  constructor(private readonly roots: () => number[]) {}

  private snapshot(): Map<number, number> {
    const m = new Map<number, number>();
    for (const root of this.roots()) for (const pid of treeOf(root)) {
      const us = cpuUs(pid);
      if (us !== undefined) m.set(pid, us);
    }
    return m;
  }

  start(): void {
    this.before = this.snapshot();
  }

  stop(): number {
    let total = 0;
    // A process born during the stretch (a pool's new connection) did all its work inside it.
    for (const [pid, us] of this.snapshot()) total += us - (this.before.get(pid) ?? 0);
    return total;
  }
}

/** Whole-machine busy time, to show how much of the two cores anything else took. */
export function machineBusyUs(): { busy: number; total: number } {
  const line = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const idle = line[3] + line[4];
  const total = line.reduce((a, b) => a + b, 0);
  return { busy: (total - idle) * TICK_US, total: total * TICK_US };
}

export function machineLine(pgVersion: string): string {
  const cpus = os.cpus();
  return `${cpus.length} × ${cpus[0]?.model ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${os.type()} ${os.release()}, Node ${process.version}, ${pgVersion}`;
}

/** Waits until 127.0.0.1:port answers 200 on pathName (a cell booting), or throws after timeoutMs. */
export async function waitReady(port: number, pathName: string, timeoutMs = 60_000): Promise<void> {
  const started = Date.now();
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const req = http.get({ host: '127.0.0.1', port, path: pathName, agent: false }, (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      });
      req.on('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() - started > timeoutMs) throw new Error(`nothing answered 200 on 127.0.0.1:${port}${pathName} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * The environment of a benchmarked cell (dist/services/api/main.js): this process's, the database,
 * the port and the worker count, no sweeper, and the rate limits out of the way (a benchmark
 * measures the path, not the limiter's refusals).
 */
export function cellEnv(databaseUrl: string, port: number, workers: number): NodeJS.ProcessEnv {
  return {
    ...process.env,
    DATABASE_URL: databaseUrl,
    PORT: String(port),
    QUEEN_WORKERS: String(workers),
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
    QUEEN_SWEEPER: 'false',
    QUEEN_KV_READS_PER_SEC: '1000000000',
    QUEEN_KV_READS_BURST: '1000000000',
    QUEEN_KV_WRITES_PER_SEC: '1000000000',
    QUEEN_KV_WRITES_BURST: '1000000000',
    QUEEN_KV_CELL_OPS_PER_SEC: '1000000000',
  };
}

/** SIGTERM, and resolves once the process exited. */
export async function stopChild(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  await new Promise<void>((resolve) => {
    proc.once('exit', () => resolve());
    proc.kill('SIGTERM');
  });
}

/** The load average (1, 5, 15 min) as a benchmark prints it beside its figures. */
export function loadAverage(): string {
  return os.loadavg().map((x) => x.toFixed(2)).join(' ');
}
