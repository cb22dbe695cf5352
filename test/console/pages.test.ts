// The web console (/console, docs/console.md) over HTTP on a cell with tenancy: login required, the
// cookie's attributes, every page's status and security headers, every value escaped (a payload,
// a transaction id, a key and a value holding markup render as text), CSRF refused without its
// token, each action seen by a client afterwards, bad input a 4xx page, no payload in any log.
import pino from 'pino';
import { loadConfig } from '../../shared/config';
import { startApiServer } from '../../services/api/server';
import { sql } from '../support/database';
import { useApi, withTestApi } from '../support/api';
import { call } from '../support/http';
import { startTestSweeper, sweep } from '../support/sweeper';
import { waitFor } from '../support/wait';

const A = 'aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa';
const B = 'bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb';
const TOKEN = 'console-test-token-31c';
const CSP = "default-src 'none'; style-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
const EVIL = '<script>alert("x")</script>';
const SECRET = 'PAYLOAD-SECRET-5e1';
const VALUE = 'VALUE-SECRET-9a2';
const OPERATOR = 'ada.lovelace@oncall';

const rawLines: string[] = [];
const api = useApi({
  QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1', QUEEN_ADMIN_TOKEN: TOKEN, QUEEN_KV_REQUIRE_GRANT: '0', QUEEN_ENCRYPTION_KEY: '7f'.repeat(32),
}, { lines: rawLines });

interface Page { status: number; headers: Headers; text: string }
/** A page of the suite's cell, or of `base`'s. */
async function get(path: string, cookie?: string, base = api.url): Promise<Page> {
  const res = await fetch(base + path, { redirect: 'manual', headers: cookie ? { cookie } : {} });
  return { status: res.status, headers: res.headers, text: await res.text() };
}
async function post(path: string, form: Record<string, string>, cookie?: string, base = api.url): Promise<Page> {
  const res = await fetch(base + path, {
    method: 'POST', redirect: 'manual', body: new URLSearchParams(form).toString(),
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...(cookie ? { cookie } : {}) },
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}
async function login(base = api.url): Promise<string> {
  const res = await post('/console/login', { token: TOKEN, operator: OPERATOR }, undefined, base);
  expect(res.status).toBe(303);
  return res.headers.get('set-cookie')!.split(';')[0];
}
const csrfOf = (text: string) => /name="csrf" value="([^"]+)"/.exec(text)![1];
function secured(p: Page): void {
  expect(p.headers.get('content-security-policy')).toBe(CSP);
  expect(p.headers.get('x-content-type-options')).toBe('nosniff');
  expect(p.headers.get('cache-control')).toBe('no-store');
}
const as = (tenant: string) => ({ 'x-queen-tenant': tenant });
async function pop(queue: string, group: string): Promise<any[]> {
  const res = await call(api.url, 'GET', `/api/v1/pop/queue/${queue}?consumerGroup=${group}`, undefined, as(A));
  return res.status === 204 ? [] : res.body.messages;
}

let cookie: string;
let deadTx: string;
let partitionId: string;
let timerId: string;

