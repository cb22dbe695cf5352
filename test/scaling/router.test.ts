// The router of deploy/router/ (docs/scaling.md), run as shipped but for its addresses: a real
// HAProxy in front of two cells, each with its own PostgreSQL database, routing by the tenant
// header through placement.map. A tenant's calls land on its cell and nowhere else; a tenant the
// map does not name, a call with no tenant, and a cell that is down are answered in the cell's
// JSON shape; a placement changed through HAProxy's runtime API takes effect without a reload.
// Needs Debian's `haproxy`; without it the suite says it was not run and why.
import { Client } from 'pg';
import { TestApi } from '../support/api';
import { call } from '../support/http';
import { HAPROXY_MISSING, Router, useRoutedCells } from '../support/router';

const reason = HAPROXY_MISSING;
if (reason) process.stderr.write(`test/scaling/router.test.ts: not run: ${reason}\n`);

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

(reason ? describe.skip : describe)(reason ? `the tenant router: not run, ${reason}` : 'the tenant router (HAProxy, placement by map)', () => {
  let cellA: TestApi;
  let cellB: TestApi;
  let r: Router;
  let router: string;
  let pid: number;

  const cells = useRoutedCells('router-test');
  beforeAll(async () => {
    ({ a: cellA, b: cellB, router: r } = cells);
    router = r.url;
    pid = await haproxyPid();
    expect(pid).toBe(r.proc.pid);
  });

  /** The pid HAProxy itself reports on its runtime API (`show info`). */
  const haproxyPid = async () => Number(/^Pid: (\d+)$/m.exec(await r.runtime('show info'))?.[1]);
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
    expect(await r.runtime('disable server cell-b/cell-b')).toBe('\n');
    try {
      const down = await put(B, 'b-2');
      expect(down.status).toBe(503);
      expect(down.headers.get('retry-after')).toBe('1');
      expect(down.body).toEqual({ error: 'cell_unavailable', message: expect.stringContaining('nothing was sent') });
      expect((await put(A, 'a-3')).status).toBe(200);
    } finally {
      await r.runtime('enable server cell-b/cell-b');
    }
    expect(await keysOf(cellB.databaseUrl, B)).toEqual(['b-1']);
  });

  test('a placement added through the runtime API routes at once, with no reload', async () => {
    const map = r.map;
    expect(await r.runtime(`add map ${map} ${C} cell-b`)).toBe('\n');
    expect((await put(C, 'c-2')).status).toBe(200);
    expect(await keysOf(cellB.databaseUrl, C)).toEqual(['c-2']);
    // Moved (the placement flipped; moving the rows is the tenant move's job): later calls go to A.
    expect(await r.runtime(`set map ${map} ${C} cell-a`)).toBe('\n');
    expect((await put(C, 'c-3')).status).toBe(200);
    expect(await keysOf(cellA.databaseUrl, C)).toEqual(['c-3']);
    // The same HAProxy process all along: the one that answers the runtime API is the one started
    // (a reload would answer from a new process), and it has not exited.
    expect(r.proc.exitCode).toBeNull();
    expect(await haproxyPid()).toBe(pid);
  });
});
