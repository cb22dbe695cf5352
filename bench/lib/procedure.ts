// What bench/kvProcedure.ts and bench/logProcedure.ts share: a PostgreSQL to measure on, a database
// with the schema of a chosen git revision, the statements the API sent at that revision, and the
// backend's CPU per call.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { Client } from 'pg';
import { startEmbeddedPostgres, freePort } from '../../shared/embeddedPostgres';

export type Statement = { name: string; text: string };

const ROOT = path.resolve(__dirname, '..', '..', '..');

/** Nanoseconds a process has run on a CPU (schedstat: ns resolution, unlike /proc/<pid>/stat). */
function cpuNs(pid: number): number {
  return Number(fs.readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
}

/** One connection and the pid of the backend serving it (on this machine: the server is local). */
export interface Backend {
  client: Client;
  pid: number;
}

/** The backend's CPU µs per call over `calls` sequential calls: commit waits and neighbours do not count. */
export async function backendUsPerCall(backend: Backend, calls: number, call: () => Promise<unknown>): Promise<number> {
  const c0 = cpuNs(backend.pid);
  for (let i = 0; i < calls; i++) await call();
  return (cpuNs(backend.pid) - c0) / 1000 / calls;
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

/**
 * The schema files of a git revision, or of the working tree, in the order a fresh database takes
 * them: the migrations, then the function definitions (sql/functions/, bodies checked at call time
 * as the boot's first pass does). A revision from before the split has its numbered files in sql/.
 */
export function schemaOf(ref: string | undefined): string[] {
  const list = (dir: string): string[] =>
    ref
      ? execFileSync('git', ['ls-tree', '--name-only', ref, `${dir}/`], { cwd: ROOT }).toString().trim().split('\n').filter((f) => f.endsWith('.sql'))
      : fs.existsSync(path.join(ROOT, dir)) ? fs.readdirSync(path.join(ROOT, dir)).filter((f) => f.endsWith('.sql')).map((f) => `${dir}/${f}`) : [];
  const read = (file: string): string =>
    ref ? execFileSync('git', ['show', `${ref}:${file}`], { cwd: ROOT }).toString() : fs.readFileSync(path.join(ROOT, file), 'utf8');
  const migrations = list('sql/migrations');
  const numbered = (migrations.length > 0 ? migrations : list('sql')).filter((f) => /\/\d+_.+\.sql$/.test(f)).sort();
  const functions = list('sql/functions').sort();
  return [...numbered.map(read), ...(functions.length > 0 ? ['SET LOCAL check_function_bodies = off', ...functions.map(read)] : [])];
}

/**
 * A statement of shared/sql/<file> at a revision (`export const X = { name: '...', text: `...` }`),
 * read as text rather than imported, so a revision whose statements take other parameters still compares.
 */
export function statementAt(ref: string, file: string, constant: string): Statement {
  const source = execFileSync('git', ['show', `${ref}:shared/sql/${file}`], { cwd: ROOT }).toString();
  const m = new RegExp(`export const ${constant} = \\{\\s*name: '([^']+)',\\s*text: \`([^\`]*)\``).exec(source);
  if (!m) throw new Error(`${ref}:shared/sql/${file} has no ${constant} of the expected shape`);
  return { name: m[1], text: m[2] };
}

/** A fresh database `name` with the schema of `ref` (the working tree when undefined), and a connection to it. */
export async function databaseAt(url: string, name: string, ref: string | undefined, options?: string): Promise<Backend> {
  const files = schemaOf(ref);
  const admin = new Client({ connectionString: url });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${name}`);
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const u = new URL(url);
  u.pathname = `/${name}`;
  const client = new Client({ connectionString: u.toString(), options });
  await client.connect();
  await client.query('BEGIN');
  for (const f of files) await client.query(f);
  await client.query('COMMIT');
  const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
  return { client, pid };
}

/** DATABASE_URL, else an embedded PostgreSQL in a temp folder for the length of `run`. */
export async function withServer(run: (url: string) => Promise<void>): Promise<void> {
  if (process.env.DATABASE_URL) return run(process.env.DATABASE_URL);
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-bench-proc-'));
  const embedded = await startEmbeddedPostgres({ dataDir: path.join(scratch, 'pg'), port: await freePort(), throwaway: true });
  try {
    await run(embedded.url);
  } finally {
    await embedded.stop();
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/** Calls in a block. Blocks alternate between the lanes, so a neighbour's burst of load lands on all of them. */
export const BLOCK = 100;

/**
 * A procedure benchmark's run: its arguments (--compare=<git ref>: a second lane, `before`, with
 * the schema of that revision; --only=<name prefixes>), the lanes on one server (`now`: the
 * working tree's schema, in database `<prefix>_b`), and the number of blocks for `calls`. The
 * lanes' connections end after `run`.
 */
export async function withLanes<L extends { client: Client }>(
  prefix: string,
  calls: number,
  open: (url: string, name: string, ref: string | undefined) => Promise<L>,
  run: (r: { now: L; before?: L; compare?: string; selected(name: string): boolean; blocks: number }) => Promise<void>,
): Promise<void> {
  const compare = process.argv.find((a) => a.startsWith('--compare='))?.slice(10);
  const only = process.argv.find((a) => a.startsWith('--only='))?.slice(7);
  const selected = (name: string) => !only || only.split(',').some((o) => name.startsWith(o));
  await withServer(async (url) => {
    const now = await open(url, `${prefix}_b`, undefined);
    const before = compare ? await open(url, `${prefix}_a`, compare) : undefined;
    try {
      await run({ now, before, compare, selected, blocks: Math.max(3, Math.round(calls / BLOCK)) });
    } finally {
      await now.client.end();
      await before?.client.end();
    }
  });
}