beforeAll(async () => {
  cookie = await login();
  await call(api.url, 'POST', '/api/v1/configure', { queue: 'orders', options: { retryLimit: 0, retryDelay: 0 } }, as(A));
  expect((await call(api.url, 'POST', '/api/v1/push', { items: [
    { queue: 'orders', partition: 'p1', payload: { html: EVIL, secret: SECRET }, transactionId: `tx-${EVIL}` },
    { queue: 'orders', partition: 'p1', payload: { n: 2, secret: SECRET }, transactionId: 'tx-2' },
  ] }, as(A))).status).toBe(201);
  // Dead-letter the first for group billing (retryLimit 0: one failure is enough).
  const [m] = await pop('orders', 'billing');
  deadTx = m.transactionId;
  partitionId = m.partitionId;
  expect((await call(api.url, 'POST', '/api/v1/ack', { transactionId: m.transactionId, partitionId: m.partitionId, status: 'failed', error: `boom ${EVIL}`, leaseId: m.leaseId, consumerGroup: 'billing' }, as(A))).body.deadLetter).toBe(true);
  // The other group has not moved for ten minutes: stuck.
  await pop('orders', 'audit');
  await sql(api.databaseUrl, `UPDATE queen.messages SET created_at = now() - interval '10 minutes'`);
  const t = await call(api.url, 'POST', '/api/v1/timers', { queue: 'orders', payload: { secret: SECRET }, deliverAt: new Date(Date.now() + 3_600_000).toISOString() }, as(A));
  timerId = t.body.timerId;
  expect((await call(api.url, 'PUT', `/api/v1/kv/sessions/${encodeURIComponent(`<b>${EVIL}</b>`)}`, { value: { v: VALUE, html: EVIL }, forever: true }, as(A))).status).toBe(200);
  expect((await call(api.url, 'PUT', '/api/v1/kv/sessions/user:1', { value: { v: VALUE }, forever: true }, as(A))).status).toBe(200);
  await sweep(api.databaseUrl);
});

describe('login', () => {
  test('every page asks for a session: a GET goes to the login page, a POST is 401', async () => {
    for (const path of ['/console', `/console?tenant=${A}`, '/console/queues/orders', '/console/timers', '/console/kv/sessions', '/console/tenants']) {
      const res = await get(path);
      expect([path, res.status, res.headers.get('location')]).toEqual([path, 303, '/console/login']);
    }
    const res = await post(`/console/timers/${timerId}/cancel?tenant=${A}`, { csrf: 'x' });
    expect([res.status, res.text]).toEqual([401, expect.stringContaining('401 unauthorized')]);
    // A cookie the cell did not sign, or one signed with another token, is no session.
    for (const forged of ['queen_console=1', 'queen_console=9999999999.AAAAAAAAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA']) {
      expect((await get('/console', forged)).status).toBe(303);
    }
  });

  test('the login page takes the admin token: a wrong one is 401, the right one sets an HttpOnly, SameSite=Strict cookie for /console', async () => {
    const form = await get('/console/login');
    expect(form.status).toBe(200);
    secured(form);
    expect(form.text).toContain('type="password"');
    const wrong = await post('/console/login', { token: 'console-test-token-31d' });
    expect(wrong.status).toBe(401);
    expect(wrong.headers.get('set-cookie')).toBeNull();
    expect((await post('/console/login', {})).status).toBe(401);
    // The right token without a name, or with one the audit log would not take, signs nobody in.
    for (const operator of [undefined, '', 'a b', '<b>x</b>', 'x'.repeat(65)]) {
      const unnamed = await post('/console/login', operator === undefined ? { token: TOKEN } : { token: TOKEN, operator });
      expect([operator, unnamed.status, unnamed.headers.get('set-cookie'), unnamed.text.includes('Give your name')]).toEqual([operator, 400, null, true]);
      expect(unnamed.text).not.toContain('<b>x</b>');
    }
    const right = await post('/console/login', { token: TOKEN, operator: 'grace' });
    expect([right.status, right.headers.get('location')]).toEqual([303, '/console']);
    const set = right.headers.get('set-cookie')!;
    expect(set).toMatch(/^queen_console=[^;]+; Path=\/console; HttpOnly; SameSite=Strict; Max-Age=43200$/);
    const signed = await get('/console', set.split(';')[0]);
    expect([signed.status, signed.text.includes('signed in as grace')]).toEqual([200, true]);
    // The name is inside the signed cookie: changed, the cookie is no session.
    const [name, value] = set.split(';')[0].split('=');
    const parts = value.split('.');
    parts[2] = Buffer.from('admin').toString('base64url');
    expect((await get('/console', `${name}=${parts.join('.')}`)).status).toBe(303);
  });

  test('sign out ends the cookie (with its CSRF token)', async () => {
    const mine = await login();
    const page = await get('/console', mine);
    expect((await post('/console/logout', {}, mine)).status).toBe(403);
    const out = await post('/console/logout', { csrf: csrfOf(page.text) }, mine);
    expect([out.status, out.headers.get('location')]).toEqual([303, '/console/login']);
    expect(out.headers.get('set-cookie')).toMatch(/^queen_console=; .*Max-Age=0$/);
  });
});

