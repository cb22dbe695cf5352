// Moves a tenant from one cell to another (docs/scaling.md, "Moving a tenant"): pause, fence, copy,
// verify, flip the router, resume, remove. Each step is recorded (queen.tenant_moves on both cells,
// the placement on the routers), so a move stopped anywhere is finished by running it again, and at
// every moment exactly one cell holds the tenant's rows as the router serves them:
//
//   0. pre-copy the tenant's rows to the target (which refuses the tenant from here), the source
//              still serving it: the bulk of the copy, outside the refusal window.
//   1. pause   a tenant_moves row on the source too: every data call of the tenant is 503
//              tenant_moving (each API worker reads the rows with the grants, every QUOTA_REFRESH_MS,
//              and every SQL function a data call reaches reads the row again: queen.tenant_moving_v1).
//   2. fence   wait out that refresh, then for every transaction of the source begun before it: a
//              call that read no row began before the pause committed.
//   3. copy    one REPEATABLE READ snapshot of the source: what changed since the pre-copy, by each
//              row's md5, onto the target in one transaction (everything, if that fails), and a
//              count and checksum per table.
//   4. verify  the target's counts and checksums equal the snapshot's, and the source's still do (a
//              sweeper's work after the snapshot is caught here, and the copy is taken again).
//   5. flip    the placement map file, then every router's runtime API (set map / add map).
//   6. resume  the source becomes 'moved' (a call still reaching it is refused), the target's row goes.
//   7. remove  the source's rows of the tenant, in one transaction.
//
// Before the flip the source is the tenant's cell and the target holds nothing or a copy no one
// reads; from the flip the target is, and the source holds a copy no one reads until it is removed.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Client } from 'pg';
import { MOVED_TABLES } from './tables';

export interface CellEnd {
  /** The cell's PostgreSQL. */
  databaseUrl: string;
  /** The cell's backend in the router (haproxy.cfg), the value placement.map gives the tenant. */
  cell: string;
}

export interface MoveOptions {
  tenant: string;
  from: CellEnd;
  to: CellEnd;
  /** Every router's runtime API socket (stats socket ... level admin). */
  routers: string[];
  /** The map as haproxy.cfg names it. */
  map: string;
  /** The placement.map file a restarted router reads, rewritten before the runtime API is told. */
  mapFile?: string;
  /** How long the API workers take to see a pause: QUOTA_REFRESH_MS and a margin. */
  fenceMs?: number;
  /** The longest wait for the source's transactions older than the fence; past it the move stops, paused. */
  drainTimeoutMs?: number;
  log?: (line: string) => void;
  /** A drill (and the tests): stop as a crash would, right after this step. */
  stopAfter?: 'precopy' | 'pause' | 'copy' | 'flip' | 'resume';
}

export interface TableCheck {
  table: string;
  rows: number;
  checksum: string;
}

export interface MoveResult {
  /** The step this run started from: 'pause' for a fresh move. */
  startedAt: string;
  tables: TableCheck[];
  /** Milliseconds per step this run took. */
  steps: Record<string, number>;
  /** Copies taken (more than one when a sweeper changed the source after the snapshot). */
  copies: number;
}

export class MoveError extends Error {}

export const DEFAULT_FENCE_MS = 1500;
const DRAIN_TIMEOUT_MS = 20_000;
const COPY_ATTEMPTS = 3;
const RUNTIME_TIMEOUT_MS = 5000;
/** Every statement of the move has a bound; a copy of 10^5 rows takes about a second. */
const STATEMENT_TIMEOUT_MS = 120_000;

/** The row text both sides compare (and the copy carries) depends on these; the same on both sessions. */
const SESSION = `SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 3; SET bytea_output = 'hex'; SET statement_timeout = ${STATEMENT_TIMEOUT_MS}`;

async function connect(url: string): Promise<Client> {
  const c = new Client({ connectionString: url, application_name: 'queen-tenant-move' });
  await c.connect();
  await c.query(SESSION);
  return c;
}

