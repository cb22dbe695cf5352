// QUEEN_ADMIN_TOKEN: the operator's surface (/api/v1/system/*) answers only the bearer of the token,
// and a cell that takes its tenant from a header does not boot without one.
import { freePort } from '../../shared/embeddedPostgres';
import { call } from '../support/http';
import { spawnApi, untilHealthy } from '../support/processes';
import { useApi } from '../support/api';
import { createTestDatabase } from '../support/database';

describe('with QUEEN_ADMIN_TOKEN set', () => {
  const TOKEN = 'op-secret-7f3a';
  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
  const api = useApi({ QUEEN_ADMIN_TOKEN: TOKEN });

  test.each([
    ['no Authorization', {}],
    ['a wrong token', bearer('op-secret-7f3b')],
    ['a token of another length', bearer('op')],
    ['another scheme', { authorization: `Basic ${TOKEN}` }],
  ])('%s: every system route is 401 unauthorized, and no switch moves', async (_name, headers) => {
    const flip = await call(api.url, 'POST', '/api/v1/system/kv-timers', { kv: false }, headers);
    expect([flip.status, flip.body.error]).toEqual([401, 'unauthorized']);
    expect(flip.headers.get('www-authenticate')).toMatch(/^Bearer /);
    for (const path of ['/api/v1/system/kv-timers', '/api/v1/system/cluster']) {
      const read = await call(api.url, 'GET', path, undefined, headers);
      expect([path, read.status, read.body.error]).toEqual([path, 401, 'unauthorized']);
    }
    expect(api.server.ops.switches.snapshot().kv).toBe(true);
    expect((await call(api.url, 'PUT', '/api/v1/kv/admin/k', { value: 1, forever: true })).status).toBe(200);
  });

  test('the bearer of the token flips and reads; the rest of the API never asks for it', async () => {
    const off = await call(api.url, 'POST', '/api/v1/system/kv-timers', { kv: false }, bearer(TOKEN));
    expect([off.status, off.body.kv]).toEqual([200, false]);
    expect((await call(api.url, 'GET', '/api/v1/kv/admin/k')).body.error).toBe('kv_disabled');
    const on = await call(api.url, 'POST', '/api/v1/system/kv-timers', { kv: true }, bearer(TOKEN));
    expect([on.status, on.body.kv]).toEqual([200, true]);
    expect((await call(api.url, 'GET', '/api/v1/system/cluster', undefined, bearer(TOKEN))).status).toBe(200);
    // The scheme is case-insensitive, the token is not.
    expect((await call(api.url, 'GET', '/api/v1/system/kv-timers', undefined, { authorization: `bearer ${TOKEN}` })).status).toBe(200);
    expect((await call(api.url, 'GET', '/api/v1/system/kv-timers', undefined, bearer(TOKEN.toUpperCase()))).status).toBe(401);
    expect((await call(api.url, 'GET', '/api/v1/kv/admin/k')).status).toBe(200);
    expect((await call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'admin', payload: 1 }] })).status).toBe(201);
    expect((await call(api.url, 'GET', '/metrics')).status).toBe(200);
  });
});

test('a cell that takes its tenant from a header refuses to boot without it, naming it; with it, it boots and never logs the token', async () => {
  const db = await createTestDatabase();
  const tenancy = { DATABASE_URL: db.url, QUEEN_WORKERS: '1', QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1', DB_POOL_SIZE: '10' };
  const closedPort = await freePort();
  const open = spawnApi({ ...tenancy, PORT: String(await freePort()) });
  const closed = spawnApi({ ...tenancy, PORT: String(closedPort), QUEEN_ADMIN_TOKEN: 'never-logged-9d1' });
  try {
    expect((await open.exited).code).toBe(1);
    const refusal = open.lines.find((l) => l.variable === 'QUEEN_ADMIN_TOKEN');
    expect(refusal).toMatchObject({ level: 60, msg: expect.stringMatching(/QUEEN_ADMIN_TOKEN.*\/api\/v1\/system/) });
    // Refused at the configuration: nothing was served, not even the schema applied.
    expect(open.output()).not.toMatch(/schema applied|API worker listening/);
    await untilHealthy(closed, closedPort);
    expect(closed.output()).not.toContain('never-logged-9d1');
  } finally {
    await Promise.all([open.stop(), closed.stop()]);
    await db.drop();
  }
});
