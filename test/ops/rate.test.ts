// Rung 4: the token buckets, and the order of the whole ladder: a refused call gets the outermost reason.
import { grant, put } from './helpers';
import { call, kv } from '../support/http';
import { counter } from '../support/metrics';
import { useApi } from '../support/api';
import { elapse } from '../support/wait';

/** A tenant's read and write buckets set alike (tokens a second, burst), under the cell's ceiling. */
const kvRates = (perSec: number, burst: number, cellOpsPerSec: number): Record<string, string> => ({
  QUEEN_KV_READS_PER_SEC: String(perSec),
  QUEEN_KV_READS_BURST: String(burst),
  QUEEN_KV_WRITES_PER_SEC: String(perSec),
  QUEEN_KV_WRITES_BURST: String(burst),
  QUEEN_KV_CELL_OPS_PER_SEC: String(cellOpsPerSec),
});

describe('token buckets', () => {
  // One token a second, so the arithmetic of Retry-After is visible; bursts of 10.
  const api = useApi(kvRates(1, 10, 1000));

  test('a batch of n operations costs n tokens, and Retry-After is computed from the bucket', async () => {
    const ten = Array.from({ length: 10 }, (_, i) => put(`w${i}`));
    expect((await kv(api.url, ten)).status).toBe(200);
    const before = await counter(api.url, 'queen_kv_refusals_total', { code: 'rate_limited' });

    const five = await kv(api.url, ten.slice(0, 5));
    expect(five.status).toBe(429);
    expect(five.body.error).toBe('rate_limited');
    // Five tokens at one a second, from an empty bucket: come back in about five seconds.
    expect(Number(five.headers.get('retry-after'))).toBeGreaterThanOrEqual(4);
    expect(Number(five.headers.get('retry-after'))).toBeLessThanOrEqual(5);

    const one = await call(api.url, 'PUT', '/api/v1/kv/ops/w0', { value: 2, forever: true });
    expect(one.status).toBe(429);
    expect(one.headers.get('retry-after')).toBe('1');
    expect(await counter(api.url, 'queen_kv_refusals_total', { code: 'rate_limited' })).toBe(before + 2);

    // Reads have their own bucket: the drained write bucket does not stop them.
    const reads = await kv(api.url, [{ op: 'get', ns: 'ops', key: 'w0' }, { op: 'getMany', ns: 'ops', keys: ['w1', 'w2'] }]);
    expect(reads.status).toBe(200);
  });
});

describe('Retry-After is the wait until the refused call, as sent, is admitted', () => {
  // Four tokens a second, bursts of 8: a 6-operation call on an emptied bucket needs 1.5 s, and
  // the bucket gains less than one token (250 ms) while the call that emptied it runs.
  const api = useApi(kvRates(4, 8, 1000));

  const gets = (n: number, prefix = 'r') => Array.from({ length: n }, (_, i) => ({ op: 'get', ns: 'ops', key: `${prefix}${i}` }));
  const puts = (n: number, prefix: string) => Array.from({ length: n }, (_, i) => put(`${prefix}${i}`));
  // The elapse() calls below are the subject, not waits: buckets refill with time, and Retry-After is one.

  /** Both buckets emptied at once, as by a tenant that has used all it had (each refills to its burst in 2 s). */
  async function emptied() {
    await elapse(2000);
    expect((await kv(api.url, [...gets(8, 'g'), ...puts(8, 'e')])).status).toBe(200);
  }

  /** Refused with 429; then, after waiting the Retry-After it was given, the same call is admitted. */
  async function refusedThenAdmitted(send: () => Promise<{ status: number; headers: Headers; body: any }>) {
    const refused = await send();
    expect([refused.status, refused.body.error]).toEqual([429, 'rate_limited']);
    const seconds = Number(refused.headers.get('retry-after'));
    expect(seconds).toBeGreaterThanOrEqual(1);
    // A timer may fire a millisecond early; the promise is about seconds, not that.
    await elapse(seconds * 1000 + 20);
    const again = await send();
    expect(again.status).toBe(200);
    return seconds;
  }

  test('a batch of 6 gets on emptied buckets: waiting Retry-After admits the same batch', async () => {
    await emptied();
    // 6 tokens at 4 a second: 1.5 s, said as 2 (it was 1, the wait for one token, and the batch came back too soon).
    expect(await refusedThenAdmitted(() => kv(api.url, gets(6)))).toBe(2);
  });

  test('getMany is one token per operation, whatever its keys; 6 of them wait for 6 tokens', async () => {
    await elapse(2000);
    // One getMany of 100 keys is one token: admitted, however many keys, while a token is left.
    const keys = Array.from({ length: 100 }, (_, i) => `m${i}`);
    expect((await kv(api.url, [...gets(7, 'g'), { op: 'getMany', ns: 'ops', keys }, ...puts(8, 'e')])).status).toBe(200);
    const many = Array.from({ length: 6 }, (_, i) => ({ op: 'getMany', ns: 'ops', keys: [`m${3 * i}`, `m${3 * i + 1}`, `m${3 * i + 2}`] }));
    expect(await refusedThenAdmitted(() => kv(api.url, many))).toBe(2);
  });

  test('the transaction wire: its kv array waits for all its tokens, and a kv array above the burst is refused as such', async () => {
    const wire = (ops: unknown[]) => call(api.url, 'POST', '/api/v1/transaction', { kv: ops });
    await emptied();
    // 6 writes and 2 reads: both buckets must hold them; the writes need 1.5 s.
    expect(await refusedThenAdmitted(() => wire([...puts(6, 'ty'), ...gets(2)]))).toBe(2);

    // 9 writes can never be paid from a bucket of 8: not a 429 that no wait would honour.
    const big = await wire(puts(9, 'tz'));
    expect([big.status, big.body.error]).toEqual([400, 'rate_limit_exceeds_burst']);
    expect(big.headers.get('retry-after')).toBeNull();
    expect(big.body.message).toMatch(/needs 9 write tokens/);
    expect(big.body.message).toMatch(/never holds more than 8 \(QUEEN_KV_WRITES_BURST\)/);
  });

  test('a batch needing more than the burst is 400 rate_limit_exceeds_burst on a full bucket too, and takes nothing', async () => {
    await elapse(2000);
    const before = await counter(api.url, 'queen_kv_refusals_total', { code: 'rate_limit_exceeds_burst' });
    const big = await kv(api.url, gets(9));
    expect([big.status, big.body.error]).toEqual([400, 'rate_limit_exceeds_burst']);
    expect(big.body.message).toMatch(/needs 9 read tokens/);
    expect(await counter(api.url, 'queen_kv_refusals_total', { code: 'rate_limit_exceeds_burst' })).toBe(before + 1);
    // Nothing was taken: the whole burst is still there.
    expect((await kv(api.url, gets(8))).status).toBe(200);
  });
});

