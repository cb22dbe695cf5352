// The web console in a real browser (Debian's Chromium, headless, over the DevTools protocol:
// test/support/chromium.ts): sign in, choose the tenant, see a stuck group on the overview, walk
// queue -> partition -> message (a <script> payload stays text, no script runs), requeue a dead
// letter, cancel a timer, browse KV and tenants; the strict CSP refuses nothing the console uses
// (its stylesheet applies). Each page's screenshot goes to a temporary folder, or to docs/console/
// with QUEEN_CONSOLE_SCREENSHOTS=docs (how the pictures in docs/console.md are made).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Browser, CHROMIUM } from '../support/chromium';
import { sql } from '../support/database';
import { startTestApi, TestApi } from '../support/api';
import { call } from '../support/http';
import { sweep } from '../support/sweeper';

const A = 'aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa';
const TOKEN = 'console-browser-token-31c';
const EVIL = "<script>document.title='owned'</script>";
const reason = 'Chromium is not installed here (Debian package `chromium`: apt-get install -y chromium)';
// Said on stderr too: jest shows neither a skipped suite's title (but in a verbose or JSON report) nor its console.
if (!CHROMIUM) process.stderr.write(`test/console/browser.test.ts: not run: ${reason}\n`);

(CHROMIUM ? describe : describe.skip)(CHROMIUM ? 'the console in Chromium' : `the console in Chromium: not run, ${reason}`, () => {
  const toDocs = process.env.QUEEN_CONSOLE_SCREENSHOTS === 'docs';
  let shots = '';
  let api: TestApi;
  let browser: Browser;
  let timerId: string;
  const as = { 'x-queen-tenant': A };

  beforeAll(async () => {
    shots = toDocs ? path.resolve(__dirname, '../../../docs/console') : fs.mkdtempSync(path.join(os.tmpdir(), 'queen-console-shots-'));
    fs.mkdirSync(shots, { recursive: true });
    api = await startTestApi({ QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1', QUEEN_ADMIN_TOKEN: TOKEN, QUEEN_KV_REQUIRE_GRANT: '0' });
    const u = api.url;
    await call(u, 'POST', '/api/v1/configure', { queue: 'orders', options: { retryLimit: 0, retryDelay: 0 } }, as);
    await call(u, 'POST', '/api/v1/push', { items: [
      { queue: 'orders', partition: 'eu', payload: { order: 1041, note: EVIL }, transactionId: 'order-1041' },
      ...[1042, 1043, 1044].map((n) => ({ queue: 'orders', partition: 'eu', payload: { order: n }, transactionId: `order-${n}` })),
      { queue: 'orders', partition: 'us', payload: { order: 2001 }, transactionId: 'order-2001' },
      { queue: 'emails', payload: { to: 'a@example.invalid' } },
    ] }, as);
    const pop = await call(u, 'GET', '/api/v1/pop/queue/orders/partition/eu?consumerGroup=billing', undefined, as);
    const m = pop.body.messages[0];
    await call(u, 'POST', '/api/v1/ack', { transactionId: m.transactionId, partitionId: m.partitionId, status: 'failed', error: 'card declined', leaseId: m.leaseId, consumerGroup: 'billing' }, as);
    await call(u, 'GET', '/api/v1/pop/queue/emails?consumerGroup=mailer', undefined, as);
    // The shipping group has read nothing for ten minutes: stuck on the overview.
    await call(u, 'GET', '/api/v1/pop/queue/orders/partition/us?consumerGroup=shipping', undefined, as);
    await sql(api.databaseUrl, `UPDATE queen.messages SET created_at = now() - interval '10 minutes' WHERE transaction_id LIKE 'order-%'`);
    const t = await call(u, 'POST', '/api/v1/timers', { queue: 'orders', payload: { remind: 1041 }, timerKey: 'remind-1041', deliverAt: new Date(Date.now() + 3_600_000).toISOString() }, as);
    timerId = t.body.timerId;
    await call(u, 'POST', '/api/v1/timers', { queue: 'emails', payload: { digest: true }, deliverAt: new Date(Date.now() + 7_200_000).toISOString() }, as);
    for (const [key, value] of [['user:17', { name: 'Ada' }], ['user:18', { name: 'Grace' }], ['flags', { beta: true }]] as const) {
      await call(u, 'PUT', `/api/v1/kv/profiles/${key}`, { value, forever: true }, as);
    }
    await sweep(api.databaseUrl);
    browser = await Browser.launch();
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await api?.close();
    if (!toDocs && shots) fs.rmSync(shots, { recursive: true, force: true });
  });

  const text = () => browser.eval<string>('document.body.innerText');
  const shot = (name: string) => browser.screenshot(path.join(shots, `${name}.png`));

  test('sign in, find the stuck group, walk to a message, requeue a dead letter, cancel a timer', async () => {
    await browser.goto(`${api.url}/console`);
    expect(await browser.eval('location.pathname')).toBe('/console/login');
    await shot('login');
    await browser.type('#token', TOKEN);
    await browser.click('#sign-in');
    expect(await browser.eval('location.pathname')).toBe('/console');
    // The cookie is HttpOnly: the page's script cannot read it.
    expect(await browser.eval('document.cookie')).toBe('');
    // The stylesheet applied: the CSP lets the cell's own CSS in.
    expect(await browser.eval(`getComputedStyle(document.querySelector('header')).backgroundColor`)).toBe('rgb(32, 38, 46)');
    await shot('tenant-picker');
    await browser.click(`a[href="/console?tenant=${A}"]`);
    expect(await text()).toMatch(/shipping\s+5\s+10m \d+s stuck/);
    await shot('overview');

    await browser.click('a[href^="/console/queues/orders?"]');
    expect(await text()).toContain('billing');
    await shot('queue');
    await browser.click('a[href^="/console/queues/orders/partitions/eu?"]');
    expect(await text()).toContain('order-1044');
    await shot('partition');
    await browser.click('a[href*="/order-1041?"]');
    // The payload's <script> is text on the page; nothing ran.
    expect(await browser.eval(`document.querySelector('pre.payload').textContent`)).toContain(EVIL);
    expect(await browser.eval('document.scripts.length')).toBe(0);
    expect(await browser.eval('document.title')).not.toBe('owned');
    expect(await text()).toContain('card declined');
    await shot('message');

    await browser.goto(`${api.url}/console/queues/orders/dead-letters?tenant=${A}`);
    expect(await text()).toContain('1 dead letter(s)');
    await shot('dead-letters');
    await browser.click('tr[data-transaction="order-1041"] form[action*="/requeue"] button');
    expect(await text()).toContain('Requeued: the group gets the message again.');
    expect(await text()).toContain('No dead letters.');
    const again = await call(api.url, 'GET', '/api/v1/pop/queue/orders/partition/eu?consumerGroup=billing', undefined, as);
    expect(again.body.messages[0].transactionId).toBe('order-1041');

    await browser.goto(`${api.url}/console/timers?tenant=${A}`);
    expect(await browser.eval(`document.querySelectorAll('tr[data-timer]').length`)).toBe(2);
    await shot('timers');
    await browser.click(`tr[data-timer="${timerId}"] button`);
    expect(await text()).toContain('Timer cancelled.');
    expect(await browser.eval(`document.querySelectorAll('tr[data-timer]').length`)).toBe(1);
    const left = await call(api.url, 'GET', `/api/v1/system/timers?tenant=${A}`, undefined, { authorization: `Bearer ${TOKEN}` });
    expect(left.body.timers.map((t: any) => t.timerId)).not.toContain(timerId);

    await browser.goto(`${api.url}/console/kv?tenant=${A}`);
    await browser.type('#ns', 'profiles');
    await browser.type('#prefix', 'user:');
    await browser.click('form.picker button');
    expect(await text()).toContain('user:18');
    expect(await text()).not.toContain('Grace');
    await shot('kv');
    await browser.click('a[href*="/keys/user%3A18"]');
    expect(await text()).toContain('Grace');
    await shot('kv-key');
    await browser.click('nav a[href^="/console/tenants"]');
    expect(await text()).toContain(A);
    await shot('tenants');

    // The CSP is in force in the browser: an inline script put into the page does not run.
    expect(await browser.eval(`(() => { const s = document.createElement('script'); s.textContent = 'window.ranInline = 1'; document.body.append(s); return window.ranInline === undefined; })()`)).toBe(true);
    expect(browser.log.some((l) => /Content Security Policy/.test(l))).toBe(true);
    browser.log.length = 0;
    await browser.goto(`${api.url}/console?tenant=${A}`);
    // Nothing the console does itself is refused by its own CSP.
    expect(browser.log.filter((l) => /Content Security Policy|Refused/i.test(l))).toEqual([]);
  }, 120_000);
});
