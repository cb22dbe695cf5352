// The PostgreSQL side of POST /api/v1/push alone: the statement the API sends (shared/sql/log.ts
// LOG_PUSH), one connection, sequential, each call its own transaction as on the route. Measures the
// backend's CPU per call (pg_stat_statements is not available on the embedded server).
//   node dist/bench/logProcedure.js            (embedded PostgreSQL, or DATABASE_URL)
//   --calls=3000 (BENCH_CALLS), --compare=<git ref> (the same calls against that revision's sql/
//   and that revision's LOG_PUSH, in a second database, alternating), --only=one,ten (cases whose
//   name starts so); --compare=v1: this tree's v1 push entry (queen.log_push_request_v1, 0.1's push:
//   no encryption check, no maxSize check) in the second database, the baseline of the v2 push the
//   route sends (queen.log_push_request_v2: the QK428 sealing probe and the maxSize check around v1)
//   measured in the same run (npm run bench:push)
import { DEFAULT_TENANT } from '../shared/config';
import { LOG_PUSH } from '../shared/sql/log';
import { Backend, backendUsPerCall, BLOCK, databaseAt, median, Statement, statementAt, withLanes } from './lib/procedure';

const CALLS = Number(process.argv.find((a) => a.startsWith('--calls='))?.slice(8) ?? process.env.BENCH_CALLS ?? 3000);
const PAYLOAD = JSON.stringify({ name: 'bench', n: 12345, tags: ['a', 'b', 'c'], payload: 'x'.repeat(48) });
const tag = Date.now().toString(36);
let counter = 0;

type Q = Statement & { values: unknown[] };
interface Case {
  name: string;
  /** The request body's text, as the route passes it. */
  body: () => string;
}
const item = (queue: string, extra = '') => `{"queue":"${queue}","payload":${PAYLOAD}${extra}}`;
const CASES: Case[] = [
  { name: 'one item, one queue', body: () => `{"items":[${item('bench')}]}` },
  { name: 'one item, 100 queues round-robin', body: () => `{"items":[${item(`bench-${counter++ % 100}`)}]}` },
  { name: 'one item with a transactionId', body: () => `{"items":[${item('bench', `,"transactionId":"tx-${tag}-${counter++}"`)}]}` },
  { name: 'one item, named partition', body: () => `{"items":[${item('bench', ',"partition":"p1"')}]}` },
  { name: 'ten items, one queue', body: () => `{"items":[${Array.from({ length: 10 }, () => item('bench')).join(',')}]}` },
  // A queue with maxSize (a cap no run reaches): v2 runs its checks; v1 knows no cap.
  { name: 'one item, queue with maxSize', body: () => `{"items":[${item('bench-capped')}]}` },
];

interface Lane extends Backend {
  push: Statement;
}

/** The statement's tenant first when it takes one ($2: since the log became per tenant; an older ref's takes the body alone). */
const query = (lane: Lane, c: Case): Q => ({ ...lane.push, values: lane.push.text.includes('$2') ? [DEFAULT_TENANT, c.body()] : [c.body()] });

async function block(lane: Lane, c: Case, calls: number): Promise<number> {
  return backendUsPerCall(lane, calls, () => lane.client.query(query(lane, c)));
}

/** The v1 push entry, the same statement shape as LOG_PUSH: the baseline of --compare=v1. */
const LOG_PUSH_V1: Statement = {
  name: 'bench_log_push_request_v1',
  text: `SELECT queen.log_push_request_v1($1::uuid, s.items)::text AS results FROM (SELECT $2::jsonb -> 'items' AS items OFFSET 0) s`,
};

async function database(url: string, name: string, ref: string | undefined): Promise<Lane> {
  const v1 = ref === 'v1';
  const lane = {
    ...(await databaseAt(url, name, v1 ? undefined : ref)),
    push: v1 ? LOG_PUSH_V1 : ref ? statementAt(ref, 'log.ts', 'LOG_PUSH') : LOG_PUSH,
  };
  // The capped queue's option, where this revision has queen.log_configure_v2 (0.2's options).
  const { rows } = await lane.client.query(`SELECT to_regproc('queen.log_configure_v2') IS NOT NULL AS has`).catch(() => ({ rows: [{ has: false }] }));
  if (rows[0].has) {
    await lane.client.query(`SELECT queen.log_configure_v2($1::uuid, '{"queue": "bench-capped", "options": {"maxSize": 1000000000}}', false)`, [DEFAULT_TENANT]);
  }
  // Every queue and partition exists before measuring: the steady state, not first use.
  for (let i = 0; i < 100; i++) await lane.client.query(query(lane, CASES[1]));
  await lane.client.query(query(lane, CASES[0]));
  await lane.client.query(query(lane, CASES[3]));
  return lane;
}

async function main(): Promise<void> {
  await withLanes('queen_bench_log', CALLS, database, async ({ now, before, compare, selected, blocks }) => {
    process.stdout.write(
      `one connection per lane, sequential calls (each its own transaction), ${blocks} alternating blocks of ${BLOCK}; ` +
        "median over blocks of the backend's CPU µs per call (/proc/<backend>/schedstat: commit waits and neighbours do not count)\n",
    );
    process.stdout.write(
      compare === 'v1'
        ? '| push | v1 (µs per call) | v2 (µs per call) | v2 / v1 |\n|---|---:|---:|---:|\n'
        : compare ? `| push | @ ${compare} | working tree | change |\n|---|---:|---:|---:|\n` : '| push | µs per call |\n|---|---:|\n',
    );
    for (const c of CASES) {
      if (!selected(c.name)) continue;
      const perBlock = c.name.startsWith('ten') ? BLOCK / 5 : BLOCK;
      const a: number[] = [];
      const b: number[] = [];
      for (let i = 0; i < 20; i++) {
        await now.client.query(query(now, c));
        if (before) await before.client.query(query(before, c));
      }
      for (let i = 0; i < blocks; i++) {
        if (i % 2 === 0) {
          if (before) a.push(await block(before, c, perBlock));
          b.push(await block(now, c, perBlock));
        } else {
          b.push(await block(now, c, perBlock));
          if (before) a.push(await block(before, c, perBlock));
        }
      }
      const [ma, mb] = [median(a), median(b)];
      process.stdout.write(
        !before ? `| ${c.name} | ${mb.toFixed(0)} |\n`
          : compare === 'v1' ? `| ${c.name} | ${ma.toFixed(0)} | ${mb.toFixed(0)} | ${(mb / ma).toFixed(2)}x |\n`
          : `| ${c.name} | ${ma.toFixed(0)} | ${mb.toFixed(0)} | ${(((mb - ma) / ma) * 100).toFixed(0)}% |\n`,
      );
    }
  });
}

main().catch((err) => {
  process.stderr.write(`${err?.stack ?? err}\n`);
  process.exit(1);
});
