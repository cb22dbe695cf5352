// npm run bench:move: how long a tenant move (services/move/move.ts) refuses the tenant's calls.
// Two cells (one API worker each, tenancy on, no sweeper), each on its own database of one embedded
// PostgreSQL, behind the shipped router. The tenant holds --keys KV keys and --messages messages
// (10^5 each by default; the keys written by SQL, the messages pushed through the API in batches
// of 1000 over 8 partitions, one batch popped and acked so the group has a cursor). Each round moves
// it to the other cell while a probe writes one key through the router every 10 ms; the refusal
// window is the time from the probe's first 503 tenant_moving to its first success after the last
// one. Rounds alternate the direction.
// Options: --keys=100000 (BENCH_KEYS), --messages=100000 (BENCH_MESSAGES), --rounds=3 (BENCH_ROUNDS).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { startEmbeddedPostgres, freePort } from '../shared/embeddedPostgres';
import { withRoutedCells } from './lib/cell';
import { moveTenant, MoveResult } from '../services/move/move';
import { median, positiveOption } from './lib/options';
import { rawClient } from './lib/load';
import { loadAverage, machineLine, stopChild } from './lib/procs';

const KEYS = positiveOption('keys', 'BENCH_KEYS', 100_000);
const MESSAGES = positiveOption('messages', 'BENCH_MESSAGES', 100_000);
const ROUNDS = positiveOption('rounds', 'BENCH_ROUNDS', 3);
const TENANT = '00000000-0000-4000-8000-00000000000a';

async function main(): Promise<void> {
  await withRoutedCells('bench:move', 'bench-move', 20, async (cells, router) => {
    const routerPort = Number(new URL(router.url).port);

    // The tenant, on cell-a as placement.map has it.
    const seedStarted = Date.now();
    const db = new Client({ connectionString: cells[0].url });
    await db.connect();
    await db.query(
      `INSERT INTO queen.kv (tenant_id, namespace, key, value, version, expires_at)
       SELECT $1, 'bench', 'k' || i, jsonb_build_object('i', i, 'pad', repeat('x', 40)), nextval('queen.kv_version_seq'), now() + interval '1 day'
         FROM generate_series(1, $2) i`,
      [TENANT, KEYS],
    );
    await db.end();
    const direct = rawClient('127.0.0.1', cells[0].port, { 'x-queen-tenant': TENANT });
    for (let i = 0; i < MESSAGES; i += 1000) {
      const items = Array.from({ length: Math.min(1000, MESSAGES - i) }, (_, k) => ({ queue: 'orders', partition: `p${(i + k) % 8}`, transactionId: `m-${i + k}`, payload: { n: i + k, pad: 'y'.repeat(40) } }));
      const a = await direct.request('POST', '/api/v1/push', JSON.stringify({ items }));
      if (a.status !== 201) throw new Error(`seed push answered ${a.status}`);
    }
    const popped = await direct.request('GET', '/api/v1/pop/queue/orders?batch=100');
    const lease = JSON.parse(popped.body) as { messages: Array<{ transactionId: string; partitionId: string; leaseId: string }> };
    await direct.request('POST', '/api/v1/ack/batch', JSON.stringify({ acknowledgments: lease.messages.map((m) => ({ transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId, status: 'completed' })) }));
    direct.close();
    process.stdout.write(
      `bench:move: ${machineLine('embedded PostgreSQL')}; load ${loadAverage()}; a tenant of ${KEYS} keys and ${MESSAGES} messages (seeded in ${((Date.now() - seedStarted) / 1000).toFixed(1)} s), ${ROUNDS} moves, one API worker a cell\n`,
    );

    const runs: Array<{ windowMs: number; refused: number; result: MoveResult; totalMs: number }> = [];
    for (let round = 0; round < ROUNDS; round++) {
      const [from, to] = round % 2 === 0 ? [cells[0], cells[1]] : [cells[1], cells[0]];
      const probe = rawClient('127.0.0.1', routerPort, { 'x-queen-tenant': TENANT });
      let stop = false;
      let firstRefusal = 0;
      let lastRefusal = 0;
      let backAfter = 0;
      let refused = 0;
      const probing = (async () => {
        for (let i = 0; !stop || (lastRefusal > 0 && backAfter < lastRefusal); i++) {
          const at = Date.now();
          const a = await probe.request('PUT', `/api/v1/kv/probe/r${round}-${i}`, JSON.stringify({ value: i, ttlSeconds: 600 }));
          if (a.status === 503) {
            refused++;
            firstRefusal ||= at;
            lastRefusal = at;
          } else if (a.status === 200) {
            if (lastRefusal > 0 && backAfter < lastRefusal) backAfter = Date.now();
          } else throw new Error(`the probe got ${a.status}: ${a.body}`);
          await new Promise((r) => setTimeout(r, 10));
        }
      })();
      await new Promise((r) => setTimeout(r, 300));
      const started = Date.now();
      const result = await moveTenant({
        tenant: TENANT,
        from: { databaseUrl: from.url, cell: from.name },
        to: { databaseUrl: to.url, cell: to.name },
        routers: [router.socket],
        map: router.map,
        log: process.env.BENCH_MOVE_LOG ? (line) => process.stdout.write(`  ${line}\n`) : undefined,
      });
      const totalMs = Date.now() - started;
      stop = true;
      await probing;
      probe.close();
      runs.push({ windowMs: backAfter - firstRefusal, refused, result, totalMs });
      const rows = Object.fromEntries(result.tables.filter((t) => t.rows > 0).map((t) => [t.table, t.rows]));
      process.stdout.write(`move ${round + 1} (${from.name} -> ${to.name}): refused for ${backAfter - firstRefusal} ms (${refused} probe calls), move ${totalMs} ms, steps ${JSON.stringify(result.steps)}, rows ${JSON.stringify(rows)}\n`);
    }
    const steps = Object.keys(runs[0].result.steps);
    process.stdout.write(`\n| | median of ${ROUNDS} moves |\n| --- | ---: |\n| refusal window (probe) | ${median(runs.map((r) => r.windowMs)).toFixed(0)} ms |\n| the whole move | ${median(runs.map((r) => r.totalMs)).toFixed(0)} ms |\n`);
    for (const s of steps) process.stdout.write(`| step ${s} | ${median(runs.map((r) => r.result.steps[s] ?? 0)).toFixed(0)} ms |\n`);
    process.stdout.write(`load at the end ${loadAverage()}\n`);
  });
}

main().catch((err) => {
  process.stderr.write(`bench:move failed: ${(err as Error).stack ?? err}\n`);
  process.exit(1);
});
