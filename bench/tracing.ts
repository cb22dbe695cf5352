// npm run bench:tracing: what traces cost. Three cells on one embedded PostgreSQL, started alike
// but for tracing: off, on at 1 % (parentbased_traceidratio 0.01) and on at 100 %, the two traced
// ones exporting to an OTLP/HTTP sink in this process (it reads and drops; its CPU is this
// process's, not the cells'). Workloads: a KV get (path route), a KV put (batch route) and a
// transaction-wire bundle (a KV put and a push in one commit). Each round runs every workload on
// every cell in a rotated order, a closed loop of N clients for D seconds; the table has medians
// and each traced cell's ops/s as a ratio of the untraced one's in the same round, and the cell's
// own CPU per request (its master and workers, from /proc): the cost itself, which a busy machine
// blurs far less than it blurs throughput.
// Options: --duration=5 (BENCH_DURATION_S), --rounds=3 (BENCH_ROUNDS), --clients=16 (BENCH_CLIENTS),
// --workers=1 (QUEEN_WORKERS), --cpu-prof=DIR (each cell's processes write V8 CPU profiles to
// DIR/<mode>; read them with `node dist/bench/profileSummary.js DIR/<mode>`).
import { spawn, ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { applySchema } from '../shared/db';
import { startEmbeddedPostgres, freePort } from '../shared/embeddedPostgres';
import { median, positiveOption } from './lib/options';
import { rawClient, HttpClient, Workload, workloadLoop } from './lib/load';
import { cellEnv, loadAverage, machineLine, stopChild, TreeCpu, waitReady } from './lib/procs';

const DURATION_S = positiveOption('duration', 'BENCH_DURATION_S', 5);
const ROUNDS = positiveOption('rounds', 'BENCH_ROUNDS', 3);
const CLIENTS = positiveOption('clients', 'BENCH_CLIENTS', 16);
const WORKERS = positiveOption('workers', 'QUEEN_WORKERS', 1);
const CPU_PROF = process.argv.find((a) => a.startsWith('--cpu-prof='))?.slice(11);

// --modes=off,0.01,1 (BENCH_TRACING_MODES): each a cell; a number is the sampled share of traces.
const MODES = (process.argv.find((a) => a.startsWith('--modes='))?.slice(8) ?? process.env.BENCH_TRACING_MODES ?? 'off,0.01,1').split(',').map((m) =>
  m === 'off'
    ? { name: 'off', env: {} as Record<string, string> }
    : { name: `${Number(m) * 100} %`, env: { OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: String(Number(m)) } },
);

const KEYS = 100;
const WORKLOADS: Workload[] = [
  { name: 'KV get (path)', request: (_c, i) => ({ method: 'GET', path: `/api/v1/kv/bench/k${i % KEYS}` }) },
  {
    name: 'KV put (batch)',
    request: (c, i) => ({ method: 'POST', path: '/api/v1/kv', body: JSON.stringify({ operations: [{ op: 'put', ns: 'bench', key: `p${c}-${i % 1000}`, value: { i }, ttlSeconds: 600 }] }) }),
  },
  {
    name: 'bundle (KV put + push)',
    request: (c, i) => ({
      method: 'POST',
      path: '/api/v1/transaction',
      body: JSON.stringify({ operations: [{ type: 'push', items: [{ queue: 'bench', payload: { i } }] }], kv: [{ op: 'put', ns: 'bench', key: `t${c}-${i % 1000}`, value: { i }, ttlSeconds: 600 }] }),
    }),
  },
];

/** An OTLP/HTTP sink: reads every export, counts its bytes, answers 200. */
async function startSink(): Promise<{ url: string; bytes: () => number; close(): void }> {
  let bytes = 0;
  const server = http.createServer((req, res) => {
    req.on('data', (c: Buffer) => (bytes += c.length));
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, bytes: () => bytes, close: () => server.close() };
}

async function startCell(databaseUrl: string, mode: string, env: Record<string, string>): Promise<{ port: number; proc: ChildProcess }> {
  const port = await freePort();
  const profile = CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(CPU_PROF, mode.replace(/\W+/g, ''))}`] : [];
  const proc = spawn(process.execPath, [...profile, path.resolve(__dirname, '..', 'services', 'api', 'main.js')], {
    env: { ...cellEnv(databaseUrl, port, WORKERS), DB_POOL_SIZE: '40', ...env },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  await waitReady(port, '/ready');
  return { port, proc };
}

async function main(): Promise<void> {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-bench-tracing-'));
  // Walkable, so that as root the postgres user reaches the data folder where we put it.
  fs.chmodSync(scratch, 0o755);
  const pg = await startEmbeddedPostgres({ dataDir: path.join(scratch, 'pg'), port: await freePort(), throwaway: true });
  const sink = await startSink();
  const cells: Array<{ port: number; proc: ChildProcess }> = [];
  try {
    await applySchema(pg.url);
    for (const m of MODES) cells.push(await startCell(pg.url, m.name, m.name === 'off' ? m.env : { ...m.env, OTEL_EXPORTER_OTLP_ENDPOINT: sink.url }));
    process.stdout.write(`bench:tracing: ${machineLine('embedded PostgreSQL')}; load ${loadAverage()}; ${ROUNDS} rounds of ${DURATION_S} s, ${CLIENTS} clients, ${WORKERS} worker(s) a cell\n`);
    // The keys the gets read, on every cell's database (one database: once).
    const seed = rawClient('127.0.0.1', cells[0].port);
    for (let k = 0; k < KEYS; k++) await seed.request('POST', '/api/v1/kv', JSON.stringify({ operations: [{ op: 'put', ns: 'bench', key: `k${k}`, value: { k }, ttlSeconds: 3600 }] }));
    seed.close();

    const results = new Map<string, Array<{ ops: number; cpuUs: number; p50: number; p99: number; errors: number }>>();
    for (let round = 0; round < ROUNDS; round++) {
      for (const w of WORKLOADS) {
        const order = MODES.map((_, i) => (i + round) % MODES.length);
        for (const mi of order) {
          const clients: HttpClient[] = Array.from({ length: CLIENTS }, () => rawClient('127.0.0.1', cells[mi].port));
          const cpu = new TreeCpu(() => [cells[mi].proc.pid!]);
          cpu.start();
          const r = await workloadLoop(clients, DURATION_S * 1000, w);
          const cellUs = cpu.stop();
          for (const c of clients) c.close();
          // A traced cell exports a second after its spans end (BatchSpanProcessor): let that land
          // before the next cell's turn, so one cell's export never runs in another's measurement.
          await new Promise((r) => setTimeout(r, 1500));
          const key = `${w.name}|${mi}`;
          results.set(key, [...(results.get(key) ?? []), { ops: r.ops / r.seconds, cpuUs: cellUs / Math.max(1, r.ops), p50: r.p50Us / 1000, p99: r.p99Us / 1000, errors: r.errors }]);
        }
      }
    }

    process.stdout.write('\n| workload | tracing | ops/s | ÷ off | cell CPU µs/req | ÷ off | p50 ms | p99 ms | errors |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n');
    for (const w of WORKLOADS) {
      const off = results.get(`${w.name}|0`)!;
      MODES.forEach((m, mi) => {
        const rs = results.get(`${w.name}|${mi}`)!;
        // The ratio per round (the same minutes of the machine), then their median.
        const ratio = median(rs.map((r, i) => r.ops / off[i].ops));
        const cpuRatio = median(rs.map((r, i) => r.cpuUs / off[i].cpuUs));
        process.stdout.write(
          `| ${w.name} | ${m.name} | ${median(rs.map((r) => r.ops)).toFixed(0)} | ${mi === 0 ? '' : ratio.toFixed(3)} | ${median(rs.map((r) => r.cpuUs)).toFixed(0)} | ${mi === 0 ? '' : cpuRatio.toFixed(3)} | ${median(rs.map((r) => r.p50)).toFixed(2)} | ${median(rs.map((r) => r.p99)).toFixed(2)} | ${rs.reduce((a, r) => a + r.errors, 0)} |\n`,
        );
      });
    }
    process.stdout.write(`\nexported to the sink: ${(sink.bytes() / 1e6).toFixed(1)} MB; load at the end ${loadAverage()}\n`);
  } finally {
    for (const c of cells) await stopChild(c.proc);
    sink.close();
    await pg.stop();
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

main().catch((err) => {
  process.stderr.write(`bench:tracing failed: ${(err as Error).stack ?? err}\n`);
  process.exit(1);
});
