// npm run bench:router: what the router (deploy/router, HAProxy routing by tenant) costs a call.
// Two cells, each on its own database of one embedded PostgreSQL and with tenancy on, and the
// shipped router in front of them. Two tenants, one placed on each cell, call in a closed loop of
// N clients (half each): straight to their cell (`direct`), then through the router (`routed`),
// rotated each round. Per lane: calls a second, p50/p99, and CPU per call of the cells' processes
// and of HAProxy, from /proc. One machine cannot show two machines' throughput, so the figure
// that carries over is the CPU: the router's µs per call says how many calls a router core routes,
// and the model printed at the end puts that beside the per-cell rate.
// Options: --duration=5 (BENCH_DURATION_S), --rounds=3 (BENCH_ROUNDS, rounded up to even), --clients=16 (BENCH_CLIENTS).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startEmbeddedPostgres, freePort } from '../shared/embeddedPostgres';
import { withRoutedCells } from './lib/cell';
import { median, positiveOption } from './lib/options';
import { HttpClient, rawClient, Workload, workloadLoop } from './lib/load';
import { loadAverage, machineLine, stopChild, TreeCpu } from './lib/procs';

const DURATION_S = positiveOption('duration', 'BENCH_DURATION_S', 5);
// The two lanes swap places each round: an even count gives each the first place as often (3 asked, 4 run).
const ROUNDS = Math.ceil(positiveOption('rounds', 'BENCH_ROUNDS', 3) / 2) * 2;
const CLIENTS = positiveOption('clients', 'BENCH_CLIENTS', 16);

// The two tenants deploy/router/placement.map places, one on each cell.
const TENANTS = ['00000000-0000-4000-8000-00000000000a', '00000000-0000-4000-8000-00000000000b'];

/** A raw keep-alive client that calls as `tenant`. */
const tenantClient = (port: number, tenant: string): HttpClient => rawClient('127.0.0.1', port, { 'x-queen-tenant': tenant });

const WORKLOADS: Workload[] = [
  { name: 'KV get (path)', request: (_c, i) => ({ method: 'GET', path: `/api/v1/kv/bench/k${i % 100}` }) },
  {
    name: 'KV put (batch)',
    request: (c, i) => ({ method: 'POST', path: '/api/v1/kv', body: JSON.stringify({ operations: [{ op: 'put', ns: 'bench', key: `p${c}-${i % 1000}`, value: { i }, ttlSeconds: 600 }] }) }),
  },
];

async function main(): Promise<void> {
  await withRoutedCells('bench:router', 'bench-router', 40, async (cells, router) => {
    process.stdout.write(`bench:router: ${machineLine('embedded PostgreSQL')}; load ${loadAverage()}; ${ROUNDS} rounds of ${DURATION_S} s, ${CLIENTS} clients (half a tenant), one API worker a cell\n`);
    for (const [i, tenant] of TENANTS.entries()) {
      const seed = tenantClient(cells[i].port, tenant);
      for (let k = 0; k < 100; k++) await seed.request('POST', '/api/v1/kv', JSON.stringify({ operations: [{ op: 'put', ns: 'bench', key: `k${k}`, value: { k }, ttlSeconds: 3600 }] }));
      seed.close();
    }

    const routerPid = router.proc.pid!;
    const lanes = ['direct', 'routed'] as const;
    const results = new Map<string, Array<{ ops: number; p50: number; p99: number; cellUs: number; routerUs: number; errors: number }>>();
    for (let round = 0; round < ROUNDS; round++) {
      for (const w of WORKLOADS) {
        for (const lane of round % 2 === 0 ? lanes : [...lanes].reverse()) {
          // Client c calls as tenant c % 2, to its cell or to the router.
          const routerPort = Number(new URL(router.url).port);
          const clients = Array.from({ length: CLIENTS }, (_, c) => tenantClient(lane === 'direct' ? cells[c % 2].port : routerPort, TENANTS[c % 2]));
          const cellCpu = new TreeCpu(() => cells.map((x) => x.proc.pid!));
          const routerCpu = new TreeCpu(() => [routerPid]);
          cellCpu.start();
          routerCpu.start();
          const r = await workloadLoop(clients, DURATION_S * 1000, w);
          const cellUs = cellCpu.stop();
          const routerUs = routerCpu.stop();
          for (const c of clients) c.close();
          const key = `${w.name}|${lane}`;
          results.set(key, [...(results.get(key) ?? []), { ops: r.ops / r.seconds, p50: r.p50Us / 1000, p99: r.p99Us / 1000, cellUs: cellUs / Math.max(1, r.ops), routerUs: routerUs / Math.max(1, r.ops), errors: r.errors }]);
        }
      }
    }

    process.stdout.write('\n| workload | lane | calls/s | ÷ direct | p50 ms | p99 ms | cells CPU µs/call | router CPU µs/call | errors |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n');
    let routerUsPerCall = 0;
    let cellUsPerCall = 0;
    for (const w of WORKLOADS) {
      const direct = results.get(`${w.name}|direct`)!;
      for (const lane of lanes) {
        const rs = results.get(`${w.name}|${lane}`)!;
        const ratio = median(rs.map((r, i) => r.ops / direct[i].ops));
        if (lane === 'routed') routerUsPerCall = Math.max(routerUsPerCall, median(rs.map((r) => r.routerUs)));
        if (lane === 'direct') cellUsPerCall = Math.max(cellUsPerCall, median(rs.map((r) => r.cellUs)));
        process.stdout.write(
          `| ${w.name} | ${lane} | ${median(rs.map((r) => r.ops)).toFixed(0)} | ${lane === 'direct' ? '' : ratio.toFixed(3)} | ${median(rs.map((r) => r.p50)).toFixed(2)} | ${median(rs.map((r) => r.p99)).toFixed(2)} | ${median(rs.map((r) => r.cellUs)).toFixed(0)} | ${lane === 'direct' ? '' : median(rs.map((r) => r.routerUs)).toFixed(1)} | ${rs.reduce((a, r) => a + r.errors, 0)} |\n`,
        );
      }
    }
    const perRouterCore = 1e6 / Math.max(1, routerUsPerCall);
    process.stdout.write(
      `\nmodel: a router core routes about ${perRouterCore.toFixed(0)} calls/s (${routerUsPerCall.toFixed(1)} µs a call, the costlier workload); ` +
        `an API core serves about ${(1e6 / Math.max(1, cellUsPerCall)).toFixed(0)} (${cellUsPerCall.toFixed(0)} µs a call, PostgreSQL not counted); ` +
        `so throughput at N cells is min(N × one cell's, router cores × ${perRouterCore.toFixed(0)})\n`,
    );
    process.stdout.write(`load at the end ${loadAverage()}\n`);
  });
}

main().catch((err) => {
  process.stderr.write(`bench:router failed: ${(err as Error).stack ?? err}\n`);
  process.exit(1);
});