describe("the burst a call is measured against is the cell's bucket's, however many workers", () => {
  // Two workers configured: the bursts are still the cell's (reads 40, writes 40, the ceiling 60).
  const api = useApi({ QUEEN_WORKERS: '2', ...kvRates(20, 40, 60) });

  test('over a bucket, or over the cell ceiling: 400, naming both numbers; the whole burst is admissible', async () => {
    const gets = (n: number) => Array.from({ length: n }, (_, i) => ({ op: 'get', ns: 'ops', key: `s${i}` }));
    const reads = await kv(api.url, gets(41));
    expect([reads.status, reads.body.error]).toEqual([400, 'rate_limit_exceeds_burst']);
    expect(reads.body.message).toMatch(/needs 41 read tokens .* never holds more than 40 \(QUEEN_KV_READS_BURST\), one bucket for the whole cell/);

    // 31 reads and 31 writes fit their buckets (40 each) but not the ceiling of 60.
    const mixed = await kv(api.url, [...gets(31), ...Array.from({ length: 31 }, (_, i) => put(`t${i}`))]);
    expect([mixed.status, mixed.body.error]).toEqual([400, 'rate_limit_exceeds_burst']);
    expect(mixed.body.message).toMatch(/needs 62 KV tokens .* this cell's KV ceiling never holds more than 60/);

    // The whole burst, not a worker's half of it, is admissible in one call.
    expect((await kv(api.url, gets(40))).status).toBe(200);
  });
});

describe('the cell ceiling', () => {
  const api = useApi({ QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1', QUEEN_ADMIN_TOKEN: 'rate-test-token', QUEEN_KV_REQUIRE_GRANT: '0', QUEEN_KV_CELL_OPS_PER_SEC: '20' });

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
  const tenant = '33333333-3333-4333-8333-333333333333';
  const as = { 'x-queen-tenant': tenant };
  const api = useApi({
    QUEEN_TENANCY_HEADER: '1',
    QUEEN_KV_TRUSTED_PROXY: '1',
    QUEEN_ADMIN_TOKEN: 'rate-test-token',
    QUEEN_KV_WRITES_PER_SEC: '1',
    QUEEN_KV_WRITES_BURST: '3',
  });

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

    // Lift the quota: now only the rate applies.
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

describe('a malformed timer call takes no rate token', () => {
  const api = useApi({
    QUEEN_KV_WRITES_PER_SEC: '1',
    QUEEN_KV_WRITES_BURST: '2',
    QUEEN_KV_CELL_OPS_PER_SEC: '1000',
  });

  test('ten refused shapes, then the schedule and the reschedule are still admitted', async () => {
    const id = '00000000-0000-4000-8000-000000000001';
    for (let i = 0; i < 5; i++) {
      expect((await call(api.url, 'POST', '/api/v1/timers', '[1]')).body.error).toBe('invalid_json');
      expect((await call(api.url, 'POST', `/api/v1/timers/${id}/reschedule`, { delaySeconds: 5, queue: 'x' })).body.error).toBe(
        'timers_body_conflicts_with_path',
      );
    }
    const scheduled = await call(api.url, 'POST', '/api/v1/timers', { queue: 'rate-shape', payload: 1, delaySeconds: 60 });
    expect(scheduled.status).toBe(200);
    const moved = await call(api.url, 'POST', `/api/v1/timers/${scheduled.body.timerId}/reschedule`, { delaySeconds: 90 });
    expect(moved.status).toBe(200);
    expect(moved.body).toMatchObject({ rescheduled: true });
  });
});