/** One command on a router's runtime API, its answer. */
export function runtime(socket: string, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect(socket);
    let out = '';
    const timer = setTimeout(() => s.destroy(new Error(`the router's runtime API at ${socket} did not answer within ${RUNTIME_TIMEOUT_MS} ms`)), RUNTIME_TIMEOUT_MS);
    s.on('data', (d) => (out += d.toString()));
    s.on('end', () => {
      clearTimeout(timer);
      resolve(out);
    });
    s.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    s.end(`${command}\n`);
  });
}

/** The cell a router places the tenant on, or undefined. */
export async function placementOf(socket: string, map: string, tenant: string): Promise<string | undefined> {
  const answer = await runtime(socket, `get map ${map} ${tenant}`);
  if (/found=no/.test(answer)) return undefined;
  const value = /value="([^"]*)"/.exec(answer)?.[1];
  if (value === undefined) throw new MoveError(`the router at ${socket} answered "get map" with: ${answer.trim()}`);
  return value;
}

function rewriteMapFile(file: string, tenant: string, cell: string): void {
  const lines = fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n') : [];
  let found = false;
  const out = lines.map((line) => {
    if (line.trim().split(/\s+/)[0]?.toLowerCase() !== tenant) return line;
    found = true;
    return `${tenant} ${cell}`;
  });
  if (!found) {
    if (out.length > 0 && out[out.length - 1] === '') out.pop();
    out.push(`${tenant} ${cell}`, '');
  }
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}`);
  fs.writeFileSync(tmp, out.join('\n'));
  fs.renameSync(tmp, file);
}

interface MoveRow {
  role: 'source' | 'target' | 'moved';
  peer: string;
  step: string;
}

async function moveRow(c: Client, tenant: string): Promise<MoveRow | undefined> {
  const { rows } = await c.query<MoveRow>('SELECT role, peer, step FROM queen.tenant_moves WHERE tenant_id = $1', [tenant]);
  return rows[0];
}

async function setMoveRow(c: Client, tenant: string, role: MoveRow['role'], peer: string, step: string, freshPause = false): Promise<void> {
  await c.query(
    `INSERT INTO queen.tenant_moves AS m (tenant_id, role, peer, step) VALUES ($1, $2, $3, $4)
     ON CONFLICT (tenant_id) DO UPDATE SET role = EXCLUDED.role, peer = EXCLUDED.peer, step = EXCLUDED.step, updated_at = now()
       ${freshPause ? ', paused_at = CASE WHEN m.role = EXCLUDED.role THEN m.paused_at ELSE now() END' : ''}`,
    [tenant, role, peer, step],
  );
}

/** The table's columns in order, from the catalog; both cells must agree on every moved table's. */
async function layout(c: Client): Promise<string> {
  const { rows } = await c.query<{ t: string; cols: string }>(
    `SELECT c.relname AS t, string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attgenerated <> '' THEN ' generated' ELSE '' END, ', ' ORDER BY a.attnum) AS cols
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'queen'
       JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
      WHERE c.relkind IN ('r', 'p') AND c.relname = ANY ($1) GROUP BY c.relname ORDER BY c.relname`,
    [MOVED_TABLES.map((m) => m.table)],
  );
  return rows.map((r) => `${r.t}(${r.cols})`).join('\n');
}

/** Each moved table's columns an INSERT may name (not the generated ones), in MOVED_TABLES' order. */
async function insertableColumns(c: Client): Promise<string[][]> {
  const { rows } = await c.query<{ t: string; names: string[] }>(
    `SELECT c.relname AS t, array_agg(a.attname::text ORDER BY a.attnum) AS names
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'queen'
       JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
      WHERE c.relname = ANY ($1) GROUP BY c.relname`,
    [MOVED_TABLES.map((m) => m.table)],
  );
  const of = new Map(rows.map((r) => [r.t, r.names]));
  return MOVED_TABLES.map((m) => of.get(m.table) ?? []);
}

/** Count and checksum of the tenant's rows of every moved table, in the session's snapshot: the sum of a 60-bit slice of each row text's md5. */
const CHECK = `count(*)::text AS n, coalesce(sum(('x' || left(md5(t::text), 15))::bit(60)::bigint), 0)::text AS sum`;

async function checks(c: Client, tenant: string): Promise<TableCheck[]> {
  const out: TableCheck[] = [];
  for (const { table, scope } of MOVED_TABLES) {
    const { rows } = await c.query<{ n: string; sum: string }>(`SELECT ${CHECK} FROM queen.${table} t WHERE ${scope}`, [tenant]);
    out.push({ table, rows: Number(rows[0].n), checksum: rows[0].sum });
  }
  return out;
}

const same = (a: TableCheck[], b: TableCheck[]) => a.length === b.length && a.every((x, i) => x.table === b[i].table && x.rows === b[i].rows && x.checksum === b[i].checksum);
const differences = (a: TableCheck[], b: TableCheck[]) =>
  a.flatMap((x, i) => (x.rows !== b[i]?.rows || x.checksum !== b[i]?.checksum ? [`${x.table} (${x.rows} rows against ${b[i]?.rows})`] : [])).join(', ');

/** The tenant's rows out of a cell, children first, in the caller's transaction. */
async function removeRows(c: Client, tenant: string): Promise<void> {
  for (const { table, scope } of [...MOVED_TABLES].reverse()) await c.query(`DELETE FROM queen.${table} t WHERE ${scope}`, [tenant]);
}

async function hasRows(c: Client, tenant: string): Promise<boolean> {
  for (const { table, scope } of MOVED_TABLES) {
    const { rows } = await c.query(`SELECT 1 FROM queen.${table} t WHERE ${scope} LIMIT 1`, [tenant]);
    if (rows.length > 0) return true;
  }
  return false;
}

/** A chunk of rows is at most this many, and sized to about CHUNK_BYTES from the rows read so far. */
const CHUNK_ROWS = 10_000;
const CHUNK_BYTES = 8 * 2 ** 20;
/**
 * Past this many rows changed since the pre-copy, the copy under the pause takes everything instead:
 * their hashes travel as one parameter, and a list that long would cost more than a full copy.
 */
const DELTA_ROWS = 100_000;

/**
 * The first column of `query`'s rows, read through a cursor in the caller's transaction a chunk at a
 * time: a tenant's table never becomes one value (PostgreSQL caps a value at 1 GB and V8 a string at
 * about 512 MB), and the rows the move holds are about a chunk whatever the tenant has stored.
 */
async function* chunks(c: Client, query: string, params: unknown[]): AsyncGenerator<Array<{ r: string; h: string }>> {
  await c.query(`DECLARE move_rows NO SCROLL CURSOR FOR ${query}`, params);
  try {
    for (let size = 100; ; ) {
      const { rows } = await c.query<{ r: string; h: string }>(`FETCH ${size} FROM move_rows`);
      if (rows.length > 0) yield rows;
      if (rows.length < size) return;
      const bytes = rows.reduce((sum, row) => sum + row.r.length, 0);
      size = Math.max(1, Math.min(CHUNK_ROWS, Math.floor(CHUNK_BYTES / Math.max(1, bytes / rows.length))));
    }
  } finally {
    // A failed transaction refuses the CLOSE too; its end closes the cursor, and the first error stands.
    await c.query('CLOSE move_rows').catch(() => undefined);
  }
}

/** A table's count and checksum as checks() takes them in SQL: the sum of the first 15 hex digits (60 bits) of each row's md5. */
function tally(table: string, hashes: Iterable<string>): TableCheck {
  let rows = 0;
  let sum = 0n;
  for (const h of hashes) {
    rows++;
    sum += BigInt(`0x${h.slice(0, 15)}`);
  }
  return { table, rows, checksum: sum.toString() };
}

/** Writes row texts (`t::text`) of a moved table; `onConflict` for rows the target may hold already. */
async function insertRows(dst: Client, table: string, cols: string[], rows: string[], onConflict = ''): Promise<void> {
  await dst.query(
    `INSERT INTO queen.${table} (${cols.map((c) => `"${c}"`).join(', ')})
     SELECT ${cols.map((c) => `(s.r)."${c}"`).join(', ')} FROM (SELECT x::queen.${table} AS r FROM unnest($1::text[]) x) s ${onConflict}`,
    [rows],
  );
}

/** The source's KV version, carried so the target's next versions pass every one the tenant has seen. */
async function carryVersion(src: Client, dst: Client): Promise<void> {
  const seq = (await src.query<{ v: string }>('SELECT last_value::text AS v FROM queen.kv_version_seq')).rows[0].v;
  await dst.query(`SELECT setval('queen.kv_version_seq', greatest((SELECT last_value FROM queen.kv_version_seq), $1::bigint))`, [seq]);
}

/**
 * Runs `copy` with the source in one REPEATABLE READ snapshot and the target in one transaction,
 * which commits with the target's move row at 'copied', or rolls back.
 */
async function inSnapshot(src: Client, dst: Client, tenant: string, fromCell: string, copy: () => Promise<TableCheck[]>): Promise<TableCheck[]> {
  await src.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
  try {
    await dst.query('BEGIN');
    try {
      const tables = await copy();
      await carryVersion(src, dst);
      await setMoveRow(dst, tenant, 'target', fromCell, 'copied');
      await dst.query('COMMIT');
      return tables;
    } catch (err) {
      await dst.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  } finally {
    await src.query('COMMIT').catch(() => undefined);
  }
}

/**
 * The tenant's rows from one REPEATABLE READ snapshot of the source, written to the target in one
 * transaction after whatever the target held of the tenant is deleted, a chunk at a time (the next
 * chunk read while this one is written); the snapshot's checks, from the same pass.
 */
async function fullCopy(src: Client, dst: Client, tenant: string, fromCell: string, log: (line: string) => void): Promise<TableCheck[]> {
  const cols = await insertableColumns(src);
  return inSnapshot(src, dst, tenant, fromCell, async () => {
    await removeRows(dst, tenant);
    const tables: TableCheck[] = [];
    for (const [i, { table, scope }] of MOVED_TABLES.entries()) {
      const at = Date.now();
      const hashes: string[] = [];
      let bytes = 0;
      const reader = chunks(src, `SELECT t::text AS r, md5(t::text) AS h FROM queen.${table} t WHERE ${scope}`, [tenant]);
      for (let next = reader.next(); ; ) {
        const chunk = await next;
        if (chunk.done) break;
        next = reader.next();
        // Read while the chunk before it is written: a failed read is answered when it is awaited.
        next.catch(() => undefined);
        for (const row of chunk.value) hashes.push(row.h);
        bytes += chunk.value.reduce((sum, row) => sum + row.r.length, 0);
        await insertRows(dst, table, cols[i], chunk.value.map((row) => row.r));
      }
      tables.push(tally(table, hashes));
      if (bytes > 1e6) log(`  ${table}: ${hashes.length} rows, ${(bytes / 1e6).toFixed(1)} MB in ${Date.now() - at} ms`);
    }
    return tables;
  });
}

/**
 * What changed since a copy the target already holds (the pre-copy), from one REPEATABLE READ
 * snapshot of the source, in one transaction on the target: each row is known by the md5 of its
 * text, both sides hashing at once; a source row the target lacks is fetched and written over its
 * primary key (an update, so no cascade), then every target row the source does not have is
 * deleted, children first (a parent gone from the source took its children with it there). The
 * snapshot's checks, from the hashes. The move holds every row's hash, about 150 bytes a row of the
 * tenant's largest table. Throws on anything unusual (another unique key in the way, more than
 * DELTA_ROWS changed): the caller copies everything instead.
 */
async function deltaCopy(src: Client, dst: Client, tenant: string, fromCell: string): Promise<TableCheck[]> {
  const cols = await insertableColumns(src);
  const keys = await primaryKeys(src);
  return inSnapshot(src, dst, tenant, fromCell, async () => {
    const tables: TableCheck[] = [];
    const extras: string[][] = [];
    for (const [i, { table, scope }] of MOVED_TABLES.entries()) {
      // Both sides hash their rows at once; the difference is taken here.
      const hashOf = async (c: Client) => {
        const out = new Set<string>();
        for await (const chunk of chunks(c, `SELECT md5(t::text) AS r, '' AS h FROM queen.${table} t WHERE ${scope}`, [tenant])) for (const row of chunk) out.add(row.r);
        return out;
      };
      const [here, there] = await Promise.all([hashOf(src), hashOf(dst)]);
      tables.push(tally(table, here));
      const missing = [...here].filter((h) => !there.has(h));
      extras.push([...there].filter((h) => !here.has(h)));
      if (missing.length > DELTA_ROWS || extras[i].length > DELTA_ROWS) throw new MoveError(`${table}: more than ${DELTA_ROWS} rows changed since the pre-copy`);
      if (missing.length === 0) continue;
      const rest = cols[i].filter((c) => !keys[i].includes(c));
      const onConflict = `ON CONFLICT (${keys[i].map((c) => `"${c}"`).join(', ')}) ${rest.length === 0 ? 'DO NOTHING' : `DO UPDATE SET ${rest.map((c) => `"${c}" = EXCLUDED."${c}"`).join(', ')}`}`;
      const changed = `SELECT t::text AS r, '' AS h FROM queen.${table} t WHERE ${scope} AND md5(t::text) IN (SELECT unnest($2::text[]))`;
      for await (const chunk of chunks(src, changed, [tenant, missing])) await insertRows(dst, table, cols[i], chunk.map((row) => row.r), onConflict);
    }
    // The target's rows the source does not have (an overwritten version is already gone).
    for (const [i, { table, scope }] of [...MOVED_TABLES.entries()].reverse()) {
      if (extras[i].length > 0) await dst.query(`DELETE FROM queen.${table} t WHERE ${scope} AND md5(t::text) IN (SELECT unnest($2::text[]))`, [tenant, extras[i]]);
    }
    return tables;
  });
}

/** Each moved table's primary key columns, in MOVED_TABLES' order. */
async function primaryKeys(c: Client): Promise<string[][]> {
  const { rows } = await c.query<{ t: string; names: string[] }>(
    `SELECT c.relname AS t, array_agg(a.attname::text ORDER BY k.n) AS names
       FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'queen'
       CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
       JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
      WHERE i.indisprimary AND c.relname = ANY ($1) GROUP BY c.relname`,
    [MOVED_TABLES.map((m) => m.table)],
  );
  const of = new Map(rows.map((r) => [r.t, r.names]));
  return MOVED_TABLES.map((m) => {
    const names = of.get(m.table);
    if (!names) throw new MoveError(`queen.${m.table} has no primary key; a move needs one on every table it carries`);
    return names;
  });
}

export async function moveTenant(o: MoveOptions): Promise<MoveResult> {
  const tenant = o.tenant.trim().toLowerCase();
  const log = o.log ?? (() => undefined);
  const fenceMs = o.fenceMs ?? DEFAULT_FENCE_MS;
  const drainTimeoutMs = o.drainTimeoutMs ?? DRAIN_TIMEOUT_MS;
  if (o.from.cell === o.to.cell) throw new MoveError('the source and the target are the same cell');
  if (o.routers.length === 0) throw new MoveError('no router to flip: name every router\'s runtime API socket');
  const steps: Record<string, number> = {};
  let t0 = Date.now();
  const lap = (step: string) => {
    const now = Date.now();
    steps[step] = (steps[step] ?? 0) + now - t0;
    t0 = now;
    log(`${step}: ${steps[step]} ms`);
    if (o.stopAfter === step) throw new MoveError(`stopped after ${step}, as asked`);
  };
  const src = await connect(o.from.databaseUrl);
  const dst = await connect(o.to.databaseUrl).catch(async (err) => {
    await src.end();
    throw err;
  });
  try {
    const [srcLayout, dstLayout] = await Promise.all([layout(src), layout(dst)]);
    if (srcLayout !== dstLayout) throw new MoveError('the two cells have different schemas for the moved tables; migrate both to the same release first');
    const placements = await Promise.all(o.routers.map((s) => placementOf(s, o.map, tenant)));
    const flipped = placements.some((p) => p === o.to.cell);
    let srcRow = await moveRow(src, tenant);
    const dstRow = await moveRow(dst, tenant);
    let startedAt: string;
    let tables: TableCheck[] = [];
    let copies = 0;

    if (flipped) {
      // A run stopped at or after the flip: the copy was verified before any router was told.
      if (!srcRow) throw new MoveError(`a router already places ${tenant} on ${o.to.cell} and ${o.from.cell} records no move of it: nothing to finish`);
      if (srcRow.role === 'source' && dstRow?.step !== 'verified') {
        throw new MoveError(`a router places ${tenant} on ${o.to.cell}, but ${o.to.cell} records no verified copy (step ${dstRow?.step ?? 'none'}); put the placement back on ${o.from.cell} and move again`);
      }
      startedAt = srcRow.role === 'moved' ? srcRow.step === 'removed' ? 'done' : 'remove' : 'flip';
    } else {
      if (!placements.every((p) => p === o.from.cell)) {
        throw new MoveError(`the routers place ${tenant} on ${placements.map((p) => p ?? 'no cell').join(', ')}, not on ${o.from.cell}`);
      }
      if ((!dstRow || dstRow.role === 'source') && (await hasRows(dst, tenant))) {
        throw new MoveError(`${o.to.cell} already holds rows of ${tenant} and no move into it is recorded; it is not a move's target`);
      }
      startedAt = srcRow?.role === 'source' ? srcRow.step : 'pause';
      // 0. pre-copy, the tenant still served by the source: the bulk of its rows, so that the copy
      // under the pause carries only what changed since. The target refuses the tenant from here on
      // (nothing routes it there yet).
      await setMoveRow(dst, tenant, 'target', o.from.cell, 'paused', true);
      if (srcRow?.role !== 'source') {
        await fullCopy(src, dst, tenant, o.from.cell, log);
        lap('precopy');
      }
      // 1. pause.
      await setMoveRow(src, tenant, 'source', o.to.cell, srcRow?.role === 'source' ? srcRow.step : 'paused', true);
      lap('pause');

      // 2. fence: every worker has read the pause, and every transaction begun before that has ended.
      const { rows: [p] } = await src.query<{ cut: Date; wait_ms: number }>(
        `SELECT paused_at + $2 * interval '1 millisecond' AS cut, greatest(0, extract(epoch FROM (paused_at + $2 * interval '1 millisecond' - clock_timestamp())) * 1000)::float8 AS wait_ms
           FROM queen.tenant_moves WHERE tenant_id = $1`,
        [tenant, fenceMs],
      );
      await new Promise((r) => setTimeout(r, p.wait_ms));
      const drainBy = Date.now() + drainTimeoutMs;
      for (;;) {
        const { rows: [d] } = await src.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start < $1`,
          [p.cut],
        );
        if (d.n === 0) break;
        if (Date.now() > drainBy) throw new MoveError(`${d.n} transaction(s) on ${o.from.cell} begun before the pause are still open after ${drainTimeoutMs} ms; the tenant stays paused: run the move again, or --abort`);
        await new Promise((r) => setTimeout(r, 20));
      }
      lap('fence');

      for (;;) {
        if (++copies > COPY_ATTEMPTS) throw new MoveError(`${o.from.cell} kept changing under the pause (${COPY_ATTEMPTS} copies); the tenant stays paused: find the writer, then run the move again`);
        // 3. copy: what changed since the pre-copy (or, failing that, everything) from one snapshot.
        tables = await deltaCopy(src, dst, tenant, o.from.cell).catch(async (err) => {
          log(`the copy of what changed failed (${(err as Error).message}); copying everything`);
          return fullCopy(src, dst, tenant, o.from.cell, log);
        });
        lap('copy');

        // 4. verify: the target has what the snapshot had, and the source still has it.
        const [there, here] = await Promise.all([checks(dst, tenant), checks(src, tenant)]);
        if (!same(tables, there)) throw new MoveError(`the copy on ${o.to.cell} differs from ${o.from.cell}'s snapshot: ${differences(tables, there)}; the tenant stays paused`);
        lap('verify');
        if (same(tables, here)) break;
        log(`${o.from.cell} changed after the snapshot (${differences(here, tables)}); copying again`);
      }
      await setMoveRow(dst, tenant, 'target', o.from.cell, 'verified');
      await setMoveRow(src, tenant, 'source', o.to.cell, 'verified');
      srcRow = { role: 'source', peer: o.to.cell, step: 'verified' };
    }

    if (srcRow?.role === 'source') {
      // 5. flip: the file a restart reads first, then every router, each checked.
      if (o.mapFile) rewriteMapFile(o.mapFile, tenant, o.to.cell);
      for (const socket of o.routers) {
        const now = await placementOf(socket, o.map, tenant);
        if (now !== o.to.cell) {
          const answer = await runtime(socket, `${now === undefined ? 'add' : 'set'} map ${o.map} ${tenant} ${o.to.cell}`);
          if ((await placementOf(socket, o.map, tenant)) !== o.to.cell) throw new MoveError(`the router at ${socket} did not take the placement: ${answer.trim()}`);
        }
      }
      lap('flip');
      // 6. resume: the source refuses whatever still reaches it; the target serves.
      await setMoveRow(src, tenant, 'moved', o.to.cell, 'flipped');
      await dst.query('DELETE FROM queen.tenant_moves WHERE tenant_id = $1', [tenant]);
      lap('resume');
    } else if (dstRow) {
      // Stopped between the source's 'moved' and the target's resume.
      await dst.query(`DELETE FROM queen.tenant_moves WHERE tenant_id = $1 AND role = 'target'`, [tenant]);
    }

    // 7. remove the source's copy, which no router sends anyone to.
    if (startedAt !== 'done') {
      await src.query('BEGIN');
      try {
        await removeRows(src, tenant);
        await setMoveRow(src, tenant, 'moved', o.to.cell, 'removed');
        await src.query('COMMIT');
      } catch (err) {
        await src.query('ROLLBACK').catch(() => undefined);
        throw err;
      }
      lap('remove');
    }
    return { startedAt, tables, steps, copies };
  } finally {
    await Promise.all([src.end().catch(() => undefined), dst.end().catch(() => undefined)]);
  }
}