describe('pages', () => {
  test('every page is 200 HTML with the strict CSP, nosniff and no-store', async () => {
    const paths = ['/console', `/console?tenant=${A}`, `/console/queues/orders?tenant=${A}`, `/console/queues/orders/partitions/p1?tenant=${A}`,
      `/console/queues/orders/partitions/p1?tenant=${A}&order=oldest`, `/console/messages/${partitionId}/${encodeURIComponent(deadTx)}?tenant=${A}`,
      `/console/queues/orders/dead-letters?tenant=${A}`, `/console/timers?tenant=${A}`, `/console/timers?tenant=${A}&state=late`,
      `/console/kv?tenant=${A}`, `/console/kv/sessions?tenant=${A}&prefix=user:`, `/console/kv/sessions/keys/user%3A1?tenant=${A}`, '/console/tenants'];
    for (const path of paths) {
      const res = await get(path, cookie);
      expect([path, res.status, res.headers.get('content-type')]).toEqual([path, 200, 'text/html; charset=utf-8']);
      secured(res);
      expect(res.text).toContain('<link rel="stylesheet" href="/console/console.css">');
      // No inline script or style: the CSP would refuse them.
      expect(res.text).not.toMatch(/<script|<style|style="| on[a-z]+="/);
    }
    const css = await get('/console/console.css');
    expect([css.status, css.headers.get('content-type')]).toEqual([200, 'text/css; charset=utf-8']);
  });

  test('overview: the switches, the sweeper\'s usage, the tenant picker, and each queue\'s groups with backlog, age, dead letters; a stuck group marked', async () => {
    const picker = await get('/console', cookie);
    expect(picker.text).toContain(`href="/console?tenant=${A}"`);
    expect(picker.text).toContain('Kill switches');
    const res = await get(`/console?tenant=${A}`, cookie);
    expect(res.text).toMatch(/<tr class="stuck" data-queue="orders" data-group="audit">/);
    expect(res.text).toMatch(/data-group="billing">[\s\S]*?<a href="\/console\/queues\/orders\/dead-letters\?tenant=[^"]+&amp;consumerGroup=billing">1<\/a>/);
    expect(res.text).toMatch(/<td class="on">on<\/td>/);
    expect(res.text).toContain(A);
    // B has nothing here.
    expect((await get(`/console?tenant=${B}`, cookie)).text).toContain('No queues.');
  });

  test('every value is escaped: a payload, a transaction id, an error text, a key and a value holding <script> render as text', async () => {
    const escaped = '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;';
    for (const path of [`/console/messages/${partitionId}/${encodeURIComponent(deadTx)}?tenant=${A}`, `/console/queues/orders/dead-letters?tenant=${A}`,
      `/console/queues/orders/partitions/p1?tenant=${A}`, `/console/kv/sessions?tenant=${A}`,
      `/console/kv/sessions/keys/${encodeURIComponent(`<b>${EVIL}</b>`)}?tenant=${A}`]) {
      const res = await get(path, cookie);
      expect([path, res.status, res.text.includes('<script'), res.text.includes(escaped)]).toEqual([path, 200, false, true]);
    }
    const one = await get(`/console/messages/${partitionId}/${encodeURIComponent(deadTx)}?tenant=${A}`, cookie);
    expect(one.text).toContain(SECRET);
    expect(one.text).toContain('deadLettered');
    const key = await get(`/console/kv/sessions/keys/${encodeURIComponent(`<b>${EVIL}</b>`)}?tenant=${A}`, cookie);
    expect(key.text).toContain(VALUE);
    // Lists carry no payload or value.
    for (const path of [`/console/queues/orders/dead-letters?tenant=${A}`, `/console/queues/orders/partitions/p1?tenant=${A}`, `/console/kv/sessions?tenant=${A}`, `/console/timers?tenant=${A}`]) {
      const res = await get(path, cookie);
      expect([path, res.text.includes(SECRET) || res.text.includes(VALUE)]).toEqual([path, false]);
    }
  });

  test('a sealed payload (an encrypted queue) is opened on its message page, as the operator read opens it, and escaped', async () => {
    await call(api.url, 'POST', '/api/v1/configure', { queue: 'vault', options: { encryptionEnabled: true } }, as(A));
    expect((await call(api.url, 'POST', '/api/v1/push', { items: [{ queue: 'vault', payload: { secret: SECRET, html: EVIL }, transactionId: 'v1' }] }, as(A))).status).toBe(201);
    const list = await get(`/console/queues/vault/partitions/Default?tenant=${A}`, cookie);
    expect(list.text).toMatch(/>v1<\/a><\/td>[\s\S]*?<td>yes<\/td>/);
    const stored = await sql(api.databaseUrl, `SELECT payload::text AS p FROM queen.messages WHERE transaction_id = 'v1'`);
    expect(stored[0].p).not.toContain(SECRET);
    const href = /href="(\/console\/messages\/[^"]+\/v1\?[^"]+)"/.exec(list.text)![1].replace(/&amp;/g, '&');
    const one = await get(href, cookie);
    expect([one.status, one.text.includes(SECRET), one.text.includes('&lt;script&gt;'), one.text.includes('<script')]).toEqual([200, true, true, false]);
  });

  test('bad input is a 4xx page with its code, never a 500', async () => {
    const cases: Array<[string, number, string]> = [
      ['/console/queues/orders', 400, 'tenant_required'],
      [`/console/queues/orders?tenant=not-a-uuid`, 400, 'tenant_required'],
      [`/console/queues/-bad?tenant=${A}`, 400, 'log_invalid_queue'],
      [`/console/queues/nope?tenant=${A}`, 404, 'operator_not_found'],
      [`/console/queues/orders/partitions/p1?tenant=${A}&after=x`, 400, 'operator_invalid_cursor'],
      [`/console/queues/orders/partitions/p1?tenant=${A}&order=sideways`, 400, 'operator_invalid_order'],
      [`/console/messages/not-a-uuid/t?tenant=${A}`, 400, 'log_invalid_partition_id'],
      [`/console/messages/${A}/t?tenant=${A}`, 404, 'operator_not_found'],
      [`/console/timers?tenant=${A}&state=soon`, 400, 'operator_invalid_state'],
      [`/console/kv/.bad?tenant=${A}`, 400, 'kv_invalid_namespace'],
      [`/console/kv/sessions/keys/none?tenant=${A}`, 404, 'operator_not_found'],
      [`/console/kv/sessions/keys/%00?tenant=${A}`, 400, 'kv_invalid_key'],
      [`/console/queues/orders/dead-letters?tenant=${A}&offset=-1`, 400, 'operator_invalid_cursor'],
      [`/console/queues/orders?tenant=${A}&tenant=${B}`, 400, 'bad_request'],
      ['/console/tenants?after=x', 400, 'operator_invalid_cursor'],
      ['/console/nope', 404, 'not_found'],
      ['/console/queues/%E0%A4%A', 400, 'bad_request'],
    ];
    for (const [path, status, code] of cases) {
      const res = await get(path, cookie);
      expect([path, res.status, res.headers.get('content-type'), res.text.includes(`${status} ${code}`)]).toEqual([path, status, 'text/html; charset=utf-8', true]);
      secured(res);
    }
    const big = await post('/console/login', { token: 'x'.repeat(20_000) });
    expect(big.status).toBe(413);
  });
});

