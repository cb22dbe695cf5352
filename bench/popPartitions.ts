// npm run bench:pop-partitions — what a pop that names no partition costs as its queue's partitions
// grow. Such a pop (Queen's consume() of a queue, the common one) picks, among the queue's ready
// partitions (those a group may have something in: sql/migrations/061_ready_partitions.sql), the
// one whose group row was leased longest ago with a message past its cursor. Two shapes of queue:
// every partition with messages waiting (a backlog: every partition is ready, and the pop's cost is
// in proportion to them), and the usual one, ten partitions with messages among partitions the
// group has finished and the sweeper has settled (the pop reads the ten). A pop of a named
// partition of the same queue is the baseline. And a pop of ten partitions at once (Queen's
// `partitions`, batch 10) of the backlog queue: one read of the candidates for all ten.
// One client, the statements the API and the sweeper send (shared/sql/), each pop's message acked
// before the next pop; wall time a call, round trip included, on the run's own embedded PostgreSQL
// (or DATABASE_URL). Options: --sizes=10,100,1000,10000 --pops=300 (BENCH_POPS).
import { Client } from 'pg';
import { DEFAULT_TENANT } from '../shared/config';
import { LOG_ACK_BATCH, LOG_POP, LOG_PUSH_SEALED, LOG_SUBSCRIBE_NEW } from '../shared/sql/log';
import { SWEEPER_PASS } from '../shared/sql/sweeper';
import { benchDatabase } from './lib/database';
import { median, positiveOption } from './lib/options';

const argv = process.argv.slice(2);
const SIZES = (argv.find((a) => a.startsWith('--sizes='))?.slice(8) ?? '10,100,1000,10000').split(',').map(Number);
const POPS = positiveOption('pops', 'BENCH_POPS', 300);
const out = (s = '') => process.stdout.write(`${s}\n`);

/** `partitions` partitions of `each` messages, pushed 500 partitions a request. */
async function fill(c: Client, queue: string, partitions: number, each: number): Promise<void> {
  for (let from = 0; from < partitions; from += 500) {
    const items = [];
    for (let p = from; p < Math.min(partitions, from + 500); p++) {
      for (let k = 0; k < each; k++) items.push({ queue, partition: `p${p}`, payload: { k } });
    }
    await c.query({ ...LOG_PUSH_SEALED, values: [DEFAULT_TENANT, JSON.stringify({ items }), null] });
  }
}

/**
 * `partitions` partitions the group has finished (subscribed at their end) and the sweeper has
 * settled, then a backlog in ten of them, enough for every pop.
 */
async function idleButTen(c: Client, queue: string, partitions: number): Promise<void> {
  await fill(c, queue, partitions, 1);
  await c.query({ ...LOG_SUBSCRIBE_NEW, values: [DEFAULT_TENANT, queue, null, 'g'] });
  // The group's first pop registers it with the queue (and finds nothing); the pass settles.
  await c.query({ ...LOG_POP, values: [DEFAULT_TENANT, queue, null, 'g', 1, 1] });
  await c.query({ ...SWEEPER_PASS, values: [null, 'bench', 64, 100, 1000, true, 0, 0] });
  const items = Array.from({ length: POPS + 20 }, (_, k) => ({ queue, partition: `p${k % 10}`, payload: { k } }));
  await c.query({ ...LOG_PUSH_SEALED, values: [DEFAULT_TENANT, JSON.stringify({ items }), null] });
}

/** Median wall time of a pop of one message a partition from `partitions` partitions (microseconds); each message popped is acked. */
async function pops(c: Client, queue: string, partition: string | null, partitions = 1): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < POPS + 10; i++) {
    const t0 = process.hrtime.bigint();
    const { rows } = await c.query({ ...LOG_POP, values: [DEFAULT_TENANT, queue, partition, 'g', partitions, partitions] });
    if (i >= 10) times.push(Number(process.hrtime.bigint() - t0) / 1000);
    const messages = JSON.parse(rows[0].messages) as { transactionId: string; partitionId: string; leaseId: string }[];
    if (messages.length < Math.min(partitions, 10)) throw new Error(`${queue}${partition ? `/${partition}` : ""}: pop ${i} found no message`);
    const acks = messages.map((m) => ({ transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId, consumerGroup: 'g', status: 'completed' }));
    const { rows: [acked] } = await c.query({ ...LOG_ACK_BATCH, values: [DEFAULT_TENANT, JSON.stringify({ acknowledgments: acks })] });
    if (!acked.ok) throw new Error(`${queue}: an ack failed: ${acked.results}`);
  }
  return median(times);
}

async function main(): Promise<void> {
  const db = await benchDatabase('pop_partitions', { schema: true });
  const c = new Client({ connectionString: db.url });
  await c.connect();
  try {
    out(`bench:pop-partitions  ${new Date().toISOString()}  one client, ${POPS} pops a point, median wall µs a pop (round trip included)`);
    out(`| partitions in the queue | pop naming none, all with messages | pop naming none, ten with messages | pop of a named partition | ratios to named | ten partitions a pop, all with messages |`);
    out(`| ---: | ---: | ---: | ---: | ---: | ---: |`);
    for (const n of SIZES) {
      const queue = `q${n}`;
      // Exactly n partitions, with messages enough between them for every pop naming none, and
      // for the pops of ten partitions (each leasing one message of each of ten).
      await fill(c, queue, n, Math.max(3, Math.ceil((11 * (POPS + 10)) / n)));
      // One more partition with a backlog of its own for the named pops, enough for them whatever
      // the pops naming none took from it.
      const backlog = Array.from({ length: 2 * (POPS + 10) }, (_, k) => ({ queue, partition: 'named', payload: { k } }));
      await c.query({ ...LOG_PUSH_SEALED, values: [DEFAULT_TENANT, JSON.stringify({ items: backlog }), null] });
      await c.query('ANALYZE');
      const any = await pops(c, queue, null);
      const named = await pops(c, queue, 'named');
      const tenAtOnce = await pops(c, queue, null, 10);
      await idleButTen(c, `i${n}`, n);
      await c.query('ANALYZE');
      const ten = await pops(c, `i${n}`, null);
      out(`| ${n.toLocaleString('en-US')} | ${any.toFixed(0)} | ${ten.toFixed(0)} | ${named.toFixed(0)} | ${(any / named).toFixed(1)}x, ${(ten / named).toFixed(1)}x | ${tenAtOnce.toFixed(0)} |`);
    }
  } finally {
    await c.end();
    await db.stop();
  }
}

main().catch((err) => {
  process.stderr.write(`bench:pop-partitions failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});
