// npm run bench:ha-sync: what synchronous replication costs the push and the once-marker bundle, in
// one run on the three-node Patroni cluster of test/ha/cluster.ts (through HAProxy, the built API
// with one worker). Alternating blocks with Patroni's synchronous_mode on and off (REST API PATCH
// /config, waited until the primary's synchronous_standby_names says so): in each block, one client
// in turn pushes OPS messages (each one commit) and then settles OPS popped messages with a bundle
// (POST /api/v1/transaction: a KV putIfAbsent marker and the ack, one commit); only the push and the
// bundle calls are timed. Prints the median latency of each, on and off, and the ratio on/off.
// Bounded: BLOCKS pairs of blocks (4) of OPS calls each (100), every call within 10 s.
import { MISSING, startHaCluster } from '../test/ha/cluster';
import { CALL_BOUND_MS, startCell, TENANT_HEADERS } from '../test/ha/failover';

const OPS = Number(process.env.OPS ?? 100);
const BLOCKS = Number(process.env.BLOCKS ?? 4);

async function call(base: string, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(base + path, { method, headers: TENANT_HEADERS, body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.timeout(CALL_BOUND_MS) });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${path} answered ${res.status}: ${text}`);
  return text ? JSON.parse(text) : undefined;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};

async function main(): Promise<void> {
  if (MISSING) {
    process.stdout.write(`bench:ha-sync not run: ${MISSING}\n`);
    process.exit(2);
  }
  const cluster = await startHaCluster({ nodes: 3 });
  let cell: Awaited<ReturnType<typeof startCell>> | undefined;
  const times: Record<'on' | 'off', { push: number[]; bundle: number[] }> = { on: { push: [], bundle: [] }, off: { push: [], bundle: [] } };
  try {
    cell = await startCell(cluster);
    const base = cell.base;
    // Warm-up: the queue, its partition and the pools exist before any call is timed.
    await call(base, 'POST', '/api/v1/push', { items: [{ queue: 'sync-cost', payload: 0, transactionId: 'warm' }] });
    let n = 0;
    for (let b = 0; b < BLOCKS; b++) {
      for (const mode of ['on', 'off'] as const) {
        await cluster.setSynchronousMode(mode === 'on');
        const [p0, b0] = [times[mode].push.length, times[mode].bundle.length];
        for (let i = 0; i < OPS; i++) {
          const t = process.hrtime.bigint();
          await call(base, 'POST', '/api/v1/push', { items: [{ queue: 'sync-cost', payload: { i }, transactionId: `p-${++n}` }] });
          times[mode].push.push(Number(process.hrtime.bigint() - t) / 1e6);
        }
        for (let i = 0; i < OPS; i++) {
          const popped = await call(base, 'GET', '/api/v1/pop/queue/sync-cost?batch=1&consumerGroup=sync-cost&wait=false');
          const m = popped.messages[0];
          const bundle = {
            operations: [{ type: 'ack', transactionId: m.transactionId, partitionId: m.partitionId, status: 'completed', consumerGroup: 'sync-cost', leaseId: m.leaseId }],
            kv: [{ op: 'putIfAbsent', ns: 'sync-cost', key: `once:${m.transactionId}`, value: true, ttlSeconds: 3600, required: true }],
          };
          const t = process.hrtime.bigint();
          const res = await call(base, 'POST', '/api/v1/transaction', bundle);
          times[mode].bundle.push(Number(process.hrtime.bigint() - t) / 1e6);
          if (res.ok !== true) throw new Error(`a bundle answered ${JSON.stringify(res)}`);
        }
        // Each block's medians too: the machine's other load moves them between blocks.
        process.stdout.write(`block ${b + 1} sync ${mode}: push ${median(times[mode].push.slice(p0)).toFixed(2)} ms, bundle ${median(times[mode].bundle.slice(b0)).toFixed(2)} ms\n`);
      }
    }
    await cluster.setSynchronousMode(true);
  } finally {
    await cell?.stop().catch(() => undefined);
    await cluster.stop();
  }
  const row = (what: 'push' | 'bundle') => {
    const on = median(times.on[what]);
    const off = median(times.off[what]);
    return { what, calls: times.on[what].length + times.off[what].length, onMs: +on.toFixed(2), offMs: +off.toFixed(2), ratio: +(on / off).toFixed(2) };
  };
  const rows = [row('push'), row('bundle')];
  process.stdout.write(`${JSON.stringify({ ops: OPS, blocks: BLOCKS, rows })}\n\ncall     calls  median sync on  median sync off  ratio on/off\n`);
  for (const r of rows) process.stdout.write(`${r.what.padEnd(9)}${String(r.calls).padEnd(7)}${`${r.onMs} ms`.padEnd(16)}${`${r.offMs} ms`.padEnd(17)}${r.ratio}\n`);
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
