// npm run bench:console — how long the web console's pages take on a cell holding BENCH_MESSAGES
// (100,000) messages: one queue of BENCH_PARTITIONS (10) partitions, two consumer groups (one has
// read half of them, one nothing), a few dead letters. Each page is fetched BENCH_ROUNDS (50) times
// in turn, signed in, one at a time; p50 and p95 of the whole answer (status, headers and body read).
// The baseline is the JSON operator route the overview is rendered from (GET /api/v1/system/queues),
// measured in the same run: a page's ratio to it is what rendering and the page's other reads add.
// A sweeper runs throughout (as on a cell), so the overview reads its report and throughput samples.
// DATABASE_URL to use your own server; otherwise an embedded PostgreSQL in a temporary folder.
import { performance } from 'node:perf_hooks';
import os from 'node:os';
import { loadConfig } from '../shared/config';
import { createLogger } from '../shared/log';
import { Pool } from 'pg';
import { startApiServer } from '../services/api/server';
import { Sweeper } from '../services/sweeper/sweeper';
import { createSweeperMetrics, primeSweeperMetrics } from '../shared/metrics';
import { benchDatabase } from './lib/database';
import { wholeEnv } from './lib/options';

const MESSAGES = wholeEnv('BENCH_MESSAGES', 100_000);
const PARTITIONS = wholeEnv('BENCH_PARTITIONS', 10);
const ROUNDS = wholeEnv('BENCH_ROUNDS', 50);
const TOKEN = 'bench-console-token';
const out = (line = '') => process.stdout.write(`${line}\n`);

async function main(): Promise<void> {
  const db = await benchDatabase('console', { schema: true });
  const config = loadConfig({ QUEEN_WORKERS: '1', DB_POOL_SIZE: '10', DATABASE_URL: db.url, QUEEN_ADMIN_TOKEN: TOKEN });
  const server = await startApiServer(config, createLogger('bench-console', 'silent'), { message: 8, kv: 2 }, 0);
  const url = server.url;
  const sweeperPool = new Pool({ connectionString: db.url, max: 3, application_name: 'queen-sweeper' });
  const metrics = createSweeperMetrics();
  primeSweeperMetrics(metrics);
  const sweeper = new Sweeper({ pool: sweeperPool, log: createLogger('bench-console-sweeper', 'silent'), metrics, intervalMs: 1000, batch: 500, usageIntervalMs: 60_000 }).start();
  try {
    const post = (path: string, body: unknown) => fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    await post('/api/v1/configure', { queue: 'orders', options: { retryLimit: 0, retryDelay: 0 } });
    const started = performance.now();
    for (let i = 0; i < MESSAGES; i += 1000) {
      const items = Array.from({ length: Math.min(1000, MESSAGES - i) }, (_, j) => ({ queue: 'orders', partition: `p${(i + j) % PARTITIONS}`, payload: { order: i + j, note: 'x'.repeat(60) } }));
      const res = await post('/api/v1/push', { items });
      if (res.status !== 201) throw new Error(`push answered ${res.status}`);
      await res.arrayBuffer();
    }
    out(`filled ${MESSAGES} messages in ${PARTITIONS} partitions in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    // billing reads (and acks) half of every partition; five of them it fails into dead letters.
    let failed = 0;
    for (let p = 0; p < PARTITIONS; p++) {
      for (let done = 0; done < MESSAGES / PARTITIONS / 2; done += 1000) {
        const pop = await fetch(`${url}/api/v1/pop/queue/orders/partition/p${p}?consumerGroup=billing&batch=1000`);
        if (pop.status !== 200) break;
        const { messages } = await pop.json() as { messages: Array<{ transactionId: string; partitionId: string; leaseId: string }> };
        const acks = messages.map((m) => ({ transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId, consumerGroup: 'billing', status: failed < 5 && (failed++, true) ? 'failed' : 'completed' }));
        const ack = await post('/api/v1/ack/batch', { acknowledgments: acks });
        await ack.arrayBuffer();
      }
    }
    const empty = await fetch(`${url}/api/v1/pop/queue/orders?consumerGroup=audit`);
    await empty.arrayBuffer();
    const login = await fetch(`${url}/console/login`, { method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `token=${TOKEN}&operator=bench` });
    const cookie = login.headers.get('set-cookie')!.split(';')[0];
    const dead = await (await fetch(`${url}/api/v1/dlq?queue=orders&limit=1`)).json() as { messages: Array<{ partitionId: string; transactionId: string }>; total: number };
    out(`dead letters: ${dead.total}; load average ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
    const one = dead.messages[0];
    const targets: Array<[string, string, Record<string, string>]> = [
      ['GET /api/v1/system/queues (JSON, baseline)', '/api/v1/system/queues', { authorization: `Bearer ${TOKEN}` }],
      ['/console (overview)', '/console', { cookie }],
      ['/console/queues/orders (partitions)', '/console/queues/orders', { cookie }],
      ['/console/queues/orders/partitions/p0 (100 messages)', '/console/queues/orders/partitions/p0', { cookie }],
      ['/console/messages/:p/:tx (one message)', `/console/messages/${one.partitionId}/${encodeURIComponent(one.transactionId)}`, { cookie }],
      ['/console/queues/orders/dead-letters', '/console/queues/orders/dead-letters', { cookie }],
      ['/console/timers', '/console/timers', { cookie }],
    ];
    const times = targets.map(() => [] as number[]);
    for (let r = 0; r < ROUNDS + 5; r++) {
      for (let t = 0; t < targets.length; t++) {
        const t0 = performance.now();
        const res = await fetch(url + targets[t][1], { headers: targets[t][2] });
        await res.arrayBuffer();
        if (res.status !== 200) throw new Error(`${targets[t][1]} answered ${res.status}`);
        if (r >= 5) times[t].push(performance.now() - t0); // the first five warm up
      }
    }
    const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
    const base = pct(times[0], 0.5);
    out('');
    out(`| page (${MESSAGES} messages, ${ROUNDS} rounds) | p50 ms | p95 ms | p50 / baseline |`);
    out('| --- | ---: | ---: | ---: |');
    targets.forEach(([name], t) => out(`| ${name} | ${pct(times[t], 0.5).toFixed(1)} | ${pct(times[t], 0.95).toFixed(1)} | ${(pct(times[t], 0.5) / base).toFixed(2)} |`));
    out(`\nload average at the end ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  } finally {
    await sweeper.stop();
    await sweeperPool.end();
    await server.close();
    await db.stop();
  }
}

main().catch((err) => {
  process.stderr.write(`${err.stack ?? err}\n`);
  process.exit(1);
});
