// Runs Queen MQ's own JavaScript client test modules (test-v2 of its client-js folder) against a
// running cell and counts what passes. Our runner, not Queen's run.js: that one also needs direct
// PostgreSQL access to Queen's schema and imports modules the cell does not serve (streams).
//
//   node scripts/queen-client-tests.mjs <path to client-js> [module ...]
//
// QUEEN_URL (default http://127.0.0.1:6632) is the cell. Modules default to the eight the cell
// targets. Each exported function of a module is one test: it is given a Queen client and answers
// {success, message}. A test that neither answers nor throws within QUEEN_TEST_TIMEOUT_MS (default
// 120000) counts as failed. Use a fresh database: the tests assume their queues start empty.
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const DEFAULT_MODULES = ['queue', 'push', 'pop', 'transaction', 'consume', 'complete', 'dlq', 'subscription'];
const [dir, ...picked] = process.argv.slice(2);
if (!dir) {
  console.error('usage: node scripts/queen-client-tests.mjs <path to client-js> [module ...]');
  process.exit(2);
}
const url = process.env.QUEEN_URL ?? 'http://127.0.0.1:6632';
const timeoutMs = Number(process.env.QUEEN_TEST_TIMEOUT_MS ?? 120000);
const { Queen } = await import(pathToFileURL(path.resolve(dir, 'client-v2/index.js')).href);
const client = new Queen({ urls: [url] });

const results = [];
for (const name of picked.length > 0 ? picked : DEFAULT_MODULES) {
  const mod = await import(pathToFileURL(path.resolve(dir, 'test-v2', `${name}.js`)).href);
  for (const [test, fn] of Object.entries(mod)) {
    if (typeof fn !== 'function') continue;
    let timer;
    const bound = new Promise((resolve) => {
      timer = setTimeout(() => resolve({ success: false, message: `no answer within ${timeoutMs} ms` }), timeoutMs);
    });
    let outcome;
    try {
      outcome = await Promise.race([fn(client), bound]);
    } catch (err) {
      outcome = { success: false, message: `threw: ${err?.message ?? err}` };
    } finally {
      clearTimeout(timer);
    }
    const ok = outcome?.success === true;
    results.push({ module: name, test, ok, message: outcome?.message ?? '' });
    console.log(`${ok ? 'PASS' : 'FAIL'} ${name} ${test}${ok ? '' : `: ${String(outcome?.message ?? '').slice(0, 300)}`}`);
  }
}
const passed = results.filter((r) => r.ok).length;
console.log(`\n${passed}/${results.length} passed`);
for (const name of new Set(results.map((r) => r.module))) {
  const own = results.filter((r) => r.module === name);
  console.log(`  ${name}: ${own.filter((r) => r.ok).length}/${own.length}`);
}
await client.close?.().catch?.(() => {});
process.exit(passed === results.length ? 0 : 1);
