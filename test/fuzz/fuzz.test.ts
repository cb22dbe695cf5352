// A short run of the fuzzer (bench/fuzz.ts, `npm run fuzz`) inside npm test: a fixed seed, then a
// random one (printed, so a failure replays with `npm run fuzz -- --seed <n>`), against a cell of
// its own (the built API, tenancy on, two tenants). The classes held to zero here are the severe
// ones: a 5xx other than a documented 503, an HTML body, a stack trace, a connection closed with no
// answer, a hang past the route's bound, one tenant reaching the other's rows, a call without a
// tenant or token served, a worker death, an error in the cell's log, a value in it.
import { runFuzz, summary, FindingClass } from '../../bench/fuzz';
import { createTestDatabase } from '../support/database';

const SEVERE: FindingClass[] = ['server_error', 'html_body', 'stack_trace', 'no_answer', 'hang', 'tenant_leak', 'tenant_write', 'tenant_bypass',
  'worker_crash', 'error_log', 'value_in_log'];

async function fuzz(seed: number, count: number): Promise<void> {
  const db = await createTestDatabase();
  try {
    const report = await runFuzz({ seed, count, seconds: 120, print: () => undefined }, undefined, db.url);
    const severe = Object.fromEntries(SEVERE.map((c) => [c, report.byClass.get(c) ?? 0]).filter(([, n]) => n !== 0));
    if (Object.keys(severe).length > 0) console.log(summary(report));
    expect(report.requests).toBe(count);
    expect({ seed, severe }).toEqual({ seed, severe: {} });
  } finally {
    await db.drop();
  }
}

test('2,000 requests, seed 28: no severe finding', async () => {
  await fuzz(28, 2000);
}, 180_000);

test('1,000 requests, a random seed: no severe finding', async () => {
  const seed = Math.floor(Math.random() * 2 ** 31);
  console.log(`fuzz: random seed ${seed} (npm run fuzz -- --seed ${seed} --count 1000 replays it)`);
  await fuzz(seed, 1000);
}, 180_000);
