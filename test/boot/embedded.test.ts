// The embedded PostgreSQL behind `npm start`: its data survives a restart, a stale lock is cleared
// with a log line, and a port or data folder already in use is a sentence, not a hang.
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { freePort, startEmbeddedPostgres, EmbeddedPostgresError } from '../../shared/embeddedPostgres';
import { waitFor } from '../support/wait';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-embedded-test-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

async function query(url: string, sql: string) {
  const c = new Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(sql)).rows;
  } finally {
    await c.end();
  }
}

test('a second start reuses the data folder and finds what the first one wrote', async () => {
  const dataDir = path.join(dir, 'reuse');
  const first = await startEmbeddedPostgres({ dataDir, port: await freePort() });
  await query(first.url, 'CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)');
  await first.stop();
  const second = await startEmbeddedPostgres({ dataDir, port: await freePort(), throwaway: true });
  try {
    expect(await query(second.url, 'SELECT v FROM kept')).toEqual([{ v: 42 }]);
  } finally {
    await second.stop();
  }
});

test('a throwaway server leaves nothing behind, wherever it kept its data (as root: a copy under the temp folder)', async () => {
  const pg = await startEmbeddedPostgres({ dataDir: path.join(dir, 'throwaway'), port: await freePort(), throwaway: true });
  expect(fs.existsSync(path.join(pg.dataDir, 'PG_VERSION'))).toBe(true);
  await pg.stop();
  expect(fs.existsSync(pg.dataDir)).toBe(false);
  if (pg.dataDir !== path.join(dir, 'throwaway')) expect(fs.existsSync(path.dirname(pg.dataDir))).toBe(false);
});

test('a stale postmaster.pid left by a dead server is removed and the start goes on', async () => {
  const dataDir = path.join(dir, 'stale');
  const pg = await startEmbeddedPostgres({ dataDir, port: await freePort() });
  await pg.stop();
  const actual = pg.dataDir;
  // A pid that cannot be alive: beyond the kernel's pid_max.
  fs.writeFileSync(path.join(actual, 'postmaster.pid'), '999999999\n' + actual + '\n');
  const warnings: string[] = [];
  const log = { warn: (_o: unknown, m: string) => warnings.push(m), info: () => undefined, debug: () => undefined } as any;
  const again = await startEmbeddedPostgres({ dataDir, port: await freePort(), log, throwaway: true });
  try {
    expect(warnings.some((w) => /stale postmaster.pid/.test(w))).toBe(true);
    expect(await query(again.url, 'SELECT 1 AS one')).toEqual([{ one: 1 }]);
  } finally {
    await again.stop();
  }
});

test('a data folder held by a running server is refused with a sentence', async () => {
  const dataDir = path.join(dir, 'busy');
  const pg = await startEmbeddedPostgres({ dataDir, port: await freePort(), throwaway: true });
  try {
    await expect(startEmbeddedPostgres({ dataDir, port: await freePort() })).rejects.toThrow(/in use by a running PostgreSQL/);
  } finally {
    await pg.stop();
  }
});

test('a port already in use is refused with a sentence that names it', async () => {
  const port = await freePort();
  const blocker = net.createServer();
  await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve));
  try {
    const err = await startEmbeddedPostgres({ dataDir: path.join(dir, 'port'), port }).catch((e) => e);
    expect(err).toBeInstanceOf(EmbeddedPostgresError);
    expect(err.message).toContain(`Port ${port}`);
    expect(err.message).toContain('QUEEN_EMBEDDED_PG_PORT');
  } finally {
    blocker.close();
  }
});

test('the server output the starter relays (debug lines, the last output when it dies) carries no statement error, DETAIL, HINT or statement', async () => {
  const marker = 'relay-value-marker-93c2';
  const relayed: string[] = [];
  const log = { warn: () => undefined, info: () => undefined, debug: (o: { postgres?: string }) => relayed.push(String(o.postgres)) } as any;
  let died: { output: string } | undefined;
  const pg = await startEmbeddedPostgres({
    dataDir: path.join(dir, 'relay'),
    port: await freePort(),
    log,
    throwaway: true,
    onUnexpectedExit: (exit) => (died = exit),
  });
  try {
    const c = new Client({ connectionString: pg.url });
    c.on('error', () => undefined);
    await c.connect();
    // What PostgreSQL logs at its defaults: an error quoting its input, and a raised error whose
    // DETAIL and HINT carry a value (as a lost KV precondition's HINT did), each with its statement.
    await c.query(`SELECT '${marker}'::int`).catch(() => undefined);
    await c.query(`DO $$ BEGIN RAISE EXCEPTION 'lost' USING DETAIL = '${marker}', HINT = '${marker}'; END $$`).catch(() => undefined);
    await c.query(`DO $$ BEGIN RAISE WARNING 'relay-sentinel'; END $$`);
    await waitFor(() => relayed.join('\n').includes('relay-sentinel'), { what: 'the WARNING line relayed', timeoutMs: 10_000, everyMs: 25 });
    const postmaster = Number(fs.readFileSync(path.join(pg.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    process.kill(postmaster, 'SIGKILL');
    await waitFor(() => died !== undefined, { what: 'onUnexpectedExit called', timeoutMs: 10_000, everyMs: 25 });
    await c.end().catch(() => undefined);
    expect(relayed.join('\n')).not.toContain(marker);
    expect(died!.output).not.toContain(marker);
    // The server's own lines still come through, and what was withheld is counted.
    expect(died!.output).toContain('relay-sentinel');
    expect(died!.output).toMatch(/\d+ lines of statement errors and their detail withheld/);
  } finally {
    await pg.stop();
  }
});
