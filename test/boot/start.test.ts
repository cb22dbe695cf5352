// `npm start` as a service manager and a terminal run it: the process npm runs is node itself (no
// shell between them, so npm's forwarded SIGTERM reaches the primary), SIGTERM to npm and a ^C to
// the terminal's process group both drain and stop the embedded PostgreSQL with exit 0 and no
// error-level line, the ports beside PORT follow it (PORT+1, PORT+7), and `--help` boots nothing.
// Every process is ended by its PID, whatever the outcome.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { freePort } from '../../shared/embeddedPostgres';
import { portsFromPort } from '../../shared/config';
import { request } from '../support/http';
import { LogLine, spawnLogged, Spawned, untilGone, untilHealthy, useDataRoot } from '../support/processes';
import { waitFor } from '../support/wait';

// SIGTERM first for strays: a primary left behind (the test failed) drains and stops its own PostgreSQL.
const data = useDataRoot('queen-npm-start-', 'SIGTERM');
const { started: runs, strays } = data;

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A PORT whose two followers (PORT+1, PORT+7) are free too. */
async function freePortRun(): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const port = await freePort();
    const { sweeperMetricsPort, embeddedPgPort } = portsFromPort(port);
    if ((await canListen(sweeperMetricsPort)) && (await canListen(embeddedPgPort))) return port;
  }
  throw new Error('no free run of ports PORT, PORT+1, PORT+7 in 20 tries');
}

/** The children of `pid`, from /proc. */
function childrenOf(pid: number): { pid: number; comm: string }[] {
  const out: { pid: number; comm: string }[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const after = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(after[1]) === pid) out.push({ pid: Number(entry), comm: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')) });
    } catch {
      /* gone meanwhile */
    }
  }
  return out;
}

const env = (port: number, dataDir: string): Record<string, string> => ({
  HOME: process.env.HOME ?? '',
  PORT: String(port),
  QUEEN_DATA_DIR: dataDir,
  QUEEN_WORKERS: '1',
  DB_POOL_SIZE: '10',
  LOG_LEVEL: 'info',
});

const errorLines = (lines: LogLine[]) => lines.filter((l) => typeof l.level === 'number' && l.level >= 50);

test('npm start -- --help prints the usage and the ports that follow PORT, and boots nothing', async () => {
  const dataDir = path.join(data.root, 'help');
  const run = spawnLogged('npm', ['start', '--silent', '--', '--help'], env(7100, dataDir));
  runs.push(run);
  const { code } = await run.exited;
  expect(code).toBe(0);
  expect(run.output()).toContain('Usage: npm start');
  expect(run.output()).toMatch(/QUEEN_SWEEPER_METRICS_PORT .* PORT\+1: 7101/);
  expect(run.output()).toMatch(/QUEEN_EMBEDDED_PG_PORT .* PORT\+7: 7107/);
  expect(run.lines).toEqual([]);
  expect(fs.existsSync(dataDir)).toBe(false);
});

/** Boots `npm start` on a fresh run of ports and checks what a running cell must show. */
async function boot(group: boolean): Promise<{ run: Spawned; port: number; postmaster: number }> {
  const port = await freePortRun();
  const run = spawnLogged('npm', ['start'], env(port, path.join(data.root, 'pg')), { group, exitOn: 'exit' });
  runs.push(run);
  await untilHealthy(run, port);
  // npm's one child is node, the primary itself: nothing that could swallow the signal between them.
  const children = childrenOf(run.pid);
  const up = await run.waitForLine((l) => l.msg === 'embedded PostgreSQL is up', 'embedded PostgreSQL is up');
  const postmaster = Number(fs.readFileSync(path.join(up.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  // Whatever fails below, the primary (npm's child, or its grandchild behind a shell) is stopped by its PID.
  const primary = Number(run.lines.find((l) => l.msg === 'no DATABASE_URL: starting the embedded PostgreSQL')!.pid);
  strays.push(postmaster, primary, ...children.map((c) => c.pid));
  // node's process name: `node`, or `MainThread` from Node 24 on (it names its main thread); never a shell.
  expect(children.map((c) => (c.comm === 'MainThread' ? 'node' : c.comm))).toEqual(['node']);
  expect(children[0].pid).toBe(primary);
  expect(run.lines.find((l) => l.msg === 'no DATABASE_URL: starting the embedded PostgreSQL')!.port).toBe(port + 7);
  const metrics = await run.waitForLine((l) => l.msg === 'sweeper metrics listening', 'sweeper metrics listening');
  expect(metrics.port).toBe(port + 1);
  expect((await request(port + 1, 'GET', '/health')).status).toBe(200);
  return { run, port, postmaster };
}

async function expectCleanStop(run: Spawned, port: number, postmaster: number): Promise<void> {
  const { code, signal } = await run.exited;
  expect({ code, signal }).toEqual({ code: 0, signal: null });
  await untilGone(postmaster);
  expect(errorLines(run.lines)).toEqual([]);
  expect(run.lines.some((l) => /exited unexpectedly/.test(String(l.msg)))).toBe(false);
  expect(run.lines.filter((l) => l.msg === 'stopped').length).toBe(2); // the sweeper's and the primary's
  await waitFor(async () => (await canListen(port)) && (await canListen(port + 1)) && (await canListen(port + 7)), {
    what: `ports ${port}, ${port + 1} and ${port + 7} to be free`,
    timeoutMs: 10_000,
  });
}

test('SIGTERM to npm (a service manager) drains, stops the embedded PostgreSQL, exits 0 with no error line, frees every port', async () => {
  const { run, port, postmaster } = await boot(false);
  process.kill(run.pid, 'SIGTERM');
  await expectCleanStop(run, port, postmaster);
});

test('^C (SIGINT to the whole process group, as a terminal sends it) does the same: PostgreSQL stops after the drain, not with it', async () => {
  const { run, port, postmaster } = await boot(true);
  process.kill(-run.pid, 'SIGINT');
  await expectCleanStop(run, port, postmaster);
  const order = run.lines.map((l) => l.msg);
  expect(order.indexOf('worker drained')).toBeGreaterThan(-1);
  expect(order.indexOf('worker drained')).toBeLessThan(order.lastIndexOf('stopped'));
});