describe('actions', () => {
  test('a form without its CSRF token, or with another session\'s, is 403 and changes nothing', async () => {
    const other = await login();
    const otherCsrf = csrfOf((await get('/console', other)).text);
    const action = `/console/messages/${partitionId}/${encodeURIComponent(deadTx)}/requeue?tenant=${A}`;
    for (const form of [{ consumerGroup: 'billing' }, { consumerGroup: 'billing', csrf: '' }, { consumerGroup: 'billing', csrf: otherCsrf }] as Array<Record<string, string>>) {
      const res = await post(action, form, cookie);
      expect([res.status, res.text.includes('403 csrf_refused')]).toEqual([403, true]);
    }
    expect((await post(`/console/timers/${timerId}/cancel?tenant=${A}`, {}, cookie)).status).toBe(403);
    const dlq = await call(api.url, 'GET', '/api/v1/dlq?queue=orders', undefined, as(A));
    expect(dlq.body.total).toBe(1);
  });

  test('requeue a dead letter from its queue\'s list: the group gets it again', async () => {
    const list = await get(`/console/queues/orders/dead-letters?tenant=${A}`, cookie);
    expect(list.text).toContain('1 dead letter(s)');
    const res = await post(`/console/messages/${partitionId}/${encodeURIComponent(deadTx)}/requeue?tenant=${A}`, { csrf: csrfOf(list.text), consumerGroup: 'billing', back: 'dead-letters' }, cookie);
    expect([res.status, res.headers.get('location')]).toEqual([303, `/console/queues/orders/dead-letters?tenant=${A}&done=requeued`]);
    const after = await get(res.headers.get('location')!, cookie);
    expect(after.text).toContain('Requeued: the group gets the message again.');
    expect(after.text).toContain('No dead letters.');
    const again = await pop('orders', 'billing');
    expect(again.map((m) => m.transactionId)).toEqual([deadTx]);
    // Fail it once more, then discard it from the message page.
    await call(api.url, 'POST', '/api/v1/ack', { transactionId: again[0].transactionId, partitionId, status: 'failed', error: 'again', leaseId: again[0].leaseId, consumerGroup: 'billing' }, as(A));
    const msg = await get(`/console/messages/${partitionId}/${encodeURIComponent(deadTx)}?tenant=${A}`, cookie);
    expect(msg.text).toContain('>Discard</button>');
    const discard = await post(`/console/messages/${partitionId}/${encodeURIComponent(deadTx)}/discard?tenant=${A}`, { csrf: csrfOf(msg.text), consumerGroup: 'billing' }, cookie);
    expect(discard.headers.get('location')).toBe(`/console/messages/${partitionId}/${encodeURIComponent(deadTx)}?tenant=${A}&done=discarded`);
    expect((await call(api.url, 'GET', '/api/v1/dlq?queue=orders', undefined, as(A))).body.total).toBe(0);
    // Done again: nothing left to do, and it says so.
    const twice = await post(`/console/messages/${partitionId}/${encodeURIComponent(deadTx)}/discard?tenant=${A}`, { csrf: csrfOf(msg.text), consumerGroup: 'billing' }, cookie);
    expect(twice.headers.get('location')).toContain('done=nothing');
  });

  test('cancel a timer: it leaves the list and the client\'s read of it', async () => {
    const list = await get(`/console/timers?tenant=${A}&state=pending`, cookie);
    expect(list.text).toContain(`data-timer="${timerId}"`);
    const res = await post(`/console/timers/${timerId}/cancel?tenant=${A}`, { csrf: csrfOf(list.text), state: 'pending' }, cookie);
    expect([res.status, res.headers.get('location')]).toEqual([303, `/console/timers?tenant=${A}&state=pending&done=cancelled`]);
    const after = await get(res.headers.get('location')!, cookie);
    expect(after.text).toContain('Timer cancelled.');
    expect(after.text).not.toContain(`data-timer="${timerId}"`);
    const op = await call(api.url, 'GET', `/api/v1/system/timers?tenant=${A}`, undefined, { authorization: `Bearer ${TOKEN}` });
    expect(op.body.timers).toHaveLength(0);
    // An action under tenancy names its tenant, as the operator routes do.
    const noTenant = await post(`/console/timers/${timerId}/cancel`, { csrf: csrfOf(list.text) }, cookie);
    expect(noTenant.status).toBe(400);
  });

  test('all of a queue\'s dead letters at once, requeued then discarded; a group moved to now; a key deleted', async () => {
    await call(api.url, 'POST', '/api/v1/configure', { queue: 'bulk', options: { retryLimit: 0, retryDelay: 0 } }, as(A));
    await call(api.url, 'POST', '/api/v1/push', { items: [1, 2, 3].map((n) => ({ queue: 'bulk', payload: { n, secret: SECRET }, transactionId: `b-${n}` })) }, as(A));
    const failAll = async () => {
      const ms = (await call(api.url, 'GET', '/api/v1/pop/queue/bulk?consumerGroup=g1&batch=10', undefined, as(A))).body.messages;
      for (const m of ms) await call(api.url, 'POST', '/api/v1/ack', { transactionId: m.transactionId, partitionId: m.partitionId, status: 'failed', error: 'boom', leaseId: m.leaseId, consumerGroup: 'g1' }, as(A));
      return ms.length;
    };
    expect(await failAll()).toBe(3);
    const list = await get(`/console/queues/bulk/dead-letters?tenant=${A}`, cookie);
    expect(list.text).toContain('Requeue the oldest 3');
    const csrf = csrfOf(list.text);
    expect((await post(`/console/queues/bulk/dead-letters/requeue?tenant=${A}`, {}, cookie)).status).toBe(403);
    const requeued = await post(`/console/queues/bulk/dead-letters/requeue?tenant=${A}`, { csrf }, cookie);
    expect(requeued.headers.get('location')).toBe(`/console/queues/bulk/dead-letters?tenant=${A}&done=bulk`);
    expect((await call(api.url, 'GET', '/api/v1/dlq?queue=bulk', undefined, as(A))).body.total).toBe(0);
    expect(await failAll()).toBe(3);
    const discarded = await post(`/console/queues/bulk/dead-letters/discard?tenant=${A}`, { csrf, consumerGroup: 'g1' }, cookie);
    expect(discarded.headers.get('location')).toBe(`/console/queues/bulk/dead-letters?tenant=${A}&consumerGroup=g1&done=bulk`);
    expect((await get(discarded.headers.get('location')!, cookie)).text).toContain('No dead letters.');
    expect((await call(api.url, 'GET', '/api/v1/dlq?queue=bulk', undefined, as(A))).body.total).toBe(0);

    // The stuck group audit, moved to now from its queue's page: no longer stuck, nothing to pop.
    const queue = await get(`/console/queues/orders?tenant=${A}`, cookie);
    expect(queue.text).toContain('Skip audit to now');
    expect((await post(`/console/queues/orders/groups/audit/skip?tenant=${A}`, {}, cookie)).status).toBe(403);
    const skipped = await post(`/console/queues/orders/groups/audit/skip?tenant=${A}`, { csrf: csrfOf(queue.text) }, cookie);
    expect(skipped.headers.get('location')).toBe(`/console/queues/orders?tenant=${A}&done=skipped`);
    expect((await get(`/console?tenant=${A}`, cookie)).text).toMatch(/<tr class="" data-queue="orders" data-group="audit">/);
    expect(await pop('orders', 'audit')).toEqual([]);

    // A key deleted from its page: the client no longer finds it.
    const key = await get(`/console/kv/sessions/keys/user%3A1?tenant=${A}`, cookie);
    expect((await post(`/console/kv/sessions/keys/user%3A1/delete?tenant=${A}`, {}, cookie)).status).toBe(403);
    const deleted = await post(`/console/kv/sessions/keys/user%3A1/delete?tenant=${A}`, { csrf: csrfOf(key.text) }, cookie);
    expect(deleted.headers.get('location')).toBe(`/console/kv/sessions?tenant=${A}&done=deleted`);
    expect((await call(api.url, 'GET', '/api/v1/kv/sessions/user:1', undefined, as(A))).body.found).toBe(false);
    expect((await get(`/console/kv/sessions/keys/user%3A1?tenant=${A}`, cookie)).status).toBe(404);
  });

  test('no payload, value, error text or token in any log line; each action wrote its audit line', () => {
    const all = rawLines.join('\n');
    // (A transaction id is an id: the audit line names it, as the operator routes' do.)
    for (const secret of [SECRET, VALUE, TOKEN, 'boom']) expect([secret, all.includes(secret)]).toEqual([secret, false]);
    const lines = rawLines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'operator action');
    const actions = lines.map((l) => l.audit.action);
    expect(actions).toEqual(expect.arrayContaining(['dead_letter_requeue', 'dead_letter_discard', 'timer_cancel', 'dead_letters_requeue', 'dead_letters_discard', 'consumer_group_skip', 'kv_delete']));
    // Each names who signed in: the name the login form took, from the session's cookie.
    expect(lines.map((l) => [l.audit.action, l.audit.operator, l.audit.target.via])).toEqual(lines.map((l) => [l.audit.action, OPERATOR, 'console']));
  });
});

