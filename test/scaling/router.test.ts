// The router of deploy/router/ (docs/scaling.md), run as shipped but for its addresses: a real
// HAProxy in front of two cells, each with its own PostgreSQL database, routing by the tenant
// header through placement.map. A tenant's calls land on its cell and nowhere else; a tenant the
// map does not name, a call with no tenant, and a cell that is down are answered in the cell's
// JSON shape; a
// placement changed through HAProxy's runtime API takes effect without a reload. Needs Debian's
// `haproxy`; without it the suite says it was not run and why.
import { spawn, spawnSync, ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { freePort } from '../../shared/embeddedPostgres';
import { startTestApi, TestApi, UNLIMITED_RATES } from '../support/api';
import { call } from '../support/http';
import { REPO } from '../support/processes';
import { waitFor } from '../support/wait';

const HAPROXY = ['/usr/sbin/haproxy', '/usr/bin/haproxy'].find((p) => fs.existsSync(p));
const reason = HAPROXY ? undefined : "haproxy is not installed (Debian's haproxy package; .ci/run installs it)";
if (reason) process.stderr.write(`test/scaling/router.test.ts: not run: ${reason}\n`);

const TENANCY = { QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1', QUEEN_ADMIN_TOKEN: 'router-test', QUEEN_KV_REQUIRE_GRANT: '0', ...UNLIMITED_RATES };
const A = '00000000-0000-4000-8000-00000000000a';
const B = '00000000-0000-4000-8000-00000000000b';
const C = 'cccccccc-cccc-4ccc-8ccc-cccccccccccc';

async function keysOf(url: string, tenant: string): Promise<string[]> {
  const c = new Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(`SELECT key FROM queen.kv WHERE tenant_id = $1 ORDER BY key`, [tenant])).rows.map((r) => r.key as string);
  } finally {
    await c.end();
  }
}

/** One command on HAProxy's runtime API (the stats socket), its answer. */
function runtime(socket: string, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect(socket);
    let out = '';
    s.on('data', (d) => (out += d.toString()));
    s.on('end', () => resolve(out));
    s.on('error', reject);
    s.end(`${command}\n`);
  });
}

