// Boot refusals, seen from outside: the process exits with status 1 and a log line that says why.
import { createTestDatabase } from '../support/database';
import { spawnApi } from '../support/processes';

test('QUEEN_TENANCY_HEADER=1 without QUEEN_KV_TRUSTED_PROXY=1 refuses to boot, and says why', async () => {
  const api = spawnApi({ QUEEN_TENANCY_HEADER: '1', DATABASE_URL: 'postgres://127.0.0.1:1/none', QUEEN_WORKERS: '1' });
  const { code } = await api.exited;
  expect(code).toBe(1);
  const line = api.lines.find((l) => l.variable === 'QUEEN_KV_TRUSTED_PROXY')!;
  expect(line).toBeDefined();
  expect(line.level).toBe(60);
  expect(line.msg).toMatch(/QUEEN_KV_TRUSTED_PROXY/);
  expect(line.msg).toMatch(/x-queen-tenant/);
  expect(line.msg).toMatch(/will not start/);
});

test('with the trusted-proxy affirmation the same configuration is accepted (it gets as far as the database)', async () => {
  const db = await createTestDatabase();
  const api = spawnApi({
    QUEEN_TENANCY_HEADER: '1',
    QUEEN_KV_TRUSTED_PROXY: '1',
    QUEEN_ADMIN_TOKEN: 'boot-test-token',
    DATABASE_URL: db.url,
    QUEEN_WORKERS: '1',
    DB_POOL_SIZE: '5000',
  });
  try {
    // DB_POOL_SIZE is chosen so that the connection budget refuses it: the config parse passed.
    const { code } = await api.exited;
    expect(code).toBe(1);
    expect(api.output()).not.toMatch(/QUEEN_KV_TRUSTED_PROXY: /);
    expect(api.output()).toMatch(/schema applied/);
  } finally {
    await api.stop();
    await db.drop();
  }
});

test('a configuration whose pools cannot fit in max_connections refuses to boot, and says why', async () => {
  const db = await createTestDatabase();
  // 3 workers x (2000/3 message + 32/3 KV + 1 listener) is far above the test server's 400.
  const api = spawnApi({ DATABASE_URL: db.url, QUEEN_WORKERS: '3', DB_POOL_SIZE: '2000', QUEEN_KV_POOL_SIZE: '32' });
  try {
    const { code } = await api.exited;
    expect(code).toBe(1);
    const lines = api.lines;
    const refusal = lines.find((l) => /the pools need \d+ connections but the server allows \d+/.test(String(l.msg)))!;
    expect(refusal).toBeDefined();
    expect(refusal.level).toBe(60);
    expect(refusal.msg).toMatch(/max_connections/);
    // Nothing was forked: no worker ever said it was listening.
    expect(lines.some((l) => l.msg === 'API worker listening')).toBe(false);
  } finally {
    await api.stop();
    await db.drop();
  }
});
