// Rung 4: the token buckets, and the order of the whole ladder: a refused call gets the outermost reason.
import { call, kv, startTestApi, TestApi } from '../support/api';
import { grant, metric, put } from './helpers';

describe('token buckets', () => {
  let api: TestApi;
  beforeAll(async () => {
    // One token a second, so the arithmetic of Retry-After is visible; bursts of 10.
    api = await startTestApi({
      QUEEN_KV_READS_PER_SEC: '1',
      QUEEN_KV_READS_BURST: '10',
      QUEEN_KV_WRITES_PER_SEC: '1',
      QUEEN_KV_WRITES_BURST: '10',
      QUEEN_KV_CELL_OPS_PER_SEC: '1000',
    });
  });
  afterAll(() => api.close());

  test('a batch of n operations costs n tokens, and Retry-After is computed from the bucket', async () => {
    const ten = Array.from({ length: 10 }, (_, i) => put(`w${i}`));
    expect((await kv(api.url, ten)).status).toBe(200);
    const before = await metric(api.url, 'queen_kv_refusals_total', 'code="rate_limited"');

    const five = await kv(api.url, ten.slice(0, 5));
    expect(five.status).toBe(429);
    expect(five.body.error).toBe('rate_limited');
    // Five tokens at one a second, from an empty bucket: come back in about five seconds.
    expect(Number(five.headers.get('retry-after'))).toBeGreaterThanOrEqual(4);
    expect(Number(five.headers.get('retry-after'))).toBeLessThanOrEqual(5);

    const one = await call(api.url, 'PUT', '/api/v1/kv/ops/w0', { value: 2, forever: true });
    expect(one.status).toBe(429);
    expect(one.headers.get('retry-after')).toBe('1');
    expect(await metric(api.url, 'queen_kv_refusals_total', 'code="rate_limited"')).toBe(before + 2);

    // Reads have their own bucket: the drained write bucket does not stop them.
    const reads = await kv(api.url, [{ op: 'get', ns: 'ops', key: 'w0' }, { op: 'getMany', ns: 'ops', keys: ['w1', 'w2'] }]);
    expect(reads.status).toBe(200);
  });
});

describe('a batch above the burst', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startTestApi({ QUEEN_KV_READS_PER_SEC: '1', QUEEN_KV_READS_BURST: '10' });
  });
  afterAll(() => api.close());

  test('is admitted from a full bucket and leaves it in debt, so the long-run rate holds', async () => {
    const twelve = Array.from({ length: 12 }, (_, i) => ({ op: 'get', ns: 'ops', key: `r${i}` }));
    expect((await kv(api.url, twelve)).status).toBe(200);
    const next = await kv(api.url, [{ op: 'get', ns: 'ops', key: 'r0' }]);
    expect(next.status).toBe(429);
    // Two tokens of debt plus the one asked for, at one a second.
    expect(Number(next.headers.get('retry-after'))).toBeGreaterThanOrEqual(2);
  });
});

describe('the cell ceiling', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startTestApi({ QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1', QUEEN_ADMIN_TOKEN: 'rate-test-token', QUEEN_KV_REQUIRE_GRANT: '0', QUEEN_KV_CELL_OPS_PER_SEC: '20' });
  });
  afterAll(() => api.close());

  test('tenants each inside their own limit are stopped together by the cell ceiling', async () => {
    const tenants = ['11111111-1111-4111-8111-111111111111', '22222222-2222-4222-8222-222222222222'];
    const batch = Array.from({ length: 10 }, (_, i) => ({ op: 'get', ns: 'ops', key: `c${i}` }));
    expect((await kv(api.url, batch, { 'x-queen-tenant': tenants[0] })).status).toBe(200);
    expect((await kv(api.url, batch, { 'x-queen-tenant': tenants[1] })).status).toBe(200);
    const third = await kv(api.url, batch, { 'x-queen-tenant': tenants[0] });
    expect(third.status).toBe(429);
    expect(third.body.error).toBe('rate_limited');
    expect(third.body.message).toMatch(/ceiling/);
    expect(third.headers.get('retry-after')).not.toBeNull();
  });
});

describe('the outermost reason wins', () => {
  let api: TestApi;
  const tenant = '33333333-3333-4333-8333-333333333333';
  const as = { 'x-queen-tenant': tenant };
  beforeAll(async () => {
    api = await startTestApi({
      QUEEN_TENANCY_HEADER: '1',
      QUEEN_KV_TRUSTED_PROXY: '1',
      QUEEN_ADMIN_TOKEN: 'rate-test-token',
      QUEEN_KV_WRITES_PER_SEC: '1',
      QUEEN_KV_WRITES_BURST: '3',
    });
  });
  afterAll(() => api.close());

  test('switch > grant > quota > rate', async () => {
    const write = () => kv(api.url, [put('o1'), put('o2'), put('o3'), put('o4')], as);

    // Everything applies at once: not granted, and the switch is off.
    await call(api.url, 'POST', '/api/v1/system/kv-timers', { kv: false }, { authorization: 'Bearer rate-test-token' });
    let res = await write();
    expect([res.status, res.body.error]).toEqual([503, 'kv_disabled']);
    expect(res.headers.get('retry-after')).toBe('30');
    await call(api.url, 'POST', '/api/v1/system/kv-timers', { kv: true }, { authorization: 'Bearer rate-test-token' });

    // Not granted, and the batch (4 writes) is over the burst of 3 and the bucket has been used: grant wins.
    res = await write();
    expect([res.status, res.body.error]).toEqual([403, 'feature_gated']);

    // Granted with max_rows 3: the 4-row batch is over quota and, the bucket holding 3, over the rate: quota wins.
    await grant(api, tenant, { maxRows: 3 });
    res = await write();
    expect([res.status, res.body.error]).toEqual([403, 'kv_quota_exceeded']);
    expect(res.headers.get('retry-after')).toBeNull();

    // Reads are not on rung 3, so a read of the over-quota tenant goes on to the next rung.
    const reads = Array.from({ length: 3 }, (_, i) => ({ op: 'get', ns: 'ops', key: `o${i}` }));
    expect((await kv(api.url, reads, as)).status).toBe(200);

    // Lift the quota: now only the rate applies; the bucket (burst 3) cannot pay 4 until full, then can.
    await grant(api, tenant, { maxRows: null });
    expect((await kv(api.url, [put('p1'), put('p2'), put('p3')], as)).status).toBe(200);
    res = await kv(api.url, [put('p4')], as);
    expect([res.status, res.body.error]).toEqual([429, 'rate_limited']);
    expect(res.headers.get('retry-after')).toBe('1');
    // And another tenant, never granted, is still told it is gated, not limited.
    res = await kv(api.url, [put('p4')], { 'x-queen-tenant': '44444444-4444-4444-8444-444444444444' });
    expect([res.status, res.body.error]).toEqual([403, 'feature_gated']);
  });
});