describe('the cell on the overview: shedding rung, throughput, timers due and late, connections', () => {
  const overview = async () => (await get(`/console?tenant=${A}`, cookie)).text;

  test('timers due and late are counted; the connections are pg_stat_activity\'s; no sweeper heard from is said', async () => {
    const ids: string[] = [];
    for (const ago of [10, 300]) {
      const t = await call(api.url, 'POST', '/api/v1/timers', { queue: 'orders', payload: { n: ago }, deliverAt: new Date(Date.now() + 3_600_000).toISOString() }, as(A));
      ids.push(t.body.timerId);
      await sql(api.databaseUrl, `UPDATE queen.log_timers SET deliver_at = now() - make_interval(secs => ${ago}) WHERE timer_id = '${t.body.timerId}'`);
    }
    try {
      const text = await overview();
      expect(text).toContain('<td data-timers="due">2</td>');
      expect(text).toContain('<td data-timers="late" class="flag">1</td>');
      expect(text).toMatch(/oldest due<\/th><td>5m \ds ago/);
      expect(text).toContain(`href="/console/timers?tenant=${A}&amp;state=late"`);
      // The sweeper of beforeAll stopped: its row went with it.
      expect(text).toContain('data-rung="none"');
      // This worker's pools as PostgreSQL counts them.
      expect(text).toMatch(/<tr><td>queen-api<\/td><td>(idle|active)<\/td><td>\d+<\/td><\/tr>/);
      expect(text).toMatch(/client connection\(s\) on the server of <code>max_connections<\/code> \d+/);
      // One sample so far (the sweeper of beforeAll took it): no window to count over yet.
      expect(text).toContain('<th>last minute</th><td colspan="4" class="none">not yet two samples</td>');
    } finally {
      await sql(api.databaseUrl, `DELETE FROM queen.log_timers WHERE timer_id = ANY ('{${ids.join(',')}}'::uuid[])`);
    }
  });

  test('a sweeper on rung 2 (every pass slow) shows on it, with its throughput samples; stopped, it leaves', async () => {
    // A sample a minute old, as if a sweeper had taken it then (before anything was pushed).
    const minuteAgo = Date.now() - 61_000;
    await sql(api.databaseUrl, `INSERT INTO queen.system_state (key, value, updated_at) VALUES ('log_throughput', '[{"atMs": ${minuteAgo}, "pushed": 0, "completed": 0, "failed": 0}]', now() - interval '61 seconds')
                       ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at`);
    const [{ pushed, failed }] = await sql(api.databaseUrl, `SELECT (SELECT sum(last_seq) FROM queen.partitions)::int AS pushed, (SELECT sum(failures) FROM queen.partition_consumers)::int AS failed`);
    const s = startTestSweeper(api.databaseUrl, { slowPassMs: -1 });
    try {
      await waitFor(async () => (await overview()).includes('data-rung="2"'), { what: 'the overview showing rung 2' });
      const text = await overview();
      expect(text).toContain('pruning and the usage rollup suspended');
      expect(text).toContain(`<td class="id">${s.sweeper.id}</td><td>2</td><td>prune, usage</td>`);
      expect(text).toMatch(new RegExp(`<th>last minute</th><td>6\\d s</td><td>${pushed} \\(`));
      expect(text).toMatch(new RegExp(`<th>last minute</th>.*<td>${failed}</td></tr>`));
      const rows = await sql(api.databaseUrl, `SELECT key FROM queen.system_state WHERE key LIKE 'sweeper:%'`);
      expect(rows).toEqual([{ key: `sweeper:${s.sweeper.id}` }]);
    } finally {
      await s.close();
    }
    expect(await overview()).toContain('data-rung="none"');
    expect(await sql(api.databaseUrl, `SELECT key FROM queen.system_state WHERE key LIKE 'sweeper:%'`)).toEqual([]);
  });
});

