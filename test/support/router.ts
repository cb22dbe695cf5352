// The router of deploy/router/ as shipped, on this machine: HAProxy with haproxy.cfg's cluster
// addresses and paths replaced by loopback ones, in front of two cells (test/scaling/router.test.ts,
// bench/router.ts).
import { spawn, spawnSync, ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../../shared/embeddedPostgres';
import { startTestApi, TestApi, UNLIMITED_RATES } from './api';
import { REPO } from './processes';
import { waitFor } from './wait';

export const HAPROXY = ['/usr/sbin/haproxy', '/usr/bin/haproxy'].find((p) => fs.existsSync(p));
export const HAPROXY_MISSING = HAPROXY ? undefined : "haproxy is not installed (Debian's haproxy package; .ci/run installs it)";

export interface Router {
  url: string;
  /** The runtime API's socket, and the placement map's path as the configuration names it. */
  socket: string;
  map: string;
  proc: ChildProcess;
  /** One command on the runtime API, its answer. */
  runtime(command: string): Promise<string>;
  stop(): Promise<void>;
}

/** Starts the shipped router with `cell-a` and `cell-b` at these `host:port`s and the shipped placement.map. */
export async function startRouter(cellA: string, cellB: string): Promise<Router> {
  if (!HAPROXY) throw new Error(HAPROXY_MISSING);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-router-'));
  const port = await freePort();
  const socket = path.join(dir, 'admin.sock');
  const map = path.join(dir, 'placement.map');
  fs.copyFileSync(path.join(REPO, 'deploy', 'router', 'placement.map'), map);
  const cfg = fs
    .readFileSync(path.join(REPO, 'deploy', 'router', 'haproxy.cfg'), 'utf8')
    .replaceAll('/var/run/haproxy/admin.sock', socket)
    .replaceAll('/etc/haproxy/placement.map', map)
    .replace('bind :6632', `bind 127.0.0.1:${port}`)
    .replace('api.queen-cell-a.svc.cluster.local:6632', cellA)
    .replace('api.queen-cell-b.svc.cluster.local:6632', cellB)
    .replace('log stdout format raw local0 info', '');
  const file = path.join(dir, 'haproxy.cfg');
  fs.writeFileSync(file, cfg);
  const check = spawnSync(HAPROXY, ['-c', '-f', file], { encoding: 'utf8' });
  if (check.status !== 0) throw new Error(`haproxy -c refused the configuration:\n${check.stdout}${check.stderr}`);
  const proc = spawn(HAPROXY, ['-db', '-f', file], { stdio: ['ignore', 'ignore', 'pipe'] });
  const runtime = (command: string) =>
    new Promise<string>((resolve, reject) => {
      const s = net.connect(socket);
      let out = '';
      s.on('data', (d) => (out += d.toString()));
      s.on('end', () => resolve(out));
      s.on('error', reject);
      s.end(`${command}\n`);
    });
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      await new Promise((r) => proc.once('exit', r));
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitFor(async () => (await fetch(`${url}/router/health`).then((r) => r.status, () => 0)) === 200, { what: 'the router to answer', timeoutMs: 10_000 });
    // Both cells up in HAProxy's checks (srv_op_state 2) before the first routed call.
    await waitFor(async () => (await runtime('show servers state')).split('\n').filter((l) => / cell-[ab] /.test(l) && / 2 /.test(l)).length === 2, {
      what: 'both cells up in the router',
      timeoutMs: 15_000,
      everyMs: 200,
    });
  } catch (err) {
    await stop();
    throw err;
  }
  return { url, socket, map, proc, runtime, stop };
}

/**
 * For a describe block: two in-process cells (tenancy on, the admin token `token`, grants not
 * required, the rate limits out of the way) and the shipped router in front of them, started in
 * beforeAll and stopped in afterAll. The fields answer once beforeAll has run.
 */
export function useRoutedCells(token: string): { readonly a: TestApi; readonly b: TestApi; readonly router: Router } {
  const env = { QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1', QUEEN_ADMIN_TOKEN: token, QUEEN_KV_REQUIRE_GRANT: '0', ...UNLIMITED_RATES };
  let a: TestApi | undefined;
  let b: TestApi | undefined;
  let router: Router | undefined;
  beforeAll(async () => {
    [a, b] = await Promise.all([startTestApi(env), startTestApi(env)]);
    router = await startRouter(new URL(a.url).host, new URL(b.url).host);
  });
  afterAll(async () => {
    await router?.stop();
    await Promise.all([a?.close(), b?.close()]);
  });
  return {
    get a() { return a!; },
    get b() { return b!; },
    get router() { return router!; },
  };
}
