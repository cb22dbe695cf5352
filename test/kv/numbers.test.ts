// Numbers are never narrowed: the request's JSON text goes to PostgreSQL as text and the jsonb
// text comes back into the response as is. Every check reads the raw response text, because
// JSON.parse in the test would narrow the very number under test.
import { startKv, KvHarness } from './harness';

let h: KvHarness;
beforeAll(async () => {
  h = await startKv();
});
afterAll(() => h?.close());

const BIG = '12345678901234567890';
const FINE = '0.1000000000000000055511151231257827';
const valueIs = (n: string) => new RegExp(`"value": ?${n.replace('.', '\\.')}[,}]`);

const post = (body: string) => h.call('POST', '/api/v1/kv', body);

test.each([BIG, FINE, '-98765432109876543210.000000000000000001', '1.50', '100000000000000000000000000000000000001'])(
  '%s round-trips exactly through put and get',
  async (n) => {
    const key = `n${n}`;
    const put = await post(`{"operations":[{"op":"put","ns":"num","key":"${key}","value":${n},"forever":true}]}`);
    expect(put.status).toBe(200);
    expect(put.text).toMatch(valueIs(n));
    const get = await post(`{"operations":[{"op":"get","ns":"num","key":"${key}"}]}`);
    expect(get.text).toMatch(valueIs(n));
    expect((await h.row('num', key))!.value_text).toBe(n);
  },
);

test('exact numbers inside objects and arrays come back through every read: get, getMany, getPrefix, the path route', async () => {
  const value = `{"id":${BIG},"p":[${FINE},${BIG}]}`;
  await post(`{"operations":[{"op":"put","ns":"num","key":"deep:1","value":${value},"forever":true}]}`);
  const reads = [
    await post('{"operations":[{"op":"get","ns":"num","key":"deep:1"}]}'),
    await post('{"operations":[{"op":"getMany","ns":"num","keys":["deep:1"]}]}'),
    await post('{"operations":[{"op":"getPrefix","ns":"num","prefix":"deep:"}]}'),
    await h.call('GET', '/api/v1/kv/num/deep:1'),
  ];
  for (const res of reads) {
    expect(res.status).toBe(200);
    expect(res.text).toMatch(new RegExp(`"id": ?${BIG}[,}]`));
    expect(res.text).toMatch(new RegExp(`\\[${FINE.replace('.', '\\.')}, ?${BIG}\\]`));
  }
});

test('the path route PUT keeps exact numbers too', async () => {
  const res = await h.call('PUT', '/api/v1/kv/num/path', `{"value":${BIG},"forever":true}`);
  expect(res.text).toMatch(valueIs(BIG));
  expect((await h.row('num', 'path'))!.value_text).toBe(BIG);
});

test('a loser of putIfAbsent carries the winner value exactly', async () => {
  await post(`{"operations":[{"op":"putIfAbsent","ns":"num","key":"race","value":${FINE},"forever":true}]}`);
  const lost = await post('{"operations":[{"op":"putIfAbsent","ns":"num","key":"race","value":1,"forever":true}]}');
  expect(lost.body.results[0].applied).toBe(false);
  expect(lost.text).toMatch(valueIs(FINE));
});

test('incr with an exact delta on an exact counter', async () => {
  await post(`{"operations":[{"op":"incr","ns":"num","key":"ctr","delta":${BIG},"forever":true}]}`);
  const res = await post(`{"operations":[{"op":"incr","ns":"num","key":"ctr","delta":${FINE},"forever":true}]}`);
  expect(res.text).toMatch(valueIs(`${BIG}${FINE.slice(1)}`));
});

test('expect accepts a version as large as a bigint without narrowing it', async () => {
  // 2^63 - 1: a legal version that a double cannot represent. It matches nothing, so absent.
  const res = await post('{"operations":[{"op":"put","ns":"num","key":"fence","value":1,"forever":true,"expect":9223372036854775807}]}');
  expect(res.status).toBe(200);
  expect(res.body.results[0]).toMatchObject({ applied: false, reason: 'absent' });
  expect(await h.row('num', 'fence')).toBeNull();
  const over = await post('{"operations":[{"op":"put","ns":"num","key":"fence","value":1,"forever":true,"expect":9223372036854775808}]}');
  expect(over.status).toBe(400);
  expect(over.body.error).toBe('kv_expect_invalid');
});

test('the transaction wire keeps exact numbers too: its answers, and the winner value of a lost required', async () => {
  const wire = (body: string) => h.call('POST', '/api/v1/transaction', body);
  const put = await wire(`{"kv":[{"op":"put","ns":"num","key":"wire","value":{"n":${BIG},"f":${FINE}},"forever":true},{"op":"incr","ns":"num","key":"wire-ctr","delta":${BIG},"forever":true}]}`);
  expect(put.status).toBe(200);
  expect(put.text).toContain(`"n": ${BIG}`);
  expect(put.text).toContain(`"f": ${FINE}`);
  expect(put.text).toMatch(valueIs(BIG));
  const lost = await wire('{"kv":[{"op":"putIfAbsent","ns":"num","key":"wire","value":1,"forever":true,"required":true}]}');
  expect(lost.status).toBe(200);
  expect(lost.text).toMatch(/"reason": ?"kv_precondition"/);
  expect(lost.text).toContain(`"n": ${BIG}`);
  expect(lost.text).toContain(`"f": ${FINE}`);
});
