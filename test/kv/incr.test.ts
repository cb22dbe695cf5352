// incr: numeric, atomic, with min/max as the admission decision. Crossing a bound writes nothing
// and answers limit with the current value; type is only for a live non-number row.
import { startKv, KvHarness } from './harness';

let h: KvHarness;
beforeAll(async () => {
  h = await startKv();
});
afterAll(() => h?.close());

const incr = (key: string, extra: Record<string, unknown> = {}) => h.one({ op: 'incr', ns: 'q', key, ttlSeconds: 3600, ...extra });

test('an absent counter starts from zero; delta defaults to 1', async () => {
  expect(await incr('a')).toMatchObject({ op: 'incr', applied: true, found: true, value: 1 });
  expect(await incr('a')).toMatchObject({ value: 2 });
  expect(await incr('a', { delta: 10 })).toMatchObject({ value: 12 });
  expect(await incr('a', { delta: -20 })).toMatchObject({ value: -8 });
});

test('each applied incr draws a new version', async () => {
  const a = await incr('ver');
  const b = await incr('ver');
  expect(a.version).not.toBe(b.version);
  expect((await h.row('q', 'ver'))!.version).toBe(String(b.version));
});

test('with max: reaching it applies, crossing it answers limit and writes nothing', async () => {
  expect(await incr('lim', { delta: 3, max: 5 })).toMatchObject({ applied: true, value: 3 });
  const atMax = await incr('lim', { delta: 2, max: 5 });
  expect(atMax).toMatchObject({ applied: true, value: 5 });
  const before = await h.row('q', 'lim');
  const over = await incr('lim', { delta: 1, max: 5 });
  expect(over).toMatchObject({ applied: false, reason: 'limit', found: true, value: 5, version: atMax.version });
  expect(await h.row('q', 'lim')).toEqual(before);
});

test('a limit never saturates: a delta that would cross max is refused whole, even if part would fit', async () => {
  await incr('sat', { delta: 8 });
  const res = await incr('sat', { delta: 5, max: 10 });
  expect(res).toMatchObject({ applied: false, reason: 'limit', value: 8 });
  expect((await h.row('q', 'sat'))!.value).toBe(8);
});

test('with min: going under it answers limit and writes nothing', async () => {
  await incr('floor', { delta: 2 });
  expect(await incr('floor', { delta: -2, min: 0 })).toMatchObject({ applied: true, value: 0 });
  const res = await incr('floor', { delta: -1, min: 0 });
  expect(res).toMatchObject({ applied: false, reason: 'limit', value: 0 });
  expect((await h.row('q', 'floor'))!.value).toBe(0);
});

test('an absent counter whose first delta crosses max is not created', async () => {
  const res = await incr('never', { delta: 7, max: 5 });
  expect(res).toMatchObject({ applied: false, reason: 'limit', found: false, value: null, version: 0 });
  expect(await h.row('q', 'never')).toBeNull();
});

test('reason type only on a live row whose value is not a number; nothing is written', async () => {
  for (const [key, value] of [['t1', 'text'], ['t2', { n: 1 }], ['t3', null], ['t4', [1]], ['t5', true]] as const) {
    const put = await h.one({ op: 'put', ns: 'q', key, value, forever: true });
    const res = await incr(key);
    expect(res).toMatchObject({ applied: false, reason: 'type', found: true, value, version: put.version });
    expect((await h.row('q', key))!.version).toBe(String(put.version));
  }
});

test('incr computes in numeric: decimals are exact', async () => {
  await incr('dec', { delta: 0.1 });
  await incr('dec', { delta: 0.2 });
  const res = await h.batch([{ op: 'get', ns: 'q', key: 'dec' }]);
  expect(res.text).toMatch(/"value": ?0\.3[,}]/);
});

test('incr adds past 2^64 without overflow or rounding', async () => {
  await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"put","ns":"q","key":"huge","value":18446744073709551615,"forever":true}]}');
  const res = await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"incr","ns":"q","key":"huge","delta":1,"forever":true}]}');
  expect(res.status).toBe(200);
  expect(res.text).toMatch(/"value": ?18446744073709551616[,}]/);
});

test('the bounds compare in numeric too: a max beyond double precision is honoured exactly', async () => {
  await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"put","ns":"q","key":"edge","value":9007199254740992,"forever":true}]}');
  const over = await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"incr","ns":"q","key":"edge","max":9007199254740992,"forever":true}]}');
  expect(over.body.results[0]).toMatchObject({ applied: false, reason: 'limit' });
  const ok = await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"incr","ns":"q","key":"edge","max":9007199254740993,"forever":true}]}');
  expect(ok.body.results[0].applied).toBe(true);
  expect(ok.text).toMatch(/"value": ?9007199254740993[,}]/);
});

test('the value ceiling holds for a counter: 400 kv_value_too_large, nothing written, on every path', async () => {
  // A delta of 9e131071 stored a counter of 131,072 bytes (a put of it is refused), and a second
  // one overflowed numeric: 400 invalid_json. A sum can also outgrow both of its operands.
  const path = (key: string, body: string) => h.call('PUT', `/api/v1/kv/q/${key}`, body);
  for (const [name, send] of [
    ['batch', (body: string) => h.call('POST', '/api/v1/kv', `{"operations":[{"op":"incr","ns":"q","key":"wide","forever":true,${body}}]}`)],
    ['batch of two', (body: string) => h.call('POST', '/api/v1/kv', `{"operations":[{"op":"get","ns":"q","key":"x"},{"op":"incr","ns":"q","key":"wide","forever":true,${body}}]}`)],
    ['transaction wire', (body: string) => h.call('POST', '/api/v1/transaction', `{"kv":[{"op":"incr","ns":"q","key":"wide","forever":true,${body}}]}`)],
  ] as const) {
    const huge = await send('"delta":9e131071');
    expect({ name, status: huge.status, error: huge.body.error }).toEqual({ name, status: 400, error: 'kv_value_too_large' });
    expect(await h.row('q', 'wide')).toBeNull();
  }
  expect((await path('wide', '{"value":1e65000,"forever":true}')).status).toBe(200);
  const before = await h.row('q', 'wide');
  const outgrown = await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"incr","ns":"q","key":"wide","delta":1e-16383,"forever":true}]}');
  expect([outgrown.status, outgrown.body.error, outgrown.body.index]).toEqual([400, 'kv_value_too_large', 0]);
  expect(await h.row('q', 'wide')).toEqual(before);
  // Within the ceiling it still adds, exactly.
  const fits = await h.call('POST', '/api/v1/kv', '{"operations":[{"op":"incr","ns":"q","key":"wide","delta":1e-100,"forever":true}]}');
  expect(fits.status).toBe(200);
  expect(fits.body.results[0]).toMatchObject({ applied: true });
});

test('incr takes delta, not value: a value field is a 400', async () => {
  const res = await h.batch([{ op: 'incr', ns: 'q', key: 'v', value: 3, forever: true }]);
  expect(res.status).toBe(400);
  expect(await h.row('q', 'v')).toBeNull();
});

test('the rate limiter in one call: applied is the admission decision', async () => {
  const op = { op: 'incr', ns: 'quota', key: 'acme:2026-08-17T14', delta: 1, max: 3, ttlSeconds: 3600 };
  const answers = [];
  for (let i = 0; i < 5; i++) answers.push((await h.one(op)).applied);
  expect(answers).toEqual([true, true, true, false, false]);
  expect((await h.row('quota', 'acme:2026-08-17T14'))!.value).toBe(3);
});