test('without QUEEN_ADMIN_TOKEN there is no console: /console is 404 like any unknown path', () =>
  withTestApi({}, async (open) => {
    for (const path of ['/console', '/console/login', '/console/console.css']) {
      const res = await call(open.url, 'GET', path);
      expect([path, res.status, res.body?.error]).toEqual([path, 404, 'not_found']);
    }
  }));

test('guessing the token is bounded per cell: past 10 wrong ones in a minute from one address on one worker, even the right one is 429 for the minute on another', () =>
  withTestApi({ QUEEN_ADMIN_TOKEN: TOKEN }, async (cell) => {
    // A second worker of the same cell (same database, its own process state).
    const other = await startApiServer(loadConfig({ QUEEN_WORKERS: '1', DB_POOL_SIZE: '10', DATABASE_URL: cell.databaseUrl, QUEEN_ADMIN_TOKEN: TOKEN }), pino({ level: 'silent' }), { message: 4, kv: 2 }, 0);
    try {
      const attempt = (base: string, token: string) => post('/console/login', { token, operator: OPERATOR }, undefined, base);
      // Five wrong on each worker: the cell has counted ten.
      for (let i = 0; i < 10; i++) expect((await attempt(i % 2 ? other.url : cell.url, `wrong-${i}`)).status).toBe(401);
      for (const base of [other.url, cell.url]) {
        const refused = await attempt(base, TOKEN);
        expect([refused.status, Number(refused.headers.get('retry-after')) > 0, refused.text.includes('429 rate_limited')]).toEqual([429, true, true]);
      }
      // The count is one row of the cell's rate buckets, and its window ends: then the right token signs in.
      const rows = await sql(cell.databaseUrl, `SELECT tenant, tokens FROM queen.kv_rate_bucket WHERE scope = 'console_login'`);
      expect(rows).toEqual([{ tenant: expect.stringMatching(/127\.0\.0\.1/), tokens: 10 }]);
      await sql(cell.databaseUrl, `UPDATE queen.kv_rate_bucket SET at = at - interval '61 seconds' WHERE scope = 'console_login'`);
      expect((await attempt(other.url, TOKEN)).status).toBe(303);
    } finally {
      await other.close();
    }
  }));

test('without tenancy the pages need no tenant and the nav has no picker', () =>
  withTestApi({ QUEEN_ADMIN_TOKEN: TOKEN }, async (one) => {
    const c = await login(one.url);
    await call(one.url, 'POST', '/api/v1/push', { items: [{ queue: 'jobs', payload: 1 }] });
    const page = await get('/console', c, one.url);
    expect([page.status, page.text.includes('href="/console/queues/jobs"'), page.text.includes('Choose a tenant')]).toEqual([200, true, false]);
    const refused = await get(`/console/timers?tenant=${A}`, c, one.url);
    expect(refused.status).toBe(400);
  }));