(reason ? describe.skip : describe)(reason ? `the tenant router: not run, ${reason}` : 'the tenant router (HAProxy, placement by map)', () => {
  let cellA: TestApi;
  let cellB: TestApi;
  let dir: string;
  let haproxy: ChildProcess;
  let router: string;
  let socket: string;
  let pid: number;

  beforeAll(async () => {
    [cellA, cellB] = await Promise.all([startTestApi(TENANCY), startTestApi(TENANCY)]);
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-router-'));
    const port = await freePort();
    socket = path.join(dir, 'admin.sock');
    const map = path.join(dir, 'placement.map');
    fs.copyFileSync(path.join(REPO, 'deploy', 'router', 'placement.map'), map);
    const hostPort = (url: string) => new URL(url).host;
    // The shipped configuration, with this machine's addresses and paths in place of the cluster's.
    const cfg = fs
      .readFileSync(path.join(REPO, 'deploy', 'router', 'haproxy.cfg'), 'utf8')
      .replaceAll('/var/run/haproxy/admin.sock', socket)
      .replaceAll('/etc/haproxy/placement.map', map)
      .replace('bind :6632', `bind 127.0.0.1:${port}`)
      .replace('api.queen-cell-a.svc.cluster.local:6632', hostPort(cellA.url))
      .replace('api.queen-cell-b.svc.cluster.local:6632', hostPort(cellB.url))
      .replace('log stdout format raw local0 info', '');
    fs.writeFileSync(path.join(dir, 'haproxy.cfg'), cfg);
    const check = spawnSync(HAPROXY!, ['-c', '-f', path.join(dir, 'haproxy.cfg')], { encoding: 'utf8' });
    if (check.status !== 0) throw new Error(`haproxy -c refused the configuration:\n${check.stdout}${check.stderr}`);
    haproxy = spawn(HAPROXY!, ['-db', '-f', path.join(dir, 'haproxy.cfg')], { stdio: ['ignore', 'ignore', 'pipe'] });
    pid = haproxy.pid!;
    router = `http://127.0.0.1:${port}`;
    await waitFor(async () => (await fetch(`${router}/router/health`).then((r) => r.status, () => 0)) === 200, { what: 'the router to answer', timeoutMs: 10_000 });
    // Both cells up in HAProxy's checks before the first routed call.
    await waitFor(async () => (await runtime(socket, 'show servers state')).split('\n').filter((l) => / cell-[ab] /.test(l) && / 2 /.test(l)).length === 2, { what: 'both cells up in the router', timeoutMs: 15_000, everyMs: 200 });
  });
  afterAll(async () => {
    if (haproxy && haproxy.exitCode === null) {
      haproxy.kill('SIGTERM');
      await new Promise((r) => haproxy.once('exit', r));
    }
    await Promise.all([cellA?.close(), cellB?.close()]);
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  const put = (tenant: string, key: string) => call(router, 'PUT', `/api/v1/kv/orders/${key}`, { value: { tenant }, ttlSeconds: 600 }, { 'x-queen-tenant': tenant });

  test("each tenant's calls land on its own cell, and only there", async () => {
    expect((await put(A, 'a-1')).status).toBe(200);
    expect((await put(B, 'b-1')).status).toBe(200);
    // The header's case does not change the placement.
    expect((await put(A.toUpperCase(), 'a-2')).status).toBe(200);
    expect(await keysOf(cellA.databaseUrl, A)).toEqual(['a-1', 'a-2']);
    expect(await keysOf(cellB.databaseUrl, A)).toEqual([]);
    expect(await keysOf(cellB.databaseUrl, B)).toEqual(['b-1']);
    expect(await keysOf(cellA.databaseUrl, B)).toEqual([]);
    // Reads come back through the router from the same cell.
    const got = await call(router, 'GET', '/api/v1/kv/orders/b-1', undefined, { 'x-queen-tenant': B });
    expect(got.status).toBe(200);
    expect(got.body.value).toEqual({ tenant: B });
  });

  test('a tenant the map does not name is refused 403 tenant_unplaced, a call without a tenant 400 tenant_required, both JSON', async () => {
    const unplaced = await put(C, 'c-1');
    expect(unplaced.status).toBe(403);
    expect(unplaced.headers.get('content-type')).toMatch(/^application\/json/);
    expect(unplaced.body).toEqual({ error: 'tenant_unplaced', message: expect.stringContaining('placed on no cell') });
    const none = await call(router, 'GET', '/api/v1/kv/orders/x');
    expect(none.status).toBe(400);
    expect(none.body).toEqual({ error: 'tenant_required', message: expect.stringContaining('x-queen-tenant') });
    expect(await keysOf(cellA.databaseUrl, C)).toEqual([]);
    expect(await keysOf(cellB.databaseUrl, C)).toEqual([]);
  });

  test("a cell that is down is a JSON 503 cell_unavailable with Retry-After for its tenants alone", async () => {
    expect(await runtime(socket, 'disable server cell-b/cell-b')).toBe('\n');
    try {
      const down = await put(B, 'b-2');
      expect(down.status).toBe(503);
      expect(down.headers.get('retry-after')).toBe('1');
      expect(down.body).toEqual({ error: 'cell_unavailable', message: expect.stringContaining('nothing was sent') });
      expect((await put(A, 'a-3')).status).toBe(200);
    } finally {
      await runtime(socket, 'enable server cell-b/cell-b');
    }
    expect(await keysOf(cellB.databaseUrl, B)).toEqual(['b-1']);
  });

  test('a placement added through the runtime API routes at once, with no reload', async () => {
    const map = path.join(dir, 'placement.map');
    expect(await runtime(socket, `add map ${map} ${C} cell-b`)).toBe('\n');
    expect((await put(C, 'c-2')).status).toBe(200);
    expect(await keysOf(cellB.databaseUrl, C)).toEqual(['c-2']);
    // Moved (the placement flipped; moving the rows is the tenant move's job): later calls go to A.
    expect(await runtime(socket, `set map ${map} ${C} cell-a`)).toBe('\n');
    expect((await put(C, 'c-3')).status).toBe(200);
    expect(await keysOf(cellA.databaseUrl, C)).toEqual(['c-3']);
    // The same HAProxy process all along.
    expect(haproxy.exitCode).toBeNull();
    expect(haproxy.pid).toBe(pid);
  });
});