/**
 * Gives up a move that has not flipped: the target's copy and both rows go, and the tenant is served
 * by its source again. A move past the flip is finished instead (run it again).
 */
export async function abortMove(o: MoveOptions): Promise<void> {
  const tenant = o.tenant.trim().toLowerCase();
  const placements = await Promise.all(o.routers.map((s) => placementOf(s, o.map, tenant)));
  if (placements.some((p) => p === o.to.cell)) throw new MoveError(`a router already places ${tenant} on ${o.to.cell}: the move is past its flip; run it again to finish it`);
  const src = await connect(o.from.databaseUrl);
  const dst = await connect(o.to.databaseUrl).catch(async (err) => {
    await src.end();
    throw err;
  });
  try {
    const dstRow = await moveRow(dst, tenant);
    if (dstRow?.role === 'target') {
      await dst.query('BEGIN');
      await removeRows(dst, tenant);
      await dst.query('DELETE FROM queen.tenant_moves WHERE tenant_id = $1', [tenant]);
      await dst.query('COMMIT');
    }
    await src.query(`DELETE FROM queen.tenant_moves WHERE tenant_id = $1 AND role = 'source'`, [tenant]);
  } finally {
    await Promise.all([src.end().catch(() => undefined), dst.end().catch(() => undefined)]);
  }
}
