// The web console in a real browser: Debian's Chromium, headless, driven by playwright-core pointed
// at the system's binary (it downloads no browser): sign in with a name, choose the tenant, see a
// stuck group and the cell's state on the overview, walk queue -> partition -> message (a <script>
// payload stays text, no script runs), requeue a dead letter, cancel a timer, browse KV and tenants;
// the strict CSP refuses nothing the console uses (its stylesheet applies) and does refuse an inline
// script. Each page's screenshot goes to a temporary folder, or to docs/console/ with
// QUEEN_CONSOLE_SCREENSHOTS=docs (how the pictures in docs/console.md are made).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium, Browser, Page } from 'playwright-core';
import { sql } from '../support/database';
import { startTestApi, TestApi } from '../support/api';
import { call } from '../support/http';
import { startTestSweeper, sweep, TestSweeper } from '../support/sweeper';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => fs.existsSync(p));
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
  let page: Page;
  let sweeper: TestSweeper;
  let timerId: string;
  /** Every console message and log entry the page produced (a CSP refusal lands here). */
  const log: string[] = [];
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
    // A sweeper running while the pages are looked at: the overview shows its rung, and its first
    // sample against one taken (as if) a minute ago, before anything was pushed.
    await sql(api.databaseUrl, `INSERT INTO queen.system_state (key, value, updated_at) VALUES ('log_throughput', '[{"atMs": ${Date.now() - 61_000}, "pushed": 0, "completed": 0, "failed": 0}]', now() - interval '61 seconds')
                                ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at`);
    sweeper = startTestSweeper(api.databaseUrl, { intervalMs: 200 });
    await sweeper.sweeper.nextGauges();
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-dev-shm-usage'], timeout: 30_000 });
    page = await browser.newPage({ viewport: { width: 1200, height: 760 } });
    page.setDefaultTimeout(15_000);
    page.on('console', (m) => log.push(`${m.type()}: ${m.text()}`));
  }, 90_000);
  afterAll(async () => {
    await browser?.close();
    await sweeper?.close();
    await api?.close();
    if (!toDocs && shots) fs.rmSync(shots, { recursive: true, force: true });
  });

  const text = () => page.innerText('body');
  const evaluate = <T = unknown>(expression: string): Promise<T> => page.evaluate(expression) as Promise<T>;
  /** Clicks a link or a submit button and waits for the page it leads to. */
  const click = async (selector: string) => {
    await Promise.all([page.waitForEvent('load'), page.click(selector)]);
  };
  const shot = (name: string) => page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });

  test('sign in, find the stuck group, walk to a message, requeue a dead letter, cancel a timer', async () => {
    await page.goto(`${api.url}/console`);
    expect(await evaluate('location.pathname')).toBe('/console/login');
    await shot('login');
    await page.fill('#token', TOKEN);
    await page.fill('#operator', 'ada');
    await click('#sign-in');
    expect(await evaluate('location.pathname')).toBe('/console');
    // The cookie is HttpOnly: the page's script cannot read it.
    expect(await evaluate('document.cookie')).toBe('');
    // The stylesheet applied: the CSP lets the cell's own CSS in.
    expect(await evaluate(`getComputedStyle(document.querySelector('header')).backgroundColor`)).toBe('rgb(32, 38, 46)');
    await shot('tenant-picker');
    await click(`a[href="/console?tenant=${A}"]`);
    expect(await text()).toMatch(/shipping\s+5\s+10m \d+s stuck/);
    // The cell's own state: the running sweeper on rung 0, the minute's pushes, the pools.
    const overview = await text();
    expect(overview).toContain('Shedding rung 0 of 2: calm: nothing shed');
    expect(overview).toMatch(/last minute\s+6\d s\s+6 \(/);
    expect(overview).toMatch(/queen-api\s+(idle|active)/);
    expect(overview).toContain('signed in as ada');
    await shot('overview');

    await click('a[href^="/console/queues/orders?"]');
    expect(await text()).toContain('billing');
    await shot('queue');
    await click('a[href^="/console/queues/orders/partitions/eu?"]');
    expect(await text()).toContain('order-1044');
    await shot('partition');
    await click('a[href*="/order-1041?"]');
    // The payload's <script> is text on the page; nothing ran.
    expect(await evaluate(`document.querySelector('pre.payload').textContent`)).toContain(EVIL);
    expect(await evaluate('document.scripts.length')).toBe(0);
    expect(await evaluate('document.title')).not.toBe('owned');
    expect(await text()).toContain('card declined');
    await shot('message');

    await page.goto(`${api.url}/console/queues/orders/dead-letters?tenant=${A}`);
    expect(await text()).toContain('1 dead letter(s)');
    await shot('dead-letters');
    await click('tr[data-transaction="order-1041"] form[action*="/requeue"] button');
    expect(await text()).toContain('Requeued: the group gets the message again.');
    expect(await text()).toContain('No dead letters.');
    const again = await call(api.url, 'GET', '/api/v1/pop/queue/orders/partition/eu?consumerGroup=billing', undefined, as);
    expect(again.body.messages[0].transactionId).toBe('order-1041');

    await page.goto(`${api.url}/console/timers?tenant=${A}`);
    expect(await evaluate(`document.querySelectorAll('tr[data-timer]').length`)).toBe(2);
    await shot('timers');
    await click(`tr[data-timer="${timerId}"] button`);
    expect(await text()).toContain('Timer cancelled.');
    expect(await evaluate(`document.querySelectorAll('tr[data-timer]').length`)).toBe(1);
    const left = await call(api.url, 'GET', `/api/v1/system/timers?tenant=${A}`, undefined, { authorization: `Bearer ${TOKEN}` });
    expect(left.body.timers.map((t: any) => t.timerId)).not.toContain(timerId);

    await page.goto(`${api.url}/console/kv?tenant=${A}`);
    await page.fill('#ns', 'profiles');
    await page.fill('#prefix', 'user:');
    await click('form.picker button');
    expect(await text()).toContain('user:18');
    expect(await text()).not.toContain('Grace');
    await shot('kv');
    await click('a[href*="/keys/user%3A18"]');
    expect(await text()).toContain('Grace');
    await shot('kv-key');
    await click('nav a[href^="/console/tenants"]');
    expect(await text()).toContain(A);
    await shot('tenants');

    // The CSP is in force in the browser: an inline script put into the page does not run.
    expect(await evaluate(`(() => { const s = document.createElement('script'); s.textContent = 'window.ranInline = 1'; document.body.append(s); return window.ranInline === undefined; })()`)).toBe(true);
    expect(log.some((l) => /Content Security Policy/.test(l))).toBe(true);
    log.length = 0;
    await page.goto(`${api.url}/console?tenant=${A}`);
    // Nothing the console does itself is refused by its own CSP.
    expect(log.filter((l) => /Content Security Policy|Refused/i.test(l))).toEqual([]);
  }, 120_000);
});
