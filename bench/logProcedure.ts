// The PostgreSQL side of POST /api/v1/push alone: the statement the API sends (shared/sql/log.ts
// LOG_PUSH), one connection, sequential, each call its own transaction as on the route. Measures the
// backend's CPU per call (pg_stat_statements is not available on the embedded server).
//   node dist/bench/logProcedure.js            (embedded PostgreSQL, or DATABASE_URL)
//   --calls=3000 (BENCH_CALLS), --compare=<git ref> (the same calls against that revision's sql/
//   and that revision's LOG_PUSH, in a second database, alternating), --only=one,ten (cases whose
//   name starts so)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { Client } from 'pg';
import { startEmbeddedPostgres, freePort, EmbeddedPostgres } from '../shared/embeddedPostgres';
import { LOG_PUSH } from '../shared/sql/log';

const CALLS = Number(process.argv.find((a) => a.startsWith('--calls='))?.slice(8) ?? process.env.BENCH_CALLS ?? 3000);
const PAYLOAD = JSON.stringify({ name: 'bench', n: 12345, tags: ['a', 'b', 'c'], payload: 'x'.repeat(48) });
const tag = Date.now().toString(36);
let counter = 0;

type Statement = { name: string; text: string };
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
];

/** Nanoseconds a process has run on a CPU (schedstat: ns resolution, unlike /proc/<pid>/stat). */
function cpuNs(pid: number): number {
  return Number(fs.readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
}

interface Lane {
  client: Client;
  pid: number;
  push: Statement;
}

const query = (lane: Lane, c: Case): Q => ({ ...lane.push, values: [c.body()] });

/** Server CPU µs per call of the backend serving this connection (when it is on this machine). */
async function block(lane: Lane, c: Case, calls: number): Promise<number> {
  const c0 = cpuNs(lane.pid);
  for (let i = 0; i < calls; i++) await lane.client.query(query(lane, c));
  return (cpuNs(lane.pid) - c0) / 1000 / calls;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/** The sql/ files of a git revision, or of the working tree. */
function schemaOf(ref: string | undefined): string[] {
  const dir = path.resolve(__dirname, '..', '..', 'sql');
  if (!ref) return fs.readdirSync(dir).filter((f) => /^\d+_.+\.sql$/.test(f)).sort().map((f) => fs.readFileSync(path.join(dir, f), 'utf8'));
  const root = path.resolve(__dirname, '..', '..');
  const names = execFileSync('git', ['ls-tree', '--name-only', ref, 'sql/'], { cwd: root }).toString().trim().split('\n').filter((f) => /\/\d+_.+\.sql$/.test(f)).sort();
  return names.map((n) => execFileSync('git', ['show', `${ref}:${n}`], { cwd: root }).toString());
}

/** LOG_PUSH of shared/sql/log.ts at a revision, read as text (not imported). */
function statementOf(ref: string | undefined): Statement {
  if (!ref) return LOG_PUSH;
  const root = path.resolve(__dirname, '..', '..');
  const source = execFileSync('git', ['show', `${ref}:shared/sql/log.ts`], { cwd: root }).toString();
  const m = /export const LOG_PUSH = \{\s*name: '([^']+)',\s*text: `([^`]*)`/.exec(source);
  if (!m) throw new Error(`${ref}:shared/sql/log.ts has no LOG_PUSH of the expected shape`);
  return { name: m[1], text: m[2] };
}

async function database(url: string, name: string, ref: string | undefined): Promise<Lane> {
  const files = schemaOf(ref);
  const admin = new Client({ connectionString: url });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${name}`);
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const u = new URL(url);
  u.pathname = `/${name}`;
  const client = new Client({ connectionString: u.toString() });
  await client.connect();
  await client.query('BEGIN');
  for (const f of files) await client.query(f);
  await client.query('COMMIT');
  const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
  const lane = { client, pid, push: statementOf(ref) };
  // Every queue and partition exists before measuring: the steady state, not first use.
  for (let i = 0; i < 100; i++) await client.query(query(lane, CASES[1]));
  await client.query(query(lane, CASES[0]));
  await client.query(query(lane, CASES[3]));
  return lane;
}

async function main(): Promise<void> {
  const compare = process.argv.find((a) => a.startsWith('--compare='))?.slice(10);
  const only = process.argv.find((a) => a.startsWith('--only='))?.slice(7);
  let embedded: EmbeddedPostgres | undefined;
  let scratch: string | undefined;
  let url = process.env.DATABASE_URL;
  if (!url) {
    scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-bench-log-'));
    fs.chmodSync(scratch, 0o755); // as root, the postgres user must reach the data folder
    embedded = await startEmbeddedPostgres({ dataDir: path.join(scratch, 'pg'), port: await freePort(), throwaway: true });
    url = embedded.url;
  }
  try {
    const now = await database(url, 'queen_bench_log_b', undefined);
    const before = compare ? await database(url, 'queen_bench_log_a', compare) : undefined;
    // Blocks of calls alternate between the lanes, so a neighbour's burst of load lands on both.
    const BLOCK = 100;
    const blocks = Math.max(3, Math.round(CALLS / BLOCK));
    process.stdout.write(
      `one connection per lane, sequential calls (each its own transaction), ${blocks} alternating blocks of ${BLOCK}; ` +
        "median over blocks of the backend's CPU µs per call (/proc/<backend>/schedstat: commit waits and neighbours do not count)\n",
    );
    process.stdout.write(
      compare ? `| push | @ ${compare} | working tree | change |\n|---|---:|---:|---:|\n` : '| push | µs per call |\n|---|---:|\n',
    );
    for (const c of CASES) {
      if (only && !only.split(',').some((o) => c.name.startsWith(o))) continue;
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
        before ? `| ${c.name} | ${ma.toFixed(0)} | ${mb.toFixed(0)} | ${(((mb - ma) / ma) * 100).toFixed(0)}% |\n` : `| ${c.name} | ${mb.toFixed(0)} |\n`,
      );
    }
    await now.client.end();
    await before?.client.end();
  } finally {
    await embedded?.stop();
    if (scratch) fs.rmSync(scratch, { recursive: true, force: true });
  }
}

main().catch((err) => {
  process.stderr.write(`${err?.stack ?? err}\n`);
  process.exit(1);
});
